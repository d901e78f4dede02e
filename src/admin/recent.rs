//! `GET /admin/traffic` and `GET /admin/decisions`: what the gateway did lately
//! ([`crate::recent`]), for the status page and for scripts.

use std::time::Instant;

use http::{Response, StatusCode};
use serde::Serialize;

use crate::body::{self, Body};
use crate::gateway::Gateway;
use crate::recent::{decisions, traffic, Decision};

/// One endpoint in the `/admin/traffic` body.
#[derive(Debug, Clone, Serialize)]
pub struct EndpointTrafficReport {
    /// Endpoint id.
    pub id: String,
    /// Its logical model.
    pub model: String,
    /// Requests whose last attempt went to it, per bucket, oldest first (the last
    /// bucket is the current, partial one).
    pub requests: Vec<u64>,
    /// Of those, the ones it did not answer, per bucket.
    pub errors: Vec<u64>,
    /// The sum of `requests`.
    pub total: u64,
}

/// The whole `/admin/traffic` body.
#[derive(Debug, Clone, Serialize)]
pub struct TrafficBody {
    /// The width of one bucket, seconds.
    pub bucket_secs: u64,
    /// Buckets per endpoint.
    pub buckets: usize,
    /// How far into the current (last) bucket this was taken, ms.
    pub current_bucket_elapsed_ms: u64,
    /// Every endpoint, in registry order.
    pub endpoints: Vec<EndpointTrafficReport>,
}

/// The `/admin/traffic` body from the gateway's traffic rings.
pub fn traffic_report(gw: &Gateway) -> TrafficBody {
    let r = gw.traffic.report(Instant::now());
    TrafficBody {
        bucket_secs: r.bucket_secs,
        buckets: traffic::BUCKETS,
        current_bucket_elapsed_ms: r.current_bucket_elapsed_ms,
        endpoints: gw
            .registry
            .endpoints
            .iter()
            .zip(r.endpoints)
            .map(|(e, t)| EndpointTrafficReport {
                id: e.id.to_string(),
                model: e.model.to_string(),
                total: t.requests.iter().sum(),
                requests: t.requests,
                errors: t.errors,
            })
            .collect(),
    }
}

/// `GET /admin/traffic`.
pub fn traffic(gw: &Gateway) -> Response<Body> {
    body::json(
        StatusCode::OK,
        serde_json::to_vec(&traffic_report(gw)).unwrap_or_default(),
    )
}

/// The whole `/admin/decisions` body.
#[derive(Debug, Clone, Serialize)]
pub struct DecisionsBody {
    /// How many decisions are kept.
    pub capacity: usize,
    /// The decisions held, newest first.
    pub decisions: Vec<Decision>,
}

/// `GET /admin/decisions`.
pub fn decisions(gw: &Gateway) -> Response<Body> {
    let b = DecisionsBody {
        capacity: decisions::CAPACITY,
        decisions: gw.decisions.newest_first(),
    };
    body::json(StatusCode::OK, serde_json::to_vec(&b).unwrap_or_default())
}
