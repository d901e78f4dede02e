//! Regression tests, each named after the bug it pins down (found by outside testing).

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::*;

fn pin(endpoint: &str) -> String {
    format!("route pin when request.model == \"m\" {{\n  default use endpoint \"{endpoint}\"\n}}\n")
}

const TWO_MOCKS: &str = "providers:\n  a: { kind: mock }\n  b: { kind: mock }\nmodels:\n  m: { endpoints: [ { provider: a, model: x }, { provider: b, model: x } ] }\n";

/// Sends requests until one is served by `endpoint` (10 s at most).
async fn wait_for_endpoint(url: &str, endpoint: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = post(url, &chat("m", false, r#","max_tokens":1"#)).await;
        assert_eq!(r.status, 200, "{}", r.text());
        if r.headers["x-switchyard-endpoint"] == endpoint {
            return;
        }
        assert!(Instant::now() < deadline, "never routed to {endpoint}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The watcher used to be armed after `serve` printed `listening`, so a save made as
/// soon as the line appeared (a deploy script, a test harness) was never seen.
#[tokio::test]
async fn a_policy_save_made_as_serve_prints_listening_is_not_lost() {
    let dir = tempfile::tempdir().unwrap();
    let policies = dir.path().join("policies");
    std::fs::create_dir(&policies).unwrap();
    std::fs::write(policies.join("pin.policy"), pin("a/x")).unwrap();
    let cfg = dir.path().join("switchyard.yaml");
    std::fs::write(&cfg, format!("policies: {{ dir: policies }}\n{TWO_MOCKS}")).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .args([
            "serve",
            "--config",
            cfg.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
        ])
        .env("SWITCHYARD_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start switchyard");
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    let addr = loop {
        line.clear();
        assert!(
            out.read_line(&mut line).unwrap() > 0,
            "exited before listening"
        );
        if let Some(rest) = line.trim().strip_prefix("switchyard listening on") {
            // Save at once, before anything else.
            std::fs::write(policies.join("pin.policy"), pin("b/x")).unwrap();
            break rest.trim().to_string();
        }
    };
    std::thread::spawn(move || {
        let mut sink = String::new();
        while out.read_line(&mut sink).map(|n| n > 0).unwrap_or(false) {
            sink.clear();
        }
    });
    let url = format!("http://{addr}/v1/chat/completions");
    wait_for_endpoint(&url, "b/x").await;
    let _ = child.kill();
    let _ = child.wait();
}

/// `/admin/policies` kept showing the last reload error after the broken file was
/// restored to the content that is serving (the reload was "unchanged", and only a
/// successful swap cleared the error).
#[tokio::test]
async fn admin_policies_clears_last_error_once_the_broken_file_is_restored() {
    let gw = serve_with_policies(TWO_MOCKS, &[("pin.policy", &pin("a/x"))]);
    let file = gw._dir.as_ref().unwrap().path().join("policies/pin.policy");
    let admin = || async { get(&gw.url("/admin/policies")).await.json() };
    std::fs::write(&file, "route pin when {").unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while admin().await["last_error"].is_null() {
        assert!(
            Instant::now() < deadline,
            "the broken save was not reported"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let unchanged = admin().await["reloads"]["unchanged"].as_u64().unwrap();
    std::fs::write(&file, pin("a/x")).unwrap();
    loop {
        let now = admin().await;
        if now["reloads"]["unchanged"].as_u64().unwrap() > unchanged {
            assert!(now["last_error"].is_null(), "{now}");
            break;
        }
        assert!(Instant::now() < deadline, "the restore was not seen: {now}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A 404 for an unknown model echoed the whole name: a 1 MB name made a 1 MB answer.
#[tokio::test]
async fn an_unknown_model_error_does_not_echo_a_huge_name() {
    let gw = serve(TWO_MOCKS);
    let name = "x".repeat(1024 * 1024);
    let r = post(&gw.url("/v1/chat/completions"), &chat(&name, false, "")).await;
    assert_eq!(r.status, 404, "{}", &r.text()[..200.min(r.text().len())]);
    assert!(r.body.len() < 2048, "answer of {} bytes", r.body.len());
    assert_eq!(r.json()["error"]["code"], "model_not_found");
    assert_eq!(r.json()["error"]["param"], "model");
}

/// `serve --check` passed a config that `serve` then refused (a provider kind with no
/// adapter): `--check` now sets up every provider as startup does.
#[test]
fn serve_check_refuses_what_serve_would_refuse() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.yaml");
    std::fs::write(
        &path,
        "providers:\n  aws: { kind: bedrock, base_url: https://bedrock-runtime.us-east-1.amazonaws.com }\nmodels:\n  m: { endpoints: [ { provider: aws, model: x } ] }\n",
    )
    .unwrap();
    let run = |check: bool| {
        let mut args = vec![
            "serve",
            "--config",
            path.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
        ];
        if check {
            args.insert(1, "--check");
        }
        Command::new(env!("CARGO_BIN_EXE_switchyard"))
            .args(&args)
            .env("SWITCHYARD_LOG", "warn")
            .output()
            .unwrap()
    };
    let checked = run(true);
    let served = run(false);
    assert_eq!(served.status.code(), Some(1), "serve refuses it");
    assert_eq!(checked.status.code(), Some(1), "and so does --check");
    let err = String::from_utf8_lossy(&checked.stderr);
    assert!(err.contains("providers.aws"), "{err}");
}
