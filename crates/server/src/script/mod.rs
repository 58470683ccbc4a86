//! Lua scripting: EVAL scripts and FUNCTION libraries, with Redis 7.0's sandbox and API.
//!
//! Each shard owns two Lua 5.1 states (`Engine`), as Redis has one for EVAL and one for
//! functions. A script runs on the shard's thread, atomically: `redis.call` runs the command
//! through the ordinary dispatch (`cmd::call`) as a script client, so every write takes the
//! one write path (`Shard::write_key`) and is stamped, applied and logged as an op like any
//! client's. Scripts therefore replicate as the effects they produced, never as code run again
//! elsewhere; a non-deterministic script is safe.
//!
//! While a script runs, Lua callbacks reach the shard through the `engine::Loan` the run lends
//! it with (`meridian_lualib::Lender`); nothing else runs on the shard meanwhile. A count
//! hook fires every `HOOK_INSTRUCTIONS` instructions: past `busy-reply-threshold` it serves
//! other connections from a side path (`busy`), which answers BUSY and takes SCRIPT KILL,
//! FUNCTION KILL and SHUTDOWN NOSAVE, as Redis's `processEventsWhileBlocked` does.
//!
//! # Layout
//! - `engine`: a Lua state with the sandbox, the `redis` API and the hook.
//! - `convert`: replies to Lua values and back.
//! - `library`: FUNCTION libraries, their metadata and the DUMP/RESTORE payload.
//! - `busy`: serving other clients while a script runs past the threshold.
//! - `rand`: Redis's `math.random` generator (script names: `crate::sha1`).

pub mod busy;
pub mod convert;
pub mod engine;
pub mod library;
pub mod rand;
pub mod replicate;

use std::time::Instant;

use hashbrown::HashMap;

use crate::client::Client;
use crate::resp::reply::Reply;
use engine::Engine;

/// Bytes of live data a Lua state may hold. Redis sets no limit (a runaway script ends the
/// process); Meridian's hook stops a script past it with "not enough memory" (checked every
/// `HOOK_INSTRUCTIONS` instructions, so one instruction's allocation may overshoot it).
pub const LUA_MEMORY_BYTES_MAX: usize = 1024 * 1024 * 1024;

/// Instructions between two runs of the hook that checks a script's time (Redis's value).
pub const HOOK_INSTRUCTIONS: u32 = 100_000;

/// FUNCTION LOAD's time limit for running a library's top-level code (Redis's LOAD_TIMEOUT_MS).
pub const LOAD_TIMEOUT_MS: u64 = 500;

/// Scripts cached by EVAL/SCRIPT LOAD. Redis has no limit either; each entry is a compiled
/// function and its flags, and SCRIPT FLUSH drops them all. The function is kept in the Lua
/// registry, not as an `mlua::Function`: each of those holds one of the 8,000 reference
/// slots of the state (`LUAI_MAXCSTACK`), and the 7,990th cached script panicked the shard.
#[derive(Debug)]
pub struct CachedScript {
    pub function: mlua::RegistryKey,
    pub flags: ScriptFlags,
    /// Bytes of the script's body (INFO memory's used_memory_scripts_eval).
    pub body_bytes: usize,
}

/// Starts a connection task for a socket and the replies it has not taken yet.
pub type SpawnConn = std::rc::Rc<dyn Fn(busy::EarlyConn)>;

/// Shebang flags (`#!lua flags=...`) of a script or a function.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ScriptFlags {
    /// No shebang: EVAL's backwards-compatible mode.
    pub compat: bool,
    pub no_writes: bool,
    pub allow_oom: bool,
    pub allow_stale: bool,
    pub no_cluster: bool,
    pub allow_cross_slot: bool,
}

/// Flag names in Redis's order (`scripts_flags_def`).
pub const FLAG_NAMES: [&str; 5] = [
    "no-writes",
    "allow-oom",
    "allow-stale",
    "no-cluster",
    "allow-cross-slot-keys",
];

impl ScriptFlags {
    /// Sets the flag named `name` (exact, or case-insensitive for function flags).
    pub fn set(&mut self, name: &str, case_insensitive: bool) -> bool {
        let eq = |a: &str| {
            if case_insensitive {
                a.eq_ignore_ascii_case(name)
            } else {
                a == name
            }
        };
        if eq("no-writes") {
            self.no_writes = true;
        } else if eq("allow-oom") {
            self.allow_oom = true;
        } else if eq("allow-stale") {
            self.allow_stale = true;
        } else if eq("no-cluster") {
            self.no_cluster = true;
        } else if eq("allow-cross-slot-keys") {
            self.allow_cross_slot = true;
        } else {
            return false;
        }
        true
    }

    pub fn names(&self) -> Vec<&'static str> {
        let on = [
            self.no_writes,
            self.allow_oom,
            self.allow_stale,
            self.no_cluster,
            self.allow_cross_slot,
        ];
        FLAG_NAMES
            .iter()
            .zip(on)
            .filter(|(_, on)| *on)
            .map(|(n, _)| *n)
            .collect()
    }
}

/// The script running now, if any (Redis's `scriptRunCtx`).
#[derive(Debug)]
pub struct Run {
    pub started: Instant,
    /// Wall-clock milliseconds fixed for the whole run (expiry and TIME-like reads).
    pub now_ms: u64,
    /// The caller's database; SELECT inside the script changes only the script client's.
    pub db: usize,
    pub resp3: bool,
    pub read_only: bool,
    pub allow_oom: bool,
    /// The shard was over `maxmemory` with nothing to evict when the script started (Redis's
    /// `script_oom`): its first write may not be a `denyoom` command.
    pub oom: bool,
    /// EVAL/EVALSHA (true) or FCALL (false): decides SCRIPT KILL vs FUNCTION KILL.
    pub eval: bool,
    /// The script declares no key (numkeys 0): where it runs is the dispatcher's choice, and
    /// it may run again elsewhere while it has had no effect (`misplaced`).
    pub keyless: bool,
    /// A write command ran: the script can no longer be killed.
    pub write_dirty: bool,
    /// A command that writes or may replicate (PUBLISH...) ran: running the script again
    /// elsewhere would repeat it.
    pub effects: bool,
    /// The shard owning the first key the script reached that this shard does not own, when
    /// the script may run again (`rerun`): it had no effect, and the shards it needs can be
    /// held for it (`engine::may_rerun`).
    pub misplaced: Option<u16>,
    /// The connection may run the script again with more shards held: it came from the
    /// main port (a cluster endpoint keeps Redis Cluster's errors) and is not inside a
    /// transaction (whose earlier commands ran already).
    pub rerun: bool,
    pub killed: bool,
    /// Ran past busy-reply-threshold: other clients get BUSY.
    pub timed_out: bool,
    /// The sha (EVAL) or the function name (FCALL).
    pub name: String,
    /// The client that runs the script (never served by the side path); its user is the
    /// one the script's commands run as (ACL), and its info the one the ACL log shows.
    pub caller: std::rc::Rc<crate::client::ClientShared>,
    /// FCALL's arguments, for FUNCTION STATS.
    pub caller_argv: Vec<Vec<u8>>,
}

/// A FUNCTION LOAD in progress (the library's top-level code is running).
#[derive(Debug)]
pub struct Loading {
    pub started: Instant,
    /// Zero: no time limit (a library restored from the log or a peer).
    pub timeout_ms: u64,
    pub timed_out: bool,
}

/// The bodies of the scripts cached on any shard of the process, by sha. Redis has one
/// script cache: a client that ran EVAL (cached on the shard owning its keys) may then run
/// EVALSHA of the same script on keys another shard owns, or ask SCRIPT EXISTS on any
/// connection. A shard that lacks a sha compiles it from here. The lock is taken when a
/// shard caches a script new to it, on a shard's miss and by SCRIPT FLUSH, never on a hit.
/// Holds no more than the union of the shards' caches (SCRIPT FLUSH, which reaches every
/// shard, empties both), as unbounded as Redis 7.0's cache.
pub type ScriptBodies = std::sync::Arc<std::sync::Mutex<HashMap<[u8; 40], std::sync::Arc<[u8]>>>>;

/// What a shard keeps for scripting.
pub struct Scripting {
    /// The two Lua states, created on first use (most shards never run a script).
    eval: Option<Engine>,
    functions: Option<Engine>,
    pub scripts: HashMap<[u8; 40], CachedScript>,
    /// The process's script bodies when it runs several shards (`None` with one: `scripts`
    /// is then the whole cache); set by `server`.
    pub bodies: Option<ScriptBodies>,
    pub libraries: library::Libraries,
    pub run: Option<Run>,
    pub loading: Option<Loading>,
    pub rng: rand::Lrand48,
    /// DEBUG SET-DISABLE-DENY-SCRIPTS 1: commands flagged `noscript` may run from scripts
    /// (Redis's `script_disable_deny_script`, which its tests use to call DEBUG from Lua).
    pub noscript_allowed: bool,
    /// The client scripts run commands as, and the buffer their replies go to; taken out
    /// while a command runs (the shard is borrowed at the same time).
    pub client: Option<Box<Client>>,
    pub reply: Reply,
    /// The number arguments of a `redis.call`, formatted (`%.17g`) into buffers reused by
    /// every call (string arguments are read in place from Lua).
    pub argv: Vec<Vec<u8>>,
    /// Runs since the last incremental GC step (Redis steps every 50 calls).
    pub gc_countdown: u32,
    /// Slot owners when the site runs several shards: a script's keys must all be local.
    /// `None` with one shard (every key is local).
    pub slots: Option<crate::slot::SlotMap>,
    /// Every library name's last change (replicated, LWW by stamp): see `replicate`.
    pub register: replicate::Register,
    /// The client listener, so that a script running long can take new connections (and
    /// answer them) from the side path; set by `server`.
    pub listener: Option<std::rc::Weak<tokio::net::TcpListener>>,
    /// Starts a connection task for a connection the side path accepted, after writing the
    /// replies the socket did not take yet; set by `server`.
    pub spawn_conn: Option<SpawnConn>,
    /// Connections accepted while a script runs long, with replies not written yet: served by
    /// the side path, handed to connection tasks when the script ends. At most
    /// `busy::EARLY_CONNECTIONS_MAX`.
    pub early: Vec<busy::EarlyConn>,
    /// A new client id of the process, for a connection the side path accepts (HELLO tells
    /// it); set by `server`.
    pub client_id: Option<std::rc::Rc<dyn Fn() -> u64>>,
    /// The node runs the cluster API (HELLO's `mode`); set by `server`.
    pub cluster_api: bool,
    /// Turns true when the process is asked to stop (SIGTERM/SIGINT): a script running long
    /// then ends the process from the side path, as SHUTDOWN NOSAVE does; set by `server`.
    pub stop: Option<tokio::sync::watch::Receiver<bool>>,
    /// The connections of this shard's thread, which the side path answers (registered and
    /// dropped by `conn`).
    pub clients: std::collections::BTreeMap<u64, std::rc::Weak<crate::client::ClientShared>>,
    /// The process's board of busy scripts and this shard's place on it (set by `server`).
    pub board: Option<(std::sync::Arc<busy::BusyBoard>, usize)>,
    /// The last script that ended here stopped, having had no effect, at a key of shard N
    /// (`Run::misplaced`): it runs again, there (a script without declared keys) or with
    /// every shard of the process held, and this run is not counted anywhere
    /// (`cmd::call_with`). Taken by the dispatcher (`conn`, `hop::run_batch`).
    pub relocate: Option<u16>,
}

impl std::fmt::Debug for Scripting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scripting")
            .field("scripts", &self.scripts.len())
            .field("libraries", &self.libraries.len())
            .field("run", &self.run)
            .finish()
    }
}

/// Runs between two GC steps of the Lua states (LUA_GC_CYCLE_PERIOD).
pub const GC_CYCLE_PERIOD: u32 = 50;

impl Default for Scripting {
    fn default() -> Self {
        Scripting::new()
    }
}

impl Scripting {
    pub fn new() -> Scripting {
        let shared = std::rc::Rc::new(crate::client::ClientShared::new(
            0,
            std::net::SocketAddr::from(([0, 0, 0, 0], 0)),
            std::net::SocketAddr::from(([0, 0, 0, 0], 0)),
            0,
        ));
        let mut client = Client::new(shared);
        // Commands a script runs are nested calls: blocking commands answer at once.
        client.call_depth = 1;
        Scripting {
            eval: None,
            functions: None,
            scripts: HashMap::new(),
            bodies: None,
            libraries: library::Libraries::default(),
            run: None,
            loading: None,
            rng: rand::Lrand48::default(),
            noscript_allowed: false,
            client: Some(Box::new(client)),
            reply: Reply::new(),
            argv: Vec::new(),
            gc_countdown: GC_CYCLE_PERIOD,
            slots: None,
            register: replicate::Register::default(),
            listener: None,
            spawn_conn: None,
            early: Vec::new(),
            client_id: None,
            cluster_api: false,
            stop: None,
            clients: std::collections::BTreeMap::new(),
            board: None,
            relocate: None,
        }
    }

    /// The EVAL state (created now if this is the first use).
    pub fn eval_engine(&mut self) -> mlua::Result<Engine> {
        if let Some(e) = &self.eval {
            return Ok(e.clone());
        }
        let e = Engine::new(engine::Mode::Eval)?;
        self.eval = Some(e.clone());
        Ok(e)
    }

    /// The FUNCTION state (created now if this is the first use).
    pub fn function_engine(&mut self) -> mlua::Result<Engine> {
        if let Some(e) = &self.functions {
            return Ok(e.clone());
        }
        let e = Engine::new(engine::Mode::Function)?;
        self.functions = Some(e.clone());
        Ok(e)
    }

    /// Whether a script is running past busy-reply-threshold (other clients get BUSY).
    pub fn is_busy(&self) -> bool {
        self.run.as_ref().is_some_and(|r| r.timed_out)
    }

    /// Lua heap bytes of the EVAL and FUNCTION states (0 for one not created yet).
    pub fn vm_memory(&self) -> (usize, usize) {
        let used = |e: &Option<Engine>| e.as_ref().map_or(0, |e| e.lua().used_memory());
        (used(&self.eval), used(&self.functions))
    }

    /// Bytes of cached script bodies and their names, and of library code and names.
    pub fn code_memory(&self) -> (usize, usize) {
        let scripts = self.scripts.values().map(|s| s.body_bytes + 40).sum();
        let libs = self
            .libraries
            .iter()
            .map(|l| l.code.len() + l.name.len())
            .sum();
        (scripts, libs)
    }

    /// SCRIPT FLUSH: a new EVAL state and an empty cache, as Redis's `scriptingReset`
    /// (the process's bodies too: every shard runs the flush).
    pub fn flush_scripts(&mut self) {
        self.scripts.clear();
        self.eval = None;
        if let Some(bodies) = &self.bodies {
            crate::node::lock(bodies).clear();
        }
    }

    /// The body of script `sha` cached on another shard of the process (`None` with one
    /// shard, or when no shard has it).
    pub fn shared_body(&self, sha: &[u8; 40]) -> Option<std::sync::Arc<[u8]>> {
        let bodies = self.bodies.as_ref()?;
        crate::node::lock(bodies).get(sha).cloned()
    }

    /// Records a script this shard just cached, for the other shards (`shared_body`).
    pub fn share_body(&self, sha: [u8; 40], body: &[u8]) {
        if let Some(bodies) = &self.bodies {
            crate::node::lock(bodies)
                .entry(sha)
                .or_insert_with(|| std::sync::Arc::from(body));
        }
    }
}

/// Parses a script's shebang line (`evalExtractShebangFlags`): its flags and the length of
/// the line (kept out of the code; the newline stays, so line numbers do not move).
pub fn parse_shebang(body: &[u8]) -> Result<(ScriptFlags, usize), String> {
    if !body.starts_with(b"#!") {
        return Ok((
            ScriptFlags {
                compat: true,
                ..ScriptFlags::default()
            },
            0,
        ));
    }
    let Some(end) = memchr::memchr(b'\n', body) else {
        return Err("Invalid script shebang".to_string());
    };
    let line = body.get(..end).unwrap_or_default();
    let parts =
        crate::resp::parse::sds_split_args(line).ok_or("Invalid engine in script shebang")?;
    let Some(first) = parts.first() else {
        return Err("Invalid engine in script shebang".to_string());
    };
    if first.as_slice() != b"#!lua" {
        return Err(format!(
            "Unexpected engine in script shebang: {}",
            String::from_utf8_lossy(first)
        ));
    }
    let mut flags = ScriptFlags::default();
    for p in parts.iter().skip(1) {
        let Some(list) = p.strip_prefix(b"flags=") else {
            return Err(format!(
                "Unknown lua shebang option: {}",
                String::from_utf8_lossy(p)
            ));
        };
        // Redis splits with `sdssplitlen`, which gives no element for an empty string:
        // `flags=` sets none (and leaves compatibility mode, as any shebang does).
        if list.is_empty() {
            continue;
        }
        for f in list.split(|&c| c == b',') {
            let name = String::from_utf8_lossy(f);
            if !flags.set(&name, false) {
                return Err(format!("Unexpected flag in script shebang: {name}"));
            }
        }
    }
    Ok((flags, end))
}

/// A command that a script running on another shard of this process calls for this shard's
/// keys while `tx_across` holds both (`hop::Op::ScriptCall`): it runs as this shard's script
/// client, under the caller's user and database (`caller`, built from the batch), as
/// `engine::run_command` runs a local call once the script's shard made its checks. A write
/// while this shard's log refuses writes gets the refusal's text. A tracking caller's reads
/// are remembered here, where their keys are.
pub fn call_for_held(
    shard: &mut crate::shard::Shard,
    front: &mut crate::front::Front,
    caller: &mut Client,
    out: &mut Reply,
    spec: &'static crate::cmd::table::CommandSpec,
    argv: &[&[u8]],
    now_ms: u64,
) {
    if spec.meta.flags.contains(crate::cmd::table::Flags::WRITE) {
        if let Some(text) = shard.persist.refusal() {
            crate::cmd::reply_error(front, out, &crate::error::CmdError::Raw(text));
            return;
        }
    }
    let Some(mut client) = shard.scripting.client.take() else {
        crate::cmd::reply_error(
            front,
            out,
            &crate::error::CmdError::Err("script client busy".to_string()),
        );
        return;
    };
    *client.shared.user.borrow_mut() = caller.shared.user.borrow().clone();
    client.select(caller.db);
    client.shared.proto.set(out.proto);
    // This shard runs no script: its flag for a script's reads stays as it was.
    let script_read = shard.tracking.script_read;
    crate::cmd::call(shard, front, &mut client, out, spec, argv, now_ms);
    shard.tracking.script_read = script_read;
    shard.scripting.client = Some(client);
    let tracker = caller.shared.tracking.borrow().clone();
    if let Some(t) = tracker {
        crate::cmd::tracking::remember(shard, front.table, caller, &t, spec, argv);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shebang_flags() {
        let (f, n) = parse_shebang(b"#!lua flags=no-writes,allow-oom\nreturn 1").unwrap();
        assert!(f.no_writes && f.allow_oom && !f.compat);
        assert_eq!(n, 31);
        let (f, n) = parse_shebang(b"return 1").unwrap();
        assert!(f.compat);
        assert_eq!(n, 0);
        assert_eq!(
            parse_shebang(b"#!lua").unwrap_err(),
            "Invalid script shebang"
        );
        assert_eq!(
            parse_shebang(b"#!python\n").unwrap_err(),
            "Unexpected engine in script shebang: #!python"
        );
        let (f, _) = parse_shebang(b"#!lua flags=\nreturn 1").unwrap();
        assert!(!f.compat && !f.no_writes && !f.allow_oom);
        assert_eq!(
            parse_shebang(b"#!lua flags=a,,b\n").unwrap_err(),
            "Unexpected flag in script shebang: a"
        );
        assert_eq!(
            parse_shebang(b"#!lua flags=bad\n").unwrap_err(),
            "Unexpected flag in script shebang: bad"
        );
        assert_eq!(
            parse_shebang(b"#!lua name=x\n").unwrap_err(),
            "Unknown lua shebang option: name=x"
        );
    }
}
