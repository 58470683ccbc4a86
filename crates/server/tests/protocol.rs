//! Malformed and edge-case request bytes (R16/R17, testing.md §6.1): each case goes to the
//! reference `redis-server` and to Meridian on fresh connections; the reply bytes and
//! whether the connection is closed afterwards must be the same, and, where the connection
//! stays open at a command boundary, PING must still work. Where §6.1 gives the measured
//! reply, Redis is checked against it too. Cases finish on read timeouts (a short quiet
//! period when nothing is expected), never on timing assertions.

mod common;

use std::time::Duration;

use common::{Raw, RedisRef, Server, cmd, escape};

/// How long a connection must stay silent to count as "no reply, still open".
const QUIET: Duration = Duration::from_millis(250);

/// What is done after the case's bytes.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum After {
    /// The parser is at a command boundary: PING on the same connection when it is open.
    Ping,
    /// The parser waits inside a command: close this connection, PING on a new one.
    Reconnect,
}

struct Case {
    name: &'static str,
    /// Written one after the other, each followed by an observation.
    steps: Vec<Vec<u8>>,
    after: After,
    /// The §6.1 measurement for the last step: reply bytes and whether it closes.
    expected: Option<(Vec<u8>, bool)>,
}

fn case(name: &'static str, bytes: impl Into<Vec<u8>>, after: After) -> Case {
    Case {
        name,
        steps: vec![bytes.into()],
        after,
        expected: None,
    }
}

fn err_closed(text: &str) -> Option<(Vec<u8>, bool)> {
    Some((format!("-{text}\r\n").into_bytes(), true))
}

fn silent_open() -> Option<(Vec<u8>, bool)> {
    Some((Vec::new(), false))
}

fn with(mut c: Case, expected: Option<(Vec<u8>, bool)>) -> Case {
    c.expected = expected;
    c
}

fn cases() -> Vec<Case> {
    use After::{Ping, Reconnect};
    let mut long_inline = vec![b'a'; 70_000];
    long_inline.truncate(70_000);
    let mut long_count = b"*".to_vec();
    long_count.extend(std::iter::repeat_n(b'1', 70_000));
    let mut long_bulk_count = b"*1\r\n$".to_vec();
    long_bulk_count.extend(std::iter::repeat_n(b'1', 70_000));
    let mut pipeline = b"PING\r\n".to_vec();
    pipeline.extend(cmd(&[b"SET", b"pk", b"v\r\n1"]));
    pipeline.extend(b"GET pk\r\n");
    pipeline.extend(b"ECHO \"x y\" \n");
    pipeline.extend(cmd(&[b"APPEND", b"pk", b"2"]));
    pipeline.extend(b"*0\r\n\r\n   \r\n*-1\r\n");
    pipeline.extend(b"set pk2 'a b'\r\n");
    pipeline.extend(cmd(&[b"MGET", b"pk", b"pk2", b"nokey"]));
    pipeline.extend(b"DEL pk pk2\r\n");
    pipeline.extend(b"EXISTS pk\n");
    let proto = "ERR Protocol error: ";
    vec![
        // Cross-protocol scripting guard: POST or Host: closes the connection unanswered
        // (replies of commands before it in the same read are dropped too).
        with(
            case(
                "HTTP POST",
                b"POST / HTTP/1.1\r\nHost: localhost\r\n\r\n".to_vec(),
                Ping,
            ),
            Some((Vec::new(), true)),
        ),
        with(
            case("Host: as a RESP command", cmd(&[b"host:", b"x"]), Ping),
            Some((Vec::new(), true)),
        ),
        with(
            case(
                "PING then POST",
                b"PING\r\npost /x HTTP/1.0\r\n".to_vec(),
                Ping,
            ),
            Some((Vec::new(), true)),
        ),
        // Row 1: a lone CRLF is ignored.
        with(case("lone CRLF", b"\r\n", Ping), silent_open()),
        with(
            case("empty inline line with blanks", b"   \t \r\n", Ping),
            silent_open(),
        ),
        // Row 2: zero and negative counts are ignored.
        with(case("*-10", b"*-10\r\n", Ping), silent_open()),
        with(case("*0", b"*0\r\n", Ping), silent_open()),
        // Row 3: invalid multibulk counts.
        with(
            case("*3000000000", b"*3000000000\r\n", Ping),
            err_closed(&format!("{proto}invalid multibulk length")),
        ),
        with(
            case("*abc", b"*abc\r\n", Ping),
            err_closed(&format!("{proto}invalid multibulk length")),
        ),
        case("*2147483648 (INT_MAX + 1)", b"*2147483648\r\n", Ping),
        case(
            "*2147483647 (INT_MAX, waits)",
            b"*2147483647\r\n",
            Reconnect,
        ),
        case("* with no digits", b"*\r\n", Ping),
        // Row 4: invalid bulk lengths inside a multibulk.
        with(
            case("$-10", b"*1\r\n$-10\r\n", Ping),
            err_closed(&format!("{proto}invalid bulk length")),
        ),
        with(
            case(
                "$600000000 (> proto-max-bulk-len)",
                b"*1\r\n$600000000\r\n",
                Ping,
            ),
            err_closed(&format!("{proto}invalid bulk length")),
        ),
        with(
            case("$blabla", b"*1\r\n$blabla\r\n", Ping),
            err_closed(&format!("{proto}invalid bulk length")),
        ),
        with(
            case(
                "$99999999999999999999",
                b"*1\r\n$99999999999999999999\r\n",
                Ping,
            ),
            err_closed(&format!("{proto}invalid bulk length")),
        ),
        with(
            case("1 GB bulk claim", b"*1\r\n$1073741824\r\n", Ping),
            err_closed(&format!("{proto}invalid bulk length")),
        ),
        case(
            "$536870913 (proto-max-bulk-len + 1)",
            b"*1\r\n$536870913\r\n",
            Ping,
        ),
        with(
            case(
                "$536870912 (= proto-max-bulk-len, waits)",
                b"*1\r\n$536870912\r\n",
                Reconnect,
            ),
            silent_open(),
        ),
        case(
            "second bulk length invalid",
            b"*2\r\n$3\r\nGET\r\n$-1\r\n",
            Ping,
        ),
        // Row 5 and 6: a bulk must start with '$'.
        with(
            case(
                "expected $, got f",
                b"*3\r\n$3\r\nSET\r\n$1\r\nx\r\nfooz\r\n",
                Ping,
            ),
            err_closed(&format!("{proto}expected '$', got 'f'")),
        ),
        with(
            case("nested array", b"*2\r\n*1\r\n$4\r\nPING\r\n", Ping),
            err_closed(&format!("{proto}expected '$', got '*'")),
        ),
        case("expected $, got CR", b"*1\r\n\r\n", Ping),
        case("expected $, got +", b"*1\r\n+OK\r\n", Ping),
        case(
            "commands before the error still run",
            b"PING\r\n*1\r\n+oops\r\n",
            Ping,
        ),
        // Row 7: unbalanced quotes in an inline command.
        with(
            case("unbalanced quotes", b"set \"a b\r\n", Ping),
            err_closed(&format!("{proto}unbalanced quotes in request")),
        ),
        case(
            "closing quote not followed by a space",
            b"set \"a\"b c\r\n",
            Ping,
        ),
        case("unbalanced single quote", b"set 'a b\r\n", Ping),
        // Row 8 and 9: over-long lines.
        with(
            case("70,000 inline bytes without newline", long_inline, Ping),
            err_closed(&format!("{proto}too big inline request")),
        ),
        with(
            case("* and 70,000 digits", long_count, Ping),
            err_closed(&format!("{proto}too big mbulk count string")),
        ),
        case("$ and 70,000 digits", long_bulk_count, Ping),
        // Row 10: a RESP3 type byte is read as an inline command.
        case("%1 as a request", b"%1\r\n", Ping),
        case("RESP3 map request", b"%1\r\n$1\r\na\r\n$1\r\nb\r\n", Ping),
        // Row 11: the two bytes after a bulk are not checked.
        with(
            case("bad bulk trailer", b"*1\r\n$4\r\nPINGxx\r\n", Ping),
            Some((b"+PONG\r\n".to_vec(), false)),
        ),
        // Row 12: NUL bytes stall the inline line until the size limit.
        with(
            Case {
                name: "NUL bytes then data, then 64 KB of junk",
                steps: vec![b"\0\0\0PING\r\n".to_vec(), vec![b'j'; 65 * 1024]],
                after: Ping,
                expected: None,
            },
            err_closed(&format!("{proto}too big inline request")),
        ),
        // Row 15: unknown commands keep the connection open.
        with(
            case("unknown command (multibulk)", cmd(&[b"FOOBARX"]), Ping),
            Some((
                b"-ERR unknown command 'FOOBARX', with args beginning with: \r\n".to_vec(),
                false,
            )),
        ),
        case(
            "unknown command (inline, args)",
            b"FOOBARX a 'b c'\r\n",
            Ping,
        ),
        case("empty command name", b"*1\r\n$0\r\n\r\n", Ping),
        // R17: a huge legal count does not allocate up front; the connection waits.
        with(
            case("*20000000 (legal, waits)", b"*20000000\r\n", Reconnect),
            silent_open(),
        ),
        case(
            "*20000000 then one bulk (waits)",
            b"*20000000\r\n$3\r\nfoo\r\n",
            Reconnect,
        ),
        // Pipelines mixing inline and multibulk requests, ignored lines included.
        case("mixed pipeline", pipeline, Ping),
        case(
            "inline escapes",
            b"ECHO \"\\x41\\x00\\n\"\r\nECHO 'it\\'s'\r\n",
            Ping,
        ),
        case("LF-only inline", b"PING\nPING\n", Ping),
    ]
}

/// What one server did with one case.
#[derive(Debug, PartialEq, Eq)]
struct Outcome {
    /// Per step: the bytes received and whether the connection was closed.
    steps: Vec<(Vec<u8>, bool)>,
    /// The PING reply afterwards (same connection or a new one), or why there is none.
    ping: Result<Vec<u8>, String>,
}

fn render(o: &Outcome) -> String {
    let steps: Vec<String> = o
        .steps
        .iter()
        .map(|(bytes, closed)| {
            format!(
                "\"{}\" {}",
                escape(bytes),
                if *closed { "closed" } else { "open" }
            )
        })
        .collect();
    let ping = match &o.ping {
        Ok(r) => format!("\"{}\"", escape(r)),
        Err(e) => e.clone(),
    };
    format!("{} | then PING: {ping}", steps.join(" ; "))
}

fn run_case(port: u16, case: &Case) -> Outcome {
    let mut conn = Raw::connect(port);
    let mut steps = Vec::new();
    for bytes in &case.steps {
        // A server that closes early may make the write fail; the reply still counts.
        let _ = conn.try_send(bytes);
        let (got, closed) = conn.read_until_quiet(QUIET);
        steps.push((got, closed));
        if closed {
            break;
        }
    }
    let closed = steps.last().is_some_and(|s| s.1);
    let ping = if !closed && case.after == After::Ping {
        conn.try_send(&cmd(&[b"PING"]))
            .and_then(|()| conn.try_read_reply(Duration::from_secs(2)))
            .map_err(|e| format!("<PING on the same connection failed: {e}>"))
    } else {
        conn.shutdown();
        drop(conn);
        let mut fresh = Raw::connect(port);
        fresh
            .try_send(&cmd(&[b"PING"]))
            .and_then(|()| fresh.try_read_reply(Duration::from_secs(2)))
            .map_err(|e| format!("<PING on a new connection failed: {e}>"))
    };
    Outcome { steps, ping }
}

fn require_redis() {
    assert!(
        RedisRef::available(),
        "redis-server (Redis 7.0.15, the reference) is not on PATH: the protocol test cannot \
         run without it. Install it (Debian: apt-get install redis-server)."
    );
}

#[test]
fn malformed_input_matches_redis() {
    require_redis();
    let redis = RedisRef::start();
    let mut meridian = Server::start();
    let mut failures = Vec::new();
    for case in cases() {
        let (expected, actual) = std::thread::scope(|s| {
            let r = s.spawn(|| run_case(redis.port, &case));
            let m = s.spawn(|| run_case(meridian.port, &case));
            (
                r.join().expect("redis side panicked"),
                m.join().expect("meridian side panicked"),
            )
        });
        eprintln!("{}: {}", case.name, render(&expected));
        if let Some((bytes, closed)) = &case.expected {
            let last = expected.steps.last();
            assert_eq!(
                last,
                Some(&(bytes.clone(), *closed)),
                "the reference Redis no longer matches testing.md §6.1 for case {:?}: {}",
                case.name,
                render(&expected)
            );
        }
        if expected.ping != Ok(b"+PONG\r\n".to_vec()) {
            failures.push(format!(
                "{}: the reference Redis did not PONG: {}",
                case.name,
                render(&expected)
            ));
        }
        if expected != actual {
            failures.push(format!(
                "{}\n    redis:    {}\n    meridian: {}",
                case.name,
                render(&expected),
                render(&actual)
            ));
        }
    }
    assert!(
        meridian.is_running(),
        "meridian exited; log:\n{}",
        meridian.log()
    );
    let mut check = meridian.connect();
    assert_eq!(check.call(&[b"PING"]), b"+PONG\r\n");
    assert!(
        failures.is_empty(),
        "{} protocol cases differ from Redis:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// A 1 MiB value arriving in many small writes is stored whole (both servers).
#[test]
fn big_value_in_small_writes() {
    require_redis();
    let redis = RedisRef::start();
    let meridian = Server::start();
    let value: Vec<u8> = (0..(1usize << 20)).map(|i| (i % 251) as u8).collect();
    let request = cmd(&[b"SET", b"big", &value]);
    for (name, port) in [("redis", redis.port), ("meridian", meridian.port)] {
        let mut conn = Raw::connect(port);
        for chunk in request.chunks(1000) {
            conn.send(chunk);
        }
        assert_eq!(conn.read_reply(), b"+OK\r\n", "{name}: SET");
        let reply = conn.call(&[b"GET", b"big"]);
        let mut expected = format!("${}\r\n", value.len()).into_bytes();
        expected.extend_from_slice(&value);
        expected.extend_from_slice(b"\r\n");
        assert!(
            reply == expected,
            "{name}: GET returned {} bytes, not the value",
            reply.len()
        );
        assert_eq!(
            conn.call(&[b"STRLEN", b"big"]),
            b":1048576\r\n",
            "{name}: STRLEN"
        );
    }
}

/// Replies that arrive split across reads, and several in one read, are each read whole.
#[test]
fn pipelined_replies_come_back_in_order() {
    let meridian = Server::start();
    let mut conn = meridian.connect();
    let mut batch = Vec::new();
    for i in 0..1000 {
        batch.extend(cmd(&[
            b"SET",
            format!("k{i}").as_bytes(),
            format!("v{i}").as_bytes(),
        ]));
        batch.extend(cmd(&[b"GET", format!("k{i}").as_bytes()]));
    }
    conn.send(&batch);
    for i in 0..1000 {
        assert_eq!(conn.read_reply(), b"+OK\r\n");
        let v = format!("v{i}");
        assert_eq!(
            conn.read_reply(),
            format!("${}\r\n{v}\r\n", v.len()).into_bytes()
        );
    }
    assert!(!conn.is_closed(Duration::from_millis(50)));
}

/// A pipeline longer than a round (`ROUND_COMMANDS_MAX` commands) sent in one write is
/// answered whole without more input: the commands left in the read buffer when a round
/// fills run in the next round, not after the client's next write.
#[test]
fn long_pipeline_in_one_write_is_answered_whole() {
    for shards in ["1", "3"] {
        let server = common::Server::start_with(&["--shards", shards]);
        let mut c = server.connect();
        // A large argument first: the connection's read buffer grows, so that later reads
        // may take more than a round's worth of commands at once.
        let big = vec![b'v'; 256 * 1024];
        assert_eq!(c.call(&[b"SET", b"big", &big]), b"+OK\r\n");
        let n = 5000;
        let mut bytes = Vec::new();
        for i in 0..n {
            bytes.extend_from_slice(&common::cmd(&[b"EXISTS", format!("k:{i}").as_bytes()]));
        }
        c.send(&bytes);
        for i in 0..n {
            let r = c.try_read_reply(std::time::Duration::from_secs(5));
            assert_eq!(
                r.as_deref().ok(),
                Some(&b":0\r\n"[..]),
                "reply {i} of {n} with {shards} shard(s)"
            );
        }
    }
}
