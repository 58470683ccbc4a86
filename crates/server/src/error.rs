//! Errors of the server crate and their wire texts.
//!
//! `CmdError` is what a command handler returns; `CmdError::write_text` is the only place that
//! spells Redis's error texts, so replies stay byte-identical to Redis 7.0's. Start-up errors
//! (`ConfigError`) name the offending key or flag.

use std::io::Write as _;

/// A command's failure, written to the client as a RESP error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CmdError {
    #[error("WRONGTYPE Operation against a key holding the wrong kind of value")]
    WrongType,
    #[error("ERR syntax error")]
    Syntax,
    #[error("ERR value is not an integer or out of range")]
    NotInteger,
    #[error("ERR value is not a valid float")]
    NotFloat,
    #[error("ERR increment or decrement would overflow")]
    Overflow,
    #[error("ERR increment would produce NaN or Infinity")]
    NanOrInfinity,
    #[error("ERR no such key")]
    NoSuchKey,
    #[error("ERR DB index is out of range")]
    DbIndexOutOfRange,
    #[error("ERR invalid expire time in '{0}' command")]
    InvalidExpire(String),
    #[error("ERR wrong number of arguments for '{0}' command")]
    WrongArity(String),
    #[error("ERR unknown command '{name}', with args beginning with: {args}")]
    UnknownCommand { name: String, args: String },
    #[error("ERR unknown subcommand '{sub}'. Try {cmd} HELP.")]
    UnknownSubcommand { cmd: String, sub: String },
    #[error("ERR string exceeds maximum allowed size (proto-max-bulk-len)")]
    StringTooLong,
    #[error("ERR offset is out of range")]
    OffsetOutOfRange,
    #[error("ERR value is out of range, must be positive")]
    MustBePositive,
    /// Redis Cluster's refusal of a command whose keys are not all on one node (here: one
    /// shard).
    #[error("CROSSSLOT Keys in request don't hash to the same slot")]
    CrossSlot,
    /// A long command gave up because the process is stopping (`crate::stop`); the
    /// connection closes right after.
    #[error("ERR server is shutting down")]
    ShuttingDown,
    /// A command other than QUIT while a shard loads its data (`crate::loading`).
    #[error("LOADING Redis is loading the dataset in memory")]
    Loading,
    /// A write past `maxmemory` that eviction could not make room for (Redis's
    /// `shared.oomerr`).
    #[error("OOM command not allowed when used memory > 'maxmemory'.")]
    Oom,
    #[error("ERR {0}")]
    Err(String),
    /// A complete error text with its own prefix (e.g. "NOPROTO ...", "EXECABORT ...").
    #[error("{0}")]
    Raw(String),
}

impl CmdError {
    /// Appends the wire text (without '-' and CRLF). CR and LF never appear in it.
    pub fn write_text(&self, out: &mut Vec<u8>) {
        let start = out.len();
        let _ = write!(out, "{self}");
        if let Some(tail) = out.get_mut(start..) {
            for b in tail.iter_mut() {
                if *b == b'\r' || *b == b'\n' {
                    *b = b' ';
                }
            }
        }
    }

    /// The error code: the first word of the text ("ERR", "WRONGTYPE", ...), for errorstats.
    pub fn code(&self) -> String {
        let mut v = Vec::new();
        self.write_text(&mut v);
        let end = v.iter().position(|&b| b == b' ').unwrap_or(v.len());
        String::from_utf8_lossy(v.get(..end).unwrap_or(&[])).into_owned()
    }

    /// The unknown-command error with Redis's argument preview (`processCommand`): the name cut
    /// at 128 bytes, then quoted arguments while the preview is under 128 bytes, each cut to
    /// the room left. Like C's `%s`, a NUL byte ends a name or an argument.
    pub fn unknown_command(name: &[u8], args: &[&[u8]]) -> CmdError {
        let mut shown = String::new();
        for a in args {
            if shown.len() >= 128 {
                break;
            }
            let a = c_str(a);
            let take = a.len().min(128 - shown.len());
            shown.push('\'');
            shown.push_str(&sanitize(a.get(..take).unwrap_or(a)));
            shown.push_str("' ");
        }
        let name = c_str(name);
        let name_part = name.get(..name.len().min(128)).unwrap_or(name);
        CmdError::UnknownCommand {
            name: sanitize(name_part),
            args: shown,
        }
    }
}

fn c_str(b: &[u8]) -> &[u8] {
    match b.iter().position(|&c| c == 0) {
        Some(i) => b.get(..i).unwrap_or(b),
        None => b,
    }
}

/// Redis replaces CR/LF in error texts with spaces; keep other bytes (lossy for non-UTF-8).
fn sanitize(b: &[u8]) -> String {
    String::from_utf8_lossy(b).replace(['\r', '\n'], " ")
}

/// A problem in the configuration, refused at start with the key that caused it.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("config file {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("config file {path}: {message}")]
    Parse { path: String, message: String },
    #[error("config key '{key}': {message}")]
    Invalid { key: String, message: String },
    /// CONFIG REWRITE with no file to write (Redis's text).
    #[error("The server is running without a config file")]
    NoFile,
    #[error("config file {path}: {source}")]
    Write {
        path: String,
        source: std::io::Error,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn texts_match_redis() {
        let mut v = Vec::new();
        CmdError::WrongArity("get".into()).write_text(&mut v);
        assert_eq!(v, b"ERR wrong number of arguments for 'get' command");
        let e = CmdError::unknown_command(b"FOO", &[b"a", b"b"]);
        assert_eq!(
            e.to_string(),
            "ERR unknown command 'FOO', with args beginning with: 'a' 'b' "
        );
        assert_eq!(
            CmdError::unknown_command(b"x", &[]).to_string(),
            "ERR unknown command 'x', with args beginning with: "
        );
        assert_eq!(CmdError::WrongType.code(), "WRONGTYPE");
    }
}
