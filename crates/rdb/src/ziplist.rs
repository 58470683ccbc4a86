//! Ziplists (`ziplist.c`): the packed list of Redis before 7.0, still found in payloads of
//! RDB version 9 and older (RESTORE of a DUMP made by Redis 6). Read only.
//!
//! Layout: total bytes (u32 LE), offset of the last entry (u32 LE), count (u16 LE, 65535 =
//! unknown), entries, 0xFF. An entry is the previous entry's length (1 byte, or 0xFE and a
//! u32 LE), an encoding (strings: 6-, 14- or 32-bit lengths; integers: 8 to 64 bits or an
//! immediate 0..12) and its data.

use crate::RdbError;

const HEADER_BYTES: usize = 10;
const END: u8 = 0xFF;
const BIG_PREVLEN: u8 = 0xFE;

/// One entry of a ziplist.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Entry<'a> {
    Int(i64),
    Str(&'a [u8]),
}

impl Entry<'_> {
    pub fn to_bytes(&self) -> Vec<u8> {
        match self {
            Entry::Int(v) => v.to_string().into_bytes(),
            Entry::Str(s) => s.to_vec(),
        }
    }
}

/// Validates as `ziplistValidateIntegrity(deep=1)` does and returns the entries.
pub fn parse<'a>(zl: &'a [u8], what: &'static str) -> Result<Vec<Entry<'a>>, RdbError> {
    let bad = || RdbError::Integrity(what);
    let size = zl.len();
    if size < HEADER_BYTES + 1 {
        return Err(bad());
    }
    let u32_at = |at: usize| {
        zl.get(at..at + 4)
            .and_then(|b| b.try_into().ok())
            .map(u32::from_le_bytes)
    };
    let bytes = u32_at(0).ok_or_else(bad)? as usize;
    let tail = u32_at(4).ok_or_else(bad)? as usize;
    let header_count = zl
        .get(8..10)
        .and_then(|b| b.try_into().ok())
        .map(u16::from_le_bytes)
        .ok_or_else(bad)?;
    if bytes != size || zl.last() != Some(&END) || tail > size - 1 {
        return Err(bad());
    }
    let first = HEADER_BYTES;
    let last = size - 1;
    let mut entries = Vec::new();
    let mut p = first;
    let mut prev: Option<usize> = None;
    let mut prev_raw_size: u64 = 0;
    while zl.get(p).ok_or_else(bad)? != &END {
        let (prevrawlen, header, len, entry) = entry_at(zl, p).ok_or_else(bad)?;
        if p as u64 + header + len > last as u64 {
            return Err(bad());
        }
        if prevrawlen > (p - first) as u64 || prevrawlen != prev_raw_size {
            return Err(bad());
        }
        entries.push(entry);
        prev_raw_size = header + len;
        prev = Some(p);
        p += (header + len) as usize;
    }
    if p != last {
        return Err(bad());
    }
    if prev.is_some_and(|q| q != tail) {
        return Err(bad());
    }
    if header_count != u16::MAX && usize::from(header_count) != entries.len() {
        return Err(bad());
    }
    Ok(entries)
}

/// The entry at `p`: previous entry's length, header bytes, data bytes and the value.
/// `None` when its headers reach past the ziplist or its encoding is unknown.
fn entry_at(zl: &[u8], p: usize) -> Option<(u64, u64, u64, Entry<'_>)> {
    let b = |k: usize| zl.get(p + k).copied();
    let (prevlen, prevsize) = if b(0)? < BIG_PREVLEN {
        (u64::from(b(0)?), 1usize)
    } else {
        let v = u32::from_le_bytes(zl.get(p + 1..p + 5)?.try_into().ok()?);
        (u64::from(v), 5)
    };
    let e = p + prevsize;
    let enc = *zl.get(e)?;
    let at = |k: usize| zl.get(e + k).copied();
    let (lensize, len): (u64, u64) = match enc >> 6 {
        0 => (1, u64::from(enc & 0x3F)),
        1 => (2, (u64::from(enc & 0x3F) << 8) | u64::from(at(1)?)),
        2 => {
            // `ZIP_ENTRY_ENCODING` keeps only the top two bits of a string encoding.
            let l = u32::from_be_bytes(zl.get(e + 1..e + 5)?.try_into().ok()?);
            (5, u64::from(l))
        }
        _ => match enc {
            0xC0 => (1, 2),
            0xD0 => (1, 4),
            0xE0 => (1, 8),
            0xF0 => (1, 3),
            0xFE => (1, 1),
            0xF1..=0xFD => (1, 0),
            _ => return None,
        },
    };
    let header = prevsize as u64 + lensize;
    let data = (p as u64 + header) as usize;
    let end = data.checked_add(usize::try_from(len).ok()?)?;
    let d = zl.get(data..end)?;
    let entry = match enc >> 6 {
        0..=2 => Entry::Str(d),
        _ => Entry::Int(match enc {
            0xC0 => i64::from(i16::from_le_bytes(d.try_into().ok()?)),
            0xD0 => i64::from(i32::from_le_bytes(d.try_into().ok()?)),
            0xE0 => i64::from_le_bytes(d.try_into().ok()?),
            0xF0 => {
                let mut w = [0u8; 4];
                w.get_mut(1..)?.copy_from_slice(d);
                i64::from(i32::from_le_bytes(w) >> 8)
            }
            0xFE => i64::from(*d.first()? as i8),
            _ => i64::from(enc & 0x0F) - 1,
        }),
    };
    Some((prevlen, header, len, entry))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A ziplist of `items` as Redis 6 writes it (strings as strings, integers encoded).
    pub fn build(items: &[Entry<'_>]) -> Vec<u8> {
        let mut body: Vec<u8> = Vec::new();
        let mut prevlen = 0usize;
        let mut last_start = HEADER_BYTES;
        for it in items {
            let start = body.len();
            last_start = HEADER_BYTES + start;
            if prevlen < 254 {
                body.push(prevlen as u8);
            } else {
                body.push(0xFE);
                body.extend_from_slice(&(prevlen as u32).to_le_bytes());
            }
            match it {
                Entry::Str(s) if s.len() < 64 => {
                    body.push(s.len() as u8);
                    body.extend_from_slice(s);
                }
                Entry::Str(s) if s.len() < 16384 => {
                    body.push(0x40 | (s.len() >> 8) as u8);
                    body.push(s.len() as u8);
                    body.extend_from_slice(s);
                }
                Entry::Str(s) => {
                    body.push(0x80);
                    body.extend_from_slice(&(s.len() as u32).to_be_bytes());
                    body.extend_from_slice(s);
                }
                Entry::Int(v) if (0..=12).contains(v) => body.push(0xF1 + *v as u8),
                Entry::Int(v) if i8::try_from(*v).is_ok() => {
                    body.push(0xFE);
                    body.push(*v as i8 as u8);
                }
                Entry::Int(v) if i16::try_from(*v).is_ok() => {
                    body.push(0xC0);
                    body.extend_from_slice(&(*v as i16).to_le_bytes());
                }
                Entry::Int(v) if (-(1 << 23)..(1 << 23)).contains(v) => {
                    body.push(0xF0);
                    body.extend_from_slice(&(*v as i32).to_le_bytes()[..3]);
                }
                Entry::Int(v) if i32::try_from(*v).is_ok() => {
                    body.push(0xD0);
                    body.extend_from_slice(&(*v as i32).to_le_bytes());
                }
                Entry::Int(v) => {
                    body.push(0xE0);
                    body.extend_from_slice(&v.to_le_bytes());
                }
            }
            prevlen = body.len() - start;
        }
        let total = HEADER_BYTES + body.len() + 1;
        let mut zl = Vec::with_capacity(total);
        zl.extend_from_slice(&(total as u32).to_le_bytes());
        zl.extend_from_slice(&(last_start as u32).to_le_bytes());
        zl.extend_from_slice(&(items.len() as u16).to_le_bytes());
        zl.extend_from_slice(&body);
        zl.push(END);
        zl
    }

    #[test]
    fn round_trip() {
        let long = vec![b'z'; 300];
        let items = [
            Entry::Str(b"a"),
            Entry::Int(5),
            Entry::Int(-100),
            Entry::Int(1000),
            Entry::Int(-3_000_000),
            Entry::Int(70_000_000),
            Entry::Int(1 << 40),
            Entry::Str(&long),
            Entry::Str(b""),
        ];
        let zl = build(&items);
        assert_eq!(parse(&zl, "zl").unwrap(), items.to_vec());
    }

    #[test]
    fn damaged_ziplists_are_refused() {
        let zl = build(&[Entry::Str(b"ab"), Entry::Str(b"cd")]);
        for i in 0..zl.len() {
            for delta in [1u8, 0x40, 0x80] {
                let mut z = zl.clone();
                z[i] = z[i].wrapping_add(delta);
                // Whatever it says, it never panics; most changes are refused.
                let _ = parse(&z, "zl");
            }
        }
        let mut wrong_prev = zl.clone();
        wrong_prev[14] = 9;
        assert!(parse(&wrong_prev, "zl").is_err());
        let mut wrong_tail = zl.clone();
        wrong_tail[4] = 11;
        assert!(parse(&wrong_tail, "zl").is_err());
        assert!(parse(&zl[..zl.len() - 1], "zl").is_err());
    }
}
