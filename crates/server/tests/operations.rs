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
    const KEYS: usize = 300_000;
    let mut node = Node::start_new(&[]);
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
    // Errors that come before the loading check in Redis come first here too.
    assert_eq!(
        early.call(&[b"GET"]),
        b"-ERR wrong number of arguments for 'get' command\r\n"
    );
    // Half a command now, the rest once loaded: the connection is handed to the shard with it.
    early.send(b"*2\r\n$3\r\nGET\r\n$9\r\nkey:");
    assert!(
        common::disk::eventually(Duration::from_secs(60), || common::answers_pong(node.port)),
        "never loaded; log:\n{}",
        node.last_log()
    );
    early.send(b"12345\r\n");
    assert_eq!(early.read_reply(), b"$11\r\nvalue-12345\r\n");
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
            common::answers_pong(port)
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
