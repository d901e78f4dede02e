//! The access log's file sink and body logging (issue 16 part 2):
//! `telemetry.access_log.path` gets one JSON line per request whatever `--log` says,
//! `bodies: true` adds the request and response bodies cut to `max_body_bytes`, and
//! `serve --check` refuses a file it cannot open.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::*;

const MODELS: &str = "providers: { p: { kind: mock } }\nmodels: { m: { endpoints: [ { provider: p, model: x } ] } }\n";

/// The JSON lines of every file in `dir`, waiting (10 s at most) until `want`
/// lines are there: the file is written by a background thread.
fn file_lines(dir: &Path, want: usize) -> Vec<serde_json::Value> {
    let started = Instant::now();
    loop {
        let mut lines = Vec::new();
        if let Ok(entries) = std::fs::read_dir(dir) {
            for e in entries.flatten() {
                let text = std::fs::read_to_string(e.path()).unwrap_or_default();
                lines.extend(
                    text.lines()
                        .map(|l| serde_json::from_str::<serde_json::Value>(l).expect(l)),
                );
            }
        }
        if lines.len() >= want || started.elapsed() > Duration::from_secs(10) {
            return lines;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

async fn chat_id(gw: &Proc, id: &str, body: &str) -> Reply {
    let r = request_with(
        "POST",
        &gw.url("/v1/chat/completions"),
        &[("x-request-id", id)],
        body.to_string(),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    r
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_access_file_gets_one_json_line_per_request_whatever_the_log_filter() {
    let logs = tempfile::tempdir().unwrap();
    let dir = logs.path().join("access");
    // `serve` runs with `--log warn` (SWITCHYARD_LOG): stderr has no access line.
    let gw = serve(&format!(
        "{MODELS}telemetry: {{ access_log: {{ path: {}/requests.log, rotation: minutely }} }}\n",
        dir.display()
    ));
    chat_id(&gw, "file-whole-1", &chat("m", false, "")).await;
    let r = chat_id(&gw, "file-stream-1", &chat("m", true, "")).await;
    assert!(r.text().ends_with("data: [DONE]\n\n"), "{}", r.text());
    let lines = file_lines(&dir, 2);
    assert_eq!(lines.len(), 2, "{lines:#?}");
    // Found by id, not by place: the two requests may be served by different
    // per-core threads, whose lines reach the file in either order.
    for (id, stream) in [("file-whole-1", false), ("file-stream-1", true)] {
        let line = lines
            .iter()
            .find(|l| l["fields"]["request_id"] == id)
            .unwrap_or_else(|| panic!("no line for {id}: {lines:#?}"));
        assert_eq!(line["target"], "switchyard::access");
        let f = &line["fields"];
        assert_eq!(f["request_id"], id);
        assert_eq!(f["stream"], stream);
        assert_eq!(f["status"], 200);
        assert_eq!(f["outcome"], "ok");
        assert!(f.get("request_body").is_none(), "bodies are opt-in: {f}");
    }
    // Minutely rotation names the file with its period: requests.YYYY-MM-DD-HH-MM.log.
    let names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        names.iter().all(|n| {
            let date = n
                .strip_prefix("requests.")
                .and_then(|n| n.strip_suffix(".log"));
            date.is_some_and(|d| d.len() == 16 && d.bytes().filter(|&b| b == b'-').count() == 4)
        }),
        "{names:?}"
    );
    let stderr = gw.stderr.lock().unwrap().clone();
    assert!(!stderr.contains("file-whole-1"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_are_logged_only_when_opted_in_and_cut_to_max_body_bytes() {
    let logs = tempfile::tempdir().unwrap();
    let (gw, log) = serve_logged(&format!(
        "{MODELS}telemetry: {{ access_log: {{ path: {}/access.log, rotation: never, bodies: true, max_body_bytes: 48 }} }}\n",
        logs.path().display()
    ));
    // A request whose body is far longer than the bound, with a character of two
    // bytes across the cut.
    let long = format!(
        r#"{{"model":"m","max_tokens":4,"messages":[{{"role":"user","content":"{}é{}"}}]}}"#,
        "a".repeat(7),
        "b".repeat(300)
    );
    let whole = request_with(
        "POST",
        &gw.url("/v1/chat/completions"),
        &[("x-request-id", "bodies-whole-1")],
        long.clone(),
    )
    .await;
    assert_eq!(whole.status, 200, "{}", whole.text());
    let line = &log.wait_access("bodies-whole-1").await[0];
    let request = line["request_body"].as_str().unwrap();
    assert!(long.starts_with(request), "{request}");
    assert!(request.len() <= 48 && request.len() >= 46, "{request}");
    assert_eq!(line["request_body_bytes"], long.len());
    let response = line["response_body"].as_str().unwrap();
    assert!(whole.text().starts_with(response), "{response}");
    assert_eq!(line["response_body_bytes"], whole.body.len());
    assert!(line.get("response_text").is_none(), "{line}");

    let stream = request_with(
        "POST",
        &gw.url("/v1/chat/completions"),
        &[("x-request-id", "bodies-stream-1")],
        chat("m", true, r#","max_tokens":3"#),
    )
    .await;
    assert_eq!(stream.status, 200);
    let line = &log.wait_access("bodies-stream-1").await[0];
    let text: String = stream
        .events()
        .iter()
        .filter(|e| *e != "[DONE]")
        .filter_map(|e| {
            let v: serde_json::Value = serde_json::from_str(e).unwrap();
            v["choices"][0]["delta"]["content"]
                .as_str()
                .map(str::to_string)
        })
        .collect();
    assert!(!text.is_empty());
    assert_eq!(line["response_text"], text.as_str());
    assert_eq!(
        line["response_body_bytes"],
        stream.body.len(),
        "every byte sent, [DONE] included"
    );
    assert!(line["response_body"]
        .as_str()
        .unwrap()
        .starts_with("data: {"));
    // The file has the same lines, bodies included.
    let file = file_lines(logs.path(), 2);
    assert_eq!(file.len(), 2, "{file:#?}");
    assert_eq!(file[1]["fields"]["response_text"], text.as_str());
}

#[test]
fn serve_check_refuses_an_access_file_it_cannot_open() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("blocker"), "a file, not a directory").unwrap();
    let config = dir.path().join("switchyard.yaml");
    std::fs::write(
        &config,
        format!("{MODELS}telemetry: {{ access_log: {{ path: blocker/logs/access.log }} }}\n"),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .args(["serve", "--check", "--config", config.to_str().unwrap()])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("telemetry.access_log.path") && stderr.contains("blocker"),
        "{stderr}"
    );
}

/// Access lines are written after the answer (from a task of the per-core thread's
/// runtime): none is lost when the gateway stops right after its answers, nor for
/// streams the drain deadline cut, on every one of four per-core threads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_access_line_is_in_the_file_after_a_shutdown_right_after_the_answers() {
    let fast = mock(&[]);
    // 16 tokens at 4 tokens/s: about 4 s, far past a 300 ms drain.
    let slow = mock(&["--tokens-per-s", "4"]);
    let logs = tempfile::tempdir().unwrap();
    let mut gw = serve(&format!(
        "server: {{ drain_timeout_ms: 300, runtime: per_core, threads: 4 }}\n{}telemetry: {{ access_log: {{ path: {}/access.log, rotation: never }} }}\n",
        config(
            &[("fast", &fast), ("slow", &slow)],
            "",
            "  m:\n    endpoints:\n      - { provider: fast, model: x }\n  s:\n    endpoints:\n      - { provider: slow, model: x }\n",
        ),
        logs.path().display()
    ));
    // Each request on its own connection: the kernel spreads them over the threads.
    let send = |id: String, model: &'static str, stream: bool| {
        let url = gw.url("/v1/chat/completions");
        tokio::spawn(async move {
            let r = request_with(
                "POST",
                &url,
                &[("x-request-id", &id)],
                chat(model, stream, ""),
            )
            .await;
            (id, r)
        })
    };
    let streams: Vec<_> = (0..8)
        .map(|i| send(format!("cut-{i}"), "s", true))
        .collect();
    let whole: Vec<_> = (0..24)
        .map(|i| send(format!("whole-{i}"), "m", i % 2 == 0))
        .collect();
    for w in whole {
        let (id, r) = w.await.unwrap();
        assert_eq!(r.status, 200, "{id}: {}", r.text());
    }
    tokio::time::sleep(Duration::from_millis(400)).await;
    gw.terminate();
    for s in streams {
        let (id, r) = s.await.unwrap();
        let last: serde_json::Value = serde_json::from_str(r.events().last().unwrap()).unwrap();
        assert_eq!(
            last["error"]["code"],
            "gateway_shutdown",
            "{id}: {}",
            r.text()
        );
    }
    assert!(gw.exited().await.success(), "exits after the drain");
    // The process has exited: the file is complete.
    let lines = file_lines(logs.path(), 32);
    let mut outcomes: Vec<(String, String)> = lines
        .iter()
        .map(|l| {
            let f = &l["fields"];
            (
                f["request_id"].as_str().unwrap().to_string(),
                f["outcome"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    outcomes.sort();
    let mut want: Vec<(String, String)> = (0..8)
        .map(|i| (format!("cut-{i}"), "stream_error".to_string()))
        .chain((0..24).map(|i| (format!("whole-{i}"), "ok".to_string())))
        .collect();
    want.sort();
    assert_eq!(outcomes, want);
}
