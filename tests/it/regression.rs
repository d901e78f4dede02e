//! Regression tests, each named after the bug it pins down (found by outside testing).
//! The HTTP-edge ones use raw TCP, so that exactly the bytes of the report reach the
//! server.

use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Full};

use crate::common::*;

fn pin(endpoint: &str) -> String {
    format!("route pin when request.model == \"m\" {{\n  default use endpoint \"{endpoint}\"\n}}\n")
}

const TWO_MOCKS: &str = "providers:\n  a: { kind: mock }\n  b: { kind: mock }\nmodels:\n  m: { endpoints: [ { provider: a, model: x }, { provider: b, model: x } ] }\n";

/// Sends requests until one is served by `endpoint` (10 s at most).
async fn wait_for_endpoint(url: &str, endpoint: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = post(url, &chat("m", false, r#","max_tokens":1"#)).await;
        assert_eq!(r.status, 200, "{}", r.text());
        if r.headers["x-switchyard-endpoint"] == endpoint {
            return;
        }
        assert!(Instant::now() < deadline, "never routed to {endpoint}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The watcher used to be armed after `serve` printed `listening`, so a save made as
/// soon as the line appeared (a deploy script, a test harness) was never seen.
#[tokio::test]
async fn a_policy_save_made_as_serve_prints_listening_is_not_lost() {
    let dir = tempfile::tempdir().unwrap();
    let policies = dir.path().join("policies");
    std::fs::create_dir(&policies).unwrap();
    std::fs::write(policies.join("pin.policy"), pin("a/x")).unwrap();
    let cfg = dir.path().join("switchyard.yaml");
    std::fs::write(&cfg, format!("policies: {{ dir: policies }}\n{TWO_MOCKS}")).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .args([
            "serve",
            "--config",
            cfg.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
        ])
        .env("SWITCHYARD_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start switchyard");
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    let addr = loop {
        line.clear();
        assert!(
            out.read_line(&mut line).unwrap() > 0,
            "exited before listening"
        );
        if let Some(rest) = line.trim().strip_prefix("switchyard listening on") {
            // Save at once, before anything else.
            std::fs::write(policies.join("pin.policy"), pin("b/x")).unwrap();
            break rest.trim().to_string();
        }
    };
    std::thread::spawn(move || {
        let mut sink = String::new();
        while out.read_line(&mut sink).map(|n| n > 0).unwrap_or(false) {
            sink.clear();
        }
    });
    let url = format!("http://{addr}/v1/chat/completions");
    wait_for_endpoint(&url, "b/x").await;
    let _ = child.kill();
    let _ = child.wait();
}

/// `/admin/policies` kept showing the last reload error after the broken file was
/// restored to the content that is serving (the reload was "unchanged", and only a
/// successful swap cleared the error).
#[tokio::test]
async fn admin_policies_clears_last_error_once_the_broken_file_is_restored() {
    let gw = serve_with_policies(TWO_MOCKS, &[("pin.policy", &pin("a/x"))]);
    let file = gw._dir.as_ref().unwrap().path().join("policies/pin.policy");
    let admin = || async { get(&gw.url("/admin/policies")).await.json() };
    std::fs::write(&file, "route pin when {").unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while admin().await["last_error"].is_null() {
        assert!(
            Instant::now() < deadline,
            "the broken save was not reported"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let unchanged = admin().await["reloads"]["unchanged"].as_u64().unwrap();
    std::fs::write(&file, pin("a/x")).unwrap();
    loop {
        let now = admin().await;
        if now["reloads"]["unchanged"].as_u64().unwrap() > unchanged {
            assert!(now["last_error"].is_null(), "{now}");
            break;
        }
        assert!(Instant::now() < deadline, "the restore was not seen: {now}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A 404 for an unknown model echoed the whole name: a 1 MB name made a 1 MB answer.
#[tokio::test]
async fn an_unknown_model_error_does_not_echo_a_huge_name() {
    let gw = serve(TWO_MOCKS);
    let name = "x".repeat(1024 * 1024);
    let r = post(&gw.url("/v1/chat/completions"), &chat(&name, false, "")).await;
    assert_eq!(r.status, 404, "{}", &r.text()[..200.min(r.text().len())]);
    assert!(r.body.len() < 2048, "answer of {} bytes", r.body.len());
    assert_eq!(r.json()["error"]["code"], "model_not_found");
    assert_eq!(r.json()["error"]["param"], "model");
}

/// `serve --check` passed a config that `serve` then refused (then a provider kind
/// with no adapter; now a Bedrock provider without region or credentials): `--check`
/// sets up every provider as startup does.
#[test]
fn serve_check_refuses_what_serve_would_refuse() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.yaml");
    std::fs::write(
        &path,
        "providers:\n  aws: { kind: bedrock, base_url: https://bedrock-runtime.us-east-1.amazonaws.com }\nmodels:\n  m: { endpoints: [ { provider: aws, model: x } ] }\n",
    )
    .unwrap();
    let run = |check: bool| {
        let mut args = vec![
            "serve",
            "--config",
            path.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
        ];
        if check {
            args.insert(1, "--check");
        }
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_switchyard"));
        cmd.args(&args).env("SWITCHYARD_LOG", "warn");
        for var in [
            "AWS_REGION",
            "AWS_DEFAULT_REGION",
            "AWS_ACCESS_KEY_ID",
            "AWS_SECRET_ACCESS_KEY",
            "AWS_SESSION_TOKEN",
            "AWS_BEARER_TOKEN_BEDROCK",
            "AWS_SHARED_CREDENTIALS_FILE",
            "AWS_PROFILE",
        ] {
            cmd.env_remove(var);
        }
        cmd.env("HOME", dir.path()).output().unwrap()
    };
    let checked = run(true);
    let served = run(false);
    assert_eq!(served.status.code(), Some(1), "serve refuses it");
    assert_eq!(checked.status.code(), Some(1), "and so does --check");
    let err = String::from_utf8_lossy(&checked.stderr);
    assert!(err.contains("providers.aws"), "{err}");
    assert!(err.contains("needs a region"), "{err}");
}

// ---- The HTTP edge: connection deadlines and hyper's own error answers ----

/// Deadlines far beyond the 10 s the tests wait, for the phases a test is not about.
const LONG_MS: u64 = 30_000;

/// `switchyard serve` with the in-process mock as model `m` and these `server:` keys.
fn serve_edge(server: &str) -> Proc {
    serve(&format!(
        "server: {{ {server} }}\nproviders: {{ p: {{ kind: mock }} }}\nmodels: {{ m: {{ endpoints: [ {{ provider: p, model: mock-1 }} ] }} }}\n"
    ))
}

fn connect(p: &Proc) -> TcpStream {
    let s = TcpStream::connect(p.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

/// Reads until the server closes; panics if it has not within 10 s. Returns what it
/// sent.
fn closed_by_server(s: &mut TcpStream) -> Vec<u8> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return got,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::ConnectionReset => return got,
            Err(e) => panic!(
                "not closed within 10 s ({e}); got {:?}",
                String::from_utf8_lossy(&got)
            ),
        }
    }
}

/// A parsed response: status, head text, body.
struct Raw {
    status: u16,
    head: String,
    body: Vec<u8>,
}

impl Raw {
    fn error(&self) -> serde_json::Value {
        assert!(
            self.head
                .to_ascii_lowercase()
                .contains("\r\ncontent-type: application/json\r\n"),
            "{}",
            self.head
        );
        let v: serde_json::Value = serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!("not JSON ({e}): {:?}", String::from_utf8_lossy(&self.body))
        });
        assert_eq!(v["error"]["type"], "invalid_request_error", "{v}");
        assert!(v["error"]["param"].is_null(), "{v}");
        v["error"].clone()
    }
}

/// Reads one response (framed by `content-length`) from `s`, using `pending` for bytes
/// already read past the previous one.
fn read_response(s: &mut TcpStream, pending: &mut Vec<u8>) -> Raw {
    let mut buf = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = pending.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = s.read(&mut buf).expect("response within 10 s");
        assert!(
            n > 0,
            "closed mid-response: {:?}",
            String::from_utf8_lossy(pending)
        );
        pending.extend_from_slice(&buf[..n]);
    };
    let head = String::from_utf8(pending[..head_end].to_vec()).unwrap();
    let status = head[9..12].parse().unwrap();
    let length: usize = head
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse().unwrap())
        })
        .unwrap_or(0);
    // A canned error that lost its body would say `content-length: 0`.
    while pending.len() < head_end + length {
        let n = s.read(&mut buf).expect("body within 10 s");
        assert!(n > 0, "closed mid-body: {head}");
        pending.extend_from_slice(&buf[..n]);
    }
    let body = pending[head_end..head_end + length].to_vec();
    pending.drain(..head_end + length);
    Raw { status, head, body }
}

fn exchange(p: &Proc, request: &[u8]) -> Raw {
    let mut s = connect(p);
    s.write_all(request).unwrap();
    read_response(&mut s, &mut Vec::new())
}

// Bug: a connection that never sends a byte, or only part of a request head or of the
// HTTP/2 preface, was never closed, so idle sockets could exhaust the descriptors.

#[test]
fn a_connection_that_sends_nothing_is_closed() {
    let gw = serve_edge(&format!(
        "first_byte_timeout_ms: 300, header_timeout_ms: {LONG_MS}, idle_timeout_ms: {LONG_MS}"
    ));
    assert!(closed_by_server(&mut connect(&gw)).is_empty());
}

#[test]
fn a_partial_http2_preface_is_closed() {
    let gw = serve_edge(&format!(
        "first_byte_timeout_ms: {LONG_MS}, header_timeout_ms: 300, idle_timeout_ms: {LONG_MS}"
    ));
    let mut s = connect(&gw);
    s.write_all(b"PRI * HTTP/2.0\r\n").unwrap();
    assert!(closed_by_server(&mut s).is_empty());
}

#[test]
fn a_partial_request_head_is_closed() {
    let gw = serve_edge(&format!(
        "first_byte_timeout_ms: {LONG_MS}, header_timeout_ms: 300, idle_timeout_ms: {LONG_MS}"
    ));
    let mut s = connect(&gw);
    s.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        .unwrap();
    assert!(closed_by_server(&mut s).is_empty());
}

#[test]
fn a_keep_alive_connection_left_idle_is_closed() {
    let gw = serve_edge(&format!(
        "first_byte_timeout_ms: {LONG_MS}, header_timeout_ms: {LONG_MS}, idle_timeout_ms: 300"
    ));
    let mut s = connect(&gw);
    s.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let r = read_response(&mut s, &mut Vec::new());
    assert_eq!(r.status, 200);
    // Kept alive by the answer; closed by the idle deadline.
    assert!(
        !r.head.to_ascii_lowercase().contains("connection: close"),
        "{}",
        r.head
    );
    assert!(closed_by_server(&mut s).is_empty());
}

#[test]
fn a_slow_client_within_the_deadlines_is_served() {
    let gw =
        serve_edge("first_byte_timeout_ms: 5000, header_timeout_ms: 5000, idle_timeout_ms: 5000");
    let mut s = connect(&gw);
    std::thread::sleep(Duration::from_millis(200));
    let mut pending = Vec::new();
    for round in 0..2 {
        for piece in ["GET /hea", "lth HTTP/1.1\r\n", "Host: x\r\n", "\r\n"] {
            s.write_all(piece.as_bytes()).unwrap();
            std::thread::sleep(Duration::from_millis(100));
        }
        let r = read_response(&mut s, &mut pending);
        assert_eq!(r.status, 200, "round {round}");
        assert_eq!(r.body, br#"{"status":"ok"}"#);
        // Idle between the two requests of the keep-alive connection.
        std::thread::sleep(Duration::from_millis(300));
    }
}

#[tokio::test]
async fn an_http2_connection_is_served_then_closed_once_idle() {
    let gw = serve_edge(&format!(
        "first_byte_timeout_ms: {LONG_MS}, header_timeout_ms: {LONG_MS}, idle_timeout_ms: 300"
    ));
    let (mut send, conn) = h2_connect(gw.addr).await;
    let conn = tokio::spawn(conn);
    for _ in 0..2 {
        let req = http::Request::get(gw.url("/health"))
            .body(Empty::<Bytes>::new())
            .unwrap();
        let resp = send.send_request(req).await.unwrap();
        assert_eq!(resp.status(), 200);
        assert_eq!(resp.version(), http::Version::HTTP_2);
        resp.into_body().collect().await.unwrap();
    }
    // Whether it ends cleanly or with an error, the server closed it.
    let _ = tokio::time::timeout(Duration::from_secs(10), conn)
        .await
        .expect("idle HTTP/2 connection closed within 10 s");
}

/// The gateway's own fields (`x-ratelimit-*`, `x-switchyard-*`, `x-request-id`) are
/// written as field lines beside the header map (`server::lines`); an HTTP/2 answer,
/// written by hyper from the map alone, must carry them too.
#[tokio::test]
async fn an_http2_chat_answer_carries_the_gateway_fields() {
    let m = mock(&[]);
    let gw = serve(&format!(
        "limits: {{ global: {{ requests_per_min: 1000 }} }}\n{}",
        config(
            &[("up", &m)],
            "",
            "  m:\n    endpoints:\n      - { provider: up, model: x }\n"
        )
    ));
    let (mut send, conn) = h2_connect(gw.addr).await;
    tokio::spawn(conn);
    for stream in [false, true] {
        let req = http::Request::post(gw.url("/v1/chat/completions"))
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(chat("m", stream, ""))))
            .unwrap();
        let resp = send.send_request(req).await.unwrap();
        assert_eq!(resp.status(), 200, "stream {stream}");
        assert_eq!(resp.version(), http::Version::HTTP_2);
        let h = resp.headers();
        assert_eq!(h["x-ratelimit-limit-requests"], "1000", "stream {stream}");
        assert!(h.contains_key("x-ratelimit-remaining-requests"));
        assert!(h.contains_key("x-ratelimit-reset-requests"));
        assert_eq!(h["x-switchyard-endpoint"], "up/x", "stream {stream}");
        assert_eq!(h["x-switchyard-attempts"], "1");
        assert!(h.contains_key("x-switchyard-policy"));
        assert_eq!(h.get_all("x-request-id").iter().count(), 1);
        resp.into_body().collect().await.unwrap();
    }
    // Not a chat request: the policy version and the request id still.
    let req = http::Request::get(gw.url("/health"))
        .body(Full::new(Bytes::new()))
        .unwrap();
    let resp = send.send_request(req).await.unwrap();
    assert!(resp.headers().contains_key("x-switchyard-policy"));
    assert!(resp.headers().contains_key("x-request-id"));
}

/// Found by review (2026-12-05): hyper's HTTP/2 server sends whatever the answer's
/// body yields, whatever the method, so `HEAD /health` over h2c carried DATA frames
/// and the client reset the stream (`PROTOCOL_ERROR`). A `HEAD` answer is now bodiless
/// and keeps the `content-length` a `GET` gets; the connection serves on.
#[tokio::test]
async fn a_head_request_over_http2_is_answered_without_a_body() {
    let gw = serve_edge("");
    let (mut send, conn) = h2_connect(gw.addr).await;
    tokio::spawn(conn);
    for path in ["/health", "/ui", "/v1/models", "/v1/models/m", "/ready"] {
        let ask = |method: http::Method| {
            http::Request::builder()
                .method(method)
                .uri(gw.url(path))
                .body(Empty::<Bytes>::new())
                .unwrap()
        };
        let get = send.send_request(ask(http::Method::GET)).await.unwrap();
        assert_eq!(get.status(), 200, "GET {path}");
        let got = get.into_body().collect().await.unwrap().to_bytes();
        assert!(!got.is_empty(), "GET {path} has a body");
        let head = send.send_request(ask(http::Method::HEAD)).await.unwrap();
        assert_eq!(head.status(), 200, "HEAD {path}");
        assert_eq!(head.version(), http::Version::HTTP_2);
        assert_eq!(
            head.headers()["content-length"],
            got.len().to_string().as_str(),
            "HEAD {path} says what GET carries"
        );
        assert!(head.headers().contains_key("x-request-id"));
        let body = head.into_body().collect().await;
        let body = body.unwrap_or_else(|e| panic!("HEAD {path}: stream reset: {e}"));
        assert!(body.to_bytes().is_empty(), "HEAD {path} carries no body");
    }
}

/// Found by attack (2026-12-05): only `/health` and `/ui` took `HEAD`; every other
/// GET route answered 405 with `allow: GET` (RFC 9110 section 9.1: a general-purpose
/// server supports GET and HEAD). HEAD is now GET without the body everywhere, and a
/// 405 names both.
#[test]
fn head_is_served_wherever_get_is_and_a_405_allows_both() {
    let gw = serve_edge("");
    for path in ["/v1/models", "/v1/models/m", "/ready", "/health"] {
        let req = format!("HEAD {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        let mut s = connect(&gw);
        s.write_all(req.as_bytes()).unwrap();
        let got = String::from_utf8(closed_by_server(&mut s)).unwrap();
        assert!(got.starts_with("HTTP/1.1 200 "), "HEAD {path}: {got}");
        let (head, body) = got.split_once("\r\n\r\n").unwrap();
        assert!(body.is_empty(), "HEAD {path} carries no body: {body:?}");
        assert!(
            head.to_ascii_lowercase().contains("\r\ncontent-length: "),
            "{head}"
        );
    }
    for (method, path, allow) in [
        ("POST", "/v1/models", "GET, HEAD, OPTIONS"),
        ("DELETE", "/v1/models/m", "GET, HEAD, OPTIONS"),
        ("PUT", "/health", "GET, HEAD, OPTIONS"),
        ("GET", "/v1/chat/completions", "POST, OPTIONS"),
    ] {
        let r = exchange(
            &gw,
            format!("{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n").as_bytes(),
        );
        assert_eq!(r.status, 405, "{method} {path}: {}", r.head);
        assert!(
            r.head
                .to_ascii_lowercase()
                .contains(&format!("\r\nallow: {}\r\n", allow.to_ascii_lowercase())),
            "{method} {path}: {}",
            r.head
        );
        // An OpenAI-shaped `invalid_request_error` (checked by `error`).
        assert!(r.error()["message"].as_str().unwrap().contains(path));
    }
}

/// Found by the CORS review: `OPTIONS` got 405 on every path (and `OPTIONS *` a
/// 404), though RFC 9110 section 9.3.7 makes it the question "which methods does
/// this take?". It is now 204 with `Allow`, on either listener for `*`.
#[test]
fn an_options_request_was_refused_with_405() {
    let gw = serve_edge("");
    for (target, allow) in [
        ("/v1/chat/completions", "POST, OPTIONS"),
        ("/v1/models", "GET, HEAD, OPTIONS"),
        ("/v1/models/m", "GET, HEAD, OPTIONS"),
        ("/health", "GET, HEAD, OPTIONS"),
        ("/admin/reload", "POST, OPTIONS"),
        ("*", "GET, HEAD, POST, OPTIONS"),
    ] {
        let r = exchange(
            &gw,
            format!("OPTIONS {target} HTTP/1.1\r\nHost: x\r\nOrigin: https://a.example\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        );
        assert_eq!(r.status, 204, "OPTIONS {target}: {}", r.head);
        let head = r.head.to_ascii_lowercase();
        assert!(
            head.contains(&format!("\r\nallow: {}\r\n", allow.to_ascii_lowercase())),
            "OPTIONS {target}: {}",
            r.head
        );
        assert!(!head.contains("access-control-"), "CORS is off: {}", r.head);
        assert!(
            !head.contains("content-length"),
            "a 204 has no length: {}",
            r.head
        );
        assert!(r.body.is_empty());
    }
    let r = exchange(
        &gw,
        b"OPTIONS /nowhere HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(r.status, 404);
}

/// Found by attack (2026-12-05): `FOO /v1/models` and `get /v1/models` got 405
/// with `allow: GET`; RFC 9110 section 9.1: a method the server does not know
/// SHOULD get 501 (methods are case-sensitive).
#[test]
fn an_unknown_method_is_a_501_on_any_path() {
    let gw = serve_edge("");
    for (method, path) in [
        ("FOO", "/v1/models"),
        ("get", "/v1/models"),
        ("BREW", "/v1/chat/completions"),
        ("FOO", "/nowhere"),
    ] {
        let r = exchange(
            &gw,
            format!("{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n").as_bytes(),
        );
        assert_eq!(r.status, 501, "{method} {path}: {}", r.head);
        assert!(r.error()["message"].as_str().unwrap().contains(method));
    }
    // A known method a path does not take is still a 405.
    let r = exchange(
        &gw,
        b"PATCH /v1/models HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n",
    );
    assert_eq!(r.status, 405);
}

/// `GET /v1/models/{model}` (OpenAI's retrieve) finds a model whose name holds a
/// `/`, sent as is or escaped, as SDKs send it.
#[test]
fn a_model_named_with_a_slash_is_retrieved_escaped_or_not() {
    let gw = serve(
        "providers: { p: { kind: mock } }\nmodels: { 'meta-llama/Llama-3 8B': { endpoints: [ { provider: p, model: mock-1 } ] } }\n",
    );
    for path in [
        "/v1/models/meta-llama/Llama-3%208B",
        "/v1/models/meta-llama%2FLlama-3%208B",
        "/v1/models/meta-llama%2fLlama-3%208B/",
    ] {
        let r = exchange(
            &gw,
            format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
        );
        assert_eq!(r.status, 200, "{path}: {}", r.head);
        let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
        assert_eq!(v["id"], "meta-llama/Llama-3 8B", "{path}");
    }
    let r = exchange(
        &gw,
        b"GET /v1/models/meta-llama HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(r.status, 404);
}

#[tokio::test]
async fn a_request_in_flight_outlasting_every_deadline_is_not_cut() {
    // 16 tokens at 8 tokens/s: about 2 s, far past the 300 ms deadlines.
    let m = mock(&["--tokens-per-s", "8"]);
    let gw = serve(&format!(
        "server: {{ first_byte_timeout_ms: 300, header_timeout_ms: 300, idle_timeout_ms: 300 }}\n{}",
        config(
            &[("up", &m)],
            "",
            "  m:\n    endpoints:\n      - { provider: up, model: x }\n"
        )
    ));
    let url = gw.url("/v1/chat/completions");
    for stream in [true, false] {
        let r = post(&url, &chat("m", stream, "")).await;
        assert_eq!(r.status, 200, "{}", r.text());
        if stream {
            assert_eq!(r.events().last().unwrap(), "[DONE]", "{}", r.text());
        } else {
            assert!(r.json()["choices"][0]["message"]["content"].is_string());
        }
    }
}

// Bug: hyper's own 400 / 414 / 431 answers had empty bodies instead of OpenAI error
// JSON (and, later, no `x-request-id`, which every other response has).

/// The `x-request-id` of a response head.
fn head_request_id(head: &str) -> Option<&str> {
    head.split("\r\n").find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case("x-request-id").then(|| v.trim())
    })
}

/// Asserts that a refused head's answer names a generated (UUID) request id.
fn assert_generated_request_id(head: &str) {
    let id = head_request_id(head).unwrap_or_else(|| panic!("no x-request-id in:\n{head}"));
    assert!(
        id.len() == 36 && id.split('-').map(str::len).eq([8, 4, 4, 4, 12]),
        "not a UUID: {id}"
    );
}

#[test]
fn a_malformed_request_line_gets_a_json_400() {
    let gw = serve_edge("");
    let r = exchange(&gw, b"GET /v1/models HTTP/1.1 junk\r\nHost: x\r\n\r\n");
    assert_eq!(r.status, 400, "{}", r.head);
    assert_generated_request_id(&r.head);
    let e = r.error();
    assert_eq!(e["code"], "malformed_request");
    assert!(
        e["message"].as_str().unwrap().contains("request line"),
        "{e}"
    );
}

#[test]
fn a_100_kb_uri_gets_a_json_414() {
    let gw = serve_edge("");
    let uri = format!("/v1/models?q={}", "a".repeat(100 * 1024));
    let r = exchange(
        &gw,
        format!("GET {uri} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes(),
    );
    assert_eq!(r.status, 414, "{}", r.head);
    assert_generated_request_id(&r.head);
    let e = r.error();
    assert_eq!(e["code"], "uri_too_long");
    assert!(e["message"].as_str().unwrap().contains("URI"), "{e}");
}

#[test]
fn a_100_kb_header_gets_a_json_431() {
    let gw = serve_edge("");
    let big = "a".repeat(100 * 1024);
    let r = exchange(
        &gw,
        format!("GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Request-Id: big-head-1\r\nX-Big: {big}\r\n\r\n").as_bytes(),
    );
    assert_eq!(r.status, 431, "{}", r.head);
    // Refused by the service, which read the head: the client's id is kept.
    assert_eq!(head_request_id(&r.head), Some("big-head-1"), "{}", r.head);
    let e = r.error();
    assert_eq!(e["code"], "headers_too_large");
    assert!(
        e["message"].as_str().unwrap().contains("65536 bytes"),
        "{e}"
    );
}

#[test]
fn more_than_100_header_fields_get_a_json_431() {
    // hyper's own limit, answered by hyper rather than by the service.
    let gw = serve_edge("");
    let fields: String = (0..101).map(|i| format!("X-F{i}: v\r\n")).collect();
    let r = exchange(
        &gw,
        format!("GET /v1/models HTTP/1.1\r\nHost: x\r\n{fields}\r\n").as_bytes(),
    );
    assert_eq!(r.status, 431, "{}", r.head);
    assert_generated_request_id(&r.head);
    assert_eq!(r.error()["code"], "headers_too_large");
}

#[test]
fn pipelined_requests_before_a_malformed_one_get_their_own_answers() {
    let gw = serve_edge("");
    let mut s = connect(&gw);
    s.write_all(
        b"GET /health HTTP/1.1\r\nHost: x\r\n\r\nGET /v1/models HTTP/1.1\r\nHost: x\r\n\r\nNOT HTTP\r\n\r\n",
    )
    .unwrap();
    let mut pending = Vec::new();
    let health = read_response(&mut s, &mut pending);
    assert_eq!(health.status, 200);
    assert_eq!(health.body, br#"{"status":"ok"}"#);
    let models = read_response(&mut s, &mut pending);
    assert_eq!(models.status, 200);
    assert!(String::from_utf8_lossy(&models.body).contains("\"m\""));
    let bad = read_response(&mut s, &mut pending);
    assert_eq!(bad.status, 400, "{}", bad.head);
    assert_eq!(bad.error()["code"], "malformed_request");
    assert!(closed_by_server(&mut s).is_empty());
}

#[test]
fn expect_100_continue_still_gets_100_continue() {
    let gw = serve_edge("");
    let body = chat("m", false, "");
    let mut s = connect(&gw);
    s.write_all(
        format!(
            "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nExpect: 100-continue\r\n\r\n",
            body.len()
        )
        .as_bytes(),
    )
    .unwrap();
    let mut pending = Vec::new();
    assert_eq!(read_response(&mut s, &mut pending).status, 100);
    s.write_all(body.as_bytes()).unwrap();
    let r = read_response(&mut s, &mut pending);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
}

// ---- Found by attacking the request-path rework ----

/// An upstream that reads each request completely (head and `content-length` body),
/// counts it, writes `answer` verbatim and closes the connection (one connection per
/// request, so no connection is ever reused by the gateway's pool).
fn raw_upstream(answer: &'static [u8]) -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let hits = Arc::new(AtomicUsize::new(0));
    let seen = hits.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { return };
            let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
            let mut buf = Vec::new();
            let mut chunk = [0u8; 65536];
            // Read the head, then the declared body: the provider saw the whole request.
            let complete = loop {
                let Ok(n) = s.read(&mut chunk) else {
                    break false;
                };
                if n == 0 {
                    break false;
                }
                buf.extend_from_slice(&chunk[..n]);
                let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                    continue;
                };
                let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
                let len = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse::<usize>().ok())
                    .unwrap_or(0);
                if buf.len() >= end + 4 + len {
                    break true;
                }
            };
            if complete {
                seen.fetch_add(1, Ordering::SeqCst);
            }
            let _ = s.write_all(answer);
            // Dropping `s` closes the connection.
        }
    });
    (addr, hits)
}

fn one_endpoint(addr: SocketAddr) -> String {
    format!(
        "providers:\n  p: {{ kind: openai-compatible, base_url: http://{addr}/v1 }}\nmodels:\n  m: {{ endpoints: [ {{ provider: p, model: x }} ] }}\n"
    )
}

/// Egress re-sent "stale pooled connection" failures once on a new connection, but
/// its test never checked that the connection was reused, nor that no response byte
/// had arrived: a provider that received the whole request on a *fresh* connection
/// and began its answer (`HTTP/1.1 200 OK\r\ncontent-ty`) got it a second time,
/// hidden from `x-switchyard-attempts` and the metrics (a paid provider bills both).
#[tokio::test(flavor = "multi_thread")]
async fn a_fresh_connection_cut_after_response_bytes_is_not_resent() {
    assert_sent_once(b"HTTP/1.1 200 OK\r\ncontent-ty").await;
}

/// Same classification bug without any response byte: the provider read the complete
/// request on a fresh connection and closed it. Nothing was pooled, so this is not
/// the stale-connection case; the attempt must send the request once (the fallback
/// chain decides about further attempts, and counts them).
#[tokio::test(flavor = "multi_thread")]
async fn a_fresh_connection_closed_without_answer_is_sent_once_per_attempt() {
    assert_sent_once(b"").await;
}

/// One endpoint that reads each request whole, writes `answer` and closes: the client
/// gets 502 after one attempt, and the provider saw the request exactly once.
async fn assert_sent_once(answer: &'static [u8]) {
    let (addr, hits) = raw_upstream(answer);
    let gw = serve(&one_endpoint(addr));
    let r = post(&gw.url("/v1/chat/completions"), &chat("m", false, "")).await;
    assert_eq!(r.status, 502, "{}", r.text());
    assert_eq!(r.headers["x-switchyard-attempts"], "1");
    assert_eq!(
        hits.load(Ordering::SeqCst),
        1,
        "x-switchyard-attempts says 1 but the provider received the request more often"
    );
}

/// README: the upstream's 429 is "passed through with `Retry-After`". RFC 9110 §10.2.3
/// allows `Retry-After` as an HTTP-date; `providers::upstream_error` only parsed
/// seconds, so the header was dropped. (Waits are cut to one hour, and the client's
/// to `breaker.max_cooldown_ms`, 300 s by default: the endpoint's pause.)
#[tokio::test(flavor = "multi_thread")]
async fn an_upstream_429_retry_after_http_date_reaches_the_client() {
    let body =
        r#"{"error":{"message":"slow down","type":"requests","code":"rate_limit_exceeded"}}"#;
    let answer = format!(
        "HTTP/1.1 429 Too Many Requests\r\ncontent-type: application/json\r\nretry-after: Tue, 31 Dec 2999 23:59:59 GMT\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let answer: &'static [u8] = Box::leak(answer.into_bytes().into_boxed_slice());
    let (addr, _hits) = raw_upstream(answer);
    let gw = serve(&one_endpoint(addr));
    let r = post(&gw.url("/v1/chat/completions"), &chat("m", false, "")).await;
    assert_eq!(r.status, 429, "{}", r.text());
    assert_eq!(
        r.headers.get("retry-after").map(|v| v.to_str().unwrap()),
        Some("300"),
        "the provider's Retry-After (HTTP-date form) was dropped: {:?}",
        r.headers
    );
}

/// `../shared/reliability/input_extra.py`: with the gateway's descriptor limit
/// (`ulimit -n`) held by connections that sent nothing, a client with a request in
/// hand waited in the kernel's backlog until `first_byte_timeout` closed some of them
/// (a `ReadTimeout` after 5 s in the script). The accept loop now closes idle
/// connections when `accept` fails with `EMFILE`; here `first_byte_timeout` is a
/// minute, so only that can let the request through within the 15 s allowed.
#[test]
fn a_request_gets_through_while_idle_connections_hold_every_file_descriptor() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("switchyard.yaml");
    std::fs::write(
        &cfg,
        "server: { first_byte_timeout_ms: 60000 }\nproviders:\n  a: { kind: mock }\nmodels:\n  m: { endpoints: [ { provider: a, model: x } ] }\n",
    )
    .unwrap();
    let mut cmd = Command::new("bash");
    cmd.args([
        "-c",
        "ulimit -n 160 && exec \"$0\" serve --config \"$1\" --listen 127.0.0.1:0",
        env!("CARGO_BIN_EXE_switchyard"),
        cfg.to_str().unwrap(),
    ])
    .env("SWITCHYARD_LOG", "error");
    let gw = spawn_command(cmd, "switchyard listening on", Some(dir));
    let addr = gw.addr;
    // More silent connections than the gateway has descriptors.
    let idle: Vec<TcpStream> = (0..240)
        .map(|_| TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let body = chat("m", false, r#","max_tokens":4"#);
    let mut c = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    write!(
        c,
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut status = String::new();
    let read = BufReader::new(&c).read_line(&mut status);
    assert!(
        matches!(read, Ok(n) if n > 0) && status.starts_with("HTTP/1.1 200"),
        "no answer while idle connections held the descriptors: {read:?} {status:?}"
    );
    // Some of the silent connections were closed to make room, not all of them.
    let closed = idle
        .iter()
        .filter(|s| {
            s.set_nonblocking(true).unwrap();
            matches!((&**s).read(&mut [0u8; 1]), Ok(0))
        })
        .count();
    assert!(
        closed > 0 && closed < idle.len(),
        "{closed} of {} closed",
        idle.len()
    );
}

/// Outside testing (2026-12-07): with the default per-core runtime, a second
/// `serve` on the address a running one serves started too (its listeners joined
/// the first one's with `SO_REUSEPORT`), and the kernel split new connections
/// between the two configurations. It must fail as the shared runtime does.
#[test]
fn a_second_serve_on_a_served_port_exits_instead_of_sharing_it() {
    let first = serve(TWO_MOCKS);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("switchyard.yaml");
    std::fs::write(&path, TWO_MOCKS).unwrap();
    let mut second = Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .args(["serve", "--no-watch", "--config"])
        .arg(&path)
        .args(["--listen", &first.addr.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = second.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = second.kill();
            let _ = second.wait();
            panic!("a second serve on {} kept running", first.addr);
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut stderr = String::new();
    second
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!("cannot listen on {}", first.addr)),
        "{stderr}"
    );
}
