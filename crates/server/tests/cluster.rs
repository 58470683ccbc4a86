//! The Redis Cluster API (`--cluster-api`): one endpoint per shard with a stable node id,
//! CLUSTER SLOTS/SHARDS/NODES/INFO/MYID/KEYSLOT/COUNTKEYSINSLOT/GETKEYSINSLOT in Redis 7.0's
//! shapes, MOVED and CROSSSLOT on the endpoints (never MOVED on the main port), READONLY,
//! READWRITE and ASKING, the answers of a server with the API off, and cluster clients used
//! unchanged: `redis-cli -c`, `redis-benchmark --cluster`, redis-py's `RedisCluster` and
//! `memtier_benchmark --cluster-mode` (each run when installed: `MERIDIAN_PYTHON` names a
//! Python with the `redis` package, `MERIDIAN_MEMTIER` a memtier_benchmark binary).

mod common;

use std::collections::BTreeSet;
use std::process::Command;

use common::text::{call, s};
use common::{Raw, Reply, Server, key_slot};

struct Cl {
    srv: Server,
    base: u16,
}

impl Cl {
    fn start(shards: u16) -> Cl {
        let base = common::free_ports(shards);
        let srv = Server::start_with(&[
            "--shards",
            &shards.to_string(),
            "--cluster-api",
            "yes",
            "--cluster-endpoint-port",
            &base.to_string(),
        ]);
        for i in 0..shards {
            // Endpoints listen once every shard is open.
            let deadline = std::time::Instant::now() + common::START_TIMEOUT;
            while std::net::TcpStream::connect(("127.0.0.1", base + i)).is_err() {
                assert!(std::time::Instant::now() < deadline, "endpoint {i}");
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        }
        Cl { srv, base }
    }

    fn endpoint(&self, shard: u16) -> Raw {
        Raw::connect(self.base + shard)
    }
}

/// The shard of `n` owning `slot` in `redis-cli --cluster create`'s layout.
fn owner(slot: u16, n: u16) -> u16 {
    let per = 16384.0 / f64::from(n);
    let mut cursor = 0.0f64;
    let mut first = 0u32;
    for shard in 0..n {
        let mut last = (cursor + per - 1.0).round() as u32;
        if last > 16383 || shard == n - 1 {
            last = 16383;
        }
        if (first..=last).contains(&u32::from(slot)) {
            return shard;
        }
        first = last + 1;
        cursor += per;
    }
    n - 1
}

/// A key on shard `shard` of `n`.
fn key_on(shard: u16, n: u16) -> String {
    (0..100_000)
        .map(|i| format!("key:{i}"))
        .find(|k| owner(key_slot(k), n) == shard)
        .expect("a key")
}

#[test]
fn cluster_commands_describe_one_node_per_shard() {
    let cl = Cl::start(3);
    let mut main = cl.srv.connect();
    // CLUSTER SLOTS: three ranges, each [start, end, [ip, port, id, {}]].
    let Reply::Array(ranges) = main.reply(&["CLUSTER", "SLOTS"]) else {
        panic!("slots")
    };
    assert_eq!(ranges.len(), 3);
    let mut ids = Vec::new();
    for (i, r) in ranges.iter().enumerate() {
        let Reply::Array(r) = r else { panic!("range") };
        assert_eq!(r.len(), 3);
        let Reply::Array(node) = &r[2] else {
            panic!("node")
        };
        assert_eq!(node[0], Reply::bulk("127.0.0.1"));
        assert_eq!(node[1], Reply::Int(i64::from(cl.base) + i as i64));
        let Reply::Bulk(id) = &node[2] else {
            panic!("id")
        };
        assert_eq!(id.len(), 40);
        assert_eq!(node[3], Reply::Array(vec![]));
        ids.push(s(id));
    }
    assert_eq!(
        ranges[0],
        Reply::Array(vec![
            Reply::Int(0),
            Reply::Int(5460),
            Reply::Array(vec![
                Reply::bulk("127.0.0.1"),
                Reply::Int(i64::from(cl.base)),
                Reply::bulk(&ids[0]),
                Reply::Array(vec![])
            ])
        ])
    );
    // The same ids in NODES, SHARDS and MYID, on every endpoint.
    for shard in 0..3u16 {
        let mut e = cl.endpoint(shard);
        assert_eq!(
            e.reply(&["CLUSTER", "MYID"]),
            Reply::bulk(&ids[usize::from(shard)])
        );
        let nodes = s(&e.call_strs(&["CLUSTER", "NODES"]));
        let text = nodes.split_once("\r\n").map(|x| x.1).unwrap_or_default();
        let lines: Vec<&str> = text.lines().filter(|l| !l.is_empty()).collect();
        assert_eq!(lines.len(), 3, "{nodes}");
        for (i, l) in lines.iter().enumerate() {
            let f: Vec<&str> = l.split(' ').collect();
            assert_eq!(f[0], ids[i]);
            assert_eq!(f[1], format!("127.0.0.1:{}@0", cl.base + i as u16));
            let flags = if i == usize::from(shard) {
                "myself,master"
            } else {
                "master"
            };
            assert_eq!(f[2], flags);
            assert_eq!(f[3], "-");
            assert_eq!(f[7], "connected");
        }
        assert!(text.ends_with("\n"));
        assert_eq!(
            e.reply(&["CLUSTER", "KEYSLOT", "{user1}.x"]),
            Reply::Int(i64::from(key_slot("user1")))
        );
    }
    // The main port is no node: no "myself".
    let nodes = call(&mut main, &["CLUSTER", "NODES"]);
    assert!(!nodes.contains("myself"), "{nodes}");
    let shards = call(&mut main, &["CLUSTER", "SHARDS"]);
    for id in &ids {
        assert!(shards.contains(id.as_str()), "{shards}");
    }
    assert!(shards.starts_with(
        "*3\r\n*4\r\n$5\r\nslots\r\n*2\r\n:0\r\n:5460\r\n$5\r\nnodes\r\n*1\r\n*14\r\n$2\r\nid\r\n"
    ));
    let info = call(&mut main, &["CLUSTER", "INFO"]);
    assert!(info.contains("cluster_state:ok\r\n"), "{info}");
    assert!(info.contains("cluster_known_nodes:3\r\n"), "{info}");
    assert!(info.contains("cluster_slots_assigned:16384\r\n"), "{info}");
    let server = call(&mut main, &["INFO", "cluster"]);
    assert!(server.contains("cluster_enabled:1"), "{server}");
    assert_eq!(call(&mut main, &["READONLY"]), "+OK\r\n");
    assert_eq!(call(&mut main, &["READWRITE"]), "+OK\r\n");
    assert_eq!(call(&mut main, &["ASKING"]), "+OK\r\n");
    // Slot management does not exist here: an unknown subcommand, as for any other (and
    // refused inside a script by its flags).
    assert_eq!(
        call(&mut main, &["CLUSTER", "ADDSLOTS", "1"]),
        "-ERR unknown subcommand 'ADDSLOTS'. Try CLUSTER HELP.\r\n"
    );
    assert_eq!(
        call(&mut main, &["CLUSTER", "reset"]),
        "-ERR unknown subcommand 'reset'. Try CLUSTER HELP.\r\n"
    );
    refused_in_a_script(&mut main, "return redis.call('cluster', 'reset')");
    assert_eq!(
        call(&mut main, &["CLUSTER", "COUNTKEYSINSLOT", "16384"]),
        "-ERR Invalid slot\r\n"
    );
    assert_eq!(
        call(&mut main, &["CLUSTER", "GETKEYSINSLOT", "1", "-1"]),
        "-ERR Invalid slot or number of keys\r\n"
    );
    // COUNTKEYSINSLOT / GETKEYSINSLOT on the main port ask the slot's shard.
    let k = key_on(2, 3);
    assert_eq!(call(&mut main, &["SET", &k, "v"]), "+OK\r\n");
    let slot = key_slot(&k).to_string();
    assert_eq!(
        call(&mut main, &["CLUSTER", "COUNTKEYSINSLOT", &slot]),
        ":1\r\n"
    );
    assert_eq!(
        main.reply(&["CLUSTER", "GETKEYSINSLOT", &slot, "10"]),
        Reply::Array(vec![Reply::bulk(&k)])
    );
}

#[test]
fn endpoints_redirect_and_the_main_port_does_not() {
    let cl = Cl::start(3);
    let mut main = cl.srv.connect();
    let keys: Vec<String> = (0..3).map(|i| key_on(i, 3)).collect();
    for k in &keys {
        assert_eq!(call(&mut main, &["SET", k, k]), "+OK\r\n");
    }
    for shard in 0..3u16 {
        let mut e = cl.endpoint(shard);
        for (i, k) in keys.iter().enumerate() {
            let got = call(&mut e, &["GET", k]);
            if i == usize::from(shard) {
                assert_eq!(got, format!("${}\r\n{k}\r\n", k.len()));
            } else {
                assert_eq!(
                    got,
                    format!(
                        "-MOVED {} 127.0.0.1:{}\r\n",
                        key_slot(k),
                        cl.base + i as u16
                    )
                );
            }
        }
        // Two slots of this very node: still CROSSSLOT, as a cluster node answers.
        let mine: Vec<String> = (0..100_000)
            .map(|i| format!("m{i}"))
            .filter(|k| {
                let per = 16384 / 3;
                u16::try_from(u32::from(key_slot(k)) / per)
                    .unwrap_or(9)
                    .min(2)
                    == shard
            })
            .take(2)
            .collect();
        assert_ne!(key_slot(&mine[0]), key_slot(&mine[1]));
        assert_eq!(
            call(&mut e, &["MGET", &mine[0], &mine[1]]),
            "-CROSSSLOT Keys in request don't hash to the same slot\r\n"
        );
        // A transaction with a key elsewhere: the queued command is redirected, EXEC aborts.
        assert_eq!(call(&mut e, &["MULTI"]), "+OK\r\n");
        let other = &keys[(usize::from(shard) + 1) % 3];
        assert!(call(&mut e, &["GET", other]).starts_with("-MOVED"));
        assert_eq!(
            call(&mut e, &["EXEC"]),
            "-EXECABORT Transaction discarded because of previous errors.\r\n"
        );
        // DBSIZE on a node counts that node's keys.
        assert_eq!(call(&mut e, &["DBSIZE"]), ":1\r\n");
    }
    // The main port serves every key and never redirects.
    assert_eq!(
        call(&mut main, &["MGET", &keys[0], &keys[1], &keys[2]])
            .matches('$')
            .count(),
        3
    );
    assert_eq!(call(&mut main, &["DBSIZE"]), ":3\r\n");
    let stats = call(&mut main, &["INFO", "errorstats"]);
    assert!(stats.contains("errorstat_MOVED:count="), "{stats}");
}

#[test]
fn with_the_api_off_cluster_commands_answer_as_redis_without_cluster() {
    let srv = Server::start_with(&["--shards", "1"]);
    let mut c = srv.connect();
    let off = "-ERR This instance has cluster support disabled\r\n";
    for cmd in [
        &["CLUSTER", "INFO"][..],
        &["CLUSTER", "SLOTS"],
        &["CLUSTER", "NODES"],
        &["CLUSTER", "KEYSLOT", "x"],
        &["READONLY"],
        &["READWRITE"],
        &["ASKING"],
        // Subcommands with no counterpart here answer as Redis's with cluster support off.
        &["CLUSTER", "RESET", "HARD"],
        &["CLUSTER", "ADDSLOTS", "1"],
        &["CLUSTER", "SETSLOT", "1", "STABLE"],
        &["CLUSTER", "LINKS"],
    ] {
        assert_eq!(call(&mut c, cmd), off, "{cmd:?}");
    }
    // Inside a script, CLUSTER RESET is refused by its flags first, as Redis refuses it.
    refused_in_a_script(&mut c, "return redis.call('cluster', 'reset', 'hard')");
    assert_eq!(
        call(&mut c, &["CLUSTER", "NOPE"]),
        "-ERR unknown subcommand 'NOPE'. Try CLUSTER HELP.\r\n"
    );
    let info = call(&mut c, &["INFO", "cluster"]);
    assert!(info.contains("cluster_enabled:0"), "{info}");
    let hello = call(&mut c, &["HELLO", "3"]);
    assert!(hello.contains("standalone"), "{hello}");
}

/// EVAL of `script` (no keys) answers Redis's refusal of a `noscript` command.
fn refused_in_a_script(c: &mut Raw, script: &str) {
    let r = call(c, &["EVAL", script, "0"]);
    assert!(
        r.starts_with("-ERR This Redis command is not allowed from script"),
        "{r}"
    );
}

fn tool(name: &str, env: &str) -> Option<String> {
    if let Ok(p) = std::env::var(env) {
        return Some(p);
    }
    let found = Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {name}"))
        .output()
        .ok()?;
    found
        .status
        .success()
        .then(|| s(&found.stdout).trim().to_string())
}

#[test]
fn redis_cli_follows_moved_and_redis_benchmark_runs_in_cluster_mode() {
    let cl = Cl::start(3);
    let Some(cli) = tool("redis-cli", "MERIDIAN_REDIS_CLI") else {
        eprintln!("redis-cli not installed: skipped");
        return;
    };
    let port = cl.base.to_string();
    for i in 0..30 {
        let out = Command::new(&cli)
            .args([
                "-c",
                "-p",
                &port,
                "SET",
                &format!("cli:{i}"),
                &i.to_string(),
            ])
            .output()
            .expect("redis-cli");
        assert_eq!(s(&out.stdout).trim(), "OK", "{}", s(&out.stderr));
    }
    let mut main = cl.srv.connect();
    assert_eq!(call(&mut main, &["DBSIZE"]), ":30\r\n");
    let out = Command::new(&cli)
        .args(["-c", "-p", &port, "GET", "cli:29"])
        .output()
        .expect("redis-cli");
    assert_eq!(s(&out.stdout).trim(), "29");
    let Some(bench) = tool("redis-benchmark", "MERIDIAN_REDIS_BENCHMARK") else {
        eprintln!("redis-benchmark not installed: skipped");
        return;
    };
    let out = Command::new(&bench)
        .args([
            "--cluster",
            "-p",
            &port,
            "-n",
            "3000",
            "-c",
            "6",
            "-t",
            "set,get",
            "-q",
        ])
        .output()
        .expect("redis-benchmark");
    let text = format!("{}{}", s(&out.stdout), s(&out.stderr));
    assert!(out.status.success(), "{text}");
    assert!(text.contains("SET:") && text.contains("GET:"), "{text}");
    assert!(!text.to_lowercase().contains("error"), "{text}");
    // Its keys landed on every shard.
    let info = call(&mut main, &["INFO", "commandstats"]);
    assert!(info.contains("cmdstat_set:calls="), "{info}");
}

#[test]
fn redis_py_cluster_client_and_memtier_cluster_mode() {
    let cl = Cl::start(3);
    let port = cl.base.to_string();
    let python = tool("python3", "MERIDIAN_PYTHON");
    let has_redis_py = python.as_ref().is_some_and(|p| {
        Command::new(p)
            .args(["-c", "import redis"])
            .status()
            .is_ok_and(|st| st.success())
    });
    if has_redis_py {
        let script = format!(
            r#"
from redis.cluster import RedisCluster
rc = RedisCluster(host="127.0.0.1", port={port}, decode_responses=True)
assert len(rc.get_primaries()) == 3, rc.get_primaries()
for i in range(200):
    rc.set(f"py:{{i}}", i)
assert all(rc.get(f"py:{{i}}") == str(i) for i in range(200))
rc.mset_nonatomic({{f"m:{{i}}": i for i in range(50)}})
assert rc.mget_nonatomic([f"m:{{i}}" for i in range(50)]) == [str(i) for i in range(50)]
p = rc.pipeline()
for i in range(100):
    p.incr(f"c:{{i % 7}}")
p.execute()
assert sum(int(rc.get(f"c:{{i}}")) for i in range(7)) == 100
print(rc.dbsize())
"#
        );
        let out = Command::new(python.as_deref().unwrap_or("python3"))
            .args(["-c", &script])
            .output()
            .expect("python");
        assert!(out.status.success(), "{}{}", s(&out.stdout), s(&out.stderr));
        let mut main = cl.srv.connect();
        assert_eq!(call(&mut main, &["DBSIZE"]), ":257\r\n");
    } else {
        eprintln!("no Python with the redis package (MERIDIAN_PYTHON): redis-py skipped");
    }
    let Some(memtier) = tool("memtier_benchmark", "MERIDIAN_MEMTIER") else {
        eprintln!("memtier_benchmark not installed (MERIDIAN_MEMTIER): skipped");
        return;
    };
    let out = Command::new(&memtier)
        .args([
            "-s",
            "127.0.0.1",
            "-p",
            &port,
            "--cluster-mode",
            "--protocol=redis",
            "-t",
            "1",
            "-c",
            "4",
            "-n",
            "500",
            "--ratio=1:1",
            "--key-pattern=R:R",
            "--hide-histogram",
        ])
        .output()
        .expect("memtier");
    let text = format!("{}{}", s(&out.stdout), s(&out.stderr));
    assert!(out.status.success(), "{text}");
    assert!(text.contains("Totals"), "{text}");
    let mut seen = BTreeSet::new();
    let mut main = cl.srv.connect();
    for shard in 0..3u16 {
        let mut e = cl.endpoint(shard);
        let n: i64 = call(&mut e, &["DBSIZE"])
            .trim_start_matches(':')
            .trim()
            .parse()
            .unwrap_or(0);
        if n > 0 {
            seen.insert(shard);
        }
    }
    assert_eq!(seen.len(), 3, "memtier's keys reached every shard");
    let stats = call(&mut main, &["INFO", "commandstats"]);
    assert!(stats.contains("cmdstat_set:"), "{stats}");
}
