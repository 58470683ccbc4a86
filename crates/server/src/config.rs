//! Configuration: embedded defaults, then an optional TOML file, then command-line flags.
//!
//! Every flag has a TOML key of the same name (`--proto-max-bulk-len` ↔ `proto-max-bulk-len`).
//! Unknown keys and bad values are refused at start with a message naming the key.

use std::path::PathBuf;

use serde::Deserialize;

use crate::error::ConfigError;

/// Settings of one server process. `Default` is the embedded default configuration.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct Config {
    /// Address the client port listens on.
    pub bind: String,
    pub port: u16,
    /// Data directory (persistence lands here).
    pub dir: PathBuf,
    /// Number of logical databases (SELECT 0..databases-1).
    pub databases: u32,
    /// This site's id; replica ids derive from it and the shard index.
    pub site: String,
    /// Largest bulk string accepted in a request, in bytes (Redis `proto-max-bulk-len`).
    pub proto_max_bulk_len: u64,
    /// Largest unparsed input buffered per client, in bytes (Redis `client-query-buffer-limit`).
    pub client_query_buffer_limit: u64,
    /// Most clients connected at once.
    pub maxclients: u32,
    /// Close a client idle for this many seconds (0: never).
    pub timeout: u64,
    /// Active expiry cycles per second, as Redis's `hz`.
    pub hz: u32,
    /// Slow log threshold in microseconds (negative: off).
    pub slowlog_log_slower_than: i64,
    pub slowlog_max_len: u64,
    /// Latency monitor threshold in milliseconds (0: off).
    pub latency_monitor_threshold: u64,
    /// Bytes of recent ops each shard keeps in memory for peers that reconnect (16 MiB: the
    /// reference product clamps its CRDT backlog to 1 MB–250 MB per shard). A site with no
    /// peers keeps only the op log chunk being written.
    pub backlog_bytes_max: u64,
    /// Logging filter, as `RUST_LOG` (e.g. "info", "meridian=debug").
    pub log_level: String,
    /// Test-only: offset added to the wall clock, in milliseconds.
    pub debug_clock_offset_ms: i64,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            bind: "127.0.0.1".to_string(),
            port: 6379,
            dir: PathBuf::from("./meridian-data"),
            databases: 16,
            site: "local".to_string(),
            proto_max_bulk_len: 512 * 1024 * 1024,
            client_query_buffer_limit: 1024 * 1024 * 1024,
            maxclients: 10_000,
            timeout: 0,
            hz: 10,
            slowlog_log_slower_than: 10_000,
            slowlog_max_len: 128,
            latency_monitor_threshold: 0,
            backlog_bytes_max: 16 * 1024 * 1024,
            log_level: "info".to_string(),
            debug_clock_offset_ms: 0,
        }
    }
}

/// Upper bound on `databases`, so a typo cannot allocate millions of tables.
pub const DATABASES_MAX: u32 = 1024;

impl Config {
    /// Reads a TOML file over the defaults.
    pub fn from_file(path: &std::path::Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::from_toml(&text).map_err(|e| match e {
            ConfigError::Parse { message, .. } => ConfigError::Parse {
                path: path.display().to_string(),
                message,
            },
            other => other,
        })
    }

    pub fn from_toml(text: &str) -> Result<Config, ConfigError> {
        let cfg: Config = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: String::new(),
            message: e.to_string(),
        })?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Checks every value; the error names the key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |key: &str, message: String| {
            Err(ConfigError::Invalid {
                key: key.to_string(),
                message,
            })
        };
        if self.bind.parse::<std::net::IpAddr>().is_err() {
            return bad("bind", format!("'{}' is not an IP address", self.bind));
        }
        if self.databases == 0 || self.databases > DATABASES_MAX {
            return bad(
                "databases",
                format!(
                    "must be between 1 and {DATABASES_MAX}, got {}",
                    self.databases
                ),
            );
        }
        if self.site.is_empty()
            || self.site.len() > 32
            || !self
                .site
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return bad(
                "site",
                format!("'{}' must be 1-32 characters of [A-Za-z0-9_-]", self.site),
            );
        }
        if self.proto_max_bulk_len < 1024 * 1024 {
            return bad(
                "proto-max-bulk-len",
                format!("must be at least 1048576, got {}", self.proto_max_bulk_len),
            );
        }
        if self.client_query_buffer_limit < 1024 * 1024 {
            return bad(
                "client-query-buffer-limit",
                format!(
                    "must be at least 1048576, got {}",
                    self.client_query_buffer_limit
                ),
            );
        }
        if self.maxclients == 0 {
            return bad("maxclients", "must be at least 1".to_string());
        }
        if !(1..=500).contains(&self.hz) {
            return bad("hz", format!("must be between 1 and 500, got {}", self.hz));
        }
        if self
            .log_level
            .parse::<tracing_subscriber::EnvFilter>()
            .is_err()
        {
            return bad(
                "log-level",
                format!("'{}' is not a log filter", self.log_level),
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_file_is_the_default() {
        assert_eq!(Config::from_toml("").unwrap(), Config::default());
    }

    #[test]
    fn unknown_keys_and_bad_values_name_the_key() {
        let e = Config::from_toml("bogus-key = 1").unwrap_err().to_string();
        assert!(e.contains("bogus-key"), "{e}");
        let e = Config::from_toml("port = 70000").unwrap_err().to_string();
        assert!(e.contains("port"), "{e}");
        let e = Config::from_toml("databases = 0").unwrap_err().to_string();
        assert!(e.contains("databases"), "{e}");
        let e = Config::from_toml("bind = \"nope\"")
            .unwrap_err()
            .to_string();
        assert!(e.contains("bind"), "{e}");
    }

    #[test]
    fn example_file_is_the_embedded_default() {
        let text = include_str!("../../../deploy/meridian.example.toml");
        assert_eq!(Config::from_toml(text).unwrap(), Config::default());
    }

    #[test]
    fn file_values_apply() {
        let c = Config::from_toml("port = 7001\ndatabases = 4\nsite = \"a\"").unwrap();
        assert_eq!((c.port, c.databases, c.site.as_str()), (7001, 4, "a"));
    }
}
