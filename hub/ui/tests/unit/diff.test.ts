import { describe, expect, it } from 'vitest';
import { diffLines, diffStats, foldContext, hasChanges } from '../../src/lib/diff';

const ops = (a: string, b: string) => diffLines(a, b).map((d) => `${d.op === 'same' ? ' ' : d.op === 'add' ? '+' : '-'}${d.text}`);

describe('diffLines', () => {
  it('shows a changed value as a removal and an addition in place', () => {
    expect(ops('[sshd]\nmaxretry = 3\nbantime = 600\n', '[sshd]\nmaxretry = 5\nbantime = 600\n')).toEqual([
      ' [sshd]',
      '-maxretry = 3',
      '+maxretry = 5',
      ' bantime = 600',
    ]);
  });

  it('handles a new file and an emptied file', () => {
    expect(ops('', '[sshd]\nenabled = true')).toEqual(['+[sshd]', '+enabled = true']);
    expect(ops('[sshd]\n', '')).toEqual(['-[sshd]']);
    expect(hasChanges(diffLines('', ''))).toBe(false);
  });

  it('treats CRLF like LF and a final newline as no line', () => {
    expect(hasChanges(diffLines('a\r\nb\r\n', 'a\nb'))).toBe(false);
  });

  it('numbers lines on both sides', () => {
    const d = diffLines('a\nb\nc', 'a\nx\nb\nc');
    expect(d).toEqual([
      { op: 'same', text: 'a', oldLine: 1, newLine: 1 },
      { op: 'add', text: 'x', newLine: 2 },
      { op: 'same', text: 'b', oldLine: 2, newLine: 3 },
      { op: 'same', text: 'c', oldLine: 3, newLine: 4 },
    ]);
    expect(diffStats(d)).toEqual({ added: 1, removed: 0 });
  });

  it('finds the longest common part in the middle', () => {
    expect(ops('a\nb\nc\nd', 'b\nc\ne')).toEqual(['-a', ' b', ' c', '-d', '+e']);
  });

  it('is fast enough for a large file with one change', () => {
    const big = Array.from({ length: 3000 }, (_, i) => `key${i} = ${i}`).join('\n');
    const changed = big.replace('key1500 = 1500', 'key1500 = 0');
    expect(diffStats(diffLines(big, changed))).toEqual({ added: 1, removed: 1 });
  });
});

describe('foldContext', () => {
  it('folds long unchanged runs and keeps context around changes', () => {
    const before = Array.from({ length: 20 }, (_, i) => `l${i}`).join('\n');
    const after = before.replace('l10', 'L10');
    const folded = foldContext(diffLines(before, after), 2);
    expect(folded[0]).toEqual({ folded: 8 });
    expect(folded.filter((r) => !('folded' in r))).toHaveLength(6);
    expect(folded[folded.length - 1]).toEqual({ folded: 7 });
  });
});
