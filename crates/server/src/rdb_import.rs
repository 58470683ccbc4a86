//! `meridian import-rdb FILE --to HOST:PORT [--tls ...]`: moves the data of an RDB file (a `dump.rdb`
//! Redis saved, or what `redis-cli --rdb` fetched from a running Redis) into a running server
//! over RESP, the way a client would: FUNCTION RESTORE for its libraries, then per database
//! SELECT and one `RESTORE key ttl payload ABSTTL [REPLACE] [IDLETIME s | FREQ f]` per key,
//! pipelined. Against Meridian each RESTORE is a local write of the site, sent to the other
//! sites like any client's; the main port routes each key to its shard, so a site of any shard
//! count (or any Redis-compatible server, Redis itself included) takes the same file.
//!
//! The whole file is read and checked (every value as RESTORE checks it, and the checksum)
//! before the first command is sent: a damaged file sends nothing. Keys whose expire time has
//! passed are left out, as Redis leaves them out when it loads a file.

use std::time::{SystemTime, UNIX_EPOCH};

use meridian_rdb::file::{FileError, FileReader, Record};
use meridian_rdb::{Crc, Limits};

use crate::admin::{AdminError, Client, Reply, TlsOptions};

/// Commands sent before their replies are read.
pub const IMPORT_PIPELINE_MAX: usize = 1024;
/// Bytes of commands sent before their replies are read (a pipeline of large values is cut
/// here before `IMPORT_PIPELINE_MAX`).
pub const IMPORT_PIPELINE_BYTES_MAX: usize = 8 * 1024 * 1024;
/// Errors printed one by one; the rest are counted.
pub const IMPORT_ERRORS_SHOWN_MAX: usize = 10;
/// What one value may decode to while the file is checked: Redis's largest string
/// (`proto-max-bulk-len`'s default) and four of them in all, as RESTORE's default limits.
const LIMITS: Limits = Limits {
    string_bytes_max: 512 * 1024 * 1024,
    value_bytes_max: 4 * 512 * 1024 * 1024,
};

/// What `meridian import-rdb` was asked.
#[derive(Debug, Clone)]
pub struct ImportOptions {
    /// The server, `host:port`.
    pub to: String,
    /// AUTH: a password, with a user name or not.
    pub user: Option<String>,
    pub password: Option<String>,
    /// TLS to the server's `tls-port` (`redis-cli --tls`'s options).
    pub tls: Option<TlsOptions>,
    /// RESTORE ... REPLACE and FUNCTION RESTORE ... REPLACE: the file's keys and libraries
    /// replace those of the same name (without it, such a key is a BUSYKEY error, counted,
    /// and a library already there stops the import before any key is sent).
    pub replace: bool,
}

/// What an import did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ImportReport {
    pub libraries: usize,
    pub keys: u64,
    /// Keys left out: their expire time had passed.
    pub expired: u64,
    /// Keys the file holds with no element (Redis skips them too).
    pub empty: u64,
    /// RESTOREs the server refused, and the first `IMPORT_ERRORS_SHOWN_MAX` of them.
    pub failed: u64,
    pub errors: Vec<String>,
}

/// Why an import stopped.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error("{path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: not a loadable RDB file: {source}")]
    File { path: String, source: FileError },
    #[error(transparent)]
    Server(#[from] AdminError),
    #[error("{what}: {reply}")]
    Refused { what: String, reply: String },
}

/// Reads `path` and imports it as `ImportOptions` says.
pub fn import_file(
    path: &std::path::Path,
    opts: &ImportOptions,
) -> Result<ImportReport, ImportError> {
    let shown = path.display().to_string();
    let file = std::fs::read(path).map_err(|source| ImportError::Read {
        path: shown.clone(),
        source,
    })?;
    let bad = |source| ImportError::File {
        path: shown.clone(),
        source,
    };
    // First pass: every record decodes and the checksum holds.
    let mut reader = FileReader::new(&file, LIMITS, Crc::Verify).map_err(bad)?;
    let mut functions = Vec::new();
    while let Some(rec) = reader.next_record().map_err(bad)? {
        if let Record::Function(code) = rec {
            functions.push(code);
        }
    }
    let mut c = Client::connect_with(&opts.to, opts.tls.as_ref())?;
    if let Some(pass) = &opts.password {
        let mut args: Vec<&[u8]> = vec![b"AUTH"];
        if let Some(user) = &opts.user {
            args.push(user.as_bytes());
        }
        args.push(pass.as_bytes());
        c.send(&[&args])?;
        expect_ok(c.reply()?, "AUTH")?;
    }
    let mut report = ImportReport {
        libraries: functions.len(),
        ..ImportReport::default()
    };
    if !functions.is_empty() {
        let payload = crate::script::library::payload(functions.iter().map(Vec::as_slice));
        let policy: &[u8] = if opts.replace { b"REPLACE" } else { b"APPEND" };
        c.send(&[&[b"FUNCTION", b"RESTORE", &payload, policy]])?;
        expect_ok(c.reply()?, "FUNCTION RESTORE")?;
    }
    // Second pass: the keys.
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let mut reader = FileReader::new(&file, LIMITS, Crc::Verify).map_err(bad)?;
    let mut batch = Batch::default();
    let mut db = None;
    while let Some(rec) = reader.next_record().map_err(bad)? {
        let k = match rec {
            Record::Key(k) => k,
            Record::EmptyKey { .. } => {
                report.empty += 1;
                continue;
            }
            _ => continue,
        };
        if k.expire_ms.is_some_and(|at| at < now_ms) {
            report.expired += 1;
            continue;
        }
        if db != Some(k.db) {
            batch.push(
                vec![b"SELECT".to_vec(), k.db.to_string().into_bytes()],
                None,
            );
            db = Some(k.db);
        }
        let mut args = vec![
            b"RESTORE".to_vec(),
            k.name.clone(),
            k.expire_ms.unwrap_or(0).to_string().into_bytes(),
            reader.payload(&k),
            b"ABSTTL".to_vec(),
        ];
        if opts.replace {
            args.push(b"REPLACE".to_vec());
        }
        if let Some(idle) = k.idle_s {
            args.push(b"IDLETIME".to_vec());
            args.push(idle.to_string().into_bytes());
        } else if let Some(freq) = k.freq {
            args.push(b"FREQ".to_vec());
            args.push(freq.to_string().into_bytes());
        }
        batch.push(args, Some(k.name));
        if batch.full() {
            batch.flush(&mut c, &mut report)?;
        }
    }
    batch.flush(&mut c, &mut report)?;
    Ok(report)
}

fn expect_ok(reply: Reply, what: &str) -> Result<(), ImportError> {
    match reply {
        Reply::Simple(s) if s == "OK" => Ok(()),
        other => Err(ImportError::Refused {
            what: what.to_string(),
            reply: other.to_line(),
        }),
    }
}

/// A command's arguments, and the key it restores (None: a SELECT).
type Pending = (Vec<Vec<u8>>, Option<Vec<u8>>);

/// Commands waiting to be sent.
#[derive(Debug, Default)]
struct Batch {
    commands: Vec<Pending>,
    bytes: usize,
}

impl Batch {
    fn push(&mut self, args: Vec<Vec<u8>>, key: Option<Vec<u8>>) {
        self.bytes += args.iter().map(|a| a.len() + 16).sum::<usize>();
        self.commands.push((args, key));
    }

    fn full(&self) -> bool {
        self.commands.len() >= IMPORT_PIPELINE_MAX || self.bytes >= IMPORT_PIPELINE_BYTES_MAX
    }

    /// Sends the batch and reads its replies: a refused SELECT stops the import (every key
    /// after it would go to the wrong database); a refused RESTORE is counted.
    fn flush(&mut self, c: &mut Client, report: &mut ImportReport) -> Result<(), ImportError> {
        if self.commands.is_empty() {
            return Ok(());
        }
        let args: Vec<Vec<&[u8]>> = self
            .commands
            .iter()
            .map(|(a, _)| a.iter().map(Vec::as_slice).collect())
            .collect();
        let refs: Vec<&[&[u8]]> = args.iter().map(Vec::as_slice).collect();
        c.send(&refs)?;
        for (args, key) in self.commands.drain(..) {
            let reply = c.reply()?;
            match key {
                None => expect_ok(
                    reply,
                    &format!(
                        "SELECT {}",
                        String::from_utf8_lossy(args.get(1).map_or(&[][..], Vec::as_slice))
                    ),
                )?,
                Some(key) => match reply {
                    Reply::Simple(s) if s == "OK" => report.keys += 1,
                    other => {
                        report.failed += 1;
                        if report.errors.len() < IMPORT_ERRORS_SHOWN_MAX {
                            report.errors.push(format!(
                                "{}: {}",
                                String::from_utf8_lossy(&key),
                                other.to_line()
                            ));
                        }
                    }
                },
            }
        }
        self.bytes = 0;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_is_full_at_its_limits_and_not_before() {
        let mut b = Batch::default();
        for _ in 0..IMPORT_PIPELINE_MAX - 1 {
            b.push(vec![b"PING".to_vec()], None);
        }
        assert!(!b.full());
        b.push(vec![b"PING".to_vec()], None);
        assert!(b.full());
        let mut b = Batch::default();
        b.push(vec![vec![0; IMPORT_PIPELINE_BYTES_MAX - 17]], None);
        assert!(!b.full());
        b.push(vec![vec![0]], None);
        assert!(b.full());
    }
}
