//! Blocking commands (BLPOP BRPOP BLMOVE BRPOPLPUSH BLMPOP BZPOPMIN BZPOPMAX BZMPOP, XREAD and
//! XREADGROUP with BLOCK): the mechanism, as in Redis.
//!
//! A handler that finds nothing to pop calls [`Ctx::block`] with the keys it waits on and its
//! deadline (from [`parse_timeout`]) and writes no reply. The connection (`conn.rs`) then stops
//! running that client's commands (pipelined commands after a blocking one wait, as in Redis)
//! and waits for one of:
//!
//! - a wake: a write to one of its keys (`keyspace.rs::apply_effect` calls
//!   [`Shard::signal_key_ready`]) marks ready the first client in FIFO order for that key that
//!   was not already ready. The shard serves ready clients itself ([`serve_ready`]), as
//!   Redis's `handleClientsBlockedOnKeys` does: right after the command (or EXEC, or script)
//!   that made them ready, and before any other command it runs, so the next command of any
//!   connection sees their effects. It re-runs the blocked command ([`reprocess`]) as the
//!   client, from what [`park`] kept of it (`Front::parked`), and hands the reply to the
//!   client's connection, on whatever thread (`Mailbox::deliver_served`); if the command
//!   blocks again the client keeps its place and its original deadline. A client served this
//!   way pops (a write), which makes the next waiter ready, and the loop goes on until no
//!   client is ready: one LPUSH of several elements serves several clients in order, and a
//!   served BLMOVE's push serves the client blocked on its destination. Ops from other sites
//!   make clients ready too; they are served before the shard's next command, or when the
//!   woken connection asks ([`settle`]). Stream readers ([`Ctx::block_reader`]) are made
//!   ready by every write to their keys, all of them, as Redis serves every client blocked on
//!   a stream: reading does not consume (an XREADGROUP that delivers writes, which readies
//!   the others again);
//! - the deadline: the reply is the null array (`*-1`, RESP3 `_`) whatever the command, as in
//!   Redis 7.0 ([`time_out`]);
//! - CLIENT KILL or disconnect: [`forget`] drops the registration and the parked command.
//!
//! The deadline is the connection's to notice; it asks the owning shard ([`settle`]), which
//! alone decides, so a client served at the same moment gets one reply. CLIENT UNBLOCK runs
//! on every shard and ends the wait where the client is parked ([`unblock_parked`]), its
//! reply delivered as a served client's.
//!
//! Inside MULTI/EXEC a blocking command does not block: [`Ctx::block`] replies the null array
//! at once (and [`Ctx::can_block`] lets BLMOVE/BRPOPLPUSH reply their null bulk instead).

use crate::client::Client;
use crate::cmd::{self, Ctx};
use crate::error::CmdError;
use crate::front::Front;
use crate::hop::ClientView;
use crate::resp::reply::{Proto, Reply};
use crate::shard::Shard;

/// A blocked client as the shard owning its keys keeps it, to serve it there: who it is and
/// the blocked command (`BlockedOn::argv`).
#[derive(Debug)]
pub struct Parked {
    view: ClientView,
    proto: Proto,
    blocked: BlockedOn,
    /// The client's last write on this shard when it blocked (CRDT.WAIT waits for it).
    last_write_seq: u64,
}

/// After a top-level command that blocked (`cmd::call`): keeps what serving the client on
/// this shard needs. The connection keeps its own copy of the wait (deadline, shard).
pub fn park(front: &mut Front, client: &mut Client, argv: &[&[u8]]) {
    let Some(b) = client.blocked.as_mut() else {
        return;
    };
    if b.postponed || !b.argv.is_empty() {
        return;
    }
    b.argv = argv.iter().map(|a| a.to_vec()).collect();
    let blocked = b.clone();
    let parked = Parked {
        view: ClientView::of(client),
        proto: client.shared.proto.get(),
        blocked,
        last_write_seq: client.last_write_seq,
    };
    front.parked.insert(client.id(), parked);
}

/// The client a parked command runs as: its id, names, user, mailbox and WATCH flag.
fn stand_in(shard: &Shard, p: &Parked, now_ms: u64) -> (Client, Reply) {
    let v = &p.view;
    let shared = std::rc::Rc::new(crate::client::ClientShared::with_mailbox(
        v.id,
        v.addr,
        v.laddr,
        now_ms,
        v.mailbox.clone(),
    ));
    *shared.name.borrow_mut() = v.name.clone();
    *shared.user.borrow_mut() = v.user.as_ref().and_then(|n| shard.acl.user(n).cloned());
    *shared.tracking.borrow_mut() = v.tracking.clone();
    // A command CLIENT PAUSE postponed blocks, if it does, in the place of its first run.
    shared.read_ns.set(v.read_ns);
    let mut client = Client::new(shared);
    client.dirty = v.dirty.clone();
    client.last_write_seq = p.last_write_seq;
    client.select(p.blocked.db);
    client.shared.set_proto(p.proto);
    client.shared.blocked.set(true);
    client.blocked = Some(p.blocked.clone());
    let out = Reply {
        buf: Vec::new(),
        proto: p.proto,
    };
    (client, out)
}

/// Redis's `handleClientsBlockedOnKeys`: serves every client a write made ready, in the
/// order they became ready (per key, FIFO), including those the served commands' own writes
/// make ready, until none is. Each reply goes to its client's connection. Every client
/// served leaves the registry or is no longer ready, so the loop ends.
pub fn serve_ready(shard: &mut Shard, front: &mut Front, now_ms: u64) {
    while let Some(id) = shard.blocking.pop_ready() {
        if !shard.blocking.is_ready(id) {
            continue;
        }
        let Some(p) = front.parked.remove(&id) else {
            // Not parked here (postponed by CLIENT PAUSE): its connection re-runs it.
            continue;
        };
        let (mut client, mut out) = stand_in(shard, &p, now_ms);
        if reprocess(shard, front, &mut client, &mut out, now_ms) {
            if let Some(b) = client.blocked.take() {
                front.parked.insert(id, Parked { blocked: b, ..p });
            }
        } else {
            let wrote = if client.last_write_seq != p.last_write_seq {
                client.last_write_seq
            } else {
                0
            };
            p.view.mailbox.deliver_served(&out.buf, wrote);
        }
    }
}

/// What a blocked client's connection asks of the shard owning its keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settle {
    /// It was woken: serve what is ready.
    Serve,
    /// Its deadline passed.
    TimeOut,
}

/// Runs on the shard owning a blocked client's keys, for its connection: serves what is
/// ready first (the client itself, possibly), then ends its wait as `how` says if it still
/// waits. Returns the reply to write (empty when it was served: that reply is in its
/// mailbox) and whether it still waits.
pub fn settle(
    shard: &mut Shard,
    front: &mut Front,
    id: u64,
    how: Settle,
    now_ms: u64,
) -> (Vec<u8>, bool) {
    serve_ready(shard, front, now_ms);
    if how == Settle::Serve {
        return (Vec::new(), front.parked.contains_key(&id));
    }
    let Some(p) = front.parked.remove(&id) else {
        return (Vec::new(), false);
    };
    let (mut client, mut out) = stand_in(shard, &p, now_ms);
    if how == Settle::TimeOut {
        time_out(shard, front, &mut client, &mut out);
    }
    // A command that re-runs at its deadline ends its wait there too (`time_out`).
    if let Some(b) = client.blocked.take() {
        front.parked.insert(id, Parked { blocked: b, ..p });
        return (out.buf, true);
    }
    (out.buf, false)
}

/// CLIENT UNBLOCK, on each shard: ends the wait of client `id` if it is parked here (its
/// command blocked on this shard's keys; not one CLIENT PAUSE postponed, which Redis 7.0
/// cannot unblock either, nor one a write made ready, which this shard serves before its next
/// command), as its deadline or an `UNBLOCKED` error would, and hands the reply to its
/// connection as a served client's (`Mailbox::deliver_served`). Returns whether it did.
///
/// Decided here, where the client is registered, rather than by the connection: a client
/// INFO counts in `blocked_clients` (this registry) is one CLIENT UNBLOCK finds, even while
/// its connection, on another thread, has not yet learnt that its command blocked. As in
/// Redis, where both read the one client's flags.
pub fn unblock_parked(
    shard: &mut Shard,
    front: &mut Front,
    id: u64,
    how: crate::client::Unblock,
    now_ms: u64,
) -> bool {
    let b = &shard.blocking;
    if let Some(w) = front.cross_waits.get(&id) {
        if b.contains(id) {
            w.request(how);
            return true;
        }
    }
    if !b.contains(id) || b.is_postponed(id) || b.is_ready(id) {
        return false;
    }
    let Some(p) = front.parked.remove(&id) else {
        return false;
    };
    let (mut client, mut out) = stand_in(shard, &p, now_ms);
    unblock_by_request(shard, front, &mut client, &mut out, how);
    if let Some(b) = client.blocked.take() {
        // Still waiting (a re-run at the deadline that may not end it): nothing to answer.
        front.parked.insert(id, Parked { blocked: b, ..p });
        return false;
    }
    let wrote = if client.last_write_seq != p.last_write_seq {
        client.last_write_seq
    } else {
        0
    };
    p.view.mailbox.deliver_served(&out.buf, wrote);
    true
}

/// A client blocked by a pop over keys of several shards (`Conn::pop_blocking_across`), as
/// kept on the one shard where it counts in `blocked_clients`: CLIENT UNBLOCK run there asks
/// its connection to end the wait (`request`), which answers as the unblock says unless its
/// try popped first; the connection never gets two replies.
#[derive(Debug)]
pub struct CrossWait {
    /// 0: no request; 1: CLIENT UNBLOCK (TIMEOUT); 2: CLIENT UNBLOCK ERROR.
    unblock: std::sync::atomic::AtomicU8,
    mailbox: std::sync::Arc<crate::client::Mailbox>,
}

impl CrossWait {
    pub fn new(mailbox: std::sync::Arc<crate::client::Mailbox>) -> CrossWait {
        CrossWait {
            unblock: std::sync::atomic::AtomicU8::new(0),
            mailbox,
        }
    }

    /// CLIENT UNBLOCK: records `how` and wakes the connection.
    pub fn request(&self, how: crate::client::Unblock) {
        let v = match how {
            crate::client::Unblock::Timeout => 1,
            crate::client::Unblock::Error => 2,
        };
        self.unblock.store(v, std::sync::atomic::Ordering::Release);
        crate::keyspace::Wake::wake(&*self.mailbox);
    }

    /// The CLIENT UNBLOCK asked for, if any.
    pub fn requested(&self) -> Option<crate::client::Unblock> {
        match self.unblock.load(std::sync::atomic::Ordering::Acquire) {
            1 => Some(crate::client::Unblock::Timeout),
            2 => Some(crate::client::Unblock::Error),
            _ => None,
        }
    }
}

/// The client is gone (disconnect, CLIENT KILL): drops its wait on this shard.
pub fn forget(shard: &mut Shard, front: &mut Front, id: u64) {
    front.parked.remove(&id);
    front.cross_waits.remove(&id);
    shard.blocking.unregister(id);
}

/// What a blocked client waits for; kept in `Client::blocked` while it waits.
#[derive(Debug, Clone, Default)]
pub struct BlockedOn {
    /// Database of the keys.
    pub db: usize,
    /// Absolute deadline in shard milliseconds (`Shard::now_ms`); `None` waits forever.
    pub deadline_ms: Option<u64>,
    /// The blocked command's arguments, re-run on each wake (filled by the connection).
    pub argv: Vec<Vec<u8>>,
    /// Set by `Ctx::block` during a re-run: the command blocked again.
    pub reblocked: bool,
    /// At the deadline, re-run the command (with `timed_out` set) instead of replying the
    /// null array: CRDT.WAIT answers a count either way.
    pub rerun_on_timeout: bool,
    pub timed_out: bool,
    /// The shard whose keys it waits on (its registration is there).
    pub shard: u16,
    /// XREAD: the IDs it waits after, as resolved when it blocked (`$` is the last ID then).
    pub stream_ids: Vec<meridian_crdt::StreamId>,
    /// Postponed by CLIENT PAUSE rather than blocked by its command: at the end of the pause
    /// (CLIENT UNPAUSE, or the deadline) the command runs from the start, through
    /// `cmd::execute`.
    pub postponed: bool,
}

impl Ctx<'_> {
    /// Whether the running command may block: false inside EXEC (and any nested call), where
    /// blocking commands answer at once as if their timeout had passed.
    pub fn can_block(&self) -> bool {
        self.client.call_depth <= 1
    }

    /// Whether this run is a re-run after a wake (the client is blocked). Redis 7.0 serves a
    /// blocked client only from a key of the type it waits for: a handler that finds a waited
    /// key holding another type on a re-run should treat it as empty and call `block` again,
    /// rather than answer WRONGTYPE (a wrong-typed BLMOVE destination still answers it).
    pub fn is_rerun(&self) -> bool {
        self.client.blocked.is_some()
    }

    /// Blocks the client on `keys` (of its selected db) until one of them is written or
    /// `deadline_ms` (absolute, from [`parse_timeout`]; `None` = forever) passes. The handler
    /// writes no reply and returns `Ok(())`; on a write the connection re-runs the command.
    ///
    /// When the client may not block ([`Ctx::can_block`] is false), this writes the null
    /// array (`*-1`, RESP3 `_`) instead. During a re-run the client stays registered with
    /// its original deadline and place in line (`deadline_ms` is ignored).
    pub fn block(&mut self, keys: &[&[u8]], deadline_ms: Option<u64>) {
        if !self.can_block() {
            self.out.null_array();
            return;
        }
        if let Some(b) = self.client.blocked.as_mut() {
            b.reblocked = true;
            return;
        }
        let db = self.client.db;
        let id = self.client.id();
        self.shard.blocking.register(
            id,
            self.client.shared.mailbox.clone(),
            db,
            keys,
            self.client.shared.read_ns.get(),
        );
        self.client.shared.blocked.set(true);
        self.client.blocked = Some(BlockedOn {
            db,
            deadline_ms,
            argv: Vec::new(),
            reblocked: true,
            rerun_on_timeout: false,
            timed_out: false,
            shard: self.shard.index,
            stream_ids: Vec::new(),
            postponed: false,
        });
    }

    /// Like `block`, for a stream reader (XREAD, XREADGROUP): every write to one of its keys
    /// wakes it. `stream_ids` (XREAD) are kept for the re-runs; a re-run keeps the first ones.
    pub fn block_reader(
        &mut self,
        keys: &[&[u8]],
        deadline_ms: Option<u64>,
        stream_ids: Vec<meridian_crdt::StreamId>,
    ) {
        let first = self.client.blocked.is_none();
        self.block(keys, deadline_ms);
        if let Some(b) = self.client.blocked.as_mut() {
            if first {
                b.stream_ids = stream_ids;
            }
            let id = self.client.id();
            self.shard.blocking.set_wake_all(id);
        }
    }

    /// XREAD's IDs as resolved when it blocked, during a re-run.
    pub fn blocked_stream_ids(&self) -> Option<&[meridian_crdt::StreamId]> {
        self.client
            .blocked
            .as_ref()
            .map(|b| b.stream_ids.as_slice())
            .filter(|ids| !ids.is_empty())
    }

    /// Like `block`, but at the deadline the command runs once more with
    /// [`Ctx::timed_out`] true, and must reply then.
    pub fn block_until_rerun(&mut self, keys: &[&[u8]], deadline_ms: Option<u64>) {
        self.block(keys, deadline_ms);
        if let Some(b) = self.client.blocked.as_mut() {
            b.rerun_on_timeout = true;
        }
    }

    /// Whether this re-run happens because the deadline passed (see `block_until_rerun`).
    pub fn timed_out(&self) -> bool {
        self.client.blocked.as_ref().is_some_and(|b| b.timed_out)
    }
}

/// Redis's `getTimeoutFromObjectOrReply` for a timeout in seconds (a float): the absolute
/// deadline in milliseconds (`now_ms` + the timeout rounded up to a millisecond), or `None`
/// for 0 (forever). Errors: `ERR timeout is not a float or out of range` for what is not a
/// float, `ERR timeout is negative` for a negative timeout (and, as in Redis 7.0 where the
/// conversion overflows, for one too large for 64-bit milliseconds, including `inf`).
pub fn parse_timeout(arg: &[u8], now_ms: u64) -> Result<Option<u64>, CmdError> {
    // `getLongDoubleFromObjectOrReply`: a long double, so `1e400` is a (too large) timeout.
    let secs = match cmd::args::parse_long_double(arg) {
        Some(cmd::args::LongDouble::Finite(d)) => d.to_f64(),
        Some(cmd::args::LongDouble::Infinite) => f64::INFINITY,
        None => {
            return Err(CmdError::Err(
                "timeout is not a float or out of range".to_string(),
            ));
        }
    };
    let ms = (secs * 1000.0).ceil();
    // Milliseconds must fit in 0..2^63 (+inf does not); NaN never parses.
    if !(0.0..9_223_372_036_854_775_808.0).contains(&ms) {
        return Err(CmdError::Err("timeout is negative".to_string()));
    }
    let ms = ms as u64;
    if ms == 0 {
        return Ok(None);
    }
    Ok(Some(now_ms.saturating_add(ms)))
}

/// `getTimeoutFromObjectOrReply` for a timeout in milliseconds (an integer, as WAIT takes):
/// the absolute deadline, or `None` for 0 (forever). Errors: `ERR timeout is not an integer
/// or out of range`, `ERR timeout is negative`.
pub fn parse_timeout_ms(arg: &[u8], now_ms: u64) -> Result<Option<u64>, CmdError> {
    let ms = cmd::args::parse_i64(arg)
        .ok_or_else(|| CmdError::Err("timeout is not an integer or out of range".to_string()))?;
    match u64::try_from(ms) {
        Err(_) => Err(CmdError::Err("timeout is negative".to_string())),
        Ok(0) => Ok(None),
        Ok(ms) => Ok(Some(now_ms.saturating_add(ms))),
    }
}

/// Postpones the command the client just sent until CLIENT PAUSE ends (`end_ms`) or
/// CLIENT UNPAUSE; the connection keeps its arguments as for a blocked command.
pub fn postpone(shard: &mut Shard, client: &mut Client, end_ms: u64) {
    shard
        .blocking
        .register_postponed(client.id(), client.shared.mailbox.clone());
    client.shared.blocked.set(true);
    client.blocked = Some(BlockedOn {
        db: client.db,
        deadline_ms: Some(end_ms),
        argv: Vec::new(),
        reblocked: true,
        rerun_on_timeout: true,
        timed_out: false,
        shard: shard.index,
        stream_ids: Vec::new(),
        postponed: true,
    });
}

/// CLIENT UNBLOCK reached this blocked client: its wait ends as if it timed out, or with
/// Redis's `UNBLOCKED` error.
pub fn unblock_by_request(
    shard: &mut Shard,
    front: &mut Front,
    client: &mut Client,
    out: &mut Reply,
    how: crate::client::Unblock,
) {
    if client.blocked.is_none() {
        return;
    }
    match how {
        crate::client::Unblock::Timeout => time_out(shard, front, client, out),
        crate::client::Unblock::Error => {
            unblock(shard, client);
            cmd::reply_error(
                front,
                out,
                &CmdError::Raw("UNBLOCKED client unblocked via CLIENT UNBLOCK".to_string()),
            );
        }
    }
}

/// Ends a client's wait: forgets its registration and clears its state.
pub fn unblock(shard: &mut Shard, client: &mut Client) {
    shard.blocking.unregister(client.id());
    client.blocked = None;
    client.shared.blocked.set(false);
}

/// The deadline passed: replies the null array and ends the wait (or, for a command that
/// asked for it, re-runs it one last time to reply).
pub fn time_out(shard: &mut Shard, front: &mut Front, client: &mut Client, out: &mut Reply) {
    if client.blocked.as_ref().is_some_and(|b| b.postponed) {
        // The pause ended: the command runs now (it may be postponed or block again).
        let now = shard.now_ms();
        reprocess(shard, front, client, out, now);
        return;
    }
    let rerun = match client.blocked.as_mut() {
        Some(b) if b.rerun_on_timeout => {
            b.timed_out = true;
            true
        }
        _ => false,
    };
    if rerun {
        let now = shard.now_ms();
        if reprocess(shard, front, client, out, now) {
            // The command must not block past its deadline; end the wait regardless.
            unblock(shard, client);
        }
        return;
    }
    // Logged as Redis logs a blocked command that timed out (`updateStatsOnUnblock`).
    if let Some(b) = client.blocked.as_ref() {
        let argv: Vec<&[u8]> = b.argv.iter().map(Vec::as_slice).collect();
        if let Ok(spec) = cmd::resolve(front.table, &argv) {
            let now = shard.now_ms();
            cmd::log_slow(shard, front, client, spec, &argv, 0, now);
        }
    }
    unblock(shard, client);
    out.null_array();
}

/// Re-runs the blocked command after a wake. Returns whether it blocked again (the client
/// then keeps its registration and deadline); otherwise its reply is in `out` and the wait
/// is over. Re-runs are not counted again in command statistics.
pub fn reprocess(
    shard: &mut Shard,
    front: &mut Front,
    client: &mut Client,
    out: &mut Reply,
    now_ms: u64,
) -> bool {
    let Some(b) = client.blocked.as_mut() else {
        return false;
    };
    if b.postponed {
        let owned = std::mem::take(&mut b.argv);
        unblock(shard, client);
        let argv: Vec<&[u8]> = owned.iter().map(Vec::as_slice).collect();
        cmd::execute(shard, front, client, out, &argv, now_ms);
        drop(argv);
        return match client.blocked.as_mut() {
            Some(b) => {
                b.argv = owned;
                true
            }
            None => false,
        };
    }
    b.reblocked = false;
    let owned = std::mem::take(&mut b.argv);
    let argv: Vec<&[u8]> = owned.iter().map(Vec::as_slice).collect();
    let started = std::time::Instant::now();
    let mut ran: Option<&'static cmd::table::CommandSpec> = None;
    match cmd::resolve(front.table, &argv) {
        Ok(spec) => match spec.handler {
            Some(handler) => {
                ran = Some(spec);
                // Invalidations its own writes cause follow its reply (Redis's order), as
                // `cmd::call` holds them for the client it runs; NOLOOP drops them.
                shard
                    .tracking
                    .set_current(client.id(), client.shared.tracking_noloop());
                client.call_depth += 1;
                let result = {
                    let mut ctx = Ctx {
                        shard: &mut *shard,
                        front: &mut *front,
                        client: &mut *client,
                        out: &mut *out,
                        now_ms,
                        spec,
                    };
                    handler(&mut ctx, &argv)
                };
                client.call_depth -= 1;
                if let Err(e) = result {
                    // Redis counts a blocked command that ends in an error as a failed call.
                    if let Some(st) = front.stats.commands.get_mut(spec.idx) {
                        st.failed_calls += 1;
                    }
                    cmd::reply_error(front, out, &e);
                }
                if shard.tracking.has_pending() {
                    cmd::tracking::flush_pending(shard, &front.node, client, Some(out), now_ms);
                }
                shard.tracking.set_current(0, false);
            }
            None => cmd::reply_error(front, out, &CmdError::WrongArity(spec.meta.name.into())),
        },
        Err(e) => cmd::reply_error(front, out, &e),
    }
    let again = client.blocked.as_ref().is_some_and(|b| b.reblocked);
    if let (false, Some(spec)) = (again, ran) {
        let usec = started.elapsed().as_micros() as u64;
        cmd::log_slow(shard, front, client, spec, &argv, usec, now_ms);
    }
    drop(argv);
    if again {
        if let Some(b) = client.blocked.as_mut() {
            b.argv = owned;
        }
        shard.blocking.clear_ready(client.id());
    } else {
        // Served, failed or answered otherwise: the next client waiting on these keys gets
        // its turn (a wrong-typed BRPOPLPUSH destination pops nothing), as Redis serves every
        // client blocked on a key while it holds elements.
        let keys = shard.blocking.keys_of(client.id());
        unblock(shard, client);
        for (db, key) in keys {
            shard.signal_key_ready(db, &key);
        }
    }
    again
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmd::testing::Harness;

    #[test]
    fn parse_timeout_as_redis() {
        assert_eq!(parse_timeout(b"0", 1000), Ok(None));
        assert_eq!(parse_timeout(b"-0", 1000), Ok(None));
        assert_eq!(parse_timeout(b"-0.0001", 1000), Ok(None));
        assert_eq!(parse_timeout(b"1", 1000), Ok(Some(2000)));
        assert_eq!(parse_timeout(b"0.1", 1000), Ok(Some(1100)));
        assert_eq!(parse_timeout(b".001", 1000), Ok(Some(1001)));
        assert_eq!(parse_timeout(b"0.0001", 1000), Ok(Some(1001)));
        assert_eq!(parse_timeout(b"1e-5", 1000), Ok(Some(1001)));
        assert_eq!(parse_timeout(b"1.5e3", 0), Ok(Some(1_500_000)));
        let neg = Err(CmdError::Err("timeout is negative".into()));
        assert_eq!(parse_timeout(b"-1", 0), neg);
        assert_eq!(parse_timeout(b"inf", 0), neg);
        assert_eq!(parse_timeout(b"1e20", 0), neg);
        assert_eq!(parse_timeout(b"9223372036854776", 0), neg);
        // A long double: beyond f64's range it is still a number, too large a timeout.
        assert_eq!(parse_timeout(b"1e400", 0), neg);
        assert_eq!(parse_timeout(b"1e-400", 0), Ok(None));
        let nf = Err(CmdError::Err(
            "timeout is not a float or out of range".into(),
        ));
        for bad in [&b"abc"[..], b"", b" 1", b"1 ", b"nan", b"0.1abc", b"1e5000"] {
            assert_eq!(parse_timeout(bad, 0), nf, "{bad:?}");
        }
    }

    /// Runs `ctx.block` as a handler would, at call depth `depth`.
    fn block(t: &mut Harness, keys: &[&[u8]], deadline: Option<u64>, depth: u32) {
        let spec = cmd::resolve(t.front.table, &[b"get", b"k"]).unwrap();
        t.client.call_depth = depth;
        let mut ctx = Ctx {
            shard: &mut t.shard,
            front: &mut t.front,
            client: &mut t.client,
            out: &mut t.out,
            now_ms: 0,
            spec,
        };
        ctx.block(keys, deadline);
        t.client.call_depth = 0;
    }

    #[test]
    fn block_wake_by_write_then_reprocess() {
        let mut t = Harness::new();
        block(&mut t, &[b"k", b"j"], Some(u64::MAX), 1);
        assert!(t.out.is_empty(), "a blocked command writes no reply");
        assert_eq!(t.shard.blocked_count(), 1);
        assert!(t.client.shared.blocked.get());
        t.client.blocked.as_mut().unwrap().argv = vec![b"get".to_vec(), b"k".to_vec()];
        // A write to another key does not wake it; a write to one of its keys does.
        assert_eq!(t.other(&["set", "x", "1"]), "+OK\r\n");
        assert!(!t.shard.blocking.is_ready(t.client.id()));
        assert_eq!(t.other(&["set", "k", "v"]), "+OK\r\n");
        assert!(t.shard.blocking.is_ready(t.client.id()));
        let now = crate::time::wall_ms();
        let again = reprocess(&mut t.shard, &mut t.front, &mut t.client, &mut t.out, now);
        assert!(!again);
        assert_eq!(String::from_utf8_lossy(&t.out.buf), "$1\r\nv\r\n");
        assert_eq!(t.shard.blocked_count(), 0);
        assert!(t.client.blocked.is_none());
        assert!(!t.client.shared.blocked.get());
    }

    #[test]
    fn timeout_and_disconnect_and_exec() {
        let mut t = Harness::new();
        block(&mut t, &[b"k"], Some(5), 1);
        // A re-run that blocks again keeps the original deadline.
        block(&mut t, &[b"k"], Some(99), 1);
        assert_eq!(t.client.blocked.as_ref().unwrap().deadline_ms, Some(5));
        time_out(&mut t.shard, &mut t.front, &mut t.client, &mut t.out);
        assert_eq!(String::from_utf8_lossy(&t.out.buf), "*-1\r\n");
        assert_eq!(t.shard.blocked_count(), 0);
        t.out.clear();
        t.out.proto = crate::resp::reply::Proto::Resp3;
        // Inside EXEC (depth 2) nothing blocks: the null array at once.
        block(&mut t, &[b"k"], None, 2);
        assert_eq!(String::from_utf8_lossy(&t.out.buf), "_\r\n");
        assert_eq!(t.shard.blocked_count(), 0);
        // Disconnect forgets the registration.
        block(&mut t, &[b"k"], None, 1);
        assert_eq!(t.shard.blocking.waiters(0, b"k"), vec![t.client.id()]);
        let (id, dirty) = (t.client.id(), t.client.dirty.clone());
        t.shard.forget_client(id, &dirty);
        assert_eq!(t.shard.blocked_count(), 0);
        assert!(t.shard.blocking.waiters(0, b"k").is_empty());
    }

    #[test]
    fn served_on_the_shard_and_settled() {
        let mut t = Harness::new();
        let id = t.client.id();
        let mailbox = t.client.shared.mailbox.clone();
        // A top-level command that blocks is parked on the shard with its arguments.
        assert_eq!(t.run(&["BLPOP", "k", "0"]), "");
        assert!(t.front.parked.contains_key(&id));
        // The write's command serves it before returning: reply in its mailbox.
        assert_eq!(t.other(&["RPUSH", "k", "a", "b"]), ":2\r\n");
        assert!(mailbox.take_served());
        assert_eq!(
            String::from_utf8_lossy(&mailbox.take()),
            "*2\r\n$1\r\nk\r\n$1\r\na\r\n"
        );
        assert_eq!(t.other(&["LLEN", "k"]), ":1\r\n");
        assert_eq!(t.shard.blocked_count(), 0);
        assert!(t.front.parked.is_empty());
        t.client.blocked = None;
        // The deadline, asked by the connection: the null array, the wait over.
        assert_eq!(t.run(&["BLPOP", "j", "0"]), "");
        let now = crate::time::wall_ms();
        let (reply, waits) = settle(&mut t.shard, &mut t.front, id, Settle::TimeOut, now);
        assert_eq!(
            (String::from_utf8_lossy(&reply).into_owned(), waits),
            ("*-1\r\n".into(), false)
        );
        assert!(t.front.parked.is_empty() && t.shard.blocked_count() == 0);
        t.client.blocked = None;
        // A wake with nothing ready leaves it waiting; CLIENT UNBLOCK ... ERROR ends it.
        assert_eq!(t.run(&["BLPOP", "j", "0"]), "");
        assert_eq!(
            settle(&mut t.shard, &mut t.front, id, Settle::Serve, now),
            (Vec::new(), true)
        );
        let how = crate::client::Unblock::Error;
        assert!(unblock_parked(&mut t.shard, &mut t.front, id, how, now));
        assert!(mailbox.take_served());
        assert_eq!(
            String::from_utf8_lossy(&mailbox.take()),
            "-UNBLOCKED client unblocked via CLIENT UNBLOCK\r\n"
        );
        assert!(t.front.parked.is_empty() && t.shard.blocked_count() == 0);
        // Nothing parked here any more: CLIENT UNBLOCK finds nobody.
        assert!(!unblock_parked(&mut t.shard, &mut t.front, id, how, now));
        t.client.blocked = None;
        // CLIENT UNBLOCK ... TIMEOUT: the null array.
        assert_eq!(t.run(&["BLPOP", "j", "0"]), "");
        let how = crate::client::Unblock::Timeout;
        assert!(unblock_parked(&mut t.shard, &mut t.front, id, how, now));
        assert!(mailbox.take_served());
        assert_eq!(String::from_utf8_lossy(&mailbox.take()), "*-1\r\n");
        t.client.blocked = None;
        // Served before the connection's deadline: the deadline finds nothing to answer.
        assert_eq!(t.run(&["BLPOP", "j", "0"]), "");
        assert_eq!(t.other(&["LPUSH", "j", "x"]), ":1\r\n");
        assert_eq!(
            settle(&mut t.shard, &mut t.front, id, Settle::TimeOut, now),
            (Vec::new(), false)
        );
        assert!(mailbox.take_served());
        t.client.blocked = None;
        // A client that goes is forgotten.
        assert_eq!(t.run(&["BLPOP", "j", "0"]), "");
        forget(&mut t.shard, &mut t.front, id);
        assert!(t.front.parked.is_empty() && t.shard.blocked_count() == 0);
        assert_eq!(t.other(&["LPUSH", "j", "x"]), ":1\r\n");
        assert_eq!(t.other(&["LLEN", "j"]), ":1\r\n");
    }
}
