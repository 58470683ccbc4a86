//! Differential test against the reference Redis 7.0.15 (R16): every command of the corpus
//! files `tests/corpus/*.txt` goes to a fresh `redis-server` and to a fresh Meridian, and
//! the replies must be equal byte for byte.
//!
//! Corpus format, one command per line, arguments split like redis-cli:
//! - `# …` comment, blank lines ignored;
//! - `@resp3` / `@resp2`: send `HELLO 3` / `HELLO 2` to both and compare the reply (the
//!   client `id` value is masked: ids depend on how many connections each server saw);
//! - `@nocompare <command>`: sent to both, both must reply, the replies are not compared
//!   (TIME-like or implementation-specific replies);
//! - anything else: sent to both, replies compared.
//!
//! Environment:
//! - `MERIDIAN_DIFF_FILE=<substring>` runs only the corpus files whose name contains it;
//! - `MERIDIAN_DIFF_SELF=1` compares Redis with a second Redis (checks that the corpus is
//!   deterministic);
//! - `MERIDIAN_DIFF_DUMP=1` prints every command with Redis's reply.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{Raw, RedisRef, Server, escape, split_args};

/// How long one reply may take.
const REPLY_TIMEOUT: Duration = Duration::from_secs(3);

enum Target {
    Meridian(Server),
    Redis(RedisRef),
}

impl Target {
    fn port(&self) -> u16 {
        match self {
            Target::Meridian(s) => s.port,
            Target::Redis(r) => r.port,
        }
    }

    fn log(&self) -> String {
        match self {
            Target::Meridian(s) => s.log(),
            Target::Redis(r) => r.log(),
        }
    }
}

/// One server under comparison and the connection the corpus runs on.
struct Side {
    name: &'static str,
    target: Target,
    conn: Raw,
    /// The protocol the connection was switched to (for reconnects).
    resp3: bool,
}

impl Side {
    fn new(name: &'static str, target: Target) -> Side {
        let conn = Raw::connect(target.port());
        Side {
            name,
            target,
            conn,
            resp3: false,
        }
    }

    /// Sends one command and reads its reply; on failure reconnects (so later lines still
    /// line up) and returns the error as text.
    fn exchange(&mut self, args: &[Vec<u8>]) -> Result<Vec<u8>, String> {
        let refs: Vec<&[u8]> = args.iter().map(|a| a.as_slice()).collect();
        let result = self
            .conn
            .try_send(&common::cmd(&refs))
            .and_then(|()| self.conn.try_read_reply(REPLY_TIMEOUT))
            .map_err(|e| format!("<{} failed: {e}>", self.name));
        if result.is_err() {
            self.reconnect();
        }
        result
    }

    fn reconnect(&mut self) {
        match std::net::TcpStream::connect(("127.0.0.1", self.target.port())) {
            Ok(_) => {
                self.conn = Raw::connect(self.target.port());
                if self.resp3 {
                    let _ = self.conn.try_send(&common::cmd(&[b"HELLO", b"3"]));
                    let _ = self.conn.try_read_reply(REPLY_TIMEOUT);
                }
            }
            Err(e) => panic!(
                "{} is not accepting connections any more ({e}); log:\n{}",
                self.name,
                self.target.log()
            ),
        }
    }
}

/// Replaces the value of the `id` field of a HELLO reply by `ID`.
fn mask_hello_id(reply: &[u8]) -> Vec<u8> {
    let key = b"$2\r\nid\r\n:";
    let Some(at) = reply.windows(key.len()).position(|w| w == key) else {
        return reply.to_vec();
    };
    let start = at + key.len();
    let Some(len) = reply[start..].iter().position(|&b| b == b'\r') else {
        return reply.to_vec();
    };
    let mut out = reply[..start].to_vec();
    out.extend_from_slice(b"ID");
    out.extend_from_slice(&reply[start + len..]);
    out
}

fn render_args(args: &[Vec<u8>]) -> String {
    args.iter()
        .map(|a| format!("\"{}\"", escape(a)))
        .collect::<Vec<_>>()
        .join(" ")
}

fn render(reply: &Result<Vec<u8>, String>) -> String {
    match reply {
        Ok(bytes) => format!("\"{}\"", escape(bytes)),
        Err(e) => e.clone(),
    }
}

#[derive(Default)]
struct FileResult {
    compared: usize,
    not_compared: usize,
    mismatches: Vec<String>,
}

fn corpus_files() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus");
    let filter = std::env::var("MERIDIAN_DIFF_FILE").unwrap_or_default();
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "txt"))
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().contains(&filter))
        })
        .collect();
    files.sort();
    files
}

fn run_file(path: &Path, self_check: bool) -> FileResult {
    let text = std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut redis = Side::new("redis", Target::Redis(RedisRef::start()));
    let other = if self_check {
        Target::Redis(RedisRef::start())
    } else {
        Target::Meridian(Server::start_single())
    };
    let mut meridian = Side::new(if self_check { "redis-2" } else { "meridian" }, other);
    let mut result = FileResult::default();
    let dump = std::env::var_os("MERIDIAN_DIFF_DUMP").is_some_and(|v| v != "0");

    for (index, raw_line) in text.split(|&b| b == b'\n').enumerate() {
        let line_no = index + 1;
        let line = raw_line.trim_ascii();
        if line.is_empty() || line.starts_with(b"#") {
            continue;
        }
        let (args, compare) = if line == b"@resp3" || line == b"@resp2" {
            let proto: &[u8] = if line == b"@resp3" { b"3" } else { b"2" };
            (vec![b"HELLO".to_vec(), proto.to_vec()], true)
        } else if let Some(rest) = line.strip_prefix(b"@nocompare ") {
            (parse_line(rest, &file_name, line_no), false)
        } else if line.starts_with(b"@") {
            panic!("{file_name}:{line_no}: unknown directive {}", escape(line));
        } else {
            (parse_line(line, &file_name, line_no), true)
        };
        let is_hello = args
            .first()
            .is_some_and(|a| a.eq_ignore_ascii_case(b"hello"));
        let mut expected = redis.exchange(&args);
        let mut actual = meridian.exchange(&args);
        if is_hello {
            expected = expected.map(|r| mask_hello_id(&r));
            actual = actual.map(|r| mask_hello_id(&r));
            for (side, reply) in [(&mut redis, &expected), (&mut meridian, &actual)] {
                if let Ok(r) = reply {
                    if r.first() == Some(&b'%') {
                        side.resp3 = true;
                    } else if r.first() == Some(&b'*') {
                        side.resp3 = false;
                    }
                }
            }
        }
        let location = format!("{file_name}:{line_no}: {}", render_args(&args));
        if dump {
            eprintln!("{location}\n    -> {}", render(&expected));
        }
        if compare {
            result.compared += 1;
            if expected != actual {
                result.mismatches.push(format!(
                    "{location}\n    redis:    {}\n    {:<9} {}",
                    render(&expected),
                    format!("{}:", meridian.name),
                    render(&actual)
                ));
            }
        } else {
            result.not_compared += 1;
            for (name, reply) in [(redis.name, &expected), (meridian.name, &actual)] {
                if let Err(e) = reply {
                    result
                        .mismatches
                        .push(format!("{location}\n    {name} gave no reply: {e}"));
                }
            }
        }
    }
    result
}

fn parse_line(line: &[u8], file: &str, line_no: usize) -> Vec<Vec<u8>> {
    match split_args(line) {
        Some(args) if !args.is_empty() => args,
        _ => panic!("{file}:{line_no}: cannot split {}", escape(line)),
    }
}

#[test]
fn corpus_matches_redis() {
    assert!(
        RedisRef::available(),
        "redis-server (Redis 7.0.15, the reference) is not on PATH: the differential test \
         cannot run without it. Install it (Debian: apt-get install redis-server)."
    );
    let self_check = std::env::var_os("MERIDIAN_DIFF_SELF").is_some_and(|v| v != "0");
    let files = corpus_files();
    assert!(!files.is_empty(), "no corpus files under tests/corpus");
    let mut total = 0;
    let mut all_mismatches = Vec::new();
    for path in &files {
        let r = run_file(path, self_check);
        eprintln!(
            "{}: {} compared, {} not compared, {} mismatches",
            path.file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            r.compared,
            r.not_compared,
            r.mismatches.len()
        );
        total += r.compared;
        all_mismatches.extend(r.mismatches);
    }
    eprintln!("total: {total} compared");
    if !all_mismatches.is_empty() {
        panic!(
            "{} of {total} compared replies differ from Redis 7.0.15:\n{}",
            all_mismatches.len(),
            all_mismatches.join("\n")
        );
    }
}

#[test]
fn corpus_line_splitting() {
    let cases: &[(&[u8], &[&[u8]])] = &[
        (b"SET k v", &[b"SET", b"k", b"v"]),
        (b"  SET   \"a b\"  'c d' ", &[b"SET", b"a b", b"c d"]),
        (
            b"SET \"\\x00\\r\\n\\t\\\\\\\"\" x",
            &[b"SET", b"\0\r\n\t\\\"", b"x"],
        ),
        (b"SET 'it\\'s' \"\"", &[b"SET", b"it's", b""]),
    ];
    for (line, expected) in cases {
        let got = split_args(line).expect("balanced");
        let expected: Vec<Vec<u8>> = expected.iter().map(|a| a.to_vec()).collect();
        assert_eq!(got, expected, "{}", escape(line));
    }
    assert!(split_args(b"SET \"a").is_none());
    assert!(split_args(b"SET \"a\"b").is_none());
}

#[test]
fn hello_id_is_masked() {
    let reply = b"%7\r\n$6\r\nserver\r\n$5\r\nredis\r\n$2\r\nid\r\n:17\r\n$4\r\nmode\r\n";
    let masked = mask_hello_id(reply);
    assert_eq!(
        masked,
        b"%7\r\n$6\r\nserver\r\n$5\r\nredis\r\n$2\r\nid\r\n:ID\r\n$4\r\nmode\r\n"
    );
}
