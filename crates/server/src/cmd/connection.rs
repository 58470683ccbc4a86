//! Connection commands: PING ECHO HELLO QUIT RESET SELECT, and CLIENT.

use super::args::{eq_ic, int_arg};
use super::{Ctx, Handler};
use crate::client::ClientShared;
use crate::error::CmdError;
use crate::resp::reply::{Proto, Reply};
use crate::shard::Shard;

pub const HANDLERS: &[(&str, Handler)] = &[
    ("ping", ping),
    ("echo", echo),
    ("hello", hello),
    ("quit", quit),
    ("reset", reset),
    ("select", select),
];

/// PING [message]: `+PONG`, or the message as a bulk string. A subscribed RESP2 client gets
/// `["pong", message]` (message "" when none).
fn ping(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    if argv.len() > 2 {
        return Err(CmdError::WrongArity("ping".to_string()));
    }
    if ctx.client.shared.is_subscribed() && ctx.out.proto == Proto::Resp2 {
        ctx.out.array(2);
        ctx.out.bulk(b"pong");
        ctx.out.bulk(argv.get(1).copied().unwrap_or_default());
        return Ok(());
    }
    match argv.get(1) {
        None => ctx.out.simple("PONG"),
        Some(m) => ctx.out.bulk(m),
    }
    Ok(())
}

fn echo(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    ctx.out.bulk(argv.get(1).copied().unwrap_or_default());
    Ok(())
}

/// QUIT: `+OK`, then the connection closes once the reply is written.
fn quit(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> Result<(), CmdError> {
    ctx.out.ok();
    ctx.client.close_after_reply = true;
    // Out of the process's directory before the OK leaves, as Redis frees a QUIT client
    // before it reads from another: a tracking client that redirected its invalidations
    // here finds the redirection gone (tracking-redir-broken) for any write sent after
    // this OK arrived, whatever thread runs that write (Redis's tracking.tcl "tracking redir
    // broken" waited for ever when a write on another thread came first).
    crate::node::lock(&ctx.front.node.directory).remove(&ctx.client.id());
    Ok(())
}

/// SELECT index.
fn select(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let arg = argv.get(1).copied().unwrap_or_default();
    let n = super::db::db_index(arg, None)?;
    if n < 0 || n as u64 >= ctx.shard.dbs.len() as u64 {
        return Err(CmdError::DbIndexOutOfRange);
    }
    ctx.client.select(n as usize);
    ctx.out.ok();
    Ok(())
}

/// RESET: turns CLIENT TRACKING off, leaves MULTI, drops WATCHes, leaves MONITOR and every Pub/Sub subscription,
/// selects db 0, RESP2, no name.
fn reset(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> Result<(), CmdError> {
    super::tracking::disable(&ctx.front.node, &ctx.client.shared);
    ctx.client.caching = false;
    crate::node::lock(&ctx.front.node.pubsub).unsubscribe_all(&ctx.client.shared);
    super::tx::end_transaction(ctx.shard, ctx.client);
    if ctx.client.shared.is_monitor.get() {
        ctx.client.shared.is_monitor.set(false);
        ctx.front.node.remove_monitor(ctx.client.id());
    }
    ctx.client.select(0);
    ctx.out.proto = Proto::Resp2;
    ctx.client.shared.set_proto(Proto::Resp2);
    *ctx.client.shared.name.borrow_mut() = None;
    // Back to the default user, authenticated only when it needs no password.
    *ctx.client.shared.user.borrow_mut() = None;
    let open = ctx.shard.acl.default_is_open();
    ctx.client.shared.authenticated.set(open);
    ctx.out.simple("RESET");
    Ok(())
}

/// HELLO [protover [AUTH username password] [SETNAME clientname]].
fn hello(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let conn = Hello {
        in_multi: ctx.client.multi.is_some(),
        cluster: ctx.front.node.cluster.is_some(),
        now_ms: ctx.now_ms,
    };
    hello_shared(ctx.shard, &ctx.client.shared, conn, argv, ctx.out)
}

/// What HELLO needs to know of the connection and the node beyond its shared state.
#[derive(Debug, Clone, Copy)]
pub struct Hello {
    pub in_multi: bool,
    /// The node runs the cluster API (`mode:cluster`).
    pub cluster: bool,
    pub now_ms: u64,
}

/// HELLO for a connection known by its shared state only: the busy script's side path runs
/// it as Redis does (HELLO may run during a busy script), and `hello` for every other call.
/// The reply goes to `out` in the protocol HELLO selects (`out.proto` is set to it).
pub fn hello_shared(
    shard: &mut Shard,
    shared: &ClientShared,
    conn: Hello,
    argv: &[&[u8]],
    out: &mut Reply,
) -> Result<(), CmdError> {
    let mut proto = shared.proto.get();
    let mut i = 1;
    if let Some(v) = argv.get(1) {
        let Ok(ver) = int_arg(v) else {
            return Err(CmdError::Err(
                "Protocol version is not an integer or out of range".to_string(),
            ));
        };
        proto = match ver {
            2 => Proto::Resp2,
            3 => Proto::Resp3,
            _ => {
                return Err(CmdError::Raw(
                    "NOPROTO unsupported protocol version".to_string(),
                ));
            }
        };
        i = 2;
    }
    let mut setname: Option<&[u8]> = None;
    while i < argv.len() {
        let opt = argv.get(i).copied().unwrap_or_default();
        let more = argv.len() - i - 1;
        if eq_ic(opt, "auth") && more >= 2 {
            let (user, pass) = (
                argv.get(i + 1).copied().unwrap_or_default(),
                argv.get(i + 2).copied().unwrap_or_default(),
            );
            let name = argv.first().copied().unwrap_or_default();
            if !super::acl::authenticate_shared(
                shard,
                shared,
                conn.in_multi,
                user,
                pass,
                name,
                conn.now_ms,
            ) {
                return Err(super::acl::wrongpass());
            }
            i += 3;
        } else if eq_ic(opt, "setname") && more >= 1 {
            let name = argv.get(i + 1).copied().unwrap_or_default();
            if name.iter().any(|&b| !(b'!'..=b'~').contains(&b)) {
                return Err(CmdError::Err(
                    "Client names cannot contain spaces, newlines or special characters."
                        .to_string(),
                ));
            }
            setname = Some(name);
            i += 2;
        } else {
            return Err(CmdError::Err(format!(
                "Syntax error in HELLO option '{}'",
                String::from_utf8_lossy(opt)
            )));
        }
    }
    if let Some(name) = setname {
        *shared.name.borrow_mut() = if name.is_empty() {
            None
        } else {
            Some(name.to_vec())
        };
    }
    // Redis tests the connection's flag itself here, not whether a password is needed.
    if !shared.authenticated.get() {
        return Err(CmdError::Raw(super::acl::HELLO_NOAUTH.to_string()));
    }
    out.proto = proto;
    shared.set_proto(proto);
    let mode: &[u8] = if conn.cluster {
        b"cluster"
    } else {
        b"standalone"
    };
    out.map(7);
    out.bulk(b"server");
    out.bulk(b"redis");
    out.bulk(b"version");
    out.bulk(crate::server::REDIS_VERSION.as_bytes());
    out.bulk(b"proto");
    out.int(if proto == Proto::Resp3 { 3 } else { 2 });
    out.bulk(b"id");
    out.int(shared.id as i64);
    out.bulk(b"mode");
    out.bulk(mode);
    out.bulk(b"role");
    out.bulk(b"master");
    out.bulk(b"modules");
    out.array(0);
    Ok(())
}
