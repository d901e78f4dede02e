//! Which of the client's request headers reach the provider.
//!
//! The rule, applied to every upstream request after the adapter built it:
//! 1. Never forwarded, whatever the config says: the client's credentials
//!    (`Authorization`, `Proxy-Authorization`, `x-api-key`, `api-key`,
//!    `x-goog-api-key`, `Cookie`), hop-by-hop headers (RFC 9110 §7.6.1:
//!    `Connection` and the names it lists, `Keep-Alive`, `Proxy-Connection`, `TE`,
//!    `Trailer`, `Transfer-Encoding`, `Upgrade`), the headers that describe the
//!    body or the connection and are set for the upstream request itself (`Host`,
//!    `Content-Length`, `Content-Type`, `Content-Encoding`, `Accept`,
//!    `Accept-Encoding`, `Expect`), and Switchyard's own `x-switchyard-*`.
//! 2. Always forwarded: W3C Trace Context `traceparent` and `tracestate`, so a
//!    trace continues through the gateway, and `x-request-id`: the request's id
//!    (`crate::request_id`: the client's when valid, else generated) when that id is
//!    a UUID (`crate::request_id::upstream_value`), else none ([`request_id`] sets
//!    it on every attempt; the client's own value is not kept apart from it).
//! 3. `User-Agent`: the client's, with ` switchyard/VERSION` appended
//!    (`switchyard/VERSION` alone when the client sent none); and
//!    `Accept-Encoding: identity` (the gateway reads answers uncompressed).
//! 4. Only to providers of kind `openai`: `X-Client-Request-Id` (OpenAI's header
//!    for the caller's id of a request; the client's, else the gateway sets it to the
//!    request id), `OpenAI-Organization`, `OpenAI-Project`
//!    (they select the billing org and project of *OpenAI* accounts, meaningless
//!    and possibly misread elsewhere) and the OpenAI SDKs' `x-stainless-*`
//!    telemetry (SDK language, version, OS, retry count: OpenAI reads them; other
//!    providers have no use for them, so they are not spread further by default).
//! 5. The names the operator lists in `providers.<name>.forward_headers`
//!    (case-insensitive; a trailing `*` matches a prefix, e.g. `x-stainless-*`).
//!
//! A header the adapter already set (its key, `anthropic-version`, ...) is never
//! replaced. Everything else the client sent stays at the gateway.

use http::header::{HeaderMap, HeaderValue};

use crate::config::headers::{never_forwarded, Listed};
use crate::config::ProviderKind;

/// The `User-Agent` suffix Switchyard adds.
pub const USER_AGENT: &str = concat!("switchyard/", env!("CARGO_PKG_VERSION"));

/// The client headers that any provider might be sent (everything but what step 1
/// of the rule excludes, and `x-request-id`, which the request's id replaces:
/// [`request_id`]), kept with the request for [`apply`]. The values are shared with
/// the client's request, not copied. Empty, the map has not allocated (most
/// clients send nothing a provider is forwarded).
pub fn candidates(client: &HeaderMap) -> HeaderMap {
    let mut out = HeaderMap::new();
    for (name, value) in client {
        if !never_forwarded(name.as_str()) && name != crate::request_id::HEADER {
            out.append(name.clone(), value.clone());
        }
    }
    // `Connection` is dropped above; keep the names it marks hop-by-hop out too.
    for v in client.get_all(http::header::CONNECTION) {
        for t in v.to_str().unwrap_or("").split(',') {
            out.remove(t.trim());
        }
    }
    out
}

/// Whether the rule forwards `name` (lowercase) to a provider of `kind` with
/// `listed` headers; `User-Agent` is handled apart.
fn forwarded(name: &str, kind: ProviderKind, listed: &[Listed]) -> bool {
    if never_forwarded(name) {
        return false;
    }
    matches!(name, "traceparent" | "tracestate" | "x-request-id")
        || (kind == ProviderKind::OpenAi
            && (matches!(
                name,
                "openai-organization" | "openai-project" | "x-client-request-id"
            ) || name.starts_with("x-stainless-")))
        || listed.iter().any(|l| l.matches(name))
}

/// The forwarded client headers that can change a provider's answer, for the
/// response cache's scope: what [`apply`] copies from `client` (the request's
/// [`candidates`]) to a provider of `kind` with `listed` headers, sorted by name
/// (each name's values in order), except what only identifies or traces the
/// request and would make every request its own entry: `traceparent`,
/// `tracestate`, `x-request-id`, `x-client-request-id`, the `User-Agent`, and the
/// OpenAI SDKs' `x-stainless-*` telemetry (SDK version, OS, retry count) unless the
/// operator lists them. `OpenAI-Organization` and `OpenAI-Project` are in it where
/// forwarded (kind `openai`): they pick the account that answers.
pub fn scoped<'a>(
    client: &'a HeaderMap,
    kind: ProviderKind,
    listed: &[Listed],
) -> Vec<(&'a str, &'a HeaderValue)> {
    let mut out: Vec<(&str, &HeaderValue)> = client
        .iter()
        .map(|(name, value)| (name.as_str(), value))
        .filter(|(n, _)| {
            !matches!(
                *n,
                "traceparent"
                    | "tracestate"
                    | "x-request-id"
                    | "x-client-request-id"
                    | "user-agent"
            ) && forwarded(n, kind, listed)
                && (!n.starts_with("x-stainless-") || listed.iter().any(|l| l.matches(n)))
        })
        .collect();
    // Stable: one name's values keep their order, which a provider may read.
    out.sort_by(|a, b| a.0.cmp(b.0));
    out
}

/// Copies into `upstream` (the built provider request's headers) the client
/// headers the rule forwards (see the module doc), and sets `User-Agent`.
///
/// `client` may be the client's own headers or their [`candidates`].
pub fn apply(client: &HeaderMap, kind: ProviderKind, listed: &[Listed], upstream: &mut HeaderMap) {
    // Names the client's `Connection` header marks hop-by-hop.
    let hop = |name: &str| {
        client
            .get_all(http::header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|t| t.trim().eq_ignore_ascii_case(name))
    };
    // Names copied so far: their further values follow (the adapter's own
    // headers, present before, are never added to).
    let mut copied: Vec<&http::header::HeaderName> = Vec::new();
    for (name, value) in client {
        if !copied.contains(&name) {
            let n = name.as_str();
            if name == http::header::USER_AGENT
                || !forwarded(n, kind, listed)
                || upstream.contains_key(name)
                || hop(n)
            {
                continue;
            }
            copied.push(name);
        }
        upstream.append(name.clone(), value.clone());
    }
    if !upstream.contains_key(http::header::USER_AGENT) {
        let ua = match client
            .get(http::header::USER_AGENT)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .filter(|v| !v.is_empty())
        {
            Some(theirs) => HeaderValue::from_str(&format!("{theirs} {USER_AGENT}"))
                .unwrap_or(HeaderValue::from_static(USER_AGENT)),
            None => HeaderValue::from_static(USER_AGENT),
        };
        upstream.insert(http::header::USER_AGENT, ua);
    }
    // Without `Accept-Encoding` a server may use any content coding (RFC 9110,
    // section 12.5.3), and a compressing proxy or CDN in front of a provider then
    // gzips the answer; the gateway reads answers and streams as they come, so it
    // asks for them uncompressed.
    if !upstream.contains_key(http::header::ACCEPT_ENCODING) {
        upstream.insert(
            http::header::ACCEPT_ENCODING,
            HeaderValue::from_static("identity"),
        );
    }
}

/// Sets the request's id `id` on the built provider request's headers `upstream`,
/// after [`apply`] (rules 2, 4 and 5 of the module doc): `x-request-id` when `id` is
/// a UUID ([`crate::request_id::upstream_value`] says why only then), and
/// `x-client-request-id` to a provider the rule forwards it to (kind `openai`, or
/// one that lists it in `listed`) unless the client sent its own (which [`apply`]
/// has copied). A header the adapter set is not replaced.
///
/// Why here and not among the client's headers kept with the request: set there
/// (a removal and three lookups and inserts, per request), they cost about 1,000
/// instructions of the request path's 84,000 (`benches/load/callgrind.sh`), and the
/// candidates' map was allocated even for a client that sends nothing else a
/// provider is forwarded.
pub fn request_id(
    id: &HeaderValue,
    kind: ProviderKind,
    listed: &[Listed],
    upstream: &mut HeaderMap,
) {
    use crate::request_id::{CLIENT_HEADER, HEADER};
    if let Some(v) = crate::request_id::upstream_value(id) {
        if !upstream.contains_key(HEADER) {
            upstream.insert(HEADER, v);
        }
    }
    if forwarded(CLIENT_HEADER.as_str(), kind, listed) && !upstream.contains_key(CLIENT_HEADER) {
        upstream.insert(CLIENT_HEADER, id.clone());
    }
}

#[cfg(test)]
mod tests {
    use http::header::HeaderName;

    use super::*;

    /// The headers the OpenAI Python SDK (1.x) sends on a chat completion, plus
    /// an operator's tag, a second credential, a cookie, a hop-by-hop header and
    /// trace context.
    fn sdk_headers() -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in [
            ("host", "gw:8080"),
            ("accept-encoding", "gzip, deflate"),
            ("connection", "keep-alive, x-hop"),
            ("accept", "application/json"),
            ("content-type", "application/json"),
            ("user-agent", "OpenAI/Python 1.55.0"),
            ("x-stainless-lang", "python"),
            ("x-stainless-package-version", "1.55.0"),
            ("x-stainless-os", "Linux"),
            ("x-stainless-arch", "x64"),
            ("x-stainless-runtime", "CPython"),
            ("x-stainless-runtime-version", "3.12.1"),
            ("authorization", "Bearer sk-client"),
            ("openai-organization", "org-1"),
            ("openai-project", "proj-1"),
            ("x-stainless-async", "false"),
            ("x-stainless-retry-count", "0"),
            ("x-stainless-read-timeout", "600"),
            ("x-stainless-timeout", "600"),
            ("content-length", "90"),
            ("x-request-tag", "a"),
            ("x-api-key", "also-secret"),
            ("cookie", "s=1"),
            ("x-hop", "1"),
            (
                "traceparent",
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            ),
            ("tracestate", "vendor=x"),
        ] {
            h.append(HeaderName::from_static(k), HeaderValue::from_static(v));
        }
        h
    }

    fn names(h: &HeaderMap) -> Vec<&str> {
        let mut v: Vec<&str> = h.keys().map(HeaderName::as_str).collect();
        v.sort_unstable();
        v
    }

    #[test]
    fn to_openai_trace_org_project_and_sdk_telemetry_go_but_never_credentials() {
        let mut up = HeaderMap::new();
        up.insert(
            "authorization",
            HeaderValue::from_static("Bearer sk-gateway"),
        );
        apply(&sdk_headers(), ProviderKind::OpenAi, &[], &mut up);
        assert_eq!(
            up["authorization"], "Bearer sk-gateway",
            "the adapter's key stays"
        );
        assert_eq!(
            up["user-agent"],
            format!(
                "OpenAI/Python 1.55.0 switchyard/{}",
                env!("CARGO_PKG_VERSION")
            )
        );
        assert_eq!(up["openai-organization"], "org-1");
        assert_eq!(
            up["traceparent"],
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        );
        for never in [
            "x-api-key",
            "cookie",
            "x-hop",
            "connection",
            "host",
            "content-length",
        ] {
            assert!(!up.contains_key(never), "{never} must not be forwarded");
        }
        assert_eq!(
            up.keys()
                .filter(|k| k.as_str().starts_with("x-stainless-"))
                .count(),
            10
        );
    }

    #[test]
    fn to_other_providers_only_trace_context_user_agent_and_listed_headers_go() {
        let listed = [Listed::parse("X-Request-Tag").unwrap()];
        let mut up = HeaderMap::new();
        up.insert("x-api-key", HeaderValue::from_static("gateway-key"));
        apply(&sdk_headers(), ProviderKind::Anthropic, &listed, &mut up);
        assert_eq!(
            names(&up),
            [
                "accept-encoding",
                "traceparent",
                "tracestate",
                "user-agent",
                "x-api-key",
                "x-request-tag"
            ]
        );
        assert_eq!(up["x-api-key"], "gateway-key");
    }

    #[test]
    fn no_client_user_agent_is_switchyard_alone_and_prefixes_match() {
        let mut client = HeaderMap::new();
        client.insert("x-stainless-lang", HeaderValue::from_static("python"));
        let mut up = HeaderMap::new();
        let listed = [Listed::parse("x-stainless-*").unwrap()];
        apply(&client, ProviderKind::OpenAiCompatible, &listed, &mut up);
        assert_eq!(up["user-agent"], USER_AGENT);
        assert_eq!(up["x-stainless-lang"], "python");
    }

    #[test]
    fn candidates_leave_out_credentials_and_hop_by_hop_and_forward_the_same() {
        let c = candidates(&sdk_headers());
        for never in [
            "authorization",
            "x-api-key",
            "cookie",
            "connection",
            "x-hop",
            "host",
        ] {
            assert!(!c.contains_key(never), "{never}");
        }
        let (mut a, mut b) = (HeaderMap::new(), HeaderMap::new());
        apply(&sdk_headers(), ProviderKind::OpenAi, &[], &mut a);
        apply(&c, ProviderKind::OpenAi, &[], &mut b);
        assert_eq!(a, b);
    }

    #[test]
    fn the_request_id_replaces_the_clients_and_goes_as_a_uuid_only() {
        let uuid = HeaderValue::from_static("7c4a8d09-ca37-4c1b-9b6e-2f1a3b4c5d6e");
        let trace = HeaderValue::from_static("sdk-trace-16");
        let mut client = HeaderMap::new();
        client.insert("x-request-id", trace.clone());
        assert!(
            candidates(&client).is_empty(),
            "the client's id is not kept apart"
        );
        let sent_to = |id: &HeaderValue, kind, listed: &[Listed], client: &HeaderMap| {
            let mut up = HeaderMap::new();
            apply(&candidates(client), kind, listed, &mut up);
            request_id(id, kind, listed, &mut up);
            (
                up.get("x-request-id").cloned(),
                up.get("x-client-request-id").cloned(),
            )
        };
        let sent = |id: &HeaderValue, kind, client: &HeaderMap| sent_to(id, kind, &[], client);
        assert_eq!(
            sent(&uuid, ProviderKind::OpenAi, &client),
            (Some(uuid.clone()), Some(uuid.clone()))
        );
        assert_eq!(
            sent(&uuid, ProviderKind::OpenAiCompatible, &client),
            (Some(uuid.clone()), None),
            "x-client-request-id to OpenAI only"
        );
        // Regression (a differential attack on this function's first version): a
        // provider of another kind that lists the header got the request's id as
        // before the id moved here, then got none.
        for list in ["x-client-request-id", "X-Client-*"] {
            let listed = [Listed::parse(list).unwrap()];
            assert_eq!(
                sent_to(&trace, ProviderKind::Anthropic, &listed, &client),
                (None, Some(trace.clone())),
                "listed in forward_headers: {list}"
            );
        }
        assert_eq!(
            sent(&trace, ProviderKind::OpenAi, &client),
            (None, Some(trace.clone())),
            "not a UUID: no x-request-id"
        );
        client.insert("x-client-request-id", HeaderValue::from_static("mine"));
        assert_eq!(
            sent(&uuid, ProviderKind::OpenAi, &client).1.unwrap(),
            "mine",
            "the client's own x-client-request-id wins"
        );
        let mut up = HeaderMap::new();
        up.insert("x-request-id", HeaderValue::from_static("adapter"));
        request_id(&uuid, ProviderKind::OpenAi, &[], &mut up);
        assert_eq!(up["x-request-id"], "adapter", "an adapter's header stays");
    }

    #[test]
    fn every_value_of_a_repeated_header_goes_and_adapter_headers_are_not_added_to() {
        let mut client = HeaderMap::new();
        client.append("tracestate", HeaderValue::from_static("a=1"));
        client.append("tracestate", HeaderValue::from_static("b=2"));
        client.append("anthropic-beta", HeaderValue::from_static("client-beta"));
        let mut up = HeaderMap::new();
        up.insert("anthropic-beta", HeaderValue::from_static("adapter-beta"));
        let listed = [Listed::parse("anthropic-beta").unwrap()];
        apply(
            &candidates(&client),
            ProviderKind::Anthropic,
            &listed,
            &mut up,
        );
        let values: Vec<_> = up.get_all("tracestate").iter().collect();
        assert_eq!(values, ["a=1", "b=2"]);
        let beta: Vec<_> = up.get_all("anthropic-beta").iter().collect();
        assert_eq!(beta, ["adapter-beta"]);
    }

    #[test]
    fn config_cannot_list_credentials_or_hop_by_hop_headers() {
        for bad in [
            "Authorization",
            "x-api-key",
            "Cookie",
            "connection",
            "x-goog-*",
            "a*",
            "x-switchyard-x",
            "bad name",
        ] {
            assert!(Listed::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(
            Listed::parse("Anthropic-Beta").unwrap(),
            Listed::Name("anthropic-beta".into())
        );
    }

    /// Found by attack (t_scope.py): forwarded headers were not in the response
    /// cache's scope. What is in it: what the provider is sent and can answer by.
    #[test]
    fn the_cache_scope_gets_what_is_forwarded_but_not_ids_or_telemetry() {
        let client = candidates(&sdk_headers());
        let names = |kind, listed: &[Listed]| -> Vec<&str> {
            scoped(&client, kind, listed)
                .iter()
                .map(|(n, _)| *n)
                .collect()
        };
        assert_eq!(
            names(ProviderKind::OpenAi, &[]),
            ["openai-organization", "openai-project"]
        );
        let tag = [Listed::parse("x-request-tag").unwrap()];
        assert_eq!(
            names(ProviderKind::OpenAiCompatible, &tag),
            ["x-request-tag"]
        );
        assert!(names(ProviderKind::OpenAiCompatible, &[]).is_empty());
        // Telemetry only when the operator lists it.
        let sdk = [Listed::parse("x-stainless-os").unwrap()];
        assert_eq!(
            names(ProviderKind::OpenAiCompatible, &sdk),
            ["x-stainless-os"]
        );
    }
}
