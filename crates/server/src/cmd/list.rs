//! List commands: LPUSH RPUSH LPUSHX RPUSHX LPOP RPOP LLEN LRANGE LINDEX LSET LINSERT LREM
//! LTRIM LPOS LMOVE RPOPLPUSH LMPOP, and the blocking BLPOP BRPOP BRPOPLPUSH BLMOVE BLMPOP
//! (through `crate::blocking`: a command that finds nothing calls `Ctx::block` and is re-run
//! when one of its keys is written).
//!
//! Semantics, option parsing, reply shapes and error texts follow Redis 7.0 (`t_list.c`).
//! Every write is a `ListOp` built from the key's current list (`meridian_crdt::list`):
//! - pushes and LINSERT: `Insert` at positions next to the elements seen;
//! - pops, LREM, LTRIM: `Remove` of ranges of the elements seen (a concurrent push survives);
//!   removing the last element is the key's `remove_effect`, so the key goes with its TTL;
//! - LSET: `Replace` (the old element removed, the new value at its position).
//!
//! Pops are at-least-once across sites: two sites popping concurrently may both return the
//! same element (docs/conflicts.md, "Lists").

use meridian_crdt::list::ElemId;
use meridian_crdt::{Effect, KeyState, ListCrdt, TypeTag};

use super::args::{eq_ic, int_arg, parse_i64};
use super::{Ctx, Handler};
use crate::blocking::parse_timeout;
use crate::error::CmdError;
use crate::notify;

pub const HANDLERS: &[(&str, Handler)] = &[
    ("lpush", lpush),
    ("rpush", rpush),
    ("lpushx", lpushx),
    ("rpushx", rpushx),
    ("lpop", lpop),
    ("rpop", rpop),
    ("llen", llen),
    ("lrange", lrange),
    ("lindex", lindex),
    ("lset", lset),
    ("linsert", linsert),
    ("lrem", lrem),
    ("ltrim", ltrim),
    ("lpos", lpos),
    ("lmove", lmove),
    ("rpoplpush", rpoplpush),
    ("lmpop", lmpop),
    ("blpop", blpop),
    ("brpop", brpop),
    ("brpoplpush", brpoplpush),
    ("blmove", blmove),
    ("blmpop", blmpop),
];

fn arg<'a>(argv: &[&'a [u8]], i: usize) -> &'a [u8] {
    argv.get(i).copied().unwrap_or_default()
}

/// The list a key shows: `None` when the key does not exist, WRONGTYPE for another type.
fn list_of(state: &KeyState) -> Result<Option<&ListCrdt>, CmdError> {
    match state.type_tag() {
        None => Ok(None),
        Some(TypeTag::List) => Ok(state.list()),
        Some(_) => Err(CmdError::WrongType),
    }
}

/// The length of the list at `key` for a write (no keyspace statistics): `None` when missing.
fn write_len(ctx: &mut Ctx<'_>, key: &[u8]) -> Result<Option<usize>, CmdError> {
    let db = ctx.db();
    match ctx.shard.lookup_quiet(db, key, ctx.now_ms) {
        None => Ok(None),
        Some(e) => Ok(list_of(&e.state)?.map(ListCrdt::len)),
    }
}

/// Redis's `LIST_HEAD`/`LIST_TAIL` argument.
fn parse_side(b: &[u8]) -> Result<bool, CmdError> {
    if eq_ic(b, "left") {
        Ok(true)
    } else if eq_ic(b, "right") {
        Ok(false)
    } else {
        Err(CmdError::Syntax)
    }
}

/// Pushes `values` (in argument order) at the head (`front`) or tail of `key`.
fn push_values(ctx: &mut Ctx<'_>, key: &[u8], front: bool, values: &[&[u8]]) {
    let db = ctx.db();
    let mut ordered: Vec<&[u8]> = values.to_vec();
    if front {
        ordered.reverse();
    }
    ctx.shard.write_key(db, key, ctx.now_ms, |state| {
        let op = match state.list() {
            Some(l) => l.push_op(front, ordered),
            None => ListCrdt::new().push_op(front, ordered),
        };
        Effect::List(op)
    });
}

fn push_generic(
    ctx: &mut Ctx<'_>,
    argv: &[&[u8]],
    front: bool,
    only_existing: bool,
) -> Result<(), CmdError> {
    let key = arg(argv, 1);
    let values = argv.get(2..).unwrap_or_default();
    let len = write_len(ctx, key)?;
    if only_existing && len.is_none() {
        ctx.out.int(0);
        return Ok(());
    }
    push_values(ctx, key, front, values);
    ctx.notify(notify::LIST, push_event(front), key);
    ctx.out.int((len.unwrap_or(0) + values.len()) as i64);
    Ok(())
}

fn lpush(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    push_generic(ctx, argv, true, false)
}

fn rpush(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    push_generic(ctx, argv, false, false)
}

fn lpushx(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    push_generic(ctx, argv, true, true)
}

fn rpushx(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    push_generic(ctx, argv, false, true)
}

fn push_event(front: bool) -> &'static str {
    if front { "lpush" } else { "rpush" }
}

/// The pop event of `key` (then `del` when it emptied the list), as Redis's pops send.
fn notify_pop(ctx: &mut Ctx<'_>, key: &[u8], front: bool) {
    ctx.notify_then_del(notify::LIST, if front { "lpop" } else { "rpop" }, key);
}

/// Pops up to `count` elements of the list at `key` from the head (`front`) or tail, in pop
/// order, writing the removal. `None` when the key does not exist.
pub fn pop_values(
    ctx: &mut Ctx<'_>,
    key: &[u8],
    front: bool,
    count: usize,
) -> Result<Option<Vec<Vec<u8>>>, CmdError> {
    let db = ctx.db();
    let now = ctx.now_ms;
    let (values, effect): (Vec<Vec<u8>>, Effect<&'static [u8]>) =
        match ctx.shard.lookup_quiet(db, key, now) {
            None => return Ok(None),
            Some(e) => {
                let Some(l) = list_of(&e.state)? else {
                    return Ok(None);
                };
                let len = l.len();
                let n = count.min(len);
                if n == 0 {
                    return Ok(Some(Vec::new()));
                }
                let values: Vec<Vec<u8>> = if front {
                    l.iter().take(n).map(|x| x.value.to_vec()).collect()
                } else {
                    l.iter_rev_from(len - 1)
                        .take(n)
                        .map(|x| x.value.to_vec())
                        .collect()
                };
                let op = if n == len {
                    None
                } else if front {
                    l.remove_range_op(0, n - 1)
                } else {
                    l.remove_range_op(len - n, len - 1)
                };
                let effect = match op {
                    Some(op) => Effect::List(op),
                    None => e.state.remove_effect(),
                };
                (values, effect)
            }
        };
    ctx.shard.write_key(db, key, now, |_| effect);
    Ok(Some(values))
}

/// A COUNT argument that must be >= 0 (`getPositiveLongFromObjectOrReply`: a non-integer
/// gets the same text).
fn positive_count(b: &[u8]) -> Result<usize, CmdError> {
    match parse_i64(b) {
        Some(n) if n >= 0 => Ok(usize::try_from(n).unwrap_or(usize::MAX)),
        _ => Err(CmdError::MustBePositive),
    }
}

fn pop_generic(ctx: &mut Ctx<'_>, argv: &[&[u8]], front: bool) -> Result<(), CmdError> {
    if argv.len() > 3 {
        return Err(CmdError::WrongArity(ctx.spec.meta.name.to_string()));
    }
    let key = arg(argv, 1);
    let count = match argv.get(2) {
        Some(c) => Some(positive_count(c)?),
        None => None,
    };
    let popped = pop_values(ctx, key, front, count.unwrap_or(1))?;
    if popped.as_ref().is_some_and(|v| !v.is_empty()) {
        notify_pop(ctx, key, front);
    }
    match popped {
        None => match count {
            Some(_) => ctx.out.null_array(),
            None => ctx.out.null(),
        },
        Some(values) => match count {
            Some(_) => {
                ctx.out.array(values.len());
                for v in &values {
                    ctx.out.bulk(v);
                }
            }
            None => match values.first() {
                Some(v) => ctx.out.bulk(v),
                None => ctx.out.null(),
            },
        },
    }
    Ok(())
}

fn lpop(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    pop_generic(ctx, argv, true)
}

fn rpop(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    pop_generic(ctx, argv, false)
}

fn llen(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let db = ctx.db();
    let n = match ctx.shard.lookup_read(db, arg(argv, 1), ctx.now_ms) {
        None => 0,
        Some(state) => list_of(state)?.map_or(0, ListCrdt::len),
    };
    ctx.out.int(n as i64);
    Ok(())
}

fn lrange(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let start = int_arg(arg(argv, 2))?;
    let end = int_arg(arg(argv, 3))?;
    let db = ctx.db();
    let now = ctx.now_ms;
    let shard = &mut *ctx.shard;
    let out = &mut *ctx.out;
    let Some(state) = shard.lookup_read(db, arg(argv, 1), now) else {
        out.array(0);
        return Ok(());
    };
    let Some(l) = list_of(state)? else {
        out.array(0);
        return Ok(());
    };
    let len = l.len() as i64;
    let mut start = if start < 0 { len + start } else { start };
    let mut end = if end < 0 { len + end } else { end };
    if start < 0 {
        start = 0;
    }
    if start > end || start >= len {
        out.array(0);
        return Ok(());
    }
    if end >= len {
        end = len - 1;
    }
    let n = (end - start + 1) as usize;
    out.array(n);
    for e in l.iter_from(start as usize).take(n) {
        out.bulk(e.value);
    }
    Ok(())
}

/// A Redis index (negative from the tail) resolved against `len`.
fn resolve_index(index: i64, len: usize) -> Option<usize> {
    let i = if index < 0 {
        (len as i64).checked_add(index)?
    } else {
        index
    };
    usize::try_from(i).ok().filter(|&i| i < len)
}

fn lindex(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let index = int_arg(arg(argv, 2))?;
    let db = ctx.db();
    let now = ctx.now_ms;
    let shard = &mut *ctx.shard;
    let out = &mut *ctx.out;
    let Some(state) = shard.lookup_read(db, arg(argv, 1), now) else {
        out.null();
        return Ok(());
    };
    let Some(l) = list_of(state)? else {
        out.null();
        return Ok(());
    };
    match resolve_index(index, l.len()).and_then(|i| l.get(i)) {
        Some(e) => out.bulk(e.value),
        None => out.null(),
    }
    Ok(())
}

fn lset(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let key = arg(argv, 1);
    let value = arg(argv, 3);
    let db = ctx.db();
    let now = ctx.now_ms;
    let op = {
        let Some(e) = ctx.shard.lookup_quiet(db, key, now) else {
            return Err(CmdError::NoSuchKey);
        };
        let Some(l) = list_of(&e.state)? else {
            return Err(CmdError::NoSuchKey);
        };
        let index = int_arg(arg(argv, 2))?;
        let Some(i) = resolve_index(index, l.len()) else {
            return Err(CmdError::Err("index out of range".to_string()));
        };
        l.replace_op(i, value)
    };
    if let Some(op) = op {
        ctx.shard.write_key(db, key, now, |_| Effect::List(op));
    }
    ctx.notify(notify::LIST, "lset", key);
    ctx.out.ok();
    Ok(())
}

fn linsert(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let after = if eq_ic(arg(argv, 2), "after") {
        true
    } else if eq_ic(arg(argv, 2), "before") {
        false
    } else {
        return Err(CmdError::Syntax);
    };
    let key = arg(argv, 1);
    let pivot = arg(argv, 3);
    let value = arg(argv, 4);
    let db = ctx.db();
    let now = ctx.now_ms;
    let (op, len) = {
        let Some(e) = ctx.shard.lookup_quiet(db, key, now) else {
            ctx.out.int(0);
            return Ok(());
        };
        let Some(l) = list_of(&e.state)? else {
            ctx.out.int(0);
            return Ok(());
        };
        let Some(i) = l.iter().position(|x| x.value == pivot) else {
            ctx.out.int(-1);
            return Ok(());
        };
        (l.insert_op(i, after, value), l.len())
    };
    ctx.shard.write_key(db, key, now, |_| Effect::List(op));
    ctx.notify(notify::LIST, "linsert", key);
    ctx.out.int(len as i64 + 1);
    Ok(())
}

/// Groups sorted indices into runs of neighbours, as id ranges.
fn runs(l: &ListCrdt, idx: &[usize]) -> Vec<(ElemId, ElemId)> {
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(&first) = idx.get(i) {
        let mut last = first;
        let mut j = i + 1;
        while idx.get(j) == Some(&(last + 1)) {
            last += 1;
            j += 1;
        }
        if let (Some(a), Some(b)) = (l.get(first), l.get(last)) {
            out.push((a.id, b.id));
        }
        i = j;
    }
    out
}

fn lrem(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let count = int_arg(arg(argv, 2))?;
    let key = arg(argv, 1);
    let target = arg(argv, 3);
    let db = ctx.db();
    let now = ctx.now_ms;
    let (effect, removed): (Effect<&'static [u8]>, usize) = {
        let Some(e) = ctx.shard.lookup_quiet(db, key, now) else {
            ctx.out.int(0);
            return Ok(());
        };
        let Some(l) = list_of(&e.state)? else {
            ctx.out.int(0);
            return Ok(());
        };
        let len = l.len();
        let limit = if count == 0 {
            usize::MAX
        } else {
            usize::try_from(count.unsigned_abs()).unwrap_or(usize::MAX)
        };
        let mut idx: Vec<usize> = if count < 0 {
            l.iter_rev_from(len - 1)
                .enumerate()
                .filter(|(_, x)| x.value == target)
                .map(|(k, _)| len - 1 - k)
                .take(limit)
                .collect()
        } else {
            l.iter()
                .enumerate()
                .filter(|(_, x)| x.value == target)
                .map(|(k, _)| k)
                .take(limit)
                .collect()
        };
        if idx.is_empty() {
            ctx.out.int(0);
            return Ok(());
        }
        idx.sort_unstable();
        let n = idx.len();
        let effect = if n == len {
            e.state.remove_effect()
        } else {
            Effect::List(l.remove_ids_op(runs(l, &idx)))
        };
        (effect, n)
    };
    ctx.shard.write_key(db, key, now, |_| effect);
    ctx.notify_then_del(notify::LIST, "lrem", key);
    ctx.out.int(removed as i64);
    Ok(())
}

fn ltrim(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let start = int_arg(arg(argv, 2))?;
    let end = int_arg(arg(argv, 3))?;
    let key = arg(argv, 1);
    let db = ctx.db();
    let now = ctx.now_ms;
    let effect: Option<Effect<&'static [u8]>> = {
        let Some(e) = ctx.shard.lookup_quiet(db, key, now) else {
            ctx.out.ok();
            return Ok(());
        };
        let Some(l) = list_of(&e.state)? else {
            ctx.out.ok();
            return Ok(());
        };
        let llen = l.len() as i64;
        let mut start = if start < 0 { llen + start } else { start };
        let mut end = if end < 0 { llen + end } else { end };
        if start < 0 {
            start = 0;
        }
        let (ltrim, rtrim) = if start > end || start >= llen {
            (llen, 0)
        } else {
            if end >= llen {
                end = llen - 1;
            }
            (start, llen - end - 1)
        };
        if ltrim + rtrim >= llen {
            Some(e.state.remove_effect())
        } else if ltrim == 0 && rtrim == 0 {
            None
        } else {
            let mut ranges = Vec::new();
            let len = llen as usize;
            let (lt, rt) = (ltrim as usize, rtrim as usize);
            if lt > 0 {
                if let (Some(a), Some(b)) = (l.get(0), l.get(lt - 1)) {
                    ranges.push((a.id, b.id));
                }
            }
            if rt > 0 {
                if let (Some(a), Some(b)) = (l.get(len - rt), l.get(len - 1)) {
                    ranges.push((a.id, b.id));
                }
            }
            Some(Effect::List(l.remove_ids_op(ranges)))
        }
    };
    if let Some(effect) = effect {
        ctx.shard.write_key(db, key, now, |_| effect);
    }
    ctx.notify_then_del(notify::LIST, "ltrim", key);
    ctx.out.ok();
    Ok(())
}

fn lpos(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let target = arg(argv, 2);
    let mut rank: i64 = 1;
    let mut count: i64 = -1;
    let mut maxlen: i64 = 0;
    let mut j = 3;
    while j < argv.len() {
        let opt = arg(argv, j);
        let more = j + 1 < argv.len();
        if eq_ic(opt, "rank") && more {
            j += 1;
            rank = int_arg(arg(argv, j))?;
            if rank == 0 {
                return Err(CmdError::Err(
                    "RANK can't be zero: use 1 to start from the first match, 2 from the \
                     second ... or use negative to start from the end of the list"
                        .to_string(),
                ));
            }
        } else if eq_ic(opt, "count") && more {
            j += 1;
            // `getPositiveLongFromObjectOrReply` with a message: a non-integer says it too.
            count = match parse_i64(arg(argv, j)) {
                Some(v) if v >= 0 => v,
                _ => return Err(CmdError::Err("COUNT can't be negative".to_string())),
            };
        } else if eq_ic(opt, "maxlen") && more {
            j += 1;
            // `getPositiveLongFromObjectOrReply` with a message: a non-integer says it too.
            maxlen = match parse_i64(arg(argv, j)) {
                Some(v) if v >= 0 => v,
                _ => return Err(CmdError::Err("MAXLEN can't be negative".to_string())),
            };
        } else {
            return Err(CmdError::Syntax);
        }
        j += 1;
    }
    let from_tail = rank < 0;
    // Like Redis, -LONG_MIN stays negative: every match then satisfies `matches >= rank`.
    let rank = if from_tail { rank.wrapping_neg() } else { rank };
    let db = ctx.db();
    let now = ctx.now_ms;
    let shard = &mut *ctx.shard;
    let out = &mut *ctx.out;
    let list = match shard.lookup_read(db, arg(argv, 1), now) {
        None => None,
        Some(state) => list_of(state)?,
    };
    let Some(l) = list else {
        if count != -1 {
            out.array(0);
        } else {
            out.null();
        }
        return Ok(());
    };
    let len = l.len();
    let scan = if maxlen == 0 {
        len
    } else {
        len.min(usize::try_from(maxlen).unwrap_or(usize::MAX))
    };
    let it: Box<dyn Iterator<Item = meridian_crdt::list::Elem<'_>>> = if from_tail {
        Box::new(l.iter_rev_from(len.saturating_sub(1)))
    } else {
        Box::new(l.iter())
    };
    let mut matches: i64 = 0;
    let mut found: Vec<usize> = Vec::new();
    for (k, e) in it.take(scan).enumerate() {
        if e.value == target {
            matches += 1;
            if matches >= rank {
                found.push(if from_tail { len - 1 - k } else { k });
                if count == -1 || (count != 0 && matches - rank + 1 >= count) {
                    break;
                }
            }
        }
    }
    if count != -1 {
        out.array(found.len());
        for i in found {
            out.int(i as i64);
        }
    } else {
        match found.first() {
            Some(&i) => out.int(i as i64),
            None => out.null(),
        }
    }
    Ok(())
}

/// LMOVE / RPOPLPUSH: pops from `src` (head if `from_front`) and pushes onto `dst`.
fn move_generic(
    ctx: &mut Ctx<'_>,
    src: &[u8],
    dst: &[u8],
    from_front: bool,
    to_front: bool,
) -> Result<(), CmdError> {
    let db = ctx.db();
    let now = ctx.now_ms;
    let exists = match ctx.shard.lookup_quiet(db, src, now) {
        None => false,
        Some(e) => list_of(&e.state)?.is_some(),
    };
    if !exists {
        ctx.out.null();
        return Ok(());
    }
    write_len(ctx, dst)?;
    let Some(values) = pop_values(ctx, src, from_front, 1)? else {
        ctx.out.null();
        return Ok(());
    };
    let Some(v) = values.first() else {
        ctx.out.null();
        return Ok(());
    };
    push_values(ctx, dst, to_front, &[v.as_slice()]);
    // Redis's order: the push on the destination, the pop on the source, its `del`.
    ctx.notify(notify::LIST, push_event(to_front), dst);
    notify_pop(ctx, src, from_front);
    ctx.out.bulk(v);
    Ok(())
}

/// LMOVE or RPOPLPUSH whose destination is on shard `dst_shard`, which `tx_across` holds for
/// this step together with the source's (this one): nothing else runs on either meanwhile.
/// The source's end element is pushed on the destination first (LPUSH or RPUSH there, which
/// answers WRONGTYPE for a destination of another type, and then nothing is popped), then
/// popped here: a crash between the two leaves the element in both lists, never in neither.
/// A missing source answers nil whatever the destination is, as in Redis.
pub fn move_to_held_shard(
    ctx: &mut Ctx<'_>,
    src: &[u8],
    dst: &[u8],
    (from_front, to_front): (bool, bool),
    dst_shard: u16,
) -> Result<(), CmdError> {
    let Some(v) = peek_end(ctx, src, from_front)? else {
        ctx.out.null();
        return Ok(());
    };
    let mut batch = crate::hop::Batch::new(crate::hop::ClientView::of(ctx.client));
    let (push, name) = push_for(to_front)?;
    batch.push(
        crate::hop::Op::Quiet(push),
        ctx.db(),
        ctx.out.proto,
        &[name, dst, v.as_slice()],
    );
    let Some(done) = crate::tx_across::call_held(dst_shard, batch) else {
        return Err(crate::hop::unavailable_error(crate::hop::Unavailable {
            shard: dst_shard,
        }));
    };
    let pushed = done.reply(0);
    if let Some(text) = pushed.strip_prefix(b"-") {
        let text = String::from_utf8_lossy(text);
        return Err(CmdError::Raw(text.trim_end().to_string()));
    }
    pop_end(ctx, src, from_front, &v)
}

/// The element at the head (`from_front`) or tail of the list at `src`, not removed: the
/// first step of a list move whose destination is elsewhere. None when the key is missing;
/// WRONGTYPE when it is not a list.
pub fn peek_end(
    ctx: &mut Ctx<'_>,
    src: &[u8],
    from_front: bool,
) -> Result<Option<Vec<u8>>, CmdError> {
    let db = ctx.db();
    let now = ctx.now_ms;
    match ctx.shard.lookup_quiet(db, src, now) {
        None => Ok(None),
        Some(e) => Ok(list_of(&e.state)?.and_then(|l| {
            let i = if from_front {
                Some(0)
            } else {
                l.len().checked_sub(1)
            };
            i.and_then(|i| l.get(i)).map(|e| e.value.to_vec())
        })),
    }
}

/// The last step of a list move whose element `v` (`peek_end`'s) was pushed elsewhere: pops
/// it from `src`, notifies, and answers it.
pub fn pop_end(ctx: &mut Ctx<'_>, src: &[u8], from_front: bool, v: &[u8]) -> Result<(), CmdError> {
    pop_values(ctx, src, from_front, 1)?;
    notify_pop(ctx, src, from_front);
    ctx.out.bulk(v);
    Ok(())
}

/// LPUSH (`to_front`) or RPUSH: the command that puts a moved element on its destination.
pub fn push_for(
    to_front: bool,
) -> Result<(&'static super::table::CommandSpec, &'static [u8]), CmdError> {
    let name: &'static [u8] = if to_front { b"lpush" } else { b"rpush" };
    match super::table().lookup(name) {
        Some(push) => Ok((push, name)),
        None => Err(CmdError::Err("no push command".to_string())),
    }
}

/// The sides of LMOVE or BLMOVE (`wherefrom`, `whereto`: true for LEFT), or RPOPLPUSH or
/// BRPOPLPUSH (RIGHT, LEFT).
pub fn move_sides(argv: &[&[u8]]) -> Result<(bool, bool), CmdError> {
    let name = arg(argv, 0);
    if eq_ic(name, "rpoplpush") || eq_ic(name, "brpoplpush") {
        return Ok((false, true));
    }
    Ok((parse_side(arg(argv, 3))?, parse_side(arg(argv, 4))?))
}

fn lmove(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let from = parse_side(arg(argv, 3))?;
    let to = parse_side(arg(argv, 4))?;
    move_generic(ctx, arg(argv, 1), arg(argv, 2), from, to)
}

fn rpoplpush(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    move_generic(ctx, arg(argv, 1), arg(argv, 2), false, true)
}

/// Parsed LMPOP / BLMPOP arguments after `numkeys_idx`.
pub struct MpopArgs<'a> {
    pub keys: Vec<&'a [u8]>,
    pub front: bool,
    pub count: usize,
}

/// Parses `numkeys key... LEFT|RIGHT [COUNT n]` starting at `numkeys_idx`.
pub fn parse_mpop<'a>(argv: &[&'a [u8]], numkeys_idx: usize) -> Result<MpopArgs<'a>, CmdError> {
    let numkeys = match parse_i64(arg(argv, numkeys_idx)) {
        Some(n) if n >= 1 => n as u64,
        _ => {
            return Err(CmdError::Err(
                "numkeys should be greater than 0".to_string(),
            ));
        }
    };
    let avail = argv.len().saturating_sub(numkeys_idx + 2) as u64;
    if numkeys > avail {
        return Err(CmdError::Syntax);
    }
    let nk = numkeys as usize;
    let keys: Vec<&[u8]> = argv
        .get(numkeys_idx + 1..numkeys_idx + 1 + nk)
        .unwrap_or_default()
        .to_vec();
    let where_idx = numkeys_idx + 1 + nk;
    let front = parse_side(arg(argv, where_idx))?;
    let mut count: Option<usize> = None;
    let mut j = where_idx + 1;
    while j < argv.len() {
        if eq_ic(arg(argv, j), "count") && j + 1 < argv.len() && count.is_none() {
            j += 1;
            match parse_i64(arg(argv, j)) {
                Some(n) if n >= 1 => count = Some(usize::try_from(n).unwrap_or(usize::MAX)),
                _ => {
                    return Err(CmdError::Err("count should be greater than 0".to_string()));
                }
            }
        } else {
            return Err(CmdError::Syntax);
        }
        j += 1;
    }
    Ok(MpopArgs {
        keys,
        front,
        count: count.unwrap_or(1),
    })
}

/// Pops from the first non-empty list of `keys` and replies `[key, [values]]`; false when
/// every key is missing (nothing replied).
pub fn mpop_first(ctx: &mut Ctx<'_>, a: &MpopArgs<'_>) -> Result<bool, CmdError> {
    for key in &a.keys {
        if let Some(values) = pop_or_skip(ctx, key, a.front, a.count)? {
            if values.is_empty() {
                continue;
            }
            ctx.out.array(2);
            ctx.out.bulk(key);
            ctx.out.array(values.len());
            for v in &values {
                ctx.out.bulk(v);
            }
            return Ok(true);
        }
    }
    Ok(false)
}

fn lmpop(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let a = parse_mpop(argv, 1)?;
    if !mpop_first(ctx, &a)? {
        ctx.out.null_array();
    }
    Ok(())
}

/// `pop_values`, except that on a blocked client's re-run a key of another type counts as
/// empty: Redis 7.0 serves a blocked client only from a list.
fn pop_or_skip(
    ctx: &mut Ctx<'_>,
    key: &[u8],
    front: bool,
    count: usize,
) -> Result<Option<Vec<Vec<u8>>>, CmdError> {
    match pop_values(ctx, key, front, count) {
        Err(_) if ctx.is_rerun() => Ok(None),
        Ok(Some(v)) => {
            if !v.is_empty() {
                notify_pop(ctx, key, front);
            }
            Ok(Some(v))
        }
        r => r,
    }
}

/// BLPOP / BRPOP key [key ...] timeout.
fn bpop_generic(ctx: &mut Ctx<'_>, argv: &[&[u8]], front: bool) -> Result<(), CmdError> {
    let deadline = parse_timeout(argv.last().copied().unwrap_or_default(), ctx.now_ms)?;
    let keys = argv.get(1..argv.len() - 1).unwrap_or_default();
    for key in keys {
        if let Some(values) = pop_or_skip(ctx, key, front, 1)? {
            if let Some(v) = values.first() {
                ctx.out.array(2);
                ctx.out.bulk(key);
                ctx.out.bulk(v);
                return Ok(());
            }
        }
    }
    ctx.block(keys, deadline);
    Ok(())
}

fn blpop(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    bpop_generic(ctx, argv, true)
}

fn brpop(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    bpop_generic(ctx, argv, false)
}

/// BLMOVE / BRPOPLPUSH: LMOVE when the source exists, else block on it (inside MULTI: the
/// null bulk string, as Redis).
fn bmove_generic(
    ctx: &mut Ctx<'_>,
    src: &[u8],
    dst: &[u8],
    from_front: bool,
    to_front: bool,
    deadline: Option<u64>,
) -> Result<(), CmdError> {
    let db = ctx.db();
    let rerun = ctx.is_rerun();
    let exists = match ctx.shard.lookup_quiet(db, src, ctx.now_ms) {
        None => false,
        // On a re-run a source of another type counts as empty (see `pop_or_skip`).
        Some(e) => match list_of(&e.state) {
            Ok(l) => l.is_some(),
            Err(_) if rerun => false,
            Err(e) => return Err(e),
        },
    };
    if exists {
        return move_generic(ctx, src, dst, from_front, to_front);
    }
    if !ctx.can_block() {
        ctx.out.null();
        return Ok(());
    }
    ctx.block(&[src], deadline);
    Ok(())
}

fn brpoplpush(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let deadline = parse_timeout(arg(argv, 3), ctx.now_ms)?;
    bmove_generic(ctx, arg(argv, 1), arg(argv, 2), false, true, deadline)
}

fn blmove(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let from = parse_side(arg(argv, 3))?;
    let to = parse_side(arg(argv, 4))?;
    let deadline = parse_timeout(arg(argv, 5), ctx.now_ms)?;
    bmove_generic(ctx, arg(argv, 1), arg(argv, 2), from, to, deadline)
}

/// BLMPOP timeout numkeys key [key ...] LEFT|RIGHT [COUNT count].
fn blmpop(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let deadline = parse_timeout(arg(argv, 1), ctx.now_ms)?;
    let a = parse_mpop(argv, 2)?;
    if !mpop_first(ctx, &a)? {
        ctx.block(&a.keys, deadline);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_resolution_like_redis() {
        assert_eq!(resolve_index(0, 3), Some(0));
        assert_eq!(resolve_index(-1, 3), Some(2));
        assert_eq!(resolve_index(-4, 3), None);
        assert_eq!(resolve_index(3, 3), None);
        assert_eq!(resolve_index(i64::MIN, 3), None);
    }

    #[test]
    fn mpop_arguments() {
        let argv: Vec<&[u8]> = vec![b"lmpop", b"2", b"a", b"b", b"LEFT", b"COUNT", b"3"];
        let a = parse_mpop(&argv, 1).unwrap();
        assert_eq!(a.keys.len(), 2);
        assert!(a.front);
        assert_eq!(a.count, 3);
        let argv: Vec<&[u8]> = vec![b"lmpop", b"3", b"a", b"LEFT"];
        assert_eq!(parse_mpop(&argv, 1).err(), Some(CmdError::Syntax));
    }
}
