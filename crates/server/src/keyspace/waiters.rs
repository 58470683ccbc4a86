//! Who waits on keys: WATCH flags and clients blocked in BLPOP and the like.
//!
//! Both live with the keyspace of the shard that owns the keys, because a write there (local
//! or from another site) is what sets a flag or wakes a waiter; the clients themselves may
//! live on any thread, so a flag is an atomic and a waiter is woken through `Wake`.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use hashbrown::{Equivalent, HashMap};

/// A WATCHing client's flag, set by whichever shard sees a write to a key it watches.
#[derive(Debug, Clone, Default)]
pub struct WatchFlag(Arc<AtomicBool>);

impl WatchFlag {
    pub fn get(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }

    pub fn set(&self, v: bool) {
        self.0.store(v, Ordering::Release);
    }

    /// Whether both name one client's flag.
    pub fn same(&self, other: &WatchFlag) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

/// One client's WATCH of one key on the shard that owns it: the client's flag, and whether
/// the key was already logically expired (not yet deleted) when it was watched, Redis 7.0's
/// `watchedKey.expired`: such a key expiring changes nothing, and its deletion clears the
/// mark (a deleted key is no longer an expired one).
#[derive(Debug, Clone)]
pub struct Watcher {
    pub flag: WatchFlag,
    pub expired: bool,
}

/// Something a write can wake: a blocked client's connection, on whatever thread it lives.
pub trait Wake: Send + Sync + std::fmt::Debug {
    fn wake(&self);
}

/// A (db, key) looked up without allocating: hashes like `(usize, Vec<u8>)`.
#[derive(Hash)]
pub(crate) struct KeyRef<'a>(pub usize, pub &'a [u8]);

impl Equivalent<(usize, Vec<u8>)> for KeyRef<'_> {
    fn equivalent(&self, key: &(usize, Vec<u8>)) -> bool {
        self.0 == key.0 && self.1 == key.1.as_slice()
    }
}

#[derive(Debug)]
struct Waiter {
    wake: Arc<dyn Wake>,
    keys: Vec<(usize, Vec<u8>)>,
    /// Woken and not yet re-run: further writes wake the next waiter instead.
    ready: bool,
    /// Woken by every write to its keys, not only in its turn (stream readers).
    wake_all: bool,
    /// Postponed by CLIENT PAUSE (it waits on no key).
    postponed: bool,
    /// Not counted in `len` (INFO `blocked_clients`): the registrations of a client blocked
    /// on keys of several shards but one, where it counts (`register_quiet`).
    quiet: bool,
    /// When its command's input arrived (`register`).
    read_ns: u64,
}

/// A shard's blocked clients: per (db, key) the waiting client ids in FIFO order.
#[derive(Debug, Default)]
pub struct BlockRegistry {
    keys: HashMap<(usize, Vec<u8>), VecDeque<u64>>,
    clients: HashMap<u64, Waiter>,
    /// Clients woken by writes, in the order they were woken (per key, FIFO), not yet taken
    /// by whoever serves them on this shard (`pop_ready`). May name clients since gone.
    ready: VecDeque<u64>,
    /// Registered clients with `quiet` set.
    // Invariant: equals the number of `clients` whose `quiet` is set.
    quiet: usize,
}

impl BlockRegistry {
    /// Number of blocked clients (INFO `blocked_clients`).
    pub fn len(&self) -> usize {
        self.clients.len() - self.quiet
    }

    pub fn is_empty(&self) -> bool {
        self.clients.is_empty()
    }

    /// Whether `id` is registered.
    pub fn contains(&self, id: u64) -> bool {
        self.clients.contains_key(&id)
    }

    /// Registers client `id` on `keys` of `db` (duplicates count once), in each key's queue
    /// behind every client whose command arrived no later than `read_ns` (its connection's
    /// `ClientShared::read_ns`) and ahead of those that arrived after it: a command read on
    /// one thread may reach this shard after one that arrived later on another. A client
    /// already registered is registered again from scratch.
    pub fn register(
        &mut self,
        id: u64,
        wake: Arc<dyn Wake>,
        db: usize,
        keys: &[&[u8]],
        read_ns: u64,
    ) {
        self.register_waiter(id, wake, db, keys, false, read_ns);
    }

    /// Registers client `id` on `keys` of `db` to be woken by every write to them, not in a
    /// turn, and served by no one here: its connection tries its keys itself when woken (a
    /// pop over keys of several shards). Counted in `len` only when `counted` (on one shard
    /// of the several).
    pub fn register_waking(
        &mut self,
        id: u64,
        wake: Arc<dyn Wake>,
        db: usize,
        keys: &[&[u8]],
        counted: bool,
    ) {
        self.register_waiter(id, wake, db, keys, false, u64::MAX);
        if let Some(w) = self.clients.get_mut(&id) {
            w.wake_all = true;
            if !counted {
                w.quiet = true;
                self.quiet += 1;
            }
        }
    }

    /// Registers a client postponed by CLIENT PAUSE: it waits on no key and is woken by
    /// `wake_postponed`.
    pub fn register_postponed(&mut self, id: u64, wake: Arc<dyn Wake>) {
        self.register_waiter(id, wake, 0, &[], true, u64::MAX);
    }

    fn register_waiter(
        &mut self,
        id: u64,
        wake: Arc<dyn Wake>,
        db: usize,
        keys: &[&[u8]],
        postponed: bool,
        read_ns: u64,
    ) {
        self.unregister(id);
        let mut mine: Vec<(usize, Vec<u8>)> = Vec::with_capacity(keys.len());
        for k in keys {
            if mine.iter().any(|(_, m)| m.as_slice() == *k) {
                continue;
            }
            mine.push((db, k.to_vec()));
            let q = self.keys.entry((db, k.to_vec())).or_default();
            // Mostly at the back: only a registration whose input arrived later (ties: the
            // younger connection, as ids follow accept order) goes behind this one.
            let mut at = q.len();
            while at > 0
                && q.get(at - 1)
                    .and_then(|c| self.clients.get(c).map(|w| (w.read_ns, *c)))
                    .is_some_and(|other| other > (read_ns, id))
            {
                at -= 1;
            }
            q.insert(at, id);
        }
        self.clients.insert(
            id,
            Waiter {
                wake,
                keys: mine,
                ready: false,
                wake_all: false,
                postponed,
                quiet: false,
                read_ns,
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
        if w.quiet {
            self.quiet = self.quiet.saturating_sub(1);
        }
        if self.clients.is_empty() {
            self.ready.clear();
        }
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
                w.wake.wake();
                self.ready.push_back(*id);
                first = first.or(Some(*id));
                turn_taken |= !w.wake_all;
            }
        }
        first
    }

    /// Whether a write woke some client that was not served since (`pop_ready`).
    pub fn has_ready(&self) -> bool {
        !self.ready.is_empty()
    }

    /// The next client woken by a write, in wake order (Redis's ready keys, served per key in
    /// FIFO order). The caller checks that it is still registered and ready.
    pub fn pop_ready(&mut self) -> Option<u64> {
        self.ready.pop_front()
    }

    /// Wakes every client postponed by CLIENT PAUSE (the pause ended).
    pub fn wake_postponed(&mut self) {
        for w in self
            .clients
            .values_mut()
            .filter(|w| w.postponed && !w.ready)
        {
            w.ready = true;
            w.wake.wake();
        }
    }

    /// Whether `id` waits because of CLIENT PAUSE (CLIENT UNBLOCK leaves those alone).
    pub fn is_postponed(&self, id: u64) -> bool {
        self.clients.get(&id).is_some_and(|w| w.postponed)
    }

    /// The keys `id` waits on.
    pub fn keys_of(&self, id: u64) -> Vec<(usize, Vec<u8>)> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Default)]
    struct Woken(std::sync::atomic::AtomicUsize);

    impl Wake for Woken {
        fn wake(&self) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn w() -> Arc<dyn Wake> {
        Arc::new(Woken::default())
    }

    #[test]
    fn fifo_wake_skips_woken_clients() {
        let mut r = BlockRegistry::default();
        r.register(1, w(), 0, &[b"k", b"j"], 10);
        r.register(2, w(), 0, &[b"k"], 20);
        r.register(3, w(), 0, &[b"k", b"k"], 30);
        assert_eq!(r.len(), 3);
        assert_eq!(r.waiters(0, b"k"), vec![1, 2, 3]);
        assert_eq!(r.waiters(0, b"j"), vec![1]);
        assert_eq!(r.signal(1, b"k"), None, "other db");
        assert_eq!(r.signal(0, b"x"), None);
        assert_eq!(r.signal(0, b"k"), Some(1));
        assert!(r.is_ready(1));
        assert!(r.has_ready());
        assert_eq!(r.pop_ready(), Some(1));
        assert!(!r.has_ready());
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

    /// A command that arrived before others that blocked first (it came from another
    /// thread) takes its place ahead of them, on each of its keys; one that arrived at the
    /// same moment goes behind the older connection's.
    #[test]
    fn queues_follow_the_order_commands_arrived() {
        let mut r = BlockRegistry::default();
        r.register(2, w(), 0, &[b"k"], 20);
        r.register(4, w(), 0, &[b"k", b"j"], 40);
        r.register(1, w(), 0, &[b"j", b"k"], 10);
        r.register(3, w(), 0, &[b"k"], 30);
        r.register(5, w(), 0, &[b"k"], 30);
        r.register(0, w(), 0, &[b"k"], 30);
        assert_eq!(r.waiters(0, b"k"), vec![1, 2, 0, 3, 5, 4]);
        assert_eq!(r.waiters(0, b"j"), vec![1, 4]);
        assert_eq!(r.signal(0, b"k"), Some(1));
        assert_eq!(r.signal(0, b"k"), Some(2));
        // Waking registrations go at the back, whatever arrived when.
        r.register_waking(6, w(), 0, &[b"j"], true);
        r.register(7, w(), 0, &[b"j"], 0);
        assert_eq!(r.waiters(0, b"j"), vec![7, 1, 4, 6]);
    }

    #[test]
    fn waking_registrations_wake_on_every_write_and_count_once() {
        let mut r = BlockRegistry::default();
        r.register(1, w(), 0, &[b"k"], 10);
        r.register_waking(2, w(), 0, &[b"k", b"j"], false);
        r.register_waking(3, w(), 0, &[b"k"], true);
        assert_eq!(r.len(), 2, "the quiet registration is not counted");
        // A write wakes the one waiter in turn and both waking registrations.
        assert_eq!(r.signal(0, b"k"), Some(1));
        assert!(r.is_ready(2) && r.is_ready(3));
        assert_eq!(r.signal(0, b"j"), None, "2 is woken already");
        // Registered again (after its try), 2 is woken by the next write.
        r.register_waking(2, w(), 0, &[b"j"], false);
        assert_eq!(r.len(), 2);
        assert_eq!(r.signal(0, b"j"), Some(2));
        assert!(r.unregister(2));
        assert_eq!(r.len(), 2);
        assert!(r.unregister(1) && r.unregister(3));
        assert_eq!(r.len(), 0);
        assert!(r.is_empty());
    }

    #[test]
    fn unregister_drops_empty_queues() {
        let mut r = BlockRegistry::default();
        r.register(7, w(), 2, &[b"a", b"b"], 10);
        assert!(r.contains(7));
        r.signal(2, b"a");
        assert!(r.has_ready());
        assert!(r.unregister(7));
        assert!(r.is_empty());
        assert!(!r.has_ready(), "no client left: nothing to serve");
        assert!(r.keys.is_empty());
        assert_eq!(r.signal(2, b"a"), None);
    }

    #[test]
    fn watch_flags_are_shared_between_clones() {
        let f = WatchFlag::default();
        let g = f.clone();
        g.set(true);
        assert!(f.get());
        assert!(f.same(&g));
        assert!(!f.same(&WatchFlag::default()));
    }
}
