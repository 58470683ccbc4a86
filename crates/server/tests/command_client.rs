//! Integration tests of COMMAND (cmd/command.rs) and CLIENT (cmd/client.rs) against the real
//! binary. Expected bytes were captured from redis-server 7.0.15.
//!
//! The raw RESP client of `common` shows reply bytes and RESP3 types exactly.

mod common;

use common::{READ_TIMEOUT, Raw, Server};

/// Whether the server closed the connection without sending anything first.
fn closed(c: &mut Raw) -> bool {
    c.is_closed(READ_TIMEOUT) && c.pending().is_empty()
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
    let s = Server::start();
    let mut c = s.connect();
    assert_eq!(c.call_strs(&["COMMAND", "INFO", "get"]), INFO_GET_RESP2);
    // COMMAND COUNT: the top-level commands; COMMAND LIST adds the subcommands.
    let list = bulk_items(&c.call_strs(&["COMMAND", "LIST"]));
    let top = list.iter().filter(|n| !n.contains('|')).count();
    assert_eq!(c.call_text(&["COMMAND", "COUNT"]), format!(":{top}\r\n"));
    assert!(list.iter().any(|n| n == "client|list"));
    assert!(list.iter().any(|n| n == "command|docs"));
    // COMMAND and COMMAND INFO without names: one entry per top-level command.
    let all = c.call_strs(&["COMMAND"]);
    assert!(all.starts_with(format!("*{top}\r\n*10\r\n").as_bytes()));
    assert_eq!(c.call_strs(&["COMMAND", "INFO"]), all);
    let docs = c.call_strs(&["COMMAND", "DOCS"]);
    assert!(docs.starts_with(format!("*{}\r\n", 2 * top).as_bytes()));

    c.call_strs(&["HELLO", "3"]);
    assert_eq!(
        c.call_strs(&["COMMAND", "INFO", "get", "nosuch"]),
        INFO_GET_NOSUCH_RESP3
    );
    assert_eq!(
        c.call_strs(&["COMMAND", "DOCS", "get", "nosuch"]),
        DOCS_GET_RESP3
    );
    assert_eq!(
        c.call_strs(&["COMMAND", "INFO", "CLIENT|ID"]),
        INFO_CLIENT_ID_RESP3
    );
    // A container lists its implemented subcommands as an array of full entries.
    let client = c.call_text(&["COMMAND", "INFO", "client"]);
    let subs = list.iter().filter(|n| n.starts_with("client|")).count();
    assert!(
        client.starts_with("*1\r\n*10\r\n$6\r\nclient\r\n:-2\r\n~0\r\n"),
        "{client}"
    );
    assert!(
        client.contains(&format!("~0\r\n~0\r\n*{subs}\r\n*10\r\n")),
        "{client}"
    );
    let cdocs = c.call_text(&["COMMAND", "DOCS", "client"]);
    assert!(
        cdocs.contains(&format!("$11\r\nsubcommands\r\n%{subs}\r\n")),
        "{cdocs}"
    );
    let docs3 = c.call_strs(&["COMMAND", "DOCS"]);
    assert!(docs3.starts_with(format!("%{top}\r\n").as_bytes()));
}

#[test]
fn command_list_getkeys_help() {
    let s = Server::start();
    let mut c = s.connect();
    let mut clients = bulk_items(&c.call_strs(&["COMMAND", "LIST", "FILTERBY", "PATTERN", "CL*"]));
    clients.sort();
    assert!(
        clients
            .iter()
            .all(|n| n.starts_with("client") || n.starts_with("cluster"))
    );
    assert!(
        clients.contains(&"client".to_string()) && clients.contains(&"client|kill".to_string())
    );
    assert_eq!(
        c.call_text(&["COMMAND", "LIST", "FILTERBY", "MODULE", "x"]),
        "*0\r\n"
    );
    assert_eq!(
        c.call_text(&["COMMAND", "LIST", "FILTERBY", "ACLCAT", "nosuch"]),
        "*0\r\n"
    );
    let conn = bulk_items(&c.call_strs(&["COMMAND", "LIST", "FILTERBY", "ACLCAT", "connection"]));
    assert!(conn.contains(&"ping".to_string()) && !conn.contains(&"get".to_string()));
    assert_eq!(
        c.call_text(&["COMMAND", "LIST", "FILTERBY", "pattern"]),
        "-ERR syntax error\r\n"
    );
    assert_eq!(
        c.call_text(&["COMMAND", "LIST", "x"]),
        "-ERR syntax error\r\n"
    );

    assert_eq!(
        c.call_text(&["COMMAND", "GETKEYS", "mset", "a", "1", "b", "2"]),
        "*2\r\n$1\r\na\r\n$1\r\nb\r\n"
    );
    assert_eq!(
        c.call_text(&["COMMAND", "GETKEYS", "nosuch", "a"]),
        "-ERR Invalid command specified\r\n"
    );
    assert_eq!(
        c.call_text(&["COMMAND", "GETKEYS", "client", "list"]),
        "-ERR The command has no key arguments\r\n"
    );
    assert_eq!(
        c.call_text(&["COMMAND", "GETKEYS", "client", "nosuch"]),
        "-ERR Invalid command specified\r\n"
    );
    assert_eq!(
        c.call_text(&["COMMAND", "GETKEYS", "get", "a", "b"]),
        "-ERR Invalid number of arguments specified for command\r\n"
    );
    assert_eq!(
        c.call_text(&["COMMAND", "GETKEYSANDFLAGS", "set", "a", "b", "get"]),
        "*1\r\n*2\r\n$1\r\na\r\n*3\r\n+RW\r\n+access\r\n+update\r\n"
    );
    c.call_strs(&["HELLO", "3"]);
    assert_eq!(
        c.call_text(&["COMMAND", "GETKEYSANDFLAGS", "del", "a", "b"]),
        "*2\r\n*2\r\n$1\r\na\r\n~2\r\n+RM\r\n+delete\r\n*2\r\n$1\r\nb\r\n~2\r\n+RM\r\n+delete\r\n"
    );
    let help = c.call_text(&["COMMAND", "HELP"]);
    assert!(help.starts_with(
        "*21\r\n+COMMAND <subcommand> [<arg> [value] [opt] ...]. Subcommands are:\r\n"
    ));
    assert!(help.ends_with("+HELP\r\n+    Prints this help.\r\n"));
    assert_eq!(
        c.call_text(&["COMMAND", "NOSUCH"]),
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
    let s = Server::start();
    let mut a = s.connect();
    let mut b = s.connect();
    let a_id: u64 = a
        .call_text(&["CLIENT", "ID"])
        .trim_start_matches(':')
        .trim()
        .parse()
        .expect("id");
    let b_id: u64 = b
        .call_text(&["CLIENT", "ID"])
        .trim_start_matches(':')
        .trim()
        .parse()
        .expect("id");
    assert_ne!(a_id, b_id);

    assert_eq!(a.call_text(&["CLIENT", "GETNAME"]), "$-1\r\n");
    assert_eq!(a.call_text(&["CLIENT", "SETNAME", "alpha"]), "+OK\r\n");
    assert_eq!(a.call_text(&["CLIENT", "GETNAME"]), "$5\r\nalpha\r\n");
    assert_eq!(
        a.call_text(&["CLIENT", "SETNAME", "a b"]),
        "-ERR Client names cannot contain spaces, newlines or special characters.\r\n"
    );
    assert_eq!(b.call_text(&["CLIENT", "SETNAME", "beta"]), "+OK\r\n");

    // CLIENT LIST from a: both lines, in id order, exact field layout.
    let listing = text(&a.call_text(&["CLIENT", "LIST"]));
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
        // The socket's descriptor, as Redis gives it (-1 is its mark of a client without one).
        let fd: i64 = field(l, "fd").parse().unwrap_or(-1);
        assert!(fd > 2, "fd in {l}");
    }
    assert_ne!(field(lines[0], "fd"), field(lines[1], "fd"));
    let b_addr = field(lines[1], "addr");

    // Filters.
    let only_b = text(&a.call_text(&["CLIENT", "LIST", "ID", &b_id.to_string(), "999999"]));
    assert_eq!(only_b.lines().count(), 1);
    assert_eq!(field(only_b.trim_end(), "name"), "beta");
    assert_eq!(
        text(&a.call_text(&["CLIENT", "LIST", "TYPE", "normal"]))
            .lines()
            .count(),
        2
    );
    assert_eq!(
        a.call_text(&["CLIENT", "LIST", "TYPE", "replica"]),
        "$0\r\n\r\n"
    );
    assert_eq!(
        a.call_text(&["CLIENT", "LIST", "TYPE", "foo"]),
        "-ERR Unknown client type 'foo'\r\n"
    );
    assert_eq!(
        a.call_text(&["CLIENT", "LIST", "ID", "x"]),
        "-ERR Invalid client ID\r\n"
    );
    assert_eq!(
        a.call_text(&["CLIENT", "LIST", "foo"]),
        "-ERR syntax error\r\n"
    );

    // CLIENT INFO: the caller's own line, RESP3 as a verbatim string.
    a.call_strs(&["HELLO", "3"]);
    let info = a.call_text(&["CLIENT", "INFO"]);
    assert!(info.starts_with('='), "{info}");
    let info = text(&info);
    assert_eq!(field(info.trim_end(), "id"), a_id.to_string());
    assert_eq!(field(info.trim_end(), "resp"), "3");
    assert_eq!(field(info.trim_end(), "cmd"), "client|info");
    assert_eq!(field(info.trim_end(), "multi"), "-1");
    // Inside EXEC, as Redis 7.0 shows it: the transaction (flag x, its count and bytes) and
    // EXEC's own request; then back to the plain view.
    a.call_strs(&["HELLO", "2"]);
    a.ok(&["MULTI"]);
    assert_eq!(a.call_text(&["CLIENT", "INFO"]), "+QUEUED\r\n");
    let exec = a.call_text(&["EXEC"]);
    let line = exec.lines().nth(2).unwrap_or_default().to_string();
    for (name, want) in [
        ("flags", "x"),
        ("multi", "1"),
        ("multi-mem", "26"),
        ("cmd", "exec"),
        ("qbuf", "14"),
        ("argv-mem", "4"),
    ] {
        assert_eq!(field(&line, name), want, "{name} in {line}");
    }
    let after = a.call_text(&["CLIENT", "INFO"]);
    let after = text(&after);
    assert_eq!(field(after.trim_end(), "flags"), "N");
    assert_eq!(field(after.trim_end(), "multi"), "-1");

    // KILL errors.
    assert_eq!(
        a.call_text(&["CLIENT", "KILL", "1.2.3.4:5"]),
        "-ERR No such client\r\n"
    );
    assert_eq!(
        a.call_text(&["CLIENT", "KILL", "ID", "0"]),
        "-ERR client-id should be greater than 0\r\n"
    );
    assert_eq!(
        a.call_text(&["CLIENT", "KILL", "USER", "bob"]),
        "-ERR No such user 'bob'\r\n"
    );
    assert_eq!(
        a.call_text(&["CLIENT", "KILL", "ID", "5", "SKIPME"]),
        "-ERR syntax error\r\n"
    );
    assert_eq!(
        a.call_text(&["CLIENT", "KILL", "ADDR", "1.2.3.4:5"]),
        ":0\r\n"
    );
    // SKIPME yes (the default) spares the caller.
    assert_eq!(
        a.call_text(&["CLIENT", "KILL", "ID", &a_id.to_string()]),
        ":0\r\n"
    );

    // Old form kills b by address.
    assert_eq!(a.call_text(&["CLIENT", "KILL", &b_addr]), "+OK\r\n");
    assert!(closed(&mut b));
    let after = text(&a.call_text(&["CLIENT", "LIST"]));
    assert_eq!(after.lines().count(), 1, "{after}");

    // New form, a third client, then the caller itself with SKIPME no.
    let mut c = s.connect();
    let c_id = c
        .call_text(&["CLIENT", "ID"])
        .trim_start_matches(':')
        .trim()
        .to_string();
    assert_eq!(
        a.call_text(&["CLIENT", "KILL", "ID", &c_id, "TYPE", "normal"]),
        ":1\r\n"
    );
    assert!(closed(&mut c));
    assert_eq!(
        a.call_text(&["CLIENT", "KILL", "ID", &a_id.to_string(), "SKIPME", "no"]),
        ":1\r\n"
    );
    assert!(closed(&mut a));
}

#[test]
fn client_help_and_unknown() {
    let s = Server::start();
    let mut c = s.connect();
    let help = c.call_text(&["CLIENT", "HELP"]);
    assert!(help.starts_with(
        "*48\r\n+CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:\r\n"
    ));
    assert!(help.contains(
        "+    * SKIPME (YES|NO)\r\n+      Skip killing current connection (default: yes).\r\n"
    ));
    assert_eq!(
        c.call_text(&["CLIENT", "NOSUCH"]),
        "-ERR unknown subcommand 'NOSUCH'. Try CLIENT HELP.\r\n"
    );
    assert_eq!(
        c.call_text(&["CLIENT", "ID", "x"]),
        "-ERR wrong number of arguments for 'client|id' command\r\n"
    );
}
