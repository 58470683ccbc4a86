//! `meridian admin`: one command sent to every site of a deployment over RESP, each reply
//! printed under its site (CRDT.PEERS, CRDT.ADDPEER, CRDT.REMOVEPEER); and the plain RESP
//! client it uses (`Client`), which `meridian import-rdb` pipelines its RESTOREs through.

use std::io::{Read as _, Write as _};
use std::net::{TcpStream, ToSocketAddrs as _};
use std::path::PathBuf;
use std::time::Duration;

/// Longest wait for a connection or a reply.
pub const ADMIN_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest reply read (a peer list is small).
pub const REPLY_BYTES_MAX: usize = 1024 * 1024;
/// Deepest nesting of arrays and maps in a reply.
pub const NESTING_MAX: usize = 8;

/// Failures of one site's call.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error("{addr}: {source}")]
    Io {
        addr: String,
        source: std::io::Error,
    },
    #[error("{addr}: TLS: {reason}")]
    Tls { addr: String, reason: String },
    #[error("{addr}: cannot resolve")]
    Resolve { addr: String },
    #[error("{addr}: malformed or oversized reply")]
    Reply { addr: String },
}

/// A reply, as far as the admin client shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    Simple(String),
    Error(String),
    Int(i64),
    Bulk(Option<String>),
    Array(Vec<Reply>),
}

impl Reply {
    pub fn is_error(&self) -> bool {
        matches!(self, Reply::Error(_))
    }

    /// One line: `OK`, `(error) ERR ...`, `3`, or a list as `[a, b]`.
    pub fn to_line(&self) -> String {
        match self {
            Reply::Simple(s) => s.clone(),
            Reply::Error(e) => format!("(error) {e}"),
            Reply::Int(n) => n.to_string(),
            Reply::Bulk(Some(s)) => s.clone(),
            Reply::Bulk(None) => "(nil)".to_string(),
            Reply::Array(v) => format!(
                "[{}]",
                v.iter().map(Reply::to_line).collect::<Vec<_>>().join(", ")
            ),
        }
    }
}

/// Sends `args` to `addr` (`host:port`), over TLS when `tls` says how, and returns its reply.
pub fn call_with(addr: &str, args: &[&str], tls: Option<&TlsOptions>) -> Result<Reply, AdminError> {
    let mut c = Client::connect_with(addr, tls)?;
    let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
    c.send(&[&args])?;
    c.reply()
}

/// TLS to a server's `tls-port`, as `redis-cli --tls` takes it: the CA that signed the
/// server's certificate, this client's certificate and key when the server asks for one
/// (`tls-auth-clients`), and the name the server's certificate must carry (default: the host
/// of the address).
#[derive(Debug, Clone, Default)]
pub struct TlsOptions {
    pub ca: PathBuf,
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
    pub server_name: Option<String>,
}

/// A connection's bytes: plain TCP or TLS over it (the handshake runs on the first write).
enum Stream {
    Plain(TcpStream),
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>),
}

impl std::fmt::Debug for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Stream::Plain(_) => "Stream::Plain",
            Stream::Tls(_) => "Stream::Tls",
        })
    }
}

impl std::io::Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Stream::Plain(s) => s.read(buf),
            Stream::Tls(s) => s.read(buf),
        }
    }
}

impl std::io::Write for Stream {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Stream::Plain(s) => s.write(buf),
            Stream::Tls(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Stream::Plain(s) => s.flush(),
            Stream::Tls(s) => s.flush(),
        }
    }
}

/// The rustls client side of `tls` for the server at `addr`.
fn tls_session(addr: &str, tls: &TlsOptions) -> Result<rustls::ClientConnection, String> {
    use rustls::pki_types::pem::PemObject as _;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
    let mut roots = rustls::RootCertStore::empty();
    let cas =
        CertificateDer::pem_file_iter(&tls.ca).map_err(|e| format!("{}: {e}", tls.ca.display()))?;
    for ca in cas {
        let ca = ca.map_err(|e| format!("{}: {e}", tls.ca.display()))?;
        roots
            .add(ca)
            .map_err(|e| format!("{}: {e}", tls.ca.display()))?;
    }
    let provider = std::sync::Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots);
    let config = match (&tls.cert, &tls.key) {
        (Some(cert), Some(key)) => {
            let chain = CertificateDer::pem_file_iter(cert)
                .and_then(|it| it.collect::<Result<Vec<_>, _>>())
                .map_err(|e| format!("{}: {e}", cert.display()))?;
            let key =
                PrivateKeyDer::from_pem_file(key).map_err(|e| format!("{}: {e}", key.display()))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| format!("{}: {e}", cert.display()))?
        }
        (None, None) => builder.with_no_client_auth(),
        _ => {
            return Err(
                "a client certificate needs its key, and a key its certificate".to_string(),
            );
        }
    };
    let host = match &tls.server_name {
        Some(name) => name.clone(),
        None => host_of(addr).to_string(),
    };
    let name =
        ServerName::try_from(host.clone()).map_err(|e| format!("server name {host:?}: {e}"))?;
    rustls::ClientConnection::new(std::sync::Arc::new(config), name).map_err(|e| e.to_string())
}

/// The host part of `host:port` (`[v6]:port` too).
fn host_of(addr: &str) -> &str {
    let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
    host.strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host)
}

/// A RESP connection to one server: commands written in batches, replies read in order,
/// every wait bounded by `ADMIN_TIMEOUT` and every reply by `REPLY_BYTES_MAX`.
#[derive(Debug)]
pub struct Client {
    addr: String,
    stream: Stream,
    /// Bytes read past the replies returned.
    buf: Vec<u8>,
}

impl Client {
    /// Connects to `addr` (`host:port`, its first address) over plain TCP.
    pub fn connect(addr: &str) -> Result<Client, AdminError> {
        Client::connect_with(addr, None)
    }

    /// Connects to `addr`, over TLS when `tls` says how.
    pub fn connect_with(addr: &str, tls: Option<&TlsOptions>) -> Result<Client, AdminError> {
        let io = |source| AdminError::Io {
            addr: addr.to_string(),
            source,
        };
        let target = addr
            .to_socket_addrs()
            .ok()
            .and_then(|mut a| a.next())
            .ok_or_else(|| AdminError::Resolve {
                addr: addr.to_string(),
            })?;
        let tcp = TcpStream::connect_timeout(&target, ADMIN_TIMEOUT).map_err(io)?;
        tcp.set_read_timeout(Some(ADMIN_TIMEOUT)).map_err(io)?;
        tcp.set_write_timeout(Some(ADMIN_TIMEOUT)).map_err(io)?;
        let stream = match tls {
            None => Stream::Plain(tcp),
            Some(t) => {
                let session = tls_session(addr, t).map_err(|reason| AdminError::Tls {
                    addr: addr.to_string(),
                    reason,
                })?;
                Stream::Tls(Box::new(rustls::StreamOwned::new(session, tcp)))
            }
        };
        Ok(Client {
            addr: addr.to_string(),
            stream,
            buf: Vec::new(),
        })
    }

    fn io(&self, source: std::io::Error) -> AdminError {
        AdminError::Io {
            addr: self.addr.clone(),
            source,
        }
    }

    /// Writes `commands` (each its arguments) in one write.
    pub fn send(&mut self, commands: &[&[&[u8]]]) -> Result<(), AdminError> {
        let mut req = Vec::new();
        for args in commands {
            crate::resp::put_command(&mut req, args);
        }
        self.send_encoded(&req)
    }

    /// Writes commands already encoded (`resp::put_command`) in one write.
    pub fn send_encoded(&mut self, req: &[u8]) -> Result<(), AdminError> {
        self.stream
            .write_all(req)
            .and_then(|()| self.stream.flush())
            .map_err(|e| self.io(e))
    }

    /// The next reply.
    pub fn reply(&mut self) -> Result<Reply, AdminError> {
        let mut chunk = [0u8; 16 * 1024];
        loop {
            if let Some((reply, used)) = parse(&self.buf, 0) {
                self.buf.drain(..used);
                return Ok(reply);
            }
            if self.buf.len() > REPLY_BYTES_MAX {
                return Err(AdminError::Reply {
                    addr: self.addr.clone(),
                });
            }
            let n = self.stream.read(&mut chunk).map_err(|e| self.io(e))?;
            if n == 0 {
                return Err(AdminError::Reply {
                    addr: self.addr.clone(),
                });
            }
            self.buf
                .extend_from_slice(chunk.get(..n).unwrap_or_default());
        }
    }
}

/// Parses one complete reply at the start of `b`: the reply and its length, or None when
/// incomplete, malformed or nested deeper than `NESTING_MAX`.
fn parse(b: &[u8], depth: usize) -> Option<(Reply, usize)> {
    if depth > NESTING_MAX {
        return None;
    }
    let end = b.windows(2).position(|w| w == b"\r\n")?;
    let line = std::str::from_utf8(b.get(1..end)?).ok()?;
    let after = end + 2;
    match b.first()? {
        b'+' => Some((Reply::Simple(line.to_string()), after)),
        b'-' => Some((Reply::Error(line.to_string()), after)),
        b':' => Some((Reply::Int(line.parse().ok()?), after)),
        b'$' => {
            let n: i64 = line.parse().ok()?;
            if n < 0 {
                return Some((Reply::Bulk(None), after));
            }
            let n = usize::try_from(n).ok()?;
            let body = b.get(after..after + n)?;
            b.get(after + n..after + n + 2)?;
            Some((
                Reply::Bulk(Some(String::from_utf8_lossy(body).into_owned())),
                after + n + 2,
            ))
        }
        kind @ (b'*' | b'%') => {
            let n: i64 = line.parse().ok()?;
            if n < 0 {
                return Some((Reply::Array(Vec::new()), after));
            }
            let items = usize::try_from(n).ok()? * if *kind == b'%' { 2 } else { 1 };
            let mut v = Vec::with_capacity(items.min(1024));
            let mut pos = after;
            for _ in 0..items {
                let (r, used) = parse(b.get(pos..)?, depth + 1)?;
                v.push(r);
                pos += used;
            }
            Some((Reply::Array(v), pos))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_of_an_address_names_the_server() {
        assert_eq!(host_of("127.0.0.1:6379"), "127.0.0.1");
        assert_eq!(host_of("db.example:6380"), "db.example");
        assert_eq!(host_of("[::1]:6379"), "::1");
        assert_eq!(host_of("nohost"), "nohost");
    }

    #[test]
    fn parses_replies_and_waits_for_the_rest() {
        assert_eq!(parse(b"+OK\r\n", 0), Some((Reply::Simple("OK".into()), 5)));
        assert_eq!(parse(b"+OK\r", 0), None);
        let (r, n) = parse(b"*2\r\n%1\r\n$4\r\nsite\r\n$1\r\nb\r\n:3\r\n", 0).unwrap();
        assert_eq!(n, 29);
        assert_eq!(r.to_line(), "[[site, b], 3]");
        assert_eq!(parse(b"*1\r\n$4\r\nsi", 0), None);
        assert!(parse(b"-ERR no\r\n", 0).unwrap().0.is_error());
        let deep = "*1\r\n".repeat(NESTING_MAX + 2) + ":1\r\n";
        assert_eq!(parse(deep.as_bytes(), 0), None);
    }
}
