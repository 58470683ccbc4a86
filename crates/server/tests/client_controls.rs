//! Commands whose effect shows on other connections, over real sockets: CLIENT PAUSE and
//! UNPAUSE (WRITE and ALL; scripts by their declared flags; expiry held while paused), CLIENT REPLY OFF/ON/SKIP, CLIENT UNBLOCK
//! (TIMEOUT, ERROR) of BLPOP and WAIT, WAIT's timeout, SWAPDB and MOVE waking a blocked client,
//! and several clients blocked on a key when the first one cannot be served. The same
//! scenarios run against the reference redis-server (when installed), so the expectations are
//! Redis 7.0's.

mod common;

use std::time::{Duration, Instant};

use common::text::{call, read, send};
use common::{Raw, RedisRef, Server};

/// Nothing arrives within a short while.
fn assert_silent(c: &mut Raw) {
    match c.try_read_reply(Duration::from_millis(150)) {
        Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {}
        other => panic!("expected no reply yet, got {other:?}"),
    }
}

/// Waits until INFO clients shows `n` blocked clients.
fn wait_blocked(c: &mut Raw, n: usize) {
    let want = format!("blocked_clients:{n}\r\n");
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let info = call(c, &["INFO", "clients"]);
        if info.contains(&want) {
            return;
        }
        assert!(Instant::now() < deadline, "never {want:?}: {info}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn client_id(c: &mut Raw) -> String {
    call(c, &["CLIENT", "ID"])
        .trim_start_matches(':')
        .trim_end()
        .to_string()
}

fn pause(port: u16) {
    let conn = || Raw::connect(port);
    let (mut a, mut b, mut w) = (conn(), conn(), conn());
    call(&mut w, &["FLUSHALL"]);
    call(&mut w, &["SET", "k", "v"]);
    // WRITE: reads answer, writes (and PUBLISH, which may replicate) wait.
    assert_eq!(
        call(&mut w, &["CLIENT", "PAUSE", "100000", "WRITE"]),
        "+OK\r\n"
    );
    assert_eq!(call(&mut a, &["GET", "k"]), "$1\r\nv\r\n");
    send(&mut a, &["SET", "k", "w"]);
    send(&mut b, &["PUBLISH", "ch", "m"]);
    wait_blocked(&mut w, 2);
    assert_silent(&mut a);
    // Errors found before the pause applies are answered at once.
    assert!(call(&mut w, &["SET", "k"]).starts_with("-ERR wrong number of arguments"));
    assert_eq!(call(&mut w, &["CLIENT", "UNPAUSE"]), "+OK\r\n");
    assert_eq!(read(&mut a), "+OK\r\n");
    assert_eq!(read(&mut b), ":0\r\n");
    assert_eq!(call(&mut w, &["GET", "k"]), "$1\r\nw\r\n");

    // Scripts decide by the flags they declare (Redis's `scriptFlagsToCmdFlags`): one that
    // declares no-writes runs (EVAL, EVALSHA, FCALL); one without a shebang, or with one
    // declaring writes, waits.
    let lib = "#!lua name=pauselib\nredis.register_function{function_name='pause_ro', \
               callback=function() return 'ro' end, flags={'no-writes'}}";
    assert_eq!(
        call(&mut w, &["FUNCTION", "LOAD", "REPLACE", lib]),
        "$8\r\npauselib\r\n"
    );
    let ro_sha = call(
        &mut w,
        &["SCRIPT", "LOAD", "#!lua flags=no-writes\nreturn 3"],
    );
    let ro_sha = ro_sha
        .trim_end()
        .rsplit('\n')
        .next()
        .unwrap_or_default()
        .to_string();
    call(&mut w, &["CLIENT", "PAUSE", "100000", "WRITE"]);
    assert_eq!(
        call(&mut a, &["EVAL", "#!lua flags=no-writes\nreturn 'ro'", "0"]),
        "$2\r\nro\r\n"
    );
    assert_eq!(call(&mut a, &["EVALSHA", &ro_sha, "0"]), ":3\r\n");
    assert_eq!(call(&mut a, &["FCALL", "pause_ro", "0"]), "$2\r\nro\r\n");
    send(&mut a, &["EVAL", "return 1", "0"]);
    send(&mut b, &["EVAL", "#!lua\nreturn 2", "0"]);
    wait_blocked(&mut w, 2);
    assert_silent(&mut a);
    call(&mut w, &["CLIENT", "UNPAUSE"]);
    assert_eq!(read(&mut a), ":1\r\n");
    assert_eq!(read(&mut b), ":2\r\n");
    call(&mut w, &["FUNCTION", "DELETE", "pauselib"]);

    // A write transaction queued before the pause waits at EXEC; pipelined commands behind
    // a held command wait for it.
    call(&mut a, &["MULTI"]);
    call(&mut a, &["INCR", "n"]);
    call(&mut w, &["CLIENT", "PAUSE", "100000", "WRITE"]);
    let mut pipe = common::cmd(&[b"EXEC"]);
    pipe.extend_from_slice(&common::cmd(&[b"PING"]));
    a.send(&pipe);
    wait_blocked(&mut w, 1);
    call(&mut w, &["CLIENT", "UNPAUSE"]);
    assert_eq!(read(&mut a), "*1\r\n:1\r\n");
    assert_eq!(read(&mut a), "+PONG\r\n");

    // Keys do not expire while paused: they read as missing and are removed afterwards.
    let expired = |w: &mut Raw| {
        let info = call(w, &["INFO", "stats"]);
        info.split("\r\n")
            .find_map(|l| l.strip_prefix("expired_keys:"))
            .unwrap_or("?")
            .to_string()
    };
    call(&mut w, &["SET", "e", "1", "PX", "10"]);
    call(&mut w, &["CLIENT", "PAUSE", "100000", "WRITE"]);
    let before = expired(&mut w);
    std::thread::sleep(Duration::from_millis(150));
    assert_eq!(call(&mut w, &["GET", "e"]), "$-1\r\n");
    assert_eq!(expired(&mut w), before);
    call(&mut w, &["CLIENT", "UNPAUSE"]);
    assert_eq!(call(&mut w, &["GET", "e"]), "$-1\r\n");
    assert_ne!(expired(&mut w), before);

    // ALL holds reads too, and ends by itself at its timeout.
    assert_eq!(call(&mut w, &["CLIENT", "PAUSE", "300", "ALL"]), "+OK\r\n");
    let t = Instant::now();
    assert_eq!(call(&mut a, &["GET", "k"]), "$1\r\nw\r\n");
    assert!(
        t.elapsed() >= Duration::from_millis(150),
        "{:?}",
        t.elapsed()
    );
}

fn reply_modes(port: u16) {
    let mut a = Raw::connect(port);
    call(&mut a, &["DEL", "r"]);
    // OFF: nothing until ON, which answers.
    let mut pipe = common::cmd(&[b"CLIENT", b"REPLY", b"OFF"]);
    pipe.extend_from_slice(&common::cmd(&[b"INCR", b"r"]));
    pipe.extend_from_slice(&common::cmd(&[b"GET", b"nokey"]));
    pipe.extend_from_slice(&common::cmd(&[b"CLIENT", b"REPLY", b"ON"]));
    pipe.extend_from_slice(&common::cmd(&[b"GET", b"r"]));
    a.send(&pipe);
    assert_eq!(read(&mut a), "+OK\r\n");
    assert_eq!(read(&mut a), "$1\r\n1\r\n");
    // SKIP: only the next reply is dropped.
    let mut pipe = common::cmd(&[b"CLIENT", b"REPLY", b"SKIP"]);
    pipe.extend_from_slice(&common::cmd(&[b"INCR", b"r"]));
    pipe.extend_from_slice(&common::cmd(&[b"INCR", b"r"]));
    a.send(&pipe);
    assert_eq!(read(&mut a), ":3\r\n");
    // Subscription confirmations are pushes: OFF does not silence them.
    let mut s = Raw::connect(port);
    let mut pipe = common::cmd(&[b"CLIENT", b"REPLY", b"OFF"]);
    pipe.extend_from_slice(&common::cmd(&[b"SUBSCRIBE", b"ch"]));
    s.send(&pipe);
    assert_eq!(read(&mut s), "*3\r\n$9\r\nsubscribe\r\n$2\r\nch\r\n:1\r\n");
}

fn unblock_and_wait(port: u16) {
    let conn = || Raw::connect(port);
    let (mut a, mut w) = (conn(), conn());
    call(&mut w, &["DEL", "bl"]);
    let id = client_id(&mut a);
    assert_eq!(call(&mut w, &["CLIENT", "UNBLOCK", &id]), ":0\r\n");
    send(&mut a, &["BLPOP", "bl", "0"]);
    wait_blocked(&mut w, 1);
    assert_eq!(call(&mut w, &["CLIENT", "UNBLOCK", &id]), ":1\r\n");
    assert_eq!(read(&mut a), "*-1\r\n");
    send(&mut a, &["BLPOP", "bl", "0"]);
    wait_blocked(&mut w, 1);
    assert_eq!(call(&mut w, &["CLIENT", "UNBLOCK", &id, "ERROR"]), ":1\r\n");
    assert_eq!(
        read(&mut a),
        "-UNBLOCKED client unblocked via CLIENT UNBLOCK\r\n"
    );
    // WAIT with no replica: its timeout, then 0; CLIENT UNBLOCK ends it with the count.
    let t = Instant::now();
    assert_eq!(call(&mut a, &["WAIT", "1", "200"]), ":0\r\n");
    assert!(
        t.elapsed() >= Duration::from_millis(150),
        "{:?}",
        t.elapsed()
    );
    send(&mut a, &["WAIT", "1", "0"]);
    wait_blocked(&mut w, 1);
    assert_eq!(call(&mut w, &["CLIENT", "UNBLOCK", &id]), ":1\r\n");
    assert_eq!(read(&mut a), ":0\r\n");
    assert_eq!(call(&mut a, &["PING"]), "+PONG\r\n");
}

fn databases_wake_waiters(port: u16) {
    let conn = || Raw::connect(port);
    let (mut a, mut b, mut w) = (conn(), conn(), conn());
    call(&mut w, &["FLUSHALL"]);
    // SWAPDB brings a list into the database a client waits in.
    call(&mut w, &["SELECT", "1"]);
    call(&mut w, &["RPUSH", "sw", "x"]);
    call(&mut w, &["SELECT", "0"]);
    send(&mut a, &["BLPOP", "sw", "0"]);
    wait_blocked(&mut w, 1);
    assert_eq!(call(&mut w, &["SWAPDB", "0", "1"]), "+OK\r\n");
    assert_eq!(read(&mut a), "*2\r\n$2\r\nsw\r\n$1\r\nx\r\n");
    // MOVE too.
    send(&mut a, &["BLPOP", "mv", "0"]);
    wait_blocked(&mut w, 1);
    call(&mut w, &["SELECT", "1"]);
    call(&mut w, &["RPUSH", "mv", "y"]);
    assert_eq!(call(&mut w, &["MOVE", "mv", "0"]), ":1\r\n");
    assert_eq!(read(&mut a), "*2\r\n$2\r\nmv\r\n$1\r\ny\r\n");
    call(&mut w, &["SELECT", "0"]);
    // The first waiter cannot use the element (its destination is a string): the next one
    // is served. (Hash tags keep source and destination on one shard, as Redis Cluster
    // requires of BRPOPLPUSH.)
    call(&mut w, &["SET", "{q}t1", "nolist"]);
    send(&mut a, &["BRPOPLPUSH", "{q}src", "{q}t1", "0"]);
    wait_blocked(&mut w, 1);
    send(&mut b, &["BRPOPLPUSH", "{q}src", "{q}t2", "0"]);
    wait_blocked(&mut w, 2);
    call(&mut w, &["LPUSH", "{q}src", "foo"]);
    assert!(read(&mut a).starts_with("-WRONGTYPE"));
    assert_eq!(read(&mut b), "$3\r\nfoo\r\n");
    assert_eq!(
        call(&mut w, &["LRANGE", "{q}t2", "0", "-1"]),
        "*1\r\n$3\r\nfoo\r\n"
    );
}

fn scenarios(port: u16) {
    pause(port);
    reply_modes(port);
    unblock_and_wait(port);
    databases_wake_waiters(port);
}

#[test]
fn client_controls_meridian() {
    let srv = Server::start();
    scenarios(srv.port);
}

#[test]
fn client_controls_reference() {
    if !RedisRef::available() {
        eprintln!("redis-server not installed; skipped");
        return;
    }
    let r = RedisRef::start();
    scenarios(r.port);
}
