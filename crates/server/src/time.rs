//! Wall-clock time in milliseconds (the shard adds the test-only offset itself).

/// Nanoseconds since the Unix epoch: the clock of the kernel's receive timestamps
/// (`SO_TIMESTAMPNS`), which order clients' input between threads (`ClientShared::read_ns`).
pub fn wall_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// Milliseconds since the Unix epoch.
pub fn wall_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
