//! Meridian's own commands for active-active deployments (docs/replication.md §8):
//!
//! - `CRDT.DIGEST [SLOT n | SLOTS]`: a digest of the observable state, equal on two sites
//!   exactly when they hold the same data; per slot to locate a difference.
//! - `CRDT.WAIT numsites timeout`: blocks until that many other sites acked every write this
//!   connection made so far (or the timeout, in milliseconds, passes; 0 waits for ever);
//!   replies how many did.
//! - `CRDT.STREAMSTABLE key`: the stream ID up to which every entry any site adds with an
//!   automatic ID is here already (docs/conflicts.md §17).
//!
//! Their metadata is written here by hand (Redis has no such commands to generate it from).

use super::args::parse_i64;
use super::table::{CommandMeta, Flags};
use super::{Ctx, Handler};
use crate::error::CmdError;
use crate::sync::{WAIT_DB, WAIT_KEY};

/// Metadata of the commands below, in the format of `meta::META`.
pub static META: &[CommandMeta] = &[
    CommandMeta {
        name: "crdt.digest",
        arity: -1,
        flags: Flags(386),
        first_key: 0,
        last_key: 0,
        key_step: 0,
        acl_categories: &["read", "slow"],
        info_head_resp2: b":-1\r\n*3\r\n+readonly\r\n+loading\r\n+stale\r\n:0\r\n:0\r\n:0\r\n*2\r\n+@read\r\n+@slow\r\n*0\r\n*0\r\n",
        info_head_resp3: b":-1\r\n~3\r\n+readonly\r\n+loading\r\n+stale\r\n:0\r\n:0\r\n:0\r\n~2\r\n+@read\r\n+@slow\r\n~0\r\n~0\r\n",
        docs_fields: 5,
        docs_resp2: b"$7\r\nsummary\r\n$137\r\nReturns a digest of the observable keyspace (or of one slot, or per slot) that is equal on two sites exactly when they hold the same data\r\n$5\r\nsince\r\n$5\r\n0.1.0\r\n$5\r\ngroup\r\n$6\r\nserver\r\n$10\r\ncomplexity\r\n$34\r\nO(N) where N is the number of keys\r\n$9\r\narguments\r\n*2\r\n*6\r\n$4\r\nname\r\n$10\r\nsubcommand\r\n$4\r\ntype\r\n$6\r\nstring\r\n$5\r\nflags\r\n*1\r\n+optional\r\n*6\r\n$4\r\nname\r\n$4\r\nslot\r\n$4\r\ntype\r\n$7\r\ninteger\r\n$5\r\nflags\r\n*1\r\n+optional\r\n",
        docs_resp3: b"$7\r\nsummary\r\n$137\r\nReturns a digest of the observable keyspace (or of one slot, or per slot) that is equal on two sites exactly when they hold the same data\r\n$5\r\nsince\r\n$5\r\n0.1.0\r\n$5\r\ngroup\r\n$6\r\nserver\r\n$10\r\ncomplexity\r\n$34\r\nO(N) where N is the number of keys\r\n$9\r\narguments\r\n*2\r\n%3\r\n$4\r\nname\r\n$10\r\nsubcommand\r\n$4\r\ntype\r\n$6\r\nstring\r\n$5\r\nflags\r\n~1\r\n+optional\r\n%3\r\n$4\r\nname\r\n$4\r\nslot\r\n$4\r\ntype\r\n$7\r\ninteger\r\n$5\r\nflags\r\n~1\r\n+optional\r\n",
    },
    CommandMeta {
        name: "crdt.wait",
        arity: 3,
        flags: Flags(32),
        first_key: 0,
        last_key: 0,
        key_step: 0,
        acl_categories: &["slow", "connection"],
        info_head_resp2: b":3\r\n*1\r\n+noscript\r\n:0\r\n:0\r\n:0\r\n*2\r\n+@slow\r\n+@connection\r\n*0\r\n*0\r\n",
        info_head_resp3: b":3\r\n~1\r\n+noscript\r\n:0\r\n:0\r\n:0\r\n~2\r\n+@slow\r\n+@connection\r\n~0\r\n~0\r\n",
        docs_fields: 5,
        docs_resp2: b"$7\r\nsummary\r\n$127\r\nWaits until the given number of other sites have acknowledged every write made so far on this connection, or the timeout passes\r\n$5\r\nsince\r\n$5\r\n0.1.0\r\n$5\r\ngroup\r\n$6\r\nserver\r\n$10\r\ncomplexity\r\n$4\r\nO(1)\r\n$9\r\narguments\r\n*2\r\n*4\r\n$4\r\nname\r\n$8\r\nnumsites\r\n$4\r\ntype\r\n$7\r\ninteger\r\n*4\r\n$4\r\nname\r\n$7\r\ntimeout\r\n$4\r\ntype\r\n$7\r\ninteger\r\n",
        docs_resp3: b"$7\r\nsummary\r\n$127\r\nWaits until the given number of other sites have acknowledged every write made so far on this connection, or the timeout passes\r\n$5\r\nsince\r\n$5\r\n0.1.0\r\n$5\r\ngroup\r\n$6\r\nserver\r\n$10\r\ncomplexity\r\n$4\r\nO(1)\r\n$9\r\narguments\r\n*2\r\n%2\r\n$4\r\nname\r\n$8\r\nnumsites\r\n$4\r\ntype\r\n$7\r\ninteger\r\n%2\r\n$4\r\nname\r\n$7\r\ntimeout\r\n$4\r\ntype\r\n$7\r\ninteger\r\n",
    },
    CommandMeta {
        name: "crdt.streamstable",
        arity: 2,
        flags: Flags(2050),
        first_key: 1,
        last_key: 1,
        key_step: 1,
        acl_categories: &["read", "stream", "fast"],
        info_head_resp2: b":2\r\n*2\r\n+readonly\r\n+fast\r\n:1\r\n:1\r\n:1\r\n*3\r\n+@read\r\n+@stream\r\n+@fast\r\n*0\r\n*1\r\n*6\r\n$5\r\nflags\r\n*1\r\n+RO\r\n$12\r\nbegin_search\r\n*4\r\n$4\r\ntype\r\n$5\r\nindex\r\n$4\r\nspec\r\n*2\r\n$5\r\nindex\r\n:1\r\n$9\r\nfind_keys\r\n*4\r\n$4\r\ntype\r\n$5\r\nrange\r\n$4\r\nspec\r\n*6\r\n$7\r\nlastkey\r\n:0\r\n$7\r\nkeystep\r\n:1\r\n$5\r\nlimit\r\n:0\r\n",
        info_head_resp3: b":2\r\n~2\r\n+readonly\r\n+fast\r\n:1\r\n:1\r\n:1\r\n~3\r\n+@read\r\n+@stream\r\n+@fast\r\n~0\r\n~1\r\n%3\r\n$5\r\nflags\r\n~1\r\n+RO\r\n$12\r\nbegin_search\r\n%2\r\n$4\r\ntype\r\n$5\r\nindex\r\n$4\r\nspec\r\n%1\r\n$5\r\nindex\r\n:1\r\n$9\r\nfind_keys\r\n%2\r\n$4\r\ntype\r\n$5\r\nrange\r\n$4\r\nspec\r\n%3\r\n$7\r\nlastkey\r\n:0\r\n$7\r\nkeystep\r\n:1\r\n$5\r\nlimit\r\n:0\r\n",
        docs_fields: 5,
        docs_resp2: b"$7\r\nsummary\r\n$110\r\nReturns the stream ID up to which every entry that any site adds with an automatic ID has arrived at this site\r\n$5\r\nsince\r\n$5\r\n0.1.0\r\n$5\r\ngroup\r\n$6\r\nstream\r\n$10\r\ncomplexity\r\n$41\r\nO(N) where N is the number of peer shards\r\n$9\r\narguments\r\n*1\r\n*6\r\n$4\r\nname\r\n$3\r\nkey\r\n$4\r\ntype\r\n$3\r\nkey\r\n$14\r\nkey_spec_index\r\n:0\r\n",
        docs_resp3: b"$7\r\nsummary\r\n$110\r\nReturns the stream ID up to which every entry that any site adds with an automatic ID has arrived at this site\r\n$5\r\nsince\r\n$5\r\n0.1.0\r\n$5\r\ngroup\r\n$6\r\nstream\r\n$10\r\ncomplexity\r\n$41\r\nO(N) where N is the number of peer shards\r\n$9\r\narguments\r\n*1\r\n%3\r\n$4\r\nname\r\n$3\r\nkey\r\n$4\r\ntype\r\n$3\r\nkey\r\n$14\r\nkey_spec_index\r\n:0\r\n",
    },
];

pub const HANDLERS: &[(&str, Handler)] = &[
    ("crdt.digest", crdt_digest),
    ("crdt.wait", crdt_wait),
    ("crdt.streamstable", super::stream::crdt_streamstable),
];

fn crdt_digest(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let now = ctx.now_ms;
    match argv {
        [_] => {
            let d = ctx.shard.digest_all(now);
            ctx.out.bulk(d.hex().as_bytes());
        }
        [_, sub] if sub.eq_ignore_ascii_case(b"slots") => {
            let slots = ctx.shard.digest_slots(now);
            let used: Vec<(usize, &crate::sync::digest::Digest)> = slots
                .iter()
                .enumerate()
                .filter(|(_, d)| d.keys > 0)
                .collect();
            ctx.out.array(used.len());
            for (slot, d) in used {
                ctx.out.array(3);
                ctx.out.int(slot as i64);
                ctx.out.int(d.keys as i64);
                ctx.out.bulk(d.hex().as_bytes());
            }
        }
        [_, sub, n] if sub.eq_ignore_ascii_case(b"slot") => {
            let slot = parse_i64(n).ok_or(CmdError::NotInteger)?;
            let slot = u16::try_from(slot)
                .ok()
                .filter(|s| usize::from(*s) < crate::slot::SLOTS)
                .ok_or_else(|| CmdError::Err("Invalid or out of range slot".to_string()))?;
            let d = ctx.shard.digest_slot(slot, now);
            ctx.out.bulk(d.hex().as_bytes());
        }
        _ => return Err(CmdError::Syntax),
    }
    Ok(())
}

/// CRDT.WAIT's arguments: (numsites, timeout in milliseconds, 0 for ever).
pub fn wait_args(argv: &[&[u8]]) -> Result<(i64, u64), CmdError> {
    let numsites =
        parse_i64(argv.get(1).copied().unwrap_or_default()).ok_or(CmdError::NotInteger)?;
    let timeout = parse_i64(argv.get(2).copied().unwrap_or_default())
        .ok_or_else(|| CmdError::Err("timeout is not an integer or out of range".to_string()))?;
    if timeout < 0 {
        return Err(CmdError::Err("timeout is negative".to_string()));
    }
    Ok((numsites, timeout as u64))
}

fn crdt_wait(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let (numsites, timeout) = wait_args(argv)?;
    let target = ctx.client.last_write_seq;
    let acked = ctx.shard.sites_acked(target).len() as i64;
    if acked >= numsites || ctx.timed_out() || !ctx.can_block() {
        ctx.out.int(acked);
        return Ok(());
    }
    let deadline = (timeout > 0).then(|| ctx.now_ms.saturating_add(timeout));
    let db = ctx.client.db;
    // Block on the pseudo-key that acks signal (see `sync::WAIT_DB`).
    ctx.client.db = WAIT_DB;
    ctx.block_until_rerun(&[WAIT_KEY], deadline);
    ctx.client.db = db;
    if let Some(b) = ctx.client.blocked.as_mut() {
        b.db = db;
    }
    Ok(())
}
