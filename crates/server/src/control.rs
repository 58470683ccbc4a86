//! Requests from the control thread to the shard threads: heartbeats for the systemd
//! watchdog, and whatever the control thread reports or changes that a shard owns.
//!
//! Each shard runs one task (`serve`) that answers them between commands, on its own thread,
//! so the command path never sees them: no lock, no atomic, no channel on it. A shard that
//! does not answer within the caller's deadline is reported as silent.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use crate::metrics::ShardFigures;
use crate::shard::Shard;

/// Requests queued per shard; beyond, a request is refused at once (the shard is behind).
pub const REQUESTS_QUEUED_MAX: usize = 64;

/// What the control thread asks a shard.
#[derive(Debug)]
pub enum ShardRequest {
    /// Answered as soon as the shard's thread polls its tasks: proof that it is not wedged.
    Heartbeat(oneshot::Sender<()>),
    /// A copy of the shard's counters for `/metrics` and `/health`.
    Figures(oneshot::Sender<Box<ShardFigures>>),
}

/// The control thread's handle on every shard.
#[derive(Clone, Debug)]
pub struct Shards {
    senders: Vec<mpsc::Sender<ShardRequest>>,
}

/// One handle and one receiver per shard.
pub fn channels(n_shards: usize) -> (Shards, Vec<mpsc::Receiver<ShardRequest>>) {
    let (senders, receivers) = (0..n_shards)
        .map(|_| mpsc::channel(REQUESTS_QUEUED_MAX))
        .unzip();
    (Shards { senders }, receivers)
}

impl Shards {
    pub fn len(&self) -> usize {
        self.senders.len()
    }

    pub fn is_empty(&self) -> bool {
        self.senders.is_empty()
    }

    /// Asks every shard for a heartbeat; returns the index of the first one that did not
    /// answer within `timeout`.
    pub async fn heartbeat(&self, timeout: Duration) -> Result<(), usize> {
        let mut waits = Vec::with_capacity(self.senders.len());
        for (i, tx) in self.senders.iter().enumerate() {
            let (reply, answer) = oneshot::channel();
            if tx.try_send(ShardRequest::Heartbeat(reply)).is_err() {
                return Err(i);
            }
            waits.push(answer);
        }
        let deadline = tokio::time::Instant::now() + timeout;
        for (i, answer) in waits.into_iter().enumerate() {
            match tokio::time::timeout_at(deadline, answer).await {
                Ok(Ok(())) => {}
                _ => return Err(i),
            }
        }
        Ok(())
    }
}

impl Shards {
    /// Every shard's figures, in shard order; None for a shard that did not answer within
    /// `timeout`.
    pub async fn figures(&self, timeout: Duration) -> Vec<Option<ShardFigures>> {
        let mut waits = Vec::with_capacity(self.senders.len());
        for tx in &self.senders {
            let (reply, answer) = oneshot::channel();
            let sent = tx.try_send(ShardRequest::Figures(reply)).is_ok();
            waits.push(sent.then_some(answer));
        }
        let deadline = tokio::time::Instant::now() + timeout;
        let mut out = Vec::with_capacity(waits.len());
        for w in waits {
            out.push(match w {
                Some(answer) => match tokio::time::timeout_at(deadline, answer).await {
                    Ok(Ok(f)) => Some(*f),
                    _ => None,
                },
                None => None,
            });
        }
        out
    }
}

/// The shard's side: answers requests until the control thread goes away or the shard stops.
pub async fn serve(shard: Rc<RefCell<Shard>>, mut requests: mpsc::Receiver<ShardRequest>) {
    while let Some(req) = requests.recv().await {
        if shard.borrow().shutting_down {
            return;
        }
        match req {
            ShardRequest::Heartbeat(reply) => {
                let _ = reply.send(());
            }
            ShardRequest::Figures(reply) => {
                let figures = Box::new(shard.borrow().figures());
                let _ = reply.send(figures);
            }
        }
    }
}
