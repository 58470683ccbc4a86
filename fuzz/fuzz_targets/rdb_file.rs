//! The RDB file reader (`meridian_rdb::file::FileReader`, DEBUG RELOAD NOSAVE and
//! `meridian import-rdb`) never panics, never decodes past its limits, and each key it yields
//! is a DUMP payload RESTORE accepts: `FileReader::payload` decodes to the same value.
//!
//! An input whose first byte is odd is taken as a whole file; one whose first byte is even is
//! the records of a version 10 file, which this target gives a header and a valid checksum
//! first, so the fuzzer explores the records rather than the checksum.
//!
//! Run: `cargo +nightly fuzz run rdb_file fuzz/seeds/rdb_file` from the repository root (the
//! seed is a Redis 7.0.15 dump.rdb of every type, with TTLs, two databases and a function
//! library).
#![no_main]

use libfuzzer_sys::fuzz_target;
use meridian_rdb::file::{FileReader, Record};
use meridian_rdb::{CRC64, Crc, Limits, decode_payload};

const LIMITS: Limits = Limits {
    string_bytes_max: 1 << 20,
    value_bytes_max: 1 << 22,
};

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let file = if mode % 2 == 1 {
        rest.to_vec()
    } else {
        let mut f = b"REDIS0010".to_vec();
        f.extend_from_slice(rest);
        f.push(0xff);
        let crc = CRC64.checksum(&f);
        f.extend_from_slice(&crc.to_le_bytes());
        f
    };
    let Ok(mut reader) = FileReader::new(&file, LIMITS, Crc::Verify) else {
        return;
    };
    // Every record consumes at least one byte: the loop ends.
    for _ in 0..=file.len() {
        match reader.next_record() {
            Ok(Some(Record::Key(k))) => {
                let back = decode_payload(&reader.payload(&k), LIMITS)
                    .expect("a key's value read from a file is a payload RESTORE accepts");
                assert_eq!(back.value, k.value);
            }
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => return,
        }
    }
    panic!("more records than bytes");
});
