// Every locale's messages loaded before the unit tests run, so a test can switch languages with a
// plain `setLocale(...)` the way a page does after the first load.
import { LOCALES, loadLocale } from '../../src/lib/i18n.svelte';

for (const loc of LOCALES) await loadLocale(loc);
