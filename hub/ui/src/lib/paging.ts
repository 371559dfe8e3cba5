// Paging state. Events page with opaque cursors (newest first, "older" follows `nextCursor`), so
// going back means remembering the cursors that led here. Banned lists page by offset.

/** Cursor paging: `cursors[i]` is the cursor that fetched page i (null for the first). */
export interface CursorPages {
  cursors: (string | null)[];
  /** The page shown, 0-based. */
  index: number;
  /** The `nextCursor` of the page shown; null on the last page. */
  next: string | null;
}

export function firstPage(): CursorPages {
  return { cursors: [null], index: 0, next: null };
}

/** The cursor to fetch the page shown with. */
export function currentCursor(p: CursorPages): string | null {
  return p.cursors[p.index] ?? null;
}

/** Records what the page shown said comes next. */
export function withNext(p: CursorPages, next: string | null | undefined): CursorPages {
  return { ...p, next: next ?? null };
}

export function hasOlder(p: CursorPages): boolean {
  return p.next !== null;
}

export function hasNewer(p: CursorPages): boolean {
  return p.index > 0;
}

/** One page older; unchanged on the last page. */
export function older(p: CursorPages): CursorPages {
  if (p.next === null) return p;
  const cursors = p.cursors.slice(0, p.index + 1);
  cursors.push(p.next);
  return { cursors, index: p.index + 1, next: null };
}

/** One page newer; unchanged on the first page. */
export function newer(p: CursorPages): CursorPages {
  if (p.index === 0) return p;
  return { cursors: p.cursors.slice(0, p.index), index: p.index - 1, next: null };
}

/** Offset paging: what the controls show and allow. */
export interface OffsetInfo {
  /** 1-based number of the first and last item shown; 0 and 0 when there are none. */
  first: number;
  last: number;
  total: number;
  page: number;
  pages: number;
  prevOffset: number | null;
  nextOffset: number | null;
}

export function offsetInfo(total: number, offset: number, limit: number, shown: number): OffsetInfo {
  const size = Math.max(1, limit);
  const pages = Math.max(1, Math.ceil(total / size));
  const page = Math.min(pages, Math.floor(offset / size) + 1);
  const first = shown > 0 ? offset + 1 : 0;
  const last = shown > 0 ? offset + shown : 0;
  return {
    first,
    last,
    total,
    page,
    pages,
    prevOffset: offset > 0 ? Math.max(0, offset - size) : null,
    nextOffset: offset + size < total ? offset + size : null,
  };
}
