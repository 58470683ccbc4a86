//! Bitmap commands on strings, as Redis 7.0's `bitops.c`: SETBIT, GETBIT, BITCOUNT, BITPOS,
//! BITOP, BITFIELD and BITFIELD_RO, with Redis's replies, error texts and argument order.
//!
//! Replication (docs/conflicts.md §1.1): SETBIT and BITFIELD SET on a string that exists
//! replicate as edits of the bits they change (`StrEdit::SetBits`), so concurrent writes of
//! different bits at two sites both survive; BITFIELD INCRBY replicates as the increment with
//! its overflow rule (`StrEdit::IncrBits`), so concurrent increments of one field both count.
//! A write that creates the key, and BITOP's destination, replicate as an assignment of the
//! whole value.
//! Bit offsets are bounded by proto-max-bulk-len, as in Redis.

use std::borrow::Cow;
use std::collections::BTreeMap;

use smallvec::SmallVec;

use meridian_crdt::string::{signed_overflow, unsigned_overflow};
use meridian_crdt::{BitOverflow, StrEdit};

use super::args::{eq_ic, int_arg, parse_i64};
use super::string::{assign, str_view, with_bytes, write_edit};
use super::{Ctx, Handler};
use crate::error::CmdError;
use crate::notify;

pub const HANDLERS: &[(&str, Handler)] = &[
    ("setbit", setbit),
    ("getbit", getbit),
    ("bitcount", bitcount),
    ("bitpos", bitpos),
    ("bitop", bitop),
    ("bitfield", bitfield),
    ("bitfield_ro", bitfield_ro),
];

const BIT_OFFSET_ERR: &str = "bit offset is not an integer or out of range";
const BIT_VALUE_ERR: &str = "bit is not an integer or out of range";
const BITFIELD_TYPE_ERR: &str =
    "Invalid bitfield type. Use something like i16 u8. Note that u64 is not supported but i64 is.";

fn arg<'a>(argv: &[&'a [u8]], i: usize) -> &'a [u8] {
    argv.get(i).copied().unwrap_or_default()
}

/// Calls `f` with the bytes `key` shows (`None`: no such key); WRONGTYPE for another type.
/// `write`: looked up as a write does (no hit or miss counted).
fn with_string<R>(
    ctx: &mut Ctx<'_>,
    key: &[u8],
    write: bool,
    f: impl FnOnce(Option<&[u8]>) -> R,
) -> Result<R, CmdError> {
    let db = ctx.db();
    let now = ctx.now_ms;
    let state = if write {
        ctx.shard.lookup_quiet(db, key, now).map(|e| &e.state)
    } else {
        ctx.shard.lookup_read(db, key, now)
    };
    match state {
        None => Ok(f(None)),
        Some(s) => {
            let view = str_view(s)?;
            Ok(with_bytes(view, |b| f(Some(b))))
        }
    }
}

/// Redis's `getBitOffsetFromArgument`: a non-negative integer below proto-max-bulk-len × 8;
/// with `hash_bits` (BITFIELD), `#N` means N × the field's width.
fn bit_offset(ctx: &Ctx<'_>, a: &[u8], hash_bits: Option<u32>) -> Result<u64, CmdError> {
    let err = || CmdError::Err(BIT_OFFSET_ERR.into());
    let (digits, mul) = match (a.split_first(), hash_bits) {
        (Some((b'#', rest)), Some(bits)) => (rest, i64::from(bits)),
        _ => (a, 1),
    };
    let v = parse_i64(digits)
        .and_then(|v| v.checked_mul(mul))
        .ok_or_else(err)?;
    let v = u64::try_from(v).map_err(|_| err())?;
    if (v >> 3) >= ctx.shard.config.proto_max_bulk_len {
        return Err(err());
    }
    Ok(v)
}

/// The bit at `bit` (most significant first, as Redis numbers them); 0 past the end.
fn bit_at(bytes: &[u8], bit: u64) -> bool {
    usize::try_from(bit >> 3)
        .ok()
        .and_then(|i| bytes.get(i))
        .is_some_and(|b| b & (0x80 >> (bit & 7)) != 0)
}

// ---------------------------------------------------------------------------------------------
// SETBIT GETBIT
// ---------------------------------------------------------------------------------------------

/// SETBIT key offset value: replies the bit's old value.
fn setbit(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let key = arg(argv, 1);
    let offset = bit_offset(ctx, arg(argv, 2), None)?;
    let on = match parse_i64(arg(argv, 3)) {
        Some(v @ (0 | 1)) => v == 1,
        _ => return Err(CmdError::Err(BIT_VALUE_ERR.into())),
    };
    // (old bit, current length in bytes) of an existing string.
    let current = with_string(ctx, key, true, |b| b.map(|b| (bit_at(b, offset), b.len())))?;
    let byte_len = offset / 8 + 1;
    let edit = StrEdit::SetBits {
        offset,
        width: 1,
        value: u64::from(on),
    };
    let db = ctx.db();
    let old = match current {
        None => {
            let mut v = vec![0u8; usize::try_from(byte_len).map_err(|_| CmdError::StringTooLong)?];
            edit.apply_to(&mut v);
            assign(ctx, key, v, false);
            ctx.shard.mark_raw_encoding(db, key);
            ctx.notify(notify::STRING, "setbit", key);
            false
        }
        Some((old, len)) => {
            // Redis writes (and replicates) only when the string grows or the bit changes;
            // it unshares the string either way ("raw" from then on).
            if old != on || (len as u64) < byte_len {
                write_edit(ctx, key, edit);
                ctx.notify(notify::STRING, "setbit", key);
            }
            ctx.shard.mark_raw_encoding(db, key);
            old
        }
    };
    ctx.out.int(i64::from(old));
    Ok(())
}

/// GETBIT key offset
fn getbit(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let offset = bit_offset(ctx, arg(argv, 2), None)?;
    let bit = with_string(ctx, arg(argv, 1), false, |b| {
        b.is_some_and(|b| bit_at(b, offset))
    })?;
    ctx.out.int(i64::from(bit));
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// BITCOUNT BITPOS
// ---------------------------------------------------------------------------------------------

/// `[start, end]` as Redis clamps them to `total` units (negative from the end); `None` when
/// empty.
fn clamp_range(start: i64, end: i64, total: i64) -> Option<(u64, u64)> {
    let mut s = if start < 0 { total + start } else { start };
    let mut e = if end < 0 { total + end } else { end };
    s = s.max(0);
    e = e.max(0);
    if e >= total {
        e = total - 1;
    }
    if s > e {
        return None;
    }
    Some((u64::try_from(s).ok()?, u64::try_from(e).ok()?))
}

/// Set bits among bits `first..=last` of `bytes` (within its length).
fn popcount_bits(bytes: &[u8], first: u64, last: u64) -> u64 {
    let (fb, lb) = (first >> 3, last >> 3);
    let (Ok(fb), Ok(lb)) = (usize::try_from(fb), usize::try_from(lb)) else {
        return 0;
    };
    let Some(span) = bytes.get(fb..=lb) else {
        return 0;
    };
    let mut n: u64 = 0;
    let mut chunks = span.chunks_exact(8);
    for c in &mut chunks {
        let mut w = [0u8; 8];
        w.copy_from_slice(c);
        n += u64::from(u64::from_ne_bytes(w).count_ones());
    }
    n += chunks
        .remainder()
        .iter()
        .map(|b| u64::from(b.count_ones()))
        .sum::<u64>();
    // Bits of the first and last bytes outside the range.
    let head_mask = !(0xffu8 >> (first & 7));
    let tail_mask = 0xffu8.checked_shr((last & 7) as u32 + 1).unwrap_or(0);
    if let Some(b) = span.first() {
        n -= u64::from((b & head_mask).count_ones());
    }
    if let Some(b) = span.last() {
        n -= u64::from((b & tail_mask).count_ones());
    }
    n
}

/// BITCOUNT key [start end [BYTE|BIT]]
fn bitcount(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let n = with_string(ctx, arg(argv, 1), false, |b| {
        let Some(b) = b else {
            return Ok(0);
        };
        let total = i64::try_from(b.len()).unwrap_or(i64::MAX);
        let (first, last) = match argv.len() {
            2 => match total {
                0 => return Ok(0),
                _ => (0, total as u64 * 8 - 1),
            },
            4 | 5 => {
                let start = int_arg(arg(argv, 2))?;
                let end = int_arg(arg(argv, 3))?;
                if start < 0 && end < 0 && start > end {
                    return Ok(0);
                }
                let bit = match argv.get(4) {
                    None => false,
                    Some(u) if eq_ic(u, "bit") => true,
                    Some(u) if eq_ic(u, "byte") => false,
                    Some(_) => return Err(CmdError::Syntax),
                };
                let units = if bit { total.saturating_mul(8) } else { total };
                match (clamp_range(start, end, units), bit) {
                    (None, _) => return Ok(0),
                    (Some((s, e)), true) => (s, e),
                    (Some((s, e)), false) => (s * 8, e * 8 + 7),
                }
            }
            _ => return Err(CmdError::Syntax),
        };
        Ok(popcount_bits(b, first, last))
    })??;
    ctx.out.int(i64::try_from(n).unwrap_or(i64::MAX));
    Ok(())
}

/// The first bit equal to `want` among bits `first..=last` of `bytes`.
fn find_bit(bytes: &[u8], first: u64, last: u64, want: bool) -> Option<u64> {
    let (fb, lb) = (
        usize::try_from(first >> 3).ok()?,
        usize::try_from(last >> 3).ok()?,
    );
    let span = bytes.get(fb..=lb)?;
    let n = span.len();
    for (i, &b) in span.iter().enumerate() {
        // Bits outside the range read as the opposite of what is sought.
        let mut x = if want { b } else { !b };
        if i == 0 {
            x &= 0xffu8 >> (first & 7);
        }
        if i + 1 == n {
            x &= !0xffu8.checked_shr((last & 7) as u32 + 1).unwrap_or(0);
        }
        if x != 0 {
            return Some((fb + i) as u64 * 8 + u64::from(x.leading_zeros()));
        }
    }
    None
}

/// BITPOS key bit [start [end [BYTE|BIT]]]
fn bitpos(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let want = match int_arg(arg(argv, 2))? {
        0 => false,
        1 => true,
        _ => return Err(CmdError::Err("The bit argument must be 1 or 0.".into())),
    };
    let pos = with_string(ctx, arg(argv, 1), false, |b| {
        let Some(b) = b else {
            return Ok(if want { -1 } else { 0 });
        };
        let total = i64::try_from(b.len()).unwrap_or(i64::MAX);
        let (range, end_given) = match argv.len() {
            3 => (
                clamp_range(0, total - 1, total).map(|(s, e)| (s * 8, e * 8 + 7)),
                false,
            ),
            4..=6 => {
                let start = int_arg(arg(argv, 3))?;
                let bit = match argv.get(5) {
                    None => false,
                    Some(u) if eq_ic(u, "bit") => true,
                    Some(u) if eq_ic(u, "byte") => false,
                    Some(_) => return Err(CmdError::Syntax),
                };
                let units = if bit { total.saturating_mul(8) } else { total };
                let (end, given) = match argv.get(4) {
                    Some(e) => (int_arg(e)?, true),
                    None => (units.saturating_sub(1), false),
                };
                let r = clamp_range(start, end, units);
                (
                    if bit {
                        r
                    } else {
                        r.map(|(s, e)| (s * 8, e * 8 + 7))
                    },
                    given,
                )
            }
            _ => return Err(CmdError::Syntax),
        };
        let Some((first, last)) = range else {
            return Ok(-1);
        };
        Ok(match find_bit(b, first, last, want) {
            Some(p) => i64::try_from(p).unwrap_or(i64::MAX),
            // No clear bit in the range: with no end given, the string is taken as padded
            // with zeroes, so the first bit past the range's last byte.
            None if !want && !end_given => i64::try_from((last / 8 + 1) * 8).unwrap_or(i64::MAX),
            None => -1,
        })
    })??;
    ctx.out.int(pos);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// BITOP
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy, PartialEq, Eq)]
enum BitOp {
    And,
    Or,
    Xor,
    Not,
}

/// BITOP AND|OR|XOR|NOT destkey key [key ...]: the destination is assigned the result (or
/// deleted when every source is empty), as Redis's SET of it.
fn bitop(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let name = arg(argv, 1);
    let op = if eq_ic(name, "and") {
        BitOp::And
    } else if eq_ic(name, "or") {
        BitOp::Or
    } else if eq_ic(name, "xor") {
        BitOp::Xor
    } else if eq_ic(name, "not") {
        BitOp::Not
    } else {
        return Err(CmdError::Syntax);
    };
    if op == BitOp::Not && argv.len() != 4 {
        return Err(CmdError::Err(
            "BITOP NOT must be called with a single source key.".into(),
        ));
    }
    let dest = arg(argv, 2);
    let mut res: Vec<u8> = Vec::new();
    for (j, key) in argv.iter().skip(3).enumerate() {
        with_string(ctx, key, false, |b| {
            let b = b.unwrap_or_default();
            if j == 0 {
                res = match op {
                    BitOp::Not => b.iter().map(|x| !x).collect(),
                    _ => b.to_vec(),
                };
                return;
            }
            if b.len() > res.len() {
                res.resize(b.len(), 0);
            }
            // One loop per operation over the bytes both hold (the compiler vectorizes it, as
            // Redis's word-at-a-time loop); bytes past a source's end read as zero: AND
            // clears them, OR and XOR keep them.
            let held = b.len().min(res.len());
            let (both, past) = res.split_at_mut(held);
            let pairs = both.iter_mut().zip(b);
            match op {
                BitOp::And => {
                    pairs.for_each(|(r, x)| *r &= x);
                    past.fill(0);
                }
                BitOp::Or => pairs.for_each(|(r, x)| *r |= x),
                BitOp::Xor => pairs.for_each(|(r, x)| *r ^= x),
                BitOp::Not => {}
            }
        })?;
    }
    let n = res.len();
    let db = ctx.db();
    if n > 0 {
        assign(ctx, dest, res, false);
        ctx.shard.mark_raw_encoding(db, dest);
        ctx.notify(notify::STRING, "set", dest);
    } else {
        let now = ctx.now_ms;
        if ctx.shard.delete_key(db, dest, now) {
            ctx.notify(notify::GENERIC, "del", dest);
        }
    }
    ctx.out.int(n as i64);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// BITFIELD BITFIELD_RO
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy, PartialEq, Eq)]
enum FieldOp {
    Get,
    Set,
    IncrBy,
}

#[derive(Clone, Copy)]
struct Field {
    op: FieldOp,
    signed: bool,
    bits: u32,
    offset: u64,
    /// SET's value or INCRBY's increment.
    arg: i64,
    overflow: BitOverflow,
}

/// Redis's `getBitfieldTypeFromArgument`: `i1`..`i64`, `u1`..`u63`.
fn field_type(a: &[u8]) -> Result<(bool, u32), CmdError> {
    let err = || CmdError::Err(BITFIELD_TYPE_ERR.into());
    let (signed, digits) = match a.split_first() {
        Some((b'i', rest)) => (true, rest),
        Some((b'u', rest)) => (false, rest),
        _ => return Err(err()),
    };
    // C reads the digits up to a NUL byte (strlen).
    let digits = digits.split(|&c| c == 0).next().unwrap_or_default();
    match parse_i64(digits) {
        Some(n @ 1..=64) if signed => Ok((true, n as u32)),
        Some(n @ 1..=63) => Ok((false, n as u32)),
        _ => Err(err()),
    }
}

/// Parses BITFIELD's operations; `ro`: BITFIELD_RO (only GET allowed, checked after parsing
/// as Redis does).
fn parse_fields(ctx: &Ctx<'_>, argv: &[&[u8]]) -> Result<Fields, CmdError> {
    let mut fields = Fields::new();
    let mut overflow = BitOverflow::Wrap;
    let mut j = 2;
    while j < argv.len() {
        let rem = argv.len() - j - 1;
        let sub = arg(argv, j);
        let op = if eq_ic(sub, "get") && rem >= 2 {
            FieldOp::Get
        } else if eq_ic(sub, "set") && rem >= 3 {
            FieldOp::Set
        } else if eq_ic(sub, "incrby") && rem >= 3 {
            FieldOp::IncrBy
        } else if eq_ic(sub, "overflow") && rem >= 1 {
            let t = arg(argv, j + 1);
            overflow = if eq_ic(t, "wrap") {
                BitOverflow::Wrap
            } else if eq_ic(t, "sat") {
                BitOverflow::Sat
            } else if eq_ic(t, "fail") {
                BitOverflow::Fail
            } else {
                return Err(CmdError::Err("Invalid OVERFLOW type specified".into()));
            };
            j += 2;
            continue;
        } else {
            return Err(CmdError::Syntax);
        };
        let (signed, bits) = field_type(arg(argv, j + 1))?;
        let offset = bit_offset(ctx, arg(argv, j + 2), Some(bits))?;
        let value = match op {
            FieldOp::Get => 0,
            _ => int_arg(arg(argv, j + 3))?,
        };
        fields.push(Field {
            op,
            signed,
            bits,
            offset,
            arg: value,
            overflow,
        });
        j += if op == FieldOp::Get { 3 } else { 4 };
    }
    Ok(fields)
}

/// A string's bytes with a BITFIELD's writes laid over them (the writes touch a few bytes:
/// the value is never copied).
struct Overlay<'a> {
    base: &'a [u8],
    written: BTreeMap<u64, u8>,
}

impl Overlay<'_> {
    fn byte(&self, i: u64) -> u8 {
        match self.written.get(&i) {
            Some(b) => *b,
            None => usize::try_from(i)
                .ok()
                .and_then(|i| self.base.get(i))
                .copied()
                .unwrap_or(0),
        }
    }

    /// The `bits` bits from bit `offset`, most significant first, as an unsigned number.
    fn get(&self, offset: u64, bits: u32) -> u64 {
        let mut v: u64 = 0;
        for i in 0..u64::from(bits) {
            let pos = offset + i;
            let bit = self.byte(pos >> 3) & (0x80 >> (pos & 7)) != 0;
            v = (v << 1) | u64::from(bit);
        }
        v
    }

    fn get_signed(&self, offset: u64, bits: u32) -> i64 {
        let v = self.get(offset, bits);
        if bits < 64 && v & (1u64 << (bits - 1)) != 0 {
            (v | (u64::MAX << bits)) as i64
        } else {
            v as i64
        }
    }

    fn set(&mut self, offset: u64, bits: u32, value: u64) {
        for i in 0..u64::from(bits) {
            let pos = offset + i;
            let bit = (value >> (u64::from(bits) - 1 - i)) & 1;
            let mask = 0x80u8 >> (pos & 7);
            let mut b = self.byte(pos >> 3);
            if bit == 1 {
                b |= mask;
            } else {
                b &= !mask;
            }
            self.written.insert(pos >> 3, b);
        }
    }
}

/// One field's reply: an integer, or nil for an overflow under FAIL.
type FieldReply = Option<i64>;

/// Fields, replies and writes of one BITFIELD: most name one or a few fields, held inline
/// (no allocation per command).
const FIELDS_INLINE: usize = 4;
type Fields = SmallVec<[Field; FIELDS_INLINE]>;
type FieldReplies = SmallVec<[FieldReply; FIELDS_INLINE]>;
type BitsEdits = SmallVec<[BitsEdit; FIELDS_INLINE]>;

/// A BITFIELD write as it replicates.
type BitsEdit = StrEdit<Cow<'static, [u8]>>;

/// Runs `fields` over `base` (the key's bytes, empty when it does not exist): the replies,
/// and the writes that change bits, in order: SET as the field's value, INCRBY as the
/// increment with its overflow rule (docs/conflicts.md §1.1: concurrent increments count).
fn run_fields(base: &[u8], fields: &[Field]) -> (FieldReplies, BitsEdits) {
    let mut o = Overlay {
        base,
        written: BTreeMap::new(),
    };
    let mut replies = FieldReplies::new();
    let mut writes = BitsEdits::new();
    for (i, f) in fields.iter().enumerate() {
        let mask = u64::MAX.checked_shr(64 - f.bits).unwrap_or(u64::MAX);
        let (reply, new) = match (f.op, f.signed) {
            (FieldOp::Get, true) => (Some(o.get_signed(f.offset, f.bits)), None),
            (FieldOp::Get, false) => (Some(o.get(f.offset, f.bits) as i64), None),
            (op, true) => {
                let old = o.get_signed(f.offset, f.bits);
                let (over, new, ret) = if op == FieldOp::IncrBy {
                    let (over, wrapped) = signed_overflow(old, f.arg, f.bits, f.overflow);
                    let new = if over != 0 {
                        wrapped
                    } else {
                        old.wrapping_add(f.arg)
                    };
                    (over, new, new)
                } else {
                    let (over, wrapped) = signed_overflow(f.arg, 0, f.bits, f.overflow);
                    (over, if over != 0 { wrapped } else { f.arg }, old)
                };
                if over != 0 && f.overflow == BitOverflow::Fail {
                    (None, None)
                } else {
                    (Some(ret), Some((old as u64 & mask, new as u64 & mask)))
                }
            }
            (op, false) => {
                let old = o.get(f.offset, f.bits);
                let (over, new, ret) = if op == FieldOp::IncrBy {
                    let (over, wrapped) = unsigned_overflow(old, f.arg, f.bits, f.overflow);
                    let new = if over != 0 {
                        wrapped
                    } else {
                        old.wrapping_add(f.arg as u64)
                    };
                    (over, new, new)
                } else {
                    let (over, wrapped) = unsigned_overflow(f.arg as u64, 0, f.bits, f.overflow);
                    (over, if over != 0 { wrapped } else { f.arg as u64 }, old)
                };
                if over != 0 && f.overflow == BitOverflow::Fail {
                    (None, None)
                } else {
                    (Some(ret as i64), Some((old, new & mask)))
                }
            }
        };
        if let Some((old, new)) = new {
            // Only later fields read the overlay: the last one need not write it.
            if i + 1 < fields.len() {
                o.set(f.offset, f.bits, new);
            }
            if old != new {
                let width = u8::try_from(f.bits).unwrap_or(64);
                writes.push(match f.op {
                    FieldOp::IncrBy => StrEdit::IncrBits {
                        offset: f.offset,
                        width,
                        signed: f.signed,
                        incr: f.arg,
                        overflow: f.overflow,
                    },
                    _ => StrEdit::SetBits {
                        offset: f.offset,
                        width,
                        value: new,
                    },
                });
            }
        }
        replies.push(reply);
    }
    (replies, writes)
}

/// BITFIELD key [GET type offset] [SET type offset value] [INCRBY type offset increment]
/// [OVERFLOW WRAP|SAT|FAIL] ...
fn bitfield(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    bitfield_generic(ctx, argv, false)
}

/// BITFIELD_RO key [GET type offset] ...
fn bitfield_ro(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    bitfield_generic(ctx, argv, true)
}

fn bitfield_generic(ctx: &mut Ctx<'_>, argv: &[&[u8]], ro: bool) -> Result<(), CmdError> {
    let key = arg(argv, 1);
    let fields = parse_fields(ctx, argv)?;
    let highest = fields
        .iter()
        .filter(|f| f.op != FieldOp::Get)
        .map(|f| f.offset + u64::from(f.bits) - 1)
        .max();
    let Some(highest) = highest else {
        // Only GETs: a read.
        let (replies, _) = with_string(ctx, key, false, |b| {
            run_fields(b.unwrap_or_default(), &fields)
        })?;
        write_replies(ctx, &replies);
        return Ok(());
    };
    if ro {
        return Err(CmdError::Err(
            "BITFIELD_RO only supports the GET subcommand".into(),
        ));
    }
    let (replies, writes, len) = with_string(ctx, key, true, |b| {
        let (r, w) = run_fields(b.unwrap_or_default(), &fields);
        (r, w, b.map(<[u8]>::len))
    })?;
    let db = ctx.db();
    let byte_len = highest / 8 + 1;
    match len {
        // Redis creates the key (zero-padded) even when every write failed.
        None => {
            let mut v = vec![0u8; usize::try_from(byte_len).map_err(|_| CmdError::StringTooLong)?];
            for e in &writes {
                e.apply_to(&mut v);
            }
            assign(ctx, key, v, false);
            ctx.shard.mark_raw_encoding(db, key);
            // Redis's `changes`: the SETs and INCRBYs that wrote (not those OVERFLOW FAIL
            // refused); creating the key alone notifies only `new`.
            if !writes.is_empty() {
                ctx.notify(notify::STRING, "setbit", key);
            }
        }
        Some(len) => {
            let grows = (len as u64) < byte_len;
            let reaches = writes.iter().any(|e| e.end_bytes() == byte_len);
            let wrote = !writes.is_empty();
            for e in writes {
                write_edit(ctx, key, e);
            }
            if grows && !reaches {
                // Padding only: the last byte's bit written as it is (zero).
                write_edit(ctx, key, bits_edit(highest, 1, 0));
            }
            // Redis unshares the string for any SET or INCRBY (`dbUnshareStringValue`),
            // whether or not it changes: "raw" from then on.
            ctx.shard.mark_raw_encoding(db, key);
            if wrote {
                ctx.notify(notify::STRING, "setbit", key);
            }
        }
    }
    write_replies(ctx, &replies);
    Ok(())
}

fn bits_edit(offset: u64, width: u32, value: u64) -> BitsEdit {
    StrEdit::SetBits {
        offset,
        width: u8::try_from(width).unwrap_or(64),
        value,
    }
}

fn write_replies(ctx: &mut Ctx<'_>, replies: &[FieldReply]) {
    ctx.out.array(replies.len());
    for r in replies {
        match r {
            Some(v) => ctx.out.int(*v),
            None => ctx.out.null(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn popcount_and_find_respect_bit_ranges() {
        let b = [0xffu8, 0x00, 0x0f];
        assert_eq!(popcount_bits(&b, 0, 23), 12);
        assert_eq!(popcount_bits(&b, 4, 7), 4);
        assert_eq!(popcount_bits(&b, 3, 21), 5 + 2);
        assert_eq!(find_bit(&b, 0, 23, false), Some(8));
        assert_eq!(find_bit(&b, 0, 7, false), None);
        assert_eq!(find_bit(&b, 9, 23, true), Some(20));
        assert_eq!(find_bit(&b, 9, 19, true), None);
    }

    #[test]
    fn overflow_rules_match_redis() {
        assert_eq!(unsigned_overflow(250, 10, 8, BitOverflow::Wrap), (1, 4));
        assert_eq!(unsigned_overflow(250, 10, 8, BitOverflow::Sat), (1, 255));
        assert_eq!(unsigned_overflow(5, -10, 8, BitOverflow::Sat), (-1, 0));
        assert_eq!(unsigned_overflow(5, -10, 8, BitOverflow::Wrap), (-1, 251));
        assert_eq!(signed_overflow(120, 10, 8, BitOverflow::Wrap), (1, -126));
        assert_eq!(signed_overflow(120, 10, 8, BitOverflow::Sat), (1, 127));
        assert_eq!(signed_overflow(-120, -10, 8, BitOverflow::Sat), (-1, -128));
        assert_eq!(
            signed_overflow(i64::MAX, 1, 64, BitOverflow::Wrap),
            (1, i64::MIN)
        );
        assert_eq!(signed_overflow(5, 1, 64, BitOverflow::Wrap), (0, 5));
    }

    #[test]
    fn fields_read_and_write_across_bytes() {
        let f = |op, signed, bits, offset, arg| Field {
            op,
            signed,
            bits,
            offset,
            arg,
            overflow: BitOverflow::Wrap,
        };
        let (replies, writes) = run_fields(
            b"",
            &[
                f(FieldOp::Set, false, 8, 4, 255),
                f(FieldOp::Get, false, 4, 0, 0),
                f(FieldOp::Get, false, 8, 4, 0),
                f(FieldOp::IncrBy, true, 5, 100, -3),
            ],
        );
        assert_eq!(replies.as_slice(), [Some(0), Some(0), Some(255), Some(-3)]);
        assert_eq!(
            writes.as_slice(),
            [
                StrEdit::SetBits {
                    offset: 4,
                    width: 8,
                    value: 255
                },
                StrEdit::IncrBits {
                    offset: 100,
                    width: 5,
                    signed: true,
                    incr: -3,
                    overflow: BitOverflow::Wrap
                }
            ]
        );
    }
}
