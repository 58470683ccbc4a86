//! Hash-slot routing across the shards and nodes of one Meridian site.
//!
//! A site's slots belong to shards, and its shards to nodes (processes, possibly on other
//! machines). A node's main port takes any command: when the key's shard is on another
//! node, the command travels over a `Link`, a pooled, pipelined connection to that shard's
//! cluster endpoint, and its reply comes back in order. Links are per thread (tokio I/O
//! objects belong to the runtime that made them): each thread's `Pool` holds one per
//! (endpoint, protocol).
//!
//! What this crate is not: it does not parse commands or know their keys (the server's
//! routing does), and it never waits for ever: a link connects within `Limits::connect`, a
//! request is answered within `Limits::request` or fails (`ProxyError::Timeout`), and an
//! endpoint that could not be reached is failed fast (`ProxyError::Down`) until
//! `Limits::down_backoff` has passed.
//!
//! # Layout
//! - `reply`: framing of RESP replies read from a link (incremental, bounded).
//! - `link`: one pipelined connection: FIFO of pending batches, a reader task, timeouts.
//! - `pool`: a thread's links by endpoint and protocol, with down-marking.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)
)]

pub mod link;
pub mod pool;
pub mod reply;

pub use link::{Link, Request};
pub use pool::{Limits, Pool};

/// Why a forwarded command got no reply.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProxyError {
    /// The endpoint could not be reached (refused, unreachable, connect timed out), now or
    /// recently (`Limits::down_backoff`).
    #[error("node {addr} is down: {why}")]
    Down { addr: String, why: String },
    /// The endpoint did not answer within `Limits::request`.
    #[error("node {addr} did not answer within {ms} ms")]
    Timeout { addr: String, ms: u64 },
    /// The link broke with requests in flight (their writes may or may not have applied).
    #[error("link to {addr} lost: {why}")]
    Lost { addr: String, why: String },
    /// The endpoint sent bytes that are not RESP replies.
    #[error("link to {addr}: bad reply: {why}")]
    Protocol { addr: String, why: String },
    /// The endpoint refused the link's handshake (another site, another topology epoch).
    #[error("node {addr} refused the link: {why}")]
    Refused { addr: String, why: String },
}
