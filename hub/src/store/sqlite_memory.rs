//! SQLite's own allocations go to mimalloc, the hub's allocator, instead of glibc's `malloc`, and
//! without SQLite's memory statistics.
//!
//! Every bound value, record and statement journal page is a `malloc`, and with statistics on each
//! allocation also takes a global mutex and asks for the block's size. The hub reads no SQLite
//! memory statistics, so they go.
//!
//! This is the one module of the hub with `unsafe` code: SQLite is configured through its C API
//! (`sqlite3_config`), and the allocator it is handed is a table of C functions.

#![allow(unsafe_code)]

use std::ffi::{c_int, c_void};
use std::sync::OnceLock;

use libsqlite3_sys as ffi;

/// Whether SQLite took the settings: they must be made before SQLite's first use in the process.
static INSTALLED: OnceLock<bool> = OnceLock::new();

/// Hands SQLite mimalloc and turns its memory statistics off, once per process, before the first
/// connection. Returns whether SQLite runs with them; `false` if something in this process used
/// SQLite before (it keeps its default allocator then, which is slower but just as correct).
pub(super) fn install() -> bool {
    *INSTALLED.get_or_init(|| {
        let methods = ffi::sqlite3_mem_methods {
            xMalloc: Some(malloc),
            xFree: Some(free),
            xRealloc: Some(realloc),
            xSize: Some(size),
            xRoundup: Some(roundup),
            xInit: Some(init),
            xShutdown: Some(shutdown),
            pAppData: std::ptr::null_mut(),
        };
        // SAFETY: `sqlite3_config` is called before SQLite is initialised or refuses with
        // SQLITE_MISUSE; it copies the table before returning, and the functions in it follow
        // SQLite's contract for an allocator (see each one).
        let allocator =
            unsafe { ffi::sqlite3_config(ffi::SQLITE_CONFIG_MALLOC, &raw const methods) };
        // SAFETY: as above; the option takes one int.
        let statistics =
            unsafe { ffi::sqlite3_config(ffi::SQLITE_CONFIG_MEMSTATUS, c_int::from(false)) };
        let ok = allocator == ffi::SQLITE_OK && statistics == ffi::SQLITE_OK;
        if !ok {
            tracing::debug!(
                allocator,
                statistics,
                "SQLite was used before the store configured it; it keeps its default allocator"
            );
        }
        ok
    })
}

/// SQLite never asks for a negative or zero size; a request that is one anyway gets null, which
/// SQLite reports as out of memory.
fn to_size(n: c_int) -> Option<usize> {
    usize::try_from(n).ok().filter(|&n| n > 0)
}

unsafe extern "C" fn malloc(n: c_int) -> *mut c_void {
    match to_size(n) {
        // SAFETY: mimalloc's malloc has no preconditions.
        Some(n) => unsafe { libmimalloc_sys::mi_malloc(n) },
        None => std::ptr::null_mut(),
    }
}

unsafe extern "C" fn free(p: *mut c_void) {
    // SAFETY: SQLite frees only what `malloc` or `realloc` above returned (or null, which
    // mimalloc ignores).
    unsafe { libmimalloc_sys::mi_free(p) }
}

unsafe extern "C" fn realloc(p: *mut c_void, n: c_int) -> *mut c_void {
    match to_size(n) {
        // SAFETY: `p` came from `malloc` or `realloc` above.
        Some(n) => unsafe { libmimalloc_sys::mi_realloc(p, n) },
        None => std::ptr::null_mut(),
    }
}

unsafe extern "C" fn size(p: *mut c_void) -> c_int {
    if p.is_null() {
        return 0;
    }
    // SAFETY: `p` came from `malloc` or `realloc` above. A block is never larger than the
    // `c_int` SQLite asked for, rounded up by mimalloc to at most its next size class.
    let usable = unsafe { libmimalloc_sys::mi_usable_size(p) };
    c_int::try_from(usable).unwrap_or(c_int::MAX)
}

/// SQLite's rule: a multiple of 8, at least the request.
unsafe extern "C" fn roundup(n: c_int) -> c_int {
    n.checked_add(7).map_or(n, |m| m & !7)
}

unsafe extern "C" fn init(_: *mut c_void) -> c_int {
    ffi::SQLITE_OK
}

unsafe extern "C" fn shutdown(_: *mut c_void) {}

#[cfg(test)]
mod tests {
    use super::*;

    // Each test runs in its own process under nextest (the project's test runner), so SQLite is
    // not yet initialised here.
    #[test]
    fn sqlite_allocates_from_mimalloc_without_statistics() {
        assert!(install(), "SQLite refused the allocator");
        // SAFETY: plain calls into SQLite's allocator API with its own pointers.
        unsafe {
            let p = ffi::sqlite3_malloc(1000);
            assert!(!p.is_null());
            assert!(
                libmimalloc_sys::mi_is_in_heap_region(p),
                "SQLite's block is not mimalloc's"
            );
            assert!(ffi::sqlite3_msize(p) >= 1000);
            let q = ffi::sqlite3_realloc(p, 5000);
            assert!(libmimalloc_sys::mi_is_in_heap_region(q));
            assert!(ffi::sqlite3_msize(q) >= 5000);
            // With statistics off SQLite counts nothing.
            assert_eq!(ffi::sqlite3_memory_used(), 0);
            ffi::sqlite3_free(q);
        }
    }

    #[test]
    fn sizes_round_up_to_eight() {
        for (n, expected) in [(1, 8), (8, 8), (9, 16), (1000, 1000), (1001, 1008)] {
            // SAFETY: a pure function.
            assert_eq!(unsafe { roundup(n) }, expected, "{n}");
        }
        assert_eq!(to_size(0), None);
        assert_eq!(to_size(-1), None);
    }
}
