//! `telemetry:`: trace export over OTLP (`telemetry.otlp`), off unless configured
//! here or by the standard `OTEL_EXPORTER_OTLP_*` variables (`crate::otel`), and the
//! access log's file sink and body logging (`telemetry.access_log`,
//! `crate::logging`).

use std::path::PathBuf;

/// The OTLP/HTTP path of the traces signal, appended to a base endpoint.
pub const TRACES_PATH: &str = "/v1/traces";
/// `service.name` when neither `service_name` nor `OTEL_SERVICE_NAME` is set.
pub const DEFAULT_SERVICE_NAME: &str = "switchyard";
/// Default export deadline of one batch, in milliseconds (the OTLP default).
pub const DEFAULT_TIMEOUT_MS: u64 = 10_000;
/// Default bound of the span queue, in spans (the SDK's default).
pub const DEFAULT_MAX_QUEUE: usize = 2048;

/// `telemetry:` section.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TelemetryConfig {
    /// Trace export (`telemetry.otlp`; `None`: off unless the `OTEL_*` variables
    /// turn it on).
    pub otlp: Option<OtlpConfig>,
    /// The access log's file sink and body logging (`telemetry.access_log`).
    pub access_log: AccessLogConfig,
}

/// Default bound of each logged body, in bytes (`max_body_bytes`).
pub const DEFAULT_LOG_BODY_BYTES: usize = 4096;
/// Default number of rotated access-log files kept (`max_files`).
pub const DEFAULT_MAX_FILES: usize = 7;

/// `telemetry.access_log`: where access lines go besides stderr, and whether they
/// carry the request and response bodies.
#[derive(Debug, Clone, PartialEq)]
pub struct AccessLogConfig {
    /// A file the access lines are also written to, as JSON lines (`path`,
    /// `rotation`, `max_files`; `None`: stderr only).
    pub file: Option<AccessFileConfig>,
    /// Whether each access line carries the request body and the response body
    /// (`bodies`, default `false`: prompts and answers often hold personal data,
    /// so this is an explicit opt-in).
    pub bodies: bool,
    /// Bytes of each body kept in the line (`max_body_bytes`, default
    /// [`DEFAULT_LOG_BODY_BYTES`]); the line also gives each body's whole size.
    pub max_body_bytes: usize,
}

impl Default for AccessLogConfig {
    fn default() -> Self {
        AccessLogConfig {
            file: None,
            bodies: false,
            max_body_bytes: DEFAULT_LOG_BODY_BYTES,
        }
    }
}

/// How often the access-log file is rotated (a new file is started, named with
/// the date and time of its period in UTC).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rotation {
    /// Every minute (`access.2026-12-02-14-05.log`).
    Minutely,
    /// Every hour (`access.2026-12-02-14.log`).
    Hourly,
    /// Every day (`access.2026-12-02.log`), the default.
    Daily,
    /// Never: one file, named as `path` says.
    Never,
}

/// `telemetry.access_log.path` and its rotation.
#[derive(Debug, Clone, PartialEq)]
pub struct AccessFileConfig {
    /// The directory of the files (`path`'s parent; relative paths are relative
    /// to the config file's directory). Created if missing.
    pub dir: PathBuf,
    /// The file name before the period's date (`path`'s stem: `access` for
    /// `access.log`).
    pub prefix: String,
    /// The file name's extension after the date (`log` for `access.log`; `None`
    /// when `path` has none).
    pub suffix: Option<String>,
    /// When a new file is started (`rotation`, default daily).
    pub rotation: Rotation,
    /// Rotated files kept, the oldest deleted first (`max_files`, default
    /// [`DEFAULT_MAX_FILES`]; 0 keeps every file).
    pub max_files: usize,
}

/// `telemetry.otlp`: where and how spans are exported.
#[derive(Debug, Clone, PartialEq)]
pub struct OtlpConfig {
    /// The collector's OTLP/HTTP traces URL (`endpoint`, a base URL such as
    /// `http://127.0.0.1:4318`, to which [`TRACES_PATH`] is appended unless the
    /// path already ends with it).
    pub traces_url: String,
    /// `service.name` of the exported resource (`service_name`; `None`:
    /// `OTEL_SERVICE_NAME`, else [`DEFAULT_SERVICE_NAME`]).
    pub service_name: Option<String>,
    /// Fraction of new traces sampled, 0 to 1 (`sample_ratio`, default 1). A
    /// client's sampled `traceparent` is always followed.
    pub sample_ratio: f64,
    /// Deadline of one export, retries included, in milliseconds (`timeout_ms`,
    /// default [`DEFAULT_TIMEOUT_MS`]).
    pub timeout_ms: u64,
    /// Spans that may wait for export (`max_queue`, default [`DEFAULT_MAX_QUEUE`]);
    /// spans ending while it is full are dropped and counted.
    pub max_queue: usize,
    /// Headers sent with every export (`headers`, a map of name to value, e.g. a
    /// collector's API key as `${VAR}`), in the order given. They are added to
    /// those of `OTEL_EXPORTER_OTLP_HEADERS` / `OTEL_EXPORTER_OTLP_TRACES_HEADERS`
    /// and win over them for the same name. Values are sent as written (no
    /// percent-decoding, unlike the variables' W3C Baggage form).
    pub headers: Vec<(http::HeaderName, http::HeaderValue)>,
}

/// The traces URL for a base OTLP/HTTP `endpoint`: [`TRACES_PATH`] appended
/// unless its path already ends with it.
pub fn traces_url(endpoint: &str) -> String {
    let base = endpoint.trim_end_matches('/');
    if base.ends_with(TRACES_PATH) {
        base.to_string()
    } else {
        format!("{base}{TRACES_PATH}")
    }
}

/// Why `url` cannot be an OTLP/HTTP endpoint (`None`: it can): an `http://` or
/// `https://` URL with a host.
pub fn url_problem(url: &str) -> Option<String> {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"));
    let Some(rest) = rest else {
        return Some(format!(
            "\"{url}\" is not an http:// or https:// URL (OTLP/HTTP, e.g. `http://127.0.0.1:4318`)"
        ));
    };
    match url.parse::<http::Uri>() {
        Ok(u) if u.host().is_some_and(|h| !h.is_empty()) && !rest.starts_with('/') => None,
        _ => Some(format!("\"{url}\" is not a valid URL with a host")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_traces_path_is_appended_once() {
        assert_eq!(traces_url("http://c:4318"), "http://c:4318/v1/traces");
        assert_eq!(traces_url("http://c:4318/"), "http://c:4318/v1/traces");
        assert_eq!(traces_url("http://c/v1/traces"), "http://c/v1/traces");
        assert_eq!(traces_url("http://c/otlp"), "http://c/otlp/v1/traces");
    }

    #[test]
    fn only_http_urls_with_a_host_are_endpoints() {
        assert_eq!(url_problem("http://127.0.0.1:4318"), None);
        assert_eq!(url_problem("https://otel.example:443/x"), None);
        assert!(url_problem("127.0.0.1:4318").is_some());
        assert!(url_problem("grpc://c:4317").is_some());
        assert!(url_problem("http:///v1/traces").is_some());
        assert!(url_problem("http://c d").is_some());
    }

    const BASE: &str =
        "providers: { p: { kind: mock } }\nmodels: { m: { endpoints: [ { provider: p, model: x } ] } }\n";

    fn parse(extra: &str) -> Result<TelemetryConfig, String> {
        crate::config::parse_str(&format!("{BASE}{extra}"), None)
            .map(|c| c.telemetry)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn the_access_log_block_is_read_with_defaults() {
        assert_eq!(parse("").unwrap().access_log, AccessLogConfig::default());
        let a = parse("telemetry: { access_log: { path: /var/log/sy/access.log } }")
            .unwrap()
            .access_log;
        let f = a.file.unwrap();
        assert_eq!(f.dir, PathBuf::from("/var/log/sy"));
        assert_eq!(
            (f.prefix.as_str(), f.suffix.as_deref()),
            ("access", Some("log"))
        );
        assert_eq!(
            (f.rotation, f.max_files),
            (Rotation::Daily, DEFAULT_MAX_FILES)
        );
        assert!(!a.bodies);
        let a = parse(
            "telemetry: { access_log: { path: logs/requests, rotation: hourly, max_files: 0, bodies: true, max_body_bytes: 100 } }",
        )
        .unwrap()
        .access_log;
        let f = a.file.unwrap();
        assert!(f.dir.ends_with("logs"), "{:?}", f.dir);
        assert_eq!((f.prefix.as_str(), f.suffix), ("requests", None));
        assert_eq!((f.rotation, f.max_files), (Rotation::Hourly, 0));
        assert_eq!((a.bodies, a.max_body_bytes), (true, 100));
        // Bodies without a file: the stderr access line carries them.
        let a = parse("telemetry: { access_log: { bodies: true } }")
            .unwrap()
            .access_log;
        assert!(a.bodies && a.file.is_none());
    }

    #[test]
    fn bad_access_log_settings_are_errors_naming_each_field() {
        let e = parse(
            "telemetry: { access_log: { path: \"\", rotation: weekly, max_files: -1, bodies: yes please, max_body_bytes: 0, colour: red } }",
        )
        .unwrap_err();
        for field in [
            "telemetry.access_log.path",
            "telemetry.access_log.rotation",
            "telemetry.access_log.max_files",
            "telemetry.access_log.bodies",
            "telemetry.access_log.max_body_bytes",
            "telemetry.access_log.colour",
        ] {
            assert!(e.contains(field), "{field} not named in:\n{e}");
        }
        let e = parse("telemetry: { access_log: { path: /var/log/ } }").unwrap_err();
        assert!(e.contains("telemetry.access_log.path"), "{e}");
    }

    #[test]
    fn the_otlp_block_is_read_with_defaults_and_off_without_it() {
        assert_eq!(parse("").unwrap(), TelemetryConfig::default());
        let t = parse("telemetry: { otlp: { endpoint: \"http://127.0.0.1:4318\" } }").unwrap();
        let o = t.otlp.unwrap();
        assert_eq!(o.traces_url, "http://127.0.0.1:4318/v1/traces");
        assert_eq!(
            (o.sample_ratio, o.timeout_ms, o.max_queue),
            (1.0, DEFAULT_TIMEOUT_MS, DEFAULT_MAX_QUEUE)
        );
        assert_eq!(o.service_name, None);
        assert!(o.headers.is_empty());
        let t = parse(
            "telemetry: { otlp: { endpoint: \"https://c/v1/traces\", service_name: gw, sample_ratio: 0.25, timeout_ms: 500, max_queue: 10 } }",
        )
        .unwrap();
        let o = t.otlp.unwrap();
        assert_eq!(o.traces_url, "https://c/v1/traces");
        assert_eq!(o.service_name.as_deref(), Some("gw"));
        assert_eq!((o.sample_ratio, o.timeout_ms, o.max_queue), (0.25, 500, 10));
        let t = parse(
            "telemetry: { otlp: { endpoint: \"http://c:4318\", headers: { x-api-key: \"s3cr%20t\", Authorization: \"Basic abc\" } } }",
        )
        .unwrap();
        let headers: Vec<(String, String)> = t
            .otlp
            .unwrap()
            .headers
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_str().unwrap().to_string()))
            .collect();
        assert_eq!(
            headers,
            [
                ("x-api-key".to_string(), "s3cr%20t".to_string()),
                ("authorization".to_string(), "Basic abc".to_string())
            ]
        );
    }

    #[test]
    fn bad_otlp_headers_are_errors_naming_the_header() {
        let e = parse(
            "telemetry: { otlp: { endpoint: \"http://c:4318\", headers: { \"bad name\": x, ok: \"line\\nbreak\", n: 3, l: [1] } } }",
        )
        .unwrap_err();
        assert!(e.contains("telemetry.otlp.headers.bad name"), "{e}");
        assert!(e.contains("telemetry.otlp.headers.ok"), "{e}");
        assert!(e.contains("telemetry.otlp.headers.l"), "{e}");
        // A number is a value written without quotes: taken as its text.
        assert!(!e.contains("telemetry.otlp.headers.n"), "{e}");
        let e = parse("telemetry: { otlp: { endpoint: \"http://c:4318\", headers: [a] } }")
            .unwrap_err();
        assert!(e.contains("telemetry.otlp.headers"), "{e}");
    }

    #[test]
    fn bad_otlp_settings_are_errors_naming_each_field() {
        let e = parse(
            "telemetry: { otlp: { endpoint: \"127.0.0.1:4318\", sample_ratio: 2, timeout_ms: 0, max_queue: -1, extra: 1 } }",
        )
        .unwrap_err();
        for field in [
            "telemetry.otlp.endpoint",
            "telemetry.otlp.sample_ratio",
            "telemetry.otlp.timeout_ms",
            "telemetry.otlp.max_queue",
            "telemetry.otlp.extra",
        ] {
            assert!(e.contains(field), "{field} not named in:\n{e}");
        }
        let e = parse("telemetry: { otlp: { service_name: x } }").unwrap_err();
        assert!(
            e.contains("telemetry.otlp.endpoint") && e.contains("missing"),
            "{e}"
        );
        let e = parse("telemetry: { otpl: {} }").unwrap_err();
        assert!(e.contains("telemetry.otpl"), "{e}");
    }
}
