//! MULTI/EXEC over keys of several shards of this process, on the main port, atomic (issue
//! 17: a transaction behaves as on one server).
//!
//! A transaction whose queued commands name keys of several shards (each command's own keys
//! on one shard) runs in segments: consecutive commands of one shard, each run as an EXEC of
//! those commands on that shard (`hop::Op::Exec`). Isolation comes from holding every shard
//! the transaction touches (its commands' and its WATCHed keys') while the segments run: one
//! coordinator thread (`tx-across`, started on first use) takes one transaction at a time,
//! asks each shard in ascending order to hold (a job that answers, then runs nothing but the
//! coordinator's batches until the coordinator lets go), checks the WATCH flag and the
//! shards' logs once all are held, runs the segments in order, then lets every shard go.
//! While a shard is held its thread runs nothing else, so no other client's command, and no
//! op from another site, runs between two segments: other clients see all of the transaction
//! or none of it.
//!
//! No deadlock: there is one coordinator; a held shard waits only for it; and the coordinator
//! waits only for shards to take their hold (each does once its inbox reaches the job) and
//! for the batches they run, none of which waits on another thread. The connection that sent
//! EXEC only awaits the outcome (its own thread may be one of those held).
//!
//! Commands that act on the connection itself (CLIENT SETNAME, RESET, ...), commands over
//! every shard (CONFIG SET, FLUSHALL, KEYS, ...), a command whose own keys span shards, and
//! keys on another node keep Redis Cluster's CROSSSLOT (`plan`).

use std::sync::mpsc;

use tokio::sync::oneshot;

use crate::hop::{Batch, Done, Msg, Thread, run_batch};
use crate::keyspace::WatchFlag;

/// A held shard's instruction: a batch to run, and where its answer goes.
type Instr = (Batch, oneshot::Sender<Done>);

/// A shard to hold: its index, its inbox, and the WATCHed keys (db, key) it owns (a watched
/// key that expired counts as changed, as in Redis 7.0).
pub type Hold = (u16, tokio::sync::mpsc::Sender<Msg>, Vec<(usize, Vec<u8>)>);

/// One transaction for the coordinator.
pub struct TxJob {
    /// The shards to hold, ascending.
    pub holds: Vec<Hold>,
    /// The segments, in order: each one EXEC batch for its shard.
    pub steps: Vec<(u16, Batch)>,
    /// The client's WATCH flag: set, the transaction does not run.
    pub dirty: WatchFlag,
    /// Whether the transaction writes: a shard whose log refuses writes (MISCONF) aborts it.
    pub writes: bool,
    pub outcome: oneshot::Sender<Outcome>,
}

/// How a transaction across shards ended.
#[derive(Debug)]
pub enum Outcome {
    /// Every segment ran: their answers, in order.
    Ran(Vec<Done>),
    /// A WATCHed key changed (or expired): nothing ran.
    Watched,
    /// A shard's log refuses writes: nothing ran; the refusal's text.
    Refused(String),
    /// A shard's thread is gone (the process is stopping): nothing ran.
    Unavailable(u16),
}

/// Hands `job` to the coordinator (started on first use). A job the coordinator cannot take
/// drops its outcome sender: the connection sees the channel closed.
pub fn submit(job: TxJob) {
    static COORDINATOR: std::sync::OnceLock<mpsc::Sender<TxJob>> = std::sync::OnceLock::new();
    let sender = COORDINATOR.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<TxJob>();
        let spawned = std::thread::Builder::new()
            .name("tx-across".to_string())
            .spawn(move || {
                while let Ok(job) = rx.recv() {
                    coordinate(job);
                }
            });
        if let Err(e) = spawned {
            tracing::error!(error = %e, "could not start the tx-across coordinator");
        }
        tx
    });
    let _ = sender.send(job);
}

/// Runs one transaction: holds, checks, segments, release (the module doc).
fn coordinate(job: TxJob) {
    let TxJob {
        holds,
        steps,
        dirty,
        writes,
        outcome,
    } = job;
    // Dropping `held` lets every held shard go.
    let mut held: Vec<(u16, mpsc::Sender<Instr>)> = Vec::with_capacity(holds.len());
    let mut refused: Option<String> = None;
    let mut expired = false;
    for (shard, inbox, watched) in holds {
        let (itx, irx) = mpsc::channel::<Instr>();
        let (ack_tx, ack_rx) = mpsc::channel::<(Option<String>, bool)>();
        let hold: crate::hop::Job = Box::new(move |t: &std::rc::Rc<Thread>| {
            let ack = {
                let s = t.shard.borrow();
                let now = s.now_ms();
                let refusal = if writes { s.persist.refusal() } else { None };
                let expired = watched.iter().any(|(db, key)| {
                    let hash = s.hash_key(key);
                    s.dbs
                        .get(*db)
                        .and_then(|d| d.get(hash, key))
                        .is_some_and(|e| e.state.expire_at_ms().is_some_and(|at| at <= now))
                });
                (refusal, expired)
            };
            if ack_tx.send(ack).is_err() {
                return;
            }
            while let Ok((batch, done)) = irx.recv() {
                run_batch(t, batch, done);
            }
        });
        if inbox.blocking_send(Msg::Job(hold)).is_err() {
            let _ = outcome.send(Outcome::Unavailable(shard));
            return;
        }
        match ack_rx.recv() {
            Ok((refusal, exp)) => {
                refused = refused.or(refusal);
                expired |= exp;
                held.push((shard, itx));
            }
            Err(_) => {
                let _ = outcome.send(Outcome::Unavailable(shard));
                return;
            }
        }
    }
    if let Some(text) = refused {
        let _ = outcome.send(Outcome::Refused(text));
        return;
    }
    if dirty.get() || expired {
        let _ = outcome.send(Outcome::Watched);
        return;
    }
    let mut dones: Vec<Done> = Vec::with_capacity(steps.len());
    let mut db: Option<usize> = None;
    for (shard, mut batch) in steps {
        let Some((_, itx)) = held.iter().find(|(s, _)| *s == shard) else {
            let _ = outcome.send(Outcome::Unavailable(shard));
            return;
        };
        // A SELECT in an earlier segment holds for the later ones.
        if let (Some(db), Some(item)) = (db, batch.items.first_mut()) {
            item.db = db;
        }
        let (dtx, drx) = oneshot::channel();
        if itx.send((batch, dtx)).is_err() {
            let _ = outcome.send(Outcome::Unavailable(shard));
            return;
        }
        match drx.blocking_recv() {
            Ok(done) => {
                db = done.notes.first().map(|n| n.db);
                dones.push(done);
            }
            Err(_) => {
                let _ = outcome.send(Outcome::Unavailable(shard));
                return;
            }
        }
    }
    drop(held);
    let _ = outcome.send(Outcome::Ran(dones));
}

/// The replies of the segments (`*n` arrays) as one EXEC reply: their elements in order.
/// None when one is not an array (a segment refused as a whole).
pub fn join_replies(parts: &[&[u8]]) -> Option<Vec<u8>> {
    let mut n = 0usize;
    let mut body = Vec::new();
    for p in parts {
        let rest = p.strip_prefix(b"*")?;
        let end = rest.windows(2).position(|w| w == b"\r\n")?;
        let count: usize = std::str::from_utf8(rest.get(..end)?).ok()?.parse().ok()?;
        n += count;
        body.extend_from_slice(rest.get(end + 2..)?);
    }
    let mut out = format!("*{n}\r\n").into_bytes();
    out.extend_from_slice(&body);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_replies_join_into_one_array() {
        let a: &[u8] = b"*2\r\n+OK\r\n:1\r\n";
        let b: &[u8] = b"*1\r\n$1\r\nx\r\n";
        assert_eq!(
            join_replies(&[a, b]).as_deref(),
            Some(&b"*3\r\n+OK\r\n:1\r\n$1\r\nx\r\n"[..])
        );
        assert_eq!(join_replies(&[a, b"-ERR no\r\n"]), None);
        assert_eq!(join_replies(&[b"*1\r\n", b"*x\r\n"]), None);
        assert_eq!(join_replies(&[]).as_deref(), Some(&b"*0\r\n"[..]));
    }
}
