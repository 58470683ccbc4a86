//! Keyed hashing for the collections' internal tables (set members, hash fields, zset
//! members): clients choose those bytes, so the hash must resist HashDoS (`ahash` with a
//! secret key).
//!
//! The crate takes no randomness itself: the host process supplies the key once at start-up
//! with `init`. Until then (unit tests), a fixed key is used. Replicas with different keys hold
//! the same CRDT states; only internal iteration order differs, and no equality depends on it.

use std::sync::OnceLock;

static STATE: OnceLock<ahash::RandomState> = OnceLock::new();

/// The key used when `init` was never called (tests and tools).
const FALLBACK_SEEDS: [u64; 4] = [
    0x6d65_7269_6469_616e,
    0x2d63_7264_742d_6861,
    0x7368_2d6b_6579_2d30,
    0x0123_4567_89ab_cdef,
];

/// Sets the secret key for every table of this process. Only the first call takes effect
/// (tables built before it must not see another key); returns whether this call set it.
pub fn init(seeds: [u64; 4]) -> bool {
    let [a, b, c, d] = seeds;
    STATE
        .set(ahash::RandomState::with_seeds(a, b, c, d))
        .is_ok()
}

fn state() -> &'static ahash::RandomState {
    STATE.get_or_init(|| {
        let [a, b, c, d] = FALLBACK_SEEDS;
        ahash::RandomState::with_seeds(a, b, c, d)
    })
}

/// The keyed hash of `bytes`.
pub fn hash_bytes(bytes: &[u8]) -> u64 {
    state().hash_one(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_bytes_hash_equal() {
        assert_eq!(hash_bytes(b"member"), hash_bytes(b"member"));
        assert_ne!(hash_bytes(b"member"), hash_bytes(b"member2"));
    }
}
