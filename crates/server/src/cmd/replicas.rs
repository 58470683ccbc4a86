//! WAIT and ROLE: Redis's primary/replica view of a Meridian site.
//!
//! A Meridian site has no Redis replicas: its copies are other sites, which take writes of
//! their own and converge (docs/replication.md). So ROLE answers a primary with no replicas
//! and WAIT counts no replica: it answers 0 when asked for none, and otherwise waits its
//! timeout (for ever with 0) and answers 0, as Redis does with no replica connected.
//! CRDT.WAIT is the command that waits for other sites to acknowledge writes.

use super::{Ctx, Handler};
use crate::blocking::parse_timeout_ms;
use crate::error::CmdError;

pub const HANDLERS: &[(&str, Handler)] = &[("wait", wait), ("role", role)];

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
