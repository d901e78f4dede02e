//! Translates one recorded provider answer a given number of times, for instruction
//! counts under `valgrind --tool=callgrind` (repeatable on a loaded machine, unlike
//! wall time). Run it twice with different counts and divide the difference of the
//! totals by the difference of the counts: setup cancels out.
//!
//! `cargo run --release --example translate_cost -- CASE N`, CASE one of
//! `anthropic`, `gemini`, `bedrock`: the adapter's whole-answer translation
//! (`Adapter::response`) of the recorded text answer in
//! `tests/fixtures/provider-wire/` (Anthropic Messages, Gemini `generateContent`,
//! Bedrock Converse) into an OpenAI chat completion; or `anthropic-stream`,
//! `gemini-stream`, `bedrock-stream`: the recorded text stream of the same provider
//! (`*.chunks.txt`, framed as the provider sends it: SSE with Anthropic's `event:`
//! lines, SSE, AWS event stream) read and translated whole by a fresh transcoder
//! (`Adapter::stream`), into OpenAI chunks, the usage chunk and `[DONE]`. The stream
//! cases print the number of upstream events per stream, to divide by.
//!
//! ```sh
//! for n in 100 1100; do valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.$n \
//!   target/release/examples/translate_cost anthropic $n; done
//! ```

use std::hint::black_box;

use aws_smithy_types::event_stream::{Header, HeaderValue, Message};
use bytes::BytesMut;
use switchyard::providers::anthropic::Anthropic;
use switchyard::providers::bedrock::{AwsKeys, Bedrock};
use switchyard::providers::gemini::Gemini;
use switchyard::providers::{Adapter, StreamContext, StreamStep};
use switchyard::sse::SseParser;

/// The gateway binary's allocator (mimalloc; `switchyard::alloc`), so that the
/// allocations of a translation cost what they cost in the gateway.
#[global_allocator]
static ALLOC: switchyard::alloc::Allocator = switchyard::alloc::Allocator;

const ANTHROPIC: &[u8] =
    include_bytes!("../tests/fixtures/provider-wire/anthropic/anthropic-text.json");
const GEMINI: &[u8] = include_bytes!("../tests/fixtures/provider-wire/gemini/google-text.json");
const BEDROCK: &[u8] =
    include_bytes!("../tests/fixtures/provider-wire/bedrock/amazon-bedrock-text.json");
const ANTHROPIC_STREAM: &str =
    include_str!("../tests/fixtures/provider-wire/anthropic/anthropic-text.chunks.txt");
const GEMINI_STREAM: &str =
    include_str!("../tests/fixtures/provider-wire/gemini/google-text.chunks.txt");
const BEDROCK_STREAM: &str =
    include_str!("../tests/fixtures/provider-wire/bedrock/amazon-bedrock-text.chunks.txt");

fn main() {
    let mut args = std::env::args().skip(1);
    let case = args.next().unwrap_or_default();
    let n: usize = args.next().and_then(|n| n.parse().ok()).unwrap_or(1);
    let bedrock = Bedrock::with_keys(
        "us-east-1",
        AwsKeys {
            access_key_id: "AKIDEXAMPLE".into(),
            secret_access_key: "secret".into(),
            session_token: None,
        },
    );
    let stream = match case.as_str() {
        "anthropic-stream" => Some((&Anthropic as &dyn Adapter, sse(ANTHROPIC_STREAM, true))),
        "gemini-stream" => Some((&Gemini as &dyn Adapter, sse(GEMINI_STREAM, false))),
        "bedrock-stream" => Some((&bedrock as &dyn Adapter, event_stream(BEDROCK_STREAM))),
        _ => None,
    };
    if let Some((adapter, (bytes, events))) = stream {
        println!("{case}: {events} upstream events per stream");
        for _ in 0..n {
            let out = translate_stream(adapter, black_box(&bytes));
            assert!(out.ends_with(b"data: [DONE]\n\n"), "{case}: {out:?}");
            let _ = black_box(out);
        }
        return;
    }
    let (adapter, body): (&dyn Adapter, &[u8]) = match case.as_str() {
        "anthropic" => (&Anthropic, ANTHROPIC),
        "gemini" => (&Gemini, GEMINI),
        "bedrock" => (&bedrock, BEDROCK),
        other => {
            eprintln!(
                "unknown case `{other}`: anthropic, gemini, bedrock, anthropic-stream, \
                 gemini-stream or bedrock-stream"
            );
            std::process::exit(2);
        }
    };
    for _ in 0..n {
        let out = adapter.response(black_box(body), black_box("m"));
        assert!(out.is_ok(), "{case}: {:?}", out.err());
        let _ = black_box(out);
    }
}

/// Reads and translates one whole stream as the relay does: SSE parsed from the
/// body (or, for Bedrock, the raw bytes handed over), each event to the transcoder.
/// The client asked for usage and the stream is tracked for a failover, as with a
/// fallback chain.
fn translate_stream(adapter: &dyn Adapter, body: &[u8]) -> BytesMut {
    let mut t = adapter.stream(StreamContext {
        logical_model: "m".into(),
        include_usage: true,
        prompt_tokens_estimate: 7,
        track: true,
        resume: None,
    });
    let mut out = BytesMut::with_capacity(4096);
    if let Some(step) = t.raw(body, &mut out) {
        assert!(step.is_ok(), "{:?}", step.err());
    } else {
        let mut parser = SseParser::new();
        parser.push(body).unwrap();
        while let Some(ev) = parser.next_ref() {
            match t.event(ev, &mut out) {
                Ok(StreamStep::Continue) => {}
                Ok(StreamStep::Done) => return out,
                Err(e) => panic!("{e:?}"),
            }
        }
    }
    t.end(&mut out).unwrap();
    out
}

/// The recorded payloads (one JSON object per line) as an SSE body, with Anthropic's
/// `event: <type>` line before each when `named`; and the number of events.
fn sse(lines: &str, named: bool) -> (Vec<u8>, usize) {
    let mut out = String::new();
    let mut events = 0;
    for line in lines.lines().filter(|l| !l.trim().is_empty()) {
        if named {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            out.push_str(&format!("event: {}\n", v["type"].as_str().unwrap()));
        }
        out.push_str(&format!("data: {line}\n\n"));
        events += 1;
    }
    (out.into_bytes(), events)
}

/// The recorded Bedrock events (one `{"<eventType>": payload}` object per line) as
/// the AWS event stream Bedrock's ConverseStream sends; and the number of events.
fn event_stream(lines: &str) -> (Vec<u8>, usize) {
    let mut out = Vec::new();
    let mut events = 0;
    for line in lines.lines().filter(|l| !l.trim().is_empty()) {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let (kind, payload) = v.as_object().unwrap().iter().next().unwrap();
        let header = |name: &'static str, value: &str| {
            Header::new(name, HeaderValue::String(value.to_string().into()))
        };
        let m = Message::new(payload.to_string().into_bytes())
            .add_header(header(":message-type", "event"))
            .add_header(header(":event-type", kind))
            .add_header(header(":content-type", "application/json"));
        aws_smithy_eventstream::frame::write_message_to(&m, &mut out).unwrap();
        events += 1;
    }
    (out, events)
}
