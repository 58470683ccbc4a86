//! `Dec`: the exact decimal behind float increments (INCRBYFLOAT, HINCRBYFLOAT, ZINCRBY).
//!
//! Redis adds in C `long double` and prints with `%.17Lf`, trailing zeros trimmed
//! (`ld2string(..., LD_STR_HUMAN)`), so that `1 + -1.1` prints `-0.1`. Binary `f64` cannot do
//! that (`-0.10000000000000009`). `Dec` keeps a signed 128-bit coefficient and a decimal
//! exponent, rounds to `DIGITS_MAX` significant digits (half-even), and formats the way Redis
//! does, so results are the ones a user typing decimals expects.
//!
//! Where they differ: `long double` holds about 19 significant digits, `Dec` holds 34, so
//! `1e20 + 0.1` is `100000000000000000000.1` here and `100000000000000000000` in Redis. The
//! server computes each command's reply in `long double` as Redis does and moves the counter
//! by the difference (`meridian_server::cmd::ext80`); `Dec` keeps the sum of such increments
//! the same at every site whatever their order.

use std::cmp::Ordering;

/// Significant decimal digits kept; results are rounded half-even to this many.
pub const DIGITS_MAX: u32 = 34;
/// Largest adjusted exponent (exponent of the leading digit) accepted: `long double`'s range
/// ends near `1.19e4932`. A result beyond it is refused, as Redis refuses an infinite result.
pub const ADJ_EXP_MAX: i32 = 4932;
/// Smallest adjusted exponent accepted by `parse` (`long double` subnormals end near
/// `3.6e-4951`; strtold reports ERANGE below and Redis refuses the input).
pub const ADJ_EXP_MIN: i32 = -4951;

/// An exact decimal `coef * 10^exp`, in canonical form: `coef` has no trailing zero digit
/// and at most `DIGITS_MAX` digits; zero is `0e0`. Equality and order are numeric.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Dec {
    // Invariant: |coef| < 10^34; coef % 10 != 0 unless coef == 0; coef == 0 => exp == 0.
    coef: i128,
    exp: i32,
}

fn pow10(n: u32) -> Option<i128> {
    10i128.checked_pow(n)
}

/// Number of decimal digits of `v` (`0` has 1).
fn digits(v: u128) -> u32 {
    if v == 0 { 1 } else { v.ilog10() + 1 }
}

/// `v / 10^n` rounded half-even, with `inexact_below` saying that the true value was
/// slightly larger in magnitude than `v` (a sticky bit from an earlier truncation).
fn div_pow10_half_even(v: u128, n: u32, inexact_below: bool) -> u128 {
    if n == 0 {
        return v;
    }
    if n > 38 {
        return 0; // v < 2^128 < 0.5 * 10^39
    }
    let p = 10u128.pow(n);
    let q = v / p;
    let r = v % p;
    let half = p / 2;
    let up = match r.cmp(&half) {
        Ordering::Greater => true,
        Ordering::Less => false,
        Ordering::Equal => inexact_below || q % 2 == 1,
    };
    if up { q + 1 } else { q }
}

impl Dec {
    pub const ZERO: Dec = Dec { coef: 0, exp: 0 };

    /// Builds a canonical `Dec` from a sign, magnitude and exponent, rounding to `DIGITS_MAX`
    /// digits; `inexact_below` marks a magnitude truncated from a larger one. `None` when the
    /// exponent leaves `i32` or the value exceeds `ADJ_EXP_MAX`.
    fn build(negative: bool, mag: u128, exp: i64, inexact_below: bool) -> Option<Dec> {
        let mut mag = mag;
        let mut exp = exp;
        let n = digits(mag);
        if n > DIGITS_MAX {
            let drop = n - DIGITS_MAX;
            mag = div_pow10_half_even(mag, drop, inexact_below);
            exp += i64::from(drop);
            if digits(mag) > DIGITS_MAX {
                mag /= 10;
                exp += 1;
            }
        }
        if mag == 0 {
            return Some(Dec::ZERO);
        }
        while mag % 10 == 0 {
            mag /= 10;
            exp += 1;
        }
        let adj = exp + i64::from(digits(mag)) - 1;
        if adj > i64::from(ADJ_EXP_MAX) {
            return None;
        }
        let exp = i32::try_from(exp).ok()?;
        let coef = i128::try_from(mag).ok()?;
        Some(Dec {
            coef: if negative { -coef } else { coef },
            exp,
        })
    }

    pub fn from_i64(v: i64) -> Dec {
        Dec::from_i128(i128::from(v))
    }

    /// `v` rounded to `DIGITS_MAX` significant digits.
    pub fn from_i128(v: i128) -> Dec {
        Dec::build(v < 0, v.unsigned_abs(), 0, false).unwrap_or(Dec::ZERO)
    }

    /// Parses what Redis's `string2ld` (strtold) accepts as a finite decimal: optional sign,
    /// digits with an optional `.`, optional exponent `e`/`E` with optional sign and digits.
    /// No spaces, no empty input. `None` for anything else, including `inf`, `nan`, hex
    /// floats and values outside `long double`'s range (the server handles `inf` itself).
    pub fn parse(s: &[u8]) -> Option<Dec> {
        let mut i = 0usize;
        let mut negative = false;
        match s.first() {
            Some(b'-') => {
                negative = true;
                i = 1;
            }
            Some(b'+') => i = 1,
            _ => {}
        }
        let mut mag: u128 = 0;
        let mut kept: u32 = 0; // significant digits accumulated in mag
        let mut exp: i64 = 0;
        let mut any_digit = false;
        let mut dropped_first: Option<u8> = None; // first digit beyond DIGITS_MAX + 2
        let mut sticky = false;
        let mut seen_dot = false;
        while let Some(&c) = s.get(i) {
            match c {
                b'0'..=b'9' => {
                    any_digit = true;
                    let d = c - b'0';
                    if mag == 0 && d == 0 {
                        // leading zero: only moves the exponent when after the point
                        if seen_dot {
                            exp -= 1;
                        }
                    } else if kept < DIGITS_MAX + 2 {
                        mag = mag * 10 + u128::from(d);
                        kept += 1;
                        if seen_dot {
                            exp -= 1;
                        }
                    } else {
                        if dropped_first.is_none() {
                            dropped_first = Some(d);
                        } else if d != 0 {
                            sticky = true;
                        }
                        if !seen_dot {
                            exp += 1;
                        }
                    }
                }
                b'.' if !seen_dot => seen_dot = true,
                _ => break,
            }
            i += 1;
        }
        if !any_digit {
            return None;
        }
        if let Some(&c) = s.get(i) {
            if c != b'e' && c != b'E' {
                return None;
            }
            i += 1;
            let mut eneg = false;
            match s.get(i) {
                Some(b'-') => {
                    eneg = true;
                    i += 1;
                }
                Some(b'+') => i += 1,
                _ => {}
            }
            let mut e: i64 = 0;
            let mut edigits = false;
            while let Some(&c) = s.get(i) {
                if !c.is_ascii_digit() {
                    return None;
                }
                edigits = true;
                e = (e * 10 + i64::from(c - b'0')).min(1_000_000_000);
                i += 1;
            }
            if !edigits {
                return None;
            }
            exp += if eneg { -e } else { e };
        }
        // Fold the dropped digits into one guard digit plus sticky, then round.
        let inexact = sticky;
        if let Some(d) = dropped_first {
            // mag holds DIGITS_MAX + 2 digits; append the guard digit as a final digit.
            mag = mag * 10 + u128::from(d);
            exp -= 1;
        }
        if mag == 0 {
            return Some(Dec::ZERO);
        }
        let adj = exp + i64::from(digits(mag)) - 1;
        if adj > i64::from(ADJ_EXP_MAX) + 1 || adj < i64::from(ADJ_EXP_MIN) {
            return None;
        }
        Dec::build(negative, mag, exp, inexact)
    }

    /// `self + other`, rounded to `DIGITS_MAX` digits; `None` past `long double`'s range
    /// (so not `std::ops::Add`).
    #[allow(clippy::should_implement_trait)]
    pub fn add(self, other: Dec) -> Option<Dec> {
        if self.coef == 0 {
            return Some(other);
        }
        if other.coef == 0 {
            return Some(self);
        }
        // big: the operand with the larger exponent.
        let (big, small) = if self.exp >= other.exp {
            (self, other)
        } else {
            (other, self)
        };
        let gap = i64::from(big.exp) - i64::from(small.exp);
        // Scale big up to at most 37 digits (fits i128 with room for a carry).
        let room = 37 - digits(big.coef.unsigned_abs());
        let k = u32::try_from(gap.min(i64::from(room))).unwrap_or(0);
        let big_c = big.coef.checked_mul(pow10(k)?)?;
        let e = i64::from(big.exp) - i64::from(k);
        let d = u32::try_from(e - i64::from(small.exp)).ok()?;
        if d == 0 {
            let sum = big_c.checked_add(small.coef)?;
            return Dec::build(sum < 0, sum.unsigned_abs(), e, false);
        }
        // Truncate small to exponent e; |small| is far below |big| here, so the sum keeps
        // more than DIGITS_MAX digits and a sticky bit suffices for correct rounding.
        let q = if d > 38 { 0 } else { small.coef / pow10(d)? };
        let inexact = d > 38 || small.coef % pow10(d)? != 0;
        let mut sum = big_c.checked_add(q)?;
        if inexact && (small.coef < 0) != (sum < 0) {
            // true sum is between sum and sum - sign(small): truncate toward zero
            sum += if small.coef < 0 { -1 } else { 1 };
        }
        Dec::build(sum < 0, sum.unsigned_abs(), e, inexact)
    }

    #[allow(clippy::should_implement_trait)]
    pub fn neg(self) -> Dec {
        Dec {
            coef: -self.coef,
            exp: self.exp,
        }
    }

    pub fn is_zero(&self) -> bool {
        self.coef == 0
    }

    pub fn is_negative(&self) -> bool {
        self.coef < 0
    }

    /// The value as an `i64` when it is a whole number that fits.
    pub fn to_i64_exact(&self) -> Option<i64> {
        if self.exp >= 0 {
            let v = self
                .coef
                .checked_mul(pow10(u32::try_from(self.exp).ok()?)?)?;
            i64::try_from(v).ok()
        } else {
            // canonical: coef has no trailing zero, so a negative exponent means a fraction
            None
        }
    }

    /// The nearest `f64` (infinite beyond its range).
    pub fn to_f64(&self) -> f64 {
        format!("{}e{}", self.coef, self.exp)
            .parse::<f64>()
            .unwrap_or(f64::NAN)
    }

    /// Redis's `ld2string(.., LD_STR_HUMAN)`: `%.17Lf` (rounded half-even on the decimal
    /// value), trailing zeros and a trailing `.` removed, `-0` printed as `0`.
    pub fn format_redis(&self) -> String {
        let negative = self.coef < 0;
        let mut mag = self.coef.unsigned_abs();
        let mut exp = self.exp;
        if exp < -17 {
            let drop = u32::try_from(-17 - i64::from(exp)).unwrap_or(u32::MAX);
            mag = div_pow10_half_even(mag, drop, false);
            exp = -17;
        }
        if mag == 0 {
            return "0".to_string();
        }
        let mut out = String::new();
        if negative {
            out.push('-');
        }
        let ds = mag.to_string();
        if exp >= 0 {
            out.push_str(&ds);
            for _ in 0..exp {
                out.push('0');
            }
            return out;
        }
        let frac_len = usize::try_from(-i64::from(exp)).unwrap_or(0);
        let (int_part, frac_part) = if ds.len() > frac_len {
            let (a, b) = ds.split_at(ds.len() - frac_len);
            (a.to_string(), b.to_string())
        } else {
            (
                "0".to_string(),
                format!("{}{}", "0".repeat(frac_len - ds.len()), ds),
            )
        };
        let frac_trim = frac_part.trim_end_matches('0');
        out.push_str(&int_part);
        if !frac_trim.is_empty() {
            out.push('.');
            out.push_str(frac_trim);
        }
        out
    }

    fn cmp_mag(&self, other: &Dec) -> Ordering {
        let (a, b) = (self.coef.unsigned_abs(), other.coef.unsigned_abs());
        let (da, db) = (digits(a), digits(b));
        let adj_a = i64::from(self.exp) + i64::from(da);
        let adj_b = i64::from(other.exp) + i64::from(db);
        if adj_a != adj_b {
            return adj_a.cmp(&adj_b);
        }
        // Same leading position: pad the shorter coefficient (both < 10^34).
        let n = da.max(db);
        let pa = a * 10u128.pow(n - da);
        let pb = b * 10u128.pow(n - db);
        pa.cmp(&pb)
    }
}

impl Ord for Dec {
    fn cmp(&self, other: &Dec) -> Ordering {
        let (sa, sb) = (self.coef.signum(), other.coef.signum());
        if sa != sb {
            return sa.cmp(&sb);
        }
        match sa {
            0 => Ordering::Equal,
            1 => self.cmp_mag(other),
            _ => other.cmp_mag(self),
        }
    }
}

impl std::ops::Neg for Dec {
    type Output = Dec;
    fn neg(self) -> Dec {
        Dec::neg(self)
    }
}

impl PartialOrd for Dec {
    fn partial_cmp(&self, other: &Dec) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Dec {
    /// The coefficient and exponent (`self == coef × 10^exp`), for binary encodings.
    pub fn to_parts(&self) -> (i128, i32) {
        (self.coef, self.exp)
    }

    /// Rebuilds a `Dec` from `to_parts` output (canonicalizing it); `None` when out of range.
    pub fn from_parts(coef: i128, exp: i32) -> Option<Dec> {
        Dec::build(coef < 0, coef.unsigned_abs(), i64::from(exp), false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Dec {
        Dec::parse(s.as_bytes()).unwrap()
    }

    fn sum(a: &str, b: &str) -> String {
        p(a).add(p(b)).unwrap().format_redis()
    }

    #[test]
    fn examples_from_redis() {
        assert_eq!(sum("1", "-1.1"), "-0.1");
        assert_eq!(sum("10.5", "0.1"), "10.6");
        assert_eq!(sum("17179869184", "1.5"), "17179869185.5");
        assert_eq!(p("3.0").format_redis(), "3");
        assert_eq!(p("1e3").format_redis(), "1000");
        assert_eq!(sum("0.1", "0.2"), "0.3");
        assert_eq!(p("5.0e3").format_redis(), "5000");
        assert_eq!(sum("5.0e3", "200"), "5200");
    }

    #[test]
    fn parse_accepts_strtold_decimal_forms() {
        for s in [
            "1",
            "+1",
            "-1",
            "1.",
            ".5",
            "-.5",
            "00012.3400",
            "1e5",
            "1E+5",
            "1e-5",
            "0",
            "-0",
            "0.0e0",
        ] {
            assert!(Dec::parse(s.as_bytes()).is_some(), "{s}");
        }
        assert_eq!(p(".5").format_redis(), "0.5");
        assert_eq!(p("-0").format_redis(), "0");
        assert_eq!(p("-0.0").format_redis(), "0");
        assert_eq!(p("1.").format_redis(), "1");
        assert_eq!(p("00012.3400").format_redis(), "12.34");
    }

    #[test]
    fn parse_rejects_the_rest() {
        for s in [
            "", " 1", "1 ", "+", "-", ".", "e5", "1e", "1e+", "1.2.3", "nan", "inf", "-inf",
            "0x10", "1x", "--1", "1e99999", "1e-99999",
        ] {
            assert!(Dec::parse(s.as_bytes()).is_none(), "{s:?}");
        }
        assert!(Dec::parse(b"1e-99999999999999999999999").is_none());
        assert!(Dec::parse(b"0e99999999999").unwrap().is_zero());
    }

    #[test]
    fn equality_and_order_are_numeric() {
        assert_eq!(p("1.0"), p("1"));
        assert_eq!(p("100"), p("1e2"));
        assert!(p("-2") < p("-1.5"));
        assert!(p("0.001") < p("0.01"));
        assert!(p("10") > p("9.99999"));
        assert!(p("-0.1") < Dec::ZERO);
    }

    #[test]
    fn rounds_to_34_digits_half_even() {
        // 35 digits: ...5 exactly half, previous digit even -> stays
        let d = p("1234567890123456789012345678901234.5");
        assert_eq!(d, p("1234567890123456789012345678901234"));
        let d = p("1234567890123456789012345678901233.5");
        assert_eq!(d, p("1234567890123456789012345678901234"));
        let d = p("1234567890123456789012345678901234.50001");
        assert_eq!(d, p("1234567890123456789012345678901235"));
        let d = p("1234567890123456789012345678901234.500000000000000000000000000000001");
        assert_eq!(d, p("1234567890123456789012345678901235"));
    }

    #[test]
    fn add_with_wide_exponent_gap_rounds_correctly() {
        let big = p("1e40");
        let tiny = p("1e-40");
        assert_eq!(big.add(tiny).unwrap(), big);
        assert_eq!(big.add(tiny.neg()).unwrap(), big); // 99..9.99..9 rounds up to 1e40
        let e34 = p("1e34");
        assert_eq!(e34.add(p("5")).unwrap(), e34); // tie, even
        assert_eq!(
            e34.add(p("4.999999999999999999999999999999999")).unwrap(),
            e34
        );
        assert_eq!(
            e34.add(p("5.000000000000000000000000000000001")).unwrap(),
            p("1000000000000000000000000000000001e1")
        );
        assert_eq!(
            e34.add(p("15")).unwrap(),
            p("1000000000000000000000000000000002e1")
        ); // tie, even up
        assert_eq!(p("1e36").add(p("-0.0000001")).unwrap(), p("1e36"));
        assert_eq!(
            p("1e20").add(p("0.1")).unwrap().format_redis(),
            "100000000000000000000.1"
        );
        // exactly half at the 34th digit plus a tiny bit -> up
        let a = p("1e33");
        let b = p("0.5");
        assert_eq!(a.add(b).unwrap(), p("1e33")); // 1000..0.5 -> half-even down (35 digits)
        let c = p("0.5000000000000000000001");
        assert_eq!(a.add(c).unwrap(), p("1000000000000000000000000000000001"));
        assert_eq!(p("1").add(p("-1")).unwrap(), Dec::ZERO);
    }

    #[test]
    fn add_refuses_overflow_past_long_double() {
        let m = p("9e4932");
        assert!(m.add(m).is_none());
        assert!(m.add(m.neg()).is_some());
    }

    #[test]
    fn formats_with_17_decimals() {
        assert_eq!(
            p("0.123456789012345678").format_redis(),
            "0.12345678901234568"
        );
        assert_eq!(p("0.000000000000000001").format_redis(), "0");
        assert_eq!(p("-0.000000000000000001").format_redis(), "0");
        assert_eq!(p("0.000000000000000005").format_redis(), "0");
        assert_eq!(
            p("0.000000000000000015").format_redis(),
            "0.00000000000000002"
        );
        assert_eq!(p("-12.5").format_redis(), "-12.5");
        assert_eq!(p("1e-300").format_redis(), "0");
        assert_eq!(p("1.5e20").format_redis(), "150000000000000000000");
    }

    #[test]
    fn converts_to_integers_and_floats() {
        assert_eq!(p("12").to_i64_exact(), Some(12));
        assert_eq!(p("1.2e1").to_i64_exact(), Some(12));
        assert_eq!(p("1.5").to_i64_exact(), None);
        assert_eq!(p("1e30").to_i64_exact(), None);
        assert_eq!(p("-9223372036854775808").to_i64_exact(), Some(i64::MIN));
        assert_eq!(p("2.5").to_f64(), 2.5);
        assert_eq!(Dec::from_i64(-7).format_redis(), "-7");
        assert_eq!(Dec::from_i128(i128::MAX).to_i64_exact(), None);
    }
}
