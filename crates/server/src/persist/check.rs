//! `meridian check-log FILE [--fix]`: inspects a log segment or a snapshot, and repairs a
//! segment by cutting it at its first bad record (as `redis-check-aof --fix` does).

use std::path::Path;

use super::record::{self, ScanEnd, SegmentHeader};
use super::snapshot;

/// The outcome of a check: whether the file is (now) sound, and a report for people.
#[derive(Debug)]
pub struct CheckReport {
    pub ok: bool,
    pub text: String,
}

/// Checks `path`; with `fix`, truncates a damaged segment at its first bad record.
pub fn check_file(path: &Path, fix: bool) -> CheckReport {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) => {
            return CheckReport {
                ok: false,
                text: format!("{}: cannot read: {e}", path.display()),
            };
        }
    };
    if bytes.starts_with(snapshot::SNAPSHOT_MAGIC) {
        return check_snapshot(path, fix);
    }
    if !bytes.starts_with(record::SEGMENT_MAGIC) {
        return CheckReport {
            ok: false,
            text: format!(
                "{}: neither a Meridian log segment nor a snapshot (unknown magic)",
                path.display()
            ),
        };
    }
    let header = match SegmentHeader::decode(&bytes) {
        Ok(h) => h,
        Err(reason) => {
            return CheckReport {
                ok: false,
                text: format!("{}: offset 0: {reason}", path.display()),
            };
        }
    };
    let body = bytes
        .get(record::SEGMENT_HEADER_BYTES..)
        .unwrap_or_default();
    // Indexed by `Kind`'s number (the largest is `Kind::RetiredIn`).
    let mut kinds = [0u64; record::Kind::RetiredIn as usize + 1];
    let (end, n) = match record::scan::<()>(body, |f| {
        if let Some(k) = kinds.get_mut(f.kind as usize) {
            *k += 1;
        }
        Ok(())
    }) {
        Ok(r) => r,
        Err(()) => (ScanEnd::Clean, 0),
    };
    let mut text = format!(
        "{}: log segment of replica {}, first position {}, {} bytes\n{n} valid records (ops {}, states {}, positions {}, incarnations {}, clock leases {}, delivered {}, libraries {}, evicted {}, retired entries {})\n",
        path.display(),
        header.replica.0,
        header.first_pos,
        bytes.len(),
        kinds[1],
        kinds[2] + kinds[8],
        kinds[3],
        kinds[4],
        kinds[5],
        kinds[6],
        kinds[7],
        kinds[9],
        kinds[10],
    );
    let (offset, reason, what) = match end {
        ScanEnd::Clean => {
            text.push_str("OK: every record is valid\n");
            return CheckReport { ok: true, text };
        }
        ScanEnd::Torn { offset, reason } => {
            (offset, reason, "torn tail (recovery cuts it by itself)")
        }
        ScanEnd::Corrupt { offset, reason } => (
            offset,
            reason,
            "corruption followed by valid records (recovery refuses to start)",
        ),
    };
    let at = (offset + record::SEGMENT_HEADER_BYTES) as u64;
    let dropped = bytes.len() as u64 - at;
    text.push_str(&format!("bad record at offset {at}: {reason}: {what}\n"));
    if !fix {
        text.push_str(&format!(
            "run with --fix to truncate the file at offset {at} ({dropped} bytes dropped)\n"
        ));
        return CheckReport { ok: false, text };
    }
    let cut = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .and_then(|f| f.set_len(at).and_then(|()| f.sync_all()));
    match cut {
        Ok(()) => {
            text.push_str(&format!(
                "fixed: truncated at offset {at}, {dropped} bytes dropped, {n} records kept\n"
            ));
            CheckReport { ok: true, text }
        }
        Err(e) => {
            text.push_str(&format!("cannot truncate: {e}\n"));
            CheckReport { ok: false, text }
        }
    }
}

fn check_snapshot(path: &Path, fix: bool) -> CheckReport {
    let mut keys = 0u64;
    match snapshot::read(path, usize::from(u16::MAX) + 1, |_, _, _| {
        keys += 1;
        Ok(())
    }) {
        Ok(meta) => CheckReport {
            ok: true,
            text: format!(
                "{}: snapshot of replica {} at log position {}, {keys} keys, last seq {}\nOK: every block is valid\n",
                path.display(),
                meta.replica.0,
                meta.pos,
                meta.seq
            ),
        },
        Err(reason) => CheckReport {
            ok: false,
            text: format!(
                "{}: damaged snapshot: {reason}\n{}",
                path.display(),
                if fix {
                    "a snapshot cannot be repaired: remove it, and recovery uses the previous snapshot and the log (or resync the site from its peers)\n"
                } else {
                    "recovery passes over it for an older snapshot when the log reaches back to one\n"
                }
            ),
        },
    }
}
