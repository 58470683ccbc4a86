//! Hash commands against the real `meridian` binary, over raw RESP so that reply shapes and
//! error texts are checked byte for byte.

mod common;

use std::collections::BTreeSet;

use common::{Server, bulk, int};

const OK: &str = "+OK\r\n";
const NIL: &str = "$-1\r\n";
const WRONGTYPE: &str = "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n";

#[test]
fn set_get_delete_like_redis() {
    let s = Server::start();
    let mut c = s.connect();
    assert_eq!(c.call_line("HSET h a 1 b 2 a 3"), int(2));
    assert_eq!(c.call_line("HGET h a"), bulk("3"));
    assert_eq!(c.call_line("HGET h zz"), NIL);
    assert_eq!(c.call_line("HGET nokey a"), NIL);
    assert_eq!(c.call_line("HMSET h c 4"), OK);
    assert_eq!(c.call_line("HSETNX h c 5"), int(0));
    assert_eq!(c.call_line("HSETNX h d 5"), int(1));
    assert_eq!(c.call_line("HLEN h"), int(4));
    assert_eq!(
        c.call_line("HGETALL h"),
        "*8\r\n$1\r\na\r\n$1\r\n3\r\n$1\r\nb\r\n$1\r\n2\r\n$1\r\nc\r\n$1\r\n4\r\n$1\r\nd\r\n$1\r\n5\r\n"
    );
    assert_eq!(c.call_line("HMGET h a nope"), "*2\r\n$1\r\n3\r\n$-1\r\n");
    assert_eq!(c.call_line("HEXISTS h a"), int(1));
    assert_eq!(c.call_line("HSTRLEN h a"), int(1));
    assert_eq!(c.call_line("HDEL h a nope b"), int(2));
    assert_eq!(c.call_line("HKEYS h"), "*2\r\n$1\r\nc\r\n$1\r\nd\r\n");
    assert_eq!(c.call_line("HVALS h"), "*2\r\n$1\r\n4\r\n$1\r\n5\r\n");
    assert_eq!(
        c.call_line("HSET h a"),
        "-ERR wrong number of arguments for 'hset' command\r\n"
    );
    assert_eq!(
        c.call_line("HMSET h a 1 b"),
        "-ERR wrong number of arguments for 'hmset' command\r\n"
    );
    // Deleting the last field deletes the key, with its TTL.
    assert_eq!(c.call_line("EXPIRE h 100"), int(1));
    assert_eq!(c.call_line("HDEL h c d"), int(2));
    assert_eq!(c.call_line("EXISTS h"), int(0));
    assert_eq!(c.call_line("HSET h x 1"), int(1));
    assert_eq!(c.call_line("TTL h"), int(-1));
    assert_eq!(c.call_line("TYPE h"), "+hash\r\n");
    // Wrong types both ways.
    assert_eq!(c.call_line("SET s v"), OK);
    for cmd in [
        "HSET s a 1",
        "HGET s a",
        "HGETALL s",
        "HDEL s a",
        "HLEN s",
        "HINCRBY s a 1",
        "HSCAN s 0",
        "HRANDFIELD s",
    ] {
        assert_eq!(c.call_line(cmd), WRONGTYPE, "{cmd}");
    }
    assert_eq!(c.call_line("GET h"), WRONGTYPE);
}

#[test]
fn increments_like_redis() {
    let s = Server::start();
    let mut c = s.connect();
    assert_eq!(c.call_line("HINCRBY h n 5"), int(5));
    assert_eq!(c.call_line("HINCRBY h n -7"), int(-2));
    assert_eq!(c.call_line("HSET h s abc"), int(1));
    assert_eq!(
        c.call_line("HINCRBY h s 1"),
        "-ERR hash value is not an integer\r\n"
    );
    assert_eq!(
        c.call_line("HINCRBY h n x"),
        "-ERR value is not an integer or out of range\r\n"
    );
    assert_eq!(c.call_line("HSET h big 9223372036854775807"), int(1));
    assert_eq!(
        c.call_line("HINCRBY h big 1"),
        "-ERR increment or decrement would overflow\r\n"
    );
    assert_eq!(c.call_line("HINCRBYFLOAT h f 10.5"), bulk("10.5"));
    assert_eq!(c.call_line("HINCRBYFLOAT h f 0.1"), bulk("10.6"));
    assert_eq!(
        c.call_line("HINCRBY h f 1"),
        "-ERR hash value is not an integer\r\n"
    );
    assert_eq!(
        c.call_line("HINCRBYFLOAT h s 1"),
        "-ERR hash value is not a float\r\n"
    );
    assert_eq!(
        c.call_line("HINCRBYFLOAT h f inf"),
        "-ERR value is NaN or Infinity\r\n"
    );
    assert_eq!(
        c.call_line("HINCRBYFLOAT h f x"),
        "-ERR value is not a valid float\r\n"
    );
    assert_eq!(c.call_line("HINCRBYFLOAT h x 0x10"), bulk("16"));
    assert_eq!(c.call_line("HINCRBY h x 1"), int(17));
    assert_eq!(c.call_line("HSET h n 10"), int(0));
    assert_eq!(c.call_line("HINCRBY h n 1"), int(11));
    assert_eq!(c.call_line("HGET h n"), bulk("11"));
    assert_eq!(c.call_line("HSTRLEN h n"), int(2));
}

#[test]
fn randfield_scan_and_encoding() {
    let s = Server::start();
    let mut c = s.connect();
    assert_eq!(c.call_line("HRANDFIELD nokey"), NIL);
    assert_eq!(c.call_line("HRANDFIELD nokey 3"), "*0\r\n");
    assert_eq!(c.call_line("HSET h a 1 b 2 c 3"), int(3));
    assert_eq!(c.call_line("OBJECT ENCODING h"), bulk("listpack"));
    let r = c.call_line("HRANDFIELD h -5 WITHVALUES");
    assert!(r.starts_with("*10\r\n"), "{r}");
    let r = c.call_line("HRANDFIELD h 2");
    assert!(r.starts_with("*2\r\n"), "{r}");
    assert_eq!(
        c.call_line("HRANDFIELD h 10"),
        "*3\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n"
    );
    assert_eq!(c.call_line("HRANDFIELD h 1 foo"), "-ERR syntax error\r\n");
    assert_eq!(
        c.call_line("HRANDFIELD h -16777217"),
        "-ERR value is out of range\r\n"
    );
    assert_eq!(
        c.call_line("HSCAN h 0 MATCH b*"),
        "*2\r\n$1\r\n0\r\n*2\r\n$1\r\nb\r\n$1\r\n2\r\n"
    );
    assert_eq!(c.call_line("HSCAN h x"), "-ERR invalid cursor\r\n");
    assert_eq!(c.call_line("HSCAN h 0 COUNT 0"), "-ERR syntax error\r\n");

    // A large hash: hashtable encoding and a working cursor.
    let mut args: Vec<String> = vec!["HSET".into(), "big".into()];
    for i in 0..1000 {
        args.push(format!("field:{i}"));
        args.push(format!("v{i}"));
    }
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    assert_eq!(c.int(&refs), 1000);
    assert_eq!(c.call_line("OBJECT ENCODING big"), bulk("hashtable"));
    let mut seen = BTreeSet::new();
    let mut cursor = "0".to_string();
    let mut rounds = 0;
    loop {
        let raw = c.call_strs(&["HSCAN", "big", &cursor, "COUNT", "50"]);
        let text = String::from_utf8_lossy(&raw).into_owned();
        let lines: Vec<&str> = text.split("\r\n").collect();
        cursor = lines[2].to_string();
        for l in lines.iter().skip(4) {
            if l.starts_with("field:") {
                seen.insert(l.to_string());
            }
        }
        rounds += 1;
        if cursor == "0" {
            break;
        }
        // Writes during the scan do not hide fields present throughout.
        if rounds == 3 {
            assert_eq!(c.call_line("HSET big extra 1"), int(1));
            assert_eq!(c.call_line("HDEL big extra"), int(1));
        }
        assert!(rounds < 1000);
    }
    assert_eq!(seen.len(), 1000);
    assert!(rounds > 10);
    assert_eq!(c.call_line("HLEN big"), int(1000));
    assert_eq!(c.call_line("HGET big field:777"), bulk("v777"));
    // Long values make a small hash a hashtable too, as in Redis.
    let long = "x".repeat(65);
    assert_eq!(c.int(&["HSET", "lv", "f", &long]), 1);
    assert_eq!(c.call_line("OBJECT ENCODING lv"), bulk("hashtable"));
}

#[test]
fn resp3_shapes_and_rename() {
    let s = Server::start_single();
    let mut c = s.connect();
    let _ = c.call_line("HELLO 3");
    assert_eq!(c.call_line("HSET h a 1"), ":1\r\n");
    assert_eq!(c.call_line("HGETALL h"), "%1\r\n$1\r\na\r\n$1\r\n1\r\n");
    assert_eq!(c.call_line("HGETALL nokey"), "%0\r\n");
    assert_eq!(
        c.call_line("HRANDFIELD h 1 WITHVALUES"),
        "*1\r\n*2\r\n$1\r\na\r\n$1\r\n1\r\n"
    );
    assert_eq!(c.call_line("HGET h nope"), "_\r\n");
    assert_eq!(c.call_line("HINCRBY h n 3"), ":3\r\n");
    assert_eq!(c.call_line("RENAME h h2"), OK);
    assert_eq!(
        c.call_line("HGETALL h2"),
        "%2\r\n$1\r\na\r\n$1\r\n1\r\n$1\r\nn\r\n$1\r\n3\r\n"
    );
    assert_eq!(c.call_line("HINCRBY h2 n 1"), ":4\r\n");
}
