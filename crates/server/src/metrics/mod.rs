//! `/metrics` (Prometheus) and `/health` over HTTP on `--metrics-port`.
//!
//! The HTTP server runs on the control thread. A scrape asks every shard for a copy of its
//! plain counters (`control::ShardRequest::Figures`, answered between commands) and renders
//! them; nothing is added to the command path. `/health` answers 200 once every shard has
//! loaded and answers, and with `?max_lag_ms=N` only while every peer's lag is under N ms.
//!
//! - `figures`: what a shard reports (`Shard::figures`).
//! - `render`: the Prometheus text (redis_exporter's names, then `meridian_*`).
//! - `health`: the health verdict and its JSON body.
//! - `http`: the HTTP server.

pub mod figures;
pub mod health;
pub mod http;
pub mod render;

pub use figures::{PeerFigures, ShardFigures};
