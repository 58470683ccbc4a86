//! Operating a Meridian process: start-up errors, the log, `-LOADING` while the data loads,
//! the help text and `meridian config check`.

mod common;

use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::disk::Node;
use common::{Raw, free_port};

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_meridian")
}

/// Runs `meridian args…` to its end (at most 20 s) and returns (exit code, stdout, stderr).
fn run_to_end(args: &[&str], envs: &[(&str, &str)]) -> (Option<i32>, String, String) {
    let mut child = Command::new(bin())
        .args(args)
        .envs(envs.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn meridian");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(Some(_)) = child.try_wait() {
            break;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!(
                "meridian {args:?} kept running (it must exit); stdout:\n{}\nstderr:\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().expect("output");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn start_up_mistakes_are_one_line_errors_with_a_non_zero_exit() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let data = dir.join("data").display().to_string();
    std::fs::write(dir.join("malformed.toml"), "port = \n").unwrap();
    std::fs::write(dir.join("unknown.toml"), "hz = 10\nno-such-key = 1\n").unwrap();
    std::fs::write(dir.join("a-file"), "").unwrap();
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let busy_port = busy.local_addr().unwrap().port().to_string();
    let port = free_port().to_string();
    let file_as_dir = dir.join("a-file/data").display().to_string();
    let log_in_missing_dir = dir.join("no-such-dir/meridian.log").display().to_string();
    let malformed = dir.join("malformed.toml").display().to_string();
    let unknown = dir.join("unknown.toml").display().to_string();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["--config", &malformed], "line 1, column 8"),
        (vec!["--config", &unknown], "unknown field `no-such-key`"),
        (
            vec!["--port", &port, "--dir", &file_as_dir],
            "data directory",
        ),
        (
            vec![
                "--port",
                &port,
                "--dir",
                &data,
                "--log-file",
                &log_in_missing_dir,
            ],
            "cannot open log file",
        ),
        (
            vec!["--port", &busy_port, "--dir", &data],
            "cannot listen on",
        ),
        (
            vec![
                "--port",
                &port,
                "--dir",
                &data,
                "--site",
                "a",
                "--sync-port",
                "1",
                "--peer",
                "b=no-such-site.invalid:7102",
                "--sync-tls-cert",
                "c",
                "--sync-tls-key",
                "k",
                "--sync-tls-ca",
                "ca",
            ],
            "peer b: cannot resolve no-such-site.invalid:7102",
        ),
        (vec!["--port", &port, "--log-format", "xml"], "log-format"),
    ];
    for (flags, want) in cases {
        let mut args = vec!["server"];
        args.extend(flags.iter().copied());
        let (code, stdout, stderr) = run_to_end(&args, &[("RUST_BACKTRACE", "1")]);
        let what = format!("{args:?}\nstdout:\n{stdout}\nstderr:\n{stderr}");
        assert!(code.is_some_and(|c| c != 0), "exit {code:?}: {what}");
        let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
        assert_eq!(lines.len(), 1, "one line on stderr: {what}");
        assert!(lines[0].starts_with("meridian: "), "{what}");
        assert!(lines[0].contains(want), "want {want:?}: {what}");
        assert!(
            !stderr.contains("panicked") && !stderr.contains("backtrace"),
            "{what}"
        );
        assert!(!stdout.contains("ready to accept connections"), "{what}");
    }
}

#[test]
fn config_check_validates_a_file() {
    let tmp = tempfile::tempdir().unwrap();
    let good = tmp.path().join("good.toml");
    std::fs::write(&good, "port = 7001\nsite = \"a\"\n").unwrap();
    let bad = tmp.path().join("bad.toml");
    std::fs::write(&bad, "port = 7001\nhz = 0\n").unwrap();
    let example = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../deploy/meridian.example.toml"
    );
    for (file, ok) in [
        (good.to_str().unwrap(), true),
        (example, true),
        (bad.to_str().unwrap(), false),
    ] {
        let (code, stdout, _) = run_to_end(&["config", "check", file], &[]);
        assert_eq!(code, Some(if ok { 0 } else { 1 }), "{file}: {stdout}");
        if ok {
            assert_eq!(stdout.trim(), format!("{file}: OK"));
        } else {
            assert!(stdout.contains("config key 'hz'"), "{stdout}");
        }
    }
}

#[test]
fn help_describes_every_flag_with_its_default_and_hides_test_flags() {
    let (code, help, _) = run_to_end(&["server", "--help"], &[]);
    assert_eq!(code, Some(0));
    assert!(
        !help.contains("--debug-"),
        "test-only flags are hidden:\n{help}"
    );
    let defaults: toml::Table =
        toml::from_str(include_str!("../../../deploy/meridian.example.toml")).unwrap();
    // Each flag's entry: from its `--name` line to the next flag's.
    let mut entries: Vec<String> = Vec::new();
    for line in help.lines() {
        let t = line.trim_start();
        if t.starts_with("--") || t.starts_with("-h,") {
            entries.push(
                t.trim_start_matches("-h, ")
                    .trim_start_matches('-')
                    .to_string(),
            );
        } else if let Some(e) = entries.last_mut() {
            e.push(' ');
            e.push_str(t);
        }
    }
    for (key, value) in &defaults {
        if key.starts_with("debug-") {
            continue;
        }
        let entry = entries
            .iter()
            .find(|e| e.starts_with(&format!("{key} ")))
            .unwrap_or_else(|| panic!("no --{key} in help:\n{help}"));
        let shown = match value {
            toml::Value::String(s) if s.is_empty() => "\"\"".to_string(),
            toml::Value::String(s) => s.clone(),
            toml::Value::Boolean(b) => if *b { "yes" } else { "no" }.to_string(),
            toml::Value::Array(a) if a.is_empty() => "none".to_string(),
            other => other.to_string(),
        };
        let flat = entry.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            flat.contains(&format!("[default: {shown}]")),
            "--{key}: want [default: {shown}] in {flat:?}"
        );
        // A description besides the default.
        let described = flat
            .split("[default")
            .next()
            .unwrap_or("")
            .split_whitespace()
            .count();
        assert!(described >= 3, "--{key} has no description: {flat:?}");
    }
}

/// Writes `keys` keys with MSET, 1000 at a time.
fn fill(c: &mut Raw, keys: usize) {
    let mut n = 0;
    while n < keys {
        let mut args: Vec<Vec<u8>> = vec![b"MSET".to_vec()];
        for i in n..(n + 1000).min(keys) {
            args.push(format!("key:{i}").into_bytes());
            args.push(format!("value-{i}").into_bytes());
        }
        let refs: Vec<&[u8]> = args.iter().map(|a| a.as_slice()).collect();
        assert_eq!(c.call(&refs), b"+OK\r\n");
        n += 1000;
    }
}

#[test]
fn clients_get_loading_while_the_data_loads_and_keep_their_connection() {
    // 3 ms per log record replayed (`key-load-delay`, Redis's test hook): about 6 s of loading.
    const KEYS: usize = 2_000;
    let tmp = tempfile::tempdir().unwrap();
    let conf = tmp.path().join("slow.toml");
    std::fs::write(&conf, "key-load-delay = 3000\nsave = \"\"\n").unwrap();
    let conf = conf.display().to_string();
    let metrics_port = free_port().to_string();
    let mut node = Node::start_new(&["--metrics-port", &metrics_port, "--config", &conf]);
    let metrics_port: u16 = metrics_port.parse().unwrap();
    fill(&mut node.connect(), KEYS);
    node.kill();
    // Start again and connect as soon as the port takes connections.
    node.spawn();
    let deadline = Instant::now() + Duration::from_secs(30);
    let early = loop {
        if let Ok(s) = TcpStream::connect(("127.0.0.1", node.port)) {
            break s;
        }
        assert!(Instant::now() < deadline, "port never opened");
        std::thread::sleep(Duration::from_millis(2));
    };
    let mut early = Raw::from_stream(early);
    let first = early.call(&[b"PING"]);
    assert_eq!(
        String::from_utf8_lossy(&first),
        "-LOADING Redis is loading the dataset in memory\r\n",
        "PING right after start, with {KEYS} keys to load"
    );
    let (status, body) = http_get(metrics_port, "/health");
    assert_eq!(status, 503, "{body}");
    assert!(body.starts_with("{\"status\":\"loading\""), "{body}");
    // Errors that come before the loading check in Redis come first here too.
    assert_eq!(
        early.call(&[b"GET"]),
        b"-ERR wrong number of arguments for 'get' command\r\n"
    );
    // Half a command now, the rest once loaded: the connection is handed to the shard with it.
    early.send(b"*2\r\n$3\r\nGET\r\n$8\r\nkey:");
    assert!(
        common::disk::eventually(Duration::from_secs(60), || common::serves(node.port)),
        "never loaded; log:\n{}",
        node.last_log()
    );
    assert_eq!(http_get(metrics_port, "/health").0, 200);
    early.send(b"1234\r\n");
    assert_eq!(early.read_reply(), b"$10\r\nvalue-1234\r\n");
    assert_eq!(early.call(&[b"DBSIZE"]), format!(":{KEYS}\r\n").as_bytes());
    let log = node.last_log();
    let loaded = log.find("data loaded").expect("data loaded line");
    let ready = log.find("ready to accept connections").expect("ready line");
    assert!(loaded < ready, "ready only after the data loaded:\n{log}");
}

#[test]
fn log_lines_name_the_site_carry_no_colour_and_follow_the_format() {
    let tmp = tempfile::tempdir().unwrap();
    // Text to standard output (a file here: no terminal, so no colour codes).
    let node = common::Server::start_with(&["--site", "paris"]);
    let mut c = node.connect();
    assert_eq!(c.call(&[b"PING"]), b"+PONG\r\n");
    let log = node.log();
    assert!(log.contains("ready to accept connections"), "{log}");
    for line in log.lines() {
        assert!(!line.contains('\u{1b}'), "colour code in {line:?}");
        assert!(line.contains(" site=paris: "), "no site in {line:?}");
    }
    drop(node);
    // JSON to a log file, reopened by SIGHUP after a rotation.
    let file = tmp.path().join("meridian.log");
    let file_s = file.display().to_string();
    let mut node = common::Server::start_with(&[
        "--site",
        "lyon",
        "--log-format",
        "json",
        "--log-file",
        &file_s,
    ]);
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.contains("ready to accept connections"), "{text}");
    for line in text.lines() {
        assert!(
            line.starts_with('{') && line.ends_with('}'),
            "not JSON: {line:?}"
        );
        assert!(line.contains(r#""site":"lyon""#), "no site in {line:?}");
        assert!(
            line.contains(r#""level":"INFO""#) || line.contains(r#""level":"WARN""#),
            "{line:?}"
        );
    }
    std::fs::rename(&file, tmp.path().join("meridian.log.1")).unwrap();
    let pid = node.child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-HUP", &pid])
            .status()
            .unwrap()
            .success()
    );
    assert!(
        common::disk::eventually(Duration::from_secs(10), || std::fs::read_to_string(&file)
            .is_ok_and(|t| t.contains("log file reopened"))),
        "no new log file after SIGHUP"
    );
    assert!(node.is_running());
}

#[test]
fn the_log_level_flag_wins_over_rust_log() {
    for (flags, env, info_shown) in [
        (vec!["--log-level", "warn"], "info", false),
        (vec![], "warn", false),
        (vec!["--log-level", "info"], "warn", true),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let port = free_port();
        let log = tmp.path().join("out.log");
        let out = std::fs::File::create(&log).unwrap();
        let mut child = Command::new(bin())
            .args(["server", "--port", &port.to_string(), "--dir"])
            .arg(tmp.path().join("data"))
            .args(&flags)
            .env("RUST_LOG", env)
            .stdin(Stdio::null())
            .stdout(Stdio::from(out.try_clone().unwrap()))
            .stderr(Stdio::from(out))
            .spawn()
            .unwrap();
        assert!(common::disk::eventually(Duration::from_secs(20), || {
            common::serves(port)
        }));
        let _ = child.kill();
        let _ = child.wait();
        let text = std::fs::read_to_string(&log).unwrap();
        assert_eq!(
            text.contains("ready to accept connections"),
            info_shown,
            "flags {flags:?} RUST_LOG={env}:\n{text}"
        );
    }
}

/// Whether `program` runs here (`program --version`).
fn have(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

#[test]
fn the_systemd_unit_verifies_and_keeps_its_contract() {
    let unit = include_str!("../../../deploy/systemd/meridian.service");
    let lines: Vec<&str> = unit.lines().map(str::trim).collect();
    for want in [
        "Type=notify",
        "User=meridian",
        "LimitNOFILE=65535",
        "TimeoutStopSec=30s",
        "WatchdogSec=30s",
        "SystemCallFilter=@system-service",
        "ProtectSystem=strict",
        "NoNewPrivileges=true",
        "CapabilityBoundingSet=",
    ] {
        assert!(lines.contains(&want), "{want} missing from the unit");
    }
    // Shard threads pin themselves: nothing may deny sched_setaffinity (@resources holds it).
    for l in &lines {
        if let Some(filter) = l.strip_prefix("SystemCallFilter=~") {
            assert!(
                !filter.contains("@resources") && !filter.contains("sched_setaffinity"),
                "{l}"
            );
        }
    }
    if !have("systemd-analyze") {
        eprintln!("skipped: systemd-analyze verify (systemd-analyze is not installed)");
        return;
    }
    let denied = Command::new("systemd-analyze")
        .args(["syscall-filter", "@privileged"])
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&denied.stdout).contains("sched_setaffinity"));
    // Verified as installed, but with the binary this test built at /usr/bin/meridian's place.
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("meridian.service");
    std::fs::write(&path, unit.replace("/usr/bin/meridian", bin())).unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&path)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stderr.trim().is_empty(),
        "systemd-analyze verify:\n{stderr}"
    );
}

/// Collects the datagrams a process sends to `NOTIFY_SOCKET`.
struct NotifySocket {
    _dir: tempfile::TempDir,
    path: std::path::PathBuf,
    lines: std::sync::Arc<std::sync::Mutex<Vec<(Instant, String)>>>,
}

impl NotifySocket {
    fn bind() -> NotifySocket {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify.sock");
        let sock = std::os::unix::net::UnixDatagram::bind(&path).unwrap();
        sock.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let keep = lines.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            // Ends with the test process; bounded by its life.
            loop {
                if let Ok(n) = sock.recv(&mut buf) {
                    let text = String::from_utf8_lossy(&buf[..n]).into_owned();
                    let mut l = keep.lock().unwrap();
                    for line in text.lines() {
                        l.push((Instant::now(), line.to_string()));
                    }
                }
            }
        });
        NotifySocket {
            _dir: dir,
            path,
            lines,
        }
    }

    fn lines(&self) -> Vec<(Instant, String)> {
        self.lines.lock().unwrap().clone()
    }

    fn position(&self, prefix: &str) -> Option<usize> {
        self.lines().iter().position(|(_, l)| l.starts_with(prefix))
    }
}

#[test]
fn systemd_hears_loading_ready_watchdog_and_stopping() {
    let notify = NotifySocket::bind();
    let tmp = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut child = Command::new(bin())
        .args([
            "server",
            "--enable-debug-command",
            "yes",
            "--port",
            &port.to_string(),
            "--dir",
        ])
        .arg(tmp.path())
        .env("NOTIFY_SOCKET", &notify.path)
        // A half-period of 150 ms: the watchdog pings every 150 ms while shards answer.
        .env("WATCHDOG_USEC", "300000")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let wait = |what: &str| {
        assert!(
            common::disk::eventually(Duration::from_secs(20), || notify.position(what).is_some()),
            "no {what}; got {:?}",
            notify.lines()
        );
    };
    wait("READY=1");
    let status = notify
        .position("STATUS=Loading the data")
        .expect("STATUS while loading");
    let extend = notify
        .position("EXTEND_TIMEOUT_USEC=")
        .expect("start timeout extended");
    let ready = notify.position("READY=1").unwrap();
    assert!(status < ready && extend < ready, "{:?}", notify.lines());
    assert!(common::serves(port));
    wait("WATCHDOG=1");
    // A wedged shard (DEBUG SLEEP blocks its thread, as Redis's blocks the server): no ping.
    let mut c = Raw::connect(port);
    let sent = Instant::now();
    c.send_cmd(&[b"DEBUG", b"SLEEP", b"2"]);
    assert_eq!(c.read_reply(), b"+OK\r\n");
    // The shard sleeps from some time after `sent` for 2 s: a ping seen in this window
    // would come from a heartbeat answered during the sleep (the margin at the start covers
    // a ping already on its way when the sleep began).
    let (from, to) = (
        sent + Duration::from_millis(700),
        sent + Duration::from_millis(1900),
    );
    let pings_while_asleep = notify
        .lines()
        .iter()
        .filter(|(t, l)| l == "WATCHDOG=1" && *t > from && *t < to)
        .count();
    assert_eq!(
        pings_while_asleep, 0,
        "watchdog pinged while the shard slept"
    );
    let pings_before = notify
        .lines()
        .iter()
        .filter(|(_, l)| l == "WATCHDOG=1")
        .count();
    assert!(common::disk::eventually(Duration::from_secs(10), || {
        notify
            .lines()
            .iter()
            .filter(|(_, l)| l == "WATCHDOG=1")
            .count()
            > pings_before
    }));
    let pid = child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let status = child.wait().unwrap();
    assert!(status.success(), "{status}");
    assert!(
        notify.position("STOPPING=1").is_some(),
        "{:?}",
        notify.lines()
    );
}

/// `GET path` over HTTP/1.0 on loopback: (status, body).
fn http_get(port: u16, path: &str) -> (u16, String) {
    use std::io::{Read as _, Write as _};
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return (0, String::new());
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
    if s.write_all(format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").as_bytes())
        .is_err()
    {
        return (0, String::new());
    }
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    let text = String::from_utf8_lossy(&raw).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_string();
    (status, body)
}

/// Runs `program args` with `input` on stdin: (exit code, stdout + stderr).
fn run_with_input(program: &str, args: &[&str], input: &str) -> (Option<i32>, String) {
    use std::io::Write as _;
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.code(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// A process killed on drop.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The value of an instant query's single result, as Prometheus's API returns it
/// (`"value":[<time>,"<value>"]`).
fn prom_value(prom_port: u16, query: &str) -> Option<String> {
    let q: String = query
        .bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect();
    let (status, body) = http_get(prom_port, &format!("/api/v1/query?query={q}"));
    if status != 200 {
        return None;
    }
    let after = body.split_once("\"value\":[")?.1;
    let v = after.split_once(',')?.1;
    Some(v.trim_start_matches('"').split('"').next()?.to_string())
}

#[test]
fn prometheus_scrapes_metrics_that_promtool_accepts() {
    if !have("prometheus") || !have("promtool") {
        eprintln!("skipped: Prometheus scrape test (apt install prometheus to run it)");
        return;
    }
    let metrics_port = free_port();
    let node = common::Server::start_with(&[
        "--site",
        "scraped",
        "--metrics-port",
        &metrics_port.to_string(),
    ]);
    let mut c = node.connect();
    for i in 0..25 {
        c.ok(&["SET", &format!("k{i}"), "v"]);
    }
    c.err(&["HSET", "k0", "f", "v"]);
    let (status, text) = http_get(metrics_port, "/metrics");
    assert_eq!(status, 200);
    let (code, lint) = run_with_input("promtool", &["check", "metrics"], &text);
    assert_eq!(code, Some(0), "promtool check metrics:\n{lint}\n{text}");
    for want in [
        "redis_db_keys{db=\"db0\"} 25",
        "redis_commands_total{cmd=\"set\"} 25",
        "redis_errors_total{err=\"WRONGTYPE\"} 1",
        &format!("meridian_shards {}", common::test_shards()),
    ] {
        assert!(text.lines().any(|l| l == want), "{want} not in:\n{text}");
    }
    // The real server scrapes it, and its query API gives the values back.
    let tmp = tempfile::tempdir().unwrap();
    let prom_port = free_port();
    let config = tmp.path().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: meridian\n    static_configs:\n      - targets: ['127.0.0.1:{metrics_port}']\n"
        ),
    )
    .unwrap();
    let _prom = Killed(
        Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                tmp.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{prom_port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    for (query, want) in [
        ("redis_db_keys{db=\"db0\"}", "25"),
        ("redis_commands_total{cmd=\"set\"}", "25"),
        ("up{job=\"meridian\"}", "1"),
        ("meridian_info{site=\"scraped\"}", "1"),
    ] {
        assert!(
            common::disk::eventually(Duration::from_secs(60), || prom_value(prom_port, query)
                .as_deref()
                == Some(want)),
            "Prometheus never had {query} = {want} (last: {:?})",
            prom_value(prom_port, query)
        );
    }
}

#[test]
fn redis_exporter_reads_info_unchanged() {
    let exporter = "prometheus-redis-exporter";
    if !have(exporter) && Command::new(exporter).arg("-version").output().is_err() {
        eprintln!("skipped: redis_exporter test (apt install prometheus-redis-exporter to run it)");
        return;
    }
    let node = common::Server::start();
    let mut c = node.connect();
    for i in 0..7 {
        c.ok(&["SET", &format!("k{i}"), "v"]);
    }
    c.ok(&["SELECT", "3"]);
    c.ok(&["SET", "x", "v"]);
    c.err(&["LPUSH", "x", "v"]);
    let port = free_port();
    let _exp = Killed(
        Command::new(exporter)
            .arg(format!("-redis.addr=redis://127.0.0.1:{}", node.port))
            .arg(format!("-web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let mut text = String::new();
    assert!(
        common::disk::eventually(Duration::from_secs(20), || {
            text = http_get(port, "/metrics").1;
            text.contains("redis_up 1")
        }),
        "exporter never reached Meridian:\n{text}"
    );
    for want in [
        "redis_up 1",
        "redis_db_keys{db=\"db0\"} 7",
        "redis_db_keys{db=\"db3\"} 1",
        "redis_commands_total{cmd=\"set\"} 8",
        "redis_errors_total{err=\"WRONGTYPE\"} 1",
        "redis_connected_clients 2",
    ] {
        assert!(
            text.lines().any(|l| l == want),
            "{want} not in the exporter's output:\n{text}"
        );
    }
    for prefix in [
        "redis_memory_used_bytes ",
        "redis_commands_duration_seconds_total{cmd=\"set\"} ",
        "redis_cpu_user_seconds_total ",
    ] {
        assert!(
            text.lines().any(|l| l.starts_with(prefix)),
            "{prefix} not in:\n{text}"
        );
    }
}

#[test]
fn health_flips_when_a_peer_link_is_cut_and_back_when_healed() {
    use common::sites::{Cluster, Opts};
    let mports = [free_port(), free_port()];
    let cluster = Cluster::start(
        &["a", "b"],
        Opts::proxied()
            .site_flags(0, &["--metrics-port", &mports[0].to_string()])
            .site_flags(1, &["--metrics-port", &mports[1].to_string()]),
    );
    cluster.wait_links_up(Duration::from_secs(30));
    let check = "/health?max_lag_ms=3000";
    assert_eq!(http_get(mports[0], "/health").0, 200);
    assert!(
        common::disk::eventually(Duration::from_secs(20), || http_get(mports[0], check).0
            == 200),
        "{:?}",
        http_get(mports[0], check)
    );
    cluster.partition(0, 1);
    assert!(
        common::disk::eventually(Duration::from_secs(30), || http_get(mports[0], check).0
            == 503),
        "still healthy with the link cut: {:?}",
        http_get(mports[0], check)
    );
    let (_, body) = http_get(mports[0], check);
    assert!(
        body.contains("\"status\":\"lagging\"") && body.contains("\"site\":\"b\""),
        "{body}"
    );
    // The plain check does not look at lag.
    assert_eq!(http_get(mports[0], "/health").0, 200);
    cluster.heal(0, 1);
    assert!(
        common::disk::eventually(Duration::from_secs(60), || http_get(mports[0], check).0
            == 200),
        "not healthy again after healing: {:?}",
        http_get(mports[0], check)
    );
    assert_eq!(http_get(mports[0], "/health?max_lag=1").0, 400);
}

#[test]
fn certs_init_makes_certificates_sites_accept_including_a_site_added_later() {
    use common::sites::{Cluster, Opts};
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("tls");
    let dir_s = dir.display().to_string();
    let (code, out, err) = run_to_end(&["certs", "init", "--sites", "a,b", "--out", &dir_s], &[]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("created the CA"), "{out}");
    // Later, a third site: signed by the same CA, nothing overwritten.
    let (code, out, err) = run_to_end(&["certs", "init", "--sites", "c", "--out", &dir_s], &[]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("signed by the existing CA"), "{out}");
    let (code, _, err) = run_to_end(&["certs", "init", "--sites", "a", "--out", &dir_s], &[]);
    assert_eq!(code, Some(1));
    assert!(err.contains("a.crt exists already"), "{err}");
    let mut opts = Opts::default();
    for (i, site) in ["a", "b", "c"].iter().enumerate() {
        let f = |ext: &str| dir.join(format!("{site}.{ext}")).display().to_string();
        opts = opts.site_flags(
            i,
            &[
                "--sync-tls-cert",
                &f("crt"),
                "--sync-tls-key",
                &f("key"),
                "--sync-tls-ca",
                &dir.join("ca.crt").display().to_string(),
            ],
        );
    }
    let cluster = Cluster::start(&["a", "b", "c"], opts);
    cluster.wait_links_up(Duration::from_secs(60));
    cluster.site(0).connect().ok(&["SET", "over-tls", "yes"]);
    cluster.wait_converged(Duration::from_secs(60));
    assert_eq!(cluster.site(2).info_crdt()["crdt_sync_tls"], "1");
}

/// Writes `SET <prefix>:<i> <i>` to `port` until `stop` (at most `max` writes); returns the
/// keys whose write was acknowledged.
fn write_until(
    port: u16,
    prefix: &str,
    stop: &std::sync::atomic::AtomicBool,
    max: usize,
) -> Vec<String> {
    let mut c = Raw::connect(port);
    let mut acked = Vec::new();
    for i in 0..max {
        if stop.load(std::sync::atomic::Ordering::Relaxed) {
            break;
        }
        let key = format!("{prefix}:{i}");
        if c.call(&[b"SET", key.as_bytes(), b"v"]) == b"+OK\r\n" {
            acked.push(key);
        }
    }
    acked
}

#[test]
fn sites_are_added_and_removed_online_under_load_losing_no_acknowledged_write() {
    use common::sites::{Cluster, Opts, wait_converged, wait_links_up};
    use std::sync::atomic::{AtomicBool, Ordering};
    let tmp = tempfile::tempdir().unwrap();
    let conf = tmp.path().join("a.toml");
    std::fs::write(&conf, "# site a\nhz = 10\n").unwrap();
    let conf_s = conf.display().to_string();
    // a and b know each other; c lists both but is not known to them yet.
    let mut cluster = Cluster::start(
        &["a", "b", "c"],
        Opts::default()
            .peers_of(0, &[1])
            .peers_of(1, &[0])
            .site_flags(0, &["--config", &conf_s]),
    );
    wait_links_up(&[cluster.site(0), cluster.site(1)], Duration::from_secs(30));
    let (pa, pb, pc) = (
        cluster.site(0).port,
        cluster.site(1).port,
        cluster.site(2).port,
    );
    let c_sync = format!("127.0.0.1:{}", cluster.site(2).sync_port);
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = [(pa, "on-a"), (pb, "on-b"), (pc, "on-c")]
        .into_iter()
        .map(|(port, prefix)| {
            let stop = stop.clone();
            std::thread::spawn(move || write_until(port, prefix, &stop, 20_000))
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let sites = [format!("127.0.0.1:{pa}"), format!("127.0.0.1:{pb}")];
    let admin = |args: &[&str]| {
        let mut all = vec!["admin", "--site", &sites[0], "--site", &sites[1]];
        all.extend_from_slice(args);
        run_to_end(&all, &[])
    };
    let (code, out, err) = admin(&["add-peer", "c", &c_sync]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert_eq!(out.matches(": OK").count(), 2, "{out}");
    cluster.wait_links_up(Duration::from_secs(60));
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::Relaxed);
    let acked: Vec<String> = writers
        .into_iter()
        .flat_map(|w| w.join().unwrap())
        .collect();
    assert!(acked.len() > 100, "the load wrote {} keys", acked.len());
    cluster.wait_converged(Duration::from_secs(60));
    for site in cluster.all() {
        let keys = site.keys();
        let missing: Vec<&String> = acked.iter().filter(|k| !keys.contains(*k)).collect();
        assert!(
            missing.is_empty(),
            "site {} lacks {} acknowledged writes, e.g. {:?}",
            site.id,
            missing.len(),
            missing.first()
        );
    }
    assert!(
        std::fs::read_to_string(&conf)
            .unwrap()
            .contains(&format!("\"c={c_sync}\""))
    );
    let (code, out, _) = admin(&["peers"]);
    assert_eq!(code, Some(0));
    assert_eq!(out.matches("[site, c, addr").count(), 2, "{out}");

    // Remove c while it is down: a and b stop waiting for it (GC collects what c never acked).
    cluster.site_mut(2).kill();
    let (code, out, err) = admin(&["remove-peer", "c"]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert_eq!(cluster.site(0).info_u64("crdt_peers"), 1);
    assert!(!std::fs::read_to_string(&conf).unwrap().contains("c="));
    let mut a = cluster.site(0).connect();
    a.int(&["SADD", "gc-probe", "x", "y"]);
    a.int(&["SREM", "gc-probe", "x"]);
    assert!(
        common::disk::eventually(Duration::from_secs(30), || cluster
            .site(0)
            .info_u64("crdt_gc_pending_keys")
            == 0),
        "GC still waits: {}",
        cluster.site(0).info_u64("crdt_gc_pending_keys")
    );
    // c comes back with its old data: refused.
    cluster.site_mut(2).start();
    assert!(
        common::disk::eventually(Duration::from_secs(30), || cluster
            .site(2)
            .peer_info("a")
            .get("last_error")
            .is_some_and(|e| e.contains("was removed"))),
        "{:?}",
        cluster.site(2).peer_info("a")
    );
    let e = a.err(&["CRDT.ADDPEER", "c", &c_sync]);
    assert!(e.contains("was removed"), "{e}");
    wait_converged(&[cluster.site(0), cluster.site(1)], Duration::from_secs(30));
}

/// Ops are not relayed: a removed site's writes that reached only some of the remaining sites
/// (here b never received c's, its link from c being cut) must still reach every remaining
/// site once c is removed, or the remaining sites never converge. Nobody streams a removed
/// site's ops any more, so the sites that hold them bring the others up to date by a full
/// sync, as for a retired life (docs/replication.md §9).
#[test]
fn a_removed_sites_writes_that_reached_only_some_sites_reach_every_remaining_site() {
    use common::sites::{Cluster, Opts, wait_converged};
    let mut cluster = Cluster::start(&["a", "b", "c"], Opts::proxied());
    cluster.wait_links_up(Duration::from_secs(30));
    // b's link to c carries c's ops to b: cut it; a still receives them.
    cluster.proxy(1, 2).partition();
    let mut c = cluster.site(2).connect();
    let keys: Vec<String> = (0..50).map(|i| format!("from-c:{i}")).collect();
    for k in &keys {
        assert_eq!(c.call(&[b"SET", k.as_bytes(), b"v"]), b"+OK\r\n");
    }
    assert!(
        common::disk::eventually(Duration::from_secs(30), || {
            let at_a = cluster.site(0).keys();
            keys.iter().all(|k| at_a.contains(k))
        }),
        "a never received c's writes"
    );
    assert!(
        cluster.site(1).keys().is_empty(),
        "b received c's writes through the cut link"
    );
    // c is lost before b got its writes; the operator removes it from a and b.
    cluster.site_mut(2).kill();
    for i in 0..2 {
        let mut s = cluster.site(i).connect();
        assert_eq!(s.call(&[b"CRDT.REMOVEPEER", b"c"]), b"+OK\r\n");
    }
    wait_converged(&[cluster.site(0), cluster.site(1)], Duration::from_secs(30));
    let at_b = cluster.site(1).keys();
    let missing: Vec<&String> = keys.iter().filter(|k| !at_b.contains(*k)).collect();
    assert!(
        missing.is_empty(),
        "b lacks {} of c's writes",
        missing.len()
    );
}

/// docs/drills.md §7 (found by `add-remove-site` on 2026-11-27): a removed site's last ZREM
/// reaches a remaining site only by a full sync, and that site, no longer held back by the
/// removed one, must not have folded the increments the ZREM removes into one running sum in
/// the meantime (the join kept its sum: 4 where the others held 1, for good). Collection
/// waits until the full sync brought it (`Shard::retired_ops_owed`), and only until then.
#[test]
fn a_removed_sites_last_zrem_removes_what_it_saw_everywhere() {
    use common::sites::{Cluster, Opts, wait_converged};
    let mut cluster = Cluster::start(&["a", "b", "c"], Opts::proxied());
    cluster.wait_links_up(Duration::from_secs(30));
    let mut b = cluster.site(1).connect();
    let mut c = cluster.site(2).connect();
    let score = |cluster: &Cluster, i: usize| cluster.site(i).cmd(&["ZSCORE", "z", "m"]);
    b.call(&[b"ZADD", b"z", b"90", b"m"]);
    cluster.wait_converged(Duration::from_secs(30));
    c.call(&[b"ZINCRBY", b"z", b"3", b"m"]);
    cluster.wait_converged(Duration::from_secs(30));
    b.call(&[b"ZINCRBY", b"z", b"2", b"m"]);
    cluster.wait_converged(Duration::from_secs(30));
    // b's ops stop reaching c; its ZREM (which saw 90, +3, +2) reaches a only.
    cluster.proxy(2, 1).partition();
    b.call(&[b"ZREM", b"z", b"m"]);
    assert!(common::disk::eventually(Duration::from_secs(10), || {
        score(&cluster, 0) == common::Reply::Nil
    }));
    // c's +1, concurrent with the ZREM: it survives it alone (score 1).
    c.call(&[b"ZINCRBY", b"z", b"1", b"m"]);
    assert!(common::disk::eventually(Duration::from_secs(10), || {
        score(&cluster, 0) == common::Reply::Bulk(b"1".to_vec())
    }));
    cluster.site_mut(1).kill();
    for i in [0, 2] {
        let mut s = cluster.site(i).connect();
        assert_eq!(s.call(&[b"CRDT.REMOVEPEER", b"b"]), b"+OK\r\n");
    }
    let same = common::disk::eventually(Duration::from_secs(20), || {
        score(&cluster, 0) == score(&cluster, 2)
    });
    assert!(
        same,
        "a: {:?}, c: {:?}",
        score(&cluster, 0),
        score(&cluster, 2)
    );
    assert_eq!(score(&cluster, 0), common::Reply::Bulk(b"1".to_vec()));
    wait_converged(&[cluster.site(0), cluster.site(2)], Duration::from_secs(30));
    // Collection waited for b's last ops at c, not for good: removals made now are
    // collected at both sites.
    let collected = |i: usize| cluster.site(i).info_u64("crdt_gc_collected_keys");
    let before = [collected(0), collected(2)];
    c.call(&[b"SADD", b"later", b"x", b"y"]);
    c.call(&[b"SREM", b"later", b"x"]);
    c.call(&[b"SET", b"gone", b"1"]);
    c.call(&[b"DEL", b"gone"]);
    for (k, i) in [0, 2].into_iter().enumerate() {
        assert!(
            common::disk::eventually(Duration::from_secs(20), || collected(i) >= before[k] + 2),
            "site {i}: {} keys collected, {} before the new removals",
            collected(i),
            before[k]
        );
        assert_eq!(cluster.site(i).info_u64("crdt_gc_waiting_full_sync"), 0);
    }
}

/// docs/drills.md §7 (found by `add-remove-site`, fixed by the merge rule of
/// docs/replication.md §5): the floor of a full-sync merge joined what *either* side collected,
/// limited only to what the receiver delivered. A site that joins under load can send the site
/// pulling a full sync from it a state that lacks the puller's newest writes (they have not
/// reached it yet); the puller's own collections cover them, so it took them for removed by
/// the joiner and dropped them: acknowledged writes lost at the puller, and a permanent
/// divergence with the sites that hold them. Each side is now judged by its own causal
/// context. Here c's element `e2` is acked at c and reaches a; d joins holding c's list
/// without `e2` and with an element of a's that c lacks; c adds d and pulls from it.
#[test]
fn a_full_sync_from_a_joining_site_keeps_the_pullers_newest_writes() {
    use common::sites::{Cluster, Opts, wait_converged, wait_links_up};
    // c does not list d yet; d lists both.
    let mut cluster = Cluster::start(
        &["a", "c", "d"],
        Opts::proxied().peers_of(0, &[1, 2]).peers_of(1, &[0]),
    );
    cluster.site_mut(2).kill();
    wait_links_up(&[cluster.site(0), cluster.site(1)], Duration::from_secs(30));
    fn list(cluster: &Cluster, i: usize) -> Vec<String> {
        cluster.site(i).cmd(&["LRANGE", "L", "0", "-1"]).strings()
    }
    let mut c = cluster.site(1).connect();
    c.int(&["RPUSH", "L", "x"]);
    assert!(common::disk::eventually(Duration::from_secs(10), || list(
        &cluster, 0
    ) == [
        "x"
    ]));
    // d starts empty and takes a's state (c's ops reach d only by c's links, cut here).
    cluster.proxy(2, 1).partition();
    for e in std::fs::read_dir(cluster.site(2).dir.path()).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            std::fs::remove_dir_all(p).unwrap();
        } else {
            std::fs::remove_file(p).unwrap();
        }
    }
    cluster.site_mut(2).start();
    assert!(common::disk::eventually(Duration::from_secs(20), || list(
        &cluster, 2
    ) == [
        "x"
    ]));
    // c's e2 reaches a, which acks it: c's garbage collection then covers it.
    c.int(&["RPUSH", "L", "e2"]);
    assert!(common::disk::eventually(Duration::from_secs(10), || list(
        &cluster, 0
    ) == [
        "x", "e2"
    ]));
    std::thread::sleep(Duration::from_secs(3));
    // a's y reaches d but not c.
    cluster.proxy(1, 0).partition();
    let mut a = cluster.site(0).connect();
    a.int(&["RPUSH", "L", "y"]);
    assert!(common::disk::eventually(Duration::from_secs(10), || list(
        &cluster, 2
    ) == [
        "x", "y"
    ]));
    // c adds d and pulls a full sync from it (d holds y, which c lacks).
    let d_sync = format!("127.0.0.1:{}", cluster.site(2).sync_port);
    assert_eq!(
        c.call(&[b"CRDT.ADDPEER", b"d", d_sync.as_bytes()]),
        b"+OK\r\n"
    );
    assert!(
        common::disk::eventually(Duration::from_secs(20), || cluster
            .site(1)
            .peer_u64("d", "full_syncs_in")
            >= 1),
        "{:?}",
        cluster.site(1).peer_info("d")
    );
    assert!(
        list(&cluster, 1).contains(&"e2".to_string()),
        "c dropped its own acknowledged e2: {:?}",
        list(&cluster, 1)
    );
    cluster.heal_all();
    wait_converged(&cluster.all(), Duration::from_secs(30));
    for i in 0..3 {
        assert_eq!(
            list(&cluster, i),
            ["x", "e2", "y"],
            "site {}",
            cluster.site(i).id
        );
    }
}
