//! Redis Cluster's key-to-slot function and the slot-to-shard table.
//!
//! `slot(key)` is CRC16/XMODEM of the key (or of its `{hash tag}` when the braces hold at
//! least one byte) modulo 16384. `SlotMap` says which shard owns each slot.

/// Number of hash slots (Redis Cluster).
pub const SLOTS: usize = 16384;

const CRC16: crc::Crc<u16> = crc::Crc::<u16>::new(&crc::CRC_16_XMODEM);

/// The hash slot of `key`, honouring `{hash tags}` as Redis does.
pub fn slot(key: &[u8]) -> u16 {
    let hashed = hash_tag(key).unwrap_or(key);
    CRC16.checksum(hashed) % SLOTS as u16
}

/// The part of `key` between the first '{' and the next '}', when it is not empty.
fn hash_tag(key: &[u8]) -> Option<&[u8]> {
    let open = key.iter().position(|&b| b == b'{')?;
    let rest = key.get(open + 1..)?;
    let close = rest.iter().position(|&b| b == b'}')?;
    if close == 0 { None } else { rest.get(..close) }
}

/// Which shard owns each slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotMap {
    shards: u16,
    // Invariant: exactly SLOTS entries, each < `shards`.
    owner: Vec<u16>,
}

/// Why a slot map cannot be built or read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SlotMapError {
    #[error("a site has 1 to {max} shards, not {n}", max = SHARDS_MAX)]
    ShardCount { n: usize },
    #[error("slot {slot} is owned twice (shards {first} and {second})")]
    OwnedTwice { slot: u16, first: u16, second: u16 },
    #[error("slot {slot} is owned by no shard")]
    Unowned { slot: u16 },
    #[error("slot {slot} is beyond the last slot (16383)")]
    SlotRange { slot: u64 },
    #[error("shard {shard} does not exist (the site has {shards})")]
    NoShard { shard: u64, shards: u16 },
    #[error("bad slot range '{text}'")]
    BadRange { text: String },
}

/// Most shards a site may have: a replica id keeps the shard index in 8 bits.
pub const SHARDS_MAX: usize = 256;

impl SlotMap {
    /// Slots split into `shards` contiguous ranges of (nearly) equal size, exactly as
    /// `redis-cli --cluster create` lays them out (3 shards: 0-5460, 5461-10922,
    /// 10923-16383).
    pub fn contiguous(shards: u16) -> SlotMap {
        let n = shards.max(1);
        let per = SLOTS as f64 / f64::from(n);
        let mut owner = Vec::with_capacity(SLOTS);
        let mut cursor = 0.0f64;
        for shard in 0..n {
            let first = owner.len();
            let mut last = (cursor + per - 1.0).round() as usize;
            if last >= SLOTS || shard == n - 1 {
                last = SLOTS - 1;
            }
            last = last.max(first);
            while owner.len() <= last {
                owner.push(shard);
            }
            cursor += per;
        }
        // Fewer slots than shards cannot happen (SHARDS_MAX < SLOTS); keep the invariant.
        owner.resize(SLOTS, n - 1);
        SlotMap { shards: n, owner }
    }

    /// Contiguous ranges balanced by key count as well as by slot count: each slot weighs
    /// `keys[slot] / total_keys + 1 / SLOTS` (half of a shard's share comes from keys, half
    /// from slots), and each shard takes the next run of slots up to an equal share of the
    /// total weight. CRC16 ranges of equal size hold very different key counts when the
    /// keyspace is small (a few single-character keys all land in the first ranges); with no
    /// keys this is `contiguous`.
    pub fn balanced(shards: u16, keys: &[u64]) -> SlotMap {
        let n = u64::from(shards.max(1));
        let total: u64 = keys.iter().take(SLOTS).sum();
        // Integer weights: slot weight = keys * SLOTS + total (both halves scaled by
        // SLOTS * total, so a shard's share is an exact fraction).
        let weight = |s: usize| -> u128 {
            let k = u128::from(keys.get(s).copied().unwrap_or(0));
            k * SLOTS as u128 + u128::from(total.max(1))
        };
        let sum: u128 = (0..SLOTS).map(weight).sum();
        let mut owner = Vec::with_capacity(SLOTS);
        let mut acc: u128 = 0;
        for s in 0..SLOTS {
            // The shard whose share this slot's midpoint falls in, but never one that
            // would leave a later shard without a slot.
            let mid = acc * 2 + weight(s);
            let by_weight = (mid * u128::from(n) / (sum * 2)).min(u128::from(n - 1)) as u64;
            let left = (SLOTS - s) as u64;
            let prev = owner.last().map_or(0, |&o: &u16| u64::from(o));
            let mut shard = by_weight.max(prev);
            // Every shard after `shard` needs at least one of the slots left.
            if n - 1 - shard.min(n - 1) >= left {
                shard = n - left;
            }
            // At most one step past the previous owner: no shard is skipped.
            if !owner.is_empty() && shard > prev + 1 {
                shard = prev + 1;
            }
            owner.push(shard as u16);
            acc += weight(s);
        }
        SlotMap {
            shards: shards.max(1),
            owner,
        }
    }

    /// A map from explicit `(first, last, shard)` ranges; every slot must be owned exactly
    /// once, by a shard below `shards`.
    pub fn from_ranges(shards: u16, ranges: &[(u16, u16, u16)]) -> Result<SlotMap, SlotMapError> {
        if shards == 0 || usize::from(shards) > SHARDS_MAX {
            return Err(SlotMapError::ShardCount {
                n: usize::from(shards),
            });
        }
        let mut owner: Vec<Option<u16>> = vec![None; SLOTS];
        for &(first, last, shard) in ranges {
            if shard >= shards {
                return Err(SlotMapError::NoShard {
                    shard: u64::from(shard),
                    shards,
                });
            }
            for slot in first..=last {
                let Some(o) = owner.get_mut(usize::from(slot)) else {
                    return Err(SlotMapError::SlotRange {
                        slot: u64::from(slot),
                    });
                };
                if let Some(first_owner) = *o {
                    return Err(SlotMapError::OwnedTwice {
                        slot,
                        first: first_owner,
                        second: shard,
                    });
                }
                *o = Some(shard);
            }
        }
        let mut out = Vec::with_capacity(SLOTS);
        for (slot, o) in owner.iter().enumerate() {
            match o {
                Some(s) => out.push(*s),
                None => return Err(SlotMapError::Unowned { slot: slot as u16 }),
            }
        }
        Ok(SlotMap { shards, owner: out })
    }

    /// Number of shards the map spreads slots over.
    pub fn shards(&self) -> u16 {
        self.shards
    }

    #[inline]
    pub fn shard_of_slot(&self, slot: u16) -> u16 {
        self.owner.get(usize::from(slot)).copied().unwrap_or(0)
    }

    #[inline]
    pub fn shard_of_key(&self, key: &[u8]) -> u16 {
        self.shard_of_slot(slot(key))
    }

    /// The runs of consecutive slots each shard owns, in slot order: `(first, last, shard)`.
    pub fn ranges(&self) -> Vec<(u16, u16, u16)> {
        let mut out: Vec<(u16, u16, u16)> = Vec::new();
        for (s, &o) in self.owner.iter().enumerate() {
            let s = s as u16;
            match out.last_mut() {
                Some(last) if last.2 == o && last.1 + 1 == s => last.1 = s,
                _ => out.push((s, s, o)),
            }
        }
        out
    }

    /// The ranges `shard` owns: `(first, last)`.
    pub fn ranges_of(&self, shard: u16) -> Vec<(u16, u16)> {
        self.ranges()
            .into_iter()
            .filter(|r| r.2 == shard)
            .map(|r| (r.0, r.1))
            .collect()
    }

    /// Slots `shard` owns.
    pub fn slot_count(&self, shard: u16) -> usize {
        self.owner.iter().filter(|&&o| o == shard).count()
    }

    /// Text form, one `first-last:shard` per range separated by spaces (the data
    /// directory's `slot-map` file).
    pub fn to_text(&self) -> String {
        let mut s = format!("shards {}\n", self.shards);
        for (a, b, o) in self.ranges() {
            s.push_str(&format!("{a}-{b} {o}\n"));
        }
        s
    }

    /// Parses `to_text`'s form; every problem is named.
    pub fn from_text(text: &str) -> Result<SlotMap, SlotMapError> {
        let mut shards: Option<u16> = None;
        let mut ranges = Vec::new();
        for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
            let bad = || SlotMapError::BadRange {
                text: line.to_string(),
            };
            if let Some(n) = line.strip_prefix("shards ") {
                let n: usize = n.trim().parse().map_err(|_| bad())?;
                if n == 0 || n > SHARDS_MAX {
                    return Err(SlotMapError::ShardCount { n });
                }
                shards = Some(n as u16);
                continue;
            }
            let (range, shard) = line.split_once(' ').ok_or_else(bad)?;
            let (a, b) = range.split_once('-').ok_or_else(bad)?;
            let a: u64 = a.parse().map_err(|_| bad())?;
            let b: u64 = b.parse().map_err(|_| bad())?;
            let shard: u64 = shard.trim().parse().map_err(|_| bad())?;
            for v in [a, b] {
                if v >= SLOTS as u64 {
                    return Err(SlotMapError::SlotRange { slot: v });
                }
            }
            if a > b {
                return Err(bad());
            }
            if shard >= SHARDS_MAX as u64 {
                return Err(SlotMapError::NoShard {
                    shard,
                    shards: shards.unwrap_or(0),
                });
            }
            ranges.push((a as u16, b as u16, shard as u16));
        }
        let shards = shards.ok_or_else(|| SlotMapError::BadRange {
            text: "missing 'shards N' line".to_string(),
        })?;
        SlotMap::from_ranges(shards, &ranges)
    }
}

/// A set of slots (a bitmap): what a shard of another site owns, for filtering what is sent
/// to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotSet {
    bits: Vec<u64>,
}

impl SlotSet {
    /// The slots of `ranges` (`(first, last)`, inclusive; slots past the last are ignored).
    pub fn from_ranges(ranges: &[(u16, u16)]) -> SlotSet {
        let mut bits = vec![0u64; SLOTS / 64];
        for &(a, b) in ranges {
            for s in a..=b.min(SLOTS as u16 - 1) {
                if let Some(w) = bits.get_mut(usize::from(s) / 64) {
                    *w |= 1 << (s % 64);
                }
            }
        }
        SlotSet { bits }
    }

    pub fn all() -> SlotSet {
        SlotSet {
            bits: vec![u64::MAX; SLOTS / 64],
        }
    }

    #[inline]
    pub fn contains(&self, slot: u16) -> bool {
        self.bits
            .get(usize::from(slot) / 64)
            .is_some_and(|w| w & (1 << (slot % 64)) != 0)
    }

    #[inline]
    pub fn contains_key(&self, key: &[u8]) -> bool {
        self.contains(slot(key))
    }

    /// Whether every slot is in the set.
    pub fn is_full(&self) -> bool {
        self.bits.iter().all(|w| *w == u64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc16_and_slots_match_redis() {
        assert_eq!(CRC16.checksum(b"123456789"), 0x31C3);
        assert_eq!(slot(b"foo"), 12182);
        assert_eq!(slot(b"{user1000}.following"), slot(b"user1000"));
        assert_eq!(slot(b"foo{}{bar}"), slot(b"foo{}{bar}"));
        assert_ne!(
            slot(b"foo{}{bar}"),
            slot(b"bar"),
            "empty first tag: whole key hashed"
        );
        assert_eq!(slot(b"foo{{bar}}zap"), slot(b"{bar"));
    }

    #[test]
    fn contiguous_map_covers_all_shards() {
        let m = SlotMap::contiguous(4);
        assert_eq!(m.shard_of_slot(0), 0);
        assert_eq!(m.shard_of_slot(16383), 3);
        assert_eq!(SlotMap::contiguous(1).shard_of_key(b"x"), 0);
        assert_eq!(
            m.ranges(),
            vec![
                (0, 4095, 0),
                (4096, 8191, 1),
                (8192, 12287, 2),
                (12288, 16383, 3)
            ]
        );
        assert_eq!(m.ranges_of(2), vec![(8192, 12287)]);
        assert_eq!(m.slot_count(3), 4096);
        assert_eq!(
            SlotMap::contiguous(3).ranges(),
            vec![(0, 5460, 0), (5461, 10922, 1), (10923, 16383, 2)]
        );
    }

    #[test]
    fn balanced_without_keys_is_contiguous_and_every_shard_gets_a_slot() {
        for n in [1u16, 2, 3, 7, 16, 255] {
            let b = SlotMap::balanced(n, &[]);
            assert_eq!(b.shards(), n);
            for s in 0..n {
                assert!(b.slot_count(s) > 0, "{n} shards: shard {s} has no slot");
            }
            let sizes: Vec<usize> = (0..n).map(|s| b.slot_count(s)).collect();
            let (min, max) = (sizes.iter().min().unwrap(), sizes.iter().max().unwrap());
            assert!(max - min <= 1, "{n}: {sizes:?}");
        }
    }

    #[test]
    fn balanced_by_keys_evens_out_a_small_keyspace() {
        // Single-character keys: with equal ranges over 3 shards, shard 2 gets few of them.
        let mut keys = vec![0u64; SLOTS];
        for c in b'a'..=b'z' {
            keys[usize::from(slot(&[c]))] += 1000;
        }
        let equal = SlotMap::contiguous(3);
        let balanced = SlotMap::balanced(3, &keys);
        let per = |m: &SlotMap| -> Vec<u64> {
            let mut v = vec![0u64; 3];
            for (s, k) in keys.iter().enumerate() {
                v[usize::from(m.shard_of_slot(s as u16))] += k;
            }
            v
        };
        let spread = |v: &[u64]| v.iter().max().unwrap() - v.iter().min().unwrap();
        assert!(
            spread(&per(&balanced)) < spread(&per(&equal)),
            "{:?} vs {:?}",
            per(&balanced),
            per(&equal)
        );
        for s in 0..3 {
            assert!(balanced.slot_count(s) > 0);
        }
        // Ranges stay contiguous and in shard order.
        let r = balanced.ranges();
        assert_eq!(r.len(), 3);
        assert_eq!(r.iter().map(|x| x.2).collect::<Vec<_>>(), vec![0, 1, 2]);
    }

    #[test]
    fn slot_sets() {
        let s = SlotSet::from_ranges(&[(0, 63), (100, 100), (16383, 16383)]);
        assert!(s.contains(0) && s.contains(63) && s.contains(100) && s.contains(16383));
        assert!(!s.contains(64) && !s.contains(99) && !s.contains(16382));
        assert!(!s.is_full());
        assert!(SlotSet::from_ranges(&[(0, 16383)]).is_full());
        assert!(SlotSet::all().contains_key(b"anything"));
    }

    #[test]
    fn from_ranges_names_every_problem() {
        assert_eq!(
            SlotMap::from_ranges(2, &[(0, 8191, 0), (8191, 16383, 1)]),
            Err(SlotMapError::OwnedTwice {
                slot: 8191,
                first: 0,
                second: 1
            })
        );
        assert_eq!(
            SlotMap::from_ranges(2, &[(0, 8190, 0), (8192, 16383, 1)]),
            Err(SlotMapError::Unowned { slot: 8191 })
        );
        assert_eq!(
            SlotMap::from_ranges(2, &[(0, 16383, 2)]),
            Err(SlotMapError::NoShard {
                shard: 2,
                shards: 2
            })
        );
        assert_eq!(
            SlotMap::from_ranges(2, &[(0, 8191, 0), (8192, 16383, 1)]),
            Ok(SlotMap::contiguous(2))
        );
        let m = SlotMap::balanced(5, &[]);
        assert_eq!(SlotMap::from_text(&m.to_text()), Ok(m));
        for bad in [
            "",
            "shards 2\n0-16383 0\n0-1 1",
            "shards 0",
            "shards 1\n0-16384 0",
            "shards 1\n0-x 0",
        ] {
            assert!(SlotMap::from_text(bad).is_err(), "{bad:?}");
        }
    }
}
