//! String commands: GET SET SETNX SETEX PSETEX GETSET GETDEL GETEX MGET MSET MSETNX APPEND
//! STRLEN GETRANGE SUBSTR SETRANGE INCR DECR INCRBY DECRBY INCRBYFLOAT LCS.
//!
//! Semantics, option parsing, reply shapes and error texts follow Redis 7.0 (`t_string.c`).
//! Every write is a CRDT effect built from the key's current view:
//! - SET, GETSET, MSET, APPEND, SETRANGE: `Assign` of the whole new value (APPEND and
//!   SETRANGE keep the TTL, as Redis modifies those strings in place);
//! - SET EX/PX/EXAT/PXAT, SETEX, PSETEX, GETEX: an `Expire` write after the value;
//! - INCR, DECR, INCRBY, DECRBY, INCRBYFLOAT: `Incr`, so concurrent increments add up;
//! - GETDEL and GETEX with a past EXAT/PXAT: `Remove`.
//!
//! The GET/SET path stores the argument as is and allocates nothing else; integer values are
//! rendered on the stack.

use std::borrow::Cow;

use meridian_crdt::string::STR_EDIT_END_BYTES_MAX;
use meridian_crdt::{Dec, Delta, Effect, Expire, KeyState, StrEdit, StrView, TypeTag};

use super::args::{LongDouble, eq_ic, int_arg, parse_i64, parse_long_double};
use super::{Ctx, Handler};
use crate::error::CmdError;
use crate::notify;
use crate::resp::reply::Reply;

pub const HANDLERS: &[(&str, Handler)] = &[
    ("get", get),
    ("set", set),
    ("setnx", setnx),
    ("setex", setex),
    ("psetex", psetex),
    ("getset", getset),
    ("getdel", getdel),
    ("getex", getex),
    ("mget", mget),
    ("mset", mset),
    ("msetnx", msetnx),
    ("append", append),
    ("strlen", strlen),
    ("getrange", getrange),
    ("substr", getrange),
    ("setrange", setrange),
    ("incr", incr),
    ("decr", decr),
    ("incrby", incrby),
    ("decrby", decrby),
    ("incrbyfloat", incrbyfloat),
    ("lcs", lcs),
];

// ---------------------------------------------------------------------------------------------
// Shared helpers
// ---------------------------------------------------------------------------------------------

/// `argv[i]`, or an empty slice (arity was checked by the dispatcher, so this never misses).
fn arg<'a>(argv: &[&'a [u8]], i: usize) -> &'a [u8] {
    argv.get(i).copied().unwrap_or_default()
}

/// The string a key shows, or WRONGTYPE when it holds another type.
pub(super) fn str_view(state: &KeyState) -> Result<StrView<'_>, CmdError> {
    // HyperLogLog (cmd/hll.rs): a string to clients, whose bytes are Redis's HYLL encoding.
    if let Some(h) = state.hll() {
        return Ok(StrView::Bytes(h.bytes()));
    }
    if state.type_tag() != Some(TypeTag::String) {
        return Err(CmdError::WrongType);
    }
    Ok(state.view_str().unwrap_or(StrView::Bytes(b"")))
}

/// Calls `f` with the bytes of `view` (integers rendered on the stack).
pub(super) fn with_bytes<R>(view: StrView<'_>, f: impl FnOnce(&[u8]) -> R) -> R {
    match view {
        StrView::Bytes(b) => f(b),
        StrView::Int(n) => {
            let mut buf = itoa::Buffer::new();
            f(buf.format(n).as_bytes())
        }
        StrView::Float(d) => f(d.format_redis().as_bytes()),
    }
}

/// Length of the bytes of `view`.
pub(super) fn view_len(view: StrView<'_>) -> usize {
    match view {
        StrView::Bytes(b) => b.len(),
        other => with_bytes(other, <[u8]>::len),
    }
}

/// Replies `view` as a bulk string.
fn reply_view(out: &mut Reply, view: StrView<'_>) {
    match view {
        StrView::Bytes(b) => out.bulk(b),
        StrView::Int(n) => out.bulk_int(n),
        StrView::Float(d) => out.bulk(d.format_redis().as_bytes()),
    }
}

/// Redis's `getGenericCommand`: replies the value (or null) of `key`, WRONGTYPE for another
/// type (nothing replied then). Returns whether the key existed.
fn reply_get(ctx: &mut Ctx<'_>, key: &[u8]) -> Result<bool, CmdError> {
    let db = ctx.db();
    match ctx.shard.lookup_read(db, key, ctx.now_ms) {
        None => {
            ctx.out.null();
            Ok(false)
        }
        Some(state) => {
            let view = str_view(state)?;
            reply_view(ctx.out, view);
            Ok(true)
        }
    }
}

/// Whether `key` exists, as Redis's `lookupKeyWrite` sees it (expires it first, no stats).
fn exists_for_write(ctx: &mut Ctx<'_>, key: &[u8]) -> bool {
    let db = ctx.db();
    ctx.shard.lookup_quiet(db, key, ctx.now_ms).is_some()
}

/// Assigns `value` to `key`; `keep_ttl` keeps an existing TTL.
pub(super) fn assign<B: AsRef<[u8]>>(ctx: &mut Ctx<'_>, key: &[u8], value: B, keep_ttl: bool) {
    // A valid HyperLogLog value makes the key a HyperLogLog, as in Redis (cmd/hll.rs).
    if meridian_crdt::hll::is_valid(value.as_ref()) {
        super::hll::store_string(ctx, key, value.as_ref(), keep_ttl);
        return;
    }
    let db = ctx.db();
    ctx.shard.write_key(db, key, ctx.now_ms, |state| {
        state.assign_effect(value, keep_ttl)
    });
}

/// Changes the string `key` shows (it exists: the caller has checked its type and the
/// length limit) by `edit`, replicated as the edit alone (docs/conflicts.md §1.1) where
/// `KeyState::can_edit` allows and the key stays a plain string; otherwise as the whole new
/// value, TTL kept, like `assign` (a value that becomes a valid HyperLogLog turns the key into
/// one: an edit that would make the first bytes a HyperLogLog's magic goes that way).
pub(super) fn write_edit(ctx: &mut Ctx<'_>, key: &[u8], edit: StrEdit<Cow<'_, [u8]>>) {
    let db = ctx.db();
    let plain = edit.end_bytes() <= STR_EDIT_END_BYTES_MAX
        && ctx
            .shard
            .lookup_quiet(db, key, ctx.now_ms)
            .is_some_and(|e| match e.state.view_str() {
                Some(StrView::Bytes(b)) => e.state.can_edit() && edit_keeps_type(b, &edit),
                _ => false,
            });
    if plain {
        ctx.shard
            .write_key(db, key, ctx.now_ms, |_| Effect::StrEdit(edit));
        return;
    }
    let mut v = match ctx.shard.lookup_quiet(db, key, ctx.now_ms) {
        Some(e) => match str_view(&e.state) {
            Ok(view) => with_bytes(view, <[u8]>::to_vec),
            Err(_) => Vec::new(),
        },
        None => Vec::new(),
    };
    edit.apply_to(&mut v);
    assign(ctx, key, v, true);
}

/// Whether `edit` on the plain string `b` leaves a plain string: its first 4 bytes, which
/// decide whether a string is a HyperLogLog ("HYLL"), are not a HyperLogLog's after it (nor
/// before: such a string is checked whole by `assign`). Only those bytes are computed.
fn edit_keeps_type<B: AsRef<[u8]>>(b: &[u8], edit: &StrEdit<B>) -> bool {
    const MAGIC: &[u8] = b"HYLL";
    if b.starts_with(MAGIC) {
        return false;
    }
    let n = MAGIC.len();
    let touches = match edit {
        StrEdit::Append(_) => b.len() < n,
        StrEdit::SetRange { offset, .. } => *offset < n as u64,
        StrEdit::SetBits { offset, .. } | StrEdit::IncrBits { offset, .. } => {
            *offset < n as u64 * 8
        }
    };
    if !touches {
        return true;
    }
    let mut head = b.get(..n).unwrap_or(b).to_vec();
    match edit {
        StrEdit::Append(x) => {
            let x = x.as_ref();
            head.extend_from_slice(x.get(..n).unwrap_or(x));
        }
        _ => edit.apply_to(&mut head),
    }
    !head.starts_with(MAGIC)
}

/// Writes the TTL of `key` (`Expire::Persist` removes it).
fn write_expire(ctx: &mut Ctx<'_>, key: &[u8], expire: Expire) {
    let db = ctx.db();
    ctx.shard.write_key(db, key, ctx.now_ms, |state| {
        state.expire_effect::<&[u8]>(expire)
    });
}

/// Redis's `checkStringLength`: `size + append` must fit in proto-max-bulk-len.
fn check_string_length(size: u64, append: u64, max: u64) -> Result<(), CmdError> {
    let total = u128::from(size) + u128::from(append);
    if total > u128::from(max) {
        Err(CmdError::StringTooLong)
    } else {
        Ok(())
    }
}

/// An option name as C sees it: up to the first NUL byte.
fn c_str(b: &[u8]) -> &[u8] {
    match b.iter().position(|&c| c == 0) {
        Some(i) => b.get(..i).unwrap_or(b),
        None => b,
    }
}

// ---------------------------------------------------------------------------------------------
// Expire arguments (SET, SETEX, PSETEX, GETEX)
// ---------------------------------------------------------------------------------------------

const OPT_NX: u16 = 1 << 0;
const OPT_XX: u16 = 1 << 1;
const OPT_EX: u16 = 1 << 2;
const OPT_PX: u16 = 1 << 3;
const OPT_KEEPTTL: u16 = 1 << 4;
const OPT_GET: u16 = 1 << 5;
const OPT_EXAT: u16 = 1 << 6;
const OPT_PXAT: u16 = 1 << 7;
const OPT_PERSIST: u16 = 1 << 8;

const OPT_ANY_EXPIRE: u16 = OPT_EX | OPT_PX | OPT_EXAT | OPT_PXAT;

/// Parsed options of SET (`is_set`) or GETEX.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct ExtArgs<'a> {
    flags: u16,
    /// The expire argument, when EX/PX/EXAT/PXAT was given (the last one wins).
    expire: Option<&'a [u8]>,
}

/// Redis's `parseExtendedStringArgumentsOrReply`: options from `argv[start..]`; a repeated
/// option is accepted, a conflicting one or a missing expire value is a syntax error.
fn parse_ext_args<'a>(
    argv: &[&'a [u8]],
    start: usize,
    is_set: bool,
) -> Result<ExtArgs<'a>, CmdError> {
    let mut a = ExtArgs::default();
    let mut j = start;
    while j < argv.len() {
        let opt = c_str(arg(argv, j));
        let next = argv.get(j + 1).copied();
        let f = a.flags;
        let has = |bits: u16| f & bits != 0;
        let expire_opt = |bit: u16| -> Option<u16> {
            let others = (OPT_ANY_EXPIRE & !bit) | OPT_KEEPTTL | OPT_PERSIST;
            (!has(others) && next.is_some()).then_some(bit)
        };
        let matched: Option<u16> = if eq_ic(opt, "nx") {
            (is_set && !has(OPT_XX)).then_some(OPT_NX)
        } else if eq_ic(opt, "xx") {
            (is_set && !has(OPT_NX)).then_some(OPT_XX)
        } else if eq_ic(opt, "get") {
            is_set.then_some(OPT_GET)
        } else if eq_ic(opt, "keepttl") {
            (is_set && !has(OPT_PERSIST | OPT_ANY_EXPIRE)).then_some(OPT_KEEPTTL)
        } else if eq_ic(opt, "persist") {
            (!is_set && !has(OPT_ANY_EXPIRE | OPT_KEEPTTL)).then_some(OPT_PERSIST)
        } else if eq_ic(opt, "ex") {
            expire_opt(OPT_EX)
        } else if eq_ic(opt, "px") {
            expire_opt(OPT_PX)
        } else if eq_ic(opt, "exat") {
            expire_opt(OPT_EXAT)
        } else if eq_ic(opt, "pxat") {
            expire_opt(OPT_PXAT)
        } else {
            None
        };
        let Some(bit) = matched else {
            return Err(CmdError::Syntax);
        };
        a.flags |= bit;
        if bit & OPT_ANY_EXPIRE != 0 {
            a.expire = next;
            j += 1;
        }
        j += 1;
    }
    Ok(a)
}

/// Redis's `getExpireMillisecondsOrReply`: the absolute deadline in ms for the expire
/// argument `raw`, in seconds (`seconds`) or ms, relative to `now_ms` (`relative`) or absolute.
/// `cmd` names the command in the error text.
fn expire_deadline(
    raw: &[u8],
    seconds: bool,
    relative: bool,
    now_ms: u64,
    cmd: &str,
) -> Result<u64, CmdError> {
    let mut ms = int_arg(raw)?;
    let invalid = || CmdError::InvalidExpire(cmd.to_string());
    if ms <= 0 || (seconds && ms > i64::MAX / 1000) {
        return Err(invalid());
    }
    if seconds {
        ms *= 1000;
    }
    if relative {
        // Redis adds in signed 64-bit and treats a wrapped (non-positive) sum as overflow.
        ms = ms.wrapping_add(i64::try_from(now_ms).unwrap_or(i64::MAX));
    }
    if ms <= 0 {
        return Err(invalid());
    }
    u64::try_from(ms).map_err(|_| invalid())
}

/// The deadline of the expire option parsed into `a`, if any.
fn ext_deadline(a: &ExtArgs<'_>, now_ms: u64, cmd: &str) -> Result<Option<u64>, CmdError> {
    match a.expire {
        None => Ok(None),
        Some(raw) => {
            let seconds = a.flags & (OPT_EX | OPT_EXAT) != 0;
            let relative = a.flags & (OPT_EX | OPT_PX) != 0;
            expire_deadline(raw, seconds, relative, now_ms, cmd).map(Some)
        }
    }
}

// ---------------------------------------------------------------------------------------------
// GET SET SETNX SETEX PSETEX GETSET GETDEL GETEX
// ---------------------------------------------------------------------------------------------

fn get(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    reply_get(ctx, arg(argv, 1)).map(|_| ())
}

/// What SET-like commands reply when they set, or when NX/XX stopped them.
#[derive(Clone, Copy)]
enum SetReply {
    Ok,
    Null,
    One,
    Zero,
}

fn write_set_reply(out: &mut Reply, r: SetReply) {
    match r {
        SetReply::Ok => out.ok(),
        SetReply::Null => out.null(),
        SetReply::One => out.int(1),
        SetReply::Zero => out.int(0),
    }
}

/// Redis's `setGenericCommand` after the expire argument was validated into `deadline`.
fn set_generic(
    ctx: &mut Ctx<'_>,
    flags: u16,
    key: &[u8],
    value: &[u8],
    deadline: Option<u64>,
    ok_reply: SetReply,
    abort_reply: SetReply,
) -> Result<(), CmdError> {
    let with_get = flags & OPT_GET != 0;
    if with_get {
        reply_get(ctx, key)?;
    }
    if flags & (OPT_NX | OPT_XX) != 0 {
        let found = exists_for_write(ctx, key);
        if (flags & OPT_NX != 0 && found) || (flags & OPT_XX != 0 && !found) {
            if !with_get {
                write_set_reply(ctx.out, abort_reply);
            }
            return Ok(());
        }
    }
    assign(ctx, key, value, flags & OPT_KEEPTTL != 0);
    ctx.notify(notify::STRING, "set", key);
    if let Some(at) = deadline {
        write_expire(ctx, key, Expire::AtMs(at));
        ctx.notify(notify::GENERIC, "expire", key);
    }
    if !with_get {
        write_set_reply(ctx.out, ok_reply);
    }
    Ok(())
}

/// SET key value [NX|XX] [GET] [EX s|PX ms|EXAT ts|PXAT ms-ts|KEEPTTL]
fn set(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let a = parse_ext_args(argv, 3, true)?;
    let deadline = ext_deadline(&a, ctx.now_ms, ctx.spec.meta.name)?;
    set_generic(
        ctx,
        a.flags,
        arg(argv, 1),
        arg(argv, 2),
        deadline,
        SetReply::Ok,
        SetReply::Null,
    )
}

fn setnx(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    set_generic(
        ctx,
        OPT_NX,
        arg(argv, 1),
        arg(argv, 2),
        None,
        SetReply::One,
        SetReply::Zero,
    )
}

fn setex(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let at = expire_deadline(arg(argv, 2), true, true, ctx.now_ms, ctx.spec.meta.name)?;
    set_generic(
        ctx,
        OPT_EX,
        arg(argv, 1),
        arg(argv, 3),
        Some(at),
        SetReply::Ok,
        SetReply::Null,
    )
}

fn psetex(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let at = expire_deadline(arg(argv, 2), false, true, ctx.now_ms, ctx.spec.meta.name)?;
    set_generic(
        ctx,
        OPT_PX,
        arg(argv, 1),
        arg(argv, 3),
        Some(at),
        SetReply::Ok,
        SetReply::Null,
    )
}

fn getset(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let key = arg(argv, 1);
    reply_get(ctx, key)?;
    assign(ctx, key, arg(argv, 2), false);
    ctx.notify(notify::STRING, "set", key);
    Ok(())
}

fn getdel(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let key = arg(argv, 1);
    if reply_get(ctx, key)? {
        let db = ctx.db();
        ctx.shard.delete_key(db, key, ctx.now_ms);
        ctx.notify(notify::GENERIC, "del", key);
    }
    Ok(())
}

/// GETEX key [EX s|PX ms|EXAT ts|PXAT ms-ts|PERSIST]
fn getex(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let a = parse_ext_args(argv, 2, false)?;
    let key = arg(argv, 1);
    let db = ctx.db();
    let now = ctx.now_ms;
    let Some(state) = ctx.shard.lookup_read(db, key, now) else {
        ctx.out.null();
        return Ok(());
    };
    let view = str_view(state)?;
    // Redis validates the expire value only once the key is known to be a string.
    let deadline = ext_deadline(&a, now, ctx.spec.meta.name)?;
    let had_ttl = state.expire_at_ms().is_some();
    reply_view(ctx.out, view);
    match deadline {
        Some(at) if a.flags & (OPT_EXAT | OPT_PXAT) != 0 && at <= now => {
            ctx.shard.delete_key(db, key, now);
            ctx.notify(notify::GENERIC, "del", key);
        }
        Some(at) => {
            write_expire(ctx, key, Expire::AtMs(at));
            ctx.notify(notify::GENERIC, "expire", key);
        }
        None if a.flags & OPT_PERSIST != 0 && had_ttl => {
            write_expire(ctx, key, Expire::Persist);
            ctx.notify(notify::GENERIC, "persist", key);
        }
        None => {}
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// MGET MSET MSETNX
// ---------------------------------------------------------------------------------------------

fn mget(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let keys = argv.get(1..).unwrap_or_default();
    let db = ctx.db();
    ctx.out.array(keys.len());
    for key in keys {
        match ctx.shard.lookup_read(db, key, ctx.now_ms) {
            // str_view: strings and HyperLogLogs; other types reply null.
            Some(state) => match str_view(state) {
                Ok(view) => reply_view(ctx.out, view),
                Err(_) => ctx.out.null(),
            },
            None => ctx.out.null(),
        }
    }
    Ok(())
}

/// Key/value pairs of MSET/MSETNX; an odd count is the arity error Redis gives.
fn mset_pairs<'a, 'b>(ctx: &Ctx<'_>, argv: &'b [&'a [u8]]) -> Result<&'b [&'a [u8]], CmdError> {
    if argv.len() % 2 == 0 {
        return Err(CmdError::WrongArity(ctx.spec.meta.name.to_string()));
    }
    Ok(argv.get(1..).unwrap_or_default())
}

fn mset(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let pairs = mset_pairs(ctx, argv)?;
    for kv in pairs.chunks_exact(2) {
        if let [k, v] = kv {
            assign(ctx, k, *v, false);
            ctx.notify(notify::STRING, "set", k);
        }
    }
    ctx.out.ok();
    Ok(())
}

fn msetnx(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let pairs = mset_pairs(ctx, argv)?;
    for kv in pairs.chunks_exact(2) {
        if let Some(k) = kv.first() {
            if exists_for_write(ctx, k) {
                ctx.out.int(0);
                return Ok(());
            }
        }
    }
    for kv in pairs.chunks_exact(2) {
        if let [k, v] = kv {
            assign(ctx, k, *v, false);
            ctx.notify(notify::STRING, "set", k);
        }
    }
    ctx.out.int(1);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// APPEND STRLEN GETRANGE SETRANGE
// ---------------------------------------------------------------------------------------------

fn append(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let (key, tail) = (arg(argv, 1), arg(argv, 2));
    let db = ctx.db();
    let max = ctx.shard.config.proto_max_bulk_len;
    let len = match ctx.shard.lookup_quiet(db, key, ctx.now_ms) {
        None => None,
        Some(e) => {
            let len = view_len(str_view(&e.state)?);
            check_string_length(len as u64, tail.len() as u64, max)?;
            Some(len)
        }
    };
    let total = match len {
        None => {
            assign(ctx, key, tail, false);
            tail.len()
        }
        Some(len) => {
            edit_or_assign(ctx, key, StrEdit::Append(Cow::Borrowed(tail)));
            // Redis appends to an unshared sds in place: the value reports "raw".
            ctx.shard.mark_raw_encoding(db, key);
            len + tail.len()
        }
    };
    ctx.notify(notify::STRING, "append", key);
    ctx.out.int(total as i64);
    Ok(())
}

/// APPEND and SETRANGE of an existing string. With no peers they are edits (`write_edit`):
/// the op log holds what changed, and the string grows in place (`StrCrdt::collect_all`
/// folds its edits geometrically), so n APPENDs cost O(total length), as in Redis. With
/// peers they replicate the whole new value, an assignment that keeps the TTL: APPEND ∥ DEL
/// must leave the old value with the suffix at every site (the seed paper's Table 7,
/// docs/conflicts.md §4), and a site that applied the DEL no longer holds the bytes an edit
/// would extend. With no peers no removal can be concurrent with the edit (the assumption
/// under which every write is folded at once), so the edit shows what the assignment would.
fn edit_or_assign(ctx: &mut Ctx<'_>, key: &[u8], edit: StrEdit<Cow<'_, [u8]>>) {
    if ctx.shard.peers == 0 {
        write_edit(ctx, key, edit);
        return;
    }
    let db = ctx.db();
    let mut v = Vec::new();
    if let Some(e) = ctx.shard.lookup_quiet(db, key, ctx.now_ms) {
        if let Ok(view) = str_view(&e.state) {
            v.reserve(view_len(view) + edit_len(&edit));
            with_bytes(view, |b| v.extend_from_slice(b));
        }
    }
    edit.apply_to(&mut v);
    assign(ctx, key, v, true);
}

/// Bytes an APPEND or SETRANGE edit carries (a capacity hint).
fn edit_len<B: AsRef<[u8]>>(edit: &StrEdit<B>) -> usize {
    match edit {
        StrEdit::Append(b) | StrEdit::SetRange { bytes: b, .. } => b.as_ref().len(),
        StrEdit::SetBits { .. } | StrEdit::IncrBits { .. } => 0,
    }
}

fn strlen(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let db = ctx.db();
    let n = match ctx.shard.lookup_read(db, arg(argv, 1), ctx.now_ms) {
        None => 0,
        Some(state) => view_len(str_view(state)?),
    };
    ctx.out.int(n as i64);
    Ok(())
}

/// The byte range GETRANGE returns for `start..=end` of a `len`-byte string, as Redis 7.0
/// computes it (negative indexes from the end, clamped); `None` for the empty string.
fn getrange_bounds(len: usize, start: i64, end: i64) -> Option<(usize, usize)> {
    if start < 0 && end < 0 && start > end {
        return None;
    }
    let len = i128::try_from(len).unwrap_or(i128::MAX);
    let (mut s, mut e) = (i128::from(start), i128::from(end));
    if s < 0 {
        s += len;
    }
    if e < 0 {
        e += len;
    }
    s = s.max(0);
    e = e.max(0);
    if e >= len {
        e = len - 1;
    }
    if s > e || len == 0 {
        return None;
    }
    Some((usize::try_from(s).ok()?, usize::try_from(e).ok()?))
}

/// GETRANGE (and SUBSTR) key start end
fn getrange(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let start = int_arg(arg(argv, 2))?;
    let end = int_arg(arg(argv, 3))?;
    let db = ctx.db();
    let Some(state) = ctx.shard.lookup_read(db, arg(argv, 1), ctx.now_ms) else {
        ctx.out.bulk(b"");
        return Ok(());
    };
    let view = str_view(state)?;
    let out = &mut *ctx.out;
    with_bytes(view, |b| {
        let part = getrange_bounds(b.len(), start, end)
            .and_then(|(s, e)| b.get(s..=e))
            .unwrap_or_default();
        out.bulk(part);
    });
    Ok(())
}

/// SETRANGE key offset value
fn setrange(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let (key, value) = (arg(argv, 1), arg(argv, 3));
    let offset = int_arg(arg(argv, 2))?;
    let Ok(offset) = u64::try_from(offset) else {
        return Err(CmdError::OffsetOutOfRange);
    };
    let db = ctx.db();
    let max = ctx.shard.config.proto_max_bulk_len;
    let current = match ctx.shard.lookup_quiet(db, key, ctx.now_ms) {
        None => {
            if value.is_empty() {
                ctx.out.int(0);
                return Ok(());
            }
            check_string_length(offset, value.len() as u64, max)?;
            None
        }
        Some(e) => {
            let view = str_view(&e.state)?;
            let olen = view_len(view);
            if value.is_empty() {
                ctx.out.int(olen as i64);
                return Ok(());
            }
            check_string_length(offset, value.len() as u64, max)?;
            Some(olen)
        }
    };
    // offset + len fits in proto-max-bulk-len (checked above), hence in usize.
    let off = usize::try_from(offset).map_err(|_| CmdError::StringTooLong)?;
    let end = off + value.len();
    let n = match current {
        // An edit with no peers, the whole new value with peers, as APPEND (above):
        // SETRANGE ∥ DEL keeps the old value with the range written at every site.
        Some(olen) => {
            let edit = StrEdit::SetRange {
                offset,
                bytes: Cow::Borrowed(value),
            };
            edit_or_assign(ctx, key, edit);
            olen.max(end)
        }
        None => {
            let mut buf = vec![0; end];
            if let Some(dst) = buf.get_mut(off..end) {
                dst.copy_from_slice(value);
            }
            assign(ctx, key, buf, false);
            end
        }
    };
    // Redis writes into a fresh or unshared sds: the value reports "raw".
    ctx.shard.mark_raw_encoding(db, key);
    ctx.notify(notify::STRING, "setrange", key);
    ctx.out.int(n as i64);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// INCR DECR INCRBY DECRBY INCRBYFLOAT
// ---------------------------------------------------------------------------------------------

/// The integer a string shows, as Redis's `getLongLongFromObject` reads it.
pub(super) fn view_i64(view: StrView<'_>) -> Option<i64> {
    match view {
        StrView::Bytes(b) => parse_i64(b),
        StrView::Int(n) => Some(n),
        // Redis stores INCRBYFLOAT results as text: read that text back.
        StrView::Float(d) => parse_i64(d.format_redis().as_bytes()),
    }
}

/// Redis's `incrDecrCommand`.
fn incr_by(ctx: &mut Ctx<'_>, key: &[u8], by: i64) -> Result<(), CmdError> {
    let db = ctx.db();
    let now = ctx.now_ms;
    let current = match ctx.shard.lookup_quiet(db, key, now) {
        None => 0,
        Some(e) => view_i64(str_view(&e.state)?).ok_or(CmdError::NotInteger)?,
    };
    let new = current.checked_add(by).ok_or(CmdError::Overflow)?;
    let me = ctx.shard.replica;
    ctx.shard.write_key(db, key, now, |state| {
        state.incr_effect::<&[u8]>(me, Delta::Int(by))
    });
    ctx.notify(notify::STRING, "incrby", key);
    ctx.out.int(new);
    Ok(())
}

fn incr(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    incr_by(ctx, arg(argv, 1), 1)
}

fn decr(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    incr_by(ctx, arg(argv, 1), -1)
}

fn incrby(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let by = int_arg(arg(argv, 2))?;
    incr_by(ctx, arg(argv, 1), by)
}

fn decrby(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let by = int_arg(arg(argv, 2))?;
    if by == i64::MIN {
        return Err(CmdError::Err("decrement would overflow".to_string()));
    }
    incr_by(ctx, arg(argv, 1), -by)
}

fn incrbyfloat(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let key = arg(argv, 1);
    let db = ctx.db();
    let now = ctx.now_ms;
    // `exact`: whether the CRDT reads the stored value as the same number, so that an
    // increment effect shows the same result; otherwise the result is assigned.
    let (current, exact) = match ctx.shard.lookup_quiet(db, key, now) {
        None => (LongDouble::Finite(Dec::ZERO), true),
        Some(e) => match str_view(&e.state)? {
            StrView::Int(n) => (LongDouble::Finite(Dec::from_i64(n)), true),
            StrView::Float(d) => (LongDouble::Finite(d), true),
            StrView::Bytes(b) => {
                let v = parse_long_double(b).ok_or(CmdError::NotFloat)?;
                (v, Dec::parse(b).is_some())
            }
        },
    };
    let incr = parse_long_double(arg(argv, 2)).ok_or(CmdError::NotFloat)?;
    let (LongDouble::Finite(cur), LongDouble::Finite(by)) = (current, incr) else {
        return Err(CmdError::NanOrInfinity);
    };
    // Redis's sum, in `long double`: the counter moves by what brings it there.
    let super::ext80::FloatIncrement { text, delta } = super::ext80::float_increment(cur, by)?;
    if let (true, Some(delta)) = (exact, delta) {
        let me = ctx.shard.replica;
        ctx.shard.write_key(db, key, now, |state| {
            state.incr_effect::<&[u8]>(me, Delta::Float(delta))
        });
        // The CRDT adds the running totals of the increments to the base, in 34 digits: past
        // that precision (`10.6 + 1e308 - 1e308`) the sums may round differently from this
        // reply's. Assign the reply then, so that GET shows what INCRBYFLOAT answered.
        let shown = ctx.shard.lookup_quiet(db, key, now).and_then(|e| {
            str_view(&e.state)
                .ok()
                .map(|v| with_bytes(v, |b| b == text.as_bytes()))
        });
        if shown != Some(true) {
            assign(ctx, key, text.as_bytes(), true);
        }
    } else {
        assign(ctx, key, text.as_bytes(), true);
    }
    // Redis stores the result as text (embstr or raw by length), never as an integer: the
    // increment's effect says so (`keyspace::StrEnc`), and so must an assignment of it.
    ctx.shard
        .set_str_encoding(db, key, crate::keyspace::StrEnc::Text);
    ctx.notify(notify::STRING, "incrbyfloat", key);
    ctx.out.bulk(text.as_bytes());
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// LCS
// ---------------------------------------------------------------------------------------------

/// The bytes of a string key for LCS: empty when missing; Redis's LCS text for another type.
fn lcs_operand(ctx: &mut Ctx<'_>, key: &[u8]) -> Result<Vec<u8>, CmdError> {
    let db = ctx.db();
    let Some(state) = ctx.shard.lookup_read(db, key, ctx.now_ms) else {
        return Ok(Vec::new());
    };
    let view = str_view(state)
        .map_err(|_| CmdError::Err("The specified keys must contain string values".to_string()))?;
    Ok(with_bytes(view, <[u8]>::to_vec))
}

/// LCS key1 key2 [LEN] [IDX] [MINMATCHLEN len] [WITHMATCHLEN]: the longest common
/// subsequence by Redis's dynamic programming table (`lcsCommand`), whose size is bounded as
/// Redis bounds it: (len1 + 1) * (len2 + 1) * 4 bytes at most `proto-max-bulk-len`.
fn lcs(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    // Both keys are looked up first, so a wrong type wins over a syntax error, as in Redis.
    let a = lcs_operand(ctx, arg(argv, 1));
    let b = lcs_operand(ctx, arg(argv, 2));
    let (a, b) = (a?, b?);
    let (mut getlen, mut getidx, mut withmatchlen) = (false, false, false);
    let mut minmatchlen: u64 = 0;
    let mut j = 3;
    while let Some(opt) = argv.get(j) {
        let more = argv.len() - 1 - j;
        if eq_ic(opt, "idx") {
            getidx = true;
        } else if eq_ic(opt, "len") {
            getlen = true;
        } else if eq_ic(opt, "withmatchlen") {
            withmatchlen = true;
        } else if eq_ic(opt, "minmatchlen") && more > 0 {
            minmatchlen = u64::try_from(int_arg(arg(argv, j + 1))?).unwrap_or(0);
            j += 1;
        } else {
            return Err(CmdError::Syntax);
        }
        j += 1;
    }
    if getlen && getidx {
        return Err(CmdError::Err(
            "If you want both the length and indexes, please just use IDX.".to_string(),
        ));
    }
    if a.len() >= u32::MAX as usize - 1 || b.len() >= u32::MAX as usize - 1 {
        return Err(CmdError::Err("String too long for LCS".to_string()));
    }
    let cells = (a.len() as u64 + 1).saturating_mul(b.len() as u64 + 1);
    if cells.saturating_mul(4) > ctx.shard.config.proto_max_bulk_len {
        return Err(CmdError::Err(
            "Insufficient memory, transient memory for LCS exceeds proto-max-bulk-len".to_string(),
        ));
    }
    let table = LcsTable::build(&a, &b);
    let total = table.at(a.len(), b.len());
    if getlen {
        ctx.out.int(i64::from(total));
        return Ok(());
    }
    let (text, ranges) = table.walk(&a, &b, minmatchlen);
    if !getidx {
        ctx.out.bulk(&text);
        return Ok(());
    }
    let out = &mut *ctx.out;
    out.map(2);
    out.bulk(b"matches");
    out.array(ranges.len());
    for r in &ranges {
        out.array(if withmatchlen { 3 } else { 2 });
        out.array(2);
        out.int(i64::from(r.a.0));
        out.int(i64::from(r.a.1));
        out.array(2);
        out.int(i64::from(r.b.0));
        out.int(i64::from(r.b.1));
        if withmatchlen {
            out.int(i64::from(r.a.1 - r.a.0 + 1));
        }
    }
    out.bulk(b"len");
    out.int(i64::from(total));
    Ok(())
}

/// A matched range of LCS IDX: inclusive start and end in each string.
struct LcsRange {
    a: (u32, u32),
    b: (u32, u32),
}

/// `LCS(i, j)`: the length of the LCS of a[..i] and b[..j], row by row.
struct LcsTable {
    cells: Vec<u32>,
    width: usize,
}

impl LcsTable {
    fn build(a: &[u8], b: &[u8]) -> LcsTable {
        let width = b.len() + 1;
        let mut cells = vec![0u32; (a.len() + 1) * width];
        for (i, &ca) in a.iter().enumerate() {
            for (j, &cb) in b.iter().enumerate() {
                let v = if ca == cb {
                    cells.get(i * width + j).copied().unwrap_or(0) + 1
                } else {
                    let up = cells.get(i * width + j + 1).copied().unwrap_or(0);
                    let left = cells.get((i + 1) * width + j).copied().unwrap_or(0);
                    up.max(left)
                };
                if let Some(c) = cells.get_mut((i + 1) * width + j + 1) {
                    *c = v;
                }
            }
        }
        LcsTable { cells, width }
    }

    fn at(&self, i: usize, j: usize) -> u32 {
        self.cells.get(i * self.width + j).copied().unwrap_or(0)
    }

    /// Redis's backward walk: the LCS text and the ranges of at least `minmatchlen` bytes,
    /// from the end of the strings.
    fn walk(&self, a: &[u8], b: &[u8], minmatchlen: u64) -> (Vec<u8>, Vec<LcsRange>) {
        let mut text = Vec::with_capacity(self.at(a.len(), b.len()) as usize);
        let mut ranges = Vec::new();
        let (mut i, mut j) = (a.len(), b.len());
        // The range being extended backwards: (a start, a end, b start, b end).
        let mut cur: Option<(u32, u32, u32, u32)> = None;
        while i > 0 && j > 0 {
            let mut emit = false;
            let (ca, cb) = (a.get(i - 1), b.get(j - 1));
            if ca == cb {
                text.extend(ca);
                let (ai, bj) = ((i - 1) as u32, (j - 1) as u32);
                cur = match cur {
                    None => Some((ai, ai, bj, bj)),
                    Some((as_, ae, bs, be)) if as_ == ai + 1 && bs == bj + 1 => {
                        Some((ai, ae, bj, be))
                    }
                    Some(r) => {
                        emit = true;
                        Some(r)
                    }
                };
                if cur.is_some_and(|r| r.0 == 0 || r.2 == 0) {
                    emit = true;
                }
                i -= 1;
                j -= 1;
            } else {
                if self.at(i - 1, j) > self.at(i, j - 1) {
                    i -= 1;
                } else {
                    j -= 1;
                }
                emit = cur.is_some();
            }
            if emit {
                if let Some((as_, ae, bs, be)) = cur.take() {
                    if minmatchlen == 0 || u64::from(ae - as_ + 1) >= minmatchlen {
                        ranges.push(LcsRange {
                            a: (as_, ae),
                            b: (bs, be),
                        });
                    }
                }
            }
        }
        text.reverse();
        (text, ranges)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv<'a>(v: &'a [&'a str]) -> Vec<&'a [u8]> {
        v.iter().map(|s| s.as_bytes()).collect()
    }

    /// Parsed flags and expire argument (owned, for comparisons).
    fn parsed(v: &[&str], start: usize, is_set: bool) -> Result<(u16, Option<Vec<u8>>), CmdError> {
        parse_ext_args(&argv(v), start, is_set).map(|a| (a.flags, a.expire.map(<[u8]>::to_vec)))
    }

    #[test]
    fn set_options_parse_like_redis() {
        let ok = |v: &[&str]| parsed(v, 3, true);
        assert_eq!(ok(&["set", "k", "v"]).map(|a| a.0), Ok(0));
        assert_eq!(
            ok(&["set", "k", "v", "nx", "GET", "ex", "10"]).map(|a| a.0),
            Ok(OPT_NX | OPT_GET | OPT_EX)
        );
        assert_eq!(
            ok(&["set", "k", "v", "ex", "10", "ex", "20"]).map(|a| a.1),
            Ok(Some(b"20".to_vec()))
        );
        assert_eq!(ok(&["set", "k", "v", "nx", "nx"]).map(|a| a.0), Ok(OPT_NX));
        for bad in [
            &["set", "k", "v", "nx", "xx"][..],
            &["set", "k", "v", "xx", "nx"],
            &["set", "k", "v", "ex"],
            &["set", "k", "v", "ex", "1", "px", "1"],
            &["set", "k", "v", "keepttl", "ex", "1"],
            &["set", "k", "v", "pxat", "1", "keepttl"],
            &["set", "k", "v", "persist"],
            &["set", "k", "v", "foo"],
            &["set", "k", "v", "exat", "1", "ex", "1"],
        ] {
            assert_eq!(ok(bad), Err(CmdError::Syntax), "{bad:?}");
        }
        let gx = |v: &[&str]| parsed(v, 2, false);
        assert_eq!(gx(&["getex", "k", "persist"]).map(|a| a.0), Ok(OPT_PERSIST));
        for bad in [
            &["getex", "k", "nx"][..],
            &["getex", "k", "get"],
            &["getex", "k", "keepttl"],
            &["getex", "k", "persist", "ex", "1"],
            &["getex", "k", "ex", "1", "persist"],
        ] {
            assert_eq!(gx(bad), Err(CmdError::Syntax), "{bad:?}");
        }
        // C compares option names up to a NUL byte.
        assert_eq!(
            parse_ext_args(&[b"set", b"k", b"v", b"nx\0junk"], 3, true).map(|a| a.flags),
            Ok(OPT_NX)
        );
    }

    #[test]
    fn expire_deadlines() {
        let now = 1_700_000_000_000;
        assert_eq!(
            expire_deadline(b"10", true, true, now, "set"),
            Ok(now + 10_000)
        );
        assert_eq!(
            expire_deadline(b"10", false, true, now, "set"),
            Ok(now + 10)
        );
        assert_eq!(expire_deadline(b"10", true, false, now, "set"), Ok(10_000));
        assert_eq!(expire_deadline(b"1", false, false, now, "set"), Ok(1));
        let inv = Err(CmdError::InvalidExpire("set".into()));
        assert_eq!(expire_deadline(b"0", true, true, now, "set"), inv);
        assert_eq!(expire_deadline(b"-1", false, false, now, "set"), inv);
        assert_eq!(
            expire_deadline(b"9223372036854776", true, false, now, "set"),
            inv
        );
        assert_eq!(
            expire_deadline(b"9223372036854775", true, true, now, "set"),
            inv
        );
        assert_eq!(
            expire_deadline(b"9223372036854775807", false, true, now, "set"),
            inv
        );
        assert_eq!(
            expire_deadline(b"9223372036854775807", false, false, now, "set"),
            Ok(i64::MAX as u64)
        );
        assert_eq!(
            expire_deadline(b"abc", true, true, now, "set"),
            Err(CmdError::NotInteger)
        );
    }

    #[test]
    fn getrange_like_redis_7_0() {
        let r = |len, s, e| getrange_bounds(len, s, e);
        assert_eq!(r(5, 0, -1), Some((0, 4)));
        assert_eq!(r(5, -5, -1), Some((0, 4)));
        assert_eq!(r(5, -1, -5), None);
        assert_eq!(r(5, 5, 10), None);
        assert_eq!(r(5, 0, 100), Some((0, 4)));
        assert_eq!(r(5, -100, -50), Some((0, 0)));
        assert_eq!(r(5, -100, -200), None);
        assert_eq!(r(5, -100, i64::MIN), None);
        assert_eq!(r(5, 3, 1), None);
        assert_eq!(r(0, 0, -1), None);
        assert_eq!(r(5, i64::MIN, i64::MAX), Some((0, 4)));
    }

    #[test]
    fn long_doubles_like_strtold() {
        let fin = |s: &str| match parse_long_double(s.as_bytes()) {
            Some(LongDouble::Finite(d)) => Some(d.format_redis()),
            _ => None,
        };
        assert_eq!(fin("10.5").as_deref(), Some("10.5"));
        assert_eq!(fin(".5").as_deref(), Some("0.5"));
        assert_eq!(fin("5.").as_deref(), Some("5"));
        assert_eq!(fin("1e2").as_deref(), Some("100"));
        assert_eq!(fin("0x10").as_deref(), Some("16"));
        assert_eq!(fin("-0x1.8p1").as_deref(), Some("-3"));
        for bad in ["", " 1", "1 ", "abc", "nan", "0x", "1e400000", "0xg"] {
            assert_eq!(parse_long_double(bad.as_bytes()), None, "{bad:?}");
        }
        for inf in ["inf", "-inf", "+INF", "Infinity"] {
            assert_eq!(
                parse_long_double(inf.as_bytes()),
                Some(LongDouble::Infinite),
                "{inf:?}"
            );
        }
        assert_eq!(
            parse_long_double(
                "1".repeat(super::super::args::LONG_DOUBLE_CHARS_MAX)
                    .as_bytes()
            ),
            None
        );
    }

    #[test]
    fn string_length_limit() {
        assert!(check_string_length(10, 10, 20).is_ok());
        assert_eq!(
            check_string_length(10, 11, 20),
            Err(CmdError::StringTooLong)
        );
        assert_eq!(
            check_string_length(u64::MAX, 1, 20),
            Err(CmdError::StringTooLong)
        );
    }

    #[test]
    fn views_render_as_redis_text() {
        assert_eq!(view_len(StrView::Int(-123)), 4);
        assert_eq!(view_i64(StrView::Bytes(b"42")), Some(42));
        assert_eq!(view_i64(StrView::Bytes(b" 42")), None);
        assert_eq!(view_i64(StrView::Float(Dec::from_i64(7))), Some(7));
        let mut r = Reply::new();
        reply_view(&mut r, StrView::Int(12));
        assert_eq!(r.buf, b"$2\r\n12\r\n");
    }
}
