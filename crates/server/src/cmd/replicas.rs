//! WAIT and ROLE: Redis's primary/replica view of a Meridian site.
//!
//! A Meridian site has no Redis replicas: its copies are other sites, which take writes of
//! their own and converge (docs/replication.md). So ROLE answers a primary with no replicas
//! and WAIT counts no replica: it answers 0 when asked for none, and otherwise waits its
//! timeout (for ever with 0) and answers 0, as Redis does with no replica connected.
//! CRDT.WAIT is the command that waits for other sites to acknowledge writes.
//! REPLICAOF (and SLAVEOF) NO ONE answers OK, as Redis does on a primary; REPLICAOF host port
//! is refused: a site never becomes a read-only copy of a Redis primary (sites link as peers,
//! CRDT.ADDPEER).
//!
//! REPLCONF, SYNC and PSYNC serve the one kind of Redis replica that needs no replication
//! stream: a client that sent `REPLCONF rdb-only 1` (`redis-cli --rdb`, `--functions-rdb`)
//! gets an RDB file of every shard's keys (`rdb_part` on each shard, `rdb_file` on the
//! connection's thread: `Conn::sync_rdb`), after which the connection closes, as Redis closes
//! an rdb-only replica. Each shard builds its part in one go, serving nothing meanwhile (as
//! SAVE), and the file is held in memory until written (`SYNC_RDB_BYTES_MAX`); Redis forks.
//! Any other SYNC or PSYNC is refused.

use super::args::eq_ic;
use super::{Ctx, Handler};
use crate::blocking::parse_timeout_ms;
use crate::error::CmdError;
use crate::shard::Shard;

pub const HANDLERS: &[(&str, Handler)] = &[
    ("wait", wait),
    ("role", role),
    ("replicaof", replicaof),
    ("slaveof", replicaof),
    ("replconf", replconf),
    ("sync", sync),
    ("psync", sync),
];

/// Largest RDB file SYNC builds (it is held in memory until written), each shard's part at
/// most its share of it (`rdb_part`): a larger data set is refused with an error rather than
/// doubled in memory.
pub const SYNC_RDB_BYTES_MAX: u64 = 4 << 30;

/// REPLCONF option value ... (`replconfCommand`'s options, in its order and texts). ACK and
/// GETACK answer nothing, as Redis answers them from a client that is not its replica.
fn replconf(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    if argv.len() % 2 == 0 {
        return Err(CmdError::Syntax);
    }
    let mut req = ctx.client.repl;
    for pair in argv.get(1..).unwrap_or_default().chunks_exact(2) {
        let (opt, value) = (
            pair.first().copied().unwrap_or_default(),
            pair.get(1).copied().unwrap_or_default(),
        );
        if eq_ic(opt, "listening-port") {
            super::args::parse_i64(value).ok_or(CmdError::NotInteger)?;
        } else if eq_ic(opt, "ip-address") {
            // Redis's NET_HOST_STR_LEN.
            if value.len() >= 256 {
                return Err(CmdError::Err(format!(
                    "REPLCONF ip-address provided by replica instance is too long: {} bytes",
                    value.len()
                )));
            }
        } else if eq_ic(opt, "capa") {
            if eq_ic(value, "eof") {
                req.capa_eof = true;
            }
        } else if eq_ic(opt, "ack") || eq_ic(opt, "getack") {
            return Ok(());
        } else if eq_ic(opt, "rdb-only") {
            match super::args::parse_i64(value) {
                Some(0) => req.rdb_only = false,
                Some(1) => req.rdb_only = true,
                Some(_) => {
                    return Err(CmdError::Err(
                        "value is out of range, value must between 0 and 1".to_string(),
                    ));
                }
                None => return Err(CmdError::NotInteger),
            }
        } else if eq_ic(opt, "rdb-filter-only") {
            let Some(filters) = crate::resp::parse::sds_split_args(value) else {
                return Err(CmdError::Err("Missing rdb-filter-only values".to_string()));
            };
            for f in &filters {
                if !eq_ic(f, "functions") {
                    return Err(CmdError::Err(format!(
                        "Unsupported rdb-filter-only option: {}",
                        String::from_utf8_lossy(f)
                    )));
                }
            }
            req.filtered = true;
            req.functions_only = true;
        } else {
            return Err(CmdError::Err(format!(
                "Unrecognized REPLCONF option: {}",
                String::from_utf8_lossy(opt)
            )));
        }
    }
    ctx.client.repl = req;
    ctx.out.ok();
    Ok(())
}

/// SYNC and PSYNC where they run on one shard (a shard's cluster endpoint, whose file holds
/// that shard's keys, as a Redis Cluster node's holds its own); on the main port the
/// connection gathers every shard's part (`Conn::sync_rdb`).
fn sync(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    if !ctx.out.buf.is_empty() {
        return Err(CmdError::Err(
            "SYNC and PSYNC are invalid with pending output".to_string(),
        ));
    }
    let req = ctx.client.repl;
    sync_allowed(argv, req)?;
    let part = rdb_part(ctx.shard, req.functions_only, ctx.now_ms).map_err(sync_failed)?;
    write_sync_reply(ctx.out, vec![part], &ctx.shard.config, argv, ctx.now_ms)?;
    ctx.client.close_after_reply = true;
    Ok(())
}

/// The error of a SYNC whose file could not be built.
pub fn sync_failed(why: String) -> CmdError {
    tracing::warn!(error = %why, "SYNC: no RDB file");
    CmdError::Err(format!("SYNC failed: {why}"))
}

/// Writes SYNC's or PSYNC's (`argv`) whole reply from the shards' parts into `out`:
/// `sync_head`, then the RDB file (`rdb_file`).
pub fn write_sync_reply(
    out: &mut crate::resp::reply::Reply,
    parts: Vec<RdbPart>,
    config: &crate::config::Config,
    argv: &[&[u8]],
    now_ms: u64,
) -> Result<(), CmdError> {
    let used = super::server::memory_use().used();
    let file = rdb_file(parts, config, used, now_ms).map_err(sync_failed)?;
    tracing::info!(
        bytes = file.len(),
        "SYNC: sending the RDB file to an rdb-only client"
    );
    let psync = argv.first().is_some_and(|c| eq_ic(c, "psync"));
    out.raw(&sync_head(psync, file.len()));
    out.raw(&file);
    Ok(())
}

/// What precedes the file: PSYNC's `+FULLRESYNC` line (a replication id nobody continues:
/// such a client resyncs in full each time), then `$<length>` (no CRLF follows the file).
fn sync_head(psync: bool, len: usize) -> Vec<u8> {
    let mut out = Vec::new();
    if psync {
        out.extend_from_slice(format!("+FULLRESYNC {} 0\r\n", "0".repeat(40)).as_bytes());
    }
    out.extend_from_slice(format!("${len}\r\n").as_bytes());
    out
}

/// Whether SYNC or PSYNC (`argv`) may send an RDB file to a client with REPLCONF settings
/// `req`: only to `rdb-only` clients (Meridian sites are peers, not Redis primaries: a Redis
/// replica would wait for a stream that never comes), and a filtered one needs `capa eof`.
pub fn sync_allowed(argv: &[&[u8]], req: crate::client::ReplRequest) -> Result<(), CmdError> {
    if !req.rdb_only {
        return Err(CmdError::Err(
            "Meridian sends an RDB file only to clients that sent REPLCONF rdb-only 1 (redis-cli --rdb): sites replicate as peers, not as Redis replicas".to_string(),
        ));
    }
    if req.filtered && !req.capa_eof {
        return Err(CmdError::Err(
            "Filtered replica requires EOF capability".to_string(),
        ));
    }
    if argv.first().is_some_and(|c| eq_ic(c, "psync")) {
        super::args::parse_i64(argv.get(2).copied().unwrap_or_default())
            .ok_or(CmdError::NotInteger)?;
    }
    Ok(())
}

/// One shard's part of an RDB file: the libraries' code (every shard holds the same), and
/// per database with keys: its number, its keys, those with an expire time, and their records
/// (`meridian_rdb::file::put_key`). Keys past their expire time are left out.
#[derive(Debug, Default)]
pub struct RdbPart {
    pub libraries: Vec<Vec<u8>>,
    pub dbs: Vec<(usize, u64, u64, Vec<u8>)>,
}

/// Builds this shard's part (`functions_only`: the libraries alone), O(its data) in one go
/// (docs/limits.md); an error when its records pass `SYNC_RDB_BYTES_MAX` or the process is
/// stopping (the walk polls the stop request).
pub fn rdb_part(shard: &mut Shard, functions_only: bool, now_ms: u64) -> Result<RdbPart, String> {
    // Every shard's part is held at once on the connection's thread: each gets its share.
    let bytes_max = SYNC_RDB_BYTES_MAX / u64::from(shard.slots.shards().max(1));
    rdb_part_within(shard, functions_only, now_ms, bytes_max)
}

/// `rdb_part` with its records' bound, `bytes_max`.
fn rdb_part_within(
    shard: &mut Shard,
    functions_only: bool,
    now_ms: u64,
    bytes_max: u64,
) -> Result<RdbPart, String> {
    let libraries = shard
        .scripting
        .libraries
        .iter()
        .map(|l| l.code.clone())
        .collect();
    let mut part = RdbPart {
        libraries,
        dbs: Vec::new(),
    };
    if functions_only {
        return Ok(part);
    }
    // The values without a DUMP footer: the file's checksum covers them (no CRC-64 per key).
    let opts = super::dump::DumpOptions::from_config(&shard.config).for_file();
    let enc = opts.encoder();
    let mut total = 0u64;
    let mut poll = crate::stop::Poll::new();
    for (db, d) in shard.dbs.iter().enumerate() {
        let (mut keys, mut expires, mut records) = (0u64, 0u64, Vec::new());
        for e in d.table.iter() {
            if poll.stop() {
                return Err("the server is shutting down".to_string());
            }
            let expire = e.state.expire_at_ms();
            if expire.is_some_and(|at| at <= now_ms) {
                continue;
            }
            let Some(value) = super::dump::dump_payload(&e.state, &opts) else {
                continue;
            };
            meridian_rdb::file::put_value(&mut records, enc, e.key.as_slice(), expire, &value)
                .map_err(|err| err.to_string())?;
            keys += 1;
            expires += u64::from(expire.is_some());
            if total + records.len() as u64 > bytes_max {
                return Err(format!(
                    "this shard's part of the RDB file would pass {bytes_max} bytes (SYNC_RDB_BYTES_MAX {SYNC_RDB_BYTES_MAX} over the shards)"
                ));
            }
        }
        total += records.len() as u64;
        if keys > 0 {
            part.dbs.push((db, keys, expires, records));
        }
    }
    Ok(part)
}

/// The RDB file of every shard's part, as Redis 7.0 writes it (`rdbSaveRio`: aux fields,
/// libraries, then each database's keys).
pub fn rdb_file(
    mut parts: Vec<RdbPart>,
    config: &crate::config::Config,
    used_mem: u64,
    now_ms: u64,
) -> Result<Vec<u8>, String> {
    let enc = super::dump::DumpOptions::from_config(config).encoder();
    let ctime = (now_ms / 1000).to_string();
    let used = used_mem.to_string();
    let aux: [(&str, &[u8]); 5] = [
        ("redis-ver", crate::server::REDIS_VERSION.as_bytes()),
        ("redis-bits", b"64"),
        ("ctime", ctime.as_bytes()),
        ("used-mem", used.as_bytes()),
        ("aof-base", b"0"),
    ];
    let mut f = meridian_rdb::file::FileBuilder::new(enc, &aux);
    if let Some(first) = parts.first() {
        for code in &first.libraries {
            f.function(code);
        }
    }
    let dbs = config.databases as usize;
    for db in 0..dbs {
        let of_db = || {
            parts
                .iter()
                .flat_map(|p| p.dbs.iter())
                .filter(move |d| d.0 == db)
        };
        let keys: u64 = of_db().map(|d| d.1).sum();
        if keys == 0 {
            continue;
        }
        let expires: u64 = of_db().map(|d| d.2).sum();
        f.database(db as u64, keys, expires);
        // Each part's records are dropped once copied: the file and at most one database's
        // records of the parts are held at once, not two copies of everything.
        for d in parts.iter_mut().flat_map(|p| p.dbs.iter_mut()) {
            if d.0 == db {
                f.records(&std::mem::take(&mut d.3));
            }
        }
    }
    Ok(f.finish())
}

/// WAIT numreplicas timeout (milliseconds).
fn wait(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    if ctx.timed_out() {
        ctx.out.int(0);
        return Ok(());
    }
    let wanted = super::args::parse_i64(argv.get(1).copied().unwrap_or_default())
        .ok_or(CmdError::NotInteger)?;
    let deadline = parse_timeout_ms(argv.get(2).copied().unwrap_or_default(), ctx.now_ms)?;
    // Inside MULTI Redis answers at once, as it does when enough replicas acked.
    if wanted <= 0 || !ctx.can_block() {
        ctx.out.int(0);
        return Ok(());
    }
    ctx.block_until_rerun(&[], deadline);
    Ok(())
}

/// ROLE: `master`, the replication offset (0: Meridian keeps no Redis replication stream)
/// and the empty list of replicas.
fn role(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> Result<(), CmdError> {
    ctx.out.array(3);
    ctx.out.bulk(b"master");
    ctx.out.int(0);
    ctx.out.array(0);
    Ok(())
}

/// REPLICAOF host port / REPLICAOF NO ONE (`replication.c` replicaofCommand's checks, in its
/// order). With the cluster API on, Redis Cluster's refusal.
fn replicaof(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    if ctx.front.node.cluster.is_some() {
        return Err(CmdError::Err(
            "REPLICAOF not allowed in cluster mode.".to_string(),
        ));
    }
    let host = argv.get(1).copied().unwrap_or_default();
    let port = argv.get(2).copied().unwrap_or_default();
    if super::args::eq_ic(host, "no") && super::args::eq_ic(port, "one") {
        // Already a primary: nothing to undo.
        ctx.out.ok();
        return Ok(());
    }
    match super::args::parse_i64(port) {
        Some(p) if (0..=65535).contains(&p) => Err(CmdError::Err(
            "REPLICAOF host port is not supported: Meridian sites replicate active-active as peers (CRDT.ADDPEER, docs/replication.md)".to_string(),
        )),
        _ => Err(CmdError::Err("Invalid master port".to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmd::testing::Harness;

    /// REPLCONF's replies and texts, as Redis 7.0.15's `replconfCommand` gives them (checked
    /// against `redis-server`), and what SYNC asks of the settings it leaves.
    #[test]
    fn replconf_answers_as_redis_and_sync_needs_rdb_only() {
        let mut t = Harness::new();
        let cases: [(&[&str], &str); 9] = [
            (&["REPLCONF", "capa"], "-ERR syntax error\r\n"),
            (
                &["REPLCONF", "listening-port", "x"],
                "-ERR value is not an integer or out of range\r\n",
            ),
            (
                &["REPLCONF", "rdb-only", "2"],
                "-ERR value is out of range, value must between 0 and 1\r\n",
            ),
            (
                &["REPLCONF", "foo", "bar"],
                "-ERR Unrecognized REPLCONF option: foo\r\n",
            ),
            (
                &["REPLCONF", "rdb-filter-only", "functions keys"],
                "-ERR Unsupported rdb-filter-only option: keys\r\n",
            ),
            (&["REPLCONF", "ack", "10"], ""),
            (
                &["SYNC"],
                "-ERR Meridian sends an RDB file only to clients that sent REPLCONF rdb-only 1 (redis-cli --rdb): sites replicate as peers, not as Redis replicas\r\n",
            ),
            (
                &["REPLCONF", "rdb-only", "1", "rdb-filter-only", "functions"],
                "+OK\r\n",
            ),
            (
                &["SYNC"],
                "-ERR Filtered replica requires EOF capability\r\n",
            ),
        ];
        for (args, want) in cases {
            assert_eq!(t.run(args), want, "{args:?}");
        }
        assert!(t.client.repl.rdb_only && t.client.repl.functions_only);
        assert_eq!(
            t.run(&["REPLCONF", "capa", "eof", "capa", "psync2"]),
            "+OK\r\n"
        );
        assert_eq!(
            t.run(&["PSYNC", "?", "x"]),
            "-ERR value is not an integer or out of range\r\n"
        );
    }

    /// A shard's part of the RDB file is built up to its bound and refused one byte past it.
    #[test]
    fn a_part_is_built_at_its_bound_and_refused_past_it() {
        let mut t = Harness::new();
        for i in 0..50 {
            t.run(&["SET", &format!("k{i}"), "v"]);
        }
        let now = crate::time::wall_ms();
        let whole = rdb_part_within(&mut t.shard, false, now, u64::MAX).unwrap();
        let bytes: u64 = whole.dbs.iter().map(|d| d.3.len() as u64).sum();
        assert_eq!(whole.dbs.first().map(|d| d.1), Some(50));
        assert!(rdb_part_within(&mut t.shard, false, now, bytes).is_ok());
        let e = rdb_part_within(&mut t.shard, false, now, bytes - 1).unwrap_err();
        assert!(e.contains("would pass"), "{e}");
    }
}
