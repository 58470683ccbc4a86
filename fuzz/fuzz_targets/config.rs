//! A configuration file never panics the loader: any text either becomes a validated
//! `Config` (whose peer list and derived addresses can then be read) or a `ConfigError`.
//!
//! Run: `cargo +nightly fuzz run config` from the repository root.
#![no_main]

use libfuzzer_sys::fuzz_target;
use meridian_server::config::{Config, parse_save};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = parse_save(text);
    if let Ok(c) = Config::from_toml(text) {
        if c.validate().is_ok() {
            let _ = c.peers();
            let _ = c.sync_bind_ip();
            let _ = c.sync_tls_files();
        }
    }
});
