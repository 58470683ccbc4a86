//! Integration tests of COMMAND (cmd/command.rs) and CLIENT (cmd/client.rs) against the real
//! binary. Expected bytes were captured from redis-server 7.0.15.
//!
//! A small raw RESP client is used so reply bytes and RESP3 types are seen exactly.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The server process, killed on drop.
struct Server {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}

fn start() -> Server {
    let dir = tempfile::tempdir().expect("tempdir");
    let port = free_port();
    let child = Command::new(env!("CARGO_BIN_EXE_meridian"))
        .args(["server", "--port", &port.to_string(), "--dir"])
        .arg(dir.path())
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

/// A raw RESP connection.
struct Conn {
    r: BufReader<TcpStream>,
    w: TcpStream,
}

impl Conn {
    fn open(s: &Server) -> Conn {
        let w = TcpStream::connect(("127.0.0.1", s.port)).expect("connect");
        w.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        Conn {
            r: BufReader::new(w.try_clone().expect("clone")),
            w,
        }
    }

    /// Sends one command and returns the raw bytes of its reply.
    fn call(&mut self, args: &[&str]) -> Vec<u8> {
        let mut req = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            req.extend_from_slice(format!("${}\r\n{a}\r\n", a.len()).as_bytes());
        }
        self.w.write_all(&req).expect("write");
        let mut out = Vec::new();
        read_value(&mut self.r, &mut out);
        out
    }

    fn call_str(&mut self, args: &[&str]) -> String {
        String::from_utf8_lossy(&self.call(args)).into_owned()
    }

    /// Whether the server closed the connection (EOF within the timeout).
    fn closed(&mut self) -> bool {
        let mut b = [0u8; 1];
        matches!(self.r.read(&mut b), Ok(0) | Err(_))
    }
}

/// Reads one RESP2/RESP3 value, appending its raw bytes to `out`.
fn read_value(r: &mut BufReader<TcpStream>, out: &mut Vec<u8>) {
    let mut line = Vec::new();
    r.read_until(b'\n', &mut line).expect("read line");
    assert!(
        line.ends_with(b"\r\n"),
        "truncated reply: {:?}",
        String::from_utf8_lossy(out)
    );
    out.extend_from_slice(&line);
    let kind = line[0];
    let n: i64 = std::str::from_utf8(&line[1..line.len() - 2])
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    match kind {
        b'$' | b'=' | b'!' if n >= 0 => {
            let mut body = vec![0u8; n as usize + 2];
            r.read_exact(&mut body).expect("read bulk");
            out.extend_from_slice(&body);
        }
        b'*' | b'~' | b'>' => {
            for _ in 0..n.max(0) {
                read_value(r, out);
            }
        }
        b'%' => {
            for _ in 0..2 * n.max(0) {
                read_value(r, out);
            }
        }
        _ => {}
    }
}

/// `COMMAND INFO get` from redis-server 7.0.15, RESP2.
const INFO_GET_RESP2: &[u8] = b"*1\r\n*10\r\n$3\r\nget\r\n:2\r\n*2\r\n+readonly\r\n+fast\r\n:1\r\n:1\r\n:1\r\n*3\r\n+@read\r\n+@string\r\n+@fast\r\n*0\r\n*1\r\n*6\r\n$5\r\nflags\r\n*2\r\n+RO\r\n+access\r\n$12\r\nbegin_search\r\n*4\r\n$4\r\ntype\r\n$5\r\nindex\r\n$4\r\nspec\r\n*2\r\n$5\r\nindex\r\n:1\r\n$9\r\nfind_keys\r\n*4\r\n$4\r\ntype\r\n$5\r\nrange\r\n$4\r\nspec\r\n*6\r\n$7\r\nlastkey\r\n:0\r\n$7\r\nkeystep\r\n:1\r\n$5\r\nlimit\r\n:0\r\n*0\r\n";

/// `COMMAND INFO get nosuch` from redis-server 7.0.15, RESP3.
const INFO_GET_NOSUCH_RESP3: &[u8] = b"*2\r\n*10\r\n$3\r\nget\r\n:2\r\n~2\r\n+readonly\r\n+fast\r\n:1\r\n:1\r\n:1\r\n~3\r\n+@read\r\n+@string\r\n+@fast\r\n~0\r\n~1\r\n%3\r\n$5\r\nflags\r\n~2\r\n+RO\r\n+access\r\n$12\r\nbegin_search\r\n%2\r\n$4\r\ntype\r\n$5\r\nindex\r\n$4\r\nspec\r\n%1\r\n$5\r\nindex\r\n:1\r\n$9\r\nfind_keys\r\n%2\r\n$4\r\ntype\r\n$5\r\nrange\r\n$4\r\nspec\r\n%3\r\n$7\r\nlastkey\r\n:0\r\n$7\r\nkeystep\r\n:1\r\n$5\r\nlimit\r\n:0\r\n~0\r\n_\r\n";

/// `COMMAND DOCS get nosuch` from redis-server 7.0.15, RESP3.
const DOCS_GET_RESP3: &[u8] = b"%1\r\n$3\r\nget\r\n%5\r\n$7\r\nsummary\r\n$22\r\nGet the value of a key\r\n$5\r\nsince\r\n$5\r\n1.0.0\r\n$5\r\ngroup\r\n$6\r\nstring\r\n$10\r\ncomplexity\r\n$4\r\nO(1)\r\n$9\r\narguments\r\n*1\r\n%3\r\n$4\r\nname\r\n$3\r\nkey\r\n$4\r\ntype\r\n$3\r\nkey\r\n$14\r\nkey_spec_index\r\n:0\r\n";

/// `COMMAND INFO client|id` from redis-server 7.0.15, RESP3.
const INFO_CLIENT_ID_RESP3: &[u8] = b"*1\r\n*10\r\n$9\r\nclient|id\r\n:2\r\n~3\r\n+noscript\r\n+loading\r\n+stale\r\n:0\r\n:0\r\n:0\r\n~2\r\n+@slow\r\n+@connection\r\n~0\r\n~0\r\n~0\r\n";

fn bulk_items(reply: &[u8]) -> Vec<String> {
    let s = String::from_utf8_lossy(reply);
    let mut items = Vec::new();
    let mut lines = s.split("\r\n");
    while let Some(l) = lines.next() {
        if l.starts_with('$') {
            if let Some(v) = lines.next() {
                items.push(v.to_string());
            }
        }
    }
    items
}

#[test]
fn command_info_docs_count_match_redis() {
    let s = start();
    let mut c = Conn::open(&s);
    assert_eq!(c.call(&["COMMAND", "INFO", "get"]), INFO_GET_RESP2);
    // COMMAND COUNT: the top-level commands; COMMAND LIST adds the subcommands.
    let list = bulk_items(&c.call(&["COMMAND", "LIST"]));
    let top = list.iter().filter(|n| !n.contains('|')).count();
    assert_eq!(c.call_str(&["COMMAND", "COUNT"]), format!(":{top}\r\n"));
    assert!(list.iter().any(|n| n == "client|list"));
    assert!(list.iter().any(|n| n == "command|docs"));
    // COMMAND and COMMAND INFO without names: one entry per top-level command.
    let all = c.call(&["COMMAND"]);
    assert!(all.starts_with(format!("*{top}\r\n*10\r\n").as_bytes()));
    assert_eq!(c.call(&["COMMAND", "INFO"]), all);
    let docs = c.call(&["COMMAND", "DOCS"]);
    assert!(docs.starts_with(format!("*{}\r\n", 2 * top).as_bytes()));

    c.call(&["HELLO", "3"]);
    assert_eq!(
        c.call(&["COMMAND", "INFO", "get", "nosuch"]),
        INFO_GET_NOSUCH_RESP3
    );
    assert_eq!(
        c.call(&["COMMAND", "DOCS", "get", "nosuch"]),
        DOCS_GET_RESP3
    );
    assert_eq!(
        c.call(&["COMMAND", "INFO", "CLIENT|ID"]),
        INFO_CLIENT_ID_RESP3
    );
    // A container lists its implemented subcommands as an array of full entries.
    let client = c.call_str(&["COMMAND", "INFO", "client"]);
    let subs = list.iter().filter(|n| n.starts_with("client|")).count();
    assert!(
        client.starts_with("*1\r\n*10\r\n$6\r\nclient\r\n:-2\r\n~0\r\n"),
        "{client}"
    );
    assert!(
        client.contains(&format!("~0\r\n~0\r\n*{subs}\r\n*10\r\n")),
        "{client}"
    );
    let cdocs = c.call_str(&["COMMAND", "DOCS", "client"]);
    assert!(
        cdocs.contains(&format!("$11\r\nsubcommands\r\n%{subs}\r\n")),
        "{cdocs}"
    );
    let docs3 = c.call(&["COMMAND", "DOCS"]);
    assert!(docs3.starts_with(format!("%{top}\r\n").as_bytes()));
}

#[test]
fn command_list_getkeys_help() {
    let s = start();
    let mut c = Conn::open(&s);
    let mut clients = bulk_items(&c.call(&["COMMAND", "LIST", "FILTERBY", "PATTERN", "CL*"]));
    clients.sort();
    assert!(clients.iter().all(|n| n.starts_with("client")));
    assert!(
        clients.contains(&"client".to_string()) && clients.contains(&"client|kill".to_string())
    );
    assert_eq!(
        c.call_str(&["COMMAND", "LIST", "FILTERBY", "MODULE", "x"]),
        "*0\r\n"
    );
    assert_eq!(
        c.call_str(&["COMMAND", "LIST", "FILTERBY", "ACLCAT", "nosuch"]),
        "*0\r\n"
    );
    let conn = bulk_items(&c.call(&["COMMAND", "LIST", "FILTERBY", "ACLCAT", "connection"]));
    assert!(conn.contains(&"ping".to_string()) && !conn.contains(&"get".to_string()));
    assert_eq!(
        c.call_str(&["COMMAND", "LIST", "FILTERBY", "pattern"]),
        "-ERR syntax error\r\n"
    );
    assert_eq!(
        c.call_str(&["COMMAND", "LIST", "x"]),
        "-ERR syntax error\r\n"
    );

    assert_eq!(
        c.call_str(&["COMMAND", "GETKEYS", "mset", "a", "1", "b", "2"]),
        "*2\r\n$1\r\na\r\n$1\r\nb\r\n"
    );
    assert_eq!(
        c.call_str(&["COMMAND", "GETKEYS", "nosuch", "a"]),
        "-ERR Invalid command specified\r\n"
    );
    assert_eq!(
        c.call_str(&["COMMAND", "GETKEYS", "client", "list"]),
        "-ERR The command has no key arguments\r\n"
    );
    assert_eq!(
        c.call_str(&["COMMAND", "GETKEYS", "client", "nosuch"]),
        "-ERR Invalid command specified\r\n"
    );
    assert_eq!(
        c.call_str(&["COMMAND", "GETKEYS", "get", "a", "b"]),
        "-ERR Invalid number of arguments specified for command\r\n"
    );
    assert_eq!(
        c.call_str(&["COMMAND", "GETKEYSANDFLAGS", "set", "a", "b", "get"]),
        "*1\r\n*2\r\n$1\r\na\r\n*3\r\n+RW\r\n+access\r\n+update\r\n"
    );
    c.call(&["HELLO", "3"]);
    assert_eq!(
        c.call_str(&["COMMAND", "GETKEYSANDFLAGS", "del", "a", "b"]),
        "*2\r\n*2\r\n$1\r\na\r\n~2\r\n+RM\r\n+delete\r\n*2\r\n$1\r\nb\r\n~2\r\n+RM\r\n+delete\r\n"
    );
    let help = c.call_str(&["COMMAND", "HELP"]);
    assert!(help.starts_with(
        "*21\r\n+COMMAND <subcommand> [<arg> [value] [opt] ...]. Subcommands are:\r\n"
    ));
    assert!(help.ends_with("+HELP\r\n+    Prints this help.\r\n"));
    assert_eq!(
        c.call_str(&["COMMAND", "NOSUCH"]),
        "-ERR unknown subcommand 'NOSUCH'. Try COMMAND HELP.\r\n"
    );
}

/// The `key=value` fields of a CLIENT LIST line.
fn fields(line: &str) -> Vec<(String, String)> {
    line.split(' ')
        .map(|f| {
            let (k, v) = f.split_once('=').unwrap_or((f, ""));
            (k.to_string(), v.to_string())
        })
        .collect()
}

fn field(line: &str, key: &str) -> String {
    fields(line)
        .into_iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v)
        .unwrap_or_default()
}

/// The text of a bulk or verbatim reply.
fn text(reply: &str) -> String {
    let body = reply.split_once("\r\n").map(|(_, b)| b).unwrap_or_default();
    let body = body.strip_suffix("\r\n").unwrap_or(body);
    body.strip_prefix("txt:").unwrap_or(body).to_string()
}

#[test]
fn client_setname_getname_list_kill() {
    let s = start();
    let mut a = Conn::open(&s);
    let mut b = Conn::open(&s);
    let a_id: u64 = a
        .call_str(&["CLIENT", "ID"])
        .trim_start_matches(':')
        .trim()
        .parse()
        .expect("id");
    let b_id: u64 = b
        .call_str(&["CLIENT", "ID"])
        .trim_start_matches(':')
        .trim()
        .parse()
        .expect("id");
    assert_ne!(a_id, b_id);

    assert_eq!(a.call_str(&["CLIENT", "GETNAME"]), "$-1\r\n");
    assert_eq!(a.call_str(&["CLIENT", "SETNAME", "alpha"]), "+OK\r\n");
    assert_eq!(a.call_str(&["CLIENT", "GETNAME"]), "$5\r\nalpha\r\n");
    assert_eq!(
        a.call_str(&["CLIENT", "SETNAME", "a b"]),
        "-ERR Client names cannot contain spaces, newlines or special characters.\r\n"
    );
    assert_eq!(b.call_str(&["CLIENT", "SETNAME", "beta"]), "+OK\r\n");

    // CLIENT LIST from a: both lines, in id order, exact field layout.
    let listing = text(&a.call_str(&["CLIENT", "LIST"]));
    let lines: Vec<&str> = listing.lines().collect();
    assert_eq!(lines.len(), 2, "{listing}");
    assert!(listing.ends_with('\n'));
    let keys: Vec<String> = fields(lines[0]).into_iter().map(|(k, _)| k).collect();
    assert_eq!(
        keys.join(" "),
        "id addr laddr fd name age idle flags db sub psub ssub multi qbuf qbuf-free argv-mem multi-mem rbs rbp \
         obl oll omem tot-mem events cmd user redir resp"
    );
    assert_eq!(field(lines[0], "id"), a_id.to_string());
    assert_eq!(field(lines[0], "name"), "alpha");
    assert_eq!(field(lines[0], "cmd"), "client|list");
    assert_eq!(field(lines[0], "flags"), "N");
    assert_eq!(field(lines[1], "name"), "beta");
    assert_eq!(field(lines[1], "cmd"), "client|setname");
    for l in &lines {
        for k in ["age", "idle", "qbuf", "argv-mem", "rbs", "tot-mem"] {
            assert!(field(l, k).parse::<u64>().is_ok(), "{k} in {l}");
        }
        assert_eq!(field(l, "user"), "default");
    }
    let b_addr = field(lines[1], "addr");

    // Filters.
    let only_b = text(&a.call_str(&["CLIENT", "LIST", "ID", &b_id.to_string(), "999999"]));
    assert_eq!(only_b.lines().count(), 1);
    assert_eq!(field(only_b.trim_end(), "name"), "beta");
    assert_eq!(
        text(&a.call_str(&["CLIENT", "LIST", "TYPE", "normal"]))
            .lines()
            .count(),
        2
    );
    assert_eq!(
        a.call_str(&["CLIENT", "LIST", "TYPE", "replica"]),
        "$0\r\n\r\n"
    );
    assert_eq!(
        a.call_str(&["CLIENT", "LIST", "TYPE", "foo"]),
        "-ERR Unknown client type 'foo'\r\n"
    );
    assert_eq!(
        a.call_str(&["CLIENT", "LIST", "ID", "x"]),
        "-ERR Invalid client ID\r\n"
    );
    assert_eq!(
        a.call_str(&["CLIENT", "LIST", "foo"]),
        "-ERR syntax error\r\n"
    );

    // CLIENT INFO: the caller's own line, RESP3 as a verbatim string.
    a.call(&["HELLO", "3"]);
    let info = a.call_str(&["CLIENT", "INFO"]);
    assert!(info.starts_with('='), "{info}");
    let info = text(&info);
    assert_eq!(field(info.trim_end(), "id"), a_id.to_string());
    assert_eq!(field(info.trim_end(), "resp"), "3");
    assert_eq!(field(info.trim_end(), "cmd"), "client|info");

    // KILL errors.
    assert_eq!(
        a.call_str(&["CLIENT", "KILL", "1.2.3.4:5"]),
        "-ERR No such client\r\n"
    );
    assert_eq!(
        a.call_str(&["CLIENT", "KILL", "ID", "0"]),
        "-ERR client-id should be greater than 0\r\n"
    );
    assert_eq!(
        a.call_str(&["CLIENT", "KILL", "USER", "bob"]),
        "-ERR No such user 'bob'\r\n"
    );
    assert_eq!(
        a.call_str(&["CLIENT", "KILL", "ID", "5", "SKIPME"]),
        "-ERR syntax error\r\n"
    );
    assert_eq!(
        a.call_str(&["CLIENT", "KILL", "ADDR", "1.2.3.4:5"]),
        ":0\r\n"
    );
    // SKIPME yes (the default) spares the caller.
    assert_eq!(
        a.call_str(&["CLIENT", "KILL", "ID", &a_id.to_string()]),
        ":0\r\n"
    );

    // Old form kills b by address.
    assert_eq!(a.call_str(&["CLIENT", "KILL", &b_addr]), "+OK\r\n");
    assert!(b.closed());
    let after = text(&a.call_str(&["CLIENT", "LIST"]));
    assert_eq!(after.lines().count(), 1, "{after}");

    // New form, a third client, then the caller itself with SKIPME no.
    let mut c = Conn::open(&s);
    let c_id = c
        .call_str(&["CLIENT", "ID"])
        .trim_start_matches(':')
        .trim()
        .to_string();
    assert_eq!(
        a.call_str(&["CLIENT", "KILL", "ID", &c_id, "TYPE", "normal"]),
        ":1\r\n"
    );
    assert!(c.closed());
    assert_eq!(
        a.call_str(&["CLIENT", "KILL", "ID", &a_id.to_string(), "SKIPME", "no"]),
        ":1\r\n"
    );
    assert!(a.closed());
}

#[test]
fn client_help_and_unknown() {
    let s = start();
    let mut c = Conn::open(&s);
    let help = c.call_str(&["CLIENT", "HELP"]);
    assert!(help.starts_with(
        "*48\r\n+CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:\r\n"
    ));
    assert!(help.contains(
        "+    * SKIPME (YES|NO)\r\n+      Skip killing current connection (default: yes).\r\n"
    ));
    assert_eq!(
        c.call_str(&["CLIENT", "NOSUCH"]),
        "-ERR unknown subcommand 'NOSUCH'. Try CLIENT HELP.\r\n"
    );
    assert_eq!(
        c.call_str(&["CLIENT", "ID", "x"]),
        "-ERR wrong number of arguments for 'client|id' command\r\n"
    );
}
