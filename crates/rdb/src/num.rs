//! Redis's number texts, as the encodings use them.
//!
//! `string2ll` decides which strings are integers (integer encodings in RDB strings,
//! listpacks and intsets); `d2string` is how a sorted-set score is written into a listpack;
//! `strtod_prefix` reads the scores of old text-encoded sorted sets (`sscanf("%lg")`).

/// Redis's `string2ll` (and `lpStringToInt64`): the one parser the keyspace uses too (an
/// optional `-`, no leading zeros except "0" itself, no `+`, no spaces, within `i64`).
pub use meridian_crdt::string::parse_i64_redis as string2ll;

/// Redis's `double2ll`: the integer equal to `d` when `|d| <= LLONG_MAX/2` and `d` has no
/// fraction (-0.0 gives 0).
pub fn double2ll(d: f64) -> Option<i64> {
    let bound = (i64::MAX / 2) as f64;
    if !(d >= -bound && d <= bound) {
        return None;
    }
    let ll = d as i64;
    if ll as f64 == d { Some(ll) } else { None }
}

/// Redis's `d2string`: "nan", "inf", "-inf", "0", "-0", an integer when `double2ll` allows,
/// else `%.17g`.
pub fn d2string(v: f64) -> String {
    if v.is_nan() {
        return "nan".to_string();
    }
    if v.is_infinite() {
        return if v < 0.0 { "-inf" } else { "inf" }.to_string();
    }
    if v == 0.0 {
        return if v.is_sign_negative() { "-0" } else { "0" }.to_string();
    }
    match double2ll(v) {
        Some(ll) => ll.to_string(),
        None => format_g17(v),
    }
}

/// C's `%.17g` of a finite, non-zero double.
pub fn format_g17(v: f64) -> String {
    const PRECISION: i32 = 17;
    let e = format!("{:.*e}", (PRECISION - 1) as usize, v);
    let (mantissa, exp) = match e.split_once('e') {
        Some((m, x)) => (m.to_string(), x.parse::<i32>().unwrap_or(0)),
        None => (e.clone(), 0),
    };
    if !(-4..PRECISION).contains(&exp) {
        let m = trim_fraction_zeros(&mantissa);
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{m}e{sign}{:02}", exp.abs())
    } else {
        let decimals = (PRECISION - 1 - exp).max(0) as usize;
        trim_fraction_zeros(&format!("{v:.decimals$}"))
    }
}

fn trim_fraction_zeros(s: &str) -> String {
    if !s.contains('.') {
        return s.to_string();
    }
    let t = s.trim_end_matches('0');
    t.strip_suffix('.').unwrap_or(t).to_string()
}

/// `strtod` of the longest prefix of `s` (after leading spaces) that is a decimal number,
/// `inf`/`infinity` or `nan` (any case, signed); `None` when no prefix is one
/// (`sscanf("%lg")` matching nothing).
pub fn strtod_prefix(s: &[u8]) -> Option<f64> {
    let start = s.iter().position(|c| !c.is_ascii_whitespace())?;
    let t = s.get(start..)?;
    let (sign, body) = match t.first() {
        Some(b'-') => (-1.0, t.get(1..)?),
        Some(b'+') => (1.0, t.get(1..)?),
        _ => (1.0, t),
    };
    let lower: Vec<u8> = body.iter().take(8).map(u8::to_ascii_lowercase).collect();
    if lower.starts_with(b"inf") {
        return Some(sign * f64::INFINITY);
    }
    if lower.starts_with(b"nan") {
        return Some(f64::NAN);
    }
    let mut end = 0;
    let digits = |from: usize| {
        body.get(from..)
            .map_or(0, |r| r.iter().take_while(|c| c.is_ascii_digit()).count())
    };
    let int_digits = digits(0);
    end += int_digits;
    let mut frac_digits = 0;
    if body.get(end) == Some(&b'.') {
        frac_digits = digits(end + 1);
        if int_digits + frac_digits > 0 {
            end += 1 + frac_digits;
        }
    }
    if int_digits + frac_digits == 0 {
        return None;
    }
    if matches!(body.get(end), Some(b'e' | b'E')) {
        let mut k = end + 1;
        if matches!(body.get(k), Some(b'+' | b'-')) {
            k += 1;
        }
        let exp_digits = digits(k);
        if exp_digits > 0 {
            end = k + exp_digits;
        }
    }
    let text = std::str::from_utf8(body.get(..end)?).ok()?;
    text.parse::<f64>().ok().map(|v| sign * v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_like_string2ll() {
        assert_eq!(string2ll(b"0"), Some(0));
        assert_eq!(string2ll(b"-1"), Some(-1));
        assert_eq!(string2ll(b"9223372036854775807"), Some(i64::MAX));
        assert_eq!(string2ll(b"-9223372036854775808"), Some(i64::MIN));
        for s in [
            "",
            "-",
            "-0",
            "01",
            "+1",
            " 1",
            "1 ",
            "9223372036854775808",
            "1.0",
        ] {
            assert_eq!(string2ll(s.as_bytes()), None, "{s:?}");
        }
    }

    #[test]
    fn scores_like_d2string() {
        assert_eq!(d2string(1.0), "1");
        assert_eq!(d2string(-0.0), "-0");
        assert_eq!(d2string(1.5), "1.5");
        assert_eq!(d2string(0.1), "0.10000000000000001");
        assert_eq!(d2string(1e300), "1.0000000000000001e+300");
        assert_eq!(d2string(f64::INFINITY), "inf");
        assert_eq!(d2string(f64::NEG_INFINITY), "-inf");
        assert_eq!(double2ll(-0.0), Some(0));
        assert_eq!(double2ll(1e19), None);
        assert_eq!(double2ll(0.5), None);
    }

    #[test]
    fn strtod_takes_the_longest_number_prefix() {
        assert_eq!(strtod_prefix(b"1.5"), Some(1.5));
        assert_eq!(strtod_prefix(b"  -2e3xyz"), Some(-2000.0));
        assert_eq!(strtod_prefix(b"3."), Some(3.0));
        assert_eq!(strtod_prefix(b".5"), Some(0.5));
        assert_eq!(strtod_prefix(b"1e"), Some(1.0));
        assert_eq!(strtod_prefix(b"-inf"), Some(f64::NEG_INFINITY));
        assert!(strtod_prefix(b"nan").is_some_and(f64::is_nan));
        assert_eq!(strtod_prefix(b"abc"), None);
        assert_eq!(strtod_prefix(b"."), None);
        assert_eq!(strtod_prefix(b""), None);
    }
}
