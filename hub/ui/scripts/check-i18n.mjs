#!/usr/bin/env node
// The translation check CI runs (from check-dist.sh): every locale has exactly English's keys with the
// same `{placeholders}` (a regional locale such as `de-CH` may leave keys to its parent), and no
// `.svelte` file shows a hard-coded string: text with letters outside `{…}`, or a literal in an
// attribute a person reads (`title`, `placeholder`, `aria-label`, `alt`, and the components' own
// text props). A few strings that are the same in every language are allowed below.
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(fileURLToPath(import.meta.url), '..', '..');
const src = join(root, 'src');

/** Text that reads the same in every language: the product's name, fail2ban's setting names, an example host and jail name, the version mark "v", symbols and units. */
export const ALLOWED_TEXT = new Set(['banhub', 'fail2ban', 'web-1', 'sshd', 'failregex', 'ignoreregex', 'datepattern', 'maxretry', 'findtime', 'bantime', 'v', 'IP', 'ms', 'JSON', 'CIDR', 'ASN', 'TOML']);

/** Attribute values that are samples of configuration, addresses or paths, the same in every language. */
export const CODE_SAMPLES = new Set([
  '[{jail}]&#10;maxretry = 5',
  '[Definition]&#10;failregex = …',
  'banhub <banhub@example.org>',
  'ops@example.org',
  '/var/lib/GeoIP/GeoLite2-Country.mmdb',
  '2026-11-22 23:42:38 Failed login for root from 203.0.113.7',
  'env=prod, role=web',
  'env=prod',
  'env=prod role=web',
  'role=web',
  'role=web, dc=a',
  'jail.d/sshd.local',
  '/var/log/auth.log',
  '_SYSTEMD_UNIT=sshd.service + _COMM=sshd',
  'ssh',
  'sshd, nginx-http-auth',
  'CN, RU',
  'https://…',
]);

/** Attributes and component props whose literal value a person reads or hears. */
export const READ_ATTRIBUTES = new Set([
  'title',
  'placeholder',
  'aria-label',
  'alt',
  'label',
  'what',
  'question',
  'confirmlabel',
  'hint',
]);


const LETTER = /\p{L}/u;

function files(dir, ext) {
  const out = [];
  for (const name of readdirSync(dir)) {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) out.push(...files(path, ext));
    else if (name.endsWith(ext)) out.push(path);
  }
  return out.sort();
}

// ---- (a) catalogs ----

/** `{ locale: { 'area.key': text } }` from `src/locales/<locale>/<area>.json`. */
export function loadCatalogs(dir = join(src, 'locales')) {
  const catalogs = {};
  for (const locale of readdirSync(dir).sort()) {
    const catalog = (catalogs[locale] = {});
    for (const file of files(join(dir, locale), '.json')) {
      const area = relative(join(dir, locale), file).replace(/\.json$/, '');
      const messages = JSON.parse(readFileSync(file, 'utf8'));
      for (const [key, text] of Object.entries(messages)) catalog[`${area}.${key}`] = text;
    }
  }
  return catalogs;
}

const placeholders = (text) => [...String(text).matchAll(/\{(\w+)\}/g)].map((m) => m[1]).sort().join(',');

/** Problems with the catalogs, one sentence each. */
export function checkCatalogs(catalogs) {
  const problems = [];
  const en = catalogs.en ?? {};
  for (const [locale, catalog] of Object.entries(catalogs)) {
    if (locale === 'en') continue;
    const regional = locale.includes('-');
    for (const [key, text] of Object.entries(en)) {
      if (!(key in catalog)) {
        if (!regional) problems.push(`${locale}: missing ${key}`);
        continue;
      }
      if (placeholders(catalog[key]) !== placeholders(text))
        problems.push(`${locale}: ${key} has placeholders {${placeholders(catalog[key])}}, English has {${placeholders(text)}}`);
    }
    for (const key of Object.keys(catalog))
      if (!(key in en)) problems.push(`${locale}: ${key} is not in English`);
    for (const [key, text] of Object.entries(catalog))
      if (typeof text !== 'string' || text.trim() === '') problems.push(`${locale}: ${key} is empty`);
  }
  return problems;
}

// ---- (b) hard-coded strings in components ----

/** Skips a JS expression from `{` at `i`; returns the index after its `}`. */
function skipBraces(text, i) {
  let depth = 0;
  for (; i < text.length; i++) {
    const c = text[i];
    if (c === '"' || c === "'" || c === '`') {
      const quote = c;
      for (i++; i < text.length && text[i] !== quote; i++) {
        if (text[i] === '\\') i++;
        else if (quote === '`' && text[i] === '$' && text[i + 1] === '{') i = skipBraces(text, i + 1) - 1;
      }
    } else if (c === '{') depth++;
    else if (c === '}' && --depth === 0) return i + 1;
  }
  return i;
}

/** The literal parts of an attribute value (outside `{…}`). */
function literalParts(value) {
  let out = '';
  for (let i = 0; i < value.length; ) {
    if (value[i] === '{') i = skipBraces(value, i);
    else out += value[i++];
  }
  return out;
}

function readsAsText(text) {
  const bare = text.replace(/&[a-z]+;|&#\d+;/g, ' ').trim();
  return LETTER.test(bare) && !ALLOWED_TEXT.has(bare);
}

/** Hard-coded strings in one component's markup: `[{ line, text }]`. */
export function hardCodedStrings(source) {
  // Blank out scripts, styles and comments, keeping line numbers.
  const blank = (m) => m.replace(/[^\n]/g, ' ');
  const text = source
    .replace(/<script[\s\S]*?<\/script>/g, blank)
    .replace(/<style[\s\S]*?<\/style>/g, blank)
    .replace(/<!--[\s\S]*?-->/g, blank);
  const found = [];
  const lineAt = (i) => text.slice(0, i).split('\n').length;
  let i = 0;
  let run = '';
  let runStart = 0;
  const flush = () => {
    if (readsAsText(run)) found.push({ line: lineAt(runStart), text: run.trim() });
    run = '';
  };
  // Inside <pre>/<code> samples text is code, not prose.
  let codeDepth = 0;
  while (i < text.length) {
    const c = text[i];
    if (c === '{') {
      flush();
      i = skipBraces(text, i);
    } else if (c === '<') {
      flush();
      const tag = /^<\/?([A-Za-z][\w.:-]*)/.exec(text.slice(i));
      const closing = text[i + 1] === '/';
      i += tag ? tag[0].length : 1;
      // Attributes up to the tag's `>`.
      while (i < text.length && text[i] !== '>') {
        const attr = /^\s*([\w:@|.-]+)(\s*=\s*)?/.exec(text.slice(i));
        if (!attr || attr[0].length === 0) {
          if (text[i] === '{') i = skipBraces(text, i);
          else i++;
          continue;
        }
        i += attr[0].length;
        if (!attr[2]) continue;
        let value = '';
        const start = i;
        if (text[i] === '"' || text[i] === "'") {
          const quote = text[i++];
          while (i < text.length && text[i] !== quote) {
            if (text[i] === '{') {
              const end = skipBraces(text, i);
              value += text.slice(i, end);
              i = end;
            } else value += text[i++];
          }
          i++;
        } else if (text[i] === '{') {
          i = skipBraces(text, i);
          continue;
        } else {
          const bare = /^[^\s>]+/.exec(text.slice(i));
          value = bare ? bare[0] : '';
          i += value.length;
        }
        if (READ_ATTRIBUTES.has(attr[1].toLowerCase()) && !CODE_SAMPLES.has(value) && readsAsText(literalParts(value)))
          found.push({ line: lineAt(start), text: `${attr[1]}="${value}"` });
      }
      i++;
      if (tag && /^(pre|code|kbd|samp)$/.test(tag[1]) && text[i - 2] !== '/') codeDepth += closing ? -1 : 1;
      runStart = i;
    } else {
      if (!run) runStart = i;
      if (codeDepth <= 0) run += c;
      i++;
    }
  }
  flush();
  return found;
}

function main() {
  const problems = checkCatalogs(loadCatalogs());
  for (const file of files(src, '.svelte')) {
    const name = relative(root, file);
    for (const { line, text } of hardCodedStrings(readFileSync(file, 'utf8')))
      problems.push(`${name}:${line}: hard-coded text "${text}"; put it in src/locales and use t()`);
  }
  for (const problem of problems) console.error(`check-i18n: ${problem}`);
  if (problems.length) {
    console.error(`check-i18n: ${problems.length} problem(s)`);
    process.exitCode = 1;
    return;
  }
  console.log('check-i18n: every locale has every key and no component holds a hard-coded string');
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) main();
