//! One pipelined connection to a shard endpoint of another node.
//!
//! Callers on one thread share it: each `call` writes its commands (after a SELECT when the
//! database differs from the link's) under the write lock, so the bytes of one call are
//! contiguous and in the order of the FIFO of pending calls; a reader task frames the
//! replies (`reply::frame`) and hands each call its own. A call that waits longer than the
//! request limit gives up (`ProxyError::Timeout`); its replies, when they come, are dropped
//! and the link goes on. A broken link fails every call in flight (`ProxyError::Lost`) and
//! is replaced by the next call.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::{Rc, Weak};
use std::time::Duration;

use bytes::{Buf as _, BytesMut};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::oneshot;

use crate::ProxyError;
use crate::reply;

/// Commands for one endpoint, each with the database it runs in.
#[derive(Debug, Default, Clone)]
pub struct Request {
    /// (database, encoded command, whether its reply is returned).
    items: Vec<(usize, Vec<u8>, bool)>,
}

/// Encodes one command as a RESP array of bulk strings.
pub fn encode(out: &mut Vec<u8>, argv: &[&[u8]]) {
    out.push(b'*');
    out.extend_from_slice(argv.len().to_string().as_bytes());
    out.extend_from_slice(b"\r\n");
    for a in argv {
        out.push(b'$');
        out.extend_from_slice(a.len().to_string().as_bytes());
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
}

impl Request {
    pub fn new() -> Request {
        Request::default()
    }

    /// Appends `argv`, to run in database `db`.
    pub fn push(&mut self, db: usize, argv: &[&[u8]]) {
        self.push_inner(db, argv, true);
    }

    /// Appends `argv`, whose reply is dropped (MULTI and the +QUEUED of a transaction).
    pub fn push_unanswered(&mut self, db: usize, argv: &[&[u8]]) {
        self.push_inner(db, argv, false);
    }

    fn push_inner(&mut self, db: usize, argv: &[&[u8]], keep: bool) {
        let mut bytes = Vec::with_capacity(argv.iter().map(|a| a.len() + 16).sum::<usize>() + 8);
        encode(&mut bytes, argv);
        self.items.push((db, bytes, keep));
    }

    /// Commands whose replies are returned.
    pub fn len(&self) -> usize {
        self.items.iter().filter(|i| i.2).count()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
}

/// A call waiting for its replies: which replies it keeps (false: a SELECT the link added).
struct Pending {
    keep: Vec<bool>,
    got: usize,
    replies: Vec<Vec<u8>>,
    tx: oneshot::Sender<Result<Vec<Vec<u8>>, ProxyError>>,
}

struct Inner {
    addr: String,
    writer: tokio::sync::Mutex<OwnedWriteHalf>,
    pending: RefCell<VecDeque<Pending>>,
    /// Why the link is unusable, once it is.
    dead: RefCell<Option<ProxyError>>,
    /// The database the endpoint has selected for this link (in write order).
    db: Cell<usize>,
    /// Where RESP3 pushes go (`Link::connect_with_pushes`); without it a push is a reply
    /// nobody asked for.
    pushes: Option<tokio::sync::mpsc::Sender<Vec<u8>>>,
    /// Set once the link is dead (`Link::closed`).
    closed: tokio::sync::watch::Sender<bool>,
    /// Tells this thread's links apart (`Link::id`).
    id: u64,
}

thread_local! {
    /// The id of the next link this thread opens.
    static NEXT_LINK_ID: Cell<u64> = const { Cell::new(1) };
}

/// A pipelined connection (cheap to clone: one connection).
#[derive(Clone)]
pub struct Link {
    inner: Rc<Inner>,
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Link({})", self.inner.addr)
    }
}

/// Most bytes of replies buffered before they are framed (a reply larger than the read
/// buffer grows it up to `reply::BULK_BYTES_MAX`).
pub const READ_CHUNK_BYTES: usize = 64 * 1024;

impl Link {
    /// Connects to `addr` within `connect`, sends `handshake` (each reply must not be an
    /// error, else `Refused`), and starts the reader task (on the current `LocalSet`).
    pub async fn connect(
        addr: &str,
        connect: Duration,
        handshake: &[Vec<Vec<u8>>],
    ) -> Result<Link, ProxyError> {
        Link::connect_inner(addr, connect, handshake, None).await
    }

    /// `connect`, and every RESP3 push the endpoint sends (after a `HELLO 3` in the
    /// handshake: invalidations of client-side caching, say) goes to `pushes` rather than
    /// to a call, waiting while its queue is full. The sender is dropped when the link
    /// breaks.
    pub async fn connect_with_pushes(
        addr: &str,
        connect: Duration,
        handshake: &[Vec<Vec<u8>>],
        pushes: tokio::sync::mpsc::Sender<Vec<u8>>,
    ) -> Result<Link, ProxyError> {
        Link::connect_inner(addr, connect, handshake, Some(pushes)).await
    }

    async fn connect_inner(
        addr: &str,
        connect: Duration,
        handshake: &[Vec<Vec<u8>>],
        pushes: Option<tokio::sync::mpsc::Sender<Vec<u8>>>,
    ) -> Result<Link, ProxyError> {
        let down = |why: String| ProxyError::Down {
            addr: addr.to_string(),
            why,
        };
        let stream = match tokio::time::timeout(connect, TcpStream::connect(addr)).await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => return Err(down(e.to_string())),
            Err(_) => {
                return Err(down(format!(
                    "connect timed out after {} ms",
                    connect.as_millis()
                )));
            }
        };
        let _ = stream.set_nodelay(true);
        let (mut rd, mut wr) = stream.into_split();
        // The handshake, answered before the link is shared.
        let mut buf = BytesMut::with_capacity(4096);
        for argv in handshake {
            let args: Vec<&[u8]> = argv.iter().map(Vec::as_slice).collect();
            let mut bytes = Vec::new();
            encode(&mut bytes, &args);
            wr.write_all(&bytes)
                .await
                .map_err(|e| down(e.to_string()))?;
            let reply = tokio::time::timeout(connect, read_one(&mut rd, &mut buf))
                .await
                .map_err(|_| down("no answer to the handshake".to_string()))?
                .map_err(|e| down(e.to_string()))?;
            if reply.first() == Some(&b'-') {
                let text = String::from_utf8_lossy(reply.get(1..).unwrap_or_default())
                    .trim_end()
                    .to_string();
                return Err(ProxyError::Refused {
                    addr: addr.to_string(),
                    why: text,
                });
            }
        }
        let inner = Rc::new(Inner {
            addr: addr.to_string(),
            writer: tokio::sync::Mutex::new(wr),
            pending: RefCell::new(VecDeque::new()),
            dead: RefCell::new(None),
            db: Cell::new(0),
            pushes,
            closed: tokio::sync::watch::channel(false).0,
            id: NEXT_LINK_ID.with(|n| {
                let id = n.get();
                n.set(id + 1);
                id
            }),
        });
        tokio::task::spawn_local(read_loop(Rc::downgrade(&inner), rd, buf));
        Ok(Link { inner })
    }

    pub fn addr(&self) -> &str {
        &self.inner.addr
    }

    /// An id of this connection, never another link's of this thread.
    pub fn id(&self) -> u64 {
        self.inner.id
    }

    /// Completes once the link is dead (broken, closed, or every `Link` of it dropped);
    /// waiting does not keep it open.
    pub fn closed(&self) -> impl std::future::Future<Output = ()> + 'static {
        let mut rx = self.inner.closed.subscribe();
        async move {
            let _ = rx.wait_for(|dead| *dead).await;
        }
    }

    /// Whether the link broke (a new one must be made).
    pub fn is_dead(&self) -> bool {
        self.inner.dead.borrow().is_some()
    }

    /// Closes the link's sending side now: the endpoint sees the end of the connection and
    /// closes it (forgetting what it held for it, such as its tracking), which ends the
    /// reading here. Calls after it fail. Dropping the last `Link` of it does the same.
    pub async fn close(&self) {
        let mut w = self.inner.writer.lock().await;
        let _ = w.shutdown().await;
    }

    /// Sends `req` and returns its replies, in order, within `timeout`.
    pub async fn call(&self, req: &Request, timeout: Duration) -> Result<Vec<Vec<u8>>, ProxyError> {
        if let Some(e) = self.inner.dead.borrow().clone() {
            return Err(e);
        }
        if req.items.is_empty() {
            return Ok(Vec::new());
        }
        let (tx, rx) = oneshot::channel();
        {
            let mut w = self.inner.writer.lock().await;
            if let Some(e) = self.inner.dead.borrow().clone() {
                return Err(e);
            }
            let mut bytes = Vec::new();
            let mut keep = Vec::with_capacity(req.items.len());
            for (db, cmd, k) in &req.items {
                if *db != self.inner.db.get() {
                    let n = db.to_string();
                    encode(&mut bytes, &[b"SELECT", n.as_bytes()]);
                    keep.push(false);
                    self.inner.db.set(*db);
                }
                bytes.extend_from_slice(cmd);
                keep.push(*k);
            }
            self.inner.pending.borrow_mut().push_back(Pending {
                replies: Vec::with_capacity(req.items.len()),
                keep,
                got: 0,
                tx,
            });
            if let Err(e) = w.write_all(&bytes).await {
                let err = ProxyError::Lost {
                    addr: self.inner.addr.clone(),
                    why: e.to_string(),
                };
                fail_all(&self.inner, err.clone());
                return Err(err);
            }
        }
        match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(r)) => r,
            Ok(Err(_)) => Err(ProxyError::Lost {
                addr: self.inner.addr.clone(),
                why: "reader ended".to_string(),
            }),
            Err(_) => Err(ProxyError::Timeout {
                addr: self.inner.addr.clone(),
                ms: timeout.as_millis() as u64,
            }),
        }
    }
}

/// Reads one complete reply (the handshake's).
async fn read_one(rd: &mut OwnedReadHalf, buf: &mut BytesMut) -> Result<Vec<u8>, String> {
    loop {
        match reply::frame(buf) {
            Ok(Some(n)) => {
                let r = buf.get(..n).unwrap_or_default().to_vec();
                buf.advance(n);
                return Ok(r);
            }
            Ok(None) => {}
            Err(e) => return Err(e.to_string()),
        }
        buf.reserve(READ_CHUNK_BYTES);
        match rd.read_buf(buf).await {
            Ok(0) => return Err("closed".to_string()),
            Ok(_) => {}
            Err(e) => return Err(e.to_string()),
        }
    }
}

fn fail_all(inner: &Inner, e: ProxyError) {
    *inner.dead.borrow_mut() = Some(e.clone());
    inner.closed.send_replace(true);
    for p in inner.pending.borrow_mut().drain(..) {
        let _ = p.tx.send(Err(e.clone()));
    }
}

/// Reads the link's replies and pushes until it breaks, or until every `Link` of it is
/// dropped: it holds the link weakly, so that the last drop closes the sending side (the
/// endpoint then closes the connection, which ends the reading here).
async fn read_loop(weak: Weak<Inner>, mut rd: OwnedReadHalf, mut buf: BytesMut) {
    let err = loop {
        let Some(inner) = weak.upgrade() else {
            return;
        };
        loop {
            match reply::frame(&buf) {
                Ok(Some(n)) => {
                    let bytes = buf.get(..n).unwrap_or_default().to_vec();
                    buf.advance(n);
                    match &inner.pushes {
                        // A full queue holds up this link's reading (its owner is behind).
                        Some(tx) if bytes.first() == Some(&b'>') => {
                            let _ = tx.send(bytes).await;
                        }
                        _ => deliver(&inner, bytes),
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    fail_all(
                        &inner,
                        ProxyError::Protocol {
                            addr: inner.addr.clone(),
                            why: e.to_string(),
                        },
                    );
                    return;
                }
            }
        }
        drop(inner);
        buf.reserve(READ_CHUNK_BYTES);
        match rd.read_buf(&mut buf).await {
            Ok(0) => break "closed by the node".to_string(),
            Ok(_) => {}
            Err(e) => break e.to_string(),
        }
    };
    let Some(inner) = weak.upgrade() else {
        return;
    };
    fail_all(
        &inner,
        ProxyError::Lost {
            addr: inner.addr.clone(),
            why: err,
        },
    );
}

/// One reply: to the oldest pending call.
fn deliver(inner: &Inner, bytes: Vec<u8>) {
    let mut pending = inner.pending.borrow_mut();
    let Some(p) = pending.front_mut() else {
        // A reply nobody asked for: the stream is out of step.
        drop(pending);
        fail_all(
            inner,
            ProxyError::Protocol {
                addr: inner.addr.clone(),
                why: "a reply with no request".to_string(),
            },
        );
        return;
    };
    if p.keep.get(p.got).copied().unwrap_or(false) {
        p.replies.push(bytes);
    }
    p.got += 1;
    if p.got >= p.keep.len() {
        if let Some(done) = pending.pop_front() {
            let _ = done.tx.send(Ok(done.replies));
        }
    }
}
