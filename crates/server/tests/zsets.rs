//! Sorted sets through the real binary: large sets (skiplist encoding, ranks, ranges, ZSCAN
//! cursors), ZRANDMEMBER properties, RENAME/COPY/EXPIRE of a sorted set, transactions, and
//! RESP3 shapes. Byte-exact replies against Redis are in `corpus/zsets.txt`.

mod common;

use common::{Server, bulk, int};

const NIL: &str = "$-1\r\n";

fn array_len(reply: &str) -> usize {
    reply
        .strip_prefix('*')
        .and_then(|r| r.split("\r\n").next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(usize::MAX)
}

/// Bulk strings of a flat array reply, in order.
fn bulks(reply: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut lines = reply.split("\r\n");
    while let Some(l) = lines.next() {
        if l.starts_with('$') && l != "$-1" {
            if let Some(v) = lines.next() {
                out.push(v.to_string());
            }
        }
    }
    out
}

#[test]
fn large_set_ranks_ranges_and_encoding() {
    let s = Server::start();
    let mut c = s.connect();
    let mut args: Vec<String> = vec!["ZADD".into(), "big".into()];
    for i in 0..1000 {
        args.push(format!("{}", i * 2));
        args.push(format!("m{i:04}"));
    }
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    assert_eq!(c.call_text(&refs), int(1000));
    assert_eq!(c.call_line("ZCARD big"), int(1000));
    assert_eq!(c.call_line("OBJECT ENCODING big"), bulk("skiplist"));
    assert_eq!(c.call_line("ZRANK big m0000"), int(0));
    assert_eq!(c.call_line("ZRANK big m0500"), int(500));
    assert_eq!(c.call_line("ZRANK big m0999"), int(999));
    assert_eq!(c.call_line("ZREVRANK big m0999"), int(0));
    assert_eq!(
        bulks(&c.call_line("ZRANGE big 500 502")),
        vec!["m0500", "m0501", "m0502"]
    );
    assert_eq!(
        bulks(&c.call_line("ZRANGE big -2 -1 WITHSCORES")),
        vec!["m0998", "1996", "m0999", "1998"]
    );
    assert_eq!(
        bulks(&c.call_line("ZRANGE big 0 1 REV")),
        vec!["m0999", "m0998"]
    );
    assert_eq!(c.call_line("ZCOUNT big (10 20"), int(5));
    assert_eq!(
        bulks(&c.call_line("ZRANGEBYSCORE big 101 107")),
        vec!["m0051", "m0052", "m0053"]
    );
    assert_eq!(
        bulks(&c.call_line("ZREVRANGEBYSCORE big +inf -inf LIMIT 1 2")),
        vec!["m0998", "m0997"]
    );
    // ZSCAN with cursors visits every member.
    let mut cursor = "0".to_string();
    let mut seen = std::collections::HashSet::new();
    loop {
        let r = c.call_text(&["ZSCAN", "big", &cursor, "COUNT", "100"]);
        let b = bulks(&r);
        cursor = b[0].clone();
        for pair in b[1..].chunks(2) {
            seen.insert(pair[0].clone());
        }
        if cursor == "0" {
            break;
        }
    }
    assert_eq!(seen.len(), 1000);
    // Removing by rank keeps ranks consistent.
    assert_eq!(c.call_line("ZREMRANGEBYRANK big 0 499"), int(500));
    assert_eq!(c.call_line("ZRANK big m0500"), int(0));
    assert_eq!(
        c.call_line("ZPOPMIN big"),
        "*2\r\n$5\r\nm0500\r\n$4\r\n1000\r\n"
    );
    assert_eq!(c.call_line("ZREMRANGEBYSCORE big -inf +inf"), int(499));
    assert_eq!(c.call_line("EXISTS big"), int(0));
}

#[test]
fn zrandmember_properties() {
    let s = Server::start();
    let mut c = s.connect();
    c.call_line("ZADD z 1 a 2 b 3 c 4 d 5 e");
    for _ in 0..20 {
        let r = c.call_line("ZRANDMEMBER z 3");
        let m = bulks(&r);
        assert_eq!(m.len(), 3);
        let distinct: std::collections::HashSet<_> = m.iter().collect();
        assert_eq!(distinct.len(), 3, "{r}");
        let r = c.call_line("ZRANDMEMBER z -8 WITHSCORES");
        assert_eq!(array_len(&r), 16);
        let one = c.call_line("ZRANDMEMBER z");
        assert!(["a", "b", "c", "d", "e"].iter().any(|m| one == bulk(m)));
    }
}

/// Negative counts of the three random commands stop at `SRANDMEMBER_REPEATS_MAX` (2^24):
/// one past it is refused instead of building a reply the shard's memory cannot hold (the
/// limit itself is unit-tested in `cmd::set`: a 2^24-element reply takes a minute in a debug
/// build).
#[test]
fn random_repeats_stop_at_their_limit() {
    let s = Server::start();
    let mut c = s.connect();
    c.call_line("ZADD z 1 a");
    c.call_line("SADD s a");
    c.call_line("HSET h a 1");
    for cmd in ["ZRANDMEMBER z", "SRANDMEMBER s", "HRANDFIELD h"] {
        assert_eq!(
            c.call_line(&format!("{cmd} -16777217")),
            "-ERR value is out of range\r\n"
        );
        assert_eq!(array_len(&c.call_line(&format!("{cmd} -1000"))), 1000);
    }
}

#[test]
fn rename_copy_expire_and_transactions() {
    let s = Server::start_single();
    let mut c = s.connect();
    c.call_line("ZADD src 1.5 a 2 b -3 c");
    c.call_line("ZINCRBY src 0.25 a");
    assert_eq!(c.call_line("COPY src cp"), int(1));
    assert_eq!(
        bulks(&c.call_line("ZRANGE cp 0 -1 WITHSCORES")),
        vec!["c", "-3", "a", "1.75", "b", "2"]
    );
    assert_eq!(c.call_line("RENAME src dst"), "+OK\r\n");
    assert_eq!(c.call_line("EXISTS src"), int(0));
    assert_eq!(c.call_line("ZSCORE dst a"), bulk("1.75"));
    assert_eq!(c.call_line("TYPE dst"), "+zset\r\n");
    assert_eq!(c.call_line("PEXPIRE dst 50"), int(1));
    std::thread::sleep(std::time::Duration::from_millis(120));
    assert_eq!(c.call_line("ZCARD dst"), int(0));
    assert_eq!(c.call_line("ZSCORE dst a"), NIL);
    assert_eq!(c.call_line("MULTI"), "+OK\r\n");
    assert_eq!(c.call_line("ZADD t 1 x"), "+QUEUED\r\n");
    assert_eq!(c.call_line("ZINCRBY t 2 x"), "+QUEUED\r\n");
    assert_eq!(c.call_line("ZRANGE t 0 -1 WITHSCORES"), "+QUEUED\r\n");
    assert_eq!(
        c.call_line("EXEC"),
        "*3\r\n:1\r\n$1\r\n3\r\n*2\r\n$1\r\nx\r\n$1\r\n3\r\n"
    );
    // Removing the last member removes the key.
    assert_eq!(c.call_line("ZREM t x"), int(1));
    assert_eq!(c.call_line("EXISTS t"), int(0));
    assert_eq!(c.call_line("DBSIZE"), int(1));
}

#[test]
fn resp3_scores_are_doubles() {
    let s = Server::start();
    let mut c = s.connect();
    c.call_line("HELLO 3");
    c.call_line("ZADD z 1 a 2.5 b");
    assert_eq!(c.call_line("ZSCORE z b"), ",2.5\r\n");
    assert_eq!(
        c.call_line("ZRANGE z 0 -1 WITHSCORES"),
        "*2\r\n*2\r\n$1\r\na\r\n,1\r\n*2\r\n$1\r\nb\r\n,2.5\r\n"
    );
    assert_eq!(c.call_line("ZSCORE z nosuch"), "_\r\n");
    assert_eq!(c.call_line("ZINCRBY z 1 a"), ",2\r\n");
}

#[test]
fn blocking_pops_wake_on_zadd() {
    let s = Server::start_single();
    let mut a = s.connect();
    let mut b = s.connect();
    let mut w = s.connect();
    a.send_cmd(&[b"BZPOPMIN", b"q1", b"q2", b"5"]);
    b.send_cmd(&[b"BZMPOP", b"5", b"1", b"q2", b"MAX", b"COUNT", b"2"]);
    std::thread::sleep(std::time::Duration::from_millis(100));
    assert_eq!(w.call_line("ZADD q2 1 x 2 y 3 z"), int(3));
    // First waiter in line is served first.
    let ra = String::from_utf8_lossy(&a.read_reply()).into_owned();
    assert_eq!(ra, "*3\r\n$2\r\nq2\r\n$1\r\nx\r\n$1\r\n1\r\n");
    let rb = String::from_utf8_lossy(&b.read_reply()).into_owned();
    assert_eq!(
        rb,
        "*2\r\n$2\r\nq2\r\n*2\r\n*2\r\n$1\r\nz\r\n$1\r\n3\r\n*2\r\n$1\r\ny\r\n$1\r\n2\r\n"
    );
    assert_eq!(w.call_line("EXISTS q2"), int(0));
    // Timeout: the null array.
    assert_eq!(a.call_line("BZPOPMAX q3 0.05"), "*-1\r\n");
}

/// SSCAN, HSCAN and ZSCAN while the collection grows under them (a new member between the
/// calls, starting just below the table's capacity, so its table grows mid-walk, a few
/// buckets per write): every member present from the first call to the last is returned.
/// ZSCAN's cursor was a bare bucket index, which a growth re-laid out under it.
#[test]
fn scans_under_growth_miss_no_member_present_throughout() {
    let s = Server::start();
    let mut c = s.connect();
    // 3,584 fill 4,096 buckets (7/8).
    const FIRST: usize = 3500;
    const ADDED_PER_CALL: usize = 1;
    for (write, scan) in [("SADD", "SSCAN"), ("HSET", "HSCAN"), ("ZADD", "ZSCAN")] {
        let key = format!("grow:{}", write.to_lowercase());
        let add = |c: &mut common::Raw, from: usize, n: usize| {
            let mut args: Vec<String> = vec![write.into(), key.clone()];
            for i in from..from + n {
                if write != "SADD" {
                    args.push(if write == "ZADD" {
                        i.to_string()
                    } else {
                        format!("f{i}")
                    });
                }
                args.push(format!("m{i}"));
            }
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let n = c.call_text(&args);
            assert!(n.starts_with(':'), "{n}");
        };
        add(&mut c, 0, FIRST);
        let mut next = FIRST;
        let mut seen = std::collections::HashSet::new();
        let mut cursor = "0".to_string();
        let mut calls = 0;
        loop {
            let reply = c.call_text(&[scan, &key, &cursor, "COUNT", "10"]);
            let items = bulks(&reply);
            let (new_cursor, elems) = items.split_first().expect("cursor");
            // HSCAN and ZSCAN alternate member (or field) and value: keep the members.
            for e in elems {
                if e.starts_with('m') {
                    seen.insert(e.clone());
                }
            }
            cursor = new_cursor.clone();
            calls += 1;
            if cursor == "0" {
                break;
            }
            assert!(calls < 5000, "{scan} did not end");
            add(&mut c, next, ADDED_PER_CALL);
            next += ADDED_PER_CALL;
        }
        assert!(next > 3584 + 200, "{scan}: the table grew during the walk");
        let missed: Vec<usize> = (0..FIRST)
            .filter(|i| !seen.contains(&format!("m{i}")))
            .collect();
        assert!(missed.is_empty(), "{scan} missed {} members", missed.len());
    }
}
