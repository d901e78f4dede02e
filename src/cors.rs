//! Cross-origin requests (CORS, the WHATWG Fetch standard, "CORS protocol") to the
//! client API, for browser apps that call the gateway directly with an OpenAI SDK.
//!
//! Off unless `server.cors_origins` lists origins. When on, it covers the paths under
//! `/v1/` on the client listener; `/health`, `/ready`, `/metrics`, `/ui` and
//! `/admin/*` never carry CORS headers (the operator views are for operators, not
//! for pages on other origins).
//!
//! - A preflight (`OPTIONS` with `Access-Control-Request-Method`) is answered 204 by
//!   ingress like any `OPTIONS`; from an allowed origin it also gets
//!   [`Cors::preflight`]'s fields. From any other origin it gets none and the browser
//!   refuses the real request: the Fetch standard makes the browser the enforcer, and
//!   answers an origin the server does not share with by "omitting the relevant
//!   headers" (Fetch, "HTTP responses"; 403 is allowed, not required). A 204 keeps
//!   the answer the one any `OPTIONS` gets (RFC 9110 section 9.3.7).
//! - Every other answer under `/v1/` (success, errors, streams) from an allowed
//!   origin gets [`Cors::actual`]'s fields, so the page can read error bodies and the
//!   gateway's own headers; so do the 400, 414 and 431 the server gives before
//!   routing (`crate::ingress::refusals`).

use http::header::{
    ACCESS_CONTROL_ALLOW_HEADERS, ACCESS_CONTROL_ALLOW_METHODS, ACCESS_CONTROL_ALLOW_ORIGIN,
    ACCESS_CONTROL_EXPOSE_HEADERS, ACCESS_CONTROL_MAX_AGE, ACCESS_CONTROL_REQUEST_HEADERS,
    ACCESS_CONTROL_REQUEST_METHOD, ORIGIN, VARY,
};
use http::{HeaderMap, HeaderValue, Method};

use crate::server::lines::HeaderLines;

/// How long a browser may reuse a preflight's answer, in seconds: 2 hours,
/// Chromium's cap (Firefox caps at 24 hours; a larger value buys nothing there).
pub const MAX_AGE_SECS: u64 = 7_200;

/// The response fields a page may read besides the CORS-safelisted ones (Fetch,
/// "CORS-safelisted response-header name"): the gateway's own (README, "Response
/// headers"), the `x-ratelimit-*` of its limits and `Retry-After`, which OpenAI's
/// SDKs read to pace their retries.
pub const EXPOSED: &str = "x-request-id, x-upstream-request-id, x-switchyard-policy, \
x-switchyard-route, x-switchyard-rule, x-switchyard-endpoint, x-switchyard-attempts, \
x-switchyard-cache, x-switchyard-cache-distance, x-switchyard-priority, \
x-switchyard-queued-ms, x-switchyard-held-ms, retry-after, x-ratelimit-limit-requests, \
x-ratelimit-remaining-requests, x-ratelimit-reset-requests, x-ratelimit-limit-tokens, \
x-ratelimit-remaining-tokens, x-ratelimit-reset-tokens";

/// Which origins may read the client API's answers (`server.cors_origins`, checked).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cors {
    /// `["*"]`: every origin; answers carry `Access-Control-Allow-Origin: *` and are
    /// the same whoever asks.
    Any,
    /// These serialized origins (`https://app.example.com`, lowercase), compared
    /// byte for byte with the request's `Origin`; answers carry `Vary: Origin`.
    Listed(Vec<HeaderValue>),
}

impl Cors {
    /// The CORS setting of `origins` as [`crate::config::check_origin`] left them:
    /// `None` (off) when there are none.
    pub fn new(origins: &[String]) -> Option<Cors> {
        if origins.is_empty() {
            return None;
        }
        if origins.iter().any(|o| o == "*") {
            return Some(Cors::Any);
        }
        let listed = origins
            .iter()
            .filter_map(|o| HeaderValue::from_str(o).ok())
            .collect();
        Some(Cors::Listed(listed))
    }

    /// Whether `path` is one CORS applies to: the client API under `/v1/`.
    pub fn covers(path: &str) -> bool {
        path.starts_with("/v1/")
    }

    /// The `Access-Control-Allow-Origin` value for a request with these `headers`:
    /// `*`, the request's `Origin` when listed, or `None`.
    fn allowed<'a>(&self, headers: &'a HeaderMap) -> Option<&'a HeaderValue> {
        static ANY: HeaderValue = HeaderValue::from_static("*");
        match self {
            Cors::Any => Some(&ANY),
            Cors::Listed(list) => headers.get(ORIGIN).filter(|o| list.contains(o)),
        }
    }

    /// Adds to the 204 answering an `OPTIONS` with request `headers`, on a path that
    /// takes `methods` (`"POST"`, `"GET, HEAD"`), the fields granting a preflight
    /// from an allowed origin: `Access-Control-Allow-Methods` (`methods`),
    /// `Access-Control-Allow-Headers` (the `Access-Control-Request-Headers` asked
    /// for, echoed: OpenAI's JS SDK sends `authorization`, `content-type`,
    /// `x-stainless-*`, `openai-organization`, `openai-project` and more, and `*`
    /// would not cover `authorization`) and `Access-Control-Max-Age`
    /// ([`MAX_AGE_SECS`]). Nothing when it is not a preflight or the origin is not
    /// allowed. The origin itself and `Vary` come from [`Cors::actual`].
    pub fn preflight(&self, headers: &HeaderMap, methods: &'static str, out: &mut HeaderMap) {
        if !headers.contains_key(ACCESS_CONTROL_REQUEST_METHOD) || self.allowed(headers).is_none() {
            return;
        }
        out.insert(
            ACCESS_CONTROL_ALLOW_METHODS,
            HeaderValue::from_static(methods),
        );
        if let Some(asked) = headers.get(ACCESS_CONTROL_REQUEST_HEADERS) {
            out.insert(ACCESS_CONTROL_ALLOW_HEADERS, asked.clone());
        }
        out.insert(ACCESS_CONTROL_MAX_AGE, HeaderValue::from(MAX_AGE_SECS));
    }

    /// Appends to `lines` the CORS fields of any answer under `/v1/` to a request
    /// with `method` and `headers`: `Access-Control-Allow-Origin` for an allowed
    /// origin, with `Access-Control-Expose-Headers` ([`EXPOSED`]) unless it answers
    /// a preflight; and, with listed origins, `Vary: Origin` on every answer, allowed
    /// or not, since the answer depends on it (Fetch, "CORS protocol and HTTP
    /// caches").
    pub fn actual(&self, method: &Method, headers: &HeaderMap, lines: &mut HeaderLines) {
        if let Some(origin) = self.allowed(headers) {
            lines.push(&ACCESS_CONTROL_ALLOW_ORIGIN, origin);
            let preflight =
                method == Method::OPTIONS && headers.contains_key(ACCESS_CONTROL_REQUEST_METHOD);
            if !preflight {
                lines.push(
                    &ACCESS_CONTROL_EXPOSE_HEADERS,
                    &HeaderValue::from_static(EXPOSED),
                );
            }
        }
        if matches!(self, Cors::Listed(_)) {
            lines.push(&VARY, &HeaderValue::from_static("Origin"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::check_origin;

    fn req(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_static(v));
        }
        h
    }

    fn fields(l: &HeaderLines) -> Vec<(String, String)> {
        l.iter()
            .map(|(n, v)| {
                (
                    String::from_utf8_lossy(n).into_owned(),
                    String::from_utf8_lossy(v).into_owned(),
                )
            })
            .collect()
    }

    const APP: &str = "https://app.example.com";

    fn listed() -> Cors {
        Cors::new(&[APP.to_string()]).unwrap()
    }

    #[test]
    fn no_origins_is_off_and_a_star_allows_every_origin() {
        assert_eq!(Cors::new(&[]), None);
        assert_eq!(Cors::new(&["*".to_string()]), Some(Cors::Any));
        assert!(Cors::covers("/v1/chat/completions") && Cors::covers("/v1/models/m"));
        assert!(!Cors::covers("/admin/endpoints") && !Cors::covers("/health"));
        assert!(!Cors::covers("*"));
    }

    #[test]
    fn a_preflight_from_a_listed_origin_is_granted_what_it_asks() {
        let asked = "authorization,content-type,x-stainless-os,openai-organization,openai-project,x-request-id";
        let h = req(&[
            ("origin", APP),
            ("access-control-request-method", "POST"),
            ("access-control-request-headers", asked),
        ]);
        let mut out = HeaderMap::new();
        listed().preflight(&h, "POST", &mut out);
        assert_eq!(out[ACCESS_CONTROL_ALLOW_METHODS], "POST");
        assert_eq!(out[ACCESS_CONTROL_ALLOW_HEADERS], asked);
        assert_eq!(out[ACCESS_CONTROL_MAX_AGE], "7200");
        let mut l = HeaderLines::default();
        listed().actual(&Method::OPTIONS, &h, &mut l);
        assert_eq!(
            fields(&l),
            [
                ("access-control-allow-origin".into(), APP.into()),
                ("vary".into(), "Origin".into())
            ]
        );
    }

    #[test]
    fn a_preflight_from_another_origin_gets_no_cors_fields() {
        for origin in [
            "https://evil.example",
            "https://app.example.com.evil",
            "null",
        ] {
            let h = req(&[
                ("origin", origin),
                ("access-control-request-method", "POST"),
            ]);
            let mut out = HeaderMap::new();
            listed().preflight(&h, "POST", &mut out);
            assert!(out.is_empty(), "{origin}");
            let mut l = HeaderLines::default();
            listed().actual(&Method::OPTIONS, &h, &mut l);
            assert_eq!(fields(&l), [("vary".into(), "Origin".into())], "{origin}");
        }
        // A plain OPTIONS (no Access-Control-Request-Method) is not a preflight.
        let mut out = HeaderMap::new();
        listed().preflight(&req(&[("origin", APP)]), "POST", &mut out);
        assert!(out.is_empty());
    }

    #[test]
    fn an_answer_to_an_allowed_origin_exposes_the_gateway_headers() {
        let mut l = HeaderLines::default();
        listed().actual(&Method::POST, &req(&[("origin", APP)]), &mut l);
        let f = fields(&l);
        assert_eq!(f[0], ("access-control-allow-origin".into(), APP.into()));
        assert_eq!(
            f[1],
            ("access-control-expose-headers".into(), EXPOSED.into())
        );
        assert_eq!(f[2], ("vary".into(), "Origin".into()));
        // `*`: the same answer for everyone, without an Origin too; nothing varies.
        let mut l = HeaderLines::default();
        Cors::Any.actual(&Method::GET, &HeaderMap::new(), &mut l);
        assert_eq!(
            fields(&l),
            [
                ("access-control-allow-origin".into(), "*".into()),
                ("access-control-expose-headers".into(), EXPOSED.into())
            ]
        );
        // No Origin with listed origins: only Vary.
        let mut l = HeaderLines::default();
        listed().actual(&Method::GET, &HeaderMap::new(), &mut l);
        assert_eq!(fields(&l), [("vary".into(), "Origin".into())]);
    }

    /// Every header the README's "Response headers" table names is exposed.
    #[test]
    fn every_documented_response_header_is_exposed() {
        let readme = include_str!("../README.md");
        let table = readme
            .split("### Response headers")
            .nth(1)
            .and_then(|s| s.split("\n### ").next())
            .unwrap();
        let names: Vec<&str> = table
            .lines()
            .filter_map(|l| l.strip_prefix("| `"))
            .filter_map(|l| l.split('`').next())
            .collect();
        assert!(names.len() >= 10, "{names:?}");
        let exposed: Vec<&str> = EXPOSED.split(", ").collect();
        for n in names {
            assert!(exposed.contains(&n), "{n} is not exposed");
        }
    }

    #[test]
    fn origins_are_checked_and_lowercased() {
        assert_eq!(check_origin("*").unwrap(), "*");
        assert_eq!(
            check_origin("https://App.Example.com").unwrap(),
            "https://app.example.com"
        );
        assert_eq!(
            check_origin("http://localhost:5173").unwrap(),
            "http://localhost:5173"
        );
        assert!(check_origin("http://[::1]:3000").is_ok());
        assert!(check_origin("chrome-extension://abcdef").is_ok());
        let e = check_origin("https://app.example.com/").unwrap_err();
        assert!(e.contains("\"https://app.example.com\""), "{e}");
        assert!(check_origin("app.example.com").is_err());
        assert!(check_origin("https://").is_err());
        assert!(check_origin("https://a b").is_err());
        assert!(check_origin("1http://a").is_err());
        // Found by the operator attack of 2026-12-07: ports no browser sends.
        for bad in [
            "https://a.com:99999",
            "https://a.com:0",
            "https://a.com:",
            "http://[::1",
            "http://[::1]:x",
        ] {
            assert!(check_origin(bad).is_err(), "{bad}");
        }
        assert!(check_origin("http://[::1]").is_ok());
        assert!(check_origin("https://a.com:443").is_ok());
    }
}
