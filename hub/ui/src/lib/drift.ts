// What fail2ban runs beside what the files say: the rows of the jail page's comparison and the
// one-line summary of the jail list.

import type { SettingDrift } from './api/types';
import { t } from './i18n.svelte';

export interface RunningRow {
  setting: string;
  running: string;
  // The files' value when it differs; undefined when fail2ban runs what the files say.
  files?: string;
}

const shown = (value: string) => value || t('jails.noValue');

// One row per running setting, in the agent's order, with the files' value where it differs.
export function runningRows(running: Record<string, string>, drift: SettingDrift[]): RunningRow[] {
  const differs = new Map(drift.map((d) => [d.setting, d.fileValue]));
  return Object.entries(running).map(([setting, value]) => {
    const files = differs.get(setting);
    return files === undefined ? { setting, running: shown(value) } : { setting, running: shown(value), files: shown(files) };
  });
}

// `maxretry: files 5, running 99` per differing setting, one per line.
export function driftText(drift: SettingDrift[]): string {
  return drift
    .map((d) => t('jails.driftLine', { setting: d.setting, files: shown(d.fileValue), running: shown(d.runningValue) }))
    .join('\n');
}
