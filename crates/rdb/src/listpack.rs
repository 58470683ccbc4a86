//! Listpacks (`listpack.c`): Redis 7.0's packed list of strings and integers.
//!
//! Layout: total bytes (u32 LE), element count (u16 LE, 65535 = unknown), entries, 0xFF.
//! An entry is its encoding and data, then its own length backwards (`backlen`, 1 to 5
//! bytes). `Builder` appends as `lpAppend` does (a string that `string2ll` reads is stored as
//! an integer); `parse` validates as `lpValidateIntegrity` with `deep` does and returns the
//! entries.

use crate::RdbError;
use crate::num::string2ll;

/// Header bytes: total length and element count.
pub const HEADER_BYTES: usize = 6;
/// The element count that means "count it" (65535 elements or more).
pub const COUNT_UNKNOWN: u16 = u16::MAX;
const EOF: u8 = 0xFF;

/// One entry of a listpack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Entry<'a> {
    Int(i64),
    Str(&'a [u8]),
}

impl Entry<'_> {
    /// The entry as the string Redis reads from it (`lpGet` with a buffer).
    pub fn to_bytes(&self) -> Vec<u8> {
        match self {
            Entry::Int(v) => v.to_string().into_bytes(),
            Entry::Str(s) => s.to_vec(),
        }
    }
}

/// A listpack being built by appends.
#[derive(Clone, Debug)]
pub struct Builder {
    buf: Vec<u8>,
    count: usize,
}

impl Default for Builder {
    fn default() -> Self {
        Builder::new()
    }
}

impl Builder {
    pub fn new() -> Builder {
        let mut buf = Vec::with_capacity(64);
        buf.extend_from_slice(&[0; HEADER_BYTES]);
        Builder { buf, count: 0 }
    }

    /// Bytes the finished listpack will have (`lpBytes`).
    pub fn bytes(&self) -> usize {
        self.buf.len() + 1
    }

    pub fn count(&self) -> usize {
        self.count
    }

    /// `lpAppend`: an integer string as an integer, anything else as a string.
    pub fn push(&mut self, s: &[u8]) {
        match string2ll(s) {
            Some(v) => self.push_int(v),
            None => self.push_str(s),
        }
    }

    /// `lpAppendInteger`.
    pub fn push_int(&mut self, v: i64) {
        let start = self.buf.len();
        if (0..=127).contains(&v) {
            self.buf.push(v as u8);
        } else if (-4096..=4095).contains(&v) {
            let u = if v < 0 { (1i64 << 13) + v } else { v } as u64;
            self.buf.push(((u >> 8) as u8) | 0xC0);
            self.buf.push(u as u8);
        } else if (-32768..=32767).contains(&v) {
            let u = if v < 0 { (1i64 << 16) + v } else { v } as u64;
            self.buf.push(0xF1);
            self.buf.extend_from_slice(&(u as u16).to_le_bytes());
        } else if (-8_388_608..=8_388_607).contains(&v) {
            let u = if v < 0 { (1i64 << 24) + v } else { v } as u64;
            self.buf.push(0xF2);
            self.buf.extend_from_slice(&(u as u32).to_le_bytes()[..3]);
        } else if (-2_147_483_648..=2_147_483_647).contains(&v) {
            let u = if v < 0 { (1i64 << 32) + v } else { v } as u64;
            self.buf.push(0xF3);
            self.buf.extend_from_slice(&(u as u32).to_le_bytes());
        } else {
            self.buf.push(0xF4);
            self.buf.extend_from_slice(&(v as u64).to_le_bytes());
        }
        self.end_entry(start);
    }

    fn push_str(&mut self, s: &[u8]) {
        let start = self.buf.len();
        let len = s.len();
        if len < 64 {
            self.buf.push(len as u8 | 0x80);
        } else if len < 4096 {
            self.buf.push((len >> 8) as u8 | 0xE0);
            self.buf.push(len as u8);
        } else {
            self.buf.push(0xF0);
            self.buf.extend_from_slice(&(len as u32).to_le_bytes());
        }
        self.buf.extend_from_slice(s);
        self.end_entry(start);
    }

    fn end_entry(&mut self, start: usize) {
        let len = (self.buf.len() - start) as u64;
        encode_backlen(&mut self.buf, len);
        self.count += 1;
    }

    /// Replaces the first entry, an integer from 0 to 127 (two bytes with its backlen), by
    /// the integer `v` (`lpReplaceInteger` on the head element).
    pub fn replace_first_small_int(&mut self, v: i64) {
        let mut b = Builder::new();
        b.push_int(v);
        b.buf
            .extend_from_slice(self.buf.get(HEADER_BYTES + 2..).unwrap_or_default());
        b.count = self.count;
        *self = b;
    }

    /// The finished listpack's bytes.
    pub fn finish(mut self) -> Vec<u8> {
        self.buf.push(EOF);
        let total = self.buf.len() as u32;
        let count = u16::try_from(self.count).unwrap_or(COUNT_UNKNOWN);
        let mut header = [0u8; HEADER_BYTES];
        for (dst, src) in header
            .iter_mut()
            .zip(total.to_le_bytes().into_iter().chain(count.to_le_bytes()))
        {
            *dst = src;
        }
        if let Some(h) = self.buf.get_mut(..HEADER_BYTES) {
            h.copy_from_slice(&header);
        }
        self.buf
    }
}

/// `lpEncodeBacklen`.
fn encode_backlen(out: &mut Vec<u8>, l: u64) {
    if l <= 127 {
        out.push(l as u8);
    } else if l < 16383 {
        out.push((l >> 7) as u8);
        out.push((l & 127) as u8 | 128);
    } else if l < 2_097_151 {
        out.push((l >> 14) as u8);
        out.push(((l >> 7) & 127) as u8 | 128);
        out.push((l & 127) as u8 | 128);
    } else if l < 268_435_455 {
        out.push((l >> 21) as u8);
        out.push(((l >> 14) & 127) as u8 | 128);
        out.push(((l >> 7) & 127) as u8 | 128);
        out.push((l & 127) as u8 | 128);
    } else {
        out.push((l >> 28) as u8);
        out.push(((l >> 21) & 127) as u8 | 128);
        out.push(((l >> 14) & 127) as u8 | 128);
        out.push(((l >> 7) & 127) as u8 | 128);
        out.push((l & 127) as u8 | 128);
    }
}

/// Bytes `lpEncodeBacklen` uses for `l`.
fn backlen_size(l: u64) -> u64 {
    match l {
        0..=127 => 1,
        128..16383 => 2,
        16383..2_097_151 => 3,
        2_097_151..268_435_455 => 4,
        _ => 5,
    }
}

/// `lpDecodeBacklen` of the backlen whose last byte is at `end`; `None` past 5 bytes or the
/// start of the buffer.
fn decode_backlen(lp: &[u8], end: usize) -> Option<u64> {
    let mut val: u64 = 0;
    let mut shift = 0;
    let mut i = end;
    loop {
        let b = *lp.get(i)?;
        val |= u64::from(b & 127) << shift;
        if b & 128 == 0 {
            return Some(val);
        }
        shift += 7;
        i = i.checked_sub(1)?;
        if shift > 28 {
            return None;
        }
    }
}

/// The size of an entry's encoding and length bytes, and its full encoded length without
/// the backlen (`lpCurrentEncodedSizeBytes`, `lpCurrentEncodedSizeUnsafe`, the latter in 64
/// bits so a hostile 32-bit length cannot wrap); `None` for an invalid encoding byte.
fn entry_sizes(lp: &[u8], p: usize) -> Option<(u64, Option<u64>)> {
    let b = *lp.get(p)?;
    let byte = |k: usize| lp.get(p + k).map(|&x| u64::from(x));
    Some(match b {
        _ if b & 0x80 == 0 => (1, Some(1)),
        _ if b & 0xC0 == 0x80 => (1, Some(1 + u64::from(b & 0x3F))),
        _ if b & 0xE0 == 0xC0 => (1, Some(2)),
        0xF1 => (1, Some(3)),
        0xF2 => (1, Some(4)),
        0xF3 => (1, Some(5)),
        0xF4 => (1, Some(9)),
        _ if b & 0xF0 == 0xE0 => (2, byte(1).map(|l| 2 + ((u64::from(b & 0xF) << 8) | l))),
        0xF0 => (
            5,
            (|| Some(5 + (byte(1)? | byte(2)? << 8 | byte(3)? << 16 | byte(4)? << 24)))(),
        ),
        _ => return None,
    })
}

/// Bytes the integer entry `v` takes in a listpack, its backlen included.
pub fn int_entry_bytes(v: i64) -> usize {
    match v {
        0..=127 => 2,
        -4096..=4095 => 3,
        -32768..=32767 => 4,
        -8_388_608..=8_388_607 => 5,
        -2_147_483_648..=2_147_483_647 => 6,
        _ => 10,
    }
}

/// Validates `lp` as `lpValidateIntegrity(lp, size, deep=1)` does and returns its entries.
/// `what` names the container in the error.
pub fn parse<'a>(lp: &'a [u8], what: &'static str) -> Result<Vec<Entry<'a>>, RdbError> {
    let bad = || RdbError::Integrity(what);
    let size = lp.len();
    if size < HEADER_BYTES + 1 {
        return Err(bad());
    }
    let total = lp
        .get(..4)
        .and_then(|h| h.try_into().ok())
        .map(u32::from_le_bytes)
        .ok_or_else(bad)?;
    if total as usize != size || lp.last() != Some(&EOF) {
        return Err(bad());
    }
    let numele = lp
        .get(4..6)
        .and_then(|h| h.try_into().ok())
        .map(u16::from_le_bytes)
        .ok_or_else(bad)?;
    let last = size - 1;
    let mut entries = Vec::with_capacity(usize::from(numele).min(size / 2));
    let mut p = HEADER_BYTES;
    while lp.get(p) != Some(&EOF) {
        // lpValidateNext: the encoding bytes, the entry and its backlen within the listpack.
        let (lenbytes, encoded) = entry_sizes(lp, p).ok_or_else(bad)?;
        if p as u64 + lenbytes > last as u64 {
            return Err(bad());
        }
        let encoded = encoded.ok_or_else(bad)?;
        let backlen = backlen_size(encoded);
        let entrylen = encoded + backlen;
        let next = p as u64 + entrylen;
        if next > last as u64 {
            return Err(bad());
        }
        let next = next as usize;
        let prevlen = decode_backlen(lp, next - 1).ok_or_else(bad)?;
        if prevlen + backlen != entrylen {
            return Err(bad());
        }
        entries.push(entry_at(lp, p, encoded as usize).ok_or_else(bad)?);
        p = next;
    }
    if p != last {
        return Err(bad());
    }
    if numele != COUNT_UNKNOWN && usize::from(numele) != entries.len() {
        return Err(bad());
    }
    Ok(entries)
}

/// The value of the validated entry at `p` whose encoding and data take `encoded` bytes.
fn entry_at(lp: &[u8], p: usize, encoded: usize) -> Option<Entry<'_>> {
    let b = *lp.get(p)?;
    let le = |from: usize, n: usize| -> Option<u64> {
        let mut v = 0u64;
        for k in 0..n {
            v |= u64::from(*lp.get(p + from + k)?) << (8 * k);
        }
        Some(v)
    };
    // Two's complement of an `bits`-bit unsigned value (`lpGetWithSize`).
    let signed = |u: u64, bits: u32| -> i64 {
        if bits == 64 {
            u as i64
        } else if u >= 1 << (bits - 1) {
            (u as i64) - (1i64 << bits)
        } else {
            u as i64
        }
    };
    Some(match b {
        _ if b & 0x80 == 0 => Entry::Int(i64::from(b & 0x7F)),
        _ if b & 0xC0 == 0x80 => Entry::Str(lp.get(p + 1..p + encoded)?),
        _ if b & 0xE0 == 0xC0 => {
            let u = (u64::from(b & 0x1F) << 8) | u64::from(*lp.get(p + 1)?);
            Entry::Int(signed(u, 13))
        }
        0xF1 => Entry::Int(signed(le(1, 2)?, 16)),
        0xF2 => Entry::Int(signed(le(1, 3)?, 24)),
        0xF3 => Entry::Int(signed(le(1, 4)?, 32)),
        0xF4 => Entry::Int(signed(le(1, 8)?, 64)),
        _ if b & 0xF0 == 0xE0 => Entry::Str(lp.get(p + 2..p + encoded)?),
        0xF0 => Entry::Str(lp.get(p + 5..p + encoded)?),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn build(items: &[&[u8]]) -> Vec<u8> {
        let mut b = Builder::new();
        for i in items {
            b.push(i);
        }
        b.finish()
    }

    #[test]
    fn round_trip_every_encoding() {
        let long = vec![b'x'; 5000];
        let mid = vec![b'y'; 300];
        let items: Vec<&[u8]> = vec![
            b"0",
            b"127",
            b"128",
            b"-1",
            b"-4096",
            b"4095",
            b"4096",
            b"-32768",
            b"32767",
            b"40000",
            b"-8388608",
            b"8388607",
            b"2147483647",
            b"-2147483648",
            b"2147483648",
            b"9223372036854775807",
            b"-9223372036854775808",
            b"abc",
            b"",
            b"01",
            &mid,
            &long,
        ];
        let lp = build(&items);
        let got = parse(&lp, "listpack").unwrap();
        let back: Vec<Vec<u8>> = got.iter().map(Entry::to_bytes).collect();
        let want: Vec<Vec<u8>> = items.iter().map(|i| i.to_vec()).collect();
        assert_eq!(back, want);
    }

    #[test]
    fn matches_redis_bytes() {
        // HSET h a 1 b hello in Redis 7.0: DUMP's listpack.
        let lp = build(&[b"a", b"1", b"b", b"hello"]);
        assert_eq!(
            lp,
            b"\x16\x00\x00\x00\x04\x00\x81a\x02\x01\x01\x81b\x02\x85hello\x06\xff".to_vec()
        );
    }

    #[test]
    fn lying_headers_are_refused() {
        let good = build(&[b"a", b"bb"]);
        assert!(parse(&good, "lp").is_ok());
        let mut wrong_total = good.clone();
        wrong_total[0] += 1;
        assert!(parse(&wrong_total, "lp").is_err());
        let mut wrong_count = good.clone();
        wrong_count[4] = 3;
        assert!(parse(&wrong_count, "lp").is_err());
        let mut unknown_count = good.clone();
        unknown_count[4] = 0xff;
        unknown_count[5] = 0xff;
        assert_eq!(parse(&unknown_count, "lp").unwrap().len(), 2);
        let mut long_entry = good.clone();
        long_entry[6] = 0x80 | 60;
        assert!(parse(&long_entry, "lp").is_err());
        let mut huge = good.clone();
        huge[6] = 0xF0;
        assert!(parse(&huge, "lp").is_err());
        let mut bad_backlen = good.clone();
        bad_backlen[8] = 9;
        assert!(parse(&bad_backlen, "lp").is_err());
        assert!(
            parse(b"\x07\x00\x00\x00\x00\x00\xff", "lp")
                .unwrap()
                .is_empty()
        );
        assert!(parse(b"\x07\x00\x00\x00\x00\x00", "lp").is_err());
        for b in 0xF5..=0xFE {
            let lp = [0x0a, 0, 0, 0, 1, 0, b, 0, 1, 0xff];
            assert!(parse(&lp, "lp").is_err());
        }
    }
}
