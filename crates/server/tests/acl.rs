//! AUTH, ACL and protected mode through the real binary (issue 20), for what the
//! differential corpus (`corpus/acl.txt`) cannot show on one connection: the limits of
//! unauthenticated clients (at the limit and one past), protected mode (a client from
//! 127.0.0.2 is not local, on both servers), connections closed by ACL DELUSER and by
//! revoked channels, EXEC re-checking queued commands, the ACL file (start, SAVE, LOAD),
//! the ACL log counting failed AUTHs, the sync port refusing client commands, scripts
//! running their commands as the calling user, and a long script's side path checking
//! authentication, permissions and protected mode.

mod common;

use std::time::Duration;

use common::{Raw, RedisRef, Reply, Server};

fn ok(c: &mut Raw, args: &[&str]) {
    assert_eq!(c.call_text(args), "+OK\r\n", "{args:?}");
}

#[test]
fn unauthenticated_clients_get_small_limits() {
    let s = Server::start_with(&["--requirepass", "secret"]);
    // At the limits: 10 arguments and a 16384-byte bulk are parsed (and refused NOAUTH).
    let mut c = s.connect();
    let mut ten: Vec<&[u8]> = vec![b"DEL"];
    ten.extend(std::iter::repeat_n(&b"k"[..], 9));
    assert_eq!(c.call(&ten), b"-NOAUTH Authentication required.\r\n");
    let big = vec![b'v'; 16384];
    assert_eq!(
        c.call(&[b"ECHO", &big]),
        b"-NOAUTH Authentication required.\r\n"
    );
    // One past: the protocol error closes the connection, as Redis does.
    c.send(b"*11\r\n");
    assert_eq!(
        c.read_reply(),
        b"-ERR Protocol error: unauthenticated multibulk length\r\n"
    );
    assert!(c.is_closed(Duration::from_secs(5)));
    let mut c = s.connect();
    c.send(b"*2\r\n$4\r\nECHO\r\n$16385\r\n");
    assert_eq!(
        c.read_reply(),
        b"-ERR Protocol error: unauthenticated bulk length\r\n"
    );
    assert!(c.is_closed(Duration::from_secs(5)));
    // After AUTH in the same pipeline the limits are lifted.
    let mut c = s.connect();
    let mut bytes = common::cmd(&[b"AUTH", b"secret"]);
    bytes.extend_from_slice(&common::cmd(&[b"ECHO", &vec![b'v'; 100_000]]));
    c.send(&bytes);
    assert_eq!(c.read_reply(), b"+OK\r\n");
    assert_eq!(c.read_reply().len(), 100_000 + 11);
    // HELLO before AUTH, and HELLO with AUTH.
    let mut c = s.connect();
    assert!(
        c.call_text(&["HELLO", "3"])
            .starts_with("-NOAUTH HELLO must be called with the client already authenticated")
    );
    assert!(
        c.call_text(&["HELLO", "3", "AUTH", "default", "secret"])
            .starts_with("%7\r\n")
    );
}

/// The same bytes to redis-server and Meridian from 127.0.0.2: both refuse with the
/// protected-mode text while the default user has no password, and serve once it has one.
#[test]
fn protected_mode_refuses_non_loopback_clients_like_redis() {
    let from = std::net::Ipv4Addr::new(127, 0, 0, 2);
    let meridian = Server::start_with(&["--bind", "0.0.0.0"]);
    assert!(meridian.log().contains("protected mode refuses clients"));
    let mut replies = Vec::new();
    let reference = RedisRef::available().then(RedisRef::start);
    let mut ports = vec![meridian.port];
    ports.extend(reference.as_ref().map(|r| r.port));
    for &port in &ports {
        let mut c = Raw::connect_from(from, port);
        c.send(&common::cmd(&[b"PING"]));
        let (got, closed) = c.read_until_quiet(Duration::from_secs(2));
        assert!(closed, "port {port}");
        replies.push(got);
        // A loopback client is served, and once a password is set the remote one too.
        let mut local = Raw::connect(port);
        ok(&mut local, &["CONFIG", "SET", "requirepass", "pw"]);
        let mut c = Raw::connect_from(from, port);
        assert_eq!(c.call_text(&["AUTH", "pw"]), "+OK\r\n");
        ok(&mut local, &["AUTH", "pw"]);
        ok(&mut local, &["CONFIG", "SET", "requirepass", ""]);
        ok(&mut local, &["CONFIG", "SET", "protected-mode", "no"]);
        let mut c = Raw::connect_from(from, port);
        assert_eq!(c.call_text(&["PING"]), "+PONG\r\n");
    }
    let text = String::from_utf8_lossy(&replies[0]).into_owned();
    assert!(
        text.starts_with("-DENIED Redis is running in protected mode"),
        "{text}"
    );
    if replies.len() == 2 {
        assert_eq!(
            replies[0], replies[1],
            "Meridian's refusal differs from Redis's"
        );
    }
    let mut c = meridian.connect();
    assert!(
        c.call_text(&["INFO", "stats"])
            .contains("rejected_connections:1\r\n")
    );
}

#[test]
fn deluser_and_revoked_channels_close_connections() {
    let s = Server::start();
    let mut admin = s.connect();
    ok(
        &mut admin,
        &[
            "ACL", "SETUSER", "alice", "on", ">pw", "+@all", "~*", "&news.*",
        ],
    );
    let mut a1 = s.connect();
    ok(&mut a1, &["AUTH", "alice", "pw"]);
    assert_eq!(
        a1.call_text(&["SUBSCRIBE", "sport"]),
        "-NOPERM this user has no permissions to access one of the channels used as arguments\r\n"
    );
    assert!(a1.call_text(&["SUBSCRIBE", "news.a"]).contains("news.a"));
    let mut a2 = s.connect();
    ok(&mut a2, &["AUTH", "alice", "pw"]);
    assert!(admin.call_text(&["CLIENT", "LIST"]).contains("user=alice"));
    // Changing other rules keeps the subscriber; revoking its channel closes it.
    ok(&mut admin, &["ACL", "SETUSER", "alice", "resetkeys", "~k*"]);
    assert_eq!(a2.call_text(&["PING"]), "+PONG\r\n");
    ok(
        &mut admin,
        &["ACL", "SETUSER", "alice", "resetchannels", "&other"],
    );
    assert!(a1.is_closed(Duration::from_secs(5)));
    assert_eq!(a2.call_text(&["PING"]), "+PONG\r\n");
    // DELUSER closes every connection of the user.
    assert_eq!(admin.call_text(&["ACL", "DELUSER", "alice"]), ":1\r\n");
    assert!(a2.is_closed(Duration::from_secs(5)));
    assert_eq!(
        admin.call_text(&["CLIENT", "KILL", "USER", "alice"]),
        "-ERR No such user 'alice'\r\n"
    );
}

/// MULTI checks each command as it is queued (and the transaction fails), and EXEC checks
/// again: rules changed after queuing refuse the command with Redis's text.
#[test]
fn transactions_are_checked_when_queued_and_at_exec() {
    let s = Server::start();
    let mut admin = s.connect();
    ok(
        &mut admin,
        &["ACL", "SETUSER", "bob", "on", ">pw", "+@all", "~*"],
    );
    let mut bob = s.connect();
    ok(&mut bob, &["AUTH", "bob", "pw"]);
    ok(&mut bob, &["MULTI"]);
    assert_eq!(bob.call_text(&["SET", "k", "1"]), "+QUEUED\r\n");
    assert_eq!(bob.call_text(&["GET", "k"]), "+QUEUED\r\n");
    ok(&mut admin, &["ACL", "SETUSER", "bob", "-set"]);
    assert_eq!(
        bob.call_text(&["EXEC"]),
        "*2\r\n-NOPERM ACLs rules changed between the moment the transaction was accumulated and the EXEC call. This command is no longer allowed for the following reason: no permission to execute the command or subcommand\r\n$-1\r\n"
    );
    ok(&mut bob, &["MULTI"]);
    assert!(bob.call_text(&["SET", "k", "1"]).starts_with("-NOPERM"));
    assert!(bob.call_text(&["EXEC"]).starts_with("-EXECABORT"));
    let log = admin.call_text(&["ACL", "LOG"]);
    assert!(log.contains("multi"), "{log}");
}

#[test]
fn acl_file_at_start_save_and_load() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("users.acl");
    std::fs::write(
        &path,
        "user default on nopass ~* &* +@all\nuser carol on >cpw ~c* +get +set\n",
    )
    .unwrap();
    let path_s = path.display().to_string();
    let s = Server::start_with(&["--aclfile", &path_s]);
    let mut c = s.connect();
    ok(&mut c, &["AUTH", "carol", "cpw"]);
    assert_eq!(c.call_text(&["SET", "c1", "v"]), "+OK\r\n");
    let mut admin = s.connect();
    ok(
        &mut admin,
        &["ACL", "SETUSER", "dave", "on", ">dpw", "+ping"],
    );
    ok(&mut admin, &["ACL", "SAVE"]);
    let saved = std::fs::read_to_string(&path).unwrap();
    assert!(saved.contains("user dave on #"), "{saved}");
    // LOAD replaces the users: carol's connection closes when the file drops her.
    std::fs::write(&path, "user dave on >other +ping\n").unwrap();
    ok(&mut admin, &["ACL", "LOAD"]);
    assert!(c.is_closed(Duration::from_secs(5)));
    assert_eq!(
        admin.call_text(&["ACL", "USERS"]),
        "*2\r\n$4\r\ndave\r\n$7\r\ndefault\r\n"
    );
    // A broken file changes nothing and says why.
    std::fs::write(&path, "user eve on +nosuch\n").unwrap();
    let e = admin.call_text(&["ACL", "LOAD"]);
    assert!(e.contains("Unknown command or category name in ACL"), "{e}");
    assert_eq!(
        admin.call_text(&["ACL", "USERS"]),
        "*2\r\n$4\r\ndave\r\n$7\r\ndefault\r\n"
    );
    // A server started on a broken file refuses to start.
    let mut bad = std::process::Command::new(env!("CARGO_BIN_EXE_meridian"))
        .args(["server", "--port", "1", "--aclfile", &path_s])
        .args(["--dir", &dir.path().display().to_string()])
        .output()
        .unwrap();
    assert!(!bad.status.success());
    bad.stderr.extend_from_slice(&bad.stdout);
    let text = String::from_utf8_lossy(&bad.stderr);
    assert!(text.contains("ACL errors"), "{text}");
}

/// Failed AUTHs are counted in one ACL LOG entry per user and minute (the log stays within
/// `acllog-max-len` entries whatever the rate).
#[test]
fn acl_log_counts_failed_auths() {
    let s = Server::start_with(&["--requirepass", "pw", "--acllog-max-len", "3"]);
    let mut c = s.connect();
    let mut admin = s.connect();
    ok(&mut admin, &["AUTH", "pw"]);
    for _ in 0..50 {
        assert!(c.call_text(&["AUTH", "wrong"]).starts_with("-WRONGPASS"));
    }
    let entries = |admin: &mut Raw| match admin.reply(&["ACL", "LOG"]) {
        Reply::Array(e) => e,
        other => panic!("{other:?}"),
    };
    let has = |e: &Reply, v: Reply| matches!(e, Reply::Array(f) if f.contains(&v));
    let e = entries(&mut admin);
    assert_eq!(e.len(), 1);
    assert!(has(&e[0], Reply::Int(50)) && has(&e[0], Reply::bulk("default")));
    for u in ["u1", "u2", "u3", "u4"] {
        assert!(c.call_text(&["AUTH", u, "x"]).starts_with("-WRONGPASS"));
    }
    let e = entries(&mut admin);
    assert_eq!(e.len(), 3);
    assert!(has(&e[0], Reply::bulk("u4")) && has(&e[0], Reply::bulk("auth")));
    ok(&mut admin, &["ACL", "LOG", "RESET"]);
    assert_eq!(admin.call_text(&["ACL", "LOG"]), "*0\r\n");
}

/// The sync port speaks only the sync protocol: a client command there is not executed.
#[test]
fn sync_port_never_runs_client_commands() {
    let sync_port = common::free_port();
    let s = Server::start_with(&["--sync-port", &sync_port.to_string()]);
    let mut c = s.connect();
    ok(&mut c, &["SET", "k", "v"]);
    let mut intruder = Raw::connect(sync_port);
    // One write: the server may close the connection after the first command, and a
    // second write would then meet a reset.
    let mut both = common::cmd(&[b"FLUSHALL"]);
    both.extend_from_slice(b"FLUSHALL\r\n");
    intruder.send(&both);
    let (got, _) = intruder.read_until_quiet(Duration::from_secs(2));
    assert!(
        !got.starts_with(b"+OK"),
        "{}",
        String::from_utf8_lossy(&got)
    );
    assert_eq!(c.reply(&["GET", "k"]), Reply::bulk("v"));
}

/// Secrets never reach MONITOR or the slow log: Redis's `(redacted)`.
#[test]
fn monitor_and_slowlog_redact_secrets() {
    let s = Server::start_with(&["--slowlog-log-slower-than", "0"]);
    let mut mon = s.connect();
    ok(&mut mon, &["MONITOR"]);
    let mut c = s.connect();
    assert!(
        c.call_text(&["AUTH", "u", "hunter2"])
            .starts_with("-WRONGPASS")
    );
    assert!(
        c.call_text(&["HELLO", "2", "AUTH", "default", "hunter2"])
            .starts_with("*14")
    );
    assert_eq!(c.call_text(&["PING"]), "+PONG\r\n");
    let mut lines = Vec::new();
    while lines.len() < 3 {
        lines.push(String::from_utf8(mon.read_reply()).unwrap());
    }
    assert!(
        lines[0].ends_with("\"AUTH\" \"(redacted)\" \"(redacted)\"\r\n"),
        "{lines:?}"
    );
    assert!(
        lines[1].ends_with("\"HELLO\" \"2\" \"AUTH\" \"(redacted)\" \"(redacted)\"\r\n"),
        "{lines:?}"
    );
    ok(&mut c, &["ACL", "SETUSER", "v", "on", ">hunter2"]);
    ok(&mut c, &["CONFIG", "SET", "requirepass", "hunter2"]);
    ok(&mut c, &["AUTH", "hunter2"]);
    let slowlog = c.call_text(&["SLOWLOG", "GET", "100"]);
    assert!(!slowlog.contains("hunter2"), "{slowlog}");
    assert!(slowlog.contains("(redacted)"), "{slowlog}");
}

/// Scripts run their commands as the user that called them (Redis 7.0's `scriptCall`):
/// `redis.call` of a command or key that user may not use fails inside the script with
/// Redis's text, `redis.acl_check_cmd` answers for that user, and the ACL log records the
/// refusal with the `lua` context and the caller's client info. Byte for byte as
/// redis-server where it is installed.
#[test]
fn scripts_run_commands_as_the_calling_user() {
    let meridian = Server::start_with(&[]);
    let reference = RedisRef::available().then(RedisRef::start);
    let mut ports = vec![meridian.port];
    ports.extend(reference.as_ref().map(|r| r.port));
    let script = |c: &mut Raw, body: &str, keys: &[&str]| {
        let n = keys.len().to_string();
        let mut args = vec!["EVAL", body, n.as_str()];
        args.extend_from_slice(keys);
        c.call_text(&args)
    };
    let mut transcripts = Vec::new();
    for &port in &ports {
        let mut admin = Raw::connect(port);
        ok(
            &mut admin,
            &[
                "ACL",
                "SETUSER",
                "bob",
                "on",
                ">123",
                "+@scripting",
                "+set",
                "~x*",
            ],
        );
        let mut bob = Raw::connect(port);
        ok(&mut bob, &["AUTH", "bob", "123"]);
        let replies = vec![
            script(
                &mut bob,
                "return redis.acl_check_cmd('set','xx',1)",
                &["xx"],
            ),
            script(
                &mut bob,
                "return redis.acl_check_cmd('hset','xx','f',1)",
                &["xx"],
            ),
            script(&mut bob, "return redis.acl_check_cmd('set','yy',1)", &[]),
            script(
                &mut bob,
                "return redis.acl_check_cmd('invalid-cmd','arg')",
                &[],
            ),
            script(&mut bob, "return redis.call('set','xx','1')", &["xx"]),
            script(&mut bob, "return redis.call('get','xx')", &["xx"]),
            script(&mut bob, "return redis.call('set','yy','1')", &[]),
            script(&mut bob, "return redis.pcall('get','xx')", &["xx"]),
            // The default user may run everything, from scripts too.
            script(&mut admin, "return redis.call('get','xx')", &["xx"]),
        ];
        assert_eq!(replies[0], ":1\r\n");
        assert_eq!(replies[1], "$-1\r\n");
        assert_eq!(replies[2], "$-1\r\n");
        assert!(
            replies[5].starts_with(
                "-ERR The user executing the script can't run this command or subcommand script: "
            ),
            "{}",
            replies[5]
        );
        assert!(
            replies[6].starts_with("-ERR The user executing the script can't access at least one of the keys mentioned in the command arguments script: "),
            "{}",
            replies[6]
        );
        assert_eq!(
            replies[7],
            "-ERR The user executing the script can't run this command or subcommand\r\n"
        );
        assert_eq!(replies[8], "$1\r\n1\r\n");
        // Two refusals of GET (redis.call and redis.pcall) make one entry counted twice,
        // moved to the head by the second; acl_check_cmd logs nothing.
        let log = match admin.reply(&["ACL", "LOG"]) {
            Reply::Array(entries) => entries,
            other => panic!("{other:?}"),
        };
        assert_eq!(log.len(), 2, "{log:?}");
        let Reply::Array(get) = &log[0] else {
            panic!("{log:?}")
        };
        for (field, value) in [
            ("count", Reply::Int(2)),
            ("reason", Reply::bulk("command")),
            ("context", Reply::bulk("lua")),
            ("object", Reply::bulk("get")),
            ("username", Reply::bulk("bob")),
        ] {
            let i = get.iter().position(|f| *f == Reply::bulk(field));
            assert_eq!(
                i.and_then(|i| get.get(i + 1)),
                Some(&value),
                "{field}: {get:?}"
            );
        }
        let info = get
            .iter()
            .find_map(|f| match f {
                Reply::Bulk(b) if b.starts_with(b"id=") => {
                    Some(String::from_utf8_lossy(b).into_owned())
                }
                _ => None,
            })
            .expect("client-info");
        assert!(
            info.contains(" cmd=eval ") && info.contains(" user=bob "),
            "{info}"
        );
        transcripts.push(replies);
    }
    if transcripts.len() == 2 {
        assert_eq!(
            transcripts[0], transcripts[1],
            "Meridian differs from Redis"
        );
    }
}

/// While a script runs long, the side path that answers other connections checks them as
/// `cmd::execute` does: a client that has not authenticated gets -NOAUTH for SCRIPT KILL and
/// SHUTDOWN NOSAVE (the script goes on, the server stays up), a connection accepted during
/// the script too, and a user without the permission gets -NOPERM (logged); an
/// authenticated user with it kills the script.
#[test]
fn a_busy_script_answers_only_authenticated_permitted_clients() {
    let s = Server::start_with(&["--requirepass", "secret", "--busy-reply-threshold", "50"]);
    let mut admin = s.connect();
    ok(&mut admin, &["AUTH", "secret"]);
    ok(
        &mut admin,
        &[
            "ACL", "SETUSER", "viewer", "on", ">pw", "~*", "+@read", "+ping",
        ],
    );
    let mut viewer = s.connect();
    ok(&mut viewer, &["AUTH", "viewer", "pw"]);
    let mut stranger = s.connect();
    let mut runner = s.connect();
    ok(&mut runner, &["AUTH", "secret"]);
    runner.send(&common::cmd(&[b"EVAL", b"while true do end", b"0"]));
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !admin.call_text(&["PING"]).starts_with("-BUSY") {
        assert!(std::time::Instant::now() < deadline, "never busy");
        std::thread::sleep(Duration::from_millis(20));
    }
    let noauth = "-NOAUTH Authentication required.\r\n";
    assert_eq!(stranger.call_text(&["SCRIPT", "KILL"]), noauth);
    assert_eq!(stranger.call_text(&["SHUTDOWN", "NOSAVE"]), noauth);
    assert_eq!(stranger.call_text(&["PING"]), noauth);
    // Unknown commands and arities come first, as in Redis.
    assert!(
        stranger
            .call_text(&["NOSUCH"])
            .starts_with("-ERR unknown command 'NOSUCH'")
    );
    let mut late = s.connect();
    assert_eq!(late.call_text(&["SHUTDOWN", "NOSAVE"]), noauth);
    assert_eq!(
        viewer.call_text(&["SCRIPT", "KILL"]),
        "-NOPERM this user has no permissions to run the 'script|kill' command\r\n"
    );
    assert_eq!(
        viewer.call_text(&["SHUTDOWN", "NOSAVE"]),
        "-NOPERM this user has no permissions to run the 'shutdown' command\r\n"
    );
    assert!(viewer.call_text(&["GET", "k"]).starts_with("-BUSY"));
    // Still running: only the authenticated default user stops it.
    assert!(admin.call_text(&["PING"]).starts_with("-BUSY"));
    ok(&mut admin, &["SCRIPT", "KILL"]);
    assert!(
        String::from_utf8_lossy(&runner.read_reply()).starts_with("-ERR Script killed by user")
    );
    assert_eq!(admin.call_text(&["PING"]), "+PONG\r\n");
    let log = admin.call_text(&["ACL", "LOG"]);
    assert!(
        log.contains("script|kill") && log.contains("shutdown") && log.contains("viewer"),
        "{log}"
    );
    // The connection accepted during the script is served once it ends, as any other.
    assert_eq!(late.call_text(&["PING"]), noauth);
    ok(&mut late, &["AUTH", "secret"]);
    assert_eq!(late.call_text(&["PING"]), "+PONG\r\n");
}

/// A connection accepted while a script runs long (by the busy side path) meets protected
/// mode at once, as one accepted by the shard does.
#[test]
fn protected_mode_applies_to_connections_accepted_during_a_busy_script() {
    let s = Server::start_with(&["--bind", "0.0.0.0", "--busy-reply-threshold", "50"]);
    let mut admin = s.connect();
    let mut runner = s.connect();
    runner.send(&common::cmd(&[b"EVAL", b"while true do end", b"0"]));
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !admin.call_text(&["PING"]).starts_with("-BUSY") {
        assert!(std::time::Instant::now() < deadline, "never busy");
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut remote = Raw::connect_from(std::net::Ipv4Addr::new(127, 0, 0, 2), s.port);
    remote.send(&common::cmd(&[b"SHUTDOWN", b"NOSAVE"]));
    let (got, closed) = remote.read_until_quiet(Duration::from_secs(2));
    assert!(closed);
    assert!(
        got.starts_with(b"-DENIED Redis is running in protected mode"),
        "{}",
        String::from_utf8_lossy(&got)
    );
    ok(&mut admin, &["SCRIPT", "KILL"]);
    assert!(String::from_utf8_lossy(&runner.read_reply()).starts_with("-ERR Script killed"));
    let stats = admin.call_text(&["INFO", "stats"]);
    assert!(stats.contains("rejected_connections:1\r\n"), "{stats}");
}
