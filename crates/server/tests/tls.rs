//! Client TLS (`tls-port`, issue 20) over real sockets: a tokio-rustls client speaks RESP,
//! `redis-cli --tls` works, `tls-auth-clients` yes/optional/no, `port 0` leaves only TLS,
//! SIGHUP and CONFIG SET reload the certificate while open connections keep theirs, a
//! client that never completes its handshake is closed, and bad files stop the start with
//! an error naming the file. Certificates are made in the test with rcgen.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{Raw, Server, cmd, free_port, reply_len};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, IsCa, Issuer, KeyPair,
};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// How long a test waits for one reply.
const REPLY_TIMEOUT: Duration = Duration::from_secs(10);

/// A CA and the files signed by it, in a temporary directory.
struct Pki {
    dir: tempfile::TempDir,
    ca: Issuer<'static, KeyPair>,
}

impl Pki {
    fn new() -> Pki {
        let dir = tempfile::tempdir().unwrap();
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        // Subjects differ from the leaves' (OpenSSL takes a leaf named like its issuer for
        // a self-signed certificate).
        p.distinguished_name = DistinguishedName::new();
        p.distinguished_name
            .push(DnType::CommonName, "Meridian test CA");
        let key = KeyPair::generate().unwrap();
        let cert = p.self_signed(&key).unwrap();
        std::fs::write(dir.path().join("ca.crt"), cert.pem()).unwrap();
        Pki {
            dir,
            ca: Issuer::new(p, key),
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn ca(&self) -> PathBuf {
        self.path("ca.crt")
    }

    /// Writes `<name>.crt` and `<name>.key`, a certificate for localhost and 127.0.0.1.
    fn issue(&self, name: &str) -> (PathBuf, PathBuf) {
        let key = KeyPair::generate().unwrap();
        let mut p =
            CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()]).unwrap();
        p.distinguished_name = DistinguishedName::new();
        p.distinguished_name.push(DnType::CommonName, name);
        let cert = p.signed_by(&key, &self.ca).unwrap();
        let (c, k) = (
            self.path(&format!("{name}.crt")),
            self.path(&format!("{name}.key")),
        );
        std::fs::write(&c, cert.pem()).unwrap();
        std::fs::write(&k, key.serialize_pem()).unwrap();
        (c, k)
    }
}

fn s(p: &Path) -> String {
    p.display().to_string()
}

/// The flags of a TLS port on `tls_port` with the server certificate `server`.
fn tls_flags(pki: &Pki, tls_port: u16, server: &str, auth: &str) -> Vec<String> {
    let (c, k) = (
        pki.path(&format!("{server}.crt")),
        pki.path(&format!("{server}.key")),
    );
    vec![
        "--tls-port".into(),
        tls_port.to_string(),
        "--tls-cert-file".into(),
        s(&c),
        "--tls-key-file".into(),
        s(&k),
        "--tls-ca-cert-file".into(),
        s(&pki.ca()),
        "--tls-auth-clients".into(),
        auth.into(),
    ]
}

fn start(flags: &[String]) -> Server {
    let refs: Vec<&str> = flags.iter().map(String::as_str).collect();
    Server::start_with(&refs)
}

/// A TLS client (tokio-rustls on a runtime of its own).
struct TlsClient {
    rt: tokio::runtime::Runtime,
    stream: tokio_rustls::client::TlsStream<tokio::net::TcpStream>,
    buf: Vec<u8>,
}

impl TlsClient {
    /// Connects and completes the handshake, trusting `ca`, presenting `identity` if given.
    fn connect(
        port: u16,
        ca: &Path,
        identity: Option<(&Path, &Path)>,
    ) -> Result<TlsClient, String> {
        // Everything slow first (this test binary's rustls is a debug build): the server's
        // handshake timer starts at the TCP connection.
        let (rt, connector) = TlsClient::setup(ca, identity);
        let tcp = std::net::TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
        TlsClient::handshake(rt, connector, tcp)
    }

    /// Runs the client side of a handshake over a connected socket.
    fn over(
        tcp: std::net::TcpStream,
        ca: &Path,
        identity: Option<(&Path, &Path)>,
    ) -> Result<TlsClient, String> {
        let (rt, connector) = TlsClient::setup(ca, identity);
        TlsClient::handshake(rt, connector, tcp)
    }

    fn setup(
        ca: &Path,
        identity: Option<(&Path, &Path)>,
    ) -> (tokio::runtime::Runtime, tokio_rustls::TlsConnector) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_file_iter(ca).unwrap() {
            roots.add(c.unwrap()).unwrap();
        }
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots);
        let config = match identity {
            Some((cert, key)) => {
                let chain: Vec<_> = CertificateDer::pem_file_iter(cert)
                    .unwrap()
                    .map(Result::unwrap)
                    .collect();
                let key = PrivateKeyDer::from_pem_file(key).unwrap();
                builder.with_client_auth_cert(chain, key).unwrap()
            }
            None => builder.with_no_client_auth(),
        };
        (rt, tokio_rustls::TlsConnector::from(Arc::new(config)))
    }

    fn handshake(
        rt: tokio::runtime::Runtime,
        connector: tokio_rustls::TlsConnector,
        tcp: std::net::TcpStream,
    ) -> Result<TlsClient, String> {
        let stream = rt.block_on(async {
            tcp.set_nonblocking(true).map_err(|e| e.to_string())?;
            let tcp = tokio::net::TcpStream::from_std(tcp).map_err(|e| e.to_string())?;
            let name = ServerName::try_from("localhost").unwrap();
            tokio::time::timeout(REPLY_TIMEOUT, connector.connect(name, tcp))
                .await
                .map_err(|_| "handshake timed out".to_string())?
                .map_err(|e| e.to_string())
        })?;
        Ok(TlsClient {
            rt,
            stream,
            buf: Vec::new(),
        })
    }

    /// Sends `bytes` and reads `n` complete replies.
    fn exchange(&mut self, bytes: &[u8], n: usize) -> Result<Vec<Vec<u8>>, String> {
        let TlsClient { rt, stream, buf } = self;
        rt.block_on(async {
            stream.write_all(bytes).await.map_err(|e| e.to_string())?;
            stream.flush().await.map_err(|e| e.to_string())?;
            let mut replies = Vec::with_capacity(n);
            let mut chunk = vec![0u8; 64 * 1024];
            while replies.len() < n {
                if let Some(len) = reply_len(buf)? {
                    replies.push(buf.drain(..len).collect());
                    continue;
                }
                let k = tokio::time::timeout(REPLY_TIMEOUT, stream.read(&mut chunk))
                    .await
                    .map_err(|_| "no reply in time".to_string())?
                    .map_err(|e| e.to_string())?;
                if k == 0 {
                    return Err("connection closed".to_string());
                }
                buf.extend_from_slice(&chunk[..k]);
            }
            Ok(replies)
        })
    }

    fn call(&mut self, args: &[&str]) -> Result<Vec<u8>, String> {
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        let mut r = self.exchange(&cmd(&args), 1)?;
        Ok(r.remove(0))
    }

    /// The server's leaf certificate.
    fn server_cert(&self) -> Vec<u8> {
        self.stream.get_ref().1.peer_certificates().unwrap()[0].to_vec()
    }
}

fn leaf_der(pem: &Path) -> Vec<u8> {
    CertificateDer::from_pem_file(pem).unwrap().to_vec()
}

#[test]
fn a_tls_client_speaks_resp_beside_the_plain_port() {
    let pki = Pki::new();
    let (cc, ck) = pki.issue("client");
    pki.issue("server");
    let tls_port = free_port();
    let server = start(&tls_flags(&pki, tls_port, "server", "yes"));
    let id = Some((cc.as_path(), ck.as_path()));
    let mut c = TlsClient::connect(tls_port, &pki.ca(), id).unwrap();
    assert_eq!(c.call(&["PING"]).unwrap(), b"+PONG\r\n");
    // Keys of every shard, a pipeline, and a value far larger than one TLS record (written
    // in pieces both ways).
    let mut pipeline = Vec::new();
    for i in 0..500 {
        pipeline.extend(cmd(&[
            b"SET",
            format!("k{i}").as_bytes(),
            format!("v{i}").as_bytes(),
        ]));
    }
    let replies = c.exchange(&pipeline, 500).unwrap();
    assert!(replies.iter().all(|r| r == b"+OK\r\n"));
    assert_eq!(c.call(&["GET", "k321"]).unwrap(), b"$4\r\nv321\r\n");
    let big = "x".repeat(3 * 1024 * 1024);
    assert_eq!(c.call(&["SET", "big", &big]).unwrap(), b"+OK\r\n");
    let got = c.call(&["GET", "big"]).unwrap();
    assert!(got == format!("${}\r\n{big}\r\n", big.len()).into_bytes());
    assert_eq!(c.call(&["DBSIZE"]).unwrap(), b":501\r\n");
    // The plain port serves the same data.
    let mut plain = server.connect();
    assert_eq!(plain.call_text(&["GET", "k7"]), "$2\r\nv7\r\n");
    assert_eq!(
        plain.call_text(&["CONFIG", "GET", "tls-port"]),
        format!(
            "*2\r\n$8\r\ntls-port\r\n${}\r\n{tls_port}\r\n",
            tls_port.to_string().len()
        )
    );
    // Several TLS connections, spread over the connection threads like plain ones.
    let mut others: Vec<TlsClient> = (0..6)
        .map(|_| TlsClient::connect(tls_port, &pki.ca(), id).unwrap())
        .collect();
    for (i, o) in others.iter_mut().enumerate() {
        assert_eq!(o.call(&["INCR", &format!("n{i}")]).unwrap(), b":1\r\n");
    }
    let list = plain.call_lossy(&[b"CLIENT", b"LIST"]);
    let on_tls = format!("laddr=127.0.0.1:{tls_port} ");
    assert_eq!(list.matches(on_tls.as_str()).count(), 7, "{list}");
    // A TLS client's read buffer, grown by the large value above, is given back too (trimmed
    // to its recent peak, or whole once idle over 2 s; a few bytes wasted are left, as Redis
    // leaves them), and it reads what comes next.
    assert_eq!(c.call(&["CLIENT", "SETNAME", "tls"]).unwrap(), b"+OK\r\n");
    assert!(plain.query_buffer_of("tls") > 0);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while plain.query_buffer_of("tls") > 4096 {
        assert!(
            std::time::Instant::now() < deadline,
            "still {}",
            plain.query_buffer_of("tls")
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_eq!(c.call(&["GET", "k7"]).unwrap(), b"$2\r\nv7\r\n");
}

#[test]
fn tls_auth_clients_yes_optional_and_no() {
    let pki = Pki::new();
    let (cc, ck) = pki.issue("client");
    pki.issue("server");
    let tls_port = free_port();
    let server = start(&tls_flags(&pki, tls_port, "server", "yes"));
    let id = Some((cc.as_path(), ck.as_path()));
    // yes: no certificate, no service (the server's alert ends the handshake or the first
    // read).
    let refused = TlsClient::connect(tls_port, &pki.ca(), None).and_then(|mut c| c.call(&["PING"]));
    assert!(refused.is_err(), "{refused:?}");
    // A certificate from another CA: refused too.
    let stranger = Pki::new();
    let (sc, sk) = stranger.issue("client");
    let refused = TlsClient::connect(tls_port, &pki.ca(), Some((&sc, &sk)))
        .and_then(|mut c| c.call(&["PING"]));
    assert!(refused.is_err(), "{refused:?}");
    let mut with_cert = TlsClient::connect(tls_port, &pki.ca(), id).unwrap();
    assert_eq!(with_cert.call(&["PING"]).unwrap(), b"+PONG\r\n");
    // optional (CONFIG SET applies to new handshakes): accepted without one, and a wrong one
    // is still refused.
    let mut plain = server.connect();
    plain.ok(&["CONFIG", "SET", "tls-auth-clients", "optional"]);
    let mut anon = TlsClient::connect(tls_port, &pki.ca(), None).unwrap();
    assert_eq!(anon.call(&["PING"]).unwrap(), b"+PONG\r\n");
    let refused = TlsClient::connect(tls_port, &pki.ca(), Some((&sc, &sk)))
        .and_then(|mut c| c.call(&["PING"]));
    assert!(refused.is_err(), "{refused:?}");
    // no: no certificate asked for.
    plain.ok(&["CONFIG", "SET", "tls-auth-clients", "no"]);
    let mut anon2 = TlsClient::connect(tls_port, &pki.ca(), None).unwrap();
    assert_eq!(anon2.call(&["PING"]).unwrap(), b"+PONG\r\n");
    // Connections made before keep working.
    assert_eq!(with_cert.call(&["PING"]).unwrap(), b"+PONG\r\n");
    assert_eq!(anon.call(&["PING"]).unwrap(), b"+PONG\r\n");
}

#[test]
fn config_set_checks_and_reloads_tls_settings() {
    let pki = Pki::new();
    let (cc, ck) = pki.issue("client");
    pki.issue("server");
    let (new_cert, new_key) = pki.issue("server2");
    let tls_port = free_port();
    let server = start(&tls_flags(&pki, tls_port, "server", "yes"));
    let id = Some((cc.as_path(), ck.as_path()));
    let mut plain = server.connect();
    let e = plain.err(&["CONFIG", "SET", "tls-protocols", "TLSv1.1"]);
    assert!(e.contains("TLSv1.1 is not supported"), "{e}");
    let e = plain.err(&["CONFIG", "SET", "tls-ciphers", "HIGH:!aNULL"]);
    assert!(e.contains("unsupported tls-ciphers 'HIGH'"), "{e}");
    let e = plain.err(&["CONFIG", "SET", "tls-key-file-pass", "secret"]);
    assert!(
        e.contains("encrypted private keys are not supported"),
        "{e}"
    );
    // A file that does not load: Redis's error, the cause in the log, nothing applied.
    let e = plain.err(&["CONFIG", "SET", "tls-cert-file", "/nonexistent/x.crt"]);
    assert_eq!(
        e,
        "ERR CONFIG SET failed (possibly related to argument 'tls-cert-file') - Unable to update TLS configuration. Check server logs."
    );
    assert!(server.log().contains("/nonexistent/x.crt"));
    let mut c = TlsClient::connect(tls_port, &pki.ca(), id).unwrap();
    assert_eq!(c.server_cert(), leaf_der(&pki.path("server.crt")));
    // New files, both at once: new handshakes get the new certificate.
    plain.ok(&[
        "CONFIG",
        "SET",
        "tls-cert-file",
        &s(&new_cert),
        "tls-key-file",
        &s(&new_key),
    ]);
    let mut d = TlsClient::connect(tls_port, &pki.ca(), id).unwrap();
    assert_eq!(d.server_cert(), leaf_der(&new_cert));
    assert_eq!(d.call(&["PING"]).unwrap(), b"+PONG\r\n");
    assert_eq!(c.call(&["PING"]).unwrap(), b"+PONG\r\n");
    // TLS 1.3 only, one suite, the server's order: a TLS 1.2-only client is refused.
    plain.ok(&[
        "CONFIG",
        "SET",
        "tls-protocols",
        "TLSv1.3",
        "tls-ciphersuites",
        "TLS_CHACHA20_POLY1305_SHA256",
        "tls-prefer-server-ciphers",
        "yes",
    ]);
    let mut e = TlsClient::connect(tls_port, &pki.ca(), id).unwrap();
    assert_eq!(e.call(&["PING"]).unwrap(), b"+PONG\r\n");
    assert_eq!(
        e.stream
            .get_ref()
            .1
            .negotiated_cipher_suite()
            .map(|s| s.suite()),
        Some(rustls::CipherSuite::TLS13_CHACHA20_POLY1305_SHA256)
    );
}

#[test]
fn sighup_reloads_the_certificate_and_keeps_connections() {
    let pki = Pki::new();
    let (cc, ck) = pki.issue("client");
    let (cert, key) = pki.issue("server");
    let tls_port = free_port();
    let server = start(&tls_flags(&pki, tls_port, "server", "yes"));
    let id = Some((cc.as_path(), ck.as_path()));
    let mut old = TlsClient::connect(tls_port, &pki.ca(), id).unwrap();
    assert_eq!(old.call(&["SET", "a", "1"]).unwrap(), b"+OK\r\n");
    let first = old.server_cert();
    assert_eq!(first, leaf_der(&cert));
    // The same file names get a new certificate and key.
    let (n_cert, n_key) = pki.issue("server-next");
    std::fs::copy(&n_cert, &cert).unwrap();
    std::fs::copy(&n_key, &key).unwrap();
    let pid = server.child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-HUP", &pid])
            .status()
            .unwrap()
            .success()
    );
    let deadline = Instant::now() + REPLY_TIMEOUT;
    while !server.log().contains("client TLS files reloaded") {
        assert!(
            Instant::now() < deadline,
            "no reload logged:\n{}",
            server.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut new = TlsClient::connect(tls_port, &pki.ca(), id).unwrap();
    assert_eq!(new.server_cert(), leaf_der(&n_cert));
    assert_ne!(new.server_cert(), first);
    assert_eq!(new.call(&["GET", "a"]).unwrap(), b"$1\r\n1\r\n");
    // The connection made before keeps its session.
    assert_eq!(old.call(&["INCR", "a"]).unwrap(), b":2\r\n");
    // A broken file on SIGHUP: logged, the previous certificate stays.
    std::fs::write(&key, "garbage").unwrap();
    assert!(
        Command::new("kill")
            .args(["-HUP", &pid])
            .status()
            .unwrap()
            .success()
    );
    while !server.log().contains("client TLS reload failed") {
        assert!(
            Instant::now() < deadline,
            "no failure logged:\n{}",
            server.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut third = TlsClient::connect(tls_port, &pki.ca(), id).unwrap();
    assert_eq!(third.server_cert(), leaf_der(&n_cert));
    assert_eq!(third.call(&["PING"]).unwrap(), b"+PONG\r\n");
}

/// Sockets in LISTEN state that process `pid` holds: their local ports.
fn listening_ports(pid: u32) -> Vec<u16> {
    let mut inodes = Vec::new();
    for fd in std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .flatten()
    {
        if let Ok(target) = std::fs::read_link(fd.path()) {
            let t = target.display().to_string();
            if let Some(i) = t.strip_prefix("socket:[").and_then(|r| r.strip_suffix(']')) {
                inodes.push(i.to_string());
            }
        }
    }
    let mut ports = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let text = std::fs::read_to_string(table).unwrap_or_default();
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            // local_address st ... inode: LISTEN is 0A.
            if f.len() > 9 && f[3] == "0A" && inodes.iter().any(|i| i == f[9]) {
                let port = f[1].rsplit(':').next().unwrap();
                ports.push(u16::from_str_radix(port, 16).unwrap());
            }
        }
    }
    ports
}

#[test]
fn port_zero_leaves_only_the_tls_port() {
    let pki = Pki::new();
    let (cc, ck) = pki.issue("client");
    pki.issue("server");
    let tls_port = free_port();
    let dir = tempfile::tempdir().unwrap();
    let mut args = vec![
        "server".to_string(),
        "--port".into(),
        "0".into(),
        "--dir".into(),
        s(dir.path()),
        "--shards".into(),
        "3".into(),
    ];
    args.extend(tls_flags(&pki, tls_port, "server", "optional"));
    let log = std::fs::File::create(dir.path().join("server.log")).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_meridian"))
        .args(&args)
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    let server = Server {
        child,
        port: tls_port,
        dir,
    };
    let id = Some((cc.as_path(), ck.as_path()));
    let deadline = Instant::now() + common::START_TIMEOUT;
    let mut c = loop {
        if let Ok(mut c) = TlsClient::connect(tls_port, &pki.ca(), id) {
            if c.call(&["PING"]).is_ok_and(|r| r == b"+PONG\r\n") {
                break c;
            }
        }
        assert!(
            Instant::now() < deadline,
            "TLS port never served:\n{}",
            server.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(
        c.call(&["CONFIG", "GET", "port"]).unwrap(),
        b"*2\r\n$4\r\nport\r\n$1\r\n0\r\n"
    );
    assert_eq!(c.call(&["SET", "k", "v"]).unwrap(), b"+OK\r\n");
    // The only socket listening is the TLS port's (no plain port, and the cluster API,
    // whose endpoints are plain TCP, stays off).
    assert_eq!(listening_ports(server.child.id()), vec![tls_port]);
    assert_eq!(
        c.call(&["CONFIG", "GET", "cluster-api"]).unwrap(),
        b"*2\r\n$11\r\ncluster-api\r\n$2\r\nno\r\n"
    );
    // Plain RESP on the TLS port gets no reply: the handshake fails and the socket closes.
    let mut raw = Raw::connect(tls_port);
    raw.send(&cmd(&[b"PING"]));
    assert!(raw.is_closed(REPLY_TIMEOUT));
}

#[test]
fn a_handshake_that_never_completes_is_closed() {
    let pki = Pki::new();
    pki.issue("server");
    let tls_port = free_port();
    let server = start(&tls_flags(&pki, tls_port, "server", "no"));
    let mut c = TlsClient::connect(tls_port, &pki.ca(), None).unwrap();
    assert_eq!(c.call(&["PING"]).unwrap(), b"+PONG\r\n");
    // The limit applies to connections made after it is set.
    let mut plain = server.connect();
    plain.ok(&["CONFIG", "SET", "tls-handshake-timeout-ms", "200"]);
    // Silent after connecting: closed once the limit passes, while others are served.
    let mut silent = Raw::connect(tls_port);
    assert!(silent.is_closed(REPLY_TIMEOUT));
    assert_eq!(c.call(&["PING"]).unwrap(), b"+PONG\r\n");
    // Within a longer limit a silent client is not closed.
    plain.ok(&["CONFIG", "SET", "tls-handshake-timeout-ms", "60000"]);
    let mut slow = Raw::connect(tls_port);
    assert!(!slow.is_closed(Duration::from_millis(800)));
    // As in Redis, a connection is a client from its accept, handshake or not.
    let list = plain.call_lossy(&[b"CLIENT", b"LIST"]);
    let on_tls = format!("laddr=127.0.0.1:{tls_port} ");
    assert_eq!(list.matches(on_tls.as_str()).count(), 2, "{list}");
    let mut after = TlsClient::connect(tls_port, &pki.ca(), None).unwrap();
    assert_eq!(after.call(&["PING"]).unwrap(), b"+PONG\r\n");
}

/// While a script runs long, the thread's TLS clients are answered by the side path
/// (`script::busy`) like plain ones: -BUSY, and SCRIPT KILL works from a TLS connection.
#[test]
fn a_tls_client_gets_busy_and_kills_a_long_script() {
    let pki = Pki::new();
    pki.issue("server");
    let tls_port = free_port();
    let mut flags = tls_flags(&pki, tls_port, "server", "no");
    flags.extend(["--shards", "1", "--busy-reply-threshold", "50"].map(String::from));
    let server = start(&flags);
    let mut tls = TlsClient::connect(tls_port, &pki.ca(), None).unwrap();
    assert_eq!(tls.call(&["PING"]).unwrap(), b"+PONG\r\n");
    // Connected before the script, its handshake made during it (the side path drives it).
    let late = std::net::TcpStream::connect(("127.0.0.1", tls_port)).unwrap();
    let mut runner = server.connect();
    std::thread::sleep(Duration::from_millis(100));
    runner.send_cmd(&[b"EVAL", b"while true do end", b"0"]);
    let deadline = Instant::now() + REPLY_TIMEOUT;
    loop {
        let r = tls.call(&["PING"]).unwrap();
        if r.starts_with(b"-BUSY Redis is busy running a script.") {
            break;
        }
        assert_eq!(r, b"+PONG\r\n");
        assert!(Instant::now() < deadline, "never busy");
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut late = TlsClient::over(late, &pki.ca(), None).unwrap();
    let r = late.call(&["PING"]).unwrap();
    assert!(r.starts_with(b"-BUSY"), "{:?}", String::from_utf8_lossy(&r));
    // Two commands in one write: both answered by the side path, in order.
    let mut two = cmd(&[b"PING"]);
    two.extend(cmd(&[b"SCRIPT", b"KILL"]));
    let r = tls.exchange(&two, 2).unwrap();
    assert!(
        r[0].starts_with(b"-BUSY"),
        "{:?}",
        String::from_utf8_lossy(&r[0])
    );
    assert_eq!(r[1], b"+OK\r\n");
    let killed = String::from_utf8_lossy(&runner.read_reply()).into_owned();
    assert!(killed.starts_with("-ERR Script killed by user"), "{killed}");
    assert_eq!(tls.call(&["PING"]).unwrap(), b"+PONG\r\n");
    assert_eq!(tls.call(&["SET", "after", "1"]).unwrap(), b"+OK\r\n");
    assert_eq!(late.call(&["GET", "after"]).unwrap(), b"$1\r\n1\r\n");
}

#[test]
fn bad_tls_files_stop_the_start_naming_the_file() {
    let pki = Pki::new();
    pki.issue("server");
    std::fs::write(
        pki.path("broken.crt"),
        "-----BEGIN CERTIFICATE-----\nnot base64\n",
    )
    .unwrap();
    let cases: Vec<(Vec<String>, String)> = vec![
        (
            vec!["--tls-cert-file".into(), "/nonexistent/server.crt".into()],
            "tls-cert-file /nonexistent/server.crt".into(),
        ),
        (
            vec!["--tls-cert-file".into(), s(&pki.path("broken.crt"))],
            format!("tls-cert-file {}", s(&pki.path("broken.crt"))),
        ),
        (
            vec!["--tls-ca-cert-file".into(), "/nonexistent/ca.crt".into()],
            "tls-ca-cert-file /nonexistent/ca.crt".into(),
        ),
        (
            vec!["--tls-key-file-pass".into(), "secret".into()],
            "encrypted private keys are not supported".into(),
        ),
        (
            vec!["--tls-protocols".into(), "TLSv1".into()],
            "TLSv1 is not supported".into(),
        ),
    ];
    for (extra, expected) in cases {
        let dir = tempfile::tempdir().unwrap();
        let mut args = vec![
            "server".to_string(),
            "--port".into(),
            free_port().to_string(),
            "--dir".into(),
            s(dir.path()),
        ];
        args.extend(tls_flags(&pki, free_port(), "server", "yes"));
        // Later flags win.
        for pair in extra.chunks(2) {
            let i = args.iter().position(|a| *a == pair[0]);
            match i {
                Some(i) => args[i + 1] = pair[1].clone(),
                None => args.extend(pair.iter().cloned()),
            }
        }
        let out = Command::new(env!("CARGO_BIN_EXE_meridian"))
            .args(&args)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!out.status.success(), "{extra:?} started:\n{text}");
        assert!(
            text.contains(&expected),
            "{extra:?}: no '{expected}' in:\n{text}"
        );
        assert!(!text.contains("panicked"), "{text}");
    }
}

fn redis_cli_has_tls() -> bool {
    Command::new("redis-cli")
        .arg("--help")
        .output()
        .is_ok_and(|o| {
            String::from_utf8_lossy(&o.stdout).contains("--tls ")
                || String::from_utf8_lossy(&o.stderr).contains("--tls ")
        })
}

#[test]
fn redis_cli_tls_works() {
    if !redis_cli_has_tls() {
        eprintln!("redis-cli without --tls: skipped");
        return;
    }
    let pki = Pki::new();
    let (cc, ck) = pki.issue("client");
    pki.issue("server");
    let tls_port = free_port();
    let _server = start(&tls_flags(&pki, tls_port, "server", "yes"));
    let cli = |args: &[&str], with_cert: bool| {
        let mut c = Command::new("redis-cli");
        c.args([
            "--tls",
            "--cacert",
            &s(&pki.ca()),
            "-h",
            "127.0.0.1",
            "-p",
            &tls_port.to_string(),
        ]);
        if with_cert {
            c.args(["--cert", &s(&cc), "--key", &s(&ck)]);
        }
        let out = c.args(args).stdin(Stdio::null()).output().unwrap();
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    };
    assert_eq!(cli(&["PING"], true).trim(), "PONG");
    assert_eq!(cli(&["SET", "cli", "tls"], true).trim(), "OK");
    assert_eq!(cli(&["GET", "cli"], true).trim(), "tls");
    // Without a client certificate (tls-auth-clients yes): no reply.
    let refused = cli(&["PING"], false);
    assert!(!refused.contains("PONG"), "{refused}");
}

/// redis-py's `ssl=True` (Debian's python3-redis or pip's redis): PING, a transaction, a
/// pipeline over several shards, a value larger than many TLS records, RESP3, and a client without a
/// certificate refused.
#[test]
fn redis_py_ssl_works() {
    let has_redis_py = Command::new("python3")
        .args(["-c", "import redis"])
        .stdin(Stdio::null())
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_redis_py {
        eprintln!("python3 without redis-py (python3-redis): skipped");
        return;
    }
    let pki = Pki::new();
    let (cc, ck) = pki.issue("client");
    pki.issue("server");
    let tls_port = free_port();
    let _server = start(&tls_flags(&pki, tls_port, "server", "yes"));
    let script = r#"
import sys, redis
port, ca, cert, key = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
def client(**kw):
    return redis.Redis(host="127.0.0.1", port=port, ssl=True, ssl_ca_certs=ca, **kw)
r = client(ssl_certfile=cert, ssl_keyfile=key)
assert r.ping() is True
p = r.pipeline(transaction=True)
for i in range(50):
    p.incr("{py}%d" % (i % 7))
assert p.execute()[-1] == 8
p = r.pipeline(transaction=False)
for i in range(50):
    p.incr("py%d" % (i % 7))
assert p.execute()[-1] == 8
big = b"y" * (5 << 20)
assert r.set("big", big) and r.get("big") == big
r3 = client(ssl_certfile=cert, ssl_keyfile=key, protocol=3)
assert r3.execute_command("HELLO")[b"proto"] == 3
try:
    client().ping()
    print("a client without a certificate was served")
    sys.exit(1)
except redis.exceptions.ConnectionError:
    pass
print("redis-py ok")
"#;
    let out = Command::new("python3")
        .arg("-c")
        .arg(script)
        .args([tls_port.to_string(), s(&pki.ca()), s(&cc), s(&ck)])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    assert!(text.contains("redis-py ok"), "{text}");
}

#[test]
fn import_rdb_over_tls() {
    let pki = Pki::new();
    pki.issue("server");
    let (cert, key) = pki.issue("client");
    let tls_port = free_port();
    let srv = start(&tls_flags(&pki, tls_port, "server", "yes"));
    let enc = meridian_rdb::Encoder::default();
    let mut f = meridian_rdb::file::FileBuilder::new(enc, &[]);
    f.database(0, 50, 0);
    for i in 0..50 {
        let (k, v) = (format!("k{i}"), format!("v{i}"));
        f.key(k.as_bytes(), None, &enc.string(v.as_bytes()))
            .unwrap();
    }
    let rdb = pki.path("dump.rdb");
    std::fs::write(&rdb, f.finish()).unwrap();
    let to = format!("127.0.0.1:{tls_port}");
    let run = |extra: &[&str]| -> (bool, String) {
        let out = Command::new(env!("CARGO_BIN_EXE_meridian"))
            .arg("import-rdb")
            .arg(&rdb)
            .args(["--to", &to, "--tls", "--cacert", &s(&pki.ca())])
            .args(extra)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        (out.status.success(), text)
    };
    let mut plain = Raw::connect(srv.port);
    // The server asks for a client certificate: without one nothing gets through.
    let (done, text) = run(&[]);
    assert!(!done && text.contains("CertificateRequired"), "{text}");
    assert_eq!(plain.int(&["DBSIZE"]), 0);
    // A certificate for another name than the server's is refused by the tool.
    let identity = ["--cert", &s(&cert), "--key", &s(&key)];
    let mut other = identity.to_vec();
    other.extend(["--sni", "elsewhere.example"]);
    let (done, text) = run(&other);
    assert!(!done && text.contains("not valid for name"), "{text}");
    assert_eq!(plain.int(&["DBSIZE"]), 0);
    // With the client's certificate: every key, over TLS.
    let (done, text) = run(&identity);
    assert!(
        done && text.contains("50 keys restored, 0 refused"),
        "{text}"
    );
    assert_eq!(plain.int(&["DBSIZE"]), 50);
    assert_eq!(plain.call_text(&["GET", "k7"]), "$2\r\nv7\r\n");
    // `meridian admin` takes the same flags.
    let out = Command::new(env!("CARGO_BIN_EXE_meridian"))
        .args(["admin", "--site", &to, "--tls", "--cacert", &s(&pki.ca())])
        .args(identity)
        .arg("peers")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.starts_with(&format!("{to}: ")),
        "{text}"
    );
}
