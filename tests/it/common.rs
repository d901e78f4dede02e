//! Helpers: start `switchyard serve` / `switchyard mock` on ephemeral loopback ports and
//! talk HTTP to them.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

/// A child process killed on drop.
pub struct Proc {
    pub child: Child,
    pub addr: SocketAddr,
    /// Keeps the config directory alive as long as the process.
    pub _dir: Option<tempfile::TempDir>,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Proc {
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    /// Sends SIGTERM.
    pub fn terminate(&self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
    }
}

#[allow(clippy::zombie_processes)] // Proc's Drop kills and waits.
fn spawn(args: &[&str], marker: &str, dir: Option<tempfile::TempDir>) -> Proc {
    let mut child = Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .args(args)
        .env("SWITCHYARD_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start switchyard");
    let stdout = child.stdout.take().unwrap();
    let mut reader = BufReader::new(stdout);
    let mut line = String::new();
    loop {
        line.clear();
        let n = reader.read_line(&mut line).expect("read stdout");
        assert!(n > 0, "process exited before listening: {args:?}");
        if let Some(rest) = line.trim().strip_prefix(marker) {
            let addr: SocketAddr = rest.trim().parse().expect("address");
            // Keep draining stdout so the child never blocks on a full pipe.
            std::thread::spawn(move || {
                let mut sink = String::new();
                while reader.read_line(&mut sink).map(|n| n > 0).unwrap_or(false) {
                    sink.clear();
                }
            });
            return Proc {
                child,
                addr,
                _dir: dir,
            };
        }
    }
}

/// Starts `switchyard mock` with extra flags.
pub fn mock(flags: &[&str]) -> Proc {
    let mut args = vec!["mock", "--listen", "127.0.0.1:0"];
    args.extend_from_slice(flags);
    spawn(&args, "switchyard mock listening on", None)
}

/// Starts `switchyard serve` with `config` (YAML text).
pub fn serve(config: &str) -> Proc {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("switchyard.yaml");
    std::fs::write(&path, config).unwrap();
    let p = path.to_str().unwrap().to_string();
    spawn(
        &["serve", "--config", &p, "--listen", "127.0.0.1:0"],
        "switchyard listening on",
        Some(dir),
    )
}

/// Starts `switchyard serve` with `config` and policy files `(name, text)` in a
/// `policies/` directory beside it.
pub fn serve_with_policies(config: &str, policies: &[(&str, &str)]) -> Proc {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("policies")).unwrap();
    for (name, text) in policies {
        std::fs::write(dir.path().join("policies").join(name), text).unwrap();
    }
    let path = dir.path().join("switchyard.yaml");
    std::fs::write(&path, format!("policies: {{ dir: policies }}\n{config}")).unwrap();
    let p = path.to_str().unwrap().to_string();
    spawn(
        &["serve", "--config", &p, "--listen", "127.0.0.1:0"],
        "switchyard listening on",
        Some(dir),
    )
}

/// A config with one openai-compatible provider per `(name, mock)` and the given
/// `models:` block.
pub fn config(providers: &[(&str, &Proc)], extra_provider_yaml: &str, models: &str) -> String {
    let mut s = String::from("providers:\n");
    for (name, p) in providers {
        s.push_str(&format!(
            "  {name}:\n    kind: openai-compatible\n    base_url: http://{}/v1\n{extra_provider_yaml}",
            p.addr
        ));
    }
    s.push_str("models:\n");
    s.push_str(models);
    s
}

pub struct Reply {
    pub status: u16,
    pub headers: http::HeaderMap,
    pub body: Bytes,
}

impl Reply {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The `data:` payloads of an SSE body.
    pub fn events(&self) -> Vec<String> {
        self.text()
            .split("\n\n")
            .filter_map(|e| e.strip_prefix("data: ").map(str::to_string))
            .collect()
    }
}

pub async fn request(method: &str, url: &str, body: impl Into<Bytes>) -> Reply {
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let req = http::Request::builder()
        .method(method)
        .uri(url)
        .header("content-type", "application/json")
        .body(Full::new(body.into()))
        .unwrap();
    let resp = tokio::time::timeout(Duration::from_secs(30), client.request(req))
        .await
        .expect("response within 30 s")
        .expect("request");
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = match tokio::time::timeout(Duration::from_secs(30), resp.into_body().collect()).await
    {
        Ok(Ok(b)) => b.to_bytes(),
        Ok(Err(e)) => panic!("body broke: {e}"),
        Err(_) => panic!("body not finished within 30 s"),
    };
    Reply {
        status,
        headers,
        body,
    }
}

pub async fn post(url: &str, body: &str) -> Reply {
    request("POST", url, body.to_string()).await
}

pub async fn get(url: &str) -> Reply {
    request("GET", url, Bytes::new()).await
}

/// A chat body for `model`.
pub fn chat(model: &str, stream: bool, extra: &str) -> String {
    format!(
        r#"{{"model":"{model}","stream":{stream},"messages":[{{"role":"user","content":"hello there"}}]{extra}}}"#
    )
}
