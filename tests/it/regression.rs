//! Regression tests for bugs found at the HTTP edge, each named after its bug. Raw TCP
//! so that exactly the bytes of the report reach the server.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::{TokioExecutor, TokioIo};

use crate::common::*;

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
    let stream = tokio::net::TcpStream::connect(gw.addr).await.unwrap();
    let (mut send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .unwrap();
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
