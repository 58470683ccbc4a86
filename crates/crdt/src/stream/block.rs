//! Packed blocks of stream entries, like Redis's listpacks.
//!
//! A block holds the entries of an ID range in ID order, each encoded relative to the block's
//! base (the ID and stamp of the entry that opened it) in one byte arena:
//!
//! ```text
//! [header][replica u32, when the index is 15][ms delta][seq][hlc delta][fields len][fields]
//! ```
//!
//! - `header`: bits 0-3 index into the block's replica table (15: the id follows), bit 4 the
//!   entry has the block's field names (only values are stored, as Redis's SAMEFIELDS), bit 5
//!   the sequence is `(n << 32) | replica` (an ID generated at a site with peers: `n` is
//!   stored), bit 6 the hlc is relative to the block's base hlc rather than to the ID's ms.
//! - deltas are zigzag varints of wrapping differences, so any ID and stamp fit.
//! - `fields`: the values (SAMEFIELDS), or a pair count and the field-value pairs, each a
//!   length-prefixed byte string; its length comes first so a scan skips an entry in O(1).
//!
//! Blocks also keep what Redis's node-size rules need (`stream-node-max-entries`,
//! `stream-node-max-bytes`): live and deleted counts and the size the listpack would have in
//! Redis (`lp_entries`, tombstones included), so that XADD opens a new block exactly where
//! Redis opens a new node, and `~` trimming removes the blocks Redis would remove.

use smallvec::SmallVec;

use super::StreamId;
use crate::codec;
use crate::dot::{ReplicaId, Stamp};
use crate::hlc::Hlc;

const REPLICA_INLINE_MAX: usize = 15;
const F_SAME: u8 = 1 << 4;
const F_SEQ_ORIGIN: u8 = 1 << 5;
const F_HLC_BASE: u8 = 1 << 6;

/// Bytes of entries a block holds before an insert in its middle splits it, whatever the
/// node-size parameters say (they may allow 1 GiB nodes): bounds the bytes an insert or a
/// deletion moves.
pub const BLOCK_BYTES_PHYSICAL_MAX: usize = 64 * 1024;

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

fn read_varint(data: &[u8], off: &mut usize) -> Option<u64> {
    let mut v: u64 = 0;
    for shift in (0..64).step_by(7) {
        let b = *data.get(*off)?;
        *off += 1;
        v |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

/// Bytes `codec::put_varint` writes for `v`.
fn varint_len(v: u64) -> usize {
    (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
}

fn read_bytes<'a>(data: &'a [u8], off: &mut usize) -> Option<&'a [u8]> {
    let n = usize::try_from(read_varint(data, off)?).ok()?;
    let s = data.get(*off..off.checked_add(n)?)?;
    *off += n;
    Some(s)
}

// ------------------------------------------------------------------------------------------
// Redis listpack sizes (for the node-size rules)
// ------------------------------------------------------------------------------------------

fn lp_backlen(l: u32) -> u32 {
    match l {
        0..=127 => 1,
        128..=16382 => 2,
        16383..=2_097_150 => 3,
        2_097_151..=268_435_454 => 4,
        _ => 5,
    }
}

/// Bytes of an integer element of a listpack (encoding and back-length).
pub fn lp_int_bytes(v: i64) -> u32 {
    let enc = match v {
        0..=127 => 1,
        -4096..=4095 => 2,
        -32768..=32767 => 3,
        -8_388_608..=8_388_607 => 4,
        -2_147_483_648..=2_147_483_647 => 5,
        _ => 9,
    };
    enc + lp_backlen(enc)
}

/// Bytes of a string element of a listpack: strings that read as 64-bit integers are stored
/// as integers (`lpStringToInt64`).
pub fn lp_str_bytes(s: &[u8]) -> u32 {
    if let Some(v) = crate::string::parse_i64_redis(s) {
        return lp_int_bytes(v);
    }
    let len = u32::try_from(s.len()).unwrap_or(u32::MAX);
    let enc = match s.len() {
        0..=63 => 1 + len,
        64..=4095 => 2 + len,
        _ => 5u32.saturating_add(len),
    };
    enc.saturating_add(lp_backlen(enc))
}

/// The decoded head of one entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EntryRef<'a> {
    pub id: StreamId,
    pub stamp: Stamp,
    same: bool,
    /// The fields region.
    body: &'a [u8],
    /// The block's field names (count first), for SAMEFIELDS entries.
    master: &'a [u8],
}

impl<'a> EntryRef<'a> {
    /// Field-value pairs in order.
    pub fn fields(&self) -> Fields<'a> {
        if self.same {
            let mut m = 0;
            let n = read_varint(self.master, &mut m).unwrap_or(0);
            Fields {
                body: self.body,
                off: 0,
                master: self.master,
                moff: m,
                left: usize::try_from(n).unwrap_or(0),
                same: true,
            }
        } else {
            let mut off = 0;
            let n = read_varint(self.body, &mut off).unwrap_or(0);
            Fields {
                body: self.body,
                off,
                master: &[],
                moff: 0,
                left: usize::try_from(n).unwrap_or(0),
                same: false,
            }
        }
    }

    /// Number of field-value pairs.
    pub fn pairs(&self) -> usize {
        self.fields().left
    }
}

/// Iterator over an entry's field-value pairs.
#[derive(Clone, Debug)]
pub struct Fields<'a> {
    body: &'a [u8],
    off: usize,
    master: &'a [u8],
    moff: usize,
    left: usize,
    same: bool,
}

impl<'a> Iterator for Fields<'a> {
    type Item = (&'a [u8], &'a [u8]);

    fn next(&mut self) -> Option<(&'a [u8], &'a [u8])> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let f = if self.same {
            read_bytes(self.master, &mut self.moff)?
        } else {
            read_bytes(self.body, &mut self.off)?
        };
        let v = read_bytes(self.body, &mut self.off)?;
        Some((f, v))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, Some(self.left))
    }
}

/// One block of entries. See the module doc.
#[derive(Clone, Debug)]
pub struct Block {
    /// Delta base: the ID and hlc of the entry that opened the block.
    base: StreamId,
    base_hlc: u64,
    /// Smallest ID held (the block's place in the stream).
    pub first: StreamId,
    /// Largest ID ever inserted, deleted ones included (Redis's node edge for MINID ~).
    pub last_any: StreamId,
    /// Live entries.
    pub n: u32,
    /// Entries deleted since the block opened (Redis keeps them as flagged tombstones, which
    /// count towards `stream-node-max-entries`).
    pub deleted: u32,
    /// Bytes Redis's listpack would spend on the entries, tombstones included.
    lp_entries: u32,
    /// Bytes Redis's master entry would spend on the field names.
    lp_master_fields: u32,
    replicas: SmallVec<[ReplicaId; 2]>,
    /// The field names of the opening entry: a count, then length-prefixed names (fixed once
    /// the block opens: a boxed slice, which keeps `Block` within `BLOCK_STRUCT_BYTES_MAX`).
    master: Box<[u8]>,
    data: Vec<u8>,
    /// Offset of the last entry in `data` (0 when empty): XADD reads the last ID on every
    /// insert, which must not decode the whole block.
    last_off: u32,
}

/// Size of `Block`: a stream holds one per 100 entries (by default) in its block array,
/// whose size counts in the memory per entry.
pub const BLOCK_STRUCT_BYTES_MAX: usize = 144;
const _: () = assert!(std::mem::size_of::<Block>() <= BLOCK_STRUCT_BYTES_MAX);

/// The pairs of an entry being added: `fields` alternates names and values.
pub fn pairs_of<B: AsRef<[u8]>>(fields: &[B]) -> impl Iterator<Item = (&[u8], &[u8])> + '_ {
    fields
        .chunks_exact(2)
        .filter_map(|c| Some((c.first()?.as_ref(), c.get(1)?.as_ref())))
}

impl Block {
    /// A block opened by the entry `id` with `fields`.
    pub fn open<B: AsRef<[u8]>>(id: StreamId, stamp: Stamp, fields: &[B]) -> Block {
        let mut master = Vec::new();
        let pairs = fields.len() / 2;
        codec::put_varint(&mut master, pairs as u64);
        let mut lp_master_fields = 0u32;
        for (f, _) in pairs_of(fields) {
            codec::put_bytes(&mut master, f);
            lp_master_fields = lp_master_fields.saturating_add(lp_str_bytes(f));
        }
        Block {
            base: id,
            base_hlc: stamp.hlc.0,
            first: id,
            last_any: id,
            n: 0,
            deleted: 0,
            lp_entries: 0,
            lp_master_fields,
            replicas: SmallVec::new(),
            master: master.into_boxed_slice(),
            data: Vec::new(),
            last_off: 0,
        }
    }

    /// Bytes of the arena (memory reports).
    pub fn heap_bytes(&self) -> usize {
        self.data.capacity() + self.master.len()
    }

    /// The size Redis's listpack for this node would have (`lpBytes`).
    pub fn lp_bytes(&self) -> u64 {
        let pairs = {
            let mut m = 0;
            read_varint(&self.master, &mut m).unwrap_or(0)
        };
        let master = lp_int_bytes(i64::from(self.n))
            + lp_int_bytes(i64::from(self.deleted))
            + lp_int_bytes(i64::try_from(pairs).unwrap_or(i64::MAX))
            + self.lp_master_fields
            + lp_int_bytes(0);
        6 + u64::from(master) + u64::from(self.lp_entries) + 1
    }

    /// Whether XADD must open a new node after this one (Redis's rule in `streamAppendItem`):
    /// `field_bytes` is the sum of the new entry's field and value lengths.
    pub fn is_full(&self, field_bytes: u64, node_max_entries: u64, node_max_bytes: u64) -> bool {
        let bytes_max = if node_max_bytes == 0 || node_max_bytes > 1 << 30 {
            1 << 30
        } else {
            node_max_bytes
        };
        if self.lp_bytes().saturating_add(field_bytes) >= bytes_max {
            return true;
        }
        if self.data.len() >= BLOCK_BYTES_PHYSICAL_MAX {
            return true;
        }
        node_max_entries > 0 && u64::from(self.n) + u64::from(self.deleted) >= node_max_entries
    }

    fn same_fields<B: AsRef<[u8]>>(&self, fields: &[B]) -> bool {
        let mut m = 0;
        let Some(n) = read_varint(&self.master, &mut m) else {
            return false;
        };
        if n != (fields.len() / 2) as u64 {
            return false;
        }
        for (f, _) in pairs_of(fields) {
            match read_bytes(&self.master, &mut m) {
                Some(name) if name == f => {}
                _ => return false,
            }
        }
        true
    }

    /// Encodes an entry for this block at the end of `out` (may add a replica to the table);
    /// returns the bytes Redis would spend on it.
    fn encode<B: AsRef<[u8]>>(
        &mut self,
        out: &mut Vec<u8>,
        id: StreamId,
        stamp: Stamp,
        fields: &[B],
    ) -> u32 {
        let same = self.same_fields(fields);
        let idx = match self.replicas.iter().position(|r| *r == stamp.replica) {
            Some(i) => i,
            None if self.replicas.len() < REPLICA_INLINE_MAX => {
                self.replicas.push(stamp.replica);
                self.replicas.len() - 1
            }
            None => REPLICA_INLINE_MAX,
        };
        let mut header = idx as u8;
        if same {
            header |= F_SAME;
        }
        let seq_origin = id.seq & 0xffff_ffff == u64::from(stamp.replica.0);
        if seq_origin {
            header |= F_SEQ_ORIGIN;
        }
        let from_id = stamp.hlc.0.wrapping_sub(id.ms.wrapping_shl(16));
        let from_base = stamp.hlc.0.wrapping_sub(self.base_hlc);
        let use_base = zigzag(from_base as i64) < zigzag(from_id as i64);
        if use_base {
            header |= F_HLC_BASE;
        }
        let piece = |b: &[u8]| varint_len(b.len() as u64) + b.len();
        let body_len = if same {
            pairs_of(fields).map(|(_, v)| piece(v)).sum::<usize>()
        } else {
            varint_len((fields.len() / 2) as u64)
                + pairs_of(fields)
                    .map(|(f, v)| piece(f) + piece(v))
                    .sum::<usize>()
        };
        out.reserve(16 + varint_len(body_len as u64) + body_len);
        out.push(header);
        if idx == REPLICA_INLINE_MAX {
            codec::put_u32(out, stamp.replica.0);
        }
        codec::put_varint(out, zigzag(id.ms.wrapping_sub(self.base.ms) as i64));
        if seq_origin {
            codec::put_varint(out, id.seq >> 32);
        } else {
            codec::put_varint(out, zigzag(id.seq.wrapping_sub(self.base.seq) as i64));
        }
        codec::put_varint(
            out,
            zigzag(if use_base { from_base } else { from_id } as i64),
        );
        codec::put_varint(out, body_len as u64);
        if !same {
            codec::put_varint(out, (fields.len() / 2) as u64);
        }
        for (f, v) in pairs_of(fields) {
            if !same {
                codec::put_bytes(out, f);
            }
            codec::put_bytes(out, v);
        }
        // Redis: flags, ms delta, seq delta, [num-fields, fields], values, lp-count.
        let mut lp = lp_int_bytes(if same { 2 } else { 0 })
            + lp_int_bytes(id.ms.wrapping_sub(self.base.ms) as i64)
            + lp_int_bytes(id.seq.wrapping_sub(self.base.seq) as i64);
        let pairs = (fields.len() / 2) as i64;
        let mut lp_count = pairs + 3;
        if !same {
            lp = lp.saturating_add(lp_int_bytes(pairs));
            lp_count += pairs + 1;
        }
        for (f, v) in pairs_of(fields) {
            if !same {
                lp = lp.saturating_add(lp_str_bytes(f));
            }
            lp = lp.saturating_add(lp_str_bytes(v));
        }
        lp = lp.saturating_add(lp_int_bytes(lp_count));
        lp
    }

    /// Decodes the entry at `off`: the entry and the offset of the next one.
    pub fn decode(&self, off: usize) -> Option<(EntryRef<'_>, usize)> {
        let data = &self.data;
        let mut o = off;
        let h = *data.get(o)?;
        o += 1;
        let idx = usize::from(h & 0x0f);
        let replica = if idx == REPLICA_INLINE_MAX {
            let b = data.get(o..o + 4)?;
            o += 4;
            ReplicaId(u32::from_le_bytes([
                *b.first()?,
                *b.get(1)?,
                *b.get(2)?,
                *b.get(3)?,
            ]))
        } else {
            *self.replicas.get(idx)?
        };
        let ms = self
            .base
            .ms
            .wrapping_add(unzigzag(read_varint(data, &mut o)?) as u64);
        let seq = if h & F_SEQ_ORIGIN != 0 {
            (read_varint(data, &mut o)? << 32) | u64::from(replica.0)
        } else {
            self.base
                .seq
                .wrapping_add(unzigzag(read_varint(data, &mut o)?) as u64)
        };
        let d = unzigzag(read_varint(data, &mut o)?) as u64;
        let hlc = if h & F_HLC_BASE != 0 {
            self.base_hlc.wrapping_add(d)
        } else {
            ms.wrapping_shl(16).wrapping_add(d)
        };
        let body = read_bytes(data, &mut o)?;
        Some((
            EntryRef {
                id: StreamId { ms, seq },
                stamp: Stamp {
                    hlc: Hlc(hlc),
                    replica,
                },
                same: h & F_SAME != 0,
                body,
                master: &self.master,
            },
            o,
        ))
    }

    /// Offsets of the entries, in order.
    pub fn offsets(&self) -> SmallVec<[u32; 128]> {
        let mut v = SmallVec::new();
        let mut o = 0;
        while o < self.data.len() {
            v.push(o as u32);
            match self.decode(o) {
                Some((_, next)) => o = next,
                None => break,
            }
        }
        v
    }

    pub fn first_entry(&self) -> Option<EntryRef<'_>> {
        self.decode(0).map(|(e, _)| e)
    }

    pub fn last_entry(&self) -> Option<EntryRef<'_>> {
        if self.data.is_empty() {
            return None;
        }
        self.decode(self.last_off as usize).map(|(e, _)| e)
    }

    /// Finds `last_off` again by a scan (after a removal that may have taken the last entry).
    fn relocate_last(&mut self) {
        self.last_off = self.offsets().last().copied().unwrap_or(0);
    }

    /// The offset of the first entry with an ID at least `id` (the arena's end when none).
    pub fn seek(&self, id: StreamId) -> usize {
        let mut o = 0;
        while o < self.data.len() {
            match self.decode(o) {
                Some((e, next)) => {
                    if e.id >= id {
                        return o;
                    }
                    o = next;
                }
                None => break,
            }
        }
        self.data.len()
    }

    pub fn len_bytes(&self) -> usize {
        self.data.len()
    }

    /// Inserts an entry at its place in ID order. Returns false (and changes nothing) when an
    /// entry with that ID is held (the caller resolves duplicate IDs).
    pub fn insert<B: AsRef<[u8]>>(&mut self, id: StreamId, stamp: Stamp, fields: &[B]) -> bool {
        let at = if self.n == 0 || id > self.last_any {
            self.data.len()
        } else {
            let at = self.seek(id);
            if self.decode(at).is_some_and(|(e, _)| e.id == id) {
                return false;
            }
            at
        };
        let lp = if at >= self.data.len() {
            // Appends (every local XADD) encode in place.
            let mut data = std::mem::take(&mut self.data);
            let start = data.len();
            let lp = self.encode(&mut data, id, stamp, fields);
            self.data = data;
            self.last_off = start as u32;
            lp
        } else {
            let mut bytes = Vec::new();
            let lp = self.encode(&mut bytes, id, stamp, fields);
            self.data.splice(at..at, bytes.iter().copied());
            // `at` is an entry's offset below the end: the last entry moved up.
            self.last_off = self.last_off.saturating_add(bytes.len() as u32);
            lp
        };
        self.n += 1;
        self.lp_entries = self.lp_entries.saturating_add(lp);
        if self.n == 1 || id < self.first {
            self.first = id;
        }
        if id > self.last_any {
            self.last_any = id;
        }
        true
    }

    /// Removes the entry at `off` (whose successor is at `next`).
    pub fn remove_at(&mut self, off: usize, next: usize) {
        if off >= next || next > self.data.len() {
            return;
        }
        let was_last = next == self.data.len();
        self.data.drain(off..next);
        if was_last {
            self.relocate_last();
        } else {
            self.last_off = self.last_off.saturating_sub((next - off) as u32);
        }
        self.n = self.n.saturating_sub(1);
        self.deleted = self.deleted.saturating_add(1);
        if off == 0 {
            if let Some(e) = self.first_entry() {
                self.first = e.id;
            }
        }
        self.shrink();
    }

    /// Keeps the entries for which `keep` holds, looking at entries up to `hi` only (entries
    /// are sorted: those after it are kept without being decoded). Returns the entries
    /// removed, as (id, stamp).
    pub fn retain_until(
        &mut self,
        hi: Option<StreamId>,
        mut keep: impl FnMut(&EntryRef<'_>) -> bool,
    ) -> SmallVec<[(StreamId, Stamp); 4]> {
        let mut spans: SmallVec<[(usize, usize); 4]> = SmallVec::new();
        let mut removed = SmallVec::new();
        let mut off = 0;
        while off < self.data.len() {
            let Some((e, next)) = self.decode(off) else {
                break;
            };
            if hi.is_some_and(|h| e.id > h) {
                let end = self.data.len();
                match spans.last_mut() {
                    Some(s) if s.1 == off => s.1 = end,
                    _ => spans.push((off, end)),
                }
                break;
            }
            if keep(&e) {
                match spans.last_mut() {
                    Some(s) if s.1 == off => s.1 = next,
                    _ => spans.push((off, next)),
                }
            } else {
                removed.push((e.id, e.stamp));
            }
            off = next;
        }
        if removed.is_empty() {
            return removed;
        }
        match spans.as_slice() {
            [] => self.data = Vec::new(),
            [(s, e)] => {
                self.data.truncate(*e);
                self.data.drain(..*s);
            }
            _ => {
                let mut data = Vec::with_capacity(spans.iter().map(|(s, e)| e - s).sum());
                for (s, e) in &spans {
                    data.extend_from_slice(self.data.get(*s..*e).unwrap_or_default());
                }
                self.data = data;
            }
        }
        self.relocate_last();
        let k = removed.len() as u32;
        self.n = self.n.saturating_sub(k);
        self.deleted = self.deleted.saturating_add(k);
        if let Some(e) = self.first_entry() {
            self.first = e.id;
        }
        self.shrink();
        removed
    }

    fn shrink(&mut self) {
        if self.data.capacity() > 2 * self.data.len().max(16) {
            self.data.shrink_to_fit();
        }
    }

    /// Releases the arena's spare room (a block no longer at the tail).
    pub fn seal(&mut self) {
        self.data.shrink_to_fit();
    }

    /// Splits the block in two halves by entries (both keep the base, the field names and the
    /// replica table); returns the second half.
    pub fn split(&mut self) -> Option<Block> {
        let offs = self.offsets();
        let half = offs.len() / 2;
        let at = *offs.get(half)? as usize;
        if at == 0 {
            return None;
        }
        let tail = self.data.split_off(at);
        let moved = (offs.len() - half) as u32;
        let mut new = Block {
            base: self.base,
            base_hlc: self.base_hlc,
            first: self.first,
            last_any: self.last_any,
            n: moved,
            deleted: 0,
            lp_entries: 0,
            lp_master_fields: self.lp_master_fields,
            replicas: self.replicas.clone(),
            master: self.master.clone(),
            data: tail,
            last_off: self.last_off.saturating_sub(at as u32),
        };
        self.last_off = offs.get(half - 1).copied().unwrap_or(0);
        self.n = self.n.saturating_sub(moved);
        // Redis never splits a node: give each half its share of the listpack bytes.
        let share = (u64::from(self.lp_entries) * u64::from(moved)
            / u64::from((self.n + moved).max(1))) as u32;
        new.lp_entries = share;
        self.lp_entries = self.lp_entries.saturating_sub(share);
        if let Some(e) = new.first_entry() {
            new.first = e.id;
        }
        if let Some(e) = self.last_entry() {
            self.last_any = e.id;
        }
        self.data.shrink_to_fit();
        Some(new)
    }

    /// Iterates the entries in order.
    pub fn iter(&self) -> impl Iterator<Item = EntryRef<'_>> + '_ {
        let mut off = 0;
        std::iter::from_fn(move || {
            let (e, next) = self.decode(off)?;
            off = next;
            Some(e)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dot::st;

    #[test]
    fn entries_round_trip_in_every_form() {
        let id0 = StreamId { ms: 1000, seq: 0 };
        let f: Vec<&[u8]> = vec![b"f1", b"v1", b"f2", b"v2"];
        let mut b = Block::open(id0, st(1000 << 16, 7), &f);
        let cases: Vec<(StreamId, Stamp, Vec<&[u8]>)> = vec![
            (id0, st(1000 << 16, 7), f.clone()),
            (
                StreamId { ms: 1000, seq: 1 },
                st((1000 << 16) + 1, 7),
                vec![b"x", b""],
            ),
            (
                StreamId {
                    ms: 1001,
                    seq: (3 << 32) | 9,
                },
                st(5, 9),
                f.clone(),
            ),
            (
                StreamId {
                    ms: u64::MAX,
                    seq: u64::MAX,
                },
                st(u64::MAX, u32::MAX),
                vec![],
            ),
            (StreamId { ms: 999, seq: 0 }, st(1, 1), f.clone()),
        ];
        for (id, s, fields) in &cases {
            assert!(b.insert(*id, *s, fields));
        }
        for r in 20..40u32 {
            assert!(b.insert(
                StreamId {
                    ms: 2000,
                    seq: u64::from(r)
                },
                st(7, r),
                &f
            ));
        }
        assert!(!b.insert(id0, st(9, 9), &f), "duplicate id");
        let got: Vec<_> = b.iter().collect();
        assert_eq!(got.len(), cases.len() + 20);
        assert_eq!(b.first, StreamId { ms: 999, seq: 0 });
        for (id, s, fields) in &cases {
            let e = got.iter().find(|e| e.id == *id).unwrap();
            assert_eq!(e.stamp, *s);
            let pairs: Vec<(&[u8], &[u8])> = e.fields().collect();
            let want: Vec<(&[u8], &[u8])> = pairs_of(fields).collect();
            assert_eq!(pairs, want);
        }
        let ids: Vec<StreamId> = got.iter().map(|e| e.id).collect();
        let mut sorted = ids.clone();
        sorted.sort();
        assert_eq!(ids, sorted);
        let total = got.len() as u32;
        let tail = b.split().unwrap();
        assert_eq!(b.n + tail.n, total);
        assert!(
            b.iter()
                .chain(tail.iter())
                .map(|e| e.id)
                .eq(sorted.into_iter())
        );
    }

    /// `last_entry` (kept as an offset) is the last entry a scan finds, after appends,
    /// inserts in the middle, removals of the last and of other entries, retains and splits.
    #[test]
    fn last_entry_follows_every_change() {
        fn check(b: &Block) {
            assert_eq!(
                b.last_entry().map(|e| e.id),
                b.iter().last().map(|e| e.id),
                "last entry"
            );
        }
        let f: Vec<&[u8]> = vec![b"f", b"v"];
        let id = |ms: u64| StreamId { ms, seq: 0 };
        let mut b = Block::open(id(10), st(1, 1), &f);
        assert!(b.last_entry().is_none());
        for ms in (10..40).step_by(2) {
            assert!(b.insert(id(ms), st(ms, 1), &f));
            check(&b);
        }
        assert!(b.insert(id(21), st(5, 2), &[&b"other"[..], b"x"]));
        check(&b);
        assert!(b.insert(id(1), st(5, 2), &f));
        check(&b);
        // Remove the last entry, then one in the middle.
        for target in [38, 20] {
            let off = b.seek(id(target));
            let (e, next) = b.decode(off).unwrap();
            assert_eq!(e.id, id(target));
            b.remove_at(off, next);
            check(&b);
        }
        let removed = b.retain_until(None, |e| e.id != id(36) && e.id != id(12));
        assert_eq!(removed.len(), 2);
        check(&b);
        let tail = b.split().unwrap();
        check(&b);
        check(&tail);
        let mut t = tail;
        t.retain_until(None, |_| false);
        assert!(t.last_entry().is_none());
        assert!(t.insert(id(100), st(100, 1), &f));
        check(&t);
    }

    #[test]
    fn listpack_sizes_match_redis() {
        // Values checked against Redis 7.0's listpack.c encodings.
        assert_eq!(lp_int_bytes(0), 2);
        assert_eq!(lp_int_bytes(127), 2);
        assert_eq!(lp_int_bytes(128), 3);
        assert_eq!(lp_int_bytes(-1), 3);
        assert_eq!(lp_int_bytes(5000), 4);
        assert_eq!(lp_int_bytes(i64::MAX), 10);
        assert_eq!(lp_str_bytes(b"v"), 3);
        assert_eq!(lp_str_bytes(b"12"), 2);
        assert_eq!(lp_str_bytes(&[b'a'; 63]), 65);
        assert_eq!(lp_str_bytes(&[b'a'; 64]), 67);
        let b = Block::open(StreamId::MIN, st(1, 1), &[&b"item"[..], b"1"]);
        // Empty node: header 6, count 0, deleted 0, one field, "item", terminator, end.
        assert_eq!(b.lp_bytes(), 6 + 2 + 2 + 2 + 6 + 2 + 1);
    }
}
