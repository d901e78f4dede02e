//! CORS (`server.cors_origins`): browser preflights and the fields of real answers to
//! a page on another origin, on gateways started in process.

use crate::common::{chat, request_with, start_app, InProcess, Reply};
use switchyard::auth::keys::hash_secret;

const APP: &str = "https://app.example.com";

/// The headers OpenAI's JS SDK (v4) sends on a chat call from a browser, as the
/// browser lists them in `Access-Control-Request-Headers` (lowercase, sorted).
const SDK_HEADERS: &str = "authorization,content-type,openai-organization,openai-project,x-request-id,x-stainless-arch,x-stainless-lang,x-stainless-os,x-stainless-package-version,x-stainless-retry-count,x-stainless-runtime,x-stainless-runtime-version,x-stainless-timeout";

/// A gateway with a mock model `m`, one API key `sy-k` and `server` settings.
async fn gateway(server: &str) -> InProcess {
    start_app(
        &format!(
            "server: {{ {server} }}\nauth:\n  mode: keys\n  keys:\n    - {{ id: k, hash: '{}' }}\nproviders: {{ p: {{ kind: mock }} }}\nmodels: {{ m: {{ endpoints: [ {{ provider: p, model: mock-1 }} ] }} }}\n",
            hash_secret("sy-k")
        ),
        &[],
    )
    .await
}

async fn preflight(gw: &InProcess, path: &str, origin: &str) -> Reply {
    request_with(
        "OPTIONS",
        &gw.url(path),
        &[
            ("origin", origin),
            ("access-control-request-method", "POST"),
            ("access-control-request-headers", SDK_HEADERS),
        ],
        "",
    )
    .await
}

fn cors_fields(r: &Reply) -> Vec<String> {
    r.headers
        .keys()
        .map(|k| k.as_str().to_string())
        .filter(|k| k.starts_with("access-control-"))
        .collect()
}

/// Found by the CORS review: a browser app's preflight (`OPTIONS` with `Origin` and
/// `Access-Control-Request-Method`) got 405, so no page on another origin could
/// call the gateway, whatever the operator wanted.
#[tokio::test]
async fn a_browser_preflight_to_chat_completions_was_refused_with_405() {
    let gw = gateway(&format!(
        "cors_origins: [ \"{APP}\", \"http://localhost:5173\" ]"
    ))
    .await;
    let r = preflight(&gw, "/v1/chat/completions", APP).await;
    assert_eq!(r.status, 204, "{}", r.text());
    assert!(r.body.is_empty());
    assert_eq!(r.headers["access-control-allow-origin"], APP);
    assert_eq!(r.headers["access-control-allow-methods"], "POST");
    assert_eq!(r.headers["access-control-allow-headers"], SDK_HEADERS);
    assert_eq!(r.headers["access-control-max-age"], "7200");
    assert_eq!(r.headers["vary"], "Origin");
    assert_eq!(r.headers["allow"], "POST, OPTIONS");
    // The models list, and a model, take GET.
    for path in ["/v1/models", "/v1/models/m"] {
        let r = preflight(&gw, path, "http://localhost:5173").await;
        assert_eq!(r.status, 204, "{path}");
        assert_eq!(
            r.headers["access-control-allow-origin"],
            "http://localhost:5173"
        );
        assert_eq!(r.headers["access-control-allow-methods"], "GET, HEAD");
    }
}

#[tokio::test]
async fn a_preflight_from_an_origin_not_listed_gets_no_cors_fields() {
    let gw = gateway(&format!("cors_origins: [ \"{APP}\" ]")).await;
    for origin in [
        "https://evil.example",
        "https://app.example.com.evil.example",
        "null",
    ] {
        let r = preflight(&gw, "/v1/chat/completions", origin).await;
        assert_eq!(r.status, 204, "{origin}");
        assert!(cors_fields(&r).is_empty(), "{origin}: {:?}", r.headers);
        assert_eq!(r.headers["allow"], "POST, OPTIONS");
        assert_eq!(r.headers["vary"], "Origin");
    }
    // Nor does an operator path, from an allowed origin.
    let r = preflight(&gw, "/admin/endpoints", APP).await;
    assert_eq!(r.status, 204);
    assert!(cors_fields(&r).is_empty(), "{:?}", r.headers);
    assert!(!r.headers.contains_key("vary"));
    // An unknown path stays a 404, which fails the preflight.
    let r = preflight(&gw, "/v1/embeddings", APP).await;
    assert_eq!(r.status, 404);
}

#[tokio::test]
async fn with_cors_off_options_names_the_methods_and_grants_nothing() {
    let gw = gateway("").await;
    let r = preflight(&gw, "/v1/chat/completions", APP).await;
    assert_eq!(r.status, 204, "{}", r.text());
    assert_eq!(r.headers["allow"], "POST, OPTIONS");
    assert!(cors_fields(&r).is_empty(), "{:?}", r.headers);
    assert!(!r.headers.contains_key("vary"));
    let r = request_with("POST", &gw.url("/v1/models"), &[("origin", APP)], "").await;
    assert_eq!(r.status, 405);
    assert_eq!(r.headers["allow"], "GET, HEAD, OPTIONS");
    assert!(cors_fields(&r).is_empty(), "{:?}", r.headers);
}

/// Every answer under `/v1/` to an allowed origin lets the page read it and the
/// gateway's headers: successes, streams, the models list, errors of every kind.
#[tokio::test]
async fn answers_to_an_allowed_origin_carry_the_origin_and_expose_the_gateway_headers() {
    let gw = gateway(&format!("cors_origins: [ \"{APP}\" ]")).await;
    let key = ("authorization", "Bearer sy-k");
    let from = ("origin", APP);
    let url = gw.url("/v1/chat/completions");
    let cases = [
        (
            "json",
            request_with("POST", &url, &[key, from], chat("m", false, "")).await,
            200,
        ),
        (
            "stream",
            request_with("POST", &url, &[key, from], chat("m", true, "")).await,
            200,
        ),
        (
            "no key",
            request_with("POST", &url, &[from], chat("m", false, "")).await,
            401,
        ),
        (
            "bad body",
            request_with("POST", &url, &[key, from], "{").await,
            400,
        ),
        (
            "unknown model",
            request_with("POST", &url, &[key, from], chat("nope", false, "")).await,
            404,
        ),
        (
            "models",
            request_with("GET", &gw.url("/v1/models"), &[key, from], "").await,
            200,
        ),
        (
            "wrong method",
            request_with("GET", &url, &[key, from], "").await,
            405,
        ),
    ];
    for (what, r, status) in &cases {
        assert_eq!(r.status, *status, "{what}: {}", r.text());
        assert_eq!(r.headers["access-control-allow-origin"], APP, "{what}");
        let exposed = r.headers["access-control-expose-headers"].to_str().unwrap();
        for h in [
            "x-request-id",
            "x-switchyard-policy",
            "x-switchyard-endpoint",
        ] {
            assert!(exposed.split(", ").any(|e| e == h), "{what}: {exposed}");
        }
        assert_eq!(r.headers["vary"], "Origin", "{what}");
    }
    assert!(cases[1].1.text().contains("[DONE]"));
    // Not for another origin, and never on operator or probe paths.
    let r = request_with(
        "POST",
        &url,
        &[key, ("origin", "https://evil.example")],
        chat("m", false, ""),
    )
    .await;
    assert_eq!(r.status, 200);
    assert!(cors_fields(&r).is_empty(), "{:?}", r.headers);
    assert_eq!(r.headers["vary"], "Origin");
    for path in ["/health", "/admin/endpoints", "/metrics"] {
        let r = request_with("GET", &gw.url(path), &[from], "").await;
        assert!(cors_fields(&r).is_empty(), "{path}: {:?}", r.headers);
    }
}

#[tokio::test]
async fn a_star_allows_every_origin_with_one_answer_for_all() {
    let gw = gateway("cors_origins: [ \"*\" ]").await;
    let r = preflight(&gw, "/v1/chat/completions", "https://anywhere.example").await;
    assert_eq!(r.status, 204);
    assert_eq!(r.headers["access-control-allow-origin"], "*");
    assert_eq!(r.headers["access-control-allow-headers"], SDK_HEADERS);
    assert!(!r.headers.contains_key("vary"));
    let r = request_with(
        "POST",
        &gw.url("/v1/chat/completions"),
        &[
            ("authorization", "Bearer sy-k"),
            ("origin", "https://anywhere.example"),
        ],
        chat("m", true, ""),
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.headers["access-control-allow-origin"], "*");
    assert!(r.headers.contains_key("access-control-expose-headers"));
    assert!(!r.headers.contains_key("vary"));
}
