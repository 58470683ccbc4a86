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

use super::{Ctx, Handler};
use crate::blocking::parse_timeout_ms;
use crate::error::CmdError;

pub const HANDLERS: &[(&str, Handler)] = &[
    ("wait", wait),
    ("role", role),
    ("replicaof", replicaof),
    ("slaveof", replicaof),
];

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
