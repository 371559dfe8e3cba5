// t(): lookup along the fallback chain, placeholders, plurals; the locale a browser opens in; the
// formatters in several locales; and the translation check's rules on catalogs and markup.
import { afterEach, describe, expect, it } from 'vitest';
import { catalogs, fallbackChain, initialLocale, LOCALES, locale, matchLocale, setLocale, t, tSplit } from '../../src/lib/i18n.svelte';
import { ago, count, dateTime, duration } from '../../src/lib/format';
// @ts-expect-error: a plain ES module without types
import { checkCatalogs, hardCodedStrings, loadCatalogs } from '../../scripts/check-i18n.mjs';

afterEach(() => setLocale('en'));

describe('t', () => {
  it('looks a key up in the current locale and fills placeholders', async () => {
    expect(t('nav.logout')).toBe('Log out');
    await setLocale('de');
    expect(locale()).toBe('de');
    expect(t('nav.logout')).toBe('Abmelden');
    expect(t('nav.themeIs', { theme: 'hell' })).toBe('Design: hell');
  });

  it('falls back by prefix, then to English, then to the key', async () => {
    expect(fallbackChain('de-CH')).toEqual(['de-CH', 'de', 'en']);
    expect(fallbackChain('en')).toEqual(['en']);
    await setLocale('de-CH');
    // Swiss German writes "ss" for "ß"; other keys come from German.
    expect(t('common.close')).toBe('Schliessen');
    expect(t('nav.logout')).toBe('Abmelden');
    catalogs.en['test.onlyEnglish'] = 'English only';
    expect(t('test.onlyEnglish')).toBe('English only');
    delete catalogs.en['test.onlyEnglish'];
    expect(t('test.nowhere')).toBe('test.nowhere');
  });

  it('chooses the plural form of the locale and writes the count in its digits', async () => {
    expect(t('components.unchangedLines', { count: 1 })).toBe('1 unchanged line');
    expect(t('components.unchangedLines', { count: 1200 })).toBe('1,200 unchanged lines');
    await setLocale('de');
    expect(t('components.unchangedLines', { count: 1 })).toBe('1 unveränderte Zeile');
    expect(t('components.unchangedLines', { count: 1200 })).toBe('1.200 unveränderte Zeilen');
    await setLocale('fr');
    expect(t('components.unchangedLines', { count: 0 })).toBe('0 ligne inchangée');
  });

  it('cuts a message at a placeholder for markup around the value', async () => {
    expect(tSplit('fleetBan.unbannedEverywhere', 'ip')).toEqual(['Unbanned ', ' everywhere:']);
    await setLocale('de');
    expect(tSplit('fleetBan.unbannedEverywhere', 'ip')).toEqual(['', ' überall entsperrt:']);
    expect(tSplit('nav.logout', 'ip')).toEqual(['Abmelden', '']);
  });

  it('switches at once to a locale whose messages are loaded', () => {
    void setLocale('it');
    expect(t('nav.logout')).toBe('Esci');
  });

  it('leaves a placeholder without a param as it is', async () => {
    expect(t('nav.themeIs')).toBe('Theme: {theme}');
  });
});

describe('initialLocale', () => {
  it('takes the stored choice, else the first browser language banhub has, else English', async () => {
    expect(initialLocale('ja', ['fr'])).toBe('ja');
    expect(initialLocale(null, ['fr-FR', 'de'])).toBe('fr');
    expect(initialLocale(null, ['de-ch'])).toBe('de-CH');
    expect(initialLocale(null, ['de-AT'])).toBe('de');
    expect(initialLocale(null, ['zh-Hans-CN'])).toBe('zh');
    expect(initialLocale(null, ['ca-ES', 'es'])).toBe('ca');
    expect(initialLocale('xx', ['pt-BR', 'nl'])).toBe('en');
    expect(matchLocale('EN-gb')).toBe('en');
    expect(matchLocale('pt')).toBeUndefined();
  });
});

describe('formatters', () => {
  const at = '2026-11-22T23:42:38Z';
  const now = Date.parse(at);

  it('writes counts with the locale grouping', async () => {
    expect(count(12345)).toBe('12,345');
    await setLocale('de');
    expect(count(12345)).toBe('12.345');
    expect(count(null)).toBe('—');
  });

  it('writes dates as the locale does', async () => {
    const en = dateTime(at);
    await setLocale('de');
    const de = dateTime(at);
    await setLocale('ja');
    const ja = dateTime(at);
    expect(en).toMatch(/2026/);
    expect(de).toMatch(/\d{2}\.\d{2}\.2026/);
    expect(ja).toMatch(/^2026\/11\/2[23]/);
    expect(dateTime(null)).toBe('—');
  });

  it('writes relative times with Intl.RelativeTimeFormat', async () => {
    expect(ago(at, now + 3 * 60_000)).toBe(new Intl.RelativeTimeFormat('en', { style: 'short' }).format(-3, 'minute'));
    await setLocale('de');
    expect(ago(at, now + 2 * 3600_000)).toBe(new Intl.RelativeTimeFormat('de', { style: 'short' }).format(-2, 'hour'));
    expect(ago(null)).toBe('nie');
  });

  it('writes ban lengths in the locale units', async () => {
    expect(duration(90061)).toBe('1 d 1 h 1 min');
    await setLocale('ja');
    expect(duration(5400)).toBe('1 時間 30 分');
    expect(duration(-1)).toBe('無期限');
  });
});

describe('check-i18n', () => {
  it('finds missing, extra and mismatched keys, and lets a regional locale leave keys to its parent', async () => {
    const problems = checkCatalogs({
      en: { 'a.x': 'X {n}', 'a.y': 'Y' },
      de: { 'a.x': 'X {m}', 'a.z': 'Z' },
      'de-CH': { 'a.y': 'Y' },
    });
    expect(problems).toEqual([
      'de: a.x has placeholders {m}, English has {n}',
      'de: missing a.y',
      'de: a.z is not in English',
    ]);
  });

  it('passes the catalogs banhub ships, and the UI loads every one of them', async () => {
    expect(checkCatalogs(loadCatalogs())).toEqual([]);
    for (const loc of LOCALES) await setLocale(loc);
    expect(Object.keys(catalogs).sort()).toEqual([...LOCALES].sort());
    for (const loc of LOCALES) expect(Object.keys(catalogs[loc]).length).toBeGreaterThan(0);
  });

  it('finds text and read attributes outside t(), and ignores expressions, code and scripts', async () => {
    const found = hardCodedStrings(
      [
        '<script>const a = "Hello";</script>',
        '<h1>Servers</h1>',
        '<p>{t("x")} · {n > 1 ? "s" : ""}</p>',
        '<input placeholder="host name" title={t("y")} />',
        '<button aria-label="Close {name}">×</button>',
        '<pre>fail2ban-client status</pre>',
        '<span>banhub</span>',
        '<Loading what="Loading servers" />',
      ].join('\n'),
    );
    expect(found.map((f: { text: string }) => f.text)).toEqual([
      'Servers',
      'placeholder="host name"',
      'aria-label="Close {name}"',
      'what="Loading servers"',
    ]);
  });
});
