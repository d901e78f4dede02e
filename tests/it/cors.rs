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

/// Status and lowercase head of the answer to the raw bytes `request` (which should
/// end the connection: `Connection: close`, or a head the server refuses).
async fn raw(gw: &InProcess, request: &[u8]) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(gw.app.addr()).await.unwrap();
    // The server may answer and close before the last bytes are written.
    let _ = s.write_all(request).await;
    let mut got = Vec::new();
    let _ = tokio::time::timeout(std::time::Duration::from_secs(10), s.read_to_end(&mut got))
        .await
        .expect("the server closes the connection");
    let text = String::from_utf8_lossy(&got).to_ascii_lowercase();
    let head = text.split("\r\n\r\n").next().unwrap_or("").to_string();
    let status = head.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
    (status, head)
}

/// The value of field `name` (lowercase) in `head`, if it has one.
fn field<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.split("\r\n").find_map(|l| {
        let (k, v) = l.split_once(':')?;
        (k == name).then(|| v.trim())
    })
}

/// Found by the CORS review: the 400, 414 and 431 the server answers by itself,
/// before routing (a head it cannot parse, a URI over 65,534 bytes, too many or
/// too large header fields), carried no CORS fields, so a page on an allowed origin
/// saw a network error instead of the status and its JSON error.
#[tokio::test]
async fn answers_the_server_gives_by_itself_carried_no_cors_fields() {
    let gw = gateway(&format!("cors_origins: [ \"{APP}\" ]")).await;
    let long = "a".repeat(100 * 1024);
    let many: String = (0..101).map(|i| format!("X-F{i}: v\r\n")).collect();
    let cases = [
        (
            "a URI over the limit",
            format!("GET /v1/models/{long} HTTP/1.1\r\nHost: x\r\nOrigin: {APP}\r\n\r\n"),
            414,
        ),
        (
            "a header section over max_header_bytes",
            format!("GET /v1/models HTTP/1.1\r\nHost: x\r\nOrigin: {APP}\r\nX-Big: {long}\r\nConnection: close\r\n\r\n"),
            431,
        ),
        (
            "more than 100 fields",
            format!("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nOrigin: {APP}\r\n{many}\r\n"),
            431,
        ),
        (
            "two Host fields",
            format!("GET /v1/models HTTP/1.1\r\nHost: x\r\nOrigin: {APP}\r\nHost: y\r\n\r\n"),
            400,
        ),
        (
            "an absolute-form target, framing both ways",
            format!("POST http://x/v1/chat/completions HTTP/1.1\r\nHost: x\r\nOrigin: {APP}\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n"),
            400,
        ),
    ];
    for (what, request, status) in &cases {
        let (got, head) = raw(&gw, request.as_bytes()).await;
        assert_eq!(got, *status, "{what}: {head}");
        assert_eq!(
            field(&head, "access-control-allow-origin"),
            Some(APP),
            "{what}: {head}"
        );
        let exposed = field(&head, "access-control-expose-headers").unwrap_or("");
        assert!(
            exposed.split(", ").any(|e| e == "x-request-id"),
            "{what}: {head}"
        );
        assert_eq!(field(&head, "vary"), Some("origin"), "{what}: {head}");
        assert!(field(&head, "x-request-id").is_some(), "{what}: {head}");
    }
    // Over HTTP/2 (h2c) too, for the header section over max_header_bytes.
    let stream = tokio::net::TcpStream::connect(gw.app.addr()).await.unwrap();
    let (mut send, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(stream),
    )
    .await
    .unwrap();
    tokio::spawn(conn);
    let req = http::Request::get(gw.url("/v1/models"))
        .header("origin", APP)
        .header("x-big", long.as_str())
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .unwrap();
    let resp = send.send_request(req).await.unwrap();
    assert_eq!(resp.status(), 431);
    assert_eq!(resp.headers()["access-control-allow-origin"], APP);
    assert_eq!(resp.headers()["vary"], "Origin");
    // Another origin, and a path CORS does not cover, get no grant.
    let (got, head) = raw(
        &gw,
        format!(
            "GET /v1/models/{long} HTTP/1.1\r\nHost: x\r\nOrigin: https://evil.example\r\n\r\n"
        )
        .as_bytes(),
    )
    .await;
    assert_eq!(got, 414);
    assert_eq!(field(&head, "access-control-allow-origin"), None, "{head}");
    assert_eq!(field(&head, "vary"), Some("origin"), "{head}");
    let (got, head) = raw(
        &gw,
        format!("GET /health?{long} HTTP/1.1\r\nHost: x\r\nOrigin: {APP}\r\n\r\n").as_bytes(),
    )
    .await;
    assert_eq!(got, 414);
    assert!(!head.contains("access-control-"), "{head}");
    assert_eq!(field(&head, "vary"), None, "{head}");
    // With `*`, one answer for everyone, Origin or not.
    let gw = gateway("cors_origins: [ \"*\" ]").await;
    let (got, head) = raw(
        &gw,
        format!("GET /v1/models/{long} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes(),
    )
    .await;
    assert_eq!(got, 414);
    assert_eq!(
        field(&head, "access-control-allow-origin"),
        Some("*"),
        "{head}"
    );
    // With CORS off, none.
    let gw = gateway("").await;
    let (got, head) = raw(
        &gw,
        format!("GET /v1/models/{long} HTTP/1.1\r\nHost: x\r\nOrigin: {APP}\r\n\r\n").as_bytes(),
    )
    .await;
    assert_eq!(got, 414);
    assert!(
        !head.contains("access-control-") && !head.contains("\r\nvary:"),
        "{head}"
    );
}
