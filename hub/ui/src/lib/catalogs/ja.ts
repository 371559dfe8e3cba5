// The Japanese messages, one chunk of the build, loaded when the UI first needs them.
export default import.meta.glob<Record<string, string>>('../../locales/ja/*.json', { eager: true, import: 'default' });
