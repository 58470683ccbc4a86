//! Bitmaps and string edits over real sockets (docs/conflicts.md §1.1): the op log grows by
//! the bits SETBIT writes, not by the whole value; two sites that write different bits and
//! BITFIELD SET and INCRBY (a counter) during a partition converge with every write kept, while
//! APPEND and SETRANGE, whole-value assignments, follow the register's rule (the seed paper's
//! Table 7 for APPEND ∥ DEL); a SET stamped after a concurrent edit wins, and a later edit
//! after the GC folded earlier ones still converges. Replies and error texts are compared with Redis by the differential
//! corpus `tests/corpus/bitmaps.txt`.
//!
//! Every site listens on 127.0.0.1 only; partitions come from the loopback proxy in
//! `common/proxy.rs`. Every loop is bounded in count and time.

mod common;

use std::time::Duration;

use common::sites::{CONVERGE_TIMEOUT, Cluster, Opts};
use common::{Raw, Reply, Server};

const A: usize = 0;
const B: usize = 1;

const LINKS_UP: Duration = Duration::from_secs(15);

/// Long enough that a write at one site gets a later HLC stamp than a write at another site
/// just before it (both read the same wall clock).
const LATER: Duration = Duration::from_millis(30);

fn aof_size(c: &mut Raw) -> u64 {
    let info = c.call_text(&["INFO", "persistence"]);
    info.lines()
        .find_map(|l| l.strip_prefix("aof_current_size:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no aof_current_size in {info}"))
}

fn get(c: &mut Raw, key: &str) -> Vec<u8> {
    match c.reply(&["GET", key]) {
        Reply::Bulk(b) => b,
        other => panic!("GET {key}: {other:?}"),
    }
}

/// The op log takes the bits a SETBIT or BITFIELD SET writes: 200 of them on a 40,000-byte
/// value log well under 100 bytes each (an assignment of the whole value would log 8 MB).
#[test]
fn bit_writes_log_only_their_bits() {
    const WRITES: u64 = 200;
    const LOGGED_PER_WRITE_BYTES_MAX: u64 = 100;
    let s = Server::start_single();
    let mut c = s.connect();
    c.ok(&["SET", "k", &"x".repeat(40_000)]);
    let before = aof_size(&mut c);
    for i in 0..WRITES / 2 {
        c.int(&["SETBIT", "k", &(i * 8 * 397 + 3).to_string(), "1"]);
        c.reply(&[
            "BITFIELD",
            "k",
            "SET",
            "u8",
            &(i * 8 * 211).to_string(),
            "7",
        ]);
    }
    let logged = aof_size(&mut c) - before;
    assert!(
        logged <= WRITES * LOGGED_PER_WRITE_BYTES_MAX,
        "{logged} bytes logged for {WRITES} bit writes"
    );
    assert_eq!(c.int(&["STRLEN", "k"]), 40_000);
}

#[test]
fn concurrent_bit_writes_at_two_sites_all_survive() {
    let cluster = Cluster::start(&["a", "b"], Opts::proxied());
    cluster.wait_links_up(LINKS_UP);
    let mut a = cluster.site(A).connect();
    let mut b = cluster.site(B).connect();

    a.ok(&["SET", "s", "abcd"]);
    assert_eq!(a.int(&["SETBIT", "bits", "0", "1"]), 0);
    a.reply(&["BITFIELD", "bf", "SET", "u8", "0", "1"]);
    cluster.wait_converged(CONVERGE_TIMEOUT);

    cluster.partition(A, B);
    // Different bits at each site; a BITFIELD field at each; appends at both.
    assert_eq!(a.int(&["SETBIT", "bits", "15", "1"]), 0);
    assert_eq!(b.int(&["SETBIT", "bits", "7", "1"]), 0);
    assert_eq!(b.int(&["SETBIT", "bits", "0", "0"]), 1);
    a.reply(&["BITFIELD", "bf", "SET", "u8", "8", "2"]);
    b.reply(&["BITFIELD", "bf", "SET", "u8", "16", "3"]);
    // One field incremented at both sites: a counter (both increments count).
    assert_eq!(
        a.reply(&["BITFIELD", "bf", "INCRBY", "u8", "0", "10"]),
        Reply::Array(vec![Reply::Int(11)])
    );
    assert_eq!(
        b.reply(&["BITFIELD", "bf", "INCRBY", "u8", "0", "20"]),
        Reply::Array(vec![Reply::Int(21)])
    );
    assert_eq!(a.int(&["APPEND", "s", "X"]), 5);
    std::thread::sleep(LATER);
    assert_eq!(b.int(&["APPEND", "s", "Y"]), 5);
    assert_eq!(b.int(&["SETRANGE", "s", "1", "B"]), 5);
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(get(&mut a, "s"), b"abcdX", "partitioned");
    cluster.heal(A, B);
    cluster.wait_converged(CONVERGE_TIMEOUT);
    for site in [A, B] {
        let mut c = cluster.site(site).connect();
        assert_eq!(get(&mut c, "bits"), b"\x01\x01", "bits at {site}");
        assert_eq!(get(&mut c, "bf"), b"\x1f\x02\x03", "bf at {site}");
        // APPEND and SETRANGE assign the whole value: the latest (b's SETRANGE) wins.
        assert_eq!(get(&mut c, "s"), b"aBcdY", "s at {site}");
        assert_eq!(c.int(&["BITCOUNT", "bits"]), 2);
    }

    // A SET stamped after a concurrent APPEND wins; the APPEND is not shown.
    cluster.partition(A, B);
    assert_eq!(a.int(&["APPEND", "s", "Z"]), 6);
    std::thread::sleep(LATER);
    b.ok(&["SET", "s", "fresh"]);
    cluster.heal(A, B);
    cluster.wait_converged(CONVERGE_TIMEOUT);
    for site in [A, B] {
        let mut c = cluster.site(site).connect();
        assert_eq!(get(&mut c, "s"), b"fresh", "s at {site}");
    }

    // Once the GC has had time to fold the stable edits, later concurrent edits and a DEL
    // still converge; APPEND ∥ DEL keeps the old value with the suffix (Table 7).
    std::thread::sleep(Duration::from_secs(3));
    cluster.partition(A, B);
    assert_eq!(a.int(&["APPEND", "s", "!"]), 6);
    assert_eq!(b.int(&["DEL", "s"]), 1);
    assert_eq!(b.int(&["SETBIT", "bits", "23", "1"]), 0);
    assert_eq!(a.int(&["SETBIT", "bits", "8", "0"]), 0);
    cluster.heal(A, B);
    cluster.wait_converged(CONVERGE_TIMEOUT);
    for site in [A, B] {
        let mut c = cluster.site(site).connect();
        assert_eq!(get(&mut c, "s"), b"fresh!", "s at {site}");
        assert_eq!(get(&mut c, "bits"), b"\x01\x01\x01", "bits at {site}");
    }
    assert_eq!(cluster.site(A).digest(), cluster.site(B).digest());
}
