//! Pub/Sub on one site, as Redis 7.0: SUBSCRIBE UNSUBSCRIBE PSUBSCRIBE PUNSUBSCRIBE PUBLISH
//! PUBSUB, and the shard channels SSUBSCRIBE SUNSUBSCRIBE SPUBLISH (with one node, a separate
//! namespace with the same semantics).
//!
//! Subscriptions of every connection of the process are in one registry (`Node::pubsub`),
//! so a message reaches each subscriber once whatever thread publishes it. Subscription
//! replies go to the subscriber's own output; messages for other connections are encoded
//! once per protocol (RESP2 arrays, RESP3 push frames) and appended to each subscriber's
//! `Mailbox::push_out`, whose task is woken to write them. A RESP2 client
//! with subscriptions may only run the commands `allowed_when_subscribed` names
//! (`cmd::execute` enforces it).

use std::collections::BTreeMap;
use std::sync::Arc;

use hashbrown::HashMap;

use super::{Ctx, Handler};
use crate::client::{ClientShared, Mailbox};
use crate::config::OutputBufferLimits;
use crate::error::CmdError;
use crate::node::lock;
use crate::resp::reply::{Proto, Reply};

pub const HANDLERS: &[(&str, Handler)] = &[
    ("subscribe", subscribe),
    ("unsubscribe", unsubscribe),
    ("psubscribe", psubscribe),
    ("punsubscribe", punsubscribe),
    ("publish", publish),
    ("ssubscribe", ssubscribe),
    ("sunsubscribe", sunsubscribe),
    ("spublish", spublish),
    ("pubsub|channels", pubsub_channels),
    ("pubsub|numsub", pubsub_numsub),
    ("pubsub|numpat", pubsub_numpat),
    ("pubsub|shardchannels", pubsub_shardchannels),
    ("pubsub|shardnumsub", pubsub_shardnumsub),
    ("pubsub|help", pubsub_help),
];

/// Subscribers of one channel or pattern, by client id (connection order).
type Subscribers = BTreeMap<u64, Arc<Mailbox>>;

/// The process's subscriptions: channel, pattern and shard channel → subscribers.
#[derive(Debug, Default)]
pub struct PubSub {
    channels: HashMap<Vec<u8>, Subscribers>,
    patterns: HashMap<Vec<u8>, Subscribers>,
    shard_channels: HashMap<Vec<u8>, Subscribers>,
}

impl PubSub {
    /// Channels with at least one subscriber (INFO `pubsub_channels`).
    pub fn channel_count(&self) -> usize {
        self.channels.len()
    }

    /// Distinct patterns with at least one subscriber (INFO `pubsub_patterns`, NUMPAT).
    pub fn pattern_count(&self) -> usize {
        self.patterns.len()
    }

    /// Shard channels with at least one subscriber (INFO `pubsubshard_channels`).
    pub fn shard_channel_count(&self) -> usize {
        self.shard_channels.len()
    }

    /// Removes every subscription of `client` without replies (RESET, disconnect).
    pub fn unsubscribe_all(&mut self, client: &ClientShared) {
        let subs = std::mem::take(&mut *client.subs.borrow_mut());
        for c in &subs.channels {
            remove_subscriber(&mut self.channels, c, client.id);
        }
        for p in &subs.patterns {
            remove_subscriber(&mut self.patterns, p, client.id);
        }
        for c in &subs.shard_channels {
            remove_subscriber(&mut self.shard_channels, c, client.id);
        }
        client.sync_sub_counts();
    }
}

fn remove_subscriber(map: &mut HashMap<Vec<u8>, Subscribers>, name: &[u8], id: u64) {
    if let Some(s) = map.get_mut(name) {
        s.remove(&id);
        if s.is_empty() {
            map.remove(name);
        }
    }
}

/// Whether a RESP2 client with subscriptions may run `name` (Redis's processCommand check).
pub fn allowed_when_subscribed(name: &str) -> bool {
    matches!(
        name,
        "subscribe"
            | "ssubscribe"
            | "unsubscribe"
            | "sunsubscribe"
            | "psubscribe"
            | "punsubscribe"
            | "ping"
            | "quit"
            | "reset"
    )
}

/// The error a subscribed RESP2 client gets for any other command (`name` is the full name,
/// e.g. "client|list").
pub fn subscribed_context_error(name: &str) -> CmdError {
    CmdError::Err(format!(
        "Can't execute '{name}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET \
         are allowed in this context"
    ))
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Global,
    Shard,
}

impl Kind {
    fn subscribe_word(self) -> &'static [u8] {
        match self {
            Kind::Global => b"subscribe",
            Kind::Shard => b"ssubscribe",
        }
    }
    fn unsubscribe_word(self) -> &'static [u8] {
        match self {
            Kind::Global => b"unsubscribe",
            Kind::Shard => b"sunsubscribe",
        }
    }
    fn message_word(self) -> &'static [u8] {
        match self {
            Kind::Global => b"message",
            Kind::Shard => b"smessage",
        }
    }
}

/// The count a (un)subscribe reply shows: channels + patterns, or shard channels.
fn count(client: &ClientShared, kind: Kind) -> i64 {
    let subs = client.subs.borrow();
    match kind {
        Kind::Global => subs.count() as i64,
        Kind::Shard => subs.shard_channels.len() as i64,
    }
}

fn notify(out: &mut Reply, word: &[u8], name: Option<&[u8]>, count: i64) {
    out.push(3);
    out.bulk(word);
    match name {
        Some(n) => out.bulk(n),
        None => out.null(),
    }
    out.int(count);
}

fn subscribe_kind(ctx: &mut Ctx<'_>, argv: &[&[u8]], kind: Kind) {
    let shared = ctx.client.shared.clone();
    for ch in argv.get(1..).unwrap_or_default() {
        let added = {
            let mut subs = shared.subs.borrow_mut();
            let set = match kind {
                Kind::Global => &mut subs.channels,
                Kind::Shard => &mut subs.shard_channels,
            };
            set.insert(ch.to_vec())
        };
        if added {
            let mut ps = lock(&ctx.front.node.pubsub);
            let map = match kind {
                Kind::Global => &mut ps.channels,
                Kind::Shard => &mut ps.shard_channels,
            };
            map.entry(ch.to_vec())
                .or_default()
                .insert(shared.id, shared.mailbox.clone());
            shared.sync_sub_counts();
        }
        notify(
            ctx.out,
            kind.subscribe_word(),
            Some(ch),
            count(&shared, kind),
        );
    }
}

fn unsubscribe_kind(ctx: &mut Ctx<'_>, argv: &[&[u8]], kind: Kind) {
    let shared = ctx.client.shared.clone();
    let names: Vec<Vec<u8>> = match argv.get(1..) {
        Some(a) if !a.is_empty() => a.iter().map(|c| c.to_vec()).collect(),
        _ => {
            let subs = shared.subs.borrow();
            let set = match kind {
                Kind::Global => &subs.channels,
                Kind::Shard => &subs.shard_channels,
            };
            if set.is_empty() {
                drop(subs);
                notify(ctx.out, kind.unsubscribe_word(), None, count(&shared, kind));
                return;
            }
            set.iter().cloned().collect()
        }
    };
    for ch in &names {
        let removed = {
            let mut subs = shared.subs.borrow_mut();
            let set = match kind {
                Kind::Global => &mut subs.channels,
                Kind::Shard => &mut subs.shard_channels,
            };
            set.remove(ch)
        };
        if removed {
            let mut ps = lock(&ctx.front.node.pubsub);
            let map = match kind {
                Kind::Global => &mut ps.channels,
                Kind::Shard => &mut ps.shard_channels,
            };
            remove_subscriber(map, ch, shared.id);
            shared.sync_sub_counts();
        }
        notify(
            ctx.out,
            kind.unsubscribe_word(),
            Some(ch),
            count(&shared, kind),
        );
    }
}

/// SUBSCRIBE channel [channel ...]
fn subscribe(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    subscribe_kind(ctx, argv, Kind::Global);
    Ok(())
}

/// UNSUBSCRIBE [channel ...]: with no channel, every channel (and a reply with a null
/// channel when there is none).
fn unsubscribe(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    unsubscribe_kind(ctx, argv, Kind::Global);
    Ok(())
}

/// SSUBSCRIBE shardchannel [shardchannel ...]; not inside EXEC, as Redis 7.0.
fn ssubscribe(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    if !ctx.can_block() {
        return Err(CmdError::Err(
            "SSUBSCRIBE isn't allowed for a DENY BLOCKING client".to_string(),
        ));
    }
    subscribe_kind(ctx, argv, Kind::Shard);
    Ok(())
}

/// SUNSUBSCRIBE [shardchannel ...]
fn sunsubscribe(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    unsubscribe_kind(ctx, argv, Kind::Shard);
    Ok(())
}

/// PSUBSCRIBE pattern [pattern ...]
fn psubscribe(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let shared = ctx.client.shared.clone();
    for pat in argv.get(1..).unwrap_or_default() {
        let added = {
            let mut subs = shared.subs.borrow_mut();
            if subs.patterns.iter().any(|p| p.as_slice() == *pat) {
                false
            } else {
                subs.patterns.push(pat.to_vec());
                true
            }
        };
        if added {
            lock(&ctx.front.node.pubsub)
                .patterns
                .entry(pat.to_vec())
                .or_default()
                .insert(shared.id, shared.mailbox.clone());
            shared.sync_sub_counts();
        }
        notify(
            ctx.out,
            b"psubscribe",
            Some(pat),
            count(&shared, Kind::Global),
        );
    }
    Ok(())
}

/// PUNSUBSCRIBE [pattern ...]: with no pattern, every pattern in subscription order.
fn punsubscribe(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let shared = ctx.client.shared.clone();
    let names: Vec<Vec<u8>> = match argv.get(1..) {
        Some(a) if !a.is_empty() => a.iter().map(|c| c.to_vec()).collect(),
        _ => shared.subs.borrow().patterns.clone(),
    };
    if names.is_empty() {
        notify(ctx.out, b"punsubscribe", None, count(&shared, Kind::Global));
        return Ok(());
    }
    for pat in &names {
        let removed = {
            let mut subs = shared.subs.borrow_mut();
            match subs.patterns.iter().position(|p| p == pat) {
                Some(i) => {
                    subs.patterns.remove(i);
                    true
                }
                None => false,
            }
        };
        if removed {
            remove_subscriber(&mut lock(&ctx.front.node.pubsub).patterns, pat, shared.id);
            shared.sync_sub_counts();
        }
        notify(
            ctx.out,
            b"punsubscribe",
            Some(pat),
            count(&shared, Kind::Global),
        );
    }
    Ok(())
}

/// A message encoded lazily once per protocol.
struct Encoded<'a> {
    parts: &'a [&'a [u8]],
    resp2: Option<Vec<u8>>,
    resp3: Option<Vec<u8>>,
}

impl<'a> Encoded<'a> {
    fn new(parts: &'a [&'a [u8]]) -> Encoded<'a> {
        Encoded {
            parts,
            resp2: None,
            resp3: None,
        }
    }

    fn get(&mut self, proto: Proto) -> &[u8] {
        let parts = self.parts;
        let slot = match proto {
            Proto::Resp2 => &mut self.resp2,
            Proto::Resp3 => &mut self.resp3,
        };
        slot.get_or_insert_with(|| {
            let mut r = Reply {
                buf: Vec::new(),
                proto,
            };
            r.push(parts.len());
            for p in parts {
                r.bulk(p);
            }
            r.buf
        })
    }
}

/// Where and under which limits messages are delivered.
struct Delivery<'a, 'o> {
    publisher: u64,
    out: Option<&'o mut Reply>,
    limits: &'a OutputBufferLimits,
    now_ms: u64,
    /// Where to leave subscribers to wake at the end of the round (`Front::wake_deferred`);
    /// None: wake each at once.
    wakes: Option<&'o mut Vec<Arc<Mailbox>>>,
}

/// Delivers one encoded message: into the publisher's own output when it is the subscriber
/// (so it precedes PUBLISH's reply, as in Redis), else into the subscriber's push buffer,
/// closing a subscriber whose pending output breaks the `pubsub` class's
/// `client-output-buffer-limit` (every client in the registry is subscribed).
fn deliver(sub: &Arc<Mailbox>, bytes: &[u8], d: &mut Delivery<'_, '_>) {
    let (publisher, out) = (d.publisher, &mut d.out);
    if sub.id == publisher {
        if let Some(out) = out {
            out.raw(bytes);
            return;
        }
    }
    if sub.is_killed() {
        return;
    }
    if !sub.push_within(bytes, &d.limits.pubsub, d.now_ms) {
        return;
    }
    if let Some(wakes) = d.wakes.as_deref_mut() {
        if !wakes.iter().any(|m| Arc::ptr_eq(m, sub)) {
            wakes.push(sub.clone());
        }
    } else {
        sub.wake.notify_one();
    }
}

fn publish_kind(ctx: &mut Ctx<'_>, channel: &[u8], message: &[u8], kind: Kind) -> i64 {
    let node = ctx.front.node.clone();
    let n = deliver_all(
        &lock(&node.pubsub),
        channel,
        message,
        kind,
        Delivery {
            publisher: ctx.client.id(),
            out: Some(ctx.out),
            limits: &ctx.shard.config.client_output_buffer_limit,
            now_ms: ctx.now_ms,
            wakes: Some(&mut ctx.front.deferred_wakes),
        },
    );
    if ctx.client.site_link {
        // Another node of the site published it, logged it and counts its own receivers.
        return n;
    }
    // Subscribers at the other sites get it through the op stream, those on the site's
    // other nodes through links (as Redis Cluster's bus: the count is this node's).
    let now = ctx.shard.now_ms();
    ctx.shard
        .log_publish(channel, message, kind == Kind::Shard, now);
    let word: &[u8] = if kind == Kind::Shard {
        b"SPUBLISH"
    } else {
        b"PUBLISH"
    };
    forward_to_nodes(&[word, channel, message]);
    n
}

/// Messages queued per other node of the site before more are dropped (that node is down
/// or slow; its subscribers miss them, as a Redis Cluster node's do while unreachable).
pub const PUBLISH_FORWARD_QUEUE_MAX: usize = 65_536;
/// Messages sent to a node in one request at most.
pub const PUBLISH_FORWARD_BATCH_MAX: usize = 1024;

thread_local! {
    /// This thread's queues of messages for the site's other nodes (none: one node).
    static FORWARD: std::cell::RefCell<Vec<tokio::sync::mpsc::Sender<Vec<Vec<u8>>>>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// Starts this thread's forwarders of published messages, one task per other node of the
/// site (a slow node delays only its own), each sending its queue in order over `pool`.
pub fn start_forwarders(pool: std::rc::Rc<meridian_proxy::Pool>, nodes: Vec<String>) {
    let mut senders = Vec::with_capacity(nodes.len());
    for addr in nodes {
        let (tx, mut rx) = tokio::sync::mpsc::channel::<Vec<Vec<u8>>>(PUBLISH_FORWARD_QUEUE_MAX);
        senders.push(tx);
        let pool = pool.clone();
        tokio::task::spawn_local(async move {
            while let Some(first) = rx.recv().await {
                let mut req = meridian_proxy::Request::new();
                let mut push = |argv: &[Vec<u8>]| {
                    let a: Vec<&[u8]> = argv.iter().map(Vec::as_slice).collect();
                    req.push(0, &a);
                };
                push(&first);
                let mut n = 1;
                while n < PUBLISH_FORWARD_BATCH_MAX {
                    match rx.try_recv() {
                        Ok(argv) => push(&argv),
                        Err(_) => break,
                    }
                    n += 1;
                }
                if let Err(e) = pool.call(&addr, false, &req).await {
                    tracing::debug!(node = %addr, error = %e, messages = n, "published messages not forwarded");
                }
            }
        });
    }
    FORWARD.with(|f| *f.borrow_mut() = senders);
}

/// Queues a PUBLISH/SPUBLISH for the site's other nodes (nothing with one node).
pub fn forward_to_nodes(argv: &[&[u8]]) {
    FORWARD.with(|f| {
        for tx in f.borrow().iter() {
            let owned: Vec<Vec<u8>> = argv.iter().map(|a| a.to_vec()).collect();
            if tx.try_send(owned).is_err() {
                tracing::debug!("publish forward queue full: message dropped for a node");
            }
        }
    });
}

/// Delivers a message that another site published to this site's subscribers.
pub fn deliver_remote(
    ps: &PubSub,
    limits: &OutputBufferLimits,
    now_ms: u64,
    channel: &[u8],
    message: &[u8],
    sharded: bool,
) -> i64 {
    let kind = if sharded { Kind::Shard } else { Kind::Global };
    // Client ids start at 1: publisher 0 is nobody here.
    let d = Delivery {
        publisher: 0,
        out: None,
        limits,
        now_ms,
        wakes: None,
    };
    deliver_all(ps, channel, message, kind, d)
}

fn deliver_all(
    ps: &PubSub,
    channel: &[u8],
    message: &[u8],
    kind: Kind,
    mut d: Delivery<'_, '_>,
) -> i64 {
    let mut receivers = 0i64;
    let map = match kind {
        Kind::Global => &ps.channels,
        Kind::Shard => &ps.shard_channels,
    };
    if let Some(subs) = map.get(channel) {
        let parts: [&[u8]; 3] = [kind.message_word(), channel, message];
        let mut enc = Encoded::new(&parts);
        for sub in subs.values() {
            deliver(sub, enc.get(sub.proto()), &mut d);
            receivers += 1;
        }
    }
    if kind == Kind::Global {
        for (pat, subs) in &ps.patterns {
            if !crate::glob::matches(pat, channel, false) {
                continue;
            }
            let parts: [&[u8]; 4] = [b"pmessage", pat, channel, message];
            let mut enc = Encoded::new(&parts);
            for sub in subs.values() {
                deliver(sub, enc.get(sub.proto()), &mut d);
                receivers += 1;
            }
        }
    }
    receivers
}

/// PUBLISH channel message: the number of receivers (channel subscribers plus matching
/// pattern subscriptions).
fn publish(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let channel = argv.get(1).copied().unwrap_or_default();
    let message = argv.get(2).copied().unwrap_or_default();
    let n = publish_kind(ctx, channel, message, Kind::Global);
    ctx.out.int(n);
    Ok(())
}

/// SPUBLISH shardchannel message
fn spublish(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let channel = argv.get(1).copied().unwrap_or_default();
    let message = argv.get(2).copied().unwrap_or_default();
    let n = publish_kind(ctx, channel, message, Kind::Shard);
    ctx.out.int(n);
    Ok(())
}

fn syntax_error(name: &str) -> CmdError {
    CmdError::Err(format!(
        "unknown subcommand or wrong number of arguments for '{name}'. Try PUBSUB HELP."
    ))
}

fn list_channels(
    ctx: &mut Ctx<'_>,
    argv: &[&[u8]],
    kind: Kind,
    shown: &str,
) -> Result<(), CmdError> {
    if argv.len() > 3 {
        return Err(syntax_error(shown));
    }
    let pat = argv.get(2).copied();
    let endpoint = ctx.client.endpoint;
    let ps = lock(&ctx.front.node.pubsub);
    let map = match kind {
        Kind::Global => &ps.channels,
        Kind::Shard => &ps.shard_channels,
    };
    let names: Vec<&Vec<u8>> = map
        .iter()
        .filter(|(c, subs)| {
            pat.is_none_or(|p| crate::glob::matches(p, c, false)) && seen_from(subs, endpoint) > 0
        })
        .map(|(c, _)| c)
        .collect();
    ctx.out.array(names.len());
    for n in names {
        ctx.out.bulk(n);
    }
    Ok(())
}

fn num_subscribers(ctx: &mut Ctx<'_>, argv: &[&[u8]], kind: Kind) {
    let names = argv.get(2..).unwrap_or_default();
    let endpoint = ctx.client.endpoint;
    let ps = lock(&ctx.front.node.pubsub);
    let map = match kind {
        Kind::Global => &ps.channels,
        Kind::Shard => &ps.shard_channels,
    };
    ctx.out.array(names.len() * 2);
    for n in names {
        ctx.out.bulk(n);
        ctx.out
            .int(map.get(*n).map_or(0, |s| seen_from(s, endpoint) as i64));
    }
}

/// PUBSUB CHANNELS [pattern]
fn pubsub_channels(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    list_channels(ctx, argv, Kind::Global, "CHANNELS")
}

/// PUBSUB SHARDCHANNELS [pattern]
fn pubsub_shardchannels(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    list_channels(ctx, argv, Kind::Shard, "SHARDCHANNELS")
}

/// PUBSUB NUMSUB [channel ...]: flat array of channel, count (pattern subscriptions excluded).
fn pubsub_numsub(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    num_subscribers(ctx, argv, Kind::Global);
    Ok(())
}

/// PUBSUB SHARDNUMSUB [shardchannel ...]
fn pubsub_shardnumsub(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    num_subscribers(ctx, argv, Kind::Shard);
    Ok(())
}

/// PUBSUB NUMPAT: distinct patterns subscribed to.
fn pubsub_numpat(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> Result<(), CmdError> {
    let endpoint = ctx.client.endpoint;
    let ps = lock(&ctx.front.node.pubsub);
    let n = match endpoint {
        None => ps.pattern_count(),
        Some(_) => ps
            .patterns
            .values()
            .filter(|subs| seen_from(subs, endpoint) > 0)
            .count(),
    };
    drop(ps);
    ctx.out.int(n as i64);
    Ok(())
}

/// The subscribers PUBSUB counts for a client on `endpoint`: on the main port all of the
/// process's; on a cluster endpoint only those connected through that endpoint, as a Redis
/// Cluster node knows only its own clients' subscriptions (a cluster client sums the nodes'
/// answers; the process-wide count on every node would count each subscriber once per
/// node).
fn seen_from(subs: &Subscribers, endpoint: Option<u16>) -> usize {
    match endpoint {
        None => subs.len(),
        Some(_) => subs.values().filter(|m| m.endpoint() == endpoint).count(),
    }
}

const HELP: &[&str] = &[
    "PUBSUB <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "CHANNELS [<pattern>]",
    "    Return the currently active channels matching a <pattern> (default: '*').",
    "NUMPAT",
    "    Return number of subscriptions to patterns.",
    "NUMSUB [<channel> ...]",
    "    Return the number of subscribers for the specified channels, excluding",
    "    pattern subscriptions(default: no channels).",
    "SHARDCHANNELS [<pattern>]",
    "    Return the currently active shard level channels matching a <pattern> (default: '*').",
    "SHARDNUMSUB [<shardchannel> ...]",
    "    Return the number of subscribers for the specified shard level channel(s)",
    "HELP",
    "    Prints this help.",
];

/// PUBSUB HELP
fn pubsub_help(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> Result<(), CmdError> {
    ctx.out.array(HELP.len());
    for line in HELP {
        ctx.out.simple(line);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allowed_list_and_error_text() {
        for n in [
            "subscribe",
            "punsubscribe",
            "ping",
            "quit",
            "reset",
            "ssubscribe",
        ] {
            assert!(allowed_when_subscribed(n));
        }
        assert!(!allowed_when_subscribed("get"));
        assert!(!allowed_when_subscribed("publish"));
        let mut v = Vec::new();
        subscribed_context_error("client|list").write_text(&mut v);
        assert_eq!(
            String::from_utf8(v).unwrap(),
            "ERR Can't execute 'client|list': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / \
             QUIT / RESET are allowed in this context"
        );
    }

    #[test]
    fn encoded_per_protocol() {
        let parts: [&[u8]; 3] = [b"message", b"ch", b"hi"];
        let mut e = Encoded::new(&parts);
        assert_eq!(
            e.get(Proto::Resp2),
            b"*3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$2\r\nhi\r\n"
        );
        assert_eq!(
            e.get(Proto::Resp3),
            b">3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$2\r\nhi\r\n"
        );
    }
}
