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
                &[b"SELECT", k.db.to_string().as_bytes()],
                Sent::Select(k.db),
            );
            db = Some(k.db);
        }
        let (ttl, payload) = (k.expire_ms.unwrap_or(0).to_string(), reader.payload(&k));
        let mut args: Vec<&[u8]> = vec![b"RESTORE", &k.name, ttl.as_bytes(), &payload, b"ABSTTL"];
        if opts.replace {
            args.push(b"REPLACE");
        }
        let access = match (k.idle_s, k.freq) {
            (Some(idle), _) => Some((&b"IDLETIME"[..], idle.to_string())),
            (None, Some(freq)) => Some((&b"FREQ"[..], freq.to_string())),
            (None, None) => None,
        };
        if let Some((opt, n)) = &access {
            args.push(opt);
            args.push(n.as_bytes());
        }
        batch.push(&args, Sent::Restore(k.name.clone()));
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

/// What a command of a batch was, for its reply.
#[derive(Debug)]
enum Sent {
    Select(u64),
    /// A RESTORE of this key.
    Restore(Vec<u8>),
}

/// Commands waiting to be sent, encoded as they are pushed.
#[derive(Debug, Default)]
struct Batch {
    req: Vec<u8>,
    sent: Vec<Sent>,
}

impl Batch {
    fn push(&mut self, args: &[&[u8]], what: Sent) {
        crate::resp::put_command(&mut self.req, args);
        self.sent.push(what);
    }

    fn full(&self) -> bool {
        self.sent.len() >= IMPORT_PIPELINE_MAX || self.req.len() >= IMPORT_PIPELINE_BYTES_MAX
    }

    /// Sends the batch and reads its replies: a refused SELECT stops the import (every key
    /// after it would go to the wrong database); a refused RESTORE is counted.
    fn flush(&mut self, c: &mut Client, report: &mut ImportReport) -> Result<(), ImportError> {
        if self.sent.is_empty() {
            return Ok(());
        }
        c.send_encoded(&self.req)?;
        self.req.clear();
        for what in self.sent.drain(..) {
            let reply = c.reply()?;
            match what {
                Sent::Select(db) => expect_ok(reply, &format!("SELECT {db}"))?,
                Sent::Restore(key) => match reply {
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
            b.push(&[b"PING"], Sent::Select(0));
        }
        assert!(!b.full());
        b.push(&[b"PING"], Sent::Select(0));
        assert!(b.full());
        // One argument of n bytes is `*1\r\n$<n>\r\n` (4 + 1 + 7 + 2 bytes at this size),
        // the bytes and `\r\n`: 16 bytes besides them.
        let mut b = Batch::default();
        b.push(&[&vec![0; IMPORT_PIPELINE_BYTES_MAX - 17]], Sent::Select(0));
        assert_eq!(b.req.len(), IMPORT_PIPELINE_BYTES_MAX - 1);
        assert!(!b.full());
        b.push(&[b"x"], Sent::Select(0));
        assert!(b.full());
    }
}
