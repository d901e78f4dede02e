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
                "headers",
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
        let headers = self.otlp_headers(otlp.get("headers"), &join(path, "headers"));
        TelemetryConfig {
            otlp: endpoint.map(|e| OtlpConfig {
                traces_url: traces_url(&e),
                service_name,
                sample_ratio,
                timeout_ms,
                max_queue,
                headers,
            }),
        }
    }

    /// `telemetry.otlp.headers`: a map of header name to value (a number or a
    /// boolean is taken as its text); every bad entry is reported with its path.
    fn otlp_headers(
        &mut self,
        value: Option<&Value>,
        path: &str,
    ) -> Vec<(http::HeaderName, http::HeaderValue)> {
        let Some(value) = value.filter(|v| !v.is_null()) else {
            return Vec::new();
        };
        let Some(map) = self.mapping(value, path) else {
            return Vec::new();
        };
        let mut out = Vec::with_capacity(map.len());
        for (k, v) in map {
            let name = match k {
                Value::String(s) => s.clone(),
                _ => {
                    self.err(path, "header names must be strings");
                    continue;
                }
            };
            let at = join(path, &name);
            let text = match v {
                Value::String(s) => s.clone(),
                Value::Number(n) => n.to_string(),
                Value::Bool(b) => b.to_string(),
                _ => {
                    self.err(at, "expected a header value (a string)");
                    continue;
                }
            };
            let Ok(header) = http::HeaderName::from_bytes(name.as_bytes()) else {
                self.err(at, format!("\"{name}\" is not a header name"));
                continue;
            };
            match http::HeaderValue::from_str(&text) {
                Ok(v) => out.push((header, v)),
                Err(_) => self.err(
                    at,
                    "is not a valid header value (control characters such as a line break are not allowed)",
                ),
            }
        }
        out
    }
}
