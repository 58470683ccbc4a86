//! The process-wide stop request: set off the shard threads (by the signal task, or by
//! SHUTDOWN), polled by every shard loop whose length a client controls.
//!
//! A shard runs one command at a time, so a stop signal could otherwise wait for the longest
//! command a client can send (KEYS over a large keyspace, DEBUG SLEEP, a union of a key named
//! a million times). Those loops poll `Poll::stop` and end early with `CmdError::ShuttingDown`;
//! the shard then sees the stop at its next await, closes its clients and its log. The flag
//! is a process-wide static because a signal is process-wide.

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};

static STOP_REQUESTED: AtomicBool = AtomicBool::new(false);
/// The signal that stopped the process (`Signal as u8`; 0: none, or SHUTDOWN).
static SIGNAL: AtomicU8 = AtomicU8::new(0);
/// Shards writing their final snapshot now (`FinalSave`).
static FINAL_SAVES: AtomicUsize = AtomicUsize::new(0);

/// A shard writing the snapshot a stop asked for, counted while it lives: the process waits
/// for it past `SHUTDOWN_WAIT_MAX` (that bound is for long commands, which end at the stop;
/// a snapshot cut short would lose what `appendonly no` keeps in no log).
#[derive(Debug)]
pub struct FinalSave(());

impl FinalSave {
    pub fn begin() -> FinalSave {
        FINAL_SAVES.fetch_add(1, Ordering::Relaxed);
        FinalSave(())
    }
}

impl Drop for FinalSave {
    fn drop(&mut self) {
        FINAL_SAVES.fetch_sub(1, Ordering::Relaxed);
    }
}

/// How many shards are writing their final snapshot.
pub fn final_saves() -> usize {
    FINAL_SAVES.load(Ordering::Relaxed)
}

/// A signal that stops the process; each has its parameter (`shutdown-on-sigterm`,
/// `shutdown-on-sigint`), as in Redis.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signal {
    Term = 1,
    Int = 2,
}

impl Signal {
    /// The parameter that says how this signal stops the process.
    pub fn param(self) -> &'static str {
        match self {
            Signal::Term => "shutdown-on-sigterm",
            Signal::Int => "shutdown-on-sigint",
        }
    }
}

/// Records the signal that stops the process (before `request`).
pub fn set_signal(signal: Signal) {
    SIGNAL.store(signal as u8, Ordering::Relaxed);
}

/// The signal that stopped the process, if one did.
pub fn signal() -> Option<Signal> {
    match SIGNAL.load(Ordering::Relaxed) {
        1 => Some(Signal::Term),
        2 => Some(Signal::Int),
        _ => None,
    }
}

/// Asks every shard to stop. Safe from any thread; idempotent.
pub fn request() {
    STOP_REQUESTED.store(true, Ordering::Relaxed);
}

/// Whether a stop was requested.
pub fn requested() -> bool {
    STOP_REQUESTED.load(Ordering::Relaxed)
}

/// Iterations between two reads of the flag: a loop pays one decrement per iteration and
/// one relaxed load per `POLL_ITERATIONS`.
pub const POLL_ITERATIONS: u32 = 4096;

/// A countdown that reads the stop flag every `POLL_ITERATIONS` calls of `stop`.
#[derive(Debug)]
pub struct Poll {
    left: u32,
}

impl Default for Poll {
    fn default() -> Poll {
        Poll::new()
    }
}

impl Poll {
    pub fn new() -> Poll {
        Poll {
            left: POLL_ITERATIONS,
        }
    }

    /// Whether the loop must end now because the process is stopping.
    #[inline]
    pub fn stop(&mut self) -> bool {
        self.stop_on(&STOP_REQUESTED)
    }

    #[inline]
    fn stop_on(&mut self, flag: &AtomicBool) -> bool {
        self.left -= 1;
        if self.left > 0 {
            return false;
        }
        self.left = POLL_ITERATIONS;
        flag.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn poll_reads_the_flag_every_poll_iterations() {
        // A flag of its own: the process-wide one would stop other tests' loops.
        let flag = AtomicBool::new(false);
        let mut p = Poll::new();
        assert!(!(0..POLL_ITERATIONS * 2).any(|_| p.stop_on(&flag)));
        flag.store(true, Ordering::Relaxed);
        let calls = (1..=POLL_ITERATIONS).find(|_| p.stop_on(&flag));
        assert_eq!(calls, Some(POLL_ITERATIONS));
        assert!(!requested());
    }
}
