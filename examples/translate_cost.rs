//! Translates one recorded provider answer a given number of times, for instruction
//! counts under `valgrind --tool=callgrind` (repeatable on a loaded machine, unlike
//! wall time). Run it twice with different counts and divide the difference of the
//! totals by the difference of the counts: setup cancels out.
//!
//! `cargo run --release --example translate_cost -- CASE N`, CASE one of
//! `anthropic`, `gemini`, `bedrock`: the adapter's whole-answer translation
//! (`Adapter::response`) of the recorded text answer in
//! `tests/fixtures/provider-wire/` (Anthropic Messages, Gemini `generateContent`,
//! Bedrock Converse) into an OpenAI chat completion.
//!
//! ```sh
//! for n in 100 1100; do valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.$n \
//!   target/release/examples/translate_cost anthropic $n; done
//! ```

use std::hint::black_box;

use switchyard::providers::anthropic::Anthropic;
use switchyard::providers::bedrock::{AwsKeys, Bedrock};
use switchyard::providers::gemini::Gemini;
use switchyard::providers::Adapter;

/// The gateway binary's allocator (mimalloc; `switchyard::alloc`), so that the
/// allocations of a translation cost what they cost in the gateway.
#[global_allocator]
static ALLOC: switchyard::alloc::Allocator = switchyard::alloc::Allocator;

const ANTHROPIC: &[u8] =
    include_bytes!("../tests/fixtures/provider-wire/anthropic/anthropic-text.json");
const GEMINI: &[u8] = include_bytes!("../tests/fixtures/provider-wire/gemini/google-text.json");
const BEDROCK: &[u8] =
    include_bytes!("../tests/fixtures/provider-wire/bedrock/amazon-bedrock-text.json");

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
    let (adapter, body): (&dyn Adapter, &[u8]) = match case.as_str() {
        "anthropic" => (&Anthropic, ANTHROPIC),
        "gemini" => (&Gemini, GEMINI),
        "bedrock" => (&bedrock, BEDROCK),
        other => {
            eprintln!("unknown case `{other}`: anthropic, gemini or bedrock");
            std::process::exit(2);
        }
    };
    for _ in 0..n {
        let out = adapter.response(black_box(body), black_box("m"));
        assert!(out.is_ok(), "{case}: {:?}", out.err());
        let _ = black_box(out);
    }
}
