//! The Redis Cluster API: CLUSTER SLOTS SHARDS NODES INFO MYID KEYSLOT COUNTKEYSINSLOT
//! GETKEYSINSLOT HELP, and READONLY READWRITE ASKING.
//!
//! With the API on (`cluster-api`, by default when a process has several shards) each shard
//! is a cluster node with its own endpoint (`topology::ClusterMap`); these commands describe
//! them, on the endpoints and on the main port alike, with Redis 7.0's reply shapes. A
//! connection to an endpoint is "myself" for that shard; the main port is no node's. With
//! the API off they answer as Redis does with `cluster-enabled no`. Slot management and the
//! cluster bus (ADDSLOTS, SETSLOT, MEET, RESET, FAILOVER, LINKS...) do not exist here: the
//! slot map is the site's. Those subcommands are in the table so that they answer as Redis
//! does with the API off (support disabled, and refused inside scripts by their flags), and
//! with it on as an unknown subcommand (`absent`); CLUSTER HELP does not list them.

use super::args::{eq_ic, parse_i64};
use super::{Ctx, Handler};
use crate::error::CmdError;
use crate::topology::ClusterMap;

pub const HANDLERS: &[(&str, Handler)] = &[
    ("cluster|countkeysinslot", countkeysinslot),
    ("cluster|getkeysinslot", getkeysinslot),
    ("cluster|help", help),
    ("cluster|info", info),
    ("cluster|keyslot", keyslot),
    ("cluster|myid", myid),
    ("cluster|nodes", nodes),
    ("cluster|shards", shards),
    ("cluster|slots", slots),
    ("cluster|addslots", absent),
    ("cluster|addslotsrange", absent),
    ("cluster|bumpepoch", absent),
    ("cluster|count-failure-reports", absent),
    ("cluster|delslots", absent),
    ("cluster|delslotsrange", absent),
    ("cluster|failover", absent),
    ("cluster|flushslots", absent),
    ("cluster|forget", absent),
    ("cluster|links", absent),
    ("cluster|meet", absent),
    ("cluster|replicas", absent),
    ("cluster|replicate", absent),
    ("cluster|reset", absent),
    ("cluster|saveconfig", absent),
    ("cluster|set-config-epoch", absent),
    ("cluster|setslot", absent),
    ("cluster|slaves", absent),
    ("readonly", readonly),
    ("readwrite", readwrite),
    ("asking", asking),
];

fn disabled() -> CmdError {
    CmdError::Err("This instance has cluster support disabled".to_string())
}

/// A Redis Cluster subcommand with no counterpart here (slot management, the cluster bus):
/// with the API off, Redis's answer with `cluster-enabled no`; with it on, the answer to a
/// subcommand that does not exist.
fn absent(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    map(ctx)?;
    Err(CmdError::UnknownSubcommand {
        cmd: "CLUSTER".to_string(),
        sub: String::from_utf8_lossy(argv.get(1).copied().unwrap_or_default()).into_owned(),
    })
}

/// The cluster map, or the error Redis gives with cluster support disabled.
fn map<'a>(ctx: &'a Ctx<'_>) -> Result<&'a ClusterMap, CmdError> {
    ctx.front.node.cluster.as_ref().ok_or_else(disabled)
}

/// The node this connection is: its endpoint's shard (the main port is none).
fn me(ctx: &Ctx<'_>) -> Option<u16> {
    ctx.client.endpoint
}

/// CLUSTER SLOTS: `[start, end, [ip, port, id, {}]]` per slot range.
fn slots(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> Result<(), CmdError> {
    let m = map(ctx)?.clone();
    let ranges = ctx.front.node.slots.ranges();
    let out = &mut *ctx.out;
    out.array(ranges.len());
    for (a, b, shard) in ranges {
        out.array(3);
        out.int(i64::from(a));
        out.int(i64::from(b));
        match m.endpoint(shard) {
            Some(e) => {
                out.array(4);
                out.bulk(e.ip.as_bytes());
                out.int(i64::from(e.port));
                out.bulk(e.id.as_bytes());
                out.map(0);
            }
            None => out.array(0),
        }
    }
    Ok(())
}

/// CLUSTER SHARDS: per shard, its slot ranges and its one node.
fn shards(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> Result<(), CmdError> {
    let m = map(ctx)?.clone();
    let slot_map = ctx.front.node.slots.clone();
    let out = &mut *ctx.out;
    out.array(m.endpoints.len());
    for (i, e) in m.endpoints.iter().enumerate() {
        let ranges = slot_map.ranges_of(i as u16);
        out.map(2);
        out.bulk(b"slots");
        out.array(ranges.len() * 2);
        for (a, b) in ranges {
            out.int(i64::from(a));
            out.int(i64::from(b));
        }
        out.bulk(b"nodes");
        out.array(1);
        out.map(7);
        out.bulk(b"id");
        out.bulk(e.id.as_bytes());
        out.bulk(b"port");
        out.int(i64::from(e.port));
        out.bulk(b"ip");
        out.bulk(e.ip.as_bytes());
        out.bulk(b"endpoint");
        out.bulk(e.ip.as_bytes());
        out.bulk(b"role");
        out.bulk(b"master");
        out.bulk(b"replication-offset");
        out.int(0);
        out.bulk(b"health");
        out.bulk(b"online");
    }
    Ok(())
}

/// CLUSTER NODES: one line per node, each ending in `\n`.
fn nodes(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> Result<(), CmdError> {
    let text = map(ctx)?.nodes_text(&ctx.front.node.slots, me(ctx));
    ctx.out.verbatim(b"txt", text.as_bytes());
    Ok(())
}

/// CLUSTER INFO: the state of a cluster whose every slot is served.
fn info(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> Result<(), CmdError> {
    let m = map(ctx)?;
    let n = m.endpoints.len();
    let my_epoch = me(ctx).map_or(0, |s| m.node_epoch(s));
    let text = format!(
        "cluster_state:ok\r\ncluster_slots_assigned:16384\r\ncluster_slots_ok:16384\r\n\
         cluster_slots_pfail:0\r\ncluster_slots_fail:0\r\ncluster_known_nodes:{n}\r\n\
         cluster_size:{n}\r\ncluster_current_epoch:{}\r\ncluster_my_epoch:{my_epoch}\r\n\
         cluster_stats_messages_sent:0\r\ncluster_stats_messages_received:0\r\n\
         total_cluster_links_buffer_limit_exceeded:0\r\n",
        m.current_epoch()
    );
    ctx.out.verbatim(b"txt", text.as_bytes());
    Ok(())
}

/// CLUSTER MYID: this endpoint's node id (on the main port, the id of the shard of the
/// connection's thread).
fn myid(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> Result<(), CmdError> {
    let shard = me(ctx).unwrap_or(ctx.shard.index);
    let id = map(ctx)?
        .endpoint(shard)
        .map(|e| e.id.clone())
        .unwrap_or_default();
    ctx.out.bulk(id.as_bytes());
    Ok(())
}

/// CLUSTER KEYSLOT key
fn keyslot(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    map(ctx)?;
    let key = argv.get(2).copied().unwrap_or_default();
    ctx.out.int(i64::from(crate::slot::slot(key)));
    Ok(())
}

/// The slot argument of COUNTKEYSINSLOT/GETKEYSINSLOT: an integer (else Redis's
/// not-an-integer error), which the caller range-checks.
fn slot_arg(argv: &[&[u8]], i: usize) -> Result<i64, CmdError> {
    parse_i64(argv.get(i).copied().unwrap_or_default()).ok_or(CmdError::NotInteger)
}

/// The live keys of `slot` in the client's database, up to `max` (one walk of the table:
/// Meridian keeps no per-slot index).
fn keys_in_slot(ctx: &mut Ctx<'_>, slot: u16, max: usize) -> Vec<Vec<u8>> {
    let now = ctx.now_ms;
    let Some(d) = ctx.shard.dbs.get(ctx.client.db) else {
        return Vec::new();
    };
    d.table
        .iter()
        .filter(|e| {
            !e.state.is_empty()
                && e.state.expire_at_ms().is_none_or(|at| at > now)
                && crate::slot::slot(&e.key) == slot
        })
        .take(max)
        .map(|e| e.key.to_vec())
        .collect()
}

/// CLUSTER COUNTKEYSINSLOT slot: keys of the slot at the shard that owns it (0 elsewhere).
fn countkeysinslot(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    map(ctx)?;
    let slot = slot_arg(argv, 2)?;
    let Some(slot) = u16::try_from(slot)
        .ok()
        .filter(|s| usize::from(*s) < crate::slot::SLOTS)
    else {
        return Err(CmdError::Err("Invalid slot".to_string()));
    };
    let n = keys_in_slot(ctx, slot, usize::MAX).len();
    ctx.out.int(n as i64);
    Ok(())
}

/// CLUSTER GETKEYSINSLOT slot count
fn getkeysinslot(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    map(ctx)?;
    let slot = slot_arg(argv, 2)?;
    let max = slot_arg(argv, 3)?;
    let slot = match u16::try_from(slot) {
        Ok(s) if usize::from(s) < crate::slot::SLOTS && max >= 0 => s,
        _ => return Err(CmdError::Err("Invalid slot or number of keys".to_string())),
    };
    let keys = keys_in_slot(ctx, slot, usize::try_from(max).unwrap_or(usize::MAX));
    ctx.out.array(keys.len());
    for k in &keys {
        ctx.out.bulk(k);
    }
    Ok(())
}

/// CLUSTER HELP: Redis 7.0's lines for the subcommands that exist here.
fn help(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> Result<(), CmdError> {
    map(ctx)?;
    const LINES: &[&str] = &[
        "COUNTKEYSINSLOT <slot>",
        "    Return the number of keys in <slot>.",
        "GETKEYSINSLOT <slot> <count>",
        "    Return key names stored by current node in a slot.",
        "INFO",
        "    Return information about the cluster.",
        "KEYSLOT <key>",
        "    Return the hash slot for <key>.",
        "MYID",
        "    Return the node id.",
        "NODES",
        "    Return cluster configuration seen by node. Output format:",
        "    <id> <ip:port> <flags> <master> <pings> <pongs> <epoch> <link> <slot> ...",
        "SLOTS",
        "    Return information about slots range mappings. Each range is made of:",
        "    start, end, master and replicas IP addresses, ports and ids",
        "SHARDS",
        "    Return information about slot range mappings and the nodes associated with them.",
    ];
    super::server::reply_help(ctx, "CLUSTER", LINES);
    Ok(())
}

/// READONLY: accepted (every node is a master: reads go where writes go).
fn readonly(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> Result<(), CmdError> {
    map(ctx)?;
    ctx.client.cluster_readonly = true;
    ctx.out.ok();
    Ok(())
}

fn readwrite(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> Result<(), CmdError> {
    map(ctx)?;
    ctx.client.cluster_readonly = false;
    ctx.out.ok();
    Ok(())
}

/// ASKING: the next command may touch a slot this node is importing.
fn asking(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> Result<(), CmdError> {
    map(ctx)?;
    ctx.client.cluster_asking = true;
    ctx.out.ok();
    Ok(())
}

/// Whether `argv[1]` of CLUSTER names a slot-owned subcommand (COUNTKEYSINSLOT,
/// GETKEYSINSLOT): the main port runs it on the slot's shard.
pub fn slot_of_subcommand(argv: &[&[u8]]) -> Option<u16> {
    let sub = argv.get(1)?;
    if !(eq_ic(sub, "countkeysinslot") || eq_ic(sub, "getkeysinslot")) {
        return None;
    }
    let n = parse_i64(argv.get(2)?)?;
    u16::try_from(n)
        .ok()
        .filter(|s| usize::from(*s) < crate::slot::SLOTS)
}
