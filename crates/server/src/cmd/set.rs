//! Set commands: SADD SREM SMEMBERS SISMEMBER SMISMEMBER SCARD SPOP SRANDMEMBER SMOVE SINTER
//! SINTERCARD SINTERSTORE SUNION SUNIONSTORE SDIFF SDIFFSTORE SSCAN.
//!
//! Semantics, reply shapes (RESP3 sets `~` where Redis 7.0 sends them) and error texts follow
//! Redis 7.0 (`t_set.c`). Every write is a CRDT effect on the key's add-wins OR-set:
//! - SADD: one `SetAdd` per member (an add of a member present is sent too: it survives a
//!   concurrent SREM elsewhere, which is what the client asked for);
//! - SREM, SMOVE, SPOP: one `SetRem` per member, carrying what this site had seen; removing
//!   the last member is a `Remove` of the key instead, so the key disappears with its TTL;
//! - *STORE: the destination is removed (observed-remove) and the result added member by
//!   member; an empty result only removes the destination.
//!
//! SPOP across sites is at-least-once: two sites may pop the same member concurrently, and both
//! clients receive it (each removal removes what its site had seen). Randomness comes from
//! `rand::rng()`; a random member is found by probing random buckets of the set's table.
//!
//! Iteration order is the set's hash order, as Redis's hashtable encoding; SSCAN returns a
//! whole set of up to `SSCAN_ALL_MAX` members in one call (as Redis does for its compact
//! encodings), and larger sets by bucket cursor.

use hashbrown::HashSet;
use meridian_crdt::table::ScanSpace;
use meridian_crdt::{Effect, OrSet, TypeTag};
use rand::RngExt as _;

use super::args::{ScanOptions, eq_ic, parse_cursor, parse_i64, scan_options};
use super::{Ctx, Handler};
use crate::error::CmdError;
use crate::notify;
use crate::shard::Shard;

pub const HANDLERS: &[(&str, Handler)] = &[
    ("sadd", sadd),
    ("srem", srem),
    ("smembers", smembers),
    ("sismember", sismember),
    ("smismember", smismember),
    ("scard", scard),
    ("spop", spop),
    ("srandmember", srandmember),
    ("smove", smove),
    ("sinter", sinter),
    ("sintercard", sintercard),
    ("sinterstore", sinterstore),
    ("sunion", sunion),
    ("sunionstore", sunionstore),
    ("sdiff", sdiff),
    ("sdiffstore", sdiffstore),
    ("sscan", sscan),
];

/// SSCAN returns sets up to this size whole, with cursor 0 (Redis 7.2's listpack bound).
pub const SSCAN_ALL_MAX: usize = 128;

/// Most members one SRANDMEMBER, HRANDFIELD or ZRANDMEMBER with a negative count replies.
/// Redis 7.0 builds any reply (`SRANDMEMBER s -4611686018427387903` hangs it while memory
/// lasts); Meridian refuses counts beyond this with "value is out of range" rather than
/// exhaust the shard's memory (docs/limits.md).
pub const SRANDMEMBER_REPEATS_MAX: u64 = 1 << 24;

/// Checks a negative count of SRANDMEMBER, HRANDFIELD or ZRANDMEMBER (repeats allowed)
/// against `SRANDMEMBER_REPEATS_MAX`: the number of picks, or "value is out of range".
pub fn random_repeats(count: i64) -> Result<u64, CmdError> {
    let n = count.unsigned_abs();
    if n > SRANDMEMBER_REPEATS_MAX {
        return Err(CmdError::Err("value is out of range".to_string()));
    }
    Ok(n)
}

/// Random bucket probes before SPOP/SRANDMEMBER fall back to walking the set.
const RANDOM_PROBES_MAX: usize = 64;

/// Buckets one SSCAN or HSCAN call visits per element asked (`COUNT`), as Redis bounds a
/// dictionary scan step: a sparse table returns fewer elements rather than walk further.
const SCAN_VISITS_PER_COUNT: u64 = 10;

/// One step of a scan by bucket (SSCAN, HSCAN, ZSCAN) of a table of `buckets` live buckets,
/// `bucket` giving the element a live bucket holds, in the scan space `space`
/// (`meridian_crdt::table::SteppedTable`: live bucket `i` is at position `space.base + i`,
/// and positions walked upward miss no element present throughout, across growths). The
/// cursor is `position << CURSOR_TAG_BITS | generation` (its low bits); cursor 0, or one
/// issued in another generation, starts at the first live bucket. Visits at most `count ×
/// SCAN_VISITS_PER_COUNT` buckets and stops after `count` elements: O(count) per call,
/// O(buckets) for a whole iteration. Returns the next cursor (0 at the end) and the elements
/// found, MATCH not applied.
pub(super) fn scan_buckets<T>(
    cursor: u64,
    count: u64,
    buckets: usize,
    space: ScanSpace,
    bucket: impl Fn(usize) -> Option<T>,
) -> (u64, Vec<T>) {
    let tag = u64::from(space.generation) & ((1 << CURSOR_TAG_BITS) - 1);
    let position = if cursor == 0 || cursor & ((1 << CURSOR_TAG_BITS) - 1) != tag {
        0
    } else {
        usize::try_from(cursor >> CURSOR_TAG_BITS).unwrap_or(usize::MAX)
    };
    // Positions below the base are the buckets of tables that drained since: empty.
    let mut idx = position.saturating_sub(space.base);
    let mut found = Vec::new();
    let mut visits_left = count.saturating_mul(SCAN_VISITS_PER_COUNT);
    while idx < buckets && visits_left > 0 && (found.len() as u64) < count {
        if let Some(x) = bucket(idx) {
            found.push(x);
        }
        idx += 1;
        visits_left -= 1;
    }
    let next = if idx >= buckets {
        0
    } else {
        (((space.base + idx) as u64) << CURSOR_TAG_BITS) | tag
    };
    (next, found)
}

/// SSCAN, HSCAN and ZSCAN cursor layout: the scan position shifted left by this (below
/// 2^37: `SCAN_BASE_MAX`), the table's scan generation in the low bits (a cursor of a
/// replaced scan space starts over, so nothing is missed; 2^16 generations pass before a
/// stale cursor could look current).
const CURSOR_TAG_BITS: u32 = 16;

/// A hash table whose elements can be picked by bucket (`BucketSampler`).
pub(super) trait Buckets {
    type Item: Copy;
    fn bucket_count(&self) -> usize;
    /// The element bucket `index` holds, if it is occupied.
    fn bucket(&self, index: usize) -> Option<Self::Item>;
    /// Every element (what a sparse table falls back to).
    fn list(&self) -> Vec<Self::Item>;
}

impl<'a> Buckets for &'a OrSet {
    type Item = &'a [u8];
    fn bucket_count(&self) -> usize {
        OrSet::bucket_count(self)
    }
    fn bucket(&self, index: usize) -> Option<&'a [u8]> {
        OrSet::bucket(self, index)
    }
    fn list(&self) -> Vec<&'a [u8]> {
        self.members().collect()
    }
}

/// Random picks from a table (SRANDMEMBER, HRANDFIELD and ZRANDMEMBER with a count): each
/// pick probes at most `RANDOM_PROBES_MAX` random buckets. When they all miss (a table left
/// sparse by removals: tables never shrink), or there is no table, the elements are listed
/// once and later picks take one by position, so n picks cost O(n + elements) at worst,
/// never O(n × elements).
pub(super) struct BucketSampler<S: Buckets> {
    table: S,
    listed: Option<Vec<S::Item>>,
}

impl<S: Buckets> BucketSampler<S> {
    pub(super) fn new(table: S) -> Self {
        BucketSampler {
            table,
            listed: None,
        }
    }

    /// A random element; `None` when the table holds none.
    pub(super) fn pick(&mut self, rng: &mut impl rand::Rng) -> Option<S::Item> {
        let n = self.table.bucket_count();
        if self.listed.is_none() && n > 0 {
            for _ in 0..RANDOM_PROBES_MAX {
                if let Some(x) = self.table.bucket(rng.random_range(0..n)) {
                    return Some(x);
                }
            }
        }
        let table = &self.table;
        let all = self.listed.get_or_insert_with(|| table.list());
        if all.is_empty() {
            return None;
        }
        all.get(rng.random_range(0..all.len())).copied()
    }
}

// ---------------------------------------------------------------------------------------------
// Shared helpers
// ---------------------------------------------------------------------------------------------

/// `argv[i]`, or an empty slice (arity was checked by the dispatcher).
fn arg<'a>(argv: &[&'a [u8]], i: usize) -> &'a [u8] {
    argv.get(i).copied().unwrap_or_default()
}

/// Looks `key` up for reading (expiry, keyspace hit/miss): whether it exists, WRONGTYPE when
/// it holds another type.
fn check_read(ctx: &mut Ctx<'_>, key: &[u8]) -> Result<bool, CmdError> {
    let db = ctx.db();
    match ctx.shard.lookup_read(db, key, ctx.now_ms) {
        None => Ok(false),
        Some(s) if s.type_tag() == Some(TypeTag::Set) => Ok(true),
        Some(_) => Err(CmdError::WrongType),
    }
}

/// Looks `key` up for writing (expiry, no statistics): whether it exists, WRONGTYPE when it
/// holds another type.
fn check_write(ctx: &mut Ctx<'_>, key: &[u8]) -> Result<bool, CmdError> {
    let db = ctx.db();
    match ctx.shard.lookup_quiet(db, key, ctx.now_ms) {
        None => Ok(false),
        Some(e) if e.state.type_tag() == Some(TypeTag::Set) => Ok(true),
        Some(_) => Err(CmdError::WrongType),
    }
}

/// The set at `key` as it is now (call after `check_read`/`check_write`, which expire it).
fn set_ref<'a>(shard: &'a Shard, db: usize, key: &[u8]) -> Option<&'a OrSet> {
    let hash = shard.hash_key(key);
    shard
        .dbs
        .get(db)
        .and_then(|d| d.get(hash, key))
        .and_then(|e| e.state.set())
}

fn contains(shard: &Shard, db: usize, key: &[u8], member: &[u8]) -> bool {
    set_ref(shard, db, key).is_some_and(|s| s.contains(member))
}

/// Adds `member` to the set at `key` (creating it).
fn add_member(ctx: &mut Ctx<'_>, key: &[u8], member: &[u8]) {
    let db = ctx.db();
    ctx.shard
        .write_key(db, key, ctx.now_ms, |_| Effect::SetAdd { member });
}

/// Adds `member` to the set at `key` that already holds it: a re-add, replicated, that no
/// local client sees (`Shard::write_key_unseen`).
fn readd_member(ctx: &mut Ctx<'_>, key: &[u8], member: &[u8]) {
    let db = ctx.db();
    ctx.shard
        .write_key_unseen(db, key, ctx.now_ms, |_| Effect::SetAdd { member });
}

/// Removes `member`, present in the set at `key`: the last member removes the key.
fn rem_member(ctx: &mut Ctx<'_>, key: &[u8], member: &[u8]) {
    let db = ctx.db();
    ctx.shard.write_key(db, key, ctx.now_ms, |state| {
        if state.set().is_some_and(|s| s.len() <= 1) {
            state.remove_effect()
        } else {
            state.set_rem_effect(member)
        }
    });
}

/// A random member of a non-empty set.
fn random_member<'a>(s: &'a OrSet, rng: &mut impl rand::Rng) -> Option<&'a [u8]> {
    let n = s.bucket_count();
    if n == 0 {
        return None;
    }
    for _ in 0..RANDOM_PROBES_MAX {
        if let Some(m) = s.bucket(rng.random_range(0..n)) {
            return Some(m);
        }
    }
    // A sparse table (many removals): pick by rank.
    let len = s.len();
    if len == 0 {
        return None;
    }
    s.members().nth(rng.random_range(0..len))
}

/// `count` distinct random members of `s` (all of them when `count >= len`).
fn distinct_random(s: &OrSet, count: usize, rng: &mut impl rand::Rng) -> Vec<Vec<u8>> {
    let len = s.len();
    if count >= len {
        return s.members().map(<[u8]>::to_vec).collect();
    }
    if count.saturating_mul(3) > len {
        // Redis's case 3: copy and drop random ones (here a partial shuffle).
        let mut all: Vec<&[u8]> = s.members().collect();
        for i in 0..count {
            let j = rng.random_range(i..all.len());
            all.swap(i, j);
        }
        all.truncate(count);
        return all.into_iter().map(<[u8]>::to_vec).collect();
    }
    let mut picked: HashSet<&[u8]> = HashSet::with_capacity(count);
    let mut out = Vec::with_capacity(count);
    let mut sampler = BucketSampler::new(s);
    while out.len() < count {
        match sampler.pick(rng) {
            Some(m) => {
                if picked.insert(m) {
                    out.push(m.to_vec());
                }
            }
            None => break,
        }
    }
    out
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum SetOp {
    Inter,
    Union,
    Diff,
}

/// Type-checks every key (as Redis 7.0 does, even after a missing one), then computes the
/// result. Members are copied out, so the caller may write afterwards.
fn compute(ctx: &mut Ctx<'_>, keys: &[&[u8]], op: SetOp) -> Result<Vec<Vec<u8>>, CmdError> {
    for k in keys {
        check_read(ctx, k)?;
    }
    let db = ctx.db();
    let sets: Vec<Option<&OrSet>> = keys.iter().map(|k| set_ref(ctx.shard, db, k)).collect();
    combine(&sets, op)
}

/// The result of `op` over `sets` (`None`: a missing key). A key named several times counts
/// once (each of these operations is idempotent in its inputs, and the first set of a
/// difference is kept apart), so naming one large set a million times costs its size once.
/// Fails only when the process is stopping (`crate::stop`).
fn combine(sets: &[Option<&OrSet>], op: SetOp) -> Result<Vec<Vec<u8>>, CmdError> {
    let mut poll = crate::stop::Poll::new();
    let mut out = Vec::new();
    match op {
        SetOp::Inter => {
            let Some(present) = sets.iter().copied().collect::<Option<Vec<&OrSet>>>() else {
                return Ok(out);
            };
            let mut present = distinct(present.into_iter());
            present.sort_by_key(|s| s.len());
            let Some((first, rest)) = present.split_first() else {
                return Ok(out);
            };
            for m in first.members() {
                if poll.stop() {
                    return Err(CmdError::ShuttingDown);
                }
                if rest.iter().all(|s| s.contains(m)) {
                    out.push(m.to_vec());
                }
            }
        }
        SetOp::Union => {
            let mut seen: HashSet<&[u8]> = HashSet::new();
            for s in distinct(sets.iter().flatten().copied()) {
                for m in s.members() {
                    if poll.stop() {
                        return Err(CmdError::ShuttingDown);
                    }
                    if seen.insert(m) {
                        out.push(m.to_vec());
                    }
                }
            }
        }
        SetOp::Diff => {
            let Some(Some(first)) = sets.first() else {
                return Ok(out);
            };
            let rest = distinct(sets.iter().skip(1).flatten().copied());
            for m in first.members() {
                if poll.stop() {
                    return Err(CmdError::ShuttingDown);
                }
                if !rest.iter().any(|s| s.contains(m)) {
                    out.push(m.to_vec());
                }
            }
        }
    }
    Ok(out)
}

/// The sets of `sets` in order, each once (by identity: one key, one set).
fn distinct<'a>(sets: impl Iterator<Item = &'a OrSet>) -> Vec<&'a OrSet> {
    let mut seen: HashSet<*const OrSet> = HashSet::new();
    sets.filter(|s| seen.insert(std::ptr::from_ref(*s)))
        .collect()
}

/// Redis's `set-max-intset-entries`: a set of at most this many integers is an intset.
const INTSET_ENTRIES_MAX: usize = 512;

/// Puts members in the order Redis replies them: an intset (every member an integer, at most
/// `INTSET_ENTRIES_MAX`) iterates in ascending numeric order; a hashtable's order is its hash
/// order, which no client may rely on, so it is left as is.
pub(crate) fn redis_order<M: AsRef<[u8]>>(members: &mut [M]) {
    if members.len() > INTSET_ENTRIES_MAX {
        return;
    }
    if members.iter().all(|m| parse_i64(m.as_ref()).is_some()) {
        members.sort_by_key(|m| parse_i64(m.as_ref()).unwrap_or(0));
    }
}

fn reply_members(ctx: &mut Ctx<'_>, members: &mut [Vec<u8>]) {
    redis_order(members);
    ctx.out.set(members.len());
    for m in members.iter() {
        ctx.out.bulk(m);
    }
}

/// SINTER/SUNION/SDIFF.
fn set_op(ctx: &mut Ctx<'_>, argv: &[&[u8]], op: SetOp) -> Result<(), CmdError> {
    let keys = argv.get(1..).unwrap_or_default();
    let mut result = compute(ctx, keys, op)?;
    reply_members(ctx, &mut result);
    Ok(())
}

/// SINTERSTORE/SUNIONSTORE/SDIFFSTORE: overwrites the destination (any type, and its TTL) with
/// the result, or deletes it when the result is empty; replies the cardinality.
fn set_op_store(ctx: &mut Ctx<'_>, argv: &[&[u8]], op: SetOp) -> Result<(), CmdError> {
    let dst = arg(argv, 1);
    let keys = argv.get(2..).unwrap_or_default();
    let result = compute(ctx, keys, op)?;
    let db = ctx.db();
    let existed = ctx.shard.delete_key(db, dst, ctx.now_ms);
    let flags = ctx.shard.hold_new(existed);
    for m in &result {
        add_member(ctx, dst, m);
    }
    ctx.shard.notify_flags = flags;
    if !result.is_empty() {
        let event = match op {
            SetOp::Inter => "sinterstore",
            SetOp::Union => "sunionstore",
            SetOp::Diff => "sdiffstore",
        };
        ctx.notify(notify::SET, event, dst);
    } else if existed {
        ctx.notify(notify::GENERIC, "del", dst);
    }
    ctx.out.int(result.len() as i64);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Handlers
// ---------------------------------------------------------------------------------------------

/// SADD key member [member ...]
fn sadd(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let key = arg(argv, 1);
    check_write(ctx, key)?;
    let db = ctx.db();
    let mut added = 0i64;
    for m in argv.get(2..).unwrap_or_default() {
        if contains(ctx.shard, db, key, m) {
            readd_member(ctx, key, m);
        } else {
            added += 1;
            add_member(ctx, key, m);
        }
    }
    if added > 0 {
        ctx.notify(notify::SET, "sadd", key);
    }
    ctx.out.int(added);
    Ok(())
}

/// SREM key member [member ...]
fn srem(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let key = arg(argv, 1);
    if !check_write(ctx, key)? {
        ctx.out.int(0);
        return Ok(());
    }
    let db = ctx.db();
    let mut removed = 0i64;
    for m in argv.get(2..).unwrap_or_default() {
        if contains(ctx.shard, db, key, m) {
            rem_member(ctx, key, m);
            removed += 1;
        }
    }
    if removed > 0 {
        ctx.notify_then_del(notify::SET, "srem", key);
    }
    ctx.out.int(removed);
    Ok(())
}

/// SMEMBERS key
fn smembers(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let key = arg(argv, 1);
    check_read(ctx, key)?;
    let db = ctx.db();
    match set_ref(ctx.shard, db, key) {
        Some(s) if s.len() <= INTSET_ENTRIES_MAX => {
            let mut members: Vec<&[u8]> = s.members().collect();
            redis_order(&mut members);
            ctx.out.set(members.len());
            for m in members {
                ctx.out.bulk(m);
            }
        }
        Some(s) => {
            ctx.out.set(s.len());
            for m in s.members() {
                ctx.out.bulk(m);
            }
        }
        None => ctx.out.set(0),
    }
    Ok(())
}

/// SISMEMBER key member
fn sismember(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let key = arg(argv, 1);
    check_read(ctx, key)?;
    let db = ctx.db();
    let found = contains(ctx.shard, db, key, arg(argv, 2));
    ctx.out.int(i64::from(found));
    Ok(())
}

/// SMISMEMBER key member [member ...]
fn smismember(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let key = arg(argv, 1);
    check_read(ctx, key)?;
    let db = ctx.db();
    let members = argv.get(2..).unwrap_or_default();
    let s = set_ref(ctx.shard, db, key);
    ctx.out.array(members.len());
    for m in members {
        ctx.out.int(i64::from(s.is_some_and(|s| s.contains(m))));
    }
    Ok(())
}

/// SCARD key
fn scard(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let key = arg(argv, 1);
    check_read(ctx, key)?;
    let db = ctx.db();
    let n = set_ref(ctx.shard, db, key).map_or(0, OrSet::len);
    ctx.out.int(n as i64);
    Ok(())
}

/// Redis's `getPositiveLongFromObjectOrReply` (any failure says "must be positive").
fn positive_count(b: &[u8]) -> Result<usize, CmdError> {
    match parse_i64(b) {
        Some(n) if n >= 0 => Ok(usize::try_from(n).unwrap_or(usize::MAX)),
        _ => Err(CmdError::MustBePositive),
    }
}

/// SPOP key [count]
fn spop(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let key = arg(argv, 1);
    let db = ctx.db();
    let mut rng = rand::rng();
    match argv.len() {
        2 => {
            if !check_write(ctx, key)? {
                ctx.out.null();
                return Ok(());
            }
            let picked = set_ref(ctx.shard, db, key)
                .and_then(|s| random_member(s, &mut rng))
                .map(<[u8]>::to_vec);
            match picked {
                Some(m) => {
                    rem_member(ctx, key, &m);
                    ctx.notify_then_del(notify::SET, "spop", key);
                    ctx.out.bulk(&m);
                }
                None => ctx.out.null(),
            }
            Ok(())
        }
        3 => {
            let count = positive_count(arg(argv, 2))?;
            if !check_write(ctx, key)? || count == 0 {
                ctx.out.set(0);
                return Ok(());
            }
            let Some(s) = set_ref(ctx.shard, db, key) else {
                ctx.out.set(0);
                return Ok(());
            };
            let whole = count >= s.len();
            let mut picked = distinct_random(s, count, &mut rng);
            if whole {
                ctx.shard.delete_key(db, key, ctx.now_ms);
            } else {
                for m in &picked {
                    rem_member(ctx, key, m);
                }
            }
            ctx.notify_then_del(notify::SET, "spop", key);
            reply_members(ctx, &mut picked);
            Ok(())
        }
        _ => Err(CmdError::Syntax),
    }
}

/// SRANDMEMBER key [count]
fn srandmember(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let key = arg(argv, 1);
    let db = ctx.db();
    let mut rng = rand::rng();
    match argv.len() {
        2 => {
            check_read(ctx, key)?;
            match set_ref(ctx.shard, db, key).and_then(|s| random_member(s, &mut rng)) {
                Some(m) => ctx.out.bulk(m),
                None => ctx.out.null(),
            }
            Ok(())
        }
        3 => {
            let n = parse_i64(arg(argv, 2)).ok_or(CmdError::NotInteger)?;
            if n == i64::MIN {
                return Err(CmdError::Err(
                    "value is out of range, value must between -9223372036854775807 and \
                     9223372036854775807"
                        .to_string(),
                ));
            }
            check_read(ctx, key)?;
            let s = set_ref(ctx.shard, db, key);
            let Some(s) = s.filter(|_| n != 0) else {
                ctx.out.array(0);
                return Ok(());
            };
            if n < 0 {
                random_repeats(n)?;
            }
            let count = usize::try_from(n.unsigned_abs()).unwrap_or(usize::MAX);
            if n < 0 {
                // Repeats allowed: `count` independent picks.
                ctx.out.array(count);
                let mut sampler = BucketSampler::new(s);
                for _ in 0..count {
                    match sampler.pick(&mut rng) {
                        Some(m) => ctx.out.bulk(m),
                        None => ctx.out.null(),
                    }
                }
            } else {
                let picked = distinct_random(s, count, &mut rng);
                ctx.out.array(picked.len());
                for m in &picked {
                    ctx.out.bulk(m);
                }
            }
            Ok(())
        }
        _ => Err(CmdError::Syntax),
    }
}

/// SMOVE source destination member
fn smove(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let (src, dst, member) = (arg(argv, 1), arg(argv, 2), arg(argv, 3));
    let src_exists = check_write(ctx, src);
    let dst_check = check_write(ctx, dst);
    if !src_exists? {
        ctx.out.int(0);
        return Ok(());
    }
    dst_check?;
    let db = ctx.db();
    let present = contains(ctx.shard, db, src, member);
    if src == dst || !present {
        ctx.out.int(i64::from(present));
        return Ok(());
    }
    let dst_had = contains(ctx.shard, db, dst, member);
    rem_member(ctx, src, member);
    ctx.notify_then_del(notify::SET, "srem", src);
    move_in(ctx, dst, member, dst_had);
    ctx.out.int(1);
    Ok(())
}

/// SMOVE's arrival of `member` at `dst`: a re-add when `dst_had` it, else an add (and its
/// event).
fn move_in(ctx: &mut Ctx<'_>, dst: &[u8], member: &[u8], dst_had: bool) {
    if dst_had {
        readd_member(ctx, dst, member);
    } else {
        add_member(ctx, dst, member);
        ctx.notify(notify::SET, "sadd", dst);
    }
}

/// What SMOVE between two shards (`crate::move_across`) found of its source in step 1.
#[derive(Debug)]
pub(crate) enum SmoveSource {
    /// No source: SMOVE answers 0.
    Missing,
    /// A set without the member: 0, unless the destination is of another type.
    Without,
    /// A set with the member, and what its state had observed (step 3 removes that much).
    With(meridian_crdt::Observed),
}

/// SMOVE between two shards, step 1 on the source's shard; WRONGTYPE for a source of
/// another type.
pub(crate) fn smove_source(
    shard: &mut Shard,
    db: usize,
    src: &[u8],
    member: &[u8],
    now_ms: u64,
) -> Result<SmoveSource, CmdError> {
    let Some(e) = shard.lookup_quiet(db, src, now_ms) else {
        return Ok(SmoveSource::Missing);
    };
    let Some(set) = e.state.set() else {
        return Err(CmdError::WrongType);
    };
    Ok(if set.contains(member) {
        SmoveSource::With(e.state.observed())
    } else {
        SmoveSource::Without
    })
}

/// SMOVE between two shards, step 2 on the destination's shard: WRONGTYPE for a destination
/// of another type; 0 when the source lacked the member (`present` false); else `member`
/// added (a re-add when it is there already) and 1 answered.
pub(crate) fn smove_into(
    ctx: &mut Ctx<'_>,
    dst: &[u8],
    member: &[u8],
    present: bool,
) -> Result<(), CmdError> {
    check_write(ctx, dst)?;
    if !present {
        ctx.out.int(0);
        return Ok(());
    }
    let db = ctx.db();
    let dst_had = contains(ctx.shard, db, dst, member);
    move_in(ctx, dst, member, dst_had);
    ctx.out.int(1);
    Ok(())
}

/// SMOVE between two shards, step 3 on the source's shard: `member` removed as far as step 1
/// had observed (an add of it since then stays); the last member removes the key.
pub(crate) fn smove_out(
    ctx: &mut Ctx<'_>,
    src: &[u8],
    member: &[u8],
    observed: meridian_crdt::Observed,
) {
    let db = ctx.db();
    if !check_write(ctx, src).unwrap_or(false) || !contains(ctx.shard, db, src, member) {
        return;
    }
    ctx.shard.write_key(db, src, ctx.now_ms, |state| {
        if state.set().is_some_and(|s| s.len() <= 1) {
            Effect::Remove { observed }
        } else {
            Effect::SetRem {
                member,
                observed: observed.stamps,
            }
        }
    });
    ctx.notify_then_del(notify::SET, "srem", src);
}

fn sinter(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    set_op(ctx, argv, SetOp::Inter)
}

fn sunion(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    set_op(ctx, argv, SetOp::Union)
}

fn sdiff(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    set_op(ctx, argv, SetOp::Diff)
}

fn sinterstore(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    set_op_store(ctx, argv, SetOp::Inter)
}

fn sunionstore(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    set_op_store(ctx, argv, SetOp::Union)
}

fn sdiffstore(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    set_op_store(ctx, argv, SetOp::Diff)
}

/// SINTERCARD numkeys key [key ...] [LIMIT limit]
fn sintercard(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let numkeys_err = || CmdError::Err("numkeys should be greater than 0".to_string());
    let numkeys = parse_i64(arg(argv, 1)).ok_or_else(numkeys_err)?;
    if numkeys < 1 {
        return Err(numkeys_err());
    }
    let numkeys = usize::try_from(numkeys).unwrap_or(usize::MAX);
    if numkeys > argv.len().saturating_sub(2) {
        return Err(CmdError::Err(
            "Number of keys can't be greater than number of args".to_string(),
        ));
    }
    let keys = argv.get(2..2 + numkeys).unwrap_or_default();
    let mut limit = 0usize;
    let mut i = 2 + numkeys;
    while let Some(opt) = argv.get(i) {
        match argv.get(i + 1) {
            Some(v) if eq_ic(opt, "limit") => {
                limit = match parse_i64(v) {
                    Some(n) if n >= 0 => usize::try_from(n).unwrap_or(usize::MAX),
                    _ => return Err(CmdError::Err("LIMIT can't be negative".to_string())),
                };
                i += 2;
            }
            _ => return Err(CmdError::Syntax),
        }
    }
    for k in keys {
        check_read(ctx, k)?;
    }
    let db = ctx.db();
    let sets: Option<Vec<&OrSet>> = keys.iter().map(|k| set_ref(ctx.shard, db, k)).collect();
    let mut n = 0usize;
    if let Some(sets) = sets {
        let mut sets = distinct(sets.into_iter());
        sets.sort_by_key(|s| s.len());
        let mut poll = crate::stop::Poll::new();
        if let Some((first, rest)) = sets.split_first() {
            for m in first.members() {
                if poll.stop() {
                    return Err(CmdError::ShuttingDown);
                }
                if rest.iter().all(|s| s.contains(m)) {
                    n += 1;
                    if limit != 0 && n >= limit {
                        break;
                    }
                }
            }
        }
    }
    ctx.out.int(n as i64);
    Ok(())
}

/// SSCAN key cursor [MATCH pattern] [COUNT count]
///
/// A set of at most `SSCAN_ALL_MAX` members is returned whole with cursor 0. A larger one is
/// walked by bucket: the cursor is `bucket index << 6 | log2(bucket count)`. Removals never
/// move members and inserts without growth neither, so every member present for the whole
/// iteration is returned; when the table grew since the cursor was issued, the walk restarts
/// at bucket 0 (members may come twice, as SCAN allows).
fn sscan(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let key = arg(argv, 1);
    let cursor =
        parse_cursor(arg(argv, 2)).ok_or_else(|| CmdError::Err("invalid cursor".to_string()))?;
    if !check_read(ctx, key)? {
        ctx.out.array(2);
        ctx.out.bulk(b"0");
        ctx.out.array(0);
        return Ok(());
    }
    let ScanOptions { count, pattern, .. } = scan_options(argv, 3, false)?;
    let db = ctx.db();
    let Some(s) = set_ref(ctx.shard, db, key) else {
        ctx.out.array(2);
        ctx.out.bulk(b"0");
        ctx.out.array(0);
        return Ok(());
    };
    let keep = |m: &[u8]| pattern.is_none_or(|p| crate::glob::matches(p, m, false));
    let mut found: Vec<&[u8]> = Vec::new();
    let next: u64 = if cursor == 0 && s.len() <= SSCAN_ALL_MAX {
        found.extend(s.members().filter(|m| keep(m)));
        0
    } else {
        let (next, members) = scan_buckets(cursor, count, s.bucket_count(), s.scan_space(), |i| {
            s.bucket(i)
        });
        found.extend(members.into_iter().filter(|m| keep(m)));
        next
    };
    ctx.out.array(2);
    let mut buf = itoa::Buffer::new();
    ctx.out.bulk(buf.format(next).as_bytes());
    ctx.out.array(found.len());
    for m in found {
        ctx.out.bulk(m);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The largest cursor a scan can hand out (a table of 2^35 live buckets after a base just
    /// under `SCAN_BASE_MAX`) is below 2^53: exact as a double, for clients that read cursors
    /// as JavaScript numbers.
    #[test]
    fn scan_cursors_stay_exact_as_doubles() {
        let tag = 70;
        let space = ScanSpace {
            generation: tag,
            base: meridian_crdt::table::SCAN_BASE_MAX - 1,
        };
        let buckets = 1usize << 35;
        let from = space.base + buckets - 12;
        let cursor = ((from as u64) << CURSOR_TAG_BITS) | u64::from(tag);
        let (next, found) = scan_buckets::<()>(cursor, 1, buckets, space, |_| None);
        assert!(found.is_empty());
        assert_eq!(
            next >> CURSOR_TAG_BITS,
            (from + 10) as u64,
            "ten buckets visited"
        );
        assert!(next != 0 && next < 1 << 53, "{next}");
        // One more call reaches the end.
        assert_eq!(scan_buckets::<()>(next, 1, buckets, space, |_| None).0, 0);
    }

    #[test]
    fn cursor_like_strtoul() {
        assert_eq!(parse_cursor(b""), Some(0));
        assert_eq!(parse_cursor(b"+7"), Some(7));
        assert_eq!(parse_cursor(b"-1"), Some(u64::MAX));
        assert_eq!(parse_cursor(b" 1"), None);
        assert_eq!(parse_cursor(b"1x"), None);
    }

    #[test]
    fn random_repeats_at_the_limit_and_one_past() {
        assert_eq!(random_repeats(-(1 << 24)), Ok(1 << 24));
        assert_eq!(
            random_repeats(-(1 << 24) - 1),
            Err(CmdError::Err("value is out of range".to_string()))
        );
        assert_eq!(random_repeats(-1), Ok(1));
    }

    #[test]
    fn positive_count_errors_like_redis() {
        assert_eq!(positive_count(b"3"), Ok(3));
        assert_eq!(positive_count(b"-1"), Err(CmdError::MustBePositive));
        assert_eq!(positive_count(b"abc"), Err(CmdError::MustBePositive));
    }
}
