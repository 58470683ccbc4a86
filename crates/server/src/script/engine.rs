//! A Lua state prepared as Redis prepares its own (script_lua.c): the base, table, string and
//! math libraries, cjson/struct/cmsgpack/bit, the `redis` API, the sandbox (sandbox.lua), a
//! memory limit and the count hook. `Engine` is a cheap handle: the shard clones it out of
//! `Scripting` to run a script while the script borrows the shard.
//!
//! The `redis` functions are Rust closures that return `(value, error)`; thin Lua wrappers in
//! the sandbox raise the error value, because Redis raises error *tables* (which `pcall` then
//! turns back into their message) and a Rust callback can only raise its own error type.
//! `redis.call` and `redis.pcall`, the hot path, are C functions of `meridian_lualib`'s bridge
//! instead: they read their arguments in place, call `host_call` (which runs the command), and
//! build the reply's Lua values and error tables themselves; EVAL scripts run through its
//! `Runner`, which sets KEYS and ARGV.

use meridian_lualib::{CallArg, CallArgs, CallOutcome};
use mlua::{Function, HookTriggers, Lua, LuaOptions, MultiValue, StdLib, Table, Value, VmState};
use std::rc::Rc;

use super::{Loading, Run, convert, library};
use crate::cmd::table::Flags;
use crate::sha1;
use crate::shard::Shard;

/// What a script run lends its state's Rust callbacks (`redis.call`, the hook...): the shard
/// and the thread's front (command counters, MONITOR, the client registry). Each callback
/// holds the state's `Rc<Loan>`, captured when it was created, so reaching the shard costs two
/// cell reads, where a `Lua::scope` with scoped userdata cost more than a tenth of a shard's
/// time under `EVALSHA`.
pub type Loan = meridian_lualib::Lender<Shard, crate::front::Front>;

/// App data of a Lua state whose hook was switched to every line (after a kill, a load
/// timeout or the memory limit); its next run switches it back to counting.
struct HookEveryLine;
/// Chunk name of the sandbox: its frames are skipped when an error is located.
const SANDBOX_CHUNK: &str = "=sandbox";
const SANDBOX: &str = include_str!("sandbox.lua");

/// Which of Redis's two Lua states this is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Eval,
    Function,
}

/// Why the hook stopped a script: raised as a Lua error, turned into Redis's text by the error
/// handler.
#[derive(Debug, thiserror::Error)]
pub enum Interrupt {
    #[error("Script killed by user with SCRIPT KILL...")]
    Killed,
    #[error("FUNCTION LOAD timeout")]
    LoadTimeout,
    #[error("not enough memory")]
    OutOfMemory,
}

#[derive(Debug)]
pub struct EngineState {
    pub lua: Lua,
    pub mode: Mode,
    /// The real globals table (scripts see its proxy); KEYS and ARGV are set in it.
    pub real_globals: Table,
    /// Runs an EVAL script with KEYS/ARGV set, or a function with them as arguments (C:
    /// `meridian_run`).
    pub runner: meridian_lualib::Runner,
    pub run_load: Function,
    pub handler: Function,
    pub load_handler: Function,
    /// Function mode: the environment of library code and its metatable (whose `__index`
    /// points at the library API while loading, at the globals otherwise).
    pub library_env: Option<Table>,
    pub library_env_mt: Option<Table>,
    pub library_api: Option<Table>,
    pub globals: Table,
    /// The shard and front lent to the callbacks while a script runs.
    pub loan: Rc<Loan>,
}

/// What a run passes its script: EVAL's KEYS and ARGV (set as globals), or FCALL's (passed
/// as its two arguments).
pub enum RunArgs<'a> {
    Eval {
        keys: &'a [&'a [u8]],
        args: &'a [&'a [u8]],
    },
    Function {
        keys: &'a [&'a [u8]],
        args: &'a [&'a [u8]],
    },
}

/// A handle to one Lua state.
#[derive(Debug, Clone)]
pub struct Engine(pub Rc<EngineState>);

fn count_hook() -> HookTriggers {
    HookTriggers::new().every_nth_instruction(super::HOOK_INSTRUCTIONS)
}

impl Engine {
    pub fn new(mode: Mode) -> mlua::Result<Engine> {
        let lua = Lua::new_with(
            StdLib::TABLE | StdLib::STRING | StdLib::MATH,
            LuaOptions::new(),
        )?;
        // No allocator limit: with one, mlua runs every allocating API call in a protected
        // closure, which costs more than the script. The hook enforces the limit instead.
        meridian_lualib::open(&lua)?;
        let loan: Rc<Loan> = Rc::new(Loan::new());
        let api = lua.create_table()?;
        // Each callback holds the loan (`l`); `lf` makes one for a function of (lua, loan, args).
        let lf = |f: fn(&Lua, &Loan, MultiValue) -> mlua::Result<(Value, Value)>| {
            let l = loan.clone();
            lua.create_function(move |lua, args: MultiValue| f(lua, &l, args))
        };
        let l = loan.clone();
        let (call, pcall) =
            meridian_lualib::call_functions(&lua, move |args, out| host_call(&l, args, out))?;
        api.set("call", call)?;
        api.set("pcall", pcall)?;
        api.set("log", lua.create_function(redis_log)?)?;
        api.set("setresp", lf(redis_setresp)?)?;
        api.set("set_repl", lf(redis_set_repl)?)?;
        api.set("sha1hex", lua.create_function(redis_sha1hex)?)?;
        api.set("error_reply", lua.create_function(redis_error_reply)?)?;
        api.set("status_reply", lua.create_function(redis_status_reply)?)?;
        api.set("acl_check_cmd", lf(redis_acl_check_cmd)?)?;
        api.set("random", lf(math_random)?)?;
        api.set("randomseed", lf(math_randomseed)?)?;
        api.set(
            "register_function",
            lua.create_function(library::register_function)?,
        )?;
        let handler = lua.create_function(|lua, e: Value| error_handler(lua, e, true))?;
        api.set("error_handler", handler.clone())?;
        api.set("wrap_raising", meridian_lualib::raising_wrapper(&lua)?)?;
        api.set("REDIS_VERSION", crate::server::REDIS_VERSION)?;
        api.set("REDIS_VERSION_NUM", redis_version_num())?;
        let mode_name = match mode {
            Mode::Eval => "eval",
            Mode::Function => "function",
        };
        let handles: Table = lua
            .load(SANDBOX)
            .set_name(SANDBOX_CHUNK)
            .call((api, mode_name))?;
        let globals: Table = handles.get("globals")?;
        lua.set_globals(globals.clone())?;
        set_count_hook(&lua, &loan)?;
        let state = EngineState {
            real_globals: handles.get("real_globals")?,
            runner: meridian_lualib::Runner::new(&lua)?,
            run_load: handles.get("run_load")?,
            handler,
            load_handler: lua.create_function(|lua, e: Value| error_handler(lua, e, false))?,
            library_env: handles.get("library_env")?,
            library_env_mt: handles.get("library_env_mt")?,
            library_api: handles.get("library_api")?,
            globals,
            mode,
            lua,
            loan,
        };
        Ok(Engine(Rc::new(state)))
    }

    pub fn lua(&self) -> &Lua {
        &self.0.lua
    }

    /// Restores the count hook after a killed script switched it to every line.
    pub fn reset_hook(&self) -> mlua::Result<()> {
        let lua = &self.0.lua;
        if lua.app_data_ref::<HookEveryLine>().is_some() {
            lua.remove_app_data::<HookEveryLine>();
            set_count_hook(lua, &self.0.loan)?;
        }
        Ok(())
    }

    /// Compiles a script body (EVAL) or library code (FUNCTION LOAD) as Redis names it.
    pub fn compile(
        &self,
        code: &[u8],
        chunk_name: &str,
        env: Option<&Table>,
    ) -> mlua::Result<Function> {
        let mut chunk = self
            .0
            .lua
            .load(code)
            .set_name(chunk_name)
            .set_mode(mlua::ChunkMode::Text);
        if let Some(env) = env {
            chunk = chunk.set_environment(env.clone());
        }
        chunk.into_function()
    }

    /// Runs `f` (a compiled EVAL script, or a function with `keys`/`args`) with the shard lent
    /// to the Lua callbacks. Returns xpcall's result: `(true, value)` or `(false, error table)`.
    pub fn run(
        &self,
        shard: &mut Shard,
        front: &mut crate::front::Front,
        f: &Function,
        args: RunArgs<'_>,
    ) -> mlua::Result<(bool, Value)> {
        let st = &*self.0;
        self.reset_hook()?;
        st.loan.lend(shard, front, || match args {
            RunArgs::Eval { keys, args } => {
                st.runner
                    .run(f, &st.handler, Some(&st.real_globals), keys, args)
            }
            RunArgs::Function { keys, args } => st.runner.run(f, &st.handler, None, keys, args),
        })
    }

    /// Runs a library's top-level code (FUNCTION LOAD). Errors come back as tables without a
    /// location, as Redis's plain `lua_pcall` leaves them.
    pub fn run_load(&self, f: &Function) -> mlua::Result<(bool, Value)> {
        let st = &*self.0;
        self.reset_hook()?;
        let result = st.run_load.call::<MultiValue>((f, &st.load_handler))?;
        let mut it = result.into_iter();
        let ok = matches!(it.next(), Some(Value::Boolean(true)));
        Ok((ok, it.next().unwrap_or(Value::Nil)))
    }
}

/// REDIS_VERSION_NUM: 0x00MMmmpp.
fn redis_version_num() -> i64 {
    let mut parts = crate::server::REDIS_VERSION
        .split('.')
        .map(|p| p.parse::<i64>().unwrap_or(0));
    let (a, b, c) = (
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
    );
    (a << 16) | (b << 8) | c
}

/// Sets the count hook (every `HOOK_INSTRUCTIONS` instructions).
fn set_count_hook(lua: &Lua, loan: &Rc<Loan>) -> mlua::Result<()> {
    let l = loan.clone();
    lua.set_hook(count_hook(), move |lua, _| hook(lua, &l))
}

/// The hook: FUNCTION LOAD's time limit, and for scripts the busy threshold and kills.
fn hook(lua: &Lua, loan: &Rc<Loan>) -> mlua::Result<VmState> {
    if lua.used_memory() > super::LUA_MEMORY_BYTES_MAX {
        // Collect first: the limit is on live data, not on garbage not yet collected.
        let _ = lua.gc_collect();
        if lua.used_memory() > super::LUA_MEMORY_BYTES_MAX {
            every_line(lua, loan)?;
            return Err(mlua::Error::external(Interrupt::OutOfMemory));
        }
    }
    if let Some(mut loading) = lua.app_data_mut::<Loading>() {
        let elapsed = loading.started.elapsed().as_millis() as u64;
        if loading.timeout_ms > 0 && elapsed > loading.timeout_ms {
            loading.timed_out = true;
            drop(loading);
            every_line(lua, loan)?;
            return Err(mlua::Error::external(Interrupt::LoadTimeout));
        }
        return Ok(VmState::Continue);
    }
    let Some(killed) = loan.with(|shard, _| super::busy::interrupt(shard)) else {
        return Ok(VmState::Continue);
    };
    if killed {
        every_line(lua, loan)?;
        return Err(mlua::Error::external(Interrupt::Killed));
    }
    Ok(VmState::Continue)
}

/// Redis makes a killed script's hook fire on every line, so that a pcall loop cannot keep
/// catching the error: it is raised again at the next line outside the pcall.
fn every_line(lua: &Lua, loan: &Rc<Loan>) -> mlua::Result<()> {
    let l = loan.clone();
    lua.set_hook(HookTriggers::EVERY_LINE, move |lua, _| hook(lua, &l))?;
    lua.set_app_data(HookEveryLine);
    Ok(())
}

/// The message handler of every script run (Redis's `__redis__err__handler`): makes the error
/// a table `{err=...}` and records where it happened (`source`, `line`), skipping C frames and
/// the sandbox's own wrappers.
fn error_handler(lua: &Lua, err: Value, locate: bool) -> mlua::Result<Value> {
    let t = match err {
        Value::Table(t) => t,
        Value::Error(e) => {
            let msg = interrupt_message(&e);
            convert::error_table(lua, msg.as_bytes())?
        }
        other => {
            let s = lua_tostring(lua, other)?;
            let mut text = b"ERR ".to_vec();
            text.extend_from_slice(&s);
            let t = lua.create_table()?;
            t.raw_set("err", lua.create_string(&text)?)?;
            t
        }
    };
    if locate {
        // Level 1 is the function that raised (Lua's level 2 seen from a Lua handler).
        for level in 1..=3 {
            let found = lua.inspect_stack(level, |d| {
                let src = d.source();
                let what = src.what;
                let source = src.source.map(|s| s.into_owned()).unwrap_or_default();
                (
                    what == "C" || source == SANDBOX_CHUNK,
                    source,
                    d.current_line().map_or(-1, |l| l as i64),
                )
            });
            match found {
                Some((true, _, _)) => continue,
                Some((false, source, line)) => {
                    t.raw_set("source", source)?;
                    t.raw_set("line", line)?;
                    break;
                }
                None => break,
            }
        }
    }
    Ok(Value::Table(t))
}

/// Redis's text for an error the hook raised, or mlua's for anything else.
pub fn interrupt_message(e: &mlua::Error) -> String {
    let mut e = e;
    while let mlua::Error::CallbackError { cause, .. } = e {
        e = cause;
    }
    match e.downcast_ref::<Interrupt>() {
        Some(i) => i.to_string(),
        None => match e {
            mlua::Error::MemoryError(_) => "not enough memory".to_string(),
            mlua::Error::RuntimeError(m) => m.clone(),
            other => other.to_string(),
        },
    }
}

/// Lua's `tostring` of a value, as bytes.
fn lua_tostring(lua: &Lua, v: Value) -> mlua::Result<Vec<u8>> {
    Ok(match v {
        Value::String(s) => s.as_bytes().to_vec(),
        Value::Nil => b"nil".to_vec(),
        Value::Boolean(b) => {
            if b {
                b"true".to_vec()
            } else {
                b"false".to_vec()
            }
        }
        other => {
            let f: Function = lua.globals().get("tostring")?;
            let s: mlua::String = f.call(other)?;
            s.as_bytes().to_vec()
        }
    })
}

/// `(nil, {err=...})`: a Rust API function's error, for the sandbox wrapper to raise.
fn fail(lua: &Lua, text: &str) -> mlua::Result<(Value, Value)> {
    Ok((
        Value::Nil,
        Value::Table(convert::error_table(lua, text.as_bytes())?),
    ))
}

/// `(nil, "message")`: an error a C library function would raise with luaL_error.
fn fail_str(lua: &Lua, text: &str) -> mlua::Result<(Value, Value)> {
    Ok((Value::Nil, Value::String(lua.create_string(text)?)))
}

/// Runs `f` with the shard the running script borrows, or `None` outside a script run.
fn with_shard<R>(loan: &Loan, f: impl FnOnce(&mut Shard) -> R) -> Option<R> {
    loan.with(|shard, _| {
        shard.scripting.run.as_ref()?;
        Some(f(shard))
    })
    .flatten()
}

/// Formats a Lua number as Redis passes it to a command: `%.17g`.
fn number_arg(d: f64, out: &mut Vec<u8>) {
    out.extend_from_slice(crate::resp::reply::format_double(d).as_bytes());
}

/// The arguments of a `redis.acl_check_cmd`, as Lua passed them.
enum Args {
    Values(MultiValue),
}

impl Args {
    fn len(&self) -> usize {
        match self {
            Args::Values(v) => v.len(),
        }
    }

    /// Appends argument `i` to `dst` as a command argument; `false` when it is neither a
    /// string nor a number. Reads a passed value in place: cloning one costs a reference in
    /// mlua's reference thread.
    fn write(&self, i: usize, dst: &mut Vec<u8>) -> bool {
        match self {
            Args::Values(v) => v.get(i).is_some_and(|a| arg_bytes(a, dst)),
        }
    }
}

/// A string as it is, a number formatted with `%.17g`; `false` for anything else.
fn arg_bytes(v: &Value, dst: &mut Vec<u8>) -> bool {
    match v {
        Value::String(s) => dst.extend_from_slice(&s.as_bytes()),
        Value::Number(d) => number_arg(*d, dst),
        Value::Integer(i) => number_arg(*i as f64, dst),
        _ => return false,
    }
    true
}

/// Fills `argv` from Lua arguments (`luaArgsToRedisArgv`): strings as they are, numbers
/// formatted with `%.17g`. `Err` when an argument is neither.
fn lua_args(args: &Args, argv: &mut Vec<Vec<u8>>) -> Result<(), &'static str> {
    let n = args.len();
    if n == 0 {
        return Err("Please specify at least one argument for this redis lib call");
    }
    while argv.len() < n {
        argv.push(Vec::new());
    }
    argv.truncate(n);
    for (i, dst) in argv.iter_mut().enumerate() {
        dst.clear();
        if !args.write(i, dst) {
            return Err("Lua redis lib command arguments must be strings or integers");
        }
    }
    Ok(())
}

const NOT_IN_SCRIPT: &str = "redis.call/pcall can only be called inside a script invocation";
const NO_ARGUMENTS: &str = "Please specify at least one argument for this redis lib call";
const BAD_ARGUMENT: &str = "Lua redis lib command arguments must be strings or integers";

/// `redis.call` / `redis.pcall` (luaRedisGenericCommand), called by the C functions of
/// `meridian_lualib::call_functions`: runs the command and leaves its reply (or an error
/// text) in `out`, which the C side turns into Lua values.
fn host_call(loan: &Loan, args: CallArgs<'_>, out: &mut Vec<u8>) -> CallOutcome {
    match loan.with(|shard, front| host_call_in(shard, front, args, out)) {
        Some(outcome) => outcome,
        None => {
            out.extend_from_slice(NOT_IN_SCRIPT.as_bytes());
            CallOutcome::Failed
        }
    }
}

fn host_call_in(
    shard: &mut Shard,
    front: &mut crate::front::Front,
    args: CallArgs<'_>,
    out: &mut Vec<u8>,
) -> CallOutcome {
    if shard.scripting.run.is_none() {
        out.extend_from_slice(NOT_IN_SCRIPT.as_bytes());
        return CallOutcome::Failed;
    }
    if args.is_empty() {
        out.extend_from_slice(NO_ARGUMENTS.as_bytes());
        return CallOutcome::Failed;
    }
    // Strings are passed as Lua holds them; numbers are formatted (`%.17g`) into buffers
    // reused across calls (`luaArgsToRedisArgv`).
    let mut numbers = std::mem::take(&mut shard.scripting.argv);
    let mut n_numbers = 0;
    for i in 0..args.len() {
        match args.get(i) {
            Some(CallArg::Bytes(_)) => {}
            Some(CallArg::Number(d)) => {
                if numbers.len() <= n_numbers {
                    numbers.push(Vec::new());
                }
                if let Some(buf) = numbers.get_mut(n_numbers) {
                    buf.clear();
                    number_arg(d, buf);
                }
                n_numbers += 1;
            }
            Some(CallArg::Other) | None => {
                shard.scripting.argv = numbers;
                out.extend_from_slice(BAD_ARGUMENT.as_bytes());
                return CallOutcome::Failed;
            }
        }
    }
    let mut formatted = numbers.iter();
    let refs: smallvec::SmallVec<[&[u8]; 8]> = (0..args.len())
        .map(|i| match args.get(i) {
            Some(CallArg::Bytes(b)) => b,
            _ => formatted.next().map(Vec::as_slice).unwrap_or_default(),
        })
        .collect();
    let outcome = run_command(shard, front, &refs);
    drop(refs);
    shard.scripting.argv = numbers;
    match outcome {
        Err(text) => {
            out.extend_from_slice(text.as_bytes());
            CallOutcome::Refused
        }
        Ok(()) => {
            // The reply's buffer goes to the C side; `out`'s (empty) takes its place.
            std::mem::swap(out, &mut shard.scripting.reply.buf);
            CallOutcome::Reply
        }
    }
}

/// Redis Cluster's refusal of a script's call that reaches a key of another node.
pub const NON_LOCAL: &str = "Script attempted to access a non local key in a cluster node";

/// Whether the running script may stop now and run again with every shard of this process
/// held, so that its call reaching shard `owner` (this one's index: any shard) runs as on
/// one server: it has had no effect, its connection can run it again (`Run::rerun`), `owner`
/// is a shard of this process (a script without declared keys may instead run again on
/// `owner`, wherever it is), and some shard of this process is not held for it yet.
fn may_rerun(shard: &Shard, front: &crate::front::Front, owner: u16) -> bool {
    let Some(run) = shard.scripting.run.as_ref() else {
        return false;
    };
    if !run.rerun || run.effects {
        return false;
    }
    let node = &front.node;
    let all_held = node
        .local_shards()
        .all(|t| t == shard.index || crate::tx_across::reaches(t));
    if !node.is_local(owner) {
        // Another node's key: only a script without declared keys goes there, and not from
        // its last run, with every shard of this process held.
        return run.keyless && (node.local == 1 || !all_held);
    }
    !all_held
}

/// Looks a command up as a script does: unknown names and unknown subcommands are both
/// "Unknown Redis command".
fn lookup(
    table: &'static crate::cmd::table::Table,
    argv: &[&[u8]],
) -> Option<&'static crate::cmd::table::CommandSpec> {
    let spec = table.lookup(argv.first()?)?;
    if spec.is_container {
        if let Some(sub) = argv.get(1) {
            return table.lookup_sub(spec.meta.name, sub);
        }
    }
    Some(spec)
}

/// Runs one command for the running script (`scriptCall`): Redis's checks, then the ordinary
/// dispatch as the script client; the reply is left in `scripting.reply`. `Err` is the text of
/// a check that refused the command (already counted in errorstats).
pub fn run_command(
    shard: &mut Shard,
    front: &mut crate::front::Front,
    argv: &[&[u8]],
) -> Result<(), String> {
    let refused = |front: &mut crate::front::Front, text: &str| {
        front
            .stats
            .count_error(&convert::error_code(&convert::error_text(text.as_bytes())));
        Err(text.to_string())
    };
    let Some(spec) = lookup(front.table, argv) else {
        return refused(front, "Unknown Redis command called from script");
    };
    // A command found and then refused counts as rejected (Redis's `scriptCall`:
    // `incrCommandStatsOnError(cmd, ERROR_COMMAND_REJECTED)`).
    let rejected = |front: &mut crate::front::Front, text: &str| {
        if let Some(st) = front.stats.commands.get_mut(spec.idx) {
            st.rejected_calls += 1;
        }
        refused(front, text)
    };
    let arity = spec.meta.arity;
    let argc = argv.len() as i64;
    if (arity > 0 && argc != i64::from(arity)) || (arity < 0 && argc < -i64::from(arity)) {
        return rejected(
            front,
            "Wrong number of args calling Redis command from script",
        );
    }
    let flags = spec.meta.flags;
    if flags.contains(Flags::NOSCRIPT) {
        if !shard.scripting.noscript_allowed {
            return rejected(front, "This Redis command is not allowed from script");
        }
        // Even with DEBUG SET-DISABLE-DENY-SCRIPTS, a script's client expects one reply per
        // command: Redis's DENY BLOCKING refusals (a subscription or a MONITOR would outlive
        // the script on its client).
        match spec.meta.name {
            "subscribe" | "psubscribe" | "ssubscribe" => {
                let text = format!(
                    "{} isn't allowed for a DENY BLOCKING client",
                    spec.meta.name.to_ascii_uppercase()
                );
                return rejected(front, &text);
            }
            "monitor" => {
                return rejected(front, "MONITOR isn't allowed for DENY BLOCKING client");
            }
            _ => {}
        }
    }
    let Some((caller, now)) = shard
        .scripting
        .run
        .as_ref()
        .map(|run| (run.caller.clone(), run.now_ms))
    else {
        return rejected(
            front,
            "redis.call/pcall can only be called inside a script invocation",
        );
    };
    // The script client runs as the caller's user (Redis's `scriptCall`), for this check and
    // for the checks commands make themselves (SORT's BY and GET patterns).
    let Some(script_client) = shard.scripting.client.as_ref().map(|c| c.shared.clone()) else {
        return Err("script client busy".to_string());
    };
    *script_client.user.borrow_mut() = caller.user.borrow().clone();
    if let Err(text) = crate::cmd::acl::script_gate(shard, &script_client, &caller, spec, argv, now)
    {
        return rejected(front, &text);
    }
    let Some(run) = shard.scripting.run.as_ref() else {
        return Err(String::new());
    };
    let writes = flags.contains(Flags::WRITE);
    // May-replicate commands count as writes here (PUBLISH, PFCOUNT...), so a read-only
    // script never runs one, under CLIENT PAUSE WRITE included.
    if run.read_only && crate::cmd::table::writes_or_may_replicate(spec.meta) {
        return rejected(
            front,
            "Write commands are not allowed from read-only scripts.",
        );
    }
    if writes && !run.write_dirty {
        if let Some(text) = shard.persist.refusal() {
            return rejected(front, &format!("-{text}"));
        }
    }
    // Redis's scriptVerifyOOM: past maxmemory, a script that has not written yet may not
    // start with a command that uses memory; one that wrote must finish.
    if run.oom
        && !run.allow_oom
        && !run.write_dirty
        && flags.contains(Flags::DENYOOM)
        && shard.config.maxmemory != 0
    {
        return rejected(
            front,
            "-OOM command not allowed when used memory > 'maxmemory'.",
        );
    }
    // A script that has done nothing yet and reaches what this run cannot (a whole-keyspace
    // command, a key of a shard not held, a SORT pattern's keys) stops, uncounted, and
    // runs again with every shard of the process held (`may_rerun`); otherwise it gets Redis
    // Cluster's answer (a whole-keyspace command: its own shard's, as a Redis Cluster node
    // gives).
    let rerun = |shard: &mut Shard, front: &mut crate::front::Front, owner: u16| {
        if !may_rerun(shard, front, owner) {
            return None;
        }
        if let Some(run) = shard.scripting.run.as_mut() {
            run.misplaced.get_or_insert(owner);
        }
        // Not counted: the run that counts is the next one.
        Some(Err(NON_LOCAL.to_string()))
    };
    // DBSIZE, KEYS, FLUSHDB, INFO..., RANDOMKEY, SCAN see the whole keyspace, as on one
    // server: a part on every shard, all held for this run.
    let every = match every_shard(shard, front, spec, argv) {
        Ok(every) => every,
        Err(()) => {
            if let Some(stop) = rerun(shard, front, shard.index) {
                return stop;
            }
            None
        }
    };
    // SORT whose BY or GET patterns may form keys of other shards: in steps over every shard,
    // when all are held (`held_across::sort_plan`).
    let sorted = match crate::held_across::sort_plan(shard, front, spec, argv) {
        crate::held_across::SortPlan::Here => None,
        crate::held_across::SortPlan::Held(a) => Some(a),
        crate::held_across::SortPlan::Elsewhere => {
            if let Some(stop) = rerun(shard, front, shard.index) {
                return stop;
            }
            // SORT refuses the patterns itself, with Redis Cluster's text.
            None
        }
    };
    // Keys all on another shard held for this run (a script across shards): the call runs
    // there (`tx_across::call_held`). MGET, MSET, DEL... over keys of this shard and held
    // ones: a part on each (`scattered`).
    let held = super::busy::held_owner(shard, spec, argv).filter(|_| sorted.is_none());
    let non_local = super::busy::non_local_key(shard, spec, argv)
        .filter(|_| held.is_none() && sorted.is_none());
    // Split only when some key is elsewhere: a call over this shard's keys runs as it is.
    let scatter = match non_local {
        Some(_) => scattered(shard, front, spec, argv),
        None => None,
    };
    // Other commands over keys of this shard and held ones: in steps (`held_across`).
    let across = match (non_local, &scatter) {
        (Some(_), None) => crate::held_across::plan(shard, front, spec, argv),
        _ => sorted,
    };
    if let Some(owner) = non_local.filter(|_| scatter.is_none() && across.is_none()) {
        if let Some(stop) = rerun(shard, front, owner) {
            return stop;
        }
        return rejected(front, NON_LOCAL);
    }
    let (resp3, now) = {
        let Some(run) = shard.scripting.run.as_mut() else {
            return Err(String::new());
        };
        if writes {
            run.write_dirty = true;
        }
        if crate::cmd::table::writes_or_may_replicate(spec.meta) {
            run.effects = true;
        }
        (run.resp3, run.now_ms)
    };
    let Some(mut client) = shard.scripting.client.take() else {
        return Err("script client busy".to_string());
    };
    let mut reply = std::mem::take(&mut shard.scripting.reply);
    reply.clear();
    reply.proto = if resp3 {
        crate::resp::reply::Proto::Resp3
    } else {
        crate::resp::reply::Proto::Resp2
    };
    client.shared.proto.set(reply.proto);
    if let Some((parts, join)) = every {
        let mut replies: Vec<Vec<u8>> = Vec::with_capacity(parts.len());
        for (t, args) in &parts {
            let sub: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
            let part_spec = crate::cmd::resolve(front.table, &sub).unwrap_or(spec);
            let mut r = crate::resp::reply::Reply::new();
            r.proto = reply.proto;
            if *t == shard.index {
                crate::cmd::call(shard, front, &mut client, &mut r, part_spec, &sub, now);
            } else {
                call_on_held(&caller, client.db, &mut r, part_spec, &sub, *t);
            }
            replies.push(r.buf);
        }
        let refs: Vec<&[u8]> = replies.iter().map(Vec::as_slice).collect();
        if crate::tx_across::join_one(&join, &refs, &mut reply).is_none() {
            reply.error(&crate::error::CmdError::Err(
                "the shards' replies did not join".to_string(),
            ));
        }
        shard.scripting.reply = reply;
        shard.scripting.client = Some(client);
        return Ok(());
    }
    match (held, scatter) {
        (Some(owner), _) => call_on_held(&caller, client.db, &mut reply, spec, argv, owner),
        (None, Some((kind, parts, order))) => {
            // Each shard's part as that command there, merged as on the main port.
            let mut replies: Vec<Vec<u8>> = Vec::with_capacity(parts.len());
            for (t, sub) in &parts {
                let mut r = crate::resp::reply::Reply::new();
                r.proto = reply.proto;
                if *t == shard.index {
                    crate::cmd::call(shard, front, &mut client, &mut r, spec, sub, now);
                } else {
                    call_on_held(&caller, client.db, &mut r, spec, sub, *t);
                }
                replies.push(r.buf);
            }
            let refs: Vec<&[u8]> = replies.iter().map(Vec::as_slice).collect();
            crate::route::gather(kind, &order, &refs, &mut reply);
        }
        (None, None) => match across {
            Some(a) => crate::held_across::run(
                shard,
                front,
                &mut client,
                &caller,
                &mut reply,
                spec,
                argv,
                now,
                a,
            ),
            None => crate::cmd::call(shard, front, &mut client, &mut reply, spec, argv, now),
        },
    }
    shard.scripting.reply = reply;
    shard.scripting.client = Some(client);
    Ok(())
}

/// The parts of a script's command that reads or acts on the whole keyspace (DBSIZE, KEYS,
/// FLUSHDB..., RANDOMKEY, SCAN: `tx_across::every_shard_parts`) when every shard of the
/// process is this one or held for the run; `Ok(None)` for another command, with one
/// shard, or on a site across nodes; `Err` when some shard is not held.
fn every_shard(
    shard: &Shard,
    front: &crate::front::Front,
    spec: &crate::cmd::table::CommandSpec,
    argv: &[&[u8]],
) -> Result<Option<(crate::tx_across::Parts, crate::tx_across::Join)>, ()> {
    use crate::route::{Class, Special};
    let Some(map) = shard.scripting.slots.as_ref() else {
        return Ok(None);
    };
    let class = crate::route::classes(front.table).get(spec.idx).copied();
    let Some(class @ (Class::All(_) | Class::Special(Special::RandomKey | Special::Scan))) = class
    else {
        return Ok(None);
    };
    let shards = map.shards();
    // A site across nodes: the other nodes' shards are never held for a script, which keeps
    // its own shard's answer there.
    if !(0..shards).all(|t| front.node.is_local(t)) {
        return Ok(None);
    }
    if !(0..shards).all(|t| t == shard.index || crate::tx_across::reaches(t)) {
        return Err(());
    }
    let args: Vec<Vec<u8>> = argv.iter().map(|a| a.to_vec()).collect();
    Ok(crate::tx_across::every_shard_parts(class, &args, shards))
}

/// A script's MGET, MSET, DEL, UNLINK, EXISTS or TOUCH over keys of this shard and of shards
/// held for its run (a script across shards): its kind and its parts by shard
/// (`route::split_scatter`). None when its keys are on one shard, or one is on a shard not
/// held (Redis Cluster's error then).
#[allow(clippy::type_complexity)]
fn scattered<'a>(
    shard: &Shard,
    front: &crate::front::Front,
    spec: &crate::cmd::table::CommandSpec,
    argv: &[&'a [u8]],
) -> Option<(
    crate::route::Scatter,
    Vec<(u16, Vec<&'a [u8]>)>,
    Vec<(usize, usize)>,
)> {
    let Some(crate::route::Class::Scatter(kind)) =
        crate::route::classes(front.table).get(spec.idx).copied()
    else {
        return None;
    };
    let map = shard.scripting.slots.as_ref()?;
    let (parts, order) = crate::route::split_scatter(map, kind, argv);
    let reachable = parts
        .iter()
        .all(|(t, _)| *t == shard.index || crate::tx_across::reaches(*t));
    (parts.len() > 1 && reachable).then_some((kind, parts, order))
}

/// Runs a script's command on held shard `owner` (`hop::Op::ScriptCall`) for `caller` in
/// database `db`; its reply goes into `reply` as a local call's would.
fn call_on_held(
    caller: &crate::client::ClientShared,
    db: usize,
    reply: &mut crate::resp::reply::Reply,
    spec: &'static crate::cmd::table::CommandSpec,
    argv: &[&[u8]],
    owner: u16,
) {
    let mut batch = crate::hop::Batch::new(crate::hop::ClientView::of_shared(caller));
    batch.push(crate::hop::Op::ScriptCall(spec), db, reply.proto, argv);
    match crate::tx_across::call_held(owner, batch) {
        Some(done) => reply.buf.extend_from_slice(done.reply(0)),
        None => reply.error(&crate::hop::unavailable_error(crate::hop::Unavailable {
            shard: owner,
        })),
    }
}

fn redis_log(lua: &Lua, args: MultiValue) -> mlua::Result<(Value, Value)> {
    if args.len() < 2 {
        return fail(lua, "redis.log() requires two arguments or more.");
    }
    let level = match args.front() {
        Some(Value::Number(d)) => *d as i64,
        Some(Value::Integer(i)) => *i,
        Some(Value::String(s)) => match std::str::from_utf8(&s.as_bytes())
            .ok()
            .and_then(|s| s.trim().parse::<f64>().ok())
        {
            Some(d) => d as i64,
            None => return fail(lua, "First argument must be a number (log level)."),
        },
        _ => return fail(lua, "First argument must be a number (log level)."),
    };
    if !(0..=3).contains(&level) {
        return fail(lua, "Invalid debug level.");
    }
    let mut line = Vec::new();
    for (i, a) in args.iter().skip(1).enumerate() {
        let piece = match a {
            Value::String(s) => s.as_bytes().to_vec(),
            Value::Number(d) => lua_number_string(*d).into_bytes(),
            Value::Integer(n) => n.to_string().into_bytes(),
            _ => continue,
        };
        if i > 0 {
            line.push(b' ');
        }
        line.extend_from_slice(&piece);
    }
    let line = String::from_utf8_lossy(&line);
    match level {
        0 | 1 => tracing::debug!(target: "script", "{line}"),
        2 => tracing::info!(target: "script", "{line}"),
        _ => tracing::warn!(target: "script", "{line}"),
    }
    Ok((Value::Nil, Value::Nil))
}

/// Lua 5.1's number to string (`%.14g`).
pub fn lua_number_string(d: f64) -> String {
    if d.is_nan() {
        return if d.is_sign_negative() { "-nan" } else { "nan" }.to_string();
    }
    if d.is_infinite() {
        return if d > 0.0 { "inf" } else { "-inf" }.to_string();
    }
    crate::resp::reply::format_g(d, 14)
}

fn number_of(v: Option<&Value>) -> Option<f64> {
    match v? {
        Value::Number(d) => Some(*d),
        Value::Integer(i) => Some(*i as f64),
        Value::String(s) => std::str::from_utf8(&s.as_bytes())
            .ok()
            .and_then(|s| s.trim().parse::<f64>().ok()),
        _ => None,
    }
}

fn redis_setresp(lua: &Lua, loan: &Loan, args: MultiValue) -> mlua::Result<(Value, Value)> {
    if with_shard(loan, |_| ()).is_none() {
        return fail(
            lua,
            "redis.setresp can only be called inside a script invocation",
        );
    }
    if args.len() != 1 {
        return fail(lua, "redis.setresp() requires one argument.");
    }
    let resp = number_of(args.front()).unwrap_or(0.0) as i64;
    if resp != 2 && resp != 3 {
        return fail(lua, "RESP version must be 2 or 3.");
    }
    with_shard(loan, |s| {
        if let Some(run) = s.scripting.run.as_mut() {
            run.resp3 = resp == 3;
        }
    });
    Ok((Value::Nil, Value::Nil))
}

fn redis_set_repl(lua: &Lua, loan: &Loan, args: MultiValue) -> mlua::Result<(Value, Value)> {
    if with_shard(loan, |_| ()).is_none() {
        return fail(
            lua,
            "redis.set_repl can only be called inside a script invocation",
        );
    }
    if args.len() != 1 {
        return fail(lua, "redis.set_repl() requires two arguments.");
    }
    let flags = number_of(args.front()).unwrap_or(0.0) as i64;
    if flags & !3 != 0 {
        return fail(
            lua,
            "Invalid replication flags. Use REPL_AOF, REPL_REPLICA, REPL_ALL or REPL_NONE.",
        );
    }
    // Accepted and ignored: a script's writes always reach the log and the other sites as the
    // effects they produced (docs/replication.md).
    Ok((Value::Nil, Value::Nil))
}

fn redis_sha1hex(lua: &Lua, args: MultiValue) -> mlua::Result<(Value, Value)> {
    if args.len() != 1 {
        return fail(lua, "wrong number of arguments");
    }
    let bytes = match args.front() {
        Some(Value::String(s)) => s.as_bytes().to_vec(),
        Some(Value::Number(d)) => lua_number_string(*d).into_bytes(),
        Some(Value::Integer(i)) => i.to_string().into_bytes(),
        _ => Vec::new(),
    };
    let hex = sha1::sha1_hex(&bytes);
    Ok((Value::String(lua.create_string(hex)?), Value::Nil))
}

fn single_string(args: &MultiValue) -> Option<mlua::String> {
    match (args.len(), args.front()) {
        (1, Some(Value::String(s))) => Some(s.clone()),
        _ => None,
    }
}

fn redis_error_reply(lua: &Lua, args: MultiValue) -> mlua::Result<Value> {
    let Some(s) = single_string(&args) else {
        return Ok(Value::Table(convert::error_table(
            lua,
            b"wrong number or type of arguments",
        )?));
    };
    let raw = s.as_bytes();
    let mut text = Vec::with_capacity(raw.len() + 1);
    if raw.first() != Some(&b'-') {
        text.push(b'-');
    }
    text.extend_from_slice(&raw);
    Ok(Value::Table(convert::error_table(lua, &text)?))
}

fn redis_status_reply(lua: &Lua, args: MultiValue) -> mlua::Result<Value> {
    let Some(s) = single_string(&args) else {
        return Ok(Value::Table(convert::error_table(
            lua,
            b"wrong number or type of arguments",
        )?));
    };
    let t = lua.create_table()?;
    t.raw_set("ok", s)?;
    Ok(Value::Table(t))
}

fn redis_acl_check_cmd(lua: &Lua, loan: &Loan, args: MultiValue) -> mlua::Result<(Value, Value)> {
    let Some(table) = with_shard(loan, |_| crate::cmd::table()) else {
        return fail(
            lua,
            "redis.acl_check_cmd can only be called inside a script invocation",
        );
    };
    let mut argv = Vec::new();
    if let Err(text) = lua_args(&Args::Values(args), &mut argv) {
        return fail(lua, text);
    }
    let refs: Vec<&[u8]> = argv.iter().map(Vec::as_slice).collect();
    let Some(spec) = lookup(table, &refs) else {
        return fail(lua, "Invalid command passed to redis.acl_check_cmd()");
    };
    // The user of the client that called the script (`rctx->original_client->user`).
    let allowed = with_shard(loan, |s| {
        s.scripting
            .run
            .as_ref()
            .map(|run| run.caller.clone())
            .is_some_and(|caller| crate::cmd::acl::may_run(s, &caller, spec, &refs))
    });
    match allowed {
        Some(allowed) => Ok((Value::Boolean(allowed), Value::Nil)),
        None => fail(
            lua,
            "redis.acl_check_cmd can only be called inside a script invocation",
        ),
    }
}

/// `luaL_checkint` of argument `n` (1-based) of `fname`.
fn check_int(args: &MultiValue, n: usize, fname: &str) -> Result<i32, String> {
    let v = args.get(n - 1);
    match number_of(v) {
        Some(d) => Ok(d as i64 as i32),
        None => {
            let got = match v {
                None => "no value".to_string(),
                Some(v) => v.type_name().to_string(),
            };
            Err(format!(
                "bad argument #{n} to '{fname}' (number expected, got {got})"
            ))
        }
    }
}

fn math_random(lua: &Lua, loan: &Loan, args: MultiValue) -> mlua::Result<(Value, Value)> {
    let Some(raw) = with_shard(loan, |s| s.scripting.rng.next_value()) else {
        return fail_str(
            lua,
            "math.random can only be called inside a script invocation",
        );
    };
    let max = super::rand::LRAND48_MAX;
    let r = f64::from(raw % max) / f64::from(max);
    let v = match args.len() {
        0 => r,
        1 => {
            let u = match check_int(&args, 1, "random") {
                Ok(u) => u,
                Err(e) => return fail_str(lua, &e),
            };
            if u < 1 {
                return fail_str(lua, "bad argument #1 to 'random' (interval is empty)");
            }
            (r * f64::from(u)).floor() + 1.0
        }
        2 => {
            let (l, u) = match (check_int(&args, 1, "random"), check_int(&args, 2, "random")) {
                (Ok(l), Ok(u)) => (l, u),
                (Err(e), _) | (_, Err(e)) => return fail_str(lua, &e),
            };
            if l > u {
                return fail_str(lua, "bad argument #2 to 'random' (interval is empty)");
            }
            (r * (f64::from(u) - f64::from(l) + 1.0)).floor() + f64::from(l)
        }
        _ => return fail_str(lua, "wrong number of arguments"),
    };
    Ok((Value::Number(v), Value::Nil))
}

fn math_randomseed(lua: &Lua, loan: &Loan, args: MultiValue) -> mlua::Result<(Value, Value)> {
    if with_shard(loan, |_| ()).is_none() {
        return fail_str(
            lua,
            "math.randomseed can only be called inside a script invocation",
        );
    }
    let seed = match check_int(&args, 1, "randomseed") {
        Ok(s) => s,
        Err(e) => return fail_str(lua, &e),
    };
    with_shard(loan, |s| s.scripting.rng.seed(seed));
    Ok((Value::Nil, Value::Nil))
}

/// Starts a run: the run state, the script client's database, KEYS/ARGV for EVAL.
pub fn begin_run(shard: &mut Shard, run: Run) {
    let db = run.db;
    shard.scripting.run = Some(run);
    if let Some(c) = shard.scripting.client.as_mut() {
        c.select(db);
    }
}

/// Ends a run; steps the Lua GC every `GC_CYCLE_PERIOD` runs, as Redis does.
pub fn end_run(shard: &mut Shard, engine: &Engine) -> Option<Run> {
    super::busy::unpost(shard);
    super::busy::hand_over_early_connections(shard);
    // After a kill or a load timeout the hook fires on every line; back to counting.
    let _ = engine.reset_hook();
    let run = shard.scripting.run.take();
    // A script that reached another shard's key with no effect anywhere may run there.
    shard.scripting.relocate = run
        .as_ref()
        .filter(|r| !r.effects)
        .and_then(|r| r.misplaced);
    shard.scripting.gc_countdown = shard.scripting.gc_countdown.saturating_sub(1);
    if shard.scripting.gc_countdown == 0 {
        shard.scripting.gc_countdown = super::GC_CYCLE_PERIOD;
        let _ = engine.lua().gc_step_kbytes(super::GC_CYCLE_PERIOD as i32);
        // Functions of scripts and libraries dropped since (their registry keys) go too.
        engine.lua().expire_registry_values();
    }
    run
}
