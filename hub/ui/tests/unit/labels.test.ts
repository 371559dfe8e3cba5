import { describe, expect, it } from 'vitest';
import { formatLabels, parseLabels } from '../../src/lib/labels';

describe('labels', () => {
  it('read key=value pairs and print them back', () => {
    expect(parseLabels('role=web, dc = a')).toEqual({ role: 'web', dc: 'a' });
    expect(parseLabels('')).toEqual({});
    expect(formatLabels({ role: 'web', dc: 'a' })).toBe('role=web, dc=a');
  });

  it('refuse a pair without a key', () => {
    expect(parseLabels('role')).toBeNull();
    expect(parseLabels('=web')).toBeNull();
  });
});
