//! Client-side caching, the shard's part (Redis 7.0's `tracking.c`): which clients read
//! which keys of this shard, the BCAST prefixes every shard of the process shares, and the
//! invalidations a change of a key sends.
//!
//! Data side: a shard knows clients only by id. What it sends goes through its
//! `InvalidateHook` (installed by the server, which owns clients and their mailboxes), so
//! local writes, expiry, eviction and ops applied from other sites all invalidate from
//! `Shard::settle` without importing the command layer. With no tracked key in this shard
//! and no BCAST prefix in the process, a change costs one emptiness test and one relaxed
//! load of a counter that changes only when a BCAST client comes or goes.
//!
//! Redis's table is keyed by key name only (databases are not told apart), and so is this
//! one. Each shard holds the entries of the keys it owns; `tracking-table-max-keys` bounds
//! the sum over the process's shards (`Shared::keys_n`).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use hashbrown::{HashMap, HashSet};
use smallvec::SmallVec;

use crate::config::Config;
use crate::shard::Shard;

/// Keys changed under BCAST prefixes held until the end of the command that changed them
/// (one message per prefix, as Redis's per-event-loop broadcast): a command changing more
/// sends what it holds and goes on.
pub const BCAST_CHANGED_KEYS_MAX: usize = 4096;
/// Invalidations of keys the running command's own client tracks, held until its reply is
/// written (Redis's `tracking_pending_keys`); past this many the rest are dropped in favour
/// of one flush-style (null) invalidation, which tells the client to drop everything.
pub const SELF_PENDING_KEYS_MAX: usize = 4096;
/// Keys of the tracking table invalidated per pass when the process is over
/// `tracking-table-max-keys`, times the number of passes that ended still over it plus one
/// (Redis's `trackingLimitUsedSlots` effort).
pub const LIMIT_EFFORT_KEYS: usize = 100;
/// The most keys one such pass invalidates, however many passes came before.
pub const LIMIT_EFFORT_KEYS_MAX: usize = 100_000;
/// Clients whose ids a key's entry keeps in a small inline list before it becomes a set.
const IDS_INLINE_MAX: usize = 8;

/// What an invalidation tells a client.
#[derive(Debug, Clone, Copy)]
pub enum Invalid<'a> {
    /// Default mode: this key changed.
    Key(&'a [u8]),
    /// BCAST: these keys changed under one of the client's prefixes, each with the id of the
    /// client whose command changed it last (0: none: expiry, eviction, another site).
    Keys(&'a [(&'a [u8], u64)]),
    /// The database was flushed: drop everything (a null invalidation).
    Flush,
}

/// Sends an invalidation to client `id` (wherever it is): (id, what, this shard's settings
/// (output limits), now in ms).
pub type Deliver = dyn Fn(u64, Invalid<'_>, &Config, u64);

/// Where a shard's invalidations go (installed by the server).
pub struct InvalidateHook(pub Box<Deliver>);

impl std::fmt::Debug for InvalidateHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("InvalidateHook")
    }
}

/// What the shards of one process share: the BCAST subscriptions and the number of keys in
/// every shard's table.
#[derive(Debug)]
pub struct Shared {
    /// Prefix → ids of the BCAST clients subscribed to it.
    prefixes: Mutex<BTreeMap<Vec<u8>, Vec<u64>>>,
    /// Number of prefixes, read without the lock on every change of a key.
    prefixes_n: AtomicUsize,
    /// Keys in the tracking tables of every shard.
    keys_n: AtomicU64,
    /// Bumped when a prefix gains its first client or loses its last: the registration of
    /// the prefixes on the site's other nodes (`remote_tracking`) follows it.
    prefixes_changed: tokio::sync::watch::Sender<u64>,
}

impl Default for Shared {
    fn default() -> Shared {
        Shared {
            prefixes: Mutex::default(),
            prefixes_n: AtomicUsize::default(),
            keys_n: AtomicU64::default(),
            prefixes_changed: tokio::sync::watch::channel(0).0,
        }
    }
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<Vec<u8>, Vec<u64>>> {
        self.prefixes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Subscribes BCAST client `id` to `prefix`.
    pub fn subscribe(&self, id: u64, prefix: &[u8]) {
        let mut p = self.lock();
        let before = p.len();
        let ids = p.entry(prefix.to_vec()).or_default();
        if !ids.contains(&id) {
            ids.push(id);
        }
        self.prefixes_n.store(p.len(), Ordering::Relaxed);
        if p.len() != before {
            self.prefixes_changed.send_modify(|n| *n += 1);
        }
    }

    /// Removes client `id` from `prefixes`; a prefix left without clients goes.
    pub fn unsubscribe(&self, id: u64, prefixes: &[Vec<u8>]) {
        let mut p = self.lock();
        let before = p.len();
        for prefix in prefixes {
            if let Some(ids) = p.get_mut(prefix) {
                ids.retain(|&i| i != id);
                if ids.is_empty() {
                    p.remove(prefix);
                }
            }
        }
        self.prefixes_n.store(p.len(), Ordering::Relaxed);
        if p.len() != before {
            self.prefixes_changed.send_modify(|n| *n += 1);
        }
    }

    /// Every prefix with the ids of its BCAST clients, in prefix order.
    pub fn subscriptions(&self) -> Vec<(Vec<u8>, Vec<u64>)> {
        self.lock()
            .iter()
            .map(|(p, ids)| (p.clone(), ids.clone()))
            .collect()
    }

    /// Changes when the set of prefixes changes (`prefixes_changed`).
    pub fn watch_prefixes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.prefixes_changed.subscribe()
    }

    /// Prefixes some BCAST client is subscribed to (INFO `tracking_total_prefixes`).
    pub fn prefixes(&self) -> usize {
        self.prefixes_n.load(Ordering::Relaxed)
    }

    /// Keys tracked over every shard.
    pub fn keys(&self) -> u64 {
        self.keys_n.load(Ordering::Relaxed)
    }

    /// Takes one key off the process's count if it is over `max`: the caller then removes
    /// one of its own. Two shards never both take the last key over the limit.
    fn reserve_eviction(&self, max: u64) -> bool {
        let mut cur = self.keys_n.load(Ordering::Relaxed);
        loop {
            if cur <= max {
                return false;
            }
            match self.keys_n.compare_exchange_weak(
                cur,
                cur - 1,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(now) => cur = now,
            }
        }
    }
}

/// The ids of the clients that read one key.
#[derive(Debug)]
enum Ids {
    Few(SmallVec<[u64; 2]>),
    Many(HashSet<u64>),
}

impl Ids {
    /// Adds `id`; whether it was new.
    fn insert(&mut self, id: u64) -> bool {
        match self {
            Ids::Few(v) => {
                if v.contains(&id) {
                    return false;
                }
                if v.len() < IDS_INLINE_MAX {
                    v.push(id);
                } else {
                    let mut set: HashSet<u64> = v.iter().copied().collect();
                    set.insert(id);
                    *self = Ids::Many(set);
                }
                true
            }
            Ids::Many(s) => s.insert(id),
        }
    }

    fn len(&self) -> usize {
        match self {
            Ids::Few(v) => v.len(),
            Ids::Many(s) => s.len(),
        }
    }

    fn into_vec(self) -> Vec<u64> {
        match self {
            Ids::Few(v) => v.into_vec(),
            Ids::Many(s) => s.into_iter().collect(),
        }
    }
}

/// A self-invalidation held until the reply of the command that caused it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pending {
    Key(Vec<u8>),
    Flush,
}

/// One shard's tracking state.
#[derive(Debug)]
pub struct Tracking {
    /// Key → clients that read it since it last changed (default mode).
    keys: HashMap<Vec<u8>, Ids>,
    /// Client ids over every key (INFO `tracking_total_items`).
    items: u64,
    /// What the process's shards share (prefixes, the key count).
    pub shared: Arc<Shared>,
    /// The client whose command runs on this shard now (0: none) and whether it is in NOLOOP
    /// mode (its own changes do not invalidate its keys).
    current: u64,
    current_noloop: bool,
    /// Set while a change is nobody's (expiry, eviction): BCAST NOLOOP clients hear of it
    /// even when their command caused it.
    anonymous: bool,
    /// Set while a flush removes keys: the flush sends one null invalidation instead.
    muted: bool,
    /// Invalidations for `current`, sent after its reply.
    pending: Vec<Pending>,
    /// Keys changed under some BCAST prefix since the last broadcast, with who changed them.
    changed: Vec<(Vec<u8>, u64)>,
    /// A script run by the current command called a read-only command: a tracking caller
    /// remembers the script's declared keys (Redis's `call` for scripts).
    pub script_read: bool,
    /// Passes of the table's limit that ended still over it (Redis's `timeout_counter`).
    limit_passes: usize,
    pub hook: Option<InvalidateHook>,
}

impl Default for Tracking {
    fn default() -> Self {
        Tracking::new(Arc::default())
    }
}

impl Tracking {
    pub fn new(shared: Arc<Shared>) -> Tracking {
        Tracking {
            keys: HashMap::new(),
            items: 0,
            shared,
            current: 0,
            current_noloop: false,
            anonymous: false,
            muted: false,
            pending: Vec::new(),
            changed: Vec::new(),
            script_read: false,
            limit_passes: 0,
            hook: None,
        }
    }

    /// Whether a change of a key may concern anyone: some key of this shard is tracked, or
    /// some BCAST client exists.
    #[inline]
    pub fn active(&self) -> bool {
        !self.keys.is_empty() || self.shared.prefixes() > 0
    }

    /// Keys in this shard's table (INFO `tracking_total_keys`).
    pub fn keys(&self) -> usize {
        self.keys.len()
    }

    /// Client ids over this shard's keys (INFO `tracking_total_items`).
    pub fn items(&self) -> u64 {
        self.items
    }

    /// Remembers that client `id` read `key` (Redis's `trackingRememberKeys`).
    pub fn remember(&mut self, id: u64, key: &[u8]) {
        let ids = match self.keys.get_mut(key) {
            Some(ids) => ids,
            None => {
                self.shared.keys_n.fetch_add(1, Ordering::Relaxed);
                self.keys
                    .entry(key.to_vec())
                    .or_insert_with(|| Ids::Few(SmallVec::new()))
            }
        };
        if ids.insert(id) {
            self.items += 1;
        }
    }

    /// The client whose command starts running here (0 when it ends).
    #[inline]
    pub fn set_current(&mut self, id: u64, noloop: bool) {
        self.current = id;
        self.current_noloop = noloop;
        self.script_read = false;
    }

    /// Takes the invalidations held for the current client.
    pub fn take_pending(&mut self) -> Vec<Pending> {
        std::mem::take(&mut self.pending)
    }

    /// Whether invalidations are held for the current client.
    #[inline]
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    fn hold(&mut self, p: Pending) {
        if self.pending.len() < SELF_PENDING_KEYS_MAX {
            self.pending.push(p);
        } else if self.pending.last() != Some(&Pending::Flush) {
            self.pending.push(Pending::Flush);
        }
    }

    /// Drops every entry of the table (a flush: the clients get a null invalidation).
    fn clear(&mut self) {
        let n = self.keys.len() as u64;
        self.keys.clear();
        self.items = 0;
        self.shared.keys_n.fetch_sub(n, Ordering::Relaxed);
    }
}

impl Shard {
    /// A key of this shard changed (Redis's `trackingInvalidateKey`): every client that read
    /// it is told, once, and forgotten; BCAST clients whose prefix it matches hear of it at
    /// the end of the command (or at once when no command runs).
    pub fn tracking_key_changed(&mut self, key: &[u8]) {
        let t = &mut self.tracking;
        if t.muted {
            return;
        }
        if t.shared.prefixes() > 0 {
            let who = if t.anonymous { 0 } else { t.current };
            t.changed.push((key.to_vec(), who));
            if t.current == 0 || t.changed.len() >= BCAST_CHANGED_KEYS_MAX {
                self.tracking_broadcast();
            }
        }
        let t = &mut self.tracking;
        let Some(ids) = t.keys.remove(key) else {
            return;
        };
        t.items = t.items.saturating_sub(ids.len() as u64);
        t.shared.keys_n.fetch_sub(1, Ordering::Relaxed);
        // NOLOOP spares a client its own writes, not the expiry or eviction its command
        // set off: another node's thread reads for several clients over one link, and
        // a key one of them cached that expires on another's read must reach it.
        let (current, noloop) = (t.current, t.current_noloop && !t.anonymous);
        for id in ids.into_vec() {
            if id == current {
                if !noloop {
                    self.tracking.hold(Pending::Key(key.to_vec()));
                }
            } else if let Some(hook) = &self.tracking.hook {
                (hook.0)(id, Invalid::Key(key), &self.config, self.now_ms());
            }
        }
    }

    /// Sends the BCAST invalidations of the keys changed since the last call: per prefix,
    /// one message to each of its clients (Redis's `trackingBroadcastInvalidationMessages`).
    pub fn tracking_broadcast(&mut self) {
        if self.tracking.changed.is_empty() {
            return;
        }
        let changed = std::mem::take(&mut self.tracking.changed);
        // A key changed twice is listed once, with its last writer, in key order (a rax).
        let mut unique: BTreeMap<&[u8], u64> = BTreeMap::new();
        for (k, who) in &changed {
            unique.insert(k.as_slice(), *who);
        }
        let subs: Vec<(Vec<u8>, Vec<u64>)> = self
            .tracking
            .shared
            .lock()
            .iter()
            .map(|(p, ids)| (p.clone(), ids.clone()))
            .collect();
        let Some(hook) = &self.tracking.hook else {
            return;
        };
        let now_ms = self.now_ms();
        for (prefix, ids) in subs {
            let keys: Vec<(&[u8], u64)> = unique
                .iter()
                .filter(|(k, _)| k.starts_with(&prefix))
                .map(|(k, w)| (*k, *w))
                .collect();
            if keys.is_empty() {
                continue;
            }
            for id in ids {
                (hook.0)(id, Invalid::Keys(&keys), &self.config, now_ms);
            }
        }
    }

    /// Runs `f` with changes counted as nobody's (expiry, eviction).
    pub fn tracking_anonymous<T>(&mut self, f: impl FnOnce(&mut Shard) -> T) -> T {
        let saved = std::mem::replace(&mut self.tracking.anonymous, true);
        let r = f(self);
        self.tracking.anonymous = saved;
        r
    }

    /// A flush of this shard's keys: the table is dropped and the keys' removals invalidate
    /// nothing one by one (Redis's `trackingInvalidateKeysOnFlush` frees the table; the
    /// null invalidation to every tracking client is the command layer's, sent once).
    pub fn tracking_flush<T>(&mut self, f: impl FnOnce(&mut Shard) -> T) -> T {
        self.tracking.clear();
        let saved = std::mem::replace(&mut self.tracking.muted, true);
        let r = f(self);
        self.tracking.muted = saved;
        r
    }

    /// Holds a null invalidation for the current client (its own flush).
    pub fn tracking_hold_flush(&mut self) {
        self.tracking.hold(Pending::Flush);
    }

    /// Invalidates keys of this shard while the process tracks more than
    /// `tracking-table-max-keys` (Redis's `trackingLimitUsedSlots`): up to an effort that
    /// grows with each pass that ended still over the limit. Cheap when this shard tracks
    /// nothing or the process is under the limit.
    pub fn tracking_limit(&mut self) {
        let max = self.config.tracking_table_max_keys;
        if max == 0 {
            return;
        }
        if self.tracking.keys.is_empty() || self.tracking.shared.keys() <= max {
            self.tracking.limit_passes = 0;
            return;
        }
        let now_ms = self.now_ms();
        let effort = LIMIT_EFFORT_KEYS
            .saturating_mul(self.tracking.limit_passes + 1)
            .min(LIMIT_EFFORT_KEYS_MAX);
        let victims: Vec<Vec<u8>> = self.tracking.keys.keys().take(effort).cloned().collect();
        for key in victims {
            if !self.tracking.shared.reserve_eviction(max) {
                self.tracking.limit_passes = 0;
                return;
            }
            let Some(ids) = self.tracking.keys.remove(&key) else {
                // Taken off the count above: put it back.
                self.tracking.shared.keys_n.fetch_add(1, Ordering::Relaxed);
                continue;
            };
            self.tracking.items = self.tracking.items.saturating_sub(ids.len() as u64);
            // The client whose command is about to run gets its own before that command's
            // reply (Redis sends these before the command runs): held, for the caller to
            // write ahead of the reply (`cmd::tracking::flush_pending`).
            let current = self.tracking.current;
            let mut own = false;
            if let Some(hook) = &self.tracking.hook {
                for id in ids.into_vec() {
                    if id != 0 && id == current {
                        own = true;
                    } else {
                        (hook.0)(id, Invalid::Key(&key), &self.config, now_ms);
                    }
                }
            }
            if own {
                self.tracking.hold(Pending::Key(key));
            }
        }
        if self.tracking.shared.keys() > max {
            self.tracking.limit_passes += 1;
        } else {
            self.tracking.limit_passes = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::rc::Rc;

    type Log = Rc<RefCell<Vec<(u64, String)>>>;

    fn shard_with_log() -> (Shard, Log) {
        let mut s = Shard::new(0, Config::default(), 0);
        let log: Log = Rc::default();
        let l = log.clone();
        s.tracking.hook = Some(InvalidateHook(Box::new(move |id, what, _, _| {
            let text = match what {
                Invalid::Key(k) => String::from_utf8_lossy(k).into_owned(),
                Invalid::Keys(ks) => ks
                    .iter()
                    .map(|(k, w)| format!("{}@{w}", String::from_utf8_lossy(k)))
                    .collect::<Vec<_>>()
                    .join(","),
                Invalid::Flush => "<flush>".to_string(),
            };
            l.borrow_mut().push((id, text));
        })));
        (s, log)
    }

    #[test]
    fn a_change_invalidates_each_reader_once() {
        let (mut s, log) = shard_with_log();
        s.tracking.remember(7, b"a");
        s.tracking.remember(7, b"a");
        s.tracking.remember(8, b"a");
        assert_eq!((s.tracking.keys(), s.tracking.items()), (1, 2));
        s.tracking_key_changed(b"a");
        s.tracking_key_changed(b"a");
        let mut got = log.borrow().clone();
        got.sort();
        assert_eq!(got, vec![(7, "a".into()), (8, "a".into())]);
        assert_eq!((s.tracking.keys(), s.tracking.items()), (0, 0));
        assert_eq!(s.tracking.shared.keys(), 0);
    }

    #[test]
    fn the_current_client_waits_for_its_reply_unless_noloop() {
        let (mut s, log) = shard_with_log();
        s.tracking.remember(7, b"a");
        s.tracking.remember(7, b"b");
        s.tracking.set_current(7, false);
        s.tracking_key_changed(b"a");
        assert!(log.borrow().is_empty());
        assert_eq!(s.tracking.take_pending(), vec![Pending::Key(b"a".to_vec())]);
        s.tracking.set_current(7, true);
        s.tracking_key_changed(b"b");
        assert!(s.tracking.take_pending().is_empty());
        assert!(log.borrow().is_empty());
        // An expiry (or eviction) its command set off is not its own write: held for it.
        s.tracking.remember(7, b"c");
        s.tracking_anonymous(|s| s.tracking_key_changed(b"c"));
        assert_eq!(s.tracking.take_pending(), vec![Pending::Key(b"c".to_vec())]);
        assert!(log.borrow().is_empty());
    }

    /// The table's limit frees keys before the current client's command runs: that
    /// client's own invalidations are held for the caller to write ahead of the reply
    /// (Redis sends them before the command), the others go at once.
    #[test]
    fn the_limit_holds_the_current_clients_invalidations() {
        let (mut s, log) = shard_with_log();
        s.config.tracking_table_max_keys = 1;
        s.tracking.remember(7, b"a");
        s.tracking.remember(8, b"a");
        s.tracking.remember(7, b"b");
        s.tracking.set_current(7, false);
        s.tracking_limit();
        assert_eq!(s.tracking.shared.keys(), 1);
        let pending = s.tracking.take_pending();
        assert_eq!(pending.len(), 1, "{pending:?}");
        let freed = match pending.first() {
            Some(Pending::Key(k)) => k.clone(),
            other => panic!("{other:?}"),
        };
        let others: Vec<(u64, String)> = log.borrow().clone();
        if freed == b"a" {
            assert_eq!(others, vec![(8, "a".to_string())]);
        } else {
            assert!(others.is_empty(), "{others:?}");
        }
    }

    #[test]
    fn pending_is_bounded_by_a_flush() {
        let (mut s, _log) = shard_with_log();
        s.tracking.set_current(7, false);
        for i in 0..SELF_PENDING_KEYS_MAX + 10 {
            let k = format!("k{i}");
            s.tracking.remember(7, k.as_bytes());
            s.tracking_key_changed(k.as_bytes());
        }
        let p = s.tracking.take_pending();
        assert_eq!(p.len(), SELF_PENDING_KEYS_MAX + 1);
        assert_eq!(p.last(), Some(&Pending::Flush));
    }

    #[test]
    fn bcast_groups_by_prefix_and_names_the_writer() {
        let (mut s, log) = shard_with_log();
        s.tracking.shared.subscribe(9, b"a:");
        s.tracking.shared.subscribe(9, b"b:");
        s.tracking.set_current(5, false);
        for k in ["a:1", "a:2", "b:1", "c:1", "a:1"] {
            s.tracking_key_changed(k.as_bytes());
        }
        assert!(log.borrow().is_empty());
        s.tracking_broadcast();
        assert_eq!(
            log.borrow().clone(),
            vec![(9, "a:1@5,a:2@5".into()), (9, "b:1@5".into())]
        );
        s.tracking
            .shared
            .unsubscribe(9, &[b"a:".to_vec(), b"b:".to_vec()]);
        assert_eq!(s.tracking.shared.prefixes(), 0);
        assert!(!s.tracking.active());
    }

    #[test]
    fn bcast_keys_held_up_to_their_limit() {
        let (mut s, log) = shard_with_log();
        s.tracking.shared.subscribe(9, b"");
        s.tracking.set_current(5, false);
        for i in 0..BCAST_CHANGED_KEYS_MAX - 1 {
            s.tracking_key_changed(format!("k{i}").as_bytes());
        }
        assert!(log.borrow().is_empty());
        // The limit-th key sends what is held, in one message.
        s.tracking_key_changed(b"last");
        assert_eq!(log.borrow().len(), 1);
        let n = log.borrow()[0].1.split(',').count();
        assert_eq!(n, BCAST_CHANGED_KEYS_MAX);
        // One past it starts a new batch.
        s.tracking_key_changed(b"next");
        assert_eq!(log.borrow().len(), 1);
        s.tracking_broadcast();
        assert_eq!(log.borrow().len(), 2);
    }

    #[test]
    fn many_readers_of_one_key_each_get_one_invalidation() {
        let (mut s, log) = shard_with_log();
        for id in 1..=IDS_INLINE_MAX as u64 + 1 {
            s.tracking.remember(id, b"hot");
            s.tracking.remember(id, b"hot");
        }
        assert_eq!(s.tracking.items(), IDS_INLINE_MAX as u64 + 1);
        s.tracking_key_changed(b"hot");
        let mut ids: Vec<u64> = log.borrow().iter().map(|(id, _)| *id).collect();
        ids.sort_unstable();
        assert_eq!(ids, (1..=IDS_INLINE_MAX as u64 + 1).collect::<Vec<_>>());
    }

    #[test]
    fn the_limit_keeps_exactly_max_keys() {
        let (mut s, log) = shard_with_log();
        for i in 0..250 {
            s.tracking.remember(3, format!("k{i}").as_bytes());
        }
        s.config.tracking_table_max_keys = 1;
        for _ in 0..10 {
            s.tracking_limit();
        }
        assert_eq!(s.tracking.keys(), 1);
        assert_eq!(s.tracking.shared.keys(), 1);
        assert_eq!(log.borrow().len(), 249);
    }

    #[test]
    fn a_flush_drops_the_table_silently() {
        let (mut s, log) = shard_with_log();
        s.tracking.remember(3, b"x");
        s.tracking_flush(|s| s.tracking_key_changed(b"x"));
        assert!(log.borrow().is_empty());
        assert_eq!(s.tracking.keys(), 0);
    }
}
