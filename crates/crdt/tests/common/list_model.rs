//! List commands as the server issues them (`crates/server/src/cmd/list.rs`), for the law
//! tests: each command becomes the `ListOp` the server would build from the list's current
//! state, or a removal of the whole key, or nothing.
#![allow(dead_code)]

use meridian_crdt::{ListCrdt, ListOp};
use proptest::prelude::*;

#[derive(Clone, Debug)]
pub enum ListCmd {
    LPush(Vec<u8>),
    RPush(u8, u8),
    Insert(usize, bool, u8),
    Set(usize, u8),
    LPop(usize),
    RPop(usize),
    Rem(i8, u8),
    Trim(i8, i8),
    Del,
}

pub fn list_cmd() -> impl Strategy<Value = ListCmd> {
    let val = || 0u8..4;
    prop_oneof![
        4 => prop::collection::vec(val(), 1..3).prop_map(ListCmd::LPush),
        4 => (val(), val()).prop_map(|(a, b)| ListCmd::RPush(a, b)),
        3 => (0usize..8, any::<bool>(), val()).prop_map(|(i, a, v)| ListCmd::Insert(i, a, v)),
        2 => (0usize..8, val()).prop_map(|(i, v)| ListCmd::Set(i, v)),
        2 => (1usize..3).prop_map(ListCmd::LPop),
        2 => (1usize..3).prop_map(ListCmd::RPop),
        1 => (-2i8..3, val()).prop_map(|(c, v)| ListCmd::Rem(c, v)),
        1 => (-4i8..4, -4i8..4).prop_map(|(a, b)| ListCmd::Trim(a, b)),
        1 => Just(ListCmd::Del),
    ]
}

/// LTRIM's counts of elements removed at the left and at the right.
pub fn trim_counts(start: i64, end: i64, llen: i64) -> (usize, usize) {
    let start = if start < 0 { llen + start } else { start }.max(0);
    let end = if end < 0 { llen + end } else { end };
    if start > end || start >= llen {
        (llen as usize, 0)
    } else {
        (start as usize, (llen - end.min(llen - 1) - 1) as usize)
    }
}

/// What the server issues for a list command.
pub enum Issued {
    Op(ListOp<Vec<u8>>),
    DelKey,
}

/// The write the server would issue for `cmd` on list `l` (None: no write).
pub fn issue(l: &ListCrdt, cmd: &ListCmd) -> Option<Issued> {
    let len = l.len();
    let op = match cmd {
        ListCmd::LPush(vs) => {
            let v: Vec<Vec<u8>> = vs.iter().rev().map(|b| vec![*b]).collect();
            l.push_op(true, v)
        }
        ListCmd::RPush(a, b) => l.push_op(false, vec![vec![*a], vec![*b]]),
        ListCmd::Insert(i, after, v) if len > 0 => l.insert_op(i % len, *after, vec![*v]),
        ListCmd::Set(i, v) if len > 0 => l.replace_op(i % len, vec![*v])?,
        ListCmd::LPop(n) | ListCmd::RPop(n) if len > 0 => {
            let n = (*n).min(len);
            if n == len {
                return Some(Issued::DelKey);
            }
            if matches!(cmd, ListCmd::LPop(_)) {
                l.remove_range_op(0, n - 1)?
            } else {
                l.remove_range_op(len - n, len - 1)?
            }
        }
        ListCmd::Rem(c, v) => {
            let mut idx: Vec<usize> = l
                .iter()
                .enumerate()
                .filter(|(_, e)| e.value == [*v])
                .map(|(i, _)| i)
                .collect();
            if *c < 0 {
                idx.reverse();
            }
            if *c != 0 {
                idx.truncate(c.unsigned_abs() as usize);
            }
            idx.sort_unstable();
            if idx.is_empty() {
                return None;
            }
            if idx.len() == len {
                return Some(Issued::DelKey);
            }
            let mut ranges = Vec::new();
            for i in idx {
                let id = l.get(i)?.id;
                ranges.push((id.clone(), id));
            }
            l.remove_ids_op(ranges)
        }
        ListCmd::Trim(a, b) if len > 0 => {
            let (lt, rt) = trim_counts(i64::from(*a), i64::from(*b), len as i64);
            if lt + rt >= len {
                return Some(Issued::DelKey);
            }
            if lt == 0 && rt == 0 {
                return None;
            }
            let mut ranges = Vec::new();
            if lt > 0 {
                ranges.push((l.get(0)?.id, l.get(lt - 1)?.id));
            }
            if rt > 0 {
                ranges.push((l.get(len - rt)?.id, l.get(len - 1)?.id));
            }
            l.remove_ids_op(ranges)
        }
        ListCmd::Del if len > 0 => return Some(Issued::DelKey),
        _ => return None,
    };
    Some(Issued::Op(op))
}
