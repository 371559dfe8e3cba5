// The French messages, one chunk of the build, loaded when the UI first needs them.
export default import.meta.glob<Record<string, string>>('../../locales/fr/*.json', { eager: true, import: 'default' });
