//! Intsets (`intset.c`): a sorted array of distinct integers, all of one width.
//!
//! Layout: encoding (u32 LE: 2, 4 or 8 bytes per integer), count (u32 LE), the integers
//! (LE), ascending. Redis widens an intset for a larger value and never narrows it; `encode`
//! uses the narrowest width for the contents, which is what Redis holds unless a wide member
//! was removed.

use crate::RdbError;

const HEADER_BYTES: usize = 8;

/// The intset of `values` (sorted ascending, distinct).
pub fn encode(values: &[i64]) -> Vec<u8> {
    let (lo, hi) = match (values.first(), values.last()) {
        (Some(&lo), Some(&hi)) => (lo, hi),
        _ => (0, 0),
    };
    let width: usize = if lo >= i64::from(i16::MIN) && hi <= i64::from(i16::MAX) {
        2
    } else if lo >= i64::from(i32::MIN) && hi <= i64::from(i32::MAX) {
        4
    } else {
        8
    };
    let mut out = Vec::with_capacity(HEADER_BYTES + values.len() * width);
    out.extend_from_slice(&(width as u32).to_le_bytes());
    out.extend_from_slice(&(values.len() as u32).to_le_bytes());
    for v in values {
        out.extend_from_slice(v.to_le_bytes().get(..width).unwrap_or(&[]));
    }
    out
}

/// Validates as `intsetValidateIntegrity(deep=1)` (known width, exact size, not empty,
/// strictly ascending) and returns the integers.
pub fn parse(is: &[u8]) -> Result<Vec<i64>, RdbError> {
    let bad = || RdbError::Integrity("intset");
    let word = |at: usize| {
        is.get(at..at + 4)
            .and_then(|b| b.try_into().ok())
            .map(u32::from_le_bytes)
    };
    let width = word(0).ok_or_else(bad)? as usize;
    if !matches!(width, 2 | 4 | 8) {
        return Err(bad());
    }
    let count = word(4).ok_or_else(bad)? as u64;
    if HEADER_BYTES as u64 + count * width as u64 != is.len() as u64 || count == 0 {
        return Err(bad());
    }
    let body = is.get(HEADER_BYTES..).ok_or_else(bad)?;
    let mut out: Vec<i64> = Vec::with_capacity(count as usize);
    for chunk in body.chunks_exact(width) {
        // Sign-extends the little-endian `width`-byte integer.
        let mut b = [0u8; 8];
        if let Some(dst) = b.get_mut(..width) {
            dst.copy_from_slice(chunk);
        }
        let shift = 64 - 8 * width as u32;
        let v = (i64::from_le_bytes(b) << shift) >> shift;
        if out.last().is_some_and(|&prev| v <= prev) {
            return Err(bad());
        }
        out.push(v);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_redis_bytes() {
        assert_eq!(
            encode(&[1, 2, 3]),
            b"\x02\x00\x00\x00\x03\x00\x00\x00\x01\x00\x02\x00\x03\x00".to_vec()
        );
        for vals in [vec![-5, 7], vec![-70000, 1], vec![i64::MIN, i64::MAX]] {
            assert_eq!(parse(&encode(&vals)).unwrap(), vals);
        }
    }

    #[test]
    fn damaged_intsets_are_refused() {
        assert!(parse(b"").is_err());
        assert!(parse(b"\x03\x00\x00\x00\x01\x00\x00\x00\x01\x00\x00").is_err());
        assert!(parse(b"\x02\x00\x00\x00\x00\x00\x00\x00").is_err());
        assert!(parse(b"\x02\x00\x00\x00\x02\x00\x00\x00\x01\x00").is_err());
        assert!(parse(b"\x02\x00\x00\x00\x02\x00\x00\x00\x01\x00\x01\x00").is_err());
        assert!(parse(b"\x02\x00\x00\x00\x02\x00\x00\x00\x02\x00\x01\x00").is_err());
        assert!(parse(b"\x02\x00\x00\x00\xff\xff\xff\xff\x01\x00").is_err());
    }
}
