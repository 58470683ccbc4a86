//! The process's log: one line per event, text or JSON, every line naming the site.
//!
//! Lines go to standard output (the journal, under systemd) or to `--log-file`, which SIGHUP
//! reopens so that logrotate can move it away. Terminal colour codes are written only when
//! standard output is a terminal and `NO_COLOR` is unset: never into a file or the journal.
//! Logging is not on the command path; the file sink takes a mutex per line.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, OnceLock};

use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::FormatTime as _;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, MakeWriter};
use tracing_subscriber::registry::LookupSpan;

/// How each line is written (`log-format`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    /// `2025-01-01T00:00:00.000000Z  INFO site=a: message key=value`
    Text,
    /// `{"timestamp":"…","level":"INFO","site":"a","message":"…","key":"value"}`
    Json,
}

impl LogFormat {
    pub fn parse(s: &str) -> Option<LogFormat> {
        match s {
            "text" => Some(LogFormat::Text),
            "json" => Some(LogFormat::Json),
            _ => None,
        }
    }
}

/// What the log needs to start.
#[derive(Clone, Debug)]
pub struct LogOptions {
    /// A `RUST_LOG`-style filter, already chosen among flag, environment and file.
    pub filter: String,
    pub format: LogFormat,
    /// None: standard output.
    pub file: Option<PathBuf>,
    pub site: String,
}

/// Start-up failures of the log.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("cannot open log file {path}: {source}")]
    Open {
        path: String,
        source: std::io::Error,
    },
    #[error("log-level: '{0}' is not a log filter")]
    Filter(String),
    #[error("the log was already set up")]
    AlreadySet,
}

/// The log file, reopened by SIGHUP.
pub struct LogFile {
    path: PathBuf,
    file: Mutex<std::fs::File>,
}

impl LogFile {
    /// Opens (creates, appends to) `path`. Fails when its directory is missing or unwritable.
    pub fn open(path: &Path) -> Result<LogFile, LogError> {
        Ok(LogFile {
            path: path.to_path_buf(),
            file: Mutex::new(open_append(path)?),
        })
    }

    /// Opens the path again (logrotate moved the old file away) and writes there from now
    /// on. On failure the previous file stays in use.
    pub fn reopen(&self) -> Result<(), LogError> {
        let fresh = open_append(&self.path)?;
        *self.lock() = fresh;
        Ok(())
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn lock(&self) -> MutexGuard<'_, std::fs::File> {
        // A panic while holding it cannot leave a half-written line behind that matters more
        // than losing the log: keep going.
        self.file.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn open_append(path: &Path) -> Result<std::fs::File, LogError> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|source| LogError::Open {
            path: path.display().to_string(),
            source,
        })
}

/// One line's writer: the whole line is formatted first, then written under the lock in one
/// `write_all`, so lines from several threads never interleave.
pub struct LogFileWriter<'a>(MutexGuard<'a, std::fs::File>);

impl std::io::Write for LogFileWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

impl<'a> MakeWriter<'a> for &'static LogFile {
    type Writer = LogFileWriter<'a>;
    fn make_writer(&'a self) -> Self::Writer {
        LogFileWriter(self.lock())
    }
}

static LOG_FILE: OnceLock<LogFile> = OnceLock::new();

/// Sets up the process's log. Call once, before anything logs.
pub fn init(opts: &LogOptions) -> Result<(), LogError> {
    let filter = tracing_subscriber::EnvFilter::try_new(&opts.filter)
        .map_err(|_| LogError::Filter(opts.filter.clone()))?;
    let format = SiteFormat {
        site: opts.site.clone(),
        format: opts.format,
    };
    let res = match &opts.file {
        Some(path) => {
            let file = LogFile::open(path)?;
            let file = match LOG_FILE.set(file) {
                Ok(()) => LOG_FILE.get().ok_or(LogError::AlreadySet)?,
                Err(_) => return Err(LogError::AlreadySet),
            };
            tracing_subscriber::fmt()
                .with_ansi(false)
                .with_env_filter(filter)
                .event_format(format)
                .with_writer(file)
                .try_init()
        }
        None => {
            use std::io::IsTerminal as _;
            let ansi = std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none();
            tracing_subscriber::fmt()
                .with_ansi(ansi)
                .with_env_filter(filter)
                .event_format(format)
                .with_writer(std::io::stdout)
                .try_init()
        }
    };
    res.map_err(|_| LogError::AlreadySet)
}

/// Whether the log goes to a file (set up by `init`).
pub fn is_file() -> bool {
    LOG_FILE.get().is_some()
}

/// SIGHUP: reopens the log file. None when the log goes to standard output.
pub fn reopen() -> Option<Result<PathBuf, LogError>> {
    let f = LOG_FILE.get()?;
    Some(f.reopen().map(|()| f.path().to_path_buf()))
}

/// The line format: a timestamp, the level, the site, then the event's fields.
pub struct SiteFormat {
    pub site: String,
    pub format: LogFormat,
}

impl<S, N> FormatEvent<S, N> for SiteFormat
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> std::fmt::Result {
        let mut ts = String::new();
        tracing_subscriber::fmt::time::SystemTime.format_time(&mut Writer::new(&mut ts))?;
        let level = event.metadata().level().as_str();
        match self.format {
            LogFormat::Text => {
                write!(writer, "{ts} {level:>5} site={}: ", self.site)?;
                ctx.format_fields(writer.by_ref(), event)?;
                writeln!(writer)
            }
            LogFormat::Json => {
                let mut line = String::with_capacity(128);
                line.push_str("{\"timestamp\":");
                json_str(&mut line, &ts);
                line.push_str(",\"level\":");
                json_str(&mut line, level);
                line.push_str(",\"site\":");
                json_str(&mut line, &self.site);
                line.push_str(",\"target\":");
                json_str(&mut line, event.metadata().target());
                event.record(&mut JsonFields { line: &mut line });
                line.push('}');
                writeln!(writer, "{line}")
            }
        }
    }
}

/// Appends each field as `,"name":value`.
struct JsonFields<'a> {
    line: &'a mut String,
}

impl JsonFields<'_> {
    fn key(&mut self, field: &Field) {
        self.line.push(',');
        json_str(self.line, field.name());
        self.line.push(':');
    }
}

impl Visit for JsonFields<'_> {
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.key(field);
        if value.is_finite() {
            let _ = write!(self.line, "{value}");
        } else {
            json_str(self.line, &value.to_string());
        }
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.key(field);
        let _ = write!(self.line, "{value}");
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.key(field);
        let _ = write!(self.line, "{value}");
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.key(field);
        let _ = write!(self.line, "{value}");
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.key(field);
        json_str(self.line, value);
    }
    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.key(field);
        json_str(self.line, &value.to_string());
    }
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.key(field);
        json_str(self.line, &format!("{value:?}"));
    }
}

/// Appends `s` as a JSON string: quotes, backslash and control characters escaped.
pub fn json_str(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write as _;

    #[test]
    fn json_strings_escape_quotes_backslashes_and_control_characters() {
        let mut s = String::new();
        json_str(&mut s, "a\"b\\c\nd\u{1b}[0m\u{7f}é");
        assert_eq!(s, r#""a\"b\\c\nd\u001b[0m\u007fé""#);
    }

    #[test]
    fn formats_parse() {
        assert_eq!(LogFormat::parse("text"), Some(LogFormat::Text));
        assert_eq!(LogFormat::parse("json"), Some(LogFormat::Json));
        assert_eq!(LogFormat::parse("JSON"), None);
    }

    #[test]
    fn log_file_reopen_follows_a_rotation() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.log");
        let f = LogFile::open(&path).unwrap();
        LogFileWriter(f.lock()).write_all(b"one\n").unwrap();
        std::fs::rename(&path, dir.path().join("m.log.1")).unwrap();
        LogFileWriter(f.lock()).write_all(b"two\n").unwrap();
        f.reopen().unwrap();
        LogFileWriter(f.lock()).write_all(b"three\n").unwrap();
        let old = std::fs::read_to_string(dir.path().join("m.log.1")).unwrap();
        assert_eq!(old, "one\ntwo\n");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "three\n");
        let e = LogFile::open(&dir.path().join("missing/m.log"))
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("missing/m.log"), "{e}");
    }
}
