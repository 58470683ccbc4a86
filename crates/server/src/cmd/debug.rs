//! DEBUG OBJECT, PROTOCOL, DIGEST, DIGEST-VALUE, POPULATE, RELOAD and LOADAOF, the flags
//! DEBUG sets on every shard, and where each runs on the main port of several shards
//! (Redis 7.0 `debug.c`); DEBUG itself and its other subcommands are in `server`.
//!
//! DIGEST and DIGEST-VALUE compute Redis's own dataset digest (SHA1 mixed and xored per key,
//! element and expiry exactly as `xorObjectDigest`), so the same data gives the same digest on
//! Meridian and on Redis. CRDT.DIGEST is Meridian's digest for comparing sites.

use std::io::Write as _;

use meridian_crdt::{KeyState, StrView, StreamId, TypeTag};

use super::{Ctx, args::eq_ic};
use crate::error::CmdError;
use crate::keyspace::Entry;
use crate::resp::reply::{Proto, format_double};
use crate::sha1::sha1;

/// DEBUG OBJECT key: Redis's status line, for a key whose TTL passed too.
/// `serializedlength` is the length of the key's state in Meridian's snapshot encoding; a
/// list shows no quicklist fields (Meridian's lists are no quicklist).
pub fn object(ctx: &mut Ctx<'_>, key: &[u8]) -> Result<(), CmdError> {
    let db = ctx.db();
    let now = ctx.now_ms;
    let lfu = ctx.shard.lfu;
    let limits = super::keys::EncodingLimits::of(&ctx.shard.config);
    // Redis's `dictFind`: a key whose TTL passed and that is not deleted yet is still found
    // (its tests check that a stale key is there this way), and nothing is expired.
    let Some(e) = ctx.shard.peek(db, key) else {
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

/// DEBUG DIGEST: Redis's digest of the whole dataset (40 hex digits; zeros when empty). On
/// the main port of a process of several shards the connection joins every shard's part
/// (`digest_parts`, `conn`'s `debug_across`); here, this shard's keys.
pub fn digest(ctx: &mut Ctx<'_>) -> Result<(), CmdError> {
    ctx.out
        .simple(&digest_hex(&digest_join(digest_parts(ctx.shard))));
    Ok(())
}

/// What one shard adds to DEBUG DIGEST: for each database where it holds a key, the XOR of
/// its keys' digests. Redis's `computeDatasetDigest` XORs the keys of a database into the
/// total (order-free) and mixes only the database ids in, in order, so the parts of shards
/// holding disjoint keys join into exactly the digest of one server holding them all
/// (`digest_join`).
pub type DigestParts = Vec<(u32, [u8; 20])>;

/// This shard's `DigestParts`.
pub fn digest_parts(shard: &crate::shard::Shard) -> DigestParts {
    let mut parts = DigestParts::new();
    for (i, d) in shard.dbs.iter().enumerate() {
        let mut xor = [0u8; 20];
        let mut any = false;
        for e in d.table.iter().filter(|e| !e.state.is_empty()) {
            let mut one = [0u8; 20];
            mix_digest(&mut one, &e.key);
            xor_object_digest(&mut one, &e.state);
            // `xorDigest(final, digest, 20)`: the SHA1 of the key's digest.
            xor_digest(&mut xor, &one);
            any = true;
        }
        if any {
            parts.push((u32::try_from(i).unwrap_or(u32::MAX), xor));
        }
    }
    parts
}

/// DEBUG DIGEST of the data whose shards' parts are `parts`: each database holding a key
/// (ascending) mixed in by its id, then its keys' XOR.
pub fn digest_join(parts: impl IntoIterator<Item = (u32, [u8; 20])>) -> [u8; 20] {
    let mut by_db: std::collections::BTreeMap<u32, [u8; 20]> = Default::default();
    for (db, xor) in parts {
        xor_into(by_db.entry(db).or_insert([0u8; 20]), &xor);
    }
    let mut total = [0u8; 20];
    for (db, xor) in by_db {
        mix_digest(&mut total, &db.to_be_bytes());
        xor_into(&mut total, &xor);
    }
    total
}

/// A digest as DEBUG DIGEST writes it: 40 lowercase hex digits.
pub fn digest_hex(d: &[u8; 20]) -> String {
    String::from_utf8_lossy(&crate::sha1::hex(*d)).into_owned()
}

/// A shard's flag a DEBUG subcommand `<0|1>` sets.
type FlagOf = fn(&mut crate::shard::Shard) -> &mut bool;

/// The DEBUG subcommands `<0|1>` that set a flag every shard keeps: each one's flag, and
/// whether `1` sets it (SET-ACTIVE-EXPIRE 0 is what disables active expiry). They run on
/// every shard, as one server's setting (`on_every_shard`).
const FLAG_SUBCOMMANDS: [(&str, FlagOf, bool); 4] = [
    (
        "set-active-expire",
        |s| &mut s.stats.active_expire_disabled,
        false,
    ),
    (
        "set-disable-deny-scripts",
        |s| &mut s.scripting.noscript_allowed,
        true,
    ),
    (
        "set-skip-checksum-validation",
        |s| &mut s.stats.skip_checksum_validation,
        true,
    ),
    ("pause-cron", |s| &mut s.stats.cron_paused, true),
];

/// Whether DEBUG `sub` sets a flag every shard keeps (`FLAG_SUBCOMMANDS`).
pub fn on_every_shard(sub: &[u8]) -> bool {
    FLAG_SUBCOMMANDS.iter().any(|(name, _, _)| eq_ic(sub, name))
}

/// The shard's flag DEBUG `sub` sets, and whether `1` sets it (`FLAG_SUBCOMMANDS`).
pub fn flag<'a>(shard: &'a mut crate::shard::Shard, sub: &[u8]) -> Option<(&'a mut bool, bool)> {
    let (_, of, set_by_one) = FLAG_SUBCOMMANDS
        .iter()
        .find(|(name, _, _)| eq_ic(sub, name))?;
    Some((of(shard), *set_by_one))
}

/// Where the main port of a process of several shards runs a DEBUG subcommand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// On the connection's thread (no key, or keys of its shard).
    Here,
    /// On the shard owning the keys it names (OBJECT, DIGEST-VALUE of one shard's keys).
    Shard(u16),
    /// Across every shard, joined by the connection: DIGEST, POPULATE, RELOAD, LOADAOF,
    /// DIGEST-VALUE of keys of several shards.
    Every,
}

/// Where DEBUG `argv` runs, its keys owned as `slots` says.
pub fn place(argv: &[&[u8]], slots: &crate::slot::SlotMap) -> Place {
    let sub = argv.get(1).copied().unwrap_or_default();
    if is_digest(argv)
        || (eq_ic(sub, "populate") && (3..=5).contains(&argv.len()))
        || eq_ic(sub, "reload")
        || (eq_ic(sub, "loadaof") && argv.len() == 2)
    {
        return Place::Every;
    }
    let keys = if (eq_ic(sub, "object") && argv.len() == 3) || eq_ic(sub, "digest-value") {
        argv.get(2..)
    } else {
        None
    };
    let mut owners = keys
        .unwrap_or_default()
        .iter()
        .map(|k| slots.shard_of_key(k));
    match owners.next() {
        None => Place::Here,
        Some(first) if owners.all(|t| t == first) => Place::Shard(first),
        Some(_) => Place::Every,
    }
}

/// Whether `argv` is DEBUG DIGEST-VALUE (with keys or none).
pub fn is_digest_value(argv: &[&[u8]]) -> bool {
    argv.get(1).is_some_and(|s| eq_ic(s, "digest-value"))
}

/// Whether `argv` is DEBUG DIGEST (the whole dataset's, no key).
pub fn is_digest(argv: &[&[u8]]) -> bool {
    argv.len() == 2 && argv.get(1).is_some_and(|s| eq_ic(s, "digest"))
}

/// DEBUG RELOAD's options.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Reload {
    /// NOSAVE: load the RDB file `dir/dbfilename` rather than the snapshot just written
    /// (`reload_rdb`).
    pub nosave: bool,
    pub merge: bool,
    pub noflush: bool,
}

impl Reload {
    /// NOFLUSH without MERGE: what is loaded goes on top of the data, so any key or function
    /// library it holds that is already there is a duplicate, Redis's load error.
    fn noflush_only(&self) -> bool {
        self.noflush && !self.merge
    }
}

/// DEBUG RELOAD's options, checked as Redis checks them. Without NOSAVE the snapshot just
/// written, which holds exactly the data in memory, loads over it to the same data, flushed
/// first or not (`reload`); with NOSAVE the RDB file `dir/dbfilename` is loaded
/// (`reload_rdb`).
pub fn reload_args(argv: &[&[u8]]) -> Result<Reload, CmdError> {
    let mut how = Reload::default();
    for opt in argv.get(2..).unwrap_or_default() {
        if eq_ic(opt, "merge") {
            how.merge = true;
        } else if eq_ic(opt, "noflush") {
            how.noflush = true;
        } else if eq_ic(opt, "nosave") {
            how.nosave = true;
        } else {
            return Err(CmdError::Err(
                "DEBUG RELOAD only supports the MERGE, NOFLUSH and NOSAVE options.".to_string(),
            ));
        }
    }
    Ok(how)
}

/// The RDB file DEBUG RELOAD NOSAVE loads: `dbfilename` in `dir`, as Redis's
/// `server.rdb_filename` (relative to the working directory `dir` is).
pub fn rdb_path(config: &crate::config::Config) -> std::path::PathBuf {
    let name = crate::config::params::find(b"dbfilename")
        .map(|p| p.get(config))
        .unwrap_or_else(|| "dump.rdb".to_string());
    config.dir.join(name)
}

/// DEBUG RELOAD's RDB file: the shards' parts (`replicas::rdb_part`, taken after the reload)
/// joined into one file, as `redis-cli --rdb` would fetch it, written to `dir/dbfilename`
/// (a temporary file fsynced, then renamed over it, as Redis's `rdbSave`), so that a later
/// DEBUG RELOAD NOSAVE loads what this one saved, as in Redis. Meridian's own snapshot was
/// written by the reload's SAVE; this file is a copy in Redis's format.
pub fn write_rdb_file(
    parts: Vec<super::replicas::RdbPart>,
    config: &crate::config::Config,
    now_ms: u64,
) -> Result<(), CmdError> {
    use std::io::Write as _;
    let used = super::server::memory_use().used();
    let file = super::replicas::rdb_file(parts, config, used, now_ms).map_err(CmdError::Err)?;
    let path = rdb_path(config);
    let tmp = config.dir.join(format!("temp-{}.rdb", std::process::id()));
    let written = std::fs::File::create(&tmp)
        .and_then(|mut f| f.write_all(&file).and_then(|()| f.sync_all()))
        .and_then(|()| std::fs::rename(&tmp, &path));
    written.map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        tracing::error!(path = %path.display(), error = %e, "DEBUG RELOAD: cannot write the RDB file");
        CmdError::Raw("ERR".to_string())
    })
}

/// Empty keys of an RDB file logged one by one at a load (Redis's 10); the rest are counted.
const EMPTY_KEYS_LOGGED_MAX: u64 = 10;

/// A key's value of an RDB file this shard loads, with what the opcodes before it said.
#[derive(Debug)]
struct LoadedValue {
    value: meridian_rdb::Value,
    expire_ms: Option<u64>,
    idle_s: Option<i64>,
    freq: Option<i64>,
}

/// What an RDB file holds for one shard: every function library, and the keys of the slots
/// `owns` accepts by (database, name), but those whose expire time passed (left out, as a
/// primary's `rdbLoad` leaves them out).
#[derive(Debug, Default)]
struct RdbImage {
    functions: Vec<Vec<u8>>,
    keys: std::collections::HashMap<(usize, Vec<u8>), LoadedValue, ahash::RandomState>,
    expired: u64,
    empty: u64,
}

/// Reads a whole RDB file (`meridian_rdb::file::FileReader`) into what this shard loads,
/// every record validated and the checksum checked before anything is returned. A key twice
/// in a database is Redis's "duplicated key" error unless `allow_dup` (MERGE: the later one
/// wins); a database past `databases` is refused as Redis refuses it.
fn read_rdb(
    file: &[u8],
    limits: meridian_rdb::Limits,
    crc: meridian_rdb::Crc,
    databases: usize,
    owns: impl Fn(u16) -> bool,
    now_ms: u64,
    allow_dup: bool,
) -> Result<RdbImage, String> {
    use meridian_rdb::file::{FileReader, Record};
    use std::collections::hash_map::Entry;
    let mut reader = FileReader::new(file, limits, crc).map_err(|e| e.to_string())?;
    let mut image = RdbImage::default();
    let mut foreign: std::collections::HashSet<(usize, u64), ahash::RandomState> =
        Default::default();
    let mut poll = crate::stop::Poll::new();
    while let Some(rec) = reader.next_record().map_err(|e| e.to_string())? {
        if poll.stop() {
            return Err("the server is stopping".to_string());
        }
        let k = match rec {
            Record::Function(code) => {
                image.functions.push(code);
                continue;
            }
            Record::Database(db) if db >= databases as u64 => {
                return Err(format!(
                    "Data file was created with a Redis server configured to handle more than {databases} databases"
                ));
            }
            Record::EmptyKey { db, name } => {
                // Logged for the first few only, as Redis logs them.
                image.empty += 1;
                if image.empty <= EMPTY_KEYS_LOGGED_MAX {
                    tracing::warn!(db, key = %String::from_utf8_lossy(&name), "RDB load skipping an empty key");
                }
                continue;
            }
            Record::Key(k) => k,
            Record::Aux { .. } | Record::Database(_) => continue,
        };
        let db = usize::try_from(k.db).unwrap_or(usize::MAX);
        // A key whose time passed is left out before it is added: it neither replaces a key
        // nor counts as a duplicate (`rdbLoadRioWithLoadingCtx`).
        if k.expire_ms.is_some_and(|at| at < now_ms as i64) {
            image.expired += 1;
            continue;
        }
        if !owns(crate::slot::slot(&k.name)) {
            // Another shard's key: its duplicates count here too, so that every shard refuses
            // such a file, not only the owner (each shard loads its part on its own). By a
            // 64-bit hash: a collision refuses a good file, one chance in about 10^13 at a
            // million keys.
            if !allow_dup && !foreign.insert((db, foreign.hasher().hash_one(&k.name))) {
                return Err(format!(
                    "RDB has duplicated key '{}' in DB {db} (or two keys of equal hashes)",
                    String::from_utf8_lossy(&k.name)
                ));
            }
            continue;
        }
        let loaded = LoadedValue {
            value: k.value,
            expire_ms: k.expire_ms.and_then(|at| u64::try_from(at).ok()),
            idle_s: k.idle_s.and_then(|v| i64::try_from(v).ok()),
            freq: k.freq.map(i64::from),
        };
        match image.keys.entry((db, k.name)) {
            Entry::Occupied(e) if !allow_dup => {
                return Err(format!(
                    "RDB has duplicated key '{}' in DB {db}",
                    String::from_utf8_lossy(&e.key().1)
                ));
            }
            Entry::Occupied(mut e) => {
                e.insert(loaded);
            }
            Entry::Vacant(e) => {
                e.insert(loaded);
            }
        }
    }
    Ok(image)
}

/// Redis's load error, for DEBUG RELOAD whatever went wrong (the log says what).
const LOAD_ERROR: &str = "Error trying to load the RDB dump";

/// The RDB file DEBUG RELOAD NOSAVE loads (`rdb_path`), read once for every shard of the
/// process (each reads its part of it).
pub fn read_rdb_file(config: &crate::config::Config) -> Result<std::sync::Arc<[u8]>, CmdError> {
    let path = rdb_path(config);
    std::fs::read(&path).map(Into::into).map_err(|e| {
        tracing::error!(path = %path.display(), error = %e, "DEBUG RELOAD NOSAVE: cannot read the RDB file");
        CmdError::Err(LOAD_ERROR.to_string())
    })
}

/// Redis's DEBUG RELOAD NOSAVE [NOFLUSH] [MERGE] on this shard: loads `file`, the RDB file
/// `dir/dbfilename` (one Redis or `redis-cli --rdb` wrote: Meridian's own snapshots are not
/// RDB files) in place of the data set, or over it with NOFLUSH (MERGE: its keys and
/// libraries replace those of the same name; without MERGE, one already here is an error).
/// The shard loads every function library and the keys of its slots, each a local write as
/// RESTORE's (logged and sent to the other sites); the flush before is FLUSHALL's, functions
/// included (Redis's `emptyData`). Unlike Redis, which empties its data before it reads the
/// file, the whole file is read and checked first: a file that does not load changes nothing.
/// O(keys of the file); a stop request ends it.
fn reload_rdb(
    shard: &mut crate::shard::Shard,
    how: Reload,
    file: &[u8],
    now_ms: u64,
) -> Result<(), CmdError> {
    let load_error = || CmdError::Err(LOAD_ERROR.to_string());
    let path = rdb_path(&shard.config);
    let (limits, mut crc) = super::dump::restore_limits(shard);
    if crate::config::params::find(b"rdbchecksum").is_some_and(|p| p.get(&shard.config) == "no") {
        crc = meridian_rdb::Crc::Skip;
    }
    let image = read_rdb(
        file,
        limits,
        crc,
        shard.dbs.len(),
        |slot| shard.owns_slot(slot),
        now_ms,
        how.merge,
    )
    .map_err(|e| {
        tracing::error!(path = %path.display(), error = %e, "DEBUG RELOAD NOSAVE: the RDB file does not load");
        load_error()
    })?;
    // Every library is built, and checked against those that stay, before anything changes.
    use crate::script::library::{self, RestorePolicy};
    let policy = match (how.noflush, how.merge) {
        (false, _) => RestorePolicy::Flush,
        (true, true) => RestorePolicy::Replace,
        (true, false) => RestorePolicy::Append,
    };
    let mut libraries = shard.scripting.libraries.clone();
    if !image.functions.is_empty() || policy == RestorePolicy::Flush {
        let engine = shard
            .scripting
            .function_engine()
            .map_err(|e| CmdError::Err(e.to_string()))?;
        library::restore_codes(&engine, &mut libraries, &image.functions, policy).map_err(|e| {
            tracing::error!(error = %e, "DEBUG RELOAD NOSAVE: failed loading library");
            load_error()
        })?;
    }
    if how.noflush_only() {
        if let Some((db, name)) = image
            .keys
            .keys()
            .find(|(db, name)| shard.lookup_quiet(*db, name, now_ms).is_some())
        {
            tracing::error!(key = %String::from_utf8_lossy(name), db, "DEBUG RELOAD NOSAVE NOFLUSH: RDB has duplicated key");
            return Err(load_error());
        }
    }
    let mut poll = crate::stop::Poll::new();
    if !how.noflush {
        for db in 0..shard.dbs.len() {
            shard.flush_db(db, now_ms, None);
        }
    }
    shard.scripting.libraries = libraries;
    super::scripting::log_restored(shard, policy, now_ms);
    let loaded = image.keys.len();
    for ((db, name), v) in image.keys {
        if poll.stop() {
            return Err(CmdError::ShuttingDown);
        }
        // MERGE: the file's copy replaces the key.
        if how.noflush {
            shard.delete_key(db, &name, now_ms);
        }
        super::dump::write_value_on(shard, db, &name, v.value, now_ms);
        if let Some(at) = v.expire_ms {
            shard.write_key(db, &name, now_ms, |st| {
                st.expire_effect::<&[u8]>(meridian_crdt::Expire::AtMs(at))
            });
        }
        super::dump::set_access_on(shard, db, &name, v.idle_s, v.freq, now_ms);
    }
    tracing::warn!(
        path = %path.display(),
        loaded,
        expired = image.expired,
        empty_skipped = image.empty,
        "DB reloaded by DEBUG RELOAD NOSAVE"
    );
    Ok(())
}

/// Redis's DEBUG RELOAD on this shard. With NOSAVE it loads `file` (`read_rdb_file`;
/// `reload_rdb`) and returns None. Otherwise it writes its snapshot (as SAVE), then makes each key
/// what loading that snapshot at a start makes of it: its state decoded from its snapshot
/// encoding (`KeyState::decode_state`, as recovery does), the writing command's string
/// encoding forgotten and the access time that of a loaded key. The shard's replication
/// and log positions are left as they are (the snapshot was just written from them). A key
/// whose encoding does not decode back to the same encoding is a snapshot defect: Redis's
/// load error, logged with the key. Clients WATCHing a key that exists are marked dirty, as
/// Redis's emptying of the data set does, and returns the shard's part of the RDB file
/// (`replicas::rdb_part`) for the caller to write (`write_rdb_file`), as Redis's DEBUG RELOAD
/// saves one. O(keys), as in Redis; a stop request ends it.
pub fn reload(
    shard: &mut crate::shard::Shard,
    how: Reload,
    file: Option<&[u8]>,
    now_ms: u64,
) -> Result<Option<super::replicas::RdbPart>, CmdError> {
    if how.nosave {
        let file = file.ok_or_else(|| CmdError::Err(LOAD_ERROR.to_string()))?;
        return reload_rdb(shard, how, file, now_ms).map(|()| None);
    }
    if shard.persist.job.is_some() {
        return Err(CmdError::Err(
            "Background save already in progress".to_string(),
        ));
    }
    shard
        .save_now()
        .map_err(|_| CmdError::Raw("ERR".to_string()))?;
    let load_error = || CmdError::Err(LOAD_ERROR.to_string());
    if how.noflush_only()
        && (!shard.scripting.libraries.is_empty() || shard.dbs.iter().any(|d| !d.is_empty()))
    {
        return Err(load_error());
    }
    let loaded_access = shard
        .access_clock(now_ms)
        .touched(crate::keyspace::NEW_ENTRY);
    let mut poll = crate::stop::Poll::new();
    let (mut first, mut again) = (Vec::new(), Vec::new());
    for (db, d) in shard.dbs.iter_mut().enumerate() {
        for i in 0..d.table.num_buckets() {
            if poll.stop() {
                return Err(CmdError::ShuttingDown);
            }
            let Some(e) = d.table.get_bucket_mut(i) else {
                continue;
            };
            first.clear();
            e.state.encode_state(&mut first);
            let mut r = meridian_crdt::codec::Reader::new(&first);
            let decoded = KeyState::decode_state(&mut r);
            again.clear();
            if let Ok(s) = &decoded {
                s.encode_state(&mut again);
            }
            let (Ok(state), true) = (decoded, again == first && r.is_at_end()) else {
                tracing::error!(
                    "DEBUG RELOAD: key {:?} of database {db} does not load back as it was saved",
                    String::from_utf8_lossy(&e.key)
                );
                return Err(load_error());
            };
            e.state = state;
            e.str_enc = crate::keyspace::StrEnc::Contents;
            e.lru_s = loaded_access;
        }
    }
    let present: Vec<(usize, Vec<u8>)> = shard
        .watched
        .keys()
        .filter(|(db, key)| shard.key_exists_quiet(*db, key))
        .cloned()
        .collect();
    for (db, key) in present {
        shard.touch_watched(db, &key);
    }
    tracing::warn!("DB reloaded by DEBUG RELOAD");
    super::replicas::rdb_part(shard, false, now_ms)
        .map(Some)
        .map_err(CmdError::Err)
}

/// Redis's DEBUG LOADAOF on this shard: its log (with the snapshot it starts from) replayed
/// as a start replays it, into a private shard (`Shard::with_replayed`), must give the data
/// in memory, compared by Redis's dataset digest. Redis empties its data and loads the AOF
/// in its place; here the data stays as it is, and a log that replays to anything else is
/// an error (logged) rather than a data set replaced by it.
pub fn loadaof(shard: &mut crate::shard::Shard) -> Result<(), CmdError> {
    let replayed = shard
        .with_replayed(digest_parts)
        .map_err(|e| CmdError::Err(format!("DEBUG LOADAOF: {e}")))?;
    let (theirs, ours) = (digest_join(replayed), digest_join(digest_parts(shard)));
    if theirs != ours {
        tracing::error!(
            replayed = %digest_hex(&theirs),
            in_memory = %digest_hex(&ours),
            "DEBUG LOADAOF: the log does not replay to the data in memory"
        );
        return Err(CmdError::Err(
            "DEBUG LOADAOF: the log does not replay to the data in memory (see the server log)"
                .to_string(),
        ));
    }
    tracing::warn!("Append Only File loaded by DEBUG LOADAOF");
    Ok(())
}

/// Bytes of a DEBUG POPULATE key name at most: Redis formats it into a 128-byte buffer
/// (`snprintf`), which cuts a longer prefix there.
const POPULATE_KEY_BYTES_MAX: usize = 127;

/// DEBUG POPULATE count [prefix [size]], parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Populate {
    /// Keys `prefix:0` to `prefix:count-1`.
    pub count: u64,
    pub prefix: Vec<u8>,
    /// Each value's length (its first bytes `value:N`, then zeros); None: `value:N`.
    pub size: Option<usize>,
}

/// Redis's `getPositiveLongFromObjectOrReply`: one text for a negative number and for
/// anything that is not a number.
fn positive_long(arg: &[u8]) -> Result<u64, CmdError> {
    super::args::parse_i64(arg)
        .and_then(|n| u64::try_from(n).ok())
        .ok_or_else(|| CmdError::Err("value is out of range, must be positive".into()))
}

/// DEBUG POPULATE's arguments (`argv` from DEBUG on), checked as Redis checks them; the
/// value size is also bounded by `proto-max-bulk-len` (`bulk_max`), the longest value a
/// client could write (Redis has no bound and allocates whatever is asked).
pub fn populate_args(argv: &[&[u8]], bulk_max: u64) -> Result<Populate, CmdError> {
    let count = positive_long(argv.get(2).copied().unwrap_or_default())?;
    let prefix = argv.get(3).map_or_else(|| b"key".to_vec(), |p| p.to_vec());
    let size = match argv.get(4) {
        None => None,
        Some(a) => match positive_long(a)? {
            0 => None,
            n if n > bulk_max => {
                return Err(CmdError::Err(format!(
                    "value size {n} is above proto-max-bulk-len ({bulk_max})"
                )));
            }
            n => Some(
                usize::try_from(n)
                    .map_err(|_| CmdError::Err("value is out of range, must be positive".into()))?,
            ),
        },
    };
    Ok(Populate {
        count,
        prefix,
        size,
    })
}

/// Redis's DEBUG POPULATE on this shard: creates, in `db`, each key `prefix:N` (N below
/// `count`) that hashes to a slot this shard owns and does not exist, holding `value:N`
/// (or that cut or padded with zeros to `size` bytes). Each key is a local write like SET's:
/// logged and sent to the other sites (Redis does not propagate DEBUG to its replicas; a
/// site that kept the keys to itself would diverge from its peers). O(count) on the shard,
/// as in Redis; a stop request ends it (the keys made until then stay).
pub fn populate(
    shard: &mut crate::shard::Shard,
    db: usize,
    p: &Populate,
    now_ms: u64,
) -> Result<(), CmdError> {
    let mut poll = crate::stop::Poll::new();
    let mut key = Vec::with_capacity(POPULATE_KEY_BYTES_MAX);
    let mut value = Vec::new();
    for j in 0..p.count {
        if poll.stop() {
            return Err(CmdError::ShuttingDown);
        }
        key.clear();
        key.extend_from_slice(&p.prefix);
        key.push(b':');
        let _ = write!(key, "{j}");
        key.truncate(POPULATE_KEY_BYTES_MAX);
        if !shard.owns_slot(crate::slot::slot(&key))
            || shard.lookup_quiet(db, &key, now_ms).is_some()
        {
            continue;
        }
        value.clear();
        value.extend_from_slice(b"value:");
        let _ = write!(value, "{j}");
        if let Some(size) = p.size {
            value.resize(size, 0);
        }
        shard.write_key(db, &key, now_ms, |state| {
            state.assign_effect(&value[..], false)
        });
    }
    Ok(())
}

/// DEBUG DIGEST-VALUE key ...: the digest of each key's value (zeros for a missing key),
/// logically expired keys included, as in Redis.
pub fn digest_value(ctx: &mut Ctx<'_>, keys: &[&[u8]]) -> Result<(), CmdError> {
    let db = ctx.db();
    let hashes = value_digests(ctx.shard, db, keys);
    ctx.out.array(hashes.len());
    for d in &hashes {
        ctx.out.simple(&digest_hex(d));
    }
    Ok(())
}

/// The digest of each of `keys`' values in `db` on this shard (zeros for a key it does not
/// hold).
pub fn value_digests<K: AsRef<[u8]>>(
    shard: &crate::shard::Shard,
    db: usize,
    keys: &[K],
) -> Vec<[u8; 20]> {
    keys.iter()
        .map(|k| {
            let mut d = [0u8; 20];
            if let Some(e) = shard.peek(db, k.as_ref()) {
                xor_object_digest(&mut d, &e.state);
            }
            d
        })
        .collect()
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Parts of disjoint keys join into the digest of all of them, whatever shards they
    /// were on and in whatever order the parts come.
    #[test]
    fn digest_parts_join_as_one_dataset() {
        let key = |k: &[u8]| {
            let mut one = [0u8; 20];
            mix_digest(&mut one, k);
            let mut x = [0u8; 20];
            xor_digest(&mut x, &one);
            x
        };
        let xor = |a: [u8; 20], b: [u8; 20]| {
            let mut d = a;
            xor_into(&mut d, &b);
            d
        };
        let whole = digest_join([(0, xor(key(b"a"), key(b"b"))), (2, key(b"c"))]);
        let split = digest_join([(2, key(b"c")), (0, key(b"b")), (0, key(b"a"))]);
        assert_eq!(whole, split);
        assert_ne!(whole, digest_join([(0, xor(key(b"a"), key(b"b")))]));
        // The database ids are mixed in: the same keys in another database differ.
        assert_ne!(
            whole,
            digest_join([(1, xor(key(b"a"), key(b"b"))), (2, key(b"c"))])
        );
        assert_eq!(digest_hex(&digest_join([])), "0".repeat(40));
    }

    #[test]
    fn populate_arguments_as_redis_checks_them() {
        let p = |args: &[&str]| {
            let mut argv: Vec<&[u8]> = vec![b"DEBUG", b"POPULATE"];
            argv.extend(args.iter().map(|a| a.as_bytes()));
            populate_args(&argv, 1024)
        };
        assert_eq!(
            p(&["3"]),
            Ok(Populate {
                count: 3,
                prefix: b"key".to_vec(),
                size: None
            })
        );
        assert_eq!(p(&["3", "x", "0"]).map(|p| p.size), Ok(None));
        assert_eq!(p(&["3", "x", "1024"]).map(|p| p.size), Ok(Some(1024)));
        assert!(matches!(p(&["3", "x", "1025"]), Err(CmdError::Err(t)) if t.contains("1025")));
        for bad in [&["-1"][..], &["x"], &["3", "x", "-2"], &["3", "x", "y"]] {
            assert_eq!(
                p(bad),
                Err(CmdError::Err(
                    "value is out of range, must be positive".into()
                )),
                "{bad:?}"
            );
        }
    }
}
