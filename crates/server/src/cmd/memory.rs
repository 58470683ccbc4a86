//! MEMORY: USAGE STATS DOCTOR MALLOC-STATS PURGE HELP (Redis 7.0 `object.c` memoryCommand).
//!
//! Figures come from jemalloc (`stats.allocated` and friends, as INFO memory) and from the
//! keyspace. MEMORY USAGE is an estimate, as Redis's is: the entry, the key's heap bytes, and
//! the value's bytes, where a collection's element bytes are sampled (`SAMPLES`, default 5,
//! 0 for all) and extrapolated, each element counted with a fixed overhead for its CRDT
//! metadata (its stamp and its table slot).

use meridian_crdt::{KeyState, StrView, TypeTag};

use super::args::{eq_ic, parse_i64};
use super::server::{MemoryUse, memory_use};
use super::{Ctx, Handler};
use crate::error::CmdError;
use crate::keyspace::Entry;
use crate::shard::Shard;

pub const HANDLERS: &[(&str, Handler)] = &[
    ("memory|usage", usage),
    ("memory|stats", stats),
    ("memory|doctor", doctor),
    ("memory|malloc-stats", malloc_stats),
    ("memory|purge", purge),
    ("memory|help", help),
];

/// Redis's `OBJ_COMPUTE_SIZE_DEF_SAMPLES`.
const SAMPLES_DEFAULT: usize = 5;
/// Bytes a table bucket costs besides the entry: the pointer and the control byte.
const BUCKET_BYTES: usize = 9;
/// Per-element bytes of a collection beyond the element's own bytes: its stamp (16 bytes),
/// its slot in the collection's index and allocation rounding.
const ELEMENT_OVERHEAD_BYTES: usize = 32;
/// A sorted-set member also holds its score and its place in the order index.
const ZSET_ELEMENT_OVERHEAD_BYTES: usize = 48;

/// MEMORY USAGE key [SAMPLES count]: the estimated bytes of the key and its value, or null.
fn usage(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let mut samples = SAMPLES_DEFAULT;
    let mut j = 3;
    while let Some(opt) = argv.get(j) {
        match argv.get(j + 1) {
            Some(v) if eq_ic(opt, "samples") => {
                let n = parse_i64(v).ok_or(CmdError::NotInteger)?;
                samples = match usize::try_from(n) {
                    Err(_) => return Err(CmdError::Syntax),
                    Ok(0) => usize::MAX,
                    Ok(n) => n,
                };
                j += 2;
            }
            _ => return Err(CmdError::Syntax),
        }
    }
    let db = ctx.db();
    let key = argv.get(2).copied().unwrap_or_default();
    let now = ctx.now_ms;
    match ctx.shard.lookup_quiet(db, key, now) {
        Some(e) => {
            let bytes = entry_bytes(e, samples);
            ctx.out.int(i64::try_from(bytes).unwrap_or(i64::MAX));
        }
        None => ctx.out.null(),
    }
    Ok(())
}

/// The estimate of one entry (see the module doc).
fn entry_bytes(e: &Entry, samples: usize) -> usize {
    std::mem::size_of::<Entry>()
        + BUCKET_BYTES
        + e.key.heap_bytes()
        + value_bytes(&e.state, samples)
}

/// Total bytes of `n` elements from the sizes of the first `samples` of them.
fn extrapolate(sizes: impl Iterator<Item = usize>, n: usize, samples: usize) -> usize {
    let (mut seen, mut sum) = (0usize, 0usize);
    for s in sizes.take(samples) {
        seen += 1;
        sum = sum.saturating_add(s);
    }
    if seen == 0 {
        return 0;
    }
    sum / seen * n
}

fn value_bytes(state: &KeyState, samples: usize) -> usize {
    match state.type_tag() {
        Some(TypeTag::String) => match state.view_str() {
            Some(StrView::Bytes(b)) => b.len(),
            Some(StrView::Int(_)) | Some(StrView::Float(_)) | None => 0,
        },
        Some(TypeTag::Hll) => state.hll().map_or(0, |h| h.bytes().len()),
        Some(TypeTag::Hash) => state.hash().map_or(0, |h| h.heap_bytes()),
        Some(TypeTag::Set) => state.set().map_or(0, |s| {
            let each = s.members().map(|m| m.len() + ELEMENT_OVERHEAD_BYTES);
            extrapolate(each, s.len(), samples)
        }),
        Some(TypeTag::ZSet) => state.zset().map_or(0, |z| {
            let each = z.iter().map(|(m, _)| m.len() + ZSET_ELEMENT_OVERHEAD_BYTES);
            extrapolate(each, z.len(), samples)
        }),
        Some(TypeTag::List) => state.list().map_or(0, |l| {
            let each = l.iter().map(|x| x.value.len() + ELEMENT_OVERHEAD_BYTES);
            extrapolate(each, l.len(), samples)
        }),
        Some(TypeTag::Stream) => state.stream().map_or(0, |s| s.heap_bytes()),
        None => 0,
    }
}

/// Redis's `redisMemOverhead`, from what Meridian holds.
struct Overhead {
    peak: u64,
    total: u64,
    startup: u64,
    backlog: u64,
    clients_normal: u64,
    /// (db index, main table bytes) of each database holding keys.
    dbs: Vec<(usize, u64)>,
    overhead_total: u64,
    keys: u64,
    bytes_per_key: u64,
    dataset: u64,
    dataset_perc: f64,
    peak_perc: f64,
    mem: MemoryUse,
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 { 0.0 } else { a as f64 / b as f64 }
}

fn overhead(shard: &mut Shard, front: &crate::front::Front) -> Overhead {
    let mem = memory_use();
    let total = mem.used();
    shard.stats.note_memory(total);
    let peak = shard.stats.used_memory_peak.max(total);
    let startup = shard.stats.used_memory_startup;
    let backlog = shard.oplog.bytes() as u64;
    let clients_normal: u64 = front
        .clients
        .values()
        .map(|c| (c.qbuf_cap_bytes.get().max(c.qbuf_bytes.get()) + c.obuf_bytes.get()) as u64)
        .sum();
    let dbs: Vec<(usize, u64)> = shard
        .dbs
        .iter()
        .enumerate()
        .filter(|(_, d)| !d.is_empty())
        .map(|(i, d)| (i, (d.table.num_buckets() * BUCKET_BYTES) as u64))
        .collect();
    let overhead_total =
        startup + backlog + clients_normal + dbs.iter().map(|(_, b)| *b).sum::<u64>();
    let keys = shard.key_count() as u64;
    let net = total.saturating_sub(startup);
    let dataset = total.saturating_sub(overhead_total);
    Overhead {
        peak,
        total,
        startup,
        backlog,
        clients_normal,
        dbs,
        overhead_total,
        keys,
        bytes_per_key: net.checked_div(keys).unwrap_or(0),
        dataset,
        dataset_perc: ratio(dataset, net) * 100.0,
        peak_perc: ratio(total, peak) * 100.0,
        mem,
    }
}

/// MEMORY STATS: Redis's map of memory figures.
fn stats(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> Result<(), CmdError> {
    let o = overhead(ctx.shard, ctx.front);
    let m = o.mem;
    let rss = m.rss;
    let out = &mut *ctx.out;
    out.map(27 + o.dbs.len());
    let mut int = |k: &str, v: u64| {
        out.bulk(k.as_bytes());
        out.int(i64::try_from(v).unwrap_or(i64::MAX));
    };
    int("peak.allocated", o.peak);
    int("total.allocated", o.total);
    int("startup.allocated", o.startup);
    int("replication.backlog", o.backlog);
    int("clients.slaves", 0);
    int("clients.normal", o.clients_normal);
    int("cluster.links", 0);
    int("aof.buffer", 0);
    int("lua.caches", 0);
    int("functions.caches", 0);
    for (db, main) in &o.dbs {
        out.bulk(format!("db.{db}").as_bytes());
        out.map(3);
        out.bulk(b"overhead.hashtable.main");
        out.int(i64::try_from(*main).unwrap_or(i64::MAX));
        // Meridian keeps TTLs in the entries: there is no second table.
        out.bulk(b"overhead.hashtable.expires");
        out.int(0);
        out.bulk(b"overhead.hashtable.slot-to-keys");
        out.int(0);
    }
    let mut int = |k: &str, v: u64| {
        out.bulk(k.as_bytes());
        out.int(i64::try_from(v).unwrap_or(i64::MAX));
    };
    int("overhead.total", o.overhead_total);
    int("keys.count", o.keys);
    int("keys.bytes-per-key", o.bytes_per_key);
    int("dataset.bytes", o.dataset);
    out.bulk(b"dataset.percentage");
    out.double(o.dataset_perc);
    out.bulk(b"peak.percentage");
    out.double(o.peak_perc);
    let mut int = |k: &str, v: u64| {
        out.bulk(k.as_bytes());
        out.int(i64::try_from(v).unwrap_or(i64::MAX));
    };
    int("allocator.allocated", m.allocated);
    int("allocator.active", m.active);
    int("allocator.resident", m.resident);
    let pairs: [(&str, f64, &str, i64); 4] = [
        (
            "allocator-fragmentation.ratio",
            ratio(m.active, m.allocated),
            "allocator-fragmentation.bytes",
            m.active as i64 - m.allocated as i64,
        ),
        (
            "allocator-rss.ratio",
            ratio(m.resident, m.active),
            "allocator-rss.bytes",
            m.resident as i64 - m.active as i64,
        ),
        (
            "rss-overhead.ratio",
            ratio(rss, m.resident),
            "rss-overhead.bytes",
            rss as i64 - m.resident as i64,
        ),
        (
            "fragmentation",
            ratio(rss, o.total),
            "fragmentation.bytes",
            rss as i64 - o.total as i64,
        ),
    ];
    for (rk, rv, bk, bv) in pairs {
        out.bulk(rk.as_bytes());
        out.double(rv);
        out.bulk(bk.as_bytes());
        out.int(bv);
    }
    Ok(())
}

/// MEMORY DOCTOR: Redis's report (`getMemoryDoctorReport`) on Meridian's figures.
fn doctor(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> Result<(), CmdError> {
    let o = overhead(ctx.shard, ctx.front);
    let clients = ctx.front.clients.len().max(1) as u64;
    let report = doctor_report(&o, clients);
    ctx.out.verbatim(b"txt", report.as_bytes());
    Ok(())
}

fn doctor_report(o: &Overhead, clients: u64) -> String {
    const MB10: i64 = 10 << 20;
    let m = &o.mem;
    let total_frag_bytes = m.rss as i64 - o.total as i64;
    if o.total < 5 * 1024 * 1024 {
        return "Hi Sam, this instance is empty or is using very little memory, my issues detector can't be used in these conditions. Please, leave for your mission on Earth and fill it with some data. The new Sam and I will be back to our programming as soon as I finished rebooting.\n".to_string();
    }
    let mut issues: Vec<&str> = Vec::new();
    if ratio(o.peak, o.total) > 1.5 {
        issues.push(" * Peak memory: In the past this instance used more than 150% the memory that is currently using. The allocator is normally not able to release memory after a peak, so you can expect to see a big fragmentation ratio, however this is actually harmless and is only due to the memory peak, and if the Redis instance Resident Set Size (RSS) is currently bigger than expected, the memory will be used as soon as you fill the Redis instance with more data. If the memory peak was only occasional and you want to try to reclaim memory, please try the MEMORY PURGE command, otherwise the only other option is to shutdown and restart the instance.\n\n");
    }
    if ratio(m.rss, o.total) > 1.4 && total_frag_bytes > MB10 {
        issues.push(" * High total RSS: This instance has a memory fragmentation and RSS overhead greater than 1.4 (this means that the Resident Set Size of the Redis process is much larger than the sum of the logical allocations Redis performed). This problem is usually due either to a large peak memory (check if there is a peak memory entry above in the report) or may result from a workload that causes the allocator to fragment memory a lot. If the problem is a large peak memory, then there is no issue. Otherwise, make sure you are using the Jemalloc allocator and not the default libc malloc. Note: The currently used allocator is \"jemalloc\".\n\n");
    }
    if ratio(m.active, m.allocated) > 1.1 && (m.active as i64 - m.allocated as i64) > MB10 {
        issues.push(" * High allocator fragmentation: This instance has an allocator external fragmentation greater than 1.1. This problem is usually due either to a large peak memory (check if there is a peak memory entry above in the report) or may result from a workload that causes the allocator to fragment memory a lot. You can try enabling 'activedefrag' config option.\n\n");
    }
    if ratio(m.resident, m.active) > 1.1 && (m.resident as i64 - m.active as i64) > MB10 {
        issues.push(" * High allocator RSS overhead: This instance has an RSS memory overhead is greater than 1.1 (this means that the Resident Set Size of the allocator is much larger than the sum what the allocator actually holds). This problem is usually due to a large peak memory (check if there is a peak memory entry above in the report), you can try the MEMORY PURGE command to reclaim it.\n\n");
    }
    if ratio(m.rss, m.resident) > 1.1 && (m.rss as i64 - m.resident as i64) > MB10 {
        issues.push(" * High process RSS overhead: This instance has non-allocator RSS memory overhead is greater than 1.1 (this means that the Resident Set Size of the Redis process is much larger than the RSS the allocator holds). This problem may be due to Lua scripts or Modules.\n\n");
    }
    if o.clients_normal / clients > 200 * 1024 {
        issues.push(" * Big client buffers: The clients output buffers in this instance are greater than 200K per client (on average). This may result from different causes, like Pub/Sub clients subscribed to channels bot not receiving data fast enough, so that data piles on the Redis instance output buffer, or clients sending commands with large replies or very large sequences of commands in the same pipeline. Please use the CLIENT LIST command in order to investigate the issue if it causes problems in your instance, or to understand better why certain clients are using a big amount of memory.\n\n");
    }
    if issues.is_empty() {
        return "Hi Sam, I can't find any memory issue in your instance. I can only account for what occurs on this base.\n".to_string();
    }
    let mut s =
        String::from("Sam, I detected a few issues in this Redis instance memory implants:\n\n");
    for i in issues {
        s.push_str(i);
    }
    s.push_str("I'm here to keep you safe, Sam. I want to help you.\n");
    s
}

/// MEMORY MALLOC-STATS: jemalloc's own statistics report.
fn malloc_stats(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> Result<(), CmdError> {
    let mut text = Vec::new();
    if tikv_jemalloc_ctl::stats_print::stats_print(&mut text, Default::default()).is_err() {
        text = b"Stats not supported for the current allocator".to_vec();
    }
    ctx.out.verbatim(b"txt", &text);
    Ok(())
}

/// MEMORY PURGE: returns the allocator's dirty pages to the system.
fn purge(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> Result<(), CmdError> {
    if crate::alloc::purge() {
        ctx.out.ok();
        Ok(())
    } else {
        Err(CmdError::Err("Error purging dirty pages".to_string()))
    }
}

fn help(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> Result<(), CmdError> {
    const LINES: &[&str] = &[
        "DOCTOR",
        "    Return memory problems reports.",
        "MALLOC-STATS",
        "    Return internal statistics report from the memory allocator.",
        "PURGE",
        "    Attempt to purge dirty pages for reclamation by the allocator.",
        "STATS",
        "    Return information about the memory usage of the server.",
        "USAGE <key> [SAMPLES <count>]",
        "    Return memory in bytes used by <key> and its value. Nested values are",
        "    sampled up to <count> times (default: 5, 0 means sample all).",
    ];
    super::server::reply_help(ctx, "MEMORY", LINES);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extrapolates_from_samples() {
        assert_eq!(extrapolate([10, 20].into_iter(), 100, 5), 1500);
        assert_eq!(extrapolate(std::iter::empty(), 0, 5), 0);
        assert_eq!(extrapolate([10, 20, 30].into_iter(), 3, 1), 30);
    }
}
