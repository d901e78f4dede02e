//! The status page (issue 16 part 5): `GET /ui` and the admin views it reads,
//! `/admin/traffic` (requests per endpoint in time buckets) and `/admin/decisions`
//! (the last routing decisions), on gateways started in process.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::*;
use switchyard::auth::keys::hash_secret;

/// `a/x` answers; `bad/z` always answers 500.
fn config(bad: std::net::SocketAddr) -> String {
    format!(
        "providers:\n  a: {{ kind: mock }}\n  b: {{ kind: mock }}\n  bad: {{ kind: openai-compatible, base_url: 'http://{bad}/v1' }}\n\
         models:\n  m: {{ endpoints: [ {{ provider: a, model: x }} ] }}\n  n: {{ endpoints: [ {{ provider: a, model: x }}, {{ provider: b, model: y }} ] }}\n  broken: {{ endpoints: [ {{ provider: bad, model: z }} ] }}\n"
    )
}

const SPREAD: &str = "route spread_n when request.model == \"n\" {\n  rule sampled when true {\n    use \"n\" via exp3\n  }\n  default use model\n}\n";

/// `GET path` on `gw` with `headers`, as JSON, asserting 200.
async fn admin_json(url: &str, headers: &[(&str, &str)]) -> Value {
    let r = request_with("GET", url, headers, "").await;
    assert_eq!(r.status, 200, "{url}: {}", r.text());
    r.json()
}

/// Polls `/admin/traffic` until `done` holds of it: the access line (and with it the
/// traffic count) is written when the response body ends, which may be just after
/// the client has read it.
async fn traffic_when(gw: &InProcess, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let t = admin_json(&gw.url("/admin/traffic"), &[]).await;
        if done(&t) || Instant::now() > deadline {
            return t;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn endpoint<'a>(t: &'a Value, id: &str) -> &'a Value {
    t["endpoints"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["id"] == id)
        .unwrap_or_else(|| panic!("no endpoint {id} in {t}"))
}

fn sum(v: &Value) -> u64 {
    v.as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_u64().unwrap())
        .sum()
}

#[tokio::test]
async fn traffic_counts_each_request_on_the_endpoint_it_ended_on() {
    let (bad, _) = scripted_upstream(500, r#"{"error":{"message":"boom"}}"#);
    let gw = start_app(&config(bad), &[]).await;
    let empty = admin_json(&gw.url("/admin/traffic"), &[]).await;
    assert_eq!(empty["bucket_secs"], 10);
    assert_eq!(empty["buckets"], 30);
    let ids: Vec<&str> = empty["endpoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        ["a/x", "a/x#2", "b/y", "bad/z"],
        "registry order: {empty}"
    );
    for e in empty["endpoints"].as_array().unwrap() {
        assert_eq!(e["requests"].as_array().unwrap().len(), 30);
        assert_eq!(e["errors"].as_array().unwrap().len(), 30);
        assert_eq!(e["total"], 0);
    }

    for n in 0..7 {
        let r = post(&gw.url("/v1/chat/completions"), &chat("m", n % 2 == 0, "")).await;
        assert_eq!(r.status, 200, "{}", r.text());
    }
    for _ in 0..3 {
        let r = post(&gw.url("/v1/chat/completions"), &chat("broken", false, "")).await;
        assert!(r.status >= 500, "{}", r.text());
    }
    // Refused before any endpoint: counted nowhere.
    let r = post(&gw.url("/v1/chat/completions"), "{not json").await;
    assert_eq!(r.status, 400);

    let t = traffic_when(&gw, |t| {
        t["endpoints"][0]["total"] == 7 && t["endpoints"][3]["total"] == 3
    })
    .await;
    let m = &t["endpoints"][0];
    assert_eq!((&m["id"], &m["model"]), (&"a/x".into(), &"m".into()), "{t}");
    assert_eq!(m["total"], 7, "{t}");
    assert_eq!(sum(&m["requests"]), 7, "{t}");
    assert_eq!(sum(&m["errors"]), 0, "{t}");
    let b = endpoint(&t, "bad/z");
    assert_eq!((sum(&b["requests"]), sum(&b["errors"])), (3, 3), "{t}");
    // Model n's endpoints (a/x#2, b/y) got nothing.
    assert_eq!(t["endpoints"][1]["total"], 0, "{t}");
    assert_eq!(t["endpoints"][2]["total"], 0, "{t}");
    assert!(t["current_bucket_elapsed_ms"].as_u64().unwrap() < 10_000);
}

#[tokio::test]
async fn decisions_list_route_rule_strategy_and_endpoint_newest_first() {
    let (bad, _) = scripted_upstream(500, r#"{"error":{"message":"boom"}}"#);
    let gw = start_app(&config(bad), &[("spread.policy", SPREAD)]).await;
    let d = admin_json(&gw.url("/admin/decisions"), &[]).await;
    assert_eq!(d["capacity"], 50);
    assert_eq!(d["decisions"], serde_json::json!([]));

    let mut ids = Vec::new();
    for _ in 0..4 {
        let r = post(&gw.url("/v1/chat/completions"), &chat("n", false, "")).await;
        assert_eq!(r.status, 200, "{}", r.text());
        ids.push(r.headers["x-request-id"].to_str().unwrap().to_string());
    }
    let r = post(&gw.url("/v1/chat/completions"), &chat("broken", false, "")).await;
    let broken_status = r.status;
    ids.push(r.headers["x-request-id"].to_str().unwrap().to_string());

    let deadline = Instant::now() + Duration::from_secs(10);
    let d = loop {
        let d = admin_json(&gw.url("/admin/decisions"), &[]).await;
        if d["decisions"].as_array().unwrap().len() >= 5 || Instant::now() > deadline {
            break d;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let list = d["decisions"].as_array().unwrap();
    let got: Vec<&str> = list
        .iter()
        .map(|x| x["request_id"].as_str().unwrap())
        .collect();
    let want: Vec<&str> = ids.iter().rev().map(String::as_str).collect();
    assert_eq!(got, want, "newest first: {d}");

    let last = &list[0];
    assert_eq!(last["model"], "broken");
    assert_eq!(last["endpoint"], "bad/z");
    assert_eq!(last["served"], false);
    assert_eq!(last["status"], broken_status);
    assert_eq!(last["outcome"], "error");
    assert_eq!(last["route"], "", "no route names model broken: {last}");

    let version = gw.app.services().reloader.current().version.clone();
    for x in &list[1..] {
        assert_eq!(x["model"], "n");
        assert_eq!(x["route"], "spread_n", "{x}");
        assert_eq!(x["rule"], "sampled", "{x}");
        assert_eq!(x["strategy"], "exp3", "{x}");
        assert!(x["endpoint"] == "a/x#2" || x["endpoint"] == "b/y", "{x}");
        assert_eq!(x["served"], true);
        assert_eq!(x["attempts"], 1);
        assert_eq!((&x["status"], &x["outcome"]), (&200.into(), &"ok".into()));
        assert_eq!(x["policy"], version.as_str());
        assert!(x["latency_ms"].as_f64().unwrap() >= 0.0);
        assert!(x["at_unix_ms"].as_u64().unwrap() > 1_600_000_000_000);
    }
    let seqs: Vec<u64> = list.iter().map(|x| x["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, [5, 4, 3, 2, 1]);
}

#[tokio::test]
async fn the_new_views_need_the_admin_key_and_the_page_holds_no_data() {
    let (bad, _) = scripted_upstream(500, "{}");
    let cfg = format!(
        "admin:\n  keys: [ '{}' ]\n{}",
        hash_secret("admin-secret"),
        config(bad)
    );
    let gw = start_app(&cfg, &[]).await;
    assert_eq!(
        post(&gw.url("/v1/chat/completions"), &chat("m", false, ""))
            .await
            .status,
        200
    );
    for path in ["/admin/traffic", "/admin/decisions"] {
        for headers in [&[][..], &[("authorization", "Bearer wrong")][..]] {
            let r = request_with("GET", &gw.url(path), headers, "").await;
            assert_eq!(r.status, 401, "{path} {headers:?}: {}", r.text());
            assert!(!r.text().contains("a/x"), "{}", r.text());
        }
        let ok = admin_json(&gw.url(path), &[("authorization", "Bearer admin-secret")]).await;
        assert!(ok.is_object());
    }
    // The page is the same static shell with or without a key: nothing of the
    // gateway's state is in it; it fetches that from /admin/* with the key.
    let page = request_with("GET", &gw.url("/ui"), &[], "").await;
    assert_eq!(page.status, 200);
    assert_eq!(page.headers["content-type"], "text/html; charset=utf-8");
    let csp = page.headers["content-security-policy"].to_str().unwrap();
    assert!(csp.contains("default-src 'none'") && csp.contains("connect-src 'self'"));
    assert_eq!(page.text(), switchyard::admin::ui::PAGE);
    assert!(!page.text().contains("a/x"));
    for path in [
        "/admin/endpoints",
        "/admin/traffic",
        "/admin/decisions",
        "/admin/policies",
    ] {
        assert!(page.text().contains(path), "the page reads {path}");
    }
    let r = request("POST", &gw.url("/ui"), "").await;
    assert_eq!(r.status, 405);
}

#[tokio::test]
async fn with_an_admin_listener_the_page_is_served_there_only() {
    let (bad, _) = scripted_upstream(500, "{}");
    let cfg = format!(
        "admin:\n  keys: [ '{}' ]\n  listen: 127.0.0.1:0\n{}",
        hash_secret("admin-secret"),
        config(bad)
    );
    let gw = start_app(&cfg, &[]).await;
    let admin = gw.app.admin_addr().expect("an admin listener");
    assert_eq!(get(&gw.url("/ui")).await.status, 404);
    assert_eq!(get(&format!("http://{admin}/ui")).await.status, 200);
    let r = request_with(
        "GET",
        &format!("http://{admin}/admin/traffic"),
        &[("authorization", "Bearer admin-secret")],
        "",
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
}
