//! A long ranking (8 or more candidates, no fallback chain) leaves its fallbacks
//! unordered until the first endpoint fails (issue 17): the route phase's provider
//! and context checks, dispatch's move to a larger window and a stream's
//! continuation still follow the eager plan order (weighted round-robin's first
//! pick orders by weight, highest first).

use crate::common::*;
use crate::sse_script::*;
use switchyard::auth::keys::hash_secret;

const WRR: &str = r#"
route r when request.model == "m" {
  default use model via weighted_round_robin
}
"#;

/// Model `m` over `eps` `(provider, model, weight, extra endpoint yaml)`, listed
/// out of weight order on purpose by the callers.
fn config(head: &str, providers: &str, eps: &[(&str, &str, u32, &str)]) -> String {
    let list: Vec<String> = eps
        .iter()
        .map(|(p, x, w, extra)| format!("{{ provider: {p}, model: {x}, weight: {w}{extra} }}"))
        .collect();
    format!(
        "{head}server: {{ max_attempts: 16 }}\nproviders:\n{providers}models:\n  m: {{ endpoints: [ {} ] }}\n",
        list.join(", ")
    )
}

/// An `auth:` block with key `sy-k`, which may use the providers `allowed`.
fn key_allowing(allowed: &str) -> String {
    format!(
        "auth:\n  mode: keys\n  keys:\n    - {{ id: k, hash: '{}', providers: [{allowed}] }}\n",
        hash_secret("sy-k")
    )
}

/// A chat request to model `m` with key `sy-k`.
async fn post_as_key(gw: &InProcess) -> Reply {
    request_with(
        "POST",
        &gw.url("/v1/chat/completions"),
        &[("authorization", "Bearer sy-k")],
        chat("m", false, ""),
    )
    .await
}

fn long_prompt_chat() -> String {
    let words = "lorem ipsum ".repeat(50);
    format!(r#"{{"model":"m","messages":[{{"role":"user","content":"{words}"}}]}}"#)
}

#[tokio::test]
async fn a_key_restricted_away_from_the_pick_of_a_long_ranking_fails_over_in_plan_order() {
    let head = key_allowing("a, g");
    let providers = "  a: { kind: mock, mock: { fail_rate: 1.0, fail_status: 500 } }\n  g: { kind: mock }\n  b: { kind: mock }\n";
    let eps = [
        ("a", "e3", 3, ""),
        ("g", "g5", 5, ""),
        ("a", "e9", 9, ""),
        ("b", "b12", 12, ""),
        ("g", "g1", 1, ""),
        ("a", "e11", 11, ""),
        ("b", "b10", 10, ""),
        ("a", "e7", 7, ""),
        ("g", "g8", 8, ""),
        ("a", "e2", 2, ""),
    ];
    let gw = start_app(&config(&head, providers, &eps), &[("r.policy", WRR)]).await;
    let r = post_as_key(&gw).await;
    // b12 and b10 are not the key's: e11, e9, then g8.
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.headers["x-switchyard-endpoint"], "g/g8");
    assert_eq!(r.headers["x-switchyard-attempts"], "3");
    // A key of none of the plan's providers: 403, as with the eager plan.
    let head = key_allowing("z");
    let gw = start_app(&config(&head, providers, &eps), &[("r.policy", WRR)]).await;
    let r = post_as_key(&gw).await;
    assert_eq!(r.status, 403, "{}", r.text());
    assert_eq!(r.json()["error"]["code"], "provider_not_allowed");
}

#[tokio::test]
async fn a_long_ranking_whose_pick_cannot_take_the_request_fails_over_in_plan_order() {
    let providers =
        "  a: { kind: mock, mock: { fail_rate: 1.0, fail_status: 500 } }\n  g: { kind: mock }\n";
    let eps = [
        ("g", "g3", 3, ""),
        ("g", "g9", 9, ", context_window: 20"),
        ("a", "e11", 11, ""),
        ("g", "g12", 12, ", context_window: 20"),
        ("g", "g1", 1, ""),
        ("a", "e10", 10, ""),
        ("g", "g5", 5, ""),
        ("g", "g8", 8, ""),
        ("g", "g2", 2, ""),
    ];
    let gw = start_app(&config("", providers, &eps), &[("r.policy", WRR)]).await;
    let r = post(&gw.url("/v1/chat/completions"), &long_prompt_chat()).await;
    // g12 and g9 are too small: e11, e10, then g8.
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.headers["x-switchyard-endpoint"], "g/g8");
    assert_eq!(r.headers["x-switchyard-attempts"], "3");
    // Every endpoint too small: the 400, as with the eager plan.
    let small: Vec<_> = eps
        .iter()
        .map(|&(p, x, w, _)| (p, x, w, ", context_window: 20"))
        .collect();
    let gw = start_app(&config("", providers, &small), &[("r.policy", WRR)]).await;
    let r = post(&gw.url("/v1/chat/completions"), &long_prompt_chat()).await;
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(r.json()["error"]["code"], "context_length_exceeded");
}

#[tokio::test]
async fn a_context_error_at_the_pick_of_a_long_ranking_moves_to_the_next_larger_window_in_plan_order(
) {
    // s's upstream has a 50-token window the registry does not declare.
    let providers = "  s: { kind: mock, mock: { context_window: 50 } }\n  g: { kind: mock }\n";
    let big = ", context_window: 128000";
    let eps = [
        ("g", "g3", 3, big),
        ("g", "g9", 9, big),
        ("g", "g11", 11, ""),
        ("s", "s12", 12, ""),
        ("g", "g1", 1, big),
        ("g", "g10", 10, big),
        ("g", "g5", 5, big),
        ("g", "g8", 8, ""),
    ];
    let gw = start_app(&config("", providers, &eps), &[("r.policy", WRR)]).await;
    let r = post(&gw.url("/v1/chat/completions"), &long_prompt_chat()).await;
    // g11's window is unknown: g10 is the next larger one in plan order.
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.headers["x-switchyard-endpoint"], "g/g10");
    assert_eq!(r.headers["x-switchyard-attempts"], "2");
}

#[tokio::test]
async fn a_stream_cut_mid_answer_at_the_pick_of_a_long_ranking_continues_in_plan_order() {
    let providers = "  c: { kind: mock, mock: { cut_after_chunks: 6 } }\n  a: { kind: mock, mock: { fail_rate: 1.0, fail_status: 500 } }\n  g: { kind: mock }\n";
    let eps = [
        ("g", "g3", 3, ""),
        ("a", "e9", 9, ""),
        ("a", "e11", 11, ""),
        ("c", "c12", 12, ""),
        ("g", "g1", 1, ""),
        ("g", "g10", 10, ""),
        ("g", "g5", 5, ""),
        ("g", "g8", 8, ""),
    ];
    let gw = start_app(&config("", providers, &eps), &[("r.policy", WRR)]).await;
    let r = post(&gw.url("/v1/chat/completions"), &chat("m", true, "")).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.headers["x-switchyard-endpoint"], "c/c12");
    assert_eq!(clean_text(&r), uninterrupted("{}").await);
    let text = r.text();
    assert!(!text.contains("\"error\""), "{text}");
    assert!(text.contains("[DONE]"), "{text}");
}
