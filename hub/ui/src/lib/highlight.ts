// Splits a log line into plain and highlighted parts, for filter test results: the address the
// filter found is marked wherever it appears in the line on its own.

export interface Segment {
  text: string;
  mark: boolean;
}

/** Characters that continue an address: "1.2.3.4" inside "11.2.3.45" is not a match. */
const continues = (c: string | undefined) => c !== undefined && /[0-9A-Za-z:]/.test(c);

export function highlight(line: string, needle: string): Segment[] {
  if (!needle) return line ? [{ text: line, mark: false }] : [];
  const out: Segment[] = [];
  let emitted = 0;
  let search = 0;
  for (;;) {
    const at = line.indexOf(needle, search);
    if (at < 0) break;
    const end = at + needle.length;
    search = at + 1;
    if (continues(line[at - 1]) || continues(line[end])) continue;
    if (at > emitted) out.push({ text: line.slice(emitted, at), mark: false });
    out.push({ text: needle, mark: true });
    emitted = end;
    search = end;
  }
  if (emitted < line.length) out.push({ text: line.slice(emitted), mark: false });
  return out;
}
