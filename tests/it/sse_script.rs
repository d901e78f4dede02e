//! Scripted SSE upstreams and stream checks shared by the stream tests
//! (`failover.rs`, `attack.rs`).

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::*;

/// In an [`sse_upstream`] script: flush, then wait 100 ms.
pub const PAUSE: &str = "<pause>";
/// In an [`sse_upstream`] script: flush, then wait 3 s (past a short idle_ms).
pub const STALL: &str = "<stall>";

/// An upstream answering its n-th request with the SSE body `script[n]` (the last
/// entry again once the script runs out), keeping each request body.
pub fn sse_upstream(script: Vec<String>) -> (SocketAddr, Arc<Mutex<Vec<serde_json::Value>>>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let bodies = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { return };
            let script = script.clone();
            let bodies = bodies.clone();
            std::thread::spawn(move || {
                let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
                let body = read_request_body(&mut s);
                let n = {
                    let mut b = bodies.lock().unwrap();
                    b.push(serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null));
                    b.len() - 1
                };
                let answer = script[n.min(script.len() - 1)].clone();
                let _ = write!(
                    s,
                    "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n"
                );
                for part in answer.split_inclusive(|_| false) {
                    let mut rest = part;
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
            });
        }
    });
    (addr, seen)
}

pub fn read_request_body(s: &mut std::net::TcpStream) -> Vec<u8> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        let Ok(n) = s.read(&mut chunk) else {
            return Vec::new();
        };
        if n == 0 {
            return Vec::new();
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let len = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok())
                .unwrap_or(0);
            while buf.len() < end + 4 + len {
                let Ok(n) = s.read(&mut chunk) else { break };
                if n == 0 {
                    break;
                }
                buf.extend_from_slice(&chunk[..n]);
            }
            return buf[end + 4..].to_vec();
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
