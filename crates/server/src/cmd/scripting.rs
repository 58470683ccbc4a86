//! EVAL EVALSHA EVAL_RO EVALSHA_RO, SCRIPT, FCALL FCALL_RO and FUNCTION (eval.c,
//! functions.c, script.c). The engines, the sandbox and the busy path live in `crate::script`.
//!
//! A script's writes are the writes of the commands it runs, each through the ordinary write
//! path; nothing here replicates a script as such. A FUNCTION LOAD, DELETE, FLUSH or RESTORE
//! changes the deployment's libraries: the shard logs the resulting library set
//! (`Shard::log_functions`), which recovery and the other sites apply.

use super::args::{eq_ic, parse_i64};
use super::server::{reply_help, subcommand_syntax_error};
use super::{Ctx, Handler};
use crate::error::CmdError;
use crate::script::engine::{self, Engine, RunArgs};
use crate::script::{self, CachedScript, Run, ScriptFlags, busy, convert, library};
use crate::sha1;
use crate::shard::Shard;

pub const HANDLERS: &[(&str, Handler)] = &[
    ("eval", eval),
    ("evalsha", evalsha),
    ("eval_ro", eval_ro),
    ("evalsha_ro", evalsha_ro),
    ("fcall", fcall),
    ("fcall_ro", fcall_ro),
    ("script|load", script_load),
    ("script|exists", script_exists),
    ("script|flush", script_flush),
    ("script|kill", script_kill),
    ("script|help", script_help),
    ("function|load", function_load),
    ("function|list", function_list),
    ("function|delete", function_delete),
    ("function|flush", function_flush),
    ("function|dump", function_dump),
    ("function|restore", function_restore),
    ("function|stats", function_stats),
    ("function|kill", function_kill),
    ("function|help", function_help),
];

const NOSCRIPT: &str = "NOSCRIPT No matching script. Please use EVAL.";

fn eval(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    eval_generic(ctx, argv, false, false)
}

fn evalsha(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    eval_generic(ctx, argv, true, false)
}

fn eval_ro(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    eval_generic(ctx, argv, false, true)
}

fn evalsha_ro(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    eval_generic(ctx, argv, true, true)
}

/// numkeys of EVAL/FCALL: `Ok(n)` with `n <= argc - 3`.
fn numkeys(argv: &[&[u8]], bad: CmdError) -> Result<usize, CmdError> {
    let n = parse_i64(argv.get(2).copied().unwrap_or_default()).ok_or(bad)?;
    if n > argv.len() as i64 - 3 {
        return Err(CmdError::Err(
            "Number of keys can't be greater than number of args".to_string(),
        ));
    }
    if n < 0 {
        return Err(CmdError::Err(
            "Number of keys can't be negative".to_string(),
        ));
    }
    Ok(n as usize)
}

/// Compiles a script into the cache (luaCreateFunction); its sha.
fn create_script(shard: &mut Shard, body: &[u8]) -> Result<[u8; 40], CmdError> {
    let sha = sha1::sha1_hex(body);
    if shard.scripting.scripts.contains_key(&sha) {
        return Ok(sha);
    }
    let (flags, shebang_len) = script::parse_shebang(body).map_err(CmdError::Err)?;
    let code = body.get(shebang_len..).unwrap_or_default();
    let engine = shard
        .scripting
        .eval_engine()
        .map_err(|e| CmdError::Err(e.to_string()))?;
    let function = engine.compile(code, "@user_script", None).map_err(|e| {
        CmdError::Err(format!(
            "Error compiling script (new function): {}",
            library::compile_message(&e)
        ))
    })?;
    let function = engine
        .lua()
        .create_registry_value(function)
        .map_err(|e| CmdError::Err(e.to_string()))?;
    shard.scripting.scripts.insert(
        sha,
        CachedScript {
            function,
            flags,
            body_bytes: body.len(),
        },
    );
    shard.scripting.share_body(sha, body);
    Ok(sha)
}

/// Whether script `sha` is in the cache, compiling it here first when another shard of the
/// process cached it (Redis's cache is one for the whole server).
fn has_script(shard: &mut Shard, sha: &[u8; 40]) -> bool {
    if shard.scripting.scripts.contains_key(sha) {
        return true;
    }
    match shard.scripting.shared_body(sha) {
        Some(body) => create_script(shard, &body).is_ok(),
        None => false,
    }
}

/// The flags a script call declares, read before it runs as Redis's `evalGetCommandFlags` and
/// `fcallGetCommandFlags` do (CLIENT PAUSE WRITE decides on them): EVAL's body (cached, or its
/// shebang parsed), EVALSHA's cached script, FCALL's function. `None` when `name` is no script
/// call, the script or function is unknown, or the script declares nothing (EVAL's
/// compatibility mode): the command's own flags apply then.
pub fn declared_flags(shard: &Shard, name: &str, argv: &[&[u8]]) -> Option<ScriptFlags> {
    let target = argv.get(1).copied()?;
    let flags = match name {
        "eval" | "eval_ro" => match shard.scripting.scripts.get(&sha1::sha1_hex(target)) {
            Some(cached) => cached.flags,
            None => script::parse_shebang(target).ok()?.0,
        },
        "evalsha" | "evalsha_ro" => {
            let mut sha = [0u8; 40];
            if target.len() != sha.len() {
                return None;
            }
            for (d, s) in sha.iter_mut().zip(target) {
                *d = s.to_ascii_lowercase();
            }
            match shard.scripting.scripts.get(&sha) {
                Some(cached) => cached.flags,
                None => {
                    script::parse_shebang(&shard.scripting.shared_body(&sha)?)
                        .ok()?
                        .0
                }
            }
        }
        "fcall" | "fcall_ro" => shard.scripting.libraries.function(target)?.flags,
        _ => return None,
    };
    (!flags.compat).then_some(flags)
}

/// scriptPrepareForRun's checks of a script's flags against the server state.
fn check_flags(shard: &Shard, flags: ScriptFlags, ro: bool) -> Result<(), CmdError> {
    if flags.compat || flags.no_writes {
        return Ok(());
    }
    if let Some(text) = shard.persist.refusal() {
        return Err(CmdError::Raw(format!(
            "{text}. Writable scripts are blocked. Use 'no-writes' flag for read only scripts."
        )));
    }
    if ro {
        return Err(CmdError::Err(
            "Can not execute a script with write flag using *_ro command.".to_string(),
        ));
    }
    Ok(())
}

fn eval_generic(
    ctx: &mut Ctx<'_>,
    argv: &[&[u8]],
    evalsha: bool,
    ro: bool,
) -> Result<(), CmdError> {
    super::with_monitor_lines_held(ctx, |ctx| eval_run(ctx, argv, evalsha, ro))
}

fn eval_run(ctx: &mut Ctx<'_>, argv: &[&[u8]], evalsha: bool, ro: bool) -> Result<(), CmdError> {
    super::feed_monitors_now(ctx, argv);
    let body = argv.get(1).copied().unwrap_or_default();
    if evalsha && body.len() != 40 {
        return Err(CmdError::Raw(NOSCRIPT.to_string()));
    }
    let nkeys = numkeys(argv, CmdError::NotInteger)?;
    let sha = if evalsha {
        let mut sha = [0u8; 40];
        for (d, s) in sha.iter_mut().zip(body) {
            *d = s.to_ascii_lowercase();
        }
        if !has_script(ctx.shard, &sha) {
            return Err(CmdError::Raw(NOSCRIPT.to_string()));
        }
        sha
    } else {
        create_script(ctx.shard, body)?
    };
    let engine = ctx
        .shard
        .scripting
        .eval_engine()
        .map_err(|e| CmdError::Err(e.to_string()))?;
    let Some(cached) = ctx.shard.scripting.scripts.get(&sha) else {
        return Err(CmdError::Raw(NOSCRIPT.to_string()));
    };
    let function: mlua::Function = engine
        .lua()
        .registry_value(&cached.function)
        .map_err(|e| CmdError::Err(e.to_string()))?;
    let flags = cached.flags;
    check_flags(ctx.shard, flags, ro)?;
    let keys = argv.get(3..3 + nkeys).unwrap_or_default();
    let args = argv.get(3 + nkeys..).unwrap_or_default();
    if !flags.compat && !flags.allow_cross_slot {
        if let Some(e) = busy::declared_keys_error(ctx.shard, keys) {
            return Err(CmdError::Raw(e.to_string()));
        }
    }
    let name = sha_name(&sha);
    let run = new_run(ctx, flags, ro, (true, nkeys == 0), name, Vec::new());
    run_and_reply(ctx, &engine, &function, RunArgs::Eval { keys, args }, run);
    Ok(())
}

fn sha_name(sha: &[u8; 40]) -> String {
    // A cached script's sha is hex: the plain check, not the lossy one, on this path.
    match std::str::from_utf8(sha) {
        Ok(s) => s.to_owned(),
        Err(_) => String::from_utf8_lossy(sha).into_owned(),
    }
}

fn new_run(
    ctx: &Ctx<'_>,
    flags: ScriptFlags,
    ro: bool,
    (eval, keyless): (bool, bool),
    name: String,
    caller_argv: Vec<Vec<u8>>,
) -> Run {
    Run {
        started: std::time::Instant::now(),
        now_ms: ctx.now_ms,
        db: ctx.client.db,
        resp3: false,
        read_only: ro || (!flags.compat && flags.no_writes),
        allow_oom: !flags.compat && flags.allow_oom,
        oom: ctx.shard.config.maxmemory != 0 && ctx.shard.evict.failed,
        eval,
        keyless,
        write_dirty: false,
        effects: false,
        misplaced: None,
        rerun: ctx.client.endpoint.is_none() && ctx.client.call_depth == 1,
        killed: false,
        timed_out: false,
        name,
        caller: ctx.client.shared.clone(),
        caller_argv,
    }
}

fn run_failure(name: &str, e: &mlua::Error) -> CmdError {
    CmdError::Err(format!(
        "Error running script {name}, {}",
        engine::interrupt_message(e)
    ))
}

/// Runs a script or function and writes its reply (luaCallFunction's second half).
fn run_and_reply(
    ctx: &mut Ctx<'_>,
    engine: &Engine,
    function: &mlua::Function,
    args: RunArgs<'_>,
    run: Run,
) {
    engine::begin_run(ctx.shard, run);
    let result = engine.run(ctx.shard, ctx.front, function, args);
    let run = engine::end_run(ctx.shard, engine);
    if ctx.shard.scripting.relocate.is_some() {
        // It stopped, having done nothing, to run again with more shards held: this run's
        // reply is dropped and counts nowhere (`cmd::call_with`).
        ctx.out
            .error(&CmdError::Err("script to run again".to_string()));
        return;
    }
    let name = run.as_ref().map_or("", |r| r.name.as_str());
    let script_resp3 = run.as_ref().is_some_and(|r| r.resp3);
    let mark = ctx.out.len();
    // Whether the reply holds an error Redis counts the command failed for: a script error,
    // or a returned error reply (Redis's `afterErrorReply` counts `failed_calls` even for an
    // error whose errorstats its `redis.call` already counted).
    let failed = match result {
        Ok((true, value)) => {
            let errors = convert::lua_to_reply(engine.lua(), value, ctx.out, script_resp3);
            let failed = !errors.is_empty() || ctx.out.buf.get(mark) == Some(&b'-');
            for code in errors {
                ctx.front.stats.count_error(&code);
            }
            failed
        }
        Ok((false, mlua::Value::Table(t))) => {
            // Raw reads, as everywhere a finished script's value is read: a field a metatable
            // supplied would run the script's code after its run ended, where nothing
            // bounds its time (an __index that loops wedged the shard for good).
            let msg: Vec<u8> = t
                .raw_get::<Option<mlua::String>>("err")
                .ok()
                .flatten()
                .map(|s| s.as_bytes().to_vec())
                .unwrap_or_default();
            let msg = match memchr::memchr(0, &msg) {
                Some(i) => msg.get(..i).unwrap_or_default().to_vec(),
                None => msg,
            };
            let mut text = msg.clone();
            let source: Option<String> = t.raw_get("source").ok().flatten();
            let line: Option<mlua::Value> = t.raw_get("line").ok();
            let line = match line {
                Some(mlua::Value::Integer(i)) => Some(i.to_string()),
                Some(mlua::Value::Number(d)) => Some(engine::lua_number_string(d)),
                Some(mlua::Value::String(s)) => {
                    Some(String::from_utf8_lossy(&s.as_bytes()).into_owned())
                }
                _ => None,
            };
            if let (Some(source), Some(line)) = (source, line) {
                text.extend_from_slice(format!(" script: {name}, on {source}:{line}.").as_bytes());
            }
            convert::write_error(ctx.out, &text);
            let ignored = matches!(
                t.raw_get::<mlua::Value>("ignore_error_stats_update"),
                Ok(mlua::Value::Boolean(true))
            );
            if !ignored {
                ctx.front.stats.count_error(&convert::error_code(&msg));
            }
            true
        }
        Ok((false, other)) => {
            let msg = match other {
                mlua::Value::String(s) => String::from_utf8_lossy(&s.as_bytes()).into_owned(),
                mlua::Value::Error(e) => engine::interrupt_message(&e),
                _ => "execution failure".to_string(),
            };
            let msg: String = msg.chars().take(100).collect();
            super::reply_error(
                ctx.front,
                ctx.out,
                &CmdError::Err(format!("Error running script {name}, {msg}")),
            );
            true
        }
        Err(e) => {
            super::reply_error(ctx.front, ctx.out, &run_failure(name, &e));
            true
        }
    };
    if failed {
        if let Some(st) = ctx.front.stats.commands.get_mut(ctx.spec.idx) {
            st.failed_calls += 1;
        }
    }
}

fn fcall(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    fcall_generic(ctx, argv, false)
}

fn fcall_ro(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    fcall_generic(ctx, argv, true)
}

fn fcall_generic(ctx: &mut Ctx<'_>, argv: &[&[u8]], ro: bool) -> Result<(), CmdError> {
    super::with_monitor_lines_held(ctx, |ctx| fcall_run(ctx, argv, ro))
}

fn fcall_run(ctx: &mut Ctx<'_>, argv: &[&[u8]], ro: bool) -> Result<(), CmdError> {
    super::feed_monitors_now(ctx, argv);
    let fname = argv.get(1).copied().unwrap_or_default();
    let Some(f) = ctx.shard.scripting.libraries.function(fname) else {
        return Err(CmdError::Err("Function not found".to_string()));
    };
    let (key, flags, name) = (f.callback.clone(), f.flags, f.name.clone());
    let nkeys = numkeys(
        argv,
        CmdError::Err("Bad number of keys provided".to_string()),
    )?;
    check_flags(ctx.shard, flags, ro)?;
    let keys = argv.get(3..3 + nkeys).unwrap_or_default();
    let args = argv.get(3 + nkeys..).unwrap_or_default();
    if !flags.allow_cross_slot {
        if let Some(e) = busy::declared_keys_error(ctx.shard, keys) {
            return Err(CmdError::Raw(e.to_string()));
        }
    }
    let engine = ctx
        .shard
        .scripting
        .function_engine()
        .map_err(|e| CmdError::Err(e.to_string()))?;
    let callback: mlua::Function = engine
        .lua()
        .registry_value(&key)
        .map_err(|e| CmdError::Err(e.to_string()))?;
    let caller_argv = argv.iter().map(|a| a.to_vec()).collect();
    let run = new_run(ctx, flags, ro, (false, nkeys == 0), name, caller_argv);
    run_and_reply(
        ctx,
        &engine,
        &callback,
        RunArgs::Function { keys, args },
        run,
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------
// SCRIPT

fn script_load(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let sha = create_script(ctx.shard, argv.get(2).copied().unwrap_or_default())?;
    ctx.out.bulk(&sha);
    Ok(())
}

fn script_exists(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let shas = argv.get(2..).unwrap_or_default();
    ctx.out.array(shas.len());
    for s in shas {
        let mut sha = [0u8; 40];
        let found = s.len() == 40 && {
            for (d, c) in sha.iter_mut().zip(s.iter()) {
                *d = c.to_ascii_lowercase();
            }
            ctx.shard.scripting.scripts.contains_key(&sha)
                || ctx.shard.scripting.shared_body(&sha).is_some()
        };
        ctx.out.int(i64::from(found));
    }
    Ok(())
}

/// `[ASYNC|SYNC]` of SCRIPT FLUSH and FUNCTION FLUSH (both free at once: the Lua state is
/// dropped in one step either way).
fn flush_mode(argv: &[&[u8]]) -> Option<()> {
    match argv.get(2) {
        None => Some(()),
        Some(m) if argv.len() == 3 && (eq_ic(m, "sync") || eq_ic(m, "async")) => Some(()),
        Some(_) => None,
    }
}

fn script_flush(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    if flush_mode(argv).is_none() {
        return Err(CmdError::Err(
            "SCRIPT FLUSH only support SYNC|ASYNC option".to_string(),
        ));
    }
    ctx.shard.scripting.flush_scripts();
    ctx.out.ok();
    Ok(())
}

fn kill_reply(ctx: &mut Ctx<'_>, eval: bool) -> Result<(), CmdError> {
    match busy::kill(ctx.shard, eval) {
        Ok(()) => {
            ctx.out.ok();
            Ok(())
        }
        Err(text) => Err(CmdError::Raw(text.to_string())),
    }
}

fn script_kill(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> Result<(), CmdError> {
    kill_reply(ctx, true)
}

fn script_help(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> Result<(), CmdError> {
    reply_help(
        ctx,
        "SCRIPT",
        &[
            "EXISTS <sha1> [<sha1> ...]",
            "    Return information about the existence of the scripts in the script cache.",
            "FLUSH [ASYNC|SYNC]",
            "    Flush the Lua scripts cache. Very dangerous on replicas.",
            "    When called without the optional mode argument, the behavior is determined by the",
            "    lazyfree-lazy-user-flush configuration directive. Valid modes are:",
            "    * ASYNC: Asynchronously flush the scripts cache.",
            "    * SYNC: Synchronously flush the scripts cache.",
            "KILL",
            "    Kill the currently executing Lua script.",
            "LOAD <script>",
            "    Load a script into the scripts cache without executing it.",
        ],
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------
// FUNCTION

fn function_load(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let mut replace = false;
    let mut i = 2;
    while i < argv.len() - 1 {
        let a = argv.get(i).copied().unwrap_or_default();
        if eq_ic(a, "replace") {
            replace = true;
            i += 1;
            continue;
        }
        return Err(CmdError::Err(format!(
            "Unknown option given: {}",
            String::from_utf8_lossy(a)
        )));
    }
    let Some(code) = argv.get(i) else {
        return Err(CmdError::Err("Function code is missing".to_string()));
    };
    let engine = ctx
        .shard
        .scripting
        .function_engine()
        .map_err(|e| CmdError::Err(e.to_string()))?;
    let name = library::load(
        &engine,
        &mut ctx.shard.scripting.libraries,
        code,
        replace,
        script::LOAD_TIMEOUT_MS,
    )
    .map_err(CmdError::Err)?;
    ctx.shard
        .log_library(name.as_bytes(), Some(code), ctx.now_ms);
    ctx.out.bulk(name.as_bytes());
    Ok(())
}

fn function_list(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let mut with_code = false;
    let mut pattern: Option<&[u8]> = None;
    let mut i = 2;
    while i < argv.len() {
        let a = argv.get(i).copied().unwrap_or_default();
        if !with_code && eq_ic(a, "withcode") {
            with_code = true;
            i += 1;
            continue;
        }
        if pattern.is_none() && eq_ic(a, "libraryname") {
            let Some(p) = argv.get(i + 1) else {
                return Err(CmdError::Err(
                    "library name argument was not given".to_string(),
                ));
            };
            pattern = Some(p);
            i += 2;
            continue;
        }
        return Err(CmdError::Err(format!(
            "Unknown argument {}",
            String::from_utf8_lossy(a)
        )));
    }
    let libs: Vec<&library::Library> = ctx
        .shard
        .scripting
        .libraries
        .iter()
        .filter(|l| pattern.is_none_or(|p| crate::glob::matches(p, l.name.as_bytes(), true)))
        .collect();
    let out = &mut *ctx.out;
    out.array(libs.len());
    for lib in libs {
        out.map(if with_code { 4 } else { 3 });
        out.bulk(b"library_name");
        out.bulk(lib.name.as_bytes());
        out.bulk(b"engine");
        out.bulk(library::ENGINE_NAME.as_bytes());
        out.bulk(b"functions");
        out.array(lib.functions.len());
        for f in &lib.functions {
            out.map(3);
            out.bulk(b"name");
            out.bulk(f.name.as_bytes());
            out.bulk(b"description");
            match &f.description {
                Some(d) => out.bulk(d),
                None => out.null(),
            }
            out.bulk(b"flags");
            let names = f.flags.names();
            out.set(names.len());
            for n in names {
                out.simple(n);
            }
        }
        if with_code {
            out.bulk(b"library_code");
            out.bulk(&lib.code);
        }
    }
    Ok(())
}

fn function_delete(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let name = String::from_utf8_lossy(argv.get(2).copied().unwrap_or_default()).into_owned();
    if ctx.shard.scripting.libraries.remove(&name).is_none() {
        return Err(CmdError::Err("Library not found".to_string()));
    }
    ctx.shard.log_library(name.as_bytes(), None, ctx.now_ms);
    ctx.out.ok();
    Ok(())
}

fn function_flush(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    if argv.len() > 3 {
        return Err(subcommand_syntax_error(argv));
    }
    if flush_mode(argv).is_none() {
        return Err(CmdError::Err(
            "FUNCTION FLUSH only supports SYNC|ASYNC option".to_string(),
        ));
    }
    ctx.shard.scripting.libraries.clear();
    for name in ctx.shard.scripting.register.live_names() {
        ctx.shard.log_library(&name, None, ctx.now_ms);
    }
    ctx.out.ok();
    Ok(())
}

fn function_dump(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> Result<(), CmdError> {
    let payload = library::dump(&ctx.shard.scripting.libraries);
    ctx.out.bulk(&payload);
    Ok(())
}

fn function_restore(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    if argv.len() > 4 {
        return Err(subcommand_syntax_error(argv));
    }
    let policy = match argv.get(3) {
        None => library::RestorePolicy::Append,
        Some(p) if eq_ic(p, "append") => library::RestorePolicy::Append,
        Some(p) if eq_ic(p, "replace") => library::RestorePolicy::Replace,
        Some(p) if eq_ic(p, "flush") => library::RestorePolicy::Flush,
        Some(_) => {
            return Err(CmdError::Err(
                "Wrong restore policy given, value should be either FLUSH, APPEND or REPLACE."
                    .to_string(),
            ));
        }
    };
    let engine = ctx
        .shard
        .scripting
        .function_engine()
        .map_err(|e| CmdError::Err(e.to_string()))?;
    library::restore(
        &engine,
        &mut ctx.shard.scripting.libraries,
        argv.get(2).copied().unwrap_or_default(),
        policy,
    )
    .map_err(CmdError::Err)?;
    log_restored(ctx.shard, policy, ctx.now_ms);
    ctx.out.ok();
    Ok(())
}

/// After the shard's libraries were restored by `policy`: logs what changed, every library
/// the register does not hold with its code, and with FLUSH every other one as deleted.
pub fn log_restored(shard: &mut crate::shard::Shard, policy: library::RestorePolicy, now_ms: u64) {
    let loaded: Vec<(Vec<u8>, Vec<u8>)> = shard
        .scripting
        .libraries
        .iter()
        .map(|l| (l.name.as_bytes().to_vec(), l.code.clone()))
        .collect();
    if policy == library::RestorePolicy::Flush {
        for name in shard.scripting.register.live_names() {
            if !loaded.iter().any(|(n, _)| *n == name) {
                shard.log_library(&name, None, now_ms);
            }
        }
    }
    for (name, code) in loaded {
        let same = shard
            .scripting
            .register
            .iter()
            .any(|(n, e)| *n == name && e.code.as_deref() == Some(code.as_slice()));
        if !same {
            shard.log_library(&name, Some(&code), now_ms);
        }
    }
}

fn function_stats(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> Result<(), CmdError> {
    busy::function_stats(ctx.shard, ctx.out).map_err(|t| CmdError::Raw(t.to_string()))
}

fn function_kill(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> Result<(), CmdError> {
    kill_reply(ctx, false)
}

fn function_help(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> Result<(), CmdError> {
    reply_help(
        ctx,
        "FUNCTION",
        &[
            "LOAD [REPLACE] <FUNCTION CODE>",
            "    Create a new library with the given library name and code.",
            "DELETE <LIBRARY NAME>",
            "    Delete the given library.",
            "LIST [LIBRARYNAME PATTERN] [WITHCODE]",
            "    Return general information on all the libraries:",
            "    * Library name",
            "    * The engine used to run the Library",
            "    * Library description",
            "    * Functions list",
            "    * Library code (if WITHCODE is given)",
            "    It also possible to get only function that matches a pattern using LIBRARYNAME argument.",
            "STATS",
            "    Return information about the current function running:",
            "    * Function name",
            "    * Command used to run the function",
            "    * Duration in MS that the function is running",
            "    If no function is running, return nil",
            "    In addition, returns a list of available engines.",
            "KILL",
            "    Kill the current running function.",
            "FLUSH [ASYNC|SYNC]",
            "    Delete all the libraries.",
            "    When called without the optional mode argument, the behavior is determined by the",
            "    lazyfree-lazy-user-flush configuration directive. Valid modes are:",
            "    * ASYNC: Asynchronously flush the libraries.",
            "    * SYNC: Synchronously flush the libraries.",
            "DUMP",
            "    Return a serialized payload representing the current libraries, can be restored using FUNCTION RESTORE command",
            "RESTORE <PAYLOAD> [FLUSH|APPEND|REPLACE]",
            "    Restore the libraries represented by the given payload, it is possible to give a restore policy to",
            "    control how to handle existing libraries (default APPEND):",
            "    * FLUSH: delete all existing libraries.",
            "    * APPEND: appends the restored libraries to the existing libraries. On collision, abort.",
            "    * REPLACE: appends the restored libraries to the existing libraries, On collision, replace the old",
            "      libraries with the new libraries (notice that even on this option there is a chance of failure",
            "      in case of functions name collision with another library).",
        ],
    );
    Ok(())
}
