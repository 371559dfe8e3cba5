import { describe, expect, it } from 'vitest';
import { driftText, runningRows } from '../../src/lib/drift';

describe('runningRows', () => {
  it('marks only the settings that differ, and shows empty values as none', () => {
    const rows = runningRows(
      { actions: 'banhub', ignorecommand: '', maxretry: '3' },
      [{ setting: 'actions', fileValue: 'filelog', runningValue: 'banhub' }],
    );
    expect(rows).toEqual([
      { setting: 'actions', running: 'banhub', files: 'filelog' },
      { setting: 'ignorecommand', running: '(none)' },
      { setting: 'maxretry', running: '3' },
    ]);
  });
});

describe('driftText', () => {
  it('lists each difference on its own line', () => {
    expect(
      driftText([
        { setting: 'maxretry', fileValue: '5', runningValue: '99' },
        { setting: 'ignorecommand', fileValue: '', runningValue: '/bin/true' },
      ]),
    ).toBe('maxretry: files 5, running 99\nignorecommand: files (none), running /bin/true');
  });
});
