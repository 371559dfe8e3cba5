// A line diff for the configuration editor: what will change, shown before saving.

export interface DiffLine {
  op: 'same' | 'add' | 'remove';
  text: string;
  /** 1-based line numbers in the old and new text (absent on the side the line is not in). */
  oldLine?: number;
  newLine?: number;
}

function lines(text: string): string[] {
  if (text === '') return [];
  const parts = text.replace(/\r\n/g, '\n').split('\n');
  // A final newline ends the last line; it does not start another.
  if (parts[parts.length - 1] === '') parts.pop();
  return parts;
}

/**
 * The shortest edit script between two texts, line by line (longest common subsequence). Config
 * files are at most 64 KiB, and the common prefix and suffix are taken off first, so the quadratic
 * table only covers the changed middle.
 */
export function diffLines(before: string, after: string): DiffLine[] {
  const a = lines(before);
  const b = lines(after);
  let head = 0;
  while (head < a.length && head < b.length && a[head] === b[head]) head++;
  let tail = 0;
  while (tail < a.length - head && tail < b.length - head && a[a.length - 1 - tail] === b[b.length - 1 - tail]) tail++;
  const am = a.slice(head, a.length - tail);
  const bm = b.slice(head, b.length - tail);
  const n = am.length;
  const m = bm.length;
  // lcs[i][j]: length of the LCS of am[i..] and bm[j..].
  const lcs: Uint32Array[] = Array.from({ length: n + 1 }, () => new Uint32Array(m + 1));
  for (let i = n - 1; i >= 0; i--) {
    for (let j = m - 1; j >= 0; j--) {
      lcs[i][j] = am[i] === bm[j] ? lcs[i + 1][j + 1] + 1 : Math.max(lcs[i + 1][j], lcs[i][j + 1]);
    }
  }
  const out: DiffLine[] = [];
  let oldNo = 1;
  let newNo = 1;
  for (let k = 0; k < head; k++) out.push({ op: 'same', text: a[k], oldLine: oldNo++, newLine: newNo++ });
  let i = 0;
  let j = 0;
  while (i < n || j < m) {
    if (i < n && j < m && am[i] === bm[j]) {
      out.push({ op: 'same', text: am[i], oldLine: oldNo++, newLine: newNo++ });
      i++;
      j++;
    } else if (i < n && (j >= m || lcs[i + 1][j] >= lcs[i][j + 1])) {
      // Removals before additions, so a changed line reads "- old" then "+ new".
      out.push({ op: 'remove', text: am[i], oldLine: oldNo++ });
      i++;
    } else {
      out.push({ op: 'add', text: bm[j], newLine: newNo++ });
      j++;
    }
  }
  for (let k = a.length - tail; k < a.length; k++) out.push({ op: 'same', text: a[k], oldLine: oldNo++, newLine: newNo++ });
  return out;
}

/** Whether anything changed. */
export function hasChanges(diff: readonly DiffLine[]): boolean {
  return diff.some((d) => d.op !== 'same');
}

/** Counts of added and removed lines. */
export function diffStats(diff: readonly DiffLine[]): { added: number; removed: number } {
  let added = 0;
  let removed = 0;
  for (const d of diff) {
    if (d.op === 'add') added++;
    else if (d.op === 'remove') removed++;
  }
  return { added, removed };
}

/**
 * The diff with unchanged runs longer than `2 * context` folded into one marker, as in a unified
 * diff; `null` entries stand for folded lines.
 */
export function foldContext(diff: readonly DiffLine[], context = 3): (DiffLine | { folded: number })[] {
  const keep = new Array<boolean>(diff.length).fill(false);
  diff.forEach((d, i) => {
    if (d.op === 'same') return;
    for (let k = Math.max(0, i - context); k <= Math.min(diff.length - 1, i + context); k++) keep[k] = true;
  });
  const out: (DiffLine | { folded: number })[] = [];
  let folded = 0;
  diff.forEach((d, i) => {
    if (keep[i]) {
      if (folded > 0) out.push({ folded });
      folded = 0;
      out.push(d);
    } else {
      folded++;
    }
  });
  if (folded > 0) out.push({ folded });
  return out;
}
