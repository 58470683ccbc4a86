//! `KeyTable`: a database's hash table of entries, which grows by rehashing incrementally.
//!
//! hashbrown grows a table by moving every entry in one call: a stall that doubles with each
//! growth (163 ms at 917,504 keys on the benchmark VM, docs/benchmarks.md), during which the
//! shard serves no client and applies no remote op. Redis moves a few buckets per operation
//! instead. `KeyTable` does the same on top of hashbrown: when the table it inserts into is
//! full, that table becomes `old` and a new one twice the live size takes its place; each
//! insert of a new key then moves `REHASH_STEP_ENTRIES` entries from `old`, and the shard's
//! periodic cycle moves more while the shard is idle (`rehash_for`). Lookups look in both
//! tables while a rehash is in progress.
//!
//! hashbrown never moves an entry except when it grows or rehashes a table itself, and
//! `KeyTable` never lets it (every insert checks that room is left first), so bucket
//! positions are stable within one `generation`: SCAN, active expiry and GC cursors are
//! bucket indices in the combined space (`old`'s buckets, then `main`'s), and SCAN maps a
//! cursor across the start and end of a rehash (`scan_resume`).
//!
//! Each table also keeps a bit per bucket and per `Mark`: whether the entry there may hold
//! removal metadata, or a TTL. Active expiry and garbage collection walk these bits and read
//! only the entries they point to: reading every entry of a large table to find the few
//! with a TTL costs a cache miss per entry (3.6–3.8% of a core for one key with a TTL among
//! 995k, before), where a bit costs nothing.

use hashbrown::HashTable;

use super::Entry;

/// Entries moved from the old table per insert of a new key. At least one per insert keeps
/// the new table (sized for twice the live entries) from filling before the old one is
/// empty; two finish a rehash within half of that room.
pub const REHASH_STEP_ENTRIES: usize = 2;
/// Buckets of the old table a step examines at most (empty ones included), so that a step
/// over a sparse old table stays short. Should a rehash not finish before the new table is
/// full (an old table mostly of deletion tombstones), the rest moves at once.
pub const REHASH_STEP_BUCKETS_MAX: usize = 32;
/// Capacity of the first table a database allocates.
const CAPACITY_MIN: usize = 3;
/// A table whose live entries fill less than this percentage of its buckets is rehashed into
/// a smaller one by the periodic cycle (`shrink_if_sparse`; Redis's `HASHTABLE_MIN_FILL`).
pub const SHRINK_FILL_PERCENT_MIN: usize = 10;
/// Tables of this many buckets or fewer are never shrunk: too small to matter.
pub const SHRINK_BUCKETS_MIN: usize = 64;

/// What a bucket holds: the entry is boxed so that a bucket is one pointer (see `Entry`).
type Slot = Box<Entry>;

/// What a bucket's mark says its entry may hold. Marks are conservative: a set bit may be
/// stale (the entry lost what it says, or the fallback set every bit), and whoever reads it
/// then clears it; a clear bit is always true. An entry's removal clears its bucket's marks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mark {
    /// Removal metadata (`Entry::meta`): garbage collection visits these.
    Metadata,
    /// A TTL (`KeyState::expire_at_ms`): active expiry visits these.
    Ttl,
}

/// One bit per bucket of one hashbrown table, per `Mark`.
#[derive(Debug, Default)]
struct MarkBits {
    metadata: Vec<u64>,
    ttl: Vec<u64>,
}

impl MarkBits {
    /// No bucket marked, for a table of `buckets` buckets.
    fn clear(buckets: usize) -> MarkBits {
        let n = buckets.div_ceil(64);
        MarkBits {
            metadata: vec![0; n],
            ttl: vec![0; n],
        }
    }

    /// Every bucket marked (entries moved to unknown buckets: the next walk clears what is
    /// not so).
    fn all(buckets: usize) -> MarkBits {
        let n = buckets.div_ceil(64);
        MarkBits {
            metadata: vec![u64::MAX; n],
            ttl: vec![u64::MAX; n],
        }
    }

    fn words(&self, mark: Mark) -> &[u64] {
        match mark {
            Mark::Metadata => &self.metadata,
            Mark::Ttl => &self.ttl,
        }
    }

    fn words_mut(&mut self, mark: Mark) -> &mut [u64] {
        match mark {
            Mark::Metadata => &mut self.metadata,
            Mark::Ttl => &mut self.ttl,
        }
    }

    fn set(&mut self, mark: Mark, i: usize) {
        if let Some(w) = self.words_mut(mark).get_mut(i / 64) {
            *w |= 1 << (i % 64);
        }
    }

    fn unset(&mut self, mark: Mark, i: usize) {
        if let Some(w) = self.words_mut(mark).get_mut(i / 64) {
            *w &= !(1 << (i % 64));
        }
    }

    /// Clears every mark of bucket `i` (its entry left).
    fn unset_all(&mut self, i: usize) {
        self.unset(Mark::Metadata, i);
        self.unset(Mark::Ttl, i);
    }

    fn get(&self, mark: Mark, i: usize) -> bool {
        self.words(mark)
            .get(i / 64)
            .is_some_and(|w| w & (1 << (i % 64)) != 0)
    }

    /// The first marked bucket in `from..to`.
    fn next(&self, mark: Mark, from: usize, to: usize) -> Option<usize> {
        let words = self.words(mark);
        let mut i = from;
        while i < to {
            let w = words.get(i / 64)? & (u64::MAX << (i % 64));
            if w != 0 {
                let found = (i / 64) * 64 + w.trailing_zeros() as usize;
                return (found < to).then_some(found);
            }
            i = (i / 64 + 1) * 64;
        }
        None
    }
}

/// An incremental rehash in progress: the table being emptied into `KeyTable::main`.
#[derive(Debug)]
struct Rehash {
    table: HashTable<Slot>,
    marks: MarkBits,
    /// Buckets before this index are empty (moved); the next step starts here.
    next_bucket: usize,
}

/// The entries of one database (see the module documentation).
#[derive(Debug)]
pub struct KeyTable {
    /// Where new keys go.
    main: HashTable<Slot>,
    /// `main`'s bucket marks.
    // Invariant (in both tables): the `Mark::Metadata` bit of the bucket of every entry with
    // `meta` set is set, and so is the `Mark::Ttl` bit of every entry with a TTL. Kept by
    // `mark` (called where an entry gains either), `insert_new`, the moves of a rehash
    // (which carry the bits) and `finish_now` (which sets every bit).
    main_marks: MarkBits,
    /// The previous table while its entries move to `main`.
    // Invariant: a key is in at most one of `main` and `old`; `main` always has room for one
    // more entry when an insert starts (checked by `make_room`), so hashbrown never grows it.
    old: Option<Rehash>,
    /// Counts layout changes: +1 when a rehash starts and +1 when it ends (odd exactly while
    /// one is in progress), +2 when entries moved some other way (the fallback of
    /// `finish_now`, or a table allocated for an empty database). A bucket index means the
    /// same entry as long as the generation is unchanged.
    generation: u64,
    /// Bucket count of the old table of the last rehash that ended (for `scan_resume`).
    last_old_buckets: usize,
}

impl Default for KeyTable {
    fn default() -> Self {
        Self::new()
    }
}

impl KeyTable {
    pub fn new() -> KeyTable {
        KeyTable {
            main: HashTable::new(),
            main_marks: MarkBits::default(),
            old: None,
            generation: 0,
            last_old_buckets: 0,
        }
    }

    /// Entries in both tables.
    pub fn len(&self) -> usize {
        self.main.len() + self.old.as_ref().map_or(0, |r| r.table.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn is_rehashing(&self) -> bool {
        self.old.is_some()
    }

    pub fn generation(&self) -> u64 {
        self.generation
    }

    pub fn get(&self, hash: u64, key: &[u8]) -> Option<&Entry> {
        let eq = |e: &Slot| &*e.key == key;
        match self.main.find(hash, eq) {
            Some(e) => Some(&**e),
            None => self.old.as_ref()?.table.find(hash, eq).map(|e| &**e),
        }
    }

    pub fn get_mut(&mut self, hash: u64, key: &[u8]) -> Option<&mut Entry> {
        let eq = |e: &Slot| &*e.key == key;
        if let Some(e) = self.main.find_mut(hash, eq) {
            return Some(&mut **e);
        }
        self.old
            .as_mut()?
            .table
            .find_mut(hash, eq)
            .map(|e| &mut **e)
    }

    /// The entry for `key`, inserted from `make` when absent (a key still in the old table is
    /// used where it is). `hash_of` hashes a stored key as `hash` was computed.
    pub fn get_or_insert(
        &mut self,
        hash: u64,
        key: &[u8],
        make: impl FnOnce() -> Box<Entry>,
        hash_of: &impl Fn(&[u8]) -> u64,
    ) -> &mut Entry {
        let eq = |e: &Slot| &*e.key == key;
        let in_old = self
            .old
            .as_ref()
            .and_then(|r| r.table.find_bucket_index(hash, eq));
        if in_old.is_none() && self.main.find(hash, eq).is_none() {
            self.rehash_step(REHASH_STEP_ENTRIES, REHASH_STEP_BUCKETS_MAX, hash_of);
            self.make_room(hash_of);
        }
        if let (Some(index), Some(r)) = (in_old, self.old.as_mut()) {
            if let Some(e) = r.table.get_bucket_mut(index) {
                return e;
            }
        }
        // Not `HashTable::entry`: it reserves room even for a key that is present, and would
        // grow a full table all at once.
        let rehash = |e: &Slot| hash_of(&e.key);
        match self.main.find_entry(hash, eq) {
            Ok(present) => present.into_mut(),
            Err(absent) => absent
                .into_table()
                .insert_unique(hash, make(), rehash)
                .into_mut(),
        }
    }

    /// Inserts `entry` unless its key is present. Returns whether it was inserted.
    pub fn insert_new(
        &mut self,
        hash: u64,
        entry: Box<Entry>,
        hash_of: &impl Fn(&[u8]) -> u64,
    ) -> bool {
        if self.get(hash, &entry.key).is_some() {
            return false;
        }
        self.rehash_step(REHASH_STEP_ENTRIES, REHASH_STEP_BUCKETS_MAX, hash_of);
        self.make_room(hash_of);
        let (meta, ttl) = (entry.meta, entry.state.expire_at_ms().is_some());
        let rehash = |e: &Slot| hash_of(&e.key);
        let index = self.main.insert_unique(hash, entry, rehash).bucket_index();
        if meta {
            self.main_marks.set(Mark::Metadata, index);
        }
        if ttl {
            self.main_marks.set(Mark::Ttl, index);
        }
        true
    }

    /// The combined bucket index of `key`, valid until the next insert (which may move
    /// entries) or removal.
    pub fn find_index(&self, hash: u64, key: &[u8]) -> Option<usize> {
        let eq = |e: &Slot| &*e.key == key;
        if let Some(i) = self.main.find_bucket_index(hash, eq) {
            return Some(i + self.old_buckets());
        }
        self.old.as_ref()?.table.find_bucket_index(hash, eq)
    }

    /// The marks holding combined bucket `index`, and its index there (`None` past the end).
    fn marks_at(&self, index: usize) -> Option<(&MarkBits, usize)> {
        match (&self.old, index.checked_sub(self.old_buckets())) {
            (_, Some(i)) => Some((&self.main_marks, i)),
            (Some(r), None) => Some((&r.marks, index)),
            (None, None) => None,
        }
    }

    fn marks_at_mut(&mut self, index: usize) -> Option<(&mut MarkBits, usize)> {
        let n_old = self.old_buckets();
        match (&mut self.old, index.checked_sub(n_old)) {
            (_, Some(i)) => Some((&mut self.main_marks, i)),
            (Some(r), None) => Some((&mut r.marks, index)),
            (None, None) => None,
        }
    }

    /// Marks combined bucket `index`: its entry now holds what `mark` says.
    pub fn mark(&mut self, index: usize, mark: Mark) {
        if let Some((marks, i)) = self.marks_at_mut(index) {
            marks.set(mark, i);
        }
    }

    /// Whether combined bucket `index` is marked.
    pub fn is_marked(&self, index: usize, mark: Mark) -> bool {
        self.marks_at(index)
            .is_some_and(|(marks, i)| marks.get(mark, i))
    }

    /// Clears the mark of combined bucket `index` (its entry does not hold what it says).
    pub fn unmark(&mut self, index: usize, mark: Mark) {
        if let Some((marks, i)) = self.marks_at_mut(index) {
            marks.unset(mark, i);
        }
    }

    /// The first combined bucket in `from..to` marked `mark`.
    pub fn next_marked(&self, mark: Mark, from: usize, to: usize) -> Option<usize> {
        let n_old = self.old_buckets();
        if let Some(r) = &self.old {
            if from < n_old {
                if let Some(i) = r.marks.next(mark, from, to.min(n_old)) {
                    return Some(i);
                }
            }
        }
        let from_main = from.saturating_sub(n_old);
        let to_main = to.checked_sub(n_old)?;
        self.main_marks
            .next(mark, from_main, to_main)
            .map(|i| i + n_old)
    }

    /// Every entry, the old table's first.
    pub fn iter(&self) -> impl Iterator<Item = &Entry> {
        self.old
            .iter()
            .flat_map(|r| r.table.iter())
            .chain(self.main.iter())
            .map(|e| &**e)
    }

    /// Buckets in the combined index space: the old table's, then the main table's.
    pub fn num_buckets(&self) -> usize {
        self.old_buckets() + self.main.num_buckets()
    }

    fn old_buckets(&self) -> usize {
        self.old.as_ref().map_or(0, |r| r.table.num_buckets())
    }

    /// The entry in combined bucket `index`, if that bucket is full.
    pub fn get_bucket(&self, index: usize) -> Option<&Entry> {
        let n_old = self.old_buckets();
        match (&self.old, index.checked_sub(n_old)) {
            (_, Some(i)) => self.main.get_bucket(i).map(|e| &**e),
            (Some(r), None) => r.table.get_bucket(index).map(|e| &**e),
            (None, None) => None,
        }
    }

    pub fn get_bucket_mut(&mut self, index: usize) -> Option<&mut Entry> {
        let n_old = self.old_buckets();
        match (&mut self.old, index.checked_sub(n_old)) {
            (_, Some(i)) => self.main.get_bucket_mut(i).map(|e| &mut **e),
            (Some(r), None) => r.table.get_bucket_mut(index).map(|e| &mut **e),
            (None, None) => None,
        }
    }

    /// Removes the entry in combined bucket `index`. Returns whether there was one.
    pub fn remove_bucket(&mut self, index: usize) -> bool {
        let n_old = self.old_buckets();
        let (occupied, marks, i) = match (&mut self.old, index.checked_sub(n_old)) {
            (_, Some(i)) => (self.main.get_bucket_entry(i).ok(), &mut self.main_marks, i),
            (Some(r), None) => (r.table.get_bucket_entry(index).ok(), &mut r.marks, index),
            (None, None) => return false,
        };
        let removed = occupied.map(|o| o.remove()).is_some();
        if removed {
            marks.unset_all(i);
        }
        removed
    }

    /// The first entry whose bucket lacks a mark it must have (`None`: the invariant holds).
    #[cfg(test)]
    pub fn unmarked_entry(&self) -> Option<(usize, Mark)> {
        (0..self.num_buckets()).find_map(|b| {
            let e = self.get_bucket(b)?;
            if e.meta && !self.is_marked(b, Mark::Metadata) {
                return Some((b, Mark::Metadata));
            }
            if e.state.expire_at_ms().is_some() && !self.is_marked(b, Mark::Ttl) {
                return Some((b, Mark::Ttl));
            }
            None
        })
    }

    /// Where a SCAN cursor issued at `generation` (compared modulo `generation_mask + 1`)
    /// for combined bucket `index` resumes. `Ok`: the bucket where the same entries are now.
    /// `Err`: the layout changed so that the index no longer says which entries were visited
    /// (the scan must restart to miss none); the value is a bucket about as far through the
    /// table as the cursor was, for a scan that may not restart again.
    /// - Same generation: the same bucket.
    /// - A rehash started since: the cursor's table is now the old table, first in the
    ///   combined space, and what moves out of its unvisited buckets goes to the main table,
    ///   which comes after: the same index.
    /// - A rehash ended since and the cursor was in its main table: that table alone now.
    /// - A rehash ended since and the cursor was in its old table: everything moved to the
    ///   main table, where the visited part cannot be told apart.
    pub fn scan_resume(
        &self,
        generation: u64,
        index: usize,
        generation_mask: u64,
    ) -> Result<usize, usize> {
        let n = self.num_buckets();
        let since = self.generation.wrapping_sub(generation) & generation_mask;
        let resumed = match since {
            0 => Ok(index),
            1 if self.is_rehashing() => Ok(index),
            1 => match index.checked_sub(self.last_old_buckets) {
                Some(i) => Ok(i),
                // The main table has twice the old one's buckets, or about as many.
                None => Err(index.saturating_mul(n) / self.last_old_buckets.max(1)),
            },
            _ => Err(index),
        };
        match resumed {
            Ok(i) if i < n => Ok(i),
            Ok(i) | Err(i) => Err(i.min(n)),
        }
    }

    /// Frees the buckets of a table left with no entry (FLUSHDB, FLUSHALL), as Redis's
    /// `emptyDb` frees its dict: the next key allocates the smallest table again, so that a
    /// database emptied after holding many keys scans in one SCAN call, not one call per
    /// `COUNT * 10` buckets of the old size, and gives the memory back. A table that still
    /// holds an entry (removal metadata, kept while peers may not have seen the removal) is
    /// left as it is. Returns whether the buckets were freed.
    pub fn release_if_empty(&mut self) -> bool {
        if !self.is_empty() || (self.main.capacity() == 0 && self.old.is_none()) {
            return false;
        }
        self.main = HashTable::new();
        self.main_marks = MarkBits::default();
        self.old = None;
        self.last_old_buckets = 0;
        // A new layout (+2, and +1 more to keep the count even if a rehash was in progress):
        // cursors of the old one restart, over a table with nothing left to miss.
        self.generation =
            self.generation
                .wrapping_add(if self.generation % 2 == 1 { 3 } else { 2 });
        true
    }

    /// Moves up to `entries_max` entries of a rehash in progress (the periodic cycle calls
    /// this in batches until its time budget is spent). Returns whether the rehash is still
    /// in progress.
    pub fn rehash_for(&mut self, entries_max: usize, hash_of: &impl Fn(&[u8]) -> u64) -> bool {
        self.rehash_step(entries_max, entries_max.saturating_mul(16), hash_of);
        self.is_rehashing()
    }

    /// Starts a rehash into a table sized for twice the live entries when they fill less
    /// than `SHRINK_FILL_PERCENT_MIN` percent of the buckets (a database that once held many
    /// more keys), as Redis's `tryResizeHashTables` does; the periodic cycle and inserts move
    /// the entries as for a growth, so SCAN and the marks work the same. A table of
    /// `SHRINK_BUCKETS_MIN` buckets or fewer, or one already rehashing, is left alone.
    /// Returns whether a rehash started.
    pub fn shrink_if_sparse(&mut self) -> bool {
        let buckets = self.main.num_buckets();
        if self.old.is_some()
            || buckets <= SHRINK_BUCKETS_MIN
            || self.main.len().saturating_mul(100)
                >= buckets.saturating_mul(SHRINK_FILL_PERCENT_MIN)
        {
            return false;
        }
        self.start_rehash(self.main.len());
        true
    }

    /// Makes a table sized for twice `live` entries the main one, the current one becoming
    /// the old table that rehash steps empty (none when it holds nothing).
    fn start_rehash(&mut self, live: usize) {
        let next = HashTable::with_capacity(live.saturating_mul(2).max(CAPACITY_MIN));
        let next_marks = MarkBits::clear(next.num_buckets());
        let old = std::mem::replace(&mut self.main, next);
        let old_marks = std::mem::replace(&mut self.main_marks, next_marks);
        if old.is_empty() {
            // Nothing to move: no rehash, only a new layout.
            self.generation = self.generation.wrapping_add(2);
            return;
        }
        self.old = Some(Rehash {
            table: old,
            marks: old_marks,
            next_bucket: 0,
        });
        self.generation = self.generation.wrapping_add(1);
    }

    /// Ensures the main table has room for one more entry without hashbrown growing it:
    /// when it is full, starts a rehash into a table sized for twice the live entries (after
    /// moving what is left of a previous rehash at once, the fallback that should not occur).
    fn make_room(&mut self, hash_of: &impl Fn(&[u8]) -> u64) {
        if self.main.len() < self.main.capacity() {
            return;
        }
        if self.old.is_some() {
            self.finish_now(hash_of);
            if self.main.len() < self.main.capacity() {
                return;
            }
        }
        // A full table of 2^k buckets holds 7/8 * 2^k entries: twice that is exactly the
        // capacity of 2^(k+1) buckets. A table full mostly of deletion tombstones gets fewer
        // buckets than before (hashbrown would rehash it in place, all at once).
        self.start_rehash(self.main.len());
    }

    /// Moves up to `entries_max` entries from the old table, examining at most `buckets_max`
    /// of its buckets, and ends the rehash when the old table is empty.
    fn rehash_step(
        &mut self,
        entries_max: usize,
        buckets_max: usize,
        hash_of: &impl Fn(&[u8]) -> u64,
    ) {
        let Some(r) = self.old.as_mut() else {
            return;
        };
        let n = r.table.num_buckets();
        // Moves stop where the main table is full: hashbrown must never grow it here (that
        // would move its entries under SCAN cursors); `make_room` then finishes the rehash.
        let room = self.main.capacity().saturating_sub(self.main.len());
        let entries_max = entries_max.min(room);
        let (mut moved, mut examined) = (0, 0);
        while r.next_bucket < n && moved < entries_max && examined < buckets_max {
            if let Ok(occupied) = r.table.get_bucket_entry(r.next_bucket) {
                let (e, _) = occupied.remove();
                // The marks go with the entry: none stays behind, stale, on the old table.
                let marks = [Mark::Metadata, Mark::Ttl].map(|m| {
                    let marked = r.marks.get(m, r.next_bucket);
                    r.marks.unset(m, r.next_bucket);
                    marked
                });
                let hash = hash_of(&e.key);
                let index = self
                    .main
                    .insert_unique(hash, e, |e: &Slot| hash_of(&e.key))
                    .bucket_index();
                for (mark, marked) in [Mark::Metadata, Mark::Ttl].into_iter().zip(marks) {
                    if marked {
                        self.main_marks.set(mark, index);
                    }
                }
                moved += 1;
            }
            r.next_bucket += 1;
            examined += 1;
        }
        if r.table.is_empty() || r.next_bucket >= n {
            self.last_old_buckets = n;
            self.old = None;
            self.generation = self.generation.wrapping_add(1);
        }
    }

    /// Moves everything left in the old table at once, letting hashbrown grow the main table
    /// as needed: a new layout for the main table too, so SCAN cursors restart.
    fn finish_now(&mut self, hash_of: &impl Fn(&[u8]) -> u64) {
        let Some(r) = self.old.take() else {
            return;
        };
        let rehash = |e: &Slot| hash_of(&e.key);
        self.main.reserve(r.table.len().saturating_add(1), rehash);
        for e in r.table {
            let hash = hash_of(&e.key);
            self.main.insert_unique(hash, e, rehash);
        }
        // Entries may have moved anywhere in the main table.
        self.main_marks = MarkBits::all(self.main.num_buckets());
        self.last_old_buckets = 0;
        // +2 for the main table's new layout, +1 for the end of the rehash.
        self.generation = self.generation.wrapping_add(3);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use meridian_crdt::KeyState;

    struct Fixture {
        table: KeyTable,
        hasher: ahash::RandomState,
    }

    impl Fixture {
        fn new() -> Fixture {
            Fixture {
                table: KeyTable::new(),
                hasher: ahash::RandomState::new(),
            }
        }

        fn hash(&self, key: &[u8]) -> u64 {
            self.hasher.hash_one(key)
        }

        fn insert(&mut self, key: &[u8]) {
            let hash = self.hash(key);
            let hasher = &self.hasher;
            let e = self.table.get_or_insert(
                hash,
                key,
                || Entry::boxed(key, KeyState::new(), 0),
                &|k| hasher.hash_one(k),
            );
            e.lru_s += 1;
        }

        fn lru(&self, key: &[u8]) -> Option<u32> {
            self.table.get(self.hash(key), key).map(|e| e.lru_s)
        }

        /// One SCAN call's walk: the keys of `visits` buckets from `at` into `seen`. Returns
        /// where the next call resumes, or None once the walk reached the end.
        fn scan_step(
            &self,
            mut at: usize,
            visits: usize,
            seen: &mut std::collections::HashSet<Vec<u8>>,
        ) -> Option<usize> {
            let n = self.table.num_buckets();
            let end = at.saturating_add(visits).min(n);
            while at < end {
                if let Some(e) = self.table.get_bucket(at) {
                    seen.insert(e.key.to_vec());
                }
                at += 1;
            }
            (at < n).then_some(at)
        }

        fn remove(&mut self, key: &[u8]) -> bool {
            let hash = self.hash(key);
            match self.table.find_index(hash, key) {
                Some(i) => self.table.remove_bucket(i),
                None => false,
            }
        }

        /// Inserts `key(0)`, `key(1)`... until a rehash starts. Returns how many.
        fn fill_until_rehashing(&mut self) -> u64 {
            let mut i = 0;
            while !self.table.is_rehashing() {
                self.insert(&key(i));
                i += 1;
            }
            i
        }

        fn old_len(&self) -> usize {
            self.table.old.as_ref().map_or(0, |r| r.table.len())
        }
    }

    fn key(i: u64) -> Vec<u8> {
        format!("key:{i}").into_bytes()
    }

    #[test]
    fn mark_bits_find_the_next_set_bit_within_bounds() {
        let mut m = MarkBits::clear(200);
        assert_eq!(m.next(Mark::Ttl, 0, 200), None);
        for i in [0, 63, 64, 130, 199] {
            m.set(Mark::Ttl, i);
        }
        m.set(Mark::Metadata, 5);
        assert_eq!(m.next(Mark::Ttl, 0, 200), Some(0));
        assert_eq!(m.next(Mark::Ttl, 1, 200), Some(63));
        assert_eq!(m.next(Mark::Ttl, 64, 200), Some(64));
        assert_eq!(m.next(Mark::Ttl, 65, 130), None, "the end is excluded");
        assert_eq!(m.next(Mark::Ttl, 65, 131), Some(130));
        assert_eq!(
            m.next(Mark::Ttl, 131, 1000),
            Some(199),
            "past the bits: no panic"
        );
        assert_eq!(m.next(Mark::Ttl, 200, 1000), None);
        assert_eq!(m.next(Mark::Metadata, 0, 200), Some(5));
        m.unset(Mark::Ttl, 64);
        assert!(!m.get(Mark::Ttl, 64));
        assert_eq!(m.next(Mark::Ttl, 64, 200), Some(130));
        // Out of range: ignored, never a panic.
        m.set(Mark::Ttl, 10_000);
        assert!(!m.get(Mark::Ttl, 10_000));
        let all = MarkBits::all(70);
        assert_eq!(all.next(Mark::Metadata, 3, 70), Some(3));
    }

    /// Marks follow entries through a rehash: the moves carry them, the fallback sets them
    /// all, `insert_new` sets what the entry holds.
    #[test]
    fn marks_follow_entries_through_rehashes() {
        let mut f = Fixture::new();
        let hasher = f.hasher.clone();
        let hash_of = |k: &[u8]| hasher.hash_one(k);
        for i in 0..5_000u64 {
            let k = key(i);
            let mut e = Entry::boxed(&k, KeyState::new(), 0);
            e.meta = i % 3 == 0;
            assert!(f.table.insert_new(f.hash(&k), e, &hash_of));
            if i % 7 == 0 {
                // An entry gaining a mark after its insert.
                let h = f.hash(&k);
                let index = f.table.find_index(h, &k);
                assert!(index.is_some(), "key {i} just inserted");
                if let Some(index) = index {
                    if let Some(e) = f.table.get_bucket_mut(index) {
                        e.meta = true;
                    }
                    f.table.mark(index, Mark::Metadata);
                }
            }
            assert_eq!(f.table.unmarked_entry(), None, "after insert {i}");
        }
        let marked = (0..f.table.num_buckets())
            .filter(|&b| f.table.is_marked(b, Mark::Metadata))
            .count();
        let meta = f.table.iter().filter(|e| e.meta).count();
        assert_eq!(marked, meta, "no stale mark without removals");
        assert!(!f.table.insert_new(
            f.hash(&key(3)),
            Entry::boxed(&key(3), KeyState::new(), 0),
            &hash_of
        ));
    }

    /// Growth moves at most `REHASH_STEP_ENTRIES` per insert, every key stays findable
    /// through it, and each rehash ends before the new table is full (the generation moves
    /// by 1 at a start and at an end, never by the fallback's 3).
    #[test]
    fn growth_is_incremental_and_never_falls_back() {
        let mut f = Fixture::new();
        let mut rehashes = 0;
        for i in 0..20_000u64 {
            let (gen_before, old_before) = (f.table.generation(), f.old_len());
            let rehashing_before = f.table.is_rehashing();
            f.insert(&key(i));
            let delta = f.table.generation().wrapping_sub(gen_before);
            assert!(delta <= 2, "insert {i}: generation moved by {delta}");
            if delta == 2 {
                assert_eq!(
                    i, 0,
                    "only the first allocation changes layout without a rehash"
                );
            }
            if rehashing_before && f.table.is_rehashing() {
                assert!(
                    old_before - f.old_len() <= REHASH_STEP_ENTRIES,
                    "insert {i}"
                );
            }
            if !rehashing_before && f.table.is_rehashing() {
                rehashes += 1;
                assert!(f.old_len() > 0);
            }
            assert_eq!(f.table.len(), i as usize + 1);
            // A key inserted before and the newest are found (in whichever table).
            assert_eq!(f.lru(&key(i / 2)), Some(1), "insert {i}");
            assert_eq!(f.lru(&key(i)), Some(1), "insert {i}");
        }
        assert!(rehashes >= 10, "{rehashes} rehashes for 20,000 keys");
        for i in 0..20_000u64 {
            assert_eq!(f.lru(&key(i)), Some(1));
        }
        assert_eq!(f.table.iter().count(), 20_000);
    }

    /// A key still in the old table is updated where it is, never inserted twice, and
    /// removal finds a key in either table.
    #[test]
    fn keys_in_the_old_table_are_updated_and_removed_in_place() {
        let mut f = Fixture::new();
        let i = f.fill_until_rehashing();
        let n = i;
        // The last bucket of the old table moves last: find a key there.
        let in_old: Vec<u64> = (0..n)
            .filter(|&k| {
                let kk = key(k);
                f.table
                    .main
                    .find(f.hash(&kk), |e| *e.key == kk[..])
                    .is_none()
            })
            .collect();
        assert!(!in_old.is_empty());
        let k = in_old[in_old.len() - 1];
        f.insert(&key(k));
        assert_eq!(f.lru(&key(k)), Some(2));
        assert_eq!(f.table.len(), n as usize);
        let victim = in_old[in_old.len() - 2];
        assert!(f.remove(&key(victim)));
        assert!(!f.remove(&key(victim)));
        assert_eq!(f.lru(&key(victim)), None);
        assert!(f.remove(&key(n - 1)), "a key in the main table");
        assert_eq!(f.table.len(), n as usize - 2);
        let hasher = f.hasher.clone();
        while f.table.rehash_for(7, &|k: &[u8]| hasher.hash_one(k)) {}
        assert_eq!(f.table.len(), n as usize - 2);
        assert_eq!(f.lru(&key(k)), Some(2));
        assert_eq!(f.table.generation() % 2, 0);
    }

    /// Updating a key of a full table moves nothing: hashbrown's `entry` would have grown
    /// the table all at once (and moved entries under SCAN cursors and marks).
    #[test]
    fn an_update_in_a_full_table_moves_nothing() {
        let mut f = Fixture::new();
        let mut i = 0;
        // Up to a full main table with no rehash in progress.
        loop {
            f.insert(&key(i));
            i += 1;
            if !f.table.is_rehashing() && f.table.main.len() == f.table.main.capacity() && i > 100 {
                break;
            }
        }
        let (generation, buckets) = (f.table.generation(), f.table.num_buckets());
        for k in 0..i {
            f.insert(&key(k));
        }
        assert_eq!(f.table.generation(), generation);
        assert_eq!(f.table.num_buckets(), buckets);
        assert_eq!(f.lru(&key(0)), Some(2));
        // The next new key starts a rehash instead.
        f.insert(&key(i));
        assert!(f.table.is_rehashing());
        assert_eq!(f.table.generation(), generation + 1);
    }

    /// Bucket indices address the old table first, then the main one, and reach every entry.
    #[test]
    fn combined_buckets_reach_every_entry_once() {
        let mut f = Fixture::new();
        let mut i = f.fill_until_rehashing();
        for _ in 0..5 {
            f.insert(&key(i));
            i += 1;
        }
        assert!(f.table.is_rehashing());
        let mut seen: Vec<Vec<u8>> = (0..f.table.num_buckets())
            .filter_map(|b| f.table.get_bucket(b).map(|e| e.key.to_vec()))
            .collect();
        seen.sort();
        let mut all: Vec<Vec<u8>> = (0..i).map(key).collect();
        all.sort();
        assert_eq!(seen, all);
        assert!(f.table.get_bucket(f.table.num_buckets()).is_none());
        // Removing through a bucket index works in both parts.
        let first_old = (0..f.table.old_buckets())
            .find(|&b| f.table.get_bucket(b).is_some())
            .expect("an entry in the old table");
        let first_main = (f.table.old_buckets()..f.table.num_buckets())
            .find(|&b| f.table.get_bucket(b).is_some())
            .expect("an entry in the main table");
        assert!(f.table.remove_bucket(first_old));
        assert!(!f.table.remove_bucket(first_old));
        assert!(f.table.get_bucket_mut(first_main).is_some());
        assert!(f.table.remove_bucket(first_main));
        assert_eq!(f.table.len(), i as usize - 2);
    }

    /// The fallback: should the main table fill while the old one still holds entries, the
    /// rest moves at once and the layout change restarts SCAN cursors.
    #[test]
    fn a_full_main_table_during_a_rehash_finishes_it_at_once() {
        let mut f = Fixture::new();
        let mut i = f.fill_until_rehashing();
        let started = f.table.generation();
        // Fill the main table behind the steps' back.
        let hasher = f.hasher.clone();
        while f.table.main.len() < f.table.main.capacity() {
            let k = key(i);
            let e = Entry::boxed(&k, KeyState::new(), 1);
            f.table
                .main
                .insert_unique(f.hash(&k), e, |e| hasher.hash_one(&e.key));
            i += 1;
        }
        assert!(f.old_len() > 0);
        f.insert(&key(i));
        i += 1;
        assert_eq!(f.table.len(), i as usize);
        for k in 0..i {
            assert!(f.lru(&key(k)).is_some(), "key {k}");
        }
        // +3: the main table's new layout and the end of the rehash; the room reserved for
        // the old table's entries leaves room for the insert.
        assert_eq!(f.table.generation(), started + 3);
        assert!(!f.table.is_rehashing());
        let cursor_generation = started & 0xff;
        assert!(f.table.scan_resume(cursor_generation, 3, 0xff).is_err());
    }

    /// A table emptied after holding many keys (FLUSHDB) gives its buckets back only when no
    /// entry is left, mid-rehash too; the next keys start again from the smallest table, and
    /// a cursor of the old layout restarts.
    #[test]
    fn an_emptied_table_frees_its_buckets() {
        let mut f = Fixture::new();
        assert!(
            !f.table.release_if_empty(),
            "a new table has nothing to free"
        );
        let mut n = 0;
        while n < 200 || !f.table.is_rehashing() {
            f.insert(&key(n));
            n += 1;
        }
        let big = f.table.num_buckets();
        assert!(big >= 64, "{big} buckets");
        let (generation, cursor) = (f.table.generation(), big / 2);
        for i in 0..n - 1 {
            assert!(f.remove(&key(i)), "key {i}");
        }
        assert!(!f.table.release_if_empty(), "one entry is left");
        assert_eq!(f.table.num_buckets(), big);
        assert!(f.remove(&key(n - 1)));
        assert!(f.table.is_rehashing(), "emptied mid-rehash");
        assert!(f.table.release_if_empty());
        assert!(!f.table.is_rehashing());
        assert_eq!(f.table.generation() % 2, 0, "no rehash in progress");
        assert!(f.table.scan_resume(generation, cursor, u64::MAX).is_err());
        f.insert(b"a");
        f.insert(b"b");
        assert!(
            f.table.num_buckets() <= 4,
            "{} buckets",
            f.table.num_buckets()
        );
        assert!(f.lru(b"a").is_some() && f.lru(b"b").is_some());
        assert!(!f.table.release_if_empty());
    }

    /// A table shrinks once its live entries fill less than `SHRINK_FILL_PERCENT_MIN` percent
    /// of its buckets, not at that fill; never at `SHRINK_BUCKETS_MIN` buckets or fewer, nor
    /// while rehashing. The entries left are all found during and after the shrink.
    #[test]
    fn a_sparse_table_shrinks_at_the_fill_limit_and_not_before() {
        let mut f = Fixture::new();
        let mut n = 0u64;
        while f.table.num_buckets() < 1024 || f.table.is_rehashing() {
            f.insert(&key(n));
            n += 1;
        }
        let buckets = f.table.num_buckets();
        // The fewest entries that fill SHRINK_FILL_PERCENT_MIN percent of the buckets.
        let at = (buckets * SHRINK_FILL_PERCENT_MIN).div_ceil(100);
        let mut i = n;
        while f.table.len() > at {
            i -= 1;
            assert!(f.remove(&key(i)));
        }
        assert!(!f.table.shrink_if_sparse(), "at the limit: kept");
        i -= 1;
        assert!(f.remove(&key(i)));
        let generation = f.table.generation();
        assert!(f.table.shrink_if_sparse(), "one under: shrunk");
        assert!(f.table.is_rehashing());
        assert_eq!(f.table.generation(), generation + 1);
        assert!(!f.table.shrink_if_sparse(), "not while rehashing");
        for k in 0..i {
            assert!(f.lru(&key(k)).is_some(), "key {k} mid-shrink");
        }
        let hasher = f.hasher.clone();
        while f.table.rehash_for(64, &|k: &[u8]| hasher.hash_one(k)) {}
        assert!(
            f.table.num_buckets() <= buckets / 4,
            "{} buckets",
            f.table.num_buckets()
        );
        for k in 0..i {
            assert!(f.lru(&key(k)).is_some(), "key {k} after the shrink");
        }
        // Small tables stay.
        let mut g = Fixture::new();
        for k in 0..40 {
            g.insert(&key(k));
        }
        for k in 1..40 {
            g.remove(&key(k));
        }
        let g_hasher = g.hasher.clone();
        while g.table.rehash_for(64, &|k: &[u8]| g_hasher.hash_one(k)) {}
        assert!(g.table.num_buckets() <= SHRINK_BUCKETS_MIN);
        assert!(g.lru(&key(0)).is_some());
        assert!(!g.table.shrink_if_sparse());
    }

    /// A scan over a table that shrinks under it (most keys removed between two calls)
    /// returns every key present throughout.
    #[test]
    fn a_scan_across_a_shrink_misses_no_key_present_throughout() {
        let mask = 0x1_ffff;
        for seed in 1..=10u64 {
            let mut f = Fixture::new();
            let kept: Vec<u64> = (0..50).map(|k| k * 1000 + seed).collect();
            for &k in &kept {
                f.insert(&key(k));
            }
            for k in 0..3000 {
                f.insert(&key(10_000_000 + k));
            }
            let hasher = f.hasher.clone();
            while f.table.rehash_for(64, &|k: &[u8]| hasher.hash_one(k)) {}
            let mut seen = std::collections::HashSet::new();
            let (mut generation, mut idx) = (f.table.generation(), 0usize);
            let mut step = 0u64;
            let mut shrunk = false;
            loop {
                let at = f.table.scan_resume(generation, idx, mask).unwrap_or(0);
                let visits = 50 + (seed * 7 + step) as usize % 100;
                let Some(at) = f.scan_step(at, visits, &mut seen) else {
                    break;
                };
                (generation, idx) = (f.table.generation() & mask, at);
                step += 1;
                if step == 3 {
                    for k in 0..3000 {
                        f.remove(&key(10_000_000 + k));
                    }
                    shrunk = f.table.shrink_if_sparse();
                }
                if step > 3 {
                    f.table.rehash_for(16, &|k: &[u8]| hasher.hash_one(k));
                }
                assert!(step < 100_000, "seed {seed}: the scan does not end");
            }
            assert!(shrunk, "seed {seed}: no shrink during the scan");
            for &k in &kept {
                assert!(seen.contains(&key(k)), "seed {seed}: key {k} missed");
            }
        }
    }

    /// A scan by `scan_resume` over a table growing and shrinking under it returns every key
    /// present throughout (the SCAN guarantee across rehashes).
    #[test]
    fn a_scan_across_rehashes_misses_no_key_present_throughout() {
        let mask = 0x1_ffff;
        for seed in 1..=20u64 {
            let mut f = Fixture::new();
            let mut rng = seed;
            let mut next = move || {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                rng
            };
            // Start a few keys short of a full table, so that the scan sees a rehash start
            // and end.
            let mut base = 0;
            while base < 100 + next() % 2000
                || f.table.is_rehashing()
                || f.table.main.capacity() - f.table.main.len() > 10
            {
                f.insert(&key(base));
                base += 1;
            }
            let mut seen = std::collections::HashSet::new();
            let (mut generation, mut idx) = (f.table.generation(), 0usize);
            let mut added = 1_000_000u64;
            let mut calls = 0;
            let mut rehash_seen = false;
            let mut restarts = 0;
            loop {
                let at = match f.table.scan_resume(generation, idx, mask) {
                    Ok(i) => i,
                    Err(_) => {
                        restarts += 1;
                        0
                    }
                };
                let visits = 1 + (next() % 40) as usize;
                let Some(at) = f.scan_step(at, visits, &mut seen) else {
                    break;
                };
                (generation, idx) = (f.table.generation() & mask, at);
                // Writes between calls: new keys (growth), removals of added keys, and
                // sometimes an idle cycle's worth of rehash.
                for _ in 0..next() % 6 {
                    f.insert(&key(added));
                    added += 1;
                }
                for _ in 0..next() % 5 {
                    let victim = 1_000_000 + next() % (added - 1_000_000 + 1);
                    f.remove(&key(victim));
                }
                if next() % 4 == 0 {
                    let hasher = f.hasher.clone();
                    f.table.rehash_for(64, &|k: &[u8]| hasher.hash_one(k));
                }
                rehash_seen |= f.table.is_rehashing();
                calls += 1;
                assert!(calls < 100_000, "seed {seed}: the scan does not end");
            }
            assert!(rehash_seen, "seed {seed}: no rehash during the scan");
            assert!(restarts < 3, "seed {seed}: {restarts} restarts");
            for i in 0..base {
                assert!(seen.contains(&key(i)), "seed {seed}: key {i} missed");
            }
        }
    }
}
