//! Seeded fault schedules: the same seed, sites and duration give the same list of faults. A
//! schedule is bounded in count (`EVENTS_MAX`) and time (every fault ends before `duration`).
//! Faults do not overlap: each is applied, held, and healed before the next one starts; the last
//! one lasts until the end of the load.

use std::fmt;

use crate::rng::Rng;

/// Most faults in one schedule.
pub const EVENTS_MAX: usize = 64;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Every link of the site cut at the proxies.
    Isolate { site: usize },
    /// The two sites other than `middle` cannot reach each other; both reach `middle`.
    Bridge { middle: usize },
    /// Bytes from `from` to `to` dropped (the reverse direction flows).
    OneWay { from: usize, to: usize },
    /// SIGSTOP of a site's process, SIGCONT at the end.
    Pause { site: usize },
    /// RST of the pair's connections every `period_ms`.
    Flap { a: usize, b: usize, period_ms: u64 },
    /// Bytes between the pair held, then released.
    Stall { a: usize, b: usize },
    /// Extra one-way latency and jitter on the pair's links.
    Slow {
        a: usize,
        b: usize,
        one_way_ms: u64,
        jitter_ms: u64,
    },
    /// A bandwidth cap on the pair's links, in bytes per second.
    Throttle {
        a: usize,
        b: usize,
        bytes_per_s: u64,
    },
    /// Silent packet-level partition (nftables drop in both namespaces).
    NftPartition { a: usize, b: usize },
    /// Random packet loss from a site (nftables).
    NftLoss { site: usize, pct: u8 },
    /// SIGKILL, then restart with the same directory at the end (needs persistence).
    KillRestart { site: usize },
    /// Links cut one way with an RST, `(x, y)`: `y`'s ops no longer reach `x`, nor `x`'s acks
    /// `y` (the link `x` dials to `y`); the other direction flows.
    Cut { links: Vec<(usize, usize)> },
    /// An RST on every open sync connection, once (the dialers redial).
    ResetAll,
}

/// What the schedule may use.
#[derive(Clone, Copy, Debug)]
pub struct Allowed {
    pub nft: bool,
    pub kill: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    pub at_ms: u64,
    pub dur_ms: u64,
    pub fault: Fault,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Schedule {
    pub seed: u64,
    pub events: Vec<Event>,
}

fn other(rng: &mut Rng, n: usize, not: usize) -> usize {
    let k = rng.below(n.saturating_sub(1) as u64) as usize;
    if k >= not { k + 1 } else { k }
}

/// Random partitions, link flaps and pauses over `duration_ms` for `n` sites (R4, R9).
/// Faults last 1.5–5 s with gaps of 0.5–2 s, scaled down for short runs.
pub fn partitions(seed: u64, n: usize, duration_ms: u64, allowed: Allowed) -> Schedule {
    let mut rng = Rng::derive(seed, &[0x5c4e_d01e]);
    let mut events = Vec::new();
    let mut t = rng.range(500, 1500);
    let scale = if duration_ms < 30_000 { 2 } else { 1 };
    while events.len() < EVENTS_MAX && n >= 2 {
        let dur = rng.range(3000, 10_000) / scale;
        if t + dur > duration_ms {
            break;
        }
        let s = rng.below(n as u64) as usize;
        let o = other(&mut rng, n, s);
        let mut kinds: Vec<u64> = vec![3, 2, 2, 1, 2, 1, 1, 0, 0, 0, 1];
        if n < 3 {
            kinds[1] = 0;
        }
        if allowed.nft {
            kinds[7] = 2;
            kinds[8] = 1;
        }
        if allowed.kill {
            kinds[9] = 1;
        }
        let fault = match rng.weighted(&kinds) {
            0 => Fault::Isolate { site: s },
            1 => Fault::Bridge { middle: s },
            2 => Fault::OneWay { from: s, to: o },
            3 => Fault::Pause { site: s },
            4 => Fault::Flap {
                a: s,
                b: o,
                period_ms: rng.range(500, 1500),
            },
            5 => Fault::Stall { a: s, b: o },
            6 => Fault::Slow {
                a: s,
                b: o,
                one_way_ms: rng.range(50, 200),
                jitter_ms: rng.range(5, 50),
            },
            7 => Fault::NftPartition { a: s, b: o },
            8 => Fault::NftLoss {
                site: s,
                pct: rng.range(1, 3) as u8,
            },
            9 => Fault::KillRestart { site: s },
            _ => Fault::Throttle {
                a: s,
                b: o,
                bytes_per_s: rng.range(16, 256) * 1024,
            },
        };
        events.push(Event {
            at_ms: t,
            dur_ms: dur,
            fault,
        });
        t += dur + rng.range(500, 2000) / scale;
    }
    // The last fault holds until the end of the load: the drill heals it after stopping the
    // load, so the convergence time after heal includes catching up on it.
    if let Some(last) = events.last_mut() {
        last.dur_ms = duration_ms.saturating_sub(last.at_ms);
    }
    Schedule { seed, events }
}

/// Short outages around a short quarantine (issue 16): one-way link cuts (one to three links
/// at once, often back to back, so that a link heals as another is cut), isolations, RST flaps
/// and resets of every link, each 0.3–4 s, so that sites quarantine each other
/// (`--sync-quarantine-ms` of 1–2 s) and rejoin while the others are in every state; and, when
/// allowed, one site killed and restarted with its log at a seeded moment.
pub fn quarantine(seed: u64, n: usize, duration_ms: u64, allowed: Allowed) -> Schedule {
    let mut rng = Rng::derive(seed, &[0x9ca2_a471]);
    let mut events = Vec::new();
    let mut t = rng.range(300, 800);
    let kill_at = allowed
        .kill
        .then(|| rng.range(duration_ms / 4, duration_ms / 2));
    let mut killed = false;
    while events.len() < EVENTS_MAX && n >= 2 {
        let fault = if !killed && kill_at.is_some_and(|k| t >= k) {
            killed = true;
            Fault::KillRestart {
                site: rng.below(n as u64) as usize,
            }
        } else {
            let s = rng.below(n as u64) as usize;
            let o = other(&mut rng, n, s);
            match rng.weighted(&[6, 2, 2, 1]) {
                0 => {
                    let mut links = vec![(s, o)];
                    for _ in 0..rng.below(3) {
                        let x = rng.below(n as u64) as usize;
                        let y = other(&mut rng, n, x);
                        if !links.contains(&(x, y)) {
                            links.push((x, y));
                        }
                    }
                    Fault::Cut { links }
                }
                1 => Fault::Isolate { site: s },
                2 => Fault::Flap {
                    a: s,
                    b: o,
                    period_ms: rng.range(200, 800),
                },
                _ => Fault::ResetAll,
            }
        };
        let dur = match fault {
            Fault::ResetAll => rng.range(300, 1000),
            Fault::KillRestart { .. } => rng.range(1000, 3000),
            _ => rng.range(800, 4000),
        };
        if t + dur > duration_ms {
            break;
        }
        events.push(Event {
            at_ms: t,
            dur_ms: dur,
            fault,
        });
        // Often back to back: a cut heals as the next one begins.
        t += dur
            + if rng.chance(40) {
                0
            } else {
                rng.range(200, 1000)
            };
    }
    if let Some(last) = events.last_mut() {
        last.dur_ms = duration_ms.saturating_sub(last.at_ms);
    }
    Schedule { seed, events }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let id = |i: &usize| ((b'a' + *i as u8) as char).to_string();
        match self {
            Fault::Isolate { site } => write!(f, "isolate {}", id(site)),
            Fault::Bridge { middle } => write!(f, "bridge through {} (the others cut)", id(middle)),
            Fault::OneWay { from, to } => write!(f, "one-way drop {}→{}", id(from), id(to)),
            Fault::Pause { site } => write!(f, "SIGSTOP {}", id(site)),
            Fault::Flap { a, b, period_ms } => {
                write!(f, "RST flap {}↔{} every {period_ms} ms", id(a), id(b))
            }
            Fault::Stall { a, b } => write!(f, "stall {}↔{}", id(a), id(b)),
            Fault::Slow {
                a,
                b,
                one_way_ms,
                jitter_ms,
            } => {
                write!(
                    f,
                    "slow {}↔{} {one_way_ms}±{jitter_ms} ms one way",
                    id(a),
                    id(b)
                )
            }
            Fault::Throttle { a, b, bytes_per_s } => write!(
                f,
                "throttle {}↔{} to {} KiB/s",
                id(a),
                id(b),
                bytes_per_s / 1024
            ),
            Fault::NftPartition { a, b } => write!(f, "nft silent partition {}↔{}", id(a), id(b)),
            Fault::NftLoss { site, pct } => write!(f, "nft {pct}% loss from {}", id(site)),
            Fault::KillRestart { site } => write!(f, "SIGKILL {} then restart", id(site)),
            Fault::Cut { links } => {
                let l: Vec<String> = links
                    .iter()
                    .map(|(x, y)| format!("{}←{}", id(x), id(y)))
                    .collect();
                write!(f, "cut {}", l.join(", "))
            }
            Fault::ResetAll => write!(f, "RST every link"),
        }
    }
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "schedule of seed {} ({} faults):",
            self.seed,
            self.events.len()
        )?;
        for e in &self.events {
            writeln!(
                f,
                "  t=+{:.1}s for {:.1}s: {}",
                e.at_ms as f64 / 1000.0,
                e.dur_ms as f64 / 1000.0,
                e.fault
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: Allowed = Allowed {
        nft: true,
        kill: true,
    };

    #[test]
    fn same_seed_same_schedule_other_seed_other_schedule() {
        let a = partitions(7, 3, 60_000, ALL);
        let b = partitions(7, 3, 60_000, ALL);
        assert_eq!(a, b);
        assert_eq!(a.to_string(), b.to_string());
        assert_ne!(a, partitions(8, 3, 60_000, ALL));
    }

    #[test]
    fn schedules_are_bounded_and_do_not_overlap() {
        for seed in 0..200 {
            for (duration, which) in [5_000, 20_000, 120_000, 10_000_000]
                .into_iter()
                .flat_map(|d| [(d, 0), (d, 1)])
            {
                let s = if which == 0 {
                    partitions(seed, 3, duration, ALL)
                } else {
                    quarantine(seed, 3, duration, ALL)
                };
                assert!(s.events.len() <= EVENTS_MAX);
                let mut end = 0;
                for e in &s.events {
                    assert!(e.at_ms >= end, "seed {seed}: overlap");
                    end = e.at_ms + e.dur_ms;
                    assert!(end <= duration, "seed {seed}: past the end");
                    let sites = match &e.fault {
                        Fault::Isolate { site }
                        | Fault::Pause { site }
                        | Fault::NftLoss { site, .. }
                        | Fault::KillRestart { site } => vec![*site],
                        Fault::Bridge { middle } => vec![*middle],
                        Fault::OneWay { from, to } => vec![*from, *to],
                        Fault::Flap { a, b, .. }
                        | Fault::Stall { a, b }
                        | Fault::Slow { a, b, .. }
                        | Fault::Throttle { a, b, .. }
                        | Fault::NftPartition { a, b } => {
                            assert_ne!(a, b);
                            vec![*a, *b]
                        }
                        Fault::Cut { links } => {
                            assert!(!links.is_empty() && links.iter().all(|(x, y)| x != y));
                            links.iter().flat_map(|(x, y)| [*x, *y]).collect()
                        }
                        Fault::ResetAll => vec![],
                    };
                    assert!(sites.iter().all(|&x| x < 3));
                }
            }
        }
    }

    /// The quarantine drill's schedule kills one site once when allowed (never otherwise),
    /// and keeps most outages past a 1–2 s quarantine short of the convergence bound.
    #[test]
    fn the_quarantine_schedule_kills_one_site_once() {
        for seed in 0..200 {
            let kills = |s: &Schedule| {
                s.events
                    .iter()
                    .filter(|e| matches!(e.fault, Fault::KillRestart { .. }))
                    .count()
            };
            assert_eq!(kills(&quarantine(seed, 3, 20_000, ALL)), 1, "seed {seed}");
            let no_kill = Allowed {
                nft: false,
                kill: false,
            };
            assert_eq!(kills(&quarantine(seed, 3, 20_000, no_kill)), 0);
            assert_eq!(
                quarantine(seed, 3, 20_000, ALL),
                quarantine(seed, 3, 20_000, ALL)
            );
        }
    }

    #[test]
    fn disallowed_faults_never_appear() {
        for seed in 0..100 {
            let s = partitions(
                seed,
                3,
                120_000,
                Allowed {
                    nft: false,
                    kill: false,
                },
            );
            assert!(s.events.iter().all(|e| !matches!(
                e.fault,
                Fault::NftPartition { .. } | Fault::NftLoss { .. } | Fault::KillRestart { .. }
            )));
        }
    }
}
