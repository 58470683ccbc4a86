//! The named drills. Each builds its own cluster, runs load and faults, heals, waits for
//! quiescence, and checks (see `check`). Infrastructure errors fail the drill with the error;
//! the cluster's drop order cleans up processes, proxies and namespaces on every path.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

use anyhow::bail;

use crate::check::{self, LossWindow, State, Value};
use crate::cluster::{Cluster, NetMode, Options, SyncCounts};
use crate::ledger::{self, Op, Record};
use crate::report::{Outcome, Status};
use crate::resp::Reply;
use crate::rng::Rng;
use crate::schedule::{self, Allowed, Fault};
use crate::site::Site;
use crate::workload::{self, Endpoint, Recorder, Workload};

/// Set by the signal handler: every wait here stops and the drill unwinds.
pub static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// Convergence bound after heal for the chaos drills (testing.md R4: ≤ 10 s).
pub const CONVERGE_BOUND: Duration = Duration::from_secs(10);
/// Convergence goal after heal (testing.md §7: p99 ≤ 5 s over seeds, at most 10 s per run).
pub const CONVERGE_GOAL: Duration = Duration::from_secs(5);
/// How long the harness waits for convergence before giving up and printing the difference.
pub const CONVERGE_WAIT_MAX: Duration = Duration::from_secs(40);

/// `(name, what it does, runs for every seed in short mode)`. The default set is all of them.
pub const SCENARIOS: &[(&str, &str, bool)] = &[
    (
        "partitions",
        "random partitions, one-way drops, pauses, RST flaps, stalls, nft drops and loss under load (R4, R9)",
        true,
    ),
    (
        "node-power-off",
        "one site's server process loses power under load (everysec) and comes back; survivors' throughput (seed paper scenario 2, R7)",
        false,
    ),
    (
        "site-node-power-off",
        "site a runs as two nodes (a topology file, one shard each); its second node loses power under load (everysec) and comes back while every site writes (issue 17)",
        false,
    ),
    (
        "site-power-off",
        "a site isolated, then powered off under load (always, torn tail), others keep loading, then back (seed paper scenario 3, R6)",
        false,
    ),
    (
        "away-past-backlog",
        "a site away longer than its 128 KiB backlog: exactly one delta full sync per link (R10)",
        false,
    ),
    (
        "clock-skew",
        "sites at +30 s and -30 s: causal overwrite chains across sites, concurrent writes under partition (R11)",
        false,
    ),
    (
        "gc-while-cut-off",
        "deletes and SREMs while a site is cut off, concurrent updates there: no deleted data comes back (R12)",
        false,
    ),
    (
        "converge-100k",
        "100,000 keys changed while a site is cut off at 100 ms RTT: convergence time after heal",
        false,
    ),
    (
        "conflicts",
        "the conflict table under a partition (R5): pushes and pops, SADD/SREM, SET/DEL, INCR/DEL, HSET/HDEL, EXPIRE/PERSIST, DEL/SADD",
        false,
    ),
    (
        "add-remove-site",
        "under load, a site added online (meridian admin add-peer), another one lost and removed (remove-peer), refused when it comes back, rejoined after a reset under a new id",
        false,
    ),
    (
        "quarantine-rejoin",
        "a 1-2 s quarantine among one-way link cuts, RST flaps and a killed site, under a load of every type: the sites rejoin by full syncs and converge (issue 16)",
        true,
    ),
];

pub struct Ctx {
    pub bin: PathBuf,
    pub out: PathBuf,
    pub mode: NetMode,
    pub sites: usize,
    /// Long (soak) mode: the load phase of each drill.
    pub long: Option<Duration>,
    pub rate: u32,
    /// Whether the server has `--appendfsync` and `--debug-fsync-watermark` (else why not).
    pub persistence: Result<(), String>,
    pub runs: AtomicU32,
}

impl Ctx {
    fn tag(&self) -> String {
        format!(
            "{}-{}",
            std::process::id(),
            self.runs.fetch_add(1, Ordering::SeqCst)
        )
    }

    fn load_time(&self, short: Duration) -> Duration {
        self.long.unwrap_or(short)
    }
}

fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

/// Sleeps `d` in small steps; fails when the run is interrupted.
fn sleep(d: Duration) -> anyhow::Result<()> {
    let end = Instant::now() + d;
    while Instant::now() < end {
        if interrupted() {
            bail!("interrupted");
        }
        std::thread::sleep((end - Instant::now()).min(Duration::from_millis(50)));
    }
    Ok(())
}

/// Runs one drill; never panics on drill errors (they fail the drill).
pub fn run(ctx: &Ctx, name: &str, seed: u64) -> Outcome {
    let start = Instant::now();
    let mut o = Outcome::new(name, seed);
    let dir = ctx.out.join(format!("{name}-seed{seed}"));
    println!(
        "\n== {name} seed={seed} ({}) ==",
        match ctx.mode {
            NetMode::Netns => "network namespaces",
            NetMode::Loopback => "loopback",
        }
    );
    // A drill directory left by an earlier run with the same --out would hold that run's data
    // directories, which the servers would load: start empty.
    if dir.exists() {
        if let Err(e) = std::fs::remove_dir_all(&dir) {
            o.fail(format!("cannot clear {}: {e}", dir.display()));
        }
    }
    let res = std::fs::create_dir_all(&dir)
        .map_err(anyhow::Error::from)
        .and_then(|()| match name {
            "partitions" => partitions(ctx, seed, &dir, &mut o),
            "node-power-off" => node_power_off(ctx, seed, &dir, &mut o),
            "site-node-power-off" => site_node_power_off(ctx, seed, &dir, &mut o),
            "site-power-off" => site_power_off(ctx, seed, &dir, &mut o),
            "away-past-backlog" => away_past_backlog(ctx, seed, &dir, &mut o),
            "clock-skew" => clock_skew(ctx, seed, &dir, &mut o),
            "gc-while-cut-off" => gc_while_cut_off(ctx, seed, &dir, &mut o),
            "converge-100k" => converge_100k(ctx, seed, &dir, &mut o),
            "conflicts" => conflicts(ctx, seed, &dir, &mut o),
            "add-remove-site" => add_remove_site(ctx, seed, &dir, &mut o),
            "quarantine-rejoin" => quarantine_rejoin(ctx, seed, &dir, &mut o),
            other => Err(anyhow::anyhow!("unknown scenario {other}")),
        });
    if let Err(e) = res {
        o.fail(format!("drill error: {e:#}"));
    }
    o.took = start.elapsed();
    let _ = std::fs::write(dir.join("result.txt"), o.text());
    println!("{}", o.text().trim_end());
    o
}

fn options(ctx: &Ctx, seed: u64) -> Options {
    Options {
        sites: ctx.sites,
        seed,
        one_way_ms: 10,
        jitter_ms: 2,
        ..Options::default()
    }
}

fn start(ctx: &Ctx, opts: &Options, dir: &Path, o: &mut Outcome) -> anyhow::Result<Cluster> {
    let cl = Cluster::start(opts, &ctx.bin, &dir.join("cluster"), ctx.mode, &ctx.tag())?;
    if let (NetMode::Netns, Err(why)) = (ctx.mode, &cl.nft_ok) {
        o.note(format!(
            "nftables unavailable in the namespaces ({why}): packet-level faults left out"
        ));
    }
    cl.wait_links_up(Duration::from_secs(20))?;
    Ok(cl)
}

/// RTTs of 50, 150 and 100 ms on a–b, a–c, b–c (testing.md §5.1), repeating for more sites.
fn wan_latency(cl: &Cluster) {
    for i in 0..cl.n() {
        for j in i + 1..cl.n() {
            let ow = [25, 75, 50].get((i + j - 1) % 3).copied().unwrap_or(25);
            cl.set_latency(i, j, ow, 5);
        }
    }
}

/// Ok ops per second of `site` with completion in `from_us..to_us`.
fn throughput(records: &[Record], site: usize, from_us: u64, to_us: u64) -> f64 {
    let n = records
        .iter()
        .filter(|r| r.site == site && r.ok() && (from_us..to_us).contains(&r.t_done_us))
        .count();
    n as f64 / ((to_us.saturating_sub(from_us)) as f64 / 1e6).max(1e-3)
}

fn us(t0: Instant, t: Instant) -> u64 {
    t.saturating_duration_since(t0).as_micros() as u64
}

/// What the common tail of a drill needs.
struct Finish {
    records: Vec<Record>,
    loss: Vec<LossWindow>,
    heal_at: Instant,
    bound: Duration,
    before: BTreeMap<(usize, usize), SyncCounts>,
    /// Full syncs expected per `(site, peer)` inbound link (others unchecked).
    full_expect: BTreeMap<(usize, usize), u64>,
}

/// Waits for convergence, compares every site's state, runs the checkers on the ledger, and
/// records figures; writes the ledger.
fn finish(cl: &mut Cluster, dir: &Path, o: &mut Outcome, f: Finish) -> anyhow::Result<State> {
    for c in cl.crashed() {
        o.fail(format!("crash: {c}"));
    }
    note_convergence(cl, o, f.heal_at, f.bound)?;
    note_syncs(cl, o, &f.before, &f.full_expect)?;
    let first = check_states(cl, o, &f.records, &f.loss)?;
    for (_, s) in cl.processes() {
        let panics: Vec<String> = s
            .log_errors()
            .into_iter()
            .filter(|l| l.contains("panicked"))
            .collect();
        if !panics.is_empty() {
            o.fail(format!("site {} panicked: {}", s.id(), panics.join(" | ")));
        }
    }
    ledger::write(&dir.join("ledger.jsonl"), &f.records, &cl.ids)?;
    Ok(first)
}

/// Waits for convergence and records the time since heal; fails over `bound` or on timeout
/// (then with the per-slot, per-key difference).
fn note_convergence(
    cl: &Cluster,
    o: &mut Outcome,
    heal_at: Instant,
    bound: Duration,
) -> anyhow::Result<()> {
    let conv = cl.wait_converged(CONVERGE_WAIT_MAX, &interrupted)?;
    let since_heal = heal_at.elapsed();
    match conv {
        Ok(c) => {
            let links = (c.links_up + (since_heal - c.total)).as_secs_f64();
            o.note(format!(
                "converged {:.2}s after heal (every link up again after {links:.2}s)",
                since_heal.as_secs_f64()
            ));
            if since_heal > bound {
                o.fail(format!(
                    "converged in {:.2}s, over the {:.0}s bound",
                    since_heal.as_secs_f64(),
                    bound.as_secs_f64()
                ));
            }
        }
        Err(why) => {
            o.fail(format!(
                "not converged {:.0}s after heal: {why}",
                since_heal.as_secs_f64()
            ));
            o.note(cl.slot_diff());
        }
    }
    if interrupted() {
        bail!("interrupted");
    }
    Ok(())
}

/// Records the full and partial syncs of every link since `before`; fails where
/// `full_expect` names another count. The expectation is per shard link (R10: one delta full
/// sync per link): a site pair of several shards a side has one link per pair of shards, and
/// `INFO crdt` sums their counters.
fn note_syncs(
    cl: &Cluster,
    o: &mut Outcome,
    before: &BTreeMap<(usize, usize), SyncCounts>,
    full_expect: &BTreeMap<(usize, usize), u64>,
) -> anyhow::Result<()> {
    let after = cl.sync_counts()?;
    let mut links = Vec::new();
    let mut total_full = 0;
    for ((i, j), a) in &after {
        let b = before.get(&(*i, *j)).copied().unwrap_or_default();
        // A restarted site counts from zero again.
        let d_full = a.full_in.saturating_sub(b.full_in);
        let d_part = a.partial_in.saturating_sub(b.partial_in);
        total_full += d_full;
        if d_full > 0 || d_part > 0 {
            links.push(format!(
                "{}←{}: {d_full} full, {d_part} partial",
                cl.id(*i),
                cl.id(*j)
            ));
        }
        let links = a.links.max(1);
        if let Some(want) = full_expect.get(&(*i, *j)).filter(|w| **w * links != d_full) {
            o.fail(format!(
                "{} pulled {d_full} full syncs from {}, expected {want} on each of its {links} shard links",
                cl.id(*i),
                cl.id(*j)
            ));
        }
    }
    let detail = if links.is_empty() {
        "no resyncs".to_string()
    } else {
        links.join("; ")
    };
    o.note(format!(
        "full syncs during the drill: {total_full} ({detail})"
    ));
    Ok(())
}

/// Compares every site's whole state with site a's (this catches digest bugs too), then runs
/// the ledger checks on it. Returns site a's state.
fn check_states(
    cl: &Cluster,
    o: &mut Outcome,
    records: &[Record],
    loss: &[LossWindow],
) -> anyhow::Result<State> {
    let mut states: Vec<State> = (0..cl.n())
        .map(|i| cl.read_state(i))
        .collect::<anyhow::Result<_>>()?;
    // The sites are read one after the other: a key whose TTL passes in between is held by
    // the sites read first only. A differing key that no site holds any more is left out.
    let differing: std::collections::BTreeSet<String> = match states.split_first() {
        Some((head, rest)) => rest
            .iter()
            .flat_map(|s| {
                head.keys()
                    .chain(s.keys())
                    .filter(|k| head.get(*k) != s.get(*k))
                    .cloned()
                    .collect::<Vec<_>>()
            })
            .collect(),
        None => Default::default(),
    };
    for k in differing {
        let mut gone = true;
        for i in 0..cl.n() {
            gone &= matches!(cl.site(i)?.cmd(&["EXISTS", &k])?, Reply::Int(0));
        }
        if gone {
            o.note(format!(
                "{k} expired while the sites were read: not compared"
            ));
            for s in &mut states {
                s.remove(&k);
            }
        }
    }
    let first = states.first().cloned().unwrap_or_default();
    let mut divergent = 0;
    for (i, s) in states.iter().enumerate().skip(1) {
        let (n, ex) = check::diff_states(cl.id(0), &first, cl.id(i), s);
        divergent += n;
        if n > 0 {
            o.fail(format!(
                "{n} keys differ between {} and {}: {}",
                cl.id(0),
                cl.id(i),
                ex.join("; ")
            ));
        }
    }
    let findings = check::check_all(records, &first, loss);
    let ok = records.iter().filter(|r| r.ok()).count();
    let info = records
        .iter()
        .filter(|r| r.outcome == ledger::Outcome::Info)
        .count();
    let fail = records.len() - ok - info;
    let excused = if findings.excused > 0 {
        format!(
            ", {} acked writes inside loss windows excused",
            findings.excused
        )
    } else {
        String::new()
    };
    o.note(format!(
        "ledger: {} ops (ok {ok}, fail {fail}, info {info}), {} keys at the end; divergent keys {divergent}, \
         lost {}, resurrected {}, unexpected {}, counter errors {}, causal (LWW) violations {}{excused}",
        records.len(),
        first.len(),
        findings.count("lost"),
        findings.count("resurrected"),
        findings.count("unexpected"),
        findings.count("counter"),
        findings.count("causal"),
    ));
    if findings.total() > 0 {
        for l in findings.lines() {
            o.fail(l);
        }
    }
    Ok(first)
}

fn apply_fault(cl: &mut Cluster, f: &Fault) -> anyhow::Result<()> {
    match f {
        Fault::Isolate { site } => cl.isolate(*site),
        Fault::Bridge { middle } => {
            for i in 0..cl.n() {
                for j in i + 1..cl.n() {
                    if i != *middle && j != *middle {
                        cl.partition(i, j);
                    }
                }
            }
        }
        Fault::OneWay { from, to } => cl.one_way(*from, *to, true),
        Fault::Pause { site } => cl.site_mut(*site)?.pause()?,
        Fault::Flap { a, b, .. } => {
            cl.reset(*a, *b);
        }
        Fault::Stall { a, b } => cl.stall(*a, *b, true),
        Fault::Slow {
            a,
            b,
            one_way_ms,
            jitter_ms,
        } => cl.set_latency(*a, *b, *one_way_ms, *jitter_ms),
        Fault::Throttle { a, b, bytes_per_s } => cl.set_bandwidth(*a, *b, *bytes_per_s),
        Fault::NftPartition { a, b } => cl.nft_partition(*a, *b)?,
        Fault::NftLoss { site, pct } => cl.nft_loss(*site, *pct)?,
        Fault::KillRestart { site } => cl.site_mut(*site)?.kill(),
        Fault::Cut { links } => {
            for (x, y) in links {
                cl.cut(*x, *y);
            }
        }
        Fault::ResetAll => {
            cl.reset_all();
        }
    }
    Ok(())
}

fn revert_fault(cl: &mut Cluster, f: &Fault) -> anyhow::Result<()> {
    cl.heal_all()?;
    match f {
        Fault::Slow { .. } => wan_latency(cl),
        Fault::KillRestart { site } => cl.site_mut(*site)?.start()?,
        _ => {}
    }
    Ok(())
}

/// R4/R9: random faults under load, then heal and check.
fn partitions(ctx: &Ctx, seed: u64, dir: &Path, o: &mut Outcome) -> anyhow::Result<()> {
    let duration = ctx.load_time(Duration::from_secs(20));
    let mut opts = options(ctx, seed);
    let kill = log_for_kills(ctx, &mut opts);
    let mut cl = start(ctx, &opts, dir, o)?;
    wan_latency(&cl);
    let allowed = Allowed {
        nft: cl.nft_ok.is_ok(),
        kill,
    };
    let sched = schedule::partitions(seed, cl.n(), duration.as_millis() as u64, allowed);
    keep_schedule(&sched, dir)?;
    o.notes.push(format!(
        "{} faults scheduled over {:.0}s",
        sched.events.len(),
        duration.as_secs_f64()
    ));
    if !kill {
        o.note(format!(
            "process kills left out of the schedule: {}",
            ctx.persistence.as_ref().err().map_or("", String::as_str)
        ));
    }
    let before = cl.sync_counts()?;
    let t0 = Instant::now();
    let spec = workload::Spec {
        rate: ctx.rate,
        ..workload::Spec::default()
    };
    let wl = Workload::start(&cl.endpoints(), &spec, seed, t0);
    let (records, heal_at) = chaos_under_load(&mut cl, &sched, wl, t0, duration)?;
    let ops_s = records.len() as f64 / duration.as_secs_f64();
    o.note(format!("load: {ops_s:.0} ops/s over {} sites", cl.n()));
    o.note(format!("proxies: {}", cl.proxy_summary()));
    finish(
        &mut cl,
        dir,
        o,
        Finish {
            records,
            loss: vec![],
            heal_at,
            bound: CONVERGE_BOUND,
            before,
            full_expect: BTreeMap::new(),
        },
    )?;
    Ok(())
}

/// Issue 16: short quarantines (`--sync-quarantine-ms` of 1–2 s, seeded) among one-way link
/// cuts, RST flaps, resets of every link and one killed site (restarted with its log), under a
/// load of every type, HyperLogLogs and deletions included; then heal and check.
fn quarantine_rejoin(ctx: &Ctx, seed: u64, dir: &Path, o: &mut Outcome) -> anyhow::Result<()> {
    let duration = ctx.load_time(Duration::from_secs(20));
    let quarantine_ms = Rng::derive(seed, &[0x9ca2]).range(1000, 2000);
    let mut opts = options(ctx, seed);
    opts.flags.extend([
        "--sync-quarantine-ms".to_string(),
        quarantine_ms.to_string(),
    ]);
    let kill = log_for_kills(ctx, &mut opts);
    let mut cl = start(ctx, &opts, dir, o)?;
    let allowed = Allowed { nft: false, kill };
    let sched = schedule::quarantine(seed, cl.n(), duration.as_millis() as u64, allowed);
    keep_schedule(&sched, dir)?;
    o.notes.push(format!(
        "sync-quarantine-ms {quarantine_ms}; {} faults scheduled over {:.0}s",
        sched.events.len(),
        duration.as_secs_f64()
    ));
    if !kill {
        o.note(format!(
            "the site kill left out of the schedule: {}",
            ctx.persistence.as_ref().err().map_or("", String::as_str)
        ));
    }
    let before = cl.sync_counts()?;
    let t0 = Instant::now();
    let spec = workload::Spec {
        rate: ctx.rate,
        mix: workload::Mix::EVERY_TYPE,
        ..workload::Spec::default()
    };
    let wl = Workload::start(&cl.endpoints(), &spec, seed, t0);
    let (records, heal_at) = chaos_under_load(&mut cl, &sched, wl, t0, duration)?;
    let quarantines: usize = cl
        .sites
        .iter()
        .map(|s| s.log_count("peer quarantined"))
        .sum();
    o.note(format!(
        "load: {:.0} ops/s over {} sites; {quarantines} quarantines (a site leaving a peer out of GC)",
        records.len() as f64 / duration.as_secs_f64(),
        cl.n()
    ));
    o.note(format!("proxies: {}", cl.proxy_summary()));
    finish(
        &mut cl,
        dir,
        o,
        Finish {
            records,
            loss: vec![],
            heal_at,
            bound: CONVERGE_BOUND,
            before,
            full_expect: BTreeMap::new(),
        },
    )?;
    Ok(())
}

/// Whether the schedule may kill sites: with persistence available, the sites log with
/// `appendfsync everysec`, under which a plain SIGKILL must lose nothing (the page cache
/// survives).
fn log_for_kills(ctx: &Ctx, opts: &mut Options) -> bool {
    let kill = ctx.persistence.is_ok();
    if kill {
        opts.flags
            .extend(["--appendonly", "yes", "--appendfsync", "everysec"].map(String::from));
    }
    kill
}

/// Prints the schedule and keeps it beside the drill's logs (`schedule.txt`).
fn keep_schedule(sched: &schedule::Schedule, dir: &Path) -> anyhow::Result<()> {
    print!("{sched}");
    std::fs::write(dir.join("schedule.txt"), sched.to_string())?;
    Ok(())
}

/// Runs `sched` while `wl` writes, stops the load, then heals the last fault (still on):
/// the records, and the instant of that heal, which starts the convergence clock.
fn chaos_under_load(
    cl: &mut Cluster,
    sched: &schedule::Schedule,
    wl: Workload,
    t0: Instant,
    duration: Duration,
) -> anyhow::Result<(Vec<Record>, Instant)> {
    let chaos = run_schedule(cl, sched, t0, duration);
    let records = wl.stop();
    chaos?;
    match sched.events.last() {
        Some(e) => revert_fault(cl, &e.fault)?,
        None => cl.heal_all()?,
    }
    Ok((records, Instant::now()))
}

/// Applies each fault of `sched` at its time, holds it (RST flaps repeat at their period) and
/// heals it, except the last one, which the caller heals after stopping the load.
fn run_schedule(
    cl: &mut Cluster,
    sched: &schedule::Schedule,
    t0: Instant,
    duration: Duration,
) -> anyhow::Result<()> {
    let n_events = sched.events.len();
    for (k, e) in sched.events.iter().enumerate() {
        sleep((t0 + Duration::from_millis(e.at_ms)).saturating_duration_since(Instant::now()))?;
        apply_fault(cl, &e.fault)?;
        let end = t0 + Duration::from_millis(e.at_ms + e.dur_ms);
        let mut next_flap = Instant::now();
        // Bounded by the event's end.
        while Instant::now() < end {
            if let (Fault::Flap { a, b, period_ms }, true) = (&e.fault, Instant::now() >= next_flap)
            {
                cl.reset(*a, *b);
                next_flap = Instant::now() + Duration::from_millis(*period_ms);
            }
            sleep(Duration::from_millis(50).min(end.saturating_duration_since(Instant::now())))?;
        }
        if k + 1 < n_events {
            revert_fault(cl, &e.fault)?;
        }
    }
    sleep((t0 + duration).saturating_duration_since(Instant::now()))
}

fn persistence_or_skip(ctx: &Ctx, o: &mut Outcome) -> bool {
    match &ctx.persistence {
        Ok(()) => true,
        Err(why) => {
            o.skip(format!(
                "the server does not support power-loss drills: {why}"
            ));
            false
        }
    }
}

fn persistence_flags(fsync: &str) -> Vec<String> {
    [
        "--appendonly",
        "yes",
        "--appendfsync",
        fsync,
        "--debug-fsync-watermark",
        "yes",
    ]
    .map(String::from)
    .to_vec()
}

/// Before/during/after throughput of the sites other than `victim`.
fn note_throughput(
    o: &mut Outcome,
    cl: &Cluster,
    records: &[Record],
    victim: usize,
    windows: [(u64, u64); 3],
) {
    for s in (0..cl.n()).filter(|&s| s != victim) {
        let [b, d, a] = windows.map(|(f, t)| throughput(records, s, f, t));
        o.note(format!(
            "site {} throughput: before {b:.0} ops/s, during {d:.0} ops/s, after {a:.0} ops/s",
            cl.id(s)
        ));
        if d < 0.5 * b {
            o.fail(format!(
                "site {} throughput fell from {b:.0} to {d:.0} ops/s while {} was off",
                cl.id(s),
                cl.id(victim)
            ));
        }
    }
}

/// Seed paper scenario 2 and R7: one server process of a site loses power under load
/// (`everysec`: acked writes in the last second may be lost), then comes back.
fn node_power_off(ctx: &Ctx, seed: u64, dir: &Path, o: &mut Outcome) -> anyhow::Result<()> {
    power_cycle(ctx, seed, dir, o, PowerOff::Site)
}

/// Issue 17: a site across two nodes (one shard each) loses one of them under load, while
/// every site writes: its other node keeps serving its own slots (the lost node's get
/// CLUSTERDOWN or TRYAGAIN replies, never a hang), the other sites keep converging with it,
/// and the node comes back from its log (everysec) and catches up through the site's sync
/// port. Acks of site a in the last second before the loss are excused (they may have been
/// n2's unsynced tail; n1's are excused with them).
fn site_node_power_off(ctx: &Ctx, seed: u64, dir: &Path, o: &mut Outcome) -> anyhow::Result<()> {
    power_cycle(ctx, seed, dir, o, PowerOff::SecondNode)
}

/// What loses power in [`power_cycle`].
#[derive(Clone, Copy, PartialEq, Eq)]
enum PowerOff {
    /// Site b's server (a one-node site).
    Site,
    /// Node n2 of site a, which runs as two nodes.
    SecondNode,
}

fn victim_process(cl: &mut Cluster, what: PowerOff, victim: usize) -> anyhow::Result<&mut Site> {
    match what {
        PowerOff::Site => cl.site_mut(victim),
        PowerOff::SecondNode => cl.node_mut(victim),
    }
}

/// What site `split`'s clients saw while its node n2 was off (`during` on the run's clock):
/// n1's slots served, n2's refused at once. Fails the drill when n1 served nothing.
fn note_second_node_outage(
    o: &mut Outcome,
    cl: &Cluster,
    records: &[Record],
    split: usize,
    during: std::ops::Range<u64>,
) {
    let seen: Vec<&Record> = records
        .iter()
        .filter(|r| r.site == split && during.contains(&r.t_done_us))
        .collect();
    let refused = seen.iter().filter(|r| !r.ok()).count();
    let slowest_refusal_ms = seen
        .iter()
        .filter(|r| !r.ok())
        .map(|r| r.t_done_us.saturating_sub(r.t_inv_us) / 1000)
        .max()
        .unwrap_or(0);
    o.note(format!(
        "site {} while n2 was off: {} requests answered, {refused} refused (slowest refusal {slowest_refusal_ms} ms)",
        cl.id(split),
        seen.len() - refused
    ));
    if refused == seen.len() {
        o.fail(format!(
            "site {}'s node n1 served none of its {} requests while n2 was off",
            cl.id(split),
            seen.len()
        ));
    }
}

/// Under load at every site (`everysec`), the victim loses power at a seeded moment within
/// the fsync second, stays off 2–4 s and restarts from its log; the load goes on as long
/// again. The victim's acks in the second before the loss are excused.
fn power_cycle(
    ctx: &Ctx,
    seed: u64,
    dir: &Path,
    o: &mut Outcome,
    what: PowerOff,
) -> anyhow::Result<()> {
    if !persistence_or_skip(ctx, o) {
        return Ok(());
    }
    let mut opts = options(ctx, seed);
    opts.flags = persistence_flags("everysec");
    let (victim, salt) = match what {
        PowerOff::Site => (1.min(ctx.sites.saturating_sub(1)), 0x90fe),
        PowerOff::SecondNode => (0, 0x2a0d),
    };
    if what == PowerOff::SecondNode {
        opts.two_nodes = Some(victim);
    }
    let mut cl = start(ctx, &opts, dir, o)?;
    let before = cl.sync_counts()?;
    let t0 = Instant::now();
    let spec = workload::Spec {
        rate: ctx.rate,
        ..workload::Spec::default()
    };
    let wl = Workload::start(&cl.endpoints(), &spec, seed, t0);
    let phase = ctx.load_time(Duration::from_secs(5));
    let mut rng = Rng::derive(seed, &[salt]);
    let run = (|| -> anyhow::Result<(u64, u64, u64)> {
        // A seeded moment within the fsync second, so the cut varies from none to a second.
        sleep(phase + Duration::from_millis(rng.range(0, 1000)))?;
        let off = us(t0, Instant::now());
        let name = match what {
            PowerOff::Site => "site",
            PowerOff::SecondNode => "node n2 of site",
        };
        let cut = victim_process(&mut cl, what, victim)?.power_loss(None)?;
        o.note(format!(
            "power loss of {name} {} at +{:.2}s: {cut}",
            cl.id(victim),
            off as f64 / 1e6
        ));
        sleep(Duration::from_millis(rng.range(2000, 4000)))?;
        victim_process(&mut cl, what, victim)?.start()?;
        let back = us(t0, Instant::now());
        sleep(phase)?;
        Ok((off, back, us(t0, Instant::now())))
    })();
    let records = wl.stop();
    let (off, back, end) = run?;
    let heal_at = Instant::now();
    note_throughput(
        o,
        &cl,
        &records,
        victim,
        [
            (off.saturating_sub(phase.as_micros() as u64), off),
            (off, back),
            (back, end),
        ],
    );
    if what == PowerOff::SecondNode {
        note_second_node_outage(o, &cl, &records, victim, off..back);
    }
    let loss = vec![LossWindow {
        site: victim,
        from_us: off.saturating_sub(1_000_000),
        to_us: off + 100_000,
    }];
    finish(
        &mut cl,
        dir,
        o,
        Finish {
            records,
            loss,
            heal_at,
            bound: CONVERGE_BOUND,
            before,
            full_expect: BTreeMap::new(),
        },
    )?;
    Ok(())
}

/// Seed paper scenario 3 and R6: a whole site isolated (acking unreplicated writes), then
/// powered off under `always` with a torn tail; the others keep loading; it comes back.
fn site_power_off(ctx: &Ctx, seed: u64, dir: &Path, o: &mut Outcome) -> anyhow::Result<()> {
    if !persistence_or_skip(ctx, o) {
        return Ok(());
    }
    let mut opts = options(ctx, seed);
    opts.flags = persistence_flags("always");
    let mut cl = start(ctx, &opts, dir, o)?;
    wan_latency(&cl);
    let victim = 1.min(cl.n() - 1);
    let before = cl.sync_counts()?;
    let t0 = Instant::now();
    let spec = workload::Spec {
        rate: ctx.rate,
        ..workload::Spec::default()
    };
    let wl = Workload::start(&cl.endpoints(), &spec, seed, t0);
    let mut rng = Rng::derive(seed, &[0x51fe]);
    let phase = ctx.load_time(Duration::from_secs(4));
    let run = (|| -> anyhow::Result<(u64, u64, u64)> {
        sleep(phase)?;
        cl.isolate(victim);
        sleep(Duration::from_secs(3))?;
        let off = us(t0, Instant::now());
        let what = cl.site_mut(victim)?.power_loss(Some(&mut rng))?;
        o.note(format!(
            "site {} isolated 3s, then power loss at +{:.2}s: {what}",
            cl.id(victim),
            off as f64 / 1e6
        ));
        sleep(ctx.load_time(Duration::from_secs(6)))?;
        cl.site_mut(victim)?.start()?;
        cl.heal_all()?;
        let back = us(t0, Instant::now());
        sleep(phase)?;
        Ok((off, back, us(t0, Instant::now())))
    })();
    let records = wl.stop();
    let (off, back, end) = run?;
    let heal_at = Instant::now();
    note_throughput(
        o,
        &cl,
        &records,
        victim,
        [
            (off.saturating_sub(phase.as_micros() as u64), off),
            (off, back),
            (back, end),
        ],
    );
    let full_expect = (0..cl.n())
        .flat_map(|i| {
            (0..cl.n())
                .filter(move |&j| j != i)
                .map(move |j| ((i, j), 0))
        })
        .collect();
    finish(
        &mut cl,
        dir,
        o,
        Finish {
            records,
            loss: vec![],
            heal_at,
            bound: CONVERGE_BOUND,
            before,
            full_expect,
        },
    )?;
    Ok(())
}

/// R10: a site away longer than its backlog comes back through exactly one delta full sync on
/// each of its links, and nothing either side wrote is lost.
fn away_past_backlog(ctx: &Ctx, seed: u64, dir: &Path, o: &mut Outcome) -> anyhow::Result<()> {
    let mut opts = options(ctx, seed);
    // Two 64 KiB chunks: with one, a connected peer a few ops behind can lose the chunk it is
    // reading when the next one starts (the server trims whole chunks).
    opts.flags = ["--backlog-bytes-max", "131072"].map(String::from).to_vec();
    if ctx.persistence.is_ok() {
        // The log on disk extends the backlog (docs/persistence.md §6): without it, the
        // in-memory backlog is all a peer can resume from.
        // `save ""` too: a save policy keeps the log for its snapshots.
        opts.flags
            .extend(["--appendonly", "no", "--save", ""].map(String::from));
        o.note("appendonly no, save \"\": the backlog is the 128 KiB in memory only".to_string());
    }
    let mut cl = start(ctx, &opts, dir, o)?;
    let away = cl.n() - 1;
    let t0 = Instant::now();
    let spec = workload::Spec {
        rate: ctx.rate,
        ..workload::Spec::default()
    };
    let wl = Workload::start(&cl.endpoints(), &spec, seed, t0);
    let run = (|| -> anyhow::Result<BTreeMap<(usize, usize), SyncCounts>> {
        sleep(Duration::from_secs(2))?;
        let before = cl.sync_counts()?;
        cl.isolate(away);
        sleep(ctx.load_time(Duration::from_secs(12)))?;
        Ok(before)
    })();
    let records = wl.stop();
    let before = run?;
    let seq: Vec<String> = cl
        .sites
        .iter()
        .map(|s| {
            let i = s.info_crdt().unwrap_or_default();
            format!(
                "{}: {} ops in its log window of {} bytes",
                s.id(),
                i.get("crdt_seq").map_or("?", String::as_str),
                i.get("crdt_oplog_bytes").map_or("?", String::as_str)
            )
        })
        .collect();
    o.note(format!("before heal: {}", seq.join("; ")));
    cl.heal_all()?;
    let heal_at = Instant::now();
    let mut full_expect = BTreeMap::new();
    for i in 0..cl.n() {
        for j in (0..cl.n()).filter(|&j| j != i) {
            full_expect.insert((i, j), u64::from(i == away || j == away));
        }
    }
    finish(
        &mut cl,
        dir,
        o,
        Finish {
            records,
            loss: vec![],
            heal_at,
            bound: CONVERGE_BOUND,
            before,
            full_expect,
        },
    )?;
    Ok(())
}

/// A chain of causal overwrites of one key across sites: each round waits (bounded) until
/// the previous value is visible at the next site, then overwrites it there.
fn causal_chain(eps: &[Endpoint], rounds: u32, t0: Instant, stop: &AtomicBool) -> Vec<Record> {
    let order: Vec<usize> = {
        let mut v: Vec<usize> = (0..eps.len()).collect();
        v.rotate_left(1.min(eps.len()));
        v
    };
    let mut recs: Vec<Recorder> = eps
        .iter()
        .map(|e| Recorder::new(e, 99, t0, Duration::from_secs(2)))
        .collect();
    let key = "str:chain";
    let mut last: Option<String> = None;
    for r in 0..rounds {
        if stop.load(Ordering::SeqCst) || interrupted() {
            break;
        }
        let Some(&s) = order.get(r as usize % order.len().max(1)) else {
            break;
        };
        let Some(rec) = recs.get_mut(s) else { break };
        if !rec.ensure_connected() {
            std::thread::sleep(Duration::from_millis(50));
            continue;
        }
        if let Some(prev) = &last {
            let deadline = Instant::now() + Duration::from_secs(5);
            // Bounded by the deadline: read until the previous round's value shows here.
            loop {
                let got = rec.exec(Op::Get, key, "", "", &["GET", key]);
                if got.and_then(|g| g.bulk_str()).as_deref() == Some(prev.as_str())
                    || Instant::now() > deadline
                {
                    break;
                }
                std::thread::sleep(Duration::from_millis(5));
                if !rec.ensure_connected() {
                    break;
                }
            }
        }
        let v = format!("chain:{r}:{s}");
        if rec.exec(Op::Set, key, &v, "", &["SET", key, &v]).is_some() {
            last = Some(v);
        }
    }
    recs.into_iter().flat_map(|r| r.records).collect()
}

/// R11: B at +30 s, C at -30 s. Causal overwrite chains must end on their last write; writes
/// made concurrently under a partition must end equal everywhere.
fn clock_skew(ctx: &Ctx, seed: u64, dir: &Path, o: &mut Outcome) -> anyhow::Result<()> {
    let mut opts = options(ctx, seed);
    // B's stamps reach C 60 s ahead of C's clock; the default limit (60 s) would refuse them.
    opts.flags = ["--sync-clock-skew-ms-max", "90000"]
        .map(String::from)
        .to_vec();
    opts.site_flags.insert(
        1,
        ["--debug-clock-offset-ms", "30000"]
            .map(String::from)
            .to_vec(),
    );
    if ctx.sites > 2 {
        opts.site_flags.insert(
            2,
            ["--debug-clock-offset-ms", "-30000"]
                .map(String::from)
                .to_vec(),
        );
    }
    o.note("offsets: b +30s, c -30s; sync-clock-skew-ms-max 90000 (the default 60000 would refuse b's ops at c)".to_string());
    let mut cl = start(ctx, &opts, dir, o)?;
    let before = cl.sync_counts()?;
    let t0 = Instant::now();
    // Long TTLs only: a site 30 s ahead expires keys 30 s earlier than one 30 s behind.
    let spec = workload::Spec {
        rate: ctx.rate,
        ttl_s: (300, 600),
        ..workload::Spec::default()
    };
    let wl = Workload::start(&cl.endpoints(), &spec, seed, t0);
    let stop = AtomicBool::new(false);
    let eps = cl.endpoints();
    let load = ctx.load_time(Duration::from_secs(14));
    let (chain, run) = std::thread::scope(|s| {
        let h = s.spawn(|| causal_chain(&eps, 100_000, t0, &stop));
        let run = (|| -> anyhow::Result<()> {
            sleep(load / 2)?;
            for i in 0..cl.n() {
                cl.isolate(i);
            }
            o.note("all sites partitioned for 3s (concurrent writes)".to_string());
            sleep(Duration::from_secs(3))?;
            cl.heal_all()?;
            sleep(load / 2)
        })();
        stop.store(true, Ordering::SeqCst);
        (h.join().unwrap_or_default(), run)
    });
    let mut records = wl.stop();
    run?;
    let chain_sets = chain.iter().filter(|r| r.op == Op::Set && r.ok()).count();
    let chain_last = chain
        .iter()
        .filter(|r| r.op == Op::Set && r.ok())
        .max_by_key(|r| r.t_done_us)
        .map(|r| r.arg.clone());
    o.note(format!(
        "causal chain: {chain_sets} acked overwrites across sites"
    ));
    records.extend(chain);
    records.sort_by_key(|r| (r.t_inv_us, r.site, r.client, r.seq));
    let heal_at = Instant::now();
    let state = finish(
        &mut cl,
        dir,
        o,
        Finish {
            records,
            loss: vec![],
            heal_at,
            bound: CONVERGE_BOUND,
            before,
            full_expect: BTreeMap::new(),
        },
    )?;
    let fin = match state.get("str:chain") {
        Some(Value::Str(v)) => Some(v.clone()),
        _ => None,
    };
    if fin != chain_last {
        o.fail(format!(
            "causal chain ended on {fin:?}, its last acked write is {chain_last:?}"
        ));
    }
    Ok(())
}

/// Runs `cmds` at a site in pipelines of 500; returns how many replies were not errors.
fn pipeline_all(
    cl: &Cluster,
    site: usize,
    cmds: &[Vec<String>],
    rate: u32,
) -> anyhow::Result<usize> {
    let mut conn = cl.site(site)?.connect(crate::site::ADMIN_TIMEOUT)?;
    let mut ok = 0;
    let start = Instant::now();
    for (n, chunk) in cmds.chunks(500).enumerate() {
        if interrupted() {
            bail!("interrupted");
        }
        // Rate bound: the chunk n starts no earlier than n × 500 / rate seconds in.
        let due = start + Duration::from_secs_f64((n * 500) as f64 / f64::from(rate.max(1)));
        sleep(due.saturating_duration_since(Instant::now()))?;
        ok += conn
            .pipeline(chunk)?
            .iter()
            .filter(|r| !matches!(r, Reply::Error(_)))
            .count();
    }
    Ok(ok)
}

fn cmd(parts: &[&str]) -> Vec<String> {
    parts.iter().map(|s| s.to_string()).collect()
}

/// R12: deletes while a site is cut off; that site updates some deleted keys meanwhile. No
/// deleted data comes back; the concurrent updates survive, alone.
fn gc_while_cut_off(ctx: &Ctx, seed: u64, dir: &Path, o: &mut Outcome) -> anyhow::Result<()> {
    let opts = options(ctx, seed);
    let mut cl = start(ctx, &opts, dir, o)?;
    let (a, c) = (0, cl.n() - 1);
    let before = cl.sync_counts()?;
    let mut fill = Vec::new();
    for k in 0..GC_KEYS {
        fill.push(cmd(&["SET", &format!("gc:str:{k}"), "v0"]));
        let mut sadd = cmd(&["SADD", &format!("gc:set:{k}")]);
        sadd.extend((0..5).map(|i| format!("a:{k}:{i}")));
        fill.push(sadd);
    }
    pipeline_all(&cl, a, &fill, 10_000)?;
    if let Err(why) = cl.wait_converged(Duration::from_secs(20), &interrupted)? {
        bail!("not converged after the fill: {why}");
    }
    cl.isolate(c);
    let collected_before = gc_counter(&cl, a, "crdt_gc_collected_keys");
    let mut dels = Vec::new();
    for k in 0..GC_KEYS {
        dels.push(cmd(&["DEL", &format!("gc:str:{k}")]));
        let set = format!("gc:set:{k}");
        if k >= GC_SETS_KEPT {
            dels.push(cmd(&["DEL", &set]));
        } else {
            dels.push(cmd(&[
                "SREM",
                &set,
                &format!("a:{k}:0"),
                &format!("a:{k}:1"),
            ]));
        }
    }
    let (str_upd, set_upd) = gc_updates(seed);
    let mut upd = Vec::new();
    for k in &str_upd {
        upd.push(cmd(&["SET", &format!("gc:str:{k}"), &format!("c-new-{k}")]));
    }
    for k in &set_upd {
        upd.push(cmd(&["SADD", &format!("gc:set:{k}"), &format!("c:{k}")]));
    }
    pipeline_all(&cl, a, &dels, 10_000)?;
    pipeline_all(&cl, c, &upd, 10_000)?;
    sleep(Duration::from_secs(3))?;
    let collected = gc_counter(&cl, a, "crdt_gc_collected_keys").saturating_sub(collected_before);
    let held = gc_pending(&cl, a);
    o.note(format!(
        "while {} is cut off (3 s after the deletes), site {} collected the metadata of {collected} keys and holds that of {held}",
        cl.id(c),
        cl.id(a)
    ));
    // Informational: metadata whose removed writes every site had already delivered may be
    // dropped while c is away (no late copy of them can arrive); what must hold is the outcome
    // after heal, checked below.
    cl.heal_all()?;
    let heal_at = Instant::now();
    let fin = Finish {
        records: vec![],
        loss: vec![],
        heal_at,
        bound: CONVERGE_BOUND,
        before,
        full_expect: BTreeMap::new(),
    };
    let state = finish(&mut cl, dir, o, fin)?;
    let bad = gc_mismatches(&state, &str_upd, &set_upd);
    o.note(format!(
        "{} of {} keys differ from the expected outcome",
        bad.len(),
        2 * GC_KEYS
    ));
    if !bad.is_empty() {
        o.fail(format!(
            "{} keys wrong after heal (deleted data back or updates lost): {}",
            bad.len(),
            bad.iter().take(10).cloned().collect::<Vec<_>>().join("; ")
        ));
    }
    // Tombstones go once every site has acked them (bounded: 30 s).
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(30) && !interrupted() {
        if (0..cl.n()).all(|i| gc_pending(&cl, i) == 0) {
            o.note(format!(
                "removal metadata collected everywhere {:.1}s after convergence",
                t.elapsed().as_secs_f64()
            ));
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let left: Vec<u64> = (0..cl.n()).map(|i| gc_pending(&cl, i)).collect();
    o.fail(format!(
        "removal metadata still pending 30 s after convergence: {left:?}"
    ));
    Ok(())
}

/// Strings and sets of `gc-while-cut-off`; sets below `GC_SETS_KEPT` lose two members, the
/// others are deleted.
const GC_KEYS: usize = 300;
const GC_SETS_KEPT: usize = 200;

/// The cut-off site's concurrent updates: a seeded choice of 50 deleted strings and 30 deleted
/// sets.
fn gc_updates(seed: u64) -> (Vec<usize>, Vec<usize>) {
    let mut rng = Rng::derive(seed, &[0x6c]);
    let mut str_upd: Vec<usize> = (0..GC_KEYS).collect();
    let mut set_upd: Vec<usize> = (GC_SETS_KEPT..GC_KEYS).collect();
    for v in [&mut str_upd, &mut set_upd] {
        for i in (1..v.len()).rev() {
            let j = rng.below(i as u64 + 1) as usize;
            v.swap(i, j);
        }
    }
    str_upd.truncate(50);
    set_upd.truncate(30);
    (str_upd, set_upd)
}

/// Keys of `gc-while-cut-off` whose final value is not what the rules give.
fn gc_mismatches(state: &State, str_upd: &[usize], set_upd: &[usize]) -> Vec<String> {
    let mut bad = Vec::new();
    for k in 0..GC_KEYS {
        let key = format!("gc:str:{k}");
        let want = str_upd
            .contains(&k)
            .then(|| Value::Str(format!("c-new-{k}")));
        if state.get(&key) != want.as_ref() {
            bad.push(format!("{key}={:?} (want {want:?})", state.get(&key)));
        }
        let key = format!("gc:set:{k}");
        let want: Option<Value> = if k < GC_SETS_KEPT {
            Some(Value::Set((2..5).map(|i| format!("a:{k}:{i}")).collect()))
        } else if set_upd.contains(&k) {
            Some(Value::Set([format!("c:{k}")].into()))
        } else {
            None
        };
        if state.get(&key) != want.as_ref() {
            bad.push(format!("{key}={:?} (want {want:?})", state.get(&key)));
        }
    }
    bad
}

/// `crdt_gc_pending_keys` of site `i` (0 when it cannot be read).
fn gc_pending(cl: &Cluster, i: usize) -> u64 {
    gc_counter(cl, i, "crdt_gc_pending_keys")
}

/// A numeric field of site `i`'s `INFO crdt` (0 when it cannot be read).
fn gc_counter(cl: &Cluster, i: usize, field: &str) -> u64 {
    cl.site(i)
        .ok()
        .and_then(|s| s.info_crdt().ok())
        .and_then(|m| m.get(field).and_then(|v| v.parse().ok()))
        .unwrap_or(0)
}

/// 100,000 keys changed at one site while another is cut off, on links with 100 ms round trips;
/// the time from heal to equal digests is the figure (goal ≤ 5 s).
fn converge_100k(ctx: &Ctx, seed: u64, dir: &Path, o: &mut Outcome) -> anyhow::Result<()> {
    const KEYS: usize = 100_000;
    let mut opts = options(ctx, seed);
    opts.one_way_ms = 50;
    opts.jitter_ms = 5;
    let mut cl = start(ctx, &opts, dir, o)?;
    let (a, c) = (0, cl.n() - 1);
    let before = cl.sync_counts()?;
    cl.isolate(c);
    let cmds: Vec<Vec<String>> = (0..KEYS)
        .map(|k| cmd(&["SET", &format!("ck:{k:06}"), &format!("{seed}:{k}")]))
        .collect();
    let t = Instant::now();
    let ok = pipeline_all(&cl, a, &cmds, 10_000)?;
    o.note(format!(
        "{ok} of {KEYS} SETs acked at {} in {:.1}s while {} was cut off",
        cl.id(a),
        t.elapsed().as_secs_f64(),
        cl.id(c)
    ));
    if ok != KEYS {
        o.fail(format!("only {ok} of {KEYS} SETs acked"));
    }
    // Let the connected sites catch up first, so the figure is the cut-off site's.
    let others: Vec<usize> = (0..cl.n()).filter(|&i| i != c).collect();
    let wait = Instant::now();
    while wait.elapsed() < Duration::from_secs(30) {
        let d: Vec<String> = others
            .iter()
            .filter_map(|&i| cl.site(i).ok()?.digest().ok())
            .collect();
        if d.len() == others.len() && d.iter().all(|x| Some(x) == d.first()) {
            break;
        }
        sleep(Duration::from_millis(100))?;
    }
    cl.heal_all()?;
    let heal_at = Instant::now();
    let conv = cl.wait_converged(CONVERGE_WAIT_MAX, &interrupted)?;
    let took = heal_at.elapsed();
    match conv {
        Ok(c) => {
            let links = (c.links_up + (took - c.total)).as_secs_f64();
            let goal = if took <= CONVERGE_GOAL {
                "within"
            } else {
                "over"
            };
            o.note(format!(
                "converge-100k: {KEYS} changed keys, 100 ms RTT: converged {:.2}s after heal \
                 ({goal} the 5 s p99 goal; links up again after {links:.2}s, caught up {:.2}s later)",
                took.as_secs_f64(),
                took.as_secs_f64() - links
            ));
            if took > CONVERGE_BOUND {
                o.fail(format!(
                    "converged in {:.2}s, over the 10 s bound",
                    took.as_secs_f64()
                ));
            }
        }
        Err(why) => o.fail(format!(
            "not converged {:.0}s after heal: {why}",
            took.as_secs_f64()
        )),
    }
    let size = cl.site(c)?.cmd(&["DBSIZE"])?.int().unwrap_or(-1);
    if size != KEYS as i64 {
        o.fail(format!(
            "site {} holds {size} keys, expected {KEYS}",
            cl.id(c)
        ));
    }
    let after = cl.sync_counts()?;
    let full: u64 = after
        .iter()
        .map(|(k, v)| v.full_in - before.get(k).map_or(0, |b| b.full_in))
        .sum();
    o.note(format!("full syncs: {full}"));
    Ok(())
}

/// Whether a drill with this status counts as run.
pub fn counted(s: Status) -> bool {
    s != Status::Skipped
}

/// One row of the conflict table: ops at `a` and at `b` under a partition, ops at `a` after
/// heal, then a read whose reply every site must give.
struct Row {
    name: &'static str,
    setup: Vec<Vec<String>>,
    at_a: Vec<Vec<String>>,
    at_b: Vec<Vec<String>>,
    after: Vec<Vec<String>>,
    read: Vec<String>,
    /// Replies allowed (as `Reply::text`).
    expect: Vec<String>,
}

fn conflict_rows(r: usize) -> Vec<Row> {
    let k = |s: &str| format!("cf:{r}:{s}");
    let c = |parts: &[&str]| parts.iter().map(|s| s.to_string()).collect::<Vec<String>>();
    let (l, s1, s2, st, n) = (k("list"), k("set1"), k("set2"), k("str"), k("cnt"));
    let (h, e1, e2, d) = (k("hash"), k("exp1"), k("exp2"), k("delset"));
    let (l2, l3, l4) = (k("list2"), k("list3"), k("list4"));
    vec![
        Row {
            name: "RPUSH x, LPOP (empties the list) ∥ RPUSH y z: y and z stay",
            setup: vec![],
            at_a: vec![c(&["RPUSH", &l2, "x"]), c(&["LPOP", &l2])],
            at_b: vec![c(&["RPUSH", &l2, "y", "z"])],
            after: vec![],
            read: c(&["LRANGE", &l2, "0", "-1"]),
            expect: vec!["y z".into()],
        },
        Row {
            name: "two LPOPs empty [p q] ∥ RPUSH r: r stays",
            setup: vec![c(&["RPUSH", &l3, "p", "q"])],
            at_a: vec![c(&["LPOP", &l3]), c(&["LPOP", &l3])],
            at_b: vec![c(&["RPUSH", &l3, "r"])],
            after: vec![],
            read: c(&["LRANGE", &l3, "0", "-1"]),
            expect: vec!["r".into()],
        },
        Row {
            name: "RPUSH a1 a2 ∥ RPUSH b1 b2 on [s], then three LPOPs: two elements stay",
            setup: vec![c(&["RPUSH", &l4, "s"])],
            at_a: vec![c(&["RPUSH", &l4, "a1"]), c(&["RPUSH", &l4, "a2"])],
            at_b: vec![c(&["RPUSH", &l4, "b1"]), c(&["RPUSH", &l4, "b2"])],
            after: vec![c(&["LPOP", &l4]), c(&["LPOP", &l4]), c(&["LPOP", &l4])],
            read: c(&["LLEN", &l4]),
            expect: vec!["2".into()],
        },
        Row {
            name: "RPUSH ∥ RPUSH on an empty list, then one LPOP: the other element stays",
            setup: vec![],
            at_a: vec![c(&["RPUSH", &l, "x"])],
            at_b: vec![c(&["RPUSH", &l, "y"])],
            after: vec![c(&["LPOP", &l])],
            read: c(&["LLEN", &l]),
            expect: vec!["1".into()],
        },
        Row {
            name: "SREM x ∥ SADD x: add wins",
            setup: vec![c(&["SADD", &s1, "x", "y"])],
            at_a: vec![c(&["SREM", &s1, "x"])],
            at_b: vec![c(&["SADD", &s1, "x"])],
            after: vec![],
            read: c(&["SISMEMBER", &s1, "x"]),
            expect: vec!["1".into()],
        },
        Row {
            name: "SADD x ∥ SREM x: add wins (other order)",
            setup: vec![c(&["SADD", &s2, "x", "y"])],
            at_a: vec![c(&["SADD", &s2, "x"])],
            at_b: vec![c(&["SREM", &s2, "x"])],
            after: vec![],
            read: c(&["SISMEMBER", &s2, "x"]),
            expect: vec!["1".into()],
        },
        Row {
            name: "SET ∥ DEL: the update wins",
            setup: vec![c(&["SET", &st, "v0"])],
            at_a: vec![c(&["SET", &st, "v1"])],
            at_b: vec![c(&["DEL", &st])],
            after: vec![],
            read: c(&["GET", &st]),
            expect: vec!["v1".into()],
        },
        Row {
            name: "INCR ∥ DEL: the unobserved increment stays",
            setup: vec![c(&["SET", &n, "10"])],
            at_a: vec![c(&["INCR", &n])],
            at_b: vec![c(&["DEL", &n])],
            after: vec![],
            read: c(&["GET", &n]),
            expect: vec!["1".into()],
        },
        Row {
            name: "HSET f ∥ HDEL f: the update wins",
            setup: vec![c(&["HSET", &h, "f", "1", "g", "1"])],
            at_a: vec![c(&["HSET", &h, "f", "2"])],
            at_b: vec![c(&["HDEL", &h, "f"])],
            after: vec![],
            read: c(&["HGET", &h, "f"]),
            expect: vec!["2".into()],
        },
        Row {
            name: "EXPIRE 100 ∥ EXPIRE 500: the longer TTL wins",
            setup: vec![c(&["SET", &e1, "v"])],
            at_a: vec![c(&["EXPIRE", &e1, "100"])],
            at_b: vec![c(&["EXPIRE", &e1, "500"])],
            after: vec![],
            read: c(&["TTL", &e1]),
            expect: (470..=500).map(|t| t.to_string()).collect(),
        },
        Row {
            name: "PERSIST ∥ EXPIRE: PERSIST wins",
            setup: vec![c(&["SET", &e2, "v"]), c(&["EXPIRE", &e2, "300"])],
            at_a: vec![c(&["PERSIST", &e2])],
            at_b: vec![c(&["EXPIRE", &e2, "900"])],
            after: vec![],
            read: c(&["TTL", &e2]),
            expect: vec!["-1".into()],
        },
        Row {
            name: "DEL ∥ SADD: only the concurrent add stays",
            setup: vec![c(&["SADD", &d, "old"])],
            at_a: vec![c(&["DEL", &d])],
            at_b: vec![c(&["SADD", &d, "new"])],
            after: vec![],
            read: c(&["SMEMBERS", &d]),
            expect: vec!["new".into()],
        },
    ]
}

/// R5: every row of the conflict table, a few times, with site a cut off from the others.
fn conflicts(ctx: &Ctx, seed: u64, dir: &Path, o: &mut Outcome) -> anyhow::Result<()> {
    let reps = if ctx.long.is_some() { 20 } else { 3 };
    let opts = options(ctx, seed);
    let cl = start(ctx, &opts, dir, o)?;
    let (a, b) = (0, 1);
    let wait = |what: &str| -> anyhow::Result<()> {
        match cl.wait_converged(Duration::from_secs(20), &interrupted)? {
            Ok(_) => Ok(()),
            Err(why) => bail!("not converged {what}: {why}"),
        }
    };
    let (mut failures, mut checked) = (0, 0);
    let n_rows = conflict_rows(0).len();
    for r in 0..reps {
        let rows = conflict_rows(r);
        let all = |f: fn(&Row) -> &Vec<Vec<String>>| -> Vec<Vec<String>> {
            rows.iter().flat_map(|x| f(x).iter().cloned()).collect()
        };
        pipeline_all(&cl, a, &all(|x| &x.setup), 10_000)?;
        wait("after the setup")?;
        cl.isolate(a);
        pipeline_all(&cl, a, &all(|x| &x.at_a), 10_000)?;
        pipeline_all(&cl, b, &all(|x| &x.at_b), 10_000)?;
        cl.heal_proxies();
        wait("after heal")?;
        pipeline_all(&cl, a, &all(|x| &x.after), 10_000)?;
        wait("after the last ops")?;
        for row in &rows {
            for s in 0..cl.n() {
                checked += 1;
                let args: Vec<&str> = row.read.iter().map(String::as_str).collect();
                let got = cl.site(s)?.cmd(&args)?.text();
                if row.expect.contains(&got) {
                    continue;
                }
                failures += 1;
                if failures <= 10 {
                    o.fail(format!(
                        "rep {r}, {}: {} at {} answered {got:?}, expected {:?}",
                        row.name,
                        row.read.join(" "),
                        cl.id(s),
                        row.expect.iter().take(3).collect::<Vec<_>>()
                    ));
                }
            }
        }
    }
    o.note(format!("{checked} reads checked ({reps} repetitions of {n_rows} rows on every site), {failures} wrong"));
    if cl.n() >= 3 {
        for r in 0..reps.min(if ctx.long.is_some() { 5 } else { 1 }) {
            pop_after_third_site_pop(&cl, o, r)?;
        }
    }
    Ok(())
}

/// The words of `text` in sorted order (set replies come in any order).
fn sorted_words(text: &str) -> String {
    let mut w: Vec<&str> = text.split_whitespace().collect();
    w.sort_unstable();
    w.join(" ")
}

/// Polls `read` at `site` until its reply text satisfies `ok` (bounded); returns the last text.
fn poll_until(
    cl: &Cluster,
    site: usize,
    read: &[&str],
    ok: impl Fn(&str) -> bool,
) -> anyhow::Result<String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let got = sorted_words(&cl.site(site)?.cmd(read)?.text());
        if ok(&got) || Instant::now() > deadline {
            return Ok(got);
        }
        sleep(Duration::from_millis(20))?;
    }
}

/// One type's commands for the three-site removal check.
struct ThreeSite {
    ty: &'static str,
    setup: fn(&str) -> Vec<String>,
    add_y: fn(&str) -> Vec<String>,
    remove_first: fn(&str) -> Vec<String>,
    remove_second: fn(&str) -> Vec<String>,
    read: fn(&str) -> Vec<String>,
    /// The read's text with all three, with the second only, with y only.
    all: &'static str,
    second: &'static str,
    only_y: &'static str,
}

const THREE_SITE: &[ThreeSite] = &[
    ThreeSite {
        ty: "list",
        setup: |k| cmd(&["RPUSH", k, "s1", "s2"]),
        add_y: |k| cmd(&["RPUSH", k, "y"]),
        remove_first: |k| cmd(&["LPOP", k]),
        remove_second: |k| cmd(&["LPOP", k]),
        read: |k| cmd(&["LRANGE", k, "0", "-1"]),
        all: "s1 s2 y",
        second: "s2",
        only_y: "y",
    },
    ThreeSite {
        ty: "set",
        setup: |k| cmd(&["SADD", k, "s1", "s2"]),
        add_y: |k| cmd(&["SADD", k, "y"]),
        remove_first: |k| cmd(&["SREM", k, "s1"]),
        remove_second: |k| cmd(&["SREM", k, "s2"]),
        read: |k| cmd(&["SMEMBERS", k]),
        all: "s1 s2 y",
        second: "s2",
        only_y: "y",
    },
    ThreeSite {
        ty: "hash",
        setup: |k| cmd(&["HSET", k, "s1", "1", "s2", "1"]),
        add_y: |k| cmd(&["HSET", k, "y", "1"]),
        remove_first: |k| cmd(&["HDEL", k, "s1"]),
        remove_second: |k| cmd(&["HDEL", k, "s2"]),
        read: |k| cmd(&["HKEYS", k]),
        all: "s1 s2 y",
        second: "s2",
        only_y: "y",
    },
    ThreeSite {
        ty: "zset",
        setup: |k| cmd(&["ZADD", k, "1", "s1", "2", "s2"]),
        add_y: |k| cmd(&["ZADD", k, "3", "y"]),
        remove_first: |k| cmd(&["ZREM", k, "s1"]),
        remove_second: |k| cmd(&["ZREM", k, "s2"]),
        read: |k| cmd(&["ZRANGE", k, "0", "-1"]),
        all: "s1 s2 y",
        second: "s2",
        only_y: "y",
    },
];

/// A removal that reaches a site before an add it had seen (delivered through a third site):
/// a is cut off from b only; b adds y; c, which has y, removes s1; a, which has c's removal but
/// not y, removes s2, its last element. y was never removed: it must stay, for every type.
fn pop_after_third_site_pop(cl: &Cluster, o: &mut Outcome, r: usize) -> anyhow::Result<()> {
    let (a, b, c) = (0, 1, 2);
    let run = |argv: Vec<String>, site: usize| -> anyhow::Result<String> {
        let args: Vec<&str> = argv.iter().map(String::as_str).collect();
        Ok(cl.site(site)?.cmd(&args)?.text())
    };
    for t in THREE_SITE {
        let key = format!("cf:{r}:3site-{}", t.ty);
        run((t.setup)(&key), a)?;
        if let Err(why) = cl.wait_converged(Duration::from_secs(20), &interrupted)? {
            bail!("not converged after the setup: {why}");
        }
        cl.partition(a, b);
        run((t.add_y)(&key), b)?;
        let read = (t.read)(&key);
        let read: Vec<&str> = read.iter().map(String::as_str).collect();
        let at_c = poll_until(cl, c, &read, |x| x == t.all)?;
        let removed_c = run((t.remove_first)(&key), c)?;
        let at_a = poll_until(cl, a, &read, |x| x == t.second)?;
        let removed_a = run((t.remove_second)(&key), a)?;
        cl.heal_proxies();
        if let Err(why) = cl.wait_converged(Duration::from_secs(20), &interrupted)? {
            bail!("not converged after heal: {why}");
        }
        let finals: Vec<String> = (0..cl.n())
            .map(|s| {
                cl.site(s)
                    .and_then(|x| x.cmd(&read))
                    .map(|r| sorted_words(&r.text()))
            })
            .collect::<anyhow::Result<_>>()?;
        if finals.iter().any(|f| f != t.only_y) {
            o.fail(format!(
                "rep {r}, {} removal after a third site's removal: c saw [{at_c}] and removed s1 ({removed_c}); a saw [{at_a}] and removed s2 ({removed_a}); \
                 b's y was never removed, but the {} ends as {finals:?} (expected [{}] everywhere)",
                t.ty, t.ty, t.only_y
            ));
        }
    }
    Ok(())
}

/// Clients of one site (`Workload` for that site alone) whose ledger calls it `label`: a site
/// reset under a new id gets a label of its own, so its values and its ops' order never mix
/// with those of the site that used its machine before.
fn load_at(
    cl: &Cluster,
    i: usize,
    label: usize,
    spec: &workload::Spec,
    seed: u64,
    t0: Instant,
) -> anyhow::Result<Workload> {
    let s = cl.site(i)?;
    let ep = Endpoint {
        site: label,
        ns: s.spec.ns.clone(),
        addr: s.spec.client,
    };
    Ok(Workload::start(&[ep], spec, seed, t0))
}

/// Runs `meridian admin ARGS` against site `i` and records its output; fails the drill unless
/// it exits `want_ok`.
fn admin_step(
    ctx: &Ctx,
    cl: &Cluster,
    o: &mut Outcome,
    i: usize,
    args: &[&str],
    want_ok: bool,
) -> anyhow::Result<String> {
    let (ok, out) = cl.admin(&ctx.bin, i, args)?;
    o.note(format!(
        "meridian admin {} on {}: {out}",
        args.join(" "),
        cl.id(i)
    ));
    if ok != want_ok {
        o.fail(format!(
            "meridian admin {} on {} {}: {out}",
            args.join(" "),
            cl.id(i),
            if ok { "succeeded" } else { "failed" }
        ));
    }
    Ok(out)
}

/// What `add_remove_site` measured during its load phases.
struct Membership {
    /// When the removed site was killed (µs from t0).
    killed_us: u64,
    /// When the added site was started and when every site listed it (µs from t0).
    started_us: u64,
    added_us: u64,
}

/// Issue 21: sites added and removed online under load (docs/operations.md §4, §5). The
/// sites but the last start and load; the last starts under load, takes writes at once and is
/// added everywhere with `meridian admin add-peer` (a full sync from each site); b is lost
/// (SIGKILL) under load and removed with `remove-peer`; b's machine comes back with its old
/// data and is refused; it is reset (empty data, a new id) and added again. Every acked write
/// is checked on every site (b's last second before its death excused: nobody may have
/// received it), the sites converge, and GC collects everything once the load stops, which
/// it could not while the dead b still counted.
fn add_remove_site(ctx: &Ctx, seed: u64, dir: &Path, o: &mut Outcome) -> anyhow::Result<()> {
    let n = ctx.sites;
    if n < 3 {
        o.skip("needs 3 sites or more (one added, one removed, one that stays)");
        return Ok(());
    }
    let (removed, added) = (1, n - 1);
    let first: Vec<usize> = (0..n).filter(|&i| i != added).collect();
    let labels = crate::cluster::site_ids(n + 1);
    let reset_id = labels.last().cloned().unwrap_or_default();
    let mut opts = options(ctx, seed);
    opts.later = vec![added];
    for &i in &first {
        opts.peers
            .insert(i, first.iter().copied().filter(|&j| j != i).collect());
    }
    opts.spare_ids = vec![reset_id.clone()];
    let mut cl = Cluster::start(&opts, &ctx.bin, &dir.join("cluster"), ctx.mode, &ctx.tag())?;
    cl.wait_links_up_among(&first, Duration::from_secs(20))?;
    let b_id = cl.id(removed).to_string();
    let b_log = cl.site(removed)?.spec.log.clone();
    let mut rng = Rng::derive(seed, &[0xadd]);
    let phase = ctx.load_time(Duration::from_secs(4));
    let spec = workload::Spec {
        rate: (ctx.rate / n as u32).max(1),
        ..workload::Spec::default()
    };
    let t0 = Instant::now();
    let mut records = Vec::new();
    let mut loads: Vec<(usize, Workload)> = Vec::new();
    for &i in &first {
        loads.push((i, load_at(&cl, i, i, &spec, seed, t0)?));
    }
    let run = (|| -> anyhow::Result<Membership> {
        sleep(phase + Duration::from_millis(rng.range(0, 1000)))?;
        // Add the last site: it starts listing every site, takes writes at once, and is
        // refused until each site lists it.
        let started_us = us(t0, Instant::now());
        cl.site_mut(added)?.start()?;
        loads.push((added, load_at(&cl, added, added, &spec, seed, t0)?));
        for &i in &first {
            let addr = cl.peer_addr(i, added)?.to_string();
            admin_step(ctx, &cl, o, i, &["add-peer", cl.id(added), &addr], true)?;
        }
        let added_at = Instant::now();
        let added_us = us(t0, added_at);
        cl.wait_links_up(Duration::from_secs(20))?;
        let counts = cl.sync_counts()?;
        let pulls: Vec<String> = first
            .iter()
            .map(|&j| {
                let c = counts.get(&(added, j)).copied().unwrap_or_default();
                // One on each shard link (`SyncCounts::links`).
                if c.full_in != c.links.max(1) {
                    o.fail(format!(
                        "{} pulled {} full syncs from {} when added, expected 1 on each of its {} shard links",
                        cl.id(added),
                        c.full_in,
                        cl.id(j),
                        c.links.max(1)
                    ));
                }
                format!("{} from {}", c.full_in, cl.id(j))
            })
            .collect();
        o.note(format!(
            "{} added: every link up {:.2}s after the last add-peer; full syncs into {}: {}",
            cl.id(added),
            added_at.elapsed().as_secs_f64(),
            cl.id(added),
            pulls.join(", ")
        ));
        sleep(phase + Duration::from_millis(rng.range(0, 1000)))?;
        // Lose b under load and remove it from the others.
        let remaining: Vec<usize> = (0..n).filter(|&i| i != removed).collect();
        cl.site_mut(removed)?.kill();
        let killed_us = us(t0, Instant::now());
        if let Some(k) = loads.iter().position(|(l, _)| *l == removed) {
            records.extend(loads.swap_remove(k).1.stop());
        }
        // Dead and still a peer for a while: GC waits for it (what it had acked goes).
        sleep(Duration::from_secs(1))?;
        let gc0 = gc_counter(&cl, 0, "crdt_gc_collected_keys");
        let pending0 = gc_pending(&cl, 0);
        sleep(Duration::from_millis(1500))?;
        let gc1 = gc_counter(&cl, 0, "crdt_gc_collected_keys");
        let pending1 = gc_pending(&cl, 0);
        for &i in &remaining {
            admin_step(ctx, &cl, o, i, &["remove-peer", &b_id], true)?;
        }
        let peers: Vec<String> = remaining
            .iter()
            .map(|&i| gc_counter(&cl, i, "crdt_peers").to_string())
            .collect();
        o.note(format!(
            "{b_id} killed at +{:.2}s and removed; crdt_peers on the remaining sites: {}",
            killed_us as f64 / 1e6,
            peers.join(", ")
        ));
        if peers.iter().any(|p| *p != (n - 2).to_string()) {
            o.fail(format!(
                "the remaining sites count {} peers, expected {} each",
                peers.join(", "),
                n - 2
            ));
        }
        sleep(phase)?;
        let gc2 = gc_counter(&cl, 0, "crdt_gc_collected_keys");
        o.note(format!(
            "GC at {}: {} keys collected in the last 1.5s while {b_id} was dead and not yet removed (pending {pending0} → {pending1}), {} collected in the {:.0}s after the removal",
            cl.id(0),
            gc1.saturating_sub(gc0),
            gc2.saturating_sub(gc1),
            phase.as_secs_f64()
        ));
        if gc2 <= gc1 {
            o.fail(format!(
                "GC at {} collected nothing in the {:.0}s after {b_id} was removed",
                cl.id(0),
                phase.as_secs_f64()
            ));
        }
        // b's machine comes back with its old data: refused, and so is adding it again.
        cl.site_mut(removed)?.start()?;
        let mut refusal = None;
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(10) && refusal.is_none() {
            let info = cl.site(removed)?.info_crdt()?;
            refusal = info
                .get(&format!("crdt_peer_{}", cl.id(0)))
                .map(|l| crate::site::parse_peer_line(l))
                .and_then(|p| p.get("last_error").cloned())
                .filter(|e| e.contains("was removed"));
            sleep(Duration::from_millis(100))?;
        }
        match refusal {
            Some(e) => o.note(format!("{b_id} back with its old data: refused ({e})")),
            None => o.fail(format!("{b_id} came back and was not refused within 10s")),
        }
        let addr = cl.peer_addr(0, removed)?.to_string();
        let out = admin_step(ctx, &cl, o, 0, &["add-peer", &b_id, &addr], false)?;
        if !out.contains("was removed") {
            o.fail(format!("adding {b_id} again: {out}"));
        }
        // Reset: empty data, a new id; added like any new site.
        cl.reset_site(removed, &reset_id, &remaining)?;
        cl.site_mut(removed)?.start()?;
        loads.push((n, load_at(&cl, removed, n, &spec, seed, t0)?));
        for &i in &remaining {
            let addr = cl.peer_addr(i, removed)?.to_string();
            admin_step(ctx, &cl, o, i, &["add-peer", &reset_id, &addr], true)?;
        }
        cl.wait_links_up(Duration::from_secs(20))?;
        o.note(format!(
            "{b_id}'s machine reset and added as {reset_id}: every link up"
        ));
        sleep(phase / 2)?;
        Ok(Membership {
            killed_us,
            started_us,
            added_us,
        })
    })();
    for (_, w) in loads {
        records.extend(w.stop());
    }
    records.sort_by_key(|r| (r.t_inv_us, r.site, r.client, r.seq));
    let m = run?;
    let heal_at = Instant::now();
    let early = records
        .iter()
        .filter(|r| r.site == added && r.ok() && r.t_done_us < m.added_us)
        .count();
    o.note(format!(
        "{} acked {early} writes in the {:.2}s between its start and the last add-peer",
        cl.id(added),
        (m.added_us.saturating_sub(m.started_us)) as f64 / 1e6
    ));
    for c in cl.crashed() {
        o.fail(format!("crash: {c}"));
    }
    note_convergence(&cl, o, heal_at, CONVERGE_BOUND)?;
    let full_expect = (0..n)
        .filter(|&j| j != removed)
        .map(|j| ((removed, j), 1))
        .collect();
    note_syncs(&cl, o, &BTreeMap::new(), &full_expect)?;
    let loss = vec![LossWindow {
        site: removed,
        from_us: m.killed_us.saturating_sub(1_000_000),
        to_us: m.killed_us + 100_000,
    }];
    check_states(&cl, o, &records, &loss)?;
    let mut logs: Vec<(String, Vec<String>)> = cl
        .sites
        .iter()
        .map(|s| (s.id().to_string(), s.log_errors()))
        .collect();
    let b_errors = std::fs::read_to_string(&b_log)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("panicked"))
        .take(20)
        .map(str::to_string)
        .collect();
    logs.push((b_id.clone(), b_errors));
    for (id, lines) in logs {
        let panics: Vec<String> = lines
            .into_iter()
            .filter(|l| l.contains("panicked"))
            .collect();
        if !panics.is_empty() {
            o.fail(format!("site {id} panicked: {}", panics.join(" | ")));
        }
    }
    ledger::write(&dir.join("ledger.jsonl"), &records, &labels)?;
    gc_probe(&cl, o)
}

/// Sets the GC probe of `add_remove_site` writes.
const GC_PROBE_KEYS: usize = 200;
/// How far above its level before the probe a site's pending count may end: the workload's
/// own leftover metadata (docs/drills.md §7) is not steady after the load: it moves by a few keys;
/// a dead site still counted would keep all `GC_PROBE_KEYS` pending.
const GC_PROBE_SLACK_KEYS: u64 = GC_PROBE_KEYS as u64 / 10;

/// The removed site no longer holds back GC: after the load, site a adds two members to
/// `GC_PROBE_KEYS` fresh sets and removes one; their removal metadata must be collected on every site within
/// 15 s (pending back to at most `GC_PROBE_SLACK_KEYS` above what it was before the probe),
/// which could not happen while a dead site still counted. What the workload left pending is
/// reported, not judged.
fn gc_probe(cl: &Cluster, o: &mut Outcome) -> anyhow::Result<()> {
    let before: Vec<u64> = (0..cl.n()).map(|i| gc_pending(cl, i)).collect();
    let mut conn = cl.site(0)?.connect(crate::site::ADMIN_TIMEOUT)?;
    let mut cmds = Vec::new();
    for k in 0..GC_PROBE_KEYS {
        let key = format!("gc-probe:{k}");
        for args in [vec!["SADD", &key, "x", "y"], vec!["SREM", &key, "x"]] {
            cmds.push(args.into_iter().map(str::to_string).collect());
        }
    }
    conn.pipeline(&cmds)?;
    // `crdt_gc_pending_keys` is counted at each GC step (`hz`); the probe may also be gone
    // within one. Either way, a dead site still counted would keep it pending.
    let mut raised = 0;
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(15) && !interrupted() {
        let now: Vec<u64> = (0..cl.n()).map(|i| gc_pending(cl, i)).collect();
        raised = raised.max(now.first().copied().unwrap_or(0));
        let waited_a_step = t.elapsed() >= Duration::from_millis(500);
        if waited_a_step
            && now
                .iter()
                .zip(&before)
                .all(|(n, b)| *n <= b + GC_PROBE_SLACK_KEYS)
        {
            o.note(format!(
                "GC probe: SADD x y, SREM x on {GC_PROBE_KEYS} sets at {}: pending {} → at most {raised}, back to {now:?} everywhere {:.1}s later (the workload left {before:?} pending)",
                cl.id(0),
                before.first().copied().unwrap_or(0),
                t.elapsed().as_secs_f64()
            ));
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let left: Vec<u64> = (0..cl.n()).map(|i| gc_pending(cl, i)).collect();
    o.fail(format!(
        "GC probe: removal metadata of {GC_PROBE_KEYS} SREMs not collected within 15 s: pending {left:?}, {before:?} before the probe (at most {GC_PROBE_SLACK_KEYS} more allowed)"
    ));
    // What GC waits on: each site's delivered vector and the vectors its peers acked.
    for i in 0..cl.n() {
        let info = cl.site(i)?.info_crdt()?;
        let mut line = format!(
            "{}: version_vector={}",
            cl.id(i),
            info.get("crdt_version_vector").map_or("?", String::as_str)
        );
        for j in (0..cl.n()).filter(|&j| j != i) {
            let p = crate::site::parse_peer_line(
                info.get(&format!("crdt_peer_{}", cl.id(j)))
                    .map_or("", String::as_str),
            );
            line.push_str(&format!(
                "; acked_vv of {}={}",
                cl.id(j),
                p.get("acked_vv").map_or("?", String::as_str)
            ));
        }
        o.note(line);
    }
    Ok(())
}
