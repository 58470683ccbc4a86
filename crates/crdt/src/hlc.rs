//! Hybrid logical clock.
//!
//! An `Hlc` packs wall-clock milliseconds in the upper 48 bits and a logical counter in the
//! lower 16. The clock never goes backwards and never issues the same value twice, so
//! `(Hlc, ReplicaId)` names a write uniquely. The caller supplies physical time.

/// A hybrid logical clock value: `physical_ms << 16 | logical`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Hlc(pub u64);

impl Hlc {
    pub const ZERO: Hlc = Hlc(0);
    const LOGICAL_BITS: u32 = 16;

    pub fn from_parts(physical_ms: u64, logical: u16) -> Hlc {
        Hlc((physical_ms << Self::LOGICAL_BITS) | u64::from(logical))
    }

    pub fn physical_ms(self) -> u64 {
        self.0 >> Self::LOGICAL_BITS
    }

    pub fn logical(self) -> u16 {
        (self.0 & 0xffff) as u16
    }
}

/// Refused remote timestamps: further ahead of local physical time than `skew_ms_max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClockSkew {
    pub remote_ms: u64,
    pub local_ms: u64,
    pub skew_ms_max: u64,
}

/// Issues strictly increasing `Hlc` values for one replica.
#[derive(Debug, Clone, Default)]
pub struct HlcClock {
    // Invariant: every value issued or observed so far is <= last.
    last: Hlc,
}

impl HlcClock {
    pub fn new() -> HlcClock {
        HlcClock { last: Hlc::ZERO }
    }

    /// Restores a clock that must never issue a value at or below `last` (after a restart).
    pub fn resume_after(last: Hlc) -> HlcClock {
        HlcClock { last }
    }

    pub fn last(&self) -> Hlc {
        self.last
    }

    /// The next timestamp for a local event at physical time `now_ms`: strictly greater than
    /// every value issued or observed before.
    pub fn tick(&mut self, now_ms: u64) -> Hlc {
        let wall = Hlc::from_parts(now_ms, 0);
        self.last = if wall > self.last {
            wall
        } else {
            Hlc(self.last.0 + 1)
        };
        self.last
    }

    /// Takes a remote timestamp into account so that later local ticks exceed it. Returns
    /// `ClockSkew` (and changes nothing) when it is more than `skew_ms_max` ahead of `now_ms`.
    pub fn observe(&mut self, remote: Hlc, now_ms: u64, skew_ms_max: u64) -> Result<(), ClockSkew> {
        if remote.physical_ms() > now_ms.saturating_add(skew_ms_max) {
            return Err(ClockSkew {
                remote_ms: remote.physical_ms(),
                local_ms: now_ms,
                skew_ms_max,
            });
        }
        if remote > self.last {
            self.last = remote;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_strictly_increase_even_when_wall_time_stalls_or_goes_back() {
        let mut c = HlcClock::new();
        let a = c.tick(1000);
        let b = c.tick(1000);
        let d = c.tick(900);
        assert!(a < b && b < d);
        assert_eq!(a.physical_ms(), 1000);
        assert_eq!(b.logical(), 1);
    }

    #[test]
    fn observe_lifts_the_clock_and_refuses_far_future() {
        let mut c = HlcClock::new();
        c.observe(Hlc::from_parts(2000, 5), 1990, 100).unwrap();
        assert!(c.tick(1990) > Hlc::from_parts(2000, 5));
        assert!(c.observe(Hlc::from_parts(5000, 0), 1990, 100).is_err());
    }
}
