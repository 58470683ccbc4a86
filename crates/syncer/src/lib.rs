//! Meridian's site-to-site op stream, as bytes on a wire.
//!
//! What this crate is: the framing (`frame`), the messages of the protocol (`msg`), the
//! per-frame compression codecs, the mutual-TLS configuration with its site-name checks
//! (`tls`), and the async frame reader and writer over any byte stream (`link`). The protocol
//! is written down in `docs/replication.md`.
//!
//! What it is not: it does not know what an op means, owns no keyspace and spawns no task. The
//! server's `sync` module drives links from its shard thread, fills `Ops` frames from its op
//! log and applies what arrives through the same path as a local write.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)
)]

pub mod error;
pub mod frame;
pub mod link;
pub mod msg;
pub mod tls;

pub use crate::error::SyncError;
pub use crate::frame::{Codec, Frame, Kind, PROTOCOL_VERSION};
pub use crate::link::{FrameReader, FrameWriter, Io};
pub use crate::msg::{
    Ack, FullSyncBegin, FullSyncEnd, Hello, Mode, OpsHeader, SparseHeader, Welcome,
};
pub use crate::tls::{TlsContext, TlsFiles};
