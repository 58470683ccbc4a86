//! The TTL register: concurrent EXPIREs resolve to the longest TTL; PERSIST beats EXPIRE.
//!
//! Each EXPIRE/PEXPIRE/EXPIREAT/PERSIST (and a SET with EX/PX) is a write of an `Expire`;
//! a write removes the expire writes it observed. Of the concurrent writes left, any
//! `Persist` wins (no TTL); otherwise the latest deadline wins.
//!
//! The register keeps no removal context (`KeyState` does): its state join `merge` is the
//! union of the writes, and the caller removes what either side's contexts cover.

use crate::codec::{self, DecodeError, Reader, StateCodec};
use crate::dot::{Stamp, VersionVector};
use crate::mvreg::MvReg;

/// One expire write: no TTL, or a deadline in Unix milliseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Expire {
    Persist,
    AtMs(u64),
}

const EXPIRE_PERSIST: u8 = 0;
const EXPIRE_AT: u8 = 1;

impl StateCodec for Expire {
    fn put_state(&self, out: &mut Vec<u8>) {
        match self {
            Expire::Persist => codec::put_u8(out, EXPIRE_PERSIST),
            Expire::AtMs(t) => {
                codec::put_u8(out, EXPIRE_AT);
                codec::put_u64(out, *t);
            }
        }
    }

    fn read_state(r: &mut Reader<'_>) -> Result<Expire, DecodeError> {
        match r.u8()? {
            EXPIRE_PERSIST => Ok(Expire::Persist),
            EXPIRE_AT => Ok(Expire::AtMs(r.u64()?)),
            t => Err(DecodeError::BadTag(t)),
        }
    }
}

/// Concurrent expire writes, resolved as described in the module doc.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct ExpireReg(pub MvReg<Expire>);

impl ExpireReg {
    pub fn new() -> ExpireReg {
        ExpireReg(MvReg::new())
    }

    /// Removes the observed expire writes and adds this one.
    pub fn write(&mut self, stamp: Stamp, expire: Expire, observed: &VersionVector) -> bool {
        self.0.write(stamp, expire, observed)
    }

    pub fn remove(&mut self, observed: &VersionVector) -> bool {
        self.0.remove(observed)
    }

    /// The deadline in force: `None` when no write is held or any concurrent write is
    /// `Persist`; otherwise the latest `AtMs`.
    pub fn at_ms(&self) -> Option<u64> {
        let mut best: Option<u64> = None;
        for (_, e) in self.0.iter() {
            match e {
                Expire::Persist => return None,
                Expire::AtMs(t) => best = Some(best.map_or(*t, |b| b.max(*t))),
            }
        }
        best
    }

    /// True when the writes held have no effect (none, or only `Persist`).
    pub fn is_inert(&self) -> bool {
        self.0.iter().all(|(_, e)| *e == Expire::Persist)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// State join: the union of the expire writes (see `MvReg::merge`); the caller removes
    /// what either side's removal contexts cover.
    pub fn merge(&mut self, other: &ExpireReg) {
        self.0.merge(&other.0);
    }

    /// Appends the complete state (every concurrent expire write with its stamp).
    pub fn encode_state(&self, out: &mut Vec<u8>) {
        self.0.encode_state(out);
    }

    /// Decodes what `encode_state` wrote.
    pub fn decode_state(r: &mut Reader<'_>) -> Result<ExpireReg, DecodeError> {
        Ok(ExpireReg(MvReg::decode_state(r)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dot::st;

    #[test]
    fn longest_ttl_wins_and_persist_beats_expire() {
        let none = VersionVector::new();
        let mut r = ExpireReg::new();
        assert_eq!(r.at_ms(), None);
        r.write(st(5, 1), Expire::AtMs(10_000), &none);
        r.write(st(4, 2), Expire::AtMs(50_000), &none);
        assert_eq!(r.at_ms(), Some(50_000));
        r.write(st(3, 3), Expire::Persist, &none);
        assert_eq!(r.at_ms(), None);
        let mut seen = VersionVector::new();
        seen.observe(st(5, 1));
        seen.observe(st(4, 2));
        seen.observe(st(3, 3));
        r.write(st(6, 1), Expire::AtMs(7), &seen);
        assert_eq!(r.at_ms(), Some(7));
    }

    #[test]
    fn merge_is_the_union_and_state_round_trips() {
        let none = VersionVector::new();
        let mut a = ExpireReg::new();
        let mut b = ExpireReg::new();
        a.write(st(5, 1), Expire::AtMs(10_000), &none);
        b.write(st(4, 2), Expire::Persist, &none);
        b.write(st(5, 1), Expire::AtMs(10_000), &none);
        let mut ab = a.clone();
        ab.merge(&b);
        let mut ba = b.clone();
        ba.merge(&a);
        assert_eq!(ab, ba);
        assert_eq!(ab.at_ms(), None);
        let mut out = Vec::new();
        ab.encode_state(&mut out);
        let mut r = Reader::new(&out);
        assert_eq!(ExpireReg::decode_state(&mut r).unwrap(), ab);
        assert!(r.is_at_end());
        let mut swapped = Vec::new();
        codec::put_varint(&mut swapped, 2);
        codec::put_stamp(&mut swapped, st(5, 1));
        Expire::Persist.put_state(&mut swapped);
        codec::put_stamp(&mut swapped, st(4, 2));
        Expire::Persist.put_state(&mut swapped);
        assert!(ExpireReg::decode_state(&mut Reader::new(&swapped)).is_err());
    }
}
