//! The systemd side of the process (`Type=notify`, deploy/systemd/meridian.service).
//!
//! READY=1 once every shard has loaded its data and every port is open; STATUS lines while
//! loading, when ready and when stopping; STOPPING=1 on SIGTERM; EXTEND_TIMEOUT_USEC while the
//! data loads and while the op log drains at stop, so the unit's finite start and stop
//! timeouts fit any data set; WATCHDOG=1 only after every shard thread answered a heartbeat,
//! so a wedged shard is seen by systemd. Without `NOTIFY_SOCKET` every call does nothing.

use std::time::Duration;

use sd_notify::NotifyState;

use crate::control::Shards;

/// How much each extension grants, and how often it is renewed while loading or stopping.
pub const EXTEND_BY: Duration = Duration::from_secs(15);
pub const EXTEND_EVERY: Duration = Duration::from_secs(5);
/// Longest a stop is extended: a log that has not drained by then will not.
pub const STOP_EXTEND_MAX: Duration = Duration::from_secs(600);

fn send(states: &[NotifyState<'_>]) {
    if let Err(e) = sd_notify::notify(states) {
        tracing::warn!(error = %e, "cannot notify systemd");
    }
}

pub fn status(text: &str) {
    send(&[NotifyState::Status(text)]);
}

pub fn ready(text: &str) {
    send(&[NotifyState::Ready, NotifyState::Status(text)]);
}

pub fn stopping() {
    send(&[NotifyState::Stopping, NotifyState::Status("Stopping")]);
}

/// Grants `EXTEND_BY` more from now to the start or stop under way.
pub fn extend(text: &str) {
    let usec = u32::try_from(EXTEND_BY.as_micros()).unwrap_or(u32::MAX);
    send(&[
        NotifyState::ExtendTimeoutUsec(usec),
        NotifyState::Status(text),
    ]);
}

/// Pings the watchdog every half period, each time only after every shard answered a
/// heartbeat within that half period; never returns. Does nothing without `WatchdogSec=`.
pub async fn watchdog(shards: Shards) {
    let Some(period) = sd_notify::watchdog_enabled() else {
        return std::future::pending().await;
    };
    let half = (period / 2).max(Duration::from_millis(10));
    loop {
        let started = tokio::time::Instant::now();
        match shards.heartbeat(half).await {
            Ok(()) => send(&[NotifyState::Watchdog]),
            Err(i) => tracing::error!(
                shard = i,
                "shard thread did not answer a heartbeat within {} ms: watchdog not pinged",
                half.as_millis()
            ),
        }
        tokio::time::sleep_until(started + half).await;
    }
}
