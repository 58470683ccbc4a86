//! AUTH and ACL (CAT DELUSER DRYRUN GENPASS GETUSER LIST LOAD LOG SAVE SETUSER USERS WHOAMI
//! HELP), with Redis 7.0's replies; and `gate`, the check `cmd::execute` runs before every
//! command (authentication, then the user's permissions), which EXEC runs again for each
//! queued command. The users and the rules themselves are `crate::acl`.

use rand::RngExt as _;

use super::args::{eq_ic, parse_i64};
use super::server::{reply_help, subcommand_syntax_error};
use super::table::{CommandSpec, Flags};
use super::{Ctx, Handler};
use crate::acl::{self, Context, Denied, LogEntry, Reason, UserRef};
use crate::client::{Client, ClientShared};
use crate::error::CmdError;
use crate::shard::Shard;

pub const HANDLERS: &[(&str, Handler)] = &[
    ("auth", auth),
    ("acl|cat", cat),
    ("acl|deluser", deluser),
    ("acl|dryrun", dryrun),
    ("acl|genpass", genpass),
    ("acl|getuser", getuser),
    ("acl|help", help),
    ("acl|list", list),
    ("acl|load", load),
    ("acl|log", log),
    ("acl|save", save),
    ("acl|setuser", setuser),
    ("acl|users", users),
    ("acl|whoami", whoami),
];

const NOAUTH: &str = "NOAUTH Authentication required.";
const WRONGPASS: &str = "WRONGPASS invalid username-password pair or user is disabled.";

// ---------------------------------------------------------------------------------------
// The check before every command

/// Whether the client must still authenticate (Redis's `authRequired`).
pub fn auth_required(shard: &Shard, client: &Client) -> bool {
    !client.shared.authenticated.get() && !shard.acl.default_is_open()
}

/// Redis's `processCommand` checks, in its order: authentication (`-NOAUTH`, except for
/// commands flagged no-auth), then the user's permissions (`-NOPERM`, logged in the ACL
/// log). Costs two `Cell` loads for an authenticated client whose user may run everything.
pub fn gate(
    shard: &mut Shard,
    client: &Client,
    spec: &'static CommandSpec,
    argv: &[&[u8]],
    now_ms: u64,
) -> Result<(), CmdError> {
    gate_shared(
        shard,
        &client.shared,
        client.multi.is_some(),
        spec,
        argv,
        now_ms,
    )
}

/// `gate` for a connection known by what other connections see of it: the busy-script side
/// path (`script::busy`) answers some commands of waiting clients without running them
/// through `execute`, and must refuse them as `execute` would.
pub fn gate_shared(
    shard: &mut Shard,
    shared: &ClientShared,
    in_multi: bool,
    spec: &'static CommandSpec,
    argv: &[&[u8]],
    now_ms: u64,
) -> Result<(), CmdError> {
    if !shared.authenticated.get()
        && !shard.acl.default_is_open()
        && !spec.meta.flags.contains(Flags::NO_AUTH)
    {
        return Err(CmdError::Raw(NOAUTH.to_string()));
    }
    let denied = match permitted(shard, shared, spec, argv) {
        Ok(()) => return Ok(()),
        Err(d) => d,
    };
    let context = if in_multi {
        Context::Multi
    } else {
        Context::Toplevel
    };
    log_denial(shard, shared, spec, argv, denied, context, now_ms);
    Err(CmdError::Raw(denied.noperm_text(spec.meta.name)))
}

/// Whether the user `shared` runs as may run `spec` with `argv` (no authentication check,
/// nothing logged).
fn permitted(
    shard: &Shard,
    shared: &ClientShared,
    spec: &'static CommandSpec,
    argv: &[&[u8]],
) -> Result<(), Denied> {
    let user = shared.user.borrow();
    let slot = user.as_ref().unwrap_or_else(|| shard.acl.default_user());
    if slot.is_unrestricted() {
        return Ok(());
    }
    let u = slot.get();
    acl::check(acl::catalog(), &u, spec.acl_id, argv)
}

/// A script's `redis.call` (Redis's `scriptVerifyACL`): the script client runs as the user
/// of the client that called the script (`caller`); a refusal is logged with the `lua`
/// context and the caller's client info, and answered with Redis's text, which the script
/// sees as an error.
pub fn script_gate(
    shard: &mut Shard,
    script_client: &ClientShared,
    caller: &ClientShared,
    spec: &'static CommandSpec,
    argv: &[&[u8]],
    now_ms: u64,
) -> Result<(), String> {
    let denied = match permitted(shard, script_client, spec, argv) {
        Ok(()) => return Ok(()),
        Err(d) => d,
    };
    log_denial(shard, caller, spec, argv, denied, Context::Lua, now_ms);
    Err(format!(
        "The user executing the script {}",
        denied.script_reason()
    ))
}

/// `redis.acl_check_cmd`: whether the user `shared` runs as may run the command (nothing
/// logged, as Redis's `ACLCheckAllUserCommandPerm`).
pub fn may_run(
    shard: &Shard,
    shared: &ClientShared,
    spec: &'static CommandSpec,
    argv: &[&[u8]],
) -> bool {
    permitted(shard, shared, spec, argv).is_ok()
}

/// EXEC's check of one queued command: `None` when it may run, else the error text
/// (`execCommand`: the rules may have changed since it was queued).
pub fn exec_gate(
    shard: &mut Shard,
    client: &Client,
    spec: &'static CommandSpec,
    argv: &[&[u8]],
    now_ms: u64,
) -> Option<CmdError> {
    let denied = permitted(shard, &client.shared, spec, argv).err()?;
    log_denial(
        shard,
        &client.shared,
        spec,
        argv,
        denied,
        Context::Multi,
        now_ms,
    );
    Some(CmdError::Raw(format!(
        "NOPERM ACLs rules changed between the moment the transaction was accumulated and the EXEC call. This command is no longer allowed for the following reason: {}",
        denied.exec_reason()
    )))
}

/// Adds the ACL log entry of a refused command: the user and client info of `shown` (the
/// script's caller for a script's command, whose user the script client runs as, as Redis's
/// `addACLLogEntry`).
fn log_denial(
    shard: &mut Shard,
    shown: &ClientShared,
    spec: &'static CommandSpec,
    argv: &[&[u8]],
    denied: Denied,
    context: Context,
    now_ms: u64,
) {
    let (reason, object) = match denied {
        Denied::Command => (Reason::Command, spec.meta.name.as_bytes().to_vec()),
        Denied::Key(i) => (
            Reason::Key,
            argv.get(i).copied().unwrap_or_default().to_vec(),
        ),
        Denied::Channel(i) => (
            Reason::Channel,
            argv.get(i).copied().unwrap_or_default().to_vec(),
        ),
    };
    let username = current_user(shard, shown).name();
    add_log(shard, shown, reason, context, object, username, now_ms);
}

fn add_log(
    shard: &mut Shard,
    shown: &ClientShared,
    reason: Reason,
    context: Context,
    object: Vec<u8>,
    username: Vec<u8>,
    now_ms: u64,
) {
    let entry = LogEntry {
        count: 1,
        reason,
        context,
        object,
        username,
        ctime_ms: now_ms,
        client_info: super::client::info_line(shown, now_ms),
    };
    let len_max = usize::try_from(shard.config.acllog_max_len).unwrap_or(usize::MAX);
    crate::node::lock(&shard.acl.log).add(entry, len_max);
}

fn current_user(shard: &Shard, shared: &ClientShared) -> UserRef {
    shared
        .user
        .borrow()
        .clone()
        .unwrap_or_else(|| shard.acl.default_user().clone())
}

/// What MONITOR and the slow log show instead of a secret (Redis's `shared.redacted`).
pub const REDACTED: &[u8] = b"(redacted)";

/// `argv` with its secrets replaced by `REDACTED` for MONITOR and the slow log (Redis's
/// `redactClientCommandArgument`: AUTH's arguments, HELLO's AUTH pair, ACL SETUSER's rules,
/// the values of CONFIG SET's sensitive parameters (requirepass, masterauth, masteruser),
/// MIGRATE's AUTH password and AUTH2 pair); None when the command carries none.
pub fn redacted<'a>(name: &str, argv: &[&'a [u8]]) -> Option<Vec<&'a [u8]>> {
    let mut out: Vec<&'a [u8]> = argv.to_vec();
    let mut hide = |i: usize| {
        if let Some(a) = out.get_mut(i) {
            *a = REDACTED;
        }
    };
    match name {
        "auth" if argv.len() <= 3 => (1..argv.len()).for_each(&mut hide),
        "acl|setuser" => (2..argv.len()).for_each(&mut hide),
        "hello" => {
            let mut j = 2;
            while j < argv.len() {
                let more = argv.len() - j - 1;
                if argv.get(j).is_some_and(|a| eq_ic(a, "auth")) && more >= 2 {
                    hide(j + 1);
                    hide(j + 2);
                    j += 3;
                } else {
                    j += 2;
                }
            }
        }
        "config|set" => {
            let mut j = 2;
            while j + 1 < argv.len() {
                if argv.get(j).is_some_and(|a| {
                    ["requirepass", "masterauth", "masteruser"]
                        .iter()
                        .any(|p| eq_ic(a, p))
                }) {
                    hide(j + 1);
                }
                j += 2;
            }
        }
        // As migrateCommand's option loop: what it parsed before KEYS or a syntax error.
        "migrate" => {
            let mut j = 6;
            while let Some(opt) = argv.get(j) {
                let more = argv.len() - j - 1;
                if eq_ic(opt, "copy") || eq_ic(opt, "replace") {
                    j += 1;
                } else if eq_ic(opt, "auth") && more >= 1 {
                    hide(j + 1);
                    j += 2;
                } else if eq_ic(opt, "auth2") && more >= 2 {
                    hide(j + 1);
                    hide(j + 2);
                    j += 3;
                } else {
                    break;
                }
            }
        }
        _ => return None,
    }
    Some(out)
}

// ---------------------------------------------------------------------------------------
// AUTH

/// Redis's `ACLAuthenticateUser`: on success the connection runs as the user; on failure
/// the ACL log gets an `auth` entry whose object is the command's name as sent.
pub fn authenticate(ctx: &mut Ctx<'_>, name: &[u8], password: &[u8], cmd_name: &[u8]) -> bool {
    let in_multi = ctx.client.multi.is_some();
    authenticate_shared(
        ctx.shard,
        &ctx.client.shared,
        in_multi,
        name,
        password,
        cmd_name,
        ctx.now_ms,
    )
}

/// `authenticate` for a connection known by its shared state only (the busy script's side
/// path, `script::busy`).
pub fn authenticate_shared(
    shard: &mut Shard,
    shared: &ClientShared,
    in_multi: bool,
    name: &[u8],
    password: &[u8],
    cmd_name: &[u8],
    now_ms: u64,
) -> bool {
    match shard.acl.authenticate(name, password) {
        Some(slot) => {
            let is_default = std::rc::Rc::ptr_eq(&slot, shard.acl.default_user());
            *shared.user.borrow_mut() = (!is_default).then_some(slot);
            shared.authenticated.set(true);
            true
        }
        None => {
            let context = if in_multi {
                Context::Multi
            } else {
                Context::Toplevel
            };
            add_log(
                shard,
                shared,
                Reason::Auth,
                context,
                cmd_name.to_vec(),
                name.to_vec(),
                now_ms,
            );
            false
        }
    }
}

/// AUTH [username] password.
fn auth(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let in_multi = ctx.client.multi.is_some();
    auth_shared(ctx.shard, &ctx.client.shared, in_multi, argv, ctx.now_ms)?;
    ctx.out.ok();
    Ok(())
}

/// AUTH for a connection known by its shared state only: the busy script's side path runs
/// it as Redis does (AUTH may run during a busy script), and `auth` for every other call.
pub fn auth_shared(
    shard: &mut Shard,
    shared: &ClientShared,
    in_multi: bool,
    argv: &[&[u8]],
    now_ms: u64,
) -> Result<(), CmdError> {
    let (name, password): (&[u8], &[u8]) = match argv {
        [_, pass] => {
            if shard.acl.default_user().get().nopass() {
                return Err(CmdError::Err(
                    "AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?".to_string(),
                ));
            }
            (b"default", pass)
        }
        [_, user, pass] => (user, pass),
        _ => return Err(CmdError::Syntax),
    };
    let cmd_name = argv.first().copied().unwrap_or_default();
    if authenticate_shared(shard, shared, in_multi, name, password, cmd_name, now_ms) {
        Ok(())
    } else {
        Err(CmdError::Raw(WRONGPASS.to_string()))
    }
}

/// The text HELLO answers to a client that is not authenticated.
pub const HELLO_NOAUTH: &str = "NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time";

/// The WRONGPASS error of AUTH and HELLO.
pub fn wrongpass() -> CmdError {
    CmdError::Raw(WRONGPASS.to_string())
}

// ---------------------------------------------------------------------------------------
// ACL

fn arg<'a>(argv: &[&'a [u8]], i: usize) -> &'a [u8] {
    argv.get(i).copied().unwrap_or_default()
}

/// ACL SETUSER username [rule ...]: all rules or none.
fn setuser(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let name = arg(argv, 2);
    if acl::rules::has_spaces(name) {
        return Err(CmdError::Err(
            "Usernames can't contain spaces or null characters".to_string(),
        ));
    }
    let rules = argv.get(3..).unwrap_or_default();
    let pubsub_all = ctx.shard.config.pubsub_all();
    let channels_changed = ctx
        .shard
        .acl
        .set_user(name, rules, pubsub_all)
        .map_err(CmdError::Err)?;
    if channels_changed {
        kill_revoked_subscribers(ctx, name);
    }
    ctx.out.ok();
    Ok(())
}

/// Closes the subscribed connections of user `name` whose subscriptions its new rules no
/// longer allow (Redis's `ACLKillPubsubClientsIfNeeded`).
fn kill_revoked_subscribers(ctx: &mut Ctx<'_>, name: &[u8]) {
    let Some(slot) = ctx.shard.acl.user(name).cloned() else {
        return;
    };
    let user = slot.get();
    for c in ctx.front.clients.values() {
        let same = c
            .user
            .borrow()
            .as_ref()
            .map_or(name == b"default", |u| std::rc::Rc::ptr_eq(u, &slot));
        if same && c.is_subscribed() && !acl::subscriptions_allowed(&user, &c.subs.borrow()) {
            if c.id == ctx.client.id() {
                ctx.client.close_after_reply = true;
            } else {
                c.kill();
            }
        }
    }
}

/// Signs out and closes every connection of user `slot`, which is gone (ACL DELUSER, LOAD);
/// this one closes after its reply.
fn sign_out(ctx: &mut Ctx<'_>, slot: &UserRef) {
    for c in ctx.front.clients.values() {
        let theirs = c
            .user
            .borrow()
            .as_ref()
            .is_some_and(|u| std::rc::Rc::ptr_eq(u, slot));
        if theirs {
            *c.user.borrow_mut() = None;
            c.authenticated.set(false);
            if c.id == ctx.client.id() {
                ctx.client.close_after_reply = true;
            } else {
                c.kill();
            }
        }
    }
}

/// ACL DELUSER username [username ...]: the number removed; their connections close.
fn deluser(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let names = argv.get(2..).unwrap_or_default();
    if names.iter().any(|n| *n == b"default") {
        return Err(CmdError::Err(
            "The 'default' user cannot be removed".to_string(),
        ));
    }
    let mut deleted = 0i64;
    for name in names {
        let Some(slot) = ctx.shard.acl.remove_user(name) else {
            continue;
        };
        deleted += 1;
        sign_out(ctx, &slot);
    }
    ctx.out.int(deleted);
    Ok(())
}

/// ACL GETUSER username: flags, passwords, the root selector's commands, keys and
/// channels, then every other selector (null for an unknown user).
fn getuser(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let Some(slot) = ctx.shard.acl.user(arg(argv, 2)).cloned() else {
        ctx.out.null();
        return Ok(());
    };
    let u = slot.get();
    let cat = acl::catalog();
    let out = &mut *ctx.out;
    out.map(6);
    out.bulk(b"flags");
    let flags: Vec<&str> = u.flag_names().collect();
    out.set(flags.len());
    for f in flags {
        out.bulk(f.as_bytes());
    }
    out.bulk(b"passwords");
    out.array(u.passwords.len());
    for p in &u.passwords {
        out.bulk(p);
    }
    describe_selector(out, &u.root, cat);
    out.bulk(b"selectors");
    out.array(u.selectors.len());
    for s in &u.selectors {
        out.map(3);
        describe_selector(out, s, cat);
    }
    Ok(())
}

fn describe_selector(
    out: &mut crate::resp::reply::Reply,
    s: &acl::rules::Selector,
    cat: &acl::rules::Catalog,
) {
    out.bulk(b"commands");
    out.bulk(&s.describe_commands(cat));
    out.bulk(b"keys");
    out.bulk(&s.describe_keys());
    out.bulk(b"channels");
    out.bulk(&s.describe_channels());
}

/// ACL LIST: every user as an ACL file line.
fn list(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> Result<(), CmdError> {
    let lines = ctx.shard.acl.list();
    ctx.out.array(lines.len());
    for l in &lines {
        ctx.out.bulk(l);
    }
    Ok(())
}

/// ACL USERS: the user names.
fn users(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> Result<(), CmdError> {
    let names: Vec<Vec<u8>> = ctx.shard.acl.users().map(|u| u.name()).collect();
    ctx.out.array(names.len());
    for n in &names {
        ctx.out.bulk(n);
    }
    Ok(())
}

/// ACL WHOAMI.
fn whoami(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> Result<(), CmdError> {
    let name = current_user(ctx.shard, &ctx.client.shared).name();
    ctx.out.bulk(&name);
    Ok(())
}

/// ACL CAT [category]: the categories, or the implemented commands of one.
fn cat(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    match argv.get(2) {
        None => {
            ctx.out.array(acl::rules::CATEGORIES.len());
            for c in acl::rules::CATEGORIES {
                ctx.out.bulk(c.as_bytes());
            }
        }
        Some(name) if argv.len() == 3 => {
            let Some(bit) = acl::rules::category_bit(name) else {
                let shown = name.get(..name.len().min(128)).unwrap_or(name);
                return Err(CmdError::Err(format!(
                    "Unknown category '{}'",
                    String::from_utf8_lossy(shown)
                )));
            };
            let cat = acl::catalog();
            let table = ctx.front.table;
            let names: Vec<&str> = table
                .specs
                .iter()
                .filter(|s| cat.get(s.acl_id).is_some_and(|e| e.categories & bit != 0))
                .map(|s| s.meta.name)
                .collect();
            ctx.out.array(names.len());
            for n in names {
                ctx.out.bulk(n.as_bytes());
            }
        }
        Some(_) => return Err(subcommand_syntax_error(argv)),
    }
    Ok(())
}

/// Longest password ACL GENPASS makes, in bits.
pub const GENPASS_BITS_MAX: i64 = 4096;

/// ACL GENPASS [bits]: that many random bits as hex (256 by default), from the operating
/// system's generator through a CSPRNG.
fn genpass(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    if argv.len() > 3 {
        return Err(subcommand_syntax_error(argv));
    }
    let bits = match argv.get(2) {
        Some(b) => parse_i64(b).ok_or(CmdError::NotInteger)?,
        None => 256,
    };
    if bits <= 0 || bits > GENPASS_BITS_MAX {
        return Err(CmdError::Err(format!(
            "ACL GENPASS argument must be the number of bits for the output password, a positive number up to {GENPASS_BITS_MAX}"
        )));
    }
    let chars = usize::try_from((bits + 3) / 4).unwrap_or(0);
    let mut rng = rand::rng();
    let text: String = (0..chars)
        .map(|_| char::from_digit(rng.random_range(0..16u32), 16).unwrap_or('0'))
        .collect();
    ctx.out.bulk(text.as_bytes());
    Ok(())
}

/// ACL LOG [count | RESET]: the newest entries first.
fn log(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    if argv.len() > 3 {
        return Err(subcommand_syntax_error(argv));
    }
    let mut count: usize = 10;
    if let Some(a) = argv.get(2) {
        if eq_ic(a, "reset") {
            crate::node::lock(&ctx.shard.acl.log).entries.clear();
            ctx.out.ok();
            return Ok(());
        }
        let n = parse_i64(a).ok_or(CmdError::NotInteger)?;
        count = usize::try_from(n.max(0)).unwrap_or(0);
    }
    let now = ctx.now_ms;
    let entries: Vec<LogEntry> = crate::node::lock(&ctx.shard.acl.log)
        .entries
        .iter()
        .take(count)
        .cloned()
        .collect();
    let out = &mut *ctx.out;
    out.array(entries.len());
    for e in &entries {
        out.map(7);
        out.bulk(b"count");
        out.int(i64::try_from(e.count).unwrap_or(i64::MAX));
        out.bulk(b"reason");
        out.bulk(e.reason.name().as_bytes());
        out.bulk(b"context");
        out.bulk(e.context.name().as_bytes());
        out.bulk(b"object");
        out.bulk(&e.object);
        out.bulk(b"username");
        out.bulk(&e.username);
        out.bulk(b"age-seconds");
        out.double(now.saturating_sub(e.ctime_ms) as f64 / 1000.0);
        out.bulk(b"client-info");
        out.bulk(e.client_info.as_bytes());
    }
    Ok(())
}

/// ACL DRYRUN username command [arg ...]: OK, or why the user may not run it (a bulk
/// string, as Redis answers).
fn dryrun(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let name = arg(argv, 2);
    let Some(slot) = ctx.shard.acl.user(name).cloned() else {
        return Err(CmdError::Err(format!(
            "User '{}' not found",
            String::from_utf8_lossy(name)
        )));
    };
    let cargv = argv.get(3..).unwrap_or_default();
    let table = ctx.front.table;
    let base = table.lookup(arg(cargv, 0));
    let spec = match base {
        Some(b) if b.is_container && cargv.len() >= 2 => {
            table.lookup_sub(b.meta.name, arg(cargv, 1))
        }
        other => other,
    };
    let Some(spec) = spec else {
        return Err(CmdError::Err(format!(
            "Command '{}' not found",
            String::from_utf8_lossy(arg(cargv, 0))
        )));
    };
    let arity = i64::from(spec.meta.arity);
    let argc = cargv.len() as i64;
    if (arity > 0 && arity != argc) || argc < -arity {
        return Err(CmdError::Err(format!(
            "wrong number of arguments for '{}' command",
            spec.meta.name
        )));
    }
    let result = acl::check(acl::catalog(), &slot.get(), spec.acl_id, cargv);
    match result {
        Ok(()) => ctx.out.ok(),
        Err(Denied::Command) => ctx.out.bulk(
            format!(
                "This user has no permissions to run the '{}' command",
                spec.meta.name
            )
            .as_bytes(),
        ),
        Err(Denied::Key(i)) => {
            let mut text = b"This user has no permissions to access the '".to_vec();
            text.extend_from_slice(arg(cargv, i));
            text.extend_from_slice(b"' key");
            ctx.out.bulk(&text);
        }
        Err(Denied::Channel(i)) => {
            let mut text = b"This user has no permissions to access the '".to_vec();
            text.extend_from_slice(arg(cargv, i));
            text.extend_from_slice(b"' channel");
            ctx.out.bulk(&text);
        }
    }
    Ok(())
}

const NO_ACL_FILE: &str = "This Redis instance is not configured to use an ACL file. You may want to specify users via the ACL SETUSER command and then issue a CONFIG REWRITE (assuming you have a Redis configuration file set) in order to store users in the Redis configuration.";

/// ACL LOAD: replaces every user with the ACL file's, or changes nothing and lists the
/// file's problems. Connections of users it replaced close.
fn load(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> Result<(), CmdError> {
    if ctx.shard.config.aclfile.is_empty() {
        return Err(CmdError::Err(NO_ACL_FILE.to_string()));
    }
    let path = std::path::PathBuf::from(&ctx.shard.config.aclfile);
    let pubsub_all = ctx.shard.config.pubsub_all();
    let gone = ctx
        .shard
        .acl
        .load_file(&path, pubsub_all)
        .map_err(|e| CmdError::Err(e.0))?;
    for slot in gone {
        sign_out(ctx, &slot);
    }
    ctx.out.ok();
    Ok(())
}

/// ACL SAVE: writes every user to the ACL file (a temporary file renamed over it).
fn save(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> Result<(), CmdError> {
    if ctx.shard.config.aclfile.is_empty() {
        return Err(CmdError::Err(NO_ACL_FILE.to_string()));
    }
    let path = std::path::PathBuf::from(&ctx.shard.config.aclfile);
    match ctx.shard.acl.save_file(&path) {
        Ok(()) => {
            ctx.out.ok();
            Ok(())
        }
        Err(e) => {
            tracing::warn!(error = %e, path = %path.display(), "ACL SAVE failed");
            Err(CmdError::Err(
                "There was an error trying to save the ACLs. Please check the server logs for more information".to_string(),
            ))
        }
    }
}

fn help(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> Result<(), CmdError> {
    reply_help(
        ctx,
        "ACL",
        &[
            "CAT [<category>]",
            "    List all commands that belong to <category>, or all command categories",
            "    when no category is specified.",
            "DELUSER <username> [<username> ...]",
            "    Delete a list of users.",
            "DRYRUN <username> <command> [<arg> ...]",
            "    Returns whether the user can execute the given command without executing the command.",
            "GETUSER <username>",
            "    Get the user's details.",
            "GENPASS [<bits>]",
            "    Generate a secure 256-bit user password. The optional `bits` argument can",
            "    be used to specify a different size.",
            "LIST",
            "    Show users details in config file format.",
            "LOAD",
            "    Reload users from the ACL file.",
            "LOG [<count> | RESET]",
            "    Show the ACL log entries.",
            "SAVE",
            "    Save the current config to the ACL file.",
            "SETUSER <username> <attribute> [<attribute> ...]",
            "    Create or modify a user with the specified attributes.",
            "USERS",
            "    List all the registered usernames.",
            "WHOAMI",
            "    Return the current connection username.",
        ],
    );
    Ok(())
}
