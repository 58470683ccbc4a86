//! Process start-up: the listener, the shard thread, the periodic cycle, and shutdown.
//!
//! This build runs one shard. Its thread is pinned to the first allowed core and runs a
//! `current_thread` runtime with a `LocalSet`; every connection of the process is a task there.
//! The main thread waits for SIGINT/SIGTERM and tells the shard to stop.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use crate::config::Config;
use crate::shard::Shard;

/// Listen backlog (Redis `tcp-backlog`).
pub const TCP_BACKLOG: i32 = 511;

/// Start-up and runtime failures of the server.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: String,
        source: std::io::Error,
    },
    #[error("cannot start runtime: {0}")]
    Runtime(std::io::Error),
    #[error("sync TLS: {0}")]
    Tls(String),
    #[error("data directory: {0}")]
    Persist(String),
    #[error("shard thread failed: {0}")]
    Shard(String),
    #[error("{0}")]
    Config(String),
    #[error("peer {site}: cannot resolve {addr}: {reason}")]
    PeerUnresolved {
        site: String,
        addr: String,
        reason: String,
    },
    #[error("log: {0}")]
    Log(String),
    #[error("Aborting startup because of ACL errors: {0}")]
    Acl(String),
}

/// What a shard thread and the control thread tell each other while it starts.
pub struct ShardStartup {
    /// Sent once the shard has loaded its data (recovery done).
    pub loaded: tokio::sync::oneshot::Sender<()>,
    /// Received when every shard has loaded and the loading port stopped accepting: from
    /// then on the shard accepts clients itself.
    pub go: tokio::sync::oneshot::Receiver<()>,
    /// Connections accepted while loading (`crate::loading`).
    pub handover: tokio::sync::mpsc::Receiver<crate::loading::Handover>,
    /// Requests of the control thread (`crate::control`), served once loaded.
    pub control: tokio::sync::mpsc::Receiver<crate::control::ShardRequest>,
}

/// Resolves every peer's name once at start: a name that does not resolve is a
/// configuration mistake to report now, not a link that silently never comes up. (The
/// dialer resolves again on every reconnect.)
pub fn resolve_peers(config: &Config) -> Result<(), ServerError> {
    use std::net::ToSocketAddrs as _;
    let peers = config
        .peers()
        .map_err(|e| ServerError::Config(e.to_string()))?;
    for p in peers {
        let fail = |reason: String| ServerError::PeerUnresolved {
            site: p.site.clone(),
            addr: p.addr.clone(),
            reason,
        };
        match p.addr.to_socket_addrs() {
            Ok(mut addrs) => {
                if addrs.next().is_none() {
                    return Err(fail("no address".to_string()));
                }
            }
            Err(e) => return Err(fail(e.to_string())),
        }
    }
    Ok(())
}

/// File descriptors kept beyond `maxclients` for listeners, sync links, the log and
/// snapshots (Redis's CONFIG_MIN_RESERVED_FDS).
pub const RESERVED_FDS: u64 = 32;

/// Redis's `adjustOpenFilesLimit`: raises the open-files limit to `maxclients` +
/// `RESERVED_FDS` where the hard limit allows, and otherwise lowers `maxclients` to what the
/// limit can serve, saying so, so that the last clients get Redis's "max number of clients"
/// reply rather than a failed accept.
fn fit_open_files_limit(config: &mut Config) {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let want = u64::from(config.maxclients) + RESERVED_FDS;
    let now = getrlimit(Resource::Nofile);
    let (Some(current), maximum) = (now.current, now.maximum) else {
        return; // unlimited
    };
    if current >= want {
        return;
    }
    let target = maximum.map_or(want, |m| want.min(m));
    let set = setrlimit(
        Resource::Nofile,
        Rlimit {
            current: Some(target),
            maximum,
        },
    );
    let have = if set.is_ok() { target } else { current };
    if have < want {
        let fit = have.saturating_sub(RESERVED_FDS).max(1);
        tracing::warn!(
            maxclients = config.maxclients,
            open_files = have,
            "maxclients has been reduced to {fit} to compensate for low ulimit; raise the open files limit (ulimit -n) to {want} to keep it"
        );
        config.maxclients = u32::try_from(fit).unwrap_or(u32::MAX);
    }
}

/// Runs the server until SIGINT or SIGTERM.
///
/// Start-up order: resolve peers, bind every port (a port in use fails here, before
/// anything else), load TLS files, start the shard thread, which loads its data while the
/// client port answers `-LOADING` (`crate::loading`); once every shard has loaded, the
/// connections accepted meanwhile are handed over and "ready to accept connections" is
/// logged. A failure at any step returns an error and nothing keeps running.
pub fn run(mut config: Config) -> Result<(), ServerError> {
    fit_open_files_limit(&mut config);
    warn_if_open(&config);
    // Collections hash client-chosen members with a secret key: give the CRDT crate one.
    meridian_crdt::hashing::init(rand::random());
    resolve_peers(&config)?;
    let authenticated = clients_start_authenticated(&config)?;
    let (stop_tx, stop_rx) = watch::channel(false);
    let listener = bind(&config)?;
    let sync_listener = bind_sync(&config)?;
    let metrics_listener = bind_metrics(&config)?;
    let tls = match config.sync_tls_files() {
        Some(files) => Some(Arc::new(
            meridian_syncer::TlsContext::load(files)
                .map_err(|e| ServerError::Tls(e.to_string()))?,
        )),
        None => {
            if sync_listener.is_some() || !config.peer.is_empty() {
                tracing::warn!(
                    "syncer runs in plain text (no sync-tls-* files): allowed on loopback only"
                );
            }
            None
        }
    };
    let addr = listener
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();
    let loading_listener = listener.try_clone().map_err(|source| ServerError::Listen {
        addr: addr.clone(),
        source,
    })?;
    let limits = crate::loading::LoadingLimits::of(&config, authenticated);
    let (handover_tx, handover_rx) = tokio::sync::mpsc::channel(limits.clients_max.max(1));
    let (loaded_tx, loaded_rx) = tokio::sync::oneshot::channel();
    let (go_tx, go_rx) = tokio::sync::oneshot::channel();
    let (shards, mut control_rx) = crate::control::channels(1);
    let control = control_rx
        .pop()
        .ok_or(ServerError::Shard("no shard".to_string()))?;
    let startup = ShardStartup {
        loaded: loaded_tx,
        go: go_rx,
        handover: handover_rx,
        control,
    };
    let shard_tls = tls.clone();
    // Tells the main thread when the shard thread ends by itself (it could not open its data
    // directory, or failed): the process must then exit, not linger on a dead port.
    let (ended_tx, ended_rx) = tokio::sync::oneshot::channel::<()>();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(ServerError::Runtime)?;
    let started = std::time::Instant::now();
    let (loaded_all_tx, loaded_all_rx) = watch::channel(false);
    let endpoint = Arc::new(crate::metrics::http::Endpoint {
        site: config.site.clone(),
        deployment_id: config.deployment_id.clone(),
        shards: shards.clone(),
        loaded: loaded_all_rx.clone(),
        started,
    });
    tracing::info!(%addr, dir = %config.dir.display(), "loading the data");
    let shard_thread = std::thread::Builder::new()
        .name("shard-0".to_string())
        .spawn(move || {
            let r = run_shard(
                0,
                config,
                listener,
                sync_listener,
                shard_tls,
                stop_rx,
                startup,
            );
            let _ = ended_tx.send(());
            r
        })
        .map_err(ServerError::Runtime)?;
    let ended = rt.block_on(async {
        if let Some(l) = metrics_listener {
            tokio::spawn(crate::metrics::http::serve(l, endpoint));
        }
        let responder = tokio::spawn(crate::loading::serve(
            loading_listener,
            limits,
            loaded_all_rx,
            handover_tx,
        ));
        let signal = wait_for_signal(tls.as_deref());
        tokio::pin!(signal);
        let mut ended_rx = ended_rx;
        let mut loaded_rx = loaded_rx;
        // systemd's start timeout is extended while loading goes on: loading is bounded
        // work, and a data set of any size must be able to start.
        let mut tick = tokio::time::interval(crate::service::EXTEND_EVERY);
        let mut stopping_while_loading = false;
        loop {
            tokio::select! {
                () = &mut signal => {
                    crate::service::stopping();
                    tracing::info!("received shutdown signal while loading, stopping");
                    stopping_while_loading = true;
                    break;
                }
                _ = &mut ended_rx => return true,
                loaded = &mut loaded_rx => {
                    if loaded.is_err() {
                        // The shard thread ended without loading: its error is returned below.
                        return true;
                    }
                    break;
                }
                _ = tick.tick() => crate::service::extend(&format!(
                    "Loading the data ({} s)",
                    started.elapsed().as_secs()
                )),
            }
        }
        if !stopping_while_loading {
            let _ = loaded_all_tx.send(true);
            let _ = responder.await;
            let _ = go_tx.send(());
            tracing::info!(
                %addr,
                load_ms = started.elapsed().as_millis() as u64,
                "Meridian ready to accept connections"
            );
            crate::service::ready(&format!("Ready: accepting connections on {addr}"));
            tokio::spawn(crate::service::watchdog(shards.clone()));
            tokio::select! {
                () = &mut signal => {
                    crate::service::stopping();
                    tracing::info!("received shutdown signal, stopping");
                }
                _ = &mut ended_rx => return true,
            }
        }
        // Long commands poll this and end; the shard then closes its clients and writes and
        // fsyncs its log. systemd's stop timeout is extended meanwhile; the wait itself is
        // bounded by SHUTDOWN_WAIT_MAX and a second signal.
        crate::stop::request();
        let _ = stop_tx.send(true);
        let deadline = tokio::time::sleep(SHUTDOWN_WAIT_MAX);
        tokio::pin!(deadline);
        let second = wait_for_signal(None);
        tokio::pin!(second);
        let mut tick = tokio::time::interval(crate::service::EXTEND_EVERY);
        loop {
            tokio::select! {
                _ = &mut ended_rx => return true,
                () = &mut deadline => return false,
                () = &mut second => {
                    tracing::warn!("second shutdown signal: exiting now");
                    return false;
                }
                _ = tick.tick() => crate::service::extend("Stopping: writing the op log to disk"),
            }
        }
    });
    if !ended {
        // Records already written (write(2)) are in the kernel's page cache and survive
        // the exit; only an unfinished batch, never acknowledged, can be lost, and recovery
        // reads a torn tail as the end of the log.
        tracing::error!(
            wait_s = SHUTDOWN_WAIT_MAX.as_secs(),
            "the shard did not stop in time; exiting without closing its log"
        );
        std::process::exit(1);
    }
    match shard_thread.join() {
        Ok(r) => r,
        Err(_) => Err(ServerError::Shard("panicked".to_string())),
    }
}

/// How long the process waits after SIGINT/SIGTERM for its shards to stop (they end long
/// commands at their next poll of `crate::stop`, then close the log) before it exits anyway.
pub const SHUTDOWN_WAIT_MAX: Duration = Duration::from_secs(10);

/// Waits for SIGINT or SIGTERM; on SIGHUP reopens the log file and re-reads the sync TLS
/// files (links established before keep their sessions; new ones use the new files).
async fn wait_for_signal(tls: Option<&meridian_syncer::TlsContext>) {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int), Ok(mut hup)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
        signal(SignalKind::hangup()),
    ) else {
        // Without signal handlers the process is stopped by the default action.
        std::future::pending::<()>().await;
        return;
    };
    loop {
        tokio::select! {
            _ = term.recv() => return,
            _ = int.recv() => return,
            _ = hup.recv() => {
                match crate::logging::reopen() {
                    Some(Ok(path)) => tracing::info!(path = %path.display(), "SIGHUP: log file reopened"),
                    Some(Err(e)) => tracing::error!(error = %e, "SIGHUP: log file not reopened; writing to the previous one"),
                    None => {}
                }
                match tls {
                    Some(ctx) => match ctx.reload() {
                        Ok(()) => tracing::info!("SIGHUP: sync TLS files reloaded"),
                        Err(e) => tracing::error!(error = %e, "SIGHUP: sync TLS reload failed; keeping the previous files"),
                    },
                    None => tracing::info!("SIGHUP: no sync TLS files to reload"),
                }
            }
        }
    }
}

/// Binds the metrics port, when configured (`metrics-port` not 0).
fn bind_metrics(config: &Config) -> Result<Option<std::net::TcpListener>, ServerError> {
    if config.metrics_port == 0 {
        return Ok(None);
    }
    let ip: std::net::IpAddr = config
        .metrics_bind
        .parse()
        .map_err(|_| ServerError::Listen {
            addr: config.metrics_bind.clone(),
            source: std::io::Error::new(std::io::ErrorKind::InvalidInput, "bad address"),
        })?;
    listen(std::net::SocketAddr::new(ip, config.metrics_port)).map(Some)
}

/// Binds the sync port, when configured.
fn bind_sync(config: &Config) -> Result<Option<std::net::TcpListener>, ServerError> {
    if config.sync_port == 0 {
        return Ok(None);
    }
    let ip = config.sync_bind_ip().ok_or_else(|| ServerError::Listen {
        addr: config.sync_bind.clone(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidInput, "bad address"),
    })?;
    listen(std::net::SocketAddr::new(ip, config.sync_port)).map(Some)
}

fn bind(config: &Config) -> Result<std::net::TcpListener, ServerError> {
    let ip: std::net::IpAddr = config.bind.parse().map_err(|_| ServerError::Listen {
        addr: config.bind.clone(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidInput, "bad address"),
    })?;
    listen(std::net::SocketAddr::new(ip, config.port))
}

fn listen(addr: std::net::SocketAddr) -> Result<std::net::TcpListener, ServerError> {
    let err = |source| ServerError::Listen {
        addr: addr.to_string(),
        source,
    };
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM,
        None,
    )
    .map_err(err)?;
    socket.set_reuse_address(true).map_err(err)?;
    socket.bind(&addr.into()).map_err(err)?;
    socket.listen(TCP_BACKLOG).map_err(err)?;
    socket.set_nonblocking(true).map_err(err)?;
    Ok(socket.into())
}

/// The shard thread: pins itself, builds its runtime, accepts connections, runs the
/// periodic cycle, and returns when `stop` turns true.
fn run_shard(
    index: u8,
    config: Config,
    listener: std::net::TcpListener,
    sync_listener: Option<std::net::TcpListener>,
    tls: Option<Arc<meridian_syncer::TlsContext>>,
    mut stop: watch::Receiver<bool>,
    startup: ShardStartup,
) -> Result<(), ServerError> {
    if let Some(core) =
        core_affinity::get_core_ids().and_then(|ids| ids.get(usize::from(index)).copied())
    {
        core_affinity::set_for_current(core);
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(ServerError::Runtime)?;
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, async move {
        let listener = TcpListener::from_std(listener).map_err(ServerError::Runtime)?;
        let now = crate::time::wall_ms();
        let shard = Rc::new(RefCell::new(Shard::new(
            index,
            config,
            crate::cmd::table(),
            now,
        )));
        shard.borrow_mut().sync.tls = tls;
        // A script running long takes and answers new connections itself (script::busy),
        // then hands them to connection tasks.
        let listener = Rc::new(listener);
        {
            let weak = Rc::downgrade(&shard);
            let mut s = shard.borrow_mut();
            s.scripting.listener = Some(Rc::downgrade(&listener));
            s.scripting.stop = Some(stop.clone());
            s.scripting.spawn_conn = Some(Rc::new(move |stream, unsent: Vec<u8>| {
                if let Some(shard) = weak.upgrade() {
                    tokio::task::spawn_local(async move {
                        let mut stream = stream;
                        if !unsent.is_empty() {
                            use tokio::io::AsyncWriteExt as _;
                            if stream.write_all(&unsent).await.is_err() {
                                return;
                            }
                        }
                        crate::conn::serve(shard, stream).await;
                    });
                }
            }));
        }
        load_acl_file(&mut shard.borrow_mut())?;
        shard
            .borrow_mut()
            .open_persistence()
            .map_err(|e| ServerError::Persist(e.to_string()))?;
        tokio::task::spawn_local(periodic(shard.clone()));
        tokio::task::spawn_local(flush_loop(shard.clone()));
        crate::sync::link::start(&shard, sync_listener);
        let ShardStartup {
            loaded,
            go,
            mut handover,
            control,
        } = startup;
        tokio::task::spawn_local(crate::control::serve(shard.clone(), control));
        let _ = loaded.send(());
        // Clients wait on the loading port until every shard has loaded. An error means the
        // control thread is stopping: `stop` says so below.
        let _ = go.await;
        loop {
            tokio::select! {
                accepted = listener.accept() => {
                    match accepted {
                        Ok((stream, _)) => {
                            let admitted = crate::conn::admit(&mut shard.borrow_mut(), stream, bytes::BytesMut::new());
                            if let Some(a) = admitted {
                                tokio::task::spawn_local(crate::conn::serve_admitted(shard.clone(), a));
                            }
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "accept failed");
                            tokio::time::sleep(Duration::from_millis(10)).await;
                        }
                    }
                }
                Some(h) = handover.recv() => {
                    match TcpStream::from_std(h.stream) {
                        Ok(stream) => {
                            tokio::task::spawn_local(crate::conn::serve_with_input(
                                shard.clone(),
                                stream,
                                h.input,
                            ));
                        }
                        Err(e) => tracing::warn!(error = %e, "connection accepted while loading lost"),
                    }
                }
                _ = stop.changed() => break,
            }
        }
        let mut s = shard.borrow_mut();
        s.shutting_down = true;
        for c in s.clients.values() {
            c.kill();
        }
        s.persist.close();
        Ok(())
    })
}

/// Loads `aclfile` at start (after `requirepass`, as Redis does): any error stops the start.
fn load_acl_file(shard: &mut Shard) -> Result<(), ServerError> {
    let Shard { acl, config, .. } = shard;
    load_acl_file_into(acl, config)
}

fn load_acl_file_into(acl: &mut crate::acl::Acl, config: &Config) -> Result<(), ServerError> {
    if config.aclfile.is_empty() {
        return Ok(());
    }
    let path = std::path::PathBuf::from(&config.aclfile);
    acl.load_file(&path, config.pubsub_all())
        .map(|_| ())
        .map_err(|e| ServerError::Acl(e.0))
}

/// Whether new clients start authenticated once the shard has loaded (its default user,
/// from `requirepass` then `aclfile`, needs no password and is on). The loading port
/// answers before the shard has its users; it applies the parser's unauthenticated limits
/// when this is false, as the shard does after the handover. An unreadable or invalid
/// `aclfile` stops the start here, before any port is bound.
fn clients_start_authenticated(config: &Config) -> Result<bool, ServerError> {
    let mut acl = crate::acl::Acl::new();
    if !config.requirepass.is_empty() {
        acl.set_requirepass(config.requirepass.as_bytes());
    }
    load_acl_file_into(&mut acl, config)?;
    Ok(acl.default_is_open())
}

/// Says at start when clients from other hosts can connect without a password, or are
/// refused by protected mode.
fn warn_if_open(config: &Config) {
    let loopback = config
        .bind
        .parse::<std::net::IpAddr>()
        .is_ok_and(|ip| ip.is_loopback());
    if loopback || !config.requirepass.is_empty() || !config.aclfile.is_empty() {
        return;
    }
    if config.protected_mode {
        tracing::warn!(
            bind = %config.bind,
            "no password is set for the default user: protected mode refuses clients from other addresses than 127.0.0.1 and ::1 (-DENIED); set requirepass or ACL users"
        );
    } else {
        tracing::warn!(
            bind = %config.bind,
            "WARNING: protected mode is off and no password is set for the default user: anyone who can reach this address can run any command, FLUSHALL included"
        );
    }
}

/// Buckets examined per database per cycle; a pass over a large table spans several cycles.
pub const EXPIRE_CYCLE_BUCKETS_MAX: usize = 64 * 1024;

/// Time each periodic cycle may spend moving entries of incremental rehashes (Redis spends
/// 1 ms per cron run on it too).
pub const REHASH_CYCLE_TIME_MAX: Duration = Duration::from_millis(1);

/// Runs `hz` times a second: active expiry, incremental rehash, GC, idle-client timeouts,
/// ops-per-second sampling.
async fn periodic(shard: Rc<RefCell<Shard>>) {
    loop {
        let hz = shard.borrow().config.hz.max(1);
        tokio::time::sleep(Duration::from_millis(1000 / u64::from(hz))).await;
        let mut s = shard.borrow_mut();
        if s.shutting_down {
            return;
        }
        let now = s.now_ms();
        if !s.stats.active_expire_disabled {
            let started = std::time::Instant::now();
            for db in 0..s.dbs.len() {
                s.active_expire_db(db, now, EXPIRE_CYCLE_BUCKETS_MAX);
            }
            let ms = started.elapsed().as_millis() as u64;
            s.stats.expire_cycle_cpu_milliseconds += ms;
            let threshold = s.config.latency_monitor_threshold;
            s.latency.record("expire-cycle", now / 1000, ms, threshold);
        }
        s.rehash_cycle(REHASH_CYCLE_TIME_MAX);
        s.stats
            .note_memory(crate::cmd::server::memory_use().allocated);
        s.gc_step(now, crate::sync::gc::GC_STEP_BUCKETS_MAX);
        s.persistence_cycle(now);
        let total = s.stats.total_commands_processed;
        s.stats.ops_sample.sample(now, total);
        let timeout_s = s.config.timeout;
        if timeout_s > 0 {
            for c in s.clients.values() {
                let idle_ms = now.saturating_sub(c.last_interaction_ms.get());
                // Redis never idles out monitors, blocked or subscribed clients.
                if idle_ms > timeout_s * 1000
                    && !c.is_monitor.get()
                    && !c.blocked.get()
                    && !c.is_subscribed()
                {
                    c.kill();
                }
            }
        }
    }
}

/// Writes records logged outside clients' batches (remote ops, expiries) to the log within
/// `FLUSH_PERIOD_MS` of the first one; sleeps while there is nothing to write.
async fn flush_loop(shard: Rc<RefCell<Shard>>) {
    loop {
        let wait = {
            let mut s = shard.borrow_mut();
            if s.shutting_down {
                return;
            }
            let idle = !s.persist.has_pending();
            // `notify_one` keeps a permit for a waiter not polled yet: a record appended
            // between here and the first poll of `notified()` still wakes the loop.
            s.persist.flush_waiting = idle;
            idle.then(|| s.persist.flush_wanted.clone())
        };
        if let Some(wanted) = wait {
            wanted.notified().await;
        }
        tokio::time::sleep(Duration::from_millis(crate::persist::FLUSH_PERIOD_MS)).await;
        let mut s = shard.borrow_mut();
        if s.shutting_down {
            return;
        }
        s.persist.tick();
    }
}

/// The Redis version Meridian reports (HELLO, INFO): the one whose behaviour it follows.
pub const REDIS_VERSION: &str = "7.0.15";
