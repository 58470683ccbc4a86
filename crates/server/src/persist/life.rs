//! The shard's life and the boot it was last started on (docs/replication.md §9).
//!
//! The syncer streams an own op once it is `write(2)`n to the log, before any fsync: a killed
//! process loses nothing written (the page cache keeps it), but a reboot may lose the log's
//! unsynced tail while peers hold those ops. A shard that could have lost ops must never issue
//! new ones under the same replica id (its counter totals, sequence and version-vector entry
//! would fork), so such a start begins a new **life** with a new replica id. The file `life`
//! in the shard's directory holds `life N` and `boot ID`, the kernel boot id of the last start.
//!
//! A new life begins when the boot id differs from the recorded one (a reboot), and at every
//! start after or without a run that kept no log (`appendonly no` without a `save` policy:
//! what it wrote since its last snapshot may be gone), except the first start in a directory.
//! The file's `log yes|no` line says whether the start that wrote it keeps the log (a file
//! without it, from before the line existed, counts as `yes`, the old rule).

use std::io::Write as _;
use std::path::Path;

use super::PersistError;

/// Name of the file in the shard's directory.
pub const LIFE_FILE: &str = "life";
/// Where Linux exposes the id of the current boot.
const BOOT_ID_PATH: &str = "/proc/sys/kernel/random/boot_id";
/// Longest file accepted (it holds two short lines).
const LIFE_FILE_BYTES_MAX: u64 = 4096;

/// What the life file records.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LifeRecord {
    pub life: u32,
    /// The kernel boot id of the start that wrote the file (empty: unknown).
    pub boot_id: String,
    /// Whether the start that wrote the file keeps the op log (`job::log_kept`).
    pub logged: bool,
}

/// The current boot id: `debug_boot_id` when set (drills simulate reboots with it), else the
/// kernel's; empty when neither is known, which every comparison takes for a new boot.
pub fn boot_id(debug_boot_id: &str) -> String {
    if !debug_boot_id.is_empty() {
        return debug_boot_id.to_string();
    }
    std::fs::read_to_string(BOOT_ID_PATH)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// Reads the life file of `dir` (None when there is none).
pub fn read(dir: &Path) -> Result<Option<LifeRecord>, PersistError> {
    let path = dir.join(LIFE_FILE);
    let text = match std::fs::metadata(&path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(PersistError::io(&path, e)),
        Ok(m) if m.len() > LIFE_FILE_BYTES_MAX => {
            return Err(PersistError::Inconsistent(format!(
                "{}: {} bytes, not a life file",
                path.display(),
                m.len()
            )));
        }
        Ok(_) => std::fs::read_to_string(&path).map_err(|e| PersistError::io(&path, e))?,
    };
    parse(&text).map(Some).map_err(|why| {
        PersistError::Inconsistent(format!(
            "{}: {why} (expected `life N` and `boot ID` lines)",
            path.display()
        ))
    })
}

/// Parses the text of a life file (the `life_file` fuzz target drives it).
pub fn parse(text: &str) -> Result<LifeRecord, String> {
    let mut life = None;
    let mut boot_id = None;
    let mut logged = true;
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        match line.split_once(' ') {
            Some(("life", n)) => {
                life = Some(
                    n.trim()
                        .parse::<u32>()
                        .map_err(|_| format!("bad life {n:?}"))?,
                );
            }
            Some(("boot", id)) => boot_id = Some(id.trim().to_string()),
            Some(("log", "yes")) => logged = true,
            Some(("log", "no")) => logged = false,
            _ => return Err(format!("unexpected line {line:?}")),
        }
    }
    match (life, boot_id) {
        (Some(life), Some(boot_id)) => Ok(LifeRecord {
            life,
            boot_id,
            logged,
        }),
        _ => Err("a line is missing".to_string()),
    }
}

/// The text of a life file (`parse` reads it back).
pub fn format(rec: &LifeRecord) -> String {
    let log = if rec.logged { "yes" } else { "no" };
    format!("life {}\nboot {}\nlog {log}\n", rec.life, rec.boot_id)
}

/// Writes the life file of `dir` durably (temporary file, fsync, rename, directory fsync):
/// no op of a new life may be issued before its number is on disk.
pub fn write(dir: &Path, rec: &LifeRecord) -> Result<(), PersistError> {
    let tmp = dir.join(format!("{LIFE_FILE}.tmp"));
    let path = dir.join(LIFE_FILE);
    let text = format(rec);
    let io = |e| PersistError::io(&tmp, e);
    let mut f = std::fs::File::create(&tmp).map_err(io)?;
    f.write_all(text.as_bytes()).map_err(io)?;
    f.sync_all().map_err(io)?;
    drop(f);
    std::fs::rename(&tmp, &path).map_err(|e| PersistError::io(&path, e))?;
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| PersistError::io(dir, e))
}

/// Whether a start on boot `boot_id` after `prev` must begin a new life: `log_kept`, whether
/// this start keeps the log.
pub fn needs_new_life(prev: Option<&LifeRecord>, boot_id: &str, log_kept: bool) -> bool {
    match prev {
        // The first start in this directory: no op was ever issued from it.
        None => false,
        // Without the log now, this run's writes may be lost at its end; after a run
        // without it, they may have been.
        Some(p) if !log_kept || !p.logged => true,
        Some(p) => boot_id.is_empty() || p.boot_id != boot_id,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_garbage() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read(dir.path()).unwrap(), None);
        for logged in [true, false] {
            let rec = LifeRecord {
                life: 7,
                boot_id: "0b5e-11".into(),
                logged,
            };
            write(dir.path(), &rec).unwrap();
            assert_eq!(read(dir.path()).unwrap(), Some(rec));
        }
        // A file from before the `log` line: the start that wrote it counts as logged.
        std::fs::write(dir.path().join(LIFE_FILE), "life 3\nboot b\n").unwrap();
        assert!(
            read(dir.path())
                .unwrap()
                .is_some_and(|r| r.logged && r.life == 3)
        );
        assert!(!dir.path().join("life.tmp").exists());
        for bad in [
            "life x\nboot y\n",
            "life 1\n",
            "boot y\n",
            "life 1\nboot y\nz\n",
            "life 1\nboot y\nlog maybe\n",
        ] {
            std::fs::write(dir.path().join(LIFE_FILE), bad).unwrap();
            let e = read(dir.path()).unwrap_err().to_string();
            assert!(e.contains("life N"), "{bad:?}: {e}");
        }
        std::fs::write(dir.path().join(LIFE_FILE), vec![b'x'; 4097]).unwrap();
        assert!(read(dir.path()).is_err());
    }

    #[test]
    fn a_new_life_after_a_reboot_or_without_a_log_but_not_at_the_first_start() {
        let prev = LifeRecord {
            life: 0,
            boot_id: "b1".into(),
            logged: true,
        };
        assert!(!needs_new_life(None, "b1", true));
        assert!(!needs_new_life(None, "b1", false));
        assert!(!needs_new_life(Some(&prev), "b1", true));
        assert!(needs_new_life(Some(&prev), "b2", true));
        assert!(needs_new_life(Some(&prev), "", true));
        assert!(needs_new_life(Some(&prev), "b1", false));
        // After a run without the log, even a start that keeps one.
        let unlogged = LifeRecord {
            logged: false,
            ..prev.clone()
        };
        assert!(needs_new_life(Some(&unlogged), "b1", true));
        assert!(needs_new_life(Some(&unlogged), "b1", false));
    }

    #[test]
    fn the_kernel_boot_id_is_read_unless_overridden() {
        assert_eq!(boot_id("drill-3"), "drill-3");
        // On Linux the kernel's is a UUID; elsewhere it is unknown (empty).
        let k = boot_id("");
        assert!(k.is_empty() || k.len() == 36, "{k:?}");
    }
}
