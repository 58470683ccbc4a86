//! The seed paper's Tables 5, 6 and 7 and the test vectors of conflict-semantics.md §3,
//! driven through op exchange between in-memory replicas (see `common`).

mod common;

use common::{Net, Replica, Reply};

/// Instance A and Instance B. A's replica id is the higher one, so on an exact timestamp tie
/// A wins (the seed: "in the case of a tiebreaker, Instance A always wins").
fn pair() -> (Vec<Replica>, Net) {
    (vec![Replica::new(2), Replica::new(1)], Net::new(2))
}

const A: usize = 0;
const B: usize = 1;

fn bulk(s: &str) -> Reply {
    Reply::Bulk(s.as_bytes().to_vec())
}

fn members(r: &Replica, k: &[u8]) -> Vec<String> {
    r.smembers(k)
        .into_iter()
        .map(|m| String::from_utf8(m).unwrap())
        .collect()
}

#[test]
fn table5_concurrent_sadd_unions() {
    let (mut rs, mut net) = pair();
    // t1
    rs[A].sadd(b"key1", b"A");
    rs[B].sadd(b"key1", b"B");
    // t2
    net.sync_all(&mut rs);
    // t3
    for r in &rs {
        assert_eq!(members(r, b"key1"), ["A", "B"]);
    }
    assert_eq!(rs[A].type_conflicts + rs[B].type_conflicts, 0);
}

#[test]
fn table6_later_set_wins() {
    let (mut rs, mut net) = pair();
    rs[A].now_ms = 1_000;
    rs[B].now_ms = 2_000;
    rs[A].set(b"key1", b"value1"); // t1
    rs[B].set(b"key1", b"value2"); // t2
    net.sync_all(&mut rs); // t3
    for r in &rs {
        assert_eq!(r.get(b"key1"), bulk("value2")); // t4
    }
}

#[test]
fn table6_exact_tie_goes_to_the_higher_replica_id() {
    let (mut rs, mut net) = pair();
    rs[A].now_ms = 1_000;
    rs[B].now_ms = 1_000;
    rs[A].set(b"key1", b"value1");
    rs[B].set(b"key1", b"value2");
    net.sync_all(&mut rs);
    for r in &rs {
        assert_eq!(r.get(b"key1"), bulk("value1"));
    }
}

#[test]
fn table7_append_wins_over_concurrent_del() {
    let (mut rs, mut net) = pair();
    rs[A].set(b"key1", b"value1"); // t1
    net.sync_all(&mut rs); // t2
    rs[A].append(b"key1", b"hello"); // t3
    rs[B].del(b"key1"); // t4
    net.sync_all(&mut rs); // t5
    // t6. The seed prints "value1 hello"; APPEND adds no space, so the value is "value1hello".
    for r in &rs {
        assert_eq!(r.get(b"key1"), bulk("value1hello"));
    }
}

#[test]
fn s3_1_counters_add_up() {
    let (mut rs, mut net) = pair();
    assert_eq!(rs[A].incrby(b"c", 7), Reply::Int(7));
    assert_eq!(rs[B].incrby(b"c", 3), Reply::Int(3));
    net.sync_all(&mut rs);
    for r in &rs {
        assert_eq!(r.get(b"c"), bulk("10"));
    }
    assert_eq!(rs[A].incrby(b"c", -3), Reply::Int(7));
    assert_eq!(rs[B].incrby(b"c", 6), Reply::Int(16));
    net.sync_all(&mut rs);
    for r in &rs {
        assert_eq!(r.get(b"c"), bulk("13"));
    }
}

#[test]
fn s3_1_set_resets_observed_increments_only() {
    let (mut rs, mut net) = pair();
    rs[A].set(b"k", b"1");
    net.sync_all(&mut rs);
    rs[B].incrby(b"k", 1);
    net.sync_all(&mut rs);
    assert_eq!(rs[A].get(b"k"), bulk("2"));
    rs[A].set(b"k", b"10"); // observed B's +1
    rs[B].incrby(b"k", 5); // concurrent
    net.sync_all(&mut rs);
    for r in &rs {
        assert_eq!(r.get(b"k"), bulk("15"));
    }
}

#[test]
fn s3_1_float_increments_print_like_redis() {
    let (mut rs, mut net) = pair();
    rs[A].set(b"f", b"1");
    net.sync_all(&mut rs);
    assert_eq!(rs[A].incrbyfloat(b"f", "-1.1"), bulk("-0.1"));
    assert_eq!(rs[B].incrbyfloat(b"f", "0.2"), bulk("1.2"));
    net.sync_all(&mut rs);
    for r in &rs {
        assert_eq!(r.get(b"f"), bulk("0.1"));
    }
}

#[test]
fn non_numeric_base_ignores_concurrent_increments() {
    let (mut rs, mut net) = pair();
    rs[A].set(b"k", b"5");
    net.sync_all(&mut rs);
    rs[A].now_ms += 10;
    rs[A].set(b"k", b"abc");
    rs[B].incrby(b"k", 1);
    net.sync_all(&mut rs);
    for r in &rs {
        assert_eq!(r.get(b"k"), bulk("abc"));
    }
    // A later SET that observed everything starts clean.
    rs[B].set(b"k", b"7");
    net.sync_all(&mut rs);
    for r in &rs {
        assert_eq!(r.get(b"k"), bulk("7"));
    }
}

#[test]
fn concurrent_increments_saturate_at_64_bits() {
    let (mut rs, mut net) = pair();
    rs[A].set(b"k", b"9223372036854775800");
    net.sync_all(&mut rs);
    assert_eq!(rs[A].incrby(b"k", 5), Reply::Int(9223372036854775805));
    assert_eq!(rs[B].incrby(b"k", 5), Reply::Int(9223372036854775805));
    net.sync_all(&mut rs);
    for r in &rs {
        assert_eq!(r.get(b"k"), bulk("9223372036854775807"));
    }
    assert_eq!(rs[A].incrby(b"k", 1), Reply::NotANumber);
}

#[test]
fn s3_2_add_wins_over_concurrent_del() {
    let (mut rs, mut net) = pair();
    rs[A].sadd(b"s", b"e1");
    net.sync_all(&mut rs);
    rs[A].sadd(b"s", b"e2");
    rs[B].del(b"s");
    net.sync_all(&mut rs);
    for r in &rs {
        assert_eq!(members(r, b"s"), ["e2"]);
    }
}

#[test]
fn s3_2_add_wins_over_concurrent_srem() {
    let (mut rs, mut net) = pair();
    rs[A].sadd(b"s", b"x");
    rs[A].sadd(b"s", b"y");
    net.sync_all(&mut rs);
    rs[A].srem(b"s", b"x");
    rs[B].sadd(b"s", b"x");
    net.sync_all(&mut rs);
    for r in &rs {
        assert_eq!(members(r, b"s"), ["x", "y"]);
    }
}

#[test]
fn s3_10_longest_ttl_wins_and_persist_beats_expire() {
    let (mut rs, mut net) = pair();
    rs[A].set(b"k", b"v");
    net.sync_all(&mut rs);
    rs[A].expire_at(b"k", 10_000);
    rs[B].expire_at(b"k", 50_000);
    net.sync_all(&mut rs);
    for r in &rs {
        assert_eq!(r.ttl_at(b"k"), Some(50_000));
    }
    rs[A].persist(b"k");
    rs[B].expire_at(b"k", 90_000);
    net.sync_all(&mut rs);
    for r in &rs {
        assert_eq!(r.ttl_at(b"k"), None);
    }
}

#[test]
fn s12_1_type_conflict_latest_write_wins_and_is_counted_once_per_site() {
    let (mut rs, mut net) = pair();
    rs[A].now_ms = 1_000;
    rs[B].now_ms = 2_000;
    rs[A].set(b"k", b"v");
    rs[B].sadd(b"k", b"m");
    net.sync_all(&mut rs);
    for r in &rs {
        assert_eq!(r.get(b"k"), Reply::WrongType);
        assert_eq!(members(r, b"k"), ["m"]);
        assert_eq!(r.type_conflicts, 1);
    }
    // A SET that observed both clears the conflict: a causal overwrite, not a conflict.
    rs[A].set(b"k", b"w");
    net.sync_all(&mut rs);
    for r in &rs {
        assert_eq!(r.get(b"k"), bulk("w"));
        assert_eq!(r.type_conflicts, 1);
    }
    // And the losing value does not come back after a DEL.
    rs[B].del(b"k");
    net.sync_all(&mut rs);
    for r in &rs {
        assert_eq!(r.get(b"k"), Reply::Nil);
        assert!(members(r, b"k").is_empty());
    }
}

#[test]
fn s12_1_del_then_sadd_is_a_causal_overwrite() {
    let (mut rs, mut net) = pair();
    rs[A].set(b"k", b"v");
    net.sync_all(&mut rs);
    rs[B].del(b"k");
    rs[B].sadd(b"k", b"m");
    net.sync_all(&mut rs);
    for r in &rs {
        assert_eq!(members(r, b"k"), ["m"]);
        assert_eq!(r.type_conflicts, 0);
    }
}

#[test]
fn s12_1_hidden_value_survives_until_observed() {
    // B's SADD is later, but A's INCR continues the string concurrently: the set stays
    // visible (latest stamp), the string stays live underneath, everywhere alike.
    let (mut rs, mut net) = pair();
    rs[A].now_ms = 1_000;
    rs[B].now_ms = 5_000;
    rs[A].incrby(b"k", 1);
    rs[B].sadd(b"k", b"m");
    rs[A].incrby(b"k", 1);
    net.sync_all(&mut rs);
    for r in &rs {
        assert_eq!(members(r, b"k"), ["m"]);
    }
    rs[A].now_ms = 9_000;
    // A sees a set now; its DEL removes both values.
    rs[A].del(b"k");
    net.sync_all(&mut rs);
    for r in &rs {
        assert_eq!(r.get(b"k"), Reply::Nil);
    }
}

/// docs/conflicts.md §1.1, second table: concurrent SETBITs of different bits both survive.
#[test]
fn concurrent_setbits_both_survive() {
    let (mut rs, mut net) = pair();
    rs[A].setbit(b"bits", 0, true); // t1
    net.sync_all(&mut rs); // t2
    rs[A].setbit(b"bits", 15, true); // t3
    rs[B].setbit(b"bits", 7, true);
    net.sync_all(&mut rs); // t4
    for r in &rs {
        assert_eq!(r.get(b"bits"), Reply::Bulk(b"\x81\x01".to_vec())); // t5
    }
}
