//! The DUMP side: the payload Redis 7.0 writes for a value of given contents
//! (`createDumpPayload`, `rdbSaveObject`), with the encoding Redis would have chosen under
//! the given thresholds.
//!
//! What can differ from Redis for equal contents, because Redis's encoding depends on the
//! value's history or memory layout and not only on its contents: the order of members and
//! fields of hash-table sets and hashes (their dict order), the node boundaries of a list
//! built by other means than appends at the tail, an intset that Redis widened for a member
//! since removed, a hash or sorted set that Redis converted to a hash table and that has
//! since shrunk below the thresholds (Redis never converts back).

use crate::decode::STREAM_ITEM_FLAG_SAMEFIELDS;
use crate::listpack::Builder;
use crate::num::{d2string, double2ll, string2ll};
use crate::rdb_type as t;
use crate::{CRC64, RDB_VERSION, Stream, StreamId, intset, lzf};

/// Redis's list node sizes for negative `list-max-listpack-size` (`optimization_level`).
const NODE_SIZE_LEVELS: [usize; 5] = [4096, 8192, 16384, 32768, 65536];
/// Largest node of a positive count fill (`SIZE_SAFETY_LIMIT`).
const NODE_SAFETY_BYTES: usize = 8192;
/// Per-insert overestimate of a listpack entry's overhead (`SIZE_ESTIMATE_OVERHEAD`).
const NODE_ENTRY_OVERHEAD: usize = 8;
/// Elements of this size or more get a plain node of their own (`packed_threshold`).
const PLAIN_ELEMENT_BYTES: usize = 1 << 30;
/// `list-max-listpack-size` bounds (`quicklistSetFill`).
const FILL_MIN: i32 = -5;
const FILL_MAX: i32 = (1 << 15) - 1;
/// Nodes smaller than this are never compressed (`MIN_COMPRESS_BYTES`), nor when LZF saves
/// less than `MIN_COMPRESS_IMPROVE` bytes.
const MIN_COMPRESS_BYTES: usize = 48;
const MIN_COMPRESS_IMPROVE: usize = 8;

/// A list's encoding parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ListOptions {
    /// `list-max-listpack-size`: negative for a node size class, positive for a count.
    pub fill: i32,
    /// `list-compress-depth`: nodes left uncompressed at each end (0: none compressed).
    pub compress_depth: u32,
}

impl Default for ListOptions {
    fn default() -> Self {
        ListOptions {
            fill: -2,
            compress_depth: 0,
        }
    }
}

/// Writes payloads. `compress` is `rdbcompression`: LZF for strings longer than 20 bytes
/// when it saves at least 4 bytes. `footer`: a DUMP payload ends with the RDB version and
/// the CRC-64 (true, the default); a file's record holds the type byte and the value alone
/// (`Encoder::for_file`, `file::put_value`), the file's one checksum covering them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Encoder {
    pub compress: bool,
    pub footer: bool,
}

impl Default for Encoder {
    fn default() -> Self {
        Encoder {
            compress: true,
            footer: true,
        }
    }
}

/// `rdbSaveLen`.
pub fn put_len(out: &mut Vec<u8>, len: u64) {
    if len < 1 << 6 {
        out.push(len as u8);
    } else if len < 1 << 14 {
        out.push(0x40 | (len >> 8) as u8);
        out.push(len as u8);
    } else if len <= u64::from(u32::MAX) {
        out.push(0x80);
        out.extend_from_slice(&(len as u32).to_be_bytes());
    } else {
        out.push(0x81);
        out.extend_from_slice(&len.to_be_bytes());
    }
}

/// `rdbSaveLzfBlob`.
fn put_lzf_blob(out: &mut Vec<u8>, compressed: &[u8], original_len: usize) {
    out.push(0xC3);
    put_len(out, compressed.len() as u64);
    put_len(out, original_len as u64);
    out.extend_from_slice(compressed);
}

/// Appends the footer: RDB version and CRC-64, both little endian.
fn seal(mut out: Vec<u8>) -> Vec<u8> {
    out.extend_from_slice(&RDB_VERSION.to_le_bytes());
    let crc = CRC64.checksum(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

impl Encoder {
    /// The same encodings, for a file's records: no footer after a value.
    pub fn for_file(self) -> Encoder {
        Encoder {
            footer: false,
            ..self
        }
    }

    /// A value's bytes made a payload: sealed when `footer`.
    fn finish(&self, out: Vec<u8>) -> Vec<u8> {
        if self.footer { seal(out) } else { out }
    }

    /// `rdbSaveRawString`: an integer encoding for integers of up to 32 bits written in at
    /// most 11 bytes, LZF above 20 bytes when it saves 4 bytes or more, else the bytes.
    pub fn put_string(&self, out: &mut Vec<u8>, s: &[u8]) {
        if s.len() <= 11 {
            if let Some(v) = string2ll(s) {
                if let Ok(b) = i8::try_from(v) {
                    out.push(0xC0);
                    out.push(b as u8);
                    return;
                }
                if let Ok(h) = i16::try_from(v) {
                    out.push(0xC1);
                    out.extend_from_slice(&h.to_le_bytes());
                    return;
                }
                if let Ok(w) = i32::try_from(v) {
                    out.push(0xC2);
                    out.extend_from_slice(&w.to_le_bytes());
                    return;
                }
            }
        }
        if self.compress && s.len() > 20 {
            if let Some(c) = lzf::compress(s, s.len() - 4) {
                put_lzf_blob(out, &c, s.len());
                return;
            }
        }
        put_len(out, s.len() as u64);
        out.extend_from_slice(s);
    }

    /// The payload of a string.
    pub fn string(&self, s: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(s.len() + 16);
        out.push(t::STRING);
        self.put_string(&mut out, s);
        self.finish(out)
    }

    /// The payload of a list (a quicklist of listpacks, `RDB_TYPE_LIST_QUICKLIST_2`): nodes
    /// filled as `quicklistPushTail` fills them, the inner ones LZF-compressed when
    /// `compress_depth` asks for it and `__quicklistCompressNode` would succeed.
    pub fn list<'a>(&self, items: impl Iterator<Item = &'a [u8]>, opts: ListOptions) -> Vec<u8> {
        let fill = opts.fill.clamp(FILL_MIN, FILL_MAX);
        enum Node {
            Packed(Builder),
            Plain(Vec<u8>),
        }
        let mut nodes: Vec<Node> = Vec::new();
        for item in items {
            if item.len() >= PLAIN_ELEMENT_BYTES {
                nodes.push(Node::Plain(item.to_vec()));
                continue;
            }
            match nodes.last_mut() {
                Some(Node::Packed(lp)) if allow_insert(lp, fill, item.len()) => lp.push(item),
                _ => {
                    let mut lp = Builder::new();
                    lp.push(item);
                    nodes.push(Node::Packed(lp));
                }
            }
        }
        let n = nodes.len();
        let depth = opts.compress_depth as usize;
        let compressing = depth > 0 && n >= depth.saturating_mul(2);
        let mut out = Vec::new();
        out.push(t::LIST_QUICKLIST_2);
        put_len(&mut out, n as u64);
        for (i, node) in nodes.into_iter().enumerate() {
            let inner = compressing && i >= depth && i < n - depth;
            match node {
                Node::Plain(bytes) => {
                    put_len(&mut out, 1);
                    self.put_node(&mut out, &bytes, inner);
                }
                Node::Packed(lp) => {
                    put_len(&mut out, 2);
                    self.put_node(&mut out, &lp.finish(), inner);
                }
            }
        }
        self.finish(out)
    }

    /// A node's bytes: LZF as compressed in memory when `inner` and worth it, else as a string.
    fn put_node(&self, out: &mut Vec<u8>, node: &[u8], inner: bool) {
        if inner && node.len() >= MIN_COMPRESS_BYTES {
            if let Some(c) = lzf::compress(node, node.len()) {
                if c.len() + MIN_COMPRESS_IMPROVE < node.len() {
                    put_lzf_blob(out, &c, node.len());
                    return;
                }
            }
        }
        self.put_string(out, node);
    }

    /// The payload of a set: an intset when every member is an integer and there are at
    /// most `intset_max` (`set-max-intset-entries`), else the members one by one.
    pub fn set(&self, members: &[&[u8]], intset_max: u64) -> Vec<u8> {
        let mut ints: Vec<i64> = Vec::new();
        let mut all_int = true;
        let mut n: u64 = 0;
        for &m in members {
            n += 1;
            if all_int {
                match string2ll(m) {
                    Some(v) if n <= intset_max => ints.push(v),
                    _ => all_int = false,
                }
            }
        }
        let mut out = Vec::new();
        if all_int && n > 0 {
            ints.sort_unstable();
            out.push(t::SET_INTSET);
            self.put_string(&mut out, &intset::encode(&ints));
        } else {
            out.push(t::SET);
            put_len(&mut out, n);
            for m in members {
                self.put_string(&mut out, m);
            }
        }
        self.finish(out)
    }

    /// The payload of a hash: a listpack of field, value, ... in the given order when
    /// `listpack` (the caller applies `hash-max-listpack-*`), else pairs one by one.
    pub fn hash<'a>(
        &self,
        pairs: impl Iterator<Item = (&'a [u8], &'a [u8])>,
        listpack: bool,
    ) -> Vec<u8> {
        let mut out = Vec::new();
        if listpack {
            let mut lp = Builder::new();
            for (f, v) in pairs {
                lp.push(f);
                lp.push(v);
            }
            out.push(t::HASH_LISTPACK);
            self.put_string(&mut out, &lp.finish());
        } else {
            let pairs: Vec<(&[u8], &[u8])> = pairs.collect();
            out.push(t::HASH);
            put_len(&mut out, pairs.len() as u64);
            for (f, v) in pairs {
                self.put_string(&mut out, f);
                self.put_string(&mut out, v);
            }
        }
        self.finish(out)
    }

    /// The payload of a stream (`RDB_TYPE_STREAM_LISTPACKS_2`): the entries in nodes as
    /// `streamAppendItem` fills them when they are appended in order (a node is full when
    /// its listpack and the new entry's fields and values reach `max_bytes`, or when it holds
    /// `max_entries`; the first entry's fields are the node's master fields, and an entry
    /// with the same field names is flagged SAMEFIELDS and stores its values only), then the
    /// counters and the groups as `rdbSaveObject` writes them. A stream whose entries Redis
    /// deleted or trimmed in place may have other node boundaries there.
    pub fn stream(&self, s: &Stream, nodes: StreamNodes) -> Vec<u8> {
        let max_bytes = match nodes.max_bytes {
            0 => STREAM_NODE_MAX_BYTES,
            b => b.min(STREAM_NODE_MAX_BYTES),
        };
        let mut built: Vec<(StreamId, Vec<u8>)> = Vec::new();
        let mut node: Option<StreamNode<'_>> = None;
        for (id, pairs) in &s.entries {
            let fields_bytes: u64 = pairs.iter().map(|(f, v)| (f.len() + v.len()) as u64).sum();
            let full = node.as_ref().is_some_and(|n| {
                n.bytes() as u64 + fields_bytes >= max_bytes
                    || (nodes.max_entries > 0 && n.count as u64 >= nodes.max_entries)
            });
            if full {
                if let Some(n) = node.take() {
                    built.push((n.master, n.finish()));
                }
            }
            node.get_or_insert_with(|| StreamNode::new(*id, pairs))
                .push(*id, pairs);
        }
        if let Some(n) = node.take() {
            built.push((n.master, n.finish()));
        }
        let mut out = vec![t::STREAM_LISTPACKS_2];
        put_len(&mut out, built.len() as u64);
        for (master, lp) in &built {
            let mut key = [0u8; 16];
            key[..8].copy_from_slice(&master.0.to_be_bytes());
            key[8..].copy_from_slice(&master.1.to_be_bytes());
            self.put_string(&mut out, &key);
            self.put_string(&mut out, lp);
        }
        put_len(&mut out, s.entries.len() as u64);
        for id in [s.last_id, s.first_id, s.max_deleted] {
            put_len(&mut out, id.0);
            put_len(&mut out, id.1);
        }
        put_len(&mut out, s.entries_added);
        put_len(&mut out, s.groups.len() as u64);
        let raw_id = |out: &mut Vec<u8>, id: StreamId| {
            out.extend_from_slice(&id.0.to_be_bytes());
            out.extend_from_slice(&id.1.to_be_bytes());
        };
        for g in &s.groups {
            self.put_string(&mut out, &g.name);
            put_len(&mut out, g.last_id.0);
            put_len(&mut out, g.last_id.1);
            put_len(&mut out, g.entries_read as u64);
            put_len(&mut out, g.pending.len() as u64);
            for p in &g.pending {
                raw_id(&mut out, p.id);
                out.extend_from_slice(&p.delivery_time.to_le_bytes());
                put_len(&mut out, p.delivery_count);
            }
            put_len(&mut out, g.consumers.len() as u64);
            for (name, seen) in &g.consumers {
                self.put_string(&mut out, name);
                out.extend_from_slice(&seen.to_le_bytes());
                let owned: Vec<StreamId> = g
                    .pending
                    .iter()
                    .filter(|p| p.consumer == *name)
                    .map(|p| p.id)
                    .collect();
                put_len(&mut out, owned.len() as u64);
                for id in owned {
                    raw_id(&mut out, id);
                }
            }
        }
        self.finish(out)
    }

    /// The payload of a sorted set, given in ascending (score, member) order: a listpack of
    /// member, score, ... when `listpack` (the caller applies `zset-max-listpack-*`), else
    /// `RDB_TYPE_ZSET_2` with the members from the highest down and binary scores.
    pub fn zset<'a>(
        &self,
        pairs: impl DoubleEndedIterator<Item = (&'a [u8], f64)>,
        listpack: bool,
    ) -> Vec<u8> {
        let mut out = Vec::new();
        if listpack {
            let mut lp = Builder::new();
            for (m, s) in pairs {
                lp.push(m);
                match double2ll(s) {
                    Some(v) => lp.push_int(v),
                    None => lp.push(d2string(s).as_bytes()),
                }
            }
            out.push(t::ZSET_LISTPACK);
            self.put_string(&mut out, &lp.finish());
        } else {
            let pairs: Vec<(&[u8], f64)> = pairs.rev().collect();
            out.push(t::ZSET_2);
            put_len(&mut out, pairs.len() as u64);
            for (m, s) in pairs {
                self.put_string(&mut out, m);
                out.extend_from_slice(&s.to_le_bytes());
            }
        }
        self.finish(out)
    }
}

/// A stream's node limits (`stream-node-max-bytes`, `stream-node-max-entries`; 0: no
/// limit of that kind).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamNodes {
    pub max_bytes: u64,
    pub max_entries: u64,
}

impl Default for StreamNodes {
    fn default() -> Self {
        StreamNodes {
            max_bytes: 4096,
            max_entries: 100,
        }
    }
}

/// Largest stream node (`STREAM_LISTPACK_MAX_SIZE`).
const STREAM_NODE_MAX_BYTES: u64 = 1 << 30;

/// One stream node being built: its master ID and fields, and its entries so far.
struct StreamNode<'a> {
    master: StreamId,
    fields: Vec<&'a [u8]>,
    lp: Builder,
    count: i64,
}

impl<'a> StreamNode<'a> {
    /// A node whose master entry takes the first entry's fields (`streamAppendItem`).
    fn new(master: StreamId, pairs: &'a [(Vec<u8>, Vec<u8>)]) -> StreamNode<'a> {
        let mut lp = Builder::new();
        lp.push_int(1);
        lp.push_int(0);
        lp.push_int(pairs.len() as i64);
        for (f, _) in pairs {
            lp.push(f);
        }
        lp.push_int(0);
        StreamNode {
            master,
            fields: pairs.iter().map(|(f, _)| f.as_slice()).collect(),
            lp,
            count: 0,
        }
    }

    fn push(&mut self, id: StreamId, pairs: &[(Vec<u8>, Vec<u8>)]) {
        let same = pairs.len() == self.fields.len()
            && pairs.iter().zip(&self.fields).all(|((f, _), m)| f == m);
        let flags = if same { STREAM_ITEM_FLAG_SAMEFIELDS } else { 0 };
        self.lp.push_int(flags);
        self.lp.push_int(id.0.wrapping_sub(self.master.0) as i64);
        self.lp.push_int(id.1.wrapping_sub(self.master.1) as i64);
        if same {
            for (_, v) in pairs {
                self.lp.push(v);
            }
            self.lp.push_int(pairs.len() as i64 + 3);
        } else {
            self.lp.push_int(pairs.len() as i64);
            for (f, v) in pairs {
                self.lp.push(f);
                self.lp.push(v);
            }
            self.lp.push_int(2 * pairs.len() as i64 + 4);
        }
        self.count += 1;
    }

    /// Bytes of the node's listpack with its live count in the master entry.
    fn bytes(&self) -> usize {
        self.lp.bytes() - 2 + crate::listpack::int_entry_bytes(self.count)
    }

    /// The node's listpack, its master entry's live count set (`lpReplaceInteger`).
    fn finish(mut self) -> Vec<u8> {
        self.lp.replace_first_small_int(self.count);
        self.lp.finish()
    }
}

/// `_quicklistNodeAllowInsert` for a node holding `lp`.
fn allow_insert(lp: &Builder, fill: i32, sz: usize) -> bool {
    let new_sz = lp.bytes() + sz + NODE_ENTRY_OVERHEAD;
    if fill < 0 {
        let level = usize::try_from(-fill - 1)
            .ok()
            .and_then(|i| NODE_SIZE_LEVELS.get(i));
        if level.is_some_and(|&max| new_sz <= max) {
            return true;
        }
    }
    if new_sz > NODE_SAFETY_BYTES {
        return false;
    }
    i64::try_from(lp.count()).unwrap_or(i64::MAX) < i64::from(fill)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Limits, Value, decode_payload};

    const LIMITS: Limits = Limits {
        string_bytes_max: 1 << 30,
        value_bytes_max: 1 << 32,
    };

    #[test]
    fn redis_bytes_for_small_values() {
        let e = Encoder::default();
        // Captured from Redis 7.0.15.
        assert_eq!(
            e.string(&[b'a'; 40]),
            b"\x00\xc3\t(\x01aa\xe0\x1b\x00\x01aa\n\x00\xcf\t/\xaa\xae%\x83\x1d".to_vec()
        );
        assert_eq!(
            e.hash([(&b"a"[..], &b"1"[..]), (b"b", b"hello")].into_iter(), true),
            b"\x10\x16\x16\x00\x00\x00\x04\x00\x81a\x02\x01\x01\x81b\x02\x85hello\x06\xff\n\x00\xe8\xc5\xfe\x99\xee\x07\x95]".to_vec()
        );
        let items: [&[u8]; 4] = [b"a", b"1", b"b", b"hello"];
        assert_eq!(
            e.list(items.into_iter(), ListOptions::default()),
            b"\x12\x01\x02\x16\x16\x00\x00\x00\x04\x00\x81a\x02\x01\x01\x81b\x02\x85hello\x06\xff\n\x00\x04f-\x00\x97\x81\xa1\x97".to_vec()
        );
        let members: [&[u8]; 3] = [b"3", b"1", b"2"];
        assert_eq!(
            e.set(&members, 512),
            b"\x0b\x0e\x02\x00\x00\x00\x03\x00\x00\x00\x01\x00\x02\x00\x03\x00\n\x00\xa5\x02\\\xe2mnM\x1b".to_vec()
        );
        assert_eq!(
            e.zset([(&b"a"[..], 1.0), (b"b", 2.5)].into_iter(), true),
            b"\x11\x14\x14\x00\x00\x00\x04\x00\x81a\x02\x01\x01\x81b\x02\x832.5\x04\xff\n\x00\xd4Ln\xa4\xf6D\xd9\xd7".to_vec()
        );
    }

    #[test]
    fn every_encoding_round_trips() {
        let e = Encoder::default();
        let big: Vec<Vec<u8>> = (0..3000)
            .map(|i| format!("element-{i}").into_bytes())
            .collect();
        for opts in [
            ListOptions::default(),
            ListOptions {
                fill: 5,
                compress_depth: 0,
            },
            ListOptions {
                fill: -1,
                compress_depth: 1,
            },
            ListOptions {
                fill: 0,
                compress_depth: 2,
            },
        ] {
            let p = e.list(big.iter().map(Vec::as_slice), opts);
            assert_eq!(
                decode_payload(&p, LIMITS).map(|d| d.value),
                Ok(Value::List(big.clone())),
                "{opts:?}"
            );
        }
        let members: Vec<Vec<u8>> = (0..600).map(|i| i.to_string().into_bytes()).collect();
        let refs: Vec<&[u8]> = members.iter().map(Vec::as_slice).collect();
        let p = e.set(&refs, 512);
        let Ok(Value::Set(mut back)) = decode_payload(&p, LIMITS).map(|d| d.value) else {
            panic!()
        };
        back.sort();
        let mut want = members.clone();
        want.sort();
        assert_eq!(back, want);
        let pairs: Vec<(Vec<u8>, Vec<u8>)> = (0..10)
            .map(|i| (format!("f{i}").into_bytes(), vec![b'v'; 100]))
            .collect();
        for lp in [true, false] {
            let p = e.hash(pairs.iter().map(|(f, v)| (f.as_slice(), v.as_slice())), lp);
            assert_eq!(
                decode_payload(&p, LIMITS).map(|d| d.value),
                Ok(Value::Hash(pairs.clone()))
            );
        }
        let scored: Vec<(Vec<u8>, f64)> = vec![
            (b"a".to_vec(), f64::NEG_INFINITY),
            (b"b".to_vec(), -1.5),
            (b"c".to_vec(), 0.0),
            (b"d".to_vec(), 1e300),
            (b"e".to_vec(), f64::INFINITY),
        ];
        for lp in [true, false] {
            let p = e.zset(scored.iter().map(|(m, s)| (m.as_slice(), *s)), lp);
            let Ok(Value::ZSet(mut back)) = decode_payload(&p, LIMITS).map(|d| d.value) else {
                panic!()
            };
            back.sort_by(|a, b| a.0.cmp(&b.0));
            assert_eq!(back, scored);
        }
    }

    #[test]
    fn list_nodes_fill_like_quicklist() {
        // 8 KB nodes: 500 elements of 20 bytes are 3 nodes in Redis (about 8 KB each).
        let items: Vec<Vec<u8>> = (0..1000).map(|i| format!("{i:020}").into_bytes()).collect();
        let p = Encoder {
            compress: false,
            footer: true,
        }
        .list(items.iter().map(Vec::as_slice), ListOptions::default());
        assert_eq!(p[1], 3, "node count");
    }
}
