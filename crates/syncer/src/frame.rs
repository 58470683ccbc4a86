//! Frames: `len:u32le kind:u8 codec:u8 body`, with per-frame compression.
//!
//! `len` counts the kind and codec bytes and the (possibly compressed) body. The decoder checks
//! the declared length against the limit before allocating, and a compressed body's declared
//! decompressed size against the same limit before decompressing.

use bytes::Bytes;

use crate::error::SyncError;

/// Version spoken by this build; a peer with another one is refused. 3: full-sync key states
/// are `KEY_STATE_V2` (they carry `removers`); 4: lives (`Hello.from_life`, `Welcome.life`,
/// `FullSyncBegin.retired`); 5: sites of several shards (the connection preamble naming the
/// shard, `Hello.to_shard` and the slots of both ends, `Welcome.shard/shards/slots`,
/// `OpsSparse`); 6: `FullSyncBegin` carries the sender's causal context (`context`, its
/// gap) and `complete` instead of the collected vector; 7: a complete full sync names the
/// keys its sender evicted (`FullSyncChunk` entries of database `0xFFFE`: `db:u16
/// key:bytes`), which a version-6 receiver would take for an unknown database; 8: a
/// HyperLogLog's state in a full sync carries the bytes before its pending writes and the
/// cache validations among them (layout 2 of `HllCrdt::encode_state`), and an increment
/// carries where it stands among its origin's increments (`IncAt`: counter runs), both of
/// which a version-7 receiver refuses; 9: the write that retires TTL writes timing nothing
/// (`Effect::ExpireRetire`, kind 2 of an expire op), which a version-8 receiver refuses. A peer of another version is refused at the handshake, so sites of
/// different versions do not sync: upgrade every site of a deployment before its links must
/// carry traffic again.
pub const PROTOCOL_VERSION: u16 = 9;
/// First four bytes of every `Hello`.
pub const MAGIC: [u8; 4] = *b"MRDN";
/// Bytes before the body: the length, the kind and the codec.
pub const HEADER_BYTES: usize = 6;
/// Default limit on one frame (`sync-frame-bytes-max`).
pub const FRAME_BYTES_MAX_DEFAULT: usize = 64 * 1024 * 1024;
/// zstd level used for `Codec::Zstd` (fast; WAN links are bandwidth-bound, not CPU-bound).
const ZSTD_LEVEL: i32 = 1;

/// What a frame carries. See docs/replication.md §2.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Hello,
    Welcome,
    Refuse,
    Ops,
    Ack,
    FullSyncBegin,
    FullSyncChunk,
    FullSyncEnd,
    Ping,
    /// Ops filtered to the dialer's slots: each record carries its sequence number, and the
    /// header the last sequence number and hlc the frame covers.
    OpsSparse,
}

impl Kind {
    pub fn byte(self) -> u8 {
        match self {
            Kind::Hello => 1,
            Kind::Welcome => 2,
            Kind::Refuse => 3,
            Kind::Ops => 4,
            Kind::Ack => 5,
            Kind::FullSyncBegin => 6,
            Kind::FullSyncChunk => 7,
            Kind::FullSyncEnd => 8,
            Kind::Ping => 9,
            Kind::OpsSparse => 10,
        }
    }

    pub fn from_byte(b: u8) -> Result<Kind, SyncError> {
        Ok(match b {
            1 => Kind::Hello,
            2 => Kind::Welcome,
            3 => Kind::Refuse,
            4 => Kind::Ops,
            5 => Kind::Ack,
            6 => Kind::FullSyncBegin,
            7 => Kind::FullSyncChunk,
            8 => Kind::FullSyncEnd,
            9 => Kind::Ping,
            10 => Kind::OpsSparse,
            other => return Err(SyncError::UnknownKind(other)),
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Kind::Hello => "Hello",
            Kind::Welcome => "Welcome",
            Kind::Refuse => "Refuse",
            Kind::Ops => "Ops",
            Kind::Ack => "Ack",
            Kind::FullSyncBegin => "FullSyncBegin",
            Kind::FullSyncChunk => "FullSyncChunk",
            Kind::FullSyncEnd => "FullSyncEnd",
            Kind::Ping => "Ping",
            Kind::OpsSparse => "OpsSparse",
        }
    }

    /// Whether bodies of this kind are compressed with the link's codec.
    pub fn compressible(self) -> bool {
        matches!(self, Kind::Ops | Kind::OpsSparse | Kind::FullSyncChunk)
    }
}

/// Body compression (`sync-compression`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Codec {
    None,
    #[default]
    Lz4,
    Zstd,
}

impl Codec {
    pub fn byte(self) -> u8 {
        match self {
            Codec::None => 0,
            Codec::Lz4 => 1,
            Codec::Zstd => 2,
        }
    }

    pub fn from_byte(b: u8) -> Result<Codec, SyncError> {
        Ok(match b {
            0 => Codec::None,
            1 => Codec::Lz4,
            2 => Codec::Zstd,
            other => return Err(SyncError::UnknownCodec(other)),
        })
    }

    /// Parses the configuration spelling: `none`, `lz4` or `zstd`.
    pub fn parse(s: &str) -> Option<Codec> {
        match s.to_ascii_lowercase().as_str() {
            "none" | "off" | "no" => Some(Codec::None),
            "lz4" => Some(Codec::Lz4),
            "zstd" => Some(Codec::Zstd),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Codec::None => "none",
            Codec::Lz4 => "lz4",
            Codec::Zstd => "zstd",
        }
    }
}

/// One decoded frame: its kind and its decompressed body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    pub kind: Kind,
    pub body: Bytes,
}

/// Appends one frame to `out`; compresses the body with `codec` when the kind is compressible.
/// Returns the bytes appended.
pub fn encode(out: &mut Vec<u8>, kind: Kind, codec: Codec, body: &[u8]) -> usize {
    let start = out.len();
    out.extend_from_slice(&[0u8; 4]);
    out.push(kind.byte());
    let codec = if kind.compressible() {
        codec
    } else {
        Codec::None
    };
    match codec {
        Codec::None => {
            out.push(Codec::None.byte());
            out.extend_from_slice(body);
        }
        Codec::Lz4 => {
            out.push(Codec::Lz4.byte());
            out.extend_from_slice(&lz4_flex::block::compress_prepend_size(body));
        }
        Codec::Zstd => match zstd::bulk::compress(body, ZSTD_LEVEL) {
            Ok(c) => {
                out.push(Codec::Zstd.byte());
                out.extend_from_slice(&(body.len() as u32).to_le_bytes());
                out.extend_from_slice(&c);
            }
            Err(_) => {
                out.push(Codec::None.byte());
                out.extend_from_slice(body);
            }
        },
    }
    let len = (out.len() - start - 4) as u32;
    if let Some(slot) = out.get_mut(start..start + 4) {
        slot.copy_from_slice(&len.to_le_bytes());
    }
    out.len() - start
}

/// Reads the declared length of a frame from its first four bytes.
pub fn declared_len(header: [u8; 4]) -> usize {
    u32::from_le_bytes(header) as usize
}

/// Decodes the part of a frame after its length field (`kind codec body`), decompressing the
/// body. `max` bounds the decompressed size.
pub fn decode(payload: Bytes, max: usize) -> Result<Frame, SyncError> {
    let (Some(&kind), Some(&codec)) = (payload.first(), payload.get(1)) else {
        return Err(SyncError::FrameTruncated);
    };
    let kind = Kind::from_byte(kind)?;
    let codec = Codec::from_byte(codec)?;
    let body = payload.slice(2..);
    let body = match codec {
        Codec::None => body,
        Codec::Lz4 => {
            let size = prepended_size(&body)?;
            if size > max {
                return Err(SyncError::FrameTooLarge { len: size, max });
            }
            lz4_flex::block::decompress_size_prepended(&body)
                .map(Bytes::from)
                .map_err(|e| SyncError::Decompress(e.to_string()))?
        }
        Codec::Zstd => {
            let size = prepended_size(&body)?;
            if size > max {
                return Err(SyncError::FrameTooLarge { len: size, max });
            }
            let data = body.get(4..).unwrap_or_default();
            let out = zstd::bulk::decompress(data, size)
                .map_err(|e| SyncError::Decompress(e.to_string()))?;
            if out.len() != size {
                return Err(SyncError::Decompress(format!(
                    "declared {size} bytes, got {}",
                    out.len()
                )));
            }
            Bytes::from(out)
        }
    };
    Ok(Frame { kind, body })
}

fn prepended_size(body: &[u8]) -> Result<usize, SyncError> {
    let head: [u8; 4] = body
        .get(..4)
        .and_then(|h| h.try_into().ok())
        .ok_or(SyncError::FrameTruncated)?;
    Ok(u32::from_le_bytes(head) as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round(kind: Kind, codec: Codec, body: &[u8]) -> Frame {
        let mut out = Vec::new();
        let n = encode(&mut out, kind, codec, body);
        assert_eq!(n, out.len());
        let len = declared_len(out[..4].try_into().unwrap());
        assert_eq!(len, out.len() - 4);
        decode(Bytes::copy_from_slice(&out[4..]), 1 << 20).unwrap()
    }

    #[test]
    fn every_codec_round_trips() {
        let body: Vec<u8> = (0..5000u32).flat_map(|i| (i % 17).to_le_bytes()).collect();
        for codec in [Codec::None, Codec::Lz4, Codec::Zstd] {
            let f = round(Kind::Ops, codec, &body);
            assert_eq!(f.kind, Kind::Ops);
            assert_eq!(&f.body[..], &body[..]);
        }
        // Handshake frames are never compressed.
        let mut out = Vec::new();
        encode(&mut out, Kind::Hello, Codec::Zstd, b"hi");
        assert_eq!(out[5], 0);
    }

    #[test]
    fn decompression_bombs_are_refused_before_decompressing() {
        let body = vec![0u8; 4096];
        let mut out = Vec::new();
        encode(&mut out, Kind::Ops, Codec::Lz4, &body);
        // At the limit: accepted; one byte below the size: refused.
        assert!(decode(Bytes::copy_from_slice(&out[4..]), 4096).is_ok());
        assert!(matches!(
            decode(Bytes::copy_from_slice(&out[4..]), 4095),
            Err(SyncError::FrameTooLarge { .. })
        ));
        let mut z = Vec::new();
        encode(&mut z, Kind::Ops, Codec::Zstd, &body);
        assert!(decode(Bytes::copy_from_slice(&z[4..]), 4095).is_err());
    }

    #[test]
    fn garbage_never_panics() {
        for seed in 0u32..2000 {
            let len = (seed % 40) as usize;
            let bytes: Vec<u8> = (0..len)
                .map(|i| (seed.wrapping_mul(2654435761).wrapping_add(i as u32 * 97) >> 7) as u8)
                .collect();
            let _ = decode(Bytes::from(bytes), 1 << 16);
        }
        assert!(matches!(
            decode(Bytes::from_static(&[42, 0]), 10),
            Err(SyncError::UnknownKind(42))
        ));
        assert!(matches!(
            decode(Bytes::from_static(&[4, 9]), 10),
            Err(SyncError::UnknownCodec(9))
        ));
    }
}
