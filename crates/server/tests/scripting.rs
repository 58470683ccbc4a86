//! Scripting against real `meridian` processes: scripts that run long (BUSY replies to other
//! clients, SCRIPT KILL and FUNCTION KILL, UNKILLABLE once a script wrote, SHUTDOWN NOSAVE
//! leaving none of the script's writes on disk), libraries that survive a restart while the
//! script cache does not, and replication: a script's writes reach other sites as effects
//! (a non-deterministic script leaves the same data everywhere), FUNCTION LOAD/DELETE reach
//! every site, concurrent loads of one library settle last-writer-wins, and a site that
//! joins by full sync receives the libraries.
//!
//! Every wait is bounded; every process is killed when its handle drops.

mod common;

use std::time::{Duration, Instant};

use common::Reply;
use common::sites::{CONVERGE_TIMEOUT, Cluster, MEMORY_BACKLOG_ONLY, Opts, eventually};

const A: usize = 0;
const B: usize = 1;
const C: usize = 2;

const LINKS_UP: Duration = Duration::from_secs(15);
/// Bound on waiting for a script to be reported busy or to stop.
const BUSY_WAIT: Duration = Duration::from_secs(10);

/// Polls `PING` on `c` until it answers BUSY (the other connection's script ran past the
/// threshold); panics after `BUSY_WAIT`.
fn wait_busy(c: &mut common::Raw) -> String {
    let deadline = Instant::now() + BUSY_WAIT;
    loop {
        if let Reply::Err(e) = c.reply(&["PING"]) {
            return e;
        }
        assert!(Instant::now() < deadline, "the script never became busy");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Stops the script or function running long on `runner`'s thread with `kill` (SCRIPT or
/// FUNCTION) sent on `other`, and checks the runner's reply is the killed error. `what`
/// names the case in a failure.
fn kill_busy(other: &mut common::Raw, runner: &mut common::Raw, kill: &str, what: &str) {
    assert_eq!(
        other.reply(&[kill, "KILL"]),
        Reply::Simple("OK".into()),
        "{what}"
    );
    match common::parse_reply(&runner.read_reply()) {
        Reply::Err(e) => assert!(e.contains("killed by user"), "{what}: {e}"),
        reply => panic!("{what}: {reply:?}"),
    }
}

fn one_site(flags: &[&str]) -> Cluster {
    Cluster::start(&["a"], Opts::default().flags(flags))
}

#[test]
fn busy_script_answers_busy_then_script_kill_stops_it() {
    let cluster = one_site(&["--busy-reply-threshold", "50"]);
    let site = cluster.site(A);
    let mut runner = site.connect();
    let mut other = site.connect();
    runner.send_cmd(&[b"EVAL", b"local i = 0 while true do i = i + 1 end", b"0"]);
    let busy = wait_busy(&mut other);
    assert_eq!(
        busy,
        "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE."
    );
    // FUNCTION KILL does not stop an EVAL script; FUNCTION STATS says why.
    assert!(
        other
            .err(&["FUNCTION", "KILL"])
            .starts_with("BUSY Redis is busy running a script. You can only call SCRIPT KILL")
    );
    assert_eq!(other.reply(&["SCRIPT", "KILL"]), Reply::Simple("OK".into()));
    let killed = common::parse_reply(&runner.read_reply());
    match killed {
        Reply::Err(e) => assert!(
            e.starts_with("ERR Script killed by user with SCRIPT KILL..."),
            "{e}"
        ),
        other => panic!("the script's reply: {other:?}"),
    }
    assert_eq!(other.reply(&["PING"]), Reply::Simple("PONG".into()));
    assert_eq!(runner.reply(&["PING"]), Reply::Simple("PONG".into()));
    assert_eq!(
        other.err(&["SCRIPT", "KILL"]),
        "NOTBUSY No scripts in execution right now."
    );
}

/// Redis's `multi.tcl` "MULTI and script timeout", "EXEC and script timeout" and "MULTI-EXEC
/// body and script timeout": MULTI and DISCARD answer while a script is busy, a command
/// refused with BUSY flags the transaction, EXEC during the script answers EXECABORT and ends
/// it; nothing of a flagged transaction runs, and the connection leaves MULTI.
#[test]
fn transactions_meet_a_busy_script_as_in_redis() {
    let cluster = one_site(&["--busy-reply-threshold", "10"]);
    let site = cluster.site(A);
    let mut admin = site.connect();
    let kill = |admin: &mut common::Raw, runner: &mut common::Raw| {
        assert_eq!(admin.reply(&["SCRIPT", "KILL"]), Reply::Simple("OK".into()));
        assert!(matches!(
            common::parse_reply(&runner.read_reply()),
            Reply::Err(_)
        ));
    };
    let busy =
        "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.";
    let ok = || Reply::Simple("OK".into());
    let queued = || Reply::Simple("QUEUED".into());

    // MULTI during the script: OK; INCR refused (BUSY) flags it; after the kill EXEC aborts.
    admin.reply(&["SET", "xx", "1"]);
    let (mut runner, mut c) = (site.connect(), site.connect());
    runner.send_cmd(&[b"EVAL", b"while true do end", b"0"]);
    wait_busy(&mut admin);
    assert_eq!(c.reply(&["MULTI"]), ok());
    assert_eq!(c.err(&["MULTI"]), "ERR MULTI calls can not be nested");
    assert_eq!(c.err(&["INCR", "xx"]), busy);
    kill(&mut admin, &mut runner);
    assert_eq!(c.reply(&["INCR", "xx"]), queued());
    assert_eq!(
        c.err(&["EXEC"]),
        "EXECABORT Transaction discarded because of previous errors."
    );
    assert_eq!(admin.reply(&["GET", "xx"]), Reply::Bulk(b"1".to_vec()));
    assert_eq!(c.reply(&["PING", "asdf"]), Reply::Bulk(b"asdf".to_vec()));

    // EXEC during the script: EXECABORT because of BUSY, the transaction is gone.
    let (mut runner, mut c) = (site.connect(), site.connect());
    assert_eq!(c.reply(&["MULTI"]), ok());
    assert_eq!(c.reply(&["INCR", "xx"]), queued());
    runner.send_cmd(&[b"EVAL", b"while true do end", b"0"]);
    wait_busy(&mut admin);
    assert_eq!(
        c.err(&["EXEC"]),
        format!("EXECABORT Transaction discarded because of: {busy}")
    );
    kill(&mut admin, &mut runner);
    assert_eq!(admin.reply(&["GET", "xx"]), Reply::Bulk(b"1".to_vec()));
    assert_eq!(c.reply(&["PING", "asdf"]), Reply::Bulk(b"asdf".to_vec()));
    assert_eq!(c.err(&["EXEC"]), "ERR EXEC without MULTI");

    // A transaction opened before the script, a refused command during it, EXEC after.
    let (mut runner, mut c) = (site.connect(), site.connect());
    assert_eq!(c.reply(&["MULTI"]), ok());
    assert_eq!(c.reply(&["INCR", "xx"]), queued());
    runner.send_cmd(&[b"EVAL", b"while true do end", b"0"]);
    wait_busy(&mut admin);
    assert_eq!(c.err(&["INCR", "xx"]), busy);
    kill(&mut admin, &mut runner);
    assert_eq!(
        c.err(&["EXEC"]),
        "EXECABORT Transaction discarded because of previous errors."
    );
    assert_eq!(admin.reply(&["GET", "xx"]), Reply::Bulk(b"1".to_vec()));

    // DISCARD during the script ends the transaction; a clean one opened there runs.
    let (mut runner, mut c) = (site.connect(), site.connect());
    assert_eq!(c.reply(&["MULTI"]), ok());
    assert_eq!(c.reply(&["INCR", "xx"]), queued());
    runner.send_cmd(&[b"EVAL", b"while true do end", b"0"]);
    wait_busy(&mut admin);
    assert_eq!(c.reply(&["DISCARD"]), ok());
    assert_eq!(c.err(&["DISCARD"]), "ERR DISCARD without MULTI");
    assert_eq!(c.reply(&["MULTI"]), ok());
    kill(&mut admin, &mut runner);
    assert_eq!(c.reply(&["INCR", "xx"]), queued());
    assert_eq!(c.reply(&["EXEC"]), Reply::Array(vec![Reply::Int(2)]));
}

#[test]
fn a_script_looping_inside_pcall_is_killed_too() {
    let cluster = one_site(&["--busy-reply-threshold", "50"]);
    let site = cluster.site(A);
    let mut runner = site.connect();
    let mut other = site.connect();
    runner.send_cmd(&[
        b"EVAL",
        b"local f = function() while 1 do redis.call('ping') end end while 1 do pcall(f) end",
        b"0",
    ]);
    wait_busy(&mut other);
    kill_busy(&mut other, &mut runner, "SCRIPT", "the pcall loop");
}

/// Loops that run inside Lua's C library, sized by the script: a backtracking pattern
/// (`a*` forty times against forty `a`, through find, gsub and gmatch), a plain find of a
/// long needle, `%b()` over an unbalanced string, `string.rep` of the empty string,
/// `table.insert` at a huge negative position, concatenations of a long string and a sort
/// of three million strings. Lua 5.1 runs its hook between instructions only, so each of
/// these ran with no hook at all: no BUSY reply, no SCRIPT KILL, the shard's thread held
/// for good by the first one. They charge their steps to the hook now
/// (vendor/lua-src/README.md), inside a pcall loop too (where the killed script's hook
/// fires by lines), and in a function (FUNCTION KILL).
#[test]
fn loops_inside_lua_library_functions_reach_the_hook() {
    let cluster = one_site(&["--busy-reply-threshold", "50"]);
    let site = cluster.site(A);
    let mut runner = site.connect();
    let mut other = site.connect();
    let backtrack = "string.rep('a', 40), string.rep('a*', 40) .. 'b'";
    let scripts = [
        format!("return string.find({backtrack})"),
        format!("return string.gsub({backtrack}, 'x')"),
        format!("for m in string.gmatch({backtrack}) do end return 1"),
        format!("while true do pcall(string.find, {backtrack}) end"),
        "local s = string.rep('a', 2000000) \
         return string.find(s, string.rep('a', 1000000) .. 'b', 1, true)"
            .to_string(),
        "return string.find(string.rep('(', 3000000), '%b()')".to_string(),
        "return #string.rep('', 2147483647)".to_string(),
        "local t = {} table.insert(t, -2147483647, 1) return 1".to_string(),
        "local s = string.rep('x', 50000000) local n = 0 \
         for i = 1, 100000 do n = n + #(s .. 'y') end return n"
            .to_string(),
        "local t = {} for i = 1, 3000000 do t[i] = tostring(i % 1000) end \
         table.sort(t) table.sort(t) return 1"
            .to_string(),
    ];
    for script in &scripts {
        runner.send_cmd(&[b"EVAL", script.as_bytes(), b"0"]);
        wait_busy(&mut other);
        kill_busy(&mut other, &mut runner, "SCRIPT", script);
        assert_eq!(other.reply(&["PING"]), Reply::Simple("PONG".into()));
    }
    let library = format!(
        "#!lua name=slow\nredis.register_function('slow', function() return string.find({backtrack}) end)"
    );
    assert_eq!(
        other.reply(&["FUNCTION", "LOAD", &library]),
        Reply::Bulk(b"slow".to_vec())
    );
    runner.send_cmd(&[b"FCALL", b"slow", b"0"]);
    wait_busy(&mut other);
    kill_busy(&mut other, &mut runner, "FUNCTION", "FCALL slow");
    assert_eq!(runner.reply(&["PING"]), Reply::Simple("PONG".into()));
}

/// Redis runs AUTH and HELLO during a busy script (they are `allow-busy`): a client that
/// opens its connection with them (go-redis, Lettuce and redis-py 8 send HELLO 3, with AUTH
/// when a password is set) gets their answers and then BUSY, where it waited for the
/// script's end before. A connection accepted during the script keeps what they set, and
/// the id HELLO reported, once its task starts; a connection of before keeps it too.
#[test]
fn auth_and_hello_answer_during_a_busy_script() {
    let cluster = one_site(&["--busy-reply-threshold", "50"]);
    let site = cluster.site(A);
    let mut runner = site.connect();
    let mut other = site.connect();
    assert_eq!(
        other.reply(&["CONFIG", "SET", "requirepass", "pw"]),
        Reply::Simple("OK".into())
    );
    runner.send_cmd(&[b"EVAL", b"local i = 0 while true do i = i + 1 end", b"0"]);
    wait_busy(&mut other);

    // A connection accepted during the script: NOAUTH first, as in Redis, then its handshake.
    let mut late = site.connect();
    assert!(late.err(&["PING"]).starts_with("NOAUTH"));
    assert!(late.err(&["AUTH", "nope"]).starts_with("WRONGPASS"));
    assert!(
        late.err(&["HELLO", "3", "AUTH", "default", "nope"])
            .starts_with("WRONGPASS")
    );
    assert_eq!(late.reply(&["AUTH", "pw"]), Reply::Simple("OK".into()));
    assert!(late.err(&["PING"]).starts_with("BUSY"));
    late.send_cmd(&[b"HELLO", b"3", b"SETNAME", b"late"]);
    let hello = String::from_utf8_lossy(&late.read_reply()).into_owned();
    assert!(hello.starts_with("%7\r\n"), "{hello}");
    assert!(hello.contains("$5\r\nproto\r\n:3\r\n"), "{hello}");
    let id: String = hello
        .split("$2\r\nid\r\n:")
        .nth(1)
        .and_then(|rest| rest.split("\r\n").next())
        .unwrap_or_default()
        .to_string();
    assert!(id.parse::<u64>().is_ok_and(|n| n > 0), "{hello}");
    // RESP3 from here on: BUSY is a simple error in both protocols.
    assert!(late.err(&["PING"]).starts_with("BUSY"));

    // A connection of before the script.
    other.send_cmd(&[b"HELLO", b"3", b"SETNAME", b"other"]);
    let hello = String::from_utf8_lossy(&other.read_reply()).into_owned();
    assert!(hello.contains("$5\r\nproto\r\n:3\r\n"), "{hello}");

    kill_busy(&mut other, &mut runner, "SCRIPT", "the loop");
    // The late connection's task starts from what the side path set.
    assert_eq!(
        late.reply(&["CLIENT", "ID"]),
        Reply::Int(id.parse().unwrap_or(0))
    );
    assert_eq!(
        late.reply(&["CLIENT", "GETNAME"]),
        Reply::Bulk(b"late".to_vec())
    );
    assert_eq!(late.reply(&["HSET", "h", "f", "v"]), Reply::Int(1));
    late.send_cmd(&[b"HGETALL", b"h"]);
    assert_eq!(late.read_reply(), b"%1\r\n$1\r\nf\r\n$1\r\nv\r\n".to_vec());
    other.send_cmd(&[b"HGETALL", b"h"]);
    assert_eq!(other.read_reply(), b"%1\r\n$1\r\nf\r\n$1\r\nv\r\n".to_vec());
    assert_eq!(
        other.reply(&["CLIENT", "GETNAME"]),
        Reply::Bulk(b"other".to_vec())
    );
    // A connection of after the script still needs its password.
    assert!(site.connect().err(&["PING"]).starts_with("NOAUTH"));
}

#[test]
fn function_kill_and_stats_while_a_function_runs() {
    let cluster = one_site(&["--busy-reply-threshold", "50"]);
    let site = cluster.site(A);
    let mut runner = site.connect();
    let mut other = site.connect();
    assert_eq!(
        other.reply(&[
            "FUNCTION",
            "LOAD",
            "#!lua name=spin\nredis.register_function('spin', function() while true do end end)"
        ]),
        Reply::bulk("spin")
    );
    runner.send_cmd(&[b"FCALL", b"spin", b"0", b"arg1"]);
    let busy = wait_busy(&mut other);
    assert!(busy.contains("FUNCTION KILL"), "{busy}");
    let stats = other.call_text(&["FUNCTION", "STATS"]);
    assert!(stats.contains("spin") && stats.contains("arg1"), "{stats}");
    assert!(
        other
            .err(&["SCRIPT", "KILL"])
            .starts_with("BUSY Redis is busy running a script. You can only call FUNCTION KILL")
    );
    kill_busy(&mut other, &mut runner, "FUNCTION", "the function");
    assert_eq!(other.reply(&["PING"]), Reply::Simple("PONG".into()));
}

#[test]
fn commands_pipelined_after_a_killed_script_still_run() {
    let cluster = one_site(&["--busy-reply-threshold", "50"]);
    let site = cluster.site(A);
    let mut runner = site.connect();
    let mut other = site.connect();
    let mut pipeline = common::cmd(&[b"EVAL", b"while 1 do redis.call('ping') end", b"0"]);
    pipeline.extend(common::cmd(&[b"PING"]));
    runner.send(&pipeline);
    wait_busy(&mut other);
    assert_eq!(other.reply(&["SCRIPT", "KILL"]), Reply::Simple("OK".into()));
    assert!(matches!(
        common::parse_reply(&runner.read_reply()),
        Reply::Err(_)
    ));
    assert_eq!(
        common::parse_reply(&runner.read_reply()),
        Reply::Simple("PONG".into())
    );
}

#[test]
fn a_script_that_wrote_is_unkillable_and_shutdown_nosave_keeps_none_of_its_writes() {
    let mut cluster = one_site(&["--busy-reply-threshold", "50", "--appendfsync", "always"]);
    {
        let site = cluster.site(A);
        let mut c = site.connect();
        c.ok(&["SET", "before", "1"]);
        let mut runner = site.connect();
        let mut other = site.connect();
        runner.send_cmd(&[
            b"EVAL",
            b"redis.call('set', KEYS[1], 'partial') while true do end",
            b"1",
            b"x",
        ]);
        wait_busy(&mut other);
        let e = other.err(&["SCRIPT", "KILL"]);
        assert!(
            e.starts_with("UNKILLABLE Sorry the script already executed write commands"),
            "{e}"
        );
        other.send_cmd(&[b"SHUTDOWN", b"NOSAVE"]);
        assert!(
            other.is_closed(BUSY_WAIT),
            "SHUTDOWN NOSAVE did not end the server"
        );
    }
    let site = cluster.site_mut(A);
    assert!(
        eventually(BUSY_WAIT, || !site.is_running()),
        "the process is still running"
    );
    site.kill();
    site.start();
    let mut c = site.connect();
    assert_eq!(c.reply(&["GET", "before"]), Reply::bulk("1"));
    // The script's write was never acknowledged, and the log does not have it.
    assert_eq!(c.reply(&["GET", "x"]), Reply::Nil);
}

#[test]
fn libraries_survive_a_restart_and_the_script_cache_does_not() {
    let mut cluster = one_site(&[]);
    let sha = {
        let mut c = cluster.site(A).connect();
        assert_eq!(
            c.reply(&[
                "FUNCTION",
                "LOAD",
                "#!lua name=keep\nredis.register_function('hello', function(k, a) return 'hi ' .. a[1] end)"
            ]),
            Reply::bulk("keep")
        );
        assert_eq!(
            c.reply(&[
                "FUNCTION",
                "LOAD",
                "#!lua name=gone\nredis.register_function('bye', function() return 1 end)"
            ]),
            Reply::bulk("gone")
        );
        c.ok(&["FUNCTION", "DELETE", "gone"]);
        match c.reply(&["SCRIPT", "LOAD", "return 1"]) {
            Reply::Bulk(s) => String::from_utf8(s).unwrap(),
            other => panic!("{other:?}"),
        }
    };
    // Once from the log alone, once from a snapshot.
    for snapshot in [false, true] {
        if snapshot {
            cluster.site(A).connect().ok(&["SAVE"]);
        }
        cluster.site_mut(A).restart();
        let mut c = cluster.site(A).connect();
        assert_eq!(
            c.reply(&["FCALL", "hello", "0", "there"]),
            Reply::bulk("hi there")
        );
        assert_eq!(c.err(&["FCALL", "bye", "0"]), "ERR Function not found");
        assert_eq!(c.call_text(&["SCRIPT", "EXISTS", &sha]), "*1\r\n:0\r\n");
    }
}

#[test]
fn script_writes_reach_other_sites_as_effects() {
    let cluster = Cluster::start(&["a", "b"], Opts::default());
    cluster.wait_links_up(LINKS_UP);
    let mut a = cluster.site(A).connect();
    let mut b = cluster.site(B).connect();
    // Non-deterministic: a re-run at B would pick other numbers; effects carry A's.
    let script = "math.randomseed(tonumber(ARGV[1])) \
        for i = 1, 20 do redis.call('hset', KEYS[1], 'f' .. i, math.random(1000000)) end \
        redis.call('incrby', KEYS[2], 7) \
        redis.call('rpush', KEYS[3], redis.call('time')[2]) \
        return redis.call('hlen', KEYS[1])";
    let seed = (std::process::id() % 100_000).to_string();
    assert_eq!(
        a.reply(&["EVAL", script, "3", "h", "n", "l", &seed]),
        Reply::Int(20)
    );
    // B's increment is concurrent (or later, if A's already arrived): counters add.
    assert!(matches!(b.reply(&["INCRBY", "n", "1"]), Reply::Int(1 | 8)));
    cluster.wait_converged(CONVERGE_TIMEOUT);
    let ha = a.call_text(&["HGETALL", "h"]);
    assert_eq!(ha, b.call_text(&["HGETALL", "h"]));
    assert_eq!(a.reply(&["GET", "n"]), Reply::bulk("8"));
    assert_eq!(b.reply(&["GET", "n"]), Reply::bulk("8"));
    assert_eq!(
        a.call_text(&["LRANGE", "l", "0", "-1"]),
        b.call_text(&["LRANGE", "l", "0", "-1"])
    );
}

fn function_list(c: &mut common::Raw) -> String {
    c.call_text(&["FUNCTION", "LIST", "WITHCODE"])
}

#[test]
fn function_changes_reach_every_site() {
    let cluster = Cluster::start(&["a", "b", "c"], Opts::default());
    cluster.wait_links_up(LINKS_UP);
    let mut a = cluster.site(A).connect();
    let mut b = cluster.site(B).connect();
    let mut c = cluster.site(C).connect();
    assert_eq!(
        a.reply(&[
            "FUNCTION",
            "LOAD",
            "#!lua name=shared\nredis.register_function('incr2', function(k) return redis.call('incrby', k[1], 2) end)"
        ]),
        Reply::bulk("shared")
    );
    assert!(
        eventually(CONVERGE_TIMEOUT, || c.reply(&["FCALL", "incr2", "1", "k"])
            == Reply::Int(2)),
        "FUNCTION LOAD at A never reached C"
    );
    // B may not have C's increment yet; the counter adds both either way.
    assert!(matches!(
        b.reply(&["FCALL", "incr2", "1", "k"]),
        Reply::Int(2 | 4)
    ));
    cluster.wait_converged(CONVERGE_TIMEOUT);
    for c in [&mut a, &mut b, &mut c] {
        assert_eq!(c.reply(&["GET", "k"]), Reply::bulk("4"));
    }
    b.ok(&["FUNCTION", "DELETE", "shared"]);
    assert!(
        eventually(CONVERGE_TIMEOUT, || a.reply(&["FCALL", "incr2", "1", "k"])
            == Reply::Err("ERR Function not found".into())
            && c.call_text(&["FUNCTION", "LIST"]) == "*0\r\n"),
        "FUNCTION DELETE at B never reached A and C"
    );
}

#[test]
fn concurrent_loads_of_one_library_settle_last_writer_wins() {
    let cluster = Cluster::start(&["a", "b"], Opts::proxied());
    cluster.wait_links_up(LINKS_UP);
    cluster.partition(A, B);
    let mut a = cluster.site(A).connect();
    let mut b = cluster.site(B).connect();
    a.reply(&[
        "FUNCTION",
        "LOAD",
        "#!lua name=lib\nredis.register_function('which', function() return 'a' end)",
    ]);
    // B's load is later in HLC order (same process clock family, issued after A's).
    std::thread::sleep(Duration::from_millis(20));
    b.reply(&[
        "FUNCTION",
        "LOAD",
        "#!lua name=lib\nredis.register_function('which', function() return 'b' end)",
    ]);
    cluster.heal(A, B);
    assert!(
        eventually(CONVERGE_TIMEOUT, || {
            let la = function_list(&mut a);
            la == function_list(&mut b) && la.contains("return 'b'")
        }),
        "the sites never agreed on the library: A {:?} B {:?}",
        function_list(&mut a),
        function_list(&mut b)
    );
    assert_eq!(a.reply(&["FCALL", "which", "0"]), Reply::bulk("b"));
}

#[test]
fn a_site_joining_by_full_sync_gets_the_libraries() {
    // B keeps no log: it comes back empty and must rejoin by full sync.
    // A keeps a small backlog in memory only (its log would extend it), so that B, behind
    // it, needs a full sync.
    let mut cluster = Cluster::start(
        &["a", "b"],
        Opts::default()
            .site_flags(A, MEMORY_BACKLOG_ONLY)
            .site_flags(B, &["--appendonly", "no", "--save", ""]),
    );
    cluster.wait_links_up(LINKS_UP);
    cluster.site_mut(B).kill();
    {
        let mut a = cluster.site(A).connect();
        a.reply(&[
            "FUNCTION",
            "LOAD",
            "#!lua name=late\nredis.register_function('late', function() return 'late' end)",
        ]);
        let value = "v".repeat(100);
        for i in 0..3000 {
            a.send_cmd(&[b"SET", format!("k{i}").as_bytes(), value.as_bytes()]);
        }
        for _ in 0..3000 {
            a.read_reply();
        }
    }
    cluster.site_mut(B).start();
    cluster.wait_converged(CONVERGE_TIMEOUT);
    let mut b = cluster.site(B).connect();
    assert!(
        eventually(CONVERGE_TIMEOUT, || b.reply(&["FCALL", "late", "0"])
            == Reply::bulk("late")),
        "the library never reached B"
    );
    assert!(
        cluster.site(B).log().contains("full sync received"),
        "B did not rejoin by full sync"
    );
}

/// FUNCTION STATS shows a busy function from every connection, whichever shard thread runs
/// it (Redis's unit/functions "test function kill" reads it from another connection).
#[test]
fn function_stats_shows_a_busy_function_from_every_thread() {
    let cluster = one_site(&["--busy-reply-threshold", "20", "--shards", "3"]);
    let site = cluster.site(A);
    let mut admin = site.connect();
    let lib = "#!lua name=spin\nredis.register_function('spin', function() local a = 1 while true do a = a + 1 end end)";
    assert_eq!(admin.reply(&["FUNCTION", "LOAD", lib]), Reply::bulk("spin"));
    // Connections are spread over the threads: some of these are on the runner's, some not.
    let mut others: Vec<common::Raw> = (0..4).map(|_| site.connect()).collect();
    let mut runner = site.connect();
    runner.send_cmd(&[b"FCALL", b"spin", b"0"]);
    wait_busy(&mut admin);
    for c in &mut others {
        let Reply::Array(stats) = c.reply(&["FUNCTION", "STATS"]) else {
            panic!("FUNCTION STATS is not an array")
        };
        assert_eq!(stats.first(), Some(&Reply::bulk("running_script")));
        let Some(Reply::Array(running)) = stats.get(1) else {
            panic!("no running script: {stats:?}")
        };
        assert_eq!(running.get(1), Some(&Reply::bulk("spin")), "{running:?}");
        assert_eq!(
            running.get(3),
            Some(&Reply::Array(vec![
                Reply::bulk("FCALL"),
                Reply::bulk("spin"),
                Reply::bulk("0")
            ]))
        );
    }
    assert_eq!(
        admin.reply(&["FUNCTION", "KILL"]),
        Reply::Simple("OK".to_string())
    );
    let stopped = common::parse_reply(&runner.read_reply());
    assert!(format!("{stopped:?}").contains("killed"), "{stopped:?}");
    assert_eq!(admin.reply(&["PING"]), Reply::Simple("PONG".to_string()));
    // No script runs any more: FUNCTION STATS shows none.
    match admin.reply(&["FUNCTION", "STATS"]) {
        Reply::Array(items) => assert_eq!(items.get(1), Some(&Reply::Nil), "{items:?}"),
        other => panic!("{other:?}"),
    }
}

/// Each Lua value mlua holds takes one of the state's 8,000 reference slots, and running out
/// panicked the shard, which then answered CLUSTERDOWN for good: a script returning 8,000
/// strings did it (a reply was gathered whole before it was written), and so did the
/// 7,990th cached script or registered function. Wide replies, combs deeper than
/// `REPLY_CONTAINERS_HELD_MAX` and caches of 9,000 scripts and functions now leave the
/// shard serving.
#[test]
fn wide_replies_and_many_scripts_leave_the_shard_serving() {
    let cluster = one_site(&[]);
    let site = cluster.site(A);
    let mut c = site.connect();
    let strings = c.reply(&[
        "EVAL",
        "local t = {} for i = 1, 20000 do t[i] = tostring(i) end return t",
        "0",
    ]);
    let strings = strings.strings();
    assert_eq!(strings.len(), 20_000);
    assert_eq!(strings.last().map(String::as_str), Some("20000"));
    let Reply::Array(pairs) = c.reply(&[
        "EVAL",
        "local t = {} for i = 1, 10000 do t[i] = {tostring(i), i} end return t",
        "0",
    ]) else {
        panic!("not an array")
    };
    assert_eq!(pairs.len(), 10_000);
    assert_eq!(
        pairs.last(),
        Some(&Reply::Array(vec![
            Reply::bulk("10000"),
            Reply::Int(10_000)
        ]))
    );
    // RESP3 maps and sets of 20,000 entries, each entry once.
    c.call_strs(&["HELLO", "3"]);
    let map = c.call_strs(&[
        "EVAL",
        "local m = {} for i = 1, 20000 do m['k' .. i] = i end return {map = m}",
        "0",
    ]);
    assert!(map.starts_with(b"%20000\r\n"));
    for key in [&b"$2\r\nk1\r\n:1\r\n"[..], b"$6\r\nk20000\r\n:20000\r\n"] {
        assert_eq!(map.windows(key.len()).filter(|w| *w == key).count(), 1);
    }
    let set = c.call_strs(&[
        "EVAL",
        "local s = {} for i = 1, 20000 do s['m' .. i] = true end return {set = s}",
        "0",
    ]);
    assert!(set.starts_with(b"~20000\r\n"));
    c.call_strs(&["HELLO", "2"]);
    // A comb (every level a table and a string) deeper than the containers a reply may
    // hold: the deepest part is an error element, and the reply stays well formed. Its
    // parse recurses once per level: on a thread with room for that.
    let mut deep = site.connect();
    let comb = std::thread::Builder::new()
        .stack_size(256 << 20)
        .spawn(move || {
            let raw = deep.call_strs(&[
                "EVAL",
                "local root = {} local cur = root \
                 for i = 1, 9000 do local n = {} cur[1] = n cur[2] = 'x' cur = n end \
                 return root",
                "0",
            ]);
            let text = String::from_utf8_lossy(&raw).into_owned();
            (
                common::reply_len(&raw),
                raw.len(),
                text.matches("-ERR reached lua stack limit").count(),
            )
        })
        .expect("a thread")
        .join()
        .expect("the comb's thread");
    assert_eq!(comb.0, Ok(Some(comb.1)), "one well-formed reply");
    assert_eq!(comb.2, 1, "one element past the limit");
    // 9,000 cached scripts and 9,000 functions.
    let mut pipeline = Vec::new();
    for i in 0..9_000 {
        pipeline.extend(common::cmd(&[
            b"SCRIPT",
            b"LOAD",
            format!("return {i}").as_bytes(),
        ]));
    }
    c.send(&pipeline);
    let mut shas = Vec::new();
    for _ in 0..9_000 {
        match common::parse_reply(&c.read_reply()) {
            Reply::Bulk(sha) => shas.push(String::from_utf8(sha).expect("hex")),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(c.reply(&["EVALSHA", &shas[0], "0"]), Reply::Int(0));
    assert_eq!(c.reply(&["EVALSHA", &shas[8_999], "0"]), Reply::Int(8_999));
    assert_eq!(
        c.reply(&[
            "FUNCTION",
            "LOAD",
            "#!lua name=many\n\
             for i = 1, 9000 do redis.register_function('f' .. i, function() return i end) end",
        ]),
        Reply::bulk("many")
    );
    assert_eq!(c.reply(&["FCALL", "f1", "0"]), Reply::Int(1));
    assert_eq!(c.reply(&["FCALL", "f9000", "0"]), Reply::Int(9_000));
    assert_eq!(c.reply(&["PING"]), Reply::Simple("PONG".to_string()));
    assert!(!site.log().contains("panicked"), "{}", site.log());
}

/// Flaws of Lua 5.1.5 that Redis fixed in its copy, fixed in ours (`vendor/lua-src`); each
/// case answers as Debian's redis-server 7.0.15 does. `unpack` over the widest range and
/// `bit.tohex` with the lowest width crashed the server (CVE-2025-46817, CVE-2024-31449);
/// long brackets are read with Lua 5.4's levels (CVE-2025-46819); a vararg function with
/// many fixed parameters gets its stack (CVE-2014-5461); a precompiled chunk is parsed as
/// text. The parser's use after free (CVE-2025-49844) has no deterministic trigger here.
#[test]
fn lua_flaws_redis_fixed_are_fixed_here() {
    let cluster = one_site(&[]);
    let site = cluster.site(A);
    let mut c = site.connect();
    let cases: &[(&str, Reply)] = &[
        (
            "local ok, e = pcall(unpack, {}, -2147483648, 2147483647) return e",
            Reply::bulk("too many results to unpack"),
        ),
        (
            "local ok, e = pcall(unpack, {}, 0, 2147483647) return e",
            Reply::bulk("too many results to unpack"),
        ),
        (
            "return select('#', unpack({1, 2, 3}, 2147483647, -2147483648))",
            Reply::Int(0),
        ),
        (
            "return {unpack({1, 2, 3}, 2, 3)}",
            Reply::Array(vec![Reply::Int(2), Reply::Int(3)]),
        ),
        (
            "return bit.tohex(65535, -2147483648)",
            Reply::bulk("0000FFFF"),
        ),
        (
            "return loadstring('return [==[a]]b]==]')()",
            Reply::bulk("a]]b"),
        ),
        (
            "return select(2, loadstring('return [='))",
            Reply::bulk("[string \"return [=\"]:1: invalid long string delimiter near '[='"),
        ),
        (
            "return select(2, loadstring('return [==x'))",
            Reply::bulk("[string \"return [==x\"]:1: invalid long string delimiter near '[=='"),
        ),
        ("return loadstring('--[=\\nreturn 1')()", Reply::Int(1)),
        (
            "return loadstring('--[==[ c ]] ]==] return 2')()",
            Reply::Int(2),
        ),
        (
            "return select(2, loadstring('return [==[abc'))",
            Reply::bulk("[string \"return [==[abc\"]:1: unfinished long string near '<eof>'"),
        ),
        (
            "return select(2, loadstring('x = 1 --[==[abc'))",
            Reply::bulk("[string \"x = 1 --[==[abc\"]:1: unfinished long comment near '<eof>'"),
        ),
        (
            "local p = {} for i = 1, 180 do p[i] = 'a' .. i end \
             return loadstring('local function f(' .. table.concat(p, ', ') .. \
             ', ...) return a1 end return f()')()",
            Reply::Nil,
        ),
        (
            "return select(2, loadstring(string.dump(function() return 1 end)))",
            Reply::bulk("[string \"\u{1b}LuaQ\"]:1: unexpected symbol near 'char(27)'"),
        ),
    ];
    for (script, want) in cases {
        assert_eq!(&c.reply(&["EVAL", script, "0"]), want, "{script}");
    }
    // The string metatable is shared by every script of every user: read-only
    // (CVE-2025-46818), and later scripts find string methods where they were.
    for script in [
        "local mt = getmetatable('') mt.__index = function(s, k) return 'x' end return 1",
        "getmetatable('').__index.upper = function() return 'x' end return 1",
        "rawget(getmetatable(''), '__index').upper = function() return 'x' end return 1",
        "rawset(getmetatable(''), '__index', {}) return 1",
        "setmetatable(getmetatable(''), nil) return 1",
    ] {
        let e = c.err(&["EVAL", script, "0"]);
        assert!(
            e.contains("Attempt to modify a readonly table"),
            "{script}: {e}"
        );
    }
    assert_eq!(
        c.reply(&["EVAL", "return ('abc'):upper()", "0"]),
        Reply::bulk("ABC")
    );
    assert_eq!(c.reply(&["PING"]), Reply::Simple("PONG".to_string()));
}

/// A script's value is read after its run ended, where nothing bounds time: a metatable's
/// `__index` that loops forever, on a returned error table or on a raised one, wedged the
/// shard for good (not even SCRIPT KILL or PING got an answer). The fields are read raw.
#[test]
fn a_finished_scripts_metatables_run_no_code() {
    let cluster = one_site(&[]);
    let site = cluster.site(A);
    let mut c = site.connect();
    let spin = "{__index = function() local i = 0 while true do i = i + 1 end end}";
    let returned = format!("return setmetatable({{err = 'E returned'}}, {spin})");
    assert_eq!(
        c.reply(&["EVAL", &returned, "0"]),
        Reply::Err("E returned".to_string())
    );
    let raised = format!("error(setmetatable({{err = 'E raised'}}, {spin}))");
    match c.reply(&["EVAL", &raised, "0"]) {
        Reply::Err(e) => assert!(e.starts_with("E raised"), "{e}"),
        other => panic!("{other:?}"),
    }
    let map = format!("redis.setresp(3) return {{map = setmetatable({{a = 1}}, {spin})}}");
    c.call_strs(&["HELLO", "3"]);
    assert_eq!(
        c.call_strs(&["EVAL", &map, "0"]),
        b"%1\r\n$1\r\na\r\n:1\r\n"
    );
    assert_eq!(c.reply(&["PING"]), Reply::Simple("PONG".to_string()));
}
