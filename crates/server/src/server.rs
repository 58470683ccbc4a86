//! Process start-up: the listener, the shard thread, the periodic cycle, and shutdown.
//!
//! This build runs one shard. Its thread is pinned to the first allowed core and runs a
//! `current_thread` runtime with a `LocalSet`; every connection of the process is a task there.
//! The main thread waits for SIGINT/SIGTERM and tells the shard to stop.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
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
}

/// Runs the server until SIGINT or SIGTERM.
pub fn run(config: Config) -> Result<(), ServerError> {
    // Collections hash client-chosen members with a secret key: give the CRDT crate one.
    meridian_crdt::hashing::init(rand::random());
    let (stop_tx, stop_rx) = watch::channel(false);
    let listener = bind(&config)?;
    let sync_listener = bind_sync(&config)?;
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
    tracing::info!(%addr, site = %config.site, "Meridian ready to accept connections");
    let shard_tls = tls.clone();
    // Tells the main thread when the shard thread ends by itself (it could not open its data
    // directory, or failed): the process must then exit, not linger on a dead port.
    let (ended_tx, ended_rx) = tokio::sync::oneshot::channel::<()>();
    let shard_thread = std::thread::Builder::new()
        .name("shard-0".to_string())
        .spawn(move || {
            let r = run_shard(0, config, listener, sync_listener, shard_tls, stop_rx);
            let _ = ended_tx.send(());
            r
        })
        .map_err(ServerError::Runtime)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(ServerError::Runtime)?;
    rt.block_on(async {
        tokio::select! {
            () = wait_for_signal(tls.as_deref()) => {
                tracing::info!("received shutdown signal, stopping");
            }
            _ = ended_rx => {}
        }
    });
    let _ = stop_tx.send(true);
    match shard_thread.join() {
        Ok(r) => r,
        Err(_) => Err(ServerError::Shard("panicked".to_string())),
    }
}

/// Waits for SIGINT or SIGTERM; on SIGHUP re-reads the sync TLS files (links established
/// before keep their sessions; new ones use the new files).
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
            _ = hup.recv() => match tls {
                Some(ctx) => match ctx.reload() {
                    Ok(()) => tracing::info!("SIGHUP: sync TLS files reloaded"),
                    Err(e) => tracing::error!(error = %e, "SIGHUP: sync TLS reload failed; keeping the previous files"),
                },
                None => tracing::info!("SIGHUP: no sync TLS files to reload"),
            },
        }
    }
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
    // While the shard loads its data, a gate answers clients with -LOADING (`loading`).
    let gate = crate::loading::Gate::start(
        listener.try_clone().map_err(ServerError::Runtime)?,
        crate::loading::GateLimits {
            clients_max: config.maxclients as usize,
            query_bytes_max: config.client_query_buffer_limit as usize,
            bulk_bytes_max: config.proto_max_bulk_len as i64,
        },
    )
    .map_err(ServerError::Runtime)?;
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
        shard
            .borrow_mut()
            .open_persistence()
            .map_err(|e| ServerError::Persist(e.to_string()))?;
        // Loaded: the clients that connected meanwhile are served from here on.
        for h in gate.finish() {
            if h.stream.set_nonblocking(true).is_err() {
                continue;
            }
            if let Ok(stream) = tokio::net::TcpStream::from_std(h.stream) {
                tokio::task::spawn_local(crate::conn::serve_with(shard.clone(), stream, h.pending));
            }
        }
        tokio::task::spawn_local(periodic(shard.clone()));
        tokio::task::spawn_local(flush_loop(shard.clone()));
        crate::sync::link::start(&shard, sync_listener);
        loop {
            tokio::select! {
                accepted = listener.accept() => {
                    match accepted {
                        Ok((stream, _)) => {
                            tokio::task::spawn_local(crate::conn::serve(shard.clone(), stream));
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "accept failed");
                            tokio::time::sleep(Duration::from_millis(10)).await;
                        }
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
