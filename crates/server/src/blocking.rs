//! Blocking commands (BLPOP BRPOP BLMOVE BRPOPLPUSH BLMPOP BZPOPMIN BZPOPMAX BZMPOP, XREAD and
//! XREADGROUP with BLOCK): the mechanism, as in Redis.
//!
//! A handler that finds nothing to pop calls [`Ctx::block`] with the keys it waits on and its
//! deadline (from [`parse_timeout`]) and writes no reply. The connection (`conn.rs`) then stops
//! running that client's commands (pipelined commands after a blocking one wait, as in Redis)
//! and waits for one of:
//!
//! - a wake: a write to one of its keys (`keyspace.rs::apply_effect` calls
//!   [`Shard::signal_key_ready`]) wakes the first client in FIFO order for that key that was
//!   not already woken. The connection re-runs the same command ([`reprocess`]); if it blocks
//!   again the client keeps its place and its original deadline. A client served this way pops
//!   (a write), which wakes the next waiter, so one LPUSH of several elements serves several
//!   clients in order. Stream readers ([`Ctx::block_reader`]) are woken by every write to
//!   their keys, all of them, as Redis serves every client blocked on a stream: reading does
//!   not consume (an XREADGROUP that delivers writes, which wakes the others again);
//! - the deadline: the reply is the null array (`*-1`, RESP3 `_`) whatever the command, as in
//!   Redis 7.0 ([`time_out`]);
//! - CLIENT KILL or disconnect: `Shard::unregister_client` forgets the registration.
//!
//! Inside MULTI/EXEC a blocking command does not block: [`Ctx::block`] replies the null array
//! at once (and [`Ctx::can_block`] lets BLMOVE/BRPOPLPUSH reply their null bulk instead).

use std::collections::VecDeque;
use std::rc::Rc;

use hashbrown::{Equivalent, HashMap};

use crate::client::{Client, ClientShared};
use crate::cmd::{self, Ctx};
use crate::error::CmdError;
use crate::resp::reply::Reply;
use crate::shard::Shard;

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
    /// XREAD: the IDs it waits after, as resolved when it blocked (`$` is the last ID then).
    pub stream_ids: Vec<meridian_crdt::StreamId>,
    /// Postponed by CLIENT PAUSE rather than blocked by its command: at the end of the pause
    /// (CLIENT UNPAUSE, or the deadline) the command runs from the start, through
    /// `cmd::execute`.
    pub postponed: bool,
}

/// A (db, key) looked up without allocating: hashes like `(usize, Vec<u8>)`.
#[derive(Hash)]
struct KeyRef<'a>(usize, &'a [u8]);

impl Equivalent<(usize, Vec<u8>)> for KeyRef<'_> {
    fn equivalent(&self, key: &(usize, Vec<u8>)) -> bool {
        self.0 == key.0 && self.1 == key.1.as_slice()
    }
}

#[derive(Debug)]
struct Waiter {
    shared: Rc<ClientShared>,
    keys: Vec<(usize, Vec<u8>)>,
    /// Woken and not yet re-run: further writes wake the next waiter instead.
    ready: bool,
    /// Woken by every write to its keys, not only in its turn (stream readers).
    wake_all: bool,
    /// Postponed by CLIENT PAUSE (it waits on no key).
    postponed: bool,
}

/// The shard's blocked clients: per (db, key) the waiting client ids in FIFO order.
#[derive(Debug, Default)]
pub struct BlockRegistry {
    keys: HashMap<(usize, Vec<u8>), VecDeque<u64>>,
    clients: HashMap<u64, Waiter>,
}

impl BlockRegistry {
    /// Number of blocked clients (INFO `blocked_clients`).
    pub fn len(&self) -> usize {
        self.clients.len()
    }

    pub fn is_empty(&self) -> bool {
        self.clients.is_empty()
    }

    /// Whether `id` is registered.
    pub fn contains(&self, id: u64) -> bool {
        self.clients.contains_key(&id)
    }

    /// Registers a client on `keys` of `db` (duplicates count once), at the back of each
    /// key's queue. A client already registered is registered again from scratch.
    pub fn register(&mut self, shared: Rc<ClientShared>, db: usize, keys: &[&[u8]]) {
        self.register_waiter(shared, db, keys, false);
    }

    /// Registers a client postponed by CLIENT PAUSE: it waits on no key and is woken by
    /// `wake_postponed`.
    pub fn register_postponed(&mut self, shared: Rc<ClientShared>) {
        self.register_waiter(shared, 0, &[], true);
    }

    fn register_waiter(
        &mut self,
        shared: Rc<ClientShared>,
        db: usize,
        keys: &[&[u8]],
        postponed: bool,
    ) {
        let id = shared.id;
        self.unregister(id);
        let mut mine: Vec<(usize, Vec<u8>)> = Vec::with_capacity(keys.len());
        for k in keys {
            if mine.iter().any(|(_, m)| m.as_slice() == *k) {
                continue;
            }
            mine.push((db, k.to_vec()));
            self.keys.entry((db, k.to_vec())).or_default().push_back(id);
        }
        self.clients.insert(
            id,
            Waiter {
                shared,
                keys: mine,
                ready: false,
                wake_all: false,
                postponed,
            },
        );
    }

    /// Makes a registered client one that every write to its keys wakes (a stream reader).
    pub fn set_wake_all(&mut self, id: u64) {
        if let Some(w) = self.clients.get_mut(&id) {
            w.wake_all = true;
        }
    }

    /// Forgets a client (served, timed out, killed, disconnected). Returns whether it was
    /// registered.
    pub fn unregister(&mut self, id: u64) -> bool {
        let Some(w) = self.clients.remove(&id) else {
            return false;
        };
        for key in w.keys {
            if let Some(q) = self.keys.get_mut(&key) {
                q.retain(|&c| c != id);
                if q.is_empty() {
                    self.keys.remove(&key);
                }
            }
        }
        true
    }

    /// A write to (db, key): wakes the first waiter in FIFO order not already woken, and every
    /// stream reader waiting on it. Returns the first id woken, if any.
    pub fn signal(&mut self, db: usize, key: &[u8]) -> Option<u64> {
        if self.clients.is_empty() {
            return None;
        }
        let q = self.keys.get(&KeyRef(db, key))?;
        let mut first = None;
        let mut turn_taken = false;
        for id in q {
            if let Some(w) = self.clients.get_mut(id) {
                if w.ready || (turn_taken && !w.wake_all) {
                    continue;
                }
                w.ready = true;
                w.shared.wake.notify_one();
                first = first.or(Some(*id));
                turn_taken |= !w.wake_all;
            }
        }
        first
    }

    /// Wakes every client postponed by CLIENT PAUSE (the pause ended).
    pub fn wake_postponed(&mut self) {
        for w in self
            .clients
            .values_mut()
            .filter(|w| w.postponed && !w.ready)
        {
            w.ready = true;
            w.shared.wake.notify_one();
        }
    }

    /// Whether `id` waits because of CLIENT PAUSE (CLIENT UNBLOCK leaves those alone).
    pub fn is_postponed(&self, id: u64) -> bool {
        self.clients.get(&id).is_some_and(|w| w.postponed)
    }

    /// The keys `id` waits on.
    fn keys_of(&self, id: u64) -> Vec<(usize, Vec<u8>)> {
        self.clients
            .get(&id)
            .map(|w| w.keys.clone())
            .unwrap_or_default()
    }

    /// Whether `id` was woken by a write and should re-run its command.
    pub fn is_ready(&self, id: u64) -> bool {
        self.clients.get(&id).is_some_and(|w| w.ready)
    }

    /// After a re-run that blocked again: the client waits for the next write.
    pub fn clear_ready(&mut self, id: u64) {
        if let Some(w) = self.clients.get_mut(&id) {
            w.ready = false;
        }
    }

    /// The clients waiting on (db, key), first to be served first.
    pub fn waiters(&self, db: usize, key: &[u8]) -> Vec<u64> {
        self.keys
            .get(&KeyRef(db, key))
            .map(|q| q.iter().copied().collect())
            .unwrap_or_default()
    }
}

impl Shard {
    /// Called by the write path for every keyspace write: wakes a client blocked on the key.
    /// Costs one emptiness check when no client is blocked.
    #[inline]
    pub fn signal_key_ready(&mut self, db: usize, key: &[u8]) {
        if !self.blocking.is_empty() {
            self.blocking.signal(db, key);
        }
    }

    /// Number of clients blocked in a blocking command (INFO clients `blocked_clients`).
    pub fn blocked_count(&self) -> usize {
        self.blocking.len()
    }
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
        self.shard
            .blocking
            .register(self.client.shared.clone(), db, keys);
        self.client.shared.blocked.set(true);
        self.client.blocked = Some(BlockedOn {
            db,
            deadline_ms,
            argv: Vec::new(),
            reblocked: true,
            rerun_on_timeout: false,
            timed_out: false,
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
    shard.blocking.register_postponed(client.shared.clone());
    client.shared.blocked.set(true);
    client.blocked = Some(BlockedOn {
        db: client.db,
        deadline_ms: Some(end_ms),
        argv: Vec::new(),
        reblocked: true,
        rerun_on_timeout: true,
        timed_out: false,
        stream_ids: Vec::new(),
        postponed: true,
    });
}

/// CLIENT UNBLOCK reached this blocked client: its wait ends as if it timed out, or with
/// Redis's `UNBLOCKED` error.
pub fn unblock_by_request(
    shard: &mut Shard,
    client: &mut Client,
    out: &mut Reply,
    how: crate::client::Unblock,
) {
    if client.blocked.is_none() {
        return;
    }
    match how {
        crate::client::Unblock::Timeout => time_out(shard, client, out),
        crate::client::Unblock::Error => {
            unblock(shard, client);
            cmd::reply_error(
                shard,
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
pub fn time_out(shard: &mut Shard, client: &mut Client, out: &mut Reply) {
    if client.blocked.as_ref().is_some_and(|b| b.postponed) {
        // The pause ended: the command runs now (it may be postponed or block again).
        let now = shard.now_ms();
        reprocess(shard, client, out, now);
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
        if reprocess(shard, client, out, now) {
            // The command must not block past its deadline; end the wait regardless.
            unblock(shard, client);
        }
        return;
    }
    // Logged as Redis logs a blocked command that timed out (`updateStatsOnUnblock`).
    if let Some(b) = client.blocked.as_ref() {
        let argv: Vec<&[u8]> = b.argv.iter().map(Vec::as_slice).collect();
        if let Ok(spec) = cmd::resolve(shard.table, &argv) {
            let now = shard.now_ms();
            cmd::log_slow(shard, client, spec, &argv, 0, now);
        }
    }
    unblock(shard, client);
    out.null_array();
}

/// Re-runs the blocked command after a wake. Returns whether it blocked again (the client
/// then keeps its registration and deadline); otherwise its reply is in `out` and the wait
/// is over. Re-runs are not counted again in command statistics.
pub fn reprocess(shard: &mut Shard, client: &mut Client, out: &mut Reply, now_ms: u64) -> bool {
    let Some(b) = client.blocked.as_mut() else {
        return false;
    };
    if b.postponed {
        let owned = std::mem::take(&mut b.argv);
        unblock(shard, client);
        let argv: Vec<&[u8]> = owned.iter().map(Vec::as_slice).collect();
        cmd::execute(shard, client, out, &argv, now_ms);
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
    match cmd::resolve(shard.table, &argv) {
        Ok(spec) => match spec.handler {
            Some(handler) => {
                ran = Some(spec);
                client.call_depth += 1;
                let result = {
                    let mut ctx = Ctx {
                        shard: &mut *shard,
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
                    if let Some(st) = shard.stats.commands.get_mut(spec.idx) {
                        st.failed_calls += 1;
                    }
                    cmd::reply_error(shard, out, &e);
                }
            }
            None => cmd::reply_error(shard, out, &CmdError::WrongArity(spec.meta.name.into())),
        },
        Err(e) => cmd::reply_error(shard, out, &e),
    }
    let again = client.blocked.as_ref().is_some_and(|b| b.reblocked);
    if let (false, Some(spec)) = (again, ran) {
        let usec = started.elapsed().as_micros() as u64;
        cmd::log_slow(shard, client, spec, &argv, usec, now_ms);
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

    fn shared(id: u64) -> Rc<ClientShared> {
        let a = "127.0.0.1:1".parse().unwrap();
        Rc::new(ClientShared::new(id, a, a, 0))
    }

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

    #[test]
    fn fifo_wake_skips_woken_clients() {
        let mut r = BlockRegistry::default();
        r.register(shared(1), 0, &[b"k", b"j"]);
        r.register(shared(2), 0, &[b"k"]);
        r.register(shared(3), 0, &[b"k", b"k"]);
        assert_eq!(r.len(), 3);
        assert_eq!(r.waiters(0, b"k"), vec![1, 2, 3]);
        assert_eq!(r.waiters(0, b"j"), vec![1]);
        assert_eq!(r.signal(1, b"k"), None, "other db");
        assert_eq!(r.signal(0, b"x"), None);
        assert_eq!(r.signal(0, b"k"), Some(1));
        assert!(r.is_ready(1));
        // A second write before client 1 ran wakes the next one in line.
        assert_eq!(r.signal(0, b"k"), Some(2));
        assert_eq!(r.signal(0, b"j"), None, "1 is already woken");
        // Client 1 re-ran and blocked again: it keeps its place.
        r.clear_ready(1);
        assert_eq!(r.waiters(0, b"k"), vec![1, 2, 3]);
        assert_eq!(r.signal(0, b"j"), Some(1));
        // Client 2 was served.
        assert!(r.unregister(2));
        assert!(!r.unregister(2));
        assert_eq!(r.waiters(0, b"k"), vec![1, 3]);
        assert_eq!(r.signal(0, b"k"), Some(3));
        assert_eq!(r.signal(0, b"k"), None);
    }

    struct T {
        shard: Shard,
        client: Client,
        out: Reply,
    }

    impl T {
        fn new() -> T {
            let now = crate::time::wall_ms();
            let mut shard = Shard::new(0, crate::config::Config::default(), cmd::table(), now);
            let a = "127.0.0.1:5000".parse().unwrap();
            let client = Client::new(shard.register_client(a, a, now));
            T {
                shard,
                client,
                out: Reply::new(),
            }
        }

        /// Runs `ctx.block` as a handler would, at call depth `depth`.
        fn block(&mut self, keys: &[&[u8]], deadline: Option<u64>, depth: u32) {
            let spec = cmd::resolve(self.shard.table, &[b"get", b"k"]).unwrap();
            self.client.call_depth = depth;
            let mut ctx = Ctx {
                shard: &mut self.shard,
                client: &mut self.client,
                out: &mut self.out,
                now_ms: 0,
                spec,
            };
            ctx.block(keys, deadline);
            self.client.call_depth = 0;
        }

        fn other(&mut self, args: &[&str]) -> String {
            let a = "127.0.0.1:5001".parse().unwrap();
            let now = crate::time::wall_ms();
            let mut c = Client::new(self.shard.register_client(a, a, now));
            let mut out = Reply::new();
            let argv: Vec<&[u8]> = args.iter().map(|x| x.as_bytes()).collect();
            cmd::execute(&mut self.shard, &mut c, &mut out, &argv, now);
            self.shard.unregister_client(c.id(), &c.dirty);
            String::from_utf8_lossy(&out.buf).into_owned()
        }
    }

    #[test]
    fn block_wake_by_write_then_reprocess() {
        let mut t = T::new();
        t.block(&[b"k", b"j"], Some(u64::MAX), 1);
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
        let again = reprocess(&mut t.shard, &mut t.client, &mut t.out, now);
        assert!(!again);
        assert_eq!(String::from_utf8_lossy(&t.out.buf), "$1\r\nv\r\n");
        assert_eq!(t.shard.blocked_count(), 0);
        assert!(t.client.blocked.is_none());
        assert!(!t.client.shared.blocked.get());
    }

    #[test]
    fn timeout_and_disconnect_and_exec() {
        let mut t = T::new();
        t.block(&[b"k"], Some(5), 1);
        // A re-run that blocks again keeps the original deadline.
        t.block(&[b"k"], Some(99), 1);
        assert_eq!(t.client.blocked.as_ref().unwrap().deadline_ms, Some(5));
        time_out(&mut t.shard, &mut t.client, &mut t.out);
        assert_eq!(String::from_utf8_lossy(&t.out.buf), "*-1\r\n");
        assert_eq!(t.shard.blocked_count(), 0);
        t.out.clear();
        t.out.proto = crate::resp::reply::Proto::Resp3;
        // Inside EXEC (depth 2) nothing blocks: the null array at once.
        t.block(&[b"k"], None, 2);
        assert_eq!(String::from_utf8_lossy(&t.out.buf), "_\r\n");
        assert_eq!(t.shard.blocked_count(), 0);
        // Disconnect forgets the registration.
        t.block(&[b"k"], None, 1);
        assert_eq!(t.shard.blocking.waiters(0, b"k"), vec![t.client.id()]);
        t.shard.unregister_client(t.client.id(), &t.client.dirty);
        assert_eq!(t.shard.blocked_count(), 0);
        assert!(t.shard.blocking.waiters(0, b"k").is_empty());
    }

    #[test]
    fn unregister_drops_empty_queues() {
        let mut r = BlockRegistry::default();
        r.register(shared(7), 2, &[b"a", b"b"]);
        assert!(r.contains(7));
        assert!(r.unregister(7));
        assert!(r.is_empty());
        assert!(r.keys.is_empty());
        assert_eq!(r.signal(2, b"a"), None);
    }
}
