//! Server commands (INFO CONFIG SLOWLOG MONITOR FLUSHALL DBSIZE TIME DEBUG SHUTDOWN) against
//! the real `meridian` binary, over raw RESP.

mod common;

use std::time::Duration;

use common::{Raw, Server};

fn call(c: &mut Raw, args: &[&str]) -> Vec<u8> {
    let argv: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
    c.call(&argv)
}

fn text(c: &mut Raw, args: &[&str]) -> String {
    String::from_utf8_lossy(&call(c, args)).into_owned()
}

/// The body of a bulk reply.
fn bulk_body(reply: &[u8]) -> String {
    let s = String::from_utf8_lossy(reply).into_owned();
    let start = s.find("\r\n").map_or(0, |i| i + 2);
    s.get(start..s.len().saturating_sub(2))
        .unwrap_or_default()
        .to_string()
}

/// INFO fields as (section, key, value).
fn parse_info(body: &str) -> Vec<(String, String, String)> {
    let mut section = String::new();
    let mut v = Vec::new();
    for line in body.split("\r\n") {
        if let Some(t) = line.strip_prefix("# ") {
            section = t.to_string();
        } else if let Some((k, val)) = line.split_once(':') {
            v.push((section.clone(), k.to_string(), val.to_string()));
        } else {
            assert!(line.is_empty(), "unparseable INFO line {line:?}");
        }
    }
    v
}

fn info_field(fields: &[(String, String, String)], key: &str) -> Option<String> {
    fields
        .iter()
        .find(|(_, k, _)| k == key)
        .map(|(_, _, v)| v.clone())
}

#[test]
fn info_sections_are_present_and_parseable() {
    let s = Server::start();
    let mut c = s.connect();
    assert_eq!(call(&mut c, &["SET", "k", "v"]), b"+OK\r\n");
    let body = bulk_body(&call(&mut c, &["INFO"]));
    assert!(
        body.starts_with("# Server\r\nredis_version:7.0.15\r\n"),
        "{body}"
    );
    let fields = parse_info(&body);
    let sections: Vec<&str> = {
        let mut v: Vec<&str> = fields.iter().map(|(s, _, _)| s.as_str()).collect();
        v.dedup();
        v
    };
    for want in [
        "Server",
        "Clients",
        "Memory",
        "Persistence",
        "Stats",
        "Replication",
        "CPU",
        "Keyspace",
        "CRDT",
    ] {
        assert!(
            sections.contains(&want),
            "section {want} missing: {sections:?}"
        );
    }
    // What redis-cli --stat and redis-benchmark read.
    for key in [
        "used_memory",
        "used_memory_human",
        "used_memory_rss",
        "connected_clients",
        "blocked_clients",
        "total_commands_processed",
        "total_connections_received",
        "instantaneous_ops_per_sec",
        "role",
        "loading",
        "rdb_changes_since_last_save",
        "aof_enabled",
        "used_cpu_sys",
        "crdt_seq",
        "crdt_oplog_ops",
    ] {
        assert!(info_field(&fields, key).is_some(), "{key} missing");
    }
    assert_eq!(
        info_field(&fields, "db0").as_deref(),
        Some("keys=1,expires=0,avg_ttl=0")
    );
    assert_eq!(info_field(&fields, "role").as_deref(), Some("master"));
    assert_eq!(info_field(&fields, "tcp_port"), Some(s.port.to_string()));
    let used: u64 = info_field(&fields, "used_memory").unwrap().parse().unwrap();
    assert!(used > 0);
    assert!(
        info_field(&fields, "mem_allocator")
            .unwrap()
            .starts_with("jemalloc")
    );

    // Multi-section form, commandstats, errorstats.
    let _ = call(&mut c, &["NOSUCHCMD"]);
    let body = bulk_body(&call(&mut c, &["INFO", "commandstats", "ERRORSTATS"]));
    assert!(body.starts_with("# Commandstats\r\n"), "{body}");
    assert!(body.contains("cmdstat_set:calls=1,usec="), "{body}");
    assert!(
        body.contains("\r\n\r\n# Errorstats\r\nerrorstat_ERR:count=1\r\n"),
        "{body}"
    );
    assert_eq!(call(&mut c, &["INFO", "nosuchsection"]), b"$0\r\n\r\n");

    // RESP3: a verbatim string.
    let _ = call(&mut c, &["HELLO", "3"]);
    let r = text(&mut c, &["INFO", "server"]);
    assert!(
        r.starts_with('=') && r.contains("\r\ntxt:# Server\r\n"),
        "{r}"
    );
}

#[test]
fn config_get_set_round_trips_and_errors() {
    let s = Server::start();
    let mut c = s.connect();
    // Redis's defaults, with the log on.
    assert_eq!(
        text(&mut c, &["CONFIG", "GET", "save"]),
        "*2\r\n$4\r\nsave\r\n$23\r\n3600 1 300 100 60 10000\r\n"
    );
    assert_eq!(
        text(&mut c, &["CONFIG", "GET", "appendonly"]),
        "*2\r\n$10\r\nappendonly\r\n$3\r\nyes\r\n"
    );
    assert_eq!(
        text(&mut c, &["CONFIG", "GET", "appendfsync"]),
        "*2\r\n$11\r\nappendfsync\r\n$8\r\neverysec\r\n"
    );
    assert_eq!(
        text(
            &mut c,
            &["CONFIG", "SET", "timeout", "30", "slowlog-max-len", "64"]
        ),
        "+OK\r\n"
    );
    assert_eq!(
        text(&mut c, &["CONFIG", "GET", "timeout", "slowlog-max*"]),
        "*4\r\n$7\r\ntimeout\r\n$2\r\n30\r\n$15\r\nslowlog-max-len\r\n$2\r\n64\r\n"
    );
    assert_eq!(
        text(
            &mut c,
            &["CONFIG", "SET", "client-query-buffer-limit", "2mb"]
        ),
        "+OK\r\n"
    );
    assert_eq!(
        text(&mut c, &["CONFIG", "GET", "client-query-buffer-limit"]),
        "*2\r\n$25\r\nclient-query-buffer-limit\r\n$7\r\n2097152\r\n"
    );
    assert_eq!(
        text(&mut c, &["CONFIG", "SET", "foo", "bar"]),
        "-ERR Unknown option or number of arguments for CONFIG SET - 'foo'\r\n"
    );
    assert_eq!(
        text(&mut c, &["CONFIG", "SET", "databases", "2"]),
        "-ERR CONFIG SET failed (possibly related to argument 'databases') - can't set immutable config\r\n"
    );
    assert_eq!(
        text(
            &mut c,
            &["CONFIG", "SET", "timeout", "1", "maxclients", "x"]
        ),
        "-ERR CONFIG SET failed (possibly related to argument 'maxclients') - argument couldn't be parsed into an integer\r\n"
    );
    assert_eq!(
        text(&mut c, &["CONFIG", "GET", "timeout"]),
        "*2\r\n$7\r\ntimeout\r\n$2\r\n30\r\n"
    );
    assert_eq!(text(&mut c, &["CONFIG", "GET", "nosuch*"]), "*0\r\n");
    assert_eq!(
        text(&mut c, &["CONFIG", "REWRITE"]),
        "-ERR The server is running without a config file\r\n"
    );
    assert_eq!(
        text(&mut c, &["CONFIG", "NOPE"]),
        "-ERR unknown subcommand 'NOPE'. Try CONFIG HELP.\r\n"
    );
    let _ = call(&mut c, &["HELLO", "3"]);
    assert_eq!(
        text(&mut c, &["CONFIG", "GET", "maxmemory"]),
        "%1\r\n$9\r\nmaxmemory\r\n$1\r\n0\r\n"
    );
}

#[test]
fn slowlog_records_with_threshold_zero() {
    let s = Server::start();
    let mut c = s.connect();
    assert_eq!(
        text(&mut c, &["CONFIG", "SET", "slowlog-log-slower-than", "0"]),
        "+OK\r\n"
    );
    assert_eq!(text(&mut c, &["SLOWLOG", "RESET"]), "+OK\r\n");
    assert_eq!(text(&mut c, &["CLIENT", "SETNAME", "me"]), "+OK\r\n");
    assert_eq!(text(&mut c, &["SET", "a", "b"]), "+OK\r\n");
    let r = text(&mut c, &["SLOWLOG", "GET", "1"]);
    assert!(r.starts_with("*1\r\n*6\r\n:"), "{r}");
    assert!(
        r.contains("*3\r\n$3\r\nSET\r\n$1\r\na\r\n$1\r\nb\r\n"),
        "{r}"
    );
    assert!(r.ends_with("$2\r\nme\r\n"), "{r}");
    let len = text(&mut c, &["SLOWLOG", "LEN"]);
    assert!(len.starts_with(':') && len != ":0\r\n", "{len}");
    assert!(text(&mut c, &["SLOWLOG", "HELP"]).starts_with("*12\r\n+SLOWLOG <subcommand>"));
}

#[test]
fn monitor_sees_other_clients() {
    let s = Server::start();
    let mut m = s.connect();
    assert_eq!(text(&mut m, &["MONITOR"]), "+OK\r\n");
    let mut c = s.connect();
    assert_eq!(text(&mut c, &["SET", "mk", "v 1"]), "+OK\r\n");
    let line = m.read_reply();
    let line = String::from_utf8_lossy(&line).into_owned();
    assert!(
        line.starts_with('+') && line.ends_with(" \"SET\" \"mk\" \"v 1\"\r\n"),
        "{line}"
    );
    assert!(line.contains(" [0 127.0.0.1:"), "{line}");
}

/// A script with no declared keys runs again on the shard of the first key it touches
/// (docs/scripting.md); MONITOR still shows each call once, then what it ran, as Redis
/// does (its suite: "MONITOR can log commands issued by functions").
#[test]
fn monitor_shows_a_relocated_script_once() {
    let s = Server::start();
    let mut c = s.connect();
    assert!(
        text(
            &mut c,
            &[
                "FUNCTION",
                "LOAD",
                "#!lua name=mon\nredis.register_function('setit', function(keys, args) return redis.call('set', args[1], 'bar') end)"
            ]
        )
        .starts_with("$3\r\nmon")
    );
    let mut m = s.connect();
    assert_eq!(text(&mut m, &["MONITOR"]), "+OK\r\n");
    // Enough keys that, with several shards, some live on another shard than the caller's.
    let keys: Vec<String> = (0..12).map(|i| format!("mon:{i}")).collect();
    for k in &keys {
        assert_eq!(text(&mut c, &["FCALL", "setit", "0", k]), "+OK\r\n");
    }
    for k in &keys {
        let call = String::from_utf8_lossy(&m.read_reply()).into_owned();
        assert!(
            call.ends_with(&format!(" \"FCALL\" \"setit\" \"0\" \"{k}\"\r\n")),
            "{call}"
        );
        let inner = String::from_utf8_lossy(&m.read_reply()).into_owned();
        assert!(
            inner.contains(" lua] ") && inner.ends_with(&format!(" \"set\" \"{k}\" \"bar\"\r\n")),
            "{inner}"
        );
    }
    let (rest, _) = m.read_until_quiet(Duration::from_millis(200));
    assert!(rest.is_empty(), "{}", String::from_utf8_lossy(&rest));
}

#[test]
fn flushall_dbsize_time_debug() {
    let s = Server::start();
    let mut c = s.connect();
    for k in ["a", "b", "c"] {
        assert_eq!(text(&mut c, &["SET", k, "1"]), "+OK\r\n");
    }
    assert_eq!(text(&mut c, &["DBSIZE"]), ":3\r\n");
    assert_eq!(text(&mut c, &["SELECT", "1"]), "+OK\r\n");
    assert_eq!(text(&mut c, &["SET", "x", "1"]), "+OK\r\n");
    assert_eq!(text(&mut c, &["FLUSHDB"]), "+OK\r\n");
    assert_eq!(text(&mut c, &["DBSIZE"]), ":0\r\n");
    assert_eq!(text(&mut c, &["SELECT", "0"]), "+OK\r\n");
    assert_eq!(text(&mut c, &["DBSIZE"]), ":3\r\n");
    assert_eq!(text(&mut c, &["FLUSHALL", "SYNC"]), "+OK\r\n");
    assert_eq!(text(&mut c, &["DBSIZE"]), ":0\r\n");
    assert_eq!(
        text(&mut c, &["FLUSHALL", "LATER"]),
        "-ERR syntax error\r\n"
    );

    let r = text(&mut c, &["TIME"]);
    let parts: Vec<&str> = r.split("\r\n").collect();
    assert_eq!(parts.first(), Some(&"*2"), "{r}");
    let secs: u64 = parts.get(2).unwrap().parse().unwrap();
    let micros: u64 = parts.get(4).unwrap().parse().unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert!(secs.abs_diff(now) <= 2 && micros < 1_000_000, "{r}");

    assert_eq!(text(&mut c, &["DEBUG", "SLEEP", "0"]), "+OK\r\n");
    let started = std::time::Instant::now();
    assert_eq!(text(&mut c, &["DEBUG", "SLEEP", "0.2"]), "+OK\r\n");
    assert!(started.elapsed() >= Duration::from_millis(190));
    assert_eq!(
        text(&mut c, &["DEBUG", "NOPE"]),
        "-ERR unknown subcommand or wrong number of arguments for 'NOPE'. Try DEBUG HELP.\r\n"
    );
}

#[test]
fn shutdown_exits() {
    let mut s = Server::start();
    let mut c = s.connect();
    assert_eq!(
        text(&mut c, &["SHUTDOWN", "ABORT"]),
        "-ERR No shutdown in progress.\r\n"
    );
    c.send_cmd(&[b"SHUTDOWN", b"NOSAVE"]);
    assert!(c.is_closed(Duration::from_secs(5)));
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while s.is_running() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!s.is_running(), "server still running after SHUTDOWN");
}

#[test]
fn config_rewrite_writes_the_toml_file_and_a_restart_reads_it() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("meridian.toml");
    std::fs::write(
        &file,
        "# kept\nappendonly = false\nhash-max-ziplist-entries = 7 # old name\n",
    )
    .unwrap();
    let file_flag = file.display().to_string();
    let s = Server::start_with(&["--config", &file_flag]);
    let mut c = s.connect();
    assert!(text(&mut c, &["INFO", "server"]).contains(&format!("config_file:{file_flag}\r\n")));
    assert_eq!(
        text(
            &mut c,
            &[
                "CONFIG",
                "SET",
                "hash-max-listpack-entries",
                "9",
                "lfu-log-factor",
                "5",
                "activerehashing",
                "no"
            ]
        ),
        "+OK\r\n"
    );
    assert_eq!(text(&mut c, &["CONFIG", "REWRITE"]), "+OK\r\n");
    let written = std::fs::read_to_string(&file).unwrap();
    assert!(
        written.starts_with("# kept\nappendonly = false\nhash-max-listpack-entries = 9\n"),
        "{written}"
    );
    assert!(
        written.contains("# Generated by CONFIG REWRITE\n"),
        "{written}"
    );
    assert!(written.contains("\nlfu-log-factor = 5\n"), "{written}");
    assert!(written.contains("\nactiverehashing = false\n"), "{written}");
    drop(c);
    drop(s);
    // The rewritten file starts a server with the same values.
    let s = Server::start_with(&["--config", &file_flag]);
    let mut c = s.connect();
    assert_eq!(
        text(
            &mut c,
            &[
                "CONFIG",
                "GET",
                "hash-max-listpack-entries",
                "lfu-log-factor",
                "activerehashing"
            ]
        ),
        "*6\r\n$25\r\nhash-max-listpack-entries\r\n$1\r\n9\r\n$14\r\nlfu-log-factor\r\n$1\r\n5\r\n$15\r\nactiverehashing\r\n$2\r\nno\r\n"
    );
}

#[test]
fn debug_protocol_push_sends_a_push_then_a_reply() {
    let s = Server::start();
    let mut c = s.connect();
    assert_eq!(
        text(&mut c, &["DEBUG", "PROTOCOL", "push"]),
        "-ERR RESP2 is not supported by this command\r\n"
    );
    assert!(text(&mut c, &["HELLO", "3"]).starts_with('%'));
    assert_eq!(
        text(&mut c, &["DEBUG", "PROTOCOL", "push"]),
        ">2\r\n$16\r\nserver-cpu-usage\r\n:42\r\n"
    );
    assert_eq!(
        String::from_utf8_lossy(&c.read_reply()),
        "$40\r\nSome real reply following the push reply\r\n"
    );
}

/// CONFIG SET port binds the new port and closes the old one; clients already connected
/// stay. A port that cannot be bound is Redis's "Unable to listen on this port" error, and
/// nothing of that CONFIG SET is applied (Redis's suite: "CONFIG SET rollback on apply
/// error").
#[test]
fn config_set_port_moves_the_listener_or_changes_nothing() {
    let server = Server::start();
    let mut c = server.connect();
    let old = server.port;
    let new = common::free_port();
    c.ok(&["CONFIG", "SET", "port", &new.to_string()]);
    let mut moved = Raw::connect(new);
    assert_eq!(moved.reply(&["PING"]), common::Reply::Simple("PONG".into()));
    // The listening thread closes the old port as it takes the new one (at once, or as
    // soon as it runs).
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while std::net::TcpStream::connect(("127.0.0.1", old)).is_ok() {
        assert!(
            std::time::Instant::now() < deadline,
            "the old port still accepts"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // The client connected before the switch is still served.
    assert_eq!(c.reply(&["PING"]), common::Reply::Simple("PONG".into()));
    assert_eq!(
        c.reply(&["CONFIG", "GET", "port"]),
        common::Reply::Array(vec![
            common::Reply::bulk("port"),
            common::Reply::bulk(&new.to_string())
        ])
    );
    assert!(text(&mut c, &["INFO", "server"]).contains(&format!("tcp_port:{new}\r\n")));
    // A port in use: an error, and the other parameter keeps its value.
    let taken_port = common::free_port();
    let _taken = std::net::TcpListener::bind(("127.0.0.1", taken_port)).unwrap();
    let maxmemory = text(&mut c, &["CONFIG", "GET", "maxmemory"]);
    assert_eq!(
        text(
            &mut c,
            &[
                "CONFIG",
                "SET",
                "maxmemory",
                "10000001",
                "port",
                &taken_port.to_string()
            ]
        ),
        "-ERR CONFIG SET failed (possibly related to argument 'port') - Unable to listen on this port. Check server logs.\r\n"
    );
    assert_eq!(text(&mut c, &["CONFIG", "GET", "maxmemory"]), maxmemory);
    assert_eq!(moved.reply(&["PING"]), common::Reply::Simple("PONG".into()));
    let mut again = Raw::connect(new);
    assert_eq!(again.reply(&["PING"]), common::Reply::Simple("PONG".into()));
    // Back to the first port (the harness stops the server by its process, not its port).
    c.ok(&["CONFIG", "SET", "port", &old.to_string()]);
    let mut back = Raw::connect(old);
    assert_eq!(back.reply(&["PING"]), common::Reply::Simple("PONG".into()));
}

/// DEBUG and MODULE are refused unless `enable-debug-command` / `enable-module-command`
/// allow them, as in Redis 7.0 (both default to no); `local` allows loopback clients.
#[test]
fn debug_needs_enable_debug_command() {
    let refused = "-ERR DEBUG command not allowed. If the enable-debug-command option is set to \"local\", you can run it from a local connection, otherwise you need to set this option in the configuration file, and then restart the server.\r\n";
    let s = Server::start_with(&["--enable-debug-command", "no"]);
    let mut c = s.connect();
    assert_eq!(c.call_text(&["DEBUG", "SLEEP", "0"]), refused);
    assert_eq!(
        c.call_text(&["CONFIG", "GET", "enable-debug-command"]),
        "*2\r\n$20\r\nenable-debug-command\r\n$2\r\nno\r\n"
    );
    let s = Server::start_with(&["--enable-debug-command", "local"]);
    let mut c = s.connect();
    assert_eq!(c.call_text(&["DEBUG", "SLEEP", "0"]), "+OK\r\n");
    let s = Server::start_with(&[
        "--enable-debug-command",
        "yes",
        "--enable-module-command",
        "local",
    ]);
    let mut c = s.connect();
    assert_eq!(c.call_text(&["DEBUG", "SLEEP", "0"]), "+OK\r\n");
    assert_eq!(c.call_text(&["MODULE", "LIST"]), "*0\r\n");
    assert!(
        c.call_text(&["MODULE", "LOAD", "/nonexistent.so"])
            .starts_with("-ERR Error loading the extension"),
    );
}

/// DEBUG PANIC ends the process, as Redis's serverPanic does: any panic does (the service
/// manager then restarts it and the op log replays), where before it ended only the task it
/// happened in and left the server half working. The log says where and why.
#[test]
fn debug_panic_ends_the_process_with_a_report() {
    let mut s = Server::start_with(&["--enable-debug-command", "yes"]);
    let mut c = s.connect();
    c.send_cmd(&[b"DEBUG", b"PANIC"]);
    assert!(
        c.is_closed(Duration::from_secs(10)),
        "no reply, the connection ends"
    );
    assert!(common::eventually(Duration::from_secs(10), || !s.is_running()));
    let log = s.log();
    assert!(log.contains("DEBUG PANIC called at Unix time"), "{log}");
    assert!(log.contains("exiting (a defect"), "{log}");
}
