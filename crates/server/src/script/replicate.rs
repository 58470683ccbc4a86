//! FUNCTION libraries across sites and restarts.
//!
//! Libraries are part of the deployment: a FUNCTION LOAD, DELETE, FLUSH or RESTORE at one
//! site reaches every site. Each change is an op record `Library { code }` (key: the library
//! name; `None` for a deletion) in the shard's op log, so it streams to peers and is written to
//! the on-disk log like any op; recovery and remote sites apply it through `apply_library`.
//!
//! The rule for concurrent changes to one library name: last writer wins by the record's
//! stamp (HLC, then replica id), deletions included; the register keeps each name's last
//! stamp even after a deletion, so an older load arriving late cannot bring a library back.
//! Which libraries are loaded is derived from the register alone (`settle`): libraries in
//! descending stamp order, each loaded unless one of its function names is already taken by
//! a newer one (then it stays in the register, shadowed, until that changes). Every site
//! holding the same register therefore loads the same libraries. docs/conflicts.md has the
//! table.

use std::collections::BTreeMap;

use meridian_crdt::Stamp;

use super::library::{self, Libraries};
use crate::shard::Shard;

/// Time a library's top-level code may run when it is loaded from the log or a peer (its
/// origin ran it under FUNCTION LOAD's 500 ms already; this only bounds a pathological one).
pub const REPLAY_LOAD_TIMEOUT_MS: u64 = 5_000;

/// One library name's last change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub stamp: Stamp,
    /// `None`: deleted.
    pub code: Option<Vec<u8>>,
}

/// Every library name ever changed, with its last change.
#[derive(Debug, Clone, Default)]
pub struct Register {
    entries: BTreeMap<Vec<u8>, Entry>,
}

impl Register {
    /// Records a change unless the name already holds a newer one; whether it took.
    pub fn offer(&mut self, name: &[u8], stamp: Stamp, code: Option<&[u8]>) -> bool {
        if let Some(e) = self.entries.get(name) {
            if e.stamp >= stamp {
                return false;
            }
        }
        self.entries.insert(
            name.to_vec(),
            Entry {
                stamp,
                code: code.map(<[u8]>::to_vec),
            },
        );
        true
    }

    pub fn iter(&self) -> impl Iterator<Item = (&Vec<u8>, &Entry)> {
        self.entries.iter()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Names whose last change is a load.
    pub fn live_names(&self) -> Vec<Vec<u8>> {
        self.entries
            .iter()
            .filter(|(_, e)| e.code.is_some())
            .map(|(n, _)| n.clone())
            .collect()
    }
}

impl Shard {
    /// Logs a local change to library `name` (loaded with `code`, or deleted) and applies it
    /// to the register; then settles the loaded set.
    pub fn log_library(&mut self, name: &[u8], code: Option<&[u8]>, now_ms: u64) {
        let hlc = self.clock.tick(now_ms);
        self.seq += 1;
        let stamp = Stamp {
            hlc,
            replica: self.replica,
        };
        self.scripting.register.offer(name, stamp, code);
        let record = self.oplog.append_library(self.seq, hlc, name, code);
        self.persist.append_op(record, Some(self.seq));
        self.sync.own_last = hlc;
        self.sync.ops_appended();
        self.settle_libraries();
    }

    /// Logs a register entry a full sync carried (the on-disk log's `Library` record).
    pub fn log_library_record(&mut self, name: &[u8], stamp: Stamp, code: Option<&[u8]>) {
        self.persist.append_library(name, stamp, code);
    }

    /// Applies a library record from the log or a peer (the same path for both). While
    /// recovering, only the register changes; the libraries load once recovery ends.
    pub fn apply_library(&mut self, name: &[u8], stamp: Stamp, code: Option<&[u8]>) {
        if self.scripting.register.offer(name, stamp, code) && !self.persist.recovering {
            self.settle_libraries();
        }
    }

    /// Derives the loaded libraries from the register (module doc), reusing the compiled
    /// libraries whose code did not change.
    pub fn settle_libraries(&mut self) {
        if self.scripting.register.live_names().is_empty() {
            self.scripting.libraries.clear();
            return;
        }
        let mut winners: Vec<(Stamp, Vec<u8>, Vec<u8>)> = self
            .scripting
            .register
            .iter()
            .filter_map(|(n, e)| e.code.as_ref().map(|c| (e.stamp, n.clone(), c.clone())))
            .collect();
        winners.sort_by_key(|w| std::cmp::Reverse(w.0));
        let current = std::mem::take(&mut self.scripting.libraries);
        let engine = match self.scripting.function_engine() {
            Ok(e) => e,
            Err(e) => {
                tracing::error!(error = %e, "cannot create the Lua state for functions");
                self.scripting.libraries = current;
                return;
            }
        };
        let mut next = Libraries::default();
        for (_, name, code) in winners {
            let name_s = String::from_utf8_lossy(&name).into_owned();
            let lib = match current.get(&name_s) {
                Some(l) if l.code == code => l.clone(),
                _ => match library::build(&engine, &code, REPLAY_LOAD_TIMEOUT_MS) {
                    Ok(l) => l,
                    Err(e) => {
                        tracing::warn!(library = %name_s, error = %e, "library not loaded");
                        continue;
                    }
                },
            };
            if lib.name != name_s {
                tracing::warn!(library = %name_s, "library code names another library; not loaded");
                continue;
            }
            if let Some(f) = next.collision(&lib) {
                tracing::warn!(library = %name_s, function = %f, "library shadowed by a newer one defining the same function");
                continue;
            }
            next.insert(lib);
        }
        self.scripting.libraries = next;
    }
}

#[cfg(test)]
mod tests {
    use meridian_crdt::{Hlc, ReplicaId};

    use super::*;

    fn stamp(h: u64, r: u32) -> Stamp {
        Stamp {
            hlc: Hlc(h),
            replica: ReplicaId(r),
        }
    }

    #[test]
    fn last_writer_wins_in_any_order() {
        let changes = [
            (stamp(5, 1), Some(b"a".as_slice())),
            (stamp(7, 2), None),
            (stamp(6, 3), Some(b"c".as_slice())),
        ];
        let orders = [[0, 1, 2], [2, 1, 0], [1, 0, 2], [1, 2, 0]];
        for order in orders {
            let mut r = Register::default();
            for i in order {
                let (s, c) = changes[i];
                r.offer(b"lib", s, c);
            }
            let e = r.iter().next().unwrap().1;
            assert_eq!(e.stamp, stamp(7, 2));
            assert_eq!(e.code, None);
        }
    }
}
