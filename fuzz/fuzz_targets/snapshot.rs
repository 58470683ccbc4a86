//! The snapshot loader never panics on arbitrary bytes, never allocates more than the input
//! justifies, and yields keys only from blocks whose checksums hold.
//!
//! Run: `cargo +nightly fuzz run snapshot` from the repository root.
#![no_main]

use libfuzzer_sys::fuzz_target;
use meridian_server::persist::snapshot;

fuzz_target!(|data: &[u8]| {
    let mut keys = 0u64;
    let _ = snapshot::read_from(data, 16, |db, _key, _state| {
        assert!(db < 16);
        keys += 1;
        Ok(())
    });
});
