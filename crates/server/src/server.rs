//! Process start-up: the slot map, the shard threads, the listeners, the periodic cycle, and
//! shutdown.
//!
//! `run` starts one thread per shard (`--shards`, by default one per CPU the process may run
//! on), pinned node by node (`numa`). Each thread builds a `current_thread` runtime with a
//! `LocalSet`, opens its shard's data directory (recovery before the first command), and
//! serves the connections the acceptor hands it, the batches other threads send its shard
//! (`hop`) and its shard's replication links. Once every shard is open, thread 0 accepts
//! clients and spreads them over the threads round robin. The main thread waits for
//! SIGINT/SIGTERM and tells every thread to stop.

use std::cell::RefCell;
use std::path::Path;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::config::Config;
use crate::front::Front;
use crate::hop::{Msg, Thread};
use crate::node::{Node, lock};
use crate::numa::{Place, Topology};
use crate::shard::{PublishHook, Shard};
use crate::slot::SlotMap;
use crate::stream::Transport;

/// Listen backlog (Redis `tcp-backlog`).
pub const TCP_BACKLOG: i32 = 511;
/// The slot map of a data directory: which shard owns which slots (`SlotMap::to_text`).
pub const SLOT_MAP_FILE: &str = "slot-map";
/// Bytes of a slot map file read at most (a map of 16384 single-slot ranges fits).
pub const SLOT_MAP_BYTES_MAX: u64 = 1024 * 1024;

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
    #[error("client TLS: {0}")]
    ClientTls(#[from] crate::tls::TlsError),
    #[error("data directory: {0}")]
    Persist(String),
    #[error("shard thread failed: {0}")]
    Shard(String),
    #[error("data directory: slot map {path}: {message}")]
    SlotMap { path: String, message: String },
    #[error("{0}")]
    Topology(#[from] crate::topology::TopologyError),
    #[error("topology: {0}")]
    Site(String),
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
    let topology = Topology::read();
    let site = site_nodes(&mut config)?;
    let slots = Arc::new(match &site {
        Some(t) => site_slot_map(&config, &t.topology)?,
        None => slot_map(&config, topology.allowed.len())?,
    });
    // Shards of the site, and those this process runs.
    let shards = slots.shards();
    let (first, local) = site.as_ref().map_or((0, shards), |t| t.local());
    // `cluster-api` unset means "on with several shards": settle it for CONFIG GET.
    config.cluster_api = Some(config.cluster_enabled(shards));
    let placement = topology.place(usize::from(local));
    let authenticated = clients_start_authenticated(&config)?;
    let (stop_tx, stop_rx) = watch::channel(false);
    let listener = bind(&config)?;
    let tls_listener = bind_tls(&config)?;
    let sync_listener = bind_sync(&config)?;
    let metrics_listener = bind_metrics(&config)?;
    let (cluster, endpoints) = match &site {
        Some(t) => bind_site(&config, t)?,
        None => bind_cluster(&config, shards)?,
    };
    if !config.appendonly && !config.save.trim().is_empty() {
        // Redis users turn the AOF off and count on the `save` policy's RDB files; here
        // background snapshots are built from the log (docs/persistence.md §4).
        tracing::info!(
            save = %config.save,
            "appendonly no with a save policy: the op log is written without fsync for the policy's background snapshots, and removed as they cover it"
        );
    }
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
    // Files and settings are checked before anything runs: a bad file stops the start,
    // naming it.
    let client_tls = match config.tls_port {
        0 => None,
        _ => Some(Arc::new(crate::tls::ClientTls::load(&config)?)),
    };
    tracing::info!(
        shards = local,
        first,
        numa = %topology.describe(),
        placement = %describe_placement(first, &placement),
        "shard threads"
    );
    let addr = listener
        .as_ref()
        .or(tls_listener.as_ref())
        .and_then(|l| l.local_addr().ok())
        .map(|a| a.to_string())
        .unwrap_or_default();
    // While the shards load, the plain client port answers -LOADING (`crate::loading`) on a
    // clone of the listener; the connections it took are handed to the threads once loaded.
    // The TLS port accepts once loaded: clients wait in its listen backlog meanwhile.
    let loading_listener = match &listener {
        Some(l) => Some(l.try_clone().map_err(|source| ServerError::Listen {
            addr: addr.clone(),
            source,
        })?),
        None => None,
    };
    let limits = crate::loading::LoadingLimits::of(&config, authenticated);
    let (handover_tx, mut handover_rx) = tokio::sync::mpsc::channel(limits.clients_max.max(1));
    let (control, control_rxs) = crate::control::channels(usize::from(local));
    let now = crate::time::wall_ms();
    let (node, inboxes) = Node::new(
        slots,
        site,
        placement.clone(),
        topology.describe(),
        cluster,
        config.slowlog_max_len,
        now,
        client_tls.clone(),
    );
    lock(&node.client_port).port = config.port;
    // Each thread reports when its shard is open (or why it could not open); the process
    // ends with the first thread that ends by itself.
    let (ready_tx, mut ready_rx) =
        tokio::sync::mpsc::unbounded_channel::<(u16, Result<(), String>)>();
    let (ended_tx, mut ended_rx) = tokio::sync::mpsc::unbounded_channel::<u16>();
    let mut handles = Vec::with_capacity(usize::from(local));
    for (i, (inbox, control_rx)) in inboxes.into_iter().zip(control_rxs).enumerate() {
        let index = first + i as u16;
        let setup = ThreadSetup {
            index,
            node: node.clone(),
            config: config.clone(),
            place: placement
                .get(i)
                .copied()
                .unwrap_or(Place { cpu: None, node: 0 }),
            tls: tls.clone(),
            stop: stop_rx.clone(),
            ready: ready_tx.clone(),
            control: control_rx,
        };
        let ended = ended_tx.clone();
        let handle = std::thread::Builder::new()
            .name(format!("shard-{index}"))
            .spawn(move || {
                let r = run_thread(setup, inbox);
                let _ = ended.send(index);
                r
            })
            .map_err(ServerError::Runtime)?;
        handles.push(handle);
    }
    drop(ready_tx);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(ServerError::Runtime)?;
    let started = std::time::Instant::now();
    let (loaded_all_tx, loaded_all_rx) = watch::channel(false);
    let endpoint = Arc::new(crate::metrics::http::Endpoint {
        site: config.site.clone(),
        deployment_id: config.deployment_id.clone(),
        shards: control.clone(),
        loaded: loaded_all_rx.clone(),
        started,
    });
    tracing::info!(%addr, dir = %config.dir.display(), "loading the data");
    let mut failure: Option<ServerError> = None;
    let all_ended = rt.block_on(async {
        if let Some(l) = metrics_listener {
            tokio::spawn(crate::metrics::http::serve(l, endpoint));
        }
        let responder = loading_listener
            .map(|l| tokio::spawn(crate::loading::serve(l, limits, loaded_all_rx, handover_tx)));
        let signal = wait_for_signal(tls.as_deref(), client_tls.as_deref());
        tokio::pin!(signal);
        let mut left = usize::from(local);
        // systemd's start timeout is extended while loading goes on: loading is bounded
        // work, and a data set of any size must be able to start.
        let mut tick = tokio::time::interval(crate::service::EXTEND_EVERY);
        let mut loaded = 0u16;
        let mut stopping = false;
        while loaded < local {
            tokio::select! {
                () = &mut signal => {
                    crate::service::stopping();
                    tracing::info!("received shutdown signal while loading, stopping");
                    stopping = true;
                    break;
                }
                r = ready_rx.recv() => match r {
                    Some((_, Ok(()))) => loaded += 1,
                    Some((i, Err(e))) => {
                        failure = Some(ServerError::Persist(format!("shard {i}: {e}")));
                        stopping = true;
                        break;
                    }
                    None => {
                        failure = Some(ServerError::Shard("a shard thread ended at start".into()));
                        stopping = true;
                        break;
                    }
                },
                _ = tick.tick() => crate::service::extend(&format!(
                    "Loading the data ({} s)",
                    started.elapsed().as_secs()
                )),
            }
        }
        if !stopping {
            let _ = loaded_all_tx.send(true);
            if let Some(r) = responder {
                let _ = r.await;
            }
            // The connections taken while loading go to the threads in turn as each hands
            // itself over, until the last has (the channel closes); meanwhile the threads
            // accept their own. Each connection's task sends its handover when it sees the
            // end of loading, which may be after the responder returned: a loop that took
            // only those already sent left the others unserved, their clients waiting forever.
            let forward = node.clone();
            tokio::spawn(async move {
                while let Some(h) = handover_rx.recv().await {
                    let h: crate::loading::Handover = h;
                    let id = forward.client_id();
                    let to = forward.next_conn_thread();
                    if let Some(inbox) = forward.inbox(to) {
                        let _ = inbox
                            .send(Msg::Accept(
                                h.stream,
                                id,
                                h.input,
                                crate::stream::Transport::Tcp,
                            ))
                            .await;
                    }
                }
            });
            if let Err(e) =
                start_listeners(&node, listener, tls_listener, sync_listener, endpoints).await
            {
                failure = Some(e);
                stopping = true;
            }
        }
        if !stopping {
            tracing::info!(
                %addr,
                port = config.port,
                tls_port = config.tls_port,
                site = %config.site,
                shards,
                load_ms = started.elapsed().as_millis() as u64,
                "Meridian ready to accept connections"
            );
            crate::service::ready(&format!("Ready: accepting connections on {addr}"));
            tokio::spawn(crate::service::watchdog(control.clone()));
            tokio::select! {
                () = &mut signal => {
                    crate::service::stopping();
                    tracing::info!("received shutdown signal, stopping");
                }
                _ = ended_rx.recv() => left -= 1,
            }
        }
        // Long commands poll this and end; each shard then closes its clients, writes its
        // final snapshot (by the `save` policy) and writes and fsyncs its log. systemd's stop
        // timeout is extended meanwhile; the wait itself is bounded by SHUTDOWN_WAIT_MAX (not
        // while a final snapshot is being written) and a second signal.
        crate::stop::request();
        let _ = stop_tx.send(true);
        let deadline = tokio::time::sleep(SHUTDOWN_WAIT_MAX);
        tokio::pin!(deadline);
        let second = wait_for_signal(None, None);
        tokio::pin!(second);
        let mut tick = tokio::time::interval(crate::service::EXTEND_EVERY);
        let stop_began = tokio::time::Instant::now();
        while left > 0 {
            tokio::select! {
                r = ended_rx.recv() => match r {
                    Some(_) => left -= 1,
                    None => break,
                },
                () = &mut deadline => {
                    if crate::stop::final_saves() == 0 {
                        return false;
                    }
                    // Shards still writing their final snapshot are waited for.
                    deadline.as_mut().reset(tokio::time::Instant::now() + SHUTDOWN_WAIT_MAX);
                }
                () = &mut second => {
                    tracing::error!(
                        "second shutdown signal: exiting now, without closing the shards' logs"
                    );
                    std::process::exit(1);
                }
                // Past STOP_EXTEND_MAX systemd's own stop timeout applies again (a snapshot
                // that has not ended by then is stuck, on a disk that does not answer).
                _ = tick.tick(), if stop_began.elapsed() < crate::service::STOP_EXTEND_MAX => {
                    crate::service::extend(if crate::stop::final_saves() > 0 {
                        "Stopping: writing the final snapshot"
                    } else {
                        "Stopping: writing the op log to disk"
                    });
                }
            }
        }
        true
    });
    if !all_ended {
        // Records already written (write(2)) are in the kernel's page cache and survive
        // the exit; only an unfinished batch, never acknowledged, can be lost, and
        // recovery reads a torn tail as the end of the log.
        tracing::error!(
            wait_s = SHUTDOWN_WAIT_MAX.as_secs(),
            "a shard did not stop in time; exiting without closing its log"
        );
        std::process::exit(1);
    }
    let mut result = Ok(());
    for h in handles {
        match h.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => result = Err(e),
            Err(_) => result = Err(ServerError::Shard("panicked".to_string())),
        }
    }
    match failure {
        Some(e) => Err(e),
        None => result,
    }
}

/// The slot map: the data directory's (`slot-map`), or a new one of `shards` (or one per
/// allowed CPU) contiguous ranges, written there. A directory keeps the shard count it was
/// created with: a different `--shards` is refused, naming both.
fn slot_map(config: &Config, allowed_cpus: usize) -> Result<SlotMap, ServerError> {
    let path = config.dir.join(SLOT_MAP_FILE);
    let err = |message: String| ServerError::SlotMap {
        path: path.display().to_string(),
        message,
    };
    let existing = match std::fs::metadata(&path) {
        Ok(m) if m.len() > SLOT_MAP_BYTES_MAX => {
            return Err(err(format!("larger than {SLOT_MAP_BYTES_MAX} bytes")));
        }
        Ok(_) => {
            let text = std::fs::read_to_string(&path).map_err(|e| err(e.to_string()))?;
            Some(SlotMap::from_text(&text).map_err(|e| err(e.to_string()))?)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            // A directory from before slot maps holds one shard.
            config
                .dir
                .join("shard-0")
                .is_dir()
                .then(|| SlotMap::contiguous(1))
        }
        Err(e) => return Err(err(e.to_string())),
    };
    let map = match existing {
        Some(map) => {
            if config.shards != 0 && u32::from(map.shards()) != config.shards {
                return Err(err(format!(
                    "this data directory holds a site of {} shards; start it with --shards {} (or 0), or start --shards {} on an empty directory",
                    map.shards(),
                    map.shards(),
                    config.shards
                )));
            }
            map
        }
        None => SlotMap::contiguous(config.shard_count(allowed_cpus)),
    };
    write_slot_map(&config.dir, &map).map_err(|e| err(e.to_string()))?;
    Ok(map)
}

/// Writes the slot map file if it differs (a new file, then rename, then the directory
/// synced).
fn write_slot_map(dir: &Path, map: &SlotMap) -> std::io::Result<()> {
    let path = dir.join(SLOT_MAP_FILE);
    let text = map.to_text();
    if std::fs::read_to_string(&path).ok().as_deref() == Some(text.as_str()) {
        return Ok(());
    }
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!("{SLOT_MAP_FILE}.tmp"));
    {
        use std::io::Write as _;
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, &path)?;
    std::fs::File::open(dir)?.sync_all()
}

/// "0:cpu=0,node=0 1:cpu=1,node=0" (shard `first` + i at `placement[i]`) for the start-up
/// log and INFO.
pub fn describe_placement(first: u16, placement: &[Place]) -> String {
    placement
        .iter()
        .enumerate()
        .map(|(i, p)| (usize::from(first) + i, p))
        .map(|(i, p)| match p.cpu {
            Some(c) => format!("{i}:cpu={c},node={}", p.node),
            None => format!("{i}:cpu=any,node={}", p.node),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The command a link to another node of the site opens with: the endpoint checks that
/// the dialer is of its deployment, site and topology epoch, and then runs the link's
/// commands as they are (no redirect, no fan-out, PUBLISH not logged again).
pub fn link_handshake(config: &Config, site: &crate::topology::SiteNodes) -> Vec<Vec<u8>> {
    vec![
        crate::conn::LINK_HANDSHAKE.to_vec(),
        config.deployment_id.as_bytes().to_vec(),
        config.site.as_bytes().to_vec(),
        site.topology.epoch.to_string().into_bytes(),
        site.this()
            .map_or("", |n| n.name.as_str())
            .as_bytes()
            .to_vec(),
    ]
}

/// A site across several nodes (`--topology FILE --node NAME`): the topology, checked, and
/// this node's ports from it (the file is the one source of every node's addresses).
fn site_nodes(config: &mut Config) -> Result<Option<Arc<crate::topology::SiteNodes>>, ServerError> {
    if config.topology.as_os_str().is_empty() {
        if !config.node_name.is_empty() {
            return Err(ServerError::Site(
                "--node names a node of a topology file: give --topology too".to_string(),
            ));
        }
        return Ok(None);
    }
    if config.node_name.is_empty() {
        return Err(ServerError::Site(
            "--topology needs --node NAME: which node of the file this process is".to_string(),
        ));
    }
    let t = crate::topology::Topology::read(&config.topology)?;
    let site = crate::topology::SiteNodes::new(t, &config.node_name)?;
    if config.cluster_api == Some(false) {
        return Err(ServerError::Site(
            "a site across nodes needs the cluster API (nodes reach each other's shards through their endpoints): drop --cluster-api no".to_string(),
        ));
    }
    let Some(me) = site.this().cloned() else {
        return Err(ServerError::Site(
            "this node is not in the file".to_string(),
        ));
    };
    if config.shards != 0 && config.shards != u32::from(me.shards) {
        return Err(ServerError::Site(format!(
            "node {:?} runs {} shards in the topology file but --shards is {}",
            me.name, me.shards, config.shards
        )));
    }
    config.shards = u32::from(me.shards);
    config.port = me.port;
    config.cluster_endpoint_port = me.endpoint_port;
    if me.sync_port != 0 {
        config.sync_port = me.sync_port;
    }
    config.cluster_announce_ip = me.ip.clone();
    if !config.peer.is_empty() && config.sync_port == 0 {
        return Err(ServerError::Site(format!(
            "node {:?} has no sync-port in the topology file but the site has peers",
            me.name
        )));
    }
    tracing::info!(
        node = %me.name,
        epoch = site.topology.epoch,
        nodes = site.topology.nodes.len(),
        site_shards = site.topology.shards(),
        "site across nodes"
    );
    Ok(Some(Arc::new(site)))
}

/// The slot map of a node of a multi-node site: the topology's; a data directory holding
/// another map is refused, naming both (moving slots between shards moves their data).
fn site_slot_map(config: &Config, t: &crate::topology::Topology) -> Result<SlotMap, ServerError> {
    let path = config.dir.join(SLOT_MAP_FILE);
    let err = |message: String| ServerError::SlotMap {
        path: path.display().to_string(),
        message,
    };
    if let Ok(text) = std::fs::read_to_string(&path) {
        let existing = SlotMap::from_text(&text).map_err(|e| err(e.to_string()))?;
        if existing != t.slots {
            return Err(err(format!(
                "this data directory holds a slot map of {} shards that differs from the topology's (epoch {}, {} shards); start this node on its own directory",
                existing.shards(),
                t.epoch,
                t.shards()
            )));
        }
    }
    write_slot_map(&config.dir, &t.slots).map_err(|e| err(e.to_string()))?;
    Ok(t.slots.clone())
}

/// A node of a multi-node site: its shards' endpoints (bound) and the map of every shard of
/// the site.
#[allow(clippy::type_complexity)]
fn bind_site(
    config: &Config,
    site: &crate::topology::SiteNodes,
) -> Result<
    (
        Option<crate::topology::ClusterMap>,
        Vec<std::net::TcpListener>,
    ),
    ServerError,
> {
    let ip: std::net::IpAddr = config.bind.parse().map_err(|_| ServerError::Listen {
        addr: config.bind.clone(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidInput, "bad address"),
    })?;
    let (_, local) = site.local();
    let mut listeners = Vec::with_capacity(usize::from(local));
    for k in 0..local {
        let port = config
            .endpoint_port(k)
            .ok_or_else(|| ServerError::Site("cluster endpoint port beyond 65535".to_string()))?;
        listeners.push(listen(std::net::SocketAddr::new(ip, port))?);
    }
    let map = site
        .topology
        .cluster_map(&config.deployment_id, &config.site);
    Ok((Some(map), listeners))
}

/// With the cluster API on: the endpoint of each shard (bound) and the map describing them.
#[allow(clippy::type_complexity)]
fn bind_cluster(
    config: &Config,
    shards: u16,
) -> Result<
    (
        Option<crate::topology::ClusterMap>,
        Vec<std::net::TcpListener>,
    ),
    ServerError,
> {
    if !config.cluster_enabled(shards) {
        return Ok((None, Vec::new()));
    }
    let ip: std::net::IpAddr = config.bind.parse().map_err(|_| ServerError::Listen {
        addr: config.bind.clone(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidInput, "bad address"),
    })?;
    let mut ports = Vec::with_capacity(usize::from(shards));
    let mut listeners = Vec::with_capacity(usize::from(shards));
    for shard in 0..shards {
        let port = config
            .endpoint_port(shard)
            .ok_or_else(|| ServerError::Listen {
                addr: format!("{}:{}+{shard}", config.bind, config.cluster_endpoint_port),
                source: std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "cluster endpoint port beyond 65535",
                ),
            })?;
        listeners.push(listen(std::net::SocketAddr::new(ip, port))?);
        ports.push(port);
    }
    let map = crate::topology::ClusterMap::new(
        &config.deployment_id,
        &config.site,
        &config.cluster_ip(),
        &ports,
    );
    tracing::info!(
        endpoints = %ports.iter().map(u16::to_string).collect::<Vec<_>>().join(","),
        "cluster API on: one endpoint per shard"
    );
    Ok((Some(map), listeners))
}

/// Starts the accept loops: on thread 0 the main port's and the TLS port's (clients spread
/// over the threads) and the sync port's; on each shard's thread its cluster endpoint's.
async fn start_listeners(
    node: &Arc<Node>,
    listener: Option<std::net::TcpListener>,
    tls_listener: Option<std::net::TcpListener>,
    sync_listener: Option<std::net::TcpListener>,
    endpoints: Vec<std::net::TcpListener>,
) -> Result<(), ServerError> {
    let inbox = node
        .inbox(node.first)
        .ok_or_else(|| ServerError::Shard("no shard thread".into()))?;
    inbox
        .send(Msg::Job(Box::new(move |th: &Rc<Thread>| {
            tokio::task::spawn_local(client_port_loop(th.clone(), listener));
            if let Some(l) = tls_listener {
                tokio::task::spawn_local(accept_loop(th.clone(), l, Transport::Tls));
            }
            crate::sync::link::start_listener(th, sync_listener);
        })))
        .await
        .map_err(|_| ServerError::Shard("shard 0 ended at start".into()))?;
    for (i, l) in endpoints.into_iter().enumerate() {
        let shard = node.first + i as u16;
        let inbox = node
            .inbox(shard)
            .ok_or_else(|| ServerError::Shard(format!("no thread for shard {shard}")))?;
        inbox
            .send(Msg::Job(Box::new(move |th: &Rc<Thread>| {
                tokio::task::spawn_local(endpoint_loop(th.clone(), l));
            })))
            .await
            .map_err(|_| ServerError::Shard(format!("shard {shard} ended at start")))?;
    }
    Ok(())
}

/// Runs the plain client port's accept loop, and replaces it when CONFIG SET binds another
/// port (`switch_client_port`): the old loop ends, which closes its listener, and clients
/// already connected stay, as in Redis's `changeListenPort`.
async fn client_port_loop(th: Rc<Thread>, listener: Option<std::net::TcpListener>) {
    let mut current =
        listener.map(|l| tokio::task::spawn_local(accept_loop(th.clone(), l, Transport::Tcp)));
    loop {
        th.node.client_port_changed.notified().await;
        if th.shard.borrow().shutting_down {
            return;
        }
        let next = lock(&th.node.client_port).next.take();
        if let Some(next) = next {
            if let Some(old) = current.take() {
                old.abort();
            }
            current =
                next.map(|l| tokio::task::spawn_local(accept_loop(th.clone(), l, Transport::Tcp)));
        }
    }
}

/// CONFIG SET port: binds `port` on `bind` (0: none) and hands the listener to the client
/// port's loop. Nothing changes when it cannot be bound (the caller answers Redis's "Unable
/// to listen on this port"), nor when `port` is the one bound. A node of a site of several
/// nodes keeps the port its topology names: the other nodes reach it there.
pub fn switch_client_port(node: &Node, bind: &str, port: u16) -> Result<(), ServerError> {
    let mut cp = lock(&node.client_port);
    if cp.port == port {
        return Ok(());
    }
    if node.site.is_some() {
        return Err(ServerError::Site(
            "a node of a site of several nodes keeps the port its topology names".to_string(),
        ));
    }
    let listener = if port == 0 {
        None
    } else {
        let ip: std::net::IpAddr = bind.parse().map_err(|_| ServerError::Listen {
            addr: bind.to_string(),
            source: std::io::Error::new(std::io::ErrorKind::InvalidInput, "bad address"),
        })?;
        Some(listen(std::net::SocketAddr::new(ip, port))?)
    };
    cp.port = port;
    cp.next = Some(listener);
    drop(cp);
    node.client_port_changed.notify_one();
    Ok(())
}

/// Accepts the clients of this shard's cluster endpoint: they live on this thread.
async fn endpoint_loop(th: Rc<Thread>, listener: std::net::TcpListener) {
    let listener = match TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(error = %e, "cluster endpoint unusable");
            return;
        }
    };
    loop {
        if th.shard.borrow().shutting_down {
            return;
        }
        match listener.accept().await {
            Ok((stream, _)) => {
                let id = th.node.client_id();
                let admitted = crate::conn::admit(
                    &th,
                    crate::stream::ClientStream::plain(stream),
                    id,
                    Some(th.index),
                    bytes::BytesMut::new(),
                );
                if let Some(a) = admitted {
                    tokio::task::spawn_local(crate::conn::serve_admitted(th.clone(), a));
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

/// Accepts clients and hands each to the next thread in turn (this one serves its share).
/// A TLS connection's handshake runs on the thread it is handed to (`conn::accepted`).
async fn accept_loop(th: Rc<Thread>, listener: std::net::TcpListener, transport: Transport) {
    let listener = match TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(error = %e, "client listener unusable");
            return;
        }
    };
    // A script running long on this thread takes and answers new connections of the plain
    // port itself (`script::busy`), then hands them to connection tasks here; the TLS port's
    // wait in its backlog until the script ends.
    let listener = Rc::new(listener);
    if transport == Transport::Tcp {
        th.shard.borrow_mut().scripting.listener = Some(Rc::downgrade(&listener));
    }
    loop {
        if th.shard.borrow().shutting_down {
            return;
        }
        match listener.accept().await {
            Ok((stream, _)) => {
                let id = th.node.client_id();
                let to = th.node.next_conn_thread();
                if to == th.index {
                    crate::conn::accepted(&th, stream, id, bytes::BytesMut::new(), transport);
                    continue;
                }
                let Ok(std_stream) = stream.into_std() else {
                    continue;
                };
                if let Some(inbox) = th.node.inbox(to) {
                    if inbox
                        .send(Msg::Accept(
                            std_stream,
                            id,
                            bytes::BytesMut::new(),
                            transport,
                        ))
                        .await
                        .is_err()
                    {
                        return;
                    }
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

/// How long the process waits after SIGINT/SIGTERM for its shards to stop (they end long
/// commands at their next poll of `crate::stop`, then close the log) before it exits anyway;
/// renewed while a shard writes its final snapshot (`crate::stop::FinalSave`).
pub const SHUTDOWN_WAIT_MAX: Duration = Duration::from_secs(10);

/// Waits for SIGINT or SIGTERM; on SIGHUP reopens the log file and re-reads the sync TLS
/// files and the client TLS files (links and connections established before keep their
/// sessions; new ones use the new files; a file that fails to load keeps the previous ones).
async fn wait_for_signal(
    tls: Option<&meridian_syncer::TlsContext>,
    client_tls: Option<&crate::tls::ClientTls>,
) {
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
            _ = term.recv() => {
                crate::stop::set_signal(crate::stop::Signal::Term);
                return;
            }
            _ = int.recv() => {
                crate::stop::set_signal(crate::stop::Signal::Int);
                return;
            }
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
                if let Some(ctx) = client_tls {
                    match ctx.reload_files() {
                        Ok(()) => tracing::info!("SIGHUP: client TLS files reloaded"),
                        Err(e) => tracing::error!(error = %e, "SIGHUP: client TLS reload failed; keeping the previous files"),
                    }
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

/// Binds the plain client port (none with `port 0`).
fn bind(config: &Config) -> Result<Option<std::net::TcpListener>, ServerError> {
    bind_client_port(config, config.port)
}

/// Binds the TLS client port (none with `tls-port 0`).
fn bind_tls(config: &Config) -> Result<Option<std::net::TcpListener>, ServerError> {
    bind_client_port(config, config.tls_port)
}

fn bind_client_port(
    config: &Config,
    port: u16,
) -> Result<Option<std::net::TcpListener>, ServerError> {
    if port == 0 {
        return Ok(None);
    }
    let ip: std::net::IpAddr = config.bind.parse().map_err(|_| ServerError::Listen {
        addr: config.bind.clone(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidInput, "bad address"),
    })?;
    listen(std::net::SocketAddr::new(ip, port)).map(Some)
}

pub fn listen(addr: std::net::SocketAddr) -> Result<std::net::TcpListener, ServerError> {
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

/// What a shard thread starts from.
struct ThreadSetup {
    index: u16,
    node: Arc<Node>,
    config: Config,
    place: Place,
    tls: Option<Arc<meridian_syncer::TlsContext>>,
    stop: watch::Receiver<bool>,
    ready: tokio::sync::mpsc::UnboundedSender<(u16, Result<(), String>)>,
    /// Requests of the control thread (`crate::control`: heartbeats, figures).
    control: tokio::sync::mpsc::Receiver<crate::control::ShardRequest>,
}

/// A shard thread: pins itself, builds its runtime, opens its shard, then serves its
/// inbox, its connections and its replication links until `stop` turns true.
fn run_thread(
    setup: ThreadSetup,
    inbox: tokio::sync::mpsc::Receiver<Msg>,
) -> Result<(), ServerError> {
    let ThreadSetup {
        index,
        node,
        config,
        place,
        tls,
        mut stop,
        ready,
        control,
    } = setup;
    if let Some(cpu) = place.cpu {
        if !crate::numa::pin(cpu) {
            tracing::warn!(shard = index, cpu, "could not pin the shard thread");
        }
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(ServerError::Runtime)?;
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, async move {
        let now = crate::time::wall_ms();
        let proxy = node.site.as_ref().map(|site| {
            Rc::new(meridian_proxy::Pool::new(
                meridian_proxy::Limits::default(),
                vec![link_handshake(&config, site)],
            ))
        });
        let mut shard = Shard::in_site(index, node.slots.clone(), config, now);
        shard.evict.share(
            node.memory.clone(),
            usize::from(index.saturating_sub(node.first)),
        );
        shard.sync.tls = tls;
        let hook_node = node.clone();
        shard.publish_hook = Some(PublishHook(Box::new(
            move |channel, message, sharded, config, now_ms| {
                crate::cmd::pubsub::deliver_remote(
                    &crate::node::lock(&hook_node.pubsub),
                    &config.client_output_buffer_limit,
                    now_ms,
                    channel,
                    message,
                    sharded,
                );
                // The site's other nodes have subscribers too: they deliver it, unlogged.
                let word: &[u8] = if sharded { b"SPUBLISH" } else { b"PUBLISH" };
                crate::cmd::pubsub::forward_to_nodes(&[word, channel, message]);
            },
        )));
        shard.tracking = crate::tracking::Tracking::new(node.tracking.clone());
        let tracking_node = node.clone();
        shard.tracking.hook = Some(crate::tracking::InvalidateHook(Box::new(
            move |id, what, config, now_ms| {
                crate::cmd::tracking::deliver(&tracking_node, id, what, config, now_ms);
            },
        )));
        let notify_node = node.clone();
        shard.notify_hook = Some(PublishHook(Box::new(
            move |channel, message, _sharded, config, now_ms| {
                // Keyspace events reach this process's subscribers only: each node of a
                // site notifies about its own keys, as each Redis Cluster node does.
                crate::cmd::pubsub::deliver_remote(
                    &crate::node::lock(&notify_node.pubsub),
                    &config.client_output_buffer_limit,
                    now_ms,
                    channel,
                    message,
                    false,
                );
            },
        )));
        if let (Some(site), Some(pool)) = (&node.site, &proxy) {
            crate::cmd::pubsub::start_forwarders(pool.clone(), site.other_nodes());
        }
        // The users come first (`aclfile`, checked already by `clients_start_authenticated`),
        // as Redis loads them before its data.
        let opened = load_acl_file(&mut shard)
            .map_err(|e| e.to_string())
            .and_then(|()| shard.open_persistence().map_err(|e| e.to_string()));
        let _ = ready.send((index, opened.clone()));
        if let Err(e) = opened {
            return Err(ServerError::Persist(e));
        }
        let shard = Rc::new(RefCell::new(shard));
        let front = Rc::new(RefCell::new(Front::new(
            index,
            node.clone(),
            crate::cmd::table(),
        )));
        let remote_tracking = proxy.as_ref().map(|_| {
            Rc::new(crate::remote_tracking::RemoteTracking::new(
                node.clone(),
                shard.clone(),
            ))
        });
        // One thread of the process registers its BCAST prefixes on the other nodes.
        if let (Some(site), Some(pool), Some(rt)) = (&node.site, &proxy, &remote_tracking) {
            if index == node.first {
                crate::remote_tracking::start_bcast(rt.clone(), pool.clone(), site.other_nodes());
            }
        }
        let th = Rc::new(Thread {
            index,
            node: node.clone(),
            shard: shard.clone(),
            front: front.clone(),
            proxy,
            remote_tracking,
        });
        {
            // A script that runs long answers this thread's clients from its hook, and ends
            // the process on a stop request (`script::busy`); connections it accepts go to
            // connection tasks here. Its keys must be this shard's.
            let weak = Rc::downgrade(&th);
            let mut s = shard.borrow_mut();
            s.scripting.stop = Some(stop.clone());
            s.scripting.board = Some((node.busy.clone(), usize::from(index - node.first)));
            s.acl.log = node.acl_log.clone();
            s.scripting.slots = (node.shards > 1).then(|| (*node.slots).clone());
            s.scripting.bodies = (node.local > 1).then(|| node.script_bodies.clone());
            s.scripting.spawn_conn = Some(Rc::new(move |early: crate::script::busy::EarlyConn| {
                if let Some(th) = weak.upgrade() {
                    tokio::task::spawn_local(async move {
                        let unsent = &early.unsent;
                        if !unsent.is_empty() && early.stream.write_all(unsent).await.is_err() {
                            return;
                        }
                        crate::conn::serve_early(th, early).await;
                    });
                }
            }));
            let ids = node.clone();
            s.scripting.client_id = Some(Rc::new(move || ids.client_id()));
            s.scripting.cluster_api = node.cluster.is_some();
        }
        tokio::task::spawn_local(periodic(th.clone()));
        tokio::task::spawn_local(flush_loop(shard.clone()));
        tokio::task::spawn_local(crate::hop::inbox(th.clone(), inbox));
        tokio::task::spawn_local(crate::control::serve(shard.clone(), front.clone(), control));
        crate::sync::link::start(&shard);
        let _ = stop.changed().await;
        let mut s = shard.borrow_mut();
        s.shutting_down = true;
        for c in front.borrow().clients.values() {
            c.kill();
        }
        // A signal stops the process as SHUTDOWN does (Redis's SIGTERM): the final snapshot
        // first, by the `save` policy or as `shutdown-on-sigterm`/`-sigint` say; a failed one
        // is logged and the stop goes on (the log, when there is one, still holds every
        // write).
        let save = crate::stop::signal().and_then(|sig| signal_save(&s.config, sig));
        if let Err(e) = s.final_snapshot(save) {
            tracing::error!(error = %e, "Error trying to save the DB before exiting");
        }
        s.persist.close();
        Ok(())
    })
}

/// What `shutdown-on-sigterm` or `shutdown-on-sigint` say of the final snapshot, as Redis
/// reads them: `save` writes one, `nosave` none, and `default` (also with `now` or `force`,
/// which change nothing here: Meridian waits for no replica, and a signal's stop goes on
/// after a failed snapshot) leaves it to the `save` policy (None).
fn signal_save(config: &Config, signal: crate::stop::Signal) -> Option<bool> {
    let value = crate::config::params::find(signal.param().as_bytes())
        .map(|p| p.get(config))
        .unwrap_or_default();
    let has = |flag: &str| {
        value
            .split_whitespace()
            .any(|w| w.eq_ignore_ascii_case(flag))
    };
    if has("nosave") {
        Some(false)
    } else if has("save") {
        Some(true)
    } else {
        None
    }
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

/// Runs `hz` times a second: active expiry, incremental rehash, GC, snapshots (the shard's
/// part), idle-client timeouts and ops-per-second sampling (the front's).
async fn periodic(th: Rc<Thread>) {
    loop {
        let hz = th.shard.borrow().config.hz.max(1);
        tokio::time::sleep(Duration::from_millis(1000 / u64::from(hz))).await;
        let mut s = th.shard.borrow_mut();
        if s.shutting_down {
            return;
        }
        if s.stats.cron_paused {
            continue;
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
            crate::node::lock(&th.node.latency).record("expire-cycle", now / 1000, ms, threshold);
        }
        s.rehash_cycle(REHASH_CYCLE_TIME_MAX);
        s.oplog.release_idle();
        // Redis's eviction time proc: a command that ran out of tenacity left the process
        // over its limit; go on here. Only then: Redis evicts before commands, not between
        // them (a client tracking a key sees its invalidation before the reply of the
        // command that needed the room, not at some tick before).
        if s.config.maxmemory != 0 && s.evict.running() {
            s.perform_evictions(now);
        }
        if s.tracking.active() {
            s.tracking_limit();
            s.tracking_broadcast();
        }
        s.stats
            .note_memory(crate::cmd::server::memory_use().allocated);
        s.gc_step(now, crate::sync::gc::GC_STEP_BUCKETS_MAX);
        s.persistence_cycle(now);
        let timeout_s = s.config.timeout;
        drop(s);
        let mut f = th.front.borrow_mut();
        let total = f.stats.total_commands_processed;
        f.stats.ops_sample.sample(now, total);
        for c in f.clients.values() {
            if c.plan_query_buffer_resize(now) {
                c.mailbox.wake.notify_one();
            }
        }
        if timeout_s > 0 {
            for c in f.clients.values() {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stop::Signal;

    #[test]
    fn signal_parameters_decide_the_final_snapshot() {
        let mut config = Config::default();
        assert_eq!(signal_save(&config, Signal::Term), None);
        for (value, want) in [
            ("save", Some(true)),
            ("nosave", Some(false)),
            ("now nosave", Some(false)),
            ("force save", Some(true)),
            ("default", None),
            ("now", None),
        ] {
            let p = crate::config::params::find(b"shutdown-on-sigint").unwrap();
            let canonical = p.parse(value).unwrap();
            config.stored.insert("shutdown-on-sigint".into(), canonical);
            assert_eq!(signal_save(&config, Signal::Int), want, "{value}");
            assert_eq!(signal_save(&config, Signal::Term), None, "{value}");
        }
    }
}
