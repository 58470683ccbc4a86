//! CLIENT and its subcommands: ID SETNAME GETNAME LIST INFO KILL PAUSE UNPAUSE REPLY UNBLOCK
//! NO-EVICT GETREDIR HELP.
//!
//! Other connections are read through the shard's registry of `ClientShared` (cells only,
//! never borrowed mutably here); the calling connection's own line is built from its `Client`
//! and the running command, as Redis shows it. CLIENT PAUSE is kept in the shard
//! (`Shard::pause`); `cmd::execute` postpones the commands it covers (`blocking::postpone`).
//! TRACKING, CACHING, GETREDIR and TRACKINGINFO are `cmd::tracking`'s. SETINFO does not
//! exist in Redis 7.0.

use std::rc::Rc;

use super::args::{eq_ic, parse_i64};
use super::{Ctx, Handler};
use crate::client::ClientShared;
use crate::error::CmdError;
use crate::resp::reply::Proto;

pub const HANDLERS: &[(&str, Handler)] = &[
    ("client|getname", getname),
    ("client|help", help),
    ("client|id", id),
    ("client|info", info),
    ("client|kill", kill),
    ("client|list", list),
    ("client|setname", setname),
    ("client|pause", pause),
    ("client|unpause", unpause),
    ("client|reply", reply),
    ("client|unblock", unblock),
    ("client|no-evict", no_evict),
];

/// Size reported as `rbs` (the reply buffer a connection starts with, `Reply::new`).
const REPLY_BUF_BYTES: usize = 16 * 1024;

/// CLIENT ID.
fn id(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> Result<(), CmdError> {
    ctx.out.int(ctx.client.id() as i64);
    Ok(())
}

/// Redis's `clientSetNameOrReply` check: printable ASCII without spaces.
pub fn valid_client_name(name: &[u8]) -> bool {
    name.iter().all(|b| (b'!'..=b'~').contains(b))
}

/// CLIENT SETNAME name: an empty name removes the name.
fn setname(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let name = argv.get(2).copied().unwrap_or_default();
    if !valid_client_name(name) {
        return Err(CmdError::Err(
            "Client names cannot contain spaces, newlines or special characters.".to_string(),
        ));
    }
    *ctx.client.shared.name.borrow_mut() = if name.is_empty() {
        None
    } else {
        Some(name.to_vec())
    };
    ctx.out.ok();
    Ok(())
}

/// CLIENT GETNAME: the name, or null.
fn getname(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> Result<(), CmdError> {
    let name = ctx.client.shared.name.borrow().clone();
    match name {
        Some(n) => ctx.out.bulk(&n),
        None => ctx.out.null(),
    }
    Ok(())
}

/// Client types as Redis names them (`getClientTypeByName`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum ClientType {
    Normal,
    Replica,
    Pubsub,
    Master,
}

fn client_type_by_name(name: &[u8]) -> Option<ClientType> {
    if eq_ic(name, "normal") {
        Some(ClientType::Normal)
    } else if eq_ic(name, "slave") || eq_ic(name, "replica") {
        Some(ClientType::Replica)
    } else if eq_ic(name, "pubsub") {
        Some(ClientType::Pubsub)
    } else if eq_ic(name, "master") {
        Some(ClientType::Master)
    } else {
        None
    }
}

fn unknown_type(name: &[u8]) -> CmdError {
    CmdError::Err(format!(
        "Unknown client type '{}'",
        String::from_utf8_lossy(c_str(name))
    ))
}

/// Like C's `%s`: a NUL byte ends the text.
fn c_str(b: &[u8]) -> &[u8] {
    match b.iter().position(|&c| c == 0) {
        Some(i) => b.get(..i).unwrap_or(b),
        None => b,
    }
}

/// The type of a registered client. Monitors are shown as normal clients, as in Redis;
/// no connection is a replica, a master link or (yet) subscribed.
fn client_type(_c: &ClientShared) -> ClientType {
    ClientType::Normal
}

/// What the current connection knows of itself that the registry does not carry.
struct SelfView {
    id: u64,
    db: usize,
    cmd: &'static str,
    multi: Option<usize>,
    multi_mem: usize,
    /// A watched key changed (flag 'd'); only the connection itself can see it.
    dirty_cas: bool,
    argv_mem: usize,
    /// The running command's request size (it is still in the query buffer in Redis).
    qbuf: usize,
    proto: Proto,
    rbp: usize,
}

/// Appends one CLIENT LIST line (with its trailing newline) in Redis 7.0's format.
fn cat_client_info(out: &mut Vec<u8>, c: &ClientShared, me: Option<&SelfView>, now_ms: u64) {
    use std::io::Write as _;
    let mut flags = String::new();
    // Redis's order: O, P, x, b, ..., d.
    if c.is_monitor.get() {
        flags.push('O');
    }
    if c.is_subscribed() {
        flags.push('P');
    }
    let multi = match me {
        Some(m) => m.multi,
        None => c.in_multi.get().then_some(0),
    };
    if multi.is_some() {
        flags.push('x');
    }
    if c.blocked.get() {
        flags.push('b');
    }
    let (tflags, redir) = super::tracking::list_flags(c);
    flags.push_str(&tflags);
    if me.is_some_and(|m| m.dirty_cas) {
        flags.push('d');
    }
    if c.no_evict.get() {
        flags.push('e');
    }
    if flags.is_empty() {
        flags.push('N');
    }
    let name = c.name.borrow();
    let name: &[u8] = name.as_deref().unwrap_or_default();
    let age = (now_ms / 1000).saturating_sub(c.created_ms / 1000);
    let idle = (now_ms / 1000).saturating_sub(c.last_interaction_ms.get() / 1000);
    let db = me.map_or(c.db.get(), |m| m.db);
    let qbuf = me.map_or(c.qbuf_bytes.get(), |m| m.qbuf);
    // The buffer's allocation holds what is unparsed and the room after it.
    let qbuf_cap = c.qbuf_cap_bytes.get().max(qbuf);
    let qbuf_free = qbuf_cap - qbuf;
    let argv_mem = me.map_or(0, |m| m.argv_mem);
    let multi_mem = me.map_or(0, |m| m.multi_mem);
    let rbp = me.map_or(0, |m| m.rbp);
    let obl = c.obuf_bytes.get();
    let tot_mem = std::mem::size_of::<ClientShared>()
        + std::mem::size_of::<crate::client::Client>()
        + qbuf_cap
        + REPLY_BUF_BYTES
        + argv_mem
        + multi_mem
        + obl
        + name.len();
    let cmd = me.map_or(c.last_cmd.get(), |m| m.cmd);
    let proto = me.map_or(c.proto.get(), |m| m.proto);
    let resp = if proto == Proto::Resp3 { 3 } else { 2 };
    let _ = write!(
        out,
        "id={} addr={} laddr={} fd={} name=",
        c.id,
        c.addr,
        c.laddr,
        c.mailbox.fd()
    );
    out.extend_from_slice(name);
    let _ = write!(
        out,
        " age={age} idle={idle} flags={flags} db={db} sub={} psub={} ssub={} multi={} qbuf={qbuf} qbuf-free={qbuf_free} \
         argv-mem={argv_mem} multi-mem={multi_mem} rbs={REPLY_BUF_BYTES} rbp={rbp} obl={obl} oll=0 omem=0 \
         tot-mem={tot_mem} events=r cmd={cmd} user=",
        c.sub.get(),
        c.psub.get(),
        c.ssub.get(),
        multi.map_or(-1, |n| n as i64),
    );
    match c.user.borrow().as_ref() {
        Some(u) => out.extend_from_slice(&u.name()),
        None => out.extend_from_slice(b"default"),
    }
    let _ = writeln!(out, " redir={redir} resp={resp}");
}

/// One connection's CLIENT LIST line without its newline (ACL LOG `client-info`).
pub fn info_line(c: &ClientShared, now_ms: u64) -> String {
    let mut out = Vec::new();
    cat_client_info(&mut out, c, None, now_ms);
    if out.last() == Some(&b'\n') {
        out.pop();
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The current connection's view of itself while `argv` runs.
fn self_view(ctx: &Ctx<'_>, argv: &[&[u8]]) -> SelfView {
    let queued = ctx
        .client
        .multi
        .as_ref()
        .map(|m| (m.queued.len(), m.args_bytes()));
    // Inside EXEC, Redis shows the transaction and EXEC's own request.
    let exec = ctx.client.exec_running;
    let request: &[&[u8]] = if exec.is_some() { &[b"exec"] } else { argv };
    SelfView {
        id: ctx.client.id(),
        db: ctx.client.db,
        cmd: if exec.is_some() {
            "exec"
        } else {
            ctx.spec.meta.name
        },
        multi: queued.or(exec).map(|(n, _)| n),
        multi_mem: queued.or(exec).map_or(0, |(_, bytes)| bytes),
        dirty_cas: ctx.client.dirty.get(),
        argv_mem: request.iter().map(|a| a.len()).sum(),
        qbuf: request_len(request),
        proto: ctx.out.proto,
        rbp: ctx.out.len(),
    }
}

/// Bytes of `argv` encoded as a RESP request (`*n` then one bulk string per argument).
fn request_len(argv: &[&[u8]]) -> usize {
    let digits = |n: usize| n.to_string().len();
    3 + digits(argv.len())
        + argv
            .iter()
            .map(|a| 5 + digits(a.len()) + a.len())
            .sum::<usize>()
}

/// Appends the line of registered client `c`, using `me` when it is the current connection.
fn cat_line(out: &mut Vec<u8>, c: &ClientShared, me: &SelfView, now_ms: u64) {
    let view = (c.id == me.id).then_some(me);
    cat_client_info(out, c, view, now_ms);
}

/// Registered clients still connected, in connection order.
fn live_clients(ctx: &Ctx<'_>) -> Vec<Rc<ClientShared>> {
    ctx.front
        .clients
        .values()
        .filter(|c| !c.is_killed())
        .cloned()
        .collect()
}

/// CLIENT LIST [TYPE normal|master|replica|pubsub] [ID id ...].
fn list(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let me = self_view(ctx, argv);
    let mut text = Vec::new();
    let opt = argv.get(2).copied().unwrap_or_default();
    if argv.len() == 4 && eq_ic(opt, "type") {
        let tname = argv.get(3).copied().unwrap_or_default();
        let Some(t) = client_type_by_name(tname) else {
            return Err(unknown_type(tname));
        };
        for c in live_clients(ctx).iter().filter(|c| client_type(c) == t) {
            cat_line(&mut text, c, &me, ctx.now_ms);
        }
    } else if argv.len() > 3 && eq_ic(opt, "id") {
        for a in argv.get(3..).unwrap_or_default() {
            let Some(cid) = parse_i64(a) else {
                return Err(CmdError::Err("Invalid client ID".to_string()));
            };
            let found = u64::try_from(cid)
                .ok()
                .and_then(|i| ctx.front.clients.get(&i))
                .filter(|c| !c.is_killed());
            if let Some(c) = found {
                cat_line(&mut text, c, &me, ctx.now_ms);
            }
        }
    } else if argv.len() != 2 {
        return Err(CmdError::Syntax);
    } else {
        for c in &live_clients(ctx) {
            cat_line(&mut text, c, &me, ctx.now_ms);
        }
    }
    ctx.out.verbatim(b"txt", &text);
    Ok(())
}

/// CLIENT INFO: the current connection's line.
fn info(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let me = self_view(ctx, argv);
    let mut text = Vec::new();
    let shared = ctx.client.shared.clone();
    cat_client_info(&mut text, &shared, Some(&me), ctx.now_ms);
    ctx.out.verbatim(b"txt", &text);
    Ok(())
}

/// CLIENT KILL ip:port, or CLIENT KILL with ID/TYPE/ADDR/LADDR/USER/SKIPME filters.
fn kill(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let mut addr: Option<&[u8]> = None;
    let mut laddr: Option<&[u8]> = None;
    let mut ctype: Option<ClientType> = None;
    let mut id: u64 = 0;
    let mut skipme = true;
    let mut user: Option<&[u8]> = None;
    let old_form = argv.len() == 3;
    if old_form {
        addr = argv.get(2).copied();
        skipme = false;
    } else {
        let mut i = 2;
        while i < argv.len() {
            let opt = argv.get(i).copied().unwrap_or_default();
            let Some(val) = argv.get(i + 1).copied() else {
                return Err(CmdError::Syntax);
            };
            if eq_ic(opt, "id") {
                match parse_i64(val) {
                    Some(n) if n >= 1 => id = n as u64,
                    _ => {
                        return Err(CmdError::Err(
                            "client-id should be greater than 0".to_string(),
                        ));
                    }
                }
            } else if eq_ic(opt, "type") {
                match client_type_by_name(val) {
                    Some(t) => ctype = Some(t),
                    None => return Err(unknown_type(val)),
                }
            } else if eq_ic(opt, "addr") {
                addr = Some(val);
            } else if eq_ic(opt, "laddr") {
                laddr = Some(val);
            } else if eq_ic(opt, "user") {
                if ctx.shard.acl.user(val).is_none() {
                    return Err(CmdError::Err(format!(
                        "No such user '{}'",
                        String::from_utf8_lossy(c_str(val))
                    )));
                }
                user = Some(val);
            } else if eq_ic(opt, "skipme") {
                if eq_ic(val, "yes") {
                    skipme = true;
                } else if eq_ic(val, "no") {
                    skipme = false;
                } else {
                    return Err(CmdError::Syntax);
                }
            } else {
                return Err(CmdError::Syntax);
            }
            i += 2;
        }
    }
    let me = ctx.client.id();
    let mut killed = 0i64;
    let mut close_self = false;
    for c in live_clients(ctx) {
        if addr.is_some_and(|a| c_str(a) != c.addr.to_string().as_bytes()) {
            continue;
        }
        if laddr.is_some_and(|a| c_str(a) != c.laddr.to_string().as_bytes()) {
            continue;
        }
        if ctype.is_some_and(|t| client_type(&c) != t) {
            continue;
        }
        if id != 0 && c.id != id {
            continue;
        }
        if let Some(name) = user {
            let theirs = c.user.borrow().as_ref().map(|u| u.name());
            if theirs.as_deref().unwrap_or(b"default") != name {
                continue;
            }
        }
        if c.id == me {
            if skipme {
                continue;
            }
            close_self = true;
        } else {
            c.kill();
        }
        killed += 1;
    }
    if old_form {
        if killed == 0 {
            return Err(CmdError::Err("No such client".to_string()));
        }
        ctx.out.ok();
    } else {
        ctx.out.int(killed);
    }
    if close_self {
        ctx.client.close_after_reply = true;
    }
    Ok(())
}

/// CLIENT HELP: Redis 7.0's text, subcommands Meridian lacks included.
fn help(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> Result<(), CmdError> {
    const LINES: &[&str] = &[
        "CACHING (YES|NO)",
        "    Enable/disable tracking of the keys for next command in OPTIN/OPTOUT modes.",
        "GETREDIR",
        "    Return the client ID we are redirecting to when tracking is enabled.",
        "GETNAME",
        "    Return the name of the current connection.",
        "ID",
        "    Return the ID of the current connection.",
        "INFO",
        "    Return information about the current client connection.",
        "KILL <ip:port>",
        "    Kill connection made from <ip:port>.",
        "KILL <option> <value> [<option> <value> [...]]",
        "    Kill connections. Options are:",
        "    * ADDR (<ip:port>|<unixsocket>:0)",
        "      Kill connections made from the specified address",
        "    * LADDR (<ip:port>|<unixsocket>:0)",
        "      Kill connections made to specified local address",
        "    * TYPE (NORMAL|MASTER|REPLICA|PUBSUB)",
        "      Kill connections by type.",
        "    * USER <username>",
        "      Kill connections authenticated by <username>.",
        "    * SKIPME (YES|NO)",
        "      Skip killing current connection (default: yes).",
        "LIST [options ...]",
        "    Return information about client connections. Options:",
        "    * TYPE (NORMAL|MASTER|REPLICA|PUBSUB)",
        "      Return clients of specified type.",
        "UNPAUSE",
        "    Stop the current client pause, resuming traffic.",
        "PAUSE <timeout> [WRITE|ALL]",
        "    Suspend all, or just write, clients for <timeout> milliseconds.",
        "REPLY (ON|OFF|SKIP)",
        "    Control the replies sent to the current connection.",
        "SETNAME <name>",
        "    Assign the name <name> to the current connection.",
        "UNBLOCK <clientid> [TIMEOUT|ERROR]",
        "    Unblock the specified blocked client.",
        "TRACKING (ON|OFF) [REDIRECT <id>] [BCAST] [PREFIX <prefix> [...]]",
        "         [OPTIN] [OPTOUT] [NOLOOP]",
        "    Control server assisted client side caching.",
        "TRACKINGINFO",
        "    Report tracking status for the current connection.",
        "NO-EVICT (ON|OFF)",
        "    Protect current client connection from eviction.",
    ];
    super::server::reply_help(ctx, "CLIENT", LINES);
    Ok(())
}

/// CLIENT PAUSE timeout [WRITE|ALL]: holds back every command (ALL, the default) or those
/// that write (WRITE) from every client until `timeout` milliseconds pass or CLIENT UNPAUSE.
/// A pause already in force keeps the later end and the stricter kind (`pauseClients`).
fn pause(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    if argv.len() > 4 {
        return Err(super::server::subcommand_syntax_error(argv));
    }
    let mut all = true;
    if let Some(mode) = argv.get(3) {
        if eq_ic(mode, "write") {
            all = false;
        } else if !eq_ic(mode, "all") {
            return Err(CmdError::Err(
                "CLIENT PAUSE mode must be WRITE or ALL".to_string(),
            ));
        }
    }
    let now = ctx.now_ms;
    let end = crate::blocking::parse_timeout_ms(argv.get(2).copied().unwrap_or_default(), now)?
        .unwrap_or(0);
    let new = match ctx.shard.pause_at(now) {
        Some(p) => crate::shard::ClientPause {
            all: p.all || all,
            end_ms: p.end_ms.max(end),
        },
        None => crate::shard::ClientPause { all, end_ms: end },
    };
    // A pause that already ended (timeout 0) is no pause.
    ctx.shard.pause = (new.end_ms > now).then_some(new);
    ctx.out.ok();
    Ok(())
}

/// CLIENT UNPAUSE: ends the pause; postponed commands run now.
fn unpause(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> Result<(), CmdError> {
    ctx.shard.pause = None;
    ctx.shard.blocking.wake_postponed();
    ctx.out.ok();
    Ok(())
}

/// CLIENT REPLY ON|OFF|SKIP: OFF drops every reply until ON, SKIP the next command's. Only
/// ON replies (`cmd::execute` drops the rest).
fn reply(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    use crate::client::ReplyMode;
    let mode = argv.get(2).copied().unwrap_or_default();
    if eq_ic(mode, "on") {
        ctx.client.reply_mode = ReplyMode::On;
        ctx.out.ok();
    } else if eq_ic(mode, "off") {
        ctx.client.reply_mode = ReplyMode::Off;
    } else if eq_ic(mode, "skip") {
        if ctx.client.reply_mode != ReplyMode::Off {
            ctx.client.reply_mode = ReplyMode::SkipNext;
        }
    } else {
        return Err(CmdError::Syntax);
    }
    Ok(())
}

/// CLIENT UNBLOCK id [TIMEOUT|ERROR]: ends the wait of a client blocked in BLPOP, WAIT and
/// the like, as if its timeout passed or with an `UNBLOCKED` error. 1 when it was blocked;
/// 0 otherwise, and for a client held by CLIENT PAUSE (which Redis 7.0 cannot unblock
/// either). Decided by the shard where the client is parked (`blocking::unblock_parked`),
/// the registry INFO's `blocked_clients` counts.
fn unblock(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    use crate::client::Unblock;
    if argv.len() > 4 {
        return Err(super::server::subcommand_syntax_error(argv));
    }
    let how = match argv.get(3) {
        None => Unblock::Timeout,
        Some(r) if eq_ic(r, "timeout") => Unblock::Timeout,
        Some(r) if eq_ic(r, "error") => Unblock::Error,
        Some(_) => {
            return Err(CmdError::Err(
                "CLIENT UNBLOCK reason should be TIMEOUT or ERROR".to_string(),
            ));
        }
    };
    let id = parse_i64(argv.get(2).copied().unwrap_or_default()).ok_or(CmdError::NotInteger)?;
    // Every shard runs this (the replies are summed): the one where the client is parked
    // ends its wait.
    let done = u64::try_from(id)
        .is_ok_and(|id| crate::blocking::unblock_parked(ctx.shard, ctx.front, id, how, ctx.now_ms));
    ctx.out.int(i64::from(done));
    Ok(())
}

/// CLIENT NO-EVICT ON|OFF: recorded (flag `e`); Meridian evicts no client.
fn no_evict(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let v = argv.get(2).copied().unwrap_or_default();
    if eq_ic(v, "on") {
        ctx.client.shared.no_evict.set(true);
    } else if eq_ic(v, "off") {
        ctx.client.shared.no_evict.set(false);
    } else {
        return Err(CmdError::Syntax);
    }
    ctx.out.ok();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_size() {
        assert_eq!(request_len(&[b"CLIENT", b"LIST"]), 26);
        assert_eq!(request_len(&[b"EXEC"]), 14);
    }

    #[test]
    fn names() {
        assert!(valid_client_name(b"abc-1"));
        assert!(valid_client_name(b""));
        assert!(!valid_client_name(b"a b"));
        assert!(!valid_client_name(b"a\n"));
        assert!(!valid_client_name("é".as_bytes()));
    }

    #[test]
    fn line_format() {
        let a: std::net::SocketAddr = "127.0.0.1:5000".parse().unwrap_or_else(|_| unreachable!());
        let l: std::net::SocketAddr = "127.0.0.1:6379".parse().unwrap_or_else(|_| unreachable!());
        let c = ClientShared::new(7, a, l, 10_000);
        *c.name.borrow_mut() = Some(b"bob".to_vec());
        c.last_cmd.set("get");
        let mut out = Vec::new();
        cat_client_info(&mut out, &c, None, 15_500);
        let s = String::from_utf8(out).unwrap_or_default();
        assert!(
            s.starts_with("id=7 addr=127.0.0.1:5000 laddr=127.0.0.1:6379 fd=-1 name=bob age=5 idle=5 flags=N db=0 sub=0 psub=0 ssub=0 multi=-1 qbuf=0 qbuf-free=0 argv-mem=0 multi-mem=0 rbs=16384 rbp=0 obl=0 oll=0 omem=0 tot-mem="),
            "{s}"
        );
        assert!(
            s.ends_with(" events=r cmd=get user=default redir=-1 resp=2\n"),
            "{s}"
        );
        let fields: Vec<&str> = s.trim_end().split(' ').collect();
        assert_eq!(fields.len(), 28);
        assert!(fields.iter().all(|f| f.contains('=')));
    }
}
