//! Client-side caching (CLIENT TRACKING, default mode) of keys on another node of the site.
//!
//! A tracking client's read of another node's key travels over this thread's pooled link to
//! that shard's endpoint (`hop::forward`), so the other node would track the link, not the
//! client. Instead the read asks the other node to track it for this thread: the batch sends
//! `CLIENT TRACKING on REDIRECT <id> OPTIN` and `CLIENT CACHING yes` before each such read
//! (OPTIN: the link's other reads are not tracked), where `<id>` is this thread's own RESP3
//! link to that endpoint (`Remote::link`), opened by the first such read. Its pushes are the
//! other node's invalidations: each names keys, which this thread maps back to the clients
//! that read them through it (`Remote::readers`) and invalidates as a local write would
//! (`cmd::tracking::deliver`), once, as the other node forgets a key it invalidated. A null
//! invalidation (a flush there) or the loss of that link is a flush for every client that
//! read through it: a write it could not report may have happened.
//!
//! Not covered: BCAST prefixes and NOLOOP see this node's writes only (a BCAST client is
//! told of writes on its node's shards, a NOLOOP client of its own writes to another node's
//! keys), and reads inside a transaction or a script forwarded whole are not tracked.
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
        /// Key → the clients of this thread that read it there since its last invalidation.
        readers: HashMap<Vec<u8>, SmallVec<[u64; 2]>>,
        /// A read could not be remembered (`REMOTE_TRACKED_KEYS_MAX`): the next invalidation
        /// from there is a flush for everyone.
        overflowed: bool,
    },
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
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
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
                readers: HashMap::new(),
                overflowed: false,
            },
        );
        drop(remotes);
        tokio::task::spawn_local(invalidations(self.clone(), addr.to_string(), rx));
        Some(id)
    }

    /// Client `client` read `key` at `addr`, tracked there for this thread.
    pub fn remember(&self, addr: &str, key: &[u8], client: u64) {
        let mut remotes = self.remotes.borrow_mut();
        let Some(Remote::Ready {
            readers,
            overflowed,
            ..
        }) = remotes.get_mut(addr)
        else {
            return;
        };
        if let Some(ids) = readers.get_mut(key) {
            if !ids.contains(&client) {
                ids.push(client);
            }
            return;
        }
        if readers.len() >= REMOTE_TRACKED_KEYS_MAX {
            *overflowed = true;
            return;
        }
        let mut ids = SmallVec::new();
        ids.push(client);
        readers.insert(key.to_vec(), ids);
    }

    /// A flush for client `client`: a read of its could not be tracked.
    pub fn flush_client(&self, client: u64) {
        self.deliver(vec![(client, None)]);
    }

    /// An invalidation pushed by `addr`: `keys` changed there (None: everything, a flush).
    fn invalidated(&self, addr: &str, keys: Option<Vec<Vec<u8>>>) {
        let mut due: Vec<(u64, Option<Vec<u8>>)> = Vec::new();
        {
            let mut remotes = self.remotes.borrow_mut();
            let Some(Remote::Ready {
                readers,
                overflowed,
                ..
            }) = remotes.get_mut(addr)
            else {
                return;
            };
            match keys {
                Some(keys) if !*overflowed => {
                    for k in keys {
                        if let Some(ids) = readers.remove(&k) {
                            due.extend(ids.into_iter().map(|id| (id, Some(k.clone()))));
                        }
                    }
                }
                _ => {
                    due.extend(flush_all(readers));
                    *overflowed = false;
                }
            }
        }
        self.deliver(due);
    }

    /// The redirect link to `addr` broke: a flush for everyone who read through it.
    fn lost(&self, addr: &str) {
        let due = match self.remotes.borrow_mut().remove(addr) {
            Some(Remote::Ready { mut readers, .. }) => flush_all(&mut readers),
            _ => Vec::new(),
        };
        self.deliver(due);
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

/// Each client that read anything through it, once, for a flush; the table emptied.
fn flush_all(readers: &mut HashMap<Vec<u8>, SmallVec<[u64; 2]>>) -> Vec<(u64, Option<Vec<u8>>)> {
    let mut ids: Vec<u64> = readers.drain().flat_map(|(_, ids)| ids).collect();
    ids.sort_unstable();
    ids.dedup();
    ids.into_iter().map(|id| (id, None)).collect()
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
    mut rx: tokio::sync::mpsc::UnboundedReceiver<Vec<u8>>,
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
