//! A whole RDB file (version 10, as Redis 7.0.15's `rdbSaveRio` writes it): the header, aux
//! fields, function libraries, then per database the SELECTDB and RESIZEDB opcodes and its
//! keys, each a DUMP payload's value with its expire time, and the EOF opcode with the CRC-64
//! of everything before it. What `redis-cli --rdb` saves and `redis-server` loads. Pure: the
//! caller hands the payloads (`encode`) and says what goes in.

use crate::encode::put_len;
use crate::{CRC64, Encoder, FOOTER_BYTES, RDB_VERSION, RdbError, verify_footer};

/// `RDB_OPCODE_FUNCTION2`: a function library's code.
const OPCODE_FUNCTION2: u8 = 245;
/// `RDB_OPCODE_AUX`: a name and a value.
const OPCODE_AUX: u8 = 250;
/// `RDB_OPCODE_RESIZEDB`: the keys and the keys with an expire time of the database.
const OPCODE_RESIZEDB: u8 = 251;
/// `RDB_OPCODE_EXPIRETIME_MS`: the next key's expire time, Unix milliseconds.
const OPCODE_EXPIRETIME_MS: u8 = 252;
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
