//! Stream commands: XADD XRANGE XREVRANGE XLEN XREAD XDEL XTRIM XSETID XINFO, and consumer
//! groups: XGROUP XREADGROUP XACK XPENDING XCLAIM XAUTOCLAIM.
//!
//! Semantics, option parsing, reply shapes and error texts follow Redis 7.0 (`t_stream.c`).
//! Every write is a `StreamOp` built from the key's current stream (`meridian_crdt::stream`);
//! the rules across sites are in docs/conflicts.md ("Streams"). In short:
//! - `XADD key *` at a site with peers puts the replica id in the low 32 bits of the sequence,
//!   so two sites never generate the same ID; the ms part is at least the shard clock's, so
//!   IDs follow causality. With no peers, IDs are exactly Redis's.
//! - XDEL and trims remove the entries the site had seen; entries added concurrently elsewhere
//!   survive. XADD with MAXLEN/MINID adds, then trims as a second write when it removes
//!   something.
//! - XREADGROUP `>` delivers each entry above its origin's cursor, so entries that arrive late
//!   from another site are still delivered to the group.
//! - Blocking XREAD/XREADGROUP use `crate::blocking`: every write to the key, local or from
//!   another site, wakes them, and the command runs again.

use meridian_crdt::stream::{
    self, CursorUpdate, ENTRIES_READ_INVALID, EntryRef, Group, StreamCrdt, StreamId, StreamOp,
    TrimBy,
};
use meridian_crdt::{Effect, KeyState, TypeTag};

use super::args::{eq_ic, parse_i64};
use super::server::{reply_help, subcommand_syntax_error};
use super::{Ctx, Handler};
use crate::error::CmdError;
use crate::notify;
use crate::resp::reply::Reply;
use crate::shard::Shard;

pub const HANDLERS: &[(&str, Handler)] = &[
    ("xadd", xadd),
    ("xrange", xrange),
    ("xrevrange", xrevrange),
    ("xlen", xlen),
    ("xread", xread),
    ("xreadgroup", xreadgroup),
    ("xdel", xdel),
    ("xtrim", xtrim),
    ("xsetid", xsetid),
    ("xack", xack),
    ("xpending", xpending),
    ("xclaim", xclaim),
    ("xautoclaim", xautoclaim),
    ("xinfo|stream", xinfo_stream),
    ("xinfo|groups", xinfo_groups),
    ("xinfo|consumers", xinfo_consumers),
    ("xinfo|help", xinfo_help),
    ("xgroup|create", xgroup_create),
    ("xgroup|setid", xgroup_setid),
    ("xgroup|destroy", xgroup_destroy),
    ("xgroup|createconsumer", xgroup_createconsumer),
    ("xgroup|delconsumer", xgroup_delconsumer),
    ("xgroup|help", xgroup_help),
];

/// XREAD's COUNT when it blocked without one (Redis's `XREAD_BLOCKED_DEFAULT_COUNT`).
const XREAD_BLOCKED_COUNT_DEFAULT: usize = 1000;

/// Largest sum of field and value lengths in one entry (Redis's `STREAM_LISTPACK_MAX_SIZE`).
const ENTRY_FIELD_BYTES_MAX: u64 = 1 << 30;

/// XAUTOCLAIM: PEL entries examined per entry claimed (Redis's `attempts_factor`).
const AUTOCLAIM_ATTEMPTS_FACTOR: u64 = 10;

/// XINFO STREAM FULL's COUNT when none is given.
const XINFO_FULL_COUNT_DEFAULT: i64 = 10;

fn arg<'a>(argv: &[&'a [u8]], i: usize) -> &'a [u8] {
    argv.get(i).copied().unwrap_or_default()
}

/// The stream a key shows: `None` when the key does not exist, WRONGTYPE for another type.
fn stream_of(state: &KeyState) -> Result<Option<&StreamCrdt>, CmdError> {
    match state.type_tag() {
        None => Ok(None),
        Some(TypeTag::Stream) => Ok(state.stream()),
        Some(_) => Err(CmdError::WrongType),
    }
}

fn invalid_id() -> CmdError {
    CmdError::Err("Invalid stream ID specified as stream command argument".to_string())
}

fn err(text: &str) -> CmdError {
    CmdError::Err(text.to_string())
}

/// Redis's `string2ull` (on a C string: a NUL ends it): `string2ll` when it fits and is not
/// negative, else what `strtoull` parses whole (leading spaces, a sign, leading zeros; a '-'
/// negates modulo 2^64).
fn string2ull(b: &[u8]) -> Option<u64> {
    let b = match b.iter().position(|&c| c == 0) {
        Some(i) => b.get(..i).unwrap_or_default(),
        None => b,
    };
    if let Some(v) = parse_i64(b) {
        return u64::try_from(v).ok();
    }
    let mut i = 0;
    while b.get(i).is_some_and(|c| super::args::is_c_space(*c)) {
        i += 1;
    }
    let mut neg = false;
    match b.get(i) {
        Some(b'+') => i += 1,
        Some(b'-') => {
            neg = true;
            i += 1;
        }
        _ => {}
    }
    let digits = b.get(i..).unwrap_or_default();
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut v: u64 = 0;
    for &c in digits {
        v = v.checked_mul(10)?.checked_add(u64::from(c - b'0'))?;
    }
    Some(if neg { v.wrapping_neg() } else { v })
}

/// Redis's `streamGenericParseIDOrReply`: `-`/`+` (unless `strict`), `<ms>-<seq>`, `<ms>`
/// (the sequence is `missing_seq`), and with `star` the `<ms>-*` form (the bool says whether
/// the sequence was given).
fn parse_id_full(
    a: &[u8],
    missing_seq: u64,
    strict: bool,
    star: bool,
) -> Result<(StreamId, bool), CmdError> {
    if a.len() > 127 {
        return Err(invalid_id());
    }
    // A C string: what follows a NUL is not seen.
    let a = match a.iter().position(|&c| c == 0) {
        Some(i) => a.get(..i).unwrap_or_default(),
        None => a,
    };
    if strict && (a == b"-" || a == b"+") {
        return Err(invalid_id());
    }
    if a == b"-" {
        return Ok((StreamId::MIN, true));
    }
    if a == b"+" {
        return Ok((StreamId::MAX, true));
    }
    let (ms_part, seq_part) = match a.iter().position(|&c| c == b'-') {
        Some(i) => (
            a.get(..i).unwrap_or_default(),
            Some(a.get(i + 1..).unwrap_or_default()),
        ),
        None => (a, None),
    };
    let ms = string2ull(ms_part).ok_or_else(invalid_id)?;
    match seq_part {
        Some(b"*") if star => Ok((StreamId::new(ms, 0), false)),
        Some(s) => Ok((
            StreamId::new(ms, string2ull(s).ok_or_else(invalid_id)?),
            true,
        )),
        None => Ok((StreamId::new(ms, missing_seq), true)),
    }
}

/// `streamParseIDOrReply`: `-` and `+` accepted.
fn parse_id(a: &[u8], missing_seq: u64) -> Result<StreamId, CmdError> {
    parse_id_full(a, missing_seq, false, false).map(|x| x.0)
}

/// `streamParseStrictIDOrReply`: `-` and `+` refused.
fn parse_strict_id(a: &[u8], missing_seq: u64) -> Result<StreamId, CmdError> {
    parse_id_full(a, missing_seq, true, false).map(|x| x.0)
}

/// `streamParseIntervalIDOrReply` with the exclusive `(` prefix: (ID, exclusive).
fn parse_interval(a: &[u8], missing_seq: u64) -> Result<(StreamId, bool), CmdError> {
    match a.strip_prefix(b"(") {
        Some(rest) if a.len() > 1 => Ok((parse_strict_id(rest, missing_seq)?, true)),
        _ => Ok((parse_id(a, missing_seq)?, false)),
    }
}

/// The start of an interval: an exclusive start moves to the next ID.
fn interval_start(a: &[u8]) -> Result<StreamId, CmdError> {
    let (id, ex) = parse_interval(a, 0)?;
    if ex {
        return id
            .next()
            .ok_or_else(|| err("invalid start ID for the interval"));
    }
    Ok(id)
}

/// The end of an interval: an exclusive end moves to the previous ID.
fn interval_end(a: &[u8]) -> Result<StreamId, CmdError> {
    let (id, ex) = parse_interval(a, u64::MAX)?;
    if ex {
        return id
            .prev()
            .ok_or_else(|| err("invalid end ID for the interval"));
    }
    Ok(id)
}

/// `getLongLongFromObjectOrReply` with an optional message of its own.
fn ll(a: &[u8], msg: Option<&str>) -> Result<i64, CmdError> {
    parse_i64(a).ok_or_else(|| match msg {
        Some(m) => err(m),
        None => CmdError::NotInteger,
    })
}

/// The integer argument after option `j` (`j` moves onto it), or the error `msg`.
fn next_ll(argv: &[&[u8]], j: &mut usize, msg: &str) -> Result<i64, CmdError> {
    *j += 1;
    ll(arg(argv, *j), Some(msg))
}

/// Writes an ID as a bulk string without a heap buffer (every XADD reply, every entry of a
/// range).
fn reply_id(out: &mut Reply, id: StreamId) {
    // Two u64s in decimal and the dash.
    let mut t = [0u8; 41];
    let mut b = itoa::Buffer::new();
    let ms = b.format(id.ms).as_bytes();
    let mut n = ms.len();
    if let Some(d) = t.get_mut(..n) {
        d.copy_from_slice(ms);
    }
    if let Some(d) = t.get_mut(n) {
        *d = b'-';
    }
    n += 1;
    let seq = b.format(id.seq).as_bytes();
    if let Some(d) = t.get_mut(n..n + seq.len()) {
        d.copy_from_slice(seq);
    }
    n += seq.len();
    out.bulk(t.get(..n).unwrap_or_default());
}

/// `[id, [field, value, ...]]`.
fn reply_entry(out: &mut Reply, e: &EntryRef<'_>) {
    out.array(2);
    reply_id(out, e.id);
    out.array(e.pairs() * 2);
    for (f, v) in e.fields() {
        out.bulk(f);
        out.bulk(v);
    }
}

/// The node-size parameters follow CONFIG SET: the stream layer reads them on every insert.
fn sync_node_limits(ctx: &Ctx<'_>) {
    stream::set_node_limits(
        ctx.shard.config.stream_node_max_entries,
        ctx.shard.config.stream_node_max_bytes,
    );
}

/// Writes one stream op to `key`.
fn write<B: AsRef<[u8]>>(ctx: &mut Ctx<'_>, key: &[u8], op: StreamOp<B>) {
    let db = ctx.db();
    let now = ctx.now_ms;
    // A consumer comes into being by XGROUP CREATECONSUMER or by being named in a read or
    // a claim: Redis's `streamCreateConsumer` notifies each.
    let creates = match &op {
        StreamOp::ConsumerCreate {
            group, consumer, ..
        }
        | StreamOp::Deliver {
            group,
            consumer: Some(consumer),
            ..
        } if ctx.shard.notifies(notify::STREAM) => ctx
            .shard
            .lookup_quiet(db, key, now)
            .and_then(|e| e.state.stream())
            .and_then(|s| s.group(group.as_ref()))
            .is_some_and(|g| g.consumer(consumer.as_ref()).is_none()),
        _ => false,
    };
    ctx.shard.write_key(db, key, now, |_| Effect::Stream(op));
    if creates {
        ctx.notify(notify::STREAM, "xgroup-createconsumer", key);
    }
}

/// Writes `op` when there is one, announcing `event` (XACK announces none), and answers the
/// count that comes with it; answers 0 when there is nothing to write.
fn write_counted(
    ctx: &mut Ctx<'_>,
    key: &[u8],
    op: Option<(u64, StreamOp<Vec<u8>>)>,
    event: Option<&str>,
) {
    match op {
        Some((n, op)) => {
            write(ctx, key, op);
            if let Some(event) = event {
                ctx.notify(notify::STREAM, event, key);
            }
            ctx.out.int(n as i64);
        }
        None => ctx.out.int(0),
    }
}

/// The stream at `key` for a write (no keyspace statistics): `Ok(None)` when missing.
fn lookup_write<'a>(ctx: &'a mut Ctx<'_>, key: &[u8]) -> Result<Option<&'a StreamCrdt>, CmdError> {
    let db = ctx.db();
    let now = ctx.now_ms;
    match ctx.shard.lookup_quiet(db, key, now) {
        None => Ok(None),
        Some(e) => stream_of(&e.state),
    }
}

/// The stream at `key` for a read (keyspace statistics): `Ok(None)` when missing.
fn lookup_read<'a>(ctx: &'a mut Ctx<'_>, key: &[u8]) -> Result<Option<&'a StreamCrdt>, CmdError> {
    let db = ctx.db();
    let now = ctx.now_ms;
    match ctx.shard.lookup_read(db, key, now) {
        None => Ok(None),
        Some(state) => stream_of(state),
    }
}

// ---------------------------------------------------------------------------------------------
// XADD XTRIM

/// XADD/XTRIM options (Redis's `streamAddTrimArgs`).
#[derive(Debug, Default)]
struct AddTrimArgs {
    trim: Option<TrimBy>,
    approx: bool,
    limit: u64,
    id: StreamId,
    id_given: bool,
    seq_given: bool,
    no_mkstream: bool,
    /// XADD: the position of the ID argument.
    idpos: usize,
}

/// Redis's `streamParseAddOrTrimArgsOrReply`.
fn parse_add_trim(
    argv: &[&[u8]],
    xadd: bool,
    node_max_entries: u64,
) -> Result<AddTrimArgs, CmdError> {
    let mut a = AddTrimArgs {
        seq_given: true,
        ..AddTrimArgs::default()
    };
    let mut limit: i64 = 0;
    let mut limit_given = false;
    let mut i = 2;
    while i < argv.len() {
        let moreargs = argv.len() - 1 - i;
        let opt = arg(argv, i);
        if xadd && opt == b"*" {
            break;
        } else if (eq_ic(opt, "maxlen") || eq_ic(opt, "minid")) && moreargs > 0 {
            if a.trim.is_some() {
                return Err(err(
                    "syntax error, MAXLEN and MINID options at the same time are not compatible",
                ));
            }
            a.approx = false;
            let next = arg(argv, i + 1);
            if moreargs >= 2 && next == b"~" {
                a.approx = true;
                i += 1;
            } else if moreargs >= 2 && next == b"=" {
                i += 1;
            }
            let threshold = arg(argv, i + 1);
            a.trim = Some(if eq_ic(opt, "maxlen") {
                let maxlen = ll(threshold, None)?;
                if maxlen < 0 {
                    return Err(err("The MAXLEN argument must be >= 0."));
                }
                TrimBy::MaxLen(maxlen as u64)
            } else {
                TrimBy::MinId(parse_strict_id(threshold, 0)?)
            });
            i += 1;
        } else if eq_ic(opt, "limit") && moreargs > 0 {
            limit = ll(arg(argv, i + 1), None)?;
            if limit < 0 {
                return Err(err("The LIMIT argument must be >= 0."));
            }
            limit_given = true;
            i += 1;
        } else if xadd && eq_ic(opt, "nomkstream") {
            a.no_mkstream = true;
        } else if xadd {
            let (id, seq_given) = parse_id_full(opt, 0, true, true)?;
            a.id = id;
            a.seq_given = seq_given;
            a.id_given = true;
            break;
        } else {
            return Err(CmdError::Syntax);
        }
        i += 1;
    }
    a.idpos = i;
    if limit != 0 && a.trim.is_none() {
        return Err(err(
            "syntax error, LIMIT cannot be used without specifying a trimming strategy",
        ));
    }
    if !xadd && a.trim.is_none() {
        return Err(err(
            "syntax error, XTRIM must be called with a trimming strategy",
        ));
    }
    if limit_given {
        if !a.approx {
            return Err(err(
                "syntax error, LIMIT cannot be used without the special ~ option",
            ));
        }
        a.limit = limit as u64;
    } else if a.approx {
        // Redis bounds approximate trimming to 100 nodes' worth of entries.
        let l = 100u64.saturating_mul(node_max_entries);
        a.limit = if l == 0 { 10_000 } else { l.min(1_000_000) };
    }
    Ok(a)
}

/// Trims the stream at `key` as `a` asks; returns how many entries went.
fn trim(ctx: &mut Ctx<'_>, key: &[u8], a: &AddTrimArgs) -> Result<u64, CmdError> {
    let Some(by) = a.trim else {
        return Ok(0);
    };
    let plan = match lookup_write(ctx, key)? {
        Some(s) => s
            .trim_plan(by, a.approx, a.limit)
            .map(|(upto, n)| (s.trim_op::<&[u8]>(upto), n)),
        None => None,
    };
    match plan {
        Some((op, n)) => {
            write(ctx, key, op);
            if n > 0 {
                ctx.notify(notify::STREAM, "xtrim", key);
            }
            Ok(n)
        }
        None => Ok(0),
    }
}

/// XADD key [NOMKSTREAM] [MAXLEN|MINID [=|~] threshold [LIMIT count]] *|id field value ...
fn xadd(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let node_max_entries = ctx.shard.config.stream_node_max_entries;
    let a = parse_add_trim(argv, true, node_max_entries)?;
    let field_pos = a.idpos + 1;
    let nfields = argv.len().saturating_sub(field_pos);
    if argv.len() < field_pos + 2 || nfields % 2 == 1 {
        return Err(CmdError::WrongArity("xadd".to_string()));
    }
    if a.id_given && a.seq_given && a.id == StreamId::MIN {
        return Err(err("The ID specified in XADD must be greater than 0-0"));
    }
    let key = arg(argv, 1);
    let fields = argv.get(field_pos..).unwrap_or_default();
    sync_node_limits(ctx);
    let origin = (ctx.shard.peers > 0).then_some(ctx.shard.replica);
    // With peers, an ID's ms is never below the shard clock's: IDs follow causality.
    let now = if origin.is_some() {
        ctx.now_ms.max(ctx.shard.clock.last().physical_ms())
    } else {
        ctx.now_ms
    };
    let replica = ctx.shard.replica;
    let (op, id) = {
        let existing = lookup_write(ctx, key)?;
        if existing.is_none() && a.no_mkstream {
            ctx.out.null();
            return Ok(());
        }
        let empty = StreamCrdt::new();
        let s = existing.unwrap_or(&empty);
        let last = s.last_id();
        if last == StreamId::MAX {
            return Err(err(
                "The stream has exhausted the last possible ID, unable to add more items",
            ));
        }
        let id = if !a.id_given {
            stream::auto_id(last, now, origin)
        } else if !a.seq_given {
            match stream::auto_seq_id(last, a.id.ms, origin) {
                Some(id) => Some(id),
                // Redis returns without an ID error set: the size error is what it replies.
                None => return Err(err("Elements are too large to be stored")),
            }
        } else {
            Some(a.id)
        };
        let id = match id {
            Some(id) if id > last => id,
            _ => {
                return Err(err(
                    "The ID specified in XADD is equal or smaller than the target stream top item",
                ));
            }
        };
        let bytes: u64 = fields.iter().map(|f| f.len() as u64).sum();
        if bytes > ENTRY_FIELD_BYTES_MAX {
            return Err(err("Elements are too large to be stored"));
        }
        // The op borrows the arguments: the entry is copied once, into its block (and once
        // into the op log's record).
        (s.add_op(id, fields.to_vec(), replica), id)
    };
    write(ctx, key, op);
    ctx.notify(notify::STREAM, "xadd", key);
    reply_id(ctx.out, id);
    trim(ctx, key, &a)?;
    Ok(())
}

/// XTRIM key MAXLEN|MINID [=|~] threshold [LIMIT count]
fn xtrim(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let a = parse_add_trim(argv, false, ctx.shard.config.stream_node_max_entries)?;
    let key = arg(argv, 1);
    if lookup_write(ctx, key)?.is_none() {
        ctx.out.int(0);
        return Ok(());
    }
    sync_node_limits(ctx);
    let n = trim(ctx, key, &a)?;
    ctx.out.int(n as i64);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// XRANGE XREVRANGE XLEN

fn xrange(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    range_generic(ctx, argv, false)
}

fn xrevrange(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    range_generic(ctx, argv, true)
}

fn range_generic(ctx: &mut Ctx<'_>, argv: &[&[u8]], rev: bool) -> Result<(), CmdError> {
    let (start_arg, end_arg) = if rev {
        (arg(argv, 3), arg(argv, 2))
    } else {
        (arg(argv, 2), arg(argv, 3))
    };
    let start = interval_start(start_arg)?;
    let end = interval_end(end_arg)?;
    let mut count: i64 = -1;
    let mut j = 4;
    while j < argv.len() {
        if eq_ic(arg(argv, j), "count") && j + 1 < argv.len() {
            count = ll(arg(argv, j + 1), None)?.max(0);
            j += 2;
        } else {
            return Err(CmdError::Syntax);
        }
    }
    let db = ctx.db();
    let now = ctx.now_ms;
    let shard = &mut *ctx.shard;
    let out = &mut *ctx.out;
    let Some(state) = shard.lookup_read(db, arg(argv, 1), now) else {
        out.array(0);
        return Ok(());
    };
    let Some(s) = stream_of(state)? else {
        out.array(0);
        return Ok(());
    };
    if count == 0 {
        out.null_array();
        return Ok(());
    }
    let limit = if count < 0 {
        usize::MAX
    } else {
        count as usize
    };
    emit_range(out, s, start, end, limit, rev);
    Ok(())
}

/// Emits up to `limit` entries of `start..=end` as an array (counted first: the iteration is
/// repeated rather than the reply patched).
fn emit_range(
    out: &mut Reply,
    s: &StreamCrdt,
    start: StreamId,
    end: StreamId,
    limit: usize,
    rev: bool,
) {
    if rev {
        let n = s.range_rev(start, end).take(limit).count();
        out.array(n);
        for e in s.range_rev(start, end).take(n) {
            reply_entry(out, &e);
        }
    } else {
        let n = s.range(start, end).take(limit).count();
        out.array(n);
        for e in s.range(start, end).take(n) {
            reply_entry(out, &e);
        }
    }
}

fn xlen(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let n = lookup_read(ctx, arg(argv, 1))?.map_or(0, StreamCrdt::len);
    ctx.out.int(n as i64);
    Ok(())
}

/// `CRDT.STREAMSTABLE key`: the stream's stable ID at this site (docs/conflicts.md §17). No
/// `XADD key *` at any site, this one included, will add an entry at or below it that is not
/// here already. With peers: just below the ms of the least of their promises and applied
/// ops (`SyncState::stable_hlc`), since every site's auto IDs take at least its clock's ms
/// and the clock only moves past what it promised. With none: the stream's last ID (every
/// later ID is above it, explicit ones too). A key that holds no stream yet answers the
/// same bound (its first entries are added above it); another type is WRONGTYPE.
pub(super) fn crdt_streamstable(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let last = lookup_read(ctx, arg(argv, 1))?.map_or(StreamId::MIN, StreamCrdt::last_id);
    let stable = match ctx.shard.sync.stable_hlc() {
        Some(h) if ctx.shard.peers > 0 => StreamId::new(h.physical_ms(), 0)
            .prev()
            .unwrap_or(StreamId::MIN),
        _ => last,
    };
    reply_id(ctx.out, stable);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// XREAD XREADGROUP

/// What one stream of an XREAD/XREADGROUP waits after.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum After {
    Id(StreamId),
    /// XREADGROUP `>`.
    New,
}

/// Redis's `getTimeoutFromObjectOrReply` in milliseconds: the absolute deadline, `None` for 0.
fn parse_block_ms(a: &[u8], now_ms: u64) -> Result<Option<u64>, CmdError> {
    let t = ll(a, Some("timeout is not an integer or out of range"))?;
    if t < 0 {
        return Err(err("timeout is negative"));
    }
    if t == 0 {
        return Ok(None);
    }
    Ok(Some(now_ms.saturating_add(t as u64)))
}

/// XREAD's and XREADGROUP's arguments (`parse_read`).
pub struct ReadArgs<'a> {
    /// BLOCK's deadline: None without BLOCK, `Some(None)` to wait for ever.
    pub block: Option<Option<u64>>,
    pub count: usize,
    pub noack: bool,
    pub group: Option<(&'a [u8], &'a [u8])>,
    pub keys: Vec<&'a [u8]>,
    pub ids: Vec<&'a [u8]>,
    /// Where STREAMS is in the arguments, and BLOCK when given (`part_options`).
    streams_at: usize,
    block_at: Option<usize>,
}

impl ReadArgs<'_> {
    /// The options of `argv` (the arguments this was parsed from) but BLOCK and its timeout:
    /// what a part of the command over some of its streams takes (`conn`'s XREAD across
    /// shards, which never blocks a part). Built only there, not on every XREAD.
    pub fn part_options<'b>(&self, argv: &[&'b [u8]]) -> Vec<&'b [u8]> {
        argv.get(1..self.streams_at)
            .unwrap_or_default()
            .iter()
            .enumerate()
            .filter(|&(i, _)| self.block_at.is_none_or(|b| i + 1 != b && i + 1 != b + 1))
            .map(|(_, a)| *a)
            .collect()
    }
}

/// Parses XREAD (or XREADGROUP: `group_mode`) as Redis's `xreadCommand` does, with its error
/// texts; BLOCK is refused to a script (`from_script`), and its timeout counts from `now_ms`.
pub fn parse_read<'a>(
    argv: &[&'a [u8]],
    group_mode: bool,
    from_script: bool,
    now_ms: u64,
) -> Result<ReadArgs<'a>, CmdError> {
    let mut r = ReadArgs {
        block: None,
        count: 0,
        noack: false,
        group: None,
        keys: Vec::new(),
        ids: Vec::new(),
        streams_at: 0,
        block_at: None,
    };
    let mut streams_arg = 0;
    let mut i = 1;
    while i < argv.len() {
        let moreargs = argv.len() - i - 1;
        let o = arg(argv, i);
        if eq_ic(o, "block") && moreargs > 0 {
            if from_script {
                return Err(err(&format!(
                    "{} command is not allowed with BLOCK option from scripts",
                    String::from_utf8_lossy(arg(argv, 0))
                )));
            }
            r.block_at = Some(i);
            i += 1;
            r.block = Some(parse_block_ms(arg(argv, i), now_ms)?);
        } else if eq_ic(o, "count") && moreargs > 0 {
            i += 1;
            let c = ll(arg(argv, i), None)?;
            r.count = usize::try_from(c.max(0)).unwrap_or(usize::MAX);
        } else if eq_ic(o, "streams") && moreargs > 0 {
            r.streams_at = i;
            streams_arg = i + 1;
            let n = argv.len() - streams_arg;
            if n % 2 != 0 {
                return Err(err(
                    "Unbalanced XREAD list of streams: for each stream key an ID or '$' must be specified.",
                ));
            }
            let n = n / 2;
            r.keys = argv
                .get(streams_arg..streams_arg + n)
                .unwrap_or_default()
                .to_vec();
            r.ids = argv.get(streams_arg + n..).unwrap_or_default().to_vec();
            break;
        } else if eq_ic(o, "group") && moreargs >= 2 {
            if !group_mode {
                return Err(err(
                    "The GROUP option is only supported by XREADGROUP. You called XREAD instead.",
                ));
            }
            r.group = Some((arg(argv, i + 1), arg(argv, i + 2)));
            i += 2;
        } else if eq_ic(o, "noack") {
            if !group_mode {
                return Err(err(
                    "The NOACK option is only supported by XREADGROUP. You called XREAD instead.",
                ));
            }
            r.noack = true;
        } else {
            return Err(CmdError::Syntax);
        }
        i += 1;
    }
    if streams_arg == 0 {
        return Err(CmdError::Syntax);
    }
    if group_mode && r.group.is_none() {
        return Err(err("Missing GROUP option for XREADGROUP"));
    }
    Ok(r)
}

fn xread(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    read_generic(ctx, argv, false)
}

fn xreadgroup(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    read_generic(ctx, argv, true)
}

fn nogroup_read(key: &[u8], group: &[u8]) -> CmdError {
    CmdError::Raw(format!(
        "NOGROUP No such key '{}' or consumer group '{}' in XREADGROUP with GROUP option",
        String::from_utf8_lossy(key),
        String::from_utf8_lossy(group)
    ))
}

/// XREAD and XREADGROUP: parse, resolve every stream's ID, serve what can be served now, or
/// block. A re-run after a wake serves only the first stream with something to give, as Redis
/// serves a blocked client from the key that became ready.
fn read_generic(ctx: &mut Ctx<'_>, argv: &[&[u8]], group_mode: bool) -> Result<(), CmdError> {
    let r = parse_read(argv, group_mode, ctx.client.is_script(), ctx.now_ms)?;
    let rerun = ctx.is_rerun();
    let kept: Option<Vec<StreamId>> = ctx.blocked_stream_ids().map(<[StreamId]>::to_vec);
    let mut after: Vec<After> = Vec::with_capacity(r.keys.len());
    for (i, (key, id_arg)) in r.keys.iter().zip(r.ids.iter()).enumerate() {
        let looked = lookup_read(ctx, key);
        let s = match looked {
            Ok(s) => s,
            // A blocked XREAD waits through a key of another type; XREADGROUP gives up.
            Err(CmdError::WrongType) if rerun && !group_mode => None,
            Err(CmdError::WrongType) if rerun => {
                return Err(CmdError::Raw(
                    "UNBLOCKED the stream key no longer exists".to_string(),
                ));
            }
            Err(e) => return Err(e),
        };
        if let Some((group, _)) = r.group {
            match s {
                None if rerun => {
                    return Err(CmdError::Raw(
                        "UNBLOCKED the stream key no longer exists".to_string(),
                    ));
                }
                None => return Err(nogroup_read(key, group)),
                Some(s) if s.group(group).is_none() => {
                    if rerun {
                        return Err(CmdError::Raw(
                            "NOGROUP the consumer group this client was blocked on no longer exists"
                                .to_string(),
                        ));
                    }
                    return Err(nogroup_read(key, group));
                }
                Some(_) => {}
            }
        }
        let a = if *id_arg == b"$" {
            if group_mode {
                return Err(err(
                    "The $ ID is meaningless in the context of XREADGROUP: you want to read the history of this consumer by specifying a proper ID, or use the > ID to get new messages. The $ ID would just return an empty result set.",
                ));
            }
            match kept.as_ref().and_then(|k| k.get(i)) {
                Some(id) => After::Id(*id),
                None => After::Id(s.map(StreamCrdt::last_id).unwrap_or_default()),
            }
        } else if *id_arg == b">" {
            if !group_mode {
                return Err(err(
                    "The > ID can be specified only when calling XREADGROUP using the GROUP <group> <consumer> option.",
                ));
            }
            After::New
        } else {
            After::Id(parse_strict_id(id_arg, 0)?)
        };
        after.push(a);
    }
    let count = if rerun && r.count == 0 {
        XREAD_BLOCKED_COUNT_DEFAULT
    } else {
        r.count
    };
    let mut body = Reply {
        buf: Vec::new(),
        proto: ctx.out.proto,
    };
    let mut served = 0usize;
    for (key, a) in r.keys.iter().zip(after.iter()) {
        let done = match r.group {
            None => serve_read(ctx, &mut body, key, *a, count),
            Some((group, consumer)) => {
                serve_group(ctx, &mut body, key, *a, count, group, consumer, r.noack)?
            }
        };
        if done {
            served += 1;
            if rerun {
                break;
            }
        }
    }
    if served > 0 {
        if ctx.out.is_resp3() {
            ctx.out.map(served);
        } else {
            ctx.out.array(served);
        }
        ctx.out.raw(&body.buf);
        return Ok(());
    }
    match r.block {
        Some(deadline) => {
            let ids: Vec<StreamId> = after
                .iter()
                .map(|a| match a {
                    After::Id(id) => *id,
                    After::New => StreamId::MAX,
                })
                .collect();
            ctx.block_reader(&r.keys, deadline, if group_mode { Vec::new() } else { ids });
        }
        None => ctx.out.null_array(),
    }
    Ok(())
}

/// The last ID of each of `keys` in database `db` (`0-0` for a missing key or one of another
/// type), as text: what `$` means in an XREAD now (`conn`'s XREAD across shards fixes it
/// once, then reads after it each time it tries).
pub fn last_ids(shard: &mut Shard, db: usize, keys: &[Vec<u8>]) -> Vec<String> {
    let now = shard.now_ms();
    keys.iter()
        .map(|k| {
            shard
                .lookup_quiet(db, k, now)
                .and_then(|e| e.state.stream())
                .map_or(StreamId::default(), StreamCrdt::last_id)
                .to_string()
        })
        .collect()
}

/// The key and its entries, as one element of XREAD's reply.
fn reply_stream_head(out: &mut Reply, key: &[u8]) {
    if !out.is_resp3() {
        out.array(2);
    }
    out.bulk(key);
}

/// XREAD of one stream: entries after `a`. Returns whether it was served.
fn serve_read(ctx: &mut Ctx<'_>, body: &mut Reply, key: &[u8], a: After, count: usize) -> bool {
    let After::Id(gt) = a else {
        return false;
    };
    let db = ctx.db();
    let now = ctx.now_ms;
    let Some(s) = ctx
        .shard
        .lookup_quiet(db, key, now)
        .and_then(|e| e.state.stream())
    else {
        return false;
    };
    if s.last_entry().is_none_or(|e| e.id <= gt) {
        return false;
    }
    let Some(start) = gt.next() else {
        return false;
    };
    reply_stream_head(body, key);
    let limit = if count == 0 { usize::MAX } else { count };
    emit_range(body, s, start, StreamId::MAX, limit, false);
    true
}

/// XREADGROUP of one stream: history (an ID) or new entries (`>`). Returns whether it was
/// served; writes what it changed (deliveries, the consumer, the cursor).
#[allow(clippy::too_many_arguments)]
fn serve_group(
    ctx: &mut Ctx<'_>,
    body: &mut Reply,
    key: &[u8],
    a: After,
    count: usize,
    group: &[u8],
    consumer: &[u8],
    noack: bool,
) -> Result<bool, CmdError> {
    let db = ctx.db();
    let now = ctx.now_ms;
    let op = {
        let Some(s) = ctx
            .shard
            .lookup_quiet(db, key, now)
            .and_then(|e| e.state.stream())
        else {
            return Ok(false);
        };
        let Some(g) = s.group(group) else {
            return Ok(false);
        };
        match a {
            After::Id(gt) => {
                let start = gt.next().unwrap_or(StreamId::MIN);
                let limit = if count == 0 { usize::MAX } else { count };
                let ids: Vec<(StreamId, u64)> = g
                    .consumer_pending_range(consumer, start, StreamId::MAX)
                    .take(limit)
                    .map(|p| (p.id, p.count))
                    .collect();
                reply_stream_head(body, key);
                body.array(ids.len());
                let mut pending = Vec::new();
                for (id, n) in ids {
                    match s.entry(id) {
                        Some(e) => {
                            reply_entry(body, &e);
                            pending.push((id, now, n.saturating_add(1)));
                        }
                        None => {
                            body.array(2);
                            reply_id(body, id);
                            body.null_array();
                        }
                    }
                }
                Some(StreamOp::Deliver {
                    group: group.to_vec(),
                    consumer: Some(consumer.to_vec()),
                    seen_ms: now,
                    pending,
                    gone: Vec::new(),
                    cursor: None,
                    observed: s.observed_vv(),
                })
            }
            After::New => {
                let ne = s.new_entries(g, count);
                if !ne.moved {
                    return Ok(false);
                }
                let cursor = g.epoch().map(|epoch| CursorUpdate {
                    epoch,
                    floor: g.floor(),
                    pos: ne.pos.clone(),
                    entries_read: s.entries_read_after(g, &ne.ids),
                });
                if ne.ids.is_empty() {
                    // Nothing new for this group: only its cursors move past what the scan
                    // examined (entries of other sites it had delivered already).
                    Some(StreamOp::Deliver {
                        group: group.to_vec(),
                        consumer: None,
                        seen_ms: now,
                        pending: Vec::new(),
                        gone: Vec::new(),
                        cursor,
                        observed: s.observed_vv(),
                    })
                } else {
                    reply_stream_head(body, key);
                    body.array(ne.ids.len());
                    for id in &ne.ids {
                        if let Some(e) = s.entry(*id) {
                            reply_entry(body, &e);
                        }
                    }
                    let pending = if noack {
                        Vec::new()
                    } else {
                        ne.ids.iter().map(|id| (*id, now, 1)).collect()
                    };
                    Some(StreamOp::Deliver {
                        group: group.to_vec(),
                        consumer: Some(consumer.to_vec()),
                        seen_ms: now,
                        pending,
                        gone: Vec::new(),
                        cursor,
                        observed: s.observed_vv(),
                    })
                }
            }
        }
    };
    let served = match (&a, &op) {
        (After::Id(_), _) => true,
        (After::New, Some(StreamOp::Deliver { consumer, .. })) => consumer.is_some(),
        _ => false,
    };
    if let Some(op) = op {
        write(ctx, key, op);
    }
    Ok(served)
}

// ---------------------------------------------------------------------------------------------
// XDEL XSETID

/// XDEL key id [id ...]
fn xdel(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let key = arg(argv, 1);
    if lookup_write(ctx, key)?.is_none() {
        ctx.out.int(0);
        return Ok(());
    }
    let mut ids = Vec::with_capacity(argv.len().saturating_sub(2));
    for a in argv.iter().skip(2) {
        ids.push(parse_strict_id(a, 0)?);
    }
    let replica = ctx.shard.replica;
    let op = {
        let Some(s) = lookup_write(ctx, key)? else {
            ctx.out.int(0);
            return Ok(());
        };
        let mut present: Vec<StreamId> = ids
            .into_iter()
            .filter(|id| s.entry(*id).is_some())
            .collect();
        present.sort_unstable();
        present.dedup();
        (!present.is_empty()).then(|| (present.len() as u64, s.delete_op(present, replica)))
    };
    write_counted(ctx, key, op, Some("xdel"));
    Ok(())
}

/// XSETID key last-id [ENTRIESADDED entries-added] [MAXDELETEDID max-deleted-id]
fn xsetid(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let id = parse_strict_id(arg(argv, 2), 0)?;
    let mut entries_added: i64 = -1;
    let mut max_xdel = StreamId::MIN;
    let mut i = 3;
    while i < argv.len() {
        let moreargs = argv.len() - 1 - i;
        let opt = arg(argv, i);
        if eq_ic(opt, "entriesadded") && moreargs > 0 {
            entries_added = ll(arg(argv, i + 1), None)?;
            if entries_added < 0 {
                return Err(err("entries_added must be positive"));
            }
            i += 2;
        } else if eq_ic(opt, "maxdeletedid") && moreargs > 0 {
            max_xdel = parse_strict_id(arg(argv, i + 1), 0)?;
            if id < max_xdel {
                return Err(err(
                    "The ID specified in XSETID is smaller than the provided max_deleted_entry_id",
                ));
            }
            i += 2;
        } else {
            return Err(CmdError::Syntax);
        }
    }
    let key = arg(argv, 1);
    let op = {
        let Some(s) = lookup_write(ctx, key)? else {
            return Err(CmdError::NoSuchKey);
        };
        if let Some(top) = s.last_entry().map(|e| e.id) {
            if id < top {
                return Err(err(
                    "The ID specified in XSETID is smaller than the target stream top item",
                ));
            }
            if entries_added != -1 && s.len() > entries_added as u64 {
                return Err(err(
                    "The entries_added specified in XSETID is smaller than the target stream length",
                ));
            }
        }
        let added = if entries_added == -1 {
            s.entries_added()
        } else {
            entries_added as u64
        };
        let max_deleted = if max_xdel.is_zero() {
            s.max_deleted()
        } else {
            max_xdel
        };
        s.setid_op::<&[u8]>(id, added, max_deleted)
    };
    write(ctx, key, op);
    ctx.notify(notify::STREAM, "xsetid", key);
    ctx.out.ok();
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// XGROUP

#[derive(Clone, Copy, PartialEq, Eq)]
enum GroupSub {
    Create,
    SetId,
    Destroy,
    CreateConsumer,
    DelConsumer,
}

/// Redis's `xgroupCommand` preamble: the options of CREATE and SETID (MKSTREAM,
/// ENTRIESREAD), then the key (it must exist unless MKSTREAM) and, for SETID,
/// CREATECONSUMER and DELCONSUMER, the group. Returns (mkstream, entries read).
fn xgroup_preamble(
    ctx: &mut Ctx<'_>,
    argv: &[&[u8]],
    sub: GroupSub,
) -> Result<(bool, i64), CmdError> {
    let mut mkstream = false;
    let mut entries_read = ENTRIES_READ_INVALID;
    let create = sub == GroupSub::Create;
    let setid = sub == GroupSub::SetId;
    let mut i = 5;
    while i < argv.len() {
        if create && eq_ic(arg(argv, i), "mkstream") {
            mkstream = true;
            i += 1;
        } else if (create || setid) && eq_ic(arg(argv, i), "entriesread") && i + 1 < argv.len() {
            entries_read = ll(arg(argv, i + 1), None)?;
            if entries_read < 0 && entries_read != ENTRIES_READ_INVALID {
                return Err(err("value for ENTRIESREAD must be positive or -1"));
            }
            i += 2;
        } else {
            return Err(subcommand_syntax_error(argv));
        }
    }
    let key = arg(argv, 2);
    let group = arg(argv, 3);
    let s = lookup_write(ctx, key)?;
    if !mkstream {
        let Some(s) = s else {
            return Err(err(
                "The XGROUP subcommand requires the key to exist. Note that for CREATE you may want to use the MKSTREAM option to create an empty stream automatically.",
            ));
        };
        let needs_group = matches!(
            sub,
            GroupSub::SetId | GroupSub::CreateConsumer | GroupSub::DelConsumer
        );
        if needs_group && s.group(group).is_none() {
            return Err(CmdError::Raw(format!(
                "NOGROUP No such consumer group '{}' for key name '{}'",
                String::from_utf8_lossy(group),
                String::from_utf8_lossy(key)
            )));
        }
    }
    Ok((mkstream, entries_read))
}

/// XGROUP CREATE key group id|$ [MKSTREAM] [ENTRIESREAD entries-read]
fn xgroup_create(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let (_, entries_read) = xgroup_preamble(ctx, argv, GroupSub::Create)?;
    if argv.len() > 8 {
        return Err(subcommand_syntax_error(argv));
    }
    let key = arg(argv, 2);
    let group = arg(argv, 3);
    let (id, busy) = {
        let s = lookup_write(ctx, key)?;
        let id = if arg(argv, 4) == b"$" {
            s.map(StreamCrdt::last_id).unwrap_or_default()
        } else {
            parse_strict_id(arg(argv, 4), 0)?
        };
        (id, s.is_some_and(|s| s.group(group).is_some()))
    };
    if busy {
        return Err(CmdError::Raw(
            "BUSYGROUP Consumer Group name already exists".to_string(),
        ));
    }
    start_group_epoch(ctx, key, group, id, entries_read, "xgroup-create");
    Ok(())
}

/// Writes a new epoch of `group` (XGROUP CREATE, SETID): it delivers after `floor`, having
/// read `entries_read` entries; announces `event` and answers OK.
fn start_group_epoch(
    ctx: &mut Ctx<'_>,
    key: &[u8],
    group: &[u8],
    floor: StreamId,
    entries_read: i64,
    event: &str,
) {
    write(
        ctx,
        key,
        StreamOp::GroupEpoch {
            group: group.to_vec(),
            floor,
            entries_read,
        },
    );
    ctx.notify(notify::STREAM, event, key);
    ctx.out.ok();
}

/// XGROUP SETID key group id|$ [ENTRIESREAD entries-read]
fn xgroup_setid(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let (_, entries_read) = xgroup_preamble(ctx, argv, GroupSub::SetId)?;
    if argv.len() != 5 && argv.len() != 7 {
        return Err(subcommand_syntax_error(argv));
    }
    let key = arg(argv, 2);
    let id = if arg(argv, 4) == b"$" {
        lookup_write(ctx, key)?
            .map(StreamCrdt::last_id)
            .unwrap_or_default()
    } else {
        parse_id(arg(argv, 4), 0)?
    };
    start_group_epoch(ctx, key, arg(argv, 3), id, entries_read, "xgroup-setid");
    Ok(())
}

/// XGROUP DESTROY key group
fn xgroup_destroy(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    xgroup_preamble(ctx, argv, GroupSub::Destroy)?;
    let key = arg(argv, 2);
    let group = arg(argv, 3);
    let op = lookup_write(ctx, key)?
        .filter(|s| s.group(group).is_some())
        .map(|s| StreamOp::GroupDestroy {
            group: group.to_vec(),
            observed: s.observed_vv(),
        });
    write_counted(ctx, key, op.map(|op| (1, op)), Some("xgroup-destroy"));
    Ok(())
}

/// XGROUP CREATECONSUMER key group consumer
fn xgroup_createconsumer(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    xgroup_preamble(ctx, argv, GroupSub::CreateConsumer)?;
    let key = arg(argv, 2);
    let group = arg(argv, 3);
    let consumer = arg(argv, 4);
    let exists = lookup_write(ctx, key)?
        .and_then(|s| s.group(group))
        .is_some_and(|g| g.consumer(consumer).is_some());
    if exists {
        ctx.out.int(0);
        return Ok(());
    }
    let now = ctx.now_ms;
    write(
        ctx,
        key,
        StreamOp::ConsumerCreate {
            group: group.to_vec(),
            consumer: consumer.to_vec(),
            seen_ms: now,
        },
    );
    ctx.out.int(1);
    Ok(())
}

/// XGROUP DELCONSUMER key group consumer
fn xgroup_delconsumer(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    xgroup_preamble(ctx, argv, GroupSub::DelConsumer)?;
    let key = arg(argv, 2);
    let group = arg(argv, 3);
    let consumer = arg(argv, 4);
    let op = lookup_write(ctx, key)?.and_then(|s| {
        let c = s.group(group)?.consumer(consumer)?;
        Some((
            c.pending,
            StreamOp::ConsumerDelete {
                group: group.to_vec(),
                consumer: consumer.to_vec(),
                observed: s.observed_vv(),
            },
        ))
    });
    write_counted(ctx, key, op, Some("xgroup-delconsumer"));
    Ok(())
}

const XGROUP_HELP: &[&str] = &[
    "CREATE <key> <groupname> <id|$> [option]",
    "    Create a new consumer group. Options are:",
    "    * MKSTREAM",
    "      Create the empty stream if it does not exist.",
    "    * ENTRIESREAD entries_read",
    "      Set the group's entries_read counter (internal use).",
    "CREATECONSUMER <key> <groupname> <consumer>",
    "    Create a new consumer in the specified group.",
    "DELCONSUMER <key> <groupname> <consumer>",
    "    Remove the specified consumer.",
    "DESTROY <key> <groupname>",
    "    Remove the specified group.",
    "SETID <key> <groupname> <id|$> [ENTRIESREAD entries_read]",
    "    Set the current group ID and entries_read counter.",
];

fn xgroup_help(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> Result<(), CmdError> {
    reply_help(ctx, "XGROUP", XGROUP_HELP);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// XACK XPENDING

fn nogroup(key: &[u8], group: &[u8]) -> CmdError {
    CmdError::Raw(format!(
        "NOGROUP No such key '{}' or consumer group '{}'",
        String::from_utf8_lossy(key),
        String::from_utf8_lossy(group)
    ))
}

/// XACK key group id [id ...]
fn xack(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let key = arg(argv, 1);
    let group = arg(argv, 2);
    let has_group = lookup_read(ctx, key)?.is_some_and(|s| s.group(group).is_some());
    if !has_group {
        ctx.out.int(0);
        return Ok(());
    }
    let mut ids = Vec::with_capacity(argv.len().saturating_sub(3));
    for a in argv.iter().skip(3) {
        ids.push(parse_strict_id(a, 0)?);
    }
    let op = lookup_write(ctx, key)?.and_then(|s| {
        let g = s.group(group)?;
        let mut pending: Vec<StreamId> = ids
            .into_iter()
            .filter(|id| g.pending(*id).is_some())
            .collect();
        pending.sort_unstable();
        pending.dedup();
        (!pending.is_empty()).then(|| {
            let n = pending.len() as u64;
            let op = StreamOp::Ack {
                group: group.to_vec(),
                ids: pending,
                observed: s.observed_vv(),
            };
            (n, op)
        })
    });
    write_counted(ctx, key, op, None);
    Ok(())
}

/// XPENDING key group [[IDLE min-idle-time] start end count [consumer]]
fn xpending(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let argc = argv.len();
    let justinfo = argc == 3;
    if argc != 3 && !(6..=9).contains(&argc) {
        return Err(CmdError::Syntax);
    }
    let (mut minidle, mut count) = (0i64, 0i64);
    let (mut start, mut end) = (StreamId::MIN, StreamId::MAX);
    let mut consumer: Option<&[u8]> = None;
    if argc >= 6 {
        let mut startidx = 3;
        if eq_ic(arg(argv, 3), "idle") {
            minidle = ll(arg(argv, 4), None)?;
            if argc < 8 {
                return Err(CmdError::Syntax);
            }
            startidx += 2;
        }
        count = ll(arg(argv, startidx + 2), None)?.max(0);
        start = interval_start(arg(argv, startidx))?;
        end = interval_end(arg(argv, startidx + 1))?;
        if startidx + 3 < argc {
            consumer = Some(arg(argv, startidx + 3));
        }
    }
    let key = arg(argv, 1);
    let group = arg(argv, 2);
    let now = ctx.now_ms;
    let db = ctx.db();
    let shard = &mut *ctx.shard;
    let out = &mut *ctx.out;
    let s = match shard.lookup_read(db, key, now) {
        None => None,
        Some(state) => stream_of(state)?,
    };
    let Some(g) = s.and_then(|s| s.group(group)) else {
        return Err(nogroup(key, group));
    };
    if justinfo {
        out.array(4);
        out.int(g.pending_count() as i64);
        match (g.first_pending(), g.last_pending()) {
            (Some(first), Some(last)) if g.pending_count() > 0 => {
                reply_id(out, first);
                reply_id(out, last);
                let cs: Vec<_> = g
                    .consumers()
                    .into_iter()
                    .filter(|c| c.pending > 0)
                    .collect();
                out.array(cs.len());
                for c in cs {
                    out.array(2);
                    out.bulk(c.name);
                    out.bulk_int(c.pending as i64);
                }
            }
            _ => {
                out.null();
                out.null();
                out.null_array();
            }
        }
        return Ok(());
    }
    if let Some(c) = consumer {
        if g.consumer(c).is_none() {
            out.array(0);
            return Ok(());
        }
    }
    let limit = usize::try_from(count).unwrap_or(usize::MAX);
    let idle_ok = |t: u64| minidle == 0 || (now as i64).wrapping_sub(t as i64) >= minidle;
    let rows: Vec<_> = match consumer {
        Some(c) => g
            .consumer_pending_range(c, start, end)
            .filter(|p| idle_ok(p.time_ms))
            .take(limit)
            .collect(),
        None => g
            .pending_range(start, end)
            .filter(|p| idle_ok(p.time_ms))
            .take(limit)
            .collect(),
    };
    out.array(rows.len());
    for p in rows {
        out.array(4);
        reply_id(out, p.id);
        out.bulk(p.consumer);
        out.int(((now as i64).wrapping_sub(p.time_ms as i64)).max(0));
        out.int(p.count as i64);
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// XCLAIM XAUTOCLAIM

/// A pending entry as a claim sees it during one command.
#[derive(Clone, Copy)]
struct Nack<'a> {
    /// `None`: created by FORCE, no owner yet.
    owner: Option<&'a [u8]>,
    time_ms: u64,
    count: u64,
}

/// XCLAIM key group consumer min-idle-time id [id ...] [IDLE ms] [TIME unix-ms]
/// [RETRYCOUNT count] [FORCE] [JUSTID] [LASTID lastid]
fn xclaim(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let key = arg(argv, 1);
    let group = arg(argv, 2);
    let consumer = arg(argv, 3);
    let has_group = lookup_read(ctx, key)?.is_some_and(|s| s.group(group).is_some());
    if !has_group {
        return Err(nogroup(key, group));
    }
    let minidle = ll(
        arg(argv, 4),
        Some("Invalid min-idle-time argument for XCLAIM"),
    )?
    .max(0);
    let mut j = 5;
    let mut ids = Vec::new();
    while let Some(a) = argv.get(j) {
        match parse_strict_id(a, 0) {
            Ok(id) => ids.push(id),
            Err(_) => break,
        }
        j += 1;
    }
    let now = ctx.now_ms;
    let now_i = i64::try_from(now).unwrap_or(i64::MAX);
    let (mut force, mut justid) = (false, false);
    let mut deliverytime: i64 = -1;
    let mut retrycount: i64 = -1;
    let mut lastid = StreamId::MIN;
    while j < argv.len() {
        let moreargs = argv.len() - 1 - j;
        let opt = arg(argv, j);
        if eq_ic(opt, "force") {
            force = true;
        } else if eq_ic(opt, "justid") {
            justid = true;
        } else if eq_ic(opt, "idle") && moreargs > 0 {
            let v = next_ll(argv, &mut j, "Invalid IDLE option argument for XCLAIM")?;
            deliverytime = now_i.wrapping_sub(v);
        } else if eq_ic(opt, "time") && moreargs > 0 {
            deliverytime = next_ll(argv, &mut j, "Invalid TIME option argument for XCLAIM")?;
        } else if eq_ic(opt, "retrycount") && moreargs > 0 {
            retrycount = next_ll(
                argv,
                &mut j,
                "Invalid RETRYCOUNT option argument for XCLAIM",
            )?;
        } else if eq_ic(opt, "lastid") && moreargs > 0 {
            j += 1;
            lastid = parse_strict_id(arg(argv, j), 0)?;
        } else {
            return Err(err(&format!(
                "Unrecognized XCLAIM option '{}'",
                String::from_utf8_lossy(opt)
            )));
        }
        j += 1;
    }
    // A bogus delivery time (negative, in the future) is taken as now, as Redis does.
    let deliverytime = if deliverytime < 0 || deliverytime > now_i {
        now
    } else {
        deliverytime as u64
    };
    let db = ctx.db();
    let shard = &mut *ctx.shard;
    let mut body = Reply {
        buf: Vec::new(),
        proto: ctx.out.proto,
    };
    let (op, claimed) = {
        let Some(s) = shard
            .lookup_quiet(db, key, now)
            .and_then(|e| e.state.stream())
        else {
            return Err(nogroup(key, group));
        };
        let Some(g) = s.group(group) else {
            return Err(nogroup(key, group));
        };
        let mut overlay: std::collections::BTreeMap<StreamId, Option<Nack<'_>>> =
            std::collections::BTreeMap::new();
        let mut gone = Vec::new();
        let mut used = false;
        let mut claimed = 0usize;
        for id in ids {
            let nack = match overlay.get(&id) {
                Some(n) => *n,
                None => g.pending(id).map(|p| Nack {
                    owner: Some(p.consumer),
                    time_ms: p.time_ms,
                    count: p.count,
                }),
            };
            let Some(e) = s.entry(id) else {
                if nack.is_some() {
                    gone.push(id);
                    overlay.insert(id, None);
                }
                continue;
            };
            let nack = match nack {
                None if force => Nack {
                    owner: None,
                    time_ms: now,
                    count: 1,
                },
                None => continue,
                Some(n) => n,
            };
            if nack.owner.is_some() && minidle > 0 {
                let idle = now_i.wrapping_sub(nack.time_ms as i64);
                if idle < minidle {
                    continue;
                }
            }
            used = true;
            let count = if retrycount >= 0 {
                retrycount as u64
            } else if !justid {
                nack.count.saturating_add(1)
            } else {
                nack.count
            };
            overlay.insert(
                id,
                Some(Nack {
                    owner: Some(consumer),
                    time_ms: deliverytime,
                    count,
                }),
            );
            if justid {
                reply_id(&mut body, id);
            } else {
                reply_entry(&mut body, &e);
            }
            claimed += 1;
        }
        let raise = lastid > g.last_id();
        let cursor = if raise {
            g.epoch().map(|epoch| CursorUpdate {
                epoch,
                floor: g.floor().max(lastid),
                pos: g.positions(),
                // Redis leaves the read counter as it was; this write's contribution replaces
                // the site's previous one, so it carries the counter on.
                entries_read: Some(g.entries_read()).filter(|e| *e != ENTRIES_READ_INVALID),
            })
        } else {
            None
        };
        let pending: Vec<(StreamId, u64, u64)> = overlay
            .iter()
            .filter_map(|(id, n)| n.map(|n| (*id, n.time_ms, n.count)))
            .collect();
        let op = (used || !gone.is_empty() || cursor.is_some()).then(|| StreamOp::Deliver {
            group: group.to_vec(),
            consumer: used.then(|| consumer.to_vec()),
            seen_ms: now,
            pending,
            gone,
            cursor,
            observed: s.observed_vv(),
        });
        (op, claimed)
    };
    if let Some(op) = op {
        write(ctx, key, op);
    }
    ctx.out.array(claimed);
    ctx.out.raw(&body.buf);
    Ok(())
}

/// XAUTOCLAIM key group consumer min-idle-time start [COUNT count] [JUSTID]
fn xautoclaim(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let key = arg(argv, 1);
    let group = arg(argv, 2);
    let consumer = arg(argv, 3);
    let minidle = ll(
        arg(argv, 4),
        Some("Invalid min-idle-time argument for XAUTOCLAIM"),
    )?
    .max(0);
    let start = interval_start(arg(argv, 5))?;
    let mut count: u64 = 100;
    let mut justid = false;
    let mut j = 6;
    // Redis: COUNT in 1..=LONG_MAX / max(sizeof(streamID), attempts factor).
    let count_max = (i64::MAX / 16) as u64;
    while j < argv.len() {
        let moreargs = argv.len() - 1 - j;
        let opt = arg(argv, j);
        if eq_ic(opt, "count") && moreargs > 0 {
            count = parse_i64(arg(argv, j + 1))
                .and_then(|c| u64::try_from(c).ok())
                .filter(|c| (1..=count_max).contains(c))
                .ok_or_else(|| err("COUNT must be > 0"))?;
            j += 1;
        } else if eq_ic(opt, "justid") {
            justid = true;
        } else {
            return Err(CmdError::Syntax);
        }
        j += 1;
    }
    let now = ctx.now_ms;
    let now_i = i64::try_from(now).unwrap_or(i64::MAX);
    let db = ctx.db();
    let shard = &mut *ctx.shard;
    let s = match shard.lookup_read(db, key, now) {
        None => None,
        Some(state) => stream_of(state)?,
    };
    let Some((s, g)) = s.and_then(|s| Some((s, s.group(group)?))) else {
        return Err(nogroup(key, group));
    };
    let mut body = Reply {
        buf: Vec::new(),
        proto: ctx.out.proto,
    };
    let mut attempts = count.saturating_mul(AUTOCLAIM_ATTEMPTS_FACTOR);
    let mut left = count;
    let mut claimed = 0usize;
    let mut pending = Vec::new();
    let mut gone = Vec::new();
    let mut it = g.pending_range(start, StreamId::MAX);
    while attempts > 0 && left > 0 {
        attempts -= 1;
        let Some(p) = it.next() else {
            break;
        };
        let Some(e) = s.entry(p.id) else {
            gone.push(p.id);
            left -= 1;
            continue;
        };
        if minidle > 0 && now_i.wrapping_sub(p.time_ms as i64) < minidle {
            continue;
        }
        let n = if justid {
            p.count
        } else {
            p.count.saturating_add(1)
        };
        pending.push((p.id, now, n));
        if justid {
            reply_id(&mut body, p.id);
        } else {
            reply_entry(&mut body, &e);
        }
        claimed += 1;
        left -= 1;
    }
    let cursor = it.next().map_or(StreamId::MIN, |p| p.id);
    drop(it);
    let op = (!pending.is_empty() || !gone.is_empty()).then(|| StreamOp::Deliver {
        group: group.to_vec(),
        consumer: (!pending.is_empty()).then(|| consumer.to_vec()),
        seen_ms: now,
        pending,
        gone: gone.clone(),
        cursor: None,
        observed: s.observed_vv(),
    });
    let out = &mut *ctx.out;
    out.array(3);
    reply_id(out, cursor);
    out.array(claimed);
    out.raw(&body.buf);
    out.array(gone.len());
    for id in &gone {
        reply_id(out, *id);
    }
    if let Some(op) = op {
        write(ctx, key, op);
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// XINFO

/// Redis's `streamReplyWithCGLag`: entries not yet delivered to the group, or null when the
/// stream's history does not say.
fn reply_lag(out: &mut Reply, s: &StreamCrdt, g: &Group) {
    let added = s.entries_added();
    if added == 0 {
        out.int(0);
        return;
    }
    let er = g.entries_read();
    if er != ENTRIES_READ_INVALID && !s.has_tombstones_from(g.last_id()) {
        out.int((added as i64).wrapping_sub(er));
        return;
    }
    let er = s.estimate_distance(g.last_id());
    if er != ENTRIES_READ_INVALID {
        out.int((added as i64).wrapping_sub(er));
    } else {
        out.null();
    }
}

fn reply_entries_read(out: &mut Reply, g: &Group) {
    match g.entries_read() {
        ENTRIES_READ_INVALID => out.null(),
        n => out.int(n),
    }
}

/// The stream of an XINFO subcommand: `ERR no such key` when missing.
fn xinfo_lookup<'a>(ctx: &'a mut Ctx<'_>, key: &[u8]) -> Result<&'a StreamCrdt, CmdError> {
    lookup_read(ctx, key)?.ok_or(CmdError::NoSuchKey)
}

/// XINFO STREAM key [FULL [COUNT count]]
fn xinfo_stream(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let key = arg(argv, 2);
    let now = ctx.now_ms;
    let db = ctx.db();
    let shard = &mut *ctx.shard;
    let out = &mut *ctx.out;
    let s = match shard.lookup_read(db, key, now) {
        None => return Err(CmdError::NoSuchKey),
        Some(state) => stream_of(state)?.ok_or(CmdError::NoSuchKey)?,
    };
    let optv = argv.get(3..).unwrap_or_default();
    let mut full = false;
    let mut count = XINFO_FULL_COUNT_DEFAULT;
    if !optv.is_empty() {
        if optv.len() != 1 && optv.len() != 3 {
            return Err(subcommand_syntax_error(argv));
        }
        if !eq_ic(arg(optv, 0), "full") {
            return Err(subcommand_syntax_error(argv));
        }
        full = true;
        if optv.len() == 3 {
            if !eq_ic(arg(optv, 1), "count") {
                return Err(subcommand_syntax_error(argv));
            }
            count = ll(arg(optv, 2), None)?;
            if count < 0 {
                count = XINFO_FULL_COUNT_DEFAULT;
            }
        }
    }
    let limit = if count == 0 {
        usize::MAX
    } else {
        usize::try_from(count).unwrap_or(usize::MAX)
    };
    out.map(if full { 9 } else { 10 });
    out.bulk(b"length");
    out.int(s.len() as i64);
    out.bulk(b"radix-tree-keys");
    out.int(s.blocks() as i64);
    out.bulk(b"radix-tree-nodes");
    out.int(s.trie_nodes() as i64);
    out.bulk(b"last-generated-id");
    reply_id(out, s.last_id());
    out.bulk(b"max-deleted-entry-id");
    reply_id(out, s.max_deleted());
    out.bulk(b"entries-added");
    out.int(s.entries_added() as i64);
    out.bulk(b"recorded-first-entry-id");
    reply_id(out, s.first_id());
    if !full {
        out.bulk(b"groups");
        out.int(s.groups().count() as i64);
        out.bulk(b"first-entry");
        match s.first_entry() {
            Some(e) => reply_entry(out, &e),
            None => out.null(),
        }
        out.bulk(b"last-entry");
        match s.last_entry() {
            Some(e) => reply_entry(out, &e),
            None => out.null(),
        }
        return Ok(());
    }
    out.bulk(b"entries");
    emit_range(out, s, StreamId::MIN, StreamId::MAX, limit, false);
    out.bulk(b"groups");
    let groups: Vec<&Group> = s.groups().collect();
    out.array(groups.len());
    for g in groups {
        out.map(7);
        out.bulk(b"name");
        out.bulk(&g.name);
        out.bulk(b"last-delivered-id");
        reply_id(out, g.last_id());
        out.bulk(b"entries-read");
        reply_entries_read(out, g);
        out.bulk(b"lag");
        reply_lag(out, s, g);
        out.bulk(b"pel-count");
        out.int(g.pending_count() as i64);
        out.bulk(b"pending");
        let rows: Vec<_> = g
            .pending_range(StreamId::MIN, StreamId::MAX)
            .take(limit)
            .collect();
        out.array(rows.len());
        for p in rows {
            out.array(4);
            reply_id(out, p.id);
            out.bulk(p.consumer);
            out.int(p.time_ms as i64);
            out.int(p.count as i64);
        }
        out.bulk(b"consumers");
        let consumers = g.consumers();
        out.array(consumers.len());
        for c in consumers {
            out.map(4);
            out.bulk(b"name");
            out.bulk(c.name);
            out.bulk(b"seen-time");
            out.int(c.seen_ms as i64);
            out.bulk(b"pel-count");
            out.int(c.pending as i64);
            out.bulk(b"pending");
            let rows: Vec<_> = g
                .consumer_pending_range(c.name, StreamId::MIN, StreamId::MAX)
                .take(limit)
                .collect();
            out.array(rows.len());
            for p in rows {
                out.array(3);
                reply_id(out, p.id);
                out.int(p.time_ms as i64);
                out.int(p.count as i64);
            }
        }
    }
    Ok(())
}

/// XINFO GROUPS key
fn xinfo_groups(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let key = arg(argv, 2);
    let now = ctx.now_ms;
    let db = ctx.db();
    let shard = &mut *ctx.shard;
    let out = &mut *ctx.out;
    let s = match shard.lookup_read(db, key, now) {
        None => return Err(CmdError::NoSuchKey),
        Some(state) => stream_of(state)?.ok_or(CmdError::NoSuchKey)?,
    };
    let groups: Vec<&Group> = s.groups().collect();
    out.array(groups.len());
    for g in groups {
        out.map(6);
        out.bulk(b"name");
        out.bulk(&g.name);
        out.bulk(b"consumers");
        out.int(g.consumers().len() as i64);
        out.bulk(b"pending");
        out.int(g.pending_count() as i64);
        out.bulk(b"last-delivered-id");
        reply_id(out, g.last_id());
        out.bulk(b"entries-read");
        reply_entries_read(out, g);
        out.bulk(b"lag");
        reply_lag(out, s, g);
    }
    Ok(())
}

/// XINFO CONSUMERS key group
fn xinfo_consumers(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let key = arg(argv, 2);
    let group = arg(argv, 3);
    let now = ctx.now_ms;
    let s = xinfo_lookup(ctx, key)?;
    let Some(g) = s.group(group) else {
        return Err(CmdError::Raw(format!(
            "NOGROUP No such consumer group '{}' for key name '{}'",
            String::from_utf8_lossy(group),
            String::from_utf8_lossy(key)
        )));
    };
    let rows: Vec<(Vec<u8>, u64, i64)> = g
        .consumers()
        .iter()
        .map(|c| {
            let idle = (now as i64).wrapping_sub(c.seen_ms as i64).max(0);
            (c.name.to_vec(), c.pending, idle)
        })
        .collect();
    let out = &mut *ctx.out;
    out.array(rows.len());
    for (name, pending, idle) in rows {
        out.map(3);
        out.bulk(b"name");
        out.bulk(&name);
        out.bulk(b"pending");
        out.int(pending as i64);
        out.bulk(b"idle");
        out.int(idle);
    }
    Ok(())
}

const XINFO_HELP: &[&str] = &[
    "CONSUMERS <key> <groupname>",
    "    Show consumers of <groupname>.",
    "GROUPS <key>",
    "    Show the stream consumer groups.",
    "STREAM <key> [FULL [COUNT <count>]",
    "    Show information about the stream.",
];

fn xinfo_help(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> Result<(), CmdError> {
    reply_help(ctx, "XINFO", XINFO_HELP);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A part's options are the command's but BLOCK and its timeout, wherever BLOCK stands,
    /// and a group or consumer named "block" stays.
    #[test]
    fn a_parts_options_leave_block_out() {
        let argv: Vec<&[u8]> = vec![
            b"XREADGROUP",
            b"GROUP",
            b"block",
            b"c",
            b"BLOCK",
            b"100",
            b"COUNT",
            b"2",
            b"NOACK",
            b"STREAMS",
            b"a",
            b">",
        ];
        let r = parse_read(&argv, true, false, 0).unwrap();
        let want: Vec<&[u8]> = vec![b"GROUP", b"block", b"c", b"COUNT", b"2", b"NOACK"];
        assert_eq!(r.part_options(&argv), want);
        let argv: Vec<&[u8]> = vec![b"XREAD", b"STREAMS", b"a", b"0"];
        assert!(
            parse_read(&argv, false, false, 0)
                .unwrap()
                .part_options(&argv)
                .is_empty()
        );
    }

    #[test]
    fn ids_parse_as_redis() {
        let ok = |a: &[u8]| parse_id_full(a, 7, false, true).ok();
        assert_eq!(ok(b"5"), Some((StreamId::new(5, 7), true)));
        assert_eq!(ok(b"5-3"), Some((StreamId::new(5, 3), true)));
        assert_eq!(ok(b"5-*"), Some((StreamId::new(5, 0), false)));
        assert_eq!(ok(b"-"), Some((StreamId::MIN, true)));
        assert_eq!(ok(b"+"), Some((StreamId::MAX, true)));
        assert_eq!(
            ok(b"18446744073709551615-18446744073709551615"),
            Some((StreamId::MAX, true))
        );
        // strtoull's leniency: leading zeros, '+', spaces; a '-' negates.
        assert_eq!(ok(b"007-1"), Some((StreamId::new(7, 1), true)));
        assert_eq!(ok(b"+5"), Some((StreamId::new(5, 7), true)));
        assert_eq!(ok(b" 5"), Some((StreamId::new(5, 7), true)));
        for bad in [
            &b""[..],
            b"-5",
            b"5-",
            b"a",
            b"5-3-1",
            b"18446744073709551616",
            b"1-*-",
            b"*",
        ] {
            assert_eq!(ok(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
        assert!(parse_strict_id(b"-", 0).is_err());
        assert!(parse_strict_id(b"+", 0).is_err());
        assert!(parse_id_full(&[b'1'; 128], 0, false, false).is_err());
        assert_eq!(interval_start(b"(1-1").unwrap(), StreamId::new(1, 2));
        assert_eq!(interval_end(b"(1-0").unwrap(), StreamId::new(0, u64::MAX));
        assert!(interval_start(b"(18446744073709551615-18446744073709551615").is_err());
        assert!(interval_end(b"(0-0").is_err());
        assert!(interval_start(b"(-").is_err());
    }
}
