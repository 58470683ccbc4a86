//! Client-side caching, the clients' part (Redis 7.0's CLIENT TRACKING, CACHING, GETREDIR,
//! TRACKINGINFO and `sendTrackingMessage`).
//!
//! A tracking client's settings are a `Tracker` in the process's registry
//! (`Node::trackers`), replaced whole by each CLIENT TRACKING. Reads of a tracking client
//! are remembered by the shard that ran them (`remember`, after the command); a change of a
//! key reaches the shard's `InvalidateHook`, which is `deliver` here: the client (or its
//! redirect) gets `>2 invalidate [keys]` in RESP3, or a `__redis__:invalidate` Pub/Sub
//! message on a RESP2 redirect connection that is subscribed. Invalidations of the client
//! whose command caused them wait for its reply (`after_command`), as Redis's pending keys.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::args::{eq_ic, parse_i64};
use super::{Ctx, Handler};
use crate::client::{Client, ClientShared, Mailbox, Tracker};
use crate::config::Config;
use crate::error::CmdError;
use crate::node::{Node, lock};
use crate::resp::reply::{Proto, Reply};
use crate::shard::Shard;
use crate::tracking::{Invalid, Pending};

pub const HANDLERS: &[(&str, Handler)] = &[
    ("client|tracking", tracking),
    ("client|caching", caching),
    ("client|getredir", getredir),
    ("client|trackinginfo", trackinginfo),
];

/// The tracker of a client, if tracking is on.
fn tracker_of(c: &ClientShared) -> Option<Arc<Tracker>> {
    c.tracking.borrow().clone()
}

/// CLIENT TRACKING ON|OFF [REDIRECT id] [BCAST] [PREFIX p ...] [OPTIN] [OPTOUT] [NOLOOP].
fn tracking(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let err = |s: &str| Err(CmdError::Err(s.to_string()));
    let mut redirect: i64 = 0;
    let (mut bcast, mut optin, mut optout, mut noloop) = (false, false, false, false);
    let mut prefixes: Vec<&[u8]> = Vec::new();
    let mut j = 3;
    while let Some(a) = argv.get(j) {
        let more = argv.len() - 1 - j;
        if eq_ic(a, "redirect") && more > 0 {
            j += 1;
            if redirect != 0 {
                return err("A client can only redirect to a single other client");
            }
            redirect =
                parse_i64(argv.get(j).copied().unwrap_or_default()).ok_or(CmdError::NotInteger)?;
            let exists = u64::try_from(redirect)
                .is_ok_and(|id| lock(&ctx.front.node.directory).contains_key(&id));
            if !exists {
                return err("The client ID you want redirect to does not exist");
            }
        } else if eq_ic(a, "bcast") {
            bcast = true;
        } else if eq_ic(a, "optin") {
            optin = true;
        } else if eq_ic(a, "optout") {
            optout = true;
        } else if eq_ic(a, "noloop") {
            noloop = true;
        } else if eq_ic(a, "prefix") && more > 0 {
            j += 1;
            prefixes.push(argv.get(j).copied().unwrap_or_default());
        } else {
            return Err(CmdError::Syntax);
        }
        j += 1;
    }
    let mode = argv.get(2).copied().unwrap_or_default();
    let old = tracker_of(&ctx.client.shared);
    if eq_ic(mode, "off") {
        disable(&ctx.front.node, &ctx.client.shared);
        ctx.client.caching = false;
        ctx.out.ok();
        return Ok(());
    }
    if !eq_ic(mode, "on") {
        return Err(CmdError::Syntax);
    }
    if !bcast && !prefixes.is_empty() {
        return err("PREFIX option requires BCAST mode to be enabled");
    }
    if old.as_ref().is_some_and(|t| t.bcast != bcast) {
        return err(
            "You can't switch BCAST mode on/off before disabling tracking for this client, and then re-enabling it with a different mode.",
        );
    }
    if bcast && (optin || optout) {
        return err("OPTIN and OPTOUT are not compatible with BCAST");
    }
    if optin && optout {
        return err("You can't specify both OPTIN mode and OPTOUT mode");
    }
    if old
        .as_ref()
        .is_some_and(|t| (optin && t.optout) || (optout && t.optin))
    {
        return err(
            "You can't switch OPTIN/OPTOUT mode before disabling tracking for this client, and then re-enabling it with a different mode.",
        );
    }
    let mut all: Vec<Vec<u8>> = old.as_ref().map(|t| t.prefixes.clone()).unwrap_or_default();
    // The prefixes new to this client: subscribed once its tracker is registered (the
    // registration on other nodes reads both).
    let known = all.len();
    if bcast {
        check_prefixes(&all, &prefixes)?;
        let add = |p: &[u8], all: &mut Vec<Vec<u8>>| {
            if !all.iter().any(|q| q == p) {
                all.push(p.to_vec());
            }
        };
        if prefixes.is_empty() {
            add(b"", &mut all);
        }
        for p in &prefixes {
            add(p, &mut all);
        }
    }
    let t = Arc::new(Tracker {
        id: ctx.client.id(),
        mailbox: ctx.client.shared.mailbox.clone(),
        redirect: redirect as u64,
        bcast,
        optin,
        optout,
        noloop,
        prefixes: all,
        relay: ctx.client.site_link,
        broken: Default::default(),
    });
    lock(&ctx.front.node.trackers).insert(t.id, t.clone());
    for p in t.prefixes.get(known..).unwrap_or_default() {
        ctx.front.node.tracking.subscribe(t.id, p);
    }
    *ctx.client.shared.tracking.borrow_mut() = Some(t);
    ctx.out.ok();
    Ok(())
}

/// Redis's `checkPrefixCollisionsOrReply`: no new prefix may be a prefix of an existing one
/// or of another new one, or the other way round.
fn check_prefixes(existing: &[Vec<u8>], new: &[&[u8]]) -> Result<(), CmdError> {
    let overlap = |a: &[u8], b: &[u8]| {
        let n = a.len().min(b.len());
        a.get(..n) == b.get(..n)
    };
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    for (i, p) in new.iter().enumerate() {
        if let Some(e) = existing.iter().find(|e| overlap(e, p)) {
            return Err(CmdError::Err(format!(
                "Prefix '{}' overlaps with an existing prefix '{}'. Prefixes for a single client must not overlap.",
                text(p),
                text(e)
            )));
        }
        if let Some(q) = new.iter().skip(i + 1).find(|q| overlap(p, q)) {
            return Err(CmdError::Err(format!(
                "Prefix '{}' overlaps with another provided prefix '{}'. Prefixes for a single client must not overlap.",
                text(p),
                text(q)
            )));
        }
    }
    Ok(())
}

/// Turns tracking off for `c` (CLIENT TRACKING OFF, RESET, disconnect): its BCAST prefixes
/// go; what the shards' tables hold of its reads is skipped when due (Redis frees it lazily
/// too).
pub fn disable(node: &Node, c: &ClientShared) {
    let Some(t) = c.tracking.borrow_mut().take() else {
        return;
    };
    lock(&node.trackers).remove(&t.id);
    if t.bcast {
        node.tracking.unsubscribe(t.id, &t.prefixes);
    }
}

/// CLIENT CACHING YES|NO: the next command (or transaction) is tracked (OPTIN) or not
/// (OPTOUT).
fn caching(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let Some(t) = tracker_of(&ctx.client.shared) else {
        return Err(CmdError::Err(
            "CLIENT CACHING can be called only when the client is in tracking mode with OPTIN or OPTOUT mode enabled".to_string(),
        ));
    };
    let opt = argv.get(2).copied().unwrap_or_default();
    if eq_ic(opt, "yes") {
        if !t.optin {
            return Err(CmdError::Err(
                "CLIENT CACHING YES is only valid when tracking is enabled in OPTIN mode."
                    .to_string(),
            ));
        }
    } else if eq_ic(opt, "no") {
        if !t.optout {
            return Err(CmdError::Err(
                "CLIENT CACHING NO is only valid when tracking is enabled in OPTOUT mode."
                    .to_string(),
            ));
        }
    } else {
        return Err(CmdError::Syntax);
    }
    ctx.client.caching = true;
    ctx.out.ok();
    Ok(())
}

/// CLIENT GETREDIR: the client invalidations are redirected to (0: none), -1 with tracking
/// off.
fn getredir(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> Result<(), CmdError> {
    match tracker_of(&ctx.client.shared) {
        Some(t) => ctx.out.int(t.redirect as i64),
        None => ctx.out.int(-1),
    }
    Ok(())
}

/// CLIENT TRACKINGINFO: flags, redirect and prefixes, as Redis's reply.
fn trackinginfo(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> Result<(), CmdError> {
    let t = tracker_of(&ctx.client.shared);
    let mut flags: Vec<&str> = Vec::new();
    match &t {
        None => flags.push("off"),
        Some(t) => {
            flags.push("on");
            if t.bcast {
                flags.push("bcast");
            }
            if t.optin {
                flags.push("optin");
                if ctx.client.caching {
                    flags.push("caching-yes");
                }
            }
            if t.optout {
                flags.push("optout");
                if ctx.client.caching {
                    flags.push("caching-no");
                }
            }
            if t.noloop {
                flags.push("noloop");
            }
            if t.broken.load(Ordering::Relaxed) {
                flags.push("broken_redirect");
            }
        }
    }
    let out = &mut *ctx.out;
    out.map(3);
    out.bulk(b"flags");
    out.set(flags.len());
    for f in flags {
        out.bulk(f.as_bytes());
    }
    out.bulk(b"redirect");
    out.int(t.as_ref().map_or(-1, |t| t.redirect as i64));
    out.bulk(b"prefixes");
    let prefixes = t
        .as_ref()
        .map(|t| t.prefixes.as_slice())
        .unwrap_or_default();
    out.array(prefixes.len());
    for p in prefixes {
        out.bulk(p);
    }
    Ok(())
}

/// The CLIENT LIST flags of tracking (`t`, `R` broken redirect, `B` BCAST) and `redir=`.
pub fn list_flags(c: &ClientShared) -> (String, i64) {
    match tracker_of(c) {
        None => (String::new(), -1),
        Some(t) => {
            let mut f = String::from("t");
            if t.broken.load(Ordering::Relaxed) {
                f.push('R');
            }
            if t.bcast {
                f.push('B');
            }
            (f, t.redirect as i64)
        }
    }
}

/// Whether a tracking client's read by `spec` is remembered (Redis's `call`: read-only
/// commands but the read-only script calls, not in BCAST mode, OPTIN only after CACHING YES,
/// OPTOUT unless after CACHING NO).
/// A script (EVAL, FCALL and their variants) that called a read-only command remembers its
/// declared keys.
#[inline]
fn remembers(
    t: &Tracker,
    client: &Client,
    spec: &super::table::CommandSpec,
    script_read: bool,
) -> bool {
    if t.bcast || spec.meta.flags.contains(super::table::Flags::PUBSUB) {
        return false;
    }
    let reads = if is_script(spec) {
        script_read
    } else {
        spec.meta.flags.contains(super::table::Flags::READONLY)
    };
    reads && caches(t, client.caching)
}

/// Whether a command of a client tracking as `t`, run on another node, has its reads
/// tracked there (`remote_tracking`): a read, or a script (EVAL, FCALL and their variants:
/// its declared keys), in default mode, and CLIENT CACHING (`caching`) as OPTIN/OPTOUT want.
pub fn tracks_read(t: &Tracker, caching: bool, spec: &super::table::CommandSpec) -> bool {
    !t.bcast
        && !spec.meta.flags.contains(super::table::Flags::PUBSUB)
        && (spec.meta.flags.contains(super::table::Flags::READONLY) || is_script(spec))
        && caches(t, caching)
}

/// Whether a transaction (EXEC) of a client tracking as `t`, run whole on another node, has
/// its reads tracked there (CLIENT CACHING covers a whole transaction, as in Redis).
pub fn tracks_transaction(t: &Tracker, caching: bool) -> bool {
    !t.bcast && caches(t, caching)
}

/// A script or function call: EVAL, EVALSHA, FCALL and their read-only variants.
pub fn is_script(spec: &super::table::CommandSpec) -> bool {
    matches!(
        spec.meta.name,
        "eval" | "evalsha" | "eval_ro" | "evalsha_ro" | "fcall" | "fcall_ro"
    )
}

fn caches(t: &Tracker, caching: bool) -> bool {
    !((t.optin && !caching) || (t.optout && caching))
}

/// After a command of a tracking client: remembers the keys it read.
pub fn remember(
    shard: &mut Shard,
    table: &'static super::table::Table,
    client: &Client,
    t: &Tracker,
    spec: &'static super::table::CommandSpec,
    argv: &[&[u8]],
) {
    if !remembers(t, client, spec, shard.tracking.script_read) {
        return;
    }
    let mut pos = smallvec::SmallVec::<[usize; 8]>::new();
    if !super::command::key_positions(table, spec, argv, &mut pos) {
        return;
    }
    // A script whose declared keys span shards held for it (`tx_across`): each key is
    // remembered on the shard that writes it, before the reply and while every one of them
    // is still held, so that no write can come between.
    // Only a script's keys are looked up: any other command's are all this shard's.
    let across = shard.scripting.slots.as_ref().filter(|_| is_script(spec));
    let mut elsewhere: Vec<(u16, Vec<Vec<u8>>)> = Vec::new();
    for p in pos {
        let Some(k) = argv.get(p) else { continue };
        let owner = across
            .map(|m| m.shard_of_key(k))
            .filter(|&o| o != shard.index && crate::tx_across::reaches(o));
        match owner {
            None => shard.tracking.remember(t.id, k),
            Some(o) => match elsewhere.iter_mut().find(|(s, _)| *s == o) {
                Some((_, keys)) => keys.push(k.to_vec()),
                None => elsewhere.push((o, vec![k.to_vec()])),
            },
        }
    }
    for (owner, keys) in elsewhere {
        let id = t.id;
        let run = crate::hop::Finish(Box::new(move |ctx: &mut Ctx<'_>| {
            for k in &keys {
                ctx.shard.tracking.remember(id, k);
            }
            Ok(())
        }));
        let mut batch = crate::hop::Batch::new(crate::hop::ClientView::of(client));
        let op = crate::hop::Op::Finish {
            spec,
            counted: false,
            run,
        };
        batch.push(op, client.db, client.shared.proto.get(), argv);
        // None: the shard's thread is gone (the process is stopping); nothing to remember.
        let _ = crate::tx_across::call_held(owner, batch);
    }
}

/// After a command ran on `shard` for `client` (the outermost call): the invalidations due
/// to the client itself, after its reply (`flush_pending`), then the BCAST messages of what
/// the command changed.
pub fn after_command(
    shard: &mut Shard,
    node: &Node,
    client: &Client,
    out: Option<&mut Reply>,
    now_ms: u64,
) {
    if shard.tracking.has_pending() {
        flush_pending(shard, node, client, out, now_ms);
    }
    shard.tracking_broadcast();
}

/// Whether pushes due to `spec` cannot follow its reply in the reply stream: the reply is
/// dropped (CLIENT REPLY OFF or SKIP; pushes are not silenced by it), or it may be one part
/// of a reply merged from several shards (scattered keys, every shard), which bytes appended
/// to it would not survive.
pub fn merged(
    front: &crate::front::Front,
    client: &Client,
    spec: &super::table::CommandSpec,
) -> bool {
    if client.reply_mode != crate::client::ReplyMode::On {
        return true;
    }
    front.node.shards > 1
        && matches!(
            crate::route::classes(front.table).get(spec.idx),
            Some(crate::route::Class::Scatter(_) | crate::route::Class::All(_))
        )
}

/// Redis's `trackingLimitUsedSlots` in `processCommand`, before a command runs or is
/// queued in MULTI (`client` is the shard's current client): trims the table to
/// `tracking-table-max-keys`, and what that frees for this client goes into its reply
/// stream ahead of the reply, as Redis sends it before the command runs.
pub fn limit_before_command(
    shard: &mut Shard,
    front: &crate::front::Front,
    client: &Client,
    spec: &super::table::CommandSpec,
    out: &mut Reply,
    now_ms: u64,
) {
    if !shard.tracking.active() {
        return;
    }
    shard.tracking_limit();
    if shard.tracking.has_pending() {
        let inline = (!merged(front, client, spec)).then_some(out);
        flush_pending(shard, &front.node, client, inline, now_ms);
    }
}

/// Sends the invalidations held for `client`: into its reply stream `out` right after the
/// reply (Redis's order), or, when the reply is merged with other shards' (`None`), to its
/// push output, which its connection writes after the replies of the round.
pub fn flush_pending(
    shard: &mut Shard,
    node: &Node,
    client: &Client,
    mut out: Option<&mut Reply>,
    now_ms: u64,
) {
    let pending = shard.tracking.take_pending();
    for p in pending {
        let what = match &p {
            Pending::Key(k) => Invalid::Key(k),
            Pending::Flush => Invalid::Flush,
        };
        let inline = out.as_deref_mut().map(|r| &mut r.buf);
        deliver_to(node, client.id(), what, inline, &shard.config, now_ms);
    }
}

/// A flush (FLUSHDB, FLUSHALL) ran for `client`: a null invalidation to every tracking
/// client of the process, the client's own after its reply. Called once per flush, on the
/// client's thread.
pub fn flushed(shard: &mut Shard, node: &Node, client: &Client, now_ms: u64) {
    let ids: Vec<u64> = lock(&node.trackers).keys().copied().collect();
    for id in ids {
        if id == client.id() {
            shard.tracking_hold_flush();
        } else {
            deliver_to(node, id, Invalid::Flush, None, &shard.config, now_ms);
        }
    }
}

/// The shards' `InvalidateHook`: an invalidation for client `id`.
pub fn deliver(node: &Node, id: u64, what: Invalid<'_>, config: &Config, now_ms: u64) {
    deliver_to(node, id, what, None, config, now_ms);
}

/// Redis's `sendTrackingMessage` (with `trackingInvalidateKey`'s and the broadcast's checks
/// of the target): `inline` is the client's own reply stream (its pending keys).
fn deliver_to(
    node: &Node,
    id: u64,
    what: Invalid<'_>,
    inline: Option<&mut Vec<u8>>,
    config: &Config,
    now_ms: u64,
) {
    let Some(t) = lock(&node.trackers).get(&id).cloned() else {
        return;
    };
    let mut value = Vec::new();
    match what {
        // A key read before the client switched to BCAST is not its concern any more.
        Invalid::Key(_) if t.bcast => return,
        Invalid::Key(k) => {
            value.extend_from_slice(b"*1\r\n");
            bulk(&mut value, k);
        }
        Invalid::Keys(keys) => {
            let mine = |w: u64| t.noloop && w == id;
            let n = keys.iter().filter(|(_, w)| !mine(*w)).count();
            if n == 0 {
                return;
            }
            value.extend_from_slice(format!("*{n}\r\n").as_bytes());
            for (k, _) in keys.iter().filter(|(_, w)| !mine(*w)) {
                bulk(&mut value, k);
            }
        }
        // The null of the tracking client's own protocol, as Redis sends it.
        Invalid::Flush => value.extend_from_slice(match t.mailbox.proto() {
            Proto::Resp3 => b"_\r\n",
            Proto::Resp2 => b"$-1\r\n",
        }),
    }
    let (target, redirected) = if t.redirect != 0 {
        match lock(&node.directory).get(&t.redirect).cloned() {
            Some(m) => (m, true),
            None => {
                t.broken.store(true, Ordering::Relaxed);
                if t.mailbox.proto() == Proto::Resp3 {
                    let mut msg = b">2\r\n$21\r\ntracking-redir-broken\r\n".to_vec();
                    msg.extend_from_slice(format!(":{}\r\n", t.redirect).as_bytes());
                    send(&t.mailbox, &msg, inline, config, now_ms);
                }
                return;
            }
        }
    } else {
        (t.mailbox.clone(), false)
    };
    let mut msg = Vec::with_capacity(value.len() + 48);
    if target.proto() == Proto::Resp3 {
        msg.extend_from_slice(b">2\r\n$10\r\ninvalidate\r\n");
    } else if redirected && target.is_subscribed() {
        msg.extend_from_slice(b"*3\r\n$7\r\nmessage\r\n$20\r\n__redis__:invalidate\r\n");
    } else {
        // RESP2 without a redirect has no way to carry a push.
        return;
    }
    msg.extend_from_slice(&value);
    let inline = if target.id == id { inline } else { None };
    send(&target, &msg, inline, config, now_ms);
}

fn bulk(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(format!("${}\r\n", b.len()).as_bytes());
    out.extend_from_slice(b);
    out.extend_from_slice(b"\r\n");
}

/// Appends `msg` to the reply stream given, or to `m`'s push output (closing a client whose
/// output breaks its class's limit, as Pub/Sub does).
fn send(m: &Mailbox, msg: &[u8], inline: Option<&mut Vec<u8>>, config: &Config, now_ms: u64) {
    if let Some(buf) = inline {
        buf.extend_from_slice(msg);
        return;
    }
    if m.is_killed() {
        return;
    }
    let limits = &config.client_output_buffer_limit;
    let limit = if m.is_subscribed() {
        &limits.pubsub
    } else {
        &limits.normal
    };
    if m.push_within(msg, limit, now_ms) {
        m.wake.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_overlaps_as_redis() {
        let e = |existing: &[&str], new: &[&str]| {
            let ex: Vec<Vec<u8>> = existing.iter().map(|s| s.as_bytes().to_vec()).collect();
            let nw: Vec<&[u8]> = new.iter().map(|s| s.as_bytes()).collect();
            match check_prefixes(&ex, &nw) {
                Ok(()) => String::new(),
                Err(CmdError::Err(s)) => s,
                Err(_) => "?".into(),
            }
        };
        assert!(
            e(&[], &["FOOBAR", "FOO"])
                .starts_with("Prefix 'FOOBAR' overlaps with another provided prefix 'FOO'")
        );
        assert!(
            e(&[], &["FOO", "FOOBAR"])
                .starts_with("Prefix 'FOO' overlaps with another provided prefix 'FOOBAR'")
        );
        assert_eq!(e(&[], &["FOO", "BAR"]), "");
        assert!(
            e(&["FOO", "BAR"], &["FO"])
                .starts_with("Prefix 'FO' overlaps with an existing prefix 'FOO'")
        );
        assert!(
            e(&["FOO", "BAR"], &["BARB"])
                .starts_with("Prefix 'BARB' overlaps with an existing prefix 'BAR'")
        );
    }
}
