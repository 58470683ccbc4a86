//! Everything a peer can send before and after the handshake never panics the decoders: the
//! frame layer (kind, codec, decompression with its size limit), every message, an `Ops`
//! or `OpsSparse` batch (header and every record, validated whole) and a full-sync chunk (key
//! states, keys the sender evicted, libraries).
//! Decoded messages re-encode to bytes that decode to the same message.
//!
//! Run: `cargo +nightly fuzz run sync_frames` from the repository root.
#![no_main]

use libfuzzer_sys::fuzz_target;
use meridian_server::sync::apply::{decode_batch, decode_chunk, decode_sparse, encode_chunk};
use meridian_syncer::frame::{self, Kind};
use meridian_syncer::msg::{
    self, Ack, FullSyncBegin, FullSyncEnd, Hello, OpsHeader, SparseHeader, Welcome,
};

/// Decompressed-size limit for the frame layer (the server's default is larger; a smaller
/// one keeps the fuzzer fast and still exercises the check).
const FRAME_MAX: usize = 1 << 20;

fn body(kind: Kind, body: &[u8]) {
    match kind {
        Kind::Hello => {
            if let Ok(h) = Hello::decode(body) {
                assert_eq!(Hello::decode(&h.encode()).ok(), Some(h));
            }
        }
        Kind::Welcome => {
            if let Ok(w) = Welcome::decode(body) {
                assert_eq!(Welcome::decode(&w.encode()).ok(), Some(w));
            }
        }
        Kind::Ack => {
            if let Ok(a) = Ack::decode(body) {
                assert_eq!(Ack::decode(&a.encode()).ok(), Some(a));
            }
        }
        Kind::FullSyncBegin => {
            let _ = FullSyncBegin::decode(body);
        }
        Kind::FullSyncEnd => {
            let _ = FullSyncEnd::decode(body);
        }
        Kind::FullSyncChunk => {
            // Keys, evicted keys and libraries re-encode to a chunk that decodes the same.
            if let Ok(entries) = decode_chunk(body, 16) {
                assert_eq!(decode_chunk(&encode_chunk(&entries), 16).ok(), Some(entries));
            }
        }
        Kind::Refuse => {
            let _ = msg::decode_refuse(body);
        }
        Kind::Ops => {
            // Pass the header's own origin and incarnation so the records are reached.
            if let Ok((h, _)) = OpsHeader::decode(body) {
                let _ = decode_batch(body, &[h.origin], h.incarnation, 16, u64::MAX / 2, 1000);
            }
        }
        Kind::OpsSparse => {
            if let Ok((h, _)) = SparseHeader::decode(body) {
                let _ = decode_sparse(body, &[h.origin], h.incarnation, 16, u64::MAX / 2, 1000);
            }
        }
        Kind::Ping => {}
    }
}

fuzz_target!(|data: &[u8]| {
    // As a frame after its length field.
    if let Ok(f) = frame::decode(bytes::Bytes::copy_from_slice(data), FRAME_MAX) {
        assert!(f.body.len() <= FRAME_MAX);
        body(f.kind, &f.body);
    }
    // As the body of every kind (the first byte picks it), skipping the frame layer.
    if let Some((&k, rest)) = data.split_first() {
        if let Ok(kind) = Kind::from_byte(k) {
            body(kind, rest);
        }
    }
});
