//! The RESTORE side: a payload's footer, then its value (`rdbLoadObject`).
//!
//! Every type Redis 7.0 loads from a DUMP payload is read, old encodings included
//! (ziplists, zipmaps, text scores), and validated as Redis's deep sanitization
//! (`sanitize-dump-payload yes`) does: packed containers entry by entry, no duplicate set
//! members, hash fields or sorted-set members, no NaN score, no empty value. Beyond Redis:
//! a sorted-set score in a packed container must be a number (Redis reads garbage as 0).
//!
//! Allocation. Lengths come from the payload, so nothing is allocated from a length before
//! the bytes it describes are there: counts preallocate at most what the remaining bytes can
//! hold, raw strings are copied only once present, LZF output grows as it is produced, and
//! `Limits` caps what one string and the whole value may decode to (LZF expands up to ~90x).

use crate::listpack;
use crate::num::{string2ll, strtod_prefix};
use crate::rdb_type as t;
use crate::{
    CRC64, FOOTER_BYTES, RDB_VERSION, RdbError, Stream, StreamEntry, StreamGroup, StreamId,
    StreamPending, Value, intset, lzf, ziplist, zipmap,
};

/// Bytes charged per decoded element on top of its own bytes (its allocation and the
/// server's per-element structures), so that a payload of many empty elements is bounded too.
pub const ELEMENT_OVERHEAD_BYTES: u64 = 32;

/// Bounds on what one payload may decode to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// One string (element, field, value, member, or a packed container) after LZF.
    pub string_bytes_max: u64,
    /// The whole value: every string read plus `ELEMENT_OVERHEAD_BYTES` per element.
    pub value_bytes_max: u64,
}

/// Whether a payload's CRC-64 is checked (Redis's DEBUG SET-SKIP-CHECKSUM-VALIDATION turns
/// it off, for payloads built by hand).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Crc {
    Verify,
    Skip,
}

/// Checks the footer as `verifyDumpPayload` does: at least 10 bytes, an RDB version not
/// above 10, and the CRC-64 of everything before the checksum. Returns the version.
pub fn verify_footer(payload: &[u8]) -> Result<u16, RdbError> {
    verify_footer_with(payload, Crc::Verify)
}

/// `verify_footer`, the CRC-64 checked or not.
pub fn verify_footer_with(payload: &[u8], crc_check: Crc) -> Result<u16, RdbError> {
    if payload.len() < FOOTER_BYTES {
        return Err(RdbError::Footer);
    }
    let body = payload.len() - FOOTER_BYTES;
    let version = match payload.get(body..body + 2) {
        Some(&[lo, hi]) => u16::from_le_bytes([lo, hi]),
        _ => return Err(RdbError::Footer),
    };
    if version > RDB_VERSION {
        return Err(RdbError::Footer);
    }
    if crc_check == Crc::Skip {
        return Ok(version);
    }
    let covered = payload.get(..payload.len() - 8).ok_or(RdbError::Footer)?;
    let crc = CRC64.checksum(covered);
    if payload.get(payload.len() - 8..) != Some(&crc.to_le_bytes()[..]) {
        return Err(RdbError::Footer);
    }
    Ok(version)
}

/// A decoded payload.
#[derive(Clone, Debug, PartialEq)]
pub struct Decoded {
    pub value: Value,
    /// Listpacks and intsets validated entry by entry, as Redis counts them in
    /// `dump_payload_sanitizations` (ziplists and zipmaps are not counted there).
    pub sanitized: u64,
}

/// Decodes a DUMP payload: footer first (`RdbError::Footer`), then the type byte and the
/// value. Like Redis, the value is read from the start of the whole payload (footer
/// included) and bytes after it are not looked at.
pub fn decode_payload(payload: &[u8], limits: Limits) -> Result<Decoded, RdbError> {
    decode_payload_with(payload, limits, Crc::Verify)
}

/// `decode_payload`, the CRC-64 checked or not (the value is decoded with the same checks
/// either way).
pub fn decode_payload_with(
    payload: &[u8],
    limits: Limits,
    crc_check: Crc,
) -> Result<Decoded, RdbError> {
    verify_footer_with(payload, crc_check)?;
    let mut r = Reader {
        buf: payload,
        pos: 0,
        budget: limits.value_bytes_max,
        value_max: limits.value_bytes_max,
        string_max: limits.string_bytes_max,
        sanitized: 0,
    };
    let ty = r.byte()?;
    let value = decode_value(ty, &mut r)?;
    Ok(Decoded {
        value,
        sanitized: r.sanitized,
    })
}

/// Reads the RDB records of a whole file (`file::FileReader`) with a payload's checks: each
/// call starts at `pos` of `buf` with a fresh budget of `limits`.
pub(crate) struct FileCursor<'a> {
    r: Reader<'a>,
    limits: Limits,
}

impl std::fmt::Debug for FileCursor<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileCursor")
            .field("pos", &self.pos())
            .finish()
    }
}

impl<'a> FileCursor<'a> {
    pub(crate) fn new(buf: &'a [u8], pos: usize, limits: Limits) -> FileCursor<'a> {
        FileCursor {
            r: Reader {
                buf,
                pos,
                budget: limits.value_bytes_max,
                value_max: limits.value_bytes_max,
                string_max: limits.string_bytes_max,
                sanitized: 0,
            },
            limits,
        }
    }

    pub(crate) fn pos(&self) -> usize {
        self.r.pos
    }

    /// Starts a new record: the budget is the limits' again.
    fn fresh(&mut self) {
        self.r.budget = self.limits.value_bytes_max;
    }

    pub(crate) fn byte(&mut self) -> Result<u8, RdbError> {
        self.r.byte()
    }

    pub(crate) fn take(&mut self, n: u64) -> Result<&'a [u8], RdbError> {
        self.r.take(n)
    }

    /// A plain length (`rdbLoadLen`).
    pub(crate) fn count(&mut self) -> Result<u64, RdbError> {
        self.r.count()
    }

    /// A string in any of its encodings (`rdbGenericLoadStringObject`), within the limits.
    pub(crate) fn string(&mut self) -> Result<Vec<u8>, RdbError> {
        self.fresh();
        self.r.string()
    }

    /// A value of type `ty` (`rdbLoadObject`), within the limits.
    pub(crate) fn value(&mut self, ty: u8) -> Result<Value, RdbError> {
        self.fresh();
        decode_value(ty, &mut self.r)
    }
}

/// A cursor over a payload that charges what it decodes to a byte budget.
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    /// Bytes the value may still decode to.
    budget: u64,
    /// `Limits::value_bytes_max` (for the error).
    value_max: u64,
    string_max: u64,
    /// Packed containers validated (`Decoded::sanitized`).
    sanitized: u64,
}

impl<'a> Reader<'a> {
    fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }

    fn byte(&mut self) -> Result<u8, RdbError> {
        let b = *self.buf.get(self.pos).ok_or(RdbError::Truncated)?;
        self.pos += 1;
        Ok(b)
    }

    fn take(&mut self, n: u64) -> Result<&'a [u8], RdbError> {
        let n = usize::try_from(n).map_err(|_| RdbError::Truncated)?;
        let end = self.pos.checked_add(n).ok_or(RdbError::Truncated)?;
        let s = self.buf.get(self.pos..end).ok_or(RdbError::Truncated)?;
        self.pos = end;
        Ok(s)
    }

    fn charge(&mut self, bytes: u64) -> Result<(), RdbError> {
        let total = bytes.saturating_add(ELEMENT_OVERHEAD_BYTES);
        self.budget = self
            .budget
            .checked_sub(total)
            .ok_or(RdbError::TooLarge(self.value_max))?;
        Ok(())
    }

    /// `rdbLoadLenByRef`: `(value, is_encoded)`.
    fn len(&mut self) -> Result<(u64, bool), RdbError> {
        let b = self.byte()?;
        Ok(match b >> 6 {
            0 => (u64::from(b & 0x3F), false),
            1 => ((u64::from(b & 0x3F) << 8) | u64::from(self.byte()?), false),
            3 => (u64::from(b & 0x3F), true),
            _ => match b {
                0x80 => {
                    let s = self.take(4)?;
                    (
                        u64::from(u32::from_be_bytes(
                            s.try_into().map_err(|_| RdbError::Length)?,
                        )),
                        false,
                    )
                }
                0x81 => {
                    let s = self.take(8)?;
                    (
                        u64::from_be_bytes(s.try_into().map_err(|_| RdbError::Length)?),
                        false,
                    )
                }
                _ => return Err(RdbError::Length),
            },
        })
    }

    /// A plain length (an encoded one is refused, as `rdbLoadLen` callers see RDB_LENERR
    /// only for I/O errors but never expect the encoded flag there).
    fn count(&mut self) -> Result<u64, RdbError> {
        let (n, _) = self.len()?;
        Ok(n)
    }

    /// `rdbGenericLoadStringObject`: raw, integer-encoded or LZF-compressed.
    fn string(&mut self) -> Result<Vec<u8>, RdbError> {
        let (len, encoded) = self.len()?;
        let s = if !encoded {
            if len > self.string_max {
                return Err(RdbError::TooLarge(self.string_max));
            }
            self.take(len)?.to_vec()
        } else {
            match len {
                0 => (self.byte()? as i8).to_string().into_bytes(),
                1 => {
                    let b: [u8; 2] = self.take(2)?.try_into().map_err(|_| RdbError::Truncated)?;
                    i16::from_le_bytes(b).to_string().into_bytes()
                }
                2 => {
                    let b: [u8; 4] = self.take(4)?.try_into().map_err(|_| RdbError::Truncated)?;
                    i32::from_le_bytes(b).to_string().into_bytes()
                }
                3 => {
                    let clen = self.count()?;
                    let ulen = self.count()?;
                    if ulen > self.string_max {
                        return Err(RdbError::TooLarge(self.string_max));
                    }
                    if ulen > self.budget {
                        return Err(RdbError::TooLarge(self.value_max));
                    }
                    let c = self.take(clen)?;
                    let ulen = usize::try_from(ulen).map_err(|_| RdbError::Lzf)?;
                    lzf::decompress(c, ulen).ok_or(RdbError::Lzf)?
                }
                _ => return Err(RdbError::StringEncoding),
            }
        };
        self.charge(s.len() as u64)?;
        Ok(s)
    }

    /// `rdbLoadBinaryDoubleValue`.
    fn binary_double(&mut self) -> Result<f64, RdbError> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(f64::from_le_bytes(a))
    }

    /// `rdbLoadDoubleValue`: a length byte (253 nan, 254 inf, 255 -inf) and `%lg` text.
    fn text_double(&mut self) -> Result<f64, RdbError> {
        let len = self.byte()?;
        match len {
            255 => Ok(f64::NEG_INFINITY),
            254 => Ok(f64::INFINITY),
            253 => Ok(f64::NAN),
            n => strtod_prefix(self.take(u64::from(n))?).ok_or(RdbError::Score),
        }
    }

    /// Capacity for `n` elements of at least `min_bytes` payload bytes each.
    fn capacity(&self, n: u64, min_bytes: usize) -> usize {
        usize::try_from(n)
            .unwrap_or(usize::MAX)
            .min(self.remaining() / min_bytes.max(1))
    }
}

/// A score in a packed sorted set: a number (`inf`, `-inf` and the like included), not NaN.
fn packed_score(e: PackedEntry<'_>) -> Result<f64, RdbError> {
    let v = match e {
        PackedEntry::Int(v) => v as f64,
        PackedEntry::Str(s) => std::str::from_utf8(s)
            .ok()
            .and_then(|s| s.parse::<f64>().ok())
            .ok_or(RdbError::Score)?,
    };
    if v.is_nan() {
        Err(RdbError::Score)
    } else {
        Ok(v)
    }
}

/// An entry of a listpack or a ziplist.
#[derive(Clone, Copy)]
enum PackedEntry<'a> {
    Int(i64),
    Str(&'a [u8]),
}

impl PackedEntry<'_> {
    fn to_bytes(self) -> Vec<u8> {
        match self {
            PackedEntry::Int(v) => v.to_string().into_bytes(),
            PackedEntry::Str(s) => s.to_vec(),
        }
    }
}

fn from_lp(e: listpack::Entry<'_>) -> PackedEntry<'_> {
    match e {
        listpack::Entry::Int(v) => PackedEntry::Int(v),
        listpack::Entry::Str(s) => PackedEntry::Str(s),
    }
}

fn from_zl(e: ziplist::Entry<'_>) -> PackedEntry<'_> {
    match e {
        ziplist::Entry::Int(v) => PackedEntry::Int(v),
        ziplist::Entry::Str(s) => PackedEntry::Str(s),
    }
}

/// Fails with `Duplicate(what)` when two items have the same key.
fn check_unique<T>(
    items: &[T],
    key: impl Fn(&T) -> &[u8],
    what: &'static str,
) -> Result<(), RdbError> {
    let mut keys: Vec<&[u8]> = items.iter().map(&key).collect();
    keys.sort_unstable();
    if keys.windows(2).any(|w| w.first() == w.get(1)) {
        return Err(RdbError::Duplicate(what));
    }
    Ok(())
}

/// Pairs of a packed hash or sorted set: an even number of entries, each key once.
fn pairs<'a>(
    entries: Vec<PackedEntry<'a>>,
    what: &'static str,
) -> Result<Vec<(PackedEntry<'a>, PackedEntry<'a>)>, RdbError> {
    if entries.len() % 2 != 0 {
        return Err(RdbError::Integrity(what));
    }
    let mut out = Vec::with_capacity(entries.len() / 2);
    let mut it = entries.into_iter();
    while let (Some(k), Some(v)) = (it.next(), it.next()) {
        out.push((k, v));
    }
    let keys: Vec<Vec<u8>> = out.iter().map(|(k, _)| k.to_bytes()).collect();
    check_unique(&keys, |k| k.as_slice(), what)?;
    Ok(out)
}

fn non_empty<T>(v: Vec<T>) -> Result<Vec<T>, RdbError> {
    if v.is_empty() {
        Err(RdbError::Empty)
    } else {
        Ok(v)
    }
}

/// Charges the decoded elements of a packed container (their bytes and overhead).
fn charge_entries(r: &mut Reader<'_>, entries: &[PackedEntry<'_>]) -> Result<(), RdbError> {
    for e in entries {
        let n = match e {
            PackedEntry::Int(_) => 20,
            PackedEntry::Str(s) => s.len() as u64,
        };
        r.charge(n)?;
    }
    Ok(())
}

/// Decodes a value of RDB type `ty` (`rdbLoadObject`). Modules are refused with
/// `RdbError::Type`: Meridian holds no module values.
fn decode_value(ty: u8, r: &mut Reader<'_>) -> Result<Value, RdbError> {
    match ty {
        t::STRING => Ok(Value::Str(r.string()?)),
        t::LIST => {
            let n = r.count()?;
            let mut items = Vec::with_capacity(r.capacity(n, 1));
            for _ in 0..n {
                items.push(r.string()?);
            }
            Ok(Value::List(non_empty(items)?))
        }
        t::SET => {
            let n = r.count()?;
            let mut items = Vec::with_capacity(r.capacity(n, 1));
            for _ in 0..n {
                items.push(r.string()?);
            }
            check_unique(&items, |m| m.as_slice(), "set members")?;
            Ok(Value::Set(non_empty(items)?))
        }
        t::ZSET | t::ZSET_2 => {
            let n = r.count()?;
            let min = if ty == t::ZSET_2 { 9 } else { 2 };
            let mut items = Vec::with_capacity(r.capacity(n, min));
            for _ in 0..n {
                let m = r.string()?;
                let s = if ty == t::ZSET_2 {
                    r.binary_double()?
                } else {
                    r.text_double()?
                };
                if s.is_nan() {
                    return Err(RdbError::Score);
                }
                items.push((m, s));
            }
            check_unique(&items, |(m, _)| m.as_slice(), "sorted set members")?;
            Ok(Value::ZSet(non_empty(items)?))
        }
        t::HASH => {
            let n = r.count()?;
            let mut items = Vec::with_capacity(r.capacity(n, 2));
            for _ in 0..n {
                let f = r.string()?;
                let v = r.string()?;
                items.push((f, v));
            }
            check_unique(&items, |(f, _)| f.as_slice(), "hash fields")?;
            Ok(Value::Hash(non_empty(items)?))
        }
        t::HASH_ZIPMAP => {
            let blob = r.string()?;
            let pairs = zipmap::parse(&blob)?;
            check_unique(&pairs, |(f, _)| f, "hash fields")?;
            let mut items = Vec::with_capacity(pairs.len());
            for (f, v) in pairs {
                r.charge((f.len() + v.len()) as u64)?;
                items.push((f.to_vec(), v.to_vec()));
            }
            Ok(Value::Hash(items))
        }
        t::LIST_ZIPLIST => {
            let blob = r.string()?;
            let entries: Vec<PackedEntry<'_>> = ziplist::parse(&blob, "list ziplist")?
                .into_iter()
                .map(from_zl)
                .collect();
            charge_entries(r, &entries)?;
            Ok(Value::List(non_empty(
                entries.into_iter().map(PackedEntry::to_bytes).collect(),
            )?))
        }
        t::SET_INTSET => {
            let blob = r.string()?;
            r.sanitized += 1;
            let ints = intset::parse(&blob)?;
            for _ in &ints {
                r.charge(20)?;
            }
            Ok(Value::Set(
                ints.iter().map(|v| v.to_string().into_bytes()).collect(),
            ))
        }
        t::ZSET_ZIPLIST | t::ZSET_LISTPACK => {
            let blob = r.string()?;
            let entries: Vec<PackedEntry<'_>> = if ty == t::ZSET_ZIPLIST {
                ziplist::parse(&blob, "zset ziplist")?
                    .into_iter()
                    .map(from_zl)
                    .collect()
            } else {
                listpack::parse(&blob, "zset listpack")?
                    .into_iter()
                    .map(from_lp)
                    .collect()
            };
            charge_entries(r, &entries)?;
            let mut items = Vec::with_capacity(entries.len() / 2);
            for (m, s) in pairs(entries, "sorted set members")? {
                items.push((m.to_bytes(), packed_score(s)?));
            }
            Ok(Value::ZSet(non_empty(items)?))
        }
        t::HASH_ZIPLIST | t::HASH_LISTPACK => {
            let blob = r.string()?;
            let entries: Vec<PackedEntry<'_>> = if ty == t::HASH_ZIPLIST {
                ziplist::parse(&blob, "hash ziplist")?
                    .into_iter()
                    .map(from_zl)
                    .collect()
            } else {
                listpack::parse(&blob, "hash listpack")?
                    .into_iter()
                    .map(from_lp)
                    .collect()
            };
            charge_entries(r, &entries)?;
            let items: Vec<(Vec<u8>, Vec<u8>)> = pairs(entries, "hash fields")?
                .into_iter()
                .map(|(f, v)| (f.to_bytes(), v.to_bytes()))
                .collect();
            Ok(Value::Hash(non_empty(items)?))
        }
        t::LIST_QUICKLIST | t::LIST_QUICKLIST_2 => decode_quicklist(ty, r),
        t::STREAM_LISTPACKS | t::STREAM_LISTPACKS_2 => Ok(Value::Stream(decode_stream(ty, r)?)),
        // Modules: see the function doc.
        _ => Err(RdbError::Type(ty)),
    }
}

/// Quicklist container kinds (`QUICKLIST_NODE_CONTAINER_*`).
const CONTAINER_PLAIN: u64 = 1;
const CONTAINER_PACKED: u64 = 2;

fn decode_quicklist(ty: u8, r: &mut Reader<'_>) -> Result<Value, RdbError> {
    let nodes = r.count()?;
    let mut items: Vec<Vec<u8>> = Vec::new();
    for _ in 0..nodes {
        let container = if ty == t::LIST_QUICKLIST_2 {
            let c = r.count()?;
            if c != CONTAINER_PACKED && c != CONTAINER_PLAIN {
                return Err(RdbError::Integrity("quicklist"));
            }
            c
        } else {
            CONTAINER_PACKED
        };
        let data = r.string()?;
        if data.is_empty() {
            return Err(RdbError::Integrity("quicklist"));
        }
        if container == CONTAINER_PLAIN {
            items.push(data);
            continue;
        }
        let entries: Vec<PackedEntry<'_>> = if ty == t::LIST_QUICKLIST_2 {
            listpack::parse(&data, "listpack")?
                .into_iter()
                .map(from_lp)
                .collect()
        } else {
            ziplist::parse(&data, "ziplist")?
                .into_iter()
                .map(from_zl)
                .collect()
        };
        charge_entries(r, &entries)?;
        items.extend(entries.into_iter().map(PackedEntry::to_bytes));
    }
    Ok(Value::List(non_empty(items)?))
}

/// `string2ll` for callers that classify members (re-exported for the server's encoders).
pub fn is_integer(s: &[u8]) -> bool {
    string2ll(s).is_some()
}

// ---------------------------------------------------------------------------------------------
// Streams

/// Entry flags in a stream node (`STREAM_ITEM_FLAG_*`).
pub const STREAM_ITEM_FLAG_DELETED: i64 = 1;
pub const STREAM_ITEM_FLAG_SAMEFIELDS: i64 = 2;

/// What the errors of the stream decoder name.
const STREAM: &str = "stream";

impl Reader<'_> {
    /// A 128-bit ID as the radix tree keys hold it: ms then seq, both big endian.
    fn raw_stream_id(&mut self) -> Result<StreamId, RdbError> {
        let b = self.take(16)?;
        let ms = b
            .get(..8)
            .and_then(|x| x.try_into().ok())
            .map(u64::from_be_bytes);
        let seq = b
            .get(8..)
            .and_then(|x| x.try_into().ok())
            .map(u64::from_be_bytes);
        ms.zip(seq).ok_or(RdbError::Truncated)
    }

    /// `rdbLoadMillisecondTime`: a little-endian `int64`.
    fn ms_time(&mut self) -> Result<i64, RdbError> {
        let b: [u8; 8] = self.take(8)?.try_into().map_err(|_| RdbError::Truncated)?;
        Ok(i64::from_le_bytes(b))
    }

    /// Two lengths: an ID (`rdbLoadLen` twice).
    fn len_id(&mut self) -> Result<StreamId, RdbError> {
        Ok((self.count()?, self.count()?))
    }
}

/// `lpGetIntegerIfValid`: an integer entry, or a string entry that reads as one.
fn lp_int(e: Option<&listpack::Entry<'_>>) -> Result<i64, RdbError> {
    match e {
        Some(listpack::Entry::Int(v)) => Ok(*v),
        Some(listpack::Entry::Str(s)) => string2ll(s).ok_or(RdbError::Integrity(STREAM)),
        None => Err(RdbError::Integrity(STREAM)),
    }
}

/// The entries of one stream node (`streamValidateListpackIntegrity` with `deep`, then the
/// live entries as the stream iterator reads them): the master entry (live count, deleted
/// count, the master fields, a 0), then per entry its flags, its ID as deltas from `master`,
/// its fields (the master's when flagged SAMEFIELDS, else a count and field/value pairs)
/// and its element count. Beyond Redis: the counts must match the entries.
fn decode_stream_node(
    r: &mut Reader<'_>,
    master: StreamId,
    lp: &[u8],
) -> Result<Vec<StreamEntry>, RdbError> {
    let bad = || RdbError::Integrity(STREAM);
    let items = listpack::parse(lp, "stream listpack")?;
    if items.is_empty() {
        return Err(bad());
    }
    let mut it = items.iter();
    let live = lp_int(it.next())?;
    let deleted = lp_int(it.next())?;
    let nmaster = lp_int(it.next())?;
    let nmaster = usize::try_from(nmaster).map_err(|_| bad())?;
    if nmaster > items.len() {
        return Err(bad());
    }
    let mut master_fields = Vec::with_capacity(nmaster);
    for _ in 0..nmaster {
        master_fields.push(it.next().ok_or_else(bad)?.to_bytes());
    }
    if lp_int(it.next())? != 0 {
        return Err(bad());
    }
    let total = live.checked_add(deleted).ok_or_else(bad)?;
    if live < 0 || deleted < 0 {
        return Err(bad());
    }
    let mut out = Vec::new();
    let (mut seen_live, mut seen_deleted) = (0i64, 0i64);
    for _ in 0..total {
        let flags = lp_int(it.next())?;
        let ms = master.0.wrapping_add(lp_int(it.next())? as u64);
        let seq = master.1.wrapping_add(lp_int(it.next())? as u64);
        let mut fields: Vec<(Vec<u8>, Vec<u8>)>;
        let count;
        if flags & STREAM_ITEM_FLAG_SAMEFIELDS != 0 {
            fields = Vec::with_capacity(nmaster);
            for f in &master_fields {
                fields.push((f.clone(), it.next().ok_or_else(bad)?.to_bytes()));
            }
            count = nmaster as i64 + 3;
        } else {
            let n = lp_int(it.next())?;
            let n = usize::try_from(n).map_err(|_| bad())?;
            if n > items.len() {
                return Err(bad());
            }
            fields = Vec::with_capacity(n);
            for _ in 0..n {
                let f = it.next().ok_or_else(bad)?.to_bytes();
                let v = it.next().ok_or_else(bad)?.to_bytes();
                fields.push((f, v));
            }
            count = 2 * n as i64 + 4;
        }
        if lp_int(it.next())? != count {
            return Err(bad());
        }
        if flags & STREAM_ITEM_FLAG_DELETED != 0 {
            seen_deleted += 1;
            continue;
        }
        seen_live += 1;
        let bytes: usize = fields.iter().map(|(f, v)| f.len() + v.len()).sum();
        r.charge(bytes as u64)?;
        out.push(((ms, seq), fields));
    }
    if it.next().is_some() || seen_live != live || seen_deleted != deleted {
        return Err(bad());
    }
    Ok(out)
}

/// `streamEstimateDistanceFromFirstEverEntry`: a group's read counter from its last ID, for
/// a payload that does not carry it (`RDB_TYPE_STREAM_LISTPACKS`).
fn estimate_entries_read(s: &Stream, id: StreamId) -> i64 {
    let len = s.entries.len() as u64;
    let added = s.entries_added as i64;
    if s.entries_added == 0 {
        return 0;
    }
    if len == 0 && id <= s.last_id {
        return added;
    }
    if id == s.last_id {
        return added;
    }
    if id > s.last_id {
        return -1;
    }
    if s.max_deleted == (0, 0) || s.max_deleted < s.first_id {
        if id < s.first_id {
            return added - len as i64;
        }
        if id == s.first_id {
            return added - len as i64 + 1;
        }
    }
    -1
}

/// `RDB_TYPE_STREAM_LISTPACKS` and `_2` (`rdbLoadObject`'s stream arm, deep sanitization):
/// the nodes (a 16-byte master ID and a listpack each), the length, the last ID, for `_2`
/// the first ID, the largest deleted ID and the entries added (for the older type: none
/// deleted, as many added as held), then the groups: name, last ID, for `_2` the read
/// counter (else estimated), the pending entries (ID, delivery time, count), the consumers
/// (name, seen time, the IDs they own). Refused: an empty node, IDs not increasing across the
/// nodes, a length other than the entries held, a last ID below the last entry, a duplicate
/// group, consumer or pending ID, a consumer owning an ID not pending or owned already, a
/// pending entry nobody owns.
fn decode_stream(ty: u8, r: &mut Reader<'_>) -> Result<Stream, RdbError> {
    let bad = || RdbError::Integrity(STREAM);
    let mut s = Stream::default();
    let nodes = r.count()?;
    for _ in 0..nodes {
        let key = r.string()?;
        let master: [u8; 16] = key.as_slice().try_into().map_err(|_| bad())?;
        let ms = master
            .get(..8)
            .and_then(|x| x.try_into().ok())
            .map(u64::from_be_bytes);
        let seq = master
            .get(8..)
            .and_then(|x| x.try_into().ok())
            .map(u64::from_be_bytes);
        let master = ms.zip(seq).ok_or_else(bad)?;
        let lp = r.string()?;
        r.sanitized += 1;
        for e in decode_stream_node(r, master, &lp)? {
            if s.entries.last().is_some_and(|l| l.0 >= e.0) {
                return Err(bad());
            }
            s.entries.push(e);
        }
    }
    let length = r.count()?;
    s.last_id = r.len_id()?;
    if length != s.entries.len() as u64 || s.entries.last().is_some_and(|l| l.0 > s.last_id) {
        return Err(bad());
    }
    if ty == t::STREAM_LISTPACKS_2 {
        s.first_id = r.len_id()?;
        s.max_deleted = r.len_id()?;
        s.entries_added = r.count()?;
    } else {
        s.entries_added = length;
        s.first_id = s.entries.first().map_or((u64::MAX, u64::MAX), |e| e.0);
    }
    let ngroups = r.count()?;
    for _ in 0..ngroups {
        let name = r.string()?;
        let last_id = r.len_id()?;
        let entries_read = if ty == t::STREAM_LISTPACKS_2 {
            r.count()? as i64
        } else {
            estimate_entries_read(&s, last_id)
        };
        let npel = r.count()?;
        let mut pel: Vec<(StreamId, i64, u64)> = Vec::with_capacity(r.capacity(npel, 17));
        for _ in 0..npel {
            let id = r.raw_stream_id()?;
            let time = r.ms_time()?;
            let count = r.count()?;
            r.charge(0)?;
            pel.push((id, time, count));
        }
        pel.sort_by_key(|p| p.0);
        if pel
            .windows(2)
            .any(|w| w.first().map(|p| p.0) == w.get(1).map(|p| p.0))
        {
            return Err(RdbError::Duplicate("stream PEL entries"));
        }
        let mut owner: Vec<Option<Vec<u8>>> = vec![None; pel.len()];
        let ncons = r.count()?;
        let mut consumers = Vec::with_capacity(r.capacity(ncons, 10));
        for _ in 0..ncons {
            let cname = r.string()?;
            let seen = r.ms_time()?;
            let n = r.count()?;
            for _ in 0..n {
                let id = r.raw_stream_id()?;
                let i = pel.binary_search_by_key(&id, |p| p.0).map_err(|_| bad())?;
                let slot = owner.get_mut(i).ok_or_else(bad)?;
                if slot.is_some() {
                    return Err(RdbError::Duplicate("stream PEL owners"));
                }
                *slot = Some(cname.clone());
            }
            consumers.push((cname, seen));
        }
        check_unique(&consumers, |c| c.0.as_slice(), "stream consumers")?;
        consumers.sort();
        let mut pending = Vec::with_capacity(pel.len());
        for ((id, delivery_time, delivery_count), who) in pel.into_iter().zip(owner) {
            pending.push(StreamPending {
                id,
                consumer: who.ok_or_else(bad)?,
                delivery_time,
                delivery_count,
            });
        }
        s.groups.push(StreamGroup {
            name,
            last_id,
            entries_read,
            consumers,
            pending,
        });
    }
    check_unique(&s.groups, |g| g.name.as_slice(), "stream consumer groups")?;
    s.groups.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Limits = Limits {
        string_bytes_max: 1 << 20,
        value_bytes_max: 1 << 24,
    };

    /// Appends the footer Redis writes.
    pub(crate) fn seal(mut body: Vec<u8>) -> Vec<u8> {
        body.extend_from_slice(&RDB_VERSION.to_le_bytes());
        let crc = CRC64.checksum(&body);
        body.extend_from_slice(&crc.to_le_bytes());
        body
    }

    #[test]
    fn footer_checks() {
        assert_eq!(verify_footer(b"short"), Err(RdbError::Footer));
        let good = seal(b"\x00\x03bar".to_vec());
        assert_eq!(verify_footer(&good), Ok(10));
        let mut bad_crc = good.clone();
        *bad_crc.last_mut().unwrap() ^= 1;
        assert_eq!(verify_footer(&bad_crc), Err(RdbError::Footer));
        let mut newer = b"\x00\x03bar".to_vec();
        newer.extend_from_slice(&11u16.to_le_bytes());
        let crc = CRC64.checksum(&newer);
        newer.extend_from_slice(&crc.to_le_bytes());
        assert_eq!(verify_footer(&newer), Err(RdbError::Footer));
    }

    #[test]
    fn redis_payloads_decode() {
        // Captured from Redis 7.0.15 (DUMP after SET / HSET / RPUSH / SADD / ZADD).
        let cases: Vec<(&[u8], Value)> = vec![
            (
                b"\x00\xc3\t(\x01aa\xe0\x1b\x00\x01aa\n\x00\xcf\t/\xaa\xae%\x83\x1d",
                Value::Str(vec![b'a'; 40]),
            ),
            (
                b"\x10\x16\x16\x00\x00\x00\x04\x00\x81a\x02\x01\x01\x81b\x02\x85hello\x06\xff\n\x00\xe8\xc5\xfe\x99\xee\x07\x95]",
                Value::Hash(vec![(b"a".to_vec(), b"1".to_vec()), (b"b".to_vec(), b"hello".to_vec())]),
            ),
            (
                b"\x12\x01\x02\x16\x16\x00\x00\x00\x04\x00\x81a\x02\x01\x01\x81b\x02\x85hello\x06\xff\n\x00\x04f-\x00\x97\x81\xa1\x97",
                Value::List(vec![b"a".to_vec(), b"1".to_vec(), b"b".to_vec(), b"hello".to_vec()]),
            ),
            (
                b"\x0b\x0e\x02\x00\x00\x00\x03\x00\x00\x00\x01\x00\x02\x00\x03\x00\n\x00\xa5\x02\\\xe2mnM\x1b",
                Value::Set(vec![b"1".to_vec(), b"2".to_vec(), b"3".to_vec()]),
            ),
            (
                b"\x11\x14\x14\x00\x00\x00\x04\x00\x81a\x02\x01\x01\x81b\x02\x832.5\x04\xff\n\x00\xd4Ln\xa4\xf6D\xd9\xd7",
                Value::ZSet(vec![(b"a".to_vec(), 1.0), (b"b".to_vec(), 2.5)]),
            ),
        ];
        for (payload, want) in cases {
            assert_eq!(decode_payload(payload, LIMITS).map(|d| d.value), Ok(want));
        }
    }

    #[test]
    fn hostile_payloads_are_refused() {
        let cases: Vec<(Vec<u8>, RdbError)> = vec![
            // A raw string claiming 2^32 bytes.
            (
                b"\x00\x80\xff\xff\xff\xff".to_vec(),
                RdbError::TooLarge(1 << 20),
            ),
            // A list claiming 2^63 elements with none there.
            (
                b"\x01\x81\x7f\xff\xff\xff\xff\xff\xff\xff".to_vec(),
                RdbError::Truncated,
            ),
            // Duplicate set members, hash fields, sorted-set members; a NaN score.
            (
                b"\x02\x02\x01a\x01a".to_vec(),
                RdbError::Duplicate("set members"),
            ),
            (
                b"\x04\x02\x01a\x01b\x01a\x01c".to_vec(),
                RdbError::Duplicate("hash fields"),
            ),
            (
                [
                    &b"\x05\x02\x01a"[..],
                    &1f64.to_le_bytes(),
                    b"\x01a",
                    &2f64.to_le_bytes(),
                ]
                .concat(),
                RdbError::Duplicate("sorted set members"),
            ),
            (
                [&b"\x05\x01\x01a"[..], &f64::NAN.to_le_bytes()].concat(),
                RdbError::Score,
            ),
            (b"\x03\x01\x01a\xfd".to_vec(), RdbError::Score),
            // Empty values, an unknown type, a stream of no nodes whose length (the footer's
            // first byte) says 10 entries, a module, an LZF length it cannot produce.
            (b"\x01\x00".to_vec(), RdbError::Empty),
            (b"\x08".to_vec(), RdbError::Type(8)),
            (b"\x13\x00".to_vec(), RdbError::Integrity("stream")),
            (b"\x07\x00".to_vec(), RdbError::Type(7)),
            (b"\x00\xc3\x02\x0a\x01ab".to_vec(), RdbError::Lzf),
            (
                b"\x00\xc3\x02\x80\x01\x00\x00\x00\x01ab".to_vec(),
                RdbError::TooLarge(1 << 20),
            ),
            // A quicklist node that is neither packed nor plain, an empty node.
            (
                b"\x12\x01\x03\x01a".to_vec(),
                RdbError::Integrity("quicklist"),
            ),
            (
                b"\x12\x01\x02\x00".to_vec(),
                RdbError::Integrity("quicklist"),
            ),
        ];
        for (body, want) in cases {
            assert_eq!(
                decode_payload(&seal(body.clone()), LIMITS),
                Err(want),
                "{body:?}"
            );
        }
    }

    #[test]
    fn old_encodings_decode() {
        use crate::ziplist::Entry as Z;
        use crate::ziplist::tests::build;
        let zl = build(&[Z::Str(b"x"), Z::Int(7)]);
        let mut body = vec![t::LIST_ZIPLIST, zl.len() as u8];
        body.extend_from_slice(&zl);
        assert_eq!(
            decode_payload(&seal(body), LIMITS).map(|d| d.value),
            Ok(Value::List(vec![b"x".to_vec(), b"7".to_vec()]))
        );
        let zl = build(&[Z::Str(b"m"), Z::Str(b"1.5"), Z::Str(b"n"), Z::Int(3)]);
        let mut body = vec![t::ZSET_ZIPLIST, zl.len() as u8];
        body.extend_from_slice(&zl);
        assert_eq!(
            decode_payload(&seal(body), LIMITS).map(|d| d.value),
            Ok(Value::ZSet(vec![
                (b"m".to_vec(), 1.5),
                (b"n".to_vec(), 3.0)
            ]))
        );
        let zm = b"\x01\x01a\x01\x00b\xff";
        let mut body = vec![t::HASH_ZIPMAP, zm.len() as u8];
        body.extend_from_slice(zm);
        assert_eq!(
            decode_payload(&seal(body), LIMITS).map(|d| d.value),
            Ok(Value::Hash(vec![(b"a".to_vec(), b"b".to_vec())]))
        );
        // Text scores: "2.5", inf, -inf.
        let body = b"\x03\x03\x01a\x032.5\x01b\xfe\x01c\xff".to_vec();
        assert_eq!(
            decode_payload(&seal(body), LIMITS).map(|d| d.value),
            Ok(Value::ZSet(vec![
                (b"a".to_vec(), 2.5),
                (b"b".to_vec(), f64::INFINITY),
                (b"c".to_vec(), f64::NEG_INFINITY),
            ]))
        );
    }

    #[test]
    fn the_value_budget_bounds_many_small_elements() {
        let mut body = vec![t::LIST, 0x80, 0, 1, 0, 0];
        body.extend_from_slice(&[0; 65536]);
        let small = Limits {
            string_bytes_max: 16,
            value_bytes_max: 1000,
        };
        assert!(matches!(
            decode_payload(&seal(body.clone()), small),
            Err(RdbError::TooLarge(_))
        ));
        assert!(decode_payload(&seal(body), LIMITS).is_ok());
    }

    /// Each limit admits exactly its value and refuses one more byte: a raw string, an LZF
    /// string (by its decompressed length), and the whole value (bytes plus
    /// `ELEMENT_OVERHEAD_BYTES` per element).
    #[test]
    fn limits_hold_at_the_limit_and_refuse_one_past() {
        let limits = |string_bytes_max, value_bytes_max| Limits {
            string_bytes_max,
            value_bytes_max,
        };
        let raw = crate::Encoder {
            compress: false,
            footer: true,
        }
        .string(&[b'a'; 100]);
        let lzf = crate::Encoder {
            compress: true,
            footer: true,
        }
        .string(&[b'x'; 1000]);
        assert_eq!(lzf.first(), Some(&t::STRING));
        assert_eq!(lzf.get(1), Some(&0xC3), "LZF-encoded");
        for (payload, n) in [(&raw, 100u64), (&lzf, 1000)] {
            let whole = n + ELEMENT_OVERHEAD_BYTES;
            assert!(decode_payload(payload, limits(n, whole)).is_ok(), "{n}");
            assert_eq!(
                decode_payload(payload, limits(n - 1, whole)),
                Err(RdbError::TooLarge(n - 1))
            );
            assert_eq!(
                decode_payload(payload, limits(n, whole - 1)),
                Err(RdbError::TooLarge(whole - 1))
            );
        }
        // A list of three 5-byte elements.
        let list = crate::Encoder::default().list(
            [&b"aaaaa"[..], b"bbbbb", b"ccccc"].into_iter(),
            crate::ListOptions::default(),
        );
        let elements = 3 * (5 + ELEMENT_OVERHEAD_BYTES);
        let decoded = decode_payload(&list, limits(1 << 20, 1 << 20)).map(|d| d.value);
        assert_eq!(
            decoded,
            Ok(Value::List(vec![
                b"aaaaa".to_vec(),
                b"bbbbb".to_vec(),
                b"ccccc".to_vec()
            ]))
        );
        // The smallest budget that admits it (the node's listpack is charged too, so at
        // least the elements' own charge); one byte less is refused.
        let mut at = 0;
        while decode_payload(&list, limits(1 << 20, at)).is_err() && at < 1000 {
            at += 1;
        }
        assert!(at >= elements && at < 1000, "{at}");
        assert!(decode_payload(&list, limits(1 << 20, at)).is_ok());
        assert_eq!(
            decode_payload(&list, limits(1 << 20, at - 1)),
            Err(RdbError::TooLarge(at - 1))
        );
    }
}
