// Short names for the API's schemas. Everything here comes from schema.d.ts, which is generated from
// the hub's OpenAPI document (`npm run api`), so a change in the API shows up as a type error here.
import type { components } from './schema';

type S = components['schemas'];

export type Server = S['ServerDto'];
export type ServerStatus = S['StatusDto'];
export type CreatedServer = S['CreatedServer'];
export type Enrollment = S['EnrollmentDto'];
export type TestResult = S['TestResult'];
export type CallbackSecret = S['CallbackSecretDto'];
export type IssuedSecret = S['IssuedSecretDto'];
export type Summary = S['Summary'];
export type JailCounters = S['JailCounters'];
export type JailList = S['JailList'];
export type JailSummary = S['JailSummary'];
export type JailConfig = S['JailConfig'];
export type SettingDrift = S['SettingDrift'];
export type ConfigFile = S['ConfigFile'];
export type ConfigChange = S['ConfigChange'];
export type WriteConfig = S['WriteConfig'];
export type BanOutcome = S['BanOutcome'];
export type BannedPage = S['BannedPage'];
export type BannedIp = S['BannedIp'];
export type FilterList = S['FilterListDto'];
export type FilterTestResult = S['FilterTestResult'];
export type MatchedLine = S['MatchedLine'];
export type Event = S['EventDto'];
export type EventPage = S['EventPageDto'];
export type EventKind = S['KindDto'];
export type EventSource = S['SourceDto'];
export type Stats = S['StatsDto'];
export type SeriesPoint = S['SeriesPointDto'];
export type Insights = S['InsightsDto'];
export type IpSummary = S['IpDto'];
export type JailCounts = S['JailCountsDto'];
export type ServerCounts = S['ServerCountsDto'];
export type RestartResult = S['RestartResult'];
export type Problem = S['Problem'];
export type TestEmailBody = S['TestEmailBody'];
export type TestEmailResult = S['TestEmailResult'];
export type SharingPolicy = S['PolicyDto'];
export type SharingPolicyBody = S['PolicyBody'];
export type SharedBan = S['SharedBanDto'];
export type AddressView = S['AddressDto'];
