//! `SyncError`: every way a link can fail, with the context a log line needs.

use meridian_crdt::codec::DecodeError;

/// Why a link failed or a peer was refused.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    #[error("frame of {len} bytes exceeds sync-frame-bytes-max {max}")]
    FrameTooLarge { len: usize, max: usize },
    #[error("frame shorter than its header")]
    FrameTruncated,
    #[error("unknown frame kind {0}")]
    UnknownKind(u8),
    #[error("unknown compression codec {0}")]
    UnknownCodec(u8),
    #[error("decompression failed: {0}")]
    Decompress(String),
    #[error("malformed {what}: {source}")]
    Malformed {
        what: &'static str,
        source: DecodeError,
    },
    #[error("unexpected {got} frame while waiting for {want}")]
    Unexpected {
        got: &'static str,
        want: &'static str,
    },
    #[error("refused by peer: {0}")]
    RefusedByPeer(String),
    #[error("refused: {0}")]
    Refused(String),
    #[error("tls: {0}")]
    Tls(String),
    #[error("peer sent nothing for {0} ms")]
    Idle(u64),
}

impl SyncError {
    /// Wraps a body decoding error with the message it was decoding.
    pub fn malformed(what: &'static str) -> impl FnOnce(DecodeError) -> SyncError {
        move |source| SyncError::Malformed { what, source }
    }
}
