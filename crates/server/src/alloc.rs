//! Controls of the allocator (jemalloc) that its safe wrapper does not offer.
//!
//! The unsafe calls of the server crate live here, each behind a safe function.

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

/// `stats.arenas.<MALLCTL_ARENAS_ALL>.tcache_bytes`: what sits in every thread's cache.
const ARENAS_ALL_TCACHE_BYTES: &[u8] = b"stats.arenas.4096.tcache_bytes\0";

/// Bytes the program holds, as of jemalloc's last epoch (`epoch::advance` first): its
/// `stats.allocated` less the freed blocks its thread caches keep for reuse, which
/// `stats.allocated` counts as allocated. Those caches fill and drain with each thread's
/// traffic, by hundreds of KiB on an idle server, so `stats.allocated` alone is not what the
/// data holds; this figure, like Redis's `zmalloc_used_memory`, is. 0 where jemalloc is not
/// the allocator (unit tests).
pub fn allocated_live() -> u64 {
    let allocated = tikv_jemalloc_ctl::stats::allocated::read().unwrap_or(0) as u64;
    // SAFETY: "stats.arenas.<i>.tcache_bytes" is a read-only control of type size_t, which
    // `raw::read::<usize>` reads into a `usize` it owns; the name is a static NUL-terminated
    // string. Where the control does not exist (jemalloc without stats, or not the
    // allocator), mallctl fails and nothing is read.
    #[allow(unsafe_code)]
    let cached = unsafe { tikv_jemalloc_ctl::raw::read::<usize>(ARENAS_ALL_TCACHE_BYTES) };
    allocated.saturating_sub(cached.map_or(0, |c| c as u64))
}
