//! C's `long double` on x86-64 (the x87 80-bit extended format: a 64-bit significand and a
//! 15-bit exponent), as far as INCRBYFLOAT and HINCRBYFLOAT use it in Redis: the nearest
//! value to a decimal (`strtold`), one addition, and `%.17Lf` with the trailing zeros cut
//! (`ld2string(..., LD_STR_HUMAN)`).
//!
//! Redis's replies show that format's rounding: `INCRBYFLOAT k 12345.678` answers
//! `12345.67799999999999994`, and `1e18 + 0.3` answers `1000000000000000000.25`. The exact
//! decimal `Dec` (the CRDT's float counter, which must add in any order alike) would answer
//! `12345.678`. So the commands compute their reply here, the way one Redis would, and
//! store that reply as the new value (`cmd::string::incrbyfloat`).
//!
//! Arithmetic is exact on integers and rounds once, half to even, as the x87 unit does in
//! its default mode. Values below the smallest normal `long double` (about 3.4e-4932) are
//! not modelled: `None`, and the caller keeps the decimal result.

use std::cmp::Ordering;

use meridian_crdt::Dec;

use crate::error::CmdError;

/// Significand bits of the format.
const SIG_BITS: u32 = 64;
/// `sig * 2^exp` is below 2^16384 for every finite value.
const EXP_MAX: i32 = 16384 - SIG_BITS as i32;
/// The smallest normal value is 2^-16382: the exponent of its significand's lowest bit.
const EXP_MIN: i32 = -16382 - (SIG_BITS as i32 - 1);
/// Fractional digits of `%.17Lf`.
const FRACTION_DIGITS: u32 = 17;

/// A finite, normal (or zero) `long double`: `(-1)^neg * sig * 2^exp`, `sig`'s top bit set
/// unless the value is zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ext80 {
    neg: bool,
    sig: u64,
    exp: i32,
}

/// An unsigned integer of any size, little-endian 32-bit limbs, no leading zero limb.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Big(Vec<u32>);

impl Big {
    fn from_u128(mut v: u128) -> Big {
        let mut limbs = Vec::new();
        while v != 0 {
            limbs.push(v as u32);
            v >>= 32;
        }
        Big(limbs)
    }

    fn trim(&mut self) {
        while self.0.last() == Some(&0) {
            self.0.pop();
        }
    }

    fn is_zero(&self) -> bool {
        self.0.is_empty()
    }

    fn bit_len(&self) -> u32 {
        match self.0.last() {
            None => 0,
            Some(top) => (self.0.len() as u32 - 1) * 32 + (32 - top.leading_zeros()),
        }
    }

    fn bit(&self, i: u32) -> bool {
        self.0
            .get((i / 32) as usize)
            .is_some_and(|l| l >> (i % 32) & 1 == 1)
    }

    /// Whether any bit below `i` is set.
    fn any_below(&self, i: u32) -> bool {
        let whole = (i / 32) as usize;
        let low_limbs = self.0.iter().take(whole).any(|&l| l != 0);
        let part = i % 32;
        low_limbs
            || (part != 0
                && self
                    .0
                    .get(whole)
                    .is_some_and(|&l| l & ((1u32 << part) - 1) != 0))
    }

    /// Bits `from..from + 64` as an integer.
    fn bits64(&self, from: u32) -> u64 {
        let mut v = 0u64;
        for i in (0..64).rev() {
            v = (v << 1) | u64::from(self.bit(from + i));
        }
        v
    }

    fn mul_small(&mut self, m: u32) {
        let mut carry = 0u64;
        for l in &mut self.0 {
            let p = u64::from(*l) * u64::from(m) + carry;
            *l = p as u32;
            carry = p >> 32;
        }
        if carry != 0 {
            self.0.push(carry as u32);
        }
    }

    fn mul_pow10(&mut self, mut n: u32) {
        while n >= 9 {
            self.mul_small(1_000_000_000);
            n -= 9;
        }
        if n > 0 {
            self.mul_small(10u32.pow(n));
        }
    }

    fn shl(&mut self, bits: u32) {
        let limbs = (bits / 32) as usize;
        let part = bits % 32;
        if part != 0 {
            let mut carry = 0u32;
            for l in &mut self.0 {
                let next = *l >> (32 - part);
                *l = (*l << part) | carry;
                carry = next;
            }
            if carry != 0 {
                self.0.push(carry);
            }
        }
        if limbs > 0 && !self.is_zero() {
            self.0.splice(0..0, std::iter::repeat_n(0, limbs));
        }
    }

    fn cmp(&self, other: &Big) -> Ordering {
        self.0
            .len()
            .cmp(&other.0.len())
            .then_with(|| self.0.iter().rev().cmp(other.0.iter().rev()))
    }

    /// `self -= other`; `other` must not be larger.
    fn sub_assign(&mut self, other: &Big) {
        let mut borrow = 0i64;
        for (i, l) in self.0.iter_mut().enumerate() {
            let o = i64::from(other.0.get(i).copied().unwrap_or(0));
            let mut d = i64::from(*l) - o - borrow;
            borrow = 0;
            if d < 0 {
                d += 1 << 32;
                borrow = 1;
            }
            *l = d as u32;
        }
        self.trim();
    }

    /// `self >>= 1`.
    fn shr1(&mut self) {
        let mut carry = 0u32;
        for l in self.0.iter_mut().rev() {
            let next = *l << 31;
            *l = (*l >> 1) | carry;
            carry = next;
        }
        self.trim();
    }

    /// Divides by `d`, returning the remainder.
    fn div_small(&mut self, d: u32) -> u32 {
        let mut rem = 0u64;
        for l in self.0.iter_mut().rev() {
            let cur = (rem << 32) | u64::from(*l);
            *l = (cur / u64::from(d)) as u32;
            rem = cur % u64::from(d);
        }
        self.trim();
        rem as u32
    }

    fn to_decimal(&self) -> String {
        if self.is_zero() {
            return "0".to_string();
        }
        let mut v = self.clone();
        let mut chunks = Vec::new();
        while !v.is_zero() {
            chunks.push(v.div_small(1_000_000_000));
        }
        let mut s = String::new();
        for (i, c) in chunks.iter().rev().enumerate() {
            if i == 0 {
                s.push_str(&c.to_string());
            } else {
                s.push_str(&format!("{c:09}"));
            }
        }
        s
    }
}

/// Rounds `q` (at least 64 bits, at most 128) to 64 bits, half to even; `sticky`: the value
/// was larger than `q` by less than one of its units. Returns the significand and how many
/// bits were dropped.
fn round_to_sig(q: u128, sticky: bool) -> (u64, i32) {
    let len = 128 - q.leading_zeros();
    if len <= SIG_BITS {
        return ((q as u64) << (SIG_BITS - len), -((SIG_BITS - len) as i32));
    }
    let drop = len - SIG_BITS;
    let kept = (q >> drop) as u64;
    let half = q >> (drop - 1) & 1 == 1;
    let rest = q & ((1u128 << (drop - 1)) - 1) != 0 || sticky;
    let up = half && (rest || kept & 1 == 1);
    match kept.checked_add(u64::from(up)) {
        Some(s) => (s, drop as i32),
        None => (1 << 63, drop as i32 + 1),
    }
}

impl Ext80 {
    const ZERO: Ext80 = Ext80 {
        neg: false,
        sig: 0,
        exp: 0,
    };

    fn checked(neg: bool, sig: u64, exp: i32) -> Option<Ext80> {
        if sig == 0 {
            return Some(Ext80 { neg, ..Ext80::ZERO });
        }
        (EXP_MIN..=EXP_MAX)
            .contains(&exp)
            .then_some(Ext80 { neg, sig, exp })
    }

    /// The `long double` nearest to `d` (what `strtold` reads from its text).
    pub fn from_dec(d: Dec) -> Option<Ext80> {
        let (coef, exp10) = d.to_parts();
        let neg = coef < 0;
        let mut n = Big::from_u128(coef.unsigned_abs());
        if n.is_zero() {
            return Some(Ext80 { neg, ..Ext80::ZERO });
        }
        if exp10 >= 0 {
            n.mul_pow10(exp10.unsigned_abs());
            let len = n.bit_len();
            if len <= SIG_BITS {
                let (sig, shift) = round_to_sig(u128::from(n.bits64(0)), false);
                return Ext80::checked(neg, sig, shift);
            }
            let from = len - SIG_BITS;
            // The top 64 bits and the one below them, with the rest as a sticky bit.
            let top = (u128::from(n.bits64(from)) << 1) | u128::from(n.bit(from - 1));
            let (sig, shift) = round_to_sig(top, n.any_below(from - 1));
            return Ext80::checked(neg, sig, shift + from as i32 - 1);
        }
        // n / 10^k: scale so that the quotient has 66 or 67 bits, then round.
        let mut den = Big::from_u128(1);
        den.mul_pow10(exp10.unsigned_abs());
        let scale = 66 - (n.bit_len() as i32 - den.bit_len() as i32);
        if scale >= 0 {
            n.shl(scale as u32);
        } else {
            den.shl(scale.unsigned_abs());
        }
        // Long division, one quotient bit at a time from bit 67: `den` shifted once, then
        // halved at each step.
        let mut q = 0u128;
        den.shl(67);
        for bit in (0..68).rev() {
            if n.cmp(&den) != Ordering::Less {
                n.sub_assign(&den);
                q |= 1 << bit;
            }
            den.shr1();
        }
        let (sig, shift) = round_to_sig(q, !n.is_zero());
        Ext80::checked(neg, sig, shift - scale)
    }

    /// The `long double` nearest to the hexadecimal significand `digits` (each below 16,
    /// most significant first) times `2^exp2`: what `strtold` reads from a hex float. None
    /// when that is not a normal value or zero.
    pub fn from_hex(neg: bool, digits: impl Iterator<Item = u32>, exp2: i64) -> Option<Ext80> {
        let mut acc = 0u128;
        let mut dropped = 0i64;
        let mut sticky = false;
        for d in digits {
            // 120 bits and more are far past the 66 that rounding needs.
            if acc >> 120 == 0 {
                acc = acc * 16 + u128::from(d);
            } else {
                dropped += 4;
                sticky |= d != 0;
            }
        }
        if acc == 0 {
            return Some(Ext80 { neg, ..Ext80::ZERO });
        }
        let (sig, shift) = round_to_sig(acc, sticky);
        let exp = i32::try_from(exp2.checked_add(dropped)?.checked_add(i64::from(shift))?).ok()?;
        Ext80::checked(neg, sig, exp)
    }

    /// The exact value rounded half to even to `Dec`'s 34 digits (which read back as this
    /// same `long double`).
    pub fn to_dec(&self) -> Option<Dec> {
        let mut n = Big::from_u128(u128::from(self.sig));
        let scale = if self.exp >= 0 {
            n.shl(self.exp.unsigned_abs());
            0
        } else {
            // sig * 2^-k = sig * 5^k / 10^k.
            let k = self.exp.unsigned_abs();
            for _ in 0..k / 13 {
                n.mul_small(1_220_703_125); // 5^13
            }
            n.mul_small(5u32.pow(k % 13));
            i64::from(k)
        };
        let digits = n.to_decimal();
        let kept_len = digits.len().min(meridian_crdt::DIGITS_MAX as usize);
        let (kept, rest) = digits.split_at(kept_len);
        let mut coef: i128 = kept.parse().ok()?;
        let mut rest_digits = rest.bytes();
        if let Some(next) = rest_digits.next() {
            let beyond = rest_digits.any(|c| c != b'0');
            if next > b'5' || (next == b'5' && (beyond || coef % 2 == 1)) {
                coef += 1;
            }
        }
        let exp = i64::try_from(rest.len()).ok()? - scale;
        Dec::from_parts(
            if self.neg { -coef } else { coef },
            i32::try_from(exp).ok()?,
        )
    }

    /// `self + other`, rounded once; None when it overflows or falls below the normal range.
    pub fn checked_add(self, other: Ext80) -> Option<Ext80> {
        if other.sig == 0 {
            return Some(if self.sig == 0 {
                // -0 + -0 is -0; any other sum of zeros is +0.
                Ext80 {
                    neg: self.neg && other.neg,
                    ..Ext80::ZERO
                }
            } else {
                self
            });
        }
        if self.sig == 0 {
            return Some(other);
        }
        let (x, y) = if self.exp >= other.exp {
            (self, other)
        } else {
            (other, self)
        };
        // 62 guard bits below both significands: the larger never shifts.
        const GUARD: u32 = 62;
        let a = u128::from(x.sig) << GUARD;
        let d = x.exp.abs_diff(y.exp);
        let wide = u128::from(y.sig) << GUARD;
        let (b, mut sticky) = if d >= 126 {
            (0, true)
        } else {
            (wide >> d, d > 0 && wide & ((1u128 << d) - 1) != 0)
        };
        let (neg, sum) = if x.neg == y.neg {
            (x.neg, a + b)
        } else if a >= b {
            // The true subtrahend is a little more than `b` when bits were lost.
            (x.neg, a - b - u128::from(sticky))
        } else {
            (y.neg, b - a)
        };
        if sum == 0 && !sticky {
            return Some(Ext80::ZERO);
        }
        if sum == 0 {
            sticky = false;
        }
        let (sig, shift) = round_to_sig(sum, sticky);
        Ext80::checked(neg, sig, x.exp - GUARD as i32 + shift)
    }

    /// `%.17Lf`, trailing zeros after the point cut, the point too when nothing follows it,
    /// and `-0` written `0` (Redis's `ld2string` with `LD_STR_HUMAN`).
    pub fn format_human(&self) -> String {
        let digits = if self.exp >= 0 {
            let mut n = Big::from_u128(u128::from(self.sig));
            n.shl(self.exp.unsigned_abs());
            n.mul_pow10(FRACTION_DIGITS);
            n.to_decimal()
        } else {
            // sig * 10^17 < 2^121: the fraction rounds in 128 bits.
            let scaled = u128::from(self.sig) * 10u128.pow(FRACTION_DIGITS);
            let n = self.exp.unsigned_abs();
            let q = if n >= 128 {
                0
            } else {
                let q = scaled >> n;
                let rem = scaled & ((1u128 << n) - 1);
                let half = 1u128 << (n - 1);
                match rem.cmp(&half) {
                    Ordering::Greater => q + 1,
                    Ordering::Equal if q & 1 == 1 => q + 1,
                    _ => q,
                }
            };
            q.to_string()
        };
        let width = FRACTION_DIGITS as usize + 1;
        let padded = if digits.len() < width {
            format!("{digits:0>width$}")
        } else {
            digits
        };
        let (int_part, frac) = padded.split_at(padded.len() - FRACTION_DIGITS as usize);
        let frac = frac.trim_end_matches('0');
        let mut out = String::with_capacity(padded.len() + 2);
        let zero = int_part == "0" && frac.is_empty();
        if self.neg && !zero {
            out.push('-');
        }
        out.push_str(int_part);
        if !frac.is_empty() {
            out.push('.');
            out.push_str(frac);
        }
        out
    }
}

/// What Redis answers to an increment of `current` by `by` in `long double`: None where this
/// module does not model the format (subnormal results) or the sum overflows it.
pub fn redis_sum_text(current: Dec, by: Dec) -> Option<String> {
    let sum = Ext80::from_dec(current)?.checked_add(Ext80::from_dec(by)?)?;
    Some(sum.format_human())
}

/// An INCRBYFLOAT or HINCRBYFLOAT of a decimal counter, as one Redis answers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FloatIncrement {
    /// The reply, and the value the counter must show after it.
    pub text: String,
    /// The increment that brings the counter from `current` to `text` (None: `text` is not
    /// a decimal of `Dec`'s precision; assign it instead).
    pub delta: Option<Dec>,
}

/// The increment of `current` by `by`: Redis's reply, and the counter's delta to it. An
/// infinite sum is refused as Redis refuses it; where this module does not model the
/// format, the decimal sum.
pub fn float_increment(current: Dec, by: Dec) -> Result<FloatIncrement, CmdError> {
    let exact = current.add(by).ok_or(CmdError::NanOrInfinity)?;
    let modelled = match (Ext80::from_dec(current), Ext80::from_dec(by)) {
        (Some(a), Some(b)) => Some(a.checked_add(b)),
        _ => None,
    };
    match modelled {
        Some(Some(sum)) => {
            let text = sum.format_human();
            let delta = Dec::parse(text.as_bytes()).and_then(|t| t.add(current.neg()));
            Ok(FloatIncrement { text, delta })
        }
        // Both operands are `long double`s and the sum is not a normal one: past the top
        // of the range it is infinite (Redis refuses it); below, not modelled.
        Some(None) if exact.to_parts().1 > 0 => Err(CmdError::NanOrInfinity),
        _ => Ok(FloatIncrement {
            text: exact.format_redis(),
            delta: Some(by),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dec(s: &str) -> Dec {
        Dec::parse(s.as_bytes()).unwrap()
    }

    fn sum(a: &str, b: &str) -> String {
        redis_sum_text(dec(a), dec(b)).unwrap()
    }

    /// Replies of Debian's redis-server 7.0.15 (x86-64) to `SET k a` then `INCRBYFLOAT k b`.
    #[test]
    fn sums_print_as_redis_prints_them() {
        let ten_to_400 = "10000000000000000000281880683947586514586453433629052038625910693539685534008629862039363994848324160522094053927317616200295822777259255734023828976593340661017797447434546173917862448116674971723778943824391593338047470675026246684401359237513603830343735485505244955964979021825038280091068414947402456898653040951017512658092615827588920183472511643316591362664138176309734806343732497430221946880";
        for (a, b, redis) in [
            ("0", "12345.678", "12345.67799999999999994"),
            (
                "12345.67799999999999994",
                "0.001",
                "12345.67900000000000027",
            ),
            ("1000000000000000", "0.1", "1000000000000000.0999755859375"),
            ("0", "1000000000000000000", "1000000000000000000"),
            (
                "1000000000000000000",
                "12345.678",
                "1000000000000012345.6875",
            ),
            ("1000000000000012345.6875", "0.3", "1000000000000012346"),
            ("9223372036854775807", "3.5", "9223372036854775810"),
            ("0", "1.1", "1.1"),
            ("0.1", "0.2", "0.3"),
            ("-5.5", "2.25", "-3.25"),
            ("1e-5", "0", "0.00001"),
            ("123456789.123456789", "0", "123456789.12345678899873747"),
            ("10.5", "0.1", "10.6"),
            ("5.0e3", "2.0e2", "5200"),
            ("1", "-1", "0"),
            ("-0", "-0", "0"),
            ("0", "-1.5", "-1.5"),
            ("3", "-0.0000000000000000001", "3"),
            ("0", "1e400", ten_to_400),
        ] {
            assert_eq!(sum(a, b), redis, "{a} + {b}");
        }
    }

    #[test]
    fn rounding_is_half_to_even_and_carries() {
        // 2^64 - 1 needs 64 bits; 2^64 + 1 rounds to 2^64 (a tie would go to even).
        assert_eq!(sum("18446744073709551615", "0"), "18446744073709551615");
        assert_eq!(sum("18446744073709551616", "1"), "18446744073709551616");
        assert_eq!(sum("18446744073709551616", "2"), "18446744073709551618");
        assert_eq!(sum("18446744073709551616", "3"), "18446744073709551620");
        assert_eq!(sum("18446744073709551615", "1"), "18446744073709551616");
    }

    fn hex(neg: bool, text: &str, exp2: i64) -> Option<String> {
        let digits = text.chars().map(|c| c.to_digit(16).unwrap());
        Ext80::from_hex(neg, digits, exp2)?
            .to_dec()
            .map(|d| d.format_redis())
    }

    /// `INCRBYFLOAT k 0` on these hex floats in Redis 7.0.15 (strtold reads them).
    #[test]
    fn hex_floats_read_as_strtold_reads_them() {
        assert_eq!(hex(false, "18", -1).as_deref(), Some("12"));
        assert_eq!(hex(true, "10", 0).as_deref(), Some("-16"));
        // 73 bits: rounded to 64.
        let v = Ext80::from_hex(
            false,
            "103372036854775808".chars().filter_map(|c| c.to_digit(16)),
            0,
        )
        .unwrap();
        assert_eq!(v.format_human(), "298854934369260754944");
        assert_eq!(
            Ext80::from_dec(v.to_dec().unwrap()).unwrap().format_human(),
            "298854934369260754944"
        );
        assert_eq!(hex(false, "1", -20000), None);
        assert_eq!(hex(false, "1", 20000), None);
        assert_eq!(hex(false, "0", 20000).as_deref(), Some("0"));
    }

    #[test]
    fn halving_carries_across_limbs() {
        let mut b = Big::from_u128((1 << 64) | (1 << 32) | 1);
        b.shr1();
        assert_eq!(b, Big::from_u128((1 << 63) | (1 << 31)));
        let mut one = Big::from_u128(1);
        one.shr1();
        assert!(one.is_zero());
    }

    #[test]
    fn out_of_range_is_not_modelled() {
        assert!(redis_sum_text(dec("1e-4940"), dec("0")).is_none());
        assert!(redis_sum_text(dec("1.1e4932"), dec("1.1e4932")).is_none());
        assert!(redis_sum_text(dec("1e-4000"), dec("0")).is_some());
    }
}
