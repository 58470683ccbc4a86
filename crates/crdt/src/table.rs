//! `SteppedTable`: a collection's hash table that grows a few buckets per write.
//!
//! `hashbrown::HashTable` grows inside the insert that finds it full: that one insert rehashes
//! every element, O(N) (a 4,000,000-field hash stalled its shard for 842 ms, docs/limits.md).
//! Here, once a table holds `STEPPED_ITEMS_MIN` elements, growth allocates the larger table and
//! moves the old one's elements into it `STEP_BUCKETS` buckets per later insert or removal, as
//! Redis's `dict` does, so no write costs more than a bounded number of moves. A smaller table
//! grows all at once (microseconds): from `LARGE_ITEMS_MIN` elements through the same scan
//! space, below it as hashbrown grows it.
//!
//! Scans by bucket position (SSCAN, HSCAN, ZSCAN) walk a scan space of positions. A large
//! table's only grows: `base` empty positions (the tables that drained before), then the
//! draining table's buckets, then the current table's. A growth's start puts the full table at
//! the front of the live part where it was; its end adds the drained table's buckets to
//! `base`, so the current table keeps its positions too. Elements only ever move toward higher
//! positions (from the draining table into the current one, which lies after it), so a walk
//! by increasing position misses no element present throughout, across any number of growths,
//! and never has to start over for them. The space's generation changes when it is replaced
//! wholesale (`clear` of a growing table, `successor`, `base` reaching `SCAN_BASE_MAX`, a small
//! table's growth, a table becoming large): a cursor of another generation starts over
//! (elements may come twice, none is skipped).
//!
//! A large table's inner tables never grow by themselves and so never rehash in place (which
//! moves elements within a table, under a scan: hashbrown does it when removals left the table
//! full of deleted slots): every insert first makes room (`make_room`).

use hashbrown::HashTable;

/// Buckets of the draining table moved per insert or removal.
pub const STEP_BUCKETS: usize = 32;

/// Below this many elements a growth moves everything at once (a few microseconds).
pub const STEPPED_ITEMS_MIN: usize = 1024;

/// A table that fills up holding this many elements or more gets a scan space of its own
/// (`Large`: base and generation) and from then on grows only through `make_room`, never
/// inside hashbrown: SSCAN and HSCAN walk sets and hashes past 128 elements by bucket
/// (`SSCAN_ALL_MAX`, `INDEX_MIN`).
pub const LARGE_ITEMS_MIN: usize = 128;

/// Where `base` starts over (with a new generation). With the live buckets after it (under
/// 2^35 for any table memory can hold), a scan position stays under 2^37, so a cursor
/// (`position << 16 | generation`) stays under 2^53: clients that read cursors as doubles
/// (JavaScript's) keep them exact.
pub const SCAN_BASE_MAX: usize = 1 << 36;

/// A table's scan space: positions below `base` are empty; a cursor of another `generation`
/// starts over.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ScanSpace {
    pub generation: u32,
    pub base: usize,
}

/// See the module doc. One pointer more than a `HashTable`: a collection's `Inner` keeps
/// its allocator size class.
#[derive(Clone, Debug)]
pub struct SteppedTable<T> {
    cur: HashTable<T>,
    /// Present once the table filled up holding `LARGE_ITEMS_MIN` elements or more.
    large: Option<Box<Large<T>>>,
}

/// A large table's growth and scan space.
#[derive(Clone, Debug)]
struct Large<T> {
    /// The table being emptied into `cur`.
    old: Option<Draining<T>>,
    /// Positions before the live tables' buckets (see the module doc).
    base: usize,
    /// Changes when the scan space is replaced (see the module doc).
    generation: u32,
}

#[derive(Clone, Debug)]
struct Draining<T> {
    table: HashTable<T>,
    /// Its next bucket to move.
    next: usize,
}

/// Scan generations of small tables are the log2 of their bucket count (64 for an empty
/// table: `0usize.trailing_zeros()`), all below this; a large table's start here.
const LARGE_GENERATIONS_FIRST: u32 = 65;
/// Scan generations a cursor tells apart (its 16 low bits).
const SCAN_GENERATIONS: u32 = 1 << 16;

impl<T> Default for SteppedTable<T> {
    fn default() -> SteppedTable<T> {
        SteppedTable::new()
    }
}

impl<T> SteppedTable<T> {
    pub fn new() -> SteppedTable<T> {
        SteppedTable {
            cur: HashTable::new(),
            large: None,
        }
    }

    pub fn with_capacity(n: usize) -> SteppedTable<T> {
        SteppedTable {
            cur: HashTable::with_capacity(n),
            large: None,
        }
    }

    /// An empty table for `n` elements that replaces this one: a new scan space, so a large
    /// one's generation follows this one's (a cursor into this one starts over there).
    pub fn successor(&self, n: usize) -> SteppedTable<T> {
        SteppedTable {
            cur: HashTable::with_capacity(n),
            large: self.large.as_ref().map(|l| {
                Box::new(Large {
                    old: None,
                    base: 0,
                    generation: l.generation.wrapping_add(1),
                })
            }),
        }
    }

    fn old(&self) -> Option<&Draining<T>> {
        self.large.as_ref().and_then(|l| l.old.as_ref())
    }

    pub fn len(&self) -> usize {
        self.cur.len() + self.old().map_or(0, |d| d.table.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Elements the tables hold without allocating (both, during a growth).
    pub fn capacity(&self) -> usize {
        self.cur.capacity() + self.old().map_or(0, |d| d.table.capacity())
    }

    /// Whether a growth is still moving elements.
    pub fn is_growing(&self) -> bool {
        self.old().is_some()
    }

    pub fn find(&self, hash: u64, mut eq: impl FnMut(&T) -> bool) -> Option<&T> {
        if let Some(v) = self.cur.find(hash, &mut eq) {
            return Some(v);
        }
        self.old().and_then(|d| d.table.find(hash, eq))
    }

    pub fn find_mut(&mut self, hash: u64, mut eq: impl FnMut(&T) -> bool) -> Option<&mut T> {
        if let Some(v) = self.cur.find_mut(hash, &mut eq) {
            return Some(v);
        }
        self.large
            .as_mut()
            .and_then(|l| l.old.as_mut())
            .and_then(|d| d.table.find_mut(hash, eq))
    }

    /// Removes and returns the element `eq` picks, then moves a step of a growth.
    pub fn remove(
        &mut self,
        hash: u64,
        mut eq: impl FnMut(&T) -> bool,
        hasher: impl Fn(&T) -> u64,
    ) -> Option<T> {
        let found = match self.cur.find_entry(hash, &mut eq) {
            Ok(e) => Some(e.remove().0),
            Err(_) => self
                .large
                .as_mut()
                .and_then(|l| l.old.as_mut())
                .and_then(|d| d.table.find_entry(hash, eq).ok())
                .map(|e| e.remove().0),
        };
        self.step(&hasher);
        found
    }

    /// Inserts an element that is not in the table (the caller checked), after a step of a
    /// growth; starts a growth when the table is full.
    pub fn insert_unique(&mut self, hash: u64, value: T, hasher: impl Fn(&T) -> u64) {
        self.step(&hasher);
        self.make_room(&hasher);
        self.cur.insert_unique(hash, value, &hasher);
    }

    /// Keeps the elements `f` keeps (it may change them, not their hash).
    pub fn retain(&mut self, mut f: impl FnMut(&mut T) -> bool) {
        self.cur.retain(&mut f);
        if let Some(d) = self.large.as_mut().and_then(|l| l.old.as_mut()) {
            d.table.retain(f);
        }
    }

    /// Empties the table (keeping the current table's buckets).
    pub fn clear(&mut self) {
        self.cur.clear();
        if let Some(l) = &mut self.large {
            if l.old.take().is_some() {
                l.base = 0;
                l.generation = l.generation.wrapping_add(1);
            }
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = &T> {
        self.old()
            .into_iter()
            .flat_map(|d| d.table.iter())
            .chain(self.cur.iter())
    }

    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut T> {
        self.large
            .as_mut()
            .and_then(|l| l.old.as_mut())
            .into_iter()
            .flat_map(|d| d.table.iter_mut())
            .chain(self.cur.iter_mut())
    }

    /// Live buckets: the draining table's, then the current one's (random picks probe them;
    /// a scan adds `scan_space().base` to these indices).
    pub fn num_buckets(&self) -> usize {
        self.old_buckets() + self.cur.num_buckets()
    }

    fn old_buckets(&self) -> usize {
        self.old().map_or(0, |d| d.table.num_buckets())
    }

    /// The element at live bucket `index`, if that bucket is occupied.
    pub fn get_bucket(&self, index: usize) -> Option<&T> {
        let old = self.old_buckets();
        if index < old {
            return self.old().and_then(|d| d.table.get_bucket(index));
        }
        self.cur.get_bucket(index - old)
    }

    /// The scan space: live bucket `i` is at scan position `base + i`. A small table's
    /// generation is the log2 of its buckets, as it grows all at once (a cursor starts over
    /// after it grew); a large one's counts from `LARGE_GENERATIONS_FIRST`.
    pub fn scan_space(&self) -> ScanSpace {
        match &self.large {
            None => ScanSpace {
                generation: self.cur.num_buckets().trailing_zeros(),
                base: 0,
            },
            Some(l) => ScanSpace {
                generation: LARGE_GENERATIONS_FIRST
                    + l.generation % (SCAN_GENERATIONS - LARGE_GENERATIONS_FIRST),
                base: l.base,
            },
        }
    }

    /// Moves up to `STEP_BUCKETS` buckets of a growth; the last one ends it.
    fn step(&mut self, hasher: &impl Fn(&T) -> u64) {
        let Some(l) = &mut self.large else {
            return;
        };
        let Some(d) = &mut l.old else {
            return;
        };
        let end = (d.next + STEP_BUCKETS).min(d.table.num_buckets());
        for i in d.next..end {
            if let Ok(e) = d.table.get_bucket_entry(i) {
                let (v, _) = e.remove();
                // `make_room` sized `cur` for every element of the draining table.
                self.cur.insert_unique(hasher(&v), v, hasher);
            }
        }
        d.next = end;
        if d.table.is_empty() || d.next >= d.table.num_buckets() {
            // The current table keeps its positions: the drained one's become empty ones.
            l.base += d.table.num_buckets();
            l.old = None;
            if l.base >= SCAN_BASE_MAX {
                l.base = 0;
                l.generation = l.generation.wrapping_add(1);
            }
        }
    }

    /// Makes room for one more element in `cur` without letting a large table grow by
    /// itself: when it is full, a growth still moving ends at once, then a table twice the
    /// elements' count takes its place and the full one drains into it, by steps from
    /// `STEPPED_ITEMS_MIN` elements, at once below. A small table (under `LARGE_ITEMS_MIN`
    /// elements) grows as hashbrown grows it.
    fn make_room(&mut self, hasher: &impl Fn(&T) -> u64) {
        let n = self.cur.len();
        if n < self.cur.capacity() || (self.large.is_none() && n < LARGE_ITEMS_MIN) {
            return;
        }
        while self.is_growing() {
            self.step(hasher);
        }
        let next = HashTable::with_capacity((n * 2).max(4));
        let full = std::mem::replace(&mut self.cur, next);
        // The full table keeps its positions, at the front of the live part.
        let l = self.large.get_or_insert_with(|| {
            Box::new(Large {
                old: None,
                base: 0,
                generation: 0,
            })
        });
        l.old = Some(Draining {
            table: full,
            next: 0,
        });
        if n < STEPPED_ITEMS_MIN {
            while self.is_growing() {
                self.step(hasher);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(v: &u64) -> u64 {
        v.wrapping_mul(0x9E37_79B9_7F4A_7C15)
    }

    fn insert(t: &mut SteppedTable<u64>, v: u64) {
        t.insert_unique(h(&v), v, h);
    }

    /// A table filled with 0, 1, ... until the insert that started a stepped growth: the
    /// table and the next value.
    fn growing() -> (SteppedTable<u64>, u64) {
        let mut t = SteppedTable::new();
        let mut v = 0u64;
        while !t.is_growing() {
            insert(&mut t, v);
            v += 1;
        }
        (t, v)
    }

    /// The element at scan position `pos`, if any.
    fn at(t: &SteppedTable<u64>, pos: usize) -> Option<u64> {
        let base = t.scan_space().base;
        pos.checked_sub(base).and_then(|i| t.get_bucket(i)).copied()
    }

    /// No insert moves more than a step's buckets plus its own element; every element stays
    /// findable during a growth; the growth ends by itself.
    #[test]
    fn a_growth_moves_a_step_per_write_and_ends() {
        let (mut t, mut v) = growing();
        assert!(t.len() >= STEPPED_ITEMS_MIN);
        let space = t.scan_space();
        let mut inserts = 0;
        while t.is_growing() {
            let old_before = t.old().map_or(0, |d| d.table.len());
            let cur_before = t.cur.len();
            insert(&mut t, v);
            v += 1;
            inserts += 1;
            let moved = t.cur.len() - cur_before - 1;
            assert!(moved <= STEP_BUCKETS, "{moved} moved by one insert");
            assert!(moved <= old_before);
            for x in (0..v).step_by(97) {
                assert_eq!(t.find(h(&x), |&y| y == x), Some(&x));
            }
        }
        assert!(inserts > 1, "spread over several inserts");
        assert_eq!(t.scan_space().generation, space.generation);
        assert!(
            t.scan_space().base > space.base,
            "the drained table's positions stay"
        );
        assert_eq!(t.len() as u64, v);
        let mut all: Vec<u64> = t.iter().copied().collect();
        all.sort_unstable();
        assert_eq!(all, (0..v).collect::<Vec<_>>());
    }

    /// Removals during a growth find elements in either table, and move it on too.
    #[test]
    fn removals_reach_both_tables_and_step_the_growth() {
        let (mut t, v) = growing();
        let n = v;
        let mut removed = 0;
        for x in 0..n {
            if x % 3 == 0 {
                assert_eq!(t.remove(h(&x), |&y| y == x, h), Some(x));
                removed += 1;
            }
        }
        assert!(!t.is_growing(), "removals alone finish the growth");
        assert_eq!(t.remove(h(&0), |&y| y == 0, h), None);
        assert_eq!(t.len() as u64, n - removed);
        for x in 0..n {
            assert_eq!(t.find(h(&x), |&y| y == x).is_some(), x % 3 != 0);
        }
    }

    /// A walk by increasing scan position, with inserts between its steps (so that the
    /// table grows under it, each growth starting and ending mid-walk), returns every
    /// element present throughout, without starting over once the table is large. (Each insert adds
    /// about 3.4 positions to the space's end in the long run, so a walk ends when it moves
    /// faster than that; Redis's SCAN also ends only while a collection stays bounded.)
    #[test]
    fn a_walk_across_growths_misses_no_element_present_throughout() {
        for (start, per_step, inserts) in [(100, 20, 2), (3400, 40, 5), (7150, 200, 1)] {
            let mut t = SteppedTable::new();
            for v in 0..start as u64 {
                insert(&mut t, v);
            }
            let space = t.scan_space();
            let mut next_new = 1_000_000u64;
            let mut seen = std::collections::HashSet::new();
            let mut pos = space.base;
            let (mut growths, mut restarts, mut generation) = (0, 0, space.generation);
            while pos < t.scan_space().base + t.num_buckets() {
                // A small table grows all at once: its walk starts over.
                if t.scan_space().generation != generation {
                    generation = t.scan_space().generation;
                    pos = 0;
                    restarts += 1;
                }
                pos = pos.max(t.scan_space().base);
                for _ in 0..per_step {
                    if let Some(x) = at(&t, pos) {
                        seen.insert(x);
                    }
                    pos += 1;
                }
                for _ in 0..inserts {
                    let was = t.is_growing();
                    insert(&mut t, next_new);
                    next_new += 1;
                    growths += usize::from(!was && t.is_growing());
                }
            }
            if start >= STEPPED_ITEMS_MIN {
                assert_eq!(restarts, 0, "a large table's walk never starts over");
                assert!(growths >= 1, "({start}) grew {growths}");
            } else {
                assert!(restarts >= 1, "the small table grew under the walk");
            }
            for v in 0..start as u64 {
                assert!(seen.contains(&v), "{v} missed (start {start})");
            }
        }
    }

    /// A walk that starts before a growth and ends within it (an insert every 200 buckets)
    /// returns every element: those still to be walked move only toward the walk's end.
    #[test]
    fn a_walk_within_one_growth_misses_nothing() {
        let (mut t, mut v) = growing();
        let present = v;
        let mut seen = std::collections::HashSet::new();
        let mut pos = t.scan_space().base;
        while t.is_growing() && pos < t.scan_space().base + t.num_buckets() {
            for _ in 0..200 {
                if let Some(x) = at(&t, pos) {
                    seen.insert(x);
                }
                pos += 1;
            }
            insert(&mut t, v);
            v += 1;
        }
        assert!(t.is_growing(), "the walk ended within the growth");
        for x in 0..present {
            assert!(seen.contains(&x), "{x} missed");
        }
    }

    /// The inner tables never grow by themselves: a table full of removed slots gets a new
    /// one through a growth, not a rehash in place under a scan; the scan space survives it.
    #[test]
    fn churn_never_rehashes_in_place() {
        for size in [300u64, 2000] {
            churn_at(size);
        }
    }

    fn churn_at(size: u64) {
        let mut t = SteppedTable::new();
        for v in 0..size {
            insert(&mut t, v);
        }
        while t.is_growing() || t.len() + 1 < t.capacity() {
            let v = 1_000_000 + t.len() as u64;
            insert(&mut t, v);
        }
        let space = t.scan_space();
        let buckets = t.cur.num_buckets();
        for round in 0..50_000u64 {
            let x = 10_000_000 + round;
            insert(&mut t, x);
            assert_eq!(t.remove(h(&x), |&y| y == x, h), Some(x));
            // Until a growth starts, the current table keeps its buckets.
            if !t.is_growing() && t.scan_space().base == space.base {
                assert_eq!(t.cur.num_buckets(), buckets);
            }
        }
        assert!(
            t.scan_space().base > space.base,
            "({size}) the churn filled the table with removed slots, and a growth replaced it"
        );
        assert_eq!(t.scan_space().generation, space.generation);
        for v in 0..size {
            assert!(t.find(h(&v), |&y| y == v).is_some());
        }
    }

    /// `successor` and `clear` of a growing table start a new generation.
    #[test]
    fn a_replaced_space_is_a_new_generation() {
        let (mut t, _) = growing();
        let g = t.scan_space().generation;
        assert_ne!(t.successor(10).scan_space().generation, g);
        t.clear();
        assert_ne!(
            t.scan_space(),
            ScanSpace {
                generation: g,
                base: 0
            }
        );
        assert!(t.is_empty());
    }
}
