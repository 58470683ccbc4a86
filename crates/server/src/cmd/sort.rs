//! SORT and SORT_RO, as Redis 7.0's `sort.c`: the elements of a list, set or sorted set,
//! ordered as numbers or (ALPHA) as bytes, by themselves or by other keys' values (BY with a
//! `*` pattern, `->field` for a hash field), with LIMIT, GET patterns and STORE into a list.
//!
//! A BY pattern without `*` skips sorting: lists and sorted sets keep their own order (DESC
//! reverses it), a set keeps its iteration order, except with STORE, where it is sorted ALPHA
//! so that what is stored does not depend on a hash order. Byte order is what Redis's
//! `strcoll` gives under the C and C.UTF-8 locales.
//!
//! With several shards, a SORT whose keys (the sorted key, the keys its patterns form, the
//! STORE destination) are not all on one shard is coordinated by the connection's thread
//! (`crate::sort_across`) out of the same parts: `parse_args`, `load_from`, `read_formed`,
//! `select` and `output`, and `finish` as the command's last step. The handler itself
//! refuses patterns that may form keys of another shard (inside MULTI/EXEC, scripts, and on
//! the cluster endpoints), with Redis Cluster's texts.

use std::cmp::Ordering;
use std::collections::HashMap;

use meridian_crdt::{Effect, KeyState, ListCrdt, StrView, TypeTag};

use super::args::{eq_ic, int_arg, is_c_space, strtod_decimal};
use super::{Ctx, Handler};
use crate::client::Client;
use crate::error::CmdError;
use crate::shard::Shard;
use crate::slot::SlotMap;

pub const HANDLERS: &[(&str, Handler)] = &[("sort", sort), ("sort_ro", sort_ro)];

/// The options of one SORT call.
#[derive(Debug)]
pub(crate) struct SortArgs<'a> {
    pub desc: bool,
    pub alpha: bool,
    /// LIMIT offset count, as given (negative values are handled as Redis does).
    pub limit: Option<(i64, i64)>,
    pub by: Option<&'a [u8]>,
    /// A BY pattern without `*` was given: no sorting (Redis never resets it).
    pub dontsort: bool,
    pub gets: Vec<&'a [u8]>,
    pub store: Option<&'a [u8]>,
}

impl SortArgs<'_> {
    /// A set's order is arbitrary: with STORE, or for a script, it is sorted anyway so the
    /// result is the same everywhere (Redis does this for scripts and for what it
    /// replicates).
    pub fn settle(&mut self, kind: Kind, script: bool) {
        if self.dontsort && kind == Kind::Set && (self.store.is_some() || script) {
            self.dontsort = false;
            self.alpha = true;
            self.by = None;
        }
    }

    /// The BY pattern that forms keys to sort by, when sorting happens.
    pub fn by_lookup(&self) -> Option<&[u8]> {
        if self.dontsort { None } else { self.by }
    }
}

/// One element to sort and what it sorts by.
struct Item {
    elem: Vec<u8>,
    score: f64,
    /// ALPHA with BY: the looked-up value (`None` when the key or field is missing).
    cmp: Option<Vec<u8>>,
}

fn sort(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    sort_generic(ctx, argv, false)
}

fn sort_ro(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    sort_generic(ctx, argv, true)
}

/// Whether the client's user may read every key with this command (SORT's BY and GET).
pub(crate) fn full_key_access(
    shard: &Shard,
    client: &Client,
    spec: &super::table::CommandSpec,
    argv: &[&[u8]],
) -> bool {
    let user = client.shared.user.borrow();
    let slot = user.as_ref().unwrap_or_else(|| shard.acl.default_user());
    slot.is_unrestricted()
        || crate::acl::may_read_every_key(crate::acl::catalog(), &slot.get(), spec.acl_id, argv)
}

/// Redis Cluster's refusal of a pattern that may form keys outside the shard of `key` (a
/// `{tag}` without `*` pins them to one slot; Redis 7.2's rule, at shard rather than slot
/// grain): None when none may. `#` (the element itself) and a BY without `*` (no sorting)
/// form no key.
pub(crate) fn pattern_denial(slots: &SlotMap, key: &[u8], a: &SortArgs<'_>) -> Option<CmdError> {
    let home = slots.shard_of_key(key);
    let same =
        |p: &[u8]| crate::route::pattern_slot(p).is_some_and(|s| slots.shard_of_slot(s) == home);
    if a.by.is_some_and(|p| p.contains(&b'*') && !same(p)) {
        return Some(CmdError::Err(
            "BY option of SORT denied in Cluster mode.".to_string(),
        ));
    }
    if a.gets.iter().any(|p| *p != b"#" && !same(p)) {
        return Some(CmdError::Err(
            "GET option of SORT denied in Cluster mode.".to_string(),
        ));
    }
    None
}

/// Redis's option loop: unknown words (and STORE for SORT_RO) are a syntax error, LIMIT
/// needs two integers. BY with a pattern and GET read keys no key spec names: a user
/// needs read access to every key for them (`full_key_access`).
pub(crate) fn parse_args<'a>(
    argv: &[&'a [u8]],
    readonly: bool,
    full_key_access: bool,
) -> Result<SortArgs<'a>, CmdError> {
    let mut a = SortArgs {
        desc: false,
        alpha: false,
        limit: None,
        by: None,
        dontsort: false,
        gets: Vec::new(),
        store: None,
    };
    let mut j = 2;
    while let Some(&opt) = argv.get(j) {
        let left = argv.len() - j - 1;
        let next = argv.get(j + 1).copied().unwrap_or_default();
        if eq_ic(opt, "asc") {
            a.desc = false;
        } else if eq_ic(opt, "desc") {
            a.desc = true;
        } else if eq_ic(opt, "alpha") {
            a.alpha = true;
        } else if eq_ic(opt, "limit") && left >= 2 {
            let count = argv.get(j + 2).copied().unwrap_or_default();
            a.limit = Some((int_arg(next)?, int_arg(count)?));
            j += 2;
        } else if !readonly && eq_ic(opt, "store") && left >= 1 {
            a.store = Some(next);
            j += 1;
        } else if eq_ic(opt, "by") && left >= 1 {
            a.by = Some(next);
            if !next.contains(&b'*') {
                a.dontsort = true;
            } else if !full_key_access {
                return Err(CmdError::Err(
                    "BY option of SORT denied due to insufficient ACL permissions.".to_string(),
                ));
            }
            j += 1;
        } else if eq_ic(opt, "get") && left >= 1 {
            if !full_key_access {
                return Err(CmdError::Err(
                    "GET option of SORT denied due to insufficient ACL permissions.".to_string(),
                ));
            }
            a.gets.push(next);
            j += 1;
        } else {
            return Err(CmdError::Syntax);
        }
        j += 1;
    }
    Ok(a)
}

/// Which of the key's types SORT reads: a list, a set or a sorted set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    List,
    Set,
    ZSet,
}

/// The elements of the key to sort in its own order, and its type (a missing key is an empty
/// list). WRONGTYPE for other types.
pub(crate) fn load_from(
    shard: &mut Shard,
    db: usize,
    key: &[u8],
    now_ms: u64,
) -> Result<(Kind, Vec<Vec<u8>>), CmdError> {
    let Some(state) = shard.lookup_read(db, key, now_ms) else {
        return Ok((Kind::List, Vec::new()));
    };
    match state.type_tag() {
        None => Ok((Kind::List, Vec::new())),
        Some(TypeTag::List) => Ok((
            Kind::List,
            state
                .list()
                .map(|l| l.iter().map(|e| e.value.to_vec()).collect())
                .unwrap_or_default(),
        )),
        Some(TypeTag::Set) => {
            let mut members: Vec<Vec<u8>> = state
                .set()
                .map(|s| s.members().map(<[u8]>::to_vec).collect())
                .unwrap_or_default();
            super::set::redis_order(&mut members);
            Ok((Kind::Set, members))
        }
        Some(TypeTag::ZSet) => {
            let members = state
                .zset()
                .map(|z| z.iter().map(|(m, _)| m.to_vec()).collect())
                .unwrap_or_default();
            // Redis's SORT and SORT_RO convert the sorted set they read, for good.
            shard.convert_zset_to_skiplist(db, key);
            Ok((Kind::ZSet, members))
        }
        Some(_) => Err(CmdError::WrongType),
    }
}

/// Redis's LIMIT sanity check: the inclusive range `start..=end` of the `n` sorted elements
/// to output (empty when `end < start`).
fn limit_range(limit: Option<(i64, i64)>, n: usize) -> (i64, i64) {
    let n = n as i64;
    let (offset, count) = limit.unwrap_or((0, -1));
    let start = offset.max(0);
    let mut end = if count < 0 {
        n - 1
    } else {
        start.saturating_add(count) - 1
    };
    if start >= n {
        return (n - 1, n - 2);
    }
    if end >= n {
        end = n - 1;
    }
    (start, end)
}

/// The bytes a string view shows.
fn view_bytes(v: StrView<'_>) -> Vec<u8> {
    match v {
        StrView::Bytes(b) => b.to_vec(),
        StrView::Int(n) => itoa::Buffer::new().format(n).as_bytes().to_vec(),
        StrView::Float(d) => d.format_redis().into_bytes(),
    }
}

/// The string value of `state`, or of its hash field `field`; `None` for another type or a
/// missing field (Redis's `lookupKeyByPattern` "noobj").
fn pattern_value(state: &KeyState, field: Option<&[u8]>) -> Option<Vec<u8>> {
    match field {
        Some(f) => state.hash()?.get(f).map(view_bytes),
        None => {
            if let Some(h) = state.hll() {
                return Some(h.bytes().to_vec());
            }
            if state.type_tag() != Some(TypeTag::String) {
                return None;
            }
            state.view_str().map(view_bytes)
        }
    }
}

/// The key (and hash field) `pattern` forms for `elem`, as Redis's `lookupKeyByPattern`:
/// the first `*` replaced by the element, a `->field` after it naming a hash field. None
/// when the pattern has no `*` (its value is always missing). `#` is handled by callers.
pub(crate) fn pattern_key<'p>(
    pattern: &'p [u8],
    elem: &[u8],
) -> Option<(Vec<u8>, Option<&'p [u8]>)> {
    let star = pattern.iter().position(|&c| c == b'*')?;
    let after = pattern.get(star + 1..)?;
    let arrow = after.windows(2).position(|w| w == b"->");
    let (suffix, field) = match arrow {
        Some(i) if i + 2 < after.len() => (after.get(..i)?, after.get(i + 2..)),
        _ => (after, None),
    };
    let mut key = Vec::with_capacity(star + elem.len() + suffix.len());
    key.extend_from_slice(pattern.get(..star)?);
    key.extend_from_slice(elem);
    key.extend_from_slice(suffix);
    Some((key, field))
}

/// The value of a formed key (or of its hash field) on `shard`: `None` when missing or of
/// another type. A STORE reads as a write does (no keyspace hit or miss counted).
pub(crate) fn read_formed(
    shard: &mut Shard,
    db: usize,
    key: &[u8],
    field: Option<&[u8]>,
    now_ms: u64,
    write: bool,
) -> Option<Vec<u8>> {
    if write {
        let e = shard.lookup_quiet(db, key, now_ms)?;
        pattern_value(&e.state, field)
    } else {
        let state = shard.lookup_read(db, key, now_ms)?;
        pattern_value(state, field)
    }
}

/// Redis's `lookupKeyByPattern` on this shard: `#` is the element itself; otherwise the
/// value of the key (field) the pattern forms.
fn lookup_pattern(ctx: &mut Ctx<'_>, pattern: &[u8], elem: &[u8], write: bool) -> Option<Vec<u8>> {
    if pattern == b"#" {
        return Some(elem.to_vec());
    }
    let (key, field) = pattern_key(pattern, elem)?;
    let db = ctx.db();
    read_formed(ctx.shard, db, &key, field, ctx.now_ms, write)
}

/// What SORT's `strtod` accepts as a number to sort by: the C string (up to a NUL) parsed
/// whole after leading white space, an empty text being 0; `None` for anything else, NaN,
/// or a value out of range (ERANGE: overflow, underflow, subnormal).
fn sort_score(b: &[u8]) -> Option<f64> {
    let b = b.split(|&c| c == 0).next().unwrap_or_default();
    if b.is_empty() {
        return Some(0.0);
    }
    let start = b.iter().position(|&c| !is_c_space(c))?;
    let t = b.get(start..)?;
    let v = match strtod_decimal(t) {
        Some((_, true)) => return None,
        Some((v, false)) => v,
        None => super::zset::parse_score(t)?,
    };
    // glibc sets ERANGE for a subnormal result too, and SORT checks errno alone.
    (!v.is_nan() && !v.is_subnormal()).then_some(v)
}

/// Redis's `sortCompare`, before DESC is applied.
fn compare(a: &Item, b: &Item, alpha: bool, by: bool) -> Ordering {
    if !alpha {
        return a
            .score
            .partial_cmp(&b.score)
            .unwrap_or(Ordering::Equal)
            .then_with(|| a.elem.cmp(&b.elem));
    }
    if by {
        return match (&a.cmp, &b.cmp) {
            (None, None) => Ordering::Equal,
            (None, Some(_)) => Ordering::Less,
            (Some(_), None) => Ordering::Greater,
            (Some(x), Some(y)) => x.cmp(y),
        };
    }
    a.elem.cmp(&b.elem)
}

/// SORT key [BY pattern] [LIMIT offset count] [GET pattern ...] [ASC|DESC] [ALPHA]
/// [STORE destination]; SORT_RO without STORE. Replies the elements (or, per element, one
/// value per GET pattern, null when missing), or with STORE the length of the stored list.
fn sort_generic(ctx: &mut Ctx<'_>, argv: &[&[u8]], readonly: bool) -> Result<(), CmdError> {
    let access = full_key_access(ctx.shard, ctx.client, ctx.spec, argv);
    let mut a = parse_args(argv, readonly, access)?;
    let key = argv.get(1).copied().unwrap_or_default();
    // Here every key must be this shard's: the main port coordinates a SORT whose keys are
    // not (`crate::sort_across`), so this is a transaction, a script or a cluster endpoint.
    if ctx.front.node.shards > 1 {
        if let Some(e) = pattern_denial(&ctx.front.node.slots, key, &a) {
            return Err(e);
        }
    }
    let db = ctx.db();
    let (kind, elems) = load_from(ctx.shard, db, key, ctx.now_ms)?;
    a.settle(kind, ctx.client.is_script());
    let write = a.store.is_some();
    let by = a.by_lookup();
    let selected = select(&a, kind, elems, |elem| {
        by.and_then(|p| lookup_pattern(ctx, p, elem, write))
    })?;
    output(ctx, &a, &selected, |ctx, p, e| {
        lookup_pattern(ctx, p, e, write)
    })
}

/// The sorted elements SORT outputs, after LIMIT: `by` gives an element's BY value (called
/// only when sorting by a pattern; `None` for a missing one).
pub(crate) fn select(
    a: &SortArgs<'_>,
    kind: Kind,
    elems: Vec<Vec<u8>>,
    mut by: impl FnMut(&[u8]) -> Option<Vec<u8>>,
) -> Result<Vec<Vec<u8>>, CmdError> {
    let (start, end) = limit_range(a.limit, elems.len());
    if a.dontsort {
        let mut elems = elems;
        if a.desc && kind != Kind::Set {
            elems.reverse();
        }
        return Ok(take_range(elems, start, end));
    }
    let mut items = Vec::with_capacity(elems.len());
    let mut bad_score = false;
    for elem in elems {
        let byval = match a.by {
            Some(_) => by(&elem),
            None => Some(elem.clone()),
        };
        let mut item = Item {
            elem,
            score: 0.0,
            cmp: None,
        };
        if let Some(v) = byval {
            if a.alpha {
                if a.by.is_some() {
                    item.cmp = Some(v);
                }
            } else {
                match sort_score(&v) {
                    Some(s) => item.score = s,
                    None => bad_score = true,
                }
            }
        }
        items.push(item);
    }
    if bad_score {
        return Err(CmdError::Err(
            "One or more scores can't be converted into double".to_string(),
        ));
    }
    let (alpha, by, desc) = (a.alpha, a.by.is_some(), a.desc);
    items.sort_by(|x, y| {
        let o = compare(x, y, alpha, by);
        if desc { o.reverse() } else { o }
    });
    Ok(take_range(
        items.into_iter().map(|i| i.elem).collect(),
        start,
        end,
    ))
}

/// The reply, or with STORE the stored list: `get` gives the value of a GET pattern for an
/// element (`None`: missing).
pub(crate) fn output(
    ctx: &mut Ctx<'_>,
    a: &SortArgs<'_>,
    selected: &[Vec<u8>],
    get: impl FnMut(&mut Ctx<'_>, &[u8], &[u8]) -> Option<Vec<u8>>,
) -> Result<(), CmdError> {
    match a.store {
        None => reply(ctx, &a.gets, selected, get),
        Some(dst) => store(ctx, dst, &a.gets, selected, get),
    }
}

/// A formed key and hash field whose value the coordinator read (`crate::sort_across`).
pub(crate) type Formed = (Vec<u8>, Option<Vec<u8>>);

/// What the coordinator of a SORT across shards hands to its last step (`finish`).
#[derive(Debug)]
pub struct Gathered {
    /// The sorted elements after LIMIT, or the error SORT answers.
    pub selected: Result<Vec<Vec<u8>>, CmdError>,
    /// The values of the GET patterns' keys (fields) for those elements; missing ones are
    /// absent.
    pub values: HashMap<Formed, Vec<u8>>,
}

/// The last step of a SORT the connection's thread coordinated, on the shard of its STORE
/// destination (else the connection's own): its reply, or the store, from what was
/// gathered. Counted as the command (`cmd::call_with`).
pub(crate) fn finish(ctx: &mut Ctx<'_>, argv: &[&[u8]], g: Gathered) -> Result<(), CmdError> {
    let selected = g.selected?;
    let readonly = ctx.spec.meta.name == "sort_ro";
    // Parsed (and the ACL rule checked) by the coordinator already.
    let a = parse_args(argv, readonly, true)?;
    let values = g.values;
    output(ctx, &a, &selected, |_, p, e| {
        if p == b"#" {
            return Some(e.to_vec());
        }
        let (key, field) = pattern_key(p, e)?;
        values.get(&(key, field.map(<[u8]>::to_vec))).cloned()
    })
}

/// The elements at `start..=end` (nothing when `end < start`).
fn take_range(v: Vec<Vec<u8>>, start: i64, end: i64) -> Vec<Vec<u8>> {
    if end < start || start < 0 {
        return Vec::new();
    }
    let (Ok(start), Ok(end)) = (usize::try_from(start), usize::try_from(end)) else {
        return Vec::new();
    };
    v.into_iter().skip(start).take(end - start + 1).collect()
}

/// The output is elements × GET patterns, both chosen by the client: the loops poll the stop
/// flag (the reply is cut short and the connection closes).
fn reply(
    ctx: &mut Ctx<'_>,
    gets: &[&[u8]],
    selected: &[Vec<u8>],
    mut get: impl FnMut(&mut Ctx<'_>, &[u8], &[u8]) -> Option<Vec<u8>>,
) -> Result<(), CmdError> {
    if gets.is_empty() {
        ctx.out.array(selected.len());
        for e in selected {
            ctx.out.bulk(e);
        }
        return Ok(());
    }
    let mut poll = crate::stop::Poll::new();
    ctx.out.array(selected.len() * gets.len());
    for e in selected {
        for p in gets {
            if poll.stop() {
                return Err(CmdError::ShuttingDown);
            }
            match get(ctx, p, e) {
                Some(v) => ctx.out.bulk(&v),
                None => ctx.out.null(),
            }
        }
    }
    Ok(())
}

/// Most output entries SORT ... STORE reserves room for before it has them.
const STORE_PREALLOC_MAX: usize = 64 * 1024;

/// STORE: `dst` becomes a list of the output (a missing GET value stored as ""), or is
/// deleted when the output is empty; replies the output's length.
fn store(
    ctx: &mut Ctx<'_>,
    dst: &[u8],
    gets: &[&[u8]],
    selected: &[Vec<u8>],
    mut get: impl FnMut(&mut Ctx<'_>, &[u8], &[u8]) -> Option<Vec<u8>>,
) -> Result<(), CmdError> {
    let mut poll = crate::stop::Poll::new();
    // Elements × patterns may be far more than memory holds: reserve a bounded amount.
    let want = selected.len().saturating_mul(gets.len().max(1));
    let mut values: Vec<Vec<u8>> = Vec::with_capacity(want.min(STORE_PREALLOC_MAX));
    for e in selected {
        if gets.is_empty() {
            values.push(e.clone());
        }
        for p in gets {
            if poll.stop() {
                return Err(CmdError::ShuttingDown);
            }
            values.push(get(ctx, p, e).unwrap_or_default());
        }
    }
    let db = ctx.db();
    let now = ctx.now_ms;
    let existed = ctx.shard.delete_key(db, dst, now);
    if !values.is_empty() {
        let refs: Vec<&[u8]> = values.iter().map(Vec::as_slice).collect();
        let flags = ctx.shard.hold_new(existed);
        ctx.shard.write_key(db, dst, now, |_| {
            Effect::List(ListCrdt::new().push_op(false, refs))
        });
        ctx.shard.notify_flags = flags;
        ctx.notify(crate::notify::LIST, "sortstore", dst);
    } else if existed {
        ctx.notify(crate::notify::GENERIC, "del", dst);
    }
    ctx.out.int(values.len() as i64);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_outside_the_key_shard_are_denied() {
        let slots = SlotMap::contiguous(2);
        let denial = |argv: &[&[u8]]| {
            let a = parse_args(argv, false, true).unwrap();
            pattern_denial(&slots, argv[1], &a).map(|e| e.to_string())
        };
        assert_eq!(
            denial(&[b"sort", b"{t}l", b"BY", b"{t}w_*", b"GET", b"#"]),
            None
        );
        assert!(
            denial(&[b"sort", b"l", b"by", b"w_*"])
                .unwrap()
                .starts_with("ERR BY option")
        );
        assert_eq!(denial(&[b"sort", b"l", b"by", b"nosort"]), None);
        assert!(
            denial(&[b"sort", b"l", b"get", b"o_*"])
                .unwrap()
                .starts_with("ERR GET option")
        );
        // STORE's destination named like an option is not read as one.
        assert_eq!(denial(&[b"sort", b"l", b"store", b"by"]), None);
    }

    #[test]
    fn patterns_form_keys_like_redis() {
        assert_eq!(pattern_key(b"w_*", b"1"), Some((b"w_1".to_vec(), None)));
        assert_eq!(
            pattern_key(b"h_*_x->f", b"ab"),
            Some((b"h_ab_x".to_vec(), Some(&b"f"[..])))
        );
        // An arrow with no field after it is part of the key; only the first `*` is
        // replaced.
        assert_eq!(pattern_key(b"h_*->", b"1"), Some((b"h_1->".to_vec(), None)));
        assert_eq!(pattern_key(b"*_*", b"1"), Some((b"1_*".to_vec(), None)));
        assert_eq!(pattern_key(b"nostar", b"1"), None);
    }

    #[test]
    fn limit_like_redis() {
        assert_eq!(limit_range(None, 4), (0, 3));
        assert_eq!(limit_range(Some((1, 2)), 4), (1, 2));
        assert_eq!(limit_range(Some((-1, 2)), 4), (0, 1));
        assert_eq!(limit_range(Some((0, -1)), 4), (0, 3));
        assert_eq!(limit_range(Some((10, 2)), 4), (3, 2));
        assert_eq!(limit_range(Some((1, 0)), 4), (1, 0));
        assert_eq!(limit_range(None, 0), (-1, -2));
        assert_eq!(limit_range(Some((0, i64::MAX)), 4), (0, 3));
    }

    #[test]
    fn scores_like_strtod() {
        assert_eq!(sort_score(b""), Some(0.0));
        assert_eq!(sort_score(b" 5"), Some(5.0));
        assert_eq!(sort_score(b"5 "), None);
        assert_eq!(sort_score(b" "), None);
        assert_eq!(sort_score(b"1\0x"), Some(1.0));
        assert_eq!(sort_score(b"0x10"), Some(16.0));
        assert_eq!(sort_score(b"1e400"), None);
        assert_eq!(sort_score(b"nan"), None);
        assert_eq!(sort_score(b"-inf"), Some(f64::NEG_INFINITY));
        assert_eq!(sort_score(b"1e-310"), None);
        assert_eq!(
            sort_score(b"2.2250738585072014e-308"),
            Some(2.2250738585072014e-308)
        );
    }
}
