//! Commands: the table, dispatch, and one module per command family.
//!
//! `execute` is the path of every command: look up the table, check arity, queue it when the
//! client is inside MULTI, run the handler, then count it (commandstats, errorstats), feed the
//! slow log and MONITOR clients. Handlers reply through `Ctx::out` and return `CmdError` for
//! error replies, whose texts live in `crate::error`.
//!
//! # Layout
//! - `table`: `CommandMeta`, `CommandSpec`, `Table`, flags.
//! - `meta`: generated metadata of every command (from Redis 7.0's COMMAND INFO/DOCS).
//! - `args`: argument parsing shared by handlers (integers, floats, options).
//! - `connection`: PING ECHO HELLO QUIT RESET SELECT.
//! - `client`: CLIENT and its subcommands.
//! - `string`: GET SET ... INCRBYFLOAT.
//! - `bitmap`: SETBIT GETBIT BITCOUNT BITPOS BITOP BITFIELD BITFIELD_RO.
//! - `list`: LPUSH RPUSH ... LPOS LMOVE RPOPLPUSH LMPOP.
//! - `hash`: HSET HGET HDEL ... HINCRBYFLOAT HRANDFIELD HSCAN.
//! - `keys`: DEL EXISTS TYPE KEYS SCAN ... OBJECT, expiry commands.
//! - `db`: MOVE SWAPDB (across logical databases).
//! - `hll`: PFADD PFCOUNT PFMERGE (HyperLogLog, Redis's encoding).
//! - `tx`: MULTI EXEC DISCARD WATCH UNWATCH.
//! - `server`: INFO CONFIG TIME SLOWLOG DEBUG LATENCY MONITOR DBSIZE FLUSHDB FLUSHALL.
//! - `command`: COMMAND and its subcommands.
//! - `zset`: ZADD ZRANGE ... ZMPOP (sorted sets).
//! - `geo`: GEOADD GEOPOS GEODIST GEOHASH GEOSEARCH GEORADIUS... (on sorted sets).
//! - `set`: SADD SREM SMEMBERS ... SSCAN.
//! - `sort`: SORT SORT_RO (lists, sets, sorted sets; BY/GET patterns, STORE).
//! - `latency`: LATENCY HISTOGRAM DOCTOR GRAPH, INFO latencystats.
//! - `lolwut`: LOLWUT (Redis's computer art, versions 5 and 6).
//! - `memory`: MEMORY USAGE STATS DOCTOR MALLOC-STATS PURGE.
//! - `replicas`: WAIT ROLE (a site is a primary with no Redis replicas).
//! - `pubsub`: SUBSCRIBE ... PUBLISH PUBSUB, SSUBSCRIBE SUNSUBSCRIBE SPUBLISH.
//! - `cluster`: CLUSTER and its subcommands, READONLY READWRITE ASKING.
//! - `scripting`: EVAL EVALSHA EVAL_RO EVALSHA_RO SCRIPT FCALL FCALL_RO FUNCTION.
//! - `stream`: XADD XRANGE XREAD ... XGROUP XREADGROUP XACK XPENDING XCLAIM XAUTOCLAIM XINFO.
//! - `acl`: AUTH and ACL, and `gate`, the authentication and permission check.
//! - `dump`: DUMP RESTORE MIGRATE (Redis's serialization, `meridian-rdb`).

pub mod acl;
pub mod args;
pub mod bitmap;
pub mod client;
pub mod cluster;
pub mod command;
pub mod connection;
pub mod crdt;
pub mod db;
pub mod debug;
pub mod dump;
pub mod ext80;
pub mod geo;
pub mod hash;
pub mod hll;
pub mod keys;
pub mod latency;
pub mod list;
pub mod lolwut;
pub mod memory;
pub mod meta;
pub mod module;
pub mod peers;
pub mod pubsub;
pub mod replicas;
pub mod scripting;
pub mod server;
pub mod set;
pub mod sort;
pub mod stream;
pub mod string;
pub mod table;
#[cfg(test)]
pub mod testing;
pub mod tracking;
pub mod tx;
pub mod zset;

use std::sync::OnceLock;

use crate::client::{Client, MULTI_QUEUED_MAX, QueuedCommand};
use crate::error::CmdError;
use crate::front::Front;
use crate::resp::reply::Reply;
use crate::shard::Shard;
use table::{CommandSpec, Flags, Table};

/// A command handler: `argv[0]` is the command name (for a subcommand, `argv[1]` is its name).
/// Arity was checked before the call.
pub type Handler = fn(&mut Ctx<'_>, &[&[u8]]) -> Result<(), CmdError>;

/// What a handler may touch while it runs: the shard that owns its keys, the front of the
/// thread it runs on, and the client (the connection's own, or on another thread a proxy
/// carrying its database, protocol, id and wake-up).
pub struct Ctx<'a> {
    pub shard: &'a mut Shard,
    pub front: &'a mut Front,
    pub client: &'a mut Client,
    pub out: &'a mut Reply,
    /// Wall-clock milliseconds, fixed for the whole command (and for a whole EXEC).
    pub now_ms: u64,
    pub spec: &'static CommandSpec,
}

impl Ctx<'_> {
    /// The client's selected database.
    pub fn db(&self) -> usize {
        self.client.db
    }

    /// A keyspace notification about `key` of the selected database (`notify`).
    #[inline]
    pub fn notify(&self, class: u32, event: &str, key: &[u8]) {
        self.shard.notify(class, event, self.client.db, key);
    }

    /// `event`, then `del` if the write left `key` without a value (`Shard::notify_then_del`).
    #[inline]
    pub fn notify_then_del(&mut self, class: u32, event: &str, key: &[u8]) {
        self.shard
            .notify_then_del(class, event, self.client.db, key);
    }
}

/// Every handler of every family, in the order `COMMAND` lists them.
pub fn all_handlers() -> Vec<(&'static str, Handler)> {
    let mut v = Vec::new();
    v.extend_from_slice(connection::HANDLERS);
    v.extend_from_slice(client::HANDLERS);
    v.extend_from_slice(tracking::HANDLERS);
    v.extend_from_slice(string::HANDLERS);
    v.extend_from_slice(bitmap::HANDLERS);
    v.extend_from_slice(keys::HANDLERS);
    v.extend_from_slice(db::HANDLERS);
    v.extend_from_slice(hash::HANDLERS);
    v.extend_from_slice(hll::HANDLERS);
    v.extend_from_slice(list::HANDLERS);
    v.extend_from_slice(tx::HANDLERS);
    v.extend_from_slice(server::HANDLERS);
    v.extend_from_slice(command::HANDLERS);
    v.extend_from_slice(set::HANDLERS);
    v.extend_from_slice(sort::HANDLERS);
    v.extend_from_slice(pubsub::HANDLERS);
    v.extend_from_slice(zset::HANDLERS);
    v.extend_from_slice(geo::HANDLERS);
    v.extend_from_slice(crdt::HANDLERS);
    v.extend_from_slice(cluster::HANDLERS);
    v.extend_from_slice(scripting::HANDLERS);
    v.extend_from_slice(stream::HANDLERS);
    v.extend_from_slice(peers::HANDLERS);
    v.extend_from_slice(acl::HANDLERS);
    v.extend_from_slice(replicas::HANDLERS);
    v.extend_from_slice(module::HANDLERS);
    v.extend_from_slice(memory::HANDLERS);
    v.extend_from_slice(latency::HANDLERS);
    v.extend_from_slice(lolwut::HANDLERS);
    v.extend_from_slice(dump::HANDLERS);
    v
}

/// Redis's `allowProtectedAction`: DEBUG and MODULE run only when their setting
/// (`enable-debug-command`, `enable-module-command`, fixed at start) is `yes`, or `local`
/// and the client is on loopback; otherwise Redis's refusal text.
pub fn protected_allowed(ctx: &Ctx<'_>, param: &str, command: &str) -> Result<(), CmdError> {
    protected_allowed_for(
        &ctx.shard.config,
        ctx.client.shared.addr.ip(),
        param,
        command,
    )
}

/// `protected_allowed` for a client at `ip` under `config` (a command the connection runs
/// across shards checks it before any shard runs a part).
pub fn protected_allowed_for(
    config: &crate::config::Config,
    ip: std::net::IpAddr,
    param: &str,
    command: &str,
) -> Result<(), CmdError> {
    let setting = crate::config::params::find(param.as_bytes())
        .map(|p| p.get(config))
        .unwrap_or_default();
    let ok = match setting.as_str() {
        "yes" => true,
        "local" => crate::conn::is_local(ip),
        _ => false,
    };
    if ok {
        return Ok(());
    }
    Err(CmdError::Err(format!(
        "{command} command not allowed. If the {param} option is set to \"local\", you can run it from a local connection, otherwise you need to set this option in the configuration file, and then restart the server."
    )))
}

/// The process-wide command table, built on first use.
pub fn table() -> &'static Table {
    static TABLE: OnceLock<Table> = OnceLock::new();
    TABLE.get_or_init(|| {
        match Table::build(
            meta::META.iter().chain(crdt::META).chain(peers::META),
            &all_handlers(),
        ) {
            Ok(t) => t,
            // The shipped table is checked by a unit test; an inconsistent build is a bug.
            Err(e) => panic!("command table: {e}"),
        }
    })
}

/// Names of commands a client inside MULTI runs at once instead of queuing.
pub fn runs_inside_multi(name: &str) -> bool {
    matches!(
        name,
        "exec" | "discard" | "multi" | "watch" | "quit" | "reset"
    )
}

/// Resolves `argv` to a command (a subcommand for containers) and checks its arity.
pub fn resolve(table: &'static Table, argv: &[&[u8]]) -> Result<&'static CommandSpec, CmdError> {
    let name = argv.first().copied().unwrap_or_default();
    let Some(mut spec) = table.lookup(name) else {
        return Err(CmdError::unknown_command(
            name,
            argv.get(1..).unwrap_or_default(),
        ));
    };
    if spec.is_container {
        if let Some(sub) = argv.get(1) {
            match table.lookup_sub(spec.meta.name, sub) {
                Some(s) => spec = s,
                None => {
                    let sub_shown = sub.get(..sub.len().min(128)).unwrap_or(sub);
                    return Err(CmdError::UnknownSubcommand {
                        cmd: String::from_utf8_lossy(name).to_ascii_uppercase(),
                        sub: String::from_utf8_lossy(sub_shown).into_owned(),
                    });
                }
            }
        }
    }
    let arity = spec.meta.arity;
    let argc = argv.len() as i64;
    if (arity > 0 && argc != i64::from(arity)) || (arity < 0 && argc < -i64::from(arity)) {
        return Err(CmdError::WrongArity(spec.meta.name.to_string()));
    }
    Ok(spec)
}

/// Runs one command from a client: the path described in the module doc. With CLIENT REPLY
/// OFF (or SKIP for this command) its reply is dropped.
pub fn execute(
    shard: &mut Shard,
    front: &mut Front,
    client: &mut Client,
    out: &mut Reply,
    argv: &[&[u8]],
    now_ms: u64,
) {
    if argv.is_empty() {
        return;
    }
    // Cross-protocol scripting guard: an HTTP request sent to the port closes the connection
    // unanswered, as Redis's `securityWarningCommand` does (the replies of the commands
    // before it in the same read are dropped too: Redis frees the client before writing).
    let name = argv.first().copied().unwrap_or_default();
    if is_cross_protocol(argv) {
        security_warning(front, now_ms);
        out.truncate(0);
        client.close_after_reply = true;
        return;
    }
    use crate::client::ReplyMode;
    if client.reply_mode == ReplyMode::SkipNext {
        client.reply_mode = ReplyMode::Skip;
    }
    let mark = out.len();
    if let Some(spec) = admit(shard, front, client, out, argv, now_ms) {
        call(shard, front, client, out, spec, argv, now_ms);
    }
    if keep_reply(client, name) {
        return;
    }
    out.truncate(mark);
}

/// CLIENT REPLY after a command ran (its reply already written): whether its reply stays.
/// Subscription confirmations are pushes, which CLIENT REPLY does not silence (Redis's
/// CLIENT_PUSHING), in RESP2 as in RESP3. Moves SKIP on to ON.
pub fn keep_reply(client: &mut Client, name: &[u8]) -> bool {
    use crate::client::ReplyMode;
    const CONFIRMED: [&str; 6] = [
        "subscribe",
        "psubscribe",
        "ssubscribe",
        "unsubscribe",
        "punsubscribe",
        "sunsubscribe",
    ];
    if client.reply_mode != ReplyMode::On && CONFIRMED.iter().any(|c| args::eq_ic(name, c)) {
        if client.reply_mode == ReplyMode::Skip {
            client.reply_mode = ReplyMode::On;
        }
        return true;
    }
    match client.reply_mode {
        ReplyMode::On | ReplyMode::SkipNext => true,
        ReplyMode::Off => false,
        ReplyMode::Skip => {
            client.reply_mode = ReplyMode::On;
            false
        }
    }
}

/// Whether a command is the start of an HTTP request (POST, or a `Host:` header line): the
/// cross-protocol scripting guard closes such connections unanswered.
pub fn is_cross_protocol(argv: &[&[u8]]) -> bool {
    let name = argv.first().copied().unwrap_or_default();
    args::eq_ic(name, "post") || args::eq_ic(name, "host:")
}

/// Redis's `securityWarningCommand` log line.
pub const SECURITY_WARNING: &str = "Possible SECURITY ATTACK detected. It looks like somebody is sending POST or Host: commands to Redis. This is likely due to an attacker attempting to use Cross Protocol Scripting to compromise your Redis instance. Connection aborted.";

/// Logs Redis's warning about a cross-protocol attack, at most once a minute (per thread).
pub fn security_warning(front: &mut Front, now_ms: u64) {
    let now_s = now_ms / 1000;
    if now_s.abs_diff(front.stats.security_warning_s) > 60 {
        tracing::warn!("{SECURITY_WARNING}");
        front.stats.security_warning_s = now_s;
    }
}

/// Whether CLIENT PAUSE holds this command back: every command under PAUSE ALL; under PAUSE
/// WRITE, those that write or may replicate (PUBLISH, PFCOUNT...), and EXEC of a
/// transaction holding one (Redis's `is_may_replicate_command`). A script call that declares
/// its flags counts as writing unless it declares `no-writes` (`scriptFlagsToCmdFlags`).
fn paused_by(
    table: &'static Table,
    shard: &Shard,
    client: &Client,
    spec: &CommandSpec,
    argv: &[&[u8]],
    all: bool,
) -> bool {
    if all {
        return true;
    }
    let replicates =
        |s: &CommandSpec, argv: &[&[u8]]| match scripting::declared_flags(shard, s.meta.name, argv)
        {
            Some(flags) => !flags.no_writes,
            None => table::writes_or_may_replicate(s.meta),
        };
    if replicates(spec, argv) {
        return true;
    }
    spec.meta.name == "exec"
        && client.multi.as_ref().is_some_and(|m| {
            m.queued.iter().any(|q| {
                let argv: Vec<&[u8]> = q.args.iter().map(Vec::as_slice).collect();
                resolve(table, &argv).is_ok_and(|s| replicates(s, &argv))
            })
        })
}

/// The checks before a command runs, on the connection's thread: look it up, check arity,
/// authentication and the user's permissions, the subscribed context, refuse writes while
/// the log cannot be written, postpone it under CLIENT PAUSE, queue it inside MULTI.
/// Returns the command to run, or None when it was answered (an error, QUEUED) or
/// postponed (`client.blocked` then says so).
pub fn admit(
    shard: &mut Shard,
    front: &mut Front,
    client: &mut Client,
    out: &mut Reply,
    argv: &[&[u8]],
    now_ms: u64,
) -> Option<&'static CommandSpec> {
    // What the side path of a script busy on this thread did to the client's transaction.
    if client.shared.busy_txn.get() != crate::client::BusyTxn::UNTOUCHED {
        apply_busy_txn(shard, client);
    }
    let table = front.table;
    let spec = match resolve(table, argv) {
        Ok(spec) => spec,
        Err(e) => {
            if let Some(m) = client.multi.as_mut() {
                m.aborted = true;
            }
            let rejected = resolve_container_or_base(table, argv).ok();
            if let Some(spec) = rejected {
                if let Some(st) = front.stats.commands.get_mut(spec.idx) {
                    st.rejected_calls += 1;
                }
            }
            if rejected.is_some_and(|s| s.meta.name == "exec") {
                let mut text = Vec::new();
                e.write_text(&mut text);
                let text = String::from_utf8_lossy(text.strip_prefix(b"ERR ").unwrap_or(&text))
                    .into_owned();
                exec_abort(shard, front, client, out, &text);
                return None;
            }
            reply_error(front, out, &e);
            return None;
        }
    };
    // Authentication, then the user's permissions (Redis checks them before the rest).
    if let Err(e) = acl::gate(shard, client, spec, argv, now_ms) {
        if let Some(st) = front.stats.commands.get_mut(spec.idx) {
            st.rejected_calls += 1;
        }
        // A refused EXEC discards the transaction (Redis's `rejectCommand`).
        if spec.meta.name == "exec" {
            let mut text = Vec::new();
            e.write_text(&mut text);
            exec_abort(shard, front, client, out, &String::from_utf8_lossy(&text));
            return None;
        }
        if let Some(m) = client.multi.as_mut() {
            m.aborted = true;
        }
        reply_error(front, out, &e);
        return None;
    }
    // A RESP2 client with subscriptions runs only the Pub/Sub commands, PING, QUIT and RESET.
    if client.shared.is_subscribed()
        && client.shared.proto.get() == crate::resp::reply::Proto::Resp2
        && !pubsub::allowed_when_subscribed(spec.meta.name)
    {
        if let Some(m) = client.multi.as_mut() {
            m.aborted = true;
        }
        if let Some(st) = front.stats.commands.get_mut(spec.idx) {
            st.rejected_calls += 1;
        }
        reply_error(
            front,
            out,
            &pubsub::subscribed_context_error(spec.meta.name),
        );
        return None;
    }
    // Past maxmemory, inside a transaction: evict, then refuse what would use more memory
    // (Redis's processCommand). Other commands are checked where they run (`call`), by the
    // shard that owns their keys and evicts its own.
    if shard.config.maxmemory != 0
        && client.multi.is_some()
        && oom_refuses(shard, client, table, spec, argv, now_ms)
    {
        if let Some(st) = front.stats.commands.get_mut(spec.idx) {
            st.rejected_calls += 1;
        }
        if spec.meta.name == "exec" {
            let mut text = Vec::new();
            CmdError::Oom.write_text(&mut text);
            exec_abort(shard, front, client, out, &String::from_utf8_lossy(&text));
            return None;
        }
        if let Some(m) = client.multi.as_mut() {
            m.aborted = true;
        }
        reply_error(front, out, &CmdError::Oom);
        return None;
    }
    // The log cannot be written: refuse writes (and PING) with MISCONF, as Redis does when
    // persistence fails; reads go on.
    if let Some(text) = shard.persist.refusal() {
        let writes = spec.meta.flags.contains(Flags::WRITE)
            || spec.meta.name == "ping"
            || (spec.meta.name == "exec"
                && client.multi.as_ref().is_some_and(|m| {
                    m.queued.iter().any(|q| {
                        resolve(table, &q.args.iter().map(Vec::as_slice).collect::<Vec<_>>())
                            .is_ok_and(|s| s.meta.flags.contains(Flags::WRITE))
                    })
                }));
        if writes {
            if let Some(st) = front.stats.commands.get_mut(spec.idx) {
                st.rejected_calls += 1;
            }
            if spec.meta.name == "exec" {
                exec_abort(shard, front, client, out, &text);
                return None;
            }
            if let Some(m) = client.multi.as_mut() {
                m.aborted = true;
            }
            reply_error(front, out, &CmdError::Raw(text));
            return None;
        }
    }
    // CLIENT PAUSE: the command waits for the end of the pause (checked after the errors a
    // paused client still gets at once, before MULTI queuing, as in Redis).
    if let Some(p) = shard.pause_at(now_ms) {
        if paused_by(table, shard, client, spec, argv, p.all) {
            crate::blocking::postpone(shard, client, p.end_ms);
            return None;
        }
    }
    if let Some(m) = client.multi.as_mut() {
        if !runs_inside_multi(spec.meta.name) {
            if m.queued.len() >= MULTI_QUEUED_MAX {
                m.aborted = true;
                reply_error(
                    front,
                    out,
                    &CmdError::Err("too many commands queued in MULTI".to_string()),
                );
                return None;
            }
            if spec.meta.flags.contains(Flags::NO_MULTI) {
                m.aborted = true;
                reply_error(
                    front,
                    out,
                    &CmdError::Err("Command not allowed inside a transaction".to_string()),
                );
                return None;
            }
            m.queued.push(QueuedCommand {
                args: argv.iter().map(|a| a.to_vec()).collect(),
            });
            // Redis's processCommand keeps the tracking table within its limit before it
            // queues: the invalidations that frees reach the client before its QUEUED.
            if shard.tracking.active() && client.call_depth == 0 && !client.is_script() {
                shard
                    .tracking
                    .set_current(client.id(), client.shared.tracking_noloop());
                tracking::limit_before_command(shard, front, client, spec, out, now_ms);
                shard.tracking.set_current(0, false);
            }
            out.simple("QUEUED");
            return None;
        }
    }
    Some(spec)
}

/// Whether a command may use more memory (Redis's `is_denyoom_command`): `denyoom` in the
/// table, or a script declaring neither `allow-oom` nor `no-writes` (`scriptFlagsToCmdFlags`).
fn denyoom(shard: &Shard, spec: &CommandSpec, argv: &[&[u8]]) -> bool {
    match scripting::declared_flags(shard, spec.meta.name, argv) {
        Some(flags) => !(flags.allow_oom || flags.no_writes),
        None => spec.meta.flags.contains(Flags::DENYOOM),
    }
}

/// Whether a command of a client in a transaction must get -OOM (Redis's
/// `processCommand`): after evicting, the process is still over `maxmemory` with nothing
/// evictable here, and the command may use memory, is EXEC of a transaction holding one, or
/// is queued (only EXEC, DISCARD, QUIT and RESET go on).
fn oom_refuses(
    shard: &mut Shard,
    client: &Client,
    table: &'static Table,
    spec: &CommandSpec,
    argv: &[&[u8]],
    now_ms: u64,
) -> bool {
    if !shard.evict_or_refuse(now_ms) {
        return false;
    }
    if denyoom(shard, spec, argv) {
        return true;
    }
    let Some(m) = client.multi.as_ref() else {
        return false;
    };
    match spec.meta.name {
        "exec" => m.queued.iter().any(|q| {
            let argv: Vec<&[u8]> = q.args.iter().map(Vec::as_slice).collect();
            resolve(table, &argv).is_ok_and(|s| denyoom(shard, s, &argv))
        }),
        "discard" | "quit" | "reset" => false,
        _ => true,
    }
}

/// For statistics of rejected calls: the command whose arity failed, if the name resolved.
/// Applies what the side path of a long script did to the client's transaction
/// (`client::BusyTxn`), in its order.
fn apply_busy_txn(shard: &mut Shard, client: &mut Client) {
    let edit = client
        .shared
        .busy_txn
        .replace(crate::client::BusyTxn::UNTOUCHED);
    if edit.ended {
        client.multi = None;
        shard.unwatch_all(&client.dirty);
        client.watched.clear();
        client.shared.watched.set(0);
        client.dirty.set(false);
    }
    if edit.opened {
        client.multi = Some(crate::client::MultiState::default());
    }
    if edit.flagged {
        if let Some(m) = client.multi.as_mut() {
            m.aborted = true;
        }
    }
    client.shared.in_multi.set(client.multi.is_some());
}

/// Redis's execCommandAbort: an EXEC refused before it runs discards the transaction and
/// its watches, and answers `EXECABORT ... because of: <why>`.
pub fn exec_abort(
    shard: &mut Shard,
    front: &mut Front,
    client: &mut Client,
    out: &mut Reply,
    why: &str,
) {
    tx::end_transaction(shard, client);
    reply_error(
        front,
        out,
        &CmdError::Raw(format!("EXECABORT Transaction discarded because of: {why}")),
    );
}

fn resolve_container_or_base(
    table: &'static Table,
    argv: &[&[u8]],
) -> Result<&'static CommandSpec, ()> {
    let name = argv.first().copied().unwrap_or_default();
    let spec = table.lookup(name).ok_or(())?;
    if spec.is_container {
        if let Some(sub) = argv.get(1) {
            return table.lookup_sub(spec.meta.name, sub).ok_or(());
        }
    }
    Ok(spec)
}

/// Runs a resolved command now (also used by EXEC for queued commands), on the thread of the
/// shard that owns its keys: the handler, then the command's statistics on this thread, the
/// slow log, the latency monitor and MONITOR.
pub fn call(
    shard: &mut Shard,
    front: &mut Front,
    client: &mut Client,
    out: &mut Reply,
    spec: &'static CommandSpec,
    argv: &[&[u8]],
    now_ms: u64,
) {
    let Some(handler) = spec.handler else {
        reply_error(
            front,
            out,
            &CmdError::WrongArity(spec.meta.name.to_string()),
        );
        return;
    };
    call_with(shard, front, client, out, spec, argv, now_ms, |ctx| {
        handler(ctx, argv)
    });
}

/// `call` with `run` in place of the command's handler: the same checks and accounting
/// around it (the last step of a command another thread prepared, `crate::sort_across`).
#[allow(clippy::too_many_arguments)]
pub fn call_with(
    shard: &mut Shard,
    front: &mut Front,
    client: &mut Client,
    out: &mut Reply,
    spec: &'static CommandSpec,
    argv: &[&[u8]],
    now_ms: u64,
    run: impl FnOnce(&mut Ctx<'_>) -> Result<(), CmdError>,
) {
    // Clients that writes made ready (ops from other sites, a command of another shard's
    // EXEC...) are served before the next command a client sent, as Redis does.
    let top = client.call_depth == 0 && !client.is_script();
    if top && shard.blocking.has_ready() {
        crate::blocking::serve_ready(shard, front, now_ms);
    }
    // Client-side caching: the client a command a client sent runs for (its own
    // invalidations wait for its reply), and the table's limit (Redis's processCommand).
    let tracker = client.shared.tracking.borrow().clone();
    if top {
        shard
            .tracking
            .set_current(client.id(), tracker.as_ref().is_some_and(|t| t.noloop));
        tracking::limit_before_command(shard, front, client, spec, out, now_ms);
    }
    // Past maxmemory, the shard that owns the keys evicts its own before a command a client
    // sent (not one inside EXEC or a script), then refuses one that may use memory.
    if shard.config.maxmemory != 0
        && client.call_depth == 0
        && shard.evict_or_refuse(now_ms)
        && denyoom(shard, spec, argv)
    {
        if let Some(st) = front.stats.commands.get_mut(spec.idx) {
            st.rejected_calls += 1;
        }
        if top {
            let inline = (!tracking::merged(front, client, spec)).then_some(&mut *out);
            tracking::after_command(shard, &front.node, client, inline, now_ms);
            shard.tracking.set_current(0, false);
        }
        reply_error(front, out, &CmdError::Oom);
        return;
    }
    // What eviction invalidated for the client goes before the reply (Redis flushes pending
    // keys after performEvictions).
    if top && shard.tracking.has_pending() {
        let inline = (!tracking::merged(front, client, spec)).then_some(&mut *out);
        tracking::flush_pending(shard, &front.node, client, inline, now_ms);
    }
    if top {
        // Set by the script this call may run, when it is to run again (below).
        shard.scripting.relocate = None;
    }
    let started = std::time::Instant::now();
    let seq_before = shard.seq;
    client.call_depth += 1;
    let result = {
        let mut ctx = Ctx {
            shard: &mut *shard,
            front: &mut *front,
            client: &mut *client,
            out: &mut *out,
            now_ms,
            spec,
        };
        run(&mut ctx)
    };
    client.call_depth -= 1;
    if shard.seq != seq_before {
        client.last_write_seq = shard.seq;
        if top && shard.config.maxmemory != 0 {
            shard.note_memory_after_write(now_ms);
        }
    }
    if let Some(t) = &tracker {
        tracking::remember(shard, front.table, client, t, spec, argv);
    } else if client.is_script() && flags_read_only(spec) {
        shard.tracking.script_read = true;
    }
    if top {
        if shard.tracking.active() || shard.tracking.has_pending() {
            let inline = (!tracking::merged(front, client, spec)).then_some(&mut *out);
            tracking::after_command(shard, &front.node, client, inline, now_ms);
        }
        shard.tracking.set_current(0, false);
    }
    // A script that stopped, having done nothing, to run again with more shards held
    // (`Scripting::relocate`) leaves no trace: the run that counts is the next one.
    if top && shard.scripting.relocate.is_some() {
        if let Err(e) = &result {
            out.error(e);
        }
        return;
    }
    let elapsed = started.elapsed();
    let usec = elapsed.as_micros() as u64;
    client.shared.last_cmd.set(spec.meta.name);
    front.stats.total_commands_processed += 1;
    let tracking = shard.config.latency_tracking;
    if let Some(st) = front.stats.commands.get_mut(spec.idx) {
        st.calls += 1;
        st.usec += usec;
        if result.is_err() {
            st.failed_calls += 1;
        }
        // A command that blocked is not counted here: its wait is not its latency.
        if tracking && client.blocked.is_none() {
            st.latency
                .get_or_insert_with(Default::default)
                .record(elapsed.as_nanos() as u64);
        }
    }
    if let Err(e) = &result {
        reply_error(front, out, e);
    }
    let flags = spec.meta.flags;
    // A command that blocked is logged when its wait ends (`blocking`), as Redis does.
    if client.blocked.is_none() {
        log_slow(shard, front, client, spec, argv, usec, now_ms);
    }
    if front.node.monitored()
        && !flags.contains(Flags::SKIP_MONITOR)
        && !flags.contains(Flags::ADMIN)
    {
        let shown = acl::redacted(spec.meta.name, argv);
        feed_monitors(
            front,
            client,
            shown.as_deref().unwrap_or(argv),
            now_ms,
            &shard.config.client_output_buffer_limit,
        );
    }
    if top {
        if client.blocked.is_some() {
            crate::blocking::park(front, client, argv);
        }
        // Redis's `handleClientsBlockedOnKeys` after `call`: the clients this command (or its
        // EXEC, or its script) made ready are served before anything else runs here.
        if shard.blocking.has_ready() {
            crate::blocking::serve_ready(shard, front, now_ms);
        }
    }
}

#[inline]
fn flags_read_only(spec: &CommandSpec) -> bool {
    spec.meta.flags.contains(Flags::READONLY)
}

/// Feeds the slow log and the latency monitor with a command that took `usec` (when it
/// ran, or for a blocked one when it was answered).
pub fn log_slow(
    shard: &Shard,
    front: &Front,
    client: &Client,
    spec: &CommandSpec,
    argv: &[&[u8]],
    usec: u64,
    now_ms: u64,
) {
    let flags = spec.meta.flags;
    let threshold = shard.config.slowlog_log_slower_than;
    if threshold >= 0 && usec >= threshold as u64 && !flags.contains(Flags::SKIP_SLOWLOG) {
        let peer = client.shared.addr.to_string();
        let name = client
            .shared
            .name
            .borrow()
            .as_ref()
            .map(|n| String::from_utf8_lossy(n).into_owned())
            .unwrap_or_default();
        let shown = acl::redacted(spec.meta.name, argv);
        crate::node::lock(&front.node.slowlog).push(
            now_ms / 1000,
            usec,
            shown.as_deref().unwrap_or(argv),
            peer,
            name,
        );
    }
    let lat_threshold = shard.config.latency_monitor_threshold;
    if lat_threshold > 0 {
        let event = if flags.contains(Flags::FAST) {
            "fast-command"
        } else {
            "command"
        };
        crate::node::lock(&front.node.latency).record(
            event,
            now_ms / 1000,
            usec / 1000,
            lat_threshold,
        );
    }
}

/// Runs a command's handler only: no statistics, slow log or MONITOR line (the other
/// shards' part of a command run on every shard, which counts once, where it was sent).
pub fn call_quiet(
    shard: &mut Shard,
    front: &mut Front,
    client: &mut Client,
    out: &mut Reply,
    spec: &'static CommandSpec,
    argv: &[&[u8]],
    now_ms: u64,
) {
    let Some(handler) = spec.handler else {
        out.error(&CmdError::WrongArity(spec.meta.name.to_string()));
        return;
    };
    call_quiet_with(shard, front, client, out, spec, argv, now_ms, |ctx| {
        handler(ctx, argv)
    });
}

/// `call_quiet` with `run` in place of the command's handler (a step of a command another
/// thread coordinates that is not the one counted, `crate::move_across`).
#[allow(clippy::too_many_arguments)]
pub fn call_quiet_with(
    shard: &mut Shard,
    front: &mut Front,
    client: &mut Client,
    out: &mut Reply,
    spec: &'static CommandSpec,
    argv: &[&[u8]],
    now_ms: u64,
    run: impl FnOnce(&mut Ctx<'_>) -> Result<(), CmdError>,
) {
    // A part of a command whose reply is merged: the client's own invalidations go to its
    // push output, not into the part.
    let top = client.call_depth == 0 && !client.is_script();
    let tracker = client.shared.tracking.borrow().clone();
    if top {
        shard
            .tracking
            .set_current(client.id(), tracker.as_ref().is_some_and(|t| t.noloop));
    }
    client.call_depth += 1;
    let result = {
        let mut ctx = Ctx {
            shard: &mut *shard,
            front: &mut *front,
            client: &mut *client,
            out: &mut *out,
            now_ms,
            spec,
        };
        run(&mut ctx)
    };
    client.call_depth -= 1;
    if let Err(e) = &result {
        out.error(e);
    }
    if let Some(t) = &tracker {
        tracking::remember(shard, front.table, client, t, spec, argv);
    }
    if top {
        if shard.tracking.active() || shard.tracking.has_pending() {
            tracking::after_command(shard, &front.node, client, None, now_ms);
        }
        shard.tracking.set_current(0, false);
    }
}

/// Writes an error reply and counts it in errorstats.
pub fn reply_error(front: &mut Front, out: &mut Reply, e: &CmdError) {
    out.error(e);
    front.stats.count_error(&e.code());
}

/// Feeds MONITOR clients a command now, before the commands it runs (EVAL, FCALL: Redis
/// shows the script command first, then what the script runs).
pub fn feed_monitors_now(ctx: &mut Ctx<'_>, argv: &[&[u8]]) {
    if ctx.front.node.monitored() {
        feed_monitors(
            ctx.front,
            ctx.client,
            argv,
            ctx.now_ms,
            &ctx.shard.config.client_output_buffer_limit,
        );
    }
}

/// Sends one MONITOR line: `+<unix.micros> [<db> <addr>] "arg" ...`.
fn feed_monitors(
    front: &mut Front,
    client: &Client,
    argv: &[&[u8]],
    now_ms: u64,
    limits: &crate::config::OutputBufferLimits,
) {
    let mut line = Vec::with_capacity(64);
    let micros = now_ms * 1000
        + u64::from(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.subsec_micros() % 1000)
                .unwrap_or(0),
        );
    // Commands a script runs show "lua" as their client, as in Redis.
    let who = if client.is_script() {
        "lua".to_string()
    } else {
        client.shared.addr.to_string()
    };
    line.extend_from_slice(
        format!(
            "+{}.{:06} [{} {}]",
            micros / 1_000_000,
            micros % 1_000_000,
            client.db,
            who
        )
        .as_bytes(),
    );
    for a in argv {
        line.push(b' ');
        args::repr_into(&mut line, a);
    }
    line.extend_from_slice(b"\r\n");
    if let Some(held) = front.monitor_held.as_mut() {
        held.push((client.id(), line));
        return;
    }
    front
        .node
        .feed_monitors(client.id(), &line, &limits.normal, now_ms);
}

/// Runs a script command (`run`) with its MONITOR lines held (`Front::monitor_held`): they
/// go out when it ends, unless the run stopped to start again on its keys' shard.
pub fn with_monitor_lines_held<T>(ctx: &mut Ctx<'_>, run: impl FnOnce(&mut Ctx<'_>) -> T) -> T {
    if !ctx.front.node.monitored() || ctx.front.monitor_held.is_some() {
        return run(ctx);
    }
    ctx.front.monitor_held = Some(Vec::new());
    let out = run(ctx);
    let held = ctx.front.monitor_held.take().unwrap_or_default();
    if ctx.shard.scripting.relocate.is_none() {
        let limit = &ctx.shard.config.client_output_buffer_limit.normal;
        for (from, line) in held {
            ctx.front.node.feed_monitors(from, &line, limit, ctx.now_ms);
        }
    }
    out
}
