import { describe, expect, it } from 'vitest';
import { currentCursor, firstPage, hasNewer, hasOlder, newer, offsetInfo, older, withNext } from '../../src/lib/paging';

describe('cursor paging', () => {
  it('walks older and back newer with the cursors that fetched each page', () => {
    let p = firstPage();
    expect(currentCursor(p)).toBeNull();
    expect(hasNewer(p)).toBe(false);
    p = withNext(p, 'c1');
    expect(hasOlder(p)).toBe(true);
    p = older(p);
    expect(currentCursor(p)).toBe('c1');
    expect(hasOlder(p)).toBe(false); // not known until the page says
    p = withNext(p, 'c2');
    p = older(p);
    expect(currentCursor(p)).toBe('c2');
    expect(p.index).toBe(2);
    p = withNext(p, null);
    expect(hasOlder(p)).toBe(false);
    expect(older(p)).toBe(p);
    p = newer(p);
    expect(currentCursor(p)).toBe('c1');
    p = newer(p);
    expect(currentCursor(p)).toBeNull();
    expect(newer(p)).toBe(p);
  });

  it('forgets the pages after the one shown when going older again', () => {
    let p = older(withNext(firstPage(), 'a'));
    p = older(withNext(p, 'b'));
    p = newer(p);
    p = older(withNext(p, 'b2'));
    expect(p.cursors).toEqual([null, 'a', 'b2']);
  });
});

describe('offset paging', () => {
  const check = (args: [number, number, number, number], want: Partial<ReturnType<typeof offsetInfo>>) =>
    expect(offsetInfo(...args)).toMatchObject(want);

  it('says what is shown and where the neighbours start', () => {
    check([0, 0, 25, 0], { first: 0, last: 0, page: 1, pages: 1, prevOffset: null, nextOffset: null });
    check([60, 0, 25, 25], { first: 1, last: 25, page: 1, pages: 3, prevOffset: null, nextOffset: 25 });
    check([60, 25, 25, 25], { first: 26, last: 50, page: 2, prevOffset: 0, nextOffset: 50 });
    check([60, 50, 25, 10], { first: 51, last: 60, page: 3, pages: 3, prevOffset: 25, nextOffset: null });
    check([60, 10, 25, 25], { prevOffset: 0 });
  });
});
