//! Hash commands as the server issues them (`crates/server/src/cmd/hash.rs`), for the law
//! tests: each command becomes the `HashOp` the server would build from the hash's current
//! state, or a removal of the whole key, or nothing. The generators stay with each test.
#![allow(dead_code)]

use meridian_crdt::{Dec, Delta, HashCrdt, HashOp};

#[derive(Clone, Debug)]
pub enum HashCmd {
    HSet(u8, u8),
    HIncr(u8, i8),
    HIncrFloat(u8, i8),
    HDel(u8),
    Del,
}

pub fn field(f: u8) -> Vec<u8> {
    format!("f{f}").into_bytes()
}

/// What the server issues for a hash command.
pub enum Issued {
    Op(HashOp<Vec<u8>>),
    DelKey,
}

/// The write the server would issue for `cmd` on hash `h` (None: no write).
pub fn issue(h: &HashCrdt, cmd: &HashCmd) -> Option<Issued> {
    Some(Issued::Op(match cmd {
        HashCmd::HSet(f, v) => HashOp::Set {
            field: field(*f),
            value: format!("{v}").into_bytes(),
            observed: h.field_observed(&field(*f)),
        },
        HashCmd::HIncr(f, d) => HashOp::Incr {
            field: field(*f),
            delta: Delta::Int(i64::from(*d)),
        },
        HashCmd::HIncrFloat(f, d) => HashOp::Incr {
            field: field(*f),
            delta: Delta::Float(Dec::parse(format!("{d}.5").as_bytes())?),
        },
        HashCmd::HDel(f) => {
            if !h.contains(&field(*f)) {
                return None;
            }
            if h.len() == 1 {
                return Some(Issued::DelKey);
            }
            HashOp::Del {
                field: field(*f),
                observed: h.field_observed(&field(*f)),
            }
        }
        HashCmd::Del => {
            if h.is_empty() {
                return None;
            }
            return Some(Issued::DelKey);
        }
    }))
}
