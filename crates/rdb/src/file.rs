//! A whole RDB file (version 10, as Redis 7.0.15's `rdbSaveRio` writes it): the header, aux
//! fields, function libraries, then per database the SELECTDB and RESIZEDB opcodes and its
//! keys, each a DUMP payload's value with its expire time, and the EOF opcode with the CRC-64
//! of everything before it. What `redis-cli --rdb` saves and `redis-server` loads. Pure: the
//! caller hands the payloads (`encode`) and says what goes in (`FileBuilder`), or the file's
//! bytes to read (`FileReader`, every version Redis 7.0 loads: 1 to 10).

use crate::decode::FileCursor;
use crate::encode::put_len;
use crate::{
    CRC64, Crc, Encoder, FOOTER_BYTES, Limits, RDB_VERSION, RdbError, Value, verify_footer,
};

/// `RDB_OPCODE_FUNCTION2`: a function library's code.
const OPCODE_FUNCTION2: u8 = 245;
/// `RDB_OPCODE_FUNCTION`: the library format of Redis 7.0's release candidates, which 7.0.15
/// refuses too.
const OPCODE_FUNCTION_RC: u8 = 246;
/// `RDB_OPCODE_MODULE_AUX`: a module's data.
const OPCODE_MODULE_AUX: u8 = 247;
/// `RDB_OPCODE_IDLE`: the next key's LRU idle time, seconds.
const OPCODE_IDLE: u8 = 248;
/// `RDB_OPCODE_FREQ`: the next key's LFU counter.
const OPCODE_FREQ: u8 = 249;
/// `RDB_OPCODE_AUX`: a name and a value.
const OPCODE_AUX: u8 = 250;
/// `RDB_OPCODE_RESIZEDB`: the keys and the keys with an expire time of the database.
const OPCODE_RESIZEDB: u8 = 251;
/// `RDB_OPCODE_EXPIRETIME_MS`: the next key's expire time, Unix milliseconds.
const OPCODE_EXPIRETIME_MS: u8 = 252;
/// `RDB_OPCODE_EXPIRETIME`: the next key's expire time, Unix seconds (files before RDB 3).
const OPCODE_EXPIRETIME: u8 = 253;
/// `RDB_OPCODE_SELECTDB`: the database of the keys that follow.
const OPCODE_SELECTDB: u8 = 254;
/// `RDB_OPCODE_EOF`.
const OPCODE_EOF: u8 = 255;

/// Builds an RDB file in memory, in Redis's order: `new` (header and aux fields), `function`
/// for each library, then for each database with keys `database` and its `key`s, `finish`.
#[derive(Debug)]
pub struct FileBuilder {
    out: Vec<u8>,
    enc: Encoder,
}

impl FileBuilder {
    /// The header (`REDIS0010`) and the aux fields, names and values in that order.
    pub fn new(enc: Encoder, aux: &[(&str, &[u8])]) -> FileBuilder {
        let mut out = format!("REDIS{RDB_VERSION:04}").into_bytes();
        for (name, value) in aux {
            out.push(OPCODE_AUX);
            enc.put_string(&mut out, name.as_bytes());
            enc.put_string(&mut out, value);
        }
        FileBuilder { out, enc }
    }

    /// A function library, by its code (`FUNCTION LOAD`'s text).
    pub fn function(&mut self, code: &[u8]) {
        self.out.push(OPCODE_FUNCTION2);
        self.enc.put_string(&mut self.out, code);
    }

    /// Starts database `db`, which holds `keys` keys, `expires` of them with an expire time.
    pub fn database(&mut self, db: u64, keys: u64, expires: u64) {
        self.out.push(OPCODE_SELECTDB);
        put_len(&mut self.out, db);
        self.out.push(OPCODE_RESIZEDB);
        put_len(&mut self.out, keys);
        put_len(&mut self.out, expires);
    }

    /// A key of the current database (`put_key`).
    pub fn key(
        &mut self,
        key: &[u8],
        expire_ms: Option<u64>,
        payload: &[u8],
    ) -> Result<(), RdbError> {
        put_key(&mut self.out, self.enc, key, expire_ms, payload)
    }

    /// Keys of the current database that `put_key` encoded elsewhere (each shard of a
    /// server encodes its own).
    pub fn records(&mut self, records: &[u8]) {
        self.out.extend_from_slice(records);
    }

    /// The EOF opcode and the checksum: the file.
    pub fn finish(mut self) -> Vec<u8> {
        self.out.push(OPCODE_EOF);
        let crc = CRC64.checksum(&self.out);
        self.out.extend_from_slice(&crc.to_le_bytes());
        self.out
    }
}

/// Appends a key's record to `out`: its expire time (Unix milliseconds), then its value as a
/// DUMP payload, whose footer is checked and left out, under the key's name.
pub fn put_key(
    out: &mut Vec<u8>,
    enc: Encoder,
    key: &[u8],
    expire_ms: Option<u64>,
    payload: &[u8],
) -> Result<(), RdbError> {
    verify_footer(payload)?;
    let value = payload
        .get(..payload.len().saturating_sub(FOOTER_BYTES))
        .ok_or(RdbError::Footer)?;
    put_value(out, enc, key, expire_ms, value)
}

/// `put_key` of a value without a footer (`Encoder::for_file`'s): its type byte, then the
/// value.
pub fn put_value(
    out: &mut Vec<u8>,
    enc: Encoder,
    key: &[u8],
    expire_ms: Option<u64>,
    value: &[u8],
) -> Result<(), RdbError> {
    let (&kind, body) = value.split_first().ok_or(RdbError::Empty)?;
    if let Some(ms) = expire_ms {
        out.push(OPCODE_EXPIRETIME_MS);
        out.extend_from_slice(&ms.to_le_bytes());
    }
    out.push(kind);
    enc.put_string(out, key);
    out.extend_from_slice(body);
    Ok(())
}

/// Why an RDB file cannot be loaded: Redis's load errors, each with the byte offset of the
/// record where it was found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FileError {
    #[error("wrong signature: not an RDB file")]
    Signature,
    #[error("can't handle RDB format version {0}")]
    Version(u32),
    #[error("module data at byte {0}: Meridian loads no modules")]
    Module(usize),
    #[error("pre-release function format not supported (byte {0})")]
    FunctionRc(usize),
    #[error("{error} (record at byte {at})")]
    Record { at: usize, error: RdbError },
    #[error("wrong RDB checksum: the data's is {computed:016x}, the file says {stored:016x}")]
    Checksum { computed: u64, stored: u64 },
}

/// One record of an RDB file, in file order.
#[derive(Debug, Clone, PartialEq)]
pub enum Record<'a> {
    /// An aux field (`redis-ver`, `ctime`, ...), which loaders skip when they do not know it.
    Aux { name: Vec<u8>, value: Vec<u8> },
    /// A function library's code (`FUNCTION LOAD`'s text).
    Function(Vec<u8>),
    /// SELECTDB: the keys that follow are of database `db`.
    Database(u64),
    /// A key of the current database.
    Key(Key<'a>),
    /// A key whose value holds no element, which Redis skips (an old bug wrote such keys).
    EmptyKey { db: u64, name: Vec<u8> },
}

/// A key of an RDB file, with what the opcodes before it said.
#[derive(Debug, Clone, PartialEq)]
pub struct Key<'a> {
    pub db: u64,
    pub name: Vec<u8>,
    /// Its expire time, Unix milliseconds (may be past: loading decides).
    pub expire_ms: Option<i64>,
    /// Its LRU idle time, seconds (`RDB_OPCODE_IDLE`).
    pub idle_s: Option<u64>,
    /// Its LFU counter (`RDB_OPCODE_FREQ`).
    pub freq: Option<u8>,
    pub value: Value,
    /// The value's RDB type byte.
    pub kind: u8,
    /// The value as the file encodes it (after the key's name): with `kind` before it, a DUMP
    /// payload without its footer (`FileReader::payload` makes the payload).
    pub body: &'a [u8],
}

/// Reads an RDB file record by record, each value decoded and validated as RESTORE validates
/// a payload, within `Limits` per record. The checksum (files of version 5 and later) is
/// checked when the EOF opcode is read, so a caller that must not act on a damaged file reads
/// every record first. Anything after the checksum is not looked at, as in Redis.
#[derive(Debug)]
pub struct FileReader<'a> {
    file: &'a [u8],
    cur: FileCursor<'a>,
    version: u16,
    crc: Crc,
    db: u64,
    done: bool,
}

impl<'a> FileReader<'a> {
    /// Checks the signature and the version (`REDIS` and 1 to 10, as Redis 7.0 loads).
    pub fn new(file: &'a [u8], limits: Limits, crc: Crc) -> Result<FileReader<'a>, FileError> {
        let head = file.get(..9).ok_or(FileError::Signature)?;
        let (magic, digits) = head.split_at(5);
        if magic != b"REDIS" {
            return Err(FileError::Signature);
        }
        // Redis's atoi: the digits it finds (a version with other bytes reads as what precedes
        // them, and is then refused as out of range when it is 0).
        let version = digits
            .iter()
            .take_while(|b| b.is_ascii_digit())
            .fold(0u32, |v, b| v * 10 + u32::from(b - b'0'));
        if !(1..=u32::from(RDB_VERSION)).contains(&version) {
            return Err(FileError::Version(version));
        }
        Ok(FileReader {
            file,
            cur: FileCursor::new(file, 9, limits),
            version: version as u16,
            crc,
            db: 0,
            done: false,
        })
    }

    /// The file's RDB version.
    pub fn version(&self) -> u16 {
        self.version
    }

    /// A key's value as a DUMP payload (what RESTORE takes): its type byte and encoding, the
    /// file's RDB version and the CRC-64.
    pub fn payload(&self, key: &Key<'_>) -> Vec<u8> {
        let mut p = Vec::with_capacity(1 + key.body.len() + FOOTER_BYTES);
        p.push(key.kind);
        p.extend_from_slice(key.body);
        p.extend_from_slice(&self.version.to_le_bytes());
        let crc = CRC64.checksum(&p);
        p.extend_from_slice(&crc.to_le_bytes());
        p
    }

    /// The next record; `None` after the EOF opcode and a good checksum.
    pub fn next_record(&mut self) -> Result<Option<Record<'a>>, FileError> {
        if self.done {
            return Ok(None);
        }
        let (mut expire_ms, mut idle_s, mut freq) = (None, None, None);
        loop {
            let at = self.cur.pos();
            let rec = |error| FileError::Record { at, error };
            let op = self.cur.byte().map_err(rec)?;
            match op {
                OPCODE_EXPIRETIME => {
                    let b = self.cur.take(4).map_err(rec)?;
                    let secs =
                        i32::from_le_bytes(b.try_into().map_err(|_| rec(RdbError::Truncated))?);
                    expire_ms = Some(i64::from(secs) * 1000);
                }
                OPCODE_EXPIRETIME_MS => {
                    let b = self.cur.take(8).map_err(rec)?;
                    expire_ms = Some(i64::from_le_bytes(
                        b.try_into().map_err(|_| rec(RdbError::Truncated))?,
                    ));
                }
                OPCODE_FREQ => freq = Some(self.cur.byte().map_err(rec)?),
                OPCODE_IDLE => idle_s = Some(self.cur.count().map_err(rec)?),
                OPCODE_EOF => return self.finish(at + 1),
                OPCODE_SELECTDB => {
                    self.db = self.cur.count().map_err(rec)?;
                    return Ok(Some(Record::Database(self.db)));
                }
                OPCODE_RESIZEDB => {
                    self.cur.count().map_err(rec)?;
                    self.cur.count().map_err(rec)?;
                }
                OPCODE_AUX => {
                    let name = self.cur.string().map_err(rec)?;
                    let value = self.cur.string().map_err(rec)?;
                    return Ok(Some(Record::Aux { name, value }));
                }
                OPCODE_MODULE_AUX => return Err(FileError::Module(at)),
                OPCODE_FUNCTION_RC => return Err(FileError::FunctionRc(at)),
                OPCODE_FUNCTION2 => {
                    return Ok(Some(Record::Function(self.cur.string().map_err(rec)?)));
                }
                ty => {
                    if ty == crate::rdb_type::MODULE || ty == crate::rdb_type::MODULE_2 {
                        return Err(FileError::Module(at));
                    }
                    let name = self.cur.string().map_err(rec)?;
                    let value_at = self.cur.pos();
                    let value = match self.cur.value(ty) {
                        Ok(v) => v,
                        Err(RdbError::Empty) => {
                            return Ok(Some(Record::EmptyKey { db: self.db, name }));
                        }
                        Err(error) => return Err(FileError::Record { at, error }),
                    };
                    let body = self.file.get(value_at..self.cur.pos()).unwrap_or_default();
                    return Ok(Some(Record::Key(Key {
                        db: self.db,
                        name,
                        expire_ms,
                        idle_s,
                        freq,
                        value,
                        kind: ty,
                        body,
                    })));
                }
            }
        }
    }

    /// After the EOF opcode (ending at `eof_end`): the checksum of files of version 5 and
    /// later, which 0 means was not computed (Redis's `rdbchecksum no`).
    fn finish(&mut self, eof_end: usize) -> Result<Option<Record<'a>>, FileError> {
        self.done = true;
        if self.version < 5 {
            return Ok(None);
        }
        let at = self.cur.pos();
        let b = self
            .cur
            .take(8)
            .map_err(|error| FileError::Record { at, error })?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        let stored = u64::from_le_bytes(a);
        if stored == 0 || self.crc == Crc::Skip {
            return Ok(None);
        }
        let computed = CRC64.checksum(self.file.get(..eof_end).unwrap_or_default());
        if computed != stored {
            return Err(FileError::Checksum { computed, stored });
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ListOptions;

    #[test]
    fn a_file_has_redis_layout() {
        let enc = Encoder::default();
        let mut f = FileBuilder::new(enc, &[("redis-ver", b"7.0.15"), ("redis-bits", b"64")]);
        f.function(b"#!lua name=lib\n");
        f.database(0, 1, 1);
        f.key(b"k", Some(1_000), &enc.string(b"v")).unwrap();
        let file = f.finish();
        assert!(
            file.starts_with(b"REDIS0010\xfa\x09redis-ver\x067.0.15\xfa\x0aredis-bits\xc0\x40")
        );
        let body = &file[..file.len() - 8];
        assert_eq!(CRC64.checksum(body).to_le_bytes(), file[file.len() - 8..]);
        // SELECTDB 0, RESIZEDB 1 1, the expire time, a string (type 0) `k` holding `v`, EOF.
        let want = b"\xfe\x00\xfb\x01\x01\xfc\xe8\x03\x00\x00\x00\x00\x00\x00\x00\x01k\x01v\xff";
        assert!(
            body.ends_with(want),
            "{:?}",
            &body[body.len() - want.len()..]
        );
        // A value without a footer makes the same record as its payload.
        let (mut sealed, mut bare) = (Vec::new(), Vec::new());
        put_key(&mut sealed, enc, b"k", Some(7), &enc.string(&[b'x'; 100])).unwrap();
        put_value(
            &mut bare,
            enc,
            b"k",
            Some(7),
            &enc.for_file().string(&[b'x'; 100]),
        )
        .unwrap();
        assert_eq!(sealed, bare);
        // A payload whose footer is damaged is refused.
        let mut bad = enc.string(b"v");
        let last = bad.len() - 1;
        bad[last] ^= 1;
        assert!(f_key_err(&bad));
    }

    fn f_key_err(payload: &[u8]) -> bool {
        let mut f = FileBuilder::new(Encoder::default(), &[]);
        f.key(b"k", None, payload).is_err()
    }

    const LIMITS: Limits = Limits {
        string_bytes_max: 1 << 20,
        value_bytes_max: 1 << 22,
    };

    fn read_all(file: &[u8], crc: Crc) -> Result<Vec<Record<'_>>, FileError> {
        let mut r = FileReader::new(file, LIMITS, crc)?;
        let mut out = Vec::new();
        while let Some(rec) = r.next_record()? {
            out.push(rec);
        }
        Ok(out)
    }

    /// A file of every kind of record, as `FileBuilder` writes it.
    fn sample() -> Vec<u8> {
        let enc = Encoder::default();
        let mut f = FileBuilder::new(enc, &[("redis-ver", b"7.0.15")]);
        f.function(b"#!lua name=lib\nredis.register_function('f', function() return 1 end)");
        f.database(0, 2, 1);
        f.key(b"s", Some(1_700_000_000_123), &enc.string(b"v"))
            .unwrap();
        let items: [&[u8]; 3] = [b"a", b"1", b"c"];
        f.key(
            b"l",
            None,
            &enc.list(items.iter().copied(), ListOptions::default()),
        )
        .unwrap();
        f.database(3, 1, 0);
        f.key(
            b"h",
            None,
            &enc.hash([(&b"f"[..], &b"x"[..])].into_iter(), true),
        )
        .unwrap();
        f.finish()
    }

    #[test]
    fn reads_back_what_the_builder_wrote() {
        let file = sample();
        let recs = read_all(&file, Crc::Verify).unwrap();
        let mut it = recs.iter();
        assert_eq!(
            it.next(),
            Some(&Record::Aux {
                name: b"redis-ver".to_vec(),
                value: b"7.0.15".to_vec()
            })
        );
        assert!(matches!(it.next(), Some(Record::Function(c)) if c.starts_with(b"#!lua name=lib")));
        assert_eq!(it.next(), Some(&Record::Database(0)));
        let Some(Record::Key(s)) = it.next() else {
            panic!("a key")
        };
        assert_eq!(
            (s.db, &s.name[..], s.expire_ms, &s.value),
            (
                0,
                &b"s"[..],
                Some(1_700_000_000_123),
                &Value::Str(b"v".to_vec())
            )
        );
        let Some(Record::Key(l)) = it.next() else {
            panic!("a key")
        };
        assert_eq!(l.expire_ms, None, "an expire time belongs to one key only");
        assert_eq!(
            l.value,
            Value::List(vec![b"a".to_vec(), b"1".to_vec(), b"c".to_vec()])
        );
        assert_eq!(it.next(), Some(&Record::Database(3)));
        let Some(Record::Key(h)) = it.next() else {
            panic!("a key")
        };
        assert_eq!(h.db, 3);
        assert_eq!(h.value, Value::Hash(vec![(b"f".to_vec(), b"x".to_vec())]));
        assert_eq!(it.next(), None);
        // A key's payload is the DUMP payload of its value.
        let r = FileReader::new(&file, LIMITS, Crc::Verify).unwrap();
        let enc = Encoder::default();
        assert_eq!(r.payload(s), enc.string(b"v"));
        assert_eq!(
            crate::decode_payload(&r.payload(l), LIMITS).unwrap().value,
            l.value
        );
    }

    #[test]
    fn damage_is_named() {
        let file = sample();
        // The checksum: a flipped byte of the data, and a flipped byte of the checksum.
        let mut bad = file.clone();
        let i = bad.len() - 12;
        bad[i] ^= 0x20;
        assert!(matches!(
            read_all(&bad, Crc::Verify),
            Err(FileError::Checksum { .. } | FileError::Record { .. })
        ));
        let mut bad = file.clone();
        let last = bad.len() - 1;
        bad[last] ^= 1;
        assert!(matches!(
            read_all(&bad, Crc::Verify),
            Err(FileError::Checksum { .. })
        ));
        assert!(
            read_all(&bad, Crc::Skip).is_ok(),
            "unless checksums are skipped"
        );
        // A checksum of 0 was not computed (rdbchecksum no): not checked.
        let mut zero = file.clone();
        let n = zero.len();
        zero[n - 8..].fill(0);
        assert!(read_all(&zero, Crc::Verify).is_ok());
        // Cut anywhere: an error, never a panic or a short read taken as the whole file.
        for cut in 0..file.len() {
            assert!(read_all(&file[..cut], Crc::Verify).is_err(), "cut at {cut}");
        }
        // Signature and version.
        assert_eq!(
            read_all(b"RADIS0010\xff", Crc::Verify).unwrap_err(),
            FileError::Signature
        );
        assert_eq!(
            read_all(b"REDIS0011\xff", Crc::Verify).unwrap_err(),
            FileError::Version(11)
        );
        assert_eq!(
            read_all(b"REDIS0000\xff", Crc::Verify).unwrap_err(),
            FileError::Version(0)
        );
        // Module data and the release candidates' functions are refused.
        assert_eq!(
            read_all(b"REDIS0010\xf7", Crc::Verify).unwrap_err(),
            FileError::Module(9)
        );
        assert_eq!(
            read_all(b"REDIS0010\x07\x01k", Crc::Verify).unwrap_err(),
            FileError::Module(9)
        );
        assert_eq!(
            read_all(b"REDIS0010\xf6", Crc::Verify).unwrap_err(),
            FileError::FunctionRc(9)
        );
        // An unknown type byte.
        assert!(matches!(
            read_all(b"REDIS0010\x30\x01k\x01v\xff", Crc::Verify).unwrap_err(),
            FileError::Record {
                at: 9,
                error: RdbError::Type(0x30)
            }
        ));
    }

    #[test]
    fn old_versions_load_as_redis_loads_them() {
        // RDB 4: no checksum after EOF; EXPIRETIME in seconds; IDLE and FREQ before a key.
        let file = b"REDIS0004\xfe\x00\xfd\x10\x00\x00\x00\xf8\x05\xf9\x07\x00\x01k\x01v\xff";
        let recs = read_all(file, Crc::Verify).unwrap();
        let Some(Record::Key(k)) = recs.get(1) else {
            panic!("{recs:?}")
        };
        assert_eq!(
            (k.expire_ms, k.idle_s, k.freq),
            (Some(16_000), Some(5), Some(7))
        );
        // An empty value is skipped, as Redis skips it (an old bug wrote such keys).
        let file = b"REDIS0004\xfe\x00\x02\x01k\x00\xff";
        assert_eq!(
            read_all(file, Crc::Verify).unwrap().get(1),
            Some(&Record::EmptyKey {
                db: 0,
                name: b"k".to_vec()
            })
        );
    }

    /// A dump.rdb Redis 7.0.15 saved: strings (text, integer, 300 bytes), a TTL, lists,
    /// sets, hashes and sorted sets in both of their encodings, a HyperLogLog, a stream with
    /// a consumer group and a pending entry, a key in database 3 and a function library
    /// (made with redis-cli, `SAVE`).
    const REDIS_FILE: &[u8] = include_bytes!("../testdata/redis-7.0.15.rdb");

    #[test]
    fn reads_a_file_redis_saved() {
        let recs = read_all(REDIS_FILE, Crc::Verify).unwrap();
        let r = FileReader::new(REDIS_FILE, LIMITS, Crc::Verify).unwrap();
        assert_eq!(r.version(), 10);
        let mut keys = std::collections::BTreeMap::new();
        let mut functions = 0;
        for rec in &recs {
            match rec {
                Record::Key(k) => {
                    let back = crate::decode_payload(&r.payload(k), LIMITS).unwrap();
                    assert_eq!(back.value, k.value);
                    keys.insert((k.db, k.name.clone()), (k.value.clone(), k.expire_ms));
                }
                Record::Function(code) => {
                    functions += 1;
                    assert!(code.starts_with(b"#!lua name=lib1"));
                }
                _ => {}
            }
        }
        assert_eq!(functions, 1);
        assert_eq!(keys.len(), 16, "{:?}", keys.keys());
        let get = |db: u64, k: &str| keys.get(&(db, k.as_bytes().to_vec())).cloned().unwrap();
        assert_eq!(get(0, "s1").0, Value::Str(b"hello".to_vec()));
        assert_eq!(get(0, "n1").0, Value::Str(b"12345".to_vec()));
        assert_eq!(get(0, "big").0, Value::Str(vec![b'x'; 300]));
        assert!(get(0, "ttl1").1.is_some_and(|at| at > 1_700_000_000_000));
        let list = Value::List(vec![b"a".to_vec(), b"b".to_vec(), b"3".to_vec()]);
        assert_eq!(get(0, "l1").0, list);
        let abc = Value::List(vec![b"a".to_vec(), b"b".to_vec(), b"c".to_vec()]);
        assert_eq!(get(0, "l2").0, abc, "a quicklist of one element per node");
        assert!(matches!(get(0, "z2").0, Value::ZSet(z) if z.len() == 2));
        assert!(matches!(get(0, "h2").0, Value::Hash(h) if h.len() == 2));
        assert!(matches!(get(0, "s2").0, Value::Set(m) if m.len() == 2));
        assert!(matches!(get(0, "st").0, Value::Stream(s) if s.groups.len() == 1));
        let other = get(3, "other");
        assert_eq!(other.0, Value::Str(b"1".to_vec()));
        assert!(other.1.is_some());
    }

    #[test]
    fn any_flipped_bit_is_an_error_or_a_file_of_valid_payloads() {
        for file in [sample(), REDIS_FILE.to_vec()] {
            for i in 0..file.len() {
                for bit in 0..8 {
                    let mut f = file.clone();
                    f[i] ^= 1 << bit;
                    let Ok(mut r) = FileReader::new(&f, LIMITS, Crc::Skip) else {
                        continue;
                    };
                    while let Ok(Some(rec)) = r.next_record() {
                        if let Record::Key(k) = rec {
                            let back = crate::decode_payload(&r.payload(&k), LIMITS).unwrap();
                            assert_eq!(back.value, k.value);
                        }
                    }
                }
            }
        }
    }
}
