//! Defects found by running client libraries' own test suites against Meridian (redis-py
//! 8.1.0's, docs/compatibility.md), each checked over a real socket against the reply Redis
//! 7.0.15 gives, and against Debian's `redis-server` itself when it is installed.

mod common;

use common::{Raw, RedisRef, Server};

fn call(c: &mut Raw, args: &[&str]) -> String {
    let argv: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
    String::from_utf8_lossy(&c.call(&argv)).into_owned()
}

const MODULE_NOT_ALLOWED: &str = "-ERR MODULE command not allowed. If the enable-module-command option is set to \"local\", you can run it from a local connection, otherwise you need to set this option in the configuration file, and then restart the server.\r\n";

/// The MODULE and REPLICAOF cases redis-py's `test_module_list` and `test_replicaof` run,
/// with the replies of a standalone Redis 7.0.15 with no module loaded.
fn standalone_cases() -> Vec<(Vec<&'static str>, String)> {
    let help = [
        "MODULE <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "LIST",
        "    Return a list of loaded modules.",
        "LOAD <path> [<arg> ...]",
        "    Load a module library from <path>, passing to it any optional arguments.",
        "LOADEX <path> [[CONFIG NAME VALUE] [CONFIG NAME VALUE]] [ARGS ...]",
        "    Load a module library from <path>, while passing it module configurations and optional arguments.",
        "UNLOAD <name>",
        "    Unload a module.",
        "HELP",
        "    Prints this help.",
    ];
    let mut help_reply = format!("*{}\r\n", help.len());
    for l in help {
        help_reply.push_str(&format!("+{l}\r\n"));
    }
    vec![
        (vec!["MODULE", "LIST"], "*0\r\n".to_string()),
        (vec!["module", "list"], "*0\r\n".to_string()),
        (vec!["MODULE", "HELP"], help_reply),
        (
            vec!["MODULE", "LOAD", "/nonexistent/module.so"],
            MODULE_NOT_ALLOWED.to_string(),
        ),
        (
            vec!["MODULE", "LOADEX", "/nonexistent/module.so", "ARGS", "a"],
            MODULE_NOT_ALLOWED.to_string(),
        ),
        (
            vec!["MODULE", "UNLOAD", "search"],
            MODULE_NOT_ALLOWED.to_string(),
        ),
        (vec!["REPLICAOF", "NO", "ONE"], "+OK\r\n".to_string()),
        (vec!["replicaof", "no", "one"], "+OK\r\n".to_string()),
        (vec!["SLAVEOF", "NO", "ONE"], "+OK\r\n".to_string()),
        (
            vec!["REPLICAOF", "NO ONE"],
            "-ERR wrong number of arguments for 'replicaof' command\r\n".to_string(),
        ),
        (
            vec!["REPLICAOF", "127.0.0.1", "notaport"],
            "-ERR Invalid master port\r\n".to_string(),
        ),
        (
            vec!["REPLICAOF", "127.0.0.1", "65536"],
            "-ERR Invalid master port\r\n".to_string(),
        ),
    ]
}

#[test]
fn module_and_replicaof_answer_as_a_standalone_redis_with_no_module() {
    let s = Server::start_single();
    let mut c = s.connect();
    let reference = RedisRef::available().then(RedisRef::start);
    let mut r = reference.as_ref().map(RedisRef::connect);
    for (args, want) in standalone_cases() {
        assert_eq!(call(&mut c, &args), want, "{args:?}");
        if let Some(r) = r.as_mut() {
            assert_eq!(call(r, &args), want, "redis-server: {args:?}");
        }
    }
    // Meridian never becomes a copy of a Redis primary: refused, and nothing changed.
    let refused = call(&mut c, &["REPLICAOF", "127.0.0.1", "6379"]);
    assert!(
        refused.starts_with("-ERR REPLICAOF host port is not supported"),
        "{refused}"
    );
    assert_eq!(call(&mut c, &["SET", "k", "v"]), "+OK\r\n");
    assert_eq!(
        call(&mut c, &["ROLE"]),
        "*3\r\n$6\r\nmaster\r\n:0\r\n*0\r\n"
    );
}

#[test]
fn replicaof_is_refused_as_in_redis_cluster_when_the_cluster_api_is_on() {
    let s = Server::start_with(&["--shards", "3"]);
    let mut c = s.connect();
    assert_eq!(
        call(&mut c, &["REPLICAOF", "NO", "ONE"]),
        "-ERR REPLICAOF not allowed in cluster mode.\r\n"
    );
    assert_eq!(call(&mut c, &["MODULE", "LIST"]), "*0\r\n");
}

/// redis-py's `test_pubsub_numsub_merge_results`, `test_pubsub_channels_merge_results` and
/// `test_cluster_pubsub_numsub` (test_cluster.py): a cluster client asks every node and adds
/// the answers, so each cluster endpoint answers PUBSUB for the subscribers connected through
/// it, as each Redis Cluster node does; the main port (no node) answers for all of them.
#[test]
fn pubsub_counts_on_a_cluster_endpoint_are_that_nodes_own() {
    let s = Server::start_with(&["--shards", "3"]);
    let endpoint = |k: u16| Raw::connect(s.port + 1 + k);
    let mut a = endpoint(0);
    let mut b = endpoint(1);
    let mut p = endpoint(2);
    let mut m = s.connect();
    let subscribed = |n: usize| format!("*3\r\n$9\r\nsubscribe\r\n$4\r\nnews\r\n:{n}\r\n");
    assert_eq!(call(&mut a, &["SUBSCRIBE", "news"]), subscribed(1));
    assert_eq!(call(&mut b, &["SUBSCRIBE", "news"]), subscribed(1));
    assert_eq!(call(&mut m, &["SUBSCRIBE", "news"]), subscribed(1));
    assert_eq!(
        call(&mut p, &["PSUBSCRIBE", "n*"]),
        "*3\r\n$10\r\npsubscribe\r\n$2\r\nn*\r\n:1\r\n"
    );

    let mut ask = [endpoint(0), endpoint(1), endpoint(2)];
    let numsub = |n: i64| format!("*2\r\n$4\r\nnews\r\n:{n}\r\n");
    for (k, (subs, channels, pats)) in [
        (1, "*1\r\n$4\r\nnews\r\n", 0),
        (1, "*1\r\n$4\r\nnews\r\n", 0),
        (0, "*0\r\n", 1),
    ]
    .into_iter()
    .enumerate()
    {
        let c = &mut ask[k];
        assert_eq!(
            call(c, &["PUBSUB", "NUMSUB", "news"]),
            numsub(subs),
            "endpoint {k}"
        );
        assert_eq!(call(c, &["PUBSUB", "CHANNELS"]), channels, "endpoint {k}");
        assert_eq!(
            call(c, &["PUBSUB", "NUMPAT"]),
            format!(":{pats}\r\n"),
            "endpoint {k}"
        );
    }
    let mut main = s.connect();
    assert_eq!(call(&mut main, &["PUBSUB", "NUMSUB", "news"]), numsub(3));
    assert_eq!(
        call(&mut main, &["PUBSUB", "CHANNELS", "ne*"]),
        "*1\r\n$4\r\nnews\r\n"
    );
    assert_eq!(call(&mut main, &["PUBSUB", "NUMPAT"]), ":1\r\n");
    // A message still reaches every subscriber, whichever port it came in on.
    assert_eq!(call(&mut ask[2], &["PUBLISH", "news", "hi"]), ":4\r\n");
}

/// ioredis's `should try to use EVALSHA and fallback to EVAL if fails` (scripting.ts) with
/// several shards: a script EVAL cached (on the shard owning its key) is then run by EVALSHA
/// on keys every other shard owns, and SCRIPT EXISTS finds it on any connection, as Redis's
/// one script cache does; SCRIPT FLUSH empties it for every shard.
#[test]
fn a_script_eval_cached_runs_by_sha_on_every_shard() {
    let s = Server::start_with(&["--shards", "3"]);
    let mut c = s.connect();
    let body = "return redis.call('get', KEYS[1])";
    let sha = "4e6d8fc8bb01276962cce5371fa795a7763657ae";
    let keys: Vec<String> = (0..24).map(|i| format!("key{i}")).collect();
    assert_eq!(call(&mut c, &["SET", "key0", "v"]), "+OK\r\n");
    assert_eq!(call(&mut c, &["EVAL", body, "1", "key0"]), "$1\r\nv\r\n");
    // Connections are spread over the shard threads: each answers SCRIPT EXISTS.
    for _ in 0..6 {
        let mut other = s.connect();
        assert_eq!(call(&mut other, &["SCRIPT", "EXISTS", sha]), "*1\r\n:1\r\n");
    }
    for k in &keys[1..] {
        assert_eq!(call(&mut c, &["EVALSHA", sha, "1", k]), "$-1\r\n", "{k}");
    }
    assert_eq!(call(&mut c, &["EVALSHA", sha, "1", "key0"]), "$1\r\nv\r\n");
    assert_eq!(call(&mut c, &["SCRIPT", "FLUSH"]), "+OK\r\n");
    for k in &keys {
        assert_eq!(
            call(&mut c, &["EVALSHA", sha, "1", k]),
            "-NOSCRIPT No matching script. Please use EVAL.\r\n",
            "{k}"
        );
    }
    for _ in 0..6 {
        let mut other = s.connect();
        assert_eq!(call(&mut other, &["SCRIPT", "EXISTS", sha]), "*1\r\n:0\r\n");
    }
    // A script another shard cached keeps its shebang flags: a no-writes script runs by
    // EVALSHA_RO anywhere, and by EVALSHA during CLIENT PAUSE WRITE, as Redis reads the
    // flags of a cached script before running it.
    let ro = "#!lua flags=no-writes\nreturn redis.call('get', KEYS[1])";
    let ro_sha = "8822dee64c14b51d475f4b45eb44843318ccc8e1";
    assert_eq!(call(&mut c, &["EVAL", ro, "1", "key0"]), "$1\r\nv\r\n");
    for k in &keys[1..] {
        assert_eq!(
            call(&mut c, &["EVALSHA_RO", ro_sha, "1", k]),
            "$-1\r\n",
            "{k}"
        );
    }
    assert_eq!(call(&mut c, &["SCRIPT", "FLUSH"]), "+OK\r\n");
    assert_eq!(call(&mut c, &["EVAL", ro, "1", "key0"]), "$1\r\nv\r\n");
    let mut admin = s.connect();
    assert_eq!(
        call(&mut admin, &["CLIENT", "PAUSE", "20000", "WRITE"]),
        "+OK\r\n"
    );
    for k in &keys[1..] {
        assert_eq!(call(&mut c, &["EVALSHA", ro_sha, "1", k]), "$-1\r\n", "{k}");
    }
    assert_eq!(call(&mut admin, &["CLIENT", "UNPAUSE"]), "+OK\r\n");
}
