//! The buffer budget of request bodies (`server.max_buffered_bytes`, issue 17): bodies
//! beyond it get 503 `overloaded` with `Retry-After`, and every way a request ends
//! (answered, or its client gone mid-body) gives its bytes back.

use tokio::io::AsyncWriteExt;

use crate::common::*;

/// A valid chat body of about `n` bytes.
fn body_of(n: usize) -> String {
    chat("m", false, &format!(r#","user":"{}""#, "x".repeat(n)))
}

/// `switchyard_buffered_body_bytes` as `/metrics` reports it now.
async fn buffered(gw: &Proc) -> f64 {
    metric(
        &get(&gw.url("/metrics")).await.text(),
        "switchyard_buffered_body_bytes",
        &[],
    )
}

/// Polls until the gateway reports `pred` of its buffered bytes (bounded tries, no
/// timing assertion: the condition either comes true or the test fails naming it).
async fn until(gw: &Proc, what: &str, pred: impl Fn(f64) -> bool) {
    for _ in 0..500 {
        if pred(buffered(gw).await) {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("buffered bytes never {what}: {}", buffered(gw).await);
}

#[tokio::test]
async fn bodies_beyond_the_buffer_budget_get_503_and_every_end_releases_its_charge() {
    let m = mock(&[]);
    let gw = serve(&format!(
        "server: {{ max_body_bytes: 100000, max_buffered_bytes: 150000 }}\n{}",
        config(
            &[("up", &m)],
            "",
            "  m:\n    endpoints:\n      - { provider: up, model: x }\n"
        )
    ));
    let url = gw.url("/v1/chat/completions");
    let big = body_of(90_000);
    // A client that sends all but the end of a large body and stalls: its bytes stay
    // charged while it is connected.
    let mut stalled = tokio::net::TcpStream::connect(gw.addr).await.unwrap();
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        big.len()
    );
    stalled.write_all(head.as_bytes()).await.unwrap();
    stalled
        .write_all(&big.as_bytes()[..big.len() - 10])
        .await
        .unwrap();
    until(&gw, "charged the stalled body", |b| b >= 80_000.0).await;

    // A second large body does not fit next to it: 503 in OpenAI's shape.
    let r = post(&url, &big).await;
    assert_eq!(r.status, 503, "{}", r.text());
    let v = r.json();
    assert_eq!(v["error"]["code"], "overloaded", "{v}");
    assert_eq!(v["error"]["type"], "api_error", "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("server.max_buffered_bytes"),
        "{v}"
    );
    assert!(r.headers.contains_key("retry-after"), "{:?}", r.headers);
    // The refused request gave back what it had read.
    until(&gw, "back to the stalled body alone", |b| b < 100_000.0).await;

    // The stalled client goes away mid-body: its charge is released.
    drop(stalled);
    until(&gw, "released the disconnected body", |b| b == 0.0).await;

    // Now large bodies fit again, one after the other, each releasing its bytes when
    // its answer is done.
    for _ in 0..3 {
        let r = post(&url, &big).await;
        assert_eq!(r.status, 200, "{}", r.text());
    }
    until(&gw, "released the answered bodies", |b| b == 0.0).await;
}

#[test]
fn a_budget_smaller_than_the_largest_body_is_a_config_error() {
    let yaml = "server: { max_body_bytes: 2048, max_buffered_bytes: 1024 }\nproviders: { up: { kind: mock } }\nmodels: { m: { endpoints: [ { provider: up, model: x } ] } }\n";
    let e = switchyard::config::parse_str(yaml, None)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("server.max_buffered_bytes") && e.contains("max_body_bytes"),
        "{e}"
    );
}
