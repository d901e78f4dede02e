//! `telemetry:`: trace export over OTLP (`telemetry.otlp`), off unless configured
//! here or by the standard `OTEL_EXPORTER_OTLP_*` variables (`crate::otel`).

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
