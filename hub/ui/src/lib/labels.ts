// Labels as operators type them ("role=web, dc=a") and back.

/** `key=value` pairs separated by commas; `null` when one has no `=`. */
export function parseLabels(text: string): Record<string, string> | null {
  const labels: Record<string, string> = {};
  for (const part of text.split(',').map((p) => p.trim()).filter(Boolean)) {
    const at = part.indexOf('=');
    if (at <= 0) return null;
    labels[part.slice(0, at).trim()] = part.slice(at + 1).trim();
  }
  return labels;
}

export function formatLabels(labels: Record<string, string>): string {
  return Object.entries(labels)
    .map(([k, v]) => `${k}=${v}`)
    .join(', ');
}
