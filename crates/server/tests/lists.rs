//! List commands against the real `meridian` binary: long lists spanning many blocks checked
//! against a deque model, queues, RENAME/COPY, MULTI, TTL, RESP3 reply shapes.

mod common;

use std::collections::VecDeque;

use common::{Reply, Server, bulk, int};

const WRONGTYPE: &str = "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n";

fn lrange(c: &mut common::Raw, key: &str, a: i64, b: i64) -> Vec<String> {
    c.reply(&["LRANGE", key, &a.to_string(), &b.to_string()])
        .strings()
}

#[test]
fn long_list_matches_a_deque() {
    let s = Server::start();
    let mut c = s.connect();
    let mut model: VecDeque<String> = VecDeque::new();
    // 20,000 elements, pushed at both ends in batches, so that the list spans many blocks.
    for batch in 0..80 {
        let vals: Vec<String> = (0..250).map(|i| format!("v{batch}-{i}")).collect();
        let mut args: Vec<&str> = vec![if batch % 2 == 0 { "RPUSH" } else { "LPUSH" }, "L"];
        args.extend(vals.iter().map(String::as_str));
        let n = c.int(&args);
        for v in &vals {
            if batch % 2 == 0 {
                model.push_back(v.clone());
            } else {
                model.push_front(v.clone());
            }
        }
        assert_eq!(n as usize, model.len());
    }
    assert_eq!(c.int(&["LLEN", "L"]), 20_000);
    let all: Vec<String> = model.iter().cloned().collect();
    assert_eq!(lrange(&mut c, "L", 0, -1), all);
    for i in [0usize, 1, 249, 250, 4999, 10_000, 15_123, 19_999] {
        assert_eq!(
            c.reply(&["LINDEX", "L", &i.to_string()]),
            Reply::bulk(&all[i])
        );
        let neg = i as i64 - 20_000;
        assert_eq!(
            c.reply(&["LINDEX", "L", &neg.to_string()]),
            Reply::bulk(&all[i])
        );
        assert_eq!(lrange(&mut c, "L", i as i64, i as i64 + 99), {
            let end = (i + 100).min(all.len());
            all[i..end].to_vec()
        });
    }
    // Writes in the middle: LSET, LINSERT (splits blocks), LREM, then LTRIM.
    for k in 0..300usize {
        let i = (k * 67) % model.len();
        let v = format!("set{k}");
        c.ok(&["LSET", "L", &i.to_string(), &v]);
        model[i] = v;
    }
    for k in 0..300usize {
        let i = (k * 131) % model.len();
        let pivot = model[i].clone();
        let v = format!("ins{k}");
        let n = c.int(&["LINSERT", "L", "AFTER", &pivot, &v]);
        let at = model.iter().position(|x| *x == pivot).unwrap();
        model.insert(at + 1, v);
        assert_eq!(n as usize, model.len());
    }
    assert_eq!(
        lrange(&mut c, "L", 0, -1),
        model.iter().cloned().collect::<Vec<_>>()
    );
    let n = c.int(&["LREM", "L", "0", "v3-7"]);
    let before = model.len();
    model.retain(|x| x != "v3-7");
    assert_eq!(n as usize, before - model.len());
    c.ok(&["LTRIM", "L", "100", "-101"]);
    let trimmed: Vec<String> = model
        .iter()
        .skip(100)
        .take(model.len() - 200)
        .cloned()
        .collect();
    assert_eq!(lrange(&mut c, "L", 0, -1), trimmed);
    let pos = c.reply(&["LPOS", "L", &trimmed[5000], "RANK", "-1"]);
    assert_eq!(pos, Reply::Int(5000));
}

#[test]
fn queue_cycles_and_moves() {
    let s = Server::start_single();
    let mut c = s.connect();
    for i in 0..5_000 {
        assert_eq!(c.int(&["RPUSH", "q", &format!("j{i}")]), 1);
        assert_eq!(c.reply(&["LPOP", "q"]), Reply::bulk(&format!("j{i}")));
    }
    assert_eq!(c.int(&["EXISTS", "q"]), 0);
    c.int(&["RPUSH", "q", "a", "b", "c"]);
    // Rotation with LMOVE on one key, then RPOPLPUSH between keys.
    assert_eq!(
        c.reply(&["LMOVE", "q", "q", "LEFT", "RIGHT"]),
        Reply::bulk("a")
    );
    assert_eq!(lrange(&mut c, "q", 0, -1), vec!["b", "c", "a"]);
    assert_eq!(c.reply(&["RPOPLPUSH", "q", "r"]), Reply::bulk("a"));
    assert_eq!(
        c.call_line("LMPOP 2 x q RIGHT COUNT 5"),
        format!("*2\r\n{}*2\r\n{}{}", bulk("q"), bulk("c"), bulk("b"))
    );
    assert_eq!(c.int(&["EXISTS", "q"]), 0);
    assert_eq!(lrange(&mut c, "r", 0, -1), vec!["a"]);
}

#[test]
fn rename_copy_ttl_multi_wrongtype() {
    let s = Server::start_single();
    let mut c = s.connect();
    c.int(&["RPUSH", "a", "1", "2", "3"]);
    c.ok(&["RENAME", "a", "b"]);
    assert_eq!(lrange(&mut c, "b", 0, -1), vec!["1", "2", "3"]);
    c.int(&["COPY", "b", "c"]);
    c.int(&["RPUSH", "c", "4"]);
    assert_eq!(lrange(&mut c, "c", 0, -1), vec!["1", "2", "3", "4"]);
    assert_eq!(
        c.reply(&["OBJECT", "ENCODING", "c"]),
        Reply::bulk("quicklist")
    );
    assert_eq!(c.reply(&["TYPE", "c"]), Reply::Simple("list".into()));
    // A push keeps the TTL; popping the last element removes the key with it.
    c.int(&["EXPIRE", "b", "100"]);
    c.int(&["LPUSH", "b", "0"]);
    assert!(c.int(&["TTL", "b"]) > 0);
    c.ok(&["LTRIM", "b", "5", "10"]);
    assert_eq!(c.int(&["EXISTS", "b"]), 0);
    c.int(&["RPUSH", "b", "x"]);
    assert_eq!(c.int(&["TTL", "b"]), -1);
    // MULTI.
    assert_eq!(c.call_line("MULTI"), "+OK\r\n");
    assert_eq!(c.call_line("RPUSH m a b"), "+QUEUED\r\n");
    assert_eq!(c.call_line("LPOP m"), "+QUEUED\r\n");
    assert_eq!(
        c.call_line("EXEC"),
        format!("*2\r\n{}{}", int(2), bulk("a"))
    );
    c.ok(&["SET", "s", "v"]);
    assert_eq!(c.call_line("LPUSH s a"), WRONGTYPE);
    assert_eq!(c.call_line("LRANGE s 0 -1"), WRONGTYPE);
}

#[test]
fn resp3_shapes() {
    let s = Server::start();
    let mut c = s.connect();
    c.call_line("HELLO 3");
    assert_eq!(c.call_line("LPOP none 2"), "_\r\n");
    assert_eq!(c.call_line("LPOP none"), "_\r\n");
    assert_eq!(c.call_line("LMPOP 1 none LEFT"), "_\r\n");
    assert_eq!(c.call_line("RPUSH l a b"), ":2\r\n");
    assert_eq!(
        c.call_line("LMPOP 1 l LEFT COUNT 9"),
        format!("*2\r\n{}*2\r\n{}{}", bulk("l"), bulk("a"), bulk("b"))
    );
}

fn settle() {
    std::thread::sleep(std::time::Duration::from_millis(150));
}

#[test]
fn blocking_pops_wake_in_fifo_order() {
    let s = Server::start_single();
    let mut a = s.connect();
    let mut b = s.connect();
    let mut w = s.connect();
    a.send_cmd(&[b"BLPOP", b"q", b"other", b"0"]);
    settle();
    b.send_cmd(&[b"BRPOP", b"q", b"0"]);
    settle();
    assert_eq!(w.int(&["RPUSH", "q", "x", "y", "z"]), 3);
    // The first waiter pops from the head, the second from the tail.
    assert_eq!(
        a.read_reply(),
        format!("*2\r\n{}{}", bulk("q"), bulk("x")).into_bytes()
    );
    assert_eq!(
        b.read_reply(),
        format!("*2\r\n{}{}", bulk("q"), bulk("z")).into_bytes()
    );
    assert_eq!(lrange(&mut w, "q", 0, -1), vec!["y"]);
    // BLMPOP and BLMOVE wake too.
    a.send_cmd(&[b"BLMPOP", b"0", b"1", b"m", b"RIGHT", b"COUNT", b"2"]);
    settle();
    b.send_cmd(&[b"BLMOVE", b"src", b"dst", b"LEFT", b"RIGHT", b"0"]);
    settle();
    w.int(&["RPUSH", "m", "1", "2", "3"]);
    assert_eq!(
        a.read_reply(),
        format!("*2\r\n{}*2\r\n{}{}", bulk("m"), bulk("3"), bulk("2")).into_bytes()
    );
    w.int(&["RPUSH", "src", "v"]);
    assert_eq!(b.read_reply(), bulk("v").into_bytes());
    assert_eq!(lrange(&mut w, "dst", 0, -1), vec!["v"]);
    assert_eq!(w.int(&["EXISTS", "src"]), 0);
}

#[test]
fn blocking_timeout_and_disconnect() {
    let s = Server::start();
    let mut a = s.connect();
    let started = std::time::Instant::now();
    assert_eq!(a.call_line("BLPOP t 0.2"), "*-1\r\n");
    assert!(started.elapsed() >= std::time::Duration::from_millis(180));
    assert_eq!(a.call_line("BRPOPLPUSH t u 0.05"), "*-1\r\n");
    // A client that disconnects while blocked is forgotten: the next one is served.
    let mut gone = s.connect();
    gone.send_cmd(&[b"BLPOP", b"d", b"0"]);
    settle();
    drop(gone);
    settle();
    let mut b = s.connect();
    b.send_cmd(&[b"BLPOP", b"d", b"0"]);
    settle();
    let mut w = s.connect();
    assert_eq!(w.int(&["LPUSH", "d", "only"]), 1);
    assert_eq!(
        b.read_reply(),
        format!("*2\r\n{}{}", bulk("d"), bulk("only")).into_bytes()
    );
    assert_eq!(w.int(&["EXISTS", "d"]), 0);
}
