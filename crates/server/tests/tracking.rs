//! Client-side caching over real sockets (Redis 7.0's CLIENT TRACKING): a RESP2 client
//! redirecting to a subscribed connection, RESP3 pushes on the reading connection and their
//! place after the reply of the command that caused them, BCAST with prefixes, OPTIN and
//! OPTOUT with CLIENT CACHING, NOLOOP, flushes (a null invalidation), expiry, the option
//! errors, the limit of the tracking table, and a write arriving from another site
//! invalidating a key a client of this site read. Keys spread over the server's shards.

mod common;

use std::time::Duration;

use common::sites::{CONVERGE_TIMEOUT, Cluster, Opts};
use common::{Raw, Server};

const LINKS_UP: Duration = Duration::from_secs(15);
/// How long a connection waits for an expected invalidation.
const WAIT: Duration = Duration::from_secs(5);
/// Silence that shows nothing more was sent.
const QUIET: Duration = Duration::from_millis(300);

/// A RESP2 connection subscribed to `__redis__:invalidate`, and its id.
fn redirect_target(srv_port: u16) -> (Raw, i64) {
    let mut c = Raw::connect(srv_port);
    let id = c.int(&["CLIENT", "ID"]);
    assert_eq!(
        c.call_text(&["SUBSCRIBE", "__redis__:invalidate"]),
        "*3\r\n$9\r\nsubscribe\r\n$20\r\n__redis__:invalidate\r\n:1\r\n"
    );
    (c, id)
}

/// The keys of the next `__redis__:invalidate` message (None: a null, a flush).
fn next_message(c: &mut Raw) -> Option<Vec<String>> {
    let r = c
        .try_read_reply(WAIT)
        .unwrap_or_else(|e| panic!("no invalidation: {e}"));
    let text = String::from_utf8_lossy(&r).into_owned();
    assert!(
        text.starts_with("*3\r\n$7\r\nmessage\r\n$20\r\n__redis__:invalidate\r\n"),
        "{text:?}"
    );
    if text.ends_with("$-1\r\n") || text.ends_with("*-1\r\n") {
        return None;
    }
    match common::parse_reply(&r) {
        common::Reply::Array(items) => items.get(2).map(|keys| keys.strings()),
        other => panic!("not a message: {other:?}"),
    }
}

fn quiet(c: &mut Raw) {
    let (rest, _) = c.read_until_quiet(QUIET);
    assert!(rest.is_empty(), "unexpected: {}", common::escape(&rest));
}

fn hello3(c: &mut Raw) {
    let r = c.call_text(&["HELLO", "3"]);
    assert!(r.starts_with('%'), "{r}");
}

#[test]
fn resp2_redirect_gets_each_read_key_once() {
    let srv = Server::start();
    let (mut redir, id) = redirect_target(srv.port);
    let mut r = srv.connect();
    let mut w = srv.connect();
    r.ok(&["CLIENT", "TRACKING", "on", "REDIRECT", &id.to_string()]);
    assert_eq!(r.int(&["CLIENT", "GETREDIR"]), id);
    w.ok(&["SET", "a", "1"]);
    w.ok(&["SET", "b", "1"]);
    r.call_text(&["GET", "a"]);
    // Not read: no message.
    w.int(&["INCR", "b"]);
    w.int(&["INCR", "a"]);
    assert_eq!(next_message(&mut redir), Some(vec!["a".to_string()]));
    // Forgotten after one invalidation until read again.
    w.int(&["INCR", "a"]);
    quiet(&mut redir);
    // Keys on several shards.
    r.call_text(&["MGET", "k1", "k2", "k3", "k4"]);
    w.ok(&["MSET", "k1", "x", "k2", "x", "k3", "x", "k4", "x"]);
    let mut got = Vec::new();
    for _ in 0..4 {
        got.extend(next_message(&mut redir).unwrap_or_default());
    }
    got.sort();
    assert_eq!(got, ["k1", "k2", "k3", "k4"]);
    quiet(&mut redir);
    let info = String::from_utf8_lossy(&w.call_strs(&["INFO", "clients"])).into_owned();
    assert!(info.contains("tracking_clients:1\r\n"), "{info}");
    r.ok(&["CLIENT", "TRACKING", "off"]);
    assert_eq!(r.int(&["CLIENT", "GETREDIR"]), -1);
}

#[test]
fn resp3_push_follows_the_reply_of_the_command_that_caused_it() {
    let srv = Server::start();
    let mut r = srv.connect();
    hello3(&mut r);
    r.ok(&["CLIENT", "TRACKING", "on"]);
    assert_eq!(r.int(&["HSET", "myhash", "f", "1"]), 1);
    r.call_text(&["HGET", "myhash", "f"]);
    // The reply first, then the invalidation of the key the client itself changed.
    let both = r.call_text(&["HDEL", "myhash", "f"]);
    assert_eq!(both, ":1\r\n");
    assert_eq!(
        r.try_read_reply(WAIT)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .ok(),
        Some(">2\r\n$10\r\ninvalidate\r\n*1\r\n$6\r\nmyhash\r\n".to_string())
    );
    // Another client's write: the push comes before the next reply.
    let mut w = srv.connect();
    w.ok(&["SET", "key1", "1"]);
    r.call_text(&["GET", "key1"]);
    w.ok(&["SET", "key1", "2"]);
    let push = r.try_read_reply(WAIT).expect("push");
    assert_eq!(
        String::from_utf8_lossy(&push),
        ">2\r\n$10\r\ninvalidate\r\n*1\r\n$4\r\nkey1\r\n"
    );
    assert_eq!(r.call_text(&["PING"]), "+PONG\r\n");
    // A transaction's invalidations come after EXEC's reply.
    r.ok(&["MSET", "a{t}", "1", "b{t}", "2"]);
    r.call_text(&["GET", "a{t}"]);
    r.ok(&["MULTI"]);
    r.call_text(&["INCR", "a{t}"]);
    r.call_text(&["GET", "b{t}"]);
    assert_eq!(r.call_text(&["EXEC"]), "*2\r\n:2\r\n$1\r\n2\r\n");
    let push = r.try_read_reply(WAIT).expect("push");
    assert_eq!(
        String::from_utf8_lossy(&push),
        ">2\r\n$10\r\ninvalidate\r\n*1\r\n$4\r\na{t}\r\n"
    );
    // CLIENT REPLY OFF drops the reply, not the push due to the client's own write.
    r.call_text(&["GET", "a{t}"]);
    r.send_cmd(&[b"CLIENT", b"REPLY", b"OFF"]);
    r.send_cmd(&[b"SET", b"a{t}", b"9"]);
    let push = r.try_read_reply(WAIT).expect("push under CLIENT REPLY OFF");
    assert_eq!(
        String::from_utf8_lossy(&push),
        ">2\r\n$10\r\ninvalidate\r\n*1\r\n$4\r\na{t}\r\n"
    );
    r.ok(&["CLIENT", "REPLY", "ON"]);
    // NOLOOP: its own writes send nothing.
    r.ok(&["CLIENT", "TRACKING", "on", "NOLOOP"]);
    r.call_text(&["GET", "b{t}"]);
    r.ok(&["SET", "b{t}", "3"]);
    quiet(&mut r);
}

/// Redis's unit/tracking "Unblocked BLMOVE gets notification after response": a blocked
/// BLMOVE served by another client's push writes a key its own client tracks; the reply
/// comes first, then the invalidation. Three fresh connections, so that with several shards
/// one of them lives on another thread than the keys' shard (served there, its reply and
/// push travel back together).
#[test]
fn a_served_blocking_command_is_answered_before_its_own_invalidation() {
    let srv = Server::start();
    let mut r = srv.connect();
    for _ in 0..3 {
        r.call_text(&["DEL", "list1{t}", "list2{t}"]);
        assert_eq!(r.int(&["RPUSH", "list2{t}", "a"]), 1);
        let mut rd = srv.connect();
        hello3(&mut rd);
        rd.ok(&["CLIENT", "TRACKING", "on"]);
        rd.call_text(&["LRANGE", "list2{t}", "0", "-1"]);
        rd.send_cmd(&[b"BLMOVE", b"list1{t}", b"list2{t}", b"LEFT", b"LEFT", b"0"]);
        assert!(
            common::sites::eventually(WAIT, || r
                .call_text(&["INFO", "clients"])
                .contains("blocked_clients:1\r\n")),
            "BLMOVE did not block"
        );
        assert_eq!(r.int(&["RPUSH", "list1{t}", "foo"]), 1);
        assert_eq!(String::from_utf8_lossy(&rd.read_reply()), "$3\r\nfoo\r\n");
        assert_eq!(
            String::from_utf8_lossy(&rd.read_reply()),
            ">2\r\n$10\r\ninvalidate\r\n*1\r\n$8\r\nlist2{t}\r\n"
        );
    }
}

#[test]
fn bcast_prefixes_and_noloop() {
    let srv = Server::start();
    let (mut redir, id) = redirect_target(srv.port);
    let mut r = srv.connect();
    let mut w = srv.connect();
    let id = id.to_string();
    r.ok(&[
        "CLIENT", "TRACKING", "on", "BCAST", "REDIRECT", &id, "PREFIX", "a:", "PREFIX", "b:",
    ]);
    r.ok(&["MULTI"]);
    for k in ["a:1{t}", "a:2{t}", "b:1{t}", "c:1{t}"] {
        r.call_text(&["INCR", k]);
    }
    r.call_text(&["EXEC"]);
    // One message per prefix.
    let mut got = vec![
        next_message(&mut redir).unwrap_or_default(),
        next_message(&mut redir).unwrap_or_default(),
    ];
    got.sort();
    assert_eq!(got, [vec!["a:1{t}", "a:2{t}"], vec!["b:1{t}"]]);
    quiet(&mut redir);
    let info = String::from_utf8_lossy(&w.call_strs(&["INFO", "stats"])).into_owned();
    assert!(info.contains("tracking_total_prefixes:2\r\n"), "{info}");
    // NOLOOP: what the client itself changes is left out.
    r.ok(&["CLIENT", "TRACKING", "off"]);
    r.ok(&[
        "CLIENT", "TRACKING", "on", "BCAST", "REDIRECT", &id, "NOLOOP",
    ]);
    w.ok(&["SET", "other1", "1"]);
    assert_eq!(next_message(&mut redir), Some(vec!["other1".to_string()]));
    r.ok(&["SET", "loop", "1"]);
    w.ok(&["SET", "other2", "1"]);
    assert_eq!(next_message(&mut redir), Some(vec!["other2".to_string()]));
    // Expiry is nobody's: the client hears of its own key expiring.
    r.ok(&["SET", "mine", "v", "PX", "1"]);
    assert_eq!(next_message(&mut redir), Some(vec!["mine".to_string()]));
    quiet(&mut redir);
    // Errors as Redis's.
    let mut e = srv.connect();
    assert!(
        e.err(&[
            "CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", "FOOBAR", "PREFIX", "FOO"
        ])
        .starts_with("ERR Prefix 'FOOBAR' overlaps with another provided prefix 'FOO'")
    );
    e.ok(&[
        "CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", "FOO", "PREFIX", "BAR",
    ]);
    assert!(
        e.err(&["CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", "FO"])
            .starts_with("ERR Prefix 'FO' overlaps with an existing prefix 'FOO'")
    );
    assert_eq!(
        e.err(&["CLIENT", "TRACKING", "ON"]),
        "ERR You can't switch BCAST mode on/off before disabling tracking for this client, and then re-enabling it with a different mode."
    );
    e.ok(&["CLIENT", "TRACKING", "OFF"]);
    assert_eq!(
        e.err(&["CLIENT", "TRACKING", "ON", "PREFIX", "x"]),
        "ERR PREFIX option requires BCAST mode to be enabled"
    );
    assert_eq!(
        e.err(&["CLIENT", "TRACKING", "ON", "BCAST", "OPTIN"]),
        "ERR OPTIN and OPTOUT are not compatible with BCAST"
    );
    assert_eq!(
        e.err(&["CLIENT", "TRACKING", "ON", "OPTIN", "OPTOUT"]),
        "ERR You can't specify both OPTIN mode and OPTOUT mode"
    );
    assert_eq!(
        e.err(&["CLIENT", "TRACKING", "ON", "REDIRECT", "999999"]),
        "ERR The client ID you want redirect to does not exist"
    );
    assert_eq!(e.err(&["CLIENT", "TRACKING", "MAYBE"]), "ERR syntax error");
    assert_eq!(
        e.err(&["CLIENT", "CACHING", "YES"]),
        "ERR CLIENT CACHING can be called only when the client is in tracking mode with OPTIN or OPTOUT mode enabled"
    );
}

#[test]
fn optin_and_optout_follow_client_caching() {
    let srv = Server::start();
    let (mut redir, id) = redirect_target(srv.port);
    let id = id.to_string();
    let mut r = srv.connect();
    let mut w = srv.connect();
    r.ok(&["CLIENT", "TRACKING", "on", "OPTIN", "REDIRECT", &id]);
    assert_eq!(
        r.err(&["CLIENT", "CACHING", "NO"]),
        "ERR CLIENT CACHING NO is only valid when tracking is enabled in OPTOUT mode."
    );
    r.call_text(&["GET", "k1"]);
    r.ok(&["CLIENT", "CACHING", "yes"]);
    r.call_text(&["GET", "k2"]);
    // CACHING covered one command only.
    r.call_text(&["GET", "k3"]);
    w.ok(&["SET", "k1", "1"]);
    w.ok(&["SET", "k3", "1"]);
    w.ok(&["SET", "k2", "1"]);
    assert_eq!(next_message(&mut redir), Some(vec!["k2".to_string()]));
    quiet(&mut redir);
    r.ok(&["CLIENT", "TRACKING", "off"]);
    r.ok(&["CLIENT", "TRACKING", "on", "OPTOUT", "REDIRECT", &id]);
    r.ok(&["CLIENT", "CACHING", "no"]);
    r.call_text(&["GET", "k1"]);
    r.call_text(&["GET", "k2"]);
    w.ok(&["SET", "k1", "2"]);
    w.ok(&["SET", "k2", "2"]);
    assert_eq!(next_message(&mut redir), Some(vec!["k2".to_string()]));
    quiet(&mut redir);
    assert_eq!(
        r.call_text(&["CLIENT", "TRACKINGINFO"]),
        format!(
            "*6\r\n$5\r\nflags\r\n*2\r\n$2\r\non\r\n$6\r\noptout\r\n$8\r\nredirect\r\n:{id}\r\n$8\r\nprefixes\r\n*0\r\n"
        )
    );
}

#[test]
fn flush_sends_a_null_once_and_redirect_loss_is_reported() {
    let srv = Server::start();
    let (mut redir, id) = redirect_target(srv.port);
    let mut r = srv.connect();
    let mut w = srv.connect();
    r.ok(&["CLIENT", "TRACKING", "on", "REDIRECT", &id.to_string()]);
    r.call_text(&["MGET", "x1", "x2", "x3"]);
    w.ok(&["FLUSHALL"]);
    assert_eq!(next_message(&mut redir), None);
    quiet(&mut redir);
    let stats = String::from_utf8_lossy(&w.call_strs(&["INFO", "stats"])).into_owned();
    assert!(stats.contains("tracking_total_keys:0\r\n"), "{stats}");
    // The redirect connection goes: a RESP3 client hears of it when an invalidation is due.
    hello3(&mut r);
    r.call_text(&["GET", "x1"]);
    drop(redir);
    std::thread::sleep(Duration::from_millis(200));
    w.ok(&["SET", "x1", "v"]);
    let push = r.try_read_reply(WAIT).expect("push");
    assert_eq!(
        String::from_utf8_lossy(&push),
        format!(">2\r\n$21\r\ntracking-redir-broken\r\n:{id}\r\n")
    );
    let info = r.call_text(&["CLIENT", "TRACKINGINFO"]);
    assert_eq!(
        info,
        format!(
            "%3\r\n$5\r\nflags\r\n~2\r\n$2\r\non\r\n$15\r\nbroken_redirect\r\n$8\r\nredirect\r\n:{id}\r\n$8\r\nprefixes\r\n*0\r\n"
        )
    );
    // RESET turns tracking off.
    assert_eq!(r.call_text(&["RESET"]), "+RESET\r\n");
    assert_eq!(r.int(&["CLIENT", "GETREDIR"]), -1);
}

#[test]
fn the_table_limit_invalidates_down_to_it() {
    let srv = Server::start();
    let (mut redir, id) = redirect_target(srv.port);
    let mut r = srv.connect();
    r.ok(&["CLIENT", "TRACKING", "on", "REDIRECT", &id.to_string()]);
    for i in 0..250 {
        r.call_text(&["GET", &format!("key{i}")]);
    }
    r.ok(&["CONFIG", "SET", "tracking-table-max-keys", "1"]);
    // Over several shards, exactly all but one key are invalidated.
    for _ in 0..249 {
        assert!(next_message(&mut redir).is_some());
    }
    quiet(&mut redir);
    let stats = String::from_utf8_lossy(&r.call_strs(&["INFO", "stats"])).into_owned();
    assert!(stats.contains("tracking_total_keys:1\r\n"), "{stats}");
}

#[test]
fn a_write_from_another_site_invalidates() {
    let cluster = Cluster::start(&["a", "b"], Opts::default());
    cluster.wait_links_up(LINKS_UP);
    let mut a = cluster.site(0).connect();
    let mut b = cluster.site(1).connect();
    a.ok(&["SET", "shared", "1"]);
    cluster.wait_converged(CONVERGE_TIMEOUT);
    hello3(&mut b);
    b.ok(&["CLIENT", "TRACKING", "on"]);
    assert_eq!(b.call_text(&["GET", "shared"]), "$1\r\n1\r\n");
    a.ok(&["SET", "shared", "2"]);
    let push = b
        .try_read_reply(WAIT)
        .expect("invalidation from the other site");
    assert_eq!(
        String::from_utf8_lossy(&push),
        ">2\r\n$10\r\ninvalidate\r\n*1\r\n$6\r\nshared\r\n"
    );
    assert_eq!(b.call_text(&["GET", "shared"]), "$1\r\n2\r\n");
    // A removal (DEL) there, and an expiry there, too.
    a.int(&["DEL", "shared"]);
    let push = b.try_read_reply(WAIT).expect("invalidation of the delete");
    assert!(String::from_utf8_lossy(&push).contains("shared"));
}

/// Redis's "Regression test for #11715": invalidations the table's limit frees for a client
/// reach it before the reply of its next command, a command queued in MULTI included (one
/// shard, where the client's keys are its thread's: Redis sends them before the command
/// runs).
#[test]
fn the_tracking_limit_invalidates_before_the_next_reply() {
    let srv = Server::start_single();
    let mut r = srv.connect();
    let mut rd = srv.connect();
    r.ok(&["CONFIG", "SET", "tracking-table-max-keys", "2"]);
    r.ok(&["DEBUG", "PAUSE-CRON", "1"]);
    rd.call_text(&["HELLO", "3"]);
    rd.ok(&["CLIENT", "TRACKING", "on"]);
    rd.call_text(&["MGET", "1{tag}", "2{tag}"]);
    rd.ok(&["MULTI"]);
    r.ok(&["CONFIG", "SET", "tracking-table-max-keys", "1"]);
    // The first reply is the invalidation push, then QUEUED.
    let push = rd.call_text(&["PING"]);
    assert!(
        push.starts_with(">2\r\n$10\r\ninvalidate\r\n*1\r\n") && push.contains("{tag}"),
        "{push:?}"
    );
    assert_eq!(rd.read_reply(), b"+QUEUED\r\n");
    assert_eq!(rd.call_text(&["EXEC"]), "*1\r\n+PONG\r\n");
    r.ok(&["DEBUG", "PAUSE-CRON", "0"]);
}

/// The same across shards: keys tracked on every shard, whichever thread the client's
/// connection lives on, are invalidated down to a lowered limit before the next reply (the
/// client's own thread's shard alone would free only its share).
#[test]
fn a_lowered_limit_invalidates_on_every_shard_before_the_next_reply() {
    let srv = Server::start();
    let mut r = srv.connect();
    let mut rd = srv.connect();
    r.ok(&["DEBUG", "PAUSE-CRON", "1"]);
    hello3(&mut rd);
    rd.ok(&["CLIENT", "TRACKING", "on"]);
    let keys: Vec<String> = (0..32).map(|i| format!("key:{i}")).collect();
    for k in &keys {
        rd.call_text(&["GET", k]);
    }
    rd.ok(&["MULTI"]);
    r.ok(&["CONFIG", "SET", "tracking-table-max-keys", "1"]);
    rd.send(b"PING\r\n");
    let mut invalidated = 0;
    loop {
        let reply = String::from_utf8_lossy(&rd.read_reply()).into_owned();
        if reply == "+QUEUED\r\n" {
            break;
        }
        assert!(
            reply.starts_with(">2\r\n$10\r\ninvalidate\r\n"),
            "{reply:?}"
        );
        invalidated += keys
            .iter()
            .filter(|k| reply.contains(&format!("\r\n{k}\r\n")))
            .count();
    }
    assert_eq!(invalidated, keys.len() - 1);
    assert_eq!(rd.call_text(&["EXEC"]), "*1\r\n+PONG\r\n");
    let stats = String::from_utf8_lossy(&r.call_strs(&["INFO", "stats"])).into_owned();
    assert!(stats.contains("tracking_total_keys:1\r\n"), "{stats}");
    r.ok(&["DEBUG", "PAUSE-CRON", "0"]);
}
