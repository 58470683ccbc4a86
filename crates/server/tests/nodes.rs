//! A site across several nodes (`--topology FILE --node NAME`): processes that share one
//! keyspace, each main port routing to the owning shard on any node over pooled links.
//!
//! The site here: node n1 runs shards 0 and 1, node n2 shard 2 (slots 10923-16383).

mod common;

use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

use common::{Raw, Reply, eventually, free_port, key_slot, parse_reply, spawn_and_wait};

/// Ports of one node.
#[derive(Clone, Copy, Debug)]
struct Ports {
    main: u16,
    endpoint: u16,
    sync: u16,
}

/// One node process of the site, killed on drop.
struct NodeProc {
    name: &'static str,
    ports: Ports,
    dir: PathBuf,
    args: Vec<String>,
    child: Option<Child>,
}

impl NodeProc {
    fn start(
        name: &'static str,
        ports: Ports,
        topology: &Path,
        dir: PathBuf,
        extra: &[&str],
    ) -> NodeProc {
        std::fs::create_dir_all(&dir).unwrap();
        let mut args: Vec<String> = vec![
            "server".into(),
            "--topology".into(),
            topology.display().to_string(),
            "--node".into(),
            name.into(),
            "--dir".into(),
            dir.join("data").display().to_string(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        let mut n = NodeProc {
            name,
            ports,
            dir,
            args,
            child: None,
        };
        n.restart();
        n
    }

    fn restart(&mut self) {
        let child = spawn_and_wait(
            env!("CARGO_BIN_EXE_meridian"),
            &self.args,
            &self.dir,
            self.ports.main,
        );
        self.child = Some(child);
    }

    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn connect(&self) -> Raw {
        Raw::connect(self.ports.main)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default()
    }
}

impl Drop for NodeProc {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let log = self.log();
            let tail: Vec<&str> = log.lines().rev().take(30).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            eprintln!(
                "--- node {} last log lines:\n{}",
                self.name,
                tail.join("\n")
            );
        }
        self.kill();
    }
}

fn node_ports() -> Ports {
    Ports {
        main: free_port(),
        // The endpoints are consecutive: take a free port and the next.
        endpoint: loop {
            let p = free_port();
            if std::net::TcpListener::bind(("127.0.0.1", p + 1)).is_ok() {
                break p;
            }
        },
        sync: free_port(),
    }
}

fn topology_text(epoch: u64, p1: Ports, p2: Ports) -> String {
    format!(
        "epoch = {epoch}\n\
         [[node]]\nname = \"n1\"\nip = \"127.0.0.1\"\nport = {}\nendpoint-port = {}\nsync-port = {}\nshards = 2\n\
         [[node]]\nname = \"n2\"\nip = \"127.0.0.1\"\nport = {}\nendpoint-port = {}\nsync-port = {}\nshards = 1\n",
        p1.main, p1.endpoint, p1.sync, p2.main, p2.endpoint, p2.sync
    )
}

/// Two nodes of site `site` (extra flags for both), in `root`.
fn start_site(root: &Path, site: &str, extra: &[&str]) -> (NodeProc, NodeProc) {
    let (p1, p2) = (node_ports(), node_ports());
    let topo = root.join(format!("{site}-topology.toml"));
    std::fs::write(&topo, topology_text(1, p1, p2)).unwrap();
    let mut flags = vec!["--site", site];
    flags.extend_from_slice(extra);
    let n1 = NodeProc::start("n1", p1, &topo, root.join(format!("{site}-n1")), &flags);
    let n2 = NodeProc::start("n2", p2, &topo, root.join(format!("{site}-n2")), &flags);
    (n1, n2)
}

/// The shard owning `key` in the site's contiguous map of 3 shards.
fn shard_of(key: &str) -> u16 {
    match key_slot(key) {
        0..=5460 => 0,
        5461..=10922 => 1,
        _ => 2,
    }
}

/// A key of the given shard.
fn key_on(shard: u16, prefix: &str) -> String {
    (0..)
        .map(|i| format!("{prefix}{i}"))
        .find(|k| shard_of(k) == shard)
        .unwrap()
}

#[test]
fn two_nodes_serve_one_keyspace() {
    let root = tempfile::tempdir().unwrap();
    let (n1, n2) = start_site(root.path(), "a", &[]);
    let mut c1 = n1.connect();
    let mut c2 = n2.connect();

    // Writes through either node, reads through the other.
    for i in 0..300 {
        let k = format!("k{i}");
        let c = if i % 2 == 0 { &mut c1 } else { &mut c2 };
        c.ok(&["SET", &k, &format!("v{i}")]);
    }
    for i in 0..300 {
        let k = format!("k{i}");
        let c = if i % 2 == 0 { &mut c2 } else { &mut c1 };
        assert_eq!(c.reply(&["GET", &k]), Reply::bulk(&format!("v{i}")), "{k}");
    }
    // Every shard holds some, and both nodes count the whole site.
    assert!((0..3).all(|s| (0..300).any(|i| shard_of(&format!("k{i}")) == s)));
    assert_eq!(c1.int(&["DBSIZE"]), 300);
    assert_eq!(c2.int(&["DBSIZE"]), 300);
    assert_eq!(c2.reply(&["KEYS", "*"]).strings().len(), 300);
    // A script's DBSIZE answers for the shard it runs on: the other nodes' shards are never
    // held for a script (with all shards in one process it would count them all).
    for c in [&mut c1, &mut c2] {
        let in_script = c.int(&["EVAL", "return redis.call('dbsize')", "0"]);
        assert!(in_script > 0 && in_script < 300, "{in_script}");
    }

    // Scatter-gather across nodes.
    let (a, b, c) = (key_on(0, "m"), key_on(1, "m"), key_on(2, "m"));
    c1.ok(&["MSET", &a, "1", &b, "2", &c, "3"]);
    assert_eq!(
        c2.reply(&["MGET", &a, &b, &c, "nosuchkey"]),
        Reply::Array(vec![
            Reply::bulk("1"),
            Reply::bulk("2"),
            Reply::bulk("3"),
            Reply::Nil
        ])
    );
    assert_eq!(c1.int(&["EXISTS", &a, &b, &c, "nosuchkey"]), 3);
    assert_eq!(c1.int(&["DEL", &a, &b, &c]), 3);

    // SCAN walks every shard of the site.
    let mut cursor = "0".to_string();
    let mut seen = std::collections::BTreeSet::new();
    loop {
        let r = c1.reply(&["SCAN", &cursor, "COUNT", "50"]);
        let Reply::Array(parts) = r else {
            panic!("{r:?}")
        };
        let Reply::Bulk(next) = &parts[0] else {
            panic!()
        };
        seen.extend(parts[1].strings());
        cursor = String::from_utf8_lossy(next).into_owned();
        if cursor == "0" {
            break;
        }
    }
    assert_eq!(seen.len(), 300);
    assert!(matches!(c2.reply(&["RANDOMKEY"]), Reply::Bulk(_)));

    // A pipeline mixing slots of both nodes keeps its order.
    let mut pipe = Vec::new();
    for i in 0..200 {
        let k = format!("p{i}");
        pipe.extend(common::cmd(&[
            b"SET",
            k.as_bytes(),
            i.to_string().as_bytes(),
        ]));
        pipe.extend(common::cmd(&[b"INCR", k.as_bytes()]));
    }
    c1.send(&pipe);
    for i in 0..200 {
        assert_eq!(c1.read_reply(), b"+OK\r\n");
        assert_eq!(c1.read_reply(), format!(":{}\r\n", i + 1).as_bytes());
    }

    // A transaction on a shard of the other node runs there whole.
    let tk = key_on(2, "tx");
    c1.ok(&["MULTI"]);
    assert_eq!(
        c1.reply(&["SET", &tk, "10"]),
        Reply::Simple("QUEUED".into())
    );
    assert_eq!(
        c1.reply(&["INCRBY", &tk, "5"]),
        Reply::Simple("QUEUED".into())
    );
    assert_eq!(
        c1.reply(&["EXEC"]),
        Reply::Array(vec![Reply::Simple("OK".into()), Reply::Int(15)])
    );
    assert_eq!(c2.reply(&["GET", &tk]), Reply::bulk("15"));
    // WATCH of a key on the other node: held on a link of the client's own to that shard,
    // where its EXEC runs. A write from anywhere after the WATCH aborts the transaction.
    c1.ok(&["WATCH", &tk]);
    c2.ok(&["SET", &tk, "20"]);
    c1.ok(&["MULTI"]);
    assert_eq!(
        c1.reply(&["INCRBY", &tk, "1"]),
        Reply::Simple("QUEUED".into())
    );
    assert_eq!(c1.reply(&["EXEC"]), Reply::Nil);
    assert_eq!(c2.reply(&["GET", &tk]), Reply::bulk("20"));
    // No write meanwhile: it runs; a database its transaction selects stays selected.
    c1.ok(&["WATCH", &tk]);
    c1.ok(&["MULTI"]);
    assert_eq!(
        c1.reply(&["INCRBY", &tk, "1"]),
        Reply::Simple("QUEUED".into())
    );
    assert_eq!(c1.reply(&["SELECT", "3"]), Reply::Simple("QUEUED".into()));
    assert_eq!(
        c1.reply(&["EXEC"]),
        Reply::Array(vec![Reply::Int(21), Reply::Simple("OK".into())])
    );
    assert_eq!(c1.reply(&["GET", &tk]), Reply::Nil);
    c1.ok(&["SELECT", "0"]);
    // UNWATCH drops it: a later write does not abort.
    c1.ok(&["WATCH", &tk]);
    c1.ok(&["UNWATCH"]);
    c2.ok(&["SET", &tk, "30"]);
    c1.ok(&["MULTI"]);
    assert_eq!(
        c1.reply(&["INCRBY", &tk, "1"]),
        Reply::Simple("QUEUED".into())
    );
    assert_eq!(c1.reply(&["EXEC"]), Reply::Array(vec![Reply::Int(31)]));
    // Keys of two shards of the other node (n1's, seen from n2) are no one transaction's.
    c2.ok(&["WATCH", &key_on(0, "tx")]);
    assert_eq!(
        c2.err(&["WATCH", &key_on(1, "tx")]),
        "CROSSSLOT Keys in request don't hash to the same slot"
    );
    c2.ok(&["UNWATCH"]);

    // CLUSTER SLOTS lists every shard of the site at its node's endpoints, from both nodes.
    for c in [&mut c1, &mut c2] {
        let Reply::Array(ranges) = c.reply(&["CLUSTER", "SLOTS"]) else {
            panic!()
        };
        let ports: Vec<i64> = ranges
            .iter()
            .map(|r| match r {
                Reply::Array(v) => match &v[2] {
                    Reply::Array(n) => match n[1] {
                        Reply::Int(p) => p,
                        _ => panic!(),
                    },
                    _ => panic!(),
                },
                _ => panic!(),
            })
            .collect();
        assert_eq!(
            ports,
            vec![
                i64::from(n1.ports.endpoint),
                i64::from(n1.ports.endpoint + 1),
                i64::from(n2.ports.endpoint)
            ]
        );
    }
    // n1's endpoint for shard 0 redirects a key of shard 2 to n2's endpoint.
    let mut e = Raw::connect(n1.ports.endpoint);
    assert_eq!(
        e.err(&["GET", &tk]),
        format!("MOVED {} 127.0.0.1:{}", key_slot(&tk), n2.ports.endpoint)
    );
    // The same node ids everywhere.
    let ids = |c: &mut Raw| -> Vec<String> {
        let Reply::Bulk(text) = c.reply(&["CLUSTER", "NODES"]) else {
            panic!()
        };
        let mut v: Vec<String> = String::from_utf8_lossy(&text)
            .lines()
            .map(|l| l.split(' ').next().unwrap().to_string())
            .collect();
        v.sort();
        v
    };
    let mut e2 = Raw::connect(n2.ports.endpoint);
    assert_eq!(ids(&mut e), ids(&mut e2));
    assert_eq!(ids(&mut e).len(), 3);
}

#[test]
fn blocking_pops_and_pubsub_cross_nodes() {
    let root = tempfile::tempdir().unwrap();
    let (n1, n2) = start_site(root.path(), "a", &[]);
    // A client of n1 blocks on a list of n2's shard; a push through n2 wakes it.
    let list = key_on(2, "list");
    let mut blocked = n1.connect();
    blocked.send(&common::cmd(&[b"BLPOP", list.as_bytes(), b"10"]));
    std::thread::sleep(Duration::from_millis(300));
    let mut c2 = n2.connect();
    assert_eq!(c2.int(&["RPUSH", &list, "x"]), 1);
    assert_eq!(
        parse_reply(&blocked.try_read_reply(Duration::from_secs(5)).unwrap()),
        Reply::Array(vec![Reply::bulk(&list), Reply::bulk("x")])
    );
    // A blocked pop that times out answers nil, and the link is not held up meanwhile.
    blocked.send(&common::cmd(&[b"BLPOP", list.as_bytes(), b"0.5"]));
    let mut c1 = n1.connect();
    let t = Instant::now();
    c1.ok(&["SET", &key_on(2, "other"), "v"]);
    assert!(t.elapsed() < Duration::from_millis(400));
    assert_eq!(
        parse_reply(&blocked.try_read_reply(Duration::from_secs(5)).unwrap()),
        Reply::Nil
    );

    // Subscribers on both nodes get a message published on either, once.
    let mut s1 = n1.connect();
    let mut s2 = n2.connect();
    s1.send(&common::cmd(&[b"SUBSCRIBE", b"news"]));
    s2.send(&common::cmd(&[b"SUBSCRIBE", b"news"]));
    s1.read_reply();
    s2.read_reply();
    // PUBLISH counts this node's receivers, as a Redis Cluster node.
    assert_eq!(c1.int(&["PUBLISH", "news", "one"]), 1);
    assert_eq!(c2.int(&["PUBLISH", "news", "two"]), 1);
    // (Two publishers: the order between their messages is not defined.)
    for s in [&mut s1, &mut s2] {
        let mut got: Vec<Reply> = (0..2)
            .map(|_| parse_reply(&s.try_read_reply(Duration::from_secs(5)).unwrap()))
            .collect();
        got.sort_by_key(|r| format!("{r:?}"));
        let want: Vec<Reply> = ["one", "two"]
            .iter()
            .map(|m| {
                Reply::Array(vec![
                    Reply::bulk("message"),
                    Reply::bulk("news"),
                    Reply::bulk(m),
                ])
            })
            .collect();
        assert_eq!(got, want);
        let (more, _) = s.read_until_quiet(Duration::from_millis(300));
        assert!(
            more.is_empty(),
            "a message came twice: {}",
            common::escape(&more)
        );
    }
}

/// CLIENT TRACKING of a key on the other node: the read is tracked there for this node,
/// whose invalidations reach the client as a local write's would, whoever writes the key
/// (a client of the other node, or another client of this one whose write is forwarded).
#[test]
fn tracking_covers_reads_on_the_other_node() {
    let root = tempfile::tempdir().unwrap();
    let (n1, n2) = start_site(root.path(), "a", &[]);
    let mut c1 = n1.connect();
    let mut c2 = n2.connect();
    let mut w1 = n1.connect();
    let r = c1.call_text(&["HELLO", "3"]);
    assert!(r.starts_with('%'), "{r}");
    c1.ok(&["CLIENT", "TRACKING", "on"]);
    let tk = key_on(2, "trk");
    let local = key_on(0, "trk");
    c2.ok(&["SET", &tk, "v"]);
    let push = |key: &str| {
        format!(
            ">2\r\n$10\r\ninvalidate\r\n*1\r\n${}\r\n{key}\r\n",
            key.len()
        )
    };
    for writer in [&mut c2, &mut w1] {
        assert_eq!(c1.call_text(&["GET", &tk]), "$1\r\nv\r\n");
        writer.ok(&["SET", &tk, "v"]);
        let got = c1
            .try_read_reply(Duration::from_secs(5))
            .expect("an invalidation");
        assert_eq!(String::from_utf8_lossy(&got), push(&tk));
    }
    // Once: a second write without a read between sends nothing.
    c2.ok(&["SET", &tk, "v"]);
    assert_eq!(c1.call_text(&["PING"]), "+PONG\r\n");
    // Keys of both nodes in one read (MGET scattered): each invalidated where it lives.
    c1.ok(&["SET", &local, "l"]);
    assert_eq!(
        c1.call_text(&["MGET", &tk, &local]),
        "*2\r\n$1\r\nv\r\n$1\r\nl\r\n"
    );
    c2.ok(&["SET", &local, "m"]);
    let got = c1
        .try_read_reply(Duration::from_secs(5))
        .expect("an invalidation");
    assert_eq!(String::from_utf8_lossy(&got), push(&local));
    w1.ok(&["SET", &tk, "m"]);
    let got = c1
        .try_read_reply(Duration::from_secs(5))
        .expect("an invalidation");
    assert_eq!(String::from_utf8_lossy(&got), push(&tk));
    // OPTIN: a read without CLIENT CACHING yes is not tracked.
    c1.ok(&["CLIENT", "TRACKING", "off"]);
    c1.ok(&["CLIENT", "TRACKING", "on", "OPTIN"]);
    c1.call_text(&["GET", &tk]);
    c2.ok(&["SET", &tk, "n"]);
    assert_eq!(c1.call_text(&["PING"]), "+PONG\r\n");
    drop(n1);
    drop(n2);
}

/// The invalidation push of `key` alone, as a RESP3 client reads it.
fn invalidate_push(key: &str) -> String {
    format!(
        ">2\r\n$10\r\ninvalidate\r\n*1\r\n${}\r\n{key}\r\n",
        key.len()
    )
}

/// A RESP3 client of `node` with CLIENT TRACKING on and these options.
fn tracking_client(node: &NodeProc, options: &[&str]) -> Raw {
    let mut c = node.connect();
    let r = c.call_text(&["HELLO", "3"]);
    assert!(r.starts_with('%'), "{r}");
    let mut argv = vec!["CLIENT", "TRACKING", "on"];
    argv.extend_from_slice(options);
    c.ok(&argv);
    c
}

/// Reads `c`'s next reply and checks it is the invalidation of `key`.
fn expect_push(c: &mut Raw, key: &str) {
    let got = c
        .try_read_reply(Duration::from_secs(5))
        .unwrap_or_else(|e| panic!("an invalidation of {key}: {e}"));
    assert_eq!(String::from_utf8_lossy(&got), invalidate_push(key));
}

/// Checks that nothing was sent to `c` for the writes `w` (a client of the other node) did
/// so far: `w` writes `fence`, a key of that node `c`'s thread tracks for it (read through
/// the same link), whose invalidation comes after any earlier one on the same stream.
fn expect_no_push_before(c: &mut Raw, w: &mut Raw, fence: &str) {
    w.ok(&["SET", fence, "f"]);
    expect_push(c, fence);
}

/// NOLOOP across nodes: a client's write of another node's key (over its thread's pooled
/// link there) does not come back to it, while the key's other readers are told; a later
/// write by anyone else reaches it as usual.
#[test]
fn tracking_noloop_spares_its_own_writes_on_the_other_node() {
    let root = tempfile::tempdir().unwrap();
    let (n1, n2) = start_site(root.path(), "a", &[]);
    let mut me = tracking_client(&n1, &["NOLOOP"]);
    let mut other = tracking_client(&n1, &[]);
    let mut c2 = n2.connect();
    let tk = key_on(2, "nl");
    let fence = key_on(2, "fence");
    c2.ok(&["SET", &tk, "v"]);
    let fenced = |me: &mut Raw, c2: &mut Raw| {
        let r = me.call_text(&["GET", &fence]);
        assert!(r.starts_with('$') || r == "_\r\n", "{r}");
        expect_no_push_before(me, c2, &fence);
    };
    for c in [&mut me, &mut other] {
        assert_eq!(c.call_text(&["GET", &tk]), "$1\r\nv\r\n");
    }
    me.ok(&["SET", &tk, "w"]);
    expect_push(&mut other, &tk);
    fenced(&mut me, &mut c2);
    // It is told of another's write as usual.
    assert_eq!(me.call_text(&["GET", &tk]), "$1\r\nw\r\n");
    c2.ok(&["SET", &tk, "x"]);
    expect_push(&mut me, &tk);
    // The same through a transaction run whole there.
    for c in [&mut me, &mut other] {
        assert_eq!(c.call_text(&["GET", &tk]), "$1\r\nx\r\n");
    }
    me.ok(&["MULTI"]);
    assert_eq!(me.call_text(&["SET", &tk, "t"]), "+QUEUED\r\n");
    assert_eq!(me.call_text(&["EXEC"]), "*1\r\n+OK\r\n");
    expect_push(&mut other, &tk);
    fenced(&mut me, &mut c2);
    // A writer without NOLOOP is told of its own write.
    assert_eq!(other.call_text(&["GET", &tk]), "$1\r\nt\r\n");
    other.ok(&["SET", &tk, "y"]);
    expect_push(&mut other, &tk);
    drop(n1);
    drop(n2);
}

/// Reads inside a transaction or a script that run whole on the other node are tracked
/// there for the client, as single reads are (CLIENT CACHING yes before MULTI covers the
/// transaction for OPTIN, and ends with it); a watched one, which cannot be, is followed by
/// a flush.
#[test]
fn tracking_covers_transactions_and_scripts_on_the_other_node() {
    let root = tempfile::tempdir().unwrap();
    let (n1, n2) = start_site(root.path(), "a", &[]);
    let mut c1 = tracking_client(&n1, &[]);
    let mut c2 = n2.connect();
    let tk = key_on(2, "tx");
    let fence = key_on(2, "fence");
    c2.ok(&["SET", &tk, "v"]);
    let told = |c1: &mut Raw, c2: &mut Raw| {
        c2.ok(&["SET", &tk, "v"]);
        expect_push(c1, &tk);
    };
    c1.ok(&["MULTI"]);
    assert_eq!(c1.call_text(&["GET", &tk]), "+QUEUED\r\n");
    assert_eq!(c1.call_text(&["EXEC"]), "*1\r\n$1\r\nv\r\n");
    told(&mut c1, &mut c2);
    assert_eq!(
        c1.call_text(&["EVAL", "return redis.call('GET', KEYS[1])", "1", &tk]),
        "$1\r\nv\r\n"
    );
    told(&mut c1, &mut c2);
    // Under WATCH the transaction runs on the watch's own link, which does not track: the
    // client gets a flush after it instead.
    c1.ok(&["WATCH", &tk]);
    c1.ok(&["MULTI"]);
    assert_eq!(c1.call_text(&["GET", &tk]), "+QUEUED\r\n");
    assert_eq!(c1.call_text(&["EXEC"]), "*1\r\n$1\r\nv\r\n");
    let got = c1
        .try_read_reply(Duration::from_secs(5))
        .expect("a flush after the watched transaction");
    assert_eq!(
        String::from_utf8_lossy(&got),
        ">2\r\n$10\r\ninvalidate\r\n_\r\n"
    );
    c1.ok(&["CLIENT", "TRACKING", "off"]);
    c1.ok(&["CLIENT", "TRACKING", "on", "OPTIN"]);
    c1.ok(&["CLIENT", "CACHING", "yes"]);
    c1.ok(&["MULTI"]);
    assert_eq!(c1.call_text(&["GET", &tk]), "+QUEUED\r\n");
    assert_eq!(c1.call_text(&["EXEC"]), "*1\r\n$1\r\nv\r\n");
    told(&mut c1, &mut c2);
    // Without CLIENT CACHING yes the next transaction is not tracked.
    c1.ok(&["MULTI"]);
    assert_eq!(c1.call_text(&["GET", &tk]), "+QUEUED\r\n");
    assert_eq!(c1.call_text(&["EXEC"]), "*1\r\n$1\r\nv\r\n");
    c2.ok(&["SET", &tk, "v"]);
    c1.ok(&["CLIENT", "CACHING", "yes"]);
    let r = c1.call_text(&["GET", &fence]);
    assert!(r.starts_with('$') || r == "_\r\n", "{r}");
    expect_no_push_before(&mut c1, &mut c2, &fence);
    drop(n1);
    drop(n2);
}

/// The other node forgets what it tracked for a link that closes: when the pooled link a
/// client's tracked read went over is lost, the client gets a flush (a later write there
/// would not be reported).
#[test]
fn tracking_flushes_the_readers_of_a_lost_link() {
    let root = tempfile::tempdir().unwrap();
    let (n1, n2) = start_site(root.path(), "a", &[]);
    let mut c1 = tracking_client(&n1, &[]);
    let mut c2 = n2.connect();
    let tk = key_on(2, "lost");
    c2.ok(&["SET", &tk, "v"]);
    assert_eq!(c1.call_text(&["GET", &tk]), "$1\r\nv\r\n");
    // The link the read went over, at n2's endpoint of shard 2: its last command a GET.
    let list = c2.call_text(&["CLIENT", "LIST"]);
    let laddr = format!("laddr=127.0.0.1:{} ", n2.ports.endpoint);
    let id = list
        .lines()
        .find(|l| l.contains(&laddr) && l.contains(" cmd=get "))
        .and_then(|l| l.strip_prefix("id="))
        .and_then(|l| l.split(' ').next())
        .unwrap_or_else(|| panic!("the link in {list}"))
        .to_string();
    assert_eq!(c2.call_text(&["CLIENT", "KILL", "ID", &id]), ":1\r\n");
    let got = c1
        .try_read_reply(Duration::from_secs(5))
        .expect("a flush once the link is lost");
    assert_eq!(
        String::from_utf8_lossy(&got),
        ">2\r\n$10\r\ninvalidate\r\n_\r\n"
    );
    // Reads go on over a new link, tracked as before.
    assert_eq!(c1.call_text(&["GET", &tk]), "$1\r\nv\r\n");
    c2.ok(&["SET", &tk, "w"]);
    expect_push(&mut c1, &tk);
    drop(n1);
    drop(n2);
}

/// The prefixes BCAST clients track on `node` (INFO `tracking_total_prefixes`).
fn tracked_prefixes(node: &NodeProc) -> String {
    let mut c = node.connect();
    let info = String::from_utf8_lossy(&c.call_strs(&["INFO", "stats"])).into_owned();
    info.lines()
        .find_map(|l| l.strip_prefix("tracking_total_prefixes:"))
        .unwrap_or("?")
        .trim()
        .to_string()
}

/// BCAST across nodes: a BCAST client is told of writes to keys its prefixes match on the
/// other node too (its node registers its clients' prefixes there, without overlaps, and
/// hands the other node's invalidations to the clients whose prefixes match). It gets a
/// flush once the registration holds (a write there may have come before it), and the
/// registration goes with the last client of the prefix.
#[test]
fn tracking_bcast_covers_writes_on_the_other_node() {
    let root = tempfile::tempdir().unwrap();
    let (n1, n2) = start_site(root.path(), "a", &[]);
    let flush = ">2\r\n$10\r\ninvalidate\r\n_\r\n";
    let mut b1 = tracking_client(&n1, &["BCAST", "PREFIX", "bc:"]);
    assert!(
        eventually(Duration::from_secs(10), || tracked_prefixes(&n2) == "1"),
        "the prefix registered on n2: {}",
        tracked_prefixes(&n2)
    );
    let got = b1
        .try_read_reply(Duration::from_secs(5))
        .expect("the flush after the registration");
    assert_eq!(String::from_utf8_lossy(&got), flush);
    let mut c2 = n2.connect();
    let mut w1 = n1.connect();
    let k = key_on(2, "bc:");
    let k2 = key_on(2, "bc:x");
    let other = key_on(2, "zz:");
    // A write there by a client of that node, then one forwarded from this node.
    c2.ok(&["SET", &other, "1"]);
    c2.ok(&["SET", &k, "1"]);
    expect_push(&mut b1, &k);
    w1.ok(&["SET", &k, "2"]);
    expect_push(&mut b1, &k);
    // A second client whose prefix the first one's covers: nothing new to register there,
    // and both are told.
    let mut b2 = tracking_client(&n1, &["BCAST", "PREFIX", "bc:x"]);
    c2.ok(&["SET", &k2, "1"]);
    expect_push(&mut b2, &k2);
    expect_push(&mut b1, &k2);
    assert_eq!(tracked_prefixes(&n2), "1");
    // The first one's tracking off: the second one's prefix is what is registered now,
    // and it is told only of its keys.
    b1.ok(&["CLIENT", "TRACKING", "off"]);
    c2.ok(&["SET", &k, "3"]);
    c2.ok(&["SET", &k2, "3"]);
    expect_push(&mut b2, &k2);
    // Both off: the registration goes.
    b2.ok(&["CLIENT", "TRACKING", "off"]);
    assert!(
        eventually(Duration::from_secs(10), || tracked_prefixes(&n2) == "0"),
        "the prefix gone from n2: {}",
        tracked_prefixes(&n2)
    );
    assert_eq!(b1.call_text(&["PING"]), "+PONG\r\n");
    assert_eq!(b2.call_text(&["PING"]), "+PONG\r\n");
    drop(n1);
    drop(n2);
}

#[test]
fn a_node_down_fails_fast_and_comes_back() {
    let root = tempfile::tempdir().unwrap();
    let (n1, mut n2) = start_site(root.path(), "a", &["--appendfsync", "always"]);
    let mut c1 = n1.connect();
    let far = key_on(2, "far");
    let near = key_on(0, "near");
    c1.ok(&["SET", &far, "1"]);
    c1.ok(&["SET", &near, "1"]);
    n2.kill();
    // A command for the down node's shard fails at once; the others go on.
    for _ in 0..3 {
        let t = Instant::now();
        let e = c1.err(&["GET", &far]);
        assert!(e.starts_with("CLUSTERDOWN"), "{e}");
        assert!(
            t.elapsed() < Duration::from_millis(1500),
            "{:?}",
            t.elapsed()
        );
    }
    assert_eq!(c1.reply(&["GET", &near]), Reply::bulk("1"));
    assert!(c1.err(&["DBSIZE"]).starts_with("CLUSTERDOWN"));
    // Back with its data: the same connection reaches it again.
    n2.restart();
    assert!(eventually(Duration::from_secs(10), || {
        c1.reply(&["GET", &far]) == Reply::bulk("1")
    }));
    assert_eq!(c1.int(&["DBSIZE"]), 2);
}

#[test]
fn a_stopped_node_answers_tryagain_within_the_request_limit() {
    let root = tempfile::tempdir().unwrap();
    let (n1, n2) = start_site(root.path(), "a", &[]);
    let mut c1 = n1.connect();
    let far = key_on(2, "far");
    c1.ok(&["SET", &far, "1"]);
    let pid = n2.child.as_ref().unwrap().id().to_string();
    let stop = |sig: &str| {
        std::process::Command::new("kill")
            .args([sig, &pid])
            .status()
            .unwrap();
    };
    stop("-STOP");
    // kill(2) returns once the signal is queued: wait until every thread of n2 is stopped, or
    // a request sent now may still be served (seen once on a loaded machine).
    let stopped = || {
        let tasks = std::fs::read_dir(format!("/proc/{pid}/task"))
            .into_iter()
            .flatten();
        tasks.flatten().all(|t| {
            std::fs::read_to_string(t.path().join("stat"))
                .ok()
                .and_then(|st| {
                    st.rsplit(')')
                        .next()
                        .map(|r| r.trim_start().starts_with('T'))
                })
                .unwrap_or(false)
        })
    };
    assert!(
        eventually(Duration::from_secs(5), stopped),
        "n2 did not stop"
    );
    let t = Instant::now();
    let e = c1.err(&["GET", &far]);
    stop("-CONT");
    assert!(e.starts_with("TRYAGAIN"), "{e}");
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    assert!(eventually(Duration::from_secs(5), || {
        c1.reply(&["GET", &far]) == Reply::bulk("1")
    }));
}

#[test]
fn a_multi_node_site_converges_with_another_site() {
    let root = tempfile::tempdir().unwrap();
    let b_sync = free_port();
    let b_port = free_port();
    let (a1, a2) = start_site(
        root.path(),
        "a",
        &["--peer", &format!("b=127.0.0.1:{b_sync}")],
    );
    let b_dir = root.path().join("b");
    std::fs::create_dir_all(&b_dir).unwrap();
    let args: Vec<String> = [
        "server",
        "--port",
        &b_port.to_string(),
        "--dir",
        &b_dir.join("data").display().to_string(),
        "--site",
        "b",
        "--shards",
        "2",
        "--sync-port",
        &b_sync.to_string(),
        "--peer",
        &format!("a=127.0.0.1:{}", a1.ports.sync),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut b = spawn_and_wait(env!("CARGO_BIN_EXE_meridian"), &args, &b_dir, b_port);
    // Concurrent writers on the three main ports, to overlapping keys.
    let ports = [a1.ports.main, a2.ports.main, b_port];
    let writers: Vec<_> = ports
        .iter()
        .enumerate()
        .map(|(w, &port)| {
            std::thread::spawn(move || {
                let mut c = Raw::connect(port);
                for i in 0..400 {
                    let k = format!("k{}", i % 150);
                    match i % 4 {
                        0 => c.ok(&["SET", &k, &format!("w{w}-{i}")]),
                        1 => {
                            c.reply(&["SADD", &format!("s{}", i % 20), &format!("{w}-{i}")]);
                        }
                        2 => {
                            c.reply(&["INCRBY", &format!("n{}", i % 10), "1"]);
                        }
                        _ => {
                            c.reply(&["DEL", &k]);
                        }
                    }
                }
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    let digest = |port: u16| -> String {
        match Raw::connect(port).reply(&["CRDT.DIGEST"]) {
            Reply::Bulk(b) => String::from_utf8_lossy(&b).into_owned(),
            other => panic!("CRDT.DIGEST: {other:?}"),
        }
    };
    let converged = eventually(Duration::from_secs(30), || {
        let d = digest(a1.ports.main);
        d == digest(a2.ports.main) && d == digest(b_port)
    });
    let counters: i64 = (0..10)
        .map(
            |i| match Raw::connect(b_port).reply(&["GET", &format!("n{i}")]) {
                Reply::Bulk(v) => String::from_utf8_lossy(&v).parse::<i64>().unwrap(),
                _ => 0,
            },
        )
        .sum();
    let _ = b.kill();
    let _ = b.wait();
    assert!(converged, "digests differ");
    // Every increment of every writer counted once.
    assert_eq!(counters, 3 * 100);
}

#[test]
fn topology_problems_are_named() {
    let root = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| -> String {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_meridian"))
            .args([
                "server",
                "--dir",
                &root.path().join("x").display().to_string(),
            ])
            .args(args)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{args:?} started");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let (p1, p2) = (node_ports(), node_ports());
    let good = topology_text(1, p1, p2);
    let file = |name: &str, text: &str| -> String {
        let p = root.path().join(name);
        std::fs::write(&p, text).unwrap();
        p.display().to_string()
    };
    let f = file("good.toml", &good);
    assert!(run(&["--topology", &f, "--node", "n9"]).contains("node \"n9\" is not in the file"));
    assert!(run(&["--topology", &f]).contains("--topology needs --node"));
    assert!(run(&["--node", "n1"]).contains("give --topology too"));
    let twice = good.clone()
        + "[[slots]]\nrange = \"0-9000\"\nshard = 0\n[[slots]]\nrange = \"9000-16383\"\nshard = 2\n";
    assert!(
        run(&["--topology", &file("twice.toml", &twice), "--node", "n1"]).contains("owned twice")
    );
    let gap = good.clone() + "[[slots]]\nrange = \"0-9000\"\nshard = 0\n";
    assert!(
        run(&["--topology", &file("gap.toml", &gap), "--node", "n1"]).contains("owned by no shard")
    );
    assert!(
        run(&["--topology", &file("bad.toml", "epoch = ["), "--node", "n1"]).contains("topology")
    );
    assert!(
        run(&["--topology", "/nonexistent/t.toml", "--node", "n1"]).contains("/nonexistent/t.toml")
    );
    assert!(
        run(&["--topology", &f, "--node", "n1", "--shards", "3"])
            .contains("runs 2 shards in the topology file")
    );
}

#[test]
fn nodes_of_two_epochs_refuse_each_other() {
    let root = tempfile::tempdir().unwrap();
    let (p1, p2) = (node_ports(), node_ports());
    let t1 = root.path().join("t1.toml");
    let t2 = root.path().join("t2.toml");
    std::fs::write(&t1, topology_text(1, p1, p2)).unwrap();
    std::fs::write(&t2, topology_text(2, p1, p2)).unwrap();
    let n1 = NodeProc::start("n1", p1, &t1, root.path().join("n1"), &[]);
    let _n2 = NodeProc::start("n2", p2, &t2, root.path().join("n2"), &[]);
    let mut c = n1.connect();
    let t = Instant::now();
    let e = c.err(&["GET", &key_on(2, "k")]);
    assert!(t.elapsed() < Duration::from_secs(2));
    assert!(e.starts_with("CLUSTERDOWN"), "{e}");
    assert!(e.contains("epoch mismatch"), "{e}");
    assert!(e.contains("epoch 1") && e.contains("epoch 2"), "{e}");
}

/// SORT on a node's main port: keys of this node's shards are coordinated across them
/// (`sort_across`); a key of another node is refused with a clear error, not read as
/// missing.
#[test]
fn sort_across_this_nodes_shards_and_refused_across_nodes() {
    let root = tempfile::tempdir().unwrap();
    let (n1, _n2) = start_site(root.path(), "a", &[]);
    let mut c = n1.connect();
    // n1 runs shards 0 and 1, n2 shard 2.
    let (src, dst) = (key_on(0, "src"), key_on(1, "dst"));
    let tag = key_on(1, "t");
    let w = |i: u32| format!("{{{tag}}}w_{i}");
    assert_eq!(c.int(&["RPUSH", &src, "1", "2", "3"]), 3);
    c.ok(&["MSET", &w(1), "30", &w(2), "10", &w(3), "20"]);
    let by = format!("{{{tag}}}w_*");
    assert_eq!(
        c.reply(&["SORT", &src, "BY", &by, "GET", &by]),
        Reply::Array(vec![
            Reply::bulk("10"),
            Reply::bulk("20"),
            Reply::bulk("30")
        ])
    );
    assert_eq!(c.int(&["SORT", &src, "BY", &by, "DESC", "STORE", &dst]), 3);
    assert_eq!(
        c.reply(&["LRANGE", &dst, "0", "-1"]),
        Reply::Array(vec![Reply::bulk("1"), Reply::bulk("3"), Reply::bulk("2")])
    );
    let remote = key_on(2, "far");
    let refused =
        String::from_utf8_lossy(&c.call_strs(&["SORT", &src, "STORE", &remote])).into_owned();
    assert!(
        refused.starts_with("-ERR SORT of keys on another node of the site (shard 2)"),
        "{refused}"
    );
    // A pattern whose keys are all on shard 2 (its tag is `remote`).
    let far_by = format!("{{{remote}}}w_*");
    let refused =
        String::from_utf8_lossy(&c.call_strs(&["SORT", &src, "BY", &far_by])).into_owned();
    assert!(
        refused.starts_with("-ERR SORT of keys on another node of the site (shard 2)"),
        "{refused}"
    );
}
