//! The shard's `life` file (`persist::life`): any bytes a disk could hold there are refused
//! or parsed, never a panic, and what parses writes back to the same record.
//!
//! Run: `cargo +nightly fuzz run life_file` from the repository root.
#![no_main]

use libfuzzer_sys::fuzz_target;
use meridian_server::persist::life;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(rec) = life::parse(text) {
        // Ids with inner whitespace or line breaks do not survive a round trip; the server
        // writes only kernel boot ids (UUIDs) and drill ids.
        if !rec.boot_id.chars().any(char::is_whitespace) {
            assert_eq!(life::parse(&life::format(&rec)), Ok(rec));
        }
    }
});
