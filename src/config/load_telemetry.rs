//! Validation of `telemetry:` (a child of `load`, sharing its validator).

use std::path::Path;

use serde_yaml::Value;

use super::super::telemetry::{
    traces_url, url_problem, AccessFileConfig, AccessLogConfig, OtlpConfig, Rotation,
    TelemetryConfig, DEFAULT_LOG_BODY_BYTES, DEFAULT_MAX_FILES, DEFAULT_MAX_QUEUE,
    DEFAULT_TIMEOUT_MS,
};
use super::{join, Validator};

impl Validator {
    pub(super) fn telemetry(&mut self, value: &Value, base_dir: &Path) -> TelemetryConfig {
        let path = "telemetry";
        let Some(map) = self.mapping(value, path) else {
            return TelemetryConfig::default();
        };
        self.unknown_keys(map, &["otlp", "access_log"], path);
        let access_log = self.access_log(map.get("access_log"), base_dir);
        TelemetryConfig {
            otlp: self.otlp(map.get("otlp").unwrap_or(&Value::Null)),
            access_log,
        }
    }

    /// `telemetry.access_log`.
    fn access_log(&mut self, value: Option<&Value>, base_dir: &Path) -> AccessLogConfig {
        let path = "telemetry.access_log";
        let Some(value) = value.filter(|v| !v.is_null()) else {
            return AccessLogConfig::default();
        };
        let Some(map) = self.mapping(value, path) else {
            return AccessLogConfig::default();
        };
        self.unknown_keys(
            map,
            &["path", "rotation", "max_files", "bodies", "max_body_bytes"],
            path,
        );
        let rotation = self
            .choice(
                map,
                "rotation",
                path,
                &[
                    ("minutely", Rotation::Minutely),
                    ("hourly", Rotation::Hourly),
                    ("daily", Rotation::Daily),
                    ("never", Rotation::Never),
                ],
            )
            .unwrap_or(Rotation::Daily);
        let max_files = self
            .uint(map, "max_files", path, 0, 100_000)
            .map_or(DEFAULT_MAX_FILES, |n| n as usize);
        let file = self.string(map, "path", path).and_then(|p| {
            let file = base_dir.join(&p);
            let name = file
                .file_name()
                .and_then(|n| n.to_str())
                .filter(|n| !p.ends_with('/') && !n.is_empty() && *n != "..");
            let Some(name) = name else {
                self.err(
                    join(path, "path"),
                    format!("\"{p}\" does not name a file (e.g. `/var/log/switchyard/access.log`)"),
                );
                return None;
            };
            let (prefix, suffix) = match name.rsplit_once('.') {
                Some((stem, ext)) if !stem.is_empty() && !ext.is_empty() => {
                    (stem.to_string(), Some(ext.to_string()))
                }
                _ => (name.to_string(), None),
            };
            Some(AccessFileConfig {
                dir: file.parent().map(Path::to_path_buf).unwrap_or_default(),
                prefix,
                suffix,
                rotation,
                max_files,
            })
        });
        AccessLogConfig {
            file,
            bodies: self.boolean(map, "bodies", path).unwrap_or(false),
            max_body_bytes: self
                .uint(map, "max_body_bytes", path, 1, 16 << 20)
                .map_or(DEFAULT_LOG_BODY_BYTES, |n| n as usize),
        }
    }

    /// `telemetry.otlp`.
    fn otlp(&mut self, value: &Value) -> Option<OtlpConfig> {
        let path = "telemetry.otlp";
        let otlp = self.mapping(value, path)?;
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
        endpoint.map(|e| OtlpConfig {
            traces_url: traces_url(&e),
            service_name,
            sample_ratio,
            timeout_ms,
            max_queue,
            headers,
        })
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
