//! Zipmaps (`zipmap.c`): the packed hash of Redis 2.4 and older, still loaded by Redis 7.0.
//! Read only.
//!
//! Layout: a count byte (254 = unknown), then per pair: field length, field, value length,
//! a free-space byte, value, free space; lengths are one byte below 254 or 254 and a u32
//! LE; 0xFF ends it.

use crate::RdbError;

const BIGLEN: u8 = 254;
const END: u8 = 255;

/// A field and its value.
pub type Pair<'a> = (&'a [u8], &'a [u8]);

/// Validates as `zipmapValidateIntegrity(deep=1)` does and returns the pairs.
pub fn parse(zm: &[u8]) -> Result<Vec<Pair<'_>>, RdbError> {
    let bad = || RdbError::Integrity("zipmap");
    let size = zm.len();
    if size < 2 || zm.last() != Some(&END) {
        return Err(bad());
    }
    // OUT_OF_RANGE(p): p < zm + 2 || p > zm + size - 1.
    let in_range = |p: u64| p >= 2 && p <= (size - 1) as u64;
    let len_at = |p: u64| -> Option<(u64, u64)> {
        let p = usize::try_from(p).ok()?;
        let b = *zm.get(p)?;
        if b < BIGLEN {
            Some((1, u64::from(b)))
        } else {
            let v = u32::from_le_bytes(zm.get(p + 1..p + 5)?.try_into().ok()?);
            Some((5, u64::from(v)))
        }
    };
    let slice = |from: u64, len: u64| -> Option<&[u8]> {
        let from = usize::try_from(from).ok()?;
        zm.get(from..from.checked_add(usize::try_from(len).ok()?)?)
    };
    let mut pairs = Vec::new();
    let mut p: u64 = 1;
    while zm.get(p as usize).ok_or_else(bad)? != &END {
        let s = if zm.get(p as usize).ok_or_else(bad)? < &BIGLEN {
            1
        } else {
            5
        };
        if !in_range(p + s) {
            return Err(bad());
        }
        let (s, flen) = len_at(p).ok_or_else(bad)?;
        let field_at = p + s;
        p = field_at + flen;
        if !in_range(p) {
            return Err(bad());
        }
        let s = if zm.get(p as usize).ok_or_else(bad)? < &BIGLEN {
            1
        } else {
            5
        };
        if !in_range(p + s) {
            return Err(bad());
        }
        let (s, vlen) = len_at(p).ok_or_else(bad)?;
        p += s;
        let free = u64::from(*zm.get(p as usize).ok_or_else(bad)?);
        let value_at = p + 1;
        p = value_at + vlen + free;
        if !in_range(p) {
            return Err(bad());
        }
        let field = slice(field_at, flen).ok_or_else(bad)?;
        let value = slice(value_at, vlen).ok_or_else(bad)?;
        pairs.push((field, value));
    }
    if pairs.is_empty() {
        return Err(bad());
    }
    let count = *zm.first().ok_or_else(bad)?;
    if count != BIGLEN && usize::from(count) != pairs.len() {
        return Err(bad());
    }
    Ok(pairs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_pairs_and_refuses_damage() {
        // {"a": "bc", "de": ""} with one free byte after "bc".
        let zm = b"\x02\x01a\x02\x01bcX\x02de\x00\x00\xff";
        let pairs = parse(zm).unwrap();
        assert_eq!(pairs, vec![(&b"a"[..], &b"bc"[..]), (&b"de"[..], &b""[..])]);
        assert!(parse(b"\x00\xff").is_err());
        assert!(parse(b"\x03\x01a\x02\x01bcX\x02de\x00\x00\xff").is_err());
        assert!(parse(b"\x02\x01a\x09\x01bcX\x02de\x00\x00\xff").is_err());
        assert!(parse(b"\x02\xfe\xff\xff\xff\xff\xff").is_err());
    }
}
