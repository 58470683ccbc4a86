//! Membership of a running deployment (docs/operations.md §4, §5):
//!
//! - `CRDT.PEERS`: this site's peers, each with its address, the state of both links and the
//!   replication lag to it (as `/health` computes it).
//! - `CRDT.ADDPEER site host:port`: adds a peer: this site dials it and accepts its links at
//!   once; the new site takes a full sync from each site that lists it, and accepts writes
//!   from the start. Garbage collection waits for its first acknowledgement.
//! - `CRDT.REMOVEPEER site`: removes a peer: its links are dropped and refused from then on,
//!   and garbage collection stops waiting for it. What it wrote stays. A removed site id does
//!   not come back in this process: a machine that returns joins under a new site id.
//!
//! Both changes are written back to the configuration file the server was started with (the
//! `peer` key, replaced in place), so a restart keeps them; they are checked first by the
//! same validation as the file (site id, `host:port`, TLS rules, `PEERS_MAX`). Their metadata
//! is written here by hand, as `cmd::crdt`'s.

use super::table::{CommandMeta, Flags};
use super::{Ctx, Handler};
use crate::error::CmdError;

/// Metadata of the commands below, in the format of `meta::META`.
pub static META: &[CommandMeta] = &[
    CommandMeta {
        name: "crdt.peers",
        arity: 1,
        flags: Flags(424),
        first_key: 0,
        last_key: 0,
        key_step: 0,
        acl_categories: &["admin", "slow", "dangerous"],
        info_head_resp2: b":1\r\n*4\r\n+admin\r\n+noscript\r\n+loading\r\n+stale\r\n:0\r\n:0\r\n:0\r\n*3\r\n+@admin\r\n+@slow\r\n+@dangerous\r\n*0\r\n*0\r\n",
        info_head_resp3: b":1\r\n~4\r\n+admin\r\n+noscript\r\n+loading\r\n+stale\r\n:0\r\n:0\r\n:0\r\n~3\r\n+@admin\r\n+@slow\r\n+@dangerous\r\n~0\r\n~0\r\n",
        docs_fields: 4,
        docs_resp2: b"$7\r\nsummary\r\n$85\r\nLists this site's peers with the state of their links and the replication lag to each\r\n$5\r\nsince\r\n$5\r\n0.1.0\r\n$5\r\ngroup\r\n$6\r\nserver\r\n$10\r\ncomplexity\r\n$35\r\nO(N) where N is the number of peers\r\n",
        docs_resp3: b"$7\r\nsummary\r\n$85\r\nLists this site's peers with the state of their links and the replication lag to each\r\n$5\r\nsince\r\n$5\r\n0.1.0\r\n$5\r\ngroup\r\n$6\r\nserver\r\n$10\r\ncomplexity\r\n$35\r\nO(N) where N is the number of peers\r\n",
    },
    CommandMeta {
        name: "crdt.addpeer",
        arity: 3,
        flags: Flags(424),
        first_key: 0,
        last_key: 0,
        key_step: 0,
        acl_categories: &["admin", "slow", "dangerous"],
        info_head_resp2: b":3\r\n*4\r\n+admin\r\n+noscript\r\n+loading\r\n+stale\r\n:0\r\n:0\r\n:0\r\n*3\r\n+@admin\r\n+@slow\r\n+@dangerous\r\n*0\r\n*0\r\n",
        info_head_resp3: b":3\r\n~4\r\n+admin\r\n+noscript\r\n+loading\r\n+stale\r\n:0\r\n:0\r\n:0\r\n~3\r\n+@admin\r\n+@slow\r\n+@dangerous\r\n~0\r\n~0\r\n",
        docs_fields: 5,
        docs_resp2: b"$7\r\nsummary\r\n$148\r\nAdds a peer site to the running deployment: this site starts streaming to it and dialing it, and writes the peer list back to its configuration file\r\n$5\r\nsince\r\n$5\r\n0.1.0\r\n$5\r\ngroup\r\n$6\r\nserver\r\n$10\r\ncomplexity\r\n$35\r\nO(N) where N is the number of peers\r\n$9\r\narguments\r\n*2\r\n*4\r\n$4\r\nname\r\n$4\r\nsite\r\n$4\r\ntype\r\n$6\r\nstring\r\n*4\r\n$4\r\nname\r\n$7\r\naddress\r\n$4\r\ntype\r\n$6\r\nstring\r\n",
        docs_resp3: b"$7\r\nsummary\r\n$148\r\nAdds a peer site to the running deployment: this site starts streaming to it and dialing it, and writes the peer list back to its configuration file\r\n$5\r\nsince\r\n$5\r\n0.1.0\r\n$5\r\ngroup\r\n$6\r\nserver\r\n$10\r\ncomplexity\r\n$35\r\nO(N) where N is the number of peers\r\n$9\r\narguments\r\n*2\r\n%2\r\n$4\r\nname\r\n$4\r\nsite\r\n$4\r\ntype\r\n$6\r\nstring\r\n%2\r\n$4\r\nname\r\n$7\r\naddress\r\n$4\r\ntype\r\n$6\r\nstring\r\n",
    },
    CommandMeta {
        name: "crdt.removepeer",
        arity: 2,
        flags: Flags(424),
        first_key: 0,
        last_key: 0,
        key_step: 0,
        acl_categories: &["admin", "slow", "dangerous"],
        info_head_resp2: b":2\r\n*4\r\n+admin\r\n+noscript\r\n+loading\r\n+stale\r\n:0\r\n:0\r\n:0\r\n*3\r\n+@admin\r\n+@slow\r\n+@dangerous\r\n*0\r\n*0\r\n",
        info_head_resp3: b":2\r\n~4\r\n+admin\r\n+noscript\r\n+loading\r\n+stale\r\n:0\r\n:0\r\n:0\r\n~3\r\n+@admin\r\n+@slow\r\n+@dangerous\r\n~0\r\n~0\r\n",
        docs_fields: 5,
        docs_resp2: b"$7\r\nsummary\r\n$217\r\nRemoves a peer site from the running deployment: this site stops waiting for it (garbage collection no longer waits for its acknowledgements), refuses its links, and writes the peer list back to its configuration file\r\n$5\r\nsince\r\n$5\r\n0.1.0\r\n$5\r\ngroup\r\n$6\r\nserver\r\n$10\r\ncomplexity\r\n$35\r\nO(N) where N is the number of peers\r\n$9\r\narguments\r\n*1\r\n*4\r\n$4\r\nname\r\n$4\r\nsite\r\n$4\r\ntype\r\n$6\r\nstring\r\n",
        docs_resp3: b"$7\r\nsummary\r\n$217\r\nRemoves a peer site from the running deployment: this site stops waiting for it (garbage collection no longer waits for its acknowledgements), refuses its links, and writes the peer list back to its configuration file\r\n$5\r\nsince\r\n$5\r\n0.1.0\r\n$5\r\ngroup\r\n$6\r\nserver\r\n$10\r\ncomplexity\r\n$35\r\nO(N) where N is the number of peers\r\n$9\r\narguments\r\n*1\r\n%2\r\n$4\r\nname\r\n$4\r\nsite\r\n$4\r\ntype\r\n$6\r\nstring\r\n",
    },
];

pub const HANDLERS: &[(&str, Handler)] = &[
    ("crdt.peers", crdt_peers),
    ("crdt.addpeer", crdt_addpeer),
    ("crdt.removepeer", crdt_removepeer),
];

fn text(arg: &[u8]) -> Result<&str, CmdError> {
    std::str::from_utf8(arg).map_err(|_| CmdError::Err("site ids and addresses are ASCII".into()))
}

fn crdt_peers(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> Result<(), CmdError> {
    let figures = ctx.shard.figures();
    ctx.out.array(figures.peers.len());
    for p in &figures.peers {
        let addr = ctx
            .shard
            .sync
            .peer(&p.site)
            .map(|x| x.addr.clone())
            .unwrap_or_default();
        ctx.out.map(6);
        ctx.out.bulk(b"site");
        ctx.out.bulk(p.site.as_bytes());
        ctx.out.bulk(b"addr");
        ctx.out.bulk(addr.as_bytes());
        ctx.out.bulk(b"in_link");
        ctx.out.bulk(p.inbound.name().as_bytes());
        ctx.out.bulk(b"out_link");
        ctx.out.bulk(p.outbound.name().as_bytes());
        ctx.out.bulk(b"lag_ms");
        ctx.out.int(p.lag_ms as i64);
        ctx.out.bulk(b"link_status");
        ctx.out.int(i64::from(p.link_status()));
    }
    Ok(())
}

fn crdt_addpeer(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let site = text(argv.get(1).copied().unwrap_or_default())?;
    let addr = text(argv.get(2).copied().unwrap_or_default())?;
    if let Some(p) = ctx.shard.sync.peer(site) {
        return Err(CmdError::Err(if p.removed {
            format!(
                "site '{site}' was removed from this deployment; a removed site id does not come back (join the machine under a new site id)"
            )
        } else {
            format!("site '{site}' is a peer already")
        }));
    }
    let mut next = ctx.shard.config.clone();
    next.peer.push(format!("{site}={addr}"));
    next.validate().map_err(|e| CmdError::Err(e.to_string()))?;
    write_back(ctx, &next.peer)?;
    ctx.shard.config.peer = next.peer;
    ctx.shard.add_peer(site, addr);
    tracing::info!(peer = %site, %addr, "peer added");
    ctx.out.ok();
    Ok(())
}

fn crdt_removepeer(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let site = text(argv.get(1).copied().unwrap_or_default())?;
    if ctx.shard.sync.peer(site).is_none_or(|p| p.removed) {
        return Err(CmdError::Err(format!("no such peer '{site}'")));
    }
    let prefix = format!("{site}=");
    let mut peers = ctx.shard.config.peer.clone();
    peers.retain(|p| !p.starts_with(&prefix));
    write_back(ctx, &peers)?;
    ctx.shard.config.peer = peers;
    ctx.shard.remove_peer(site);
    tracing::info!(peer = %site, "peer removed");
    ctx.out.ok();
    Ok(())
}

/// Writes `peers` to the configuration file the server started with, when there is one.
fn write_back(ctx: &mut Ctx<'_>, peers: &[String]) -> Result<(), CmdError> {
    let Some(path) = ctx.shard.config.config_file.clone() else {
        tracing::warn!("peer list not written back: the server runs without a configuration file");
        return Ok(());
    };
    crate::config::write_peers(&path, peers).map_err(|e| {
        CmdError::Err(format!(
            "the configuration file could not be written, nothing changed: {e}"
        ))
    })
}
