//! Freeing values off the shard thread (FLUSHALL ASYNC, FLUSHDB ASYNC, UNLINK), as Redis's lazyfree
//! does: the shard writes each removal synchronously and hands the values it took out of the
//! keys (`KeyState::take_collections`) to one background thread per shard, which drops them.
//! The hand-off is a bounded queue of batches; when it is full the shard frees the batch
//! itself, as a SYNC flush would.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, SyncSender, TrySendError};

use meridian_crdt::Value;

/// Freeing cost (`KeyState::free_effort`: elements) above which UNLINK hands a value to the
/// thread; freeing less costs less than the hand-off. Redis's `LAZYFREE_THRESHOLD`.
pub const LAZYFREE_EFFORT_MIN: usize = 64;

/// Batches of values queued for the background thread before the shard frees one itself.
pub const LAZYFREE_BATCHES_MAX: usize = 16;

/// The shard's side of its freeing thread (started on first use).
#[derive(Debug, Default)]
pub struct LazyFree {
    tx: Option<SyncSender<Vec<Value>>>,
    /// Values handed to the thread and not freed yet (INFO `lazyfree_pending_objects`).
    pending: Arc<AtomicU64>,
    /// Values the thread freed (INFO `lazyfreed_objects`).
    freed: Arc<AtomicU64>,
}

impl LazyFree {
    /// Hands `values` to the background thread; frees them here when its queue holds
    /// `LAZYFREE_BATCHES_MAX` batches or the thread cannot start. Returns whether they went.
    pub fn free(&mut self, values: Vec<Value>) -> bool {
        if values.is_empty() {
            return true;
        }
        let n = values.len() as u64;
        let pending = self.pending.clone();
        let Some(tx) = self.sender() else {
            return false;
        };
        pending.fetch_add(n, Ordering::Relaxed);
        match tx.try_send(values) {
            Ok(()) => true,
            Err(TrySendError::Full(values) | TrySendError::Disconnected(values)) => {
                pending.fetch_sub(n, Ordering::Relaxed);
                drop(values);
                false
            }
        }
    }

    fn sender(&mut self) -> Option<&SyncSender<Vec<Value>>> {
        if self.tx.is_none() {
            let (tx, rx) = mpsc::sync_channel::<Vec<Value>>(LAZYFREE_BATCHES_MAX);
            let (pending, freed) = (self.pending.clone(), self.freed.clone());
            std::thread::Builder::new()
                .name("lazyfree".to_string())
                .spawn(move || {
                    // Ends when the shard (the sender) goes.
                    while let Ok(batch) = rx.recv() {
                        let n = batch.len() as u64;
                        drop(batch);
                        pending.fetch_sub(n, Ordering::Relaxed);
                        freed.fetch_add(n, Ordering::Relaxed);
                    }
                })
                .ok()?;
            self.tx = Some(tx);
        }
        self.tx.as_ref()
    }

    pub fn pending(&self) -> u64 {
        self.pending.load(Ordering::Relaxed)
    }

    pub fn freed(&self) -> u64 {
        self.freed.load(Ordering::Relaxed)
    }

    /// CONFIG RESETSTAT: the count of freed values starts again (Redis's
    /// `lazyfreeResetStats`); the pending count is the queue's, not a statistic.
    pub fn reset_stats(&self) {
        self.freed.store(0, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use meridian_crdt::OrSet;

    #[test]
    fn the_queue_holds_its_limit_and_the_shard_frees_one_past_it() {
        // A thread that does not drain yet: the test holds the receiving end.
        let (tx, rx) = mpsc::sync_channel::<Vec<Value>>(LAZYFREE_BATCHES_MAX);
        let mut lf = LazyFree {
            tx: Some(tx),
            ..LazyFree::default()
        };
        let batch = || vec![Value::Set(OrSet::new()), Value::Set(OrSet::new())];
        for _ in 0..LAZYFREE_BATCHES_MAX {
            assert!(lf.free(batch()));
        }
        assert_eq!(lf.pending(), 2 * LAZYFREE_BATCHES_MAX as u64);
        assert!(
            !lf.free(batch()),
            "one past the limit is freed by the shard"
        );
        assert_eq!(lf.pending(), 2 * LAZYFREE_BATCHES_MAX as u64);
        assert!(lf.free(Vec::new()));
        assert_eq!(rx.try_iter().count(), LAZYFREE_BATCHES_MAX);
    }

    #[test]
    fn the_thread_frees_what_it_is_handed() {
        let mut lf = LazyFree::default();
        for _ in 0..3 {
            assert!(lf.free(vec![Value::Set(OrSet::new())]));
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while lf.freed() < 3 && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert_eq!((lf.freed(), lf.pending()), (3, 0));
    }
}
