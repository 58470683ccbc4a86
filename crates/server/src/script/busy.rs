//! A script that runs long, and the clients that wait meanwhile (script.c's
//! `scriptInterrupt`, networking.c's `processEventsWhileBlocked`).
//!
//! A script holds the shard for its whole run, so no other task of the shard's runtime runs
//! until it returns. Past `busy-reply-threshold`, the hook (every `HOOK_INSTRUCTIONS`
//! instructions) serves the other connections from a side path that never yields to the
//! runtime: it peeks at each idle connection's socket, parses the complete commands at its
//! head, and answers them in place, after the checks `cmd::execute` makes (unknown command,
//! arity, -NOAUTH for a client that has not authenticated, -NOPERM for what its ACL user may
//! not run): SCRIPT KILL and FUNCTION KILL set the kill flag, FUNCTION STATS reports the run,
//! SHUTDOWN NOSAVE ends the process, MULTI and DISCARD run and EXEC answers EXECABORT (the
//! change reaches the connection's transaction through `ClientShared::busy_txn`), and
//! everything else gets Redis's BUSY error, flagging an open transaction. AUTH and HELLO run
//! here too, as in Redis (clients such as go-redis, Lettuce and redis-py 8 open every
//! connection with HELLO, and password clients with AUTH): they change only the connection's
//! shared state (`ClientShared`: user, protocol, name), which its task reads; a connection
//! accepted during the script keeps that state, and the id HELLO reported, in its `EarlyConn`
//! until its task starts. Only the bytes of commands it answered are read off the socket; the
//! other commands Redis would run during a busy script but that need the connection's task
//! (WATCH, UNWATCH, QUIT, RESET...) stay in the socket and run once the script returns, as
//! do the bytes of a connection whose task holds a partial command or unwritten output.
//!
//! Sockets are reached through the weak handle each connection leaves in its
//! `ClientShared`; reads and writes are plain non-blocking system calls, so the runtime's
//! readiness state is untouched (a connection task simply finds fewer bytes later).

use smallvec::SmallVec;

use crate::client::ClientShared;
use crate::cmd::table::{CommandSpec, Flags};
use crate::error::CmdError;
use crate::resp::parse::{ParseLimits, Parsed, Parser};
use crate::resp::reply::{Proto, Reply};
use crate::shard::Shard;
use crate::stream::ClientStream;

/// Bytes of a waiting connection's input the side path looks at per hook run.
pub const PEEK_BYTES_MAX: usize = 16 * 1024;
/// New connections the side path accepts during one long script (the rest wait in the
/// listen backlog until it ends).
pub const EARLY_CONNECTIONS_MAX: usize = 256;

/// Redis's BUSY errors (shared.slowevalerr / shared.slowscripterr).
pub const BUSY_EVAL: &str =
    "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.";
pub const BUSY_FUNCTION: &str =
    "BUSY Redis is busy running a script. You can only call FUNCTION KILL or SHUTDOWN NOSAVE.";
pub const NOT_BUSY: &str = "NOTBUSY No scripts in execution right now.";
pub const UNKILLABLE: &str = "UNKILLABLE Sorry the script already executed write commands against the dataset. You can either wait the script termination or kill the server in a hard way using the SHUTDOWN NOSAVE command.";

/// What the other threads of the process see of scripts running past the threshold: a
/// connection on another thread gets BUSY while one runs, and its SCRIPT KILL or FUNCTION
/// KILL reaches the script through `kill` (the side path serves only the script's own
/// thread's connections). One relaxed load (`n`) per command when none runs.
#[derive(Debug, Default)]
pub struct BusyBoard {
    /// Scripts of the process running past the threshold now.
    pub n: std::sync::atomic::AtomicUsize,
    /// Per shard thread of the process (by local index).
    pub shards: Vec<BusyFlags>,
}

/// One shard's script past the threshold.
#[derive(Debug, Default)]
pub struct BusyFlags {
    pub on: std::sync::atomic::AtomicBool,
    /// An EVAL script (else a function).
    pub eval: std::sync::atomic::AtomicBool,
    /// It wrote: unkillable.
    pub dirty: std::sync::atomic::AtomicBool,
    /// SCRIPT KILL / FUNCTION KILL from another thread, seen at the next hook run.
    pub kill: std::sync::atomic::AtomicBool,
    /// What FUNCTION STATS on another thread shows of it: set when it goes on the board,
    /// taken off with it (read only while a script is busy, never on the hot path).
    pub running: std::sync::Mutex<Option<RunningScript>>,
}

/// A busy script as FUNCTION STATS shows it.
#[derive(Debug, Clone)]
pub struct RunningScript {
    pub eval: bool,
    pub name: String,
    pub command: Vec<Vec<u8>>,
    pub started: std::time::Instant,
}

impl BusyBoard {
    pub fn new(shards: usize) -> BusyBoard {
        BusyBoard {
            n: std::sync::atomic::AtomicUsize::new(0),
            shards: (0..shards).map(|_| BusyFlags::default()).collect(),
        }
    }

    /// Whether some script of the process runs past the threshold.
    #[inline]
    pub fn any(&self) -> bool {
        self.n.load(std::sync::atomic::Ordering::Relaxed) > 0
    }

    /// The BUSY text for a command of another thread (None: no script is busy).
    pub fn busy_text(&self) -> Option<&'static str> {
        use std::sync::atomic::Ordering::Relaxed;
        let f = self.shards.iter().find(|f| f.on.load(Relaxed))?;
        Some(if f.eval.load(Relaxed) {
            BUSY_EVAL
        } else {
            BUSY_FUNCTION
        })
    }

    /// SCRIPT KILL (`eval`) or FUNCTION KILL from another thread: as `kill`.
    pub fn kill(&self, eval: bool) -> Result<(), &'static str> {
        use std::sync::atomic::Ordering::Relaxed;
        let Some(f) = self.shards.iter().find(|f| f.on.load(Relaxed)) else {
            return Err(NOT_BUSY);
        };
        if f.dirty.load(Relaxed) {
            return Err(UNKILLABLE);
        }
        let running_eval = f.eval.load(Relaxed);
        if eval && !running_eval {
            return Err(BUSY_FUNCTION);
        }
        if !eval && running_eval {
            return Err(BUSY_EVAL);
        }
        f.kill.store(true, Relaxed);
        Ok(())
    }
}

/// Publishes this shard's run on the board (the hook's view of it, every hook run).
fn post(shard: &mut Shard) {
    use std::sync::atomic::Ordering::Relaxed;
    let Some((board, i)) = shard.scripting.board.clone() else {
        return;
    };
    let Some(f) = board.shards.get(i) else {
        return;
    };
    let Some(run) = shard.scripting.run.as_mut() else {
        return;
    };
    if !f.on.load(Relaxed) {
        f.eval.store(run.eval, Relaxed);
        f.kill.store(false, Relaxed);
        *f.running.lock().unwrap_or_else(|e| e.into_inner()) = Some(RunningScript {
            eval: run.eval,
            name: run.name.clone(),
            command: run.caller_argv.clone(),
            started: run.started,
        });
        f.on.store(true, Relaxed);
        board.n.fetch_add(1, Relaxed);
    }
    f.dirty.store(run.write_dirty, Relaxed);
    if f.kill.swap(false, Relaxed) && !run.write_dirty {
        run.killed = true;
    }
}

/// Takes this shard's run off the board (the script ended).
pub fn unpost(shard: &mut Shard) {
    use std::sync::atomic::Ordering::Relaxed;
    let Some((board, i)) = shard.scripting.board.clone() else {
        return;
    };
    if let Some(f) = board.shards.get(i) {
        if f.on.swap(false, Relaxed) {
            f.kill.store(false, Relaxed);
            *f.running.lock().unwrap_or_else(|e| e.into_inner()) = None;
            board.n.fetch_sub(1, Relaxed);
        }
    }
}

/// Called by the hook: marks the run timed out once it passes the threshold, then serves the
/// other clients. Returns whether the script was killed.
pub fn interrupt(shard: &mut Shard) -> bool {
    let threshold = shard.config.busy_reply_threshold;
    let Some(run) = shard.scripting.run.as_mut() else {
        return false;
    };
    if !run.timed_out {
        let elapsed = run.started.elapsed().as_millis() as u64;
        if threshold == 0 || elapsed < threshold {
            return false;
        }
        run.timed_out = true;
        tracing::warn!(
            "Slow script detected: still in execution after {elapsed} milliseconds. You can try killing the script using the {} command. Script name is: {}.",
            if run.eval {
                "SCRIPT KILL"
            } else {
                "FUNCTION KILL"
            },
            run.name
        );
    }
    if shard.scripting.stop.as_ref().is_some_and(|s| *s.borrow()) {
        shutdown_now(shard);
    }
    post(shard);
    serve_waiting_clients(shard);
    let killed = shard.scripting.run.as_ref().is_some_and(|r| r.killed);
    if killed {
        tracing::warn!("Lua script killed by user with SCRIPT KILL.");
    }
    killed
}

/// SCRIPT KILL (`eval`) or FUNCTION KILL (`scriptKill`): the reply text, without '-' for
/// errors; `Ok` means the script will stop.
pub fn kill(shard: &mut Shard, eval: bool) -> Result<(), &'static str> {
    let Some(run) = shard.scripting.run.as_mut() else {
        return Err(NOT_BUSY);
    };
    if run.write_dirty {
        return Err(UNKILLABLE);
    }
    if eval && !run.eval {
        return Err(BUSY_FUNCTION);
    }
    if !eval && run.eval {
        return Err(BUSY_EVAL);
    }
    run.killed = true;
    Ok(())
}

/// FUNCTION STATS: the script running here, else a busy one of another shard thread (from
/// the process's board), as one Redis shows the one script it runs.
pub fn function_stats(shard: &Shard, out: &mut Reply) -> Result<(), &'static str> {
    let running = match &shard.scripting.run {
        Some(run) => Some(RunningScript {
            eval: run.eval,
            name: run.name.clone(),
            command: run.caller_argv.clone(),
            started: run.started,
        }),
        None => shard.scripting.board.as_ref().and_then(|(board, _)| {
            board.shards.iter().find_map(|f| {
                f.on.load(std::sync::atomic::Ordering::Relaxed)
                    .then(|| f.running.lock().unwrap_or_else(|e| e.into_inner()).clone())
                    .flatten()
            })
        }),
    };
    if running.as_ref().is_some_and(|r| r.eval) {
        return Err(BUSY_EVAL);
    }
    out.map(2);
    out.bulk(b"running_script");
    match running {
        None => out.null(),
        Some(run) => {
            out.map(3);
            out.bulk(b"name");
            out.bulk(run.name.as_bytes());
            out.bulk(b"command");
            out.array(run.command.len());
            for a in &run.command {
                out.bulk(a);
            }
            out.bulk(b"duration_ms");
            out.int(run.started.elapsed().as_millis() as i64);
        }
    }
    out.bulk(b"engines");
    out.map(1);
    out.bulk(super::library::ENGINE_NAME.as_bytes());
    out.map(2);
    out.bulk(b"libraries_count");
    out.int(shard.scripting.libraries.len() as i64);
    out.bulk(b"functions_count");
    out.int(shard.scripting.libraries.function_count() as i64);
    Ok(())
}

/// What the side path does with one command of a waiting client.
enum Action {
    /// Answered: these reply bytes.
    Reply(Vec<u8>),
    /// Left in the socket for the connection to run after the script.
    Defer,
    /// SHUTDOWN NOSAVE: the process ends.
    Exit,
}

/// The error line of a refused command, counted in errorstats as `execute` counts it.
fn error_reply(shard: &mut Shard, e: &CmdError) -> Vec<u8> {
    shard.stats.count_error(&e.code());
    let mut v = vec![b'-'];
    e.write_text(&mut v);
    v.extend_from_slice(b"\r\n");
    v
}

fn error_line(text: &str) -> Vec<u8> {
    let mut v = Vec::with_capacity(text.len() + 3);
    v.push(b'-');
    v.extend_from_slice(text.as_bytes());
    v.extend_from_slice(b"\r\n");
    v
}

/// Redis's `processCommand` for one command of a waiting client while a script runs long:
/// unknown commands and wrong arities get their errors, then authentication and the
/// client's ACL permissions are checked as `cmd::execute` checks them (an unauthenticated
/// client gets -NOAUTH, never SCRIPT KILL or SHUTDOWN NOSAVE), then the busy rules apply.
fn decide(
    shard: &mut Shard,
    who: &ClientShared,
    argv: &[&[u8]],
    proto: Proto,
    now_ms: u64,
) -> Action {
    // The cross-protocol guard closes the connection: its task does that after the script.
    if crate::cmd::is_cross_protocol(argv) {
        return Action::Defer;
    }
    let spec = match crate::cmd::resolve(crate::cmd::table(), argv) {
        Ok(spec) => spec,
        Err(e) => {
            flag_transaction(who);
            return Action::Reply(error_reply(shard, &e));
        }
    };
    if let Err(e) = crate::cmd::acl::gate_shared(shard, who, who.in_multi.get(), spec, argv, now_ms)
    {
        flag_transaction(who);
        return Action::Reply(error_reply(shard, &e));
    }
    let eq = |a: Option<&&[u8]>, s: &str| a.is_some_and(|a| a.eq_ignore_ascii_case(s.as_bytes()));
    // A thread held for a script of another thread (`tx_across`) answers for that script,
    // from the process's board, as a connection of another thread does (`conn`).
    let board = match shard.scripting.run {
        Some(_) => None,
        None => shard.scripting.board.as_ref().map(|(b, _)| b.clone()),
    };
    let busy_text = match (&shard.scripting.run, &board) {
        (Some(r), _) if r.eval => BUSY_EVAL,
        (Some(_), _) => BUSY_FUNCTION,
        (None, Some(b)) => b.busy_text().unwrap_or(BUSY_EVAL),
        (None, None) => BUSY_EVAL,
    };
    let (first, second) = (argv.first(), argv.get(1));
    // The connection's handshake, as Redis runs it during a busy script (ALLOW_BUSY); in a
    // transaction Redis queues them, which only the connection's task can do.
    match spec.meta.name {
        "auth" | "hello" if who.in_multi.get() => return Action::Defer,
        // Outside a transaction from here (the ACL log's context too).
        "auth" => {
            return Action::Reply(
                match crate::cmd::acl::auth_shared(shard, who, false, argv, now_ms) {
                    Ok(()) => b"+OK\r\n".to_vec(),
                    Err(e) => error_reply(shard, &e),
                },
            );
        }
        "hello" => {
            let conn = crate::cmd::connection::Hello {
                in_multi: false,
                cluster: shard.scripting.cluster_api,
                now_ms,
            };
            let mut out = Reply::new();
            out.proto = proto;
            return Action::Reply(
                match crate::cmd::connection::hello_shared(shard, who, conn, argv, &mut out) {
                    Ok(()) => out.buf,
                    Err(e) => error_reply(shard, &e),
                },
            );
        }
        _ => {}
    }
    if (eq(first, "script") || eq(first, "function")) && eq(second, "kill") && argv.len() == 2 {
        let eval = eq(first, "script");
        let killed = match &board {
            Some(b) => b.kill(eval),
            None => kill(shard, eval),
        };
        return Action::Reply(match killed {
            Ok(()) => b"+OK\r\n".to_vec(),
            Err(e) => error_line(e),
        });
    }
    if eq(first, "function") && eq(second, "stats") && argv.len() == 2 {
        let mut out = Reply::new();
        out.proto = proto;
        return Action::Reply(match function_stats(shard, &mut out) {
            Ok(()) => out.buf,
            Err(e) => error_line(e),
        });
    }
    if eq(first, "shutdown") {
        let nosave = argv
            .iter()
            .skip(1)
            .any(|a| a.eq_ignore_ascii_case(b"nosave"));
        let save = argv.iter().skip(1).any(|a| a.eq_ignore_ascii_case(b"save"));
        if nosave && !save {
            return Action::Exit;
        }
        return Action::Reply(error_line("ERR Errors trying to SHUTDOWN. Check logs."));
    }
    // The transaction commands run here (Redis lets MULTI and DISCARD through a busy script,
    // and refuses EXEC with EXECABORT), so a client is never left waiting on them; the
    // connection applies the change before its next command (`client::BusyTxn`).
    let mut txn = who.busy_txn.get();
    match spec.meta.name {
        "multi" if who.in_multi.get() => {
            return Action::Reply(error_line("ERR MULTI calls can not be nested"));
        }
        "multi" => {
            txn.opened = true;
            txn.flagged = false;
            who.in_multi.set(true);
            who.busy_txn.set(txn);
            return Action::Reply(b"+OK\r\n".to_vec());
        }
        "discard" if !who.in_multi.get() => {
            return Action::Reply(error_line("ERR DISCARD without MULTI"));
        }
        "discard" | "exec" => {
            txn = crate::client::BusyTxn {
                ended: true,
                opened: false,
                flagged: false,
            };
            who.in_multi.set(false);
            who.busy_txn.set(txn);
            if spec.meta.name == "discard" {
                return Action::Reply(b"+OK\r\n".to_vec());
            }
            shard.stats.count_error("EXECABORT");
            return Action::Reply(error_line(&format!(
                "EXECABORT Transaction discarded because of: {busy_text}"
            )));
        }
        _ => {}
    }
    if spec.meta.flags.contains(Flags::ALLOW_BUSY) {
        return Action::Defer;
    }
    flag_transaction(who);
    Action::Reply(error_line(busy_text))
}

/// Redis's `flagTransaction`: a command refused inside MULTI makes its EXEC fail.
fn flag_transaction(who: &ClientShared) {
    if who.in_multi.get() {
        let mut txn = who.busy_txn.get();
        txn.flagged = true;
        who.busy_txn.set(txn);
    }
}

/// Accepts connections waiting in the listen backlog (they get answers now, and connection
/// tasks once the script ends).
fn accept_early(shard: &mut Shard) {
    let Some(listener) = shard.scripting.listener.as_ref().and_then(|l| l.upgrade()) else {
        return;
    };
    while shard.scripting.early.len() < EARLY_CONNECTIONS_MAX {
        let flags = rustix::net::SocketFlags::NONBLOCK | rustix::net::SocketFlags::CLOEXEC;
        let Ok(fd) = rustix::net::accept_with(&*listener, flags) else {
            return;
        };
        let stream = std::net::TcpStream::from(fd);
        // maxclients and protected mode apply at accept, as in `conn::admit`: a refused
        // connection gets its error now and is closed.
        if let Ok(peer) = stream.peer_addr() {
            // This thread's clients: the side path cannot see the other threads' count.
            let already = shard.scripting.early.len() + shard.scripting.clients.len();
            if let Some(text) = crate::conn::refusal(shard, already, peer) {
                shard.stats.rejected_connections += 1;
                let _ = rustix::net::send(
                    &stream,
                    text,
                    rustix::net::SendFlags::DONTWAIT | rustix::net::SendFlags::NOSIGNAL,
                );
                continue;
            }
        }
        match tokio::net::TcpStream::from_std(stream) {
            Ok(s) => {
                let stream = crate::stream::ClientStream::plain(s);
                let id = shard.scripting.client_id.as_ref().map_or(0, |f| f());
                let who = early_client(shard, &stream, id, crate::time::wall_ms());
                shard.scripting.early.push(EarlyConn {
                    stream,
                    unsent: Vec::new(),
                    who,
                });
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot register a connection accepted while a script runs")
            }
        }
    }
}

/// Gives the connections accepted during a long script to connection tasks.
pub fn hand_over_early_connections(shard: &mut Shard) {
    if shard.scripting.early.is_empty() {
        return;
    }
    let early = std::mem::take(&mut shard.scripting.early);
    if let Some(spawn) = shard.scripting.spawn_conn.clone() {
        for e in early {
            spawn(e);
        }
    }
}

/// Serves every other connection that has complete commands waiting in its socket.
pub fn serve_waiting_clients(shard: &mut Shard) {
    accept_early(shard);
    let caller = shard.scripting.run.as_ref().map(|r| r.caller.id);
    let clients: Vec<_> = shard
        .scripting
        .clients
        .values()
        .filter_map(std::rc::Weak::upgrade)
        .collect();
    let mut peek = vec![0u8; PEEK_BYTES_MAX];
    let mut early = std::mem::take(&mut shard.scripting.early);
    for EarlyConn {
        stream,
        unsent,
        who,
    } in &mut early
    {
        // Replies it did not take yet go first; while some wait, its commands wait too.
        send_some(stream, unsent);
        if unsent.is_empty() {
            serve_socket(shard, stream, Out::Early(unsent, who), &mut peek);
        }
    }
    shard.scripting.early = early;
    for c in clients {
        if Some(c.id) == caller || c.qbuf_bytes.get() > 0 || c.writing.get() {
            continue;
        }
        let Some(stream) = c.socket.borrow().upgrade() else {
            continue;
        };
        // TLS output an earlier call left in the session goes first.
        if !matches!(stream.flush_now(), Ok(true)) {
            continue;
        }
        serve_socket(shard, &stream, Out::Client(&c), &mut peek);
        // Plaintext taken out of a TLS session and not answered is read by the connection's
        // task when it wakes (the socket may not show it again), and ciphertext the socket
        // did not take is written by it.
        if stream.has_buffered_input() || stream.has_pending_output() {
            c.mailbox.wake.notify_one();
        }
    }
}

/// Where the side path's replies for one socket go when the socket will not take them now.
enum Out<'a> {
    /// Behind the connection's pending output (its task writes it later).
    Client(&'a crate::client::ClientShared),
    /// A connection accepted during the script: its own buffer, written first, and its
    /// state.
    Early(&'a mut Vec<u8>, &'a ClientShared),
}

/// A connection accepted while a script runs long: its socket, the replies the socket did
/// not take yet, and its state as the side path left it (the id it was given, and what AUTH
/// and HELLO set), which its connection task starts from when the script ends
/// (`conn::serve_early`).
pub struct EarlyConn {
    pub stream: ClientStream,
    pub unsent: Vec<u8>,
    pub who: ClientShared,
}

/// Writes what it can of `unsent` now and keeps the rest.
fn send_some(stream: &ClientStream, unsent: &mut Vec<u8>) {
    let sent = stream.send_now(unsent);
    unsent.drain(..sent);
}

/// Answers the complete commands at the head of one socket.
fn serve_socket(shard: &mut Shard, stream: &ClientStream, dest: Out<'_>, peek: &mut [u8]) {
    {
        let n = stream.peek_now(&mut peek[..]);
        if n == 0 {
            return;
        }
        let buf = peek.get(..n).unwrap_or_default();
        let now_ms = crate::time::wall_ms();
        let who: &ClientShared = match &dest {
            Out::Client(c) => c,
            Out::Early(_, who) => who,
        };
        let mut parser = Parser::new(ParseLimits {
            bulk_bytes_max: shard.config.proto_max_bulk_len as i64,
            authenticated: who.authenticated.get() || shard.acl.default_is_open(),
        });
        let mut pos = 0usize;
        let mut out: Vec<u8> = Vec::new();
        let mut exit = false;
        loop {
            let rest = buf.get(pos..).unwrap_or_default();
            match parser.next(rest) {
                Parsed::Command { consumed } => {
                    let mut argv: SmallVec<[&[u8]; 8]> = SmallVec::new();
                    parser.args(rest, &mut argv);
                    let proto = who.proto.get();
                    match decide(shard, who, &argv, proto, now_ms) {
                        Action::Reply(bytes) => {
                            out.extend_from_slice(&bytes);
                            pos += consumed;
                        }
                        Action::Defer => break,
                        Action::Exit => {
                            exit = true;
                            break;
                        }
                    }
                }
                Parsed::Skip { consumed } => pos += consumed,
                Parsed::Incomplete | Parsed::Error(_) => break,
            }
        }
        if exit {
            shutdown_now(shard);
        }
        if pos == 0 {
            return;
        }
        // Take exactly the answered commands off the stream.
        stream.consume(pos);
        write_now(dest, stream, &out);
    }
}

/// A connection accepted during the script, as the side path knows it: the default user,
/// authenticated only when that user needs no password, RESP2, until AUTH or HELLO.
fn early_client(shard: &Shard, stream: &ClientStream, id: u64, now_ms: u64) -> ClientShared {
    let unspecified = std::net::SocketAddr::from(([0, 0, 0, 0], 0));
    let who = ClientShared::new(
        id,
        stream.peer_addr().unwrap_or(unspecified),
        stream.local_addr().unwrap_or(unspecified),
        now_ms,
    );
    who.authenticated.set(shard.acl.default_is_open());
    who
}

/// Writes replies now when nothing is queued before them; otherwise (or for what the socket
/// would not take) queues them behind the connection's pending output.
fn write_now(dest: Out<'_>, stream: &ClientStream, bytes: &[u8]) {
    let mut sent = 0;
    let nothing_queued = match &dest {
        Out::Client(c) => c.mailbox.is_empty(),
        Out::Early(unsent, _) => unsent.is_empty(),
    };
    if nothing_queued {
        sent = stream.send_now(bytes);
    }
    let rest = bytes.get(sent..).unwrap_or_default();
    if rest.is_empty() {
        return;
    }
    match dest {
        Out::Client(c) => {
            c.mailbox.push(rest);
            c.mailbox.wake.notify_one();
        }
        Out::Early(unsent, _) => unsent.extend_from_slice(rest),
    }
}

/// SHUTDOWN NOSAVE (or a stop signal) while a script runs: the log keeps what earlier
/// batches wrote; this batch's records (the script's partial writes among them, never
/// acknowledged) are not written, so the script stays atomic on disk too.
fn shutdown_now(shard: &mut Shard) -> ! {
    tracing::warn!("User requested shutdown...");
    shard.shutting_down = true;
    tracing::warn!("Meridian is now ready to exit, bye bye...");
    std::process::exit(0);
}

/// Whether the keys a script declared may run together: with several shards they must all
/// live on one (Redis Cluster's CROSSSLOT otherwise). One shard: always.
/// Keys on shards that `tx_across` holds for this run (a script across shards) are fine.
pub fn declared_keys_error(shard: &Shard, keys: &[&[u8]]) -> Option<&'static str> {
    let map = shard.scripting.slots.as_ref()?;
    let mut owner = None;
    for k in keys {
        let o = map.shard_of_key(k);
        if owner.is_some_and(|p| p != o) {
            let held = keys.iter().all(|k| {
                let o = map.shard_of_key(k);
                o == shard.index || crate::tx_across::reaches(o)
            });
            return (!held).then_some("CROSSSLOT Keys in request don't hash to the same slot");
        }
        owner = Some(o);
    }
    None
}

/// Where a script's command may run when its keys are not this shard's: the one other
/// shard that owns them all, when `tx_across` holds it for this run (`call_held`). None:
/// some key is local, or they span shards, or that shard is not held.
pub fn held_owner(shard: &Shard, spec: &CommandSpec, argv: &[&[u8]]) -> Option<u16> {
    let map = shard.scripting.slots.as_ref()?;
    let mut owner = None;
    for k in key_args(spec, argv) {
        let o = map.shard_of_key(k);
        if o == shard.index || owner.is_some_and(|p| p != o) {
            return None;
        }
        owner = Some(o);
    }
    owner.filter(|&o| crate::tx_across::reaches(o))
}

/// The key arguments of `argv`, by the command's key specs (or its own key extractor:
/// ZUNION's `numkeys`, SORT's STORE, XREAD's STREAMS...), as routing finds them. A command
/// whose keys cannot be found has none.
fn key_args<'a>(spec: &CommandSpec, argv: &'a [&'a [u8]]) -> impl Iterator<Item = &'a [u8]> {
    crate::route::positions(crate::cmd::table(), spec, argv)
        .unwrap_or_default()
        .into_iter()
        .filter_map(move |i| argv.get(i).copied())
}

/// A key a script's command touches that another shard owns: that shard. One shard: never.
/// (The script gets Redis Cluster's text for a script reaching a non-local key.)
pub fn non_local_key(shard: &Shard, spec: &CommandSpec, argv: &[&[u8]]) -> Option<u16> {
    let map = shard.scripting.slots.as_ref()?;
    key_args(spec, argv)
        .map(|k| map.shard_of_key(k))
        .find(|&owner| owner != shard.index)
}
