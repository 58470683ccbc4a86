//! RESP request parsing: our resumable parser against `redis-protocol` 6.0 (`decode_range`,
//! `decode_bytes_mut`) as the baseline column (the dependencies guide, §3).
//!
//! Workloads: 10,000 pipelined `SET key:NNNNNNNN <16 B>` (whole buffer and in random reads),
//! one 1 MiB value and one 200,001-argument `MSET` arriving in 16 KiB reads, and a mix of
//! inline and multibulk commands. Pipelines count commands (time per element is ns per
//! command); the single big commands count bytes.
//! Run: `cargo bench -p meridian-server --bench resp_parse`. Benches never assert timings.

use std::hint::black_box;

use bytes::BytesMut;
use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use meridian_server::resp::parse::{ParseLimits, Parsed, Parser};
use redis_protocol::resp2::decode::{decode_bytes_mut, decode_range};
use smallvec::SmallVec;

const PIPELINE_COMMANDS: usize = 10_000;
const READ_BYTES: usize = 16 * 1024;
const BIG_VALUE_BYTES: usize = 1024 * 1024;
const MSET_PAIRS: usize = 100_000;

fn mbulk(out: &mut Vec<u8>, args: &[&[u8]]) {
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
}

fn set_pipeline() -> Vec<u8> {
    let mut out = Vec::new();
    for i in 0..PIPELINE_COMMANDS {
        let key = format!("key:{i:08}");
        mbulk(&mut out, &[b"SET", key.as_bytes(), b"0123456789abcdef"]);
    }
    out
}

/// The inline mix and its all-multibulk equivalent (the baseline has no inline support).
fn inline_mix() -> (Vec<u8>, Vec<u8>) {
    let (mut inline, mut multibulk) = (Vec::new(), Vec::new());
    for i in 0..PIPELINE_COMMANDS {
        let key = format!("key:{i:08}");
        match i % 4 {
            0 => {
                inline.extend_from_slice(b"PING\r\n");
                mbulk(&mut multibulk, &[b"PING"]);
            }
            1 => {
                inline.extend_from_slice(format!("SET {key} value\r\n").as_bytes());
                mbulk(&mut multibulk, &[b"SET", key.as_bytes(), b"value"]);
            }
            2 => {
                inline.extend_from_slice(format!("ECHO \"quoted \\x41 {key}\"\r\n").as_bytes());
                mbulk(
                    &mut multibulk,
                    &[b"ECHO", format!("quoted A {key}").as_bytes()],
                );
            }
            _ => {
                mbulk(&mut inline, &[b"GET", key.as_bytes()]);
                mbulk(&mut multibulk, &[b"GET", key.as_bytes()]);
            }
        }
    }
    (inline, multibulk)
}

/// Random read sizes in 1..=READ_BYTES, fixed seed.
fn random_reads(len: usize) -> Vec<usize> {
    let mut seed = 0x2545_F491_4F6C_DD1Du64;
    let mut sizes = Vec::new();
    let mut total = 0;
    while total < len {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let size = 1 + (seed as usize % READ_BYTES);
        sizes.push(size);
        total += size;
    }
    sizes
}

/// Ours over a whole buffer: offsets only, argv as slices.
fn ours_whole(parser: &mut Parser, input: &[u8]) -> usize {
    let mut at = 0;
    let mut commands = 0;
    while let Some(buf) = input.get(at..) {
        match parser.next(buf) {
            Parsed::Command { consumed } => {
                // `args` borrows the parser, so it lives for one command (it is on the stack).
                let mut args: SmallVec<[&[u8]; 8]> = SmallVec::new();
                parser.args(buf, &mut args);
                black_box(&args);
                commands += 1;
                at += consumed;
            }
            Parsed::Skip { consumed } => at += consumed,
            Parsed::Incomplete | Parsed::Error(_) => break,
        }
    }
    commands
}

/// Ours behind a simulated connection: append each read, parse, drop consumed prefixes.
fn ours_reads(parser: &mut Parser, input: &[u8], reads: &[usize], buf: &mut Vec<u8>) -> usize {
    buf.clear();
    let mut at = 0;
    let mut commands = 0;
    for &size in reads {
        let end = (at + size).min(input.len());
        buf.extend_from_slice(&input[at..end]);
        at = end;
        let mut done = 0;
        loop {
            let rest = &buf[done..];
            match parser.next(rest) {
                Parsed::Command { consumed } => {
                    let mut args: SmallVec<[&[u8]; 8]> = SmallVec::new();
                    parser.args(rest, &mut args);
                    black_box(&args);
                    commands += 1;
                    done += consumed;
                }
                Parsed::Skip { consumed } => done += consumed,
                Parsed::Incomplete | Parsed::Error(_) => break,
            }
        }
        if let Some(hint) = parser.bytes_hint() {
            buf.reserve(hint.saturating_sub(buf.len() - done));
        }
        buf.drain(..done);
    }
    commands
}

fn baseline_whole(input: &[u8]) -> usize {
    let mut at = 0;
    let mut commands = 0;
    while let Ok(Some((frame, amt))) = decode_range(&input[at..]) {
        black_box(frame);
        commands += 1;
        at += amt;
    }
    commands
}

fn baseline_reads(input: &[u8], reads: &[usize], buf: &mut Vec<u8>) -> usize {
    buf.clear();
    let mut at = 0;
    let mut commands = 0;
    for &size in reads {
        let end = (at + size).min(input.len());
        buf.extend_from_slice(&input[at..end]);
        at = end;
        let mut done = 0;
        while let Ok(Some((frame, amt))) = decode_range(&buf[done..]) {
            black_box(frame);
            commands += 1;
            done += amt;
        }
        buf.drain(..done);
    }
    commands
}

fn baseline_bytes_mut(mut input: BytesMut) -> usize {
    let mut commands = 0;
    while let Ok(Some((frame, _amt, _buf))) = decode_bytes_mut(&mut input) {
        black_box(frame);
        commands += 1;
    }
    commands
}

fn pipeline(c: &mut Criterion) {
    let input = set_pipeline();
    let mut parser = Parser::new(ParseLimits::default());
    assert_eq!(ours_whole(&mut parser, &input), PIPELINE_COMMANDS);
    assert_eq!(baseline_whole(&input), PIPELINE_COMMANDS);

    let mut group = c.benchmark_group("pipeline_set_10k");
    group.throughput(Throughput::Elements(PIPELINE_COMMANDS as u64));
    group.bench_function("ours_offsets", |b| {
        b.iter(|| ours_whole(&mut parser, black_box(&input)))
    });
    group.bench_function("redis_protocol_decode_range", |b| {
        b.iter(|| baseline_whole(black_box(&input)))
    });
    group.bench_function("redis_protocol_decode_bytes_mut", |b| {
        b.iter_batched(
            || BytesMut::from(&input[..]),
            baseline_bytes_mut,
            BatchSize::LargeInput,
        )
    });
    group.finish();

    let reads = random_reads(input.len());
    let mut buf = Vec::new();
    let mut group = c.benchmark_group("pipeline_set_10k_random_reads");
    group.throughput(Throughput::Elements(PIPELINE_COMMANDS as u64));
    group.bench_function("ours_offsets", |b| {
        b.iter(|| ours_reads(&mut parser, black_box(&input), &reads, &mut buf))
    });
    group.bench_function("redis_protocol_decode_range", |b| {
        b.iter(|| baseline_reads(black_box(&input), &reads, &mut buf))
    });
    group.finish();
}

fn big_value(c: &mut Criterion) {
    let value = vec![b'v'; BIG_VALUE_BYTES];
    let mut input = Vec::new();
    mbulk(&mut input, &[b"SET", b"key:big", &value]);
    let reads = vec![READ_BYTES; input.len().div_ceil(READ_BYTES)];
    let mut parser = Parser::new(ParseLimits::default());
    let mut buf = Vec::new();
    assert_eq!(ours_reads(&mut parser, &input, &reads, &mut buf), 1);
    assert_eq!(baseline_reads(&input, &reads, &mut buf), 1);

    let mut group = c.benchmark_group("big_value_1mib_16k_reads");
    group.throughput(Throughput::Bytes(input.len() as u64));
    group.bench_function("ours_offsets", |b| {
        b.iter(|| ours_reads(&mut parser, black_box(&input), &reads, &mut buf))
    });
    group.bench_function("redis_protocol_decode_range", |b| {
        b.iter(|| baseline_reads(black_box(&input), &reads, &mut buf))
    });
    group.finish();
}

/// One `MSET` with 200,001 arguments (about 2.1 MB) in 16 KiB reads: a frame decoder that
/// re-parses the incomplete frame on every read is quadratic here.
fn many_args(c: &mut Criterion) {
    let pairs: Vec<(String, String)> = (0..MSET_PAIRS)
        .map(|i| (format!("k{i:07}"), format!("v{i}")))
        .collect();
    let mut args: Vec<&[u8]> = vec![b"MSET"];
    for (key, value) in &pairs {
        args.push(key.as_bytes());
        args.push(value.as_bytes());
    }
    let mut input = Vec::new();
    mbulk(&mut input, &args);
    let reads = vec![READ_BYTES; input.len().div_ceil(READ_BYTES)];
    let mut parser = Parser::new(ParseLimits::default());
    let mut buf = Vec::new();
    assert_eq!(ours_reads(&mut parser, &input, &reads, &mut buf), 1);
    assert_eq!(baseline_reads(&input, &reads, &mut buf), 1);

    let mut group = c.benchmark_group("mset_200k_args_16k_reads");
    group.sample_size(10);
    group.throughput(Throughput::Bytes(input.len() as u64));
    group.bench_function("ours_offsets", |b| {
        b.iter(|| ours_reads(&mut parser, black_box(&input), &reads, &mut buf))
    });
    group.bench_function("redis_protocol_decode_range", |b| {
        b.iter(|| baseline_reads(black_box(&input), &reads, &mut buf))
    });
    group.finish();
}

fn mixed(c: &mut Criterion) {
    let (inline, multibulk) = inline_mix();
    let mut parser = Parser::new(ParseLimits::default());
    assert_eq!(ours_whole(&mut parser, &inline), PIPELINE_COMMANDS);
    assert_eq!(baseline_whole(&multibulk), PIPELINE_COMMANDS);

    let mut group = c.benchmark_group("inline_mix_10k");
    group.throughput(Throughput::Elements(PIPELINE_COMMANDS as u64));
    group.bench_function("ours_inline_mix", |b| {
        b.iter(|| ours_whole(&mut parser, black_box(&inline)))
    });
    group.bench_function("ours_multibulk_equivalent", |b| {
        b.iter(|| ours_whole(&mut parser, black_box(&multibulk)))
    });
    group.bench_function("redis_protocol_decode_range_multibulk_equivalent", |b| {
        b.iter(|| baseline_whole(black_box(&multibulk)))
    });
    group.finish();
}

criterion_group!(benches, pipeline, big_value, many_args, mixed);
criterion_main!(benches);
