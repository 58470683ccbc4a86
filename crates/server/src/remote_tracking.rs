//! Client-side caching (CLIENT TRACKING) of keys on another node of the site.
//!
//! Default mode. A tracking client's read of another node's key travels over this thread's
//! pooled link to that shard's endpoint (`hop::forward`), so the other node would track the
//! link, not the client. Instead the read asks the other node to track it for this thread:
//! the batch sends `CLIENT TRACKING on REDIRECT <id> OPTIN` and `CLIENT CACHING yes` before
//! each such read (OPTIN: the link's other reads are not tracked), where `<id>` is this
//! thread's own RESP3 link to that endpoint (`Remote::Ready`), opened by the first such read.
//! A transaction or a script run whole there is tracked the same way (`CLIENT CACHING yes`
//! before MULTI covers the transaction, as in Redis; a script's declared keys are
//! remembered). Its pushes are the other node's invalidations: each names keys, which this
//! thread maps back to the clients that read them through it (`Remote::readers`) and
//! invalidates as a local write would (`cmd::tracking::deliver`), once, as the other node
//! forgets a key it invalidated; readers of a key whose read is still in flight stay
//! readers (the invalidation may come from a write that ran before the read there). A null
//! invalidation (a flush there), the loss of that link or of the pooled link the reads went
//! over (the other node forgets what it tracked for it: `tracks_through`) is a flush for
//! every client that read through it: a write it could not report may have happened.
//!
//! NOLOOP. The other node sees this thread's link as the writer, not the client. A NOLOOP
//! client's write whose keys the command table names (not a script) runs with the link's
//! tracking switched to NOLOOP around it (`... OPTIN NOLOOP`, then `... OPTIN`), so that it
//! invalidates nothing read through that link there; this thread then tells the key's
//! other readers itself (`RemoteTracking::written`) and spares the writer, which stays a
//! reader: another client's write that crossed its own still reaches it, so nothing is
//! ever dropped that Redis would send (at worst an invalidation comes twice).
//!
//! BCAST. One thread of the process (`start_bcast`) registers the prefixes of the
//! process's BCAST clients on each other node, on a link of its own (`CLIENT TRACKING on
//! BCAST PREFIX ...`): the prefixes no other one covers (Redis refuses overlapping prefixes
//! on one client; a covered one adds nothing), at most `BCAST_REGISTERED_PREFIXES_MAX`,
//! past which it registers every key. Pushes on it go to the BCAST clients whose own
//! prefixes match, one message per prefix as for a local write. A change of the set
//! registers the new one on a new link first, then drains the old one (a PING's reply
//! follows the pushes it got) and closes it, so no write there goes unreported; clients
//! the old set did not cover get a flush, since a write there may have come between their
//! subscribing here and the registration there. The loss of the link is a flush for every
//! BCAST client. Other nodes' registration links are BCAST clients here too
//! (`Tracker::relay`): they are told of this node's writes, but their prefixes are not
//! registered elsewhere and other nodes' pushes are not relayed to them.
//!
//! Not covered: NOLOOP for a BCAST client's own writes on another node (the registration
//! link cannot tell who wrote: the client is told of them) and for a NOLOOP client's
//! scripts run there (told of their writes too). Reads that run there on a link of their
//! own (a transaction under WATCH, XREAD BLOCK: `Conn::flush_tracking`) are not tracked;
//! their client gets a flush after the reply, so it caches nothing it would not hear about.
//!
//! Each thread keeps its own (`Thread::remote_tracking`): no lock.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use hashbrown::HashMap;
use smallvec::SmallVec;

use crate::hop::ShardRc;
use crate::node::Node;
use crate::tracking::Invalid;

/// Keys a thread remembers per endpoint for its clients' reads there; past it, a read is
/// not tracked there (its client gets a flush when the next invalidation arrives from that
/// endpoint, so nothing cached goes stale).
pub const REMOTE_TRACKED_KEYS_MAX: usize = 1 << 20;

/// Invalidation pushes read off a redirect link and not yet handed to the clients; past it
/// the link's reading waits.
pub const PUSHES_QUEUED_MAX: usize = 1024;

/// Prefixes one process registers for its BCAST clients on another node; past it, it
/// registers the empty prefix (every key) and keeps what its clients' prefixes match.
pub const BCAST_REGISTERED_PREFIXES_MAX: usize = 256;

/// How often a read waits for another read's opening of the redirect link to finish.
const CONNECTING_POLL: std::time::Duration = std::time::Duration::from_millis(1);

/// What a thread knows of one endpoint it tracks reads on.
enum Remote {
    /// Its redirect link is being opened: reads meanwhile are not tracked there.
    Connecting,
    Ready {
        /// This thread's redirect link's client id at the endpoint.
        id: u64,
        /// Kept open: the endpoint forgets the link's redirections when it closes.
        _link: meridian_proxy::Link,
        readers: Readers,
        /// The ids of the pooled links (RESP2, RESP3) whose tracked reads a task watches
        /// (`tracks_through`; 0: none).
        watched: [u64; 2],
    },
}

/// Key → the clients of this thread that read it at one endpoint since its last
/// invalidation there.
#[derive(Debug, Default)]
struct Readers {
    keys: HashMap<Vec<u8>, SmallVec<[u64; 2]>>,
    /// Key → its tracked reads sent there and not answered yet. An invalidation of such a
    /// key may come from a write that ran there before the read (it travels on another
    /// link): its readers are told but kept, or a write after the read would find nobody
    /// here. At most one entry per key of a read in flight.
    reading: HashMap<Vec<u8>, u32>,
    /// A read could not be remembered (`keys_max`): the next invalidation from there is a
    /// flush for everyone.
    overflowed: bool,
}

impl Readers {
    /// Client `client` is about to read `key`; past `keys_max` keys it is not remembered.
    /// `answered` must follow once the read's reply is in.
    fn remember(&mut self, key: &[u8], client: u64, keys_max: usize) {
        match self.reading.get_mut(key) {
            Some(n) => *n += 1,
            None => {
                self.reading.insert(key.to_vec(), 1);
            }
        }
        if let Some(ids) = self.keys.get_mut(key) {
            if !ids.contains(&client) {
                ids.push(client);
            }
            return;
        }
        if self.keys.len() >= keys_max {
            self.overflowed = true;
            return;
        }
        let mut ids = SmallVec::new();
        ids.push(client);
        self.keys.insert(key.to_vec(), ids);
    }

    /// The read of `key` `remember` announced has its reply.
    fn answered(&mut self, key: &[u8]) {
        if let Some(n) = self.reading.get_mut(key) {
            *n -= 1;
            if *n == 0 {
                self.reading.remove(key);
            }
        }
    }

    /// Who gets what for an invalidation of `keys` (None: a flush): each (client, key), or
    /// (client, None) once per client for a flush, also after an overflow. Those keys are
    /// forgotten (all of them for a flush), but for readers of a key whose read is in flight
    /// (`reading`) and for `spare`, a NOLOOP client whose own write this is: it is not told,
    /// and stays a reader, as a write by someone else that crossed this one must still reach
    /// it (an invalidation it is then sent twice at worst).
    fn invalidate(
        &mut self,
        keys: Option<Vec<Vec<u8>>>,
        spare: Option<u64>,
    ) -> Vec<(u64, Option<Vec<u8>>)> {
        match keys {
            Some(keys) if !self.overflowed => {
                let mut due = Vec::new();
                for k in keys {
                    let Some(ids) = self.keys.get_mut(&k) else {
                        continue;
                    };
                    due.extend(
                        ids.iter()
                            .filter(|&&id| Some(id) != spare)
                            .map(|&id| (id, Some(k.clone()))),
                    );
                    if self.reading.contains_key(&k) {
                        continue;
                    }
                    match spare {
                        Some(s) if ids.contains(&s) => ids.retain(|id| *id == s),
                        _ => {
                            self.keys.remove(&k);
                        }
                    }
                }
                due
            }
            _ => {
                self.overflowed = false;
                let mut ids: Vec<u64> = self.keys.values().flatten().copied().collect();
                let reading = &self.reading;
                self.keys.retain(|k, _| reading.contains_key(k));
                ids.sort_unstable();
                ids.dedup();
                ids.into_iter().map(|id| (id, None)).collect()
            }
        }
    }
}

/// One thread's tracking of its clients' reads on other nodes.
pub struct RemoteTracking {
    node: Arc<Node>,
    shard: ShardRc,
    remotes: RefCell<HashMap<String, Remote>>,
}

impl std::fmt::Debug for RemoteTracking {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "RemoteTracking({} endpoints)",
            self.remotes.borrow().len()
        )
    }
}

impl RemoteTracking {
    pub fn new(node: Arc<Node>, shard: ShardRc) -> RemoteTracking {
        RemoteTracking {
            node,
            shard,
            remotes: RefCell::new(HashMap::new()),
        }
    }

    /// The client id of this thread's redirect link at `addr`, opening it if there is none
    /// (or waiting for another read's opening, within the connect limit). None when it
    /// cannot be opened: the read is then not tracked there, and its client gets a flush
    /// after its reply (`flush_client`), so it caches nothing it would not hear about.
    pub async fn redirect_id(
        self: &Rc<Self>,
        pool: &meridian_proxy::Pool,
        addr: &str,
    ) -> Option<u64> {
        let deadline = tokio::time::Instant::now() + pool.limits().connect;
        loop {
            match self.remotes.borrow().get(addr) {
                Some(Remote::Ready { id, .. }) => return Some(*id),
                Some(Remote::Connecting) => {}
                None => break,
            }
            if tokio::time::Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(CONNECTING_POLL).await;
        }
        self.remotes
            .borrow_mut()
            .insert(addr.to_string(), Remote::Connecting);
        let (tx, rx) = tokio::sync::mpsc::channel(PUSHES_QUEUED_MAX);
        let opened = match pool.dedicated_with_pushes(addr, tx).await {
            Ok(link) => {
                let mut req = meridian_proxy::Request::new();
                req.push(0, &[b"CLIENT", b"ID"]);
                let id = link
                    .call(&req, pool.limits().request)
                    .await
                    .ok()
                    .and_then(|r| r.first().and_then(|b| crate::resp::read::int(b, 0)))
                    .and_then(|id| u64::try_from(id).ok());
                id.map(|id| (id, link))
            }
            Err(_) => None,
        };
        let mut remotes = self.remotes.borrow_mut();
        let Some((id, link)) = opened else {
            remotes.remove(addr);
            return None;
        };
        remotes.insert(
            addr.to_string(),
            Remote::Ready {
                id,
                _link: link,
                readers: Readers::default(),
                watched: [0; 2],
            },
        );
        drop(remotes);
        tokio::task::spawn_local(invalidations(self.clone(), addr.to_string(), rx));
        Some(id)
    }

    /// Client `client` is about to read `key` at `addr`, tracked there for this thread;
    /// `answered` follows with the reply.
    pub fn remember(&self, addr: &str, key: &[u8], client: u64) {
        if let Some(Remote::Ready { readers, .. }) = self.remotes.borrow_mut().get_mut(addr) {
            readers.remember(key, client, REMOTE_TRACKED_KEYS_MAX);
        }
    }

    /// Tracked reads go to `addr` over the pooled link `link` (RESP3: `resp3`). The other
    /// node forgets what it tracked for a link that closes, so when this one breaks whoever
    /// read through it gets a flush (a task waits for it, once per link).
    pub fn tracks_through(self: &Rc<Self>, addr: &str, resp3: bool, link: &meridian_proxy::Link) {
        let id = link.id();
        {
            let mut remotes = self.remotes.borrow_mut();
            let Some(Remote::Ready { watched, .. }) = remotes.get_mut(addr) else {
                return;
            };
            let Some(slot) = watched.get_mut(usize::from(resp3)) else {
                return;
            };
            if *slot == id {
                return;
            }
            *slot = id;
        }
        let closed = link.closed();
        let (rt, addr) = (self.clone(), addr.to_string());
        tokio::task::spawn_local(async move {
            closed.await;
            let due = match rt.remotes.borrow_mut().get_mut(&addr) {
                Some(Remote::Ready {
                    readers, watched, ..
                }) => {
                    if let Some(slot) = watched.get_mut(usize::from(resp3)) {
                        if *slot == id {
                            *slot = 0;
                        }
                    }
                    readers.invalidate(None, None)
                }
                _ => Vec::new(),
            };
            rt.deliver(due);
        });
    }

    /// The reads of `keys` at `addr` that `remember` announced have their replies.
    pub fn answered(&self, addr: &str, keys: &[Vec<u8>]) {
        if let Some(Remote::Ready { readers, .. }) = self.remotes.borrow_mut().get_mut(addr) {
            for k in keys {
                readers.answered(k);
            }
        }
    }

    /// The client id of this thread's redirect link at `addr`, if it is open (nothing is
    /// tracked there otherwise).
    pub fn ready_id(&self, addr: &str) -> Option<u64> {
        match self.remotes.borrow().get(addr) {
            Some(Remote::Ready { id, .. }) => Some(*id),
            _ => None,
        }
    }

    /// NOLOOP client `writer` wrote `keys` at `addr` with this thread's link there in
    /// NOLOOP (so that the write invalidated nothing read through it): the other readers
    /// of those keys are told here, the writer is not and stays a reader (a write by
    /// someone else that crossed its own must still reach it).
    pub fn written(&self, addr: &str, keys: Vec<Vec<u8>>, writer: u64) {
        let due = match self.remotes.borrow_mut().get_mut(addr) {
            Some(Remote::Ready { readers, .. }) => readers.invalidate(Some(keys), Some(writer)),
            _ => return,
        };
        self.deliver(due);
    }

    /// A flush for client `client`: a read of its could not be tracked.
    pub fn flush_client(&self, client: u64) {
        self.deliver(vec![(client, None)]);
    }

    /// An invalidation pushed by `addr`: `keys` changed there (None: everything, a flush).
    fn invalidated(&self, addr: &str, keys: Option<Vec<Vec<u8>>>) {
        let due = match self.remotes.borrow_mut().get_mut(addr) {
            Some(Remote::Ready { readers, .. }) => readers.invalidate(keys, None),
            _ => return,
        };
        self.deliver(due);
    }

    /// The redirect link to `addr` broke: a flush for everyone who read through it.
    fn lost(&self, addr: &str) {
        let due = match self.remotes.borrow_mut().remove(addr) {
            Some(Remote::Ready { mut readers, .. }) => readers.invalidate(None, None),
            _ => Vec::new(),
        };
        self.deliver(due);
    }

    /// The BCAST subscriptions of this node's own clients (not those of other nodes'
    /// links: `Tracker::relay`), in prefix order.
    fn bcast_subscriptions(&self) -> Vec<(Vec<u8>, Vec<u64>)> {
        let mut subs = self.node.tracking.subscriptions();
        let trackers = crate::node::lock(&self.node.trackers);
        subs.retain_mut(|(_, ids)| {
            ids.retain(|id| trackers.get(id).is_some_and(|t| !t.relay));
            !ids.is_empty()
        });
        subs
    }

    /// A BCAST invalidation pushed by another node: `keys` changed there (None: a flush).
    /// Each of this process's BCAST clients is told of those its prefixes match, one
    /// message per prefix as for a local write; the writer is not known (0), so NOLOOP
    /// spares nobody here.
    fn bcast_invalidated(&self, keys: Option<Vec<Vec<u8>>>) {
        let subs = self.bcast_subscriptions();
        let Some(keys) = keys else {
            let mut ids: Vec<u64> = subs.into_iter().flat_map(|(_, ids)| ids).collect();
            ids.sort_unstable();
            ids.dedup();
            self.deliver(ids.into_iter().map(|id| (id, None)).collect());
            return;
        };
        let Ok(shard) = self.shard.try_borrow() else {
            return;
        };
        let now = shard.now_ms();
        for (prefix, ids) in subs {
            let matched: Vec<(&[u8], u64)> = keys
                .iter()
                .filter(|k| k.starts_with(&prefix))
                .map(|k| (k.as_slice(), 0))
                .collect();
            if matched.is_empty() {
                continue;
            }
            for id in ids {
                crate::cmd::tracking::deliver(
                    &self.node,
                    id,
                    Invalid::Keys(&matched),
                    &shard.config,
                    now,
                );
            }
        }
    }

    /// Closes a registration a new one replaced, once the invalidations it got before the
    /// new one held are handed out: a PING's reply comes after them. Returns the prefixes
    /// it covered, or None when that could not be told (its clients then need a flush).
    async fn bcast_drain(
        &self,
        mut old: Registered,
        limit: std::time::Duration,
    ) -> Option<Vec<Vec<u8>>> {
        let mut req = meridian_proxy::Request::new();
        req.push(0, &[b"PING"]);
        let answered = old.link.call(&req, limit).await.is_ok();
        while let Ok(p) = old.pushes.try_recv() {
            if let Some(keys) = parse_invalidation(&p) {
                self.bcast_invalidated(keys);
            }
        }
        old.link.close().await;
        answered.then_some(old.prefixes)
    }

    /// A flush for the BCAST clients whose prefixes `registered` (what another node had
    /// registered) does not cover: they may have cached keys of that node written before
    /// its new registration.
    fn bcast_flush_uncovered(&self, registered: &[Vec<u8>]) {
        let mut ids: Vec<u64> = self
            .bcast_subscriptions()
            .into_iter()
            .filter(|(p, _)| !registered.iter().any(|r| p.starts_with(r)))
            .flat_map(|(_, ids)| ids)
            .collect();
        ids.sort_unstable();
        ids.dedup();
        self.deliver(ids.into_iter().map(|id| (id, None)).collect());
    }

    fn deliver(&self, due: Vec<(u64, Option<Vec<u8>>)>) {
        if due.is_empty() {
            return;
        }
        let Ok(shard) = self.shard.try_borrow() else {
            return;
        };
        let now = shard.now_ms();
        for (id, key) in due {
            let what = match &key {
                Some(k) => Invalid::Key(k),
                None => Invalid::Flush,
            };
            crate::cmd::tracking::deliver(&self.node, id, what, &shard.config, now);
        }
    }
}

/// The prefixes to register on another node for this process's BCAST `prefixes` (in
/// order, distinct): those no other one covers, as Redis refuses overlapping prefixes on
/// one client (and the covered ones add nothing); past `max`, the empty prefix alone.
fn covering(prefixes: impl Iterator<Item = Vec<u8>>, max: usize) -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = Vec::new();
    for p in prefixes {
        // In order, a prefix comes right before the ones it covers.
        if out.last().is_some_and(|l| p.starts_with(l)) {
            continue;
        }
        out.push(p);
    }
    if out.len() > max {
        return vec![Vec::new()];
    }
    out
}

/// Starts, on this thread, the registration of this process's BCAST prefixes on each of
/// the site's other nodes (`nodes`: an endpoint of each; the subscriptions there are
/// node-wide). One thread of the process runs it.
pub fn start_bcast(rt: Rc<RemoteTracking>, pool: Rc<meridian_proxy::Pool>, nodes: Vec<String>) {
    for addr in nodes {
        tokio::task::spawn_local(bcast_link(rt.clone(), pool.clone(), addr));
    }
}

/// A registration of BCAST prefixes on another node: its link, which gets that node's
/// invalidations as pushes.
struct Registered {
    prefixes: Vec<Vec<u8>>,
    link: meridian_proxy::Link,
    pushes: tokio::sync::mpsc::Receiver<Vec<u8>>,
}

/// Opens a link to `addr` that tracks `prefixes` in BCAST mode (the empty prefix: every
/// key).
async fn register(
    pool: &meridian_proxy::Pool,
    addr: &str,
    prefixes: &[Vec<u8>],
) -> Option<Registered> {
    let (tx, pushes) = tokio::sync::mpsc::channel(PUSHES_QUEUED_MAX);
    let link = pool.dedicated_with_pushes(addr, tx).await.ok()?;
    let mut argv: Vec<&[u8]> = vec![b"CLIENT", b"TRACKING", b"on", b"BCAST"];
    for p in prefixes.iter().filter(|p| !p.is_empty()) {
        argv.push(b"PREFIX");
        argv.push(p);
    }
    let mut req = meridian_proxy::Request::new();
    req.push(0, &argv);
    let ok = link
        .call(&req, pool.limits().request)
        .await
        .ok()
        .is_some_and(|r| r.first().is_some_and(|b| b.starts_with(b"+")));
    if !ok {
        link.close().await;
        return None;
    }
    Some(Registered {
        prefixes: prefixes.to_vec(),
        link,
        pushes,
    })
}

/// Keeps this process's BCAST prefixes registered on the node at `addr` while there are
/// any, and hands that node's invalidations to the clients. A new set is registered on a
/// new link before the old one closes (no write there goes unreported meanwhile); then the
/// clients the old one did not cover get a flush, as may a write there have come between
/// their subscribing here and the registration there. A lost link is a flush for every
/// BCAST client, and is opened again after the endpoint's back-off.
async fn bcast_link(rt: Rc<RemoteTracking>, pool: Rc<meridian_proxy::Pool>, addr: String) {
    enum Event {
        Changed,
        Push(Vec<u8>),
        Lost,
    }
    let mut changes = rt.node.tracking.watch_prefixes();
    let mut current: Option<Registered> = None;
    loop {
        changes.borrow_and_update();
        let wanted = covering(
            rt.bcast_subscriptions().into_iter().map(|(p, _)| p),
            BCAST_REGISTERED_PREFIXES_MAX,
        );
        if wanted.is_empty() {
            if let Some(old) = current.take() {
                old.link.close().await;
            }
        } else if current.as_ref().map(|c| &c.prefixes) != Some(&wanted) {
            match register(&pool, &addr, &wanted).await {
                Some(new) => match current.replace(new) {
                    Some(old) => {
                        let drained = rt.bcast_drain(old, pool.limits().request).await;
                        rt.bcast_flush_uncovered(drained.as_deref().unwrap_or_default());
                    }
                    None => rt.bcast_flush_uncovered(&[]),
                },
                None => {
                    tokio::time::sleep(pool.limits().down_backoff).await;
                    continue;
                }
            }
        }
        let event = match current.as_mut() {
            None => match changes.changed().await {
                Ok(()) => Event::Changed,
                Err(_) => return,
            },
            Some(c) => tokio::select! {
                r = changes.changed() => match r {
                    Ok(()) => Event::Changed,
                    Err(_) => return,
                },
                p = c.pushes.recv() => match p {
                    Some(p) => Event::Push(p),
                    None => Event::Lost,
                },
            },
        };
        match event {
            Event::Changed => {}
            Event::Push(p) => {
                if let Some(keys) = parse_invalidation(&p) {
                    rt.bcast_invalidated(keys);
                }
            }
            Event::Lost => {
                current = None;
                rt.bcast_flush_uncovered(&[]);
                tokio::time::sleep(pool.limits().down_backoff).await;
            }
        }
    }
}

/// The keys of an invalidation push (`>2 invalidate <keys>`); `Some(None)`: a null (flush);
/// None: another push.
fn parse_invalidation(push: &[u8]) -> Option<Option<Vec<Vec<u8>>>> {
    use crate::resp::read;
    let (items, _) = read::elements(push, 0)?;
    let (&(kind_at, _), &(keys_at, _)) = (items.first()?, items.get(1)?);
    if read::bulk(push, kind_at)? != b"invalidate" {
        return None;
    }
    let Some((keys, _)) = read::elements(push, keys_at) else {
        // `_` or `*-1`: a flush.
        return Some(None);
    };
    Some(Some(
        keys.iter()
            .filter_map(|&(at, _)| read::bulk(push, at).map(<[u8]>::to_vec))
            .collect(),
    ))
}

/// Reads the redirect link's pushes until it breaks.
async fn invalidations(
    rt: Rc<RemoteTracking>,
    addr: String,
    mut rx: tokio::sync::mpsc::Receiver<Vec<u8>>,
) {
    while let Some(push) = rx.recv().await {
        if let Some(keys) = parse_invalidation(&push) {
            rt.invalidated(&addr, keys);
        }
    }
    rt.lost(&addr);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A read whose reply is in (`remember` then `answered`).
    fn read(r: &mut Readers, key: &[u8], client: u64, keys_max: usize) {
        r.remember(key, client, keys_max);
        r.answered(key);
    }

    #[test]
    fn readers_are_told_once_and_flushed_past_their_limit() {
        let mut r = Readers::default();
        read(&mut r, b"a", 1, 2);
        read(&mut r, b"a", 2, 2);
        read(&mut r, b"a", 1, 2);
        read(&mut r, b"b", 1, 2);
        // At the limit: both keys remembered.
        assert_eq!(
            r.invalidate(Some(vec![b"a".to_vec()]), None),
            vec![(1, Some(b"a".to_vec())), (2, Some(b"a".to_vec()))]
        );
        assert_eq!(r.invalidate(Some(vec![b"a".to_vec()]), None), vec![]);
        read(&mut r, b"c", 3, 2);
        // One past it: not remembered, so the next invalidation is a flush for everyone.
        read(&mut r, b"d", 4, 2);
        assert!(r.overflowed);
        assert_eq!(
            r.invalidate(Some(vec![b"zz".to_vec()]), None),
            vec![(1, None), (3, None)]
        );
        assert!(!r.overflowed && r.keys.is_empty() && r.reading.is_empty());
        read(&mut r, b"e", 5, 2);
        assert_eq!(r.invalidate(None, None), vec![(5, None)]);
    }

    #[test]
    fn readers_of_a_read_in_flight_and_a_noloop_writer_stay() {
        let mut r = Readers::default();
        let a = || Some(vec![b"a".to_vec()]);
        // An invalidation while the read is in flight tells the reader and keeps it: the
        // write may have run before the read there.
        r.remember(b"a", 1, 8);
        assert_eq!(r.invalidate(a(), None), vec![(1, Some(b"a".to_vec()))]);
        r.answered(b"a");
        assert_eq!(r.invalidate(a(), None), vec![(1, Some(b"a".to_vec()))]);
        assert_eq!(r.invalidate(a(), None), vec![]);
        // Also through a flush.
        r.remember(b"a", 1, 8);
        assert_eq!(r.invalidate(None, None), vec![(1, None)]);
        r.answered(b"a");
        assert_eq!(r.invalidate(None, None), vec![(1, None)]);
        assert_eq!(r.invalidate(None, None), vec![]);
        // A NOLOOP writer's own write: the others are told and forgotten, the writer is
        // neither; a later invalidation (someone else's write) reaches it.
        read(&mut r, b"a", 1, 8);
        read(&mut r, b"a", 2, 8);
        assert_eq!(r.invalidate(a(), Some(1)), vec![(2, Some(b"a".to_vec()))]);
        assert_eq!(r.invalidate(a(), None), vec![(1, Some(b"a".to_vec()))]);
        assert_eq!(r.invalidate(a(), None), vec![]);
        // A NOLOOP writer that did not read the key: the readers go.
        read(&mut r, b"a", 2, 8);
        assert_eq!(r.invalidate(a(), Some(1)), vec![(2, Some(b"a".to_vec()))]);
        assert!(r.keys.is_empty());
    }

    #[test]
    fn covering_prefixes_do_not_overlap_and_are_bounded() {
        let v = |a: &[&str]| a.iter().map(|s| s.as_bytes().to_vec()).collect::<Vec<_>>();
        let c = |a: &[&str], max| covering(v(a).into_iter(), max);
        assert_eq!(
            c(&["a", "ab", "abc", "b", "ba", "c"], 8),
            v(&["a", "b", "c"])
        );
        assert_eq!(c(&["", "a", "b"], 8), v(&[""]));
        assert_eq!(c(&["ab", "ac"], 8), v(&["ab", "ac"]));
        assert_eq!(c(&[], 8), v(&[]));
        // At the limit, the prefixes; one past it, every key.
        assert_eq!(c(&["a", "b", "c"], 3), v(&["a", "b", "c"]));
        assert_eq!(c(&["a", "b", "c", "d"], 3), v(&[""]));
        assert_eq!(c(&["a", "ab", "b", "c"], 3), v(&["a", "b", "c"]));
    }

    #[test]
    fn invalidation_pushes_are_read() {
        assert_eq!(
            parse_invalidation(b">2\r\n$10\r\ninvalidate\r\n*2\r\n$1\r\na\r\n$2\r\nbc\r\n"),
            Some(Some(vec![b"a".to_vec(), b"bc".to_vec()]))
        );
        assert_eq!(
            parse_invalidation(b">2\r\n$10\r\ninvalidate\r\n_\r\n"),
            Some(None)
        );
        assert_eq!(
            parse_invalidation(b">3\r\n$7\r\nmessage\r\n$1\r\nc\r\n$1\r\nm\r\n"),
            None
        );
        assert_eq!(parse_invalidation(b">2\r\n$10\r\ninvali"), None);
    }
}
