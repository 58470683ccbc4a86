//! The data directory's `slot-map` file never panics the loader: any text either becomes a
//! `SlotMap` that gives every slot one of its shards, and whose text form reads back as the
//! same map, or a named `SlotMapError`.
//!
//! Run: `cargo +nightly fuzz run slot_map` from the repository root.
#![no_main]

use libfuzzer_sys::fuzz_target;
use meridian_server::slot::{SLOTS, SlotMap};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(map) = SlotMap::from_text(text) else {
        return;
    };
    for slot in 0..SLOTS as u16 {
        assert!(map.shard_of_slot(slot) < map.shards());
    }
    for s in 0..map.shards() {
        let _ = map.ranges_of(s);
    }
    assert_eq!(SlotMap::from_text(&map.to_text()).as_ref(), Ok(&map));
});
