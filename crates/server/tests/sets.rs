//! Set commands against the real `meridian` binary, over raw RESP: reply shapes, the
//! behaviours the differential corpus cannot compare (hash order, randomness, large sets,
//! SSCAN cursors), and the key lifecycle (last member, TTL, *STORE overwrite).

mod common;

use std::collections::BTreeSet;

use common::{Raw, Server};

const WRONGTYPE: &str = "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n";

fn call(c: &mut Raw, line: &str) -> String {
    let args: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
    String::from_utf8_lossy(&c.call(&args)).into_owned()
}

fn int(n: i64) -> String {
    format!(":{n}\r\n")
}

/// Reads a CRLF line at `*pos`.
fn line<'a>(b: &'a [u8], pos: &mut usize) -> &'a [u8] {
    let start = *pos;
    let end = start
        + b[start..]
            .windows(2)
            .position(|w| w == b"\r\n")
            .expect("CRLF");
    *pos = end + 2;
    &b[start..end]
}

fn bulk_at(b: &[u8], pos: &mut usize) -> Vec<u8> {
    let head = line(b, pos);
    assert_eq!(
        head[0],
        b'$',
        "bulk expected: {}",
        String::from_utf8_lossy(b)
    );
    let n: usize = std::str::from_utf8(&head[1..]).unwrap().parse().unwrap();
    let v = b[*pos..*pos + n].to_vec();
    *pos += n + 2;
    v
}

/// Parses an aggregate of bulk strings (`*` or `~`, `kind` checked): its items.
fn items_at(b: &[u8], pos: &mut usize, kind: u8) -> Vec<Vec<u8>> {
    let head = line(b, pos);
    assert_eq!(head[0], kind, "reply {}", String::from_utf8_lossy(b));
    let n: usize = std::str::from_utf8(&head[1..]).unwrap().parse().unwrap();
    (0..n).map(|_| bulk_at(b, pos)).collect()
}

fn items(c: &mut Raw, line: &str, kind: u8) -> Vec<Vec<u8>> {
    let args: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
    let reply = c.call(&args);
    let mut pos = 0;
    let v = items_at(&reply, &mut pos, kind);
    assert_eq!(pos, reply.len());
    v
}

fn sorted(v: Vec<Vec<u8>>) -> Vec<String> {
    let mut s: Vec<String> = v
        .into_iter()
        .map(|m| String::from_utf8_lossy(&m).into_owned())
        .collect();
    s.sort();
    s
}

/// One SSCAN call: the next cursor and the members returned.
fn sscan(c: &mut Raw, key: &str, cursor: &str, extra: &str) -> (String, Vec<Vec<u8>>) {
    let line = format!("SSCAN {key} {cursor}{extra}");
    let args: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
    let reply = c.call(&args);
    let mut pos = 0;
    assert_eq!(line_of(&reply, &mut pos), "*2");
    let next = String::from_utf8(bulk_at(&reply, &mut pos)).unwrap();
    let found = items_at(&reply, &mut pos, b'*');
    (next, found)
}

fn line_of(b: &[u8], pos: &mut usize) -> String {
    String::from_utf8_lossy(line(b, pos)).into_owned()
}

#[test]
fn add_remove_and_members() {
    let s = Server::start_single();
    let mut c = s.connect();
    assert_eq!(call(&mut c, "SADD s a b c a"), int(3));
    assert_eq!(call(&mut c, "SADD s c d"), int(1));
    assert_eq!(call(&mut c, "SCARD s"), int(4));
    assert_eq!(
        sorted(items(&mut c, "SMEMBERS s", b'*')),
        ["a", "b", "c", "d"]
    );
    assert_eq!(call(&mut c, "SREM s a x"), int(1));
    assert_eq!(
        call(&mut c, "SMISMEMBER s a b x"),
        "*3\r\n:0\r\n:1\r\n:0\r\n"
    );
    // Binary-safe members.
    let r = c.call(&[b"SADD", b"bin", b"\x00\r\n\xff", b""]);
    assert_eq!(r, b":2\r\n");
    assert_eq!(c.call(&[b"SISMEMBER", b"bin", b"\x00\r\n\xff"]), b":1\r\n");
    assert_eq!(c.call(&[b"SISMEMBER", b"bin", b""]), b":1\r\n");
    assert_eq!(c.call(&[b"SISMEMBER", b"bin", b"\x00"]), b":0\r\n");
    // Long members (beyond the inline size).
    let long = "m".repeat(100);
    assert_eq!(call(&mut c, &format!("SADD s {long}")), int(1));
    assert_eq!(call(&mut c, &format!("SISMEMBER s {long}")), int(1));
    // WRONGTYPE.
    assert_eq!(call(&mut c, "SET str v"), "+OK\r\n");
    for cmd in [
        "SADD str a",
        "SREM str a",
        "SMEMBERS str",
        "SCARD str",
        "SPOP str",
        "SRANDMEMBER str 3",
        "SINTER s str",
        "SSCAN str 0",
    ] {
        assert_eq!(call(&mut c, cmd), WRONGTYPE, "{cmd}");
    }
    assert_eq!(call(&mut c, "GET str"), "$1\r\nv\r\n");
}

#[test]
fn last_member_removes_the_key_and_its_ttl() {
    let s = Server::start();
    let mut c = s.connect();
    call(&mut c, "SADD t x y");
    assert_eq!(call(&mut c, "EXPIRE t 100"), int(1));
    assert_eq!(call(&mut c, "SREM t x y"), int(2));
    assert_eq!(call(&mut c, "EXISTS t"), int(0));
    assert_eq!(call(&mut c, "SADD t z"), int(1));
    assert_eq!(call(&mut c, "TTL t"), int(-1));
    // SPOP of the last member and SMOVE of the last member delete the key too.
    assert_eq!(call(&mut c, "SPOP t"), "$1\r\nz\r\n");
    assert_eq!(call(&mut c, "EXISTS t"), int(0));
    call(&mut c, "SADD t z");
    assert_eq!(call(&mut c, "SMOVE t u z"), int(1));
    assert_eq!(call(&mut c, "EXISTS t"), int(0));
    assert_eq!(call(&mut c, "SMEMBERS u"), "*1\r\n$1\r\nz\r\n");
    assert_eq!(call(&mut c, "DBSIZE"), int(1));
}

#[test]
fn store_variants_overwrite_and_delete() {
    let s = Server::start_single();
    let mut c = s.connect();
    call(&mut c, "SADD a 1 2 3 4");
    call(&mut c, "SADD b 3 4 5");
    call(&mut c, "SET d old");
    call(&mut c, "EXPIRE d 100");
    assert_eq!(call(&mut c, "SUNIONSTORE d a b"), int(5));
    assert_eq!(call(&mut c, "TYPE d"), "+set\r\n");
    assert_eq!(call(&mut c, "TTL d"), int(-1));
    assert_eq!(
        sorted(items(&mut c, "SMEMBERS d", b'*')),
        ["1", "2", "3", "4", "5"]
    );
    assert_eq!(call(&mut c, "SINTERSTORE d a b"), int(2));
    assert_eq!(sorted(items(&mut c, "SMEMBERS d", b'*')), ["3", "4"]);
    assert_eq!(call(&mut c, "SDIFFSTORE d a b"), int(2));
    assert_eq!(sorted(items(&mut c, "SMEMBERS d", b'*')), ["1", "2"]);
    assert_eq!(sorted(items(&mut c, "SUNION a b nokey", b'*')).len(), 5);
    assert_eq!(sorted(items(&mut c, "SDIFF b a", b'*')), ["5"]);
    // An empty result deletes the destination.
    assert_eq!(call(&mut c, "SINTERSTORE d a nokey"), int(0));
    assert_eq!(call(&mut c, "EXISTS d"), int(0));
    // The destination may be a source.
    assert_eq!(call(&mut c, "SINTERSTORE a a b"), int(2));
    assert_eq!(sorted(items(&mut c, "SMEMBERS a", b'*')), ["3", "4"]);
    assert_eq!(call(&mut c, "SINTERCARD 2 a b LIMIT 1"), int(1));
}

#[test]
fn resp3_sets_and_arrays() {
    let s = Server::start();
    let mut c = s.connect();
    let hello = c.call(&[b"HELLO", b"3"]);
    assert_eq!(hello[0], b'%');
    call(&mut c, "SADD s a b c");
    assert_eq!(sorted(items(&mut c, "SMEMBERS s", b'~')), ["a", "b", "c"]);
    assert_eq!(sorted(items(&mut c, "SINTER s", b'~')).len(), 3);
    assert_eq!(sorted(items(&mut c, "SUNION s", b'~')).len(), 3);
    assert_eq!(sorted(items(&mut c, "SDIFF s", b'~')).len(), 3);
    assert_eq!(items(&mut c, "SRANDMEMBER s 2", b'*').len(), 2);
    assert_eq!(items(&mut c, "SRANDMEMBER s -5", b'*').len(), 5);
    assert_eq!(call(&mut c, "SMISMEMBER s a x"), "*2\r\n:1\r\n:0\r\n");
    assert_eq!(items(&mut c, "SPOP s 2", b'~').len(), 2);
    assert_eq!(call(&mut c, "SPOP nokey"), "_\r\n");
    assert_eq!(call(&mut c, "SRANDMEMBER nokey"), "_\r\n");
    assert_eq!(call(&mut c, "SMEMBERS nokey"), "~0\r\n");
}

#[test]
fn spop_and_srandmember_counts() {
    let s = Server::start();
    let mut c = s.connect();
    let members: Vec<String> = (0..50).map(|i| format!("m{i}")).collect();
    call(&mut c, &format!("SADD s {}", members.join(" ")));
    let all: BTreeSet<Vec<u8>> = members.iter().map(|m| m.as_bytes().to_vec()).collect();
    // Positive counts: distinct members, at most the set.
    for n in [1usize, 5, 20, 40, 49, 50, 80] {
        let got = items(&mut c, &format!("SRANDMEMBER s {n}"), b'*');
        let distinct: BTreeSet<Vec<u8>> = got.iter().cloned().collect();
        assert_eq!(got.len(), n.min(50));
        assert_eq!(distinct.len(), got.len(), "distinct for {n}");
        assert!(distinct.is_subset(&all));
    }
    // Negative counts: exactly |count| members, repeats allowed.
    let got = items(&mut c, "SRANDMEMBER s -200", b'*');
    assert_eq!(got.len(), 200);
    let distinct: BTreeSet<Vec<u8>> = got.iter().cloned().collect();
    assert!(distinct.len() < 200 && distinct.is_subset(&all));
    // SPOP with a count removes what it returns.
    let popped = items(&mut c, "SPOP s 10", b'*');
    let popped_set: BTreeSet<Vec<u8>> = popped.iter().cloned().collect();
    assert_eq!(popped_set.len(), 10);
    assert_eq!(call(&mut c, "SCARD s"), int(40));
    for m in &popped {
        let r = c.call(&[b"SISMEMBER", b"s", m]);
        assert_eq!(r, b":0\r\n");
    }
    let mut rest = BTreeSet::new();
    for _ in 0..40 {
        let r = c.call(&[b"SPOP", b"s"]);
        let mut pos = 0;
        rest.insert(bulk_at(&r, &mut pos));
    }
    assert_eq!(rest.len(), 40);
    assert!(rest.is_disjoint(&popped_set));
    assert_eq!(call(&mut c, "EXISTS s"), int(0));
    assert_eq!(call(&mut c, "SPOP s"), "$-1\r\n");
    // A negative count too large to reply is refused instead of exhausting memory.
    call(&mut c, "SADD r a");
    assert_eq!(
        call(&mut c, "SRANDMEMBER r -4611686018427387903"),
        "-ERR value is out of range\r\n"
    );
    assert_eq!(items(&mut c, "SRANDMEMBER r -100000", b'*').len(), 100_000);
    assert_eq!(
        call(&mut c, "SPOP s -1"),
        "-ERR value is out of range, must be positive\r\n"
    );
}

#[test]
fn sscan_small_sets_in_one_call_large_ones_by_cursor() {
    let s = Server::start();
    let mut c = s.connect();
    call(&mut c, "SADD small a b c");
    let (next, found) = sscan(&mut c, "small", "0", " COUNT 1");
    assert_eq!(next, "0");
    assert_eq!(sorted(found), ["a", "b", "c"]);
    let (_, found) = sscan(&mut c, "small", "0", " MATCH b*");
    assert_eq!(sorted(found), ["b"]);

    let n = 3000;
    for chunk in (0..n).collect::<Vec<_>>().chunks(500) {
        let ms: Vec<String> = chunk.iter().map(|i| format!("k{i}")).collect();
        call(&mut c, &format!("SADD big {}", ms.join(" ")));
    }
    let mut seen = BTreeSet::new();
    let mut cursor = "0".to_string();
    let mut calls = 0;
    let mut grew = false;
    loop {
        let (next, found) = sscan(&mut c, "big", &cursor, " COUNT 50");
        calls += 1;
        assert!(found.len() <= 500);
        seen.extend(found);
        // Remove some members and grow the set in the middle: every member present for the
        // whole scan must still come back.
        if calls == 5 {
            for i in 0..100 {
                call(&mut c, &format!("SREM big k{i}"));
            }
        }
        if calls == 10 && !grew {
            grew = true;
            let ms: Vec<String> = (n..n + 5000).map(|i| format!("k{i}")).collect();
            call(&mut c, &format!("SADD big {}", ms.join(" ")));
        }
        if next == "0" {
            break;
        }
        cursor = next;
        assert!(calls < 10_000, "scan does not end");
    }
    assert!(calls > 5, "a large set is scanned in several calls");
    for i in 100..n {
        assert!(seen.contains(format!("k{i}").as_bytes()), "k{i} missed");
    }
    // MATCH filters, COUNT bounds.
    let (_, found) = sscan(&mut c, "big", "0", " MATCH k1?? COUNT 100000");
    assert!(found.iter().all(|m| m.len() == 4 && m.starts_with(b"k1")));
    assert_eq!(found.len(), 100);
}

#[test]
fn smove_and_sintercard() {
    let s = Server::start_single();
    let mut c = s.connect();
    call(&mut c, "SADD a x y");
    assert_eq!(call(&mut c, "SMOVE a b x"), int(1));
    assert_eq!(call(&mut c, "SMOVE a b x"), int(0));
    assert_eq!(call(&mut c, "SMOVE a a y"), int(1));
    assert_eq!(call(&mut c, "SMOVE nokey b x"), int(0));
    call(&mut c, "SET str v");
    assert_eq!(call(&mut c, "SMOVE a str y"), WRONGTYPE);
    assert_eq!(call(&mut c, "SMOVE nokey str y"), int(0));
    call(&mut c, "SADD c x y z");
    assert_eq!(call(&mut c, "SINTERCARD 2 c b"), int(1));
    assert_eq!(call(&mut c, "SINTERCARD 1 c LIMIT 2"), int(2));
    assert_eq!(
        call(&mut c, "SINTERCARD 0 c"),
        "-ERR numkeys should be greater than 0\r\n"
    );
}

#[test]
fn set_ops_on_large_sets() {
    let s = Server::start_single();
    let mut c = s.connect();
    let a: Vec<String> = (0..2000).map(|i| i.to_string()).collect();
    let b: Vec<String> = (1000..3000).map(|i| i.to_string()).collect();
    call(&mut c, &format!("SADD a {}", a.join(" ")));
    call(&mut c, &format!("SADD b {}", b.join(" ")));
    assert_eq!(call(&mut c, "SINTERCARD 2 a b"), int(1000));
    assert_eq!(call(&mut c, "SUNIONSTORE u a b"), int(3000));
    assert_eq!(call(&mut c, "SDIFFSTORE d a b"), int(1000));
    assert_eq!(call(&mut c, "SISMEMBER d 999"), int(1));
    assert_eq!(call(&mut c, "SISMEMBER d 1000"), int(0));
    assert_eq!(items(&mut c, "SMEMBERS u", b'*').len(), 3000);
}

/// SADD and SMOVE of a member the set already holds change nothing a client reads: they
/// re-add it (replicated, so it wins over a remove at another site that did not see it), but
/// a WATCH of the set still holds, as in Redis (unit/type/set "SMOVE only notify dstset when
/// the addition is successful").
#[test]
fn adding_a_held_member_does_not_fail_watch() {
    let srv = Server::start_single();
    let mut a = srv.connect();
    let mut b = srv.connect();
    call(&mut a, "SADD src{t} a b");
    call(&mut a, "SADD dst{t} a");
    for other in ["SMOVE src{t} dst{t} a", "SADD dst{t} a"] {
        assert_eq!(call(&mut a, "WATCH dst{t}"), "+OK\r\n");
        assert_eq!(call(&mut a, "MULTI"), "+OK\r\n");
        assert_eq!(call(&mut a, "SADD dst{t} c"), "+QUEUED\r\n");
        call(&mut b, other);
        assert_eq!(call(&mut a, "EXEC"), "*1\r\n:1\r\n", "after {other}");
        assert_eq!(call(&mut a, "SREM dst{t} c"), int(1));
    }
    // A member it adds does fail the WATCH.
    assert_eq!(call(&mut a, "WATCH dst{t}"), "+OK\r\n");
    assert_eq!(call(&mut a, "MULTI"), "+OK\r\n");
    assert_eq!(call(&mut a, "SADD dst{t} c"), "+QUEUED\r\n");
    assert_eq!(call(&mut b, "SADD dst{t} a d"), int(1));
    assert_eq!(call(&mut a, "EXEC"), "*-1\r\n");
}
