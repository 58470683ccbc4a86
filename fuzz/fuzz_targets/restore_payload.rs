//! The RESTORE payload decoder (`meridian_rdb::decode_payload`) never panics, never decodes
//! past its limits, and what it accepts survives DUMP's encoder: re-encoding the contents and
//! decoding them again gives the same contents.
//!
//! An input whose first byte is odd is taken as a whole payload (footer and all, so mostly
//! refused by the checksum); one whose first byte is even is a body that this target seals
//! with a valid footer first, so the fuzzer explores the value decoders.
//!
//! Run: `cargo +nightly fuzz run restore_payload fuzz/seeds/restore_payload` from the
//! repository root (the seeds are Redis 7.0.15 DUMP payloads of every type and encoding,
//! streams included).
#![no_main]

use libfuzzer_sys::fuzz_target;
use meridian_rdb::{
    CRC64, Encoder, Limits, ListOptions, RDB_VERSION, StreamNodes, Value, decode_payload,
};

const LIMITS: Limits = Limits {
    string_bytes_max: 1 << 20,
    value_bytes_max: 1 << 22,
};

fn seal(body: &[u8]) -> Vec<u8> {
    let mut p = body.to_vec();
    p.extend_from_slice(&RDB_VERSION.to_le_bytes());
    let crc = CRC64.checksum(&p);
    p.extend_from_slice(&crc.to_le_bytes());
    p
}

/// The contents in a canonical order (sets, hashes and sorted sets sorted).
fn canonical(v: Value) -> Value {
    match v {
        Value::Set(mut m) => {
            m.sort();
            Value::Set(m)
        }
        Value::Hash(mut h) => {
            h.sort();
            Value::Hash(h)
        }
        Value::ZSet(mut z) => {
            z.sort_by(|a, b| a.0.cmp(&b.0));
            Value::ZSet(z)
        }
        other => other,
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let payload = if mode % 2 == 1 {
        rest.to_vec()
    } else {
        seal(rest)
    };
    let Ok(decoded) = decode_payload(&payload, LIMITS) else {
        return;
    };
    let value = decoded.value;
    let size: usize = match &value {
        Value::Str(s) => s.len(),
        Value::List(l) | Value::Set(l) => l.iter().map(Vec::len).sum(),
        Value::Hash(h) => h.iter().map(|(f, v)| f.len() + v.len()).sum(),
        Value::ZSet(z) => z.iter().map(|(m, _)| m.len()).sum(),
        Value::Stream(s) => s
            .entries
            .iter()
            .flat_map(|(_, pairs)| pairs.iter().map(|(f, v)| f.len() + v.len()))
            .sum(),
    };
    assert!(size as u64 <= LIMITS.value_bytes_max);
    let enc = Encoder::default();
    let again = match &value {
        Value::Str(s) => enc.string(s),
        Value::List(l) => enc.list(l.iter().map(Vec::as_slice), ListOptions::default()),
        Value::Set(m) => {
            let refs: Vec<&[u8]> = m.iter().map(Vec::as_slice).collect();
            enc.set(&refs, 512)
        }
        Value::Hash(h) => enc.hash(
            h.iter().map(|(f, v)| (f.as_slice(), v.as_slice())),
            h.len() <= 128,
        ),
        Value::ZSet(z) => {
            let mut sorted: Vec<(&[u8], f64)> = z.iter().map(|(m, s)| (m.as_slice(), *s)).collect();
            sorted.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(b.0)));
            enc.zset(sorted.into_iter(), z.len() <= 128)
        }
        Value::Stream(s) => enc.stream(s, StreamNodes::default()),
    };
    let back = decode_payload(&again, LIMITS)
        .expect("DUMP's own payload decodes")
        .value;
    assert_eq!(canonical(back), canonical(value));
});
