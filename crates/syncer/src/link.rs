//! Reading and writing frames over any byte stream (TCP, or TLS over TCP).
//!
//! Both halves count bytes on the wire and bytes before compression, for `INFO crdt`. The
//! reader allocates a frame's buffer only after checking its declared length, and reads with a
//! deadline so that a stalled peer costs a reconnect, not a stuck task.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::error::SyncError;
use crate::frame::{self, Codec, Frame, Kind};

/// A byte stream a link can run over.
pub trait Io: AsyncRead + AsyncWrite + Unpin {}
impl<T: AsyncRead + AsyncWrite + Unpin> Io for T {}

/// Reads frames from `R`.
#[derive(Debug)]
pub struct FrameReader<R> {
    inner: R,
    frame_bytes_max: usize,
    /// Bytes read from the wire (compressed sizes).
    pub wire_bytes: u64,
    /// Bytes of frames after decompression.
    pub raw_bytes: u64,
}

impl<R: AsyncRead + Unpin> FrameReader<R> {
    pub fn new(inner: R, frame_bytes_max: usize) -> FrameReader<R> {
        FrameReader {
            inner,
            frame_bytes_max,
            wire_bytes: 0,
            raw_bytes: 0,
        }
    }

    /// Reads the next frame, failing with `Idle` when nothing at all arrives for `idle`.
    pub async fn read(&mut self, idle: Duration) -> Result<Frame, SyncError> {
        let mut header = [0u8; 4];
        match tokio::time::timeout(idle, self.inner.read_exact(&mut header)).await {
            Ok(r) => {
                r?;
            }
            Err(_) => return Err(SyncError::Idle(idle.as_millis() as u64)),
        }
        let len = frame::declared_len(header);
        if len > self.frame_bytes_max {
            return Err(SyncError::FrameTooLarge {
                len,
                max: self.frame_bytes_max,
            });
        }
        if len < 2 {
            return Err(SyncError::FrameTruncated);
        }
        let mut buf = BytesMut::zeroed(len);
        // A peer that stops mid-frame is as idle as one that sends nothing.
        match tokio::time::timeout(idle, self.inner.read_exact(&mut buf)).await {
            Ok(r) => {
                r?;
            }
            Err(_) => return Err(SyncError::Idle(idle.as_millis() as u64)),
        }
        self.wire_bytes += (len + 4) as u64;
        let f = frame::decode(buf.freeze(), self.frame_bytes_max)?;
        self.raw_bytes += (f.body.len() + frame::HEADER_BYTES) as u64;
        Ok(f)
    }

    /// Reads a frame that must be of kind `want` (a `Refuse` becomes `RefusedByPeer`).
    pub async fn expect(&mut self, want: Kind, idle: Duration) -> Result<Bytes, SyncError> {
        let f = self.read(idle).await?;
        if f.kind == want {
            return Ok(f.body);
        }
        if f.kind == Kind::Refuse {
            return Err(SyncError::RefusedByPeer(crate::msg::decode_refuse(&f.body)));
        }
        Err(SyncError::Unexpected {
            got: f.kind.name(),
            want: want.name(),
        })
    }
}

/// Writes frames to `W`, compressing compressible kinds with its codec.
#[derive(Debug)]
pub struct FrameWriter<W> {
    inner: W,
    codec: Codec,
    buf: Vec<u8>,
    /// Bytes written to the wire.
    pub wire_bytes: u64,
    /// Bytes of frames before compression.
    pub raw_bytes: u64,
}

impl<W: AsyncWrite + Unpin> FrameWriter<W> {
    pub fn new(inner: W, codec: Codec) -> FrameWriter<W> {
        FrameWriter {
            inner,
            codec,
            buf: Vec::new(),
            wire_bytes: 0,
            raw_bytes: 0,
        }
    }

    /// Queues one frame; `flush` sends what is queued.
    pub fn queue(&mut self, kind: Kind, body: &[u8]) {
        let n = frame::encode(&mut self.buf, kind, self.codec, body);
        self.wire_bytes += n as u64;
        self.raw_bytes += (body.len() + frame::HEADER_BYTES) as u64;
    }

    /// Bytes queued and not yet flushed.
    pub fn queued(&self) -> usize {
        self.buf.len()
    }

    /// Writes every queued frame and flushes the stream.
    pub async fn flush(&mut self) -> Result<(), SyncError> {
        if !self.buf.is_empty() {
            self.inner.write_all(&self.buf).await?;
            self.buf.clear();
            if self.buf.capacity() > 4 * 1024 * 1024 {
                self.buf = Vec::new();
            }
        }
        self.inner.flush().await?;
        Ok(())
    }

    /// Queues one frame and flushes.
    pub async fn send(&mut self, kind: Kind, body: &[u8]) -> Result<(), SyncError> {
        self.queue(kind, body);
        self.flush().await
    }

    /// Shuts the write side down (TLS close_notify, then FIN).
    pub async fn shutdown(&mut self) {
        let _ = self.inner.shutdown().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "current_thread")]
    async fn frames_cross_a_pipe_and_limits_hold() {
        let (a, b) = tokio::io::duplex(1 << 16);
        let mut w = FrameWriter::new(a, Codec::Lz4);
        let mut r = FrameReader::new(b, 1024);
        w.send(Kind::Ops, &[7u8; 1000]).await.unwrap();
        w.send(Kind::Ping, b"").await.unwrap();
        let f = r.read(Duration::from_secs(1)).await.unwrap();
        assert_eq!((f.kind, f.body.len()), (Kind::Ops, 1000));
        assert!(w.wire_bytes < w.raw_bytes, "lz4 shrinks a run of sevens");
        let body = r.expect(Kind::Ping, Duration::from_secs(1)).await.unwrap();
        assert!(body.is_empty());
        // One past the frame limit: refused from the header alone.
        w.send(Kind::Hello, &[0u8; 1023]).await.unwrap();
        assert!(matches!(
            r.read(Duration::from_secs(1)).await,
            Err(SyncError::FrameTooLarge {
                len: 1025,
                max: 1024
            })
        ));
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_stalled_peer_is_idle_not_stuck() {
        let (_a, b) = tokio::io::duplex(64);
        let mut r = FrameReader::new(b, 1024);
        assert!(matches!(
            r.read(Duration::from_millis(20)).await,
            Err(SyncError::Idle(20))
        ));
    }
}
