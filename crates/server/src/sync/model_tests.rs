//! The replication protocol between three shards, with no sockets: a property test that
//! every site ends with the same data once every link is back, whatever happened before
//! (docs/replication.md §3–6, issue 16).
//!
//! Each site is a real `Shard` (no persistence). A step writes at a site (every type), opens
//! a link (the real handshake: `hello_to`, `accept_hello`, `take_welcome`, so a quarantined
//! dialer or one that asks gets a full sync, complete or delta), moves frames along a link
//! (full-sync chunks from `link::fill_chunk`, op batches from `link::next_ops_batch`,
//! applied through `decode_batch`/`apply_batch` and `begin_full_sync_in`/`apply_chunk`/
//! `end_full_sync_in`, holding what `full_sync_waits` holds), acks, cuts, heals or resets a
//! link, lets time pass (garbage collection and quarantine by `gc_step`), quarantines a silent
//! peer at once (a `Quarantine` event, whatever the clock), or kills a site
//! (it restarts empty in a new life). Then every link heals and the sites run until quiet;
//! their `CRDT.DIGEST`s must be equal. Frames travel in order on each link; links are
//! independent, so ops, acks and full syncs interleave across links in any order.

use std::collections::VecDeque;

use meridian_syncer::{Ack, FullSyncBegin, FullSyncEnd, Hello, Mode};
use proptest::prelude::*;

use super::LinkState;
use super::apply::{FullSyncIn, decode_batch, decode_chunk};
use super::link::{FullSyncCursor, fill_chunk, next_ops_batch};
use crate::shard::Shard;

const SITES: usize = 3;
const NAMES: [&str; SITES] = ["a", "b", "c"];
const QUARANTINE_MS: u64 = 1_000;
/// Rounds of the final phase before the sites must be quiet and equal.
const SETTLE_ROUNDS_MAX: usize = 400;

/// One frame on its way from a link's sender to its receiver.
#[derive(Debug)]
enum Frame {
    Ops(Vec<u8>),
    Begin(Vec<u8>),
    Chunk(Vec<u8>),
    End(Vec<u8>),
}

/// The sender's side of a full sync in progress.
struct FullOut {
    cursor: FullSyncCursor,
    seq: u64,
    /// `None`: every key (complete).
    filter: Option<meridian_crdt::VersionVector>,
}

/// One open link: site `x` (the dialer) receives the ops of site `y`.
struct Conn {
    generation: u64,
    incarnation: u64,
    hello: Hello,
    /// Sender: a full sync being produced, then the stream from `next_seq`.
    full_out: Option<FullOut>,
    next_seq: u64,
    in_flight: VecDeque<(u64, u64)>,
    frames: VecDeque<Frame>,
    /// Receiver: a full sync being received, and out-of-order batches (never here: frames
    /// stay in order).
    full_in: Option<FullSyncIn>,
}

struct World {
    sites: Vec<Shard>,
    lives: [u32; SITES],
    now_ms: u64,
    /// `links[x][y]`: `x` receives `y`'s ops.
    links: Vec<Vec<Option<Conn>>>,
    cut: [[bool; SITES]; SITES],
}

fn config(site: usize) -> crate::config::Config {
    crate::config::Config {
        site: NAMES[site].to_string(),
        peer: (0..SITES)
            .filter(|&o| o != site)
            .map(|o| format!("{}=127.0.0.1:{}", NAMES[o], 7000 + o))
            .collect(),
        appendonly: false,
        sync_quarantine_ms: QUARANTINE_MS,
        ..crate::config::Config::default()
    }
}

/// Index of site `other` among site `site`'s peers.
fn peer_index(site: usize, other: usize) -> usize {
    if other < site { other } else { other - 1 }
}

/// Two different sites of `v`, mutably.
fn pair(v: &mut [Shard], i: usize, j: usize) -> (&mut Shard, &mut Shard) {
    assert_ne!(i, j);
    if i < j {
        let (l, r) = v.split_at_mut(j);
        (&mut l[i], &mut r[0])
    } else {
        let (l, r) = v.split_at_mut(i);
        (&mut r[0], &mut l[j])
    }
}

/// Every slot: the model's sites are of one shard, owning every slot.
fn all_slots() -> crate::slot::SlotSet {
    crate::slot::SlotSet::all()
}

/// Runs one command at `shard` (reply discarded: a WRONGTYPE or a no-op writes nothing).
fn run(shard: &mut Shard, args: &[String], now_ms: u64) {
    let addr: std::net::SocketAddr = "127.0.0.1:5000".parse().unwrap();
    let shared = std::rc::Rc::new(crate::client::ClientShared::new(1, addr, addr, 0));
    let mut client = crate::client::Client::new(shared);
    let mut out = crate::resp::reply::Reply::new();
    let argv: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
    crate::cmd::testing::execute(shard, &mut client, &mut out, &argv, now_ms);
}

/// A write of every type, on a few keys per type.
fn command(cmd: u8, key: u8, arg: u8) -> Vec<String> {
    let k = key % 3;
    let m = format!("m{}", arg % 4);
    let v = format!("v{arg}");
    // The last sixteen values: writes that fold (sorted-set and float increments, string
    // edits), added after the first seeds were saved (which keep their commands below 240).
    if cmd >= 240 {
        return match cmd % 4 {
            0 => vec!["ZINCRBY".into(), format!("z{k}"), (arg % 3).to_string(), m],
            1 => vec!["APPEND".into(), format!("k{k}"), v],
            2 => vec![
                "SETBIT".into(),
                format!("k{k}"),
                (arg % 24).to_string(),
                (arg % 2).to_string(),
            ],
            _ => vec!["INCRBYFLOAT".into(), format!("n{k}"), "1.5".into()],
        };
    }
    // The eight below them: PFCOUNT, which validates a HyperLogLog's cache at every site
    // (the cache flag is part of what GET shows and the digest hashes).
    if cmd >= 232 {
        return vec!["PFCOUNT".into(), format!("p{k}")];
    }
    // The four below them: PERSIST, whose write beats concurrent EXPIREs and is retired
    // once none can arrive (`KeyState::retire_expire_effect`).
    if cmd >= 228 {
        return vec!["PERSIST".into(), format!("k{k}")];
    }
    let words: Vec<String> = match cmd % 16 {
        0 => vec!["SADD".into(), format!("s{k}"), m],
        1 => vec!["SREM".into(), format!("s{k}"), m],
        2 => vec!["SET".into(), format!("k{k}"), v],
        3 => vec!["DEL".into(), format!("k{k}")],
        4 => vec!["INCRBY".into(), format!("n{k}"), (arg % 7).to_string()],
        5 => vec!["HSET".into(), format!("h{k}"), m, v],
        6 => vec!["HDEL".into(), format!("h{k}"), m],
        7 => vec!["HINCRBY".into(), format!("h{k}"), "c".into(), "1".into()],
        8 => vec!["ZADD".into(), format!("z{k}"), (arg % 5).to_string(), m],
        9 => vec!["ZREM".into(), format!("z{k}"), m],
        10 => vec!["RPUSH".into(), format!("l{k}"), v],
        11 => vec!["LPOP".into(), format!("l{k}")],
        12 => vec!["PFADD".into(), format!("p{k}"), format!("e{arg}")],
        13 => vec![
            "DEL".into(),
            format!(
                "{}{k}",
                ["s", "h", "z", "l", "p", "n"][usize::from(arg % 6)]
            ),
        ],
        14 => vec!["EXPIRE".into(), format!("k{k}"), "100000".into()],
        _ => vec!["SADD".into(), format!("s{k}"), "keep".into()],
    };
    words
}

#[derive(Clone, Debug)]
enum Step {
    Write {
        site: usize,
        cmd: u8,
        key: u8,
        arg: u8,
    },
    /// `x` dials `y` (when the link is down and not cut).
    Connect {
        x: usize,
        y: usize,
    },
    /// `y` puts up to `n` frames on its link to `x`.
    Send {
        x: usize,
        y: usize,
        n: u8,
    },
    /// `x` takes up to `n` frames from its link to `y`.
    Deliver {
        x: usize,
        y: usize,
        n: u8,
    },
    /// `x` acks on its link to `y`.
    Ack {
        x: usize,
        y: usize,
    },
    /// `y`'s ops no longer reach `x` (nor `x`'s acks `y`), until `Heal`.
    Cut {
        x: usize,
        y: usize,
    },
    Heal {
        x: usize,
        y: usize,
    },
    /// The link closes once (the dialer redials when it wants).
    Reset {
        x: usize,
        y: usize,
    },
    /// Time passes; every site runs a GC step (and quarantines silent peers).
    Tick {
        ms: u16,
    },
    /// `x` quarantines `y` now if `y` is silent (`x`'s link to `y` is down), as if `y`'s last
    /// ack were older than the quarantine, and runs a GC step: a quarantine at any point of a
    /// schedule, whatever the clock.
    Quarantine {
        x: usize,
        y: usize,
    },
    /// The site is killed and restarts with nothing (no log): a new life.
    Restart {
        site: usize,
    },
}

fn link() -> impl Strategy<Value = (usize, usize)> {
    (0..SITES, 1..SITES).prop_map(|(x, d)| (x, (x + d) % SITES))
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        8 => (0..SITES, any::<u8>(), any::<u8>(), any::<u8>())
            .prop_map(|(site, cmd, key, arg)| Step::Write { site, cmd, key, arg }),
        3 => link().prop_map(|(x, y)| Step::Connect { x, y }),
        4 => (link(), 1u8..6).prop_map(|((x, y), n)| Step::Send { x, y, n }),
        4 => (link(), 1u8..6).prop_map(|((x, y), n)| Step::Deliver { x, y, n }),
        3 => link().prop_map(|(x, y)| Step::Ack { x, y }),
        2 => link().prop_map(|(x, y)| Step::Cut { x, y }),
        2 => link().prop_map(|(x, y)| Step::Heal { x, y }),
        1 => link().prop_map(|(x, y)| Step::Reset { x, y }),
        3 => (0u16..1_600).prop_map(|ms| Step::Tick { ms }),
        1 => (0..SITES).prop_map(|site| Step::Restart { site }),
    ]
}

/// `step`, plus quarantines as events of their own (a separate strategy, so that the seeds
/// saved for `step` keep their cases).
fn step_or_quarantine() -> impl Strategy<Value = Step> {
    prop_oneof![
        17 => step(),
        3 => link().prop_map(|(x, y)| Step::Quarantine { x, y }),
    ]
}

impl World {
    fn new() -> World {
        let now_ms = 1_000_000;
        World {
            sites: (0..SITES)
                .map(|i| Shard::new(0, config(i), now_ms))
                .collect(),
            lives: [0; SITES],
            now_ms,
            links: (0..SITES)
                .map(|_| (0..SITES).map(|_| None).collect())
                .collect(),
            cut: [[false; SITES]; SITES],
        }
    }

    fn step(&mut self, s: &Step) {
        match *s {
            Step::Write {
                site,
                cmd,
                key,
                arg,
            } => {
                let now = self.now_ms;
                run(&mut self.sites[site], &command(cmd, key, arg), now);
            }
            Step::Connect { x, y } => self.connect(x, y),
            Step::Send { x, y, n } => {
                for _ in 0..n {
                    self.send(x, y);
                }
            }
            Step::Deliver { x, y, n } => {
                for _ in 0..n {
                    self.deliver(x, y);
                }
            }
            Step::Ack { x, y } => self.ack(x, y),
            Step::Cut { x, y } => {
                self.cut[x][y] = true;
                self.close(x, y);
            }
            Step::Heal { x, y } => self.cut[x][y] = false,
            Step::Reset { x, y } => self.close(x, y),
            Step::Tick { ms } => self.tick(u64::from(ms)),
            Step::Quarantine { x, y } => self.quarantine(x, y),
            Step::Restart { site } => self.restart(site),
        }
    }

    /// The handshake of `x` dialing `y`, as `link::receive_ops` and `link::send_ops` do it.
    fn connect(&mut self, x: usize, y: usize) {
        if self.cut[x][y] || self.links[x][y].is_some() {
            return;
        }
        let now = self.now_ms;
        let (sx, sy) = pair(&mut self.sites, x, y);
        let Some(hello) = sx.hello_to(peer_index(x, y)) else {
            return;
        };
        let accepted = sy.accept_hello(&hello, now).expect("a peer's hello");
        let py = peer_index(y, x);
        if sx
            .take_welcome(peer_index(x, y), &accepted.welcome)
            .is_err()
        {
            sy.sync.peers[py].outbound = LinkState::Down;
            return;
        }
        let full_out = (accepted.welcome.mode == Mode::FullSync).then(|| FullOut {
            cursor: FullSyncCursor::default(),
            seq: 0,
            filter: (!accepted.complete).then(|| hello.delivered.clone()),
        });
        let next_seq = match accepted.welcome.mode {
            Mode::Resume { from_seq } => from_seq,
            Mode::FullSync => 0,
        };
        sy.sync.peers[py].outbound = if full_out.is_some() {
            LinkState::FullSync
        } else {
            LinkState::Up
        };
        let mut conn = Conn {
            generation: accepted.generation,
            incarnation: accepted.welcome.incarnation,
            hello,
            full_out,
            next_seq,
            in_flight: VecDeque::new(),
            frames: VecDeque::new(),
            full_in: None,
        };
        if let Some(f) = &mut conn.full_out {
            let begin = sy.full_sync_begin_out(f.filter.is_none());
            f.seq = begin.seq;
            conn.frames.push_back(Frame::Begin(begin.encode()));
        }
        self.links[x][y] = Some(conn);
    }

    /// The link `x`←`y` closes: both ends see it go down, what was in flight is lost.
    fn close(&mut self, x: usize, y: usize) {
        let Some(conn) = self.links[x][y].take() else {
            return;
        };
        let (sx, sy) = pair(&mut self.sites, x, y);
        let px = peer_index(x, y);
        sx.sync.peers[px].inbound = LinkState::Down;
        sx.end_receiving(px);
        let p = &mut sy.sync.peers[peer_index(y, x)];
        if p.out_generation == conn.generation {
            p.outbound = LinkState::Down;
        }
    }

    /// `y` puts its next frame on the link to `x`: a full-sync frame, else an op batch.
    fn send(&mut self, x: usize, y: usize) {
        let Some(conn) = self.links[x][y].as_mut() else {
            return;
        };
        let sy = &mut self.sites[y];
        let py = peer_index(y, x);
        if let Some(f) = &mut conn.full_out {
            loop {
                let mut body = Vec::new();
                let (n, done) = fill_chunk(
                    sy,
                    &mut f.cursor,
                    f.filter.as_ref(),
                    &all_slots(),
                    &mut body,
                );
                if n > 0 {
                    conn.frames.push_back(Frame::Chunk(body));
                    if !done {
                        return;
                    }
                }
                if done {
                    break;
                }
            }
            let end = FullSyncEnd {
                seq: f.seq,
                keys: 0,
            };
            conn.frames.push_back(Frame::End(end.encode()));
            conn.next_seq = f.seq + 1;
            conn.full_out = None;
            sy.full_sync_sent(py);
            if sy.sync.peers[py].out_generation == conn.generation {
                sy.sync.peers[py].outbound = LinkState::Up;
            }
            return;
        }
        let mut body = Vec::new();
        match next_ops_batch(sy, conn.next_seq, &mut body, &all_slots()) {
            Ok(Some((last, first_ms))) => {
                conn.in_flight.push_back((last, first_ms));
                conn.next_seq = last + 1;
                conn.frames.push_back(Frame::Ops(body));
            }
            Ok(None) => {}
            Err(e) => panic!("stream {}→{}: {e}", NAMES[y], NAMES[x]),
        }
    }

    /// `x` takes the next frame from its link to `y`, unless it must wait for another
    /// peer's full sync (`full_sync_waits`), as `link::receive_ops` does.
    fn deliver(&mut self, x: usize, y: usize) {
        let now = self.now_ms;
        let Some(conn) = self.links[x][y].as_mut() else {
            return;
        };
        let sx = &mut self.sites[x];
        let px = peer_index(x, y);
        let Some(frame) = conn.frames.front() else {
            return;
        };
        match frame {
            Frame::Ops(body) => {
                let lives = sx.sync.peers[px].lives.clone();
                let (h, records) = decode_batch(
                    body,
                    &lives,
                    conn.incarnation,
                    sx.dbs.len(),
                    now,
                    sx.config.sync_clock_skew_ms_max,
                )
                .expect("a valid batch");
                if sx.full_sync_waits(px, Some(&records)) {
                    return;
                }
                assert!(conn.full_in.is_none(), "ops before FullSyncEnd");
                assert!(
                    h.first_seq <= sx.sync.peers[px].in_applied_seq + 1,
                    "in order"
                );
                sx.apply_batch(px, &records, now);
            }
            Frame::Begin(body) => {
                if sx.full_sync_waits(px, None) {
                    return;
                }
                let begin = FullSyncBegin::decode(body).expect("FullSyncBegin");
                let asked_all = conn.hello.want_full && conn.hello.delivered.is_empty();
                conn.full_in = Some(sx.begin_full_sync_in(px, begin, asked_all, all_slots()));
            }
            Frame::Chunk(body) => {
                let entries = decode_chunk(body, sx.dbs.len()).expect("a valid chunk");
                let sync = conn.full_in.as_mut().expect("chunk after begin");
                sx.apply_chunk(sync, &entries, now);
            }
            Frame::End(body) => {
                let end = FullSyncEnd::decode(body).expect("FullSyncEnd");
                let sync = conn.full_in.take().expect("end after begin");
                assert_eq!(sync.seq, end.seq);
                sx.end_full_sync_in(sync, now);
            }
        }
        conn.frames.pop_front();
    }

    /// `x` acks on its link to `y`; `y` takes it (`read_acks`).
    fn ack(&mut self, x: usize, y: usize) {
        let now = self.now_ms;
        let Some(conn) = self.links[x][y].as_mut() else {
            return;
        };
        let (sx, sy) = pair(&mut self.sites, x, y);
        let ack: Ack = sx.ack_to(peer_index(x, y), conn.incarnation);
        let ack = Ack::decode(&ack.encode()).expect("Ack");
        sy.on_ack(
            peer_index(y, x),
            conn.generation,
            ack,
            &mut conn.in_flight,
            now,
        );
    }

    /// Time passes: every site runs a GC step, and a sender whose peer stays behind on a
    /// retired life resets the link (as `link::stream_ops` checks every second).
    fn tick(&mut self, ms: u64) {
        self.now_ms += ms;
        let now = self.now_ms;
        for s in &mut self.sites {
            s.gc_step(now, super::gc::GC_STEP_BUCKETS_MAX);
        }
        for x in 0..SITES {
            for y in 0..SITES {
                if x != y && self.links[x][y].is_some() {
                    let py = peer_index(y, x);
                    if self.sites[y].behind_on_retired(py, now) {
                        self.close(x, y);
                    }
                }
            }
        }
    }

    /// `x` quarantines `y` if `y` is silent: `gc_step`'s `update_quarantine` decides, with
    /// `y`'s last ack moved back past the quarantine (only while `x`'s link to `y` is down,
    /// so a link that is up is never quarantined).
    fn quarantine(&mut self, x: usize, y: usize) {
        let now = self.now_ms;
        let sx = &mut self.sites[x];
        if let Some(p) = sx.sync.peers.get_mut(peer_index(x, y)) {
            if p.outbound != LinkState::Up && p.outbound != LinkState::FullSync {
                p.last_ack_ms = p.last_ack_ms.min(now.saturating_sub(QUARANTINE_MS + 1));
            }
        }
        sx.gc_step(now, super::gc::GC_STEP_BUCKETS_MAX);
    }

    /// Kills `site` (its links close) and starts it again empty, in its next life. Not while
    /// a full sync from it is on its way, nor while another site holds ops of it that came
    /// in a full sync's states only (cut short, or written during the walk and not streamed
    /// yet): those would stay there alone, since no vector names them (docs/replication.md
    /// §9, known limits).
    fn restart(&mut self, site: usize) {
        let lives: Vec<meridian_crdt::ReplicaId> = (0..=self.lives[site])
            .map(|l| meridian_crdt::ReplicaId::for_life(NAMES[site], 0, l))
            .collect();
        let state_only = (0..SITES).filter(|&o| o != site).any(|o| {
            let so = &self.sites[o];
            self.links[o][site]
                .as_ref()
                .is_some_and(|c| c.full_out.is_some() || c.full_in.is_some())
                || so.dbs.iter().any(|d| {
                    d.table.iter().any(|e| {
                        let seen = e.state.observed().stamps;
                        lives
                            .iter()
                            .any(|r| seen.get(*r) > so.sync.delivered.get(*r))
                    })
                })
        });
        if state_only {
            return;
        }
        for o in 0..SITES {
            if o != site {
                self.close(site, o);
                self.close(o, site);
            }
        }
        let mut fresh = Shard::new(0, config(site), self.now_ms);
        fresh.set_life(self.lives[site]);
        self.lives[site] = fresh.begin_life();
        self.sites[site] = fresh;
    }

    /// Whether every link is up and idle, and every op acked.
    fn quiet(&self) -> bool {
        for x in 0..SITES {
            for y in 0..SITES {
                if x == y {
                    continue;
                }
                let Some(conn) = &self.links[x][y] else {
                    return false;
                };
                if !conn.frames.is_empty() || conn.full_out.is_some() || conn.full_in.is_some() {
                    return false;
                }
                let sy = &self.sites[y];
                if sy.sync.peers[peer_index(y, x)].acked_seq < sy.seq {
                    return false;
                }
            }
        }
        true
    }

    fn digests(&self) -> Vec<String> {
        self.sites
            .iter()
            .map(|s| s.digest_all(self.now_ms).hex())
            .collect()
    }

    /// Every link heals; the sites connect, stream, ack and collect until they are quiet.
    /// Returns the rounds it took.
    fn settle(&mut self) -> usize {
        self.cut = [[false; SITES]; SITES];
        let links: Vec<(usize, usize)> = (0..SITES)
            .flat_map(|x| (0..SITES).filter(move |&y| y != x).map(move |y| (x, y)))
            .collect();
        for round in 0..SETTLE_ROUNDS_MAX {
            for &(x, y) in &links {
                self.connect(x, y);
            }
            // One frame per link at a time: the links' frames interleave.
            for _ in 0..64 {
                for &(x, y) in &links {
                    self.send(x, y);
                    self.deliver(x, y);
                }
            }
            for &(x, y) in &links {
                self.ack(x, y);
            }
            if self.quiet() && self.digests().iter().all(|d| *d == self.digests()[0]) {
                return round;
            }
            self.tick(100);
        }
        SETTLE_ROUNDS_MAX
    }

    /// Every site's vectors and the keys holding metadata, for a failure message.
    fn dump_metadata(&self) -> String {
        let mut out = String::new();
        for (i, s) in self.sites.iter().enumerate() {
            out.push_str(&format!(
                "--- {}: delivered {:?}, stable {:?}, everywhere {:?}\n",
                NAMES[i],
                s.delivered_vv(),
                s.stable_vv(),
                s.everywhere_vv()
            ));
            for e in s.dbs.iter().flat_map(|d| d.table.iter()).filter(|e| e.meta) {
                out.push_str(&format!(
                    "  {:?}: {:?}\n",
                    String::from_utf8_lossy(&e.key),
                    e.state
                ));
            }
        }
        out
    }

    /// Every key's state at every site, for a failure message.
    fn dump(&self) -> String {
        let mut out = String::new();
        for (i, s) in self.sites.iter().enumerate() {
            out.push_str(&format!("--- {} (life {}):\n", NAMES[i], self.lives[i]));
            let mut keys: Vec<String> = s.dbs[0]
                .table
                .iter()
                .filter(|e| !e.state.is_empty())
                .map(|e| {
                    format!(
                        "  {:?}: {:?}",
                        String::from_utf8_lossy(&e.key),
                        e.state.value()
                    )
                })
                .collect();
            keys.sort();
            out.push_str(&keys.join("\n"));
            out.push('\n');
        }
        out
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Whatever the writes, cuts, resets, quarantines, restarts and the order of the full
    /// syncs between the pairs, once every link is back the three sites hold the same data.
    #[test]
    fn sites_converge_after_any_schedule(steps in prop::collection::vec(step(), 1..160)) {
        converges(&steps)?;
    }

    /// The same with quarantines as events at any point (a site stops waiting for a silent
    /// peer whatever the clock), so that they fall between any two steps of the rejoins.
    #[test]
    fn sites_converge_with_quarantines_anywhere(
        steps in prop::collection::vec(step_or_quarantine(), 1..160)
    ) {
        converges(&steps)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Whatever happened before, once the sites are quiet every key's metadata is collected
    /// everywhere (`crdt_gc_pending_keys` falls to 0). Before, a hash field incremented at
    /// two sites and a sorted-set member incremented or added at two sites (a leaderboard)
    /// held their keys as pending for ever, and every GC pass visited them; so did a counter
    /// whose increments a removal cleared (INCR then DEL or expiry) until increments came in
    /// runs (`Counter::drop_settled`), and, until TTL writes that time nothing were retired
    /// (`KeyState::retire_expire_effect`), an EXPIRE left alone by a concurrent DEL of the
    /// value it timed and any PERSIST at a site with peers.
    #[test]
    fn metadata_is_collected_once_quiet(steps in prop::collection::vec(step(), 1..160)) {
        let mut w = World::new();
        for s in &steps {
            w.step(s);
        }
        prop_assume!(w.settle() < SETTLE_ROUNDS_MAX);
        // Past `RETIRED_RESYNC_AFTER_MS`: a site behind on a retired life gets its full sync.
        w.settle_ticks(super::RETIRED_RESYNC_AFTER_MS / 100 + 5);
        let pending = w.pending();
        prop_assert!(
            pending.iter().all(|&p| p == 0),
            "keys holding metadata: {:?}\n{}",
            pending,
            w.dump_metadata()
        );
    }
}

impl World {
    /// `n` rounds of settling, 100 ms apart (GC steps run at each tick).
    fn settle_ticks(&mut self, n: u64) {
        for _ in 0..n {
            self.settle();
            self.tick(100);
        }
    }

    /// Per site, the keys holding metadata (`pending_keys`).
    fn pending(&self) -> Vec<usize> {
        self.sites.iter().map(pending_keys).collect()
    }

    /// `n` rounds of settling, after which no site holds a key with metadata.
    fn assert_collected_after(&mut self, n: u64) {
        self.settle_ticks(n);
        let pending = self.pending();
        assert!(
            pending.iter().all(|&p| p == 0),
            "{pending:?}\n{}",
            self.dump_metadata()
        );
    }
}

/// Keys of `s` holding metadata.
fn pending_keys(s: &Shard) -> usize {
    s.dbs
        .iter()
        .flat_map(|d| d.table.iter())
        .filter(|e| e.meta)
        .count()
}

/// Runs `steps`, heals every link and settles: the sites must be quiet with equal digests.
fn converges(steps: &[Step]) -> Result<(), TestCaseError> {
    let mut w = World::new();
    for s in steps {
        w.step(s);
    }
    let rounds = w.settle();
    let digests = w.digests();
    prop_assert!(
        rounds < SETTLE_ROUNDS_MAX && digests.iter().all(|d| *d == digests[0]),
        "not converged after {} rounds: {:?}\n{}",
        rounds,
        digests,
        w.dump()
    );
    Ok(())
}

/// A counter incremented at two sites, then deleted: once the sites are quiet no key holds
/// metadata (its cleared entries are dropped), and later increments count alike at every
/// site, whether the origin's entry was dropped (a new run) or not.
#[test]
fn a_cleared_counter_is_collected_and_counts_again() {
    let incr = |site| Step::Write {
        site,
        cmd: 4,
        key: 0,
        arg: 3,
    };
    let del = |site| Step::Write {
        site,
        cmd: 13,
        key: 0,
        arg: 5,
    };
    let mut w = World::new();
    for s in [incr(0), incr(1), incr(0)] {
        w.step(&s);
    }
    assert!(w.settle() < SETTLE_ROUNDS_MAX);
    w.step(&del(1));
    w.assert_collected_after(5);
    for s in [incr(0), incr(2), incr(1)] {
        w.step(&s);
    }
    assert!(w.settle() < SETTLE_ROUNDS_MAX);
    let digests = w.digests();
    assert!(digests.iter().all(|d| *d == digests[0]), "{digests:?}");
    for site in &w.sites {
        let v = site
            .dbs
            .first()
            .and_then(|d| d.get(site.hash_key(b"n0"), b"n0"))
            .and_then(|e| e.state.view_str().map(|v| v.to_bytes()));
        assert_eq!(v.as_deref(), Some(&b"9"[..]));
    }
}

/// The TTL of key `k0` at every site (`None`: no TTL), and whether each holds `k0` at all.
fn ttls_of_k0(w: &World) -> Vec<(bool, Option<u64>)> {
    w.sites
        .iter()
        .map(|site| {
            let e = site
                .dbs
                .first()
                .and_then(|d| d.get(site.hash_key(b"k0"), b"k0"));
            (
                e.is_some_and(|e| !e.state.is_empty()),
                e.and_then(|e| e.state.expire_at_ms()),
            )
        })
        .collect()
}

/// TTL writes that time nothing are retired by a replicated write once no write concurrent
/// with them can arrive, and a later write then acts alike at every site: a PERSIST (which
/// had stayed as metadata at every site for ever), and an EXPIRE whose value a concurrent
/// DEL removed. Both kept their keys pending before (`pending` not 0).
#[test]
fn ttl_writes_that_time_nothing_are_retired() {
    let write = |site, cmd| Step::Write {
        site,
        cmd,
        key: 0,
        arg: 1,
    };
    let (set, del, expire, persist) = (2, 3, 14, 228);
    let mut w = World::new();
    // PERSIST, then a later EXPIRE at another site: it times the key everywhere.
    for s in [write(0, set), write(0, expire)] {
        w.step(&s);
    }
    assert!(w.settle() < SETTLE_ROUNDS_MAX);
    w.step(&write(1, persist));
    w.assert_collected_after(5);
    assert!(ttls_of_k0(&w).iter().all(|t| *t == (true, None)));
    w.step(&write(2, expire));
    assert!(w.settle() < SETTLE_ROUNDS_MAX);
    assert!(
        ttls_of_k0(&w)
            .iter()
            .all(|t| t.0 && t.1.is_some_and(|at| at > 0)),
        "{:?}",
        ttls_of_k0(&w)
    );
    // EXPIRE ∥ DEL (nothing is delivered between them): the TTL write outlives the value.
    w.step(&write(0, expire));
    w.step(&write(1, del));
    w.assert_collected_after(5);
    // A key created again at a site that retired the TTL has no TTL anywhere.
    w.step(&write(2, set));
    assert!(w.settle() < SETTLE_ROUNDS_MAX);
    assert!(
        ttls_of_k0(&w).iter().all(|t| *t == (true, None)),
        "{:?}",
        ttls_of_k0(&w)
    );
}
