//! The sync port under bad input: garbage, oversized frames, frames cut short, wrong
//! handshakes and silence cost a log line and a closed connection, never a crash; a refused
//! Hello gets a `Refuse` frame naming the reason. And GC: deleted keys' metadata is dropped once
//! both sites acked it.

mod common;

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::{Server, free_port};

fn ping_ok(s: &Server) {
    assert_eq!(s.connect().call(&[b"PING"]), b"+PONG\r\n");
}

/// Reads until the peer closes or `timeout`; returns what arrived and whether it closed.
fn drain(stream: &mut TcpStream, timeout: Duration) -> (Vec<u8>, bool) {
    stream
        .set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let deadline = Instant::now() + timeout;
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    while Instant::now() < deadline {
        match stream.read(&mut buf) {
            Ok(0) => return (out, true),
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut => {}
            Err(_) => return (out, true),
        }
    }
    (out, false)
}

fn frame(kind: u8, body: &[u8]) -> Vec<u8> {
    let mut f = ((body.len() + 2) as u32).to_le_bytes().to_vec();
    f.push(kind);
    f.push(0);
    f.extend_from_slice(body);
    f
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    out.push(b.len() as u8); // varint for short ids
    out.extend_from_slice(b);
}

fn hello(deployment: &str, from: &str, to: &str) -> Vec<u8> {
    let mut b = b"MRDN".to_vec();
    b.extend_from_slice(&meridian_syncer::PROTOCOL_VERSION.to_le_bytes());
    put_bytes(&mut b, deployment.as_bytes());
    put_bytes(&mut b, from.as_bytes());
    put_bytes(&mut b, to.as_bytes());
    b.extend_from_slice(&0u16.to_le_bytes()); // shard
    b.extend_from_slice(&1u16.to_le_bytes()); // shards
    b.extend_from_slice(&0u64.to_le_bytes()); // known incarnation
    b.extend_from_slice(&0u64.to_le_bytes()); // applied seq
    b.push(0); // empty vv
    b.push(0); // want_full
    b.extend_from_slice(&7u64.to_le_bytes()); // the dialer's incarnation
    b.extend_from_slice(&0u32.to_le_bytes()); // the dialer's life
    b.extend_from_slice(&0u16.to_le_bytes()); // the shard dialed
    b.extend_from_slice(&[1, 0, 0, 0xff, 0x3f]); // its slots: one range, 0-16383
    frame(1, &b)
}

fn site_a() -> (Server, u16) {
    let sync = free_port();
    let peer = free_port(); // nobody listens there: site b is absent
    let s = Server::start_with(&[
        "--site",
        "a",
        "--sync-port",
        &sync.to_string(),
        "--peer",
        &format!("b=127.0.0.1:{peer}"),
        "--sync-frame-bytes-max",
        "1048576",
    ]);
    (s, sync)
}

#[test]
fn garbage_oversized_and_cut_frames_close_the_link_not_the_server() {
    let (s, sync) = site_a();
    let cases: Vec<Vec<u8>> = vec![
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
        // One past the frame limit (1 MiB counts kind, codec and body).
        (1_048_577u32).to_le_bytes().to_vec(),
        // At the limit but cut short, then closed.
        {
            let mut f = (1_048_576u32).to_le_bytes().to_vec();
            f.extend_from_slice(&[1, 0, 1, 2, 3]);
            f
        },
        // A frame of an unknown kind, and one with an unknown codec.
        frame(42, b"x"),
        {
            let mut f = frame(1, b"MRDN");
            f[5] = 9;
            f
        },
        // A Hello that is not one.
        frame(1, b"MRDX\x01\x00"),
        // Ops before any handshake.
        frame(4, &[0u8; 24]),
    ];
    for (i, bytes) in cases.iter().enumerate() {
        let mut c = TcpStream::connect(("127.0.0.1", sync)).unwrap();
        // The first case is not a sync connection at all (no preamble); the others name
        // shard 0 and then misbehave in the frame layer.
        if i > 0 {
            let _ = c.write_all(&meridian_syncer::msg::preamble(0));
        }
        let _ = c.write_all(bytes);
        if i == 2 {
            drop(c);
            continue;
        }
        let (_, closed) = drain(&mut c, Duration::from_secs(8));
        assert!(closed, "case {i}: the server closes the link");
        ping_ok(&s);
    }
    // Silence: closed after the idle timeout (5 s), not kept for ever.
    let mut c = TcpStream::connect(("127.0.0.1", sync)).unwrap();
    let (_, closed) = drain(&mut c, Duration::from_secs(9));
    assert!(closed, "an idle link is closed");
    ping_ok(&s);
}

#[test]
fn wrong_deployment_site_or_version_is_refused_with_a_reason() {
    let (s, sync) = site_a();
    for (bytes, reason) in [
        (hello("other", "b", "a"), "deployment id"),
        (hello("meridian", "c", "a"), "not a configured peer"),
        (hello("meridian", "b", "z"), "dialed site"),
        (
            {
                let mut h = hello("meridian", "b", "a");
                // The version after this build's.
                let next = (meridian_syncer::PROTOCOL_VERSION + 1).to_le_bytes();
                h[10] = next[0];
                h[11] = next[1];
                h
            },
            "protocol version",
        ),
    ] {
        let mut c = TcpStream::connect(("127.0.0.1", sync)).unwrap();
        c.write_all(&meridian_syncer::msg::preamble(0)).unwrap();
        c.write_all(&bytes).unwrap();
        let (got, closed) = drain(&mut c, Duration::from_secs(5));
        assert!(closed);
        assert!(got.len() > 6 && got[4] == 3, "a Refuse frame: {got:?}");
        let text = String::from_utf8_lossy(&got[6..]).to_string();
        assert!(text.contains(reason), "{text}");
    }
    ping_ok(&s);
    let log = s.log();
    assert!(log.contains("deployment id"), "refusals are logged:\n{log}");
}

fn info_crdt(s: &Server) -> String {
    String::from_utf8_lossy(&s.connect().call(&[b"INFO", b"crdt"])).to_string()
}

fn field(info: &str, name: &str) -> u64 {
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}:")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("{name} in {info}"))
}

#[test]
fn deleted_keys_metadata_is_collected_once_both_sites_acked() {
    let (sa, sb) = (free_port(), free_port());
    let a = Server::start_with(&[
        "--site",
        "a",
        "--sync-port",
        &sa.to_string(),
        "--peer",
        &format!("b=127.0.0.1:{sb}"),
    ]);
    let b = Server::start_with(&[
        "--site",
        "b",
        "--sync-port",
        &sb.to_string(),
        "--peer",
        &format!("a=127.0.0.1:{sa}"),
    ]);
    let mut ca = a.connect();
    for i in 0..50 {
        let k = format!("k{i}");
        ca.call(&[b"SADD", k.as_bytes(), b"x", b"y"]);
        ca.call(&[b"SREM", k.as_bytes(), b"x"]);
        ca.call(&[b"DEL", k.as_bytes()]);
    }
    assert_eq!(ca.call(&[b"DBSIZE"]), b":0\r\n", "tombstones are not keys");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (ia, ib) = (info_crdt(&a), info_crdt(&b));
        let done = field(&ia, "crdt_gc_dropped_keys") >= 50
            && field(&ib, "crdt_gc_dropped_keys") >= 50
            && field(&ia, "crdt_gc_pending_keys") == 0;
        if done {
            break;
        }
        assert!(Instant::now() < deadline, "GC did not run:\n{ia}\n{ib}");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(b.connect().call(&[b"DBSIZE"]), b":0\r\n");
    assert_eq!(
        a.connect().call(&[b"CRDT.DIGEST"]),
        b.connect().call(&[b"CRDT.DIGEST"])
    );
}

#[test]
fn without_peers_acked_nothing_is_collected() {
    // b is configured but never runs: a keeps its tombstones (it cannot know b saw the adds).
    let (s, _) = site_a();
    let mut c = s.connect();
    c.call(&[b"SADD", b"k", b"x"]);
    c.call(&[b"DEL", b"k"]);
    std::thread::sleep(Duration::from_millis(500));
    let info = info_crdt(&s);
    assert_eq!(field(&info, "crdt_gc_dropped_keys"), 0, "{info}");
    assert_eq!(c.call(&[b"DBSIZE"]), b":0\r\n");
    assert_eq!(c.call(&[b"EXISTS", b"k"]), b":0\r\n");
}

fn peer_field(info: &str, peer: &str, name: &str) -> String {
    let line = info
        .lines()
        .find_map(|l| l.strip_prefix(&format!("crdt_peer_{peer}:")))
        .unwrap_or_else(|| panic!("peer {peer} in {info}"));
    line.trim()
        .split(',')
        .find_map(|kv| kv.strip_prefix(&format!("{name}=")))
        .unwrap_or_else(|| panic!("{name} in {line}"))
        .to_string()
}

fn wait_for(what: &str, deadline_s: u64, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(deadline_s);
    while !ok() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_silent_peer_is_quarantined_then_rejoins_by_full_sync() {
    let (sa, sb) = (free_port(), free_port());
    let a_flags = [
        "--site".to_string(),
        "a".into(),
        "--sync-port".into(),
        sa.to_string(),
        "--peer".into(),
        format!("b=127.0.0.1:{sb}"),
        "--sync-quarantine-ms".into(),
        "1500".into(),
    ];
    let a_flags: Vec<&str> = a_flags.iter().map(String::as_str).collect();
    let a = Server::start_with(&a_flags);
    let b_flags = [
        "--site".to_string(),
        "b".into(),
        "--sync-port".into(),
        sb.to_string(),
        "--peer".into(),
        format!("a=127.0.0.1:{sa}"),
    ];
    let b_flags: Vec<&str> = b_flags.iter().map(String::as_str).collect();
    let mut b = Server::start_with(&b_flags);
    wait_for("link a-b", 10, || {
        peer_field(&info_crdt(&a), "b", "out_link") == "up"
    });
    // b goes away; a removes members and deletes keys. With b silent past the quarantine, a
    // collects the member contexts anyway (its causal context stands in for them), and keeps
    // the deleted keys' removal contexts until b has delivered them (a DEL decides a
    // HyperLogLog raise b may hold, docs/replication.md §6).
    let _ = b.child.kill();
    let _ = b.child.wait();
    let mut ca = a.connect();
    for i in 0..20 {
        let (q, d) = (format!("q{i}"), format!("d{i}"));
        ca.call(&[b"SADD", q.as_bytes(), b"x", b"y"]);
        ca.call(&[b"SREM", q.as_bytes(), b"x"]);
        ca.call(&[b"SADD", d.as_bytes(), b"x"]);
        ca.call(&[b"DEL", d.as_bytes()]);
    }
    ca.call(&[b"SET", b"kept", b"1"]);
    wait_for("quarantine and collection", 15, || {
        let i = info_crdt(&a);
        peer_field(&i, "b", "quarantined") == "1"
            && field(&i, "crdt_gc_collected_keys") >= 20
            && field(&i, "crdt_gc_pending_keys") == 20
    });
    assert_eq!(field(&info_crdt(&a), "crdt_gc_dropped_keys"), 0);
    // b comes back (empty, no persistence): it rejoins through a full sync, and is
    // no longer quarantined; once it has acked, the deleted keys go.
    let b2 = Server::start_with(&b_flags);
    wait_for("full sync to b", 15, || {
        let i = info_crdt(&a);
        peer_field(&i, "b", "full_syncs_out") == "1" && peer_field(&i, "b", "quarantined") == "0"
    });
    wait_for("convergence", 15, || {
        a.connect().call(&[b"CRDT.DIGEST"]) == b2.connect().call(&[b"CRDT.DIGEST"])
    });
    wait_for("the deleted keys' collection", 15, || {
        let i = info_crdt(&a);
        field(&i, "crdt_gc_dropped_keys") >= 20 && field(&i, "crdt_gc_pending_keys") == 0
    });
    assert_eq!(b2.connect().call(&[b"GET", b"kept"]), b"$1\r\n1\r\n");
    assert_eq!(b2.connect().call(&[b"EXISTS", b"d3"]), b":0\r\n");
    assert_eq!(
        b2.connect().call(&[b"SMEMBERS", b"q3"]),
        b"*1\r\n$1\r\ny\r\n"
    );
}
