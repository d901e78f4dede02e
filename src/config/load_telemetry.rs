//! Validation of `telemetry:` (a child of `load`, sharing its validator).

use serde_yaml::Value;

use super::super::telemetry::{
    traces_url, url_problem, OtlpConfig, TelemetryConfig, DEFAULT_MAX_QUEUE, DEFAULT_TIMEOUT_MS,
};
use super::{join, Validator};

impl Validator {
    pub(super) fn telemetry(&mut self, value: &Value) -> TelemetryConfig {
        let path = "telemetry";
        let Some(map) = self.mapping(value, path) else {
            return TelemetryConfig::default();
        };
        self.unknown_keys(map, &["otlp"], path);
        let path = "telemetry.otlp";
        let Some(otlp) = self.mapping(map.get("otlp").unwrap_or(&Value::Null), path) else {
            return TelemetryConfig::default();
        };
        self.unknown_keys(
            otlp,
            &[
                "endpoint",
                "service_name",
                "sample_ratio",
                "timeout_ms",
                "max_queue",
            ],
            path,
        );
        let endpoint = match self.string(otlp, "endpoint", path) {
            None => {
                self.err(
                    join(path, "endpoint"),
                    "missing; the collector's OTLP/HTTP URL, e.g. `http://127.0.0.1:4318`",
                );
                None
            }
            Some(e) => match url_problem(&e) {
                Some(problem) => {
                    self.err(join(path, "endpoint"), problem);
                    None
                }
                None => Some(e),
            },
        };
        let service_name = self.string(otlp, "service_name", path);
        if service_name.as_deref().is_some_and(|s| s.trim().is_empty()) {
            self.err(join(path, "service_name"), "must not be empty");
        }
        let sample_ratio = self
            .float(otlp, "sample_ratio", path, 0.0, 1.0)
            .unwrap_or(1.0);
        let timeout_ms = self
            .uint(otlp, "timeout_ms", path, 1, 600_000)
            .unwrap_or(DEFAULT_TIMEOUT_MS);
        let max_queue = self
            .uint(otlp, "max_queue", path, 1, 1_000_000)
            .map_or(DEFAULT_MAX_QUEUE, |n| n as usize);
        TelemetryConfig {
            otlp: endpoint.map(|e| OtlpConfig {
                traces_url: traces_url(&e),
                service_name,
                sample_ratio,
                timeout_ms,
                max_queue,
            }),
        }
    }
}
