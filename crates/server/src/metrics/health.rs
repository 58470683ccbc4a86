//! The health check: `GET /health[?max_lag_ms=N]`.
//!
//! 200 when every shard has loaded and answered; with `max_lag_ms`, 200 only while the lag
//! to every peer (the worst shard's, `PeerFigures::lag_ms`) is under N ms: the lag-aware check
//! a load balancer uses to fail traffic over to another site and back. 503 otherwise; 400 for
//! a query it does not understand. The body is JSON with the figures behind the verdict:
//!
//! `{"status":"ok","site":"a","shards":1,"shards_serving":1,"max_lag_ms":100,
//!   "peers":[{"site":"b","lag_ms":3,"lag_ops":0,"in_link":"up","out_link":"up","link_status":0}]}`

use std::fmt::Write as _;

use super::figures::{PeerFigures, ShardFigures};
use crate::logging::json_str;

/// What `/health` was asked.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HealthQuery {
    pub max_lag_ms: Option<u64>,
}

impl HealthQuery {
    /// Parses the query string (without '?'). Unknown parameters are refused, so that a
    /// misspelt `max_lag_ms` never passes as a plain check.
    pub fn parse(query: &str) -> Result<HealthQuery, String> {
        let mut q = HealthQuery::default();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            match pair.split_once('=') {
                Some(("max_lag_ms", v)) => match v.parse::<u64>() {
                    Ok(n) => q.max_lag_ms = Some(n),
                    Err(_) => return Err(format!("max_lag_ms must be a number of ms, got '{v}'")),
                },
                _ => return Err(format!("unknown parameter '{pair}' (known: max_lag_ms)")),
            }
        }
        Ok(q)
    }
}

/// The verdict: HTTP status and JSON body.
pub fn health(
    site: &str,
    loading: bool,
    shards: &[Option<ShardFigures>],
    q: HealthQuery,
) -> (u16, String) {
    let serving = shards.iter().filter(|s| s.is_some()).count();
    let peers = worst_per_peer(shards);
    let lagging: Vec<&PeerFigures> = match q.max_lag_ms {
        Some(max) => peers.iter().filter(|p| p.lag_ms >= max).collect(),
        None => Vec::new(),
    };
    let status = if loading {
        "loading"
    } else if serving < shards.len() {
        "shard_not_answering"
    } else if !lagging.is_empty() {
        "lagging"
    } else {
        "ok"
    };
    let mut b = String::with_capacity(256);
    b.push_str("{\"status\":");
    json_str(&mut b, status);
    b.push_str(",\"site\":");
    json_str(&mut b, site);
    let _ = write!(
        b,
        ",\"shards\":{},\"shards_serving\":{}",
        shards.len(),
        serving
    );
    if let Some(max) = q.max_lag_ms {
        let _ = write!(b, ",\"max_lag_ms\":{max}");
    }
    b.push_str(",\"peers\":[");
    for (i, p) in peers.iter().enumerate() {
        if i > 0 {
            b.push(',');
        }
        b.push_str("{\"site\":");
        json_str(&mut b, &p.site);
        let _ = write!(
            b,
            ",\"lag_ms\":{},\"lag_ops\":{},\"in_link\":\"{}\",\"out_link\":\"{}\",\"link_status\":{}}}",
            p.lag_ms,
            p.lag_ops,
            p.inbound.name(),
            p.outbound.name(),
            p.link_status()
        );
    }
    b.push_str("]}");
    let code = if status == "ok" { 200 } else { 503 };
    (code, b)
}

/// One entry per peer: the largest lag and the worst link status over the shards.
fn worst_per_peer(shards: &[Option<ShardFigures>]) -> Vec<PeerFigures> {
    let mut out: Vec<PeerFigures> = Vec::new();
    for f in shards.iter().flatten() {
        for p in &f.peers {
            match out.iter_mut().find(|x| x.site == p.site) {
                None => out.push(p.clone()),
                Some(x) => {
                    if p.link_status() > x.link_status() {
                        x.inbound = p.inbound;
                        x.outbound = p.outbound;
                    }
                    x.lag_ms = x.lag_ms.max(p.lag_ms);
                    x.lag_ops += p.lag_ops;
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sync::LinkState;

    fn shard(lag_ms: u64, out: LinkState) -> Option<ShardFigures> {
        Some(ShardFigures {
            peers: vec![PeerFigures {
                site: "b".into(),
                inbound: LinkState::Up,
                outbound: out,
                lag_ms,
                ..PeerFigures::default()
            }],
            ..ShardFigures::default()
        })
    }

    #[test]
    fn verdicts() {
        let q = |s: &str| HealthQuery::parse(s).unwrap();
        let up = [shard(40, LinkState::Up)];
        assert_eq!(health("a", false, &up, q("")).0, 200);
        assert_eq!(health("a", false, &up, q("max_lag_ms=100")).0, 200);
        // At the limit the lag is not under it.
        assert_eq!(health("a", false, &up, q("max_lag_ms=40")).0, 503);
        assert_eq!(health("a", false, &up, q("max_lag_ms=41")).0, 200);
        let (code, body) = health("a", true, &[None], q(""));
        assert_eq!(code, 503);
        assert!(body.starts_with("{\"status\":\"loading\""), "{body}");
        assert_eq!(health("a", false, &[None], q("")).0, 503);
        let (code, body) = health(
            "a",
            false,
            &[shard(7000, LinkState::Down)],
            q("max_lag_ms=5000"),
        );
        assert_eq!(code, 503);
        assert_eq!(
            body,
            "{\"status\":\"lagging\",\"site\":\"a\",\"shards\":1,\"shards_serving\":1,\"max_lag_ms\":5000,\
             \"peers\":[{\"site\":\"b\",\"lag_ms\":7000,\"lag_ops\":0,\"in_link\":\"up\",\"out_link\":\"down\",\"link_status\":2}]}"
        );
        assert!(HealthQuery::parse("max_lag=5").is_err());
        assert!(HealthQuery::parse("max_lag_ms=x").is_err());
    }
}
