//! Bad input from a provider, for every adapter (issue 13, "Bad input"): malformed
//! JSON, unknown event types, events split across reads at awkward places,
//! keep-alives, huge lines, event stream frames with a bad CRC, a connection closed
//! mid-event, and non-stream answers that are truncated or not JSON.
//!
//! Each case runs the real binary (`switchyard serve`) in front of a scripted upstream
//! on loopback and reads what the client gets. The rule checked every time
//! ([`outcome`]): a stream either completes (one finish reason, `[DONE]` exactly once
//! and last) or ends with exactly one error event (and nothing after it); a failure
//! before the first content is a 502 in OpenAI's error shape. Never a cut stream that
//! looks complete, never a panic: the same gateway then serves a good stream.

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use aws_smithy_types::event_stream::{Header, HeaderValue, Message};

use crate::common::*;
use crate::sse_script::{loopback_upstream, write_raw};

/// The adapters under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum P {
    OpenAi,
    Anthropic,
    Gemini,
    Bedrock,
}

const ALL: [P; 4] = [P::OpenAi, P::Anthropic, P::Gemini, P::Bedrock];
const SSE: [P; 3] = [P::OpenAi, P::Anthropic, P::Gemini];

/// One ConverseStream frame of `:message-type` `event`.
fn frame(kind: &str, payload: &str) -> Vec<u8> {
    let m = Message::new(payload.as_bytes().to_vec())
        .add_header(Header::new(
            ":message-type",
            HeaderValue::String("event".into()),
        ))
        .add_header(Header::new(
            ":event-type",
            HeaderValue::String(kind.to_string().into()),
        ))
        .add_header(Header::new(
            ":content-type",
            HeaderValue::String("application/json".into()),
        ));
    let mut out = Vec::new();
    aws_smithy_eventstream::frame::write_message_to(&m, &mut out).unwrap();
    out
}

fn anthropic(kind: &str, data: &str) -> Vec<u8> {
    format!("event: {kind}\ndata: {data}\n\n").into_bytes()
}

impl P {
    /// The stream's content type.
    fn stream_type(self) -> &'static str {
        match self {
            P::Bedrock => "application/vnd.amazon.eventstream",
            _ => "text/event-stream",
        }
    }

    /// The events before the first content.
    fn start(self) -> Vec<u8> {
        match self {
            P::OpenAi => crate::sse_script::role_chunk().into_bytes(),
            P::Anthropic => {
                let mut v = anthropic(
                    "message_start",
                    r#"{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"x","stop_reason":null,"usage":{"input_tokens":5,"output_tokens":1}}}"#,
                );
                v.extend(anthropic(
                    "content_block_start",
                    r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
                ));
                v
            }
            P::Gemini => b"data: {\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"text\":\"\"}]},\"index\":0}],\"responseId\":\"r1\"}\n\n".to_vec(),
            P::Bedrock => frame("messageStart", r#"{"role":"assistant"}"#),
        }
    }

    /// One text delta.
    fn text(self, t: &str) -> Vec<u8> {
        let t = serde_json::to_string(t).unwrap();
        match self {
            P::OpenAi => format!("data: {{\"id\":\"up\",\"object\":\"chat.completion.chunk\",\"created\":7,\"model\":\"x\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":{t}}},\"finish_reason\":null}}]}}\n\n").into_bytes(),
            P::Anthropic => anthropic(
                "content_block_delta",
                &format!(r#"{{"type":"content_block_delta","index":0,"delta":{{"type":"text_delta","text":{t}}}}}"#),
            ),
            P::Gemini => format!("data: {{\"candidates\":[{{\"content\":{{\"role\":\"model\",\"parts\":[{{\"text\":{t}}}]}},\"index\":0}}],\"responseId\":\"r1\"}}\n\n").into_bytes(),
            P::Bedrock => frame(
                "contentBlockDelta",
                &format!(r#"{{"contentBlockIndex":0,"delta":{{"text":{t}}}}}"#),
            ),
        }
    }

    /// The events that finish the answer (`stop`).
    fn finish(self) -> Vec<u8> {
        match self {
            P::OpenAi => {
                let mut v = crate::sse_script::finish_chunk("stop").into_bytes();
                v.extend_from_slice(crate::sse_script::DONE.as_bytes());
                v
            }
            P::Anthropic => {
                let mut v = anthropic("content_block_stop", r#"{"type":"content_block_stop","index":0}"#);
                v.extend(anthropic(
                    "message_delta",
                    r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":3}}"#,
                ));
                v.extend(anthropic("message_stop", r#"{"type":"message_stop"}"#));
                v
            }
            P::Gemini => b"data: {\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"text\":\"\"}]},\"finishReason\":\"STOP\",\"index\":0}],\"usageMetadata\":{\"promptTokenCount\":5,\"candidatesTokenCount\":3,\"totalTokenCount\":8},\"responseId\":\"r1\"}\n\n".to_vec(),
            P::Bedrock => {
                let mut v = frame("contentBlockStop", r#"{"contentBlockIndex":0}"#);
                v.extend(frame("messageStop", r#"{"stopReason":"end_turn"}"#));
                v.extend(frame(
                    "metadata",
                    r#"{"usage":{"inputTokens":5,"outputTokens":3,"totalTokens":8},"metrics":{"latencyMs":1}}"#,
                ));
                v
            }
        }
    }

    /// An event whose JSON is cut off (framed correctly).
    fn bad_json(self) -> Vec<u8> {
        match self {
            P::OpenAi => {
                b"data: {\"id\":\"up\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"\n\n"
                    .to_vec()
            }
            P::Anthropic => anthropic(
                "content_block_delta",
                r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"x""#,
            ),
            P::Gemini => {
                b"data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"x\"\n\n".to_vec()
            }
            P::Bedrock => frame(
                "contentBlockDelta",
                r#"{"contentBlockIndex":0,"delta":{"text":"x""#,
            ),
        }
    }

    /// An event of a type the adapter does not know.
    fn unknown(self) -> Vec<u8> {
        match self {
            P::OpenAi => b"event: foo\ndata: {\"type\":\"foo\",\"x\":1}\n\n".to_vec(),
            P::Anthropic => anthropic("foo", r#"{"type":"foo","x":1}"#),
            P::Gemini => b"event: foo\ndata: {\"someFutureField\":{\"x\":1}}\n\n".to_vec(),
            P::Bedrock => frame("someFutureEvent", r#"{"x":1}"#),
        }
    }

    /// Keep-alives (none in Bedrock's event stream).
    fn keepalive(self) -> Vec<u8> {
        match self {
            P::OpenAi | P::Gemini => b": keep-alive\n\n:\n\n".to_vec(),
            P::Anthropic => {
                let mut v = anthropic("ping", r#"{"type": "ping"}"#);
                v.extend_from_slice(b": keep-alive\n\n");
                v
            }
            P::Bedrock => Vec::new(),
        }
    }

    /// A whole stream answering `text`.
    fn answer(self, text: &str) -> Vec<u8> {
        [self.start(), self.text(text), self.finish()].concat()
    }

    /// A whole non-stream answer saying `ok`.
    fn whole(self) -> &'static str {
        match self {
            P::OpenAi => COMPLETION,
            P::Anthropic => {
                r#"{"id":"msg_1","type":"message","role":"assistant","model":"x","content":[{"type":"text","text":"ok"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":5,"output_tokens":1}}"#
            }
            P::Gemini => {
                r#"{"candidates":[{"content":{"role":"model","parts":[{"text":"ok"}]},"finishReason":"STOP","index":0}],"usageMetadata":{"promptTokenCount":5,"candidatesTokenCount":1,"totalTokenCount":6},"responseId":"r1"}"#
            }
            P::Bedrock => {
                r#"{"output":{"message":{"role":"assistant","content":[{"text":"ok"}]}},"stopReason":"end_turn","usage":{"inputTokens":5,"outputTokens":1,"totalTokens":6},"metrics":{"latencyMs":1}}"#
            }
        }
    }
}

/// One scripted answer.
#[derive(Clone)]
enum Answer {
    /// 200 with the stream type, delimited by closing the connection, written in the
    /// given pieces with a pause after each (so the gateway reads them apart).
    Pieces(Vec<Vec<u8>>),
    /// `status`, content type, body, with a `content-length`.
    Whole(&'static str, &'static str, Vec<u8>),
    /// 200 with `content-length: declared` but only `body` sent, then closed.
    Short(&'static str, usize, Vec<u8>),
}

/// A gateway (the real binary) in front of an upstream speaking `p` that answers its
/// n-th request with `script[n]`, and then with a good stream saying `again` (the
/// check that the gateway still serves).
struct Rig {
    gw: Proc,
    p: P,
    _creds: tempfile::TempDir,
}

fn rig(p: P, script: Vec<Answer>) -> Rig {
    let kind = p.stream_type();
    let again = Answer::Pieces(vec![p.answer("again")]);
    let (up, _) = loopback_upstream(
        |_| (),
        move |n, _, s| {
            let a = script.get(n).unwrap_or(&again);
            answer(s, kind, a);
        },
    );
    let creds = tempfile::tempdir().unwrap();
    let gw = serve(&config(p, up, creds.path()));
    Rig {
        gw,
        p,
        _creds: creds,
    }
}

fn answer(s: &mut TcpStream, kind: &str, a: &Answer) {
    let _ = s.set_nodelay(true);
    match a {
        Answer::Pieces(pieces) => {
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\ncontent-type: {kind}\r\nconnection: close\r\n\r\n"
            );
            for p in pieces {
                let _ = s.write_all(p);
                let _ = s.flush();
                std::thread::sleep(Duration::from_millis(30));
            }
        }
        Answer::Whole(status, ctype, body) => write_raw(s, status, ctype, body, body.len()),
        Answer::Short(ctype, declared, body) => {
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\ncontent-type: {ctype}\r\ncontent-length: {declared}\r\nconnection: close\r\n\r\n"
            );
            let _ = s.write_all(body);
            let _ = s.flush();
        }
    }
}

fn config(p: P, up: SocketAddr, dir: &std::path::Path) -> String {
    let provider = match p {
        P::OpenAi => format!("{{ kind: openai-compatible, base_url: http://{up}/v1 }}"),
        P::Anthropic => format!("{{ kind: anthropic, base_url: http://{up} }}"),
        P::Gemini => format!("{{ kind: gemini, base_url: http://{up} }}"),
        P::Bedrock => {
            let file = dir.join("credentials");
            std::fs::write(
                &file,
                "[default]\naws_access_key_id = AKIDX\naws_secret_access_key = secret\n",
            )
            .unwrap();
            format!(
                "{{ kind: bedrock, base_url: http://{up}, region: us-east-1, credentials_file: {} }}",
                file.display()
            )
        }
    };
    format!("providers:\n  p: {provider}\nmodels:\n  m: {{ endpoints: [ {{ provider: p, model: x }} ] }}\n")
}

/// What the client got.
#[derive(Debug, PartialEq)]
enum Outcome {
    /// A complete stream: its text and finish reason.
    Complete(String, String),
    /// A stream that ended with one error event: the text before it, the error code.
    Failed(String, String),
    /// An HTTP error in OpenAI's shape: status and code.
    Refused(u16, String),
}

/// Reads the client's answer, checking the rule in the module doc.
fn outcome(r: &Reply) -> Outcome {
    let ctx = || {
        let t = r.text();
        if t.len() > 2000 {
            format!("{}...", t.chars().take(2000).collect::<String>())
        } else {
            t
        }
    };
    if r.status != 200 {
        let v = r.json();
        let e = &v["error"];
        assert!(
            e["message"].as_str().is_some_and(|m| !m.is_empty()),
            "{}",
            ctx()
        );
        assert!(e["type"].as_str().is_some(), "{}", ctx());
        return Outcome::Refused(r.status, e["code"].as_str().unwrap_or("").to_string());
    }
    let ct = r
        .headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    assert!(ct.starts_with("text/event-stream"), "{ct}: {}", ctx());
    let text = r.text();
    assert!(
        text.is_empty() || text.ends_with("\n\n"),
        "the stream ends on an event boundary: {}",
        ctx()
    );
    let blocks: Vec<&str> = text.split("\n\n").filter(|b| !b.is_empty()).collect();
    let mut out = String::new();
    let mut finishes = Vec::new();
    let mut error = None;
    let mut done = 0;
    let mut roles = 0;
    for (i, b) in blocks.iter().enumerate() {
        let data = b
            .strip_prefix("data: ")
            .unwrap_or_else(|| panic!("not a data event {b:?}: {}", ctx()));
        assert!(error.is_none(), "nothing after the error event: {}", ctx());
        if data == "[DONE]" {
            done += 1;
            assert_eq!(i, blocks.len() - 1, "[DONE] is last: {}", ctx());
            continue;
        }
        let v: serde_json::Value = serde_json::from_str(data)
            .unwrap_or_else(|e| panic!("event not JSON ({e}): {}", ctx()));
        if let Some(e) = v.get("error") {
            assert!(
                e["message"].as_str().is_some_and(|m| !m.is_empty()),
                "{}",
                ctx()
            );
            error = Some(e["code"].as_str().unwrap_or("").to_string());
            continue;
        }
        assert_eq!(v["object"], "chat.completion.chunk", "{}", ctx());
        assert_eq!(v["model"], "m", "{}", ctx());
        for c in v["choices"].as_array().into_iter().flatten() {
            if c["delta"].get("role").is_some() {
                roles += 1;
            }
            if let Some(t) = c["delta"]["content"].as_str() {
                out.push_str(t);
            }
            if let Some(f) = c["finish_reason"].as_str() {
                finishes.push(f.to_string());
            }
        }
    }
    assert!(roles <= 1, "one role chunk: {}", ctx());
    if let Some(code) = error {
        assert_eq!(done, 0, "no [DONE] after an error event: {}", ctx());
        assert!(
            finishes.is_empty(),
            "a failed stream has no finish: {}",
            ctx()
        );
        return Outcome::Failed(out, code);
    }
    assert_eq!(
        done,
        1,
        "a stream without an error event must end with [DONE]: {}",
        ctx()
    );
    assert_eq!(roles, 1, "one role chunk: {}", ctx());
    assert_eq!(finishes.len(), 1, "one finish reason: {}", ctx());
    Outcome::Complete(out, finishes.remove(0))
}

impl Rig {
    async fn ask(&self, stream: bool) -> Outcome {
        let r = post(&self.gw.url("/v1/chat/completions"), &chat("m", stream, "")).await;
        if stream || r.status != 200 {
            return outcome(&r);
        }
        let v = r.json();
        let c = &v["choices"][0];
        Outcome::Complete(
            c["message"]["content"].as_str().unwrap_or("").to_string(),
            c["finish_reason"].as_str().unwrap_or("").to_string(),
        )
    }

    /// The next request gets the good stream: the gateway survived.
    async fn still_serves(&self) {
        assert_eq!(
            self.ask(true).await,
            Outcome::Complete("again".into(), "stop".into()),
            "{:?}: the gateway serves the next request",
            self.p
        );
    }
}

/// Runs a streamed request against `p` answering with `pieces`, then the follow-up.
async fn stream_case(p: P, pieces: Vec<Vec<u8>>) -> Outcome {
    let rig = rig(p, vec![Answer::Pieces(pieces)]);
    let got = rig.ask(true).await;
    rig.still_serves().await;
    got
}

fn failed(text: &str, code: &str) -> Outcome {
    Outcome::Failed(text.into(), code.into())
}

fn complete(text: &str) -> Outcome {
    Outcome::Complete(text.into(), "stop".into())
}

#[tokio::test]
async fn malformed_json_mid_stream_ends_with_one_error_event_for_every_adapter() {
    for p in ALL {
        let got = stream_case(
            p,
            vec![
                p.start(),
                p.text("Hello"),
                p.bad_json(),
                p.text(" more"),
                p.finish(),
            ],
        )
        .await;
        assert_eq!(got, failed("Hello", "upstream_bad_response"), "{p:?}");
    }
}

#[tokio::test]
async fn malformed_json_before_any_content_is_a_502_in_openai_shape_for_every_adapter() {
    for p in ALL {
        let got = stream_case(p, vec![p.start(), p.bad_json(), p.answer("x")]).await;
        assert_eq!(
            got,
            Outcome::Refused(502, "upstream_bad_response".into()),
            "{p:?}"
        );
    }
}

#[tokio::test]
async fn unknown_event_types_are_skipped_for_every_adapter() {
    for p in ALL {
        let got = stream_case(
            p,
            vec![
                p.unknown(),
                p.start(),
                p.unknown(),
                p.text("Hel"),
                p.unknown(),
                p.text("lo"),
                p.finish(),
            ],
        )
        .await;
        assert_eq!(got, complete("Hello"), "{p:?}");
    }
}

#[tokio::test]
async fn keep_alive_comments_and_pings_are_skipped_for_every_sse_adapter() {
    for p in SSE {
        let got = stream_case(
            p,
            vec![
                p.keepalive(),
                p.start(),
                p.keepalive(),
                p.text("Hel"),
                p.keepalive(),
                p.text("lo"),
                p.keepalive(),
                p.finish(),
                p.keepalive(),
            ],
        )
        .await;
        assert_eq!(got, complete("Hello"), "{p:?}");
    }
}

/// The text of the split test: two- and four-byte UTF-8 characters.
const SPLIT_TEXT: &str = "héllo wörld 🎉";

/// Cut points in `body` (an SSE answer with CRLF line ends) at awkward places of
/// its text event, which starts at `at`.
fn sse_cuts(body: &[u8], at: usize) -> Vec<usize> {
    let find = |from: usize, pat: &[u8]| {
        from + body[from..]
            .windows(pat.len())
            .position(|w| w == pat)
            .unwrap_or_else(|| panic!("{pat:?} in {}", String::from_utf8_lossy(body)))
    };
    let data = find(at, b"data:");
    let crlf = find(data, b"\r\n");
    let blank = find(data, b"\r\n\r\n");
    let mut cuts = vec![
        data + 2,                        // inside `data:`
        data + 5,                        // between `data:` and its value
        find(data, "é".as_bytes()) + 1,  // inside a two-byte character
        find(data, "🎉".as_bytes()) + 1, // inside a four-byte character
        find(data, "🎉".as_bytes()) + 3,
        crlf + 1,  // between \r and \n
        blank + 2, // between the line end and the blank line
        blank + 3, // between the blank line's \r and \n
    ];
    cuts.sort_unstable();
    cuts.dedup();
    cuts
}

fn split_at(body: &[u8], cuts: &[usize]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut from = 0;
    for &c in cuts {
        out.push(body[from..c].to_vec());
        from = c;
    }
    out.push(body[from..].to_vec());
    out
}

#[tokio::test]
async fn an_event_split_at_every_awkward_boundary_arrives_whole_for_every_sse_adapter() {
    for p in SSE {
        let crlf = |v: Vec<u8>| {
            String::from_utf8(v)
                .unwrap()
                .replace('\n', "\r\n")
                .into_bytes()
        };
        let start = crlf(p.start());
        let at = start.len();
        let body = [start, crlf(p.text(SPLIT_TEXT)), crlf(p.finish())].concat();
        let cuts = sse_cuts(&body, at);
        assert!(cuts.len() >= 7, "{cuts:?}");
        let got = stream_case(p, split_at(&body, &cuts)).await;
        assert_eq!(got, complete(SPLIT_TEXT), "{p:?} cut at {cuts:?}");
    }
}

#[tokio::test]
async fn a_bedrock_frame_split_inside_its_prelude_headers_payload_and_crc_arrives_whole() {
    let p = P::Bedrock;
    let start = p.start();
    let text = p.text(SPLIT_TEXT);
    let at = start.len();
    let emoji = text.windows(4).position(|w| w == "🎉".as_bytes()).unwrap();
    let cuts = vec![
        at + 2,              // inside the total length
        at + 6,              // inside the headers length
        at + 10,             // inside the prelude CRC
        at + 12,             // between prelude and headers
        at + 15,             // inside the first header's name
        at + emoji + 2,      // inside a four-byte character of the payload
        at + text.len() - 2, // inside the message CRC
        at + text.len() + 1, // inside the next frame's length
    ];
    let body = [start, text, p.finish()].concat();
    let got = stream_case(p, split_at(&body, &cuts)).await;
    assert_eq!(got, complete(SPLIT_TEXT));
    // One byte per read, for the whole answer.
    let bytes: Vec<Vec<u8>> = p.answer("abc").iter().map(|b| vec![*b]).collect();
    let got = stream_case_fast(p, bytes).await;
    assert_eq!(got, complete("abc"));
}

/// As [`stream_case`], the answer written one flushed piece after another without a
/// pause.
async fn stream_case_fast(p: P, pieces: Vec<Vec<u8>>) -> Outcome {
    let body = pieces.concat();
    let kind = p.stream_type();
    let again = p.answer("again");
    let (up, _) = loopback_upstream(
        |_| (),
        move |n, _, s| {
            if n == 0 {
                write_raw(s, "200 OK", kind, &body, 1);
            } else {
                write_raw(s, "200 OK", kind, &again, again.len());
            }
        },
    );
    let creds = tempfile::tempdir().unwrap();
    let rig = Rig {
        gw: serve(&config(p, up, creds.path())),
        p,
        _creds: creds,
    };
    let got = rig.ask(true).await;
    rig.still_serves().await;
    got
}

#[tokio::test]
async fn a_byte_by_byte_stream_arrives_whole_for_every_adapter() {
    for p in ALL {
        let body = [p.start(), p.keepalive(), p.text(SPLIT_TEXT), p.finish()].concat();
        let bytes = body.iter().map(|b| vec![*b]).collect();
        assert_eq!(
            stream_case_fast(p, bytes).await,
            complete(SPLIT_TEXT),
            "{p:?}"
        );
    }
}

/// Bytes in one SSE line the gateway accepts (`src/sse.rs`, `MAX_EVENT_BYTES`).
const SSE_BOUND: usize = 16 * 1024 * 1024;

#[tokio::test]
async fn a_huge_line_without_a_newline_is_bounded_for_every_sse_adapter() {
    for p in SSE {
        // Past the bound: refused as soon as it is passed, with one error event.
        let mut huge = b"data: ".to_vec();
        huge.resize(SSE_BOUND + 4096, b'x');
        let got = stream_case(p, vec![p.start(), p.text("Hello"), huge, p.finish()]).await;
        assert_eq!(got, failed("Hello", "upstream_bad_response"), "{p:?}");
        // 8 MiB, within the bound, then the connection closes: the stream was cut.
        let mut big = b"data: ".to_vec();
        big.resize(8 * 1024 * 1024, b'x');
        let got = stream_case(p, vec![p.start(), p.text("Hello"), big]).await;
        assert_eq!(got, failed("Hello", "upstream_stream_cut"), "{p:?}");
    }
}

#[tokio::test]
async fn an_8_mib_text_event_within_the_bound_is_relayed_whole_for_every_adapter() {
    let big = "y".repeat(8 * 1024 * 1024);
    for p in ALL {
        let got = stream_case(p, vec![p.start(), p.text(&big), p.finish()]).await;
        match got {
            Outcome::Complete(t, f) => {
                assert_eq!((t.len(), f.as_str()), (big.len(), "stop"), "{p:?}");
                assert!(t == big, "{p:?}");
            }
            other => panic!("{p:?}: {other:?}"),
        }
    }
}

#[tokio::test]
async fn a_bedrock_frame_declaring_a_huge_length_is_bounded() {
    let p = P::Bedrock;
    // Past MAX_FRAME_BYTES (16 MiB): refused at its first four bytes.
    let mut huge = (17u32 * 1024 * 1024).to_be_bytes().to_vec();
    huge.extend_from_slice(&[0; 4096]);
    let got = stream_case(p, vec![p.start(), p.text("Hello"), huge, p.finish()]).await;
    assert_eq!(got, failed("Hello", "upstream_bad_response"));
    // 8 MiB declared, half sent, then the connection closes: cut.
    let mut big = (8u32 * 1024 * 1024).to_be_bytes().to_vec();
    big.resize(4 * 1024 * 1024, 0);
    let got = stream_case(p, vec![p.start(), p.text("Hello"), big]).await;
    assert_eq!(got, failed("Hello", "upstream_stream_cut"));
}

#[tokio::test]
async fn a_bedrock_frame_with_a_bad_crc_ends_the_stream_with_one_error_event() {
    let p = P::Bedrock;
    let good = p.text(" more");
    let n = good.len();
    // Prelude CRC, a payload byte (message CRC then mismatches), the message CRC.
    for at in [9, n - 10, n - 1] {
        let mut bad = good.clone();
        bad[at] ^= 0x5a;
        let got = stream_case(
            p,
            vec![
                p.start(),
                p.text("Hello"),
                bad.clone(),
                p.text("!"),
                p.finish(),
            ],
        )
        .await;
        assert_eq!(got, failed("Hello", "upstream_bad_response"), "byte {at}");
        let got = stream_case(p, vec![p.start(), bad, p.answer("x")]).await;
        assert_eq!(
            got,
            Outcome::Refused(502, "upstream_bad_response".into()),
            "byte {at}, before content"
        );
    }
}

#[tokio::test]
async fn the_upstream_closing_mid_event_ends_with_one_cut_error_for_every_adapter() {
    for p in ALL {
        let next = p.text(" more");
        for cut in [1, 9, next.len() / 2, next.len() - 3] {
            let got = stream_case(p, vec![p.start(), p.text("Hello"), next[..cut].to_vec()]).await;
            assert_eq!(
                got,
                failed("Hello", "upstream_stream_cut"),
                "{p:?} cut {cut}"
            );
        }
        // Cut inside the event's blank line: its JSON is whole, so its text is
        // relayed (SSE; a Bedrock frame without its last CRC byte is not whole),
        // and the stream still ends cut, without a finish.
        let whole_json = if p == P::Bedrock {
            "Hello"
        } else {
            "Hello more"
        };
        let got = stream_case(
            p,
            vec![p.start(), p.text("Hello"), next[..next.len() - 1].to_vec()],
        )
        .await;
        assert_eq!(got, failed(whole_json, "upstream_stream_cut"), "{p:?}");
        // Closed after the last content event, with no finish at all.
        let got = stream_case(p, vec![p.start(), p.text("Hello")]).await;
        assert_eq!(got, failed("Hello", "upstream_stream_cut"), "{p:?}");
    }
}

#[tokio::test]
async fn a_truncated_or_html_non_stream_answer_is_a_502_in_openai_shape_for_every_adapter() {
    const HTML: &[u8] =
        b"<html><head><title>502 Bad Gateway</title></head><body>nginx</body></html>";
    for p in ALL {
        let whole = p.whole().as_bytes();
        let cases = vec![
            Answer::Whole(
                "200 OK",
                "application/json",
                whole[..whole.len() / 2].to_vec(),
            ),
            Answer::Whole(
                "200 OK",
                "application/json",
                whole[..whole.len() - 1].to_vec(),
            ),
            Answer::Whole("200 OK", "text/html", HTML.to_vec()),
            Answer::Whole("200 OK", "application/json", Vec::new()),
            Answer::Short(
                "application/json",
                whole.len(),
                whole[..whole.len() / 2].to_vec(),
            ),
        ];
        for (i, case) in cases.into_iter().enumerate() {
            let rig = rig(p, vec![case]);
            let got = rig.ask(false).await;
            let Outcome::Refused(status, code) = got else {
                panic!("{p:?} case {i}: {got:?}");
            };
            assert_eq!(status, 502, "{p:?} case {i}");
            assert!(
                code == "upstream_bad_response" || code == "upstream_stream_cut",
                "{p:?} case {i}: {code}"
            );
            rig.still_serves().await;
        }
        // Whole JSON of the wrong shape: not an (empty) answer either.
        let wrong: &[u8] = match p {
            P::OpenAi => br#"{"id":"x","object":"chat.completion","model":"x"}"#,
            P::Anthropic => br#"{"id":"msg_1","type":"message","role":"assistant"}"#,
            P::Gemini => br#"{"candidates":[],"responseId":"r1"}"#,
            P::Bedrock => br#"{"output":{},"stopReason":"end_turn"}"#,
        };
        let wrong_rig = rig(
            p,
            vec![Answer::Whole("200 OK", "application/json", wrong.to_vec())],
        );
        assert_eq!(
            wrong_rig.ask(false).await,
            Outcome::Refused(502, "upstream_bad_response".into()),
            "{p:?}"
        );
        // The untouched answer passes: the cases above failed for their fault.
        let rig = rig(
            p,
            vec![Answer::Whole("200 OK", "application/json", whole.to_vec())],
        );
        assert_eq!(rig.ask(false).await, complete("ok"), "{p:?}");
    }
}

#[tokio::test]
async fn an_html_page_answering_a_stream_request_is_a_502_for_every_adapter() {
    for p in ALL {
        let page = b"<html><body><h1>Service Unavailable</h1>\n\n<p>try later</p></body></html>\n";
        let rig = rig(p, vec![Answer::Whole("200 OK", "text/html", page.to_vec())]);
        let got = rig.ask(true).await;
        assert_eq!(
            got,
            Outcome::Refused(502, "upstream_bad_response".into()),
            "{p:?}"
        );
        rig.still_serves().await;
    }
}

#[tokio::test]
async fn a_stream_type_written_in_capitals_is_still_a_stream() {
    // Media types are case-insensitive (RFC 9110, section 8.3.1): `Text/Event-Stream`
    // is relayed like `text/event-stream`, not refused as "not an event stream".
    let p = P::OpenAi;
    let body = [p.start(), p.text("Hi"), p.finish()].concat();
    let rig = rig(
        p,
        vec![Answer::Whole(
            "200 OK",
            "Text/Event-Stream; charset=UTF-8",
            body,
        )],
    );
    assert_eq!(rig.ask(true).await, complete("Hi"));
    rig.still_serves().await;
}

#[tokio::test]
async fn openai_done_without_a_finish_reason_still_carries_one() {
    let p = P::OpenAi;
    let got = stream_case(
        p,
        vec![
            p.start(),
            p.text("Hi"),
            crate::sse_script::DONE.as_bytes().to_vec(),
        ],
    )
    .await;
    assert_eq!(got, complete("Hi"));
}

#[tokio::test]
async fn an_anthropic_stream_without_message_stop() {
    let p = P::Anthropic;
    // The stop reason arrived, then the body ended: the answer is whole.
    let delta = anthropic(
        "message_delta",
        r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":3}}"#,
    );
    let got = stream_case(p, vec![p.start(), p.text("Hi"), delta]).await;
    assert_eq!(got, complete("Hi"));
    // No message_delta either: cut.
    let stop = anthropic(
        "content_block_stop",
        r#"{"type":"content_block_stop","index":0}"#,
    );
    let got = stream_case(p, vec![p.start(), p.text("Hi"), stop]).await;
    assert_eq!(got, failed("Hi", "upstream_stream_cut"));
    // message_stop without a message_delta: complete, finish `stop` supplied.
    let end = anthropic("message_stop", r#"{"type":"message_stop"}"#);
    let got = stream_case(p, vec![p.start(), p.text("Hi"), end]).await;
    assert_eq!(got, complete("Hi"));
}

#[tokio::test]
async fn an_error_after_the_finish_reason_ends_the_stream_as_complete() {
    // The answer was whole; a broken tail must not turn it into a failure, nor
    // leave it without [DONE].
    for p in ALL {
        let mut finish = p.finish();
        let tail = match p {
            P::OpenAi => finish.len() - crate::sse_script::DONE.len(),
            P::Anthropic => {
                let stop = anthropic("message_stop", r#"{"type":"message_stop"}"#);
                finish.len() - stop.len()
            }
            // Gemini's finish is one event; Bedrock's last frame is metadata.
            P::Gemini => finish.len(),
            P::Bedrock => {
                let m = frame(
                    "metadata",
                    r#"{"usage":{"inputTokens":5,"outputTokens":3,"totalTokens":8},"metrics":{"latencyMs":1}}"#,
                );
                finish.len() - m.len()
            }
        };
        finish.truncate(tail);
        let got = stream_case(p, vec![p.start(), p.text("Hi"), finish, p.bad_json()]).await;
        assert_eq!(got, complete("Hi"), "{p:?}");
    }
}

#[tokio::test]
async fn a_stream_that_is_only_its_stop_event_is_not_a_complete_empty_answer() {
    let cases = [
        (P::OpenAi, crate::sse_script::DONE.as_bytes().to_vec()),
        (
            P::Anthropic,
            anthropic("message_stop", r#"{"type":"message_stop"}"#),
        ),
        (P::Bedrock, {
            let mut v = frame("messageStop", r#"{"stopReason":"end_turn"}"#);
            v.extend(frame(
                "metadata",
                r#"{"usage":{"inputTokens":5,"outputTokens":0,"totalTokens":5}}"#,
            ));
            v
        }),
    ];
    for (p, only_the_end) in cases {
        let got = stream_case(p, vec![only_the_end]).await;
        assert_eq!(
            got,
            Outcome::Refused(502, "upstream_bad_response".into()),
            "{p:?}"
        );
    }
}

#[tokio::test]
async fn a_last_event_without_its_blank_line_still_counts_for_every_sse_adapter() {
    for p in SSE {
        let last = match p {
            P::OpenAi => crate::sse_script::finish_chunk("stop").into_bytes(),
            P::Anthropic => {
                let mut v = anthropic(
                    "content_block_stop",
                    r#"{"type":"content_block_stop","index":0}"#,
                );
                v.extend(anthropic(
                    "message_delta",
                    r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":3}}"#,
                ));
                v
            }
            _ => p.finish(),
        };
        for trim in [1, 2] {
            let mut last = last.clone();
            last.truncate(last.len() - trim);
            let got = stream_case(p, vec![p.start(), p.text("Hello"), last]).await;
            assert_eq!(got, complete("Hello"), "{p:?} without {trim} line ends");
        }
    }
}
