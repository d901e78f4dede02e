//! Metric handles per endpoint, registered once so the request path only bumps
//! atomics instead of hashing label sets.

use crate::telemetry as m;

/// The metrics of one endpoint (labels `model`, `endpoint`, and `status` for counters).
#[derive(Debug)]
pub struct EndpointMetrics {
    /// Requests that ended with 200.
    pub ok: metrics::Counter,
    /// Streams that began with 200 and ended with an error event.
    pub stream_error: metrics::Counter,
    /// Streams whose client went away first.
    pub client_gone: metrics::Counter,
    /// Request latency in seconds.
    pub duration: metrics::Histogram,
    /// Time to first token in seconds (streams).
    pub ttft: metrics::Histogram,
}

impl EndpointMetrics {
    /// Registers the handles of endpoint `endpoint` of logical model `model`.
    pub fn new(model: &str, endpoint: &str) -> EndpointMetrics {
        let counter = |status: &'static str| metrics::counter!(m::REQUESTS, "model" => model.to_string(), "endpoint" => endpoint.to_string(), "status" => status);
        EndpointMetrics {
            ok: counter("200"),
            stream_error: counter("stream_error"),
            client_gone: counter("client_gone"),
            duration: metrics::histogram!(m::DURATION, "model" => model.to_string(), "endpoint" => endpoint.to_string()),
            ttft: metrics::histogram!(m::TTFT, "model" => model.to_string(), "endpoint" => endpoint.to_string()),
        }
    }
}
