//! The link tasks: the sync port's accept loop, the sender of this shard's ops to a peer that
//! dialed in, and the dialer that receives a peer's ops (docs/replication.md §3–5).
//!
//! Every task runs on the shard thread and borrows the shard only between awaits. A sender
//! waits on `SyncState::new_ops` when it has sent everything; the write path wakes it. The
//! receiving side of a link reads frames in its own task (reads are not cancel-safe, so they
//! never sit in a `select!` that could drop a half-read frame).

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::Duration;

use meridian_crdt::VersionVector;
use meridian_syncer::msg::decode_refuse;
use meridian_syncer::tls::{CertificateDer, check_cert_name, peer_leaf};
use meridian_syncer::{
    Ack, FrameReader, FrameWriter, FullSyncBegin, FullSyncEnd, Hello, Io, Kind, Mode, OpsHeader,
    SyncError, Welcome,
};
use tokio::io::{ReadHalf, WriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

use super::{LinkState, SYNC_IDLE_TIMEOUT};
use crate::oplog;
use crate::shard::Shard;

type ShardRc = Rc<RefCell<Shard>>;

/// Most bytes of records in one `Ops` frame.
pub const BATCH_BYTES_MAX: usize = 256 * 1024;
/// Keys per full-sync chunk, and the encoded size that also ends a chunk.
pub const FULL_SYNC_CHUNK_KEYS: usize = 1024;
pub const FULL_SYNC_CHUNK_BYTES: usize = 1024 * 1024;
/// Out-of-order `Ops` frames held while waiting for the gap to fill.
pub const REORDER_BATCHES_MAX: usize = 64;
/// Keepalive period: the sender pings and the receiver acks at least this often.
const KEEPALIVE: Duration = Duration::from_secs(1);
/// How often a sender that has sent every op it issued states its clock in a `Ping` (the
/// peer's stable stream ID advances by these: docs/conflicts.md §17); its body is 8 bytes.
pub const PROMISE_INTERVAL: Duration = Duration::from_millis(100);
/// Dial timeout and reconnect backoff bounds.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const BACKOFF_MIN_MS: u64 = 100;
const BACKOFF_MAX_MS: u64 = 1_000;
/// How often a full sync retries writing the log when a write failed.
const WRITE_RETRY: Duration = Duration::from_millis(100);
/// A peer that stays unreachable is logged at the first failed dial, then at most once per
/// this interval with the failures since (or at once when the reason changes): dialing every
/// second for a day would otherwise log some 86,000 identical lines per shard and peer.
pub const DOWN_LOG_INTERVAL: Duration = Duration::from_secs(60);

/// Starts this shard's dialers: one per known shard of every peer site (more start as
/// handshakes tell of more shards: `spawn_discovered`).
pub fn start(shard: &ShardRc) {
    let peers = shard.borrow().sync.peers.len();
    for i in 0..peers {
        tokio::task::spawn_local(dial_loop(shard.clone(), i));
    }
    tokio::task::spawn_local(dial_supervisor(shard.clone()));
}

/// Starts the dialers of peers added at run time (CRDT.ADDPEER): the command cannot spawn a
/// task that holds the shard, so it queues the peer's index and wakes this one.
async fn dial_supervisor(shard: ShardRc) {
    let wanted = shard.borrow().sync.dial_wanted.clone();
    loop {
        wanted.notified().await;
        let indices = {
            let mut s = shard.borrow_mut();
            if s.shutting_down {
                return;
            }
            std::mem::take(&mut s.sync.dials_wanted)
        };
        for i in indices {
            tokio::task::spawn_local(dial_loop(shard.clone(), i));
        }
    }
}

/// `SyncState::discover` on `shard`, starting a dialer for each shard of `site` not known
/// before.
fn discover(shard: &ShardRc, site: &str, shards: u16) {
    let added = {
        let mut s = shard.borrow_mut();
        let now = s.now_ms();
        s.sync.discover(site, shards, now)
    };
    for i in added {
        tracing::info!(peer = %site, shards, "peer site has several shards: dialing each");
        tokio::task::spawn_local(dial_loop(shard.clone(), i));
    }
}

/// Starts the sync port's accept loop on this thread (thread 0): each connection's
/// preamble names the shard it is for, and goes to that shard's thread.
pub fn start_listener(th: &Rc<crate::hop::Thread>, listener: Option<std::net::TcpListener>) {
    if let Some(l) = listener {
        match TcpListener::from_std(l) {
            Ok(l) => {
                tokio::task::spawn_local(accept_loop(th.clone(), l));
            }
            Err(e) => tracing::error!(error = %e, "sync listener unusable"),
        }
    }
}

/// Serves an inbound sync connection another thread accepted for this shard.
pub fn serve_handed(shard: &ShardRc, stream: std::net::TcpStream) {
    let _ = stream.set_nonblocking(true);
    let stream = match TcpStream::from_std(stream) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "handed-over sync connection unusable");
            return;
        }
    };
    spawn_serve(shard, stream);
}

fn spawn_serve(shard: &ShardRc, stream: TcpStream) {
    let addr = stream.peer_addr().ok();
    let shard = shard.clone();
    tokio::task::spawn_local(async move {
        if let Err(e) = serve_peer(&shard, stream).await {
            tracing::warn!(addr = ?addr, error = %e, "sync link from peer closed");
        }
    });
}

async fn accept_loop(th: Rc<crate::hop::Thread>, listener: TcpListener) {
    loop {
        if th.shard.borrow().shutting_down {
            return;
        }
        match listener.accept().await {
            Ok((stream, addr)) => {
                let _ = stream.set_nodelay(true);
                let th = th.clone();
                tokio::task::spawn_local(async move {
                    route_inbound(&th, stream, addr).await;
                });
            }
            Err(e) => {
                tracing::warn!(error = %e, "sync accept failed");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

/// Reads an inbound connection's preamble and hands the connection to the shard it names
/// (a shard this process lacks is refused by shard 0's handshake, with the reason).
async fn route_inbound(
    th: &Rc<crate::hop::Thread>,
    mut stream: TcpStream,
    addr: std::net::SocketAddr,
) {
    use tokio::io::AsyncReadExt as _;
    let mut pre = [0u8; meridian_syncer::msg::PREAMBLE_BYTES];
    let read = tokio::time::timeout(SYNC_IDLE_TIMEOUT, stream.read_exact(&mut pre)).await;
    let shard = match read {
        Ok(Ok(_)) => match meridian_syncer::msg::parse_preamble(&pre) {
            Ok(s) => s,
            Err(e) => {
                th.shard.borrow_mut().sync.frames_refused += 1;
                tracing::warn!(%addr, error = %e, "sync connection refused");
                return;
            }
        },
        Ok(Err(e)) => {
            tracing::debug!(%addr, error = %e, "sync connection closed before its preamble");
            return;
        }
        Err(_) => {
            tracing::warn!(%addr, "sync connection sent no preamble within the idle timeout");
            return;
        }
    };
    if !th.node.is_local(shard) && shard < th.node.shards {
        // Another node of the site runs it: the link goes on there, through this node.
        let to = th.node.site.as_ref().and_then(|s| s.sync_addr(shard));
        if let Some(to) = to {
            tokio::task::spawn_local(relay(stream, to, pre, addr));
            return;
        }
    }
    if shard == th.index || !th.node.is_local(shard) {
        spawn_serve(&th.shard, stream);
        return;
    }
    let Ok(std_stream) = stream.into_std() else {
        return;
    };
    if let Some(inbox) = th.node.inbox(shard) {
        let _ = inbox.send(crate::hop::Msg::SyncLink(std_stream)).await;
    }
}

/// Carries an inbound sync connection for a shard of another node of the site to that
/// node's sync port (its preamble first): TLS, if any, is end to end.
async fn relay(
    mut stream: TcpStream,
    to: String,
    pre: [u8; meridian_syncer::msg::PREAMBLE_BYTES],
    from: std::net::SocketAddr,
) {
    use tokio::io::AsyncWriteExt as _;
    let mut out = match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(&to)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            tracing::warn!(%from, node = %to, error = %e, "sync link for another node of the site: that node is unreachable");
            return;
        }
        Err(_) => {
            tracing::warn!(%from, node = %to, "sync link for another node of the site: connect timed out");
            return;
        }
    };
    let _ = out.set_nodelay(true);
    if out.write_all(&pre).await.is_err() {
        return;
    }
    let _ = tokio::io::copy_bidirectional(&mut stream, &mut out).await;
}

/// One inbound connection: TLS (when configured), then the sender role.
async fn serve_peer(shard: &ShardRc, tcp: TcpStream) -> Result<(), SyncError> {
    let tls = shard.borrow().sync.tls.clone();
    match tls {
        Some(ctx) => {
            let stream = tokio::time::timeout(SYNC_IDLE_TIMEOUT, ctx.accept(tcp))
                .await
                .map_err(|_| SyncError::Idle(SYNC_IDLE_TIMEOUT.as_millis() as u64))??;
            let leaf = peer_leaf(&stream);
            send_ops(shard, stream, Some(leaf)).await
        }
        None => send_ops(shard, tcp, None).await,
    }
}

/// Why the accepter refuses a Hello, if it does.
fn refusal(
    s: &Shard,
    hello: &Hello,
    leaf: Option<&Option<CertificateDer<'static>>>,
) -> Option<String> {
    if hello.deployment != s.config.deployment_id {
        return Some(format!(
            "deployment id {:?} does not match this site's {:?}",
            hello.deployment, s.config.deployment_id
        ));
    }
    if hello.to_site != s.config.site {
        return Some(format!(
            "dialed site {:?} but this is site {:?}",
            hello.to_site, s.config.site
        ));
    }
    if s.sync.peer(&hello.from_site).is_some_and(|p| p.removed) {
        return Some(format!(
            "site {:?} was removed from the deployment of site {:?}",
            hello.from_site, s.config.site
        ));
    }
    if !s.sync.knows_site(&hello.from_site) {
        return Some(format!(
            "site {:?} is not a configured peer of site {:?}",
            hello.from_site, s.config.site
        ));
    }
    if hello.to_shard != s.index {
        return Some(format!(
            "shard {} of site {:?} was dialed but this is shard {} of {}",
            hello.to_shard,
            s.config.site,
            s.index,
            s.slots.shards()
        ));
    }
    if hello.shards == 0 || hello.shard >= hello.shards || hello.shards > super::PEER_SHARDS_MAX {
        return Some(format!(
            "shard {} of {} is not a valid shard",
            hello.shard, hello.shards
        ));
    }
    if let Some(leaf) = leaf {
        match check_cert_name(leaf.as_ref(), &hello.from_site) {
            Ok(()) => {}
            Err(SyncError::Refused(reason)) => return Some(reason),
            Err(other) => return Some(other.to_string()),
        }
    }
    None
}

/// The sender role on an accepted link.
async fn send_ops<S: Io + 'static>(
    shard: &ShardRc,
    stream: S,
    leaf: Option<Option<CertificateDer<'static>>>,
) -> Result<(), SyncError> {
    let (frame_max, codec) = {
        let s = shard.borrow();
        (s.config.sync_frame_bytes_max as usize, s.sync.codec)
    };
    let (rd, wr) = tokio::io::split(stream);
    let mut reader = FrameReader::new(rd, frame_max);
    let mut writer = FrameWriter::new(wr, codec);
    let body = reader.expect(Kind::Hello, SYNC_IDLE_TIMEOUT).await?;
    let hello = match Hello::decode(&body) {
        Ok(h) => h,
        Err(e) => {
            let _ = writer.send(Kind::Refuse, e.to_string().as_bytes()).await;
            shard.borrow_mut().sync.frames_refused += 1;
            return Err(e);
        }
    };
    let refused = refusal(&shard.borrow(), &hello, leaf.as_ref());
    if let Some(reason) = refused {
        let _ = writer.send(Kind::Refuse, reason.as_bytes()).await;
        writer.shutdown().await;
        return Err(SyncError::Refused(reason));
    }
    discover(shard, &hello.from_site, hello.shards);
    // What the dialing shard owns: only its keys' ops and states go to it.
    let filter = crate::slot::SlotSet::from_ranges(&hello.slots);
    let accepted = {
        let mut s = shard.borrow_mut();
        let now = s.now_ms();
        s.accept_hello(&hello, now)?
    };
    let super::protocol::Accepted {
        peer,
        generation,
        welcome,
        complete,
        why,
    } = accepted;
    if welcome.mode == Mode::FullSync {
        tracing::info!(peer = %hello.from_site, reason = why, complete, "full sync chosen");
    }
    tracing::info!(peer = %hello.from_site, mode = ?welcome.mode, "sync link from peer accepted");
    writer.send(Kind::Welcome, &welcome.encode()).await?;
    let closed = Rc::new(Cell::new(false));
    let closed_notify = Rc::new(Notify::new());
    let in_flight: Rc<RefCell<std::collections::VecDeque<(u64, u64)>>> = Rc::default();
    {
        let shard = shard.clone();
        let closed = closed.clone();
        let closed_notify = closed_notify.clone();
        let in_flight = in_flight.clone();
        let site = hello.from_site.clone();
        tokio::task::spawn_local(async move {
            let r = read_acks(&shard, reader, peer, generation, &in_flight).await;
            if let Err(e) = &r {
                tracing::info!(peer = %site, error = %e, "sync ack stream ended");
                if let Some(p) = shard.borrow_mut().sync.peers.get_mut(peer) {
                    if p.out_generation == generation {
                        p.last_error = e.to_string();
                    }
                }
            }
            closed.set(true);
            closed_notify.notify_one();
        });
    }
    let result = stream_ops(
        shard,
        &mut writer,
        peer,
        generation,
        &welcome,
        (!complete).then_some(&hello.delivered),
        &filter,
        &closed,
        &closed_notify,
        &in_flight,
    )
    .await;
    closed.set(true);
    {
        let mut s = shard.borrow_mut();
        if let Some(p) = s.sync.peers.get_mut(peer) {
            if p.out_generation == generation {
                p.outbound = LinkState::Down;
                if let Err(e) = &result {
                    p.last_error = e.to_string();
                }
            }
        }
    }
    writer.shutdown().await;
    result
}

/// Sends the full sync (if chosen) and then the op stream until the link ends.
#[allow(clippy::too_many_arguments)]
async fn stream_ops<W: tokio::io::AsyncWrite + Unpin>(
    shard: &ShardRc,
    writer: &mut FrameWriter<W>,
    peer: usize,
    generation: u64,
    welcome: &Welcome,
    peer_delivered: Option<&VersionVector>,
    filter: &crate::slot::SlotSet,
    closed: &Cell<bool>,
    closed_notify: &Notify,
    in_flight: &RefCell<std::collections::VecDeque<(u64, u64)>>,
) -> Result<(), SyncError> {
    // A dialer owning every slot gets every op (`Ops`); one owning some, those of its slots
    // (`OpsSparse`).
    let sparse = !filter.is_full();
    let mut next_seq = match welcome.mode {
        Mode::Resume { from_seq } => from_seq,
        Mode::FullSync => {
            set_outbound(shard, peer, generation, LinkState::FullSync);
            let seq = full_sync(shard, writer, peer_delivered, filter, closed).await?;
            shard.borrow_mut().full_sync_sent(peer);
            seq + 1
        }
    };
    set_outbound(shard, peer, generation, LinkState::Up);
    let new_ops = shard.borrow().sync.new_ops.clone();
    let mut body: Vec<u8> = Vec::new();
    let mut last_retired_check = std::time::Instant::now();
    let mut last_ping = std::time::Instant::now();
    loop {
        if closed.get() || shard.borrow().shutting_down {
            return Ok(());
        }
        if shard
            .borrow()
            .sync
            .peers
            .get(peer)
            .is_none_or(|p| p.out_generation != generation)
        {
            return Err(SyncError::Refused(
                "replaced by a newer link from the peer".into(),
            ));
        }
        if last_retired_check.elapsed() >= KEEPALIVE {
            last_retired_check = std::time::Instant::now();
            let behind = {
                let mut s = shard.borrow_mut();
                let now = s.now_ms();
                s.behind_on_retired(peer, now)
            };
            if behind {
                return Err(SyncError::Refused(
                    "the peer lacks ops of a retired life that this site holds: reconnect for a full sync".into(),
                ));
            }
        }
        // Created before looking, so that an op appended after the look still wakes us.
        let notified = new_ops.notified();
        let sent = {
            let mut s = shard.borrow_mut();
            let batch = next_ops_batch(&mut s, next_seq, &mut body, filter)?;
            if batch.is_none() {
                s.sync.wait_for_ops();
            }
            batch.map(|(last_seq, first_ms)| {
                in_flight.borrow_mut().push_back((last_seq, first_ms));
                last_seq
            })
        };
        match sent {
            Some(last) => {
                writer.queue(if sparse { Kind::OpsSparse } else { Kind::Ops }, &body);
                writer.flush().await?;
                next_seq = last + 1;
                note_out_bytes(shard, peer, writer);
            }
            None => {
                // Caught up: every PROMISE_INTERVAL, busy or idle, a Ping (the keepalive too)
                // states this shard's clock when every op it issued has been sent.
                let wait = PROMISE_INTERVAL.saturating_sub(last_ping.elapsed());
                if wait.is_zero() {
                    let promise = promise(&mut shard.borrow_mut(), next_seq);
                    let body = promise.map(|h| h.0.to_le_bytes());
                    writer
                        .send(Kind::Ping, body.as_ref().map_or(&[][..], |b| &b[..]))
                        .await?;
                    note_out_bytes(shard, peer, writer);
                    last_ping = std::time::Instant::now();
                    continue;
                }
                tokio::select! {
                    () = notified => {}
                    () = closed_notify.notified() => {}
                    () = tokio::time::sleep(wait) => {}
                }
            }
        }
    }
}

/// This shard's promise to a peer whose stream is sent up to `next_seq - 1`: an hlc that no
/// op it issues later reaches or goes below (its clock, moved up to the wall clock), or
/// `None` while an op it issued is not sent yet. Every later `XADD *` here generates an ID
/// at or above the promise's ms (`cmd::stream` takes the clock's ms), which is what the
/// peer's stable stream ID rests on (`SyncState::stable_hlc`).
fn promise(s: &mut Shard, next_seq: u64) -> Option<meridian_crdt::Hlc> {
    if s.seq >= next_seq {
        return None;
    }
    let now = s.now_ms();
    // Never ahead of the wall clock, so the skew check cannot refuse it.
    let _ = s
        .clock
        .observe(meridian_crdt::Hlc::from_parts(now, 0), now, 0);
    Some(s.clock.last())
}

/// Fills `body` with the next `Ops` frame of this shard's stream from `next_seq` (an
/// `OpsSparse` one, of the ops of keys in `filter`, when `filter` is not every slot): the ops
/// written to the log (`Persist::stream_limit`), from the in-memory op log or else the log
/// segments on disk, `BATCH_BYTES_MAX` of records at most. Returns the batch's last sequence
/// number and the physical ms of its first op's hlc (a lag sample once acked), or `None`
/// when nothing is ready. `Refused` when the peer fell behind the backlog, or the log does
/// not continue at `next_seq`.
pub(super) fn next_ops_batch(
    s: &mut Shard,
    next_seq: u64,
    body: &mut Vec<u8>,
    filter: &crate::slot::SlotSet,
) -> Result<Option<(u64, u64)>, SyncError> {
    let mut limit = s.persist.stream_limit(s.seq);
    if limit < next_seq && s.seq >= next_seq {
        // Ops appended but not written yet (an expiry between batches): write them.
        s.persist.flush();
        limit = s.persist.stream_limit(s.seq);
    }
    if limit < next_seq {
        return Ok(None);
    }
    // The in-memory op log first; older ops from the log segments on disk.
    let from_disk = if s.oplog.since(next_seq).is_none() {
        match s.persist.read_own_since(next_seq, BATCH_BYTES_MAX) {
            Some(bytes) => Some(bytes),
            None => {
                return Err(SyncError::Refused(format!(
                    "peer fell behind the backlog (needs seq {next_seq}, oldest retained {})",
                    s.oplog.first_seq().unwrap_or(0)
                )));
            }
        }
    } else {
        None
    };
    let parts: Vec<&[u8]> = match &from_disk {
        Some(bytes) => vec![bytes.as_slice()],
        None => s.oplog.since(next_seq).unwrap_or_default(),
    };
    body.clear();
    if !filter.is_full() {
        // Only the ops of the dialer's slots (`OpsSparse`): the header says which span of
        // sequence numbers the batch covers, and the hlc at its end.
        let keep = |key: &[u8]| filter.contains_key(key);
        body.resize(meridian_syncer::msg::SPARSE_HEADER_BYTES, 0);
        let b = oplog::copy_to_wire_filtered(&parts, body, BATCH_BYTES_MAX, limit, &keep);
        if b.first_seq != next_seq {
            return Err(SyncError::Refused(format!(
                "op log does not continue at seq {next_seq}"
            )));
        }
        let mut header = Vec::with_capacity(meridian_syncer::msg::SPARSE_HEADER_BYTES);
        meridian_syncer::SparseHeader {
            origin: b.origin,
            incarnation: s.sync.incarnation,
            first_seq: b.first_seq,
            last_seq: b.last_seq,
            last_hlc: b.last_hlc.0,
            count: b.count,
        }
        .encode_into(&mut header);
        if let Some(slot) = body.get_mut(..header.len()) {
            slot.copy_from_slice(&header);
        }
        return Ok(Some((b.last_seq, b.first_hlc.physical_ms())));
    }
    OpsHeader {
        origin: s.replica,
        incarnation: s.sync.incarnation,
        first_seq: next_seq,
        count: 0,
    }
    .encode_into(body);
    let batch = oplog::copy_to_wire_upto(&parts, body, BATCH_BYTES_MAX, limit);
    if batch.count == 0 || batch.first_seq != next_seq {
        return Err(SyncError::Refused(format!(
            "op log does not continue at seq {next_seq}"
        )));
    }
    // Patch the origin (a life's) and the count now that they are known.
    if let Some(slot) = body.get_mut(..4) {
        slot.copy_from_slice(&batch.origin.0.to_le_bytes());
    }
    if let Some(slot) = body.get_mut(20..24) {
        slot.copy_from_slice(&batch.count.to_le_bytes());
    }
    Ok(Some((batch.last_seq, batch.first_hlc.physical_ms())))
}

fn set_outbound(shard: &ShardRc, peer: usize, generation: u64, state: LinkState) {
    if let Some(p) = shard.borrow_mut().sync.peers.get_mut(peer) {
        if p.out_generation == generation {
            p.outbound = state;
        }
    }
}

fn note_out_bytes<W>(shard: &ShardRc, peer: usize, writer: &FrameWriter<W>) {
    if let Some(p) = shard.borrow_mut().sync.peers.get_mut(peer) {
        p.out_wire_bytes = writer.wire_bytes;
        p.out_raw_bytes = writer.raw_bytes;
    }
}

/// Full sync: the state of every key holding a stamp `peer_delivered` does not cover (a
/// delta), or of every key (`None`: complete), of the dialer's slots (`filter`), in chunks,
/// one borrow of the shard per chunk, after this shard's causal context. Returns the sequence number it began at.
///
/// The keyspace is walked by bucket cursor (`FullSyncCursor`), not from a list of key names
/// taken at the start: nothing is copied up front, so starting a full sync costs no pause
/// proportional to the key count, and each borrow visits at most
/// `FULL_SYNC_CHUNK_BUCKETS_MAX` buckets.
async fn full_sync<W: tokio::io::AsyncWrite + Unpin>(
    shard: &ShardRc,
    writer: &mut FrameWriter<W>,
    peer_delivered: Option<&VersionVector>,
    filter: &crate::slot::SlotSet,
    closed: &Cell<bool>,
) -> Result<u64, SyncError> {
    // Every key that exists now; keys created later are created by ops after `seq`, which
    // the stream sends (or by other origins, whose own links send them). The context is
    // taken with it: every write it covers is in the states sent, or was removed here.
    let begin = shard.borrow().full_sync_begin_out(peer_delivered.is_none());
    let seq = begin.seq;
    writer.send(Kind::FullSyncBegin, &begin.encode()).await?;
    let mut sent = 0u64;
    let mut body = Vec::new();
    let mut cursor = FullSyncCursor::default();
    loop {
        if closed.get() {
            return Err(SyncError::Refused("link closed during full sync".into()));
        }
        let (n, chunk_seq, done) = {
            let s = shard.borrow();
            let (n, done) = fill_chunk(&s, &mut cursor, peer_delivered, filter, &mut body);
            (n, s.seq, done)
        };
        if n > 0 {
            // The states carry every op up to `chunk_seq`: they leave once those are written.
            wait_own_written(shard, chunk_seq).await;
            writer.send(Kind::FullSyncChunk, &body).await?;
            sent += u64::from(n);
        }
        if done {
            break;
        }
        // Let clients run between chunks.
        tokio::task::yield_now().await;
    }
    // A complete full sync names the keys this shard evicted and holds no write of since
    // (docs/conflicts.md §18): the receiver keeps its copies of those, where it would take
    // any other key not sent for removed here. Taken after the walk: a key evicted during it
    // is named too (and may have been sent as a state before, which is merged as usual).
    if peer_delivered.is_none() {
        let marks: Vec<(u16, meridian_crdt::SmallBytes)> = {
            let s = shard.borrow();
            s.evict
                .evicted
                .keys()
                .filter(|(_, key)| filter.contains_key(key))
                .cloned()
                .collect()
        };
        let mut chunk = Vec::new();
        for part in marks.chunks(FULL_SYNC_CHUNK_KEYS) {
            chunk.clear();
            chunk.extend_from_slice(&(part.len() as u32).to_le_bytes());
            for (db, key) in part {
                super::apply::encode_chunk_evicted(&mut chunk, *db, key);
            }
            writer.send(Kind::FullSyncChunk, &chunk).await?;
        }
        if !marks.is_empty() {
            tracing::info!(keys = marks.len(), "full sync named the keys evicted here");
        }
    }
    // The FUNCTION library register (every name's last change, deletions included), in
    // chunks of at most FULL_SYNC_CHUNK_KEYS entries.
    let chunks: Vec<Vec<u8>> = {
        let s = shard.borrow();
        let entries: Vec<_> = s.scripting.register.iter().collect();
        entries
            .chunks(FULL_SYNC_CHUNK_KEYS)
            .map(|part| {
                let mut b = Vec::new();
                b.extend_from_slice(&(part.len() as u32).to_le_bytes());
                for (name, e) in part {
                    super::apply::encode_chunk_library(&mut b, name, e.stamp, e.code.as_deref());
                }
                b
            })
            .collect()
    };
    for chunk in chunks {
        writer.send(Kind::FullSyncChunk, &chunk).await?;
    }
    if cursor.restarts > 0 {
        tracing::info!(
            restarts = cursor.restarts,
            "full sync walk restarted after rehashes ended under it (keys sent again)"
        );
    }
    wait_own_written(shard, seq).await;
    writer
        .send(Kind::FullSyncEnd, &FullSyncEnd { seq, keys: sent }.encode())
        .await?;
    tracing::info!(keys = sent, seq, "full sync sent");
    Ok(seq)
}

/// Fills `body` with the next full-sync chunk (`n:u32` then the keys, `FullSyncChunk`'s
/// body) from where `cursor` stands: the states of keys of the dialer's slots (`filter`)
/// holding a stamp `peer_delivered` does not cover, or of every such key (`None`), at most
/// `FULL_SYNC_CHUNK_KEYS` keys or about `FULL_SYNC_CHUNK_BYTES`. Returns the keys put in and
/// whether the walk is complete.
pub(super) fn fill_chunk(
    s: &Shard,
    cursor: &mut FullSyncCursor,
    peer_delivered: Option<&VersionVector>,
    filter: &crate::slot::SlotSet,
    body: &mut Vec<u8>,
) -> (u32, bool) {
    body.clear();
    body.extend_from_slice(&[0u8; 4]);
    let mut n = 0u32;
    let done = cursor.walk(s, |db, e| {
        if n as usize >= FULL_SYNC_CHUNK_KEYS || body.len() >= FULL_SYNC_CHUNK_BYTES {
            return false;
        }
        if filter.contains_key(&e.key)
            && peer_delivered.is_none_or(|d| !d.dominates(&e.state.observed().stamps))
        {
            super::apply::encode_chunk_entry(body, db as u16, &e.key, &e.state);
            n += 1;
        }
        true
    });
    if let Some(slot) = body.get_mut(..4) {
        slot.copy_from_slice(&n.to_le_bytes());
    }
    (n, done)
}

/// Buckets one full-sync chunk visits at most (in one borrow of the shard), whether or not
/// their keys are sent: a delta sync that skips most keys still yields to clients this often.
pub const FULL_SYNC_CHUNK_BUCKETS_MAX: usize = 16 * 1024;

/// Where a full sync's walk of the keyspace stands: a database and a bucket of its
/// `KeyTable`, with the table's layout generation when the position was taken.
///
/// The walk must visit every entry present from its start to its end (a key it missed would
/// be missing at the peer: keys are sent once, not by ops). Within one layout generation
/// entries stay in their buckets; across the start of a rehash, or the end of one while the
/// position was in the main table, the position keeps its meaning (`KeyTable::scan_resume`);
/// when a rehash ends while it was in the old table, the walk restarts that database from
/// bucket 0 (states are sent again, which a merge absorbs). Restarts are bounded: a rehash
/// moves into a table at least twice the size of the one it fills, and tables never shrink,
/// so a database restarts at most about log2 of its final size times.
#[derive(Debug, Default)]
pub(super) struct FullSyncCursor {
    db: usize,
    bucket: usize,
    /// The table's generation when `bucket` was taken (`None`: not taken yet).
    generation: Option<u64>,
    restarts: u64,
}

impl FullSyncCursor {
    /// Visits entries from the position on, calling `visit(db, entry)` until it returns
    /// false (the entry is visited again next time), `FULL_SYNC_CHUNK_BUCKETS_MAX` buckets
    /// were visited, or every database was walked. Returns whether the walk is complete.
    fn walk(
        &mut self,
        s: &Shard,
        mut visit: impl FnMut(usize, &crate::keyspace::Entry) -> bool,
    ) -> bool {
        let mut visits_left = FULL_SYNC_CHUNK_BUCKETS_MAX;
        while let Some(d) = s.dbs.get(self.db) {
            let table = &d.table;
            let n_buckets = table.num_buckets();
            let mut at = match self.generation {
                None => 0,
                Some(generation) => match table.scan_resume(generation, self.bucket, u64::MAX) {
                    Ok(i) => i,
                    Err(_) => {
                        self.restarts += 1;
                        0
                    }
                },
            };
            while at < n_buckets {
                if visits_left == 0 {
                    self.bucket = at;
                    self.generation = Some(table.generation());
                    return false;
                }
                if let Some(e) = table.get_bucket(at) {
                    if !visit(self.db, e) {
                        self.bucket = at;
                        self.generation = Some(table.generation());
                        return false;
                    }
                }
                visits_left -= 1;
                at += 1;
            }
            self.db += 1;
            self.bucket = 0;
            self.generation = None;
        }
        true
    }
}

/// Waits until this shard's own ops up to `seq` are written to the log (at once without a
/// log): a peer holds no op a killed process could lose (docs/persistence.md §6).
async fn wait_own_written(shard: &ShardRc, seq: u64) {
    loop {
        {
            let mut s = shard.borrow_mut();
            s.persist.flush();
            if s.persist.stream_limit(seq) >= seq || s.shutting_down {
                return;
            }
        }
        // A failing disk stalls the stream: retry now and then.
        tokio::time::sleep(WRITE_RETRY).await;
    }
}

/// Reads the dialer's acks (and nothing else) until the link ends.
async fn read_acks<R: tokio::io::AsyncRead + Unpin>(
    shard: &ShardRc,
    mut reader: FrameReader<R>,
    peer: usize,
    generation: u64,
    in_flight: &RefCell<std::collections::VecDeque<(u64, u64)>>,
) -> Result<(), SyncError> {
    loop {
        let f = reader.read(SYNC_IDLE_TIMEOUT).await?;
        if f.kind != Kind::Ack {
            return Err(SyncError::Unexpected {
                got: f.kind.name(),
                want: "Ack",
            });
        }
        let ack = Ack::decode(&f.body)?;
        let mut s = shard.borrow_mut();
        let Some(p) = s.sync.peers.get(peer) else {
            return Ok(());
        };
        if p.out_generation != generation {
            return Ok(());
        }
        let now = s.now_ms();
        s.on_ack(peer, generation, ack, &mut in_flight.borrow_mut(), now);
    }
}

/// Which failed dials of one peer are logged (`DOWN_LOG_INTERVAL`).
#[derive(Debug, Default)]
struct DownLog {
    /// Failed dials in a row.
    failures: u64,
    /// Failures not logged since the last line.
    unlogged: u64,
    /// When the last line was logged and the error it gave.
    last: Option<(std::time::Instant, String)>,
}

impl DownLog {
    /// Counts a failed dial; `Some((failures in a row, failures not logged before this one))`
    /// when it is to be logged: the first, one whose error differs from the last line's, one
    /// that ends a link that was up (`was_up`), and one `DOWN_LOG_INTERVAL` after the last line.
    fn failed(&mut self, error: &str, now: std::time::Instant, was_up: bool) -> Option<(u64, u64)> {
        if was_up {
            *self = DownLog::default();
        }
        self.failures += 1;
        let log = match &self.last {
            None => true,
            Some((at, e)) => e != error || now.duration_since(*at) >= DOWN_LOG_INTERVAL,
        };
        if !log {
            self.unlogged += 1;
            return None;
        }
        let unlogged = std::mem::take(&mut self.unlogged);
        self.last = Some((now, error.to_string()));
        Some((self.failures, unlogged))
    }
}

/// Dials peer `peer` for ever (until shutdown), with exponential backoff and jitter.
async fn dial_loop(shard: ShardRc, peer: usize) {
    let mut backoff_ms = BACKOFF_MIN_MS;
    let mut down_log = DownLog::default();
    loop {
        {
            let s = shard.borrow();
            if s.shutting_down || s.sync.peers.get(peer).is_none_or(|p| p.removed) {
                return;
            }
        }
        let started = std::time::Instant::now();
        let result = dial_once(&shard, peer).await;
        let site = {
            let mut s = shard.borrow_mut();
            let Some(p) = s.sync.peers.get_mut(peer) else {
                return;
            };
            p.inbound = LinkState::Down;
            if let Err(e) = &result {
                p.last_error = e.to_string();
            }
            p.site.clone()
        };
        let was_up = started.elapsed() > Duration::from_secs(10);
        if was_up {
            backoff_ms = BACKOFF_MIN_MS;
        }
        if let Err(e) = &result {
            let now = std::time::Instant::now();
            if let Some((failures, unlogged)) = down_log.failed(&e.to_string(), now, was_up) {
                if failures == 1 {
                    tracing::warn!(peer = %site, error = %e, "sync link to peer down");
                } else {
                    tracing::warn!(peer = %site, error = %e, failures, unlogged, "sync link to peer still down");
                }
            }
        } else {
            down_log = DownLog::default();
        }
        let jitter = rand::random::<u64>() % (backoff_ms / 2 + 1);
        tokio::time::sleep(Duration::from_millis(backoff_ms / 2 + jitter)).await;
        backoff_ms = (backoff_ms * 2).min(BACKOFF_MAX_MS);
    }
}

async fn dial_once(shard: &ShardRc, peer: usize) -> Result<(), SyncError> {
    let (addr, site, tls, to_shard) = {
        let mut s = shard.borrow_mut();
        let tls = s.sync.tls.clone();
        let Some(p) = s.sync.peers.get_mut(peer) else {
            return Ok(());
        };
        p.inbound = LinkState::Connecting;
        (p.addr.clone(), p.site.clone(), tls, p.shard)
    };
    // A name is resolved on every dial: a peer that moved is found at its new address.
    let mut tcp =
        match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr.as_str())).await {
            Ok(r) => r?,
            Err(_) => {
                return Err(SyncError::Io(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("connect to {addr} timed out"),
                )));
            }
        };
    let _ = tcp.set_nodelay(true);
    {
        use tokio::io::AsyncWriteExt as _;
        tcp.write_all(&meridian_syncer::msg::preamble(to_shard))
            .await?;
    }
    match tls {
        Some(ctx) => {
            let stream = tokio::time::timeout(SYNC_IDLE_TIMEOUT, ctx.connect(&site, tcp))
                .await
                .map_err(|_| SyncError::Idle(SYNC_IDLE_TIMEOUT.as_millis() as u64))??;
            receive_ops(shard, peer, stream).await
        }
        None => receive_ops(shard, peer, tcp).await,
    }
}

/// The receiver role on a link this shard dialed.
async fn receive_ops<S: Io>(shard: &ShardRc, peer: usize, stream: S) -> Result<(), SyncError> {
    let (hello, frame_max, site) = {
        let s = shard.borrow();
        let (Some(hello), Some(p)) = (s.hello_to(peer), s.sync.peers.get(peer)) else {
            return Ok(());
        };
        (
            hello,
            s.config.sync_frame_bytes_max as usize,
            p.site.clone(),
        )
    };
    let (rd, wr) = tokio::io::split(stream);
    let mut reader: FrameReader<ReadHalf<S>> = FrameReader::new(rd, frame_max);
    let mut writer: FrameWriter<WriteHalf<S>> = FrameWriter::new(wr, meridian_syncer::Codec::None);
    writer.send(Kind::Hello, &hello.encode()).await?;
    let f = reader.read(SYNC_IDLE_TIMEOUT).await?;
    let welcome = match f.kind {
        Kind::Welcome => Welcome::decode(&f.body)?,
        Kind::Refuse => return Err(SyncError::RefusedByPeer(decode_refuse(&f.body))),
        other => {
            return Err(SyncError::Unexpected {
                got: other.name(),
                want: "Welcome",
            });
        }
    };
    if welcome.site != site {
        return Err(SyncError::Refused(format!(
            "dialed site {site:?} but it answered as {:?}",
            welcome.site
        )));
    }
    if welcome.shard != hello.to_shard || welcome.shards == 0 || welcome.shard >= welcome.shards {
        return Err(SyncError::Refused(format!(
            "dialed shard {} of site {site:?} but it answered as shard {} of {}",
            hello.to_shard, welcome.shard, welcome.shards
        )));
    }
    discover(shard, &site, welcome.shards);
    // What the sender owns: a full sync sends keys of these slots only.
    let sender_slots = crate::slot::SlotSet::from_ranges(&welcome.slots);
    shard.borrow_mut().take_welcome(peer, &welcome)?;
    tracing::info!(peer = %site, mode = ?welcome.mode, "sync link to peer up");
    let incarnation = welcome.incarnation;
    let mut reorder: BTreeMap<u64, super::apply::Received> = BTreeMap::new();
    let mut full: Option<super::apply::FullSyncIn> = None;
    // Ends the full sync being received (if any) when this link ends, however it ends, so
    // that the links waiting for it go on.
    let _receiving = ReceivingGuard { shard, peer };
    // Keys received in an unfiltered full sync this site asked for (a rejoin): a sender of
    // an earlier version does not say it sends every key.
    let asked_all = hello.want_full && hello.delivered.is_empty();
    let mut last_ack = std::time::Instant::now();
    loop {
        let f = reader.read(SYNC_IDLE_TIMEOUT).await?;
        // Ops of an origin another peer's full sync covers, and another full sync, wait
        // until the full sync being received ends.
        let mut received = match f.kind {
            Kind::Ops | Kind::OpsSparse => {
                Some(decode_ops(shard, peer, incarnation, f.kind, &f.body)?)
            }
            _ => None,
        };
        let frame_waits = |s: &Shard| match (f.kind, &received) {
            (Kind::Ops | Kind::OpsSparse, Some(r)) => s.full_sync_waits(peer, Some(&r.records)),
            (Kind::FullSyncBegin, _) => s.full_sync_waits(peer, None),
            _ => false,
        };
        while frame_waits(&shard.borrow()) {
            let ended = shard.borrow().sync.receiving_ended.clone();
            let notified = ended.notified();
            if !frame_waits(&shard.borrow()) {
                break;
            }
            tokio::select! {
                () = notified => {}
                () = tokio::time::sleep(KEEPALIVE) => {
                    send_ack(shard, peer, incarnation, &mut writer).await?;
                    last_ack = std::time::Instant::now();
                }
            }
        }
        let mut ack_now = false;
        {
            let mut guard = shard.borrow_mut();
            let s = &mut *guard;
            let now = s.now_ms();
            let databases = s.dbs.len();
            if s.sync.peers.get(peer).is_none_or(|p| p.removed) {
                return Ok(());
            }
            match f.kind {
                Kind::Ops | Kind::OpsSparse => {
                    if full.is_some() {
                        return Err(SyncError::Unexpected {
                            got: f.kind.name(),
                            want: "FullSyncEnd",
                        });
                    }
                    let Some(received) = received.take() else {
                        return Ok(());
                    };
                    let applied = s.sync.peers.get(peer).map_or(0, |p| p.in_applied_seq);
                    if received.first_seq > applied.saturating_add(1) {
                        if reorder.len() >= REORDER_BATCHES_MAX {
                            return Err(SyncError::Refused(format!(
                                "{REORDER_BATCHES_MAX} batches out of order (gap after seq {applied})"
                            )));
                        }
                        reorder.insert(received.first_seq, received);
                    } else {
                        s.apply_received(peer, &received, now);
                        // Batches held for this gap may apply now.
                        while let Some(entry) = reorder.first_entry() {
                            let applied = s.sync.peers.get(peer).map_or(0, |p| p.in_applied_seq);
                            if *entry.key() > applied.saturating_add(1) {
                                break;
                            }
                            let held = entry.remove();
                            s.apply_received(peer, &held, now);
                        }
                        ack_now = true;
                    }
                }
                Kind::FullSyncBegin => {
                    let begin = FullSyncBegin::decode(&f.body)?;
                    full = Some(s.begin_full_sync_in(peer, begin, asked_all, sender_slots.clone()));
                }
                Kind::FullSyncChunk => {
                    let Some(sync) = full.as_mut() else {
                        return Err(SyncError::Unexpected {
                            got: "FullSyncChunk",
                            want: "FullSyncBegin",
                        });
                    };
                    let entries = match super::apply::decode_chunk(&f.body, databases) {
                        Ok(e) => e,
                        Err(e) => {
                            s.sync.frames_refused += 1;
                            return Err(e);
                        }
                    };
                    s.apply_chunk(sync, &entries, now);
                }
                Kind::FullSyncEnd => {
                    let end = FullSyncEnd::decode(&f.body)?;
                    let Some(sync) = full.take().filter(|sync| sync.seq == end.seq) else {
                        return Err(SyncError::Refused(
                            "FullSyncEnd does not match its begin".into(),
                        ));
                    };
                    s.end_full_sync_in(sync, now);
                    tracing::info!(peer = %site, keys = end.keys, seq = end.seq, "full sync received");
                    ack_now = true;
                }
                Kind::Ping => {
                    // A sender's promise (an empty body: none, or a sender of an earlier
                    // version) counts once every op it sent before is applied here.
                    if let Ok(b) = <[u8; 8]>::try_from(&f.body[..]) {
                        if reorder.is_empty() {
                            let h = meridian_crdt::Hlc(u64::from_le_bytes(b));
                            s.take_promise(peer, h, now)?;
                        }
                    }
                }
                other => {
                    return Err(SyncError::Unexpected {
                        got: other.name(),
                        want: "Ops",
                    });
                }
            }
            if let Some(p) = s.sync.peers.get_mut(peer) {
                p.in_wire_bytes = reader.wire_bytes;
                p.in_raw_bytes = reader.raw_bytes;
            }
        }
        if ack_now || last_ack.elapsed() >= KEEPALIVE {
            send_ack(shard, peer, incarnation, &mut writer).await?;
            last_ack = std::time::Instant::now();
        }
    }
}

/// Decodes and validates an `Ops` body from peer `peer` (`decode_batch`); a refused frame is
/// counted.
fn decode_ops(
    shard: &ShardRc,
    peer: usize,
    incarnation: u64,
    kind: Kind,
    body: &[u8],
) -> Result<super::apply::Received, SyncError> {
    let mut guard = shard.borrow_mut();
    let s = &mut *guard;
    let now = s.now_ms();
    let lives = s.sync.peers.get(peer).map_or(&[][..], |p| &p.lives[..]);
    let (databases, skew) = (s.dbs.len(), s.config.sync_clock_skew_ms_max);
    let decoded = if kind == Kind::OpsSparse {
        super::apply::decode_sparse(body, lives, incarnation, databases, now, skew)
    } else {
        super::apply::decode_batch(body, lives, incarnation, databases, now, skew)
            .map(|(h, records)| super::apply::Received::dense(&h, records))
    };
    if decoded.is_err() {
        s.sync.frames_refused += 1;
    }
    decoded
}

/// Acks what this shard applied from peer `peer` and what it has delivered.
async fn send_ack<W: tokio::io::AsyncWrite + Unpin>(
    shard: &ShardRc,
    peer: usize,
    incarnation: u64,
    writer: &mut FrameWriter<W>,
) -> Result<(), SyncError> {
    let ack = shard.borrow().ack_to(peer, incarnation);
    writer.send(Kind::Ack, &ack.encode()).await
}

/// Ends the full sync being received from `peer` when the link that carried it ends.
struct ReceivingGuard<'a> {
    shard: &'a ShardRc,
    peer: usize,
}

impl Drop for ReceivingGuard<'_> {
    fn drop(&mut self) {
        if let Ok(mut s) = self.shard.try_borrow_mut() {
            s.end_receiving(self.peer);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sync::gc::tests::run;
    use std::collections::HashSet;

    /// A peer down for long is logged once per interval with the failures since; a new
    /// reason, or the end of a link that was up, is logged at once.
    #[test]
    fn a_peer_that_stays_down_is_logged_once_per_interval() {
        let t0 = std::time::Instant::now();
        let mut log = DownLog::default();
        let refused = "i/o: Connection refused";
        assert_eq!(log.failed(refused, t0, false), Some((1, 0)));
        let mut logged = 0;
        // One dial a second for ten minutes: the first line, then one a minute.
        for s in 1..600u64 {
            if log
                .failed(refused, t0 + Duration::from_secs(s), false)
                .is_some()
            {
                logged += 1;
            }
        }
        assert_eq!(logged, 9);
        // Just before the interval: nothing; at it: the failures since the last line.
        let at = t0 + Duration::from_secs(540);
        assert_eq!(
            log.failed(
                refused,
                at + DOWN_LOG_INTERVAL - Duration::from_millis(1),
                false
            ),
            None
        );
        assert_eq!(
            log.failed(refused, at + DOWN_LOG_INTERVAL, false),
            Some((602, 60))
        );
        // Another reason is logged at once.
        let timeout = "i/o: connect timed out";
        let later = at + DOWN_LOG_INTERVAL + Duration::from_secs(1);
        assert_eq!(log.failed(timeout, later, false), Some((603, 0)));
        assert_eq!(log.failed(timeout, later, false), None);
        // A link that was up and ended starts again from the first failure.
        assert_eq!(log.failed(timeout, later, true), Some((1, 0)));
    }

    /// The full-sync walk visits every key present from its start to its end, in two
    /// databases, while writes between chunks grow the tables through several rehashes and
    /// remove keys; it ends, and restarts only when a rehash ended under it.
    #[test]
    fn the_walk_visits_every_key_present_throughout_while_tables_grow() {
        for seed in 1..=8u64 {
            let config = crate::config::Config {
                appendonly: false,
                ..crate::config::Config::default()
            };
            let mut shard = Shard::new(0, config, 1_000);
            let mut rng = seed;
            let mut next = move || {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                rng
            };
            let mut present: Vec<(usize, String)> = Vec::new();
            for db in [0usize, 3] {
                for i in 0..(500 + next() % 1500) {
                    let k = format!("base{i}");
                    run(&mut shard, db, &["SET", &k, "v"]);
                    present.push((db, k));
                }
            }
            let mut cursor = FullSyncCursor::default();
            let mut seen: HashSet<(usize, Vec<u8>)> = HashSet::new();
            let mut added = 0u64;
            let generations =
                |shard: &Shard| [0usize, 3].map(|db| shard.dbs[db].table.generation());
            let started = generations(&shard);
            let mut calls = 0;
            loop {
                calls += 1;
                assert!(calls < 100_000, "the walk ends");
                let mut budget = 1 + next() % 50;
                let done = cursor.walk(&shard, |db, e| {
                    if budget == 0 {
                        return false;
                    }
                    budget -= 1;
                    seen.insert((db, e.key.to_vec()));
                    true
                });
                if done {
                    break;
                }
                // Writes between chunks: growth in both databases, and removals of keys
                // added during the walk.
                for _ in 0..next() % 40 {
                    let db = if next() % 2 == 0 { 0 } else { 3 };
                    run(&mut shard, db, &["SET", &format!("new{added}"), "v"]);
                    added += 1;
                }
                for _ in 0..next() % 10 {
                    let victim = format!("new{}", next() % (added + 1));
                    run(&mut shard, (next() % 2 * 3) as usize, &["DEL", &victim]);
                }
            }
            for (db, k) in &present {
                assert!(
                    seen.contains(&(*db, k.as_bytes().to_vec())),
                    "seed {seed}: db {db} key {k} missed"
                );
            }
            // Layout changes under the walk: a rehash start and end each count 1.
            let changes: u64 = generations(&shard)
                .iter()
                .zip(started)
                .map(|(now, then)| now - then)
                .sum();
            assert!(
                changes >= 4,
                "seed {seed}: rehashes started and ended under the walk"
            );
            assert!(
                cursor.restarts <= changes / 2,
                "seed {seed}: {} restarts for {changes} layout changes",
                cursor.restarts
            );
        }
    }
}
