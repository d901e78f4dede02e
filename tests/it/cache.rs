//! The response cache through the gateway (issue 14): hits without an upstream
//! request, both answer shapes from one entry, the request controls, what is never
//! cached or stored, the policy's `cache on` / `cache off`, and two instances
//! sharing Redis.

use std::io::Write;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::*;
use crate::sse_script::*;
use switchyard::auth::keys::hash_secret;

/// An OpenAI-compatible upstream answering `Hello world` (whole, or as a stream when
/// the request says `"stream":true`), counting the requests it got. `cut`: streams
/// stop after the first piece, without a finish reason.
fn upstream(cut: bool) -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let hits = Arc::new(AtomicUsize::new(0));
    let seen = hits.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { return };
            let seen = seen.clone();
            std::thread::spawn(move || {
                let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
                let body = read_body(&mut s);
                seen.fetch_add(1, Ordering::SeqCst);
                let req: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
                if req["stream"] == true {
                    let mut sse = role_chunk();
                    sse.push_str(&text_chunk("Hello"));
                    if !cut {
                        sse.push_str(&text_chunk(" world"));
                        sse.push_str(&finish_chunk("stop"));
                        sse.push_str("data: {\"id\":\"up\",\"object\":\"chat.completion.chunk\",\"created\":7,\"model\":\"x\",\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":2,\"total_tokens\":11}}\n\n");
                        sse.push_str(DONE);
                    }
                    let _ = write!(
                        s,
                        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n{sse}"
                    );
                } else {
                    let body = r#"{"id":"up","object":"chat.completion","created":7,"model":"x","choices":[{"index":0,"message":{"role":"assistant","content":"Hello world"},"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":2,"total_tokens":11}}"#;
                    let _ = write!(
                        s,
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                }
            });
        }
    });
    (addr, hits)
}

/// The body of one HTTP/1.1 request read from `s` (empty when it breaks off).
fn read_body(s: &mut std::net::TcpStream) -> Vec<u8> {
    use std::io::Read;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        let n = match s.read(&mut chunk) {
            Ok(n) if n > 0 => n,
            _ => return Vec::new(),
        };
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
        while buf.len() < end + 4 + len {
            match s.read(&mut chunk) {
                Ok(n) if n > 0 => buf.extend_from_slice(&chunk[..n]),
                _ => return Vec::new(),
            }
        }
        return buf[end + 4..end + 4 + len].to_vec();
    }
}

/// One provider `p` at `addr` serving logical model `m`, priced, with `cache`
/// (the `cache:` section's body).
fn config(addr: SocketAddr, cache: &str) -> String {
    format!(
        "providers:\n  p: {{ kind: openai-compatible, base_url: http://{addr}/v1, pricing: {{ input_per_mtok: 1.0, output_per_mtok: 2.0 }} }}\nmodels:\n  m: {{ endpoints: [ {{ provider: p, model: x }} ] }}\ncache: {{ {cache} }}\n"
    )
}

/// A temperature-0 chat body asking `prompt`.
fn ask(prompt: &str, stream: bool, extra: &str) -> String {
    format!(
        r#"{{"model":"m","stream":{stream},"temperature":0,"messages":[{{"role":"system","content":"be brief"}},{{"role":"user","content":"{prompt}"}}]{extra}}}"#
    )
}

/// Waits until `gw` has written `n` entries (stores run off the request path).
async fn stored(gw: &InProcess, n: u64) {
    let started = Instant::now();
    let cache = &gw.app.services().gateway.cache;
    while cache.stored() < n {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{} entries stored, expected {n}",
            cache.stored()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn send(gw: &InProcess, body: &str, headers: &[(&str, &str)]) -> Reply {
    let r = request_with(
        "POST",
        &gw.url("/v1/chat/completions"),
        headers,
        body.to_string(),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    r
}

fn cache_header(r: &Reply) -> &str {
    r.headers
        .get("x-switchyard-cache")
        .map_or("(none)", |v| v.to_str().unwrap())
}

#[tokio::test]
async fn a_second_identical_request_is_a_hit_and_the_upstream_sees_one() {
    let (addr, hits) = upstream(false);
    let gw = start_app(&config(addr, "enabled: true"), &[]).await;
    let first = send(&gw, &ask("what is a cache?", false, ""), &[]).await;
    assert_eq!(cache_header(&first), "miss");
    assert_eq!(first.headers["x-switchyard-endpoint"], "p/x");
    stored(&gw, 1).await;

    let second = send(&gw, &ask("what is a cache?", false, ""), &[]).await;
    assert_eq!(cache_header(&second), "hit");
    assert_eq!(second.headers["x-switchyard-endpoint"], "cache");
    assert!(!second.headers.contains_key("x-switchyard-attempts"));
    assert_eq!(
        hits.load(Ordering::SeqCst),
        1,
        "the hit reached no upstream"
    );
    let (a, b) = (first.json(), second.json());
    assert_eq!(a["choices"], b["choices"]);
    assert_eq!(a["usage"], b["usage"]);
    assert_ne!(a["id"], b["id"], "a hit has a fresh id");

    // Another prompt in the same scope is its own entry.
    let other = send(&gw, &ask("what is a queue?", false, ""), &[]).await;
    assert_eq!(cache_header(&other), "miss");
    assert_eq!(hits.load(Ordering::SeqCst), 2);

    let m = get(&gw.url("/metrics")).await.text();
    assert!(
        metric(&m, "switchyard_cache_hits_total", &[("kind", "exact")]) >= 1.0,
        "{m}"
    );
    assert!(
        metric(&m, "switchyard_cache_tokens_saved_total", &[]) >= 11.0,
        "{m}"
    );
    assert!(
        metric(&m, "switchyard_cache_usd_saved_total", &[("model", "m")]) > 0.0,
        "{m}"
    );
    assert!(
        metric(
            &m,
            "switchyard_requests_total",
            &[("endpoint", "cache"), ("model", "m")]
        ) >= 1.0,
        "{m}"
    );
}

#[tokio::test]
async fn a_stored_stream_answers_whole_and_a_stored_whole_answer_streams() {
    let (addr, hits) = upstream(false);
    let gw = start_app(&config(addr, "enabled: true, replay: compressed"), &[]).await;

    // Stream first, then the same request whole.
    let s = send(&gw, &ask("stream me", true, ""), &[]).await;
    assert_eq!(cache_header(&s), "miss");
    assert_eq!(clean_text(&s), "Hello world");
    stored(&gw, 1).await;
    let w = send(&gw, &ask("stream me", false, ""), &[]).await;
    assert_eq!(cache_header(&w), "hit");
    let body = w.json();
    assert_eq!(body["object"], "chat.completion");
    assert_eq!(body["choices"][0]["message"]["content"], "Hello world");
    assert_eq!(body["choices"][0]["finish_reason"], "stop");
    assert_eq!(body["usage"]["total_tokens"], 11);
    // And streamed again: the recorded chunks, no usage chunk unless asked.
    let again = send(&gw, &ask("stream me", true, ""), &[]).await;
    assert_eq!(cache_header(&again), "hit");
    assert_eq!(clean_text(&again), "Hello world");
    assert!(
        again.events().iter().all(|e| !e.contains("\"usage\"")),
        "{}",
        again.text()
    );
    assert_eq!(hits.load(Ordering::SeqCst), 1);

    // Whole first, then streamed with the usage chunk asked for.
    let w = send(&gw, &ask("whole me", false, ""), &[]).await;
    assert_eq!(cache_header(&w), "miss");
    stored(&gw, 2).await;
    let usage = r#","stream_options":{"include_usage":true}"#;
    let s = send(&gw, &ask("whole me", true, usage), &[]).await;
    assert_eq!(cache_header(&s), "hit");
    assert_eq!(s.headers["content-type"], "text/event-stream");
    assert_eq!(clean_text(&s), "Hello world");
    let events = s.events();
    let last_chunk: serde_json::Value = serde_json::from_str(&events[events.len() - 2]).unwrap();
    assert_eq!(last_chunk["usage"]["completion_tokens"], 2, "{}", s.text());
    assert_eq!(last_chunk["choices"], serde_json::json!([]));
    assert_eq!(hits.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn no_store_no_cache_and_cache_off_headers_are_obeyed() {
    let (addr, hits) = upstream(false);
    let gw = start_app(&config(addr, "enabled: true"), &[]).await;
    let body = ask("controls", false, "");
    let r = send(&gw, &body, &[("cache-control", "no-store")]).await;
    assert_eq!(cache_header(&r), "bypass");
    // no-store wrote nothing: this one misses (and stores).
    let r = send(&gw, &body, &[]).await;
    assert_eq!(cache_header(&r), "miss");
    stored(&gw, 1).await;
    assert_eq!(gw.app.services().gateway.cache.stored(), 1);
    // no-cache does not read (the upstream answers) but may store.
    let r = send(&gw, &body, &[("cache-control", "no-cache")]).await;
    assert_eq!(cache_header(&r), "bypass");
    stored(&gw, 2).await;
    let r = send(&gw, &body, &[("x-switchyard-cache", "off")]).await;
    assert_eq!(cache_header(&r), "bypass");
    assert_eq!(hits.load(Ordering::SeqCst), 4);
    let r = send(&gw, &body, &[]).await;
    assert_eq!(cache_header(&r), "hit");
    assert_eq!(hits.load(Ordering::SeqCst), 4);

    let bad = request_with(
        "POST",
        &gw.url("/v1/chat/completions"),
        &[("x-switchyard-cache", "sometimes")],
        body.clone(),
    )
    .await;
    assert_eq!(bad.status, 400);
    assert!(bad.text().contains("x-switchyard-cache"), "{}", bad.text());
}

#[tokio::test]
async fn temperature_above_zero_or_absent_is_not_cached_unless_stochastic() {
    let (addr, hits) = upstream(false);
    let gw = start_app(&config(addr, "enabled: true"), &[]).await;
    let warm = r#"{"model":"m","temperature":0.7,"messages":[{"role":"user","content":"t"}]}"#;
    let absent = r#"{"model":"m","messages":[{"role":"user","content":"t"}]}"#;
    for body in [warm, warm, absent, absent] {
        let r = send(&gw, body, &[]).await;
        assert_eq!(cache_header(&r), "bypass");
    }
    assert_eq!(hits.load(Ordering::SeqCst), 4);
    assert_eq!(gw.app.services().gateway.cache.stored(), 0);

    let (addr, hits) = upstream(false);
    let gw = start_app(&config(addr, "enabled: true, stochastic: true"), &[]).await;
    assert_eq!(cache_header(&send(&gw, warm, &[]).await), "miss");
    stored(&gw, 1).await;
    assert_eq!(cache_header(&send(&gw, warm, &[]).await), "hit");
    assert_eq!(hits.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_stream_cut_midway_is_not_stored() {
    let (addr, hits) = upstream(true);
    let gw = start_app(&config(addr, "enabled: true"), &[]).await;
    let body = ask("cut me", true, "");
    let r = send(&gw, &body, &[]).await;
    assert!(
        r.events().iter().any(|e| e.contains("\"error\"")),
        "{}",
        r.text()
    );
    let r = send(&gw, &body, &[]).await;
    assert_eq!(cache_header(&r), "miss");
    assert_eq!(hits.load(Ordering::SeqCst), 2);
    assert_eq!(gw.app.services().gateway.cache.stored(), 0);
}

const POLICY: &str = r#"
route cached when request.model == "m" {
  cache on ttl 10m
  rule fresh when has(header("x-fresh")) {
    cache off
    use model
  }
  default use model
}

test "answers are cached" {
  request { model = "m" }
  expect cache on
}

test "fresh answers are not" {
  request { model = "m", header("x-fresh") = "1" }
  expect cache off
}
"#;

#[tokio::test]
async fn a_policy_turns_caching_on_for_a_route_and_off_for_a_rule() {
    let (addr, hits) = upstream(false);
    // `enabled: false`: only the policy turns caching on.
    let gw = start_app(&config(addr, "enabled: false"), &[("c.policy", POLICY)]).await;
    let body = ask("policy", false, "");
    assert_eq!(cache_header(&send(&gw, &body, &[]).await), "miss");
    stored(&gw, 1).await;
    let r = send(&gw, &body, &[("x-fresh", "1")]).await;
    assert_eq!(cache_header(&r), "bypass");
    assert_eq!(r.headers["x-switchyard-rule"], "fresh");
    assert_eq!(hits.load(Ordering::SeqCst), 2);
    let r = send(&gw, &body, &[]).await;
    assert_eq!(cache_header(&r), "hit");
    assert_eq!(r.headers["x-switchyard-route"], "cached");
    assert_eq!(hits.load(Ordering::SeqCst), 2);

    // Without a policy and with caching disabled there is no cache header at all.
    let (addr, _) = upstream(false);
    let plain = start_app(&config(addr, "enabled: false"), &[]).await;
    let r = send(&plain, &body, &[]).await;
    assert_eq!(cache_header(&r), "(none)");
}

#[test]
fn a_policy_test_expecting_cache_on_passes() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("c.policy"), POLICY).unwrap();
    let cfg = dir.path().join("switchyard.yaml");
    std::fs::write(
        &cfg,
        "providers: { p: { kind: mock } }\nmodels: { m: { endpoints: [ { provider: p, model: x } ] } }\ncache: { ttl: 5m }\n",
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .arg("test")
        .arg(dir.path().join("c.policy"))
        .arg("--config")
        .arg(&cfg)
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    // And a wrong expectation fails.
    std::fs::write(
        dir.path().join("c.policy"),
        POLICY.replace("expect cache off", "expect cache on"),
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .arg("test")
        .arg(dir.path().join("c.policy"))
        .arg("--config")
        .arg(&cfg)
        .output()
        .unwrap();
    assert!(!out.status.success());
}

#[tokio::test]
async fn a_synonym_is_a_semantic_hit_with_its_distance_and_a_negation_misses() {
    let (addr, hits) = upstream(false);
    let gw = start_app(&config(addr, "enabled: true"), &[]).await;
    let r = send(&gw, &ask("Explain how ocean tides work.", false, ""), &[]).await;
    assert_eq!(cache_header(&r), "miss");
    stored(&gw, 1).await;
    let r = send(&gw, &ask("Describe how ocean tides work?", false, ""), &[]).await;
    assert_eq!(cache_header(&r), "hit");
    assert_eq!(r.headers["x-switchyard-cache-distance"], "0");
    let r = send(
        &gw,
        &ask("Explain how ocean tides do not work.", false, ""),
        &[],
    )
    .await;
    assert_eq!(cache_header(&r), "miss");
    assert_eq!(hits.load(Ordering::SeqCst), 2);

    // `mode: exact`: only the identical text hits.
    let (addr, hits) = upstream(false);
    let gw = start_app(&config(addr, "enabled: true, mode: exact"), &[]).await;
    send(&gw, &ask("Explain how ocean tides work.", false, ""), &[]).await;
    stored(&gw, 1).await;
    let r = send(&gw, &ask("Describe how ocean tides work?", false, ""), &[]).await;
    assert_eq!(cache_header(&r), "miss");
    let r = send(&gw, &ask("Explain how ocean tides work.", false, ""), &[]).await;
    assert_eq!(cache_header(&r), "hit");
    assert!(!r.headers.contains_key("x-switchyard-cache-distance"));
    assert_eq!(hits.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn two_instances_sharing_redis_share_a_hit_in_either_shape() {
    let redis = start_redis();
    let (addr, hits) = upstream(false);
    let cache = format!(
        "enabled: true, redis: 'redis://127.0.0.1:{}', redis_timeout_ms: 2000",
        redis.port
    );
    let a = start_app(&config(addr, &cache), &[]).await;
    let b = start_app(&config(addr, &cache), &[]).await;
    let body = ask("shared between instances", true, "");
    let r = send(&a, &body, &[]).await;
    assert_eq!(cache_header(&r), "miss");
    stored(&a, 1).await;
    // The other instance has nothing in memory: the hit comes from Redis, whole.
    let r = send(&b, &ask("shared between instances", false, ""), &[]).await;
    assert_eq!(cache_header(&r), "hit", "{}", r.text());
    assert_eq!(r.json()["choices"][0]["message"]["content"], "Hello world");
    assert_eq!(hits.load(Ordering::SeqCst), 1);
    let m = get(&b.url("/metrics")).await.text();
    assert!(
        metric(&m, "switchyard_cache_hits_total", &[("tier", "l2")]) >= 1.0,
        "{m}"
    );

    // Redis gone: lookups and stores degrade to misses, requests still succeed.
    drop(redis);
    let r = send(&b, &ask("after redis died", false, ""), &[]).await;
    assert_eq!(cache_header(&r), "miss");
    assert_eq!(hits.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_tool_result_turn_is_cached_exactly_by_its_whole_conversation() {
    let (addr, hits) = upstream(false);
    let gw = start_app(&config(addr, "enabled: true"), &[]).await;
    let turn = |result: &str| {
        format!(
            r#"{{"model":"m","temperature":0,"messages":[{{"role":"user","content":"weather?"}},{{"role":"assistant","content":null,"tool_calls":[{{"id":"c1","type":"function","function":{{"name":"weather","arguments":"{{}}"}}}}]}},{{"role":"tool","tool_call_id":"c1","content":"{result}"}}],"tools":[{{"type":"function","function":{{"name":"weather","parameters":{{"type":"object"}}}}}}]}}"#
        )
    };
    assert_eq!(cache_header(&send(&gw, &turn("sunny"), &[]).await), "miss");
    stored(&gw, 1).await;
    assert_eq!(cache_header(&send(&gw, &turn("sunny"), &[]).await), "hit");
    // Another tool result is another conversation, even one differing only in case.
    assert_eq!(cache_header(&send(&gw, &turn("Sunny"), &[]).await), "miss");
    assert_eq!(hits.load(Ordering::SeqCst), 2);
}

/// Regression (review of the cache phase): entries were shared by every caller, so a
/// `hit` told one organization what another had asked. By default (`share: org`)
/// callers of one organization share, others never do; `share: all` shares.
#[tokio::test]
async fn callers_of_another_organization_never_get_a_hit_from_this_ones_entry() {
    let (addr, hits) = upstream(false);
    let keys = format!(
        "auth:\n  mode: keys\n  keys:\n    - {{ id: a1, hash: '{}', org: org-a }}\n    - {{ id: a2, hash: '{}', org: org-a }}\n    - {{ id: b1, hash: '{}', org: org-b }}\n",
        hash_secret("sy-a1"),
        hash_secret("sy-a2"),
        hash_secret("sy-b1"),
    );
    let gw = start_app(&format!("{keys}{}", config(addr, "enabled: true")), &[]).await;
    let body = ask("who won the match?", false, "");
    let a1 = send(&gw, &body, &[("authorization", "Bearer sy-a1")]).await;
    assert_eq!(cache_header(&a1), "miss");
    stored(&gw, 1).await;
    let b1 = send(&gw, &body, &[("authorization", "Bearer sy-b1")]).await;
    assert_eq!(cache_header(&b1), "miss", "another organization misses");
    let a2 = send(&gw, &body, &[("authorization", "Bearer sy-a2")]).await;
    assert_eq!(cache_header(&a2), "hit", "the same organization shares");
    assert_eq!(hits.load(Ordering::SeqCst), 2);

    let (addr, hits) = upstream(false);
    let gw = start_app(
        &format!("{keys}{}", config(addr, "enabled: true, share: all")),
        &[],
    )
    .await;
    send(&gw, &body, &[("authorization", "Bearer sy-a1")]).await;
    stored(&gw, 1).await;
    let b1 = send(&gw, &body, &[("authorization", "Bearer sy-b1")]).await;
    assert_eq!(
        cache_header(&b1),
        "hit",
        "share: all shares across organizations"
    );
    assert_eq!(hits.load(Ordering::SeqCst), 1);
}

/// Regression (audit, 2026-12-05): the scope named logical models only, so once `m`
/// was pointed at another upstream model (a restart with a new config, or another
/// instance on the same Redis), the old upstream model's answers were served for it.
#[tokio::test]
async fn an_instance_whose_model_maps_to_another_upstream_model_misses_the_old_answer() {
    let redis = start_redis();
    let (addr, hits) = upstream(false);
    let cache = format!(
        "enabled: true, redis: 'redis://127.0.0.1:{}', redis_timeout_ms: 2000",
        redis.port
    );
    let old = start_app(&config(addr, &cache), &[]).await;
    let body = ask("which model are you?", false, "");
    assert_eq!(cache_header(&send(&old, &body, &[]).await), "miss");
    stored(&old, 1).await;
    let same = start_app(&config(addr, &cache), &[]).await;
    assert_eq!(cache_header(&send(&same, &body, &[]).await), "hit");
    let moved = config(addr, &cache).replace("model: x", "model: y");
    let new = start_app(&moved, &[]).await;
    assert_eq!(cache_header(&send(&new, &body, &[]).await), "miss");
    assert_eq!(hits.load(Ordering::SeqCst), 2);
}

/// Regression (audit, 2026-12-05): an answer a failover got from an endpoint with
/// another upstream model was stored under the first endpoint's scope, and served as
/// that model's answer once it was back.
#[tokio::test]
async fn an_answer_from_a_failover_to_another_upstream_model_is_not_stored() {
    let (addr, hits) = upstream(false);
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let cfg = format!(
        "providers:\n  down: {{ kind: openai-compatible, base_url: http://{dead}/v1 }}\n  p: {{ kind: openai-compatible, base_url: http://{addr}/v1 }}\nmodels:\n  m: {{ endpoints: [ {{ provider: down, model: x, priority: 1 }}, {{ provider: p, model: y, priority: 2 }} ] }}\ncache: {{ enabled: true }}\n"
    );
    let chain = r#"
route r when request.model == "m" {
  default use endpoint "down/x"
  fallback endpoint "p/y"
}
"#;
    let gw = start_app(&cfg, &[("r.policy", chain)]).await;
    let body = ask("which model answered?", false, "");
    let r = send(&gw, &body, &[]).await;
    assert_eq!(cache_header(&r), "miss");
    assert_eq!(
        r.headers["x-switchyard-endpoint"], "p/y",
        "the failover answered"
    );
    assert_eq!(r.headers["x-switchyard-attempts"], "2");
    // A stream falls back the same way (before its first byte): not stored either.
    let r = send(&gw, &ask("which model streamed?", true, ""), &[]).await;
    assert_eq!(r.headers["x-switchyard-endpoint"], "p/y");
    assert!(r.text().ends_with("data: [DONE]\n\n"), "{}", r.text());
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(gw.app.services().gateway.cache.stored(), 0);
    assert_eq!(hits.load(Ordering::SeqCst), 2);
}

/// Found by attack (t_store.py): a stream that reached `[DONE]` without a finish
/// reason was stored, with the `stop` the gateway wrote for its client, and served
/// again as a complete answer. Only a provider's finish reason makes a stream
/// storable.
#[tokio::test]
async fn a_stream_ending_without_a_finish_reason_is_not_stored() {
    let no_finish = format!("{}{}{DONE}", role_chunk(), text_chunk("Hello"));
    let (addr, seen) = sse_upstream(vec![no_finish]);
    let gw = start_app(&config(addr, "enabled: true"), &[]).await;
    let body = ask("no finish reason", true, "");
    let r = send(&gw, &body, &[]).await;
    assert_eq!(cache_header(&r), "miss");
    assert!(
        r.text().contains("\"finish_reason\":\"stop\""),
        "the client still reads a finished answer: {}",
        r.text()
    );
    assert!(r.text().ends_with("data: [DONE]\n\n"), "{}", r.text());
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(gw.app.services().gateway.cache.stored(), 0);
    let r = send(&gw, &body, &[]).await;
    assert_eq!(cache_header(&r), "miss");
    assert_eq!(seen.lock().unwrap().len(), 2);
}

/// An OpenAI-compatible upstream that reports no usage (llama-cpp-python style):
/// `Hello world`, whole or streamed as the request asks.
fn upstream_without_usage() -> (SocketAddr, Arc<std::sync::Mutex<Vec<serde_json::Value>>>) {
    loopback_upstream(
        |r| serde_json::from_slice(&r.body).unwrap_or_default(),
        |_, r, s| {
            let req: serde_json::Value = serde_json::from_slice(&r.body).unwrap_or_default();
            if req["stream"] == true {
                let sse = format!(
                    "{}{}{}{}{DONE}",
                    role_chunk(),
                    text_chunk("Hello"),
                    text_chunk(" world"),
                    finish_chunk("stop")
                );
                write_raw(s, "200 OK", "text/event-stream", sse.as_bytes(), 1 << 16);
            } else {
                let body = r#"{"id":"up","object":"chat.completion","created":7,"model":"x","choices":[{"index":0,"message":{"role":"assistant","content":"Hello world"},"finish_reason":"stop"}]}"#;
                write_raw(s, "200 OK", "application/json", body.as_bytes(), 1 << 16);
            }
        },
    )
}

/// The `usage` of the usage chunk (`choices: []`) of streamed reply `r`.
fn usage_chunk(r: &Reply) -> serde_json::Value {
    r.events()
        .iter()
        .filter_map(|e| serde_json::from_str::<serde_json::Value>(e).ok())
        .find(|c| c["choices"] == serde_json::json!([]))
        .map(|c| c["usage"].clone())
        .unwrap_or_default()
}

/// Found by attack (t_misc2.py): with an upstream that reports no usage, a live
/// stream's usage chunk has the gateway's estimate, but its replay from the cache
/// said zero tokens, and so did a stored whole answer replayed as a stream. A hit
/// replays the usage the first client got (the estimate is stored).
#[tokio::test]
async fn a_replay_reports_the_usage_the_first_client_got_when_the_provider_sent_none() {
    let (addr, seen) = upstream_without_usage();
    let gw = start_app(&config(addr, "enabled: true, replay: none"), &[]).await;
    let usage = r#","stream_options":{"include_usage":true}"#;
    let body = ask("estimate my usage please", true, usage);
    let live = send(&gw, &body, &[]).await;
    assert_eq!(cache_header(&live), "miss");
    let want = usage_chunk(&live);
    assert!(
        want["prompt_tokens"].as_u64().unwrap() > 0,
        "{}",
        live.text()
    );
    stored(&gw, 1).await;
    let hit = send(&gw, &body, &[]).await;
    assert_eq!(cache_header(&hit), "hit");
    assert_eq!(usage_chunk(&hit), want, "{}", hit.text());

    // A whole answer without usage, replayed as a stream: the estimate, not zeros.
    let whole = send(&gw, &ask("a whole answer", false, ""), &[]).await;
    assert_eq!(cache_header(&whole), "miss");
    assert!(whole.json().get("usage").is_none(), "{}", whole.text());
    stored(&gw, 2).await;
    let hit = send(&gw, &ask("a whole answer", true, usage), &[]).await;
    assert_eq!(cache_header(&hit), "hit");
    let u = usage_chunk(&hit);
    let (p, c) = (
        u["prompt_tokens"].as_u64().unwrap(),
        u["completion_tokens"].as_u64().unwrap(),
    );
    assert!(p > 0 && c > 0, "{}", hit.text());
    assert_eq!(u["total_tokens"].as_u64(), Some(p + c));
    // The whole answer replayed whole is the stored body, still without usage.
    let again = send(&gw, &ask("a whole answer", false, ""), &[]).await;
    assert_eq!(cache_header(&again), "hit");
    assert!(again.json().get("usage").is_none(), "{}", again.text());
    assert_eq!(seen.lock().unwrap().len(), 2);
}

/// Found by attack (t_scope.py): with `forward_headers: [x-test-*]`, two requests
/// differing only in `x-test-variant` (sent to the provider, so possibly another
/// answer) shared one entry. The forwarded headers are in the scope; the request's
/// ids and trace context are not.
#[tokio::test]
async fn forwarded_headers_split_the_cache() {
    let (addr, hits) = upstream(false);
    let cfg =
        config(addr, "enabled: true").replace("pricing:", "forward_headers: [x-test-*], pricing:");
    let gw = start_app(&cfg, &[]).await;
    let body = ask("which variant?", false, "");
    let r = send(&gw, &body, &[("x-test-variant", "1")]).await;
    assert_eq!(cache_header(&r), "miss");
    stored(&gw, 1).await;
    let r = send(&gw, &body, &[("x-test-variant", "2")]).await;
    assert_eq!(cache_header(&r), "miss", "another forwarded value");
    let r = send(&gw, &body, &[]).await;
    assert_eq!(cache_header(&r), "miss", "no forwarded header");
    let r = send(
        &gw,
        &body,
        &[
            ("x-test-variant", "1"),
            ("x-request-id", "7d2f1c4e-4b1a-4f7e-9a57-0c3d2b1a9e88"),
            (
                "traceparent",
                "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            ),
            ("x-other", "not forwarded"),
        ],
    )
    .await;
    assert_eq!(
        cache_header(&r),
        "hit",
        "ids, trace context and unlisted headers"
    );
    assert_eq!(hits.load(Ordering::SeqCst), 3);
}
