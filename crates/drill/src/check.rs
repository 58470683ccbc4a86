//! Checkers, run on the ledger and the converged state after heal and quiescence (testing.md
//! §4). Each is a pure function of the records and one site's final state, so unit tests feed
//! them synthetic ledgers.
//!
//! - counters: final = Σ acked increments when no increment is `info`, else within
//!   [Σ ok + Σ negative info, Σ ok + Σ positive info];
//! - sets: every acked SADD present unless an SREM or DEL that may have seen it ran; no element
//!   an acked SREM (or a DEL that certainly saw it) removed is back; nothing never added;
//! - registers (strings, hash fields): the final value was written, and no acked write that
//!   causally follows it (same site later, or issued after a read of it, transitively) exists;
//! - sorted sets and lists: members present were added, acked removals stay removed;
//! - power loss: acked writes of a site inside a loss window count as `info`.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::ledger::{Op, Outcome, Record};

/// A key's value as read from a site.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    Str(String),
    Set(BTreeSet<String>),
    Hash(BTreeMap<String, String>),
    Zset(BTreeMap<String, String>),
    List(Vec<String>),
    Other(String),
}

pub type State = BTreeMap<String, Value>;

/// Writes of `site` acked in `from_us..=to_us` may be lost (power loss under `everysec`).
#[derive(Clone, Copy, Debug)]
pub struct LossWindow {
    pub site: usize,
    pub from_us: u64,
    pub to_us: u64,
}

/// Most examples kept per kind of violation (the counts are exact).
pub const EXAMPLES_MAX: usize = 20;

/// Violations by kind; each list holds up to `EXAMPLES_MAX` examples, `counts` the totals.
#[derive(Debug, Default)]
pub struct Findings {
    pub lost: Vec<String>,
    pub resurrected: Vec<String>,
    pub unexpected: Vec<String>,
    pub counters: Vec<String>,
    pub causal: Vec<String>,
    pub counts: BTreeMap<&'static str, usize>,
    /// Ops excused by a loss window (for the report).
    pub excused: usize,
}

impl Findings {
    fn add(&mut self, kind: &'static str, msg: String) {
        let n = self.counts.entry(kind).or_insert(0);
        *n += 1;
        let list = match kind {
            "lost" => &mut self.lost,
            "resurrected" => &mut self.resurrected,
            "unexpected" => &mut self.unexpected,
            "counter" => &mut self.counters,
            _ => &mut self.causal,
        };
        if list.len() < EXAMPLES_MAX {
            list.push(msg);
        }
    }

    pub fn count(&self, kind: &str) -> usize {
        self.counts.get(kind).copied().unwrap_or(0)
    }

    pub fn total(&self) -> usize {
        self.counts.values().sum()
    }

    /// One line per kind with its count and examples.
    pub fn lines(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (kind, list) in [
            ("lost", &self.lost),
            ("resurrected", &self.resurrected),
            ("unexpected", &self.unexpected),
            ("counter", &self.counters),
            ("causal", &self.causal),
        ] {
            let n = self.count(kind);
            if n > 0 {
                out.push(format!("{n} {kind}: {}", list.join("; ")));
            }
        }
        out
    }
}

/// Runs every checker.
pub fn check_all(records: &[Record], state: &State, loss: &[LossWindow]) -> Findings {
    let mut f = Findings::default();
    let recs = excuse_losses(records, loss, &mut f.excused);
    counters(&recs, state, &mut f);
    sets(&recs, state, &mut f);
    registers(&recs, state, &mut f);
    hashes(&recs, state, &mut f);
    zsets(&recs, state, &mut f);
    lists(&recs, state, &mut f);
    expiring(&recs, state, &mut f);
    f
}

/// Acked writes inside a loss window become `info`.
pub fn excuse_losses(records: &[Record], loss: &[LossWindow], excused: &mut usize) -> Vec<Record> {
    records
        .iter()
        .map(|r| {
            let mut r = r.clone();
            if r.ok()
                && r.op.is_write()
                && loss
                    .iter()
                    .any(|w| w.site == r.site && (w.from_us..=w.to_us).contains(&r.t_done_us))
            {
                r.outcome = Outcome::Info;
                *excused += 1;
            }
            r
        })
        .collect()
}

fn by_key<'a>(records: &'a [Record], prefix: &str) -> BTreeMap<&'a str, Vec<&'a Record>> {
    let mut m: BTreeMap<&str, Vec<&Record>> = BTreeMap::new();
    for r in records.iter().filter(|r| r.key.starts_with(prefix)) {
        m.entry(r.key.as_str()).or_default().push(r);
    }
    m
}

fn who(r: &Record) -> String {
    format!(
        "site {} client {} seq {} at {:.3}s",
        r.site,
        r.client,
        r.seq,
        r.t_done_us as f64 / 1e6
    )
}

pub fn counters(records: &[Record], state: &State, f: &mut Findings) {
    for (key, ops) in by_key(records, "cnt:") {
        let (mut ok, mut pos, mut neg) = (0i64, 0i64, 0i64);
        for r in ops.iter().filter(|r| r.op == Op::IncrBy) {
            let d: i64 = r.arg.parse().unwrap_or(0);
            match r.outcome {
                Outcome::Ok => ok += d,
                Outcome::Info if d > 0 => pos += d,
                Outcome::Info => neg += d,
                Outcome::Fail => {}
            }
        }
        let value = match state.get(key) {
            None => 0,
            Some(Value::Str(s)) => match s.parse::<i64>() {
                Ok(v) => v,
                Err(_) => {
                    f.add("counter", format!("{key} holds {s:?}, not a number"));
                    continue;
                }
            },
            Some(other) => {
                f.add("counter", format!("{key} holds {other:?}"));
                continue;
            }
        };
        let (lo, hi) = (ok + neg, ok + pos);
        if value < lo || value > hi {
            let expect = if lo == hi {
                format!("{lo}")
            } else {
                format!("[{lo}, {hi}]")
            };
            f.add(
                "counter",
                format!("{key} = {value}, expected {expect} (acked sum {ok})"),
            );
        }
    }
}

/// Earliest time (µs) each value was read at each site: `value → site → t_done`.
fn first_reads<'a>(ops: &[&'a Record], read: Op) -> HashMap<&'a str, BTreeMap<usize, u64>> {
    let mut m: HashMap<&str, BTreeMap<usize, u64>> = HashMap::new();
    for r in ops.iter().filter(|r| r.op == read && r.ok()) {
        let t = m
            .entry(r.reply.as_str())
            .or_default()
            .entry(r.site)
            .or_insert(u64::MAX);
        *t = (*t).min(r.t_done_us);
    }
    m
}

/// Whether `set`'s element `e` was certainly visible at `site` before `t_us` (its acked add
/// there, or a read there returned it).
fn seen_at(
    add: Option<&&Record>,
    reads: &HashMap<&str, BTreeMap<usize, u64>>,
    e: &str,
    site: usize,
    t_us: u64,
) -> bool {
    add.is_some_and(|a| a.ok() && a.site == site && a.t_done_us < t_us)
        || reads
            .get(e)
            .and_then(|m| m.get(&site))
            .is_some_and(|t| *t < t_us)
}

pub fn sets(records: &[Record], state: &State, f: &mut Findings) {
    for (key, ops) in by_key(records, "set:") {
        let empty = BTreeSet::new();
        let members = match state.get(key) {
            None => &empty,
            Some(Value::Set(s)) => s,
            Some(other) => {
                f.add("unexpected", format!("{key} holds {other:?}, not a set"));
                continue;
            }
        };
        let adds: HashMap<&str, &Record> = ops
            .iter()
            .filter(|r| r.op == Op::Sadd && r.maybe())
            .map(|r| (r.arg.as_str(), *r))
            .collect();
        let reads = first_reads(&ops, Op::SrandMember);
        let dels: Vec<&&Record> = ops
            .iter()
            .filter(|r| r.op == Op::Del && r.maybe())
            .collect();
        let mut srems: HashMap<&str, Vec<&Record>> = HashMap::new();
        for r in ops.iter().filter(|r| r.op == Op::Srem && r.maybe()) {
            srems.entry(r.arg.as_str()).or_default().push(r);
        }
        for e in members {
            if !adds.contains_key(e.as_str()) {
                f.add("unexpected", format!("{key} holds {e}, never added"));
            }
        }
        for (e, a) in &adds {
            let present = members.contains(*e);
            if a.ok() && !present {
                let removed =
                    srems.contains_key(e) || dels.iter().any(|d| d.t_done_us > a.t_inv_us);
                if !removed {
                    f.add(
                        "lost",
                        format!("{key}: acked SADD {e} ({}) is missing", who(a)),
                    );
                }
            }
            if present {
                if let Some(r) = srems.get(e).and_then(|v| v.iter().find(|r| r.ok())) {
                    f.add(
                        "resurrected",
                        format!("{key}: {e} is back after acked SREM ({})", who(r)),
                    );
                    continue;
                }
                let add = adds.get(e);
                if let Some(d) = dels
                    .iter()
                    .find(|d| d.ok() && seen_at(add, &reads, e, d.site, d.t_inv_us))
                {
                    f.add(
                        "resurrected",
                        format!(
                            "{key}: {e} is back after an acked DEL that had seen it ({})",
                            who(d)
                        ),
                    );
                }
            }
        }
    }
}

/// The causal register check of one register (a key, or a hash field): `writes` assign
/// `arg`-values, `reads` returned them. Returns violations.
fn register_causal(
    name: &str,
    writes: &[&Record],
    reads: &HashMap<&str, BTreeMap<usize, u64>>,
    final_value: &str,
    f: &mut Findings,
) {
    let Some(start) = writes.iter().position(|w| w.arg == final_value) else {
        return;
    };
    // Bounded: quadratic in the writes of one register; skip absurd sizes.
    if writes.len() > 20_000 {
        return;
    }
    let mut seen = vec![false; writes.len()];
    let mut stack = vec![start];
    if let Some(s) = seen.get_mut(start) {
        *s = true;
    }
    while let Some(i) = stack.pop() {
        let Some(u) = writes.get(i) else { continue };
        let read_at = reads.get(u.arg.as_str());
        for (j, v) in writes.iter().enumerate() {
            if seen.get(j).copied().unwrap_or(true) || !v.ok() {
                continue;
            }
            let same_site = u.ok() && u.site == v.site && u.t_done_us < v.t_inv_us;
            let via_read = read_at
                .and_then(|m| m.get(&v.site))
                .is_some_and(|t| *t < v.t_inv_us);
            if same_site || via_read {
                if let Some(s) = seen.get_mut(j) {
                    *s = true;
                }
                stack.push(j);
            }
        }
    }
    if let Some((j, later)) = writes
        .iter()
        .enumerate()
        .find(|(j, w)| *j != start && w.ok() && seen.get(*j).copied().unwrap_or(false))
    {
        let _ = j;
        let first = writes.get(start).map(|w| who(w)).unwrap_or_default();
        f.add(
            "causal",
            format!(
                "{name} = {final_value:?} ({first}), but acked {:?} ({}) causally follows it",
                later.arg,
                who(later)
            ),
        );
    }
}

pub fn registers(records: &[Record], state: &State, f: &mut Findings) {
    for (key, ops) in by_key(records, "str:") {
        let writes: Vec<&Record> = ops
            .iter()
            .filter(|r| r.op == Op::Set && r.maybe())
            .copied()
            .collect();
        let reads = first_reads(&ops, Op::Get);
        match state.get(key) {
            None => {
                if let Some(w) = writes.iter().find(|w| w.ok()) {
                    f.add(
                        "lost",
                        format!(
                            "{key} is missing, but SET {:?} was acked ({})",
                            w.arg,
                            who(w)
                        ),
                    );
                }
            }
            Some(Value::Str(v)) => {
                if !writes.iter().any(|w| &w.arg == v) {
                    f.add("unexpected", format!("{key} = {v:?}, never written"));
                    continue;
                }
                register_causal(key, &writes, &reads, v, f);
            }
            Some(other) => f.add("unexpected", format!("{key} holds {other:?}, not a string")),
        }
    }
}

pub fn hashes(records: &[Record], state: &State, f: &mut Findings) {
    for (key, ops) in by_key(records, "hash:") {
        let fields = match state.get(key) {
            None => BTreeMap::new(),
            Some(Value::Hash(h)) => h.clone(),
            Some(other) => {
                f.add("unexpected", format!("{key} holds {other:?}, not a hash"));
                continue;
            }
        };
        let mut per_field: BTreeMap<&str, Vec<&Record>> = BTreeMap::new();
        for r in &ops {
            per_field.entry(r.arg.as_str()).or_default().push(r);
        }
        for (field, fops) in per_field {
            let name = format!("{key}.{field}");
            let writes: Vec<&Record> = fops
                .iter()
                .filter(|r| r.op == Op::Hset && r.maybe())
                .copied()
                .collect();
            let hdels: Vec<&&Record> = fops
                .iter()
                .filter(|r| r.op == Op::Hdel && r.maybe())
                .collect();
            match fields.get(field) {
                None => {
                    for w in writes.iter().filter(|w| w.ok()) {
                        if !hdels.iter().any(|d| d.t_done_us > w.t_inv_us) {
                            f.add(
                                "lost",
                                format!(
                                    "{name} is missing, but HSET {:?} was acked ({})",
                                    w.val,
                                    who(w)
                                ),
                            );
                            break;
                        }
                    }
                }
                Some(v) => {
                    if !writes.iter().any(|w| &w.val == v) {
                        f.add("unexpected", format!("{name} = {v:?}, never written"));
                        continue;
                    }
                    // Re-key the field's writes and reads on the value for the causal walk.
                    let as_reg: Vec<Record> = writes
                        .iter()
                        .map(|w| Record {
                            arg: w.val.clone(),
                            ..(*w).clone()
                        })
                        .collect();
                    let refs: Vec<&Record> = as_reg.iter().collect();
                    let reads = first_reads(&fops, Op::Hget);
                    register_causal(&name, &refs, &reads, v, f);
                    let reads_v = reads.get(v.as_str());
                    let writer = as_reg.iter().find(|w| &w.arg == v);
                    if let Some(d) = hdels.iter().find(|d| {
                        d.ok()
                            && (writer.is_some_and(|w| {
                                w.ok() && w.site == d.site && w.t_done_us < d.t_inv_us
                            }) || reads_v
                                .and_then(|m| m.get(&d.site))
                                .is_some_and(|t| *t < d.t_inv_us))
                    }) {
                        f.add(
                            "resurrected",
                            format!(
                                "{name} = {v:?} after an acked HDEL that had seen it ({})",
                                who(d)
                            ),
                        );
                    }
                }
            }
        }
    }
}

pub fn zsets(records: &[Record], state: &State, f: &mut Findings) {
    for (key, ops) in by_key(records, "zset:") {
        let members = match state.get(key) {
            None => BTreeMap::new(),
            Some(Value::Zset(z)) => z.clone(),
            Some(other) => {
                f.add(
                    "unexpected",
                    format!("{key} holds {other:?}, not a sorted set"),
                );
                continue;
            }
        };
        let adds: HashMap<&str, &Record> = ops
            .iter()
            .filter(|r| r.op == Op::Zadd && r.maybe())
            .map(|r| (r.arg.as_str(), *r))
            .collect();
        let dels: Vec<&&Record> = ops
            .iter()
            .filter(|r| r.op == Op::Del && r.maybe())
            .collect();
        for m in members.keys() {
            if !adds.contains_key(m.as_str()) {
                f.add("unexpected", format!("{key} holds member {m}, never added"));
            }
        }
        for (m, a) in &adds {
            let rems: Vec<&&Record> = ops
                .iter()
                .filter(|r| r.op == Op::Zrem && r.arg == *m && r.maybe())
                .collect();
            let incrs: Vec<&&Record> = ops
                .iter()
                .filter(|r| r.op == Op::Zincrby && r.arg == *m && r.maybe())
                .collect();
            let present = members.contains_key(*m);
            // A DEL of the key that ended after the add began may have removed it.
            let deleted = dels.iter().any(|d| d.t_done_us > a.t_inv_us);
            if a.ok() && !present && rems.is_empty() && !deleted {
                f.add(
                    "lost",
                    format!("{key}: acked ZADD {m} ({}) is missing", who(a)),
                );
            }
            if present {
                for r in rems.iter().filter(|r| r.ok()) {
                    // An increment the removal may not have seen brings the member back.
                    let unseen = incrs
                        .iter()
                        .any(|i| !(i.ok() && i.site == r.site && i.t_done_us < r.t_inv_us));
                    if !unseen {
                        f.add(
                            "resurrected",
                            format!("{key}: {m} is back after acked ZREM ({})", who(r)),
                        );
                        break;
                    }
                }
            }
        }
    }
}

pub fn lists(records: &[Record], state: &State, f: &mut Findings) {
    for (key, ops) in by_key(records, "list:") {
        let items: BTreeSet<String> = match state.get(key) {
            None => BTreeSet::new(),
            Some(Value::List(l)) => l.iter().cloned().collect(),
            Some(other) => {
                f.add("unexpected", format!("{key} holds {other:?}, not a list"));
                continue;
            }
        };
        let pushes: HashMap<&str, &Record> = ops
            .iter()
            .filter(|r| r.op == Op::Rpush && r.maybe())
            .map(|r| (r.arg.as_str(), *r))
            .collect();
        let popped: HashMap<&str, &Record> = ops
            .iter()
            .filter(|r| r.op == Op::Lpop && r.ok())
            .map(|r| (r.reply.as_str(), *r))
            .collect();
        let uncertain_pop = ops
            .iter()
            .any(|r| r.op == Op::Lpop && r.outcome == Outcome::Info);
        for e in &items {
            if !pushes.contains_key(e.as_str()) {
                f.add("unexpected", format!("{key} holds {e}, never pushed"));
            }
            if let Some(p) = popped.get(e.as_str()) {
                f.add(
                    "resurrected",
                    format!(
                        "{key}: {e} is back after an acked LPOP returned it ({})",
                        who(p)
                    ),
                );
            }
        }
        if !uncertain_pop {
            for (e, p) in &pushes {
                if p.ok() && !items.contains(*e) && !popped.contains_key(e) {
                    f.add(
                        "lost",
                        format!(
                            "{key}: acked RPUSH {e} ({}) is neither present nor popped",
                            who(p)
                        ),
                    );
                }
            }
        }
    }
}

pub fn expiring(records: &[Record], state: &State, f: &mut Findings) {
    for (key, ops) in by_key(records, "exp:") {
        match state.get(key) {
            Some(Value::Str(v))
                if !ops
                    .iter()
                    .any(|r| r.op == Op::Set && r.maybe() && &r.arg == v) =>
            {
                f.add("unexpected", format!("{key} = {v:?}, never written"));
            }
            None | Some(Value::Str(_)) => {}
            Some(other) => f.add("unexpected", format!("{key} holds {other:?}, not a string")),
        }
    }
}

/// Keys whose values differ between two states (at most `EXAMPLES_MAX` described).
pub fn diff_states(a_name: &str, a: &State, b_name: &str, b: &State) -> (usize, Vec<String>) {
    let keys: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    let mut n = 0;
    let mut out = Vec::new();
    for k in keys {
        let (va, vb) = (a.get(k), b.get(k));
        if va != vb {
            n += 1;
            if out.len() < EXAMPLES_MAX {
                out.push(format!("{k}: {a_name}={va:?} {b_name}={vb:?}"));
            }
        }
    }
    (n, out)
}

const CRC16: [u16; 256] = crc16_table();

const fn crc16_table() -> [u16; 256] {
    let mut t = [0u16; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = (i as u16) << 8;
        let mut j = 0;
        while j < 8 {
            c = if c & 0x8000 != 0 {
                (c << 1) ^ 0x1021
            } else {
                c << 1
            };
            j += 1;
        }
        t[i] = c;
        i += 1;
    }
    t
}

/// Redis Cluster's hash slot of a key (CRC16/XMODEM mod 16384, honouring `{hash tags}`).
pub fn slot(key: &[u8]) -> u16 {
    let hashed = key
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = key.get(open + 1..)?;
            let close = rest.iter().position(|&b| b == b'}')?;
            if close == 0 { None } else { rest.get(..close) }
        })
        .unwrap_or(key);
    let mut crc: u16 = 0;
    for &b in hashed {
        let idx = usize::from(((crc >> 8) as u8) ^ b);
        crc = (crc << 8) ^ CRC16.get(idx).copied().unwrap_or(0);
    }
    crc % 16384
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(site: usize, op: Op, key: &str, arg: &str, outcome: Outcome, t: u64) -> Record {
        Record {
            site,
            client: 0,
            seq: t,
            op,
            key: key.into(),
            arg: arg.into(),
            val: String::new(),
            outcome,
            reply: String::new(),
            t_inv_us: t,
            t_done_us: t + 1,
        }
    }

    fn state(items: &[(&str, Value)]) -> State {
        items
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect()
    }

    fn set(items: &[&str]) -> Value {
        Value::Set(items.iter().map(|s| s.to_string()).collect())
    }

    #[test]
    fn slots_match_redis() {
        assert_eq!(slot(b"foo"), 12182);
        assert_eq!(slot(b"{user1000}.following"), slot(b"user1000"));
    }

    #[test]
    fn counter_exact_without_info_and_bounded_with_it() {
        let l = vec![
            rec(0, Op::IncrBy, "cnt:1", "5", Outcome::Ok, 10),
            rec(1, Op::IncrBy, "cnt:1", "-2", Outcome::Ok, 20),
            rec(1, Op::IncrBy, "cnt:1", "7", Outcome::Fail, 30),
        ];
        let mut f = Findings::default();
        counters(&l, &state(&[("cnt:1", Value::Str("3".into()))]), &mut f);
        assert_eq!(f.total(), 0);
        let mut f = Findings::default();
        counters(&l, &state(&[("cnt:1", Value::Str("10".into()))]), &mut f);
        assert_eq!(f.count("counter"), 1, "a failed increment must not count");
        let mut l2 = l.clone();
        l2.push(rec(2, Op::IncrBy, "cnt:1", "4", Outcome::Info, 40));
        for (v, bad) in [("3", 0), ("7", 0), ("8", 1), ("2", 1)] {
            let mut f = Findings::default();
            counters(&l2, &state(&[("cnt:1", Value::Str(v.into()))]), &mut f);
            assert_eq!(f.count("counter"), bad, "value {v}");
        }
        // Missing key is 0: wrong when increments were acked.
        let mut f = Findings::default();
        counters(&l, &State::new(), &mut f);
        assert_eq!(f.count("counter"), 1);
    }

    #[test]
    fn set_checker_finds_lost_resurrected_and_unexpected() {
        let l = vec![
            rec(0, Op::Sadd, "set:1", "0:0:1", Outcome::Ok, 10),
            rec(1, Op::Sadd, "set:1", "1:0:1", Outcome::Ok, 20),
            rec(2, Op::Sadd, "set:1", "2:0:1", Outcome::Info, 30),
            Record {
                reply: "0:0:1".into(),
                ..rec(1, Op::SrandMember, "set:1", "", Outcome::Ok, 40)
            },
            rec(1, Op::Srem, "set:1", "0:0:1", Outcome::Ok, 50),
        ];
        let mut f = Findings::default();
        sets(&l, &state(&[("set:1", set(&["1:0:1"]))]), &mut f);
        assert_eq!(f.total(), 0, "{:?}", f.lines());
        // The info add may be there too.
        let mut f = Findings::default();
        sets(&l, &state(&[("set:1", set(&["1:0:1", "2:0:1"]))]), &mut f);
        assert_eq!(f.total(), 0);
        // Lost: an acked add with no removal is gone.
        let mut f = Findings::default();
        sets(&l, &state(&[("set:1", set(&[]))]), &mut f);
        assert_eq!(f.count("lost"), 1, "{:?}", f.lines());
        // Resurrected: the acked SREM's element is back.
        let mut f = Findings::default();
        sets(&l, &state(&[("set:1", set(&["0:0:1", "1:0:1"]))]), &mut f);
        assert_eq!(f.count("resurrected"), 1);
        // Unexpected.
        let mut f = Findings::default();
        sets(&l, &state(&[("set:1", set(&["1:0:1", "9:9:9"]))]), &mut f);
        assert_eq!(f.count("unexpected"), 1);
        // A DEL at the adding site after the add must have removed it.
        let mut l2 = l.clone();
        l2.push(rec(1, Op::Del, "set:1", "", Outcome::Ok, 60));
        let mut f = Findings::default();
        sets(&l2, &state(&[("set:1", set(&["1:0:1"]))]), &mut f);
        assert_eq!(f.count("resurrected"), 1);
        // ...while a concurrent add elsewhere may survive it.
        let mut f = Findings::default();
        let l3 = vec![
            rec(0, Op::Sadd, "set:2", "a", Outcome::Ok, 10),
            rec(1, Op::Del, "set:2", "", Outcome::Ok, 20),
        ];
        sets(&l3, &state(&[("set:2", set(&["a"]))]), &mut f);
        assert_eq!(f.total(), 0);
    }

    #[test]
    fn register_checker_finds_causally_overwritten_winner() {
        let l = vec![
            rec(0, Op::Set, "str:1", "v1", Outcome::Ok, 10),
            Record {
                reply: "v1".into(),
                ..rec(1, Op::Get, "str:1", "", Outcome::Ok, 20)
            },
            rec(1, Op::Set, "str:1", "v2", Outcome::Ok, 30),
            rec(2, Op::Set, "str:1", "v3", Outcome::Ok, 15),
        ];
        // v2 was written after reading v1: v1 must not win. v3 is concurrent with both.
        for (v, bad) in [("v2", 0), ("v3", 0), ("v1", 1)] {
            let mut f = Findings::default();
            registers(&l, &state(&[("str:1", Value::Str(v.into()))]), &mut f);
            assert_eq!(f.count("causal"), bad, "final {v}: {:?}", f.lines());
        }
        // Same-site order: a later acked write at the same site must win over an earlier one.
        let l2 = vec![
            rec(0, Op::Set, "str:2", "a", Outcome::Ok, 10),
            rec(0, Op::Set, "str:2", "b", Outcome::Ok, 20),
        ];
        let mut f = Findings::default();
        registers(&l2, &state(&[("str:2", Value::Str("a".into()))]), &mut f);
        assert_eq!(f.count("causal"), 1);
        let mut f = Findings::default();
        registers(&l2, &state(&[("str:2", Value::Str("zz".into()))]), &mut f);
        assert_eq!(f.count("unexpected"), 1);
        let mut f = Findings::default();
        registers(&l2, &State::new(), &mut f);
        assert_eq!(f.count("lost"), 1);
    }

    #[test]
    fn loss_windows_excuse_only_their_site_and_time() {
        let l = vec![
            rec(0, Op::Sadd, "set:1", "a", Outcome::Ok, 1_000_000),
            rec(0, Op::Sadd, "set:1", "b", Outcome::Ok, 5_000_000),
            rec(1, Op::Sadd, "set:1", "c", Outcome::Ok, 5_000_000),
        ];
        let w = [LossWindow {
            site: 0,
            from_us: 4_500_000,
            to_us: 5_500_000,
        }];
        let f = check_all(&l, &state(&[("set:1", set(&["a", "c"]))]), &w);
        assert_eq!(f.total(), 0, "{:?}", f.lines());
        assert_eq!(f.excused, 1);
        let f = check_all(&l, &state(&[("set:1", set(&["b", "c"]))]), &w);
        assert_eq!(
            f.count("lost"),
            1,
            "a write outside the window is not excused"
        );
    }

    #[test]
    fn list_and_zset_checkers_find_resurrections() {
        let l = vec![
            rec(0, Op::Rpush, "list:1", "x", Outcome::Ok, 10),
            Record {
                reply: "x".into(),
                ..rec(1, Op::Lpop, "list:1", "", Outcome::Ok, 20)
            },
            rec(0, Op::Zadd, "zset:1", "m", Outcome::Ok, 10),
            rec(0, Op::Zrem, "zset:1", "m", Outcome::Ok, 20),
        ];
        let mut f = Findings::default();
        lists(
            &l,
            &state(&[("list:1", Value::List(vec!["x".into()]))]),
            &mut f,
        );
        assert_eq!(f.count("resurrected"), 1);
        let mut f = Findings::default();
        zsets(
            &l,
            &state(&[(
                "zset:1",
                Value::Zset([("m".to_string(), "1".to_string())].into()),
            )]),
            &mut f,
        );
        assert_eq!(f.count("resurrected"), 1);
        let mut f = Findings::default();
        lists(&l, &State::new(), &mut f);
        zsets(&l, &State::new(), &mut f);
        assert_eq!(f.total(), 0);
        // A ZADD missing at the end is lost, unless a DEL of the key ended after it began.
        let z = vec![rec(0, Op::Zadd, "zset:2", "m", Outcome::Ok, 10)];
        let mut f = Findings::default();
        zsets(&z, &State::new(), &mut f);
        assert_eq!(f.count("lost"), 1);
        let mut z = z;
        z.push(rec(1, Op::Del, "zset:2", "", Outcome::Ok, 20));
        let mut f = Findings::default();
        zsets(&z, &State::new(), &mut f);
        assert_eq!(f.total(), 0);
    }

    #[test]
    fn hash_checker_finds_lost_field_and_diff_finds_divergence() {
        let l = vec![Record {
            val: "v".into(),
            ..rec(0, Op::Hset, "hash:1", "f0", Outcome::Ok, 10)
        }];
        let mut f = Findings::default();
        hashes(&l, &State::new(), &mut f);
        assert_eq!(f.count("lost"), 1);
        let a = state(&[("k", Value::Str("1".into()))]);
        let b = state(&[("k", Value::Str("2".into()))]);
        assert_eq!(diff_states("a", &a, "b", &b).0, 1);
        assert_eq!(diff_states("a", &a, "a", &a).0, 0);
    }
}
