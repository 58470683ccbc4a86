//! Controls of the allocator (jemalloc) that its safe wrapper does not offer.
//!
//! The one unsafe call of the server crate lives here, behind a safe function.

/// `MALLCTL_ARENAS_ALL`: the pseudo-index naming every arena.
const ARENAS_ALL_PURGE: &[u8] = b"arena.4096.purge\0";

/// Purges the dirty pages of every jemalloc arena (MEMORY PURGE, Redis's `jemalloc_purge`).
/// Returns whether jemalloc accepted the request; false when jemalloc is not the allocator
/// in use (unit tests) or refused it.
pub fn purge() -> bool {
    // Refresh the statistics first, as Redis does, so a later INFO shows the purge.
    let _ = tikv_jemalloc_ctl::epoch::advance();
    // SAFETY: `mallctl` with a NUL-terminated control name and no old or new value is how
    // jemalloc's "arena.<i>.purge" is invoked (it accepts neither a value nor a result);
    // jemalloc reads only the name, which is a static string.
    #[allow(unsafe_code)]
    let rc = unsafe {
        tikv_jemalloc_sys::mallctl(
            ARENAS_ALL_PURGE.as_ptr().cast(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            0,
        )
    };
    rc == 0
}
