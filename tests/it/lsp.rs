//! `switchyard lsp` driven over JSON-RPC on stdio, as an editor drives it: initialize,
//! diagnostics as a buffer changes (the same code and range as `switchyard lint`),
//! hover, definition, completion, formatting, protocol errors, shutdown and exit.
//! Every read has a deadline.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::{json, Value};

const DEADLINE: Duration = Duration::from_secs(30);

struct Lsp {
    child: Child,
    stdin: ChildStdin,
    rx: mpsc::Receiver<Value>,
    next_id: i64,
    /// Notifications read while waiting for something else.
    seen: Vec<Value>,
}

impl Drop for Lsp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Lsp {
    fn start(cwd: &std::path::Path) -> Lsp {
        let mut child = Command::new(env!("CARGO_BIN_EXE_switchyard"))
            .arg("lsp")
            .current_dir(cwd)
            .env("SWITCHYARD_LOG", "warn")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start switchyard lsp");
        let stdin = child.stdin.take().unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || loop {
            let mut len = None;
            loop {
                let mut line = String::new();
                if out.read_line(&mut line).unwrap_or(0) == 0 {
                    return;
                }
                let line = line.trim_end();
                if line.is_empty() {
                    break;
                }
                if let Some(v) = line.strip_prefix("Content-Length: ") {
                    len = v.parse::<usize>().ok();
                }
            }
            let mut body = vec![0; len.expect("Content-Length")];
            if out.read_exact(&mut body).is_err() {
                return;
            }
            let v: Value = serde_json::from_slice(&body).expect("the server writes JSON");
            assert_eq!(v["jsonrpc"], "2.0", "{v}");
            if tx.send(v).is_err() {
                return;
            }
        });
        Lsp {
            child,
            stdin,
            rx,
            next_id: 1,
            seen: Vec::new(),
        }
    }

    fn raw(&mut self, body: &str) {
        write!(self.stdin, "Content-Length: {}\r\n\r\n{body}", body.len()).unwrap();
        self.stdin.flush().unwrap();
    }

    fn notify(&mut self, method: &str, params: Value) {
        let m = json!({ "jsonrpc": "2.0", "method": method, "params": params });
        self.raw(&m.to_string());
    }

    /// Sends a request and returns its whole response (result or error).
    fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        let m = json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params });
        self.raw(&m.to_string());
        self.wait(|v| v["id"] == json!(id) && v.get("method").is_none())
    }

    /// The next message matching `pred` (others are kept in `seen`).
    fn wait(&mut self, pred: impl Fn(&Value) -> bool) -> Value {
        if let Some(i) = self.seen.iter().position(&pred) {
            return self.seen.remove(i);
        }
        let until = std::time::Instant::now() + DEADLINE;
        loop {
            let left = until.saturating_duration_since(std::time::Instant::now());
            let v = self
                .rx
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("no matching message in time; seen {:?}", self.seen));
            if pred(&v) {
                return v;
            }
            self.seen.push(v);
        }
    }

    /// The next diagnostics published for `uri`.
    fn diagnostics(&mut self, uri: &str) -> Vec<Value> {
        let v = self.wait(|v| {
            v["method"] == "textDocument/publishDiagnostics" && v["params"]["uri"] == uri
        });
        v["params"]["diagnostics"].as_array().cloned().unwrap()
    }
}

fn uri(p: &std::path::Path) -> String {
    format!("file://{}", p.display())
}

/// UTF-16 column of char column `col` (1-based, as lint prints it) of `line`.
fn utf16_col(line: &str, col: u64) -> u64 {
    line.chars()
        .take(col as usize - 1)
        .map(|c| c.len_utf16() as u64)
        .sum()
}

const CONFIG: &str = "policies: { dir: policies }\nproviders:\n  p: { kind: mock }\nmodels:\n  fast:\n    endpoints:\n      - { name: p/fast, provider: p, model: mock-1 }\n  slow:\n    endpoints:\n      - { name: p/slow, provider: p, model: mock-2 }\n";

const STRATEGY: &str = "# The cheapest endpoint.\nstrategy cheap(k = 1.0 in [0, 10]) {\n  score = endpoint.cost_in * k\n  pick min\n}\n";

/// Non-ASCII text (2-, 3- and 4-byte characters, a surrogate pair in UTF-16) on the
/// error's line, before its span.
const BROKEN: &str = "route r when request.model == \"fast\" {\n  rule big when request.model != \"é€😀\" and request.input_tokns > 10 { use \"slow\" via cheap(k = 2) }\n  default use \"fast\"\n}\n";

#[test]
fn lsp_session_diagnostics_hover_definition_completion_formatting_and_shutdown() {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    std::fs::write(root.join("switchyard.yaml"), CONFIG).unwrap();
    std::fs::create_dir(root.join("policies")).unwrap();
    let a = root.join("policies/a.policy");
    let b = root.join("policies/b.policy");
    std::fs::write(&a, STRATEGY).unwrap();
    std::fs::write(&b, BROKEN).unwrap();
    let (a_uri, b_uri) = (uri(&a), uri(&b));

    // What `switchyard lint` says about the set on disk.
    let lint = Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .args(["lint", "--format", "json", "--config", "switchyard.yaml"])
        .current_dir(&root)
        .output()
        .unwrap();
    let lint: Value = serde_json::from_slice(&lint.stdout).unwrap();
    let want = lint["diagnostics"][0].clone();
    assert_eq!(want["code"], "E0203", "{lint}");

    let mut lsp = Lsp::start(&root);
    // Before `initialize`, requests are refused with ServerNotInitialized.
    let early = lsp.request("textDocument/hover", json!({}));
    assert_eq!(early["error"]["code"], -32002, "{early}");
    let init = lsp.request(
        "initialize",
        json!({ "processId": null, "rootUri": uri(&root), "capabilities": {} }),
    );
    let caps = &init["result"]["capabilities"];
    assert_eq!(caps["hoverProvider"], true, "{init}");
    assert_eq!(caps["definitionProvider"], true);
    assert_eq!(caps["documentFormattingProvider"], true);
    assert_eq!(caps["positionEncoding"], "utf-16");
    lsp.notify("initialized", json!({}));

    // didOpen with an error: its code, message and range are lint's, in UTF-16.
    lsp.notify(
        "textDocument/didOpen",
        json!({ "textDocument": { "uri": b_uri, "languageId": "switchyard-policy", "version": 1, "text": BROKEN } }),
    );
    let d = lsp.diagnostics(&b_uri);
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!(d[0]["code"], "E0203");
    assert_eq!(d[0]["severity"], 1);
    assert_eq!(d[0]["source"], "switchyard");
    let msg = want["message"].as_str().unwrap();
    assert!(d[0]["message"].as_str().unwrap().starts_with(msg), "{d:?}");
    if let Some(help) = want["help"].as_str() {
        assert!(d[0]["message"].as_str().unwrap().contains(help));
    }
    let line_no = want["line"].as_u64().unwrap();
    let line = BROKEN.lines().nth(line_no as usize - 1).unwrap();
    let start = json!({ "line": line_no - 1, "character": utf16_col(line, want["column"].as_u64().unwrap()) });
    let end = json!({ "line": want["end_line"].as_u64().unwrap() - 1, "character": utf16_col(line, want["end_column"].as_u64().unwrap()) });
    assert_eq!(d[0]["range"]["start"], start, "{d:?} vs {want}");
    assert_eq!(d[0]["range"]["end"], end);
    // The column differs from the byte and the char column: the test means something.
    let byte_col = line.find("request.input_tokns").unwrap() as u64;
    assert_ne!(start["character"].as_u64().unwrap(), byte_col);
    assert_ne!(
        start["character"].as_u64().unwrap(),
        want["column"].as_u64().unwrap() - 1
    );

    // didChange fixing the field (an incremental edit): the diagnostics clear.
    let at = line.find("input_tokns").unwrap();
    let c0 = line[..at].encode_utf16().count() as u64;
    let c1 = c0 + "input_tokns".len() as u64;
    lsp.notify(
        "textDocument/didChange",
        json!({ "textDocument": { "uri": b_uri, "version": 2 }, "contentChanges": [
            { "range": { "start": { "line": 1, "character": c0 }, "end": { "line": 1, "character": c1 } }, "text": "input_tokens" } ] }),
    );
    let d = lsp.diagnostics(&b_uri);
    assert!(d.is_empty(), "{d:?}");
    let fixed = BROKEN.replace("input_tokns", "input_tokens");

    // Hover on the field: type, unit and the reference line from the field table.
    let pos = |text: &str, needle: &str, plus: usize| {
        let (l, t) = text
            .lines()
            .enumerate()
            .find(|(_, t)| t.contains(needle))
            .unwrap();
        let b = t.find(needle).unwrap() + plus;
        json!({ "line": l, "character": t[..b].encode_utf16().count() })
    };
    let h = lsp.request(
        "textDocument/hover",
        json!({ "textDocument": { "uri": b_uri }, "position": pos(&fixed, "input_tokens", 3) }),
    );
    let text = h["result"]["contents"]["value"]
        .as_str()
        .unwrap_or_default();
    assert!(text.contains("request.input_tokens: Int"), "{h}");
    assert!(text.contains("tokens"), "{h}");
    // Hover on a strategy defined in the other file of the set: its header and doc.
    let h = lsp.request(
        "textDocument/hover",
        json!({ "textDocument": { "uri": b_uri }, "position": pos(&fixed, "cheap", 1) }),
    );
    let text = h["result"]["contents"]["value"]
        .as_str()
        .unwrap_or_default();
    assert!(text.contains("strategy cheap(k = 1.0 in [0, 10])"), "{h}");
    assert!(text.contains("The cheapest endpoint."), "{h}");
    // Hover on a model: its endpoints from the registry.
    let h = lsp.request(
        "textDocument/hover",
        json!({ "textDocument": { "uri": b_uri }, "position": pos(&fixed, "\"slow\"", 2) }),
    );
    assert!(
        h["result"]["contents"]["value"]
            .as_str()
            .unwrap_or_default()
            .contains("p/slow"),
        "{h}"
    );

    // Definition: the strategy in a.policy, the model in switchyard.yaml.
    let def = lsp.request(
        "textDocument/definition",
        json!({ "textDocument": { "uri": b_uri }, "position": pos(&fixed, "cheap", 2) }),
    );
    assert_eq!(def["result"][0]["uri"], a_uri, "{def}");
    assert_eq!(
        def["result"][0]["range"]["start"],
        json!({ "line": 1, "character": 9 })
    );
    let def = lsp.request(
        "textDocument/definition",
        json!({ "textDocument": { "uri": b_uri }, "position": pos(&fixed, "\"slow\"", 1) }),
    );
    assert_eq!(
        def["result"][0]["uri"],
        uri(&root.join("switchyard.yaml")),
        "{def}"
    );
    let yaml_line = CONFIG.lines().position(|l| l.trim() == "slow:").unwrap();
    assert_eq!(
        def["result"][0]["range"]["start"],
        json!({ "line": yaml_line, "character": 2 })
    );

    // Completion in a half-typed buffer (which does not parse: its diagnostics say so).
    let c_uri = uri(&root.join("policies/c.policy"));
    let partial = "route q {\n  default use \"\n}\nroute w when request. {\n";
    lsp.notify(
        "textDocument/didOpen",
        json!({ "textDocument": { "uri": c_uri, "languageId": "switchyard-policy", "version": 1, "text": partial } }),
    );
    let d = lsp.diagnostics(&c_uri);
    assert_eq!(d[0]["code"], "E0101", "{d:?}");
    let items = |r: &Value| -> Vec<String> {
        r["result"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["label"].as_str().unwrap().to_string())
            .collect()
    };
    let r = lsp.request(
        "textDocument/completion",
        json!({ "textDocument": { "uri": c_uri }, "position": { "line": 3, "character": 21 } }),
    );
    let labels = items(&r);
    assert!(labels.contains(&"input_tokens".to_string()), "{labels:?}");
    assert!(
        labels.contains(&"budget_remaining".to_string()),
        "{labels:?}"
    );
    let r = lsp.request(
        "textDocument/completion",
        json!({ "textDocument": { "uri": c_uri }, "position": { "line": 1, "character": 15 } }),
    );
    assert_eq!(items(&r), vec!["fast".to_string(), "slow".to_string()]);

    // Formatting: the same text as `switchyard fmt`; a file that does not parse is
    // refused with an error response.
    let f = lsp.request(
        "textDocument/formatting",
        json!({ "textDocument": { "uri": b_uri }, "options": { "tabSize": 2, "insertSpaces": true } }),
    );
    let want_fmt = switchyard::policy::fmt::format_str("b.policy", &fixed).unwrap();
    assert_ne!(want_fmt, fixed);
    assert_eq!(f["result"][0]["newText"], want_fmt, "{f}");
    let f = lsp.request(
        "textDocument/formatting",
        json!({ "textDocument": { "uri": c_uri }, "options": { "tabSize": 2, "insertSpaces": true } }),
    );
    assert_eq!(f["error"]["code"], -32803, "{f}");

    // Protocol errors: malformed JSON, an unknown method; the server goes on.
    lsp.raw("{not json");
    let e = lsp.wait(|v| v["error"]["code"] == -32700);
    assert_eq!(e["id"], Value::Null);
    let e = lsp.request("switchyard/nonsense", json!({}));
    assert_eq!(e["error"]["code"], -32601, "{e}");

    // Closing the broken buffer: c.policy is not on disk, so its diagnostics clear.
    lsp.notify(
        "textDocument/didClose",
        json!({ "textDocument": { "uri": c_uri } }),
    );
    assert!(lsp.diagnostics(&c_uri).is_empty());

    // shutdown, then requests are invalid, then exit ends the process with 0.
    let s = lsp.request("shutdown", Value::Null);
    assert_eq!(s["result"], Value::Null, "{s}");
    let after = lsp.request("textDocument/hover", json!({}));
    assert_eq!(after["error"]["code"], -32600, "{after}");
    lsp.notify("exit", Value::Null);
    let until = std::time::Instant::now() + DEADLINE;
    let status = loop {
        if let Some(s) = lsp.child.try_wait().unwrap() {
            break s;
        }
        assert!(std::time::Instant::now() < until, "no exit after `exit`");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(0));
}

#[test]
fn lsp_exit_without_shutdown_is_exit_code_1() {
    let dir = tempfile::tempdir().unwrap();
    let mut lsp = Lsp::start(dir.path());
    let _ = lsp.request(
        "initialize",
        json!({ "processId": null, "capabilities": {} }),
    );
    lsp.notify("exit", Value::Null);
    let until = std::time::Instant::now() + DEADLINE;
    loop {
        if let Some(s) = lsp.child.try_wait().unwrap() {
            assert_eq!(s.code(), Some(1));
            return;
        }
        assert!(std::time::Instant::now() < until, "no exit after `exit`");
        std::thread::sleep(Duration::from_millis(20));
    }
}
