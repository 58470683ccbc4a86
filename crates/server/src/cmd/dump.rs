//! DUMP, RESTORE and MIGRATE: values in Redis's own serialization (`meridian-rdb`).
//!
//! DUMP writes the payload Redis 7.0 would write for a value of the same contents under the
//! current encoding thresholds (`hash-max-listpack-*`, `zset-max-listpack-*`,
//! `set-max-intset-entries`, `list-max-listpack-size`, `list-compress-depth`,
//! `rdbcompression`, `stream-node-max-bytes`, `stream-node-max-entries`). RESTORE validates a payload as Redis's deep sanitization does and
//! writes the value through `Shard::write_key` like any command: with REPLACE, a removal of
//! what the key held (an observed DEL), then the writes that build the value (SET, SADD,
//! HSET, ZADD, RPUSH effects; for a stream, its entries, an XSETID of its counters, and
//! each group's creation, consumers and pending entries), then its TTL; so it replicates as CRDT effects
//! (docs/conflicts.md §16). MIGRATE sends RESTORE commands to another server over a plain
//! TCP connection opened for the command (no connection cache: INFO shows
//! `migrate_cached_sockets:0`); each connect, write and read waits at most the given
//! timeout, in slices that watch the stop request.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use meridian_crdt::list::ListCrdt;
use meridian_crdt::stream::{GroupImage, StreamImage};
use meridian_crdt::zset::F64;
use meridian_crdt::{
    Effect, Expire, HashOp, KeyState, StrView, StreamCrdt, StreamId, TypeTag, VersionVector, ZSetOp,
};
use meridian_rdb::{
    Encoder, Limits, ListOptions, RdbError, Stream, StreamGroup, StreamNodes, StreamPending, Value,
};

use super::args::{eq_ic, parse_i64};
use super::{Ctx, Handler};
use crate::config::{Config, ListpackLimits};
use crate::error::CmdError;
use crate::keyspace::lru_clock;

pub const HANDLERS: &[(&str, Handler)] =
    &[("dump", dump), ("restore", restore), ("migrate", migrate)];

/// What a RESTORE payload may decode to, in units of `proto-max-bulk-len`: one string at
/// most one unit (a longer one could not be SET either), the whole value at most this many.
pub const RESTORE_VALUE_BULKS: u64 = 4;

/// Largest reply line MIGRATE reads from the target (`connSyncReadLine`'s buffer).
const MIGRATE_LINE_BYTES_MAX: usize = 1024;
/// MIGRATE writes the command stream in chunks of this size (Redis: 64 KiB).
const MIGRATE_WRITE_CHUNK_BYTES: usize = 64 * 1024;
/// Longest blocking I/O call between two looks at the stop request.
const MIGRATE_IO_SLICE: Duration = Duration::from_millis(100);
/// MIGRATE's timeout when given one of 0 or less (Redis: 1000 ms).
const MIGRATE_TIMEOUT_MS_DEFAULT: i64 = 1000;

fn arg<'a>(argv: &[&'a [u8]], i: usize) -> &'a [u8] {
    argv.get(i).copied().unwrap_or_default()
}

// ---------------------------------------------------------------------------------------------
// DUMP

/// A parameter Meridian stores without a field of its own, as an integer.
fn stored_int(config: &Config, name: &str, default: i64) -> i64 {
    config
        .stored
        .get(name)
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The encoding parameters DUMP reads from the configuration.
#[derive(Clone, Copy, Debug)]
pub struct DumpOptions {
    enc: Encoder,
    intset_max: u64,
    hash: ListpackLimits,
    zset: ListpackLimits,
    list: ListOptions,
    stream: StreamNodes,
}

impl DumpOptions {
    /// The string encoder (`rdbcompression`).
    pub fn encoder(&self) -> Encoder {
        self.enc
    }

    /// The same options for an RDB file's records: values without a DUMP footer.
    pub fn for_file(mut self) -> DumpOptions {
        self.enc = self.enc.for_file();
        self
    }

    pub fn from_config(config: &Config) -> DumpOptions {
        DumpOptions {
            enc: Encoder {
                compress: config
                    .stored
                    .get("rdbcompression")
                    .is_none_or(|v| v == "yes"),
                footer: true,
            },
            intset_max: config.set_max_intset_entries,
            hash: config.hash_listpack(),
            zset: config.zset_listpack(),
            list: ListOptions {
                fill: i32::try_from(stored_int(config, "list-max-listpack-size", -2)).unwrap_or(-2),
                compress_depth: u32::try_from(stored_int(config, "list-compress-depth", 0))
                    .unwrap_or(0),
            },
            stream: StreamNodes {
                max_bytes: config.stream_node_max_bytes,
                max_entries: config.stream_node_max_entries,
            },
        }
    }
}

/// The payload of the visible value of `state` (`None` when the key is empty).
pub fn dump_payload(state: &KeyState, opts: &DumpOptions) -> Option<Vec<u8>> {
    let enc = opts.enc;
    Some(match state.type_tag()? {
        TypeTag::String => match state.view_str().unwrap_or(StrView::Bytes(b"")) {
            StrView::Bytes(b) => enc.string(b),
            other => enc.string(&other.to_bytes()),
        },
        TypeTag::Hll => enc.string(state.hll()?.bytes()),
        TypeTag::Set => {
            let s = state.set()?;
            let members: Vec<&[u8]> = s.members().collect();
            // A set Redis holds as a hashtable (`OrSet::fits_intset`) dumps as one: no
            // member fits an intset of 0 entries.
            let intset_max = if s.fits_intset(opts.intset_max) {
                opts.intset_max
            } else {
                0
            };
            enc.set(&members, intset_max)
        }
        TypeTag::Hash => {
            let h = state.hash()?;
            let pairs: Vec<(&[u8], Vec<u8>)> = h.iter().map(|(f, v)| (f, v.to_bytes())).collect();
            enc.hash(
                pairs.iter().map(|(f, v)| (*f, v.as_slice())),
                h.fits_listpack(opts.hash.entries_max, opts.hash.value_max),
            )
        }
        TypeTag::ZSet => {
            let z = state.zset()?;
            enc.zset(z.iter(), super::zset::encoding(z, opts.zset) == "listpack")
        }
        TypeTag::List => enc.list(state.list()?.iter().map(|e| e.value), opts.list),
        TypeTag::Stream => enc.stream(&rdb_stream(state.stream()?), opts.stream),
    })
}

fn rdb_id(id: StreamId) -> meridian_rdb::StreamId {
    (id.ms, id.seq)
}

fn crdt_id(id: meridian_rdb::StreamId) -> StreamId {
    StreamId::new(id.0, id.1)
}

/// A time Redis stores as a signed `mstime_t`; Meridian's are unsigned (a negative one,
/// which no Redis clock writes, reads as 0).
fn ms(t: i64) -> u64 {
    u64::try_from(t).unwrap_or(0)
}

fn ms_signed(t: u64) -> i64 {
    i64::try_from(t).unwrap_or(i64::MAX)
}

/// A stream's visible value as `meridian-rdb` contents.
fn rdb_stream(s: &StreamCrdt) -> Stream {
    let img = s.image();
    let groups = img
        .groups
        .into_iter()
        .map(|g| StreamGroup {
            name: g.name,
            last_id: rdb_id(g.last_id),
            entries_read: g.entries_read,
            consumers: g
                .consumers
                .into_iter()
                .map(|(n, seen)| (n, ms_signed(seen)))
                .collect(),
            pending: g
                .pending
                .into_iter()
                .map(|(id, consumer, time, count)| StreamPending {
                    id: rdb_id(id),
                    consumer,
                    delivery_time: ms_signed(time),
                    delivery_count: count,
                })
                .collect(),
        })
        .collect();
    Stream {
        entries: img
            .entries
            .into_iter()
            .map(|(id, fields)| {
                let mut pairs = Vec::with_capacity(fields.len() / 2);
                let mut it = fields.into_iter();
                while let (Some(f), Some(v)) = (it.next(), it.next()) {
                    pairs.push((f, v));
                }
                (rdb_id(id), pairs)
            })
            .collect(),
        last_id: rdb_id(img.last_id),
        first_id: rdb_id(s.first_id()),
        max_deleted: rdb_id(img.max_deleted),
        entries_added: img.entries_added,
        groups,
    }
}

/// `meridian-rdb` stream contents as the image a recreation builds.
fn stream_image(s: Stream) -> StreamImage {
    StreamImage {
        entries: s
            .entries
            .into_iter()
            .map(|(id, pairs)| {
                let fields = pairs.into_iter().flat_map(|(f, v)| [f, v]).collect();
                (crdt_id(id), fields)
            })
            .collect(),
        last_id: crdt_id(s.last_id),
        entries_added: s.entries_added,
        max_deleted: crdt_id(s.max_deleted),
        groups: s
            .groups
            .into_iter()
            .map(|g| GroupImage {
                name: g.name,
                last_id: crdt_id(g.last_id),
                entries_read: g.entries_read,
                consumers: g.consumers.into_iter().map(|(n, t)| (n, ms(t))).collect(),
                pending: g
                    .pending
                    .into_iter()
                    .map(|p| {
                        (
                            crdt_id(p.id),
                            p.consumer,
                            ms(p.delivery_time),
                            p.delivery_count,
                        )
                    })
                    .collect(),
            })
            .collect(),
    }
}

/// DUMP key: the payload, or null for a missing key.
fn dump(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let db = ctx.db();
    let now = ctx.now_ms;
    let opts = DumpOptions::from_config(&ctx.shard.config);
    let state = ctx.shard.lookup_read(db, arg(argv, 1), now);
    let payload = state.and_then(|state| dump_payload(state, &opts));
    match payload {
        Some(p) => ctx.out.bulk(&p),
        None => ctx.out.null(),
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// RESTORE

/// The effects that build `value` on an empty key, in order (strings aside: see `write_value`).
fn value_effects(value: Value) -> Vec<Effect<Vec<u8>>> {
    match value {
        Value::Str(_) => Vec::new(),
        Value::List(items) => ListCrdt::load_ops(items)
            .into_iter()
            .map(Effect::List)
            .collect(),
        Value::Set(members) => members
            .into_iter()
            .map(|member| Effect::SetAdd { member })
            .collect(),
        Value::Hash(pairs) => pairs
            .into_iter()
            .map(|(field, value)| {
                Effect::Hash(HashOp::Set {
                    field,
                    value,
                    observed: VersionVector::new(),
                })
            })
            .collect(),
        Value::ZSet(pairs) => pairs
            .into_iter()
            .map(|(member, score)| {
                Effect::ZSet(ZSetOp::Add {
                    member,
                    score: F64(score),
                    observed: VersionVector::new(),
                })
            })
            .collect(),
        Value::Stream(s) => stream_image(s)
            .into_ops()
            .into_iter()
            .map(Effect::Stream)
            .collect(),
    }
}

/// Writes `value` to the empty `key` through the write path: a string as SET writes it (a
/// valid HyperLogLog becomes one, as in Redis), collections as the writes that build them.
fn write_value(ctx: &mut Ctx<'_>, key: &[u8], value: Value) {
    let db = ctx.db();
    write_value_on(ctx.shard, db, key, value, ctx.now_ms);
}

/// `write_value` on `shard`'s database `db` (DEBUG RELOAD NOSAVE's keys).
pub fn write_value_on(
    shard: &mut crate::shard::Shard,
    db: usize,
    key: &[u8],
    value: Value,
    now: u64,
) {
    if let Value::Str(bytes) = &value {
        super::hll::store_string_on(shard, db, key, bytes, false, now);
        return;
    }
    for effect in value_effects(value) {
        shard.write_key(db, key, now, |_| effect);
    }
}

/// What RESTORE was asked, after its options.
struct RestoreArgs {
    replace: bool,
    absttl: bool,
    idle_s: Option<i64>,
    freq: Option<i64>,
}

/// Redis's option loop (`restoreCommand`): REPLACE, ABSTTL, IDLETIME seconds, FREQ
/// frequency (IDLETIME and FREQ exclude each other: the second one is a syntax error).
fn parse_restore_options(argv: &[&[u8]]) -> Result<RestoreArgs, CmdError> {
    let mut a = RestoreArgs {
        replace: false,
        absttl: false,
        idle_s: None,
        freq: None,
    };
    let mut j = 4;
    while j < argv.len() {
        let opt = arg(argv, j);
        let more = argv.len() - j - 1;
        if eq_ic(opt, "replace") {
            a.replace = true;
        } else if eq_ic(opt, "absttl") {
            a.absttl = true;
        } else if eq_ic(opt, "idletime") && more >= 1 && a.freq.is_none() {
            let v = parse_i64(arg(argv, j + 1)).ok_or(CmdError::NotInteger)?;
            if v < 0 {
                return Err(CmdError::Err(
                    "Invalid IDLETIME value, must be >= 0".to_string(),
                ));
            }
            a.idle_s = Some(v);
            j += 1;
        } else if eq_ic(opt, "freq") && more >= 1 && a.idle_s.is_none() {
            let v = parse_i64(arg(argv, j + 1)).ok_or(CmdError::NotInteger)?;
            if !(0..=255).contains(&v) {
                return Err(CmdError::Err(
                    "Invalid FREQ value, must be >= 0 and <= 255".to_string(),
                ));
            }
            a.freq = Some(v);
            j += 1;
        } else {
            return Err(CmdError::Syntax);
        }
        j += 1;
    }
    Ok(a)
}

/// What one value may decode to (`RESTORE_VALUE_BULKS`), and whether checksums are checked
/// (DEBUG SET-SKIP-CHECKSUM-VALIDATION), for RESTORE payloads and RDB files alike.
pub fn restore_limits(shard: &crate::shard::Shard) -> (Limits, meridian_rdb::Crc) {
    let bulk = shard.config.proto_max_bulk_len;
    let limits = Limits {
        string_bytes_max: bulk,
        value_bytes_max: bulk.saturating_mul(RESTORE_VALUE_BULKS),
    };
    let crc = if shard.stats.skip_checksum_validation {
        meridian_rdb::Crc::Skip
    } else {
        meridian_rdb::Crc::Verify
    };
    (limits, crc)
}

/// Decodes a RESTORE payload with the server's limits, counting sanitizations.
pub fn decode_restore_payload(ctx: &mut Ctx<'_>, payload: &[u8]) -> Result<Value, CmdError> {
    let (limits, crc) = restore_limits(ctx.shard);
    match meridian_rdb::decode_payload_with(payload, limits, crc) {
        Ok(d) => {
            ctx.shard.stats.dump_payload_sanitizations += d.sanitized;
            Ok(d.value)
        }
        Err(RdbError::Footer) => Err(CmdError::Err(
            "DUMP payload version or checksum are wrong".to_string(),
        )),
        Err(e) => {
            tracing::debug!(error = %e, "RESTORE payload refused");
            Err(CmdError::Err("Bad data format".to_string()))
        }
    }
}

/// RESTORE key ttl serialized-value [REPLACE] [ABSTTL] [IDLETIME seconds] [FREQ frequency].
///
/// Checks in Redis's order: options, BUSYKEY, TTL, footer, value. As Redis's
/// `objectSetLRUOrLFU`: under an LFU `maxmemory-policy` FREQ sets the key's frequency
/// counter (OBJECT FREQ), under any other IDLETIME sets its idle time (OBJECT IDLETIME).
fn restore(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let key = arg(argv, 1);
    let a = parse_restore_options(argv)?;
    let db = ctx.db();
    let now = ctx.now_ms;
    if !a.replace && ctx.shard.lookup_quiet(db, key, now).is_some() {
        return Err(CmdError::Raw(
            "BUSYKEY Target key name already exists.".to_string(),
        ));
    }
    let ttl = parse_i64(arg(argv, 2)).ok_or(CmdError::NotInteger)?;
    if ttl < 0 {
        return Err(CmdError::Err("Invalid TTL value, must be >= 0".to_string()));
    }
    let value = decode_restore_payload(ctx, arg(argv, 3))?;
    let deleted = a.replace && ctx.shard.delete_key(db, key, now);
    // Redis adds the time in C `long long` arithmetic: a TTL that overflows wraps to a
    // deadline in the past, which removes the key.
    let at_ms = match (ttl, a.absttl) {
        (0, _) => None,
        (t, true) => Some(t),
        (t, false) => Some(t.wrapping_add(now as i64)),
    };
    if at_ms.is_some_and(|at| at <= now as i64) {
        if deleted {
            ctx.notify(crate::notify::GENERIC, "del", key);
        }
        ctx.out.ok();
        return Ok(());
    }
    write_value(ctx, key, value);
    if let Some(at) = at_ms.and_then(|at| u64::try_from(at).ok()) {
        ctx.shard.write_key(db, key, now, |st| {
            st.expire_effect::<&[u8]>(Expire::AtMs(at))
        });
    }
    set_access(ctx, key, &a);
    ctx.notify(crate::notify::GENERIC, "restore", key);
    ctx.out.ok();
    Ok(())
}

/// Sets the key's access field (`Entry::lru_s`) as `objectSetLRUOrLFU` does: under an LFU
/// policy, Redis's 16 bits of minutes and the 8-bit counter `FREQ` gave; under any other,
/// the 24-bit LRU clock `IDLETIME` seconds back.
fn set_access(ctx: &mut Ctx<'_>, key: &[u8], a: &RestoreArgs) {
    let db = ctx.db();
    set_access_on(ctx.shard, db, key, a.idle_s, a.freq, ctx.now_ms);
}

/// `set_access` on `shard`'s database `db`: `idle_s` and `freq` as IDLETIME and FREQ give them
/// (DEBUG RELOAD NOSAVE: a file's IDLE and FREQ opcodes, as `rdbLoad`'s `objectSetLRUOrLFU`).
pub fn set_access_on(
    shard: &mut crate::shard::Shard,
    db: usize,
    key: &[u8],
    idle_s: Option<i64>,
    freq: Option<i64>,
    now_ms: u64,
) {
    let lfu = shard.config.maxmemory_policy.ends_with("-lfu");
    let field = match (lfu, freq, idle_s) {
        (true, Some(freq), _) => {
            let minutes = ((now_ms / 60_000) & 0xffff) as u32;
            (minutes << 8) | u32::try_from(freq).unwrap_or(0)
        }
        (false, _, Some(idle_s)) => {
            let now = lru_clock(now_ms);
            let idle = u32::try_from(idle_s.rem_euclid(i64::from(LRU_CLOCK_MAX) + 1)).unwrap_or(0);
            if idle <= now {
                now - idle
            } else {
                LRU_CLOCK_MAX - (idle - now) + 1
            }
        }
        _ => return,
    };
    let hash = shard.hash_key(key);
    if let Some(e) = shard.dbs.get_mut(db).and_then(|d| d.get_mut(hash, key)) {
        e.lru_s = field;
    }
}

/// The LRU clock's largest value (24 bits).
const LRU_CLOCK_MAX: u32 = 0x00ff_ffff;

// ---------------------------------------------------------------------------------------------
// MIGRATE

/// Why a MIGRATE exchange failed on the socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum IoFailure {
    /// The timeout passed (Redis does not retry after ETIMEDOUT).
    Timeout,
    /// Any other error, a closed connection, or a line too long.
    Other,
    /// The target's name did not resolve to an address.
    Unresolved,
    /// The process is stopping.
    Stopping,
}

/// A blocking connection to the target, every operation bounded by `timeout`.
struct Target {
    stream: TcpStream,
    timeout: Duration,
    /// Bytes read past the last line.
    pending: Vec<u8>,
}

impl Target {
    /// Connects to `host:port` within `timeout` (the first address that answers).
    fn connect(host: &str, port: u16, timeout: Duration) -> Result<Target, IoFailure> {
        let addrs: Vec<_> = (host, port)
            .to_socket_addrs()
            .map_err(|_| IoFailure::Unresolved)?
            .collect();
        if addrs.is_empty() {
            return Err(IoFailure::Unresolved);
        }
        let deadline = Instant::now() + timeout;
        let mut failure = IoFailure::Other;
        for addr in addrs {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(IoFailure::Timeout);
            }
            match TcpStream::connect_timeout(&addr, left) {
                Ok(stream) => {
                    let _ = stream.set_nodelay(true);
                    return Ok(Target {
                        stream,
                        timeout,
                        pending: Vec::new(),
                    });
                }
                Err(e) if e.kind() == std::io::ErrorKind::TimedOut => failure = IoFailure::Timeout,
                Err(_) => failure = IoFailure::Other,
            }
        }
        Err(failure)
    }

    /// Sets the socket timeout for the next slice of an operation ending at `deadline`.
    fn slice(&self, deadline: Instant, write: bool) -> Result<(), IoFailure> {
        if crate::stop::requested() {
            return Err(IoFailure::Stopping);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(IoFailure::Timeout);
        }
        let t = Some(left.min(MIGRATE_IO_SLICE));
        let r = if write {
            self.stream.set_write_timeout(t)
        } else {
            self.stream.set_read_timeout(t)
        };
        r.map_err(|_| IoFailure::Other)
    }

    /// Writes `buf` in chunks, each within the timeout (`connSyncWrite`).
    fn write_all(&mut self, buf: &[u8]) -> Result<(), IoFailure> {
        for chunk in buf.chunks(MIGRATE_WRITE_CHUNK_BYTES) {
            let deadline = Instant::now() + self.timeout;
            let mut done = 0;
            while done < chunk.len() {
                self.slice(deadline, true)?;
                match self.stream.write(chunk.get(done..).unwrap_or_default()) {
                    Ok(0) => return Err(IoFailure::Other),
                    Ok(n) => done += n,
                    Err(e) if is_retry(&e) => {}
                    Err(_) => return Err(IoFailure::Other),
                }
            }
        }
        Ok(())
    }

    /// Reads one reply line without its CRLF, within the timeout (`connSyncReadLine`).
    fn read_line(&mut self) -> Result<Vec<u8>, IoFailure> {
        let deadline = Instant::now() + self.timeout;
        loop {
            if let Some(i) = self.pending.iter().position(|&b| b == b'\n') {
                let mut line: Vec<u8> = self.pending.drain(..=i).collect();
                line.pop();
                if line.last() == Some(&b'\r') {
                    line.pop();
                }
                return Ok(line);
            }
            if self.pending.len() >= MIGRATE_LINE_BYTES_MAX {
                return Err(IoFailure::Other);
            }
            self.slice(deadline, false)?;
            let mut buf = [0u8; 512];
            match self.stream.read(&mut buf) {
                Ok(0) => return Err(IoFailure::Other),
                Ok(n) => self
                    .pending
                    .extend_from_slice(buf.get(..n).unwrap_or_default()),
                Err(e) if is_retry(&e) => {}
                Err(_) => return Err(IoFailure::Other),
            }
        }
    }
}

fn is_retry(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock
            | std::io::ErrorKind::TimedOut
            | std::io::ErrorKind::Interrupted
    )
}

/// C's `atoi` of a port: leading digits, else 0.
fn atoi_port(b: &[u8]) -> u16 {
    let digits: Vec<u8> = b.iter().copied().take_while(u8::is_ascii_digit).collect();
    std::str::from_utf8(&digits)
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .map_or(0, |v| (v % 65536) as u16)
}

/// MIGRATE's parsed arguments.
struct MigrateArgs<'a> {
    copy: bool,
    replace: bool,
    username: Option<&'a [u8]>,
    password: Option<&'a [u8]>,
    keys: Vec<&'a [u8]>,
    timeout_ms: i64,
    db: i64,
}

fn parse_migrate<'a>(argv: &[&'a [u8]]) -> Result<MigrateArgs<'a>, CmdError> {
    let mut m = MigrateArgs {
        copy: false,
        replace: false,
        username: None,
        password: None,
        keys: vec![arg(argv, 3)],
        timeout_ms: 0,
        db: 0,
    };
    let mut j = 6;
    while j < argv.len() {
        let more = argv.len() - 1 - j;
        let opt = arg(argv, j);
        if eq_ic(opt, "copy") {
            m.copy = true;
        } else if eq_ic(opt, "replace") {
            m.replace = true;
        } else if eq_ic(opt, "auth") {
            if more == 0 {
                return Err(CmdError::Syntax);
            }
            j += 1;
            m.password = Some(arg(argv, j));
        } else if eq_ic(opt, "auth2") {
            if more < 2 {
                return Err(CmdError::Syntax);
            }
            m.username = Some(arg(argv, j + 1));
            m.password = Some(arg(argv, j + 2));
            j += 2;
        } else if eq_ic(opt, "keys") {
            if !arg(argv, 3).is_empty() {
                return Err(CmdError::Err(
                    "When using MIGRATE KEYS option, the key argument must be set to the empty string"
                        .to_string(),
                ));
            }
            m.keys = argv.get(j + 1..).unwrap_or_default().to_vec();
            break;
        } else {
            return Err(CmdError::Syntax);
        }
        j += 1;
    }
    m.timeout_ms = parse_i64(arg(argv, 5)).ok_or(CmdError::NotInteger)?;
    m.db = parse_i64(arg(argv, 4)).ok_or(CmdError::NotInteger)?;
    if m.timeout_ms <= 0 {
        m.timeout_ms = MIGRATE_TIMEOUT_MS_DEFAULT;
    }
    Ok(m)
}

/// What one exchange with the target ended with.
enum Exchange {
    /// Replies read for every key: the first error the target gave, if any.
    Done(Option<Vec<u8>>),
    /// The socket failed: whether writing, how, and how many RESTORE replies were read.
    Failed {
        writing: bool,
        why: IoFailure,
        replies: usize,
    },
}

/// Sends AUTH, SELECT and the RESTOREs in `cmd`, reads the replies, and deletes (unless
/// `copy`) each key the target acknowledged, as `migrateCommand` does: an error to AUTH or
/// SELECT fails every key; otherwise each key whose RESTORE succeeded is deleted even when
/// another one failed, and the first error is the one reported.
fn exchange(
    ctx: &mut Ctx<'_>,
    target: &mut Target,
    m: &MigrateArgs<'_>,
    cmd: &[u8],
    keys: &[&[u8]],
) -> Exchange {
    if let Err(why) = target.write_all(cmd) {
        return Exchange::Failed {
            writing: true,
            why,
            replies: 0,
        };
    }
    let mut setup_error: Option<Vec<u8>> = None;
    for _ in [m.password.is_some(), true].iter().filter(|x| **x) {
        match target.read_line() {
            Ok(line) if line.first() == Some(&b'-') && setup_error.is_none() => {
                setup_error = Some(line);
            }
            Ok(_) => {}
            Err(why) => {
                return Exchange::Failed {
                    writing: false,
                    why,
                    replies: 0,
                };
            }
        }
    }
    let failed_setup = setup_error.is_some();
    let mut first_error = setup_error;
    let db = ctx.db();
    let now = ctx.now_ms;
    for (i, key) in keys.iter().enumerate() {
        let line = match target.read_line() {
            Ok(line) => line,
            Err(why) if first_error.is_none() => {
                return Exchange::Failed {
                    writing: false,
                    why,
                    replies: i,
                };
            }
            Err(_) => break,
        };
        if failed_setup || line.first() == Some(&b'-') {
            if first_error.is_none() {
                first_error = Some(line);
            }
        } else if !m.copy && ctx.shard.delete_key(db, key, now) {
            ctx.shard.notify(crate::notify::GENERIC, "del", db, key);
        }
    }
    Exchange::Done(first_error)
}

/// MIGRATE host port key|"" destination-db timeout [COPY] [REPLACE] [AUTH password]
/// [AUTH2 username password] [KEYS key...]: Redis's replies (`+NOKEY`, `-IOERR ...`,
/// `Target instance replied with error: ...`), one retry on a socket error before any reply
/// unless it was a timeout.
fn migrate(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let m = parse_migrate(argv)?;
    let db = ctx.db();
    let now = ctx.now_ms;
    let opts = DumpOptions::from_config(&ctx.shard.config);
    let mut cmd: Vec<u8> = Vec::new();
    if let Some(pw) = m.password {
        match m.username {
            Some(user) => crate::resp::put_command(&mut cmd, &[b"AUTH", user, pw]),
            None => crate::resp::put_command(&mut cmd, &[b"AUTH", pw]),
        }
    }
    crate::resp::put_command(&mut cmd, &[b"SELECT", m.db.to_string().as_bytes()]);
    let mut sent: Vec<&[u8]> = Vec::new();
    for &key in &m.keys {
        let Some(state) = ctx.shard.lookup_read(db, key, now) else {
            continue;
        };
        let ttl = match state.expire_at_ms() {
            Some(at) => i64::try_from(at.saturating_sub(now))
                .unwrap_or(i64::MAX)
                .max(1),
            None => 0,
        };
        let Some(payload) = dump_payload(state, &opts) else {
            continue;
        };
        let ttl = ttl.to_string();
        let mut args: Vec<&[u8]> = vec![b"RESTORE", key, ttl.as_bytes(), &payload];
        if m.replace {
            args.push(b"REPLACE");
        }
        crate::resp::put_command(&mut cmd, &args);
        sent.push(key);
    }
    if sent.is_empty() {
        ctx.out.simple("NOKEY");
        return Ok(());
    }
    let host = String::from_utf8_lossy(arg(argv, 1)).into_owned();
    let port = atoi_port(arg(argv, 2));
    let timeout = Duration::from_millis(m.timeout_ms.unsigned_abs());
    let mut may_retry = true;
    loop {
        // Redis connects without blocking and fails at once only when the name does not
        // resolve; a refused or timed-out connection fails at its first write, and is retried
        // as one (but a timeout).
        let connected = match Target::connect(&host, port, timeout) {
            Ok(mut target) => exchange(ctx, &mut target, &m, &cmd, &sent),
            Err(IoFailure::Unresolved) => {
                return Err(CmdError::Raw(
                    "IOERR error or timeout connecting to the client".to_string(),
                ));
            }
            Err(why) => Exchange::Failed {
                writing: true,
                why,
                replies: 0,
            },
        };
        match connected {
            Exchange::Done(None) => {
                ctx.out.ok();
                return Ok(());
            }
            Exchange::Done(Some(err)) => {
                let text = String::from_utf8_lossy(err.get(1..).unwrap_or_default()).into_owned();
                return Err(CmdError::Err(format!(
                    "Target instance replied with error: {text}"
                )));
            }
            Exchange::Failed {
                writing,
                why,
                replies,
            } => {
                if why == IoFailure::Stopping {
                    return Err(CmdError::ShuttingDown);
                }
                if may_retry && replies == 0 && why != IoFailure::Timeout {
                    may_retry = false;
                    continue;
                }
                return Err(CmdError::Raw(format!(
                    "IOERR error or timeout {} to target instance",
                    if writing { "writing" } else { "reading" }
                )));
            }
        }
    }
}
