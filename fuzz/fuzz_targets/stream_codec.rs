//! The stream type's decoders (one op, one state) never panic on arbitrary bytes, and what
//! they accept is usable: an op applies to an empty and to a decoded state, a state encodes,
//! joins with itself and with the op's result, collects and shows its entries and groups.
//!
//! Run: `cargo +nightly fuzz run stream_codec` from the repository root.
#![no_main]

use libfuzzer_sys::fuzz_target;
use meridian_crdt::codec::Reader;
use meridian_crdt::stream::codec::decode_op;
use meridian_crdt::{Hlc, ReplicaId, Stamp, StreamCrdt, StreamId};

fn show(s: &StreamCrdt) {
    let mut n = 0usize;
    for e in s.range(StreamId::MIN, StreamId::MAX) {
        n += e.fields().count();
    }
    let _ = (n, s.len(), s.last_id(), s.entries_added(), s.max_deleted());
    for g in s.groups() {
        let _ = (g.last_id(), g.entries_read(), g.pending_count(), g.consumers().len());
    }
}

fuzz_target!(|data: &[u8]| {
    // The first byte splits the input: an op, then a state.
    let Some((&cut, rest)) = data.split_first() else {
        return;
    };
    let cut = usize::from(cut).min(rest.len());
    let (op_bytes, state_bytes) = rest.split_at(cut);
    let stamp = Stamp {
        hlc: Hlc(1 << 20),
        replica: ReplicaId(7),
    };
    let op = decode_op(&mut Reader::new(op_bytes)).ok();
    let state = StreamCrdt::decode_state(&mut Reader::new(state_bytes)).ok();
    let mut fresh = StreamCrdt::default();
    if let Some(op) = &op {
        fresh.apply(stamp, op);
        show(&fresh);
    }
    if let Some(mut s) = state {
        let mut out = Vec::new();
        s.encode_state(&mut out);
        let mut twice = s.clone();
        twice.merge(&s);
        twice.merge(&fresh);
        show(&twice);
        if let Some(op) = &op {
            s.apply(stamp, op);
        }
        s.collect(None);
        show(&s);
    }
});
