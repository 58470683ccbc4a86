//! Argument parsing shared by handlers, with Redis's exact acceptance rules.

use meridian_crdt::Dec;

use crate::error::CmdError;

/// Redis's `string2ll`: optional '-', no '+', no leading zeros (except "0"), no spaces,
/// fits in i64. Returns None otherwise.
pub fn parse_i64(b: &[u8]) -> Option<i64> {
    if b.is_empty() || b.len() > 20 {
        return None;
    }
    if b == b"0" {
        return Some(0);
    }
    let (neg, digits) = match b.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, b),
    };
    match digits.first() {
        Some(b'1'..=b'9') => {}
        _ => return None,
    }
    let mut v: u64 = 0;
    for &c in digits {
        if !c.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(u64::from(c - b'0'))?;
    }
    if neg {
        if v > (i64::MAX as u64) + 1 {
            return None;
        }
        Some((v as i64).wrapping_neg())
    } else {
        i64::try_from(v).ok()
    }
}

/// An integer argument, or `ERR value is not an integer or out of range`.
pub fn int_arg(b: &[u8]) -> Result<i64, CmdError> {
    parse_i64(b).ok_or(CmdError::NotInteger)
}

/// Redis's `string2d`/`getDoubleFromObject` acceptance: what `strtod` parses fully, with no
/// leading space, not NaN, and not out of range (`ERANGE` with a result of ±HUGE_VAL or 0:
/// `1e400` and `1e-400` are refused). Accepts "inf", "-inf", "+inf", "infinity" as C does.
pub fn parse_f64(b: &[u8]) -> Option<f64> {
    if b.first().is_some_and(|c| c.is_ascii_whitespace()) {
        return None;
    }
    match strtod_decimal(b)? {
        (v, false) => Some(v),
        (_, true) => None,
    }
}

/// C's `isspace` in the "C" locale.
pub fn is_c_space(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

/// `strtod` on the whole of `b` for decimal and `inf` forms (no leading space, no hex): the
/// value and whether C would set `ERANGE` with ±HUGE_VAL or 0 (overflow, or underflow to
/// zero). `None` when `b` is not entirely such a number, or is NaN.
pub fn strtod_decimal(b: &[u8]) -> Option<(f64, bool)> {
    if b.is_empty() {
        return None;
    }
    let s = std::str::from_utf8(b).ok()?;
    let lower = s.to_ascii_lowercase();
    let negative = lower.starts_with('-');
    let t = lower
        .strip_prefix('+')
        .or_else(|| lower.strip_prefix('-'))
        .unwrap_or(&lower);
    if t == "inf" || t == "infinity" {
        return Some((
            if negative {
                f64::NEG_INFINITY
            } else {
                f64::INFINITY
            },
            false,
        ));
    }
    if t.starts_with("0x") || t.contains("nan") || t.contains("inf") {
        return None;
    }
    let v = s.parse::<f64>().ok()?;
    if v.is_nan() {
        return None;
    }
    // Rust rounds out-of-range texts to ±inf or 0 where strtod also sets ERANGE.
    let mantissa = t.split('e').next().unwrap_or_default();
    let underflow = v == 0.0 && mantissa.bytes().any(|c| matches!(c, b'1'..=b'9'));
    Some((v, v.is_infinite() || underflow))
}

/// A float argument, or `ERR value is not a valid float`.
pub fn float_arg(b: &[u8]) -> Result<f64, CmdError> {
    parse_f64(b).ok_or(CmdError::NotFloat)
}

/// ASCII case-insensitive comparison with a lowercase literal.
pub fn eq_ic(arg: &[u8], lower: &str) -> bool {
    arg.eq_ignore_ascii_case(lower.as_bytes())
}

/// Redis's `sdscatrepr`: a quoted, escaped representation (MONITOR, CLIENT LIST args).
pub fn repr_into(out: &mut Vec<u8>, b: &[u8]) {
    out.push(b'"');
    for &c in b {
        match c {
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'"' => out.extend_from_slice(b"\\\""),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0x07 => out.extend_from_slice(b"\\a"),
            0x08 => out.extend_from_slice(b"\\b"),
            c if c.is_ascii_graphic() || c == b' ' => out.push(c),
            c => out.extend_from_slice(format!("\\x{c:02x}").as_bytes()),
        }
    }
    out.push(b'"');
}

// ---------------------------------------------------------------------------------------------
// Numbers as Redis's string2ld reads them, and SCAN-family cursors

/// Longest text Redis's `string2ld` reads (`MAX_LONG_DOUBLE_CHARS`).
pub const LONG_DOUBLE_CHARS_MAX: usize = 5 * 1024;
/// A number as Redis's `string2ld` (strtold) reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LongDouble {
    Finite(Dec),
    Infinite,
}
/// Redis's `string2ld`: the whole text must be a number, no leading space, no NaN, not out
/// of `long double` range; `inf`/`infinity` (any case, signed) and hex floats are accepted.
pub fn parse_long_double(b: &[u8]) -> Option<LongDouble> {
    if b.is_empty() || b.len() >= LONG_DOUBLE_CHARS_MAX {
        return None;
    }
    if let Some(d) = Dec::parse(b) {
        return Some(LongDouble::Finite(d));
    }
    let unsigned = match b.split_first() {
        Some((b'+' | b'-', rest)) => rest,
        _ => b,
    };
    if eq_ic(unsigned, "inf") || eq_ic(unsigned, "infinity") {
        return Some(LongDouble::Infinite);
    }
    parse_hex_float(b).map(LongDouble::Finite)
}
/// The options of SCAN, HSCAN, SSCAN and ZSCAN: `[MATCH pattern] [COUNT count]`, and SCAN's
/// `[TYPE type]`.
pub struct ScanOptions<'a> {
    /// How much one call walks: at least 1, 10 when not given.
    pub count: u64,
    /// The glob what is returned must match; None: everything (no MATCH, or MATCH *).
    pub pattern: Option<&'a [u8]>,
    /// SCAN's TYPE.
    pub type_filter: Option<&'a [u8]>,
}

/// Reads the scan options in `argv[from..]`, TYPE only `with_type`. As Redis: a COUNT that is
/// not an integer is refused as one, a COUNT below 1 and an unknown or incomplete option as
/// a syntax error.
pub fn scan_options<'a>(
    argv: &[&'a [u8]],
    from: usize,
    with_type: bool,
) -> Result<ScanOptions<'a>, CmdError> {
    let mut o = ScanOptions {
        count: 10,
        pattern: None,
        type_filter: None,
    };
    let mut i = from;
    while let Some(opt) = argv.get(i) {
        match argv.get(i + 1).copied() {
            Some(v) if eq_ic(opt, "count") => {
                let c = int_arg(v)?;
                if c < 1 {
                    return Err(CmdError::Syntax);
                }
                o.count = c as u64;
            }
            Some(v) if eq_ic(opt, "match") => o.pattern = if v == b"*" { None } else { Some(v) },
            Some(v) if with_type && eq_ic(opt, "type") => o.type_filter = Some(v),
            _ => return Err(CmdError::Syntax),
        }
        i += 2;
    }
    Ok(o)
}

/// The parts of a C99 hexadecimal floating constant, `[+-]0x<hex>[.<hex>][p<exponent>]`.
pub struct HexFloat<'a> {
    pub negative: bool,
    /// The digits before the point and after it (not both empty), not yet checked to be hex.
    pub int_part: &'a [u8],
    pub frac_part: &'a [u8],
    /// The exponent's text after `p`, not yet checked.
    pub exp: Option<&'a [u8]>,
}

impl<'a> HexFloat<'a> {
    /// Splits `b` into its parts; None when it does not have the shape of one.
    pub fn split(b: &'a [u8]) -> Option<HexFloat<'a>> {
        let (negative, rest) = match b.split_first() {
            Some((b'-', r)) => (true, r),
            Some((b'+', r)) => (false, r),
            _ => (false, b),
        };
        let rest = rest
            .strip_prefix(b"0x")
            .or_else(|| rest.strip_prefix(b"0X"))?;
        let (mant, exp) = match rest.iter().position(|&c| c == b'p' || c == b'P') {
            Some(i) => (rest.get(..i)?, Some(rest.get(i + 1..)?)),
            None => (rest, None),
        };
        let (int_part, frac_part) = match mant.iter().position(|&c| c == b'.') {
            Some(i) => (mant.get(..i)?, mant.get(i + 1..)?),
            None => (mant, &b""[..]),
        };
        if int_part.is_empty() && frac_part.is_empty() {
            return None;
        }
        Some(HexFloat {
            negative,
            int_part,
            frac_part,
            exp,
        })
    }
}

/// A C hex float (`0x1.8p3`, `-0X10`): the value `strtold` reads (rounded to a `long
/// double`'s 64-bit significand, `cmd::ext80`), as a decimal; `None` when `b` is not one, or
/// when it is out of `long double`'s normal range (then it is refused).
pub fn parse_hex_float(b: &[u8]) -> Option<Dec> {
    let HexFloat {
        negative,
        int_part,
        frac_part,
        exp,
    } = HexFloat::split(b)?;
    if !int_part.iter().chain(frac_part).all(u8::is_ascii_hexdigit) {
        return None;
    }
    let mut scale = -4 * i64::try_from(frac_part.len()).ok()?;
    if let Some(e) = exp {
        let (eneg, digits) = match e.split_first() {
            Some((b'-', r)) => (true, r),
            Some((b'+', r)) => (false, r),
            _ => (false, e),
        };
        if digits.is_empty() || digits.len() > 6 || !digits.iter().all(u8::is_ascii_digit) {
            return None;
        }
        let v: i64 = std::str::from_utf8(digits).ok()?.parse().ok()?;
        scale += if eneg { -v } else { v };
    }
    let digits = int_part
        .iter()
        .chain(frac_part)
        .filter_map(|&c| (c as char).to_digit(16));
    super::ext80::Ext80::from_hex(negative, digits, scale)?.to_dec()
}
/// Redis parses SCAN cursors with `strtoul`: leading '+' or '-' (negation wraps), leading
/// zeros, and the empty string (cursor 0) are accepted; leading space, trailing bytes, no
/// digits and overflow are not. Like C, a NUL byte ends the argument.
pub fn parse_cursor(arg: &[u8]) -> Option<u64> {
    let b = match arg.iter().position(|&c| c == 0) {
        Some(i) => arg.get(..i).unwrap_or_default(),
        None => arg,
    };
    match b.first() {
        None => return Some(0),
        Some(b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r') => return None,
        _ => {}
    }
    let (neg, digits) = match b.split_first() {
        Some((b'-', rest)) => (true, rest),
        Some((b'+', rest)) => (false, rest),
        _ => (false, b),
    };
    if digits.is_empty() {
        return None;
    }
    let mut v: u64 = 0;
    for &c in digits {
        if !c.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(u64::from(c - b'0'))?;
    }
    Some(if neg { v.wrapping_neg() } else { v })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_floats_split_and_parse() {
        let h = HexFloat::split(b"-0X1.8p3").unwrap();
        assert!(h.negative);
        assert_eq!(
            (h.int_part, h.frac_part, h.exp),
            (&b"1"[..], &b"8"[..], Some(&b"3"[..]))
        );
        let h = HexFloat::split(b"0x.8").unwrap();
        assert_eq!(
            (h.int_part, h.frac_part, h.exp),
            (&b""[..], &b"8"[..], None)
        );
        for bad in [&b"0x"[..], b"0x.", b"0xp1", b"1.5", b"x10", b""] {
            assert!(HexFloat::split(bad).is_none(), "{bad:?}");
        }
        assert_eq!(parse_hex_float(b"0x1.8p3"), Dec::parse(b"12"));
        assert_eq!(parse_hex_float(b"-0X10"), Dec::parse(b"-16"));
        assert_eq!(parse_hex_float(b"0xg"), None);
    }

    #[test]
    fn string2ll_rules() {
        assert_eq!(parse_i64(b"0"), Some(0));
        assert_eq!(parse_i64(b"-9223372036854775808"), Some(i64::MIN));
        assert_eq!(parse_i64(b"9223372036854775807"), Some(i64::MAX));
        for bad in [
            &b"9223372036854775808"[..],
            b"+1",
            b"01",
            b" 1",
            b"1 ",
            b"",
            b"-",
            b"-0",
            b"1.0",
            b"abc",
        ] {
            assert_eq!(parse_i64(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn floats_like_strtod() {
        assert_eq!(parse_f64(b"1.5"), Some(1.5));
        assert_eq!(parse_f64(b"inf"), Some(f64::INFINITY));
        assert_eq!(parse_f64(b"-inf"), Some(f64::NEG_INFINITY));
        assert_eq!(parse_f64(b"1e3"), Some(1000.0));
        assert_eq!(parse_f64(b"nan"), None);
        assert_eq!(parse_f64(b" 1"), None);
        assert_eq!(parse_f64(b"1x"), None);
        assert_eq!(parse_f64(b""), None);
        // Out of range: strtod sets ERANGE and Redis refuses the value.
        assert_eq!(parse_f64(b"1e400"), None);
        assert_eq!(parse_f64(b"-1e400"), None);
        assert_eq!(parse_f64(b"1e-400"), None);
        assert_eq!(parse_f64(b"0e-400"), Some(0.0));
        assert_eq!(parse_f64(b"0.000e5"), Some(0.0));
        assert_eq!(parse_f64(b"1e-310"), Some(1e-310));
        assert_eq!(strtod_decimal(b"1e400"), Some((f64::INFINITY, true)));
        assert_eq!(strtod_decimal(b"-1e-400").map(|r| r.1), Some(true));
    }

    #[test]
    fn repr_escapes() {
        let mut v = Vec::new();
        repr_into(&mut v, b"a\"b\n\x01");
        assert_eq!(v, b"\"a\\\"b\\n\\x01\"");
    }
}
