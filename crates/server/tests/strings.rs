//! String commands against the real `meridian` binary, over raw RESP so that reply shapes and
//! error texts are checked byte for byte.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running server, killed on drop.
struct Server {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Server {
    fn start() -> Server {
        Server::start_with(&[])
    }

    fn start_with(extra: &[&str]) -> Server {
        let dir = tempfile::tempdir().expect("tempdir");
        let port = TcpListener::bind("127.0.0.1:0")
            .expect("bind")
            .local_addr()
            .expect("addr")
            .port();
        let child = Command::new(env!("CARGO_BIN_EXE_meridian"))
            .args(["server", "--port", &port.to_string(), "--dir"])
            .arg(dir.path())
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn meridian");
        let server = Server {
            child,
            port,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "server did not start on port {port}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        server
    }

    fn client(&self) -> Client {
        let s = TcpStream::connect(("127.0.0.1", self.port)).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        Client {
            w: s.try_clone().expect("clone"),
            r: BufReader::new(s),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct Client {
    w: TcpStream,
    r: BufReader<TcpStream>,
}

impl Client {
    /// Sends one command and returns its reply as raw RESP bytes, rendered lossily.
    fn cmd(&mut self, args: &[&[u8]]) -> String {
        let mut req = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            req.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            req.extend_from_slice(a);
            req.extend_from_slice(b"\r\n");
        }
        self.w.write_all(&req).expect("write");
        let mut out = Vec::new();
        self.read_reply(&mut out);
        String::from_utf8_lossy(&out).into_owned()
    }

    /// `cmd` with arguments split on spaces.
    fn q(&mut self, line: &str) -> String {
        let args: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
        self.cmd(&args)
    }

    fn read_line(&mut self, out: &mut Vec<u8>) -> String {
        let mut line = Vec::new();
        self.r.read_until(b'\n', &mut line).expect("read");
        assert!(
            line.ends_with(b"\r\n"),
            "truncated reply: {:?}",
            String::from_utf8_lossy(&line)
        );
        out.extend_from_slice(&line);
        String::from_utf8_lossy(&line[..line.len() - 2]).into_owned()
    }

    fn read_reply(&mut self, out: &mut Vec<u8>) {
        let mut first = [0u8; 1];
        self.r.read_exact(&mut first).expect("read type");
        out.push(first[0]);
        let head = self.read_line(out);
        match first[0] {
            b'$' | b'=' => {
                let n: i64 = head.parse().expect("bulk len");
                if n >= 0 {
                    let mut body = vec![0u8; n as usize + 2];
                    self.r.read_exact(&mut body).expect("bulk body");
                    out.extend_from_slice(&body);
                }
            }
            b'*' | b'~' | b'>' => {
                let n: i64 = head.parse().expect("array len");
                for _ in 0..n.max(0) {
                    self.read_reply(out);
                }
            }
            b'%' => {
                let n: i64 = head.parse().expect("map len");
                for _ in 0..2 * n.max(0) {
                    self.read_reply(out);
                }
            }
            _ => {}
        }
    }
}

const OK: &str = "+OK\r\n";
const NIL: &str = "$-1\r\n";
const SYNTAX: &str = "-ERR syntax error\r\n";
const NOT_INT: &str = "-ERR value is not an integer or out of range\r\n";
const NOT_FLOAT: &str = "-ERR value is not a valid float\r\n";
const WRONGTYPE: &str = "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n";

fn bulk(s: &str) -> String {
    format!("${}\r\n{}\r\n", s.len(), s)
}

fn int(n: i64) -> String {
    format!(":{n}\r\n")
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

#[test]
fn get_set_and_options() {
    let s = Server::start();
    let mut c = s.client();
    assert_eq!(c.q("GET missing"), NIL);
    assert_eq!(c.q("SET k v"), OK);
    assert_eq!(c.q("get k"), bulk("v"));
    // Binary-safe values.
    assert_eq!(c.cmd(&[b"SET", b"bin", b"a\r\n\0b"]), OK);
    assert_eq!(c.cmd(&[b"GET", b"bin"]), "$5\r\na\r\n\0b\r\n");
    assert_eq!(c.q("SET empty "), OK);
    assert_eq!(c.q("GET empty"), bulk(""));
    assert_eq!(c.q("EXISTS empty"), int(1));

    // NX / XX.
    assert_eq!(c.q("SET k v2 NX"), NIL);
    assert_eq!(c.q("SET k v2 XX"), OK);
    assert_eq!(c.q("SET nx1 v XX"), NIL);
    assert_eq!(c.q("SET nx1 v nx"), OK);
    assert_eq!(c.q("GET k"), bulk("v2"));

    // GET option, with NX (allowed in 7.0).
    assert_eq!(c.q("SET k v3 GET"), bulk("v2"));
    assert_eq!(c.q("SET newk v GET"), NIL);
    assert_eq!(c.q("GET newk"), bulk("v"));
    assert_eq!(c.q("SET k other NX GET"), bulk("v3"));
    assert_eq!(c.q("GET k"), bulk("v3"));
    assert_eq!(c.q("SET gnx v NX GET"), NIL);
    assert_eq!(c.q("GET gnx"), bulk("v"));

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
        assert_eq!(c.q(bad), SYNTAX, "{bad}");
    }
    // Expire values.
    let inv = "-ERR invalid expire time in 'set' command\r\n";
    assert_eq!(c.q("SET k v EX 0"), inv);
    assert_eq!(c.q("SET k v PX -1"), inv);
    assert_eq!(c.q("SET k v EX 9223372036854776"), inv);
    assert_eq!(c.q("SET k v EX 9223372036854775"), inv);
    assert_eq!(c.q("SET k v PX 9223372036854775807"), inv);
    assert_eq!(c.q("SET k v EX abc"), NOT_INT);
    assert_eq!(c.q("GET k"), bulk("v3"));

    // TTLs.
    assert_eq!(c.q("SET t v EX 100"), OK);
    assert_eq!(c.q("TTL t"), int(100));
    assert_eq!(c.q("SET t v EX 10 EX 200"), OK);
    assert_eq!(c.q("TTL t"), int(200));
    assert_eq!(c.q("SET t v2 KEEPTTL"), OK);
    assert_eq!(c.q("TTL t"), int(200));
    assert_eq!(c.q("SET t v3"), OK);
    assert_eq!(c.q("TTL t"), int(-1));
    let at = now_ms() / 1000 + 1000;
    assert_eq!(c.q(&format!("SET t v EXAT {at}")), OK);
    let ttl = c.q("TTL t");
    assert!(ttl == int(1000) || ttl == int(999), "{ttl}");
    assert_eq!(c.q(&format!("SET t v PXAT {}", now_ms() + 100_000)), OK);
    let pttl = c.q("PTTL t");
    let ms: i64 = pttl.trim_start_matches(':').trim_end().parse().unwrap_or(0);
    assert!((90_000..=100_000).contains(&ms), "{pttl}");
    // An absolute time in the past: set, then gone.
    assert_eq!(c.q("SET past v EXAT 1"), OK);
    assert_eq!(c.q("GET past"), NIL);
    assert_eq!(c.q("SET short v PX 50"), OK);
    std::thread::sleep(Duration::from_millis(120));
    assert_eq!(c.q("GET short"), NIL);
}

#[test]
fn setnx_setex_psetex_getset_getdel() {
    let s = Server::start();
    let mut c = s.client();
    assert_eq!(c.q("SETNX a 1"), int(1));
    assert_eq!(c.q("SETNX a 2"), int(0));
    assert_eq!(c.q("GET a"), bulk("1"));

    assert_eq!(c.q("SETEX b 100 v"), OK);
    assert_eq!(c.q("TTL b"), int(100));
    assert_eq!(
        c.q("SETEX b 0 v"),
        "-ERR invalid expire time in 'setex' command\r\n"
    );
    assert_eq!(c.q("SETEX b x v"), NOT_INT);
    assert_eq!(c.q("PSETEX b 100000 w"), OK);
    assert!(c.q("PTTL b").starts_with(":"));
    assert_eq!(c.q("GET b"), bulk("w"));
    assert_eq!(
        c.q("PSETEX b -5 w"),
        "-ERR invalid expire time in 'psetex' command\r\n"
    );

    assert_eq!(c.q("GETSET b x"), bulk("w"));
    assert_eq!(c.q("TTL b"), int(-1));
    assert_eq!(c.q("GETSET nob x"), NIL);
    assert_eq!(c.q("GET nob"), bulk("x"));

    assert_eq!(c.q("GETDEL b"), bulk("x"));
    assert_eq!(c.q("EXISTS b"), int(0));
    assert_eq!(c.q("GETDEL b"), NIL);

    // Arity comes from the dispatcher.
    assert_eq!(
        c.q("SETNX a"),
        "-ERR wrong number of arguments for 'setnx' command\r\n"
    );
}

#[test]
fn getex_options() {
    let s = Server::start();
    let mut c = s.client();
    assert_eq!(c.q("GETEX missing"), NIL);
    // The expire value is checked only when the key exists.
    assert_eq!(c.q("GETEX missing EX 0"), NIL);
    assert_eq!(c.q("GETEX missing EX abc"), NIL);
    // Syntax is checked first.
    assert_eq!(c.q("GETEX missing NX"), SYNTAX);
    assert_eq!(c.q("SET k v"), OK);
    assert_eq!(c.q("GETEX k"), bulk("v"));
    assert_eq!(
        c.q("GETEX k EX 0"),
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
        assert_eq!(c.q(bad), SYNTAX, "{bad}");
    }
    assert_eq!(c.q("GETEX k EX 100"), bulk("v"));
    assert_eq!(c.q("TTL k"), int(100));
    assert_eq!(c.q("GETEX k PX 50000"), bulk("v"));
    assert_eq!(c.q("TTL k"), int(50));
    assert_eq!(c.q("GETEX k PERSIST"), bulk("v"));
    assert_eq!(c.q("TTL k"), int(-1));
    assert_eq!(
        c.q(&format!("GETEX k EXAT {}", now_ms() / 1000 + 500)),
        bulk("v")
    );
    let ttl = c.q("TTL k");
    assert!(ttl == int(500) || ttl == int(499), "{ttl}");
    assert_eq!(
        c.q(&format!("GETEX k PXAT {}", now_ms() + 500_000)),
        bulk("v")
    );
    // A past absolute time deletes the key after replying.
    assert_eq!(c.q("GETEX k EXAT 1"), bulk("v"));
    assert_eq!(c.q("EXISTS k"), int(0));
    assert_eq!(c.q("SET k v"), OK);
    assert_eq!(c.q("GETEX k PXAT 1"), bulk("v"));
    assert_eq!(c.q("GET k"), NIL);
}

#[test]
fn mget_mset_msetnx() {
    let s = Server::start();
    let mut c = s.client();
    assert_eq!(c.q("MSET a 1 b 2"), OK);
    assert_eq!(
        c.q("MGET a b c"),
        format!("*3\r\n{}{}{}", bulk("1"), bulk("2"), NIL)
    );
    assert_eq!(
        c.q("MSET a"),
        "-ERR wrong number of arguments for 'mset' command\r\n"
    );
    assert_eq!(
        c.q("MSET a 1 b"),
        "-ERR wrong number of arguments for 'mset' command\r\n"
    );
    assert_eq!(
        c.q("MSETNX a 1 b"),
        "-ERR wrong number of arguments for 'msetnx' command\r\n"
    );
    assert_eq!(c.q("MSETNX c 3 a 9"), int(0));
    assert_eq!(c.q("EXISTS c"), int(0));
    assert_eq!(c.q("MSETNX c 3 d 4"), int(1));
    assert_eq!(c.q("MGET c d"), format!("*2\r\n{}{}", bulk("3"), bulk("4")));
    // MSET removes TTLs; the last value of a repeated key wins.
    assert_eq!(c.q("SET t v EX 100"), OK);
    assert_eq!(c.q("MSET t x t y"), OK);
    assert_eq!(c.q("GET t"), bulk("y"));
    assert_eq!(c.q("TTL t"), int(-1));
}

#[test]
fn append_strlen_getrange_setrange() {
    let s = Server::start();
    let mut c = s.client();
    assert_eq!(c.q("APPEND a hello"), int(5));
    assert_eq!(c.q("APPEND a _world"), int(11));
    assert_eq!(c.q("GET a"), bulk("hello_world"));
    assert_eq!(c.q("APPEND e "), int(0));
    assert_eq!(c.q("EXISTS e"), int(1));
    assert_eq!(c.q("STRLEN a"), int(11));
    assert_eq!(c.q("STRLEN missing"), int(0));
    // APPEND keeps the TTL.
    assert_eq!(c.q("SET t v EX 100"), OK);
    assert_eq!(c.q("APPEND t w"), int(2));
    assert_eq!(c.q("TTL t"), int(100));
    // Integers and counters are strings too.
    assert_eq!(c.q("SET n 123"), OK);
    assert_eq!(c.q("INCR n"), int(124));
    assert_eq!(c.q("STRLEN n"), int(3));
    assert_eq!(c.q("APPEND n 5"), int(4));
    assert_eq!(c.q("GET n"), bulk("1245"));
    assert_eq!(c.q("INCR n"), int(1246));
    assert_eq!(c.q("GETRANGE n 1 2"), bulk("24"));

    assert_eq!(c.q("SET g hello"), OK);
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
        assert_eq!(c.q(&format!("GETRANGE g {args}")), bulk(want), "{args}");
    }
    assert_eq!(c.q("SUBSTR g 0 1"), bulk("he"));
    assert_eq!(c.q("GETRANGE missing 0 -1"), bulk(""));
    assert_eq!(c.q("GETRANGE g a 1"), NOT_INT);

    assert_eq!(c.q("SETRANGE g 1 ipp"), int(5));
    assert_eq!(c.q("GET g"), bulk("hippo"));
    assert_eq!(c.q("SETRANGE g 7 !"), int(8));
    assert_eq!(c.cmd(&[b"GET", b"g"]), "$8\r\nhippo\0\0!\r\n");
    assert_eq!(c.q("SETRANGE g -1 x"), "-ERR offset is out of range\r\n");
    assert_eq!(c.q("SETRANGE g x x"), NOT_INT);
    assert_eq!(c.q("SETRANGE nokey 5 "), int(0));
    assert_eq!(c.q("EXISTS nokey"), int(0));
    assert_eq!(c.q("SETRANGE g 100 "), int(8));
    assert_eq!(c.q("SETRANGE new 2 ab"), int(4));
    assert_eq!(c.cmd(&[b"GET", b"new"]), "$4\r\n\0\0ab\r\n");
    let too_long = "-ERR string exceeds maximum allowed size (proto-max-bulk-len)\r\n";
    assert_eq!(c.q("SETRANGE g 536870912 x"), too_long);
    assert_eq!(c.q("SETRANGE g 9223372036854775807 x"), too_long);
    assert_eq!(c.q("SETRANGE fresh 536870912 x"), too_long);
    assert_eq!(c.q("EXISTS fresh"), int(0));
    // SETRANGE keeps the TTL.
    assert_eq!(c.q("SETRANGE t 0 z"), int(2));
    assert_eq!(c.q("TTL t"), int(100));
}

#[test]
fn incr_family() {
    let s = Server::start();
    let mut c = s.client();
    assert_eq!(c.q("INCR n"), int(1));
    assert_eq!(c.q("INCRBY n 10"), int(11));
    assert_eq!(c.q("DECR n"), int(10));
    assert_eq!(c.q("DECRBY n 20"), int(-10));
    assert_eq!(c.q("GET n"), bulk("-10"));
    assert_eq!(c.q("INCRBY n abc"), NOT_INT);
    assert_eq!(c.q("INCRBY n 1.5"), NOT_INT);
    for v in [
        " 1",
        "1 ",
        "01",
        "+1",
        "1.0",
        "abc",
        "123456789012345678901",
    ] {
        assert_eq!(c.cmd(&[b"SET", b"bad", v.as_bytes()]), OK);
        assert_eq!(c.q("INCR bad"), NOT_INT, "{v:?}");
    }
    assert_eq!(c.q("SET big 9223372036854775807"), OK);
    assert_eq!(
        c.q("INCR big"),
        "-ERR increment or decrement would overflow\r\n"
    );
    assert_eq!(c.q("SET small -9223372036854775808"), OK);
    assert_eq!(
        c.q("DECR small"),
        "-ERR increment or decrement would overflow\r\n"
    );
    assert_eq!(
        c.q("DECRBY small -9223372036854775808"),
        "-ERR decrement would overflow\r\n"
    );
    assert_eq!(c.q("SET z 0"), OK);
    assert_eq!(c.q("INCRBY z -9223372036854775808"), int(i64::MIN));
    // INCR keeps the TTL.
    assert_eq!(c.q("SET t 5 EX 100"), OK);
    assert_eq!(c.q("INCR t"), int(6));
    assert_eq!(c.q("TTL t"), int(100));
    // SET after INCR replaces the value.
    assert_eq!(c.q("SET n 7"), OK);
    assert_eq!(c.q("INCR n"), int(8));
}

#[test]
fn incrbyfloat_cases() {
    let s = Server::start();
    let mut c = s.client();
    assert_eq!(c.q("INCRBYFLOAT f 10.5"), bulk("10.5"));
    assert_eq!(c.q("INCRBYFLOAT f 0.1"), bulk("10.6"));
    assert_eq!(c.q("GET f"), bulk("10.6"));
    assert_eq!(c.q("INCR f"), NOT_INT);
    assert_eq!(c.q("INCRBYFLOAT f abc"), NOT_FLOAT);
    assert_eq!(
        c.q("INCRBYFLOAT f inf"),
        "-ERR increment would produce NaN or Infinity\r\n"
    );
    assert_eq!(c.cmd(&[b"INCRBYFLOAT", b"f", b" 1"]), NOT_FLOAT);
    assert_eq!(c.q("INCRBYFLOAT f 1e400000"), NOT_FLOAT);
    assert_eq!(c.q("INCRBYFLOAT f -0.6"), bulk("10"));
    assert_eq!(c.q("INCR f"), int(11));
    assert_eq!(c.q("INCRBYFLOAT f .5"), bulk("11.5"));
    assert_eq!(c.q("INCRBYFLOAT f 5."), bulk("16.5"));
    assert_eq!(c.q("INCRBYFLOAT f 1e2"), bulk("116.5"));
    assert_eq!(c.q("INCRBYFLOAT f 0x10"), bulk("132.5"));
    assert_eq!(c.q("SET i 1"), OK);
    assert_eq!(c.q("INCRBYFLOAT i -1.1"), bulk("-0.1"));
    assert_eq!(c.q("SET s inf"), OK);
    assert_eq!(
        c.q("INCRBYFLOAT s 1"),
        "-ERR increment would produce NaN or Infinity\r\n"
    );
    assert_eq!(c.q("SET s abc"), OK);
    assert_eq!(c.q("INCRBYFLOAT s 1"), NOT_FLOAT);
    assert_eq!(c.q("SET t 1.5 EX 100"), OK);
    assert_eq!(c.q("INCRBYFLOAT t 1"), bulk("2.5"));
    assert_eq!(c.q("TTL t"), int(100));
}

#[test]
fn wrong_type_and_resp3() {
    let s = Server::start();
    let mut c = s.client();
    // RESP3 null for a missing key.
    assert!(c.q("HELLO 3").starts_with('%'));
    assert_eq!(c.q("GET missing"), "_\r\n");
    assert_eq!(c.q("MGET missing"), "*1\r\n_\r\n");
    assert_eq!(c.q("SET k v NX"), OK);
    assert_eq!(c.q("SET k v NX"), "_\r\n");
    assert_eq!(c.q("INCRBYFLOAT fl 1.5"), bulk("1.5"));

    // A key of another type, when a set type is available in this build.
    if c.q("SADD s a").starts_with(':') {
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
            assert_eq!(c.q(cmd), WRONGTYPE, "{cmd}");
        }
        assert_eq!(c.q("SETRANGE s 0 "), WRONGTYPE);
        assert_eq!(c.q("SETRANGE s -1 x"), "-ERR offset is out of range\r\n");
        assert_eq!(
            c.q("SET s v GET EX 0"),
            "-ERR invalid expire time in 'set' command\r\n"
        );
        assert_eq!(c.q("MGET s"), "*1\r\n_\r\n");
        assert_eq!(c.q("MSETNX s 1 other 2"), int(0));
        assert_eq!(c.q("SET s v"), OK);
        assert_eq!(c.q("GET s"), bulk("v"));
    }
}

#[test]
fn proto_max_bulk_len_limits_append_and_setrange() {
    let s = Server::start_with(&["--proto-max-bulk-len", "1048576"]);
    let mut c = s.client();
    let too_long = "-ERR string exceeds maximum allowed size (proto-max-bulk-len)\r\n";
    assert_eq!(c.q("SETRANGE k 1048575 x"), int(1_048_576));
    assert_eq!(c.q("APPEND k x"), too_long);
    assert_eq!(c.q("APPEND k "), int(1_048_576));
    assert_eq!(c.q("SETRANGE k 1048576 x"), too_long);
    assert_eq!(c.q("SETRANGE k 1048575 y"), int(1_048_576));
    assert_eq!(c.q("GETRANGE k -2 -1"), "$2\r\n\0y\r\n");
    assert_eq!(c.q("SETRANGE other 1048576 x"), too_long);
    assert_eq!(c.q("EXISTS other"), int(0));
    assert_eq!(c.q("STRLEN k"), int(1_048_576));
}
