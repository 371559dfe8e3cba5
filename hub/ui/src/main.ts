import './app.css';
import { mount } from 'svelte';
import App from './App.svelte';
import { loadLocale, locale } from './lib/i18n.svelte';
import { applyTheme, storedTheme } from './lib/theme';

// Before the first paint, so a dark-theme user never sees a light flash.
applyTheme(storedTheme());

const target = document.getElementById('app');
if (!target) throw new Error('index.html has no #app element');
// The chosen language's messages before the first render, so nobody sees English first.
await loadLocale(locale());
export default mount(App, { target });
