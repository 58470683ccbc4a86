//! HyperLogLog commands (PFADD PFCOUNT PFMERGE) against the real `meridian` binary: Redis's
//! exact bytes through GET, SET of Redis-produced values, error texts, and a randomized
//! comparison with the reference `redis-server` when it is installed.

mod common;

use common::{Raw, RedisRef, Server, bulk, int};

const OK: &str = "+OK\r\n";
const WRONGTYPE: &str = "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n";
const NOT_HLL: &str = "-WRONGTYPE Key is not a valid HyperLogLog string value.\r\n";
const CORRUPT: &str = "-INVALIDOBJ Corrupted HLL object detected\r\n";

/// `PFADD k a b c` in Redis 7.0.15, before and after PFCOUNT (the cache written).
const ABC: &[u8] =
    b"HYLL\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x80`\xf3\x80P\xb1\x84K\xfb\x80BZ";
const ABC_COUNTED: &[u8] =
    b"HYLL\x01\x00\x00\x00\x03\x00\x00\x00\x00\x00\x00\x00`\xf3\x80P\xb1\x84K\xfb\x80BZ";

fn bulk_bytes(b: &[u8]) -> Vec<u8> {
    let mut v = format!("${}\r\n", b.len()).into_bytes();
    v.extend_from_slice(b);
    v.extend_from_slice(b"\r\n");
    v
}

/// The payload of a bulk reply.
fn payload(reply: &[u8]) -> Vec<u8> {
    let start = reply.iter().position(|&b| b == b'\n').map_or(0, |i| i + 1);
    reply[start..reply.len() - 2].to_vec()
}

#[test]
fn pfadd_get_bytes_are_redis_bytes() {
    let s = Server::start_single();
    let mut c = s.connect();
    assert_eq!(c.call_line("PFADD k a b c"), int(1));
    assert_eq!(c.call_line("PFADD k a b c"), int(0));
    assert_eq!(c.call(&[b"GET", b"k"]), bulk_bytes(ABC));
    assert_eq!(c.call_line("PFCOUNT k"), int(3));
    assert_eq!(c.call(&[b"GET", b"k"]), bulk_bytes(ABC_COUNTED));
    assert_eq!(c.call_line("TYPE k"), "+string\r\n");
    assert_eq!(c.call_line("OBJECT ENCODING k"), bulk("raw"));
    assert_eq!(c.call_line("STRLEN k"), int(ABC.len() as i64));
    // An empty PFADD creates the key (and reports it), then changes nothing.
    assert_eq!(c.call_line("PFADD e"), int(1));
    assert_eq!(c.call_line("PFADD e"), int(0));
    assert_eq!(c.call_line("PFCOUNT e"), int(0));
    assert_eq!(c.call_line("PFCOUNT nokey"), int(0));
    assert_eq!(c.call_line("PFCOUNT k e nokey"), int(3));
}

#[test]
fn set_of_a_redis_value_is_a_hyperloglog() {
    let s = Server::start_single();
    let mut c = s.connect();
    assert_eq!(c.call(&[b"SET", b"h", ABC]), OK.as_bytes());
    assert_eq!(c.call_line("OBJECT ENCODING h"), bulk("embstr"));
    assert_eq!(c.call_line("PFCOUNT h"), int(3));
    assert_eq!(c.call(&[b"GET", b"h"]), bulk_bytes(ABC_COUNTED));
    assert_eq!(c.call_line("PFADD h d"), int(1));
    assert_eq!(c.call_line("PFCOUNT h"), int(4));
    assert_eq!(c.call_line("PFMERGE m h nokey"), OK);
    assert_eq!(c.call_line("PFCOUNT m"), int(4));
    // A SET keeps the TTL only with KEEPTTL, as for any string.
    assert_eq!(c.call_line("EXPIRE h 100"), int(1));
    let v = payload(&c.call(&[b"GET", b"h"]));
    assert_eq!(c.call(&[b"SET", b"h", &v, b"KEEPTTL"]), OK.as_bytes());
    assert!(c.call_line("TTL h").starts_with(":"));
    assert_ne!(c.call_line("TTL h"), int(-1));
    assert_eq!(c.call(&[b"SET", b"h", &v]), OK.as_bytes());
    assert_eq!(c.call_line("TTL h"), int(-1));
    assert_eq!(c.call_line("PFCOUNT h"), int(4));
    // RENAME and COPY keep the bytes.
    assert_eq!(c.call_line("COPY h h2"), int(1));
    assert_eq!(c.call(&[b"GET", b"h2"]), bulk_bytes(&v));
    // Overwritten by a plain string: no longer a HyperLogLog.
    assert_eq!(c.call_line("SET h plain"), OK);
    assert_eq!(c.call_line("PFADD h x"), NOT_HLL);
}

#[test]
fn error_texts() {
    let s = Server::start_single();
    let mut c = s.connect();
    assert_eq!(c.call_line("SET s hello"), OK);
    assert_eq!(c.call_line("PFADD s a"), NOT_HLL);
    assert_eq!(c.call_line("PFCOUNT s"), NOT_HLL);
    assert_eq!(c.call_line("PFMERGE d s"), NOT_HLL);
    assert_eq!(c.call_line("SET n 12345"), OK);
    assert_eq!(c.call_line("PFCOUNT n"), NOT_HLL);
    assert_eq!(c.call_line("SADD set m"), int(1));
    assert_eq!(c.call_line("PFADD set a"), WRONGTYPE);
    assert_eq!(c.call_line("PFCOUNT set"), WRONGTYPE);
    assert_eq!(c.call_line("PFCOUNT e set"), WRONGTYPE);
    // A sparse value whose opcodes do not cover 16384 registers.
    let mut bad = ABC.to_vec();
    bad.push(0);
    assert_eq!(c.call(&[b"SET", b"bad", &bad]), OK.as_bytes());
    assert_eq!(c.call_line("PFCOUNT bad"), CORRUPT);
    assert_eq!(c.call_line("PFCOUNT bad s"), CORRUPT);
    assert_eq!(c.call_line("PFMERGE d bad"), CORRUPT);
    // Runs past the last register (VAL opcodes after 16384 registers, or 20,000 VALs of 4):
    // corrupt, as Debian's redis-server 7.0.15 (with the fix for CVE-2025-32023) finds
    // them; the cached count still answers a single-key PFCOUNT, as there.
    let header = b"HYLL\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00".to_vec();
    let past_end = [header.clone(), vec![0x7f, 0xfd, 0x85, 0x80]].concat();
    let too_many = [header, vec![0x80 | (31 << 2) | 3; 20_000]].concat();
    for value in [past_end, too_many] {
        assert_eq!(c.call(&[b"SET", b"over", &value]), OK.as_bytes());
        assert_eq!(c.call_line("PFMERGE d2 over"), CORRUPT);
        assert_eq!(c.call_line("PFCOUNT over nokey"), CORRUPT);
        assert_eq!(c.call_line("PFCOUNT over"), int(0));
    }
    assert_eq!(
        c.call_line("PFCOUNT"),
        "-ERR wrong number of arguments for 'pfcount' command\r\n"
    );
    assert_eq!(c.call_line("PFCOUNT nokey"), int(0));
}

#[test]
fn pfadd_wakes_watch_and_del_removes() {
    let s = Server::start();
    let mut c = s.connect();
    let mut other = s.connect();
    assert_eq!(c.call_line("PFADD w a"), int(1));
    assert_eq!(c.call_line("WATCH w"), OK);
    assert_eq!(other.call_line("PFADD w b"), int(1));
    assert_eq!(c.call_line("MULTI"), OK);
    assert_eq!(c.call_line("PFCOUNT w"), "+QUEUED\r\n");
    assert_eq!(c.call_line("EXEC"), "*-1\r\n");
    assert_eq!(c.call_line("DEL w"), int(1));
    assert_eq!(c.call_line("EXISTS w"), int(0));
    assert_eq!(c.call_line("PFCOUNT w"), int(0));
}

/// A small deterministic generator (xorshift) so the comparison is reproducible.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Random PFADD/PFCOUNT/PFMERGE/GET/SET/DEL on a few keys, every reply compared byte for byte
/// with Redis 7.0.15 (sparse layouts, promotion to dense, caches).
#[test]
fn randomized_against_redis() {
    if !RedisRef::available() {
        eprintln!("redis-server not installed: skipped");
        return;
    }
    let redis = RedisRef::start();
    let ours = Server::start_single();
    let mut r: Raw = redis.connect();
    let mut m: Raw = ours.connect();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let key = |rng: &mut Rng| format!("h{}", rng.below(5)).into_bytes();
    for step in 0..2500 {
        let k = key(&mut rng);
        let roll = rng.below(100);
        let mut args: Vec<Vec<u8>> = Vec::new();
        if roll < 55 {
            args.push(b"PFADD".to_vec());
            args.push(k);
            let n = [0, 1, 1, 2, 3, 8, 40, 150][rng.below(8) as usize];
            for _ in 0..n {
                args.push(format!("{}", rng.below(40_000)).into_bytes());
            }
        } else if roll < 70 {
            args.push(b"PFCOUNT".to_vec());
            args.push(k);
            if rng.below(3) == 0 {
                args.push(key(&mut rng));
            }
        } else if roll < 78 {
            args.push(b"PFMERGE".to_vec());
            args.push(k);
            for _ in 0..rng.below(3) {
                args.push(key(&mut rng));
            }
        } else if roll < 95 {
            args.push(b"GET".to_vec());
            args.push(k);
        } else if roll < 97 {
            args.push(b"DEL".to_vec());
            args.push(k);
        } else {
            let src = key(&mut rng);
            let v = r.call(&[b"GET", &src]);
            if v.starts_with(b"$-1") {
                continue;
            }
            args.push(b"SET".to_vec());
            args.push(k);
            args.push(payload(&v));
        }
        let argv: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
        let want = r.call(&argv);
        let got = m.call(&argv);
        assert_eq!(
            String::from_utf8_lossy(&got),
            String::from_utf8_lossy(&want),
            "step {step}: {:?}",
            String::from_utf8_lossy(&argv.concat())
        );
    }
}
