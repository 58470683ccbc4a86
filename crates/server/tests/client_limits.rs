//! Client limits with Redis's names and texts (issue 20), each at its limit and one past it:
//! `maxclients` (sync links do not count), `timeout`, `client-query-buffer-limit`,
//! `client-output-buffer-limit` (hard and soft, normal and pubsub classes; CONFIG GET/SET).

mod common;

use std::time::{Duration, Instant};

use common::sites::{Cluster, Opts};
use common::{Raw, Reply, Server};

const MAXCLIENTS_REPLY: &[u8] = b"-ERR max number of clients reached\r\n";

/// A new connection's fate: `Ok` once it answered PING, `Err(bytes)` with what it got before
/// the server closed it.
fn try_client(port: u16) -> Result<Raw, Vec<u8>> {
    let mut c = Raw::connect(port);
    c.send_cmd(&[b"PING"]);
    match c.try_read_reply(Duration::from_secs(5)) {
        Ok(r) if r == b"+PONG\r\n" => Ok(c),
        Ok(r) => Err(r),
        Err(_) => Err(c.read_until_quiet(Duration::from_millis(200)).0),
    }
}

/// Polls `f` until it holds (10 s at most).
fn eventually(mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

#[test]
fn maxclients_at_the_limit_and_one_past() {
    let s = Server::start_with(&["--maxclients", "3"]);
    let mut held: Vec<Raw> = (0..3).map(|_| try_client(s.port).unwrap()).collect();
    // The fourth gets Redis's text and is closed.
    let mut fourth = Raw::connect(s.port);
    assert_eq!(
        fourth.try_read_reply(Duration::from_secs(5)).unwrap(),
        MAXCLIENTS_REPLY
    );
    assert!(fourth.is_closed(Duration::from_secs(5)));
    let mut c = held.pop().unwrap();
    assert!(
        c.call_text(&["INFO", "stats"])
            .contains("rejected_connections:1\r\n")
    );
    // A freed slot is taken again; CONFIG SET raises the limit at once.
    drop(c);
    assert!(eventually(|| try_client(s.port)
        .map(|c| held.push(c))
        .is_ok()));
    assert_eq!(try_client(s.port).err().as_deref(), Some(MAXCLIENTS_REPLY));
    held[0].ok(&["CONFIG", "SET", "maxclients", "4"]);
    held.push(try_client(s.port).unwrap());
    assert_eq!(try_client(s.port).err().as_deref(), Some(MAXCLIENTS_REPLY));
}

/// Sync links are not clients: with every client slot taken at both sites, writes still
/// replicate.
#[test]
fn maxclients_leaves_sync_links_alone() {
    let cluster = Cluster::start(&["a", "b"], Opts::default());
    // The harness checks convergence on fresh connections: the limit comes after, set on
    // the one connection each site keeps (a connection closed just before another is
    // accepted may still count, as in Redis).
    cluster.wait_converged(common::sites::CONVERGE_TIMEOUT);
    let mut a = cluster.site(0).connect();
    let mut b = cluster.site(1).connect();
    a.ok(&["CONFIG", "SET", "maxclients", "1"]);
    b.ok(&["CONFIG", "SET", "maxclients", "1"]);
    assert_eq!(
        try_client(cluster.site(0).port).err().as_deref(),
        Some(MAXCLIENTS_REPLY)
    );
    a.ok(&["SET", "k", "from-a"]);
    assert!(eventually(
        || b.reply(&["GET", "k"]) == Reply::bulk("from-a")
    ));
}

#[test]
fn timeout_closes_idle_clients_only() {
    let s = Server::start_with(&["--timeout", "1"]);
    let mut idle = s.connect();
    let mut busy = s.connect();
    let started = Instant::now();
    // Under the limit (a PING every 300 ms) the busy one stays; the idle one goes after 1 s.
    while started.elapsed() < Duration::from_millis(2_500) {
        assert_eq!(busy.call_text(&["PING"]), "+PONG\r\n");
        std::thread::sleep(Duration::from_millis(300));
    }
    assert!(idle.is_closed(Duration::from_secs(5)));
    assert_eq!(busy.call_text(&["PING"]), "+PONG\r\n");
    // CONFIG SET timeout 0 turns it off.
    busy.ok(&["CONFIG", "SET", "timeout", "0"]);
    let mut quiet = s.connect();
    std::thread::sleep(Duration::from_millis(2_500));
    assert_eq!(quiet.call_text(&["PING"]), "+PONG\r\n");
}

/// `client-query-buffer-limit` (1 MiB, its minimum): an unfinished command of exactly the
/// limit is kept; one byte more closes the connection.
#[test]
fn query_buffer_at_the_limit_and_one_past() {
    let s = Server::start_with(&["--client-query-buffer-limit", "1048576"]);
    let limit = 1024 * 1024;
    let head = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$2000000\r\n";
    let mut c = s.connect();
    let mut bytes = head.to_vec();
    bytes.resize(limit, b'x');
    c.send(&bytes);
    assert!(!c.is_closed(Duration::from_millis(500)));
    c.send(b"x");
    assert!(c.is_closed(Duration::from_secs(5)));
    let log = s.log();
    assert!(log.contains("max query buffer length"), "{log}");
}

/// The reply of `GET k` when `k` holds `n` bytes is `n + 8 + len(n)` bytes.
fn get_reply_len(n: usize) -> usize {
    n + 5 + n.to_string().len()
}

#[test]
fn output_hard_limit_at_the_limit_and_one_under() {
    let s = Server::start();
    let mut admin = s.connect();
    let n = 99_980;
    admin.ok(&["SET", "k", &"v".repeat(n)]);
    let reply = get_reply_len(n);
    assert_eq!(reply, 99_990);
    // One byte under the hard limit: delivered.
    admin.ok(&[
        "CONFIG",
        "SET",
        "client-output-buffer-limit",
        &format!("normal {} 0 0", reply + 1),
    ]);
    let mut c = s.connect();
    assert_eq!(c.call_strs(&["GET", "k"]).len(), reply);
    // At the limit: closed before anything is sent, as Redis does (used >= hard).
    admin.ok(&[
        "CONFIG",
        "SET",
        "client-output-buffer-limit",
        &format!("normal {reply} 0 0"),
    ]);
    let mut c = s.connect();
    c.send_cmd(&[b"GET", b"k"]);
    let (got, closed) = c.read_until_quiet(Duration::from_secs(2));
    assert!(
        closed && got.is_empty(),
        "{} bytes, closed {closed}",
        got.len()
    );
    assert_eq!(
        admin.reply(&["CONFIG", "GET", "client-output-buffer-limit"]),
        Reply::Array(vec![
            Reply::bulk("client-output-buffer-limit"),
            Reply::bulk(&format!(
                "normal {reply} 0 0 slave 268435456 67108864 60 pubsub 33554432 8388608 60"
            )),
        ])
    );
    assert!(s.log().contains("overcoming of output buffer limits"));
}

/// A client that pipelines 20 MB of replies and never reads: its pending output stays over
/// the soft limit, so it is closed after the soft seconds; a reading client is not.
#[test]
fn output_soft_limit_cuts_a_client_that_never_reads() {
    let s = Server::start_with(&["--client-output-buffer-limit", "normal 0 262144 1"]);
    let mut admin = s.connect();
    admin.ok(&["SET", "big", &"v".repeat(100_000)]);
    let mut slow = s.connect();
    let one = common::cmd(&[b"GET", b"big"]);
    slow.send(&one.repeat(200));
    std::thread::sleep(Duration::from_secs(3));
    let (got, closed) = slow.read_until_quiet(Duration::from_secs(2));
    assert!(closed, "still open after {} bytes", got.len());
    assert!(got.len() < 200 * get_reply_len(100_000));
    // Meanwhile, and after, other clients are served.
    assert_eq!(admin.call_text(&["PING"]), "+PONG\r\n");
    let mut reader = s.connect();
    for _ in 0..20 {
        assert_eq!(
            reader.call_strs(&["GET", "big"]).len(),
            get_reply_len(100_000)
        );
    }
}

/// The pubsub class applies to subscribers (MONITOR and other clients are normal).
/// One shard thread: the two messages must be pending together, and with several threads
/// the subscriber's thread may write the first one out while the second is still being read.
#[test]
fn pubsub_hard_limit_closes_a_subscriber() {
    let s = Server::start_with(&[
        "--shards",
        "1",
        "--client-output-buffer-limit",
        "pubsub 100000 0 0",
    ]);
    let mut sub = s.connect();
    assert!(sub.call_text(&["SUBSCRIBE", "ch"]).contains("subscribe"));
    let mut publisher = s.connect();
    let message = "m".repeat(60_000);
    let publish = common::cmd(&[b"PUBLISH", b"ch", message.as_bytes()]);
    // One message stays under the limit and is delivered.
    publisher.send(&publish);
    assert_eq!(publisher.read_reply(), b":1\r\n");
    assert!(sub.try_read_reply(Duration::from_secs(5)).is_ok());
    // Two in one pipeline are queued together: 120,000 pending bytes close the subscriber.
    // Should the server read the pipeline in two parts and write the first message out in
    // between (a loaded machine), more messages fill the socket's buffers until the pending
    // bytes pass the limit: at most `MESSAGES_MAX` more, each pair checked.
    const MESSAGES_MAX: usize = 400;
    let closed = |p: &mut Raw| p.call_text(&["PUBSUB", "NUMSUB", "ch"]).ends_with(":0\r\n");
    let mut sent = 0;
    loop {
        publisher.send(&publish.repeat(2));
        publisher.read_reply();
        publisher.read_reply();
        sent += 2;
        if closed(&mut publisher) || sent >= MESSAGES_MAX {
            break;
        }
    }
    assert!(
        eventually(|| closed(&mut publisher)),
        "open after {sent} messages"
    );
    // Normal clients are unaffected by the pubsub class.
    assert_eq!(publisher.call_strs(&["GET", "none"]), b"$-1\r\n");
}

/// The hard output limit holds for commands that run on another shard than the connection's
/// (with several shards, a round sends them there as one batch of up to 1,024): a pipeline of
/// large replies on keys of every shard closes the client without the server holding the
/// whole round's replies, and the server keeps serving meanwhile.
#[test]
fn output_hard_limit_holds_for_commands_run_on_other_shards() {
    let s = Server::start_with(&[
        "--shards",
        "3",
        "--client-output-buffer-limit",
        "normal 1048576 0 0",
    ]);
    let mut admin = s.connect();
    let value = "v".repeat(256 * 1024);
    let keys: Vec<String> = (0..12).map(|i| format!("big{i}")).collect();
    for k in &keys {
        admin.ok(&["SET", k, &value]);
    }
    let used = used_memory;
    let before = used(&mut admin);
    // 1,024 GETs over every shard's keys: 256 MiB of replies if the round ran whole.
    let mut pipeline = Vec::new();
    for i in 0..1024 {
        pipeline.extend(common::cmd(&[b"GET", keys[i % keys.len()].as_bytes()]));
    }
    let mut slow = s.connect();
    slow.send(&pipeline);
    let mut peak = 0;
    for _ in 0..20 {
        peak = peak.max(used(&mut admin));
        std::thread::sleep(Duration::from_millis(50));
    }
    let (got, closed) = slow.read_until_quiet(Duration::from_secs(2));
    assert!(closed, "still open after {} bytes", got.len());
    assert!(
        peak < before + 64 * 1024 * 1024,
        "used_memory {before} before, {peak} at the peak"
    );
    assert_eq!(admin.call_text(&["PING"]), "+PONG\r\n");
    assert!(s.log().contains("overcoming of output buffer limits"));
}

/// The used memory of `c`'s server (INFO's `used_memory`).
fn used_memory(c: &mut Raw) -> u64 {
    let info = c.call_text(&["INFO", "memory"]);
    info.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// A command of many small arguments (Redis's lazyfree unit: SADD of 100,000 members) grows
/// the read buffer past its size; once it ran, the buffer is given back while the connection
/// goes on with small commands, as Redis's cron resizes it. The room the command used
/// stayed allocated, unseen by the resize, for as long as the connection sent small
/// commands (1.5 MB in that unit, which then saw used memory stay up). The request is sized
/// to leave 16 to 32 KiB past it in a 1 MiB buffer (grown from 16 KiB by doubling): room
/// the resize leaves alone (`QUERY_BUF_RESIZE_BYTES_MIN`) and the next reads do not fill.
#[test]
fn a_buffer_grown_by_many_arguments_is_given_back() {
    let s = Server::start_with(&[]);
    let mut c = s.connect();
    let mut poll = s.connect();
    let before = used_memory(&mut poll);
    // 17 bytes per member (`$10\r\n` and ten digits): about 1 MiB - 24 KiB in all.
    let members: Vec<String> = (0..60_230).map(|i| format!("{i:010}")).collect();
    let mut args: Vec<&[u8]> = vec![b"SADD", b"{q}set"];
    args.extend(members.iter().map(|m| m.as_bytes()));
    let request = common::cmd(&args);
    assert!((1024 * 1024 - 32 * 1024..1024 * 1024 - 16 * 1024).contains(&request.len()));
    c.send(&request);
    assert_eq!(c.read_reply(), b":60230\r\n");
    assert_eq!(c.call_text(&["DEL", "{q}set"]), ":1\r\n");
    // The connection stays busy (a client idle for 2 s gives its buffer back whole).
    let mut now = 0;
    let mut last_ping = Instant::now();
    assert!(
        eventually(|| {
            if last_ping.elapsed() >= Duration::from_millis(200) {
                assert_eq!(c.call_text(&["PING"]), "+PONG\r\n");
                last_ping = Instant::now();
            }
            now = used_memory(&mut poll);
            now < before + 512 * 1024
        }),
        "used_memory {before} before, {now} after"
    );
}

/// Redis's `clientsCronResizeQueryBuffer`: a buffer grown by a large command shrinks once the
/// client sends small ones, and an idle client's buffer is given back whole (Redis's
/// querybuf unit asks the same).
#[test]
fn query_buffers_shrink_after_a_peak_and_go_when_idle() {
    let s = Server::start_with(&[]);
    let mut r = s.connect();
    let mut c = s.connect();
    c.ok(&["CLIENT", "SETNAME", "big"]);
    let first = r.query_buffer_of("big");
    assert!((16384..32768).contains(&first), "{first}");
    let value = "A".repeat(400_000);
    c.ok(&["SET", "x", &value]);
    let grown = r.query_buffer_of("big");
    assert!(grown > 32768, "{grown}");
    assert!(eventually(|| {
        c.ok(&["SET", "x", "small"]);
        let now = r.query_buffer_of("big");
        now > 0 && now <= 32 * 1024
    }));
    // Below QUERY_BUF_RESIZE_BYTES_MIN only idleness (over 2 s) gives it back. (The trim
    // may have left a few bytes, too few to waste: the next read makes room again.)
    c.ok(&["SET", "x", "small"]);
    let last = Instant::now();
    let now = r.query_buffer_of("big");
    assert!(now > 4096 && now <= 32 * 1024, "{now}");
    assert!(eventually(|| r.query_buffer_of("big") == 0));
    assert!(
        last.elapsed() >= Duration::from_secs(2),
        "{:?}",
        last.elapsed()
    );
    // It still reads what comes next.
    assert_eq!(c.call_text(&["GET", "x"]), "$5\r\nsmall\r\n");
}
