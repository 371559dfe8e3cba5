// The UI's messages and the locale they are shown in. Messages live in `src/locales/<locale>/<area>.json`
// (flat keys); `t('area.key', { n: 3 })` looks one up in the current locale, then in English.

export const LOCALES = ['en'] as const;
export type Locale = (typeof LOCALES)[number];

const FALLBACK: Locale = 'en';
const STORAGE_KEY = 'banhub.locale';

type Catalog = Record<string, string>;

const files = import.meta.glob<Catalog>('../locales/*/*.json', { eager: true, import: 'default' });

/** Every locale's messages, keyed `area.key`. */
export const catalogs: Record<string, Catalog> = {};
for (const [path, messages] of Object.entries(files)) {
  const match = /locales\/([^/]+)\/([^/]+)\.json$/.exec(path);
  if (!match) continue;
  const [, locale, area] = match;
  const catalog = (catalogs[locale] ??= {});
  for (const [key, text] of Object.entries(messages)) catalog[`${area}.${key}`] = text;
}

function isLocale(value: string | null | undefined): value is Locale {
  return !!value && (LOCALES as readonly string[]).includes(value);
}

/** The stored choice, else the browser's first language banhub has, else English. */
function initialLocale(): Locale {
  const stored = globalThis.localStorage?.getItem(STORAGE_KEY);
  if (isLocale(stored)) return stored;
  for (const tag of globalThis.navigator?.languages ?? []) {
    if (isLocale(tag)) return tag;
    const base = tag.split('-')[0];
    if (isLocale(base)) return base;
  }
  return FALLBACK;
}

const state = $state({ locale: initialLocale() });

export function locale(): Locale {
  return state.locale;
}

/** Switches the UI's language and remembers the choice in this browser. */
export function setLocale(next: Locale): void {
  state.locale = next;
  globalThis.localStorage?.setItem(STORAGE_KEY, next);
  globalThis.document?.documentElement.setAttribute('lang', next);
}

/** The message `key` in the current locale with `{name}` placeholders filled; the key itself if none has it. */
export function t(key: string, params?: Record<string, string | number>): string {
  const text = catalogs[state.locale]?.[key] ?? catalogs[FALLBACK]?.[key] ?? key;
  if (!params) return text;
  return text.replace(/\{(\w+)\}/g, (whole, name: string) =>
    name in params ? String(params[name]) : whole,
  );
}
