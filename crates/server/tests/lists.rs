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
    let s = Server::start();
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
    let s = Server::start();
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
