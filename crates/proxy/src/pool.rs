//! A thread's links, by endpoint and protocol, and which endpoints are down.

use std::cell::RefCell;
use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::ProxyError;
use crate::link::{Link, Request};

/// How long a link may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// To connect and answer the handshake.
    pub connect: Duration,
    /// To answer one call.
    pub request: Duration,
    /// After a failed connect, calls to that endpoint fail at once for this long.
    pub down_backoff: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            connect: Duration::from_millis(500),
            request: Duration::from_millis(1000),
            down_backoff: Duration::from_millis(1000),
        }
    }
}

/// A thread's pool of links.
#[derive(Debug)]
pub struct Pool {
    limits: Limits,
    /// Commands every new link sends first (e.g. the site's link handshake); a RESP3 link
    /// sends `HELLO 3` before them.
    handshake: Vec<Vec<Vec<u8>>>,
    links: RefCell<HashMap<(String, bool), Link>>,
    down_until: RefCell<HashMap<String, (Instant, ProxyError)>>,
}

impl Pool {
    pub fn new(limits: Limits, handshake: Vec<Vec<Vec<u8>>>) -> Pool {
        Pool {
            limits,
            handshake,
            links: RefCell::new(HashMap::new()),
            down_until: RefCell::new(HashMap::new()),
        }
    }

    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// The link to `addr` for replies in RESP3 (`resp3`) or RESP2: the live one, or a new
    /// one. Fails at once while `addr` is marked down.
    pub async fn link(&self, addr: &str, resp3: bool) -> Result<Link, ProxyError> {
        let key = (addr.to_string(), resp3);
        if let Some(l) = self.links.borrow().get(&key) {
            if !l.is_dead() {
                return Ok(l.clone());
            }
        }
        if let Some((until, e)) = self.down_until.borrow().get(addr) {
            if Instant::now() < *until {
                return Err(e.clone());
            }
        }
        let mut handshake = Vec::with_capacity(self.handshake.len() + 1);
        if resp3 {
            handshake.push(vec![b"HELLO".to_vec(), b"3".to_vec()]);
        }
        handshake.extend(self.handshake.iter().cloned());
        match Link::connect(addr, self.limits.connect, &handshake).await {
            Ok(l) => {
                self.down_until.borrow_mut().remove(addr);
                self.links.borrow_mut().insert(key, l.clone());
                Ok(l)
            }
            Err(e) => {
                if matches!(e, ProxyError::Down { .. }) {
                    self.down_until.borrow_mut().insert(
                        addr.to_string(),
                        (Instant::now() + self.limits.down_backoff, e.clone()),
                    );
                }
                Err(e)
            }
        }
    }

    /// A new link to `addr` of its own (not pooled), for a command that may wait long
    /// (a blocking pop): other calls must not queue behind it.
    /// A RESP3 link of its own to `addr` whose pushes go to `pushes`
    /// (`Link::connect_with_pushes`).
    pub async fn dedicated_with_pushes(
        &self,
        addr: &str,
        pushes: tokio::sync::mpsc::Sender<Vec<u8>>,
    ) -> Result<Link, ProxyError> {
        self.dedicated_inner(addr, true, Some(pushes)).await
    }

    pub async fn dedicated(&self, addr: &str, resp3: bool) -> Result<Link, ProxyError> {
        self.dedicated_inner(addr, resp3, None).await
    }

    async fn dedicated_inner(
        &self,
        addr: &str,
        resp3: bool,
        pushes: Option<tokio::sync::mpsc::Sender<Vec<u8>>>,
    ) -> Result<Link, ProxyError> {
        if let Some((until, e)) = self.down_until.borrow().get(addr) {
            if Instant::now() < *until {
                return Err(e.clone());
            }
        }
        let mut handshake = Vec::with_capacity(self.handshake.len() + 1);
        if resp3 {
            handshake.push(vec![b"HELLO".to_vec(), b"3".to_vec()]);
        }
        handshake.extend(self.handshake.iter().cloned());
        match pushes {
            Some(p) => Link::connect_with_pushes(addr, self.limits.connect, &handshake, p).await,
            None => Link::connect(addr, self.limits.connect, &handshake).await,
        }
    }

    /// Sends `req` to `addr` and returns its replies in order.
    pub async fn call(
        &self,
        addr: &str,
        resp3: bool,
        req: &Request,
    ) -> Result<Vec<Vec<u8>>, ProxyError> {
        let link = self.link(addr, resp3).await?;
        let r = link.call(req, self.limits.request).await;
        if let Err(ProxyError::Lost { .. } | ProxyError::Protocol { .. }) = &r {
            self.links.borrow_mut().remove(&(addr.to_string(), resp3));
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A one-thread runtime with a LocalSet, as the server's threads have.
    fn run<F: std::future::Future>(f: F) -> F::Output {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        tokio::task::LocalSet::new().block_on(&rt, f)
    }

    /// A fake endpoint: answers `+OK` to the handshake, then echoes each command's first
    /// argument as a bulk string, after `delay`.
    async fn fake(listener: tokio::net::TcpListener, delay: Duration) {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::task::spawn_local(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    let Ok(n) = s.read(&mut chunk).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    // Each command is "*N\r\n$L\r\narg\r\n...": answer its first argument.
                    while let Some(cmd) = parse(&buf) {
                        let (len, first) = cmd;
                        buf.drain(..len);
                        tokio::time::sleep(delay).await;
                        let reply = format!("${}\r\n{}\r\n", first.len(), first);
                        if s.write_all(reply.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                }
            });
        }
    }

    /// (length, first argument) of a complete command at the start of `b`.
    fn parse(b: &[u8]) -> Option<(usize, String)> {
        let text = std::str::from_utf8(b).ok()?;
        let mut lines = text.split("\r\n");
        let n: usize = lines.next()?.strip_prefix('*')?.parse().ok()?;
        let mut len = format!("*{n}\r\n").len();
        let mut first = None;
        for _ in 0..n {
            let l: usize = lines.next()?.strip_prefix('$')?.parse().ok()?;
            let arg = lines.next()?;
            if arg.len() != l {
                return None;
            }
            len += format!("${l}\r\n").len() + l + 2;
            first.get_or_insert(arg.to_string());
        }
        if len > b.len() {
            return None;
        }
        Some((len, first?))
    }

    #[test]
    fn pipelined_calls_get_their_own_replies_in_order_with_selects_hidden() {
        run(async {
            let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = l.local_addr().unwrap().to_string();
            tokio::task::spawn_local(fake(l, Duration::ZERO));
            let pool = Pool::new(Limits::default(), vec![vec![b"PING".to_vec()]]);
            let mut calls = Vec::new();
            for i in 0..20usize {
                let mut r = Request::new();
                r.push(i % 3, &[format!("a{i}").as_bytes(), b"x"]);
                r.push(i % 2, &[format!("b{i}").as_bytes()]);
                let pool = &pool;
                let addr = addr.clone();
                calls.push(async move { (i, pool.call(&addr, false, &r).await) });
            }
            let mut results = Vec::new();
            for c in calls {
                results.push(c.await);
            }
            for (i, r) in results {
                let r = r.unwrap();
                assert_eq!(
                    r,
                    vec![
                        format!("${}\r\na{i}\r\n", format!("a{i}").len()).into_bytes(),
                        format!("${}\r\nb{i}\r\n", format!("b{i}").len()).into_bytes()
                    ]
                );
            }
        });
    }

    #[test]
    fn a_down_endpoint_fails_fast_and_a_slow_one_times_out() {
        run(async {
            // Nothing listens: Down, then Down again at once (backoff), not after a connect.
            let addr = {
                let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
                l.local_addr().unwrap().to_string()
            };
            let limits = Limits {
                connect: Duration::from_millis(300),
                request: Duration::from_millis(200),
                down_backoff: Duration::from_secs(5),
            };
            let pool = Pool::new(limits, Vec::new());
            let mut r = Request::new();
            r.push(0, &[b"x"]);
            assert!(matches!(
                pool.call(&addr, false, &r).await,
                Err(ProxyError::Down { .. })
            ));
            let t = Instant::now();
            assert!(matches!(
                pool.call(&addr, false, &r).await,
                Err(ProxyError::Down { .. })
            ));
            assert!(t.elapsed() < Duration::from_millis(50));
            // A slow endpoint: Timeout within the request limit.
            let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let slow = l.local_addr().unwrap().to_string();
            tokio::task::spawn_local(fake(l, Duration::from_millis(1000)));
            let t = Instant::now();
            assert!(matches!(
                pool.call(&slow, false, &r).await,
                Err(ProxyError::Timeout { .. })
            ));
            assert!(t.elapsed() < Duration::from_millis(600));
        });
    }

    #[test]
    fn a_dropped_dedicated_link_is_closed() {
        run(async {
            use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
            let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = l.local_addr().unwrap().to_string();
            // Answers `+OK` to each read, and says when the connection ends.
            let (ended_tx, ended) = tokio::sync::oneshot::channel::<()>();
            tokio::task::spawn_local(async move {
                let (mut s, _) = l.accept().await.unwrap();
                let mut chunk = [0u8; 1024];
                while let Ok(n) = s.read(&mut chunk).await {
                    if n == 0 || s.write_all(b"+OK\r\n").await.is_err() {
                        break;
                    }
                }
                let _ = ended_tx.send(());
            });
            let pool = Pool::new(Limits::default(), Vec::new());
            let link = pool.dedicated(&addr, false).await.unwrap();
            let mut r = Request::new();
            r.push(0, &[b"PING"]);
            assert_eq!(
                link.call(&r, Duration::from_secs(1)).await.unwrap(),
                vec![b"+OK\r\n".to_vec()]
            );
            let second = link.clone();
            drop(link);
            // A clone keeps it open.
            assert!(second.call(&r, Duration::from_secs(1)).await.is_ok());
            let closed = second.closed();
            let id = second.id();
            drop(second);
            tokio::time::timeout(Duration::from_secs(2), ended)
                .await
                .expect("the endpoint sees the link closed")
                .unwrap();
            tokio::time::timeout(Duration::from_secs(2), closed)
                .await
                .expect("closed() completes");
            // A new link is another id.
            let again = pool.dedicated(&addr, false).await;
            assert!(again.is_err() || again.is_ok_and(|l| l.id() != id));
        });
    }

    #[test]
    fn a_refused_handshake_is_reported() {
        run(async {
            let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = l.local_addr().unwrap().to_string();
            tokio::task::spawn_local(async move {
                use tokio::io::AsyncWriteExt as _;
                while let Ok((mut s, _)) = l.accept().await {
                    let _ = s
                        .write_all(b"-ERR topology epoch 2, this node has 3\r\n")
                        .await;
                }
            });
            let pool = Pool::new(Limits::default(), vec![vec![b"MERIDIAN.LINK".to_vec()]]);
            let mut r = Request::new();
            r.push(0, &[b"x"]);
            match pool.call(&addr, false, &r).await {
                Err(ProxyError::Refused { why, .. }) => assert!(why.contains("epoch"), "{why}"),
                other => panic!("{other:?}"),
            }
        });
    }
}
