//! MULTI/EXEC, and scripts, over keys of several shards of this process, on the main port,
//! atomic (issue 17: a transaction or a script behaves as on one server).
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
//! A script (EVAL, FCALL and their variants) whose declared keys are on several shards is one
//! segment, on its first key's shard, with every shard of its keys held the same way. While
//! it runs, that thread may reach the other held shards (`reaches`, `call_held`): a
//! `redis.call` whose keys are all on one of them runs there as that shard's script client
//! (`hop::Op::ScriptCall`), the script's thread waiting for the reply; an MGET, MSET, DEL,
//! UNLINK, EXISTS or TOUCH over keys of several of them runs a part on each
//! (`script::engine`'s `scattered`), merged by `route::gather`; LMOVE, RPOPLPUSH, the
//! `read_across` commands and SORT ... STORE over keys of several of them run in steps
//! (`held_across`), and so do they when queued in a transaction. The log records and
//! the write positions those calls leave come back with the outcome (`Outcome::Ran`), so the
//! reply waits for every shard's log under `appendfsync always`.
//!
//! No deadlock: there is one coordinator; a held shard waits only for it (or for the script
//! running on another held shard, which waits only for held shards); and the coordinator
//! waits only for shards to take their hold (each does once its inbox reaches the job) and
//! for the batches they run, none of which waits on a thread that is not held. The
//! connection that sent EXEC only awaits the outcome (its own thread may be one of those
//! held). A held thread's clients are answered BUSY from the side path while a script of
//! the process runs past `busy-reply-threshold` (so SCRIPT KILL reaches it from any thread).
//!
//! A transaction's scripts reach the held shards too, so a queued script whose keys span
//! shards runs in the segment of its first key's shard, its keys' shards held with the
//! transaction's.
//!
//! A queued MGET, MSET, DEL, UNLINK, EXISTS or TOUCH whose keys span shards is split into a
//! part per shard (`route::split_scatter`), so is an XREAD or XREADGROUP
//! (`route::split_streams`), and a command every shard answers for itself
//! (DBSIZE, KEYS, FLUSHALL, CONFIG SET, INFO...) into a part on every shard, as are RANDOMKEY
//! (with each shard's DBSIZE) and SCAN (from the shard its cursor names on), each part in the
//! segment of its shard with every one of those shards held; `join_replies` makes each
//! command's one reply of its parts, as outside a transaction (`Join`). Commands that act on
//! the connection itself (CLIENT TRACKING, RESET, ...; but those that only read or set the
//! connection's own state, `runs_after_segments`, run on the connection after the
//! segments), any other command whose own keys span
//! shards, and keys on another node keep Redis Cluster's CROSSSLOT
//! (`Conn::exec_across_plan`).

use std::sync::mpsc;

use tokio::sync::oneshot;

use crate::hop::{Batch, Done, Msg, Thread, run_batch};
use crate::keyspace::WatchFlag;
use crate::persist::AfterBatch;
use crate::resp::read;
use crate::resp::reply::{Proto, Reply};
use crate::route::{self, Merge, Scatter};

/// How long a held shard waits for its next instruction before it looks whether a script of
/// the process runs past `busy-reply-threshold` (then it answers its own clients BUSY, or
/// takes their SCRIPT KILL, from the side path).
const HELD_POLL: std::time::Duration = std::time::Duration::from_millis(20);

/// A held shard's instruction: a batch to run, where its answer goes, and the other held
/// shards its scripts may reach (a segment's; none for a script's call there).
struct Instr {
    batch: Batch,
    /// A plain channel: a script's thread waits on it inside its runtime, where a tokio
    /// oneshot's blocking receive panics.
    done: mpsc::Sender<Done>,
    reach: Option<Reach>,
}

/// What a script's segment may reach while it runs: the other held shards, and where the
/// log positions and writes of the calls it makes there go.
struct Reach {
    peers: Vec<(u16, mpsc::Sender<Instr>)>,
    side: mpsc::Sender<Side>,
}

/// What a call on another held shard left besides its reply: when the script's reply may
/// go (that shard's log) and the sequence number of the last op it originated there.
#[derive(Debug)]
pub struct Side {
    pub shard: u16,
    pub after: AfterBatch,
    pub wrote: Option<u64>,
}

thread_local! {
    /// The held shards this thread's running segment may reach (`Instr::reach`), set for the
    /// length of one instruction.
    static REACH: std::cell::RefCell<Option<Reach>> = const { std::cell::RefCell::new(None) };
}

/// Whether the segment running on this thread may run commands on `shard` (it is held for
/// the same script).
pub fn reaches(shard: u16) -> bool {
    REACH.with(|r| {
        r.borrow()
            .as_ref()
            .is_some_and(|r| r.peers.iter().any(|(t, _)| *t == shard))
    })
}

/// Runs `batch` on held shard `shard` for the segment running on this thread and waits for
/// its replies (this thread runs nothing else meanwhile: it is held too). `None` when
/// `shard` is not held for it, or its thread is gone.
pub fn call_held(shard: u16, batch: Batch) -> Option<Done> {
    let (peer, side) = REACH.with(|r| {
        let r = r.borrow();
        let r = r.as_ref()?;
        let (_, peer) = r.peers.iter().find(|(t, _)| *t == shard)?;
        Some((peer.clone(), r.side.clone()))
    })?;
    let (done, rx) = mpsc::channel();
    peer.send(Instr {
        batch,
        done,
        reach: None,
    })
    .ok()?;
    let mut d = rx.recv().ok()?;
    let _ = side.send(Side {
        shard,
        after: std::mem::replace(&mut d.after, AfterBatch::Reply),
        wrote: d.wrote.take(),
    });
    Some(d)
}

/// A shard to hold: its index, its inbox, and the WATCHed keys (db, key) it owns (a watched
/// key that expired counts as changed, as in Redis 7.0).
pub type Hold = (u16, tokio::sync::mpsc::Sender<Msg>, Vec<(usize, Vec<u8>)>);

/// One transaction (or script) for the coordinator.
pub struct TxJob {
    /// The shards to hold, ascending.
    pub holds: Vec<Hold>,
    /// The segments, in order: each one EXEC batch for its shard (a script: its one call).
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
    /// Every segment ran: their answers, in order, and what a script's calls on other held
    /// shards left.
    Ran(Vec<Done>, Vec<Side>),
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
        let watcher = dirty.clone();
        let hold: crate::hop::Job = Box::new(move |t: &std::rc::Rc<Thread>| {
            let ack = {
                let s = t.shard.borrow();
                let now = s.now_ms();
                let refusal = if writes { s.persist.refusal() } else { None };
                let expired = watched
                    .iter()
                    .any(|(db, key)| s.watched_key_expired(*db, key, &watcher, now));
                (refusal, expired)
            };
            if ack_tx.send(ack).is_err() {
                return;
            }
            hold_shard(t, &irx);
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
    let (side_tx, side_rx) = mpsc::channel::<Side>();
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
        // A script in the segment may run its calls on the other held shards.
        let reach = Some(Reach {
            peers: held
                .iter()
                .filter(|(s, _)| *s != shard)
                .map(|(s, tx)| (*s, tx.clone()))
                .collect(),
            side: side_tx.clone(),
        });
        let (dtx, drx) = mpsc::channel();
        let instr = Instr {
            batch,
            done: dtx,
            reach,
        };
        if itx.send(instr).is_err() {
            let _ = outcome.send(Outcome::Unavailable(shard));
            return;
        }
        match drx.recv() {
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
    drop(side_tx);
    let sides: Vec<Side> = side_rx.try_iter().collect();
    let _ = outcome.send(Outcome::Ran(dones, sides));
}

/// A held shard's thread: runs the coordinator's instructions (and a held script's calls)
/// until the coordinator lets go; while it waits and a script of the process runs past
/// `busy-reply-threshold`, it answers its own clients from the side path, as the script's
/// thread does, so that SCRIPT KILL reaches the script from every thread.
fn hold_shard(t: &std::rc::Rc<Thread>, irx: &mpsc::Receiver<Instr>) {
    loop {
        match irx.recv_timeout(HELD_POLL) {
            Ok(Instr { batch, done, reach }) => {
                REACH.with(|r| *r.borrow_mut() = reach);
                // `run_batch` answers before it returns.
                let (tx, mut rx) = oneshot::channel();
                run_batch(t, batch, tx);
                REACH.with(|r| r.borrow_mut().take());
                if let Ok(d) = rx.try_recv() {
                    let _ = done.send(d);
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if t.node.busy.any() {
                    crate::script::busy::serve_waiting_clients(&mut t.shard.borrow_mut());
                }
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                let mut s = t.shard.borrow_mut();
                crate::script::busy::hand_over_early_connections(&mut s);
                // Clients a script's (or a list move's) writes here made ready are served
                // now, as after a command of this shard's own (Redis serves them after the
                // script).
                if s.blocking.has_ready() {
                    let now = s.now_ms();
                    crate::blocking::serve_ready(&mut s, &mut t.front.borrow_mut(), now);
                }
                return;
            }
        }
    }
}

/// How the parts of one queued command of a transaction across shards make its reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Join {
    /// It runs whole, on one shard: its one part's reply.
    One,
    /// It acts on the connection alone (CLIENT SETNAME...): it runs on the connection's
    /// thread once the segments ran (`runs_after_segments`); its reply is given apart.
    Connection,
    /// MGET, MSET, DEL, UNLINK, EXISTS, TOUCH over keys of several shards: a part per shard
    /// (`route::split_scatter`), gathered by `route::gather`.
    Gather {
        kind: Scatter,
        order: Vec<(usize, usize)>,
    },
    /// A command every shard answers for itself (DBSIZE, KEYS, FLUSHALL, CONFIG SET...): a
    /// part on every shard, merged by `route::merge`.
    Merge(Merge),
    /// XREAD or XREADGROUP over streams of several shards: a part per shard
    /// (`route::split_streams`, whose order this is), merged by `route::merge_streams`.
    Streams { order: Vec<(usize, Vec<u8>)> },
    /// RANDOMKEY: on every shard, DBSIZE then RANDOMKEY; a key of a shard chosen in
    /// proportion to its keys (as outside a transaction).
    RandomKey,
    /// SCAN: a step on the shard its cursor names and on each shard after it (`steps`: the
    /// shard and its own cursor; none past the last shard), joined as a SCAN outside a
    /// transaction walks them: on to the next shard while fewer than `count` keys were
    /// found, the cursor given back naming where to go on (`route::scan_next`).
    Scan {
        steps: Vec<(u16, u64)>,
        shards: u16,
        count: u64,
    },
}

/// The EXEC reply of a transaction across shards from its segments' replies (`*n` arrays of
/// their parts' replies, in order): `owners[k]` is the queued command of the k-th part over
/// all segments, and each command's parts make its reply by `joins[command]`; `apart`: the
/// replies of the commands that ran on the connection (`Join::Connection`), by command.
/// None when a segment's reply is not an array or the parts do not add up (a segment
/// refused as a whole).
pub fn join_replies(
    replies: &[&[u8]],
    owners: &[usize],
    joins: &[Join],
    apart: &[(usize, Vec<u8>)],
    proto: Proto,
) -> Option<Vec<u8>> {
    let mut of_command: Vec<Vec<&[u8]>> = vec![Vec::new(); joins.len()];
    for (i, r) in apart {
        of_command.get_mut(*i)?.push(r);
    }
    let mut owner = owners.iter();
    for r in replies {
        if r.first() != Some(&b'*') {
            return None;
        }
        let (els, _) = read::elements(r, 0)?;
        for (a, b) in els {
            of_command.get_mut(*owner.next()?)?.push(r.get(a..b)?);
        }
    }
    if owner.next().is_some() {
        return None;
    }
    let mut out = Reply::new();
    out.proto = proto;
    out.array(joins.len());
    for (join, parts) in joins.iter().zip(&of_command) {
        join_one(join, parts, &mut out)?;
    }
    Some(out.buf)
}

/// One command's reply from its parts' replies, by `join`. None when the parts do not fit it.
pub fn join_one(join: &Join, parts: &[&[u8]], out: &mut Reply) -> Option<()> {
    match join {
        Join::One | Join::Connection => out.raw(parts.first()?),
        Join::Gather { kind, order } => route::gather(*kind, order, parts, out),
        Join::Merge(m) => route::merge(*m, parts, out),
        Join::Streams { order } => {
            let order: Vec<(usize, &[u8])> =
                order.iter().map(|(p, k)| (*p, k.as_slice())).collect();
            route::merge_streams(parts, &order, out);
        }
        Join::RandomKey => random_key(parts, out),
        Join::Scan {
            steps,
            shards,
            count,
        } => scan(steps, *shards, *count, parts, out)?,
    }
    Some(())
}

/// Commands that act on the connection alone and that a transaction across shards runs on
/// the connection's thread after its segments (`Join::Connection`): they read or set only
/// the connection's own state, which no queued command reads or changes, so running them
/// after the others answers what running them in place would. Other commands that act on
/// the connection (CLIENT TRACKING, CLIENT REPLY, HELLO, AUTH, RESET...) change how the
/// commands after them run or reply: such a transaction keeps Redis Cluster's CROSSSLOT.
pub fn runs_after_segments(name: &str) -> bool {
    matches!(
        name,
        "client|setname"
            | "client|getname"
            | "client|id"
            | "client|info"
            | "client|getredir"
            | "client|trackinginfo"
            | "client|help"
    )
}

/// A command's parts over shards: each shard and the command's arguments there.
pub type Parts = Vec<(u16, Vec<Vec<u8>>)>;

/// A command that reads or acts on the whole keyspace, over the `shards` shards of this
/// process, every one held: a command every shard answers for itself (`route::Class::All`:
/// DBSIZE, KEYS, FLUSHALL, CONFIG SET...: a part on each, merged), RANDOMKEY (each shard's
/// DBSIZE and RANDOMKEY) or SCAN (a step on the shard its cursor names and on each after it).
/// Its parts (each shard and its arguments there) and their join; None for another command,
/// or a SCAN whose cursor is not one (it runs on one shard, whose handler refuses it).
pub fn every_shard_parts(
    class: route::Class,
    args: &[Vec<u8>],
    shards: u16,
) -> Option<(Parts, Join)> {
    use crate::route::{Class, Special};
    match class {
        Class::All(merge) => Some((
            (0..shards).map(|t| (t, args.to_vec())).collect(),
            Join::Merge(merge),
        )),
        Class::Special(Special::RandomKey) => {
            let mut parts = Vec::with_capacity(2 * usize::from(shards));
            for t in 0..shards {
                parts.push((t, vec![b"DBSIZE".to_vec()]));
                parts.push((t, args.to_vec()));
            }
            Some((parts, Join::RandomKey))
        }
        Class::Special(Special::Scan) => {
            let cursor = args
                .get(1)
                .and_then(|c| crate::cmd::args::parse_cursor(c))?;
            let (first, inner) = route::scan_split(cursor);
            // A shard after the first starts afresh with the restarts the walk has used
            // (`route::scan_next`).
            let fresh =
                crate::cmd::keys::start_with_restarts(crate::cmd::keys::cursor_restarts(inner));
            let mut parts = Vec::new();
            let mut steps = Vec::new();
            for shard in first..shards {
                let inner = if shard == first { inner } else { fresh };
                let mut a = args.to_vec();
                if let Some(c) = a.get_mut(1) {
                    *c = inner.to_string().into_bytes();
                }
                parts.push((shard, a));
                steps.push((shard, inner));
            }
            Some((
                parts,
                Join::Scan {
                    steps,
                    shards,
                    count: scan_count(args),
                },
            ))
        }
        _ => None,
    }
}

/// SCAN's COUNT (10 when not given or not a number: the shard's handler refuses a bad one).
pub fn scan_count(argv: &[Vec<u8>]) -> u64 {
    let mut i = 2;
    let mut count = 10;
    while let (Some(opt), Some(v)) = (argv.get(i), argv.get(i + 1)) {
        if opt.eq_ignore_ascii_case(b"count") {
            if let Some(n) = crate::cmd::args::parse_i64(v).filter(|n| *n > 0) {
                count = n as u64;
            }
        }
        i += 2;
    }
    count
}

/// SCAN's parts in a transaction (`Join::Scan`) into one reply, as `Conn::scan` walks the
/// shards outside one: each step's keys, until a shard has more to give, the last is done,
/// or `count` keys were found; the parts after that are not used. A step's error is the
/// reply.
fn scan(
    steps: &[(u16, u64)],
    shards: u16,
    count: u64,
    parts: &[&[u8]],
    out: &mut Reply,
) -> Option<()> {
    let mut keys: Vec<&[u8]> = Vec::new();
    let mut cursor = 0;
    for (&(shard, inner), reply) in steps.iter().zip(parts) {
        let Some((next, found)) = route::scan_reply(reply) else {
            // An error (COUNT 0, an unknown option...): as the shard answered it.
            out.raw(reply);
            return Some(());
        };
        for (a, b) in found {
            keys.push(reply.get(a..b)?);
        }
        cursor = route::scan_next(shard, inner, next, shards);
        if next != 0 || cursor == 0 || keys.len() as u64 >= count {
            break;
        }
    }
    out.array(2);
    out.bulk(cursor.to_string().as_bytes());
    out.array(keys.len());
    for k in keys {
        out.raw(k);
    }
    Some(())
}

/// RANDOMKEY's parts in a transaction (per shard, its DBSIZE then its RANDOMKEY) into one
/// reply: a key of a shard chosen in proportion to its keys, nil when there are none.
fn random_key(parts: &[&[u8]], out: &mut Reply) {
    use rand::RngExt as _;
    let candidates: Vec<(u64, &[u8])> = parts
        .chunks(2)
        .filter_map(|pair| {
            let (size, key) = (*pair.first()?, *pair.get(1)?);
            let n = u64::try_from(read::int(size, 0)?).ok()?;
            (n > 0 && read::bulk(key, 0).is_some()).then_some((n, key))
        })
        .collect();
    let total: u64 = candidates.iter().map(|(n, _)| n).sum();
    if total == 0 {
        out.null();
        return;
    }
    let mut pick = rand::rng().random_range(0..total);
    for (n, key) in candidates {
        if pick < n {
            out.raw(key);
            return;
        }
        pick -= n;
    }
    out.null();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_replies_join_into_one_array() {
        let p = Proto::Resp2;
        let a: &[u8] = b"*2\r\n+OK\r\n:1\r\n";
        let b: &[u8] = b"*1\r\n$1\r\nx\r\n";
        let ones = [Join::One, Join::One, Join::One];
        assert_eq!(
            join_replies(&[a, b], &[0, 1, 2], &ones, &[], p).as_deref(),
            Some(&b"*3\r\n+OK\r\n:1\r\n$1\r\nx\r\n"[..])
        );
        assert_eq!(
            join_replies(&[a, b"-ERR no\r\n"], &[0, 1, 2], &ones, &[], p),
            None
        );
        assert_eq!(
            join_replies(&[b"*1\r\n", b"*x\r\n"], &[0], &ones[..1], &[], p),
            None
        );
        assert_eq!(
            join_replies(&[], &[], &[], &[], p).as_deref(),
            Some(&b"*0\r\n"[..])
        );
        // One part too many or too few for the commands: refused, never misattributed.
        assert_eq!(join_replies(&[a, b], &[0, 1], &ones[..2], &[], p), None);
        assert_eq!(join_replies(&[a, b], &[0, 1, 2, 2], &ones, &[], p), None);
    }

    /// SCAN's steps join as the walk outside a transaction: on past a shard that is done
    /// while fewer than COUNT keys were found, stopping at one with more to give (the parts
    /// after it unused); RANDOMKEY's pick skips shards with no keys.
    #[test]
    fn scan_steps_and_random_keys_join_as_outside_a_transaction() {
        let done: &[u8] = b"*2\r\n$1\r\n0\r\n*2\r\n$1\r\na\r\n$1\r\nb\r\n";
        let more: &[u8] = b"*2\r\n$2\r\n57\r\n*1\r\n$1\r\nc\r\n";
        let unused: &[u8] = b"*2\r\n$1\r\n0\r\n*1\r\n$1\r\nz\r\n";
        let steps = [(1, 5), (2, 0), (3, 0)];
        let mut out = Reply::new();
        scan(&steps, 4, 10, &[done, more, unused], &mut out);
        let cursor = route::scan_next(2, 0, 57, 4).to_string();
        let want = format!(
            "*2\r\n${}\r\n{cursor}\r\n*3\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n",
            cursor.len()
        );
        assert_eq!(String::from_utf8_lossy(&out.buf), want);
        // COUNT reached on the first shard: its cursor, the next shard's start.
        let mut out = Reply::new();
        scan(&steps, 4, 2, &[done, more, unused], &mut out);
        let cursor = route::scan_next(1, 5, 0, 4).to_string();
        assert!(String::from_utf8_lossy(&out.buf).contains(&cursor));
        // Every shard done: 0.
        let mut out = Reply::new();
        scan(&[(3, 0)], 4, 10, &[unused], &mut out);
        assert_eq!(out.buf, b"*2\r\n$1\r\n0\r\n*1\r\n$1\r\nz\r\n");
        for _ in 0..20 {
            let mut out = Reply::new();
            random_key(
                &[b":0\r\n", b"$-1\r\n", b":3\r\n", b"$1\r\nk\r\n"],
                &mut out,
            );
            assert_eq!(out.buf, b"$1\r\nk\r\n");
        }
        let mut out = Reply::new();
        random_key(&[b":0\r\n", b"$-1\r\n"], &mut out);
        assert_eq!(out.buf, b"$-1\r\n");
    }

    /// A split command's parts, in different segments, come back as one reply in its place:
    /// MGET's values in request order, DEL's counts added, DBSIZE's sizes added.
    #[test]
    fn split_commands_join_into_their_own_replies() {
        let p = Proto::Resp2;
        // MGET a b c with a and c on shard 0, b on shard 1: segment 0 runs SET x and the
        // first part, segment 1 the second part and DEL's part there, segment 2 DEL's
        // part on shard 0 and DBSIZE's, segment 3 DBSIZE's on shard 1.
        let s0: &[u8] = b"*2\r\n+OK\r\n*2\r\n$1\r\nA\r\n$-1\r\n";
        let s1: &[u8] = b"*2\r\n*1\r\n$1\r\nB\r\n:1\r\n";
        let s2: &[u8] = b"*2\r\n:2\r\n:5\r\n";
        let s3: &[u8] = b"*1\r\n:7\r\n";
        let joins = [
            Join::One,
            Join::Gather {
                kind: Scatter::Mget,
                order: vec![(0, 0), (1, 0), (0, 1)],
            },
            Join::Gather {
                kind: Scatter::Count,
                order: Vec::new(),
            },
            Join::Merge(Merge::Sum),
        ];
        assert_eq!(
            join_replies(&[s0, s1, s2, s3], &[0, 1, 1, 2, 2, 3, 3], &joins, &[], p).as_deref(),
            Some(&b"*4\r\n+OK\r\n*3\r\n$1\r\nA\r\n$1\r\nB\r\n$-1\r\n:3\r\n:12\r\n"[..])
        );
    }
}
