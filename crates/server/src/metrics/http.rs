//! The HTTP server of `--metrics-port`: `GET /metrics` and `GET /health`, HTTP/1.1 (hyper),
//! on the control thread. Off by default; on loopback by default when on.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use tokio::net::TcpListener;
use tokio::sync::watch;

use super::health::{HealthQuery, health};
use super::render::{ProcessFigures, render};
use crate::control::Shards;

/// Connections served at once; more wait in the listen queue.
pub const CONNS_MAX: usize = 64;
/// Longest a connection may stay open (a slow or idle client is cut).
pub const CONN_TIME_MAX: Duration = Duration::from_secs(30);
/// How long a scrape waits for the shards' figures.
pub const FIGURES_WAIT: Duration = Duration::from_secs(2);

/// What the endpoint needs.
pub struct Endpoint {
    pub site: String,
    pub deployment_id: String,
    pub shards: Shards,
    /// True once every shard has loaded its data.
    pub loaded: watch::Receiver<bool>,
    pub started: Instant,
}

/// Serves until the runtime stops.
pub async fn serve(listener: std::net::TcpListener, ep: Arc<Endpoint>) {
    let listener = match TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(error = %e, "metrics listener unusable");
            return;
        }
    };
    let slots = Arc::new(tokio::sync::Semaphore::new(CONNS_MAX));
    loop {
        let Ok(permit) = slots.clone().acquire_owned().await else {
            return;
        };
        let stream = match listener.accept().await {
            Ok((s, _)) => s,
            Err(e) => {
                tracing::warn!(error = %e, "metrics accept failed");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let ep = ep.clone();
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(move |req| {
                let ep = ep.clone();
                async move { Ok::<_, Infallible>(respond(&ep, req).await) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(stream), svc);
            let _ = tokio::time::timeout(CONN_TIME_MAX, conn).await;
            drop(permit);
        });
    }
}

fn reply(code: u16, content_type: &str, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    if let Ok(v) = hyper::header::HeaderValue::from_str(content_type) {
        r.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
    }
    r
}

async fn respond(ep: &Endpoint, req: Request<Incoming>) -> Response<Full<Bytes>> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return reply(405, "text/plain", "only GET\n".to_string());
    }
    let loading = !*ep.loaded.borrow();
    match req.uri().path() {
        "/metrics" => {
            let figures = if loading {
                Vec::new()
            } else {
                ep.shards.figures(FIGURES_WAIT).await
            };
            let answered: Vec<_> = figures.into_iter().flatten().collect();
            let p = process_figures(ep, loading, answered.len());
            reply(
                200,
                "text/plain; version=0.0.4; charset=utf-8",
                render(&p, &answered),
            )
        }
        "/health" => {
            let q = match HealthQuery::parse(req.uri().query().unwrap_or("")) {
                Ok(q) => q,
                Err(e) => {
                    let mut body = String::from("{\"status\":\"bad_request\",\"error\":");
                    crate::logging::json_str(&mut body, &e);
                    body.push('}');
                    return reply(400, "application/json", body);
                }
            };
            let figures = if loading {
                vec![None; ep.shards.len()]
            } else {
                ep.shards.figures(FIGURES_WAIT).await
            };
            let (code, body) = health(&ep.site, loading, &figures, q);
            reply(code, "application/json", body)
        }
        _ => reply(404, "text/plain", "/metrics or /health\n".to_string()),
    }
}

fn process_figures(ep: &Endpoint, loading: bool, answered: usize) -> ProcessFigures {
    let mem = crate::cmd::server::memory_use();
    let hz = crate::cmd::server::USER_HZ as f64;
    let cpu = crate::cmd::server::proc_times("/proc/self/stat").unwrap_or_default();
    ProcessFigures {
        site: ep.site.clone(),
        deployment_id: ep.deployment_id.clone(),
        version: env!("CARGO_PKG_VERSION"),
        uptime_s: ep.started.elapsed().as_secs(),
        shards: ep.shards.len() as u64,
        shards_answered: answered as u64,
        loading,
        memory_used_bytes: mem.used(),
        memory_rss_bytes: mem.rss,
        memory_max_bytes: 0,
        cpu_user_seconds: cpu[0] as f64 / hz,
        cpu_sys_seconds: cpu[1] as f64 / hz,
    }
}
