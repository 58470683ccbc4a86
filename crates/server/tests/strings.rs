//! String commands against the real `meridian` binary, over raw RESP so that reply shapes and
//! error texts are checked byte for byte.

mod common;

use std::time::Duration;

use common::{Server, bulk, int};

const OK: &str = "+OK\r\n";
const NIL: &str = "$-1\r\n";
const SYNTAX: &str = "-ERR syntax error\r\n";
const NOT_INT: &str = "-ERR value is not an integer or out of range\r\n";
const NOT_FLOAT: &str = "-ERR value is not a valid float\r\n";
const WRONGTYPE: &str = "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n";

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

#[test]
fn get_set_and_options() {
    let s = Server::start();
    let mut c = s.connect();
    assert_eq!(c.call_line("GET missing"), NIL);
    assert_eq!(c.call_line("SET k v"), OK);
    assert_eq!(c.call_line("get k"), bulk("v"));
    // Binary-safe values.
    assert_eq!(c.call_lossy(&[b"SET", b"bin", b"a\r\n\0b"]), OK);
    assert_eq!(c.call_lossy(&[b"GET", b"bin"]), "$5\r\na\r\n\0b\r\n");
    assert_eq!(c.call_line("SET empty "), OK);
    assert_eq!(c.call_line("GET empty"), bulk(""));
    assert_eq!(c.call_line("EXISTS empty"), int(1));

    // NX / XX.
    assert_eq!(c.call_line("SET k v2 NX"), NIL);
    assert_eq!(c.call_line("SET k v2 XX"), OK);
    assert_eq!(c.call_line("SET nx1 v XX"), NIL);
    assert_eq!(c.call_line("SET nx1 v nx"), OK);
    assert_eq!(c.call_line("GET k"), bulk("v2"));

    // GET option, with NX (allowed in 7.0).
    assert_eq!(c.call_line("SET k v3 GET"), bulk("v2"));
    assert_eq!(c.call_line("SET newk v GET"), NIL);
    assert_eq!(c.call_line("GET newk"), bulk("v"));
    assert_eq!(c.call_line("SET k other NX GET"), bulk("v3"));
    assert_eq!(c.call_line("GET k"), bulk("v3"));
    assert_eq!(c.call_line("SET gnx v NX GET"), NIL);
    assert_eq!(c.call_line("GET gnx"), bulk("v"));

    // Conflicts and malformed options.
    for bad in [
        "SET k v NX XX",
        "SET k v XX NX",
        "SET k v EX",
        "SET k v EX 10 PX 10",
        "SET k v KEEPTTL EX 10",
        "SET k v PX 10 KEEPTTL",
        "SET k v EXAT 10 PXAT 10",
        "SET k v PERSIST",
        "SET k v FOO",
    ] {
        assert_eq!(c.call_line(bad), SYNTAX, "{bad}");
    }
    // Expire values.
    let inv = "-ERR invalid expire time in 'set' command\r\n";
    assert_eq!(c.call_line("SET k v EX 0"), inv);
    assert_eq!(c.call_line("SET k v PX -1"), inv);
    assert_eq!(c.call_line("SET k v EX 9223372036854776"), inv);
    assert_eq!(c.call_line("SET k v EX 9223372036854775"), inv);
    assert_eq!(c.call_line("SET k v PX 9223372036854775807"), inv);
    assert_eq!(c.call_line("SET k v EX abc"), NOT_INT);
    assert_eq!(c.call_line("GET k"), bulk("v3"));

    // TTLs.
    assert_eq!(c.call_line("SET t v EX 100"), OK);
    assert_eq!(c.call_line("TTL t"), int(100));
    assert_eq!(c.call_line("SET t v EX 10 EX 200"), OK);
    assert_eq!(c.call_line("TTL t"), int(200));
    assert_eq!(c.call_line("SET t v2 KEEPTTL"), OK);
    assert_eq!(c.call_line("TTL t"), int(200));
    assert_eq!(c.call_line("SET t v3"), OK);
    assert_eq!(c.call_line("TTL t"), int(-1));
    let at = now_ms() / 1000 + 1000;
    assert_eq!(c.call_line(&format!("SET t v EXAT {at}")), OK);
    let ttl = c.call_line("TTL t");
    assert!(ttl == int(1000) || ttl == int(999), "{ttl}");
    assert_eq!(
        c.call_line(&format!("SET t v PXAT {}", now_ms() + 100_000)),
        OK
    );
    let pttl = c.call_line("PTTL t");
    let ms: i64 = pttl.trim_start_matches(':').trim_end().parse().unwrap_or(0);
    assert!((90_000..=100_000).contains(&ms), "{pttl}");
    // An absolute time in the past: set, then gone.
    assert_eq!(c.call_line("SET past v EXAT 1"), OK);
    assert_eq!(c.call_line("GET past"), NIL);
    assert_eq!(c.call_line("SET short v PX 50"), OK);
    std::thread::sleep(Duration::from_millis(120));
    assert_eq!(c.call_line("GET short"), NIL);
}

#[test]
fn setnx_setex_psetex_getset_getdel() {
    let s = Server::start();
    let mut c = s.connect();
    assert_eq!(c.call_line("SETNX a 1"), int(1));
    assert_eq!(c.call_line("SETNX a 2"), int(0));
    assert_eq!(c.call_line("GET a"), bulk("1"));

    assert_eq!(c.call_line("SETEX b 100 v"), OK);
    assert_eq!(c.call_line("TTL b"), int(100));
    assert_eq!(
        c.call_line("SETEX b 0 v"),
        "-ERR invalid expire time in 'setex' command\r\n"
    );
    assert_eq!(c.call_line("SETEX b x v"), NOT_INT);
    assert_eq!(c.call_line("PSETEX b 100000 w"), OK);
    assert!(c.call_line("PTTL b").starts_with(":"));
    assert_eq!(c.call_line("GET b"), bulk("w"));
    assert_eq!(
        c.call_line("PSETEX b -5 w"),
        "-ERR invalid expire time in 'psetex' command\r\n"
    );

    assert_eq!(c.call_line("GETSET b x"), bulk("w"));
    assert_eq!(c.call_line("TTL b"), int(-1));
    assert_eq!(c.call_line("GETSET nob x"), NIL);
    assert_eq!(c.call_line("GET nob"), bulk("x"));

    assert_eq!(c.call_line("GETDEL b"), bulk("x"));
    assert_eq!(c.call_line("EXISTS b"), int(0));
    assert_eq!(c.call_line("GETDEL b"), NIL);

    // Arity comes from the dispatcher.
    assert_eq!(
        c.call_line("SETNX a"),
        "-ERR wrong number of arguments for 'setnx' command\r\n"
    );
}

#[test]
fn getex_options() {
    let s = Server::start();
    let mut c = s.connect();
    assert_eq!(c.call_line("GETEX missing"), NIL);
    // The expire value is checked only when the key exists.
    assert_eq!(c.call_line("GETEX missing EX 0"), NIL);
    assert_eq!(c.call_line("GETEX missing EX abc"), NIL);
    // Syntax is checked first.
    assert_eq!(c.call_line("GETEX missing NX"), SYNTAX);
    assert_eq!(c.call_line("SET k v"), OK);
    assert_eq!(c.call_line("GETEX k"), bulk("v"));
    assert_eq!(
        c.call_line("GETEX k EX 0"),
        "-ERR invalid expire time in 'getex' command\r\n"
    );
    for bad in [
        "GETEX k EX 10 PX 10",
        "GETEX k PERSIST EX 10",
        "GETEX k EX 10 PERSIST",
        "GETEX k KEEPTTL",
        "GETEX k GET",
        "GETEX k EX",
    ] {
        assert_eq!(c.call_line(bad), SYNTAX, "{bad}");
    }
    assert_eq!(c.call_line("GETEX k EX 100"), bulk("v"));
    assert_eq!(c.call_line("TTL k"), int(100));
    assert_eq!(c.call_line("GETEX k PX 50000"), bulk("v"));
    assert_eq!(c.call_line("TTL k"), int(50));
    assert_eq!(c.call_line("GETEX k PERSIST"), bulk("v"));
    assert_eq!(c.call_line("TTL k"), int(-1));
    assert_eq!(
        c.call_line(&format!("GETEX k EXAT {}", now_ms() / 1000 + 500)),
        bulk("v")
    );
    let ttl = c.call_line("TTL k");
    assert!(ttl == int(500) || ttl == int(499), "{ttl}");
    assert_eq!(
        c.call_line(&format!("GETEX k PXAT {}", now_ms() + 500_000)),
        bulk("v")
    );
    // A past absolute time deletes the key after replying.
    assert_eq!(c.call_line("GETEX k EXAT 1"), bulk("v"));
    assert_eq!(c.call_line("EXISTS k"), int(0));
    assert_eq!(c.call_line("SET k v"), OK);
    assert_eq!(c.call_line("GETEX k PXAT 1"), bulk("v"));
    assert_eq!(c.call_line("GET k"), NIL);
}

#[test]
fn mget_mset_msetnx() {
    let s = Server::start_single();
    let mut c = s.connect();
    assert_eq!(c.call_line("MSET a 1 b 2"), OK);
    assert_eq!(
        c.call_line("MGET a b c"),
        format!("*3\r\n{}{}{}", bulk("1"), bulk("2"), NIL)
    );
    assert_eq!(
        c.call_line("MSET a"),
        "-ERR wrong number of arguments for 'mset' command\r\n"
    );
    assert_eq!(
        c.call_line("MSET a 1 b"),
        "-ERR wrong number of arguments for 'mset' command\r\n"
    );
    assert_eq!(
        c.call_line("MSETNX a 1 b"),
        "-ERR wrong number of arguments for 'msetnx' command\r\n"
    );
    assert_eq!(c.call_line("MSETNX c 3 a 9"), int(0));
    assert_eq!(c.call_line("EXISTS c"), int(0));
    assert_eq!(c.call_line("MSETNX c 3 d 4"), int(1));
    assert_eq!(
        c.call_line("MGET c d"),
        format!("*2\r\n{}{}", bulk("3"), bulk("4"))
    );
    // MSET removes TTLs; the last value of a repeated key wins.
    assert_eq!(c.call_line("SET t v EX 100"), OK);
    assert_eq!(c.call_line("MSET t x t y"), OK);
    assert_eq!(c.call_line("GET t"), bulk("y"));
    assert_eq!(c.call_line("TTL t"), int(-1));
}

#[test]
fn append_strlen_getrange_setrange() {
    let s = Server::start();
    let mut c = s.connect();
    assert_eq!(c.call_line("APPEND a hello"), int(5));
    assert_eq!(c.call_line("APPEND a _world"), int(11));
    assert_eq!(c.call_line("GET a"), bulk("hello_world"));
    assert_eq!(c.call_line("APPEND e "), int(0));
    assert_eq!(c.call_line("EXISTS e"), int(1));
    assert_eq!(c.call_line("STRLEN a"), int(11));
    assert_eq!(c.call_line("STRLEN missing"), int(0));
    // APPEND keeps the TTL.
    assert_eq!(c.call_line("SET t v EX 100"), OK);
    assert_eq!(c.call_line("APPEND t w"), int(2));
    assert_eq!(c.call_line("TTL t"), int(100));
    // Integers and counters are strings too.
    assert_eq!(c.call_line("SET n 123"), OK);
    assert_eq!(c.call_line("INCR n"), int(124));
    assert_eq!(c.call_line("STRLEN n"), int(3));
    assert_eq!(c.call_line("APPEND n 5"), int(4));
    assert_eq!(c.call_line("GET n"), bulk("1245"));
    assert_eq!(c.call_line("INCR n"), int(1246));
    assert_eq!(c.call_line("GETRANGE n 1 2"), bulk("24"));

    assert_eq!(c.call_line("SET g hello"), OK);
    for (args, want) in [
        ("0 -1", "hello"),
        ("-5 -1", "hello"),
        ("-1 -5", ""),
        ("5 10", ""),
        ("0 100", "hello"),
        ("-100 -50", "h"),
        ("-100 -200", ""),
        ("3 1", ""),
        ("1 3", "ell"),
    ] {
        assert_eq!(
            c.call_line(&format!("GETRANGE g {args}")),
            bulk(want),
            "{args}"
        );
    }
    assert_eq!(c.call_line("SUBSTR g 0 1"), bulk("he"));
    assert_eq!(c.call_line("GETRANGE missing 0 -1"), bulk(""));
    assert_eq!(c.call_line("GETRANGE g a 1"), NOT_INT);

    assert_eq!(c.call_line("SETRANGE g 1 ipp"), int(5));
    assert_eq!(c.call_line("GET g"), bulk("hippo"));
    assert_eq!(c.call_line("SETRANGE g 7 !"), int(8));
    assert_eq!(c.call_lossy(&[b"GET", b"g"]), "$8\r\nhippo\0\0!\r\n");
    assert_eq!(
        c.call_line("SETRANGE g -1 x"),
        "-ERR offset is out of range\r\n"
    );
    assert_eq!(c.call_line("SETRANGE g x x"), NOT_INT);
    assert_eq!(c.call_line("SETRANGE nokey 5 "), int(0));
    assert_eq!(c.call_line("EXISTS nokey"), int(0));
    assert_eq!(c.call_line("SETRANGE g 100 "), int(8));
    assert_eq!(c.call_line("SETRANGE new 2 ab"), int(4));
    assert_eq!(c.call_lossy(&[b"GET", b"new"]), "$4\r\n\0\0ab\r\n");
    let too_long = "-ERR string exceeds maximum allowed size (proto-max-bulk-len)\r\n";
    assert_eq!(c.call_line("SETRANGE g 536870912 x"), too_long);
    assert_eq!(c.call_line("SETRANGE g 9223372036854775807 x"), too_long);
    assert_eq!(c.call_line("SETRANGE fresh 536870912 x"), too_long);
    assert_eq!(c.call_line("EXISTS fresh"), int(0));
    // SETRANGE keeps the TTL.
    assert_eq!(c.call_line("SETRANGE t 0 z"), int(2));
    assert_eq!(c.call_line("TTL t"), int(100));
}

/// `aof_current_size` of `INFO persistence`: the bytes of the log segments on disk, summed
/// over the shards (the in-memory op log of a site with no peers keeps one chunk only).
fn oplog_bytes(c: &mut common::Raw) -> u64 {
    let raw = c.call_strs(&["INFO", "persistence"]);
    let text = String::from_utf8_lossy(&raw).into_owned();
    text.lines()
        .find_map(|l| l.strip_prefix("aof_current_size:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no aof_current_size in {text}"))
}

/// The work of n APPENDs (and SETRANGEs) on a single site, measured by what they log: one
/// edit of about the piece each, so twice the appends log twice the bytes. They logged the
/// whole new value each time: n² × the piece / 2 bytes (4× for 2× the appends).
#[test]
fn appends_log_what_changed_not_the_value() {
    let s = Server::start();
    let mut c = s.connect();
    assert_eq!(c.call_line("SET s start"), OK);
    let mut grew = Vec::new();
    let mut len = 5;
    for n in [1_000u64, 2_000] {
        let before = oplog_bytes(&mut c);
        let mut batch = Vec::new();
        for _ in 0..n {
            batch.extend_from_slice(&common::cmd(&[b"APPEND", b"s", b"0123456789"]));
        }
        c.send(&batch);
        for _ in 0..n {
            len += 10;
            assert_eq!(String::from_utf8_lossy(&c.read_reply()), int(len));
        }
        grew.push(oplog_bytes(&mut c).saturating_sub(before));
    }
    assert!(grew[0] > 0);
    assert!(
        grew[1] <= 2_000 * 100,
        "{} bytes logged for 2,000 APPENDs",
        grew[1]
    );
    assert!(grew[1] < 3 * grew[0], "linear growth: {grew:?}");
    assert_eq!(c.call_line("STRLEN s"), int(len));
    let value = c.call_strs(&["GET", "s"]);
    assert!(value.ends_with(b"01234567890123456789\r\n"));
    assert!(value.starts_with(format!("${len}\r\nstart0123456789").as_bytes()));
    // SETRANGE inside the string logs the range too.
    let before = oplog_bytes(&mut c);
    for i in 0..100 {
        let off = (i * 97).to_string();
        assert_eq!(c.int(&["SETRANGE", "s", &off, "xy"]), len);
    }
    assert!(oplog_bytes(&mut c) - before <= 100 * 100);
    assert_eq!(c.call_line("GETRANGE s 97 98"), bulk("xy"));
    assert_eq!(c.call_line("OBJECT ENCODING s"), bulk("raw"));
}

#[test]
fn incr_family() {
    let s = Server::start();
    let mut c = s.connect();
    assert_eq!(c.call_line("INCR n"), int(1));
    assert_eq!(c.call_line("INCRBY n 10"), int(11));
    assert_eq!(c.call_line("DECR n"), int(10));
    assert_eq!(c.call_line("DECRBY n 20"), int(-10));
    assert_eq!(c.call_line("GET n"), bulk("-10"));
    assert_eq!(c.call_line("INCRBY n abc"), NOT_INT);
    assert_eq!(c.call_line("INCRBY n 1.5"), NOT_INT);
    for v in [
        " 1",
        "1 ",
        "01",
        "+1",
        "1.0",
        "abc",
        "123456789012345678901",
    ] {
        assert_eq!(c.call_lossy(&[b"SET", b"bad", v.as_bytes()]), OK);
        assert_eq!(c.call_line("INCR bad"), NOT_INT, "{v:?}");
    }
    assert_eq!(c.call_line("SET big 9223372036854775807"), OK);
    assert_eq!(
        c.call_line("INCR big"),
        "-ERR increment or decrement would overflow\r\n"
    );
    assert_eq!(c.call_line("SET small -9223372036854775808"), OK);
    assert_eq!(
        c.call_line("DECR small"),
        "-ERR increment or decrement would overflow\r\n"
    );
    assert_eq!(
        c.call_line("DECRBY small -9223372036854775808"),
        "-ERR decrement would overflow\r\n"
    );
    assert_eq!(c.call_line("SET z 0"), OK);
    assert_eq!(c.call_line("INCRBY z -9223372036854775808"), int(i64::MIN));
    // INCR keeps the TTL.
    assert_eq!(c.call_line("SET t 5 EX 100"), OK);
    assert_eq!(c.call_line("INCR t"), int(6));
    assert_eq!(c.call_line("TTL t"), int(100));
    // SET after INCR replaces the value.
    assert_eq!(c.call_line("SET n 7"), OK);
    assert_eq!(c.call_line("INCR n"), int(8));
}

#[test]
fn incrbyfloat_cases() {
    let s = Server::start();
    let mut c = s.connect();
    assert_eq!(c.call_line("INCRBYFLOAT f 10.5"), bulk("10.5"));
    assert_eq!(c.call_line("INCRBYFLOAT f 0.1"), bulk("10.6"));
    assert_eq!(c.call_line("GET f"), bulk("10.6"));
    assert_eq!(c.call_line("INCR f"), NOT_INT);
    assert_eq!(c.call_line("INCRBYFLOAT f abc"), NOT_FLOAT);
    assert_eq!(
        c.call_line("INCRBYFLOAT f inf"),
        "-ERR increment would produce NaN or Infinity\r\n"
    );
    assert_eq!(c.call_lossy(&[b"INCRBYFLOAT", b"f", b" 1"]), NOT_FLOAT);
    assert_eq!(c.call_line("INCRBYFLOAT f 1e400000"), NOT_FLOAT);
    assert_eq!(c.call_line("INCRBYFLOAT f -0.6"), bulk("10"));
    assert_eq!(c.call_line("INCR f"), int(11));
    assert_eq!(c.call_line("INCRBYFLOAT f .5"), bulk("11.5"));
    assert_eq!(c.call_line("INCRBYFLOAT f 5."), bulk("16.5"));
    assert_eq!(c.call_line("INCRBYFLOAT f 1e2"), bulk("116.5"));
    assert_eq!(c.call_line("INCRBYFLOAT f 0x10"), bulk("132.5"));
    assert_eq!(c.call_line("SET i 1"), OK);
    assert_eq!(c.call_line("INCRBYFLOAT i -1.1"), bulk("-0.1"));
    assert_eq!(c.call_line("SET s inf"), OK);
    assert_eq!(
        c.call_line("INCRBYFLOAT s 1"),
        "-ERR increment would produce NaN or Infinity\r\n"
    );
    assert_eq!(c.call_line("SET s abc"), OK);
    assert_eq!(c.call_line("INCRBYFLOAT s 1"), NOT_FLOAT);
    assert_eq!(c.call_line("SET t 1.5 EX 100"), OK);
    assert_eq!(c.call_line("INCRBYFLOAT t 1"), bulk("2.5"));
    assert_eq!(c.call_line("TTL t"), int(100));
}

#[test]
fn wrong_type_and_resp3() {
    let s = Server::start_single();
    let mut c = s.connect();
    // RESP3 null for a missing key.
    assert!(c.call_line("HELLO 3").starts_with('%'));
    assert_eq!(c.call_line("GET missing"), "_\r\n");
    assert_eq!(c.call_line("MGET missing"), "*1\r\n_\r\n");
    assert_eq!(c.call_line("SET k v NX"), OK);
    assert_eq!(c.call_line("SET k v NX"), "_\r\n");
    assert_eq!(c.call_line("INCRBYFLOAT fl 1.5"), bulk("1.5"));

    // A key of another type, when a set type is available in this build.
    if c.call_line("SADD s a").starts_with(':') {
        for cmd in [
            "GET s",
            "GETSET s v",
            "GETDEL s",
            "GETEX s",
            "GETEX s EX 10",
            "SET s v GET",
            "SET s v NX GET",
            "APPEND s x",
            "STRLEN s",
            "GETRANGE s 0 1",
            "SETRANGE s 0 x",
            "INCR s",
            "DECRBY s 1",
            "INCRBYFLOAT s 1",
        ] {
            assert_eq!(c.call_line(cmd), WRONGTYPE, "{cmd}");
        }
        assert_eq!(c.call_line("SETRANGE s 0 "), WRONGTYPE);
        assert_eq!(
            c.call_line("SETRANGE s -1 x"),
            "-ERR offset is out of range\r\n"
        );
        assert_eq!(
            c.call_line("SET s v GET EX 0"),
            "-ERR invalid expire time in 'set' command\r\n"
        );
        assert_eq!(c.call_line("MGET s"), "*1\r\n_\r\n");
        assert_eq!(c.call_line("MSETNX s 1 other 2"), int(0));
        assert_eq!(c.call_line("SET s v"), OK);
        assert_eq!(c.call_line("GET s"), bulk("v"));
    }
}

#[test]
fn proto_max_bulk_len_limits_append_and_setrange() {
    let s = Server::start_with(&["--proto-max-bulk-len", "1048576"]);
    let mut c = s.connect();
    let too_long = "-ERR string exceeds maximum allowed size (proto-max-bulk-len)\r\n";
    assert_eq!(c.call_line("SETRANGE k 1048575 x"), int(1_048_576));
    assert_eq!(c.call_line("APPEND k x"), too_long);
    assert_eq!(c.call_line("APPEND k "), int(1_048_576));
    assert_eq!(c.call_line("SETRANGE k 1048576 x"), too_long);
    assert_eq!(c.call_line("SETRANGE k 1048575 y"), int(1_048_576));
    assert_eq!(c.call_line("GETRANGE k -2 -1"), "$2\r\n\0y\r\n");
    assert_eq!(c.call_line("SETRANGE other 1048576 x"), too_long);
    assert_eq!(c.call_line("EXISTS other"), int(0));
    assert_eq!(c.call_line("STRLEN k"), int(1_048_576));
}
