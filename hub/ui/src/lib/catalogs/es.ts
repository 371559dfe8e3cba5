// The Spanish messages, one chunk of the build, loaded when the UI first needs them.
export default import.meta.glob<Record<string, string>>('../../locales/es/*.json', { eager: true, import: 'default' });
