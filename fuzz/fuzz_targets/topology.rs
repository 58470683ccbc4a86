//! A site's topology file never panics the loader, and what it accepts is usable: any text
//! either becomes a checked `Topology` or a named `TopologyError`; an accepted one answers
//! every lookup a node makes of it (each node's view, every shard's node, endpoint and sync
//! address, the cluster map), its slot map names a shard it has for every slot, and its slot
//! map's text form reads back as the same map.
//!
//! Run: `cargo +nightly fuzz run topology` from the repository root.
#![no_main]

use libfuzzer_sys::fuzz_target;
use meridian_server::slot::{SLOTS, SlotMap};
use meridian_server::topology::{SiteNodes, Topology};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(t) = Topology::parse(text) else {
        return;
    };
    let shards = t.shards();
    for slot in 0..SLOTS as u16 {
        assert!(t.slots.shard_of_slot(slot) < shards);
    }
    assert_eq!(SlotMap::from_text(&t.slots.to_text()).as_ref(), Ok(&t.slots));
    for s in 0..shards {
        assert!(t.node_of(s).is_some());
        let _ = t.endpoint_addr(s);
    }
    let _ = t.cluster_map("d", "s");
    let _ = t.check_successor(&t);
    for n in &t.nodes {
        let site = SiteNodes::new(t.clone(), &n.name).expect("a listed node");
        let _ = site.local();
        let _ = site.other_nodes();
        for s in 0..shards {
            let _ = site.endpoint(s);
            let _ = site.sync_addr(s);
        }
    }
});
