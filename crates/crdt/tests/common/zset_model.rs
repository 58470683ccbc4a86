//! Sorted-set commands as the server issues them (`crates/server/src/cmd/zset.rs`), for the
//! law tests: each command becomes the `ZSetOp` the server would build from the set's
//! current state, or a removal of the whole key, or nothing. The generators stay with each
//! test.
#![allow(dead_code)]

use meridian_crdt::zset::F64;
use meridian_crdt::{ZSetCrdt, ZSetOp};

#[derive(Clone, Debug)]
pub enum ZCmd {
    /// ZADD member score.
    Add(u8, f64),
    /// ZINCRBY member delta.
    Incr(u8, f64),
    /// ZREM member.
    Rem(u8),
    Del,
}

pub fn member(m: u8) -> Vec<u8> {
    vec![b'a' + m]
}

/// What the server issues for a sorted-set command.
pub enum Issued {
    Op(ZSetOp<Vec<u8>>),
    DelKey,
}

/// The write the server would issue for `cmd` on sorted set `z` (None: no write, as a
/// ZINCRBY whose result would be NaN).
pub fn issue(z: &ZSetCrdt, cmd: &ZCmd) -> Option<Issued> {
    Some(Issued::Op(match cmd {
        ZCmd::Add(m, s) => ZSetOp::Add {
            member: member(*m),
            score: F64(*s),
            observed: z.member_observed(&member(*m)),
        },
        ZCmd::Incr(m, d) => {
            let cur = z.score(&member(*m)).unwrap_or(0.0);
            if (cur + d).is_nan() {
                return None;
            }
            ZSetOp::Incr {
                member: member(*m),
                delta: F64(*d),
            }
        }
        ZCmd::Rem(m) => {
            z.score(&member(*m))?;
            if z.len() == 1 {
                return Some(Issued::DelKey);
            }
            ZSetOp::Rem {
                member: member(*m),
                observed: z.member_observed(&member(*m)),
            }
        }
        ZCmd::Del => {
            if z.is_empty() {
                return None;
            }
            return Some(Issued::DelKey);
        }
    }))
}
