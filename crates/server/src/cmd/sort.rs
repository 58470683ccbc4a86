//! SORT and SORT_RO, as Redis 7.0's `sort.c`: the elements of a list, set or sorted set,
//! ordered as numbers or (ALPHA) as bytes, by themselves or by other keys' values (BY with a
//! `*` pattern, `->field` for a hash field), with LIMIT, GET patterns and STORE into a list.
//!
//! A BY pattern without `*` skips sorting: lists and sorted sets keep their own order (DESC
//! reverses it), a set keeps its iteration order, except with STORE, where it is sorted ALPHA
//! so that what is stored does not depend on a hash order. Byte order is what Redis's
//! `strcoll` gives under the C and C.UTF-8 locales.

use std::cmp::Ordering;

use meridian_crdt::{Effect, KeyState, ListCrdt, StrView, TypeTag};

use super::args::{eq_ic, int_arg, is_c_space, strtod_decimal};
use super::{Ctx, Handler};
use crate::error::CmdError;

pub const HANDLERS: &[(&str, Handler)] = &[("sort", sort), ("sort_ro", sort_ro)];

/// The options of one SORT call.
struct SortArgs<'a> {
    desc: bool,
    alpha: bool,
    /// LIMIT offset count, as given (negative values are handled as Redis does).
    limit: Option<(i64, i64)>,
    by: Option<&'a [u8]>,
    /// A BY pattern without `*` was given: no sorting (Redis never resets it).
    dontsort: bool,
    gets: Vec<&'a [u8]>,
    store: Option<&'a [u8]>,
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
fn full_key_access(ctx: &Ctx<'_>, argv: &[&[u8]]) -> bool {
    let user = ctx.client.shared.user.borrow();
    let slot = user
        .as_ref()
        .unwrap_or_else(|| ctx.shard.acl.default_user());
    slot.is_unrestricted()
        || crate::acl::may_read_every_key(crate::acl::catalog(), &slot.get(), ctx.spec.acl_id, argv)
}

/// Redis's option loop: unknown words (and STORE for SORT_RO) are a syntax error, LIMIT
/// needs two integers. BY with a pattern and GET read keys no key spec names: a user
/// needs read access to every key for them (`full_key_access`).
fn parse_args<'a>(
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
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    List,
    Set,
    ZSet,
}

/// The elements of the key to sort in its own order, and its type (a missing key is an empty
/// list). WRONGTYPE for other types.
fn load(ctx: &mut Ctx<'_>, key: &[u8]) -> Result<(Kind, Vec<Vec<u8>>), CmdError> {
    let db = ctx.db();
    let Some(state) = ctx.shard.lookup_read(db, key, ctx.now_ms) else {
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
        Some(TypeTag::ZSet) => Ok((
            Kind::ZSet,
            state
                .zset()
                .map(|z| z.iter().map(|(m, _)| m.to_vec()).collect())
                .unwrap_or_default(),
        )),
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

/// Redis's `lookupKeyByPattern`: `#` is the element itself; otherwise the first `*` is
/// replaced by the element, and a `->field` after it reads a hash field. `None` when the
/// pattern has no `*`, or the key (field) is missing or of another type.
fn lookup_pattern(ctx: &mut Ctx<'_>, pattern: &[u8], elem: &[u8], write: bool) -> Option<Vec<u8>> {
    if pattern == b"#" {
        return Some(elem.to_vec());
    }
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
    let db = ctx.db();
    let now = ctx.now_ms;
    if write {
        let e = ctx.shard.lookup_quiet(db, &key, now)?;
        pattern_value(&e.state, field)
    } else {
        let state = ctx.shard.lookup_read(db, &key, now)?;
        pattern_value(state, field)
    }
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
    let full_key_access = full_key_access(ctx, argv);
    let mut a = parse_args(argv, readonly, full_key_access)?;
    let (kind, elems) = load(ctx, argv.get(1).copied().unwrap_or_default())?;
    // A set's order is arbitrary: with STORE, or for a script, sort it anyway so the result
    // is the same everywhere (Redis does this for scripts and for what it replicates).
    if a.dontsort && kind == Kind::Set && (a.store.is_some() || ctx.client.is_script()) {
        a.dontsort = false;
        a.alpha = true;
        a.by = None;
    }
    let (start, end) = limit_range(a.limit, elems.len());
    let selected: Vec<Vec<u8>> = if a.dontsort {
        let mut elems = elems;
        if a.desc && kind != Kind::Set {
            elems.reverse();
        }
        take_range(elems, start, end)
    } else {
        let write = a.store.is_some();
        let mut items = Vec::with_capacity(elems.len());
        let mut bad_score = false;
        for elem in elems {
            let byval = match a.by {
                Some(p) => lookup_pattern(ctx, p, &elem, write),
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
        take_range(items.into_iter().map(|i| i.elem).collect(), start, end)
    };
    match a.store {
        None => reply(ctx, &a.gets, &selected),
        Some(dst) => store(ctx, dst, &a.gets, &selected),
    }
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
fn reply(ctx: &mut Ctx<'_>, gets: &[&[u8]], selected: &[Vec<u8>]) -> Result<(), CmdError> {
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
            match lookup_pattern(ctx, p, e, false) {
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
            values.push(lookup_pattern(ctx, p, e, true).unwrap_or_default());
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
