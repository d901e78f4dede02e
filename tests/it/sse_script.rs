//! Scripted upstreams (SSE, and raw bytes with a `content-length`) and stream checks
//! shared by the stream tests (`failover.rs`, `attack.rs`, `bedrock.rs`).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::*;

/// In an [`sse_upstream`] script: flush, then wait 100 ms.
pub const PAUSE: &str = "<pause>";
/// In an [`sse_upstream`] script: flush, then wait 3 s (past a short idle_ms).
pub const STALL: &str = "<stall>";

/// One request a scripted upstream received.
#[derive(Debug, Clone)]
pub struct Received {
    /// Request line and headers, lower-cased.
    pub head: String,
    /// The body (`content-length` bytes).
    pub body: Vec<u8>,
}

/// An upstream on a loopback port serving each connection on its own thread: the
/// request is read (5 s read timeout; a connection that sends no whole request is
/// dropped), `keep` turns it into the log entry returned, and `answer` writes the
/// response given the request's number (its index in the log, from 0).
pub fn loopback_upstream<T, K, A>(keep: K, answer: A) -> (SocketAddr, Arc<Mutex<Vec<T>>>)
where
    T: Send + 'static,
    K: Fn(&Received) -> T + Send + Sync + 'static,
    A: Fn(usize, &Received, &mut TcpStream) + Send + Sync + 'static,
{
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let (keep, answer) = (Arc::new(keep), Arc::new(answer));
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { return };
            let (log, keep, answer) = (log.clone(), keep.clone(), answer.clone());
            std::thread::spawn(move || {
                let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
                let Some(r) = read_request(&mut s) else {
                    return;
                };
                let n = {
                    let mut l = log.lock().unwrap();
                    l.push(keep(&r));
                    l.len() - 1
                };
                answer(n, &r, &mut s);
            });
        }
    });
    (addr, seen)
}

/// An upstream answering its n-th request with the SSE body `script[n]` (the last
/// entry again once the script runs out), keeping each request body.
pub fn sse_upstream(script: Vec<String>) -> (SocketAddr, Arc<Mutex<Vec<serde_json::Value>>>) {
    loopback_upstream(
        |r| serde_json::from_slice(&r.body).unwrap_or(serde_json::Value::Null),
        move |n, _, s| write_sse(s, &script[n.min(script.len() - 1)]),
    )
}

/// Writes a 200 `text/event-stream` response whose body is `answer`, delimited by
/// closing the connection, acting on the [`PAUSE`] and [`STALL`] marks in it.
fn write_sse(s: &mut TcpStream, answer: &str) {
    let _ = write!(
        s,
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n"
    );
    let mut rest = answer;
    loop {
        let p = rest.find(PAUSE).map(|i| (i, PAUSE.len(), 100));
        let st = rest.find(STALL).map(|i| (i, STALL.len(), 3000));
        let next = match (p, st) {
            (Some(a), Some(b)) => Some(if a.0 < b.0 { a } else { b }),
            (a, b) => a.or(b),
        };
        match next {
            None => {
                let _ = s.write_all(rest.as_bytes());
                break;
            }
            Some((i, len, ms)) => {
                let _ = s.write_all(&rest.as_bytes()[..i]);
                let _ = s.flush();
                std::thread::sleep(Duration::from_millis(ms));
                rest = &rest[i + len..];
            }
        }
    }
}

/// Writes a response of `status` (e.g. `200 OK`) with `content-length`, sending
/// `body` in flushed pieces of `piece` bytes, so the gateway sees it split across
/// reads (raw bytes: binary event streams as well as JSON).
pub fn write_raw(s: &mut TcpStream, status: &str, content_type: &str, body: &[u8], piece: usize) {
    let _ = write!(
        s,
        "HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    for p in body.chunks(piece.max(1)) {
        let _ = s.write_all(p);
        let _ = s.flush();
    }
}

/// Reads one request; `None` when the connection ends or times out first.
pub fn read_request(s: &mut TcpStream) -> Option<Received> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        let n = s.read(&mut chunk).ok().filter(|&n| n > 0)?;
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let len = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok())
                .unwrap_or(0);
            while buf.len() < end + 4 + len {
                let n = s.read(&mut chunk).ok().filter(|&n| n > 0)?;
                buf.extend_from_slice(&chunk[..n]);
            }
            let body = buf[end + 4..end + 4 + len].to_vec();
            return Some(Received { head, body });
        }
    }
}

pub fn role_chunk() -> String {
    "data: {\"id\":\"up\",\"object\":\"chat.completion.chunk\",\"created\":7,\"model\":\"x\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}\n\n".to_string()
}

pub fn text_chunk(p: &str) -> String {
    format!(
        "data: {{\"id\":\"up\",\"object\":\"chat.completion.chunk\",\"created\":7,\"model\":\"x\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":{}}},\"finish_reason\":null}}]}}\n\n",
        serde_json::to_string(p).unwrap()
    )
}

pub fn finish_chunk(reason: &str) -> String {
    format!("data: {{\"id\":\"up\",\"object\":\"chat.completion.chunk\",\"created\":7,\"model\":\"x\",\"choices\":[{{\"index\":0,\"delta\":{{}},\"finish_reason\":\"{reason}\"}}]}}\n\n")
}

pub const DONE: &str = "data: [DONE]\n\n";
pub const ERROR_EVENT: &str =
    "data: {\"error\":{\"message\":\"backend died\",\"type\":\"server_error\"}}\n\n";

pub fn openai_sse(pieces: &[&str], finish: bool) -> String {
    let mut s = role_chunk();
    for p in pieces {
        s.push_str(&text_chunk(p));
    }
    if finish {
        s.push_str(&finish_chunk("stop"));
        s.push_str(DONE);
    }
    s
}

/// The text of an OpenAI SSE reply, checking on the way that it is one clean
/// stream: one role chunk, one chunk id, `[DONE]` last and no error event.
pub fn clean_text(r: &Reply) -> String {
    let events = r.events();
    assert_eq!(
        events.last().map(String::as_str),
        Some("[DONE]"),
        "{}",
        r.text()
    );
    let mut text = String::new();
    let mut roles = 0;
    let mut ids = std::collections::BTreeSet::new();
    for e in &events[..events.len() - 1] {
        let v: serde_json::Value = serde_json::from_str(e).unwrap();
        assert!(v.get("error").is_none(), "error event in {}", r.text());
        ids.insert(v["id"].to_string());
        if let Some(d) = v["choices"].get(0).map(|c| &c["delta"]) {
            if d.get("role").is_some() {
                roles += 1;
            }
            if let Some(t) = d["content"].as_str() {
                text.push_str(t);
            }
        }
    }
    assert_eq!(roles, 1, "one role chunk: {}", r.text());
    assert_eq!(ids.len(), 1, "one chunk id: {}", r.text());
    text
}

/// The uninterrupted answer of a healthy mock with `mock` options, streamed.
pub async fn uninterrupted(mock: &str) -> String {
    let gw = start_app(
        &format!("providers:\n  q: {{ kind: mock, mock: {mock} }}\nmodels:\n  m: {{ endpoints: [ {{ provider: q, model: x }} ] }}\n"),
        &[],
    )
    .await;
    let r = post(&gw.url("/v1/chat/completions"), &chat("m", true, "")).await;
    clean_text(&r)
}

#[test]
fn a_loopback_upstream_keeps_each_request_and_answers_raw_bytes_by_number() {
    let (addr, seen) = loopback_upstream(
        |r| (r.head.clone(), r.body.clone()),
        |n, _, s| {
            write_raw(
                s,
                "200 OK",
                "application/octet-stream",
                &[0, 0xff, n as u8],
                2,
            )
        },
    );
    let ask = |body: &[u8]| {
        let mut s = TcpStream::connect(addr).unwrap();
        let _ = write!(
            s,
            "POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        s.write_all(body).unwrap();
        let mut answer = Vec::new();
        s.read_to_end(&mut answer).unwrap();
        answer
    };
    for n in 0..2u8 {
        let answer = ask(b"{\"a\":1}");
        let end = answer.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
        let head = String::from_utf8_lossy(&answer[..end]);
        assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
        assert!(head.contains("content-length: 3"), "{head}");
        assert_eq!(&answer[end + 4..], &[0, 0xff, n]);
    }
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 2);
    assert!(seen[0].0.starts_with("post /x http/1.1"), "{}", seen[0].0);
    assert_eq!(seen[1].1, b"{\"a\":1}");
}
