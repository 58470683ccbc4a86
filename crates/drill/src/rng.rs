//! A small seeded generator (SplitMix64). The drill's promise "same seed, same schedule" must not
//! depend on another crate's stream changing between versions, so the generator lives here.

/// A deterministic 64-bit generator; `derive` gives independent streams from one run seed.
#[derive(Clone, Debug)]
pub struct Rng {
    state: u64,
}

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng {
            state: seed ^ 0x9E37_79B9_7F4A_7C15,
        }
    }

    /// A stream for one purpose of a run (`parts` name it: link, client, direction...).
    pub fn derive(seed: u64, parts: &[u64]) -> Rng {
        let mut r = Rng::new(seed);
        for p in parts {
            let mixed = r.next_u64() ^ p.wrapping_mul(0xD6E8_FEB8_6659_FD93);
            r = Rng::new(mixed);
        }
        r
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            return 0;
        }
        // Multiply-shift: unbiased enough for test schedules, and never loops.
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// Uniform in `lo..=hi` (`lo` when `hi < lo`).
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        if hi <= lo {
            return lo;
        }
        lo + self.below(hi - lo + 1)
    }

    /// Uniform in `lo..=hi` for signed bounds.
    pub fn range_i64(&mut self, lo: i64, hi: i64) -> i64 {
        if hi <= lo {
            return lo;
        }
        let span = hi.abs_diff(lo);
        lo.wrapping_add(self.range(0, span) as i64)
    }

    /// True with probability `percent` / 100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    /// An index drawn with the given weights (0 when all are zero).
    pub fn weighted(&mut self, weights: &[u64]) -> usize {
        let total: u64 = weights.iter().sum();
        let mut x = self.below(total);
        for (i, w) in weights.iter().enumerate() {
            if x < *w {
                return i;
            }
            x -= w;
        }
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_stream_and_streams_differ() {
        let a: Vec<u64> = (0..8)
            .map(|_| 0)
            .scan(Rng::new(7), |r, _: u64| Some(r.next_u64()))
            .collect();
        let b: Vec<u64> = (0..8)
            .map(|_| 0)
            .scan(Rng::new(7), |r, _: u64| Some(r.next_u64()))
            .collect();
        assert_eq!(a, b);
        let mut c = Rng::derive(7, &[1]);
        let mut d = Rng::derive(7, &[2]);
        assert_ne!(c.next_u64(), d.next_u64());
    }

    #[test]
    fn bounds_hold() {
        let mut r = Rng::new(1);
        for _ in 0..10_000 {
            assert!(r.below(10) < 10);
            let x = r.range(3, 5);
            assert!((3..=5).contains(&x));
            let y = r.range_i64(-9, 9);
            assert!((-9..=9).contains(&y));
        }
        assert_eq!(r.below(0), 0);
        assert_eq!(r.range(5, 2), 5);
        assert_eq!(r.weighted(&[0, 0, 5]), 2);
    }
}
