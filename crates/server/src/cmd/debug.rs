//! DEBUG OBJECT, PROTOCOL, DIGEST and DIGEST-VALUE (Redis 7.0 `debug.c`); DEBUG itself and
//! its other subcommands are in `server`.
//!
//! DIGEST and DIGEST-VALUE compute Redis's own dataset digest (SHA1 mixed and xored per key,
//! element and expiry exactly as `xorObjectDigest`), so the same data gives the same digest on
//! Meridian and on Redis. CRDT.DIGEST is Meridian's digest for comparing sites.

use meridian_crdt::{KeyState, StrView, StreamId, TypeTag};

use super::{Ctx, args::eq_ic};
use crate::error::CmdError;
use crate::keyspace::Entry;
use crate::resp::reply::{Proto, format_double};
use crate::sha1::sha1;

/// DEBUG OBJECT key: Redis's status line. `serializedlength` is the length of the key's
/// state in Meridian's snapshot encoding (Meridian writes no RDB); a list shows no quicklist
/// fields (Meridian's lists are no quicklist).
pub fn object(ctx: &mut Ctx<'_>, key: &[u8]) -> Result<(), CmdError> {
    let db = ctx.db();
    let now = ctx.now_ms;
    let lfu = ctx.shard.lfu;
    let limits = super::keys::EncodingLimits::of(&ctx.shard.config);
    let Some(e) = ctx.shard.lookup_quiet(db, key, now) else {
        return Err(CmdError::NoSuchKey);
    };
    let mut encoded = Vec::new();
    e.state.encode_state(&mut encoded);
    let idle = if lfu {
        0
    } else {
        super::keys::idle_seconds(e.lru_s, now)
    };
    let line = format!(
        "Value at:{:p} refcount:1 encoding:{} serializedlength:{} lru:{} lru_seconds_idle:{}",
        e as *const Entry,
        super::keys::encoding_name(e, limits),
        encoded.len(),
        e.lru_s,
        idle
    );
    ctx.out.simple(&line);
    Ok(())
}

/// DEBUG PROTOCOL type: one reply of each RESP type, as Redis sends it.
pub fn protocol(ctx: &mut Ctx<'_>, name: &[u8]) -> Result<(), CmdError> {
    let out = &mut *ctx.out;
    let resp3 = out.proto == Proto::Resp3;
    if eq_ic(name, "string") {
        out.bulk(b"Hello World");
    } else if eq_ic(name, "integer") {
        out.int(12345);
    } else if eq_ic(name, "double") {
        // Redis's test value (not pi).
        #[allow(clippy::approx_constant)]
        out.double(3.141);
    } else if eq_ic(name, "bignum") {
        let n = b"1234567999999999999999999999999999999";
        if resp3 {
            out.raw(b"(");
            out.raw(n);
            out.raw(b"\r\n");
        } else {
            out.bulk(n);
        }
    } else if eq_ic(name, "null") {
        out.null();
    } else if eq_ic(name, "array") {
        out.array(3);
        for j in 0..3 {
            out.int(j);
        }
    } else if eq_ic(name, "set") {
        out.set(3);
        for j in 0..3 {
            out.int(j);
        }
    } else if eq_ic(name, "map") {
        out.map(3);
        for j in 0..3 {
            out.int(j);
            out.boolean(j == 1);
        }
    } else if eq_ic(name, "attrib") {
        if resp3 {
            out.raw(b"|1\r\n");
            out.bulk(b"key-popularity");
            out.array(2);
            out.bulk(b"key:123");
            out.int(90);
        }
        out.bulk(b"Some real reply following the attribute");
    } else if eq_ic(name, "push") {
        if !resp3 {
            return Err(CmdError::Err(
                "RESP2 is not supported by this command".to_string(),
            ));
        }
        out.push(2);
        out.bulk(b"server-cpu-usage");
        out.int(42);
        out.bulk(b"Some real reply following the push reply");
    } else if eq_ic(name, "true") {
        out.boolean(true);
    } else if eq_ic(name, "false") {
        out.boolean(false);
    } else if eq_ic(name, "verbatim") {
        out.verbatim(b"txt", b"This is a verbatim\nstring");
    } else {
        return Err(CmdError::Err("Wrong protocol type name. Please use one of the following: string|integer|double|bignum|null|array|set|map|attrib|push|verbatim|true|false".to_string()));
    }
    Ok(())
}

/// DEBUG DIGEST: Redis's digest of the whole dataset (40 hex digits; zeros when empty).
pub fn digest(ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
    let mut total = [0u8; 20];
    for (i, d) in ctx.shard.dbs.iter().enumerate() {
        if d.is_empty() {
            continue;
        }
        mix_digest(&mut total, &(i as u32).to_be_bytes());
        for e in d.table.iter().filter(|e| !e.state.is_empty()) {
            let mut one = [0u8; 20];
            mix_digest(&mut one, &e.key);
            xor_object_digest(&mut one, &e.state);
            xor_digest(&mut total, &one);
        }
    }
    ctx.out.simple(&hex(&total));
    Ok(())
}

/// DEBUG DIGEST-VALUE key ...: the digest of each key's value (zeros for a missing key),
/// logically expired keys included, as in Redis.
pub fn digest_value(ctx: &mut Ctx<'_>, keys: &[&[u8]]) -> Result<(), CmdError> {
    let db = ctx.db();
    let hashes: Vec<[u8; 20]> = keys
        .iter()
        .map(|k| {
            let mut d = [0u8; 20];
            let hash = ctx.shard.hash_key(k);
            if let Some(e) = ctx
                .shard
                .dbs
                .get(db)
                .and_then(|t| t.get(hash, k))
                .filter(|e| !e.state.is_empty())
            {
                xor_object_digest(&mut d, &e.state);
            }
            d
        })
        .collect();
    ctx.out.array(hashes.len());
    for d in &hashes {
        ctx.out.simple(&hex(d));
    }
    Ok(())
}

fn hex(d: &[u8; 20]) -> String {
    d.iter().map(|b| format!("{b:02x}")).collect()
}

fn xor_into(d: &mut [u8; 20], h: &[u8; 20]) {
    for (a, b) in d.iter_mut().zip(h) {
        *a ^= b;
    }
}

/// `xorDigest`: digest ^= SHA1(data).
fn xor_digest(d: &mut [u8; 20], data: &[u8]) {
    xor_into(d, &sha1(data));
}

/// `mixDigest`: digest = SHA1(digest ^ SHA1(data)).
fn mix_digest(d: &mut [u8; 20], data: &[u8]) {
    xor_digest(d, data);
    *d = sha1(d);
}

/// Redis's object type numbers (`OBJ_STRING`...), mixed into the digest.
fn redis_type(tag: TypeTag) -> u32 {
    match tag {
        TypeTag::String | TypeTag::Hll => 0,
        TypeTag::List => 1,
        TypeTag::Set => 2,
        TypeTag::ZSet => 3,
        TypeTag::Hash => 4,
        TypeTag::Stream => 6,
    }
}

fn str_bytes(v: StrView<'_>) -> Vec<u8> {
    match v {
        StrView::Bytes(b) => b.to_vec(),
        StrView::Int(n) => n.to_string().into_bytes(),
        StrView::Float(d) => d.format_redis().into_bytes(),
    }
}

/// `xorObjectDigest`: the type, the value by type, and "!!expire!!" for a key with a TTL.
fn xor_object_digest(d: &mut [u8; 20], state: &KeyState) {
    let Some(tag) = state.type_tag() else {
        return;
    };
    mix_digest(d, &redis_type(tag).to_be_bytes());
    match tag {
        TypeTag::String => {
            if let Some(v) = state.view_str() {
                mix_digest(d, &str_bytes(v));
            }
        }
        TypeTag::Hll => {
            if let Some(h) = state.hll() {
                mix_digest(d, h.bytes());
            }
        }
        TypeTag::List => {
            if let Some(l) = state.list() {
                for x in l.iter() {
                    mix_digest(d, x.value);
                }
            }
        }
        TypeTag::Set => {
            if let Some(s) = state.set() {
                for m in s.members() {
                    xor_digest(d, m);
                }
            }
        }
        TypeTag::ZSet => {
            if let Some(z) = state.zset() {
                for (m, score) in z.iter() {
                    let mut ele = [0u8; 20];
                    mix_digest(&mut ele, m);
                    mix_digest(&mut ele, format_double(score).as_bytes());
                    xor_digest(d, &ele);
                }
            }
        }
        TypeTag::Stream => {
            if let Some(s) = state.stream() {
                for e in s.range(StreamId::MIN, StreamId::MAX) {
                    mix_digest(d, format!("{}.{}", e.id.ms, e.id.seq).as_bytes());
                    for (f, v) in e.fields() {
                        mix_digest(d, f);
                        mix_digest(d, v);
                    }
                }
            }
        }
        TypeTag::Hash => {
            if let Some(h) = state.hash() {
                for (f, v) in h.iter() {
                    let mut ele = [0u8; 20];
                    mix_digest(&mut ele, f);
                    mix_digest(&mut ele, &str_bytes(v));
                    xor_digest(d, &ele);
                }
            }
        }
    }
    if state.expire_at_ms().is_some() {
        xor_digest(d, b"!!expire!!");
    }
}
