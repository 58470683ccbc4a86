//! The Meridian server: a Redis-compatible RESP server whose keyspace holds CRDT values.
//!
//! A process runs one pinned thread per shard, each with a single-threaded runtime that owns
//! its part of the keyspace (a set of hash slots); a connection lives on one thread, runs the
//! commands whose keys that thread's shard owns inline, without locks, and sends the others
//! to the owning thread as messages. Every write is
//! applied to a CRDT (`meridian_crdt`) and recorded as an op in the shard's op log, which the
//! syncer streams to other sites. Not here: the CRDT types themselves (`meridian-crdt`).
//!
//! # Layout
//! - `alloc`: the allocator's controls (MEMORY PURGE).
//! - `config`: defaults, TOML file and flags.
//! - `admin`: `meridian admin`, a command sent to every site of a deployment; a plain RESP
//!   client.
//! - `rdb_import`: `meridian import-rdb`, an RDB file's data RESTOREd into a running server.
//! - `certs`: `meridian certs init`, the CA and site certificates for the syncer's TLS.
//! - `server`: start-up, the slot map, the shard threads, the periodic cycle, shutdown.
//! - `numa`: allowed CPUs and NUMA nodes; where shard threads are pinned.
//! - `node`: what the threads of a process share (slot map, inboxes, process-wide
//!   registries).
//! - `hop`: a thread's state and the messages between threads (batches of commands, jobs).
//! - `shard`: what a shard owns: keyspace, clock, op log, persistence, replication.
//! - `front`: what a thread owns for its connections: clients, command counters.
//! - `route`: which shard runs a command; merging replies of several shards.
//! - `info_merge`: one INFO from every thread's.
//! - `topology`: the Redis Cluster view (an endpoint and a node id per shard) and a site's
//!   topology file (its nodes).
//! - `conn`: one connection's read–parse–dispatch–write loop, the coordinator of its
//!   commands.
//! - `stream`: a client's byte stream, plain TCP or TLS, one type for both.
//! - `tls`: client TLS (`tls-port`): the `tls-*` parameters, reloads, the handshake.
//! - `stop`: the process-wide stop request that long loops poll.
//! - `metrics`: `/metrics` (Prometheus) and `/health` on the metrics port.
//! - `control`: requests of the control thread to shard threads (heartbeats, figures).
//! - `service`: systemd notifications (READY, STATUS, STOPPING, watchdog, timeouts).
//! - `loading`: the client port while shards load (`-LOADING`), then the handover.
//! - `logging`: log lines (text or JSON, the site on each), the log file and its reopening.
//! - `tracking`: client-side caching, the shard's part: who read which key, BCAST
//!   prefixes, the invalidations a change sends.
//! - `client`: per-connection state and what other connections may see of it.
//! - `blocking`: blocked clients (BLPOP and the like): the registry, `Ctx::block`, timeouts.
//! - `resp`: the request parser and the reply builder.
//! - `script`: Lua scripting (EVAL, FUNCTION): engines, sandbox, conversions, busy scripts.
//! - `cmd`: the command table, dispatch, and the command families.
//! - `acl`: users, AUTH, permission checks, the ACL log and file (per site, not replicated).
//! - `keyspace`: databases, lookups with lazy expiry, the single write path.
//! - `notify`: keyspace notifications (`notify-keyspace-events`), published by the shard.
//! - `oplog`: the in-memory log of ops this shard originated.
//! - `persist`: the on-disk op log, snapshots, recovery, `check-log`.
//! - `sync`: replication between sites: links, remote apply, full sync, GC, digest.
//! - `slot`: key-to-slot hashing and the slot-to-shard table.
//! - `glob`: Redis's glob patterns, matched in O(text × pattern).
//! - `stats`: counters, slow log, latency monitor.
//! - `error`: `CmdError` and the only spelling of Redis's error texts.
//! - `time`: wall-clock helpers.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)
)]

pub mod acl;
pub mod admin;
pub mod alloc;
pub mod blocking;
pub mod certs;
pub mod client;
pub mod cmd;
pub mod config;
pub mod conn;
pub mod control;
pub mod error;
pub mod evict;
pub mod front;
pub mod glob;
pub mod held_across;
pub mod hop;
pub mod info_merge;
pub mod keyspace;
pub mod lazyfree;
pub mod loading;
pub mod logging;
pub mod metrics;
pub mod move_across;
pub mod node;
pub mod notify;
pub mod numa;
pub mod oplog;
pub mod persist;
pub mod rdb_import;
pub mod read_across;
pub mod remote_tracking;
pub mod resp;
pub mod route;
pub mod script;
pub mod server;
pub mod service;
pub mod sha1;
pub mod shard;
pub mod slot;
pub mod sort_across;
pub mod stats;
pub mod stop;
pub mod stream;
pub mod sync;
pub mod time;
pub mod tls;
pub mod topology;
pub mod tracking;
pub mod tx_across;
