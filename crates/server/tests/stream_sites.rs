//! Streams across sites (docs/conflicts.md §17), between real `meridian` processes on
//! loopback: concurrent XADD at three sites (auto IDs never collide, one explicit ID chosen
//! at two sites), XDEL and XTRIM during a partition (each removes only what its site had
//! seen), consumer groups read and acknowledged at two sites during a partition (the later
//! action wins per entry, cursors per entry origin), concurrent XACK and XCLAIM of one entry
//! at two sites and at three (one acknowledges, two claim),
//! and entries that arrive late from a cut-off site still delivered by `XREADGROUP >`.
//!
//! Every site listens on 127.0.0.1 only; partitions come from the loopback proxy in
//! `common/proxy.rs`. Every loop is bounded in count and time, and every process is killed
//! when its `Cluster` drops.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::sites::{CONVERGE_TIMEOUT, Cluster, Opts};
use common::{Raw, Reply};

const A: usize = 0;
const B: usize = 1;
const C: usize = 2;

const LINKS_UP: Duration = Duration::from_secs(15);

/// Long enough that a write at one site gets a later HLC stamp than a write at another site
/// just before it (both read the same wall clock).
const LATER: Duration = Duration::from_millis(30);

/// An entry as XRANGE shows it: ID and field/value strings.
type Entry = (String, Vec<String>);

fn entries(r: &Reply) -> Vec<Entry> {
    let Reply::Array(items) = r else {
        panic!("not an array: {r:?}");
    };
    items
        .iter()
        .map(|e| match e {
            Reply::Array(parts) => match parts.as_slice() {
                [Reply::Bulk(id), fields @ Reply::Array(_)] => {
                    (String::from_utf8_lossy(id).into_owned(), fields.strings())
                }
                other => panic!("not an entry: {other:?}"),
            },
            other => panic!("not an entry: {other:?}"),
        })
        .collect()
}

fn xrange(c: &mut Raw, key: &str) -> Vec<Entry> {
    entries(&c.reply(&["XRANGE", key, "-", "+"]))
}

fn ids(v: &[Entry]) -> Vec<String> {
    v.iter().map(|e| e.0.clone()).collect()
}

fn explicit(ns: impl IntoIterator<Item = u64>) -> Vec<String> {
    ns.into_iter().map(|n| format!("{n}-0")).collect()
}

/// `(ms, seq)` of an ID, for ordering checks.
fn parse_id(id: &str) -> (u64, u64) {
    let (ms, seq) = id.split_once('-').unwrap_or_else(|| panic!("bad ID {id}"));
    (
        ms.parse().unwrap_or_else(|_| panic!("bad ID {id}")),
        seq.parse().unwrap_or_else(|_| panic!("bad ID {id}")),
    )
}

fn bulk_str(r: &Reply) -> String {
    match r {
        Reply::Bulk(b) => String::from_utf8_lossy(b).into_owned(),
        other => panic!("not a bulk string: {other:?}"),
    }
}

/// The value of `field` in a flat RESP2 map reply (XINFO).
fn field<'a>(r: &'a Reply, name: &str) -> &'a Reply {
    let Reply::Array(items) = r else {
        panic!("not an array: {r:?}");
    };
    items
        .chunks(2)
        .find(|p| p[0] == Reply::bulk(name))
        .map(|p| &p[1])
        .unwrap_or_else(|| panic!("no {name} in {r:?}"))
}

/// `XPENDING key group` as (count, [(consumer, count)]).
fn pending_summary(c: &mut Raw, key: &str, group: &str) -> (i64, Vec<(String, String)>) {
    let r = c.reply(&["XPENDING", key, group]);
    let Reply::Array(items) = &r else {
        panic!("XPENDING: {r:?}");
    };
    let Some(Reply::Int(n)) = items.first() else {
        panic!("XPENDING: {r:?}");
    };
    let owners = match items.get(3) {
        Some(Reply::Array(v)) => v
            .iter()
            .map(|o| {
                let s = o.strings();
                (s[0].clone(), s[1].clone())
            })
            .collect(),
        _ => Vec::new(),
    };
    (*n, owners)
}

/// `XPENDING key group - + 100` as (ID, owner, deliveries) (idle times left out).
fn pending_list(c: &mut Raw, key: &str, group: &str) -> Vec<(String, String, i64)> {
    let r = c.reply(&["XPENDING", key, group, "-", "+", "100"]);
    let Reply::Array(items) = &r else {
        panic!("XPENDING: {r:?}");
    };
    items
        .iter()
        .map(|p| match p {
            Reply::Array(v) => match v.as_slice() {
                [id, owner, Reply::Int(_idle), Reply::Int(n)] => {
                    (bulk_str(id), bulk_str(owner), *n)
                }
                other => panic!("XPENDING entry: {other:?}"),
            },
            other => panic!("XPENDING entry: {other:?}"),
        })
        .collect()
}

/// The IDs an XREADGROUP (one stream) delivered.
fn read_group(c: &mut Raw, args: &[&str]) -> Vec<String> {
    let mut full = vec!["XREADGROUP"];
    full.extend_from_slice(args);
    match c.reply(&full) {
        Reply::Nil | Reply::Null => Vec::new(),
        Reply::Array(streams) => match streams.as_slice() {
            [Reply::Array(kv)] => match kv.as_slice() {
                [_, list] => ids(&entries(list)),
                other => panic!("XREADGROUP: {other:?}"),
            },
            other => panic!("XREADGROUP: {other:?}"),
        },
        other => panic!("XREADGROUP: {other:?}"),
    }
}

fn xadd(c: &mut Raw, key: &str, id: &str, f: &str, v: &str) -> String {
    bulk_str(&c.reply(&["XADD", key, id, f, v]))
}

// ---------------------------------------------------------------------------------------
// 1. Concurrent XADD: every entry kept, one order everywhere.
// ---------------------------------------------------------------------------------------

#[test]
fn concurrent_xadd_at_three_sites_keeps_every_entry_in_one_order() {
    let cluster = Cluster::start(&["a", "b", "c"], Opts::proxied());
    cluster.wait_links_up(LINKS_UP);
    let mut conns: Vec<Raw> = (0..3).map(|i| cluster.site(i).connect()).collect();

    // Connected: interleaved auto-ID adds at the three sites, faster than the links carry
    // them, so each site often generates in the same millisecond as the others.
    let mut generated = Vec::new();
    for i in 0..100 {
        for (s, c) in conns.iter_mut().enumerate() {
            generated.push(xadd(c, "s", "*", "n", &format!("{s}:{i}")));
        }
    }
    // Cut off from each other: more auto IDs, and one explicit ID chosen at every site.
    cluster.isolate(A);
    cluster.isolate(B);
    for i in 0..50 {
        for (s, c) in conns.iter_mut().enumerate() {
            generated.push(xadd(c, "s", "*", "n", &format!("{s}:p{i}")));
        }
    }
    for (s, c) in conns.iter_mut().enumerate() {
        assert_eq!(xadd(c, "e", "5-0", "from", &s.to_string()), "5-0");
        std::thread::sleep(LATER);
    }
    cluster.heal_all();
    cluster.wait_converged(CONVERGE_TIMEOUT);

    let unique: BTreeSet<&String> = generated.iter().collect();
    assert_eq!(
        unique.len(),
        generated.len(),
        "an auto ID was generated twice"
    );
    let reference = xrange(&mut conns[A], "s");
    assert_eq!(reference.len(), generated.len());
    let order: Vec<(u64, u64)> = reference.iter().map(|e| parse_id(&e.0)).collect();
    assert!(order.windows(2).all(|w| w[0] < w[1]), "not in ID order");
    let shown: BTreeSet<String> = ids(&reference).into_iter().collect();
    assert_eq!(shown, generated.iter().cloned().collect::<BTreeSet<_>>());
    for (s, c) in conns.iter_mut().enumerate() {
        assert_eq!(xrange(c, "s"), reference, "at site {s}");
        assert_eq!(c.int(&["XLEN", "s"]), generated.len() as i64);
        let info = c.reply(&["XINFO", "STREAM", "s"]);
        assert_eq!(
            *field(&info, "entries-added"),
            Reply::Int(generated.len() as i64)
        );
        assert_eq!(
            bulk_str(field(&info, "last-generated-id")),
            reference.last().map(|e| e.0.clone()).unwrap_or_default()
        );
        // One ID chosen at three sites names one entry: the latest write's fields are shown,
        // and each add counts in entries-added.
        assert_eq!(
            xrange(c, "e"),
            vec![("5-0".to_string(), vec!["from".to_string(), "2".to_string()])],
            "at site {s}"
        );
        let info = c.reply(&["XINFO", "STREAM", "e"]);
        assert_eq!(*field(&info, "entries-added"), Reply::Int(3));
        assert_eq!(*field(&info, "length"), Reply::Int(1));
    }
    // Deleting the shown version of "5-0" deletes the entry (every version it observed).
    assert_eq!(conns[B].int(&["XDEL", "e", "5-0"]), 1);
    cluster.wait_converged(CONVERGE_TIMEOUT);
    for c in conns.iter_mut() {
        assert_eq!(c.int(&["XLEN", "e"]), 0);
    }
}

// ---------------------------------------------------------------------------------------
// 2. XDEL and XTRIM during a partition remove what their site had seen.
// ---------------------------------------------------------------------------------------

#[test]
fn xdel_and_xtrim_during_a_partition_remove_only_what_their_site_saw() {
    let cluster = Cluster::start(&["a", "b"], Opts::proxied());
    cluster.wait_links_up(LINKS_UP);
    let mut a = cluster.site(A).connect();
    let mut b = cluster.site(B).connect();
    for i in 1..=20 {
        xadd(&mut a, "t", &format!("{i}-0"), "i", &i.to_string());
    }
    cluster.wait_converged(CONVERGE_TIMEOUT);

    cluster.partition(A, B);
    // A keeps the last 5 of the 20 it saw, then deletes one of them.
    assert_eq!(a.int(&["XTRIM", "t", "MAXLEN", "=", "5"]), 15);
    assert_eq!(a.int(&["XDEL", "t", "18-0"]), 1);
    assert_eq!(ids(&xrange(&mut a, "t")), explicit([16, 17, 19, 20]));
    // B, concurrently: five new entries, a delete of an entry A trimmed and of one A kept.
    for i in 21..=25 {
        xadd(&mut b, "t", &format!("{i}-0"), "i", &i.to_string());
    }
    assert_eq!(b.int(&["XDEL", "t", "3-0", "17-0"]), 2);
    cluster.heal(A, B);
    cluster.wait_converged(CONVERGE_TIMEOUT);

    // A's trim removed 1..15 (what it saw), not B's new entries: the merged stream is longer
    // than MAXLEN until the next trim.
    let expect = explicit([16, 19, 20, 21, 22, 23, 24, 25]);
    for (site, c) in [("a", &mut a), ("b", &mut b)] {
        assert_eq!(ids(&xrange(c, "t")), expect, "at {site}");
        let info = c.reply(&["XINFO", "STREAM", "t"]);
        assert_eq!(*field(&info, "length"), Reply::Int(8), "at {site}");
        assert_eq!(bulk_str(field(&info, "max-deleted-entry-id")), "18-0");
        assert_eq!(*field(&info, "entries-added"), Reply::Int(25));
        assert_eq!(bulk_str(field(&info, "last-generated-id")), "25-0");
    }
    // The next trim, at either site, caps the merged stream.
    assert_eq!(b.int(&["XTRIM", "t", "MAXLEN", "5"]), 3);
    cluster.wait_converged(CONVERGE_TIMEOUT);
    assert_eq!(ids(&xrange(&mut a, "t")), explicit(21..=25));
    assert_eq!(ids(&xrange(&mut b, "t")), explicit(21..=25));
}

// ---------------------------------------------------------------------------------------
// 3. Consumer groups read and acknowledged at two sites.
// ---------------------------------------------------------------------------------------

#[test]
fn consumer_groups_at_two_sites_converge_by_the_later_action() {
    let cluster = Cluster::start(&["a", "b"], Opts::proxied());
    cluster.wait_links_up(LINKS_UP);
    let mut a = cluster.site(A).connect();
    let mut b = cluster.site(B).connect();
    for i in 1..=10 {
        xadd(&mut a, "q", &format!("{i}-0"), "i", &i.to_string());
    }
    a.ok(&["XGROUP", "CREATE", "q", "g", "0"]);
    cluster.wait_converged(CONVERGE_TIMEOUT);

    // Partitioned, both sites deliver the same first entries (at least once across sites),
    // then A acknowledges two of them.
    cluster.partition(A, B);
    let got_b = read_group(
        &mut b,
        &["GROUP", "g", "bob", "COUNT", "3", "STREAMS", "q", ">"],
    );
    assert_eq!(got_b, explicit(1..=3));
    std::thread::sleep(LATER);
    let got_a = read_group(
        &mut a,
        &["GROUP", "g", "alice", "COUNT", "3", "STREAMS", "q", ">"],
    );
    assert_eq!(got_a, explicit(1..=3));
    assert_eq!(a.int(&["XACK", "q", "g", "1-0", "2-0"]), 2);
    cluster.heal(A, B);
    cluster.wait_converged(CONVERGE_TIMEOUT);

    // Per entry the later action wins: A's acks of 1-0 and 2-0, A's delivery of 3-0.
    for (site, c) in [("a", &mut a), ("b", &mut b)] {
        assert_eq!(
            pending_list(c, "q", "g"),
            vec![("3-0".to_string(), "alice".to_string(), 1)],
            "at {site}"
        );
        let groups = c.reply(&["XINFO", "GROUPS", "q"]);
        let Reply::Array(gs) = &groups else {
            panic!("XINFO GROUPS: {groups:?}")
        };
        assert_eq!(gs.len(), 1);
        assert_eq!(bulk_str(field(&gs[0], "last-delivered-id")), "3-0");
        assert_eq!(*field(&gs[0], "consumers"), Reply::Int(2), "alice and bob");
        assert_eq!(*field(&gs[0], "pending"), Reply::Int(1));
    }
    // Both sites go on from the merged cursor.
    let next = read_group(
        &mut b,
        &["GROUP", "g", "bob", "COUNT", "1", "STREAMS", "q", ">"],
    );
    assert_eq!(next, explicit([4]));
    cluster.wait_converged(CONVERGE_TIMEOUT);
    let next = read_group(
        &mut a,
        &["GROUP", "g", "alice", "COUNT", "1", "STREAMS", "q", ">"],
    );
    assert_eq!(next, explicit([5]));
    cluster.wait_converged(CONVERGE_TIMEOUT);

    // Concurrent XCLAIM and XACK of one entry: the later one wins, whichever site it is at.
    cluster.partition(A, B);
    let claimed = a.reply(&["XCLAIM", "q", "g", "carol", "0", "3-0", "JUSTID"]);
    assert_eq!(claimed.strings(), vec!["3-0".to_string()]);
    std::thread::sleep(LATER);
    assert_eq!(b.int(&["XACK", "q", "g", "3-0"]), 1);
    // And the other way round: an acknowledgement, then a later claim of the same entry.
    assert_eq!(b.int(&["XACK", "q", "g", "4-0"]), 1);
    std::thread::sleep(LATER);
    let claimed = a.reply(&["XCLAIM", "q", "g", "carol", "0", "4-0", "JUSTID"]);
    assert_eq!(claimed.strings(), vec!["4-0".to_string()]);
    cluster.heal(A, B);
    cluster.wait_converged(CONVERGE_TIMEOUT);
    for (site, c) in [("a", &mut a), ("b", &mut b)] {
        let owners: Vec<(String, String)> = pending_list(c, "q", "g")
            .into_iter()
            .map(|(id, owner, _)| (id, owner))
            .collect();
        assert_eq!(
            owners,
            vec![
                ("4-0".to_string(), "carol".to_string()),
                ("5-0".to_string(), "alice".to_string())
            ],
            "at {site}"
        );
        let (n, per_consumer) = pending_summary(c, "q", "g");
        assert_eq!(n, 2);
        assert_eq!(
            per_consumer,
            vec![
                ("alice".to_string(), "1".to_string()),
                ("carol".to_string(), "1".to_string())
            ]
        );
    }
}

/// The IDs an XCLAIM (without JUSTID) returned.
fn claim(c: &mut Raw, key: &str, group: &str, consumer: &str, id: &str) -> Vec<String> {
    ids(&entries(
        &c.reply(&["XCLAIM", key, group, consumer, "0", id]),
    ))
}

/// `XINFO CONSUMERS` as (name, pending) pairs (idle times left out: they are per site).
fn consumers(c: &mut Raw, key: &str, group: &str) -> Vec<(String, i64)> {
    let r = c.reply(&["XINFO", "CONSUMERS", key, group]);
    let Reply::Array(items) = &r else {
        panic!("XINFO CONSUMERS: {r:?}");
    };
    items
        .iter()
        .map(|i| match field(i, "pending") {
            Reply::Int(n) => (bulk_str(field(i, "name")), *n),
            other => panic!("XINFO CONSUMERS pending: {other:?}"),
        })
        .collect()
}

/// Three sites cut off from each other act on one delivered entry each: one acknowledges it,
/// the other two claim it for their own consumers. Per entry the latest of the three actions
/// wins at every site (docs/conflicts.md §17), whichever site took it and in whatever order
/// the sites hear of them; the losing claimers stay consumers with nothing pending.
#[test]
fn concurrent_xack_and_xclaims_at_three_sites_converge_on_the_latest() {
    let cluster = Cluster::start(&["a", "b", "c"], Opts::proxied());
    cluster.wait_links_up(LINKS_UP);
    let mut conns: Vec<Raw> = (0..3).map(|i| cluster.site(i).connect()).collect();
    for i in 1..=3 {
        xadd(&mut conns[A], "q", &format!("{i}-0"), "i", &i.to_string());
    }
    conns[A].ok(&["XGROUP", "CREATE", "q", "g", "0"]);
    assert_eq!(
        read_group(&mut conns[A], &["GROUP", "g", "alice", "STREAMS", "q", ">"]),
        explicit(1..=3)
    );
    cluster.wait_converged(CONVERGE_TIMEOUT);

    cluster.isolate(A);
    cluster.isolate(B);
    // Three rounds, each a little later than the one before; per entry each site acts once:
    //   1-0: A acks, B claims for bob, C claims for carol (latest)
    //   2-0: B claims for bob, C claims for carol, A acks (latest)
    //   3-0: C claims for carol, A acks, B claims for bob (latest)
    let act = |conns: &mut [Raw], site: usize, id: &str| match site {
        A => assert_eq!(conns[A].int(&["XACK", "q", "g", id]), 1, "A acks {id}"),
        B => assert_eq!(
            claim(&mut conns[B], "q", "g", "bob", id),
            vec![id.to_string()]
        ),
        _ => assert_eq!(
            claim(&mut conns[C], "q", "g", "carol", id),
            vec![id.to_string()]
        ),
    };
    for round in 0..3 {
        act(&mut conns, A, ["1-0", "3-0", "2-0"][round]);
        act(&mut conns, B, ["2-0", "1-0", "3-0"][round]);
        act(&mut conns, C, ["3-0", "2-0", "1-0"][round]);
        std::thread::sleep(LATER);
    }
    // Before the heal each site shows only its own actions.
    assert_eq!(pending_list(&mut conns[A], "q", "g"), vec![]);
    assert_eq!(
        pending_list(&mut conns[C], "q", "g"),
        vec![
            ("1-0".to_string(), "carol".to_string(), 2),
            ("2-0".to_string(), "carol".to_string(), 2),
            ("3-0".to_string(), "carol".to_string(), 2)
        ]
    );
    cluster.heal_all();
    cluster.wait_converged(CONVERGE_TIMEOUT);

    let mut reference = None;
    for (site, c) in conns.iter_mut().enumerate() {
        // Each claim counted one more delivery on top of the one the claimer's site had seen.
        assert_eq!(
            pending_list(c, "q", "g"),
            vec![
                ("1-0".to_string(), "carol".to_string(), 2),
                ("3-0".to_string(), "bob".to_string(), 2)
            ],
            "at site {site}"
        );
        let (n, per_consumer) = pending_summary(c, "q", "g");
        assert_eq!(n, 2, "at site {site}");
        assert_eq!(
            per_consumer,
            vec![
                ("bob".to_string(), "1".to_string()),
                ("carol".to_string(), "1".to_string())
            ],
            "at site {site}"
        );
        assert_eq!(
            consumers(c, "q", "g"),
            vec![
                ("alice".to_string(), 0),
                ("bob".to_string(), 1),
                ("carol".to_string(), 1)
            ],
            "at site {site}"
        );
        let groups = c.reply(&["XINFO", "GROUPS", "q"]);
        let Reply::Array(gs) = &groups else {
            panic!("XINFO GROUPS: {groups:?}")
        };
        assert_eq!(gs.len(), 1);
        assert_eq!(*field(&gs[0], "consumers"), Reply::Int(3), "at site {site}");
        assert_eq!(*field(&gs[0], "pending"), Reply::Int(2), "at site {site}");
        assert_eq!(bulk_str(field(&gs[0], "last-delivered-id")), "3-0");
        // The whole XINFO GROUPS reply (no per-site times in it) is the same everywhere.
        match &reference {
            None => reference = Some(groups),
            Some(r) => assert_eq!(&groups, r, "XINFO GROUPS at site {site}"),
        }
    }
    // The digests agree (wait_converged checked them); so does the next action anywhere.
    assert_eq!(conns[B].int(&["XACK", "q", "g", "1-0", "3-0"]), 2);
    cluster.wait_converged(CONVERGE_TIMEOUT);
    for c in conns.iter_mut() {
        assert_eq!(pending_summary(c, "q", "g").0, 0);
    }
}

// ---------------------------------------------------------------------------------------
// 4. A site cut off while others read: its entries arrive late and are still delivered.
// ---------------------------------------------------------------------------------------

#[test]
fn late_entries_of_a_cut_off_site_are_delivered_by_xreadgroup() {
    let cluster = Cluster::start(&["a", "b", "c"], Opts::proxied());
    cluster.wait_links_up(LINKS_UP);
    let mut a = cluster.site(A).connect();
    let mut b = cluster.site(B).connect();
    let mut c = cluster.site(C).connect();
    a.ok(&["XGROUP", "CREATE", "r", "g", "$", "MKSTREAM"]);
    cluster.wait_converged(CONVERGE_TIMEOUT);

    cluster.isolate(B);
    let early: Vec<String> = (0..3)
        .map(|i| xadd(&mut b, "r", "*", "b", &i.to_string()))
        .collect();
    std::thread::sleep(LATER);
    let late: Vec<String> = (0..3)
        .map(|i| xadd(&mut a, "r", "*", "a", &i.to_string()))
        .collect();
    assert!(parse_id(&early[2]) < parse_id(&late[0]));
    common::sites::wait_converged(&[cluster.site(A), cluster.site(C)], CONVERGE_TIMEOUT);
    // C reads A's entries while B's, with lower IDs, are still cut off.
    let got = read_group(&mut c, &["GROUP", "g", "carl", "STREAMS", "r", ">"]);
    assert_eq!(got, late);
    let xread = |conn: &mut Raw, after: &str| -> Vec<String> {
        match conn.reply(&["XREAD", "STREAMS", "r", after]) {
            Reply::Nil | Reply::Null => Vec::new(),
            Reply::Array(s) => match s.as_slice() {
                [Reply::Array(kv)] => ids(&entries(&kv[1])),
                other => panic!("XREAD: {other:?}"),
            },
            other => panic!("XREAD: {other:?}"),
        }
    };
    cluster.heal_all();
    cluster.wait_converged(CONVERGE_TIMEOUT);

    // The group's last-delivered-id is above B's entries, yet `>` delivers them: the cursor
    // is kept per entry origin. (Plain XREAD after an ID does skip them: docs/conflicts.md.)
    for (site, conn) in [("a", &mut a), ("b", &mut b), ("c", &mut c)] {
        let groups = conn.reply(&["XINFO", "GROUPS", "r"]);
        let Reply::Array(gs) = &groups else {
            panic!("XINFO GROUPS: {groups:?}")
        };
        assert_eq!(
            bulk_str(field(&gs[0], "last-delivered-id")),
            late[2],
            "at {site}"
        );
        assert_eq!(xread(conn, &late[2]), Vec::<String>::new());
        assert_eq!(xread(conn, "0").len(), 6);
    }
    let got = read_group(&mut a, &["GROUP", "g", "alice", "STREAMS", "r", ">"]);
    assert_eq!(got, early);
    cluster.wait_converged(CONVERGE_TIMEOUT);
    assert_eq!(
        read_group(&mut b, &["GROUP", "g", "bob", "STREAMS", "r", ">"]),
        Vec::<String>::new()
    );
    let (n, _) = pending_summary(&mut b, "r", "g");
    assert_eq!(n, 6);
}

// ---------------------------------------------------------------------------------------
// 5. Blocked readers are woken by entries from another site.
// ---------------------------------------------------------------------------------------

#[test]
fn blocked_readers_are_woken_by_another_sites_xadd() {
    let cluster = Cluster::start(&["a", "b"], Opts::proxied());
    cluster.wait_links_up(LINKS_UP);
    let mut a = cluster.site(A).connect();
    let mut b = cluster.site(B).connect();
    let mut b2 = cluster.site(B).connect();
    a.ok(&["XGROUP", "CREATE", "w", "g", "$", "MKSTREAM"]);
    cluster.wait_converged(CONVERGE_TIMEOUT);
    b.send_cmd(&[b"XREAD", b"BLOCK", b"20000", b"STREAMS", b"w", b"$"]);
    b2.send_cmd(&[
        b"XREADGROUP",
        b"GROUP",
        b"g",
        b"bob",
        b"BLOCK",
        b"20000",
        b"STREAMS",
        b"w",
        b">",
    ]);
    // Both are blocked before the entry is added.
    let mut probe = cluster.site(B).connect();
    assert!(common::sites::eventually(Duration::from_secs(10), || {
        let info = bulk_str(&probe.reply(&["INFO", "clients"]));
        info.lines().any(|l| l.trim() == "blocked_clients:2")
    }));
    let id = xadd(&mut a, "w", "*", "f", "v");
    for conn in [&mut b, &mut b2] {
        let reply = conn
            .try_read_reply(Duration::from_secs(10))
            .expect("the blocked reader was not woken");
        let Reply::Array(s) = common::parse_reply(&reply) else {
            panic!("XREAD: {}", common::escape(&reply));
        };
        let [Reply::Array(kv)] = s.as_slice() else {
            panic!("XREAD: {s:?}");
        };
        assert_eq!(ids(&entries(&kv[1])), vec![id.clone()]);
    }
}

// ---------------------------------------------------------------------------------------
// 6. A quarantined site rejoins by a complete full sync.
// ---------------------------------------------------------------------------------------

/// The names an `XINFO GROUPS` or `XINFO CONSUMERS` reply lists.
fn names(r: &Reply) -> Vec<String> {
    let Reply::Array(items) = r else {
        panic!("XINFO: {r:?}");
    };
    items.iter().map(|i| bulk_str(field(i, "name"))).collect()
}

/// C is cut off (A's ops no longer reach it) long enough for A to quarantine it; meanwhile A
/// deletes an entry, acknowledges a pending entry, deletes a consumer and destroys a group
/// that C holds, and C adds an entry of its own. At the rejoin (complete full syncs, each
/// side judged by its causal context: docs/conflicts.md §17) nothing A removed comes back on
/// either site, and C's entry survives.
#[test]
fn a_quarantined_site_rejoins_without_bringing_back_what_was_removed() {
    let cluster = Cluster::start(
        &["a", "c"],
        Opts::proxied().flags(&["--sync-quarantine-ms", "1000", "--sync-compression", "none"]),
    );
    const C2: usize = 1;
    cluster.wait_links_up(LINKS_UP);
    let mut a = cluster.site(A).connect();
    let mut c = cluster.site(C2).connect();
    for i in 1..=3 {
        xadd(&mut a, "q", &format!("{i}-0"), "i", &i.to_string());
    }
    a.ok(&["XGROUP", "CREATE", "q", "g", "0"]);
    a.ok(&["XGROUP", "CREATE", "q", "g2", "0"]);
    assert_eq!(
        read_group(&mut a, &["GROUP", "g", "c1", "STREAMS", "q", ">"]),
        explicit([1, 2, 3])
    );
    assert_eq!(a.int(&["XGROUP", "CREATECONSUMER", "q", "g", "c2"]), 1);
    cluster.wait_converged(CONVERGE_TIMEOUT);

    // C←A: A's ops no longer reach C, nor C's acks A: A quarantines C.
    cluster.proxy(C2, A).partition();
    let quarantined = common::sites::eventually(Duration::from_secs(15), || {
        cluster.site(A).peer_info(&cluster.site(C2).id)["quarantined"] == "1"
    });
    assert!(quarantined, "A never quarantined C");
    assert_eq!(a.int(&["XDEL", "q", "1-0"]), 1);
    assert_eq!(a.int(&["XACK", "q", "g", "2-0"]), 1);
    assert_eq!(a.int(&["XGROUP", "DELCONSUMER", "q", "g", "c2"]), 0);
    assert_eq!(a.int(&["XGROUP", "DESTROY", "q", "g2"]), 1);
    xadd(&mut c, "q", "5-0", "i", "5");
    // A few GC steps at the default hz, so that A collects what it may.
    std::thread::sleep(Duration::from_millis(400));
    cluster.proxy(C2, A).reset();
    cluster.proxy(A, C2).reset();
    cluster.heal_all();
    cluster.wait_converged(CONVERGE_TIMEOUT);

    for (site, x) in [("a", &mut a), ("c", &mut c)] {
        assert_eq!(ids(&xrange(x, "q")), explicit([2, 3, 5]), "at {site}");
        assert_eq!(
            names(&x.reply(&["XINFO", "GROUPS", "q"])),
            vec!["g".to_string()],
            "at {site}"
        );
        assert_eq!(
            names(&x.reply(&["XINFO", "CONSUMERS", "q", "g"])),
            vec!["c1".to_string()],
            "at {site}"
        );
        // 1-0 was deleted, not acknowledged: it stays pending, as in Redis.
        let pending: Vec<String> = pending_list(x, "q", "g").into_iter().map(|p| p.0).collect();
        assert_eq!(pending, explicit([1, 3]), "at {site}");
    }
}

// ---------------------------------------------------------------------------------------
// 7. The stable ID: what a reader at one site may read up to without missing an entry.
// ---------------------------------------------------------------------------------------

/// `CRDT.STREAMSTABLE key` as an ID.
fn stable(c: &mut Raw, key: &str) -> (u64, u64) {
    parse_id(&bulk_str(&c.reply(&["CRDT.STREAMSTABLE", key])))
}

/// The stable ID at A follows B's clock while B is connected, stops below every ID B
/// generates while cut off (so a reader that stays at or below it misses none of B's
/// entries), and catches up after the heal. Alone, a server's stable ID is the stream's last
/// ID.
#[test]
fn the_stable_id_stops_below_a_cut_off_sites_entries_and_catches_up() {
    let cluster = Cluster::start(&["a", "b"], Opts::proxied());
    cluster.wait_links_up(LINKS_UP);
    let mut a = cluster.site(A).connect();
    let mut b = cluster.site(B).connect();
    let to_id = |(ms, seq): (u64, u64)| format!("{ms}-{seq}");

    // Connected: an entry B adds is soon below A's stable ID, and so is A's own.
    let before = xadd(&mut b, "s", "*", "b", "0");
    let own = xadd(&mut a, "s", "*", "a", "0");
    let caught_up = common::sites::eventually(Duration::from_secs(10), || {
        let s = stable(&mut a, "s");
        s >= parse_id(&before) && s >= parse_id(&own)
    });
    assert!(caught_up, "A's stable ID never passed {before} and {own}");
    // Its form: the last ID of a millisecond.
    assert_eq!(stable(&mut a, "s").1, u64::MAX);

    cluster.partition(A, B);
    // Whatever B's links carried before the cut has arrived by now.
    std::thread::sleep(Duration::from_millis(500));
    let frozen = stable(&mut a, "s");
    let cut_off: Vec<String> = (1..=3)
        .map(|i| xadd(&mut b, "s", "*", "b", &i.to_string()))
        .collect();
    let local: Vec<String> = (1..=3)
        .map(|i| xadd(&mut a, "s", "*", "a", &i.to_string()))
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    // A's stable ID does not move while B is cut off, and every ID B or A generated
    // meanwhile is above it: reading A's stream up to it misses nothing.
    assert_eq!(stable(&mut a, "s"), frozen);
    for id in cut_off.iter().chain(&local) {
        assert!(parse_id(id) > frozen, "{id} at or below {frozen:?}");
    }
    let read_to_stable = ids(&entries(&a.reply(&["XRANGE", "s", "-", &to_id(frozen)])));
    // B's view stops at A's clock likewise.
    let frozen_b = stable(&mut b, "s");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(stable(&mut b, "s"), frozen_b);

    cluster.heal(A, B);
    cluster.wait_converged(CONVERGE_TIMEOUT);
    let last = cut_off.iter().chain(&local).map(|id| parse_id(id)).max();
    let caught_up = common::sites::eventually(Duration::from_secs(10), || {
        Some(stable(&mut a, "s")) > last && Some(stable(&mut b, "s")) > last
    });
    assert!(
        caught_up,
        "the stable IDs did not pass {last:?} after the heal"
    );
    // What A showed up to the frozen ID is still exactly what is there: nothing arrived
    // below it.
    assert_eq!(
        ids(&entries(&a.reply(&["XRANGE", "s", "-", &to_id(frozen)]))),
        read_to_stable
    );
    assert_eq!(xrange(&mut a, "s").len(), 8);

    // Another type: WRONGTYPE; wrong arity: Redis's error.
    a.ok(&["SET", "str", "x"]);
    let r = a.reply(&["CRDT.STREAMSTABLE", "str"]);
    assert!(
        matches!(&r, Reply::Err(e) if e.starts_with("WRONGTYPE")),
        "{r:?}"
    );
    let r = a.reply(&["CRDT.STREAMSTABLE"]);
    assert!(
        matches!(&r, Reply::Err(e) if e.contains("wrong number of arguments")),
        "{r:?}"
    );
    drop(cluster);

    // Alone, the stable ID is the stream's last ID, and 0-0 before the stream exists.
    let solo = common::Server::start();
    let mut c = solo.connect();
    assert_eq!(stable(&mut c, "s"), (0, 0));
    xadd(&mut c, "s", "5-3", "f", "v");
    assert_eq!(stable(&mut c, "s"), (5, 3));
}
