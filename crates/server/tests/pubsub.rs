//! Pub/Sub over real sockets: SUBSCRIBE/PSUBSCRIBE/PUBLISH across connections in RESP2 and
//! RESP3, unsubscribe-all, the RESP2 subscribed-mode restriction, PUBSUB introspection, RESET
//! and disconnect cleanup, and MONITOR sharing the push path.

mod common;

use std::time::Duration;

use common::Server;
use common::text::{call, read, s, send};

const RESTRICTED: &str =
    "only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context";

#[test]
fn subscribe_publish_resp2() {
    let srv = Server::start();
    let mut sub = srv.connect();
    let mut publ = srv.connect();
    send(&mut sub, &["SUBSCRIBE", "a", "b"]);
    assert_eq!(read(&mut sub), "*3\r\n$9\r\nsubscribe\r\n$1\r\na\r\n:1\r\n");
    assert_eq!(read(&mut sub), "*3\r\n$9\r\nsubscribe\r\n$1\r\nb\r\n:2\r\n");
    // Subscribing twice keeps the count.
    assert_eq!(
        call(&mut sub, &["SUBSCRIBE", "a"]),
        "*3\r\n$9\r\nsubscribe\r\n$1\r\na\r\n:2\r\n"
    );
    assert_eq!(call(&mut publ, &["PUBLISH", "a", "hello"]), ":1\r\n");
    assert_eq!(
        read(&mut sub),
        "*3\r\n$7\r\nmessage\r\n$1\r\na\r\n$5\r\nhello\r\n"
    );
    assert_eq!(call(&mut publ, &["PUBLISH", "nobody", "x"]), ":0\r\n");
    // The restriction and PING in subscribed mode.
    assert_eq!(
        call(&mut sub, &["GET", "x"]),
        format!("-ERR Can't execute 'get': {RESTRICTED}\r\n")
    );
    assert_eq!(
        call(&mut sub, &["CLIENT", "LIST"]),
        format!("-ERR Can't execute 'client|list': {RESTRICTED}\r\n")
    );
    assert_eq!(call(&mut sub, &["PING"]), "*2\r\n$4\r\npong\r\n$0\r\n\r\n");
    assert_eq!(
        call(&mut sub, &["PING", "hi"]),
        "*2\r\n$4\r\npong\r\n$2\r\nhi\r\n"
    );
    // Unsubscribe all: one reply per channel (hash order), counts down to 0.
    send(&mut sub, &["UNSUBSCRIBE"]);
    let mut got = [read(&mut sub), read(&mut sub)];
    got.sort();
    assert!(got[0].starts_with("*3\r\n$11\r\nunsubscribe\r\n$1\r\n"));
    let counts: Vec<bool> = got
        .iter()
        .map(|r| r.ends_with(":0\r\n") || r.ends_with(":1\r\n"))
        .collect();
    assert_eq!(counts, vec![true, true]);
    assert_eq!(
        call(&mut sub, &["UNSUBSCRIBE"]),
        "*3\r\n$11\r\nunsubscribe\r\n$-1\r\n:0\r\n"
    );
    assert_eq!(
        call(&mut sub, &["PUNSUBSCRIBE"]),
        "*3\r\n$12\r\npunsubscribe\r\n$-1\r\n:0\r\n"
    );
    // Out of subscribed mode: normal commands and PING again.
    assert_eq!(call(&mut sub, &["PING"]), "+PONG\r\n");
    assert_eq!(call(&mut sub, &["GET", "x"]), "$-1\r\n");
    assert_eq!(call(&mut publ, &["PUBLISH", "a", "hello"]), ":0\r\n");
}

#[test]
fn patterns_and_counts() {
    let srv = Server::start();
    let mut sub = srv.connect();
    let mut publ = srv.connect();
    assert_eq!(
        call(&mut sub, &["SUBSCRIBE", "news.it"]),
        "*3\r\n$9\r\nsubscribe\r\n$7\r\nnews.it\r\n:1\r\n"
    );
    assert_eq!(
        call(&mut sub, &["PSUBSCRIBE", "news.*"]),
        "*3\r\n$10\r\npsubscribe\r\n$6\r\nnews.*\r\n:2\r\n"
    );
    assert_eq!(
        call(&mut sub, &["PSUBSCRIBE", "n?ws.[a-j]*"]),
        "*3\r\n$10\r\npsubscribe\r\n$11\r\nn?ws.[a-j]*\r\n:3\r\n"
    );
    // One channel delivery plus two pattern deliveries.
    assert_eq!(call(&mut publ, &["PUBLISH", "news.it", "m1"]), ":3\r\n");
    assert_eq!(
        read(&mut sub),
        "*3\r\n$7\r\nmessage\r\n$7\r\nnews.it\r\n$2\r\nm1\r\n"
    );
    let mut p = vec![read(&mut sub), read(&mut sub)];
    p.sort();
    assert_eq!(
        p,
        vec![
            "*4\r\n$8\r\npmessage\r\n$11\r\nn?ws.[a-j]*\r\n$7\r\nnews.it\r\n$2\r\nm1\r\n",
            "*4\r\n$8\r\npmessage\r\n$6\r\nnews.*\r\n$7\r\nnews.it\r\n$2\r\nm1\r\n",
        ]
    );
    assert_eq!(call(&mut publ, &["PUBLISH", "news.us", "m2"]), ":1\r\n");
    assert_eq!(
        read(&mut sub),
        "*4\r\n$8\r\npmessage\r\n$6\r\nnews.*\r\n$7\r\nnews.us\r\n$2\r\nm2\r\n"
    );
    // Introspection from another client.
    let mut other = srv.connect();
    assert_eq!(
        call(&mut other, &["SUBSCRIBE", "news.it"]),
        "*3\r\n$9\r\nsubscribe\r\n$7\r\nnews.it\r\n:1\r\n"
    );
    assert_eq!(call(&mut publ, &["PUBSUB", "NUMPAT"]), ":2\r\n");
    assert_eq!(
        call(&mut publ, &["PUBSUB", "NUMSUB", "news.it", "zz"]),
        "*4\r\n$7\r\nnews.it\r\n:2\r\n$2\r\nzz\r\n:0\r\n"
    );
    assert_eq!(call(&mut publ, &["PUBSUB", "NUMSUB"]), "*0\r\n");
    assert_eq!(
        call(&mut publ, &["PUBSUB", "CHANNELS"]),
        "*1\r\n$7\r\nnews.it\r\n"
    );
    assert_eq!(call(&mut publ, &["PUBSUB", "CHANNELS", "x*"]), "*0\r\n");
    assert_eq!(
        call(&mut publ, &["PUBSUB", "CHANNELS", "a", "b"]),
        "-ERR unknown subcommand or wrong number of arguments for 'CHANNELS'. Try PUBSUB HELP.\r\n"
    );
    assert!(call(&mut publ, &["PUBSUB", "HELP"]).starts_with(
        "*14\r\n+PUBSUB <subcommand> [<arg> [value] [opt] ...]. Subcommands are:\r\n"
    ));
    // PUNSUBSCRIBE with no argument: patterns in subscription order.
    send(&mut sub, &["PUNSUBSCRIBE"]);
    assert_eq!(
        read(&mut sub),
        "*3\r\n$12\r\npunsubscribe\r\n$6\r\nnews.*\r\n:2\r\n"
    );
    assert_eq!(
        read(&mut sub),
        "*3\r\n$12\r\npunsubscribe\r\n$11\r\nn?ws.[a-j]*\r\n:1\r\n"
    );
    assert_eq!(call(&mut publ, &["PUBSUB", "NUMPAT"]), ":0\r\n");
    // UNSUBSCRIBE of a channel never subscribed still replies.
    assert_eq!(
        call(&mut sub, &["UNSUBSCRIBE", "nope"]),
        "*3\r\n$11\r\nunsubscribe\r\n$4\r\nnope\r\n:1\r\n"
    );
    // Disconnect cleans up.
    drop(other);
    drop(sub);
    let mut n = String::new();
    for _ in 0..100 {
        n = call(&mut publ, &["PUBSUB", "NUMSUB", "news.it"]);
        if n.ends_with(":0\r\n") {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(n, "*2\r\n$7\r\nnews.it\r\n:0\r\n");
}

#[test]
fn resp3_push_frames_and_no_restriction() {
    let srv = Server::start();
    let mut sub = srv.connect();
    let mut publ = srv.connect();
    let hello = call(&mut sub, &["HELLO", "3"]);
    assert!(hello.starts_with("%7\r\n"), "{hello}");
    assert_eq!(
        call(&mut sub, &["SUBSCRIBE", "c"]),
        ">3\r\n$9\r\nsubscribe\r\n$1\r\nc\r\n:1\r\n"
    );
    assert_eq!(
        call(&mut sub, &["PSUBSCRIBE", "c*"]),
        ">3\r\n$10\r\npsubscribe\r\n$2\r\nc*\r\n:2\r\n"
    );
    // RESP3 clients may run anything while subscribed; PING is a plain PONG.
    assert_eq!(call(&mut sub, &["GET", "nokey"]), "_\r\n");
    assert_eq!(call(&mut sub, &["PING"]), "+PONG\r\n");
    assert_eq!(call(&mut publ, &["PUBLISH", "c", "v"]), ":2\r\n");
    assert_eq!(
        read(&mut sub),
        ">3\r\n$7\r\nmessage\r\n$1\r\nc\r\n$1\r\nv\r\n"
    );
    assert_eq!(
        read(&mut sub),
        ">4\r\n$8\r\npmessage\r\n$2\r\nc*\r\n$1\r\nc\r\n$1\r\nv\r\n"
    );
    // Publishing to itself: the pushes precede PUBLISH's reply.
    send(&mut sub, &["PUBLISH", "c", "self"]);
    assert_eq!(
        read(&mut sub),
        ">3\r\n$7\r\nmessage\r\n$1\r\nc\r\n$4\r\nself\r\n"
    );
    assert_eq!(
        read(&mut sub),
        ">4\r\n$8\r\npmessage\r\n$2\r\nc*\r\n$1\r\nc\r\n$4\r\nself\r\n"
    );
    assert_eq!(read(&mut sub), ":2\r\n");
    // A RESP2 subscriber and a RESP3 subscriber of the same channel each get their encoding.
    let mut sub2 = srv.connect();
    assert_eq!(
        call(&mut sub2, &["SUBSCRIBE", "c"]),
        "*3\r\n$9\r\nsubscribe\r\n$1\r\nc\r\n:1\r\n"
    );
    assert_eq!(call(&mut publ, &["PUBLISH", "c", "w"]), ":3\r\n");
    assert_eq!(
        read(&mut sub2),
        "*3\r\n$7\r\nmessage\r\n$1\r\nc\r\n$1\r\nw\r\n"
    );
    assert_eq!(
        read(&mut sub),
        ">3\r\n$7\r\nmessage\r\n$1\r\nc\r\n$1\r\nw\r\n"
    );
    read(&mut sub);
    send(&mut sub, &["UNSUBSCRIBE"]);
    assert_eq!(
        read(&mut sub),
        ">3\r\n$11\r\nunsubscribe\r\n$1\r\nc\r\n:1\r\n"
    );
    assert_eq!(
        call(&mut sub, &["UNSUBSCRIBE"]),
        ">3\r\n$11\r\nunsubscribe\r\n_\r\n:1\r\n"
    );
}

#[test]
fn reset_unsubscribes_and_shard_channels() {
    let srv = Server::start();
    let mut sub = srv.connect();
    let mut publ = srv.connect();
    call(&mut sub, &["SUBSCRIBE", "a"]);
    call(&mut sub, &["PSUBSCRIBE", "*"]);
    assert_eq!(
        call(&mut sub, &["SSUBSCRIBE", "s"]),
        "*3\r\n$10\r\nssubscribe\r\n$1\r\ns\r\n:1\r\n"
    );
    assert_eq!(
        call(&mut publ, &["PUBSUB", "SHARDNUMSUB", "s"]),
        "*2\r\n$1\r\ns\r\n:1\r\n"
    );
    assert_eq!(
        call(&mut publ, &["PUBSUB", "SHARDCHANNELS"]),
        "*1\r\n$1\r\ns\r\n"
    );
    // SPUBLISH reaches shard subscribers only (no patterns).
    assert_eq!(call(&mut publ, &["SPUBLISH", "s", "x"]), ":1\r\n");
    assert_eq!(
        read(&mut sub),
        "*3\r\n$8\r\nsmessage\r\n$1\r\ns\r\n$1\r\nx\r\n"
    );
    assert_eq!(
        call(&mut sub, &["SUNSUBSCRIBE"]),
        "*3\r\n$12\r\nsunsubscribe\r\n$1\r\ns\r\n:0\r\n"
    );
    assert_eq!(call(&mut sub, &["RESET"]), "+RESET\r\n");
    assert_eq!(call(&mut publ, &["PUBLISH", "a", "x"]), ":0\r\n");
    assert_eq!(call(&mut publ, &["PUBSUB", "NUMPAT"]), ":0\r\n");
    assert_eq!(call(&mut sub, &["GET", "x"]), "$-1\r\n");
    // Inside MULTI: SUBSCRIBE runs at EXEC, SSUBSCRIBE is refused there as in Redis 7.0.
    call(&mut sub, &["MULTI"]);
    call(&mut sub, &["SUBSCRIBE", "m"]);
    call(&mut sub, &["SSUBSCRIBE", "n"]);
    assert_eq!(
        call(&mut sub, &["EXEC"]),
        "*2\r\n*3\r\n$9\r\nsubscribe\r\n$1\r\nm\r\n:1\r\n-ERR SSUBSCRIBE isn't allowed for a DENY BLOCKING client\r\n"
    );
}

#[test]
fn monitor_still_works_and_client_list_counts() {
    let srv = Server::start();
    let mut mon = srv.connect();
    let mut c = srv.connect();
    assert_eq!(call(&mut mon, &["MONITOR"]), "+OK\r\n");
    assert_eq!(call(&mut c, &["SET", "k", "v"]), "+OK\r\n");
    let line = read(&mut mon);
    assert!(line.ends_with("\"SET\" \"k\" \"v\"\r\n"), "{line}");
    assert_eq!(call(&mut c, &["PUBLISH", "ch", "m"]), ":0\r\n");
    let line = read(&mut mon);
    assert!(line.ends_with("\"PUBLISH\" \"ch\" \"m\"\r\n"), "{line}");
    let mut sub = srv.connect();
    call(&mut sub, &["SUBSCRIBE", "x", "y"]);
    read(&mut sub);
    call(&mut sub, &["PSUBSCRIBE", "z*"]);
    let line = read(&mut mon);
    assert!(line.contains("\"SUBSCRIBE\" \"x\" \"y\""), "{line}");
    let (rest, closed) = mon.read_until_quiet(Duration::from_millis(100));
    assert!(!closed);
    assert!(s(&rest).contains("PSUBSCRIBE"), "{}", s(&rest));
}
