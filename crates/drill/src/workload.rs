//! A bounded workload on every site at once (testing.md §5.6): a few clients per site, each one
//! connection issuing one op at a time at a fixed rate, over strings (unique SET values),
//! counters (INCRBY ±), sets (unique SADD `site:client:seq`; SREM only of an element this client
//! just read at that site), hashes, sorted sets, lists, DEL and EXPIRE, and (when the mix asks)
//! HyperLogLogs (PFADD, PFCOUNT, DEL) and DELs of sorted sets. Every op goes into the client's
//! ledger. Clients stop at the stop flag, at `duration_max`, or after `OPS_MAX` ops.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::ledger::{Op, Outcome, Record};
use crate::resp::{Conn, Reply};
use crate::rng::Rng;

/// Most ops one client issues in a run.
pub const OPS_MAX: u64 = 2_000_000;
/// The total rate is capped here (testing.md: chaos load ≤ ~10 k ops/s).
pub const RATE_MAX: u32 = 10_000;

/// Relative weights of the key families.
#[derive(Clone, Copy, Debug)]
pub struct Mix {
    pub str: u64,
    pub cnt: u64,
    pub set: u64,
    pub hash: u64,
    pub zset: u64,
    pub list: u64,
    pub exp: u64,
    /// DEL of a set.
    pub del: u64,
    /// HyperLogLogs: PFADD of a unique element, PFCOUNT, and now and then a DEL (which wins
    /// over concurrent PFADDs, docs/conflicts.md §12).
    pub hll: u64,
    /// DEL of a sorted set.
    pub zdel: u64,
}

impl Mix {
    pub const ALL: Mix = Mix {
        str: 20,
        cnt: 20,
        set: 25,
        hash: 10,
        zset: 8,
        list: 8,
        exp: 6,
        del: 1,
        hll: 0,
        zdel: 0,
    };

    /// Every type, with deletions of sets, sorted sets and HyperLogLogs (the checks do not
    /// allow deleting counters, hashes or lists: their acked writes must show).
    pub const EVERY_TYPE: Mix = Mix {
        str: 16,
        cnt: 14,
        set: 20,
        hash: 10,
        zset: 10,
        list: 8,
        exp: 6,
        del: 2,
        hll: 12,
        zdel: 2,
    };
}

#[derive(Clone, Debug)]
pub struct Spec {
    /// Keys per family (`str:0..keys`, `cnt:0..keys`...).
    pub keys: u32,
    /// Total ops/s over every client of every site.
    pub rate: u32,
    pub clients_per_site: u32,
    pub mix: Mix,
    /// TTL range of EXPIRE, in seconds.
    pub ttl_s: (u64, u64),
    pub op_timeout: Duration,
    pub duration_max: Duration,
}

impl Default for Spec {
    fn default() -> Spec {
        Spec {
            keys: 24,
            rate: 1500,
            clients_per_site: 2,
            mix: Mix::ALL,
            ttl_s: (1, 4),
            op_timeout: Duration::from_secs(2),
            duration_max: Duration::from_secs(600),
        }
    }
}

/// Where one site's clients connect.
#[derive(Clone, Debug)]
pub struct Endpoint {
    pub site: usize,
    pub ns: Option<String>,
    pub addr: SocketAddr,
}

/// Running clients; [`Workload::stop`] joins them and returns the merged ledger.
pub struct Workload {
    stop: Arc<AtomicBool>,
    handles: Vec<JoinHandle<Vec<Record>>>,
}

impl Workload {
    pub fn start(endpoints: &[Endpoint], spec: &Spec, seed: u64, t0: Instant) -> Workload {
        let stop = Arc::new(AtomicBool::new(false));
        let n_clients = (endpoints.len() as u32 * spec.clients_per_site).max(1);
        let rate = spec.rate.clamp(1, RATE_MAX);
        let period = Duration::from_secs_f64(f64::from(n_clients) / f64::from(rate));
        let mut handles = Vec::new();
        for ep in endpoints {
            for c in 0..spec.clients_per_site {
                let client = Client {
                    ep: ep.clone(),
                    id: c,
                    spec: spec.clone(),
                    rng: Rng::derive(seed, &[0x10ad, ep.site as u64, u64::from(c)]),
                    rec: Recorder::new(ep, c, t0, spec.op_timeout),
                };
                let stop = stop.clone();
                let spawned = std::thread::Builder::new()
                    .name(format!("client-{}-{c}", ep.site))
                    .spawn(move || client.run(&stop, period));
                match spawned {
                    Ok(h) => handles.push(h),
                    Err(e) => eprintln!("drill: could not start a client thread: {e}"),
                }
            }
        }
        Workload { stop, handles }
    }

    /// Stops every client and returns all records, sorted by invocation time.
    pub fn stop(self) -> Vec<Record> {
        self.stop.store(true, Ordering::SeqCst);
        let mut all = Vec::new();
        for h in self.handles {
            if let Ok(mut r) = h.join() {
                all.append(&mut r);
            }
        }
        all.sort_by_key(|r| (r.t_inv_us, r.site, r.client, r.seq));
        all
    }
}

struct Client {
    ep: Endpoint,
    id: u32,
    spec: Spec,
    rng: Rng,
    rec: Recorder,
}

/// One client connection that records every command it issues in its ledger.
pub struct Recorder {
    pub ep: Endpoint,
    pub client: u32,
    pub t0: Instant,
    pub seq: u64,
    pub conn: Option<Conn>,
    pub timeout: Duration,
    pub records: Vec<Record>,
}

impl Recorder {
    pub fn new(ep: &Endpoint, client: u32, t0: Instant, timeout: Duration) -> Recorder {
        Recorder {
            ep: ep.clone(),
            client,
            t0,
            seq: 0,
            conn: None,
            timeout,
            records: Vec::new(),
        }
    }

    pub fn now_us(&self) -> u64 {
        self.t0.elapsed().as_micros() as u64
    }

    /// Connects when not connected; false when the site does not accept.
    pub fn ensure_connected(&mut self) -> bool {
        if self.conn.is_none() {
            self.conn = Conn::connect(self.ep.ns.as_deref(), self.ep.addr, self.timeout).ok();
        }
        self.conn.is_some()
    }

    /// Issues one command and records it; returns the reply when it was acknowledged.
    pub fn exec(
        &mut self,
        op: Op,
        key: &str,
        arg: &str,
        val: &str,
        args: &[&str],
    ) -> Option<Reply> {
        self.seq += 1;
        let t_inv = self.now_us();
        let res = match self.conn.as_mut() {
            Some(c) => c.cmd(args),
            None => Err(std::io::Error::other("not connected")),
        };
        let t_done = self.now_us();
        let (outcome, reply, out) = match res {
            Ok(Reply::Error(e)) => (Outcome::Fail, format!("-{e}"), None),
            Ok(r) => (Outcome::Ok, r.text(), Some(r)),
            Err(_) if self.conn.is_none() => (Outcome::Fail, "not connected".to_string(), None),
            Err(_) => {
                // Sent, and then the connection failed or timed out: it may have applied.
                self.conn = None;
                (Outcome::Info, String::new(), None)
            }
        };
        self.records.push(Record {
            site: self.ep.site,
            client: self.client,
            seq: self.seq,
            op,
            key: key.to_string(),
            arg: arg.to_string(),
            val: val.to_string(),
            outcome,
            reply,
            t_inv_us: t_inv,
            t_done_us: t_done,
        });
        out
    }
}

impl Client {
    fn run(mut self, stop: &AtomicBool, period: Duration) -> Vec<Record> {
        let deadline = Instant::now() + self.spec.duration_max;
        let mut next = Instant::now();
        while !stop.load(Ordering::SeqCst) && Instant::now() < deadline && self.rec.seq < OPS_MAX {
            let now = Instant::now();
            if next > now {
                std::thread::sleep((next - now).min(Duration::from_millis(50)));
                continue;
            }
            next += period;
            if next + Duration::from_secs(1) < now {
                next = now;
            }
            if !self.rec.ensure_connected() {
                // The site is down: nothing was sent, nothing to record.
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
            self.one_op();
        }
        self.rec.records
    }

    fn value(&self) -> String {
        format!("{}:{}:{}", self.ep.site, self.id, self.rec.seq + 1)
    }

    fn exec(&mut self, op: Op, key: &str, arg: &str, val: &str, args: &[&str]) -> Option<Reply> {
        self.rec.exec(op, key, arg, val, args)
    }

    fn one_op(&mut self) {
        let m = self.spec.mix;
        let family = self.rng.weighted(&[
            m.str, m.cnt, m.set, m.hash, m.zset, m.list, m.exp, m.del, m.hll, m.zdel,
        ]);
        let k = self.rng.below(u64::from(self.spec.keys.max(1)));
        match family {
            0 => self.strings(&format!("str:{k}")),
            1 => {
                let key = format!("cnt:{k}");
                let mut d = self.rng.range_i64(-9, 9);
                if d == 0 {
                    d = 1;
                }
                let ds = d.to_string();
                self.exec(Op::IncrBy, &key, &ds, "", &["INCRBY", &key, &ds]);
            }
            2 => self.sets(&format!("set:{k}")),
            3 => self.hashes(&format!("hash:{k}")),
            4 => self.zsets(&format!("zset:{k}")),
            5 => {
                let key = format!("list:{k}");
                if self.rng.chance(60) {
                    let v = self.value();
                    self.exec(Op::Rpush, &key, &v, "", &["RPUSH", &key, &v]);
                } else {
                    self.exec(Op::Lpop, &key, "", "", &["LPOP", &key]);
                }
            }
            6 => self.expiring(&format!("exp:{k}")),
            7 => {
                let key = format!("set:{k}");
                self.exec(Op::Del, &key, "", "", &["DEL", &key]);
            }
            8 => self.hlls(&format!("hll:{k}")),
            _ => {
                let key = format!("zset:{k}");
                self.exec(Op::Del, &key, "", "", &["DEL", &key]);
            }
        }
    }

    fn hlls(&mut self, key: &str) {
        let roll = self.rng.below(100);
        if roll < 85 {
            let e = self.value();
            self.exec(Op::Pfadd, key, &e, "", &["PFADD", key, &e]);
        } else if roll < 92 {
            self.exec(Op::Pfcount, key, "", "", &["PFCOUNT", key]);
        } else {
            self.exec(Op::Del, key, "", "", &["DEL", key]);
        }
    }

    fn strings(&mut self, key: &str) {
        if self.rng.chance(65) {
            let v = self.value();
            self.exec(Op::Set, key, &v, "", &["SET", key, &v]);
        } else {
            self.exec(Op::Get, key, "", "", &["GET", key]);
        }
    }

    fn sets(&mut self, key: &str) {
        if self.rng.chance(60) {
            let e = self.value();
            self.exec(Op::Sadd, key, &e, "", &["SADD", key, &e]);
            return;
        }
        let read = self.exec(Op::SrandMember, key, "", "", &["SRANDMEMBER", key]);
        if let Some(e) = read
            .and_then(|r| r.bulk_str())
            .filter(|_| self.rng.chance(70))
        {
            self.exec(Op::Srem, key, &e, "", &["SREM", key, &e]);
        }
    }

    fn hashes(&mut self, key: &str) {
        let field = format!("f{}", self.rng.below(4));
        let roll = self.rng.below(100);
        if roll < 60 {
            let v = self.value();
            self.exec(Op::Hset, key, &field, &v, &["HSET", key, &field, &v]);
        } else if roll < 85 {
            self.exec(Op::Hget, key, &field, "", &["HGET", key, &field]);
        } else {
            self.exec(Op::Hdel, key, &field, "", &["HDEL", key, &field]);
        }
    }

    fn zsets(&mut self, key: &str) {
        if self.rng.chance(50) {
            let m = self.value();
            let score = self.rng.below(1000).to_string();
            self.exec(Op::Zadd, key, &m, &score, &["ZADD", key, &score, &m]);
            return;
        }
        let read = self.exec(Op::ZrandMember, key, "", "", &["ZRANDMEMBER", key]);
        if let Some(m) = read.and_then(|r| r.bulk_str()) {
            if self.rng.chance(50) {
                let d = self.rng.range(1, 5).to_string();
                self.exec(Op::Zincrby, key, &m, &d, &["ZINCRBY", key, &d, &m]);
            } else {
                self.exec(Op::Zrem, key, &m, "", &["ZREM", key, &m]);
            }
        }
    }

    fn expiring(&mut self, key: &str) {
        let roll = self.rng.below(100);
        if roll < 50 {
            let v = self.value();
            self.exec(Op::Set, key, &v, "", &["SET", key, &v]);
        } else if roll < 85 {
            let (lo, hi) = self.spec.ttl_s;
            let ttl = self.rng.range(lo, hi).to_string();
            self.exec(Op::Expire, key, &ttl, "", &["EXPIRE", key, &ttl]);
        } else {
            self.exec(Op::Persist, key, "", "", &["PERSIST", key]);
        }
    }
}
