//! The on-disk log's record walk and every payload decoder never panic on arbitrary bytes,
//! and a walk classifies every input as clean, torn or corrupt.
//!
//! Run: `cargo +nightly fuzz run log_records` from the repository root.
#![no_main]

use libfuzzer_sys::fuzz_target;
use meridian_server::persist::record::{self, Kind, ScanEnd, SegmentHeader};

fuzz_target!(|data: &[u8]| {
    let _ = SegmentHeader::decode(data);
    // A string edit (APPEND, SETRANGE, SETBIT...) as the op log and the sync stream carry it
    // (`oplog::decode` reaches it too, behind a record header).
    let _ = meridian_crdt::string::decode_edit(&mut meridian_crdt::codec::Reader::new(data));
    let mut n = 0usize;
    let walked = record::scan::<()>(data, |f| {
        n += 1;
        match f.kind {
            Kind::Op => {
                let _ = meridian_server::oplog::decode(f.payload);
            }
            Kind::State => {
                if let Ok(p) = record::decode_state(f.payload) {
                    let mut r = meridian_crdt::codec::Reader::new(p.state);
                    let _ = meridian_crdt::KeyState::decode_state(&mut r);
                }
            }
            Kind::Merge => {
                if let Ok(p) = record::decode_merge(f.payload) {
                    let mut r = meridian_crdt::codec::Reader::new(p.state);
                    let _ = meridian_crdt::KeyState::decode_state(&mut r);
                }
            }
            Kind::Position => {
                let _ = record::decode_position(f.payload);
            }
            Kind::Incarnation => {
                let _ = record::decode_incarnation(f.payload);
            }
            Kind::ClockLease => {
                let _ = record::decode_clock_lease(f.payload);
            }
            Kind::Delivered => {
                let _ = record::decode_delivered(f.payload);
            }
            Kind::Library => {
                let _ = record::decode_library(f.payload);
            }
            Kind::Evicted => {
                let _ = record::decode_evicted(f.payload);
            }
            Kind::RetiredIn => {
                let _ = record::decode_retired_in(f.payload);
            }
        }
        Ok(())
    });
    if let Ok((end, count)) = walked {
        assert_eq!(count, n);
        if let ScanEnd::Torn { offset, .. } | ScanEnd::Corrupt { offset, .. } = end {
            assert!(offset < data.len());
        }
    }
});
