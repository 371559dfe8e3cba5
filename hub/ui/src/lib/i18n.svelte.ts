// The UI's messages and the locale they are shown in. Messages live in `src/locales/<locale>/<area>.json`
// (flat keys); `t('area.key', { name: 'web-1' })` looks one up in the current locale, then along its
// fallback chain by prefix (`de-CH` → `de` → `en`), and fills `{name}` placeholders; numbers among the
// params are written in the locale's digits and separators.
//
// Plurals: when the params hold a numeric `count`, `t('jails.banned', { count: 3 })` first looks up
// `jails.banned_<category>` (the `Intl.PluralRules` category of 3 in the locale: `one`, `few`, `many`,
// `other`…), then `jails.banned_other`, then `jails.banned`. Catalogs write `_one` and `_other` for every
// plural key (the same text twice in languages without plurals) and may add a language's own categories.
//
// The locale is reactive state: a component that calls `t()` re-renders when `setLocale` switches it.
// English is in the main bundle; every other locale is a chunk of its own (`src/lib/catalogs/`) that
// `loadLocale` fetches, with its fallback chain, before the UI shows it.

/** Every locale the UI speaks, each named in its own language for the switcher. */
export const LOCALE_NAMES = {
  en: 'English',
  de: 'Deutsch',
  'de-CH': 'Deutsch (Schweiz)',
  fr: 'Français',
  es: 'Español',
  it: 'Italiano',
  ja: '日本語',
  zh: '中文',
  ca: 'Català',
} as const;
export type Locale = keyof typeof LOCALE_NAMES;
export const LOCALES = Object.keys(LOCALE_NAMES) as Locale[];

const FALLBACK: Locale = 'en';
const STORAGE_KEY = 'banhub.locale';

type Catalog = Record<string, string>;

/** The loaded locales' messages, keyed `area.key`. */
export const catalogs: Record<string, Catalog> = {};

/** Adds a locale's area files (path → messages) to `catalogs`. */
function addFiles(files: Record<string, Catalog>): void {
  for (const [path, messages] of Object.entries(files)) {
    const match = /locales\/([^/]+)\/([^/]+)\.json$/.exec(path);
    if (!match) continue;
    const [, loc, area] = match;
    const catalog = (catalogs[loc] ??= {});
    for (const [key, text] of Object.entries(messages)) catalog[`${area}.${key}`] = text;
  }
}

addFiles(import.meta.glob<Catalog>('../locales/en/*.json', { eager: true, import: 'default' }));

// The other locales' chunks, by the file name of their loader (`./catalogs/de-CH.ts`).
const loaders = import.meta.glob<Record<string, Catalog>>('./catalogs/*.ts', { import: 'default' });

/** Fetches the messages of `loc` and of its fallback chain, once each. */
export async function loadLocale(loc: string): Promise<void> {
  await Promise.all(
    fallbackChain(loc)
      .filter((l) => !catalogs[l])
      .map(async (l) => {
        const load = loaders[`./catalogs/${l}.ts`];
        if (load) addFiles(await load());
      }),
  );
}

/** `zh-Hans-CN` → `['zh-Hans-CN', 'zh-Hans', 'zh']`. */
function prefixes(tag: string): string[] {
  const parts = tag.split('-');
  return parts.map((_, i) => parts.slice(0, parts.length - i).join('-'));
}

/** `de-CH` → `['de-CH', 'de', 'en']`: the locale, each shorter prefix, then English. */
export function fallbackChain(loc: string): string[] {
  const chain = prefixes(loc);
  if (!chain.includes(FALLBACK)) chain.push(FALLBACK);
  return chain;
}

/** The locale banhub has for a BCP 47 tag, matched without regard to case, by prefix; none if none. */
export function matchLocale(tag: string | null | undefined): Locale | undefined {
  if (!tag) return undefined;
  for (const candidate of prefixes(tag.toLowerCase())) {
    const found = LOCALES.find((l) => l.toLowerCase() === candidate);
    if (found) return found;
  }
  return undefined;
}

/** The stored choice, else the browser's first language banhub has, else English. */
export function initialLocale(
  stored = globalThis.localStorage?.getItem(STORAGE_KEY),
  languages: readonly string[] = globalThis.navigator?.languages ?? [],
): Locale {
  const chosen = LOCALES.find((l) => l === stored);
  if (chosen) return chosen;
  for (const tag of languages) {
    const found = matchLocale(tag);
    if (found) return found;
  }
  return FALLBACK;
}

const state = $state({ locale: initialLocale() });
globalThis.document?.documentElement.setAttribute('lang', state.locale);

export function locale(): Locale {
  return state.locale;
}

/** Switches the UI's language once its messages are loaded (at once when they already are), and
 * remembers the choice in this browser. */
export function setLocale(next: Locale): Promise<void> {
  const show = () => {
    state.locale = next;
    globalThis.localStorage?.setItem(STORAGE_KEY, next);
    globalThis.document?.documentElement.setAttribute('lang', next);
  };
  if (fallbackChain(next).every((l) => catalogs[l] || !loaders[`./catalogs/${l}.ts`])) {
    show();
    return Promise.resolve();
  }
  return loadLocale(next).then(show);
}

const numberFormats = new Map<string, Intl.NumberFormat>();
const pluralRules = new Map<string, Intl.PluralRules>();

function numberFormat(loc: string): Intl.NumberFormat {
  let f = numberFormats.get(loc);
  if (!f) numberFormats.set(loc, (f = new Intl.NumberFormat(loc)));
  return f;
}

function lookup(key: string, loc: string): string | undefined {
  for (const l of fallbackChain(loc)) {
    const text = catalogs[l]?.[key];
    if (text !== undefined) return text;
  }
  return undefined;
}

/** Whether some locale on the current locale's fallback chain has the message `key`. */
export function hasMessage(key: string): boolean {
  return lookup(key, state.locale) !== undefined;
}

/** The message `key` in the current locale with `{name}` placeholders filled (a missing value as
 * nothing); the key itself if no locale has it. */
export function t(key: string, params?: Record<string, string | number | null | undefined>): string {
  const loc = state.locale;
  let text: string | undefined;
  const count = params?.count;
  if (typeof count === 'number') {
    let rules = pluralRules.get(loc);
    if (!rules) pluralRules.set(loc, (rules = new Intl.PluralRules(loc)));
    text = lookup(`${key}_${rules.select(count)}`, loc) ?? lookup(`${key}_other`, loc);
  }
  text ??= lookup(key, loc) ?? key;
  if (!params) return text;
  return text.replace(/\{(\w+)\}/g, (whole, name: string) => {
    if (!(name in params)) return whole;
    const value = params[name];
    return typeof value === 'number' ? numberFormat(loc).format(value) : (value ?? '');
  });
}

/** The message `key` cut at its `{slot}` placeholder, for markup around a value in the middle of a
 * sentence (`<code>` around an address): `['Unbanned ', ' everywhere:']`. */
export function tSplit(key: string, slot: string, params?: Record<string, string | number | null | undefined>): [string, string] {
  const marker = '\u0000';
  const text = t(key, { ...params, [slot]: marker });
  const at = text.indexOf(marker);
  return at < 0 ? [text, ''] : [text.slice(0, at), text.slice(at + marker.length)];
}
