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
///
/// Its stderr (logs, and the errors some tests provoke on purpose) is captured, not
/// inherited, so a passing run's output holds only the test harness's lines; a test
/// that panics prints the captured stderr of its processes.
pub struct Proc {
    pub child: Child,
    pub addr: SocketAddr,
    /// Keeps the config directory alive as long as the process.
    pub _dir: Option<tempfile::TempDir>,
    /// Everything the process wrote to stderr so far.
    pub stderr: std::sync::Arc<std::sync::Mutex<String>>,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            let log = self.stderr.lock().map(|s| s.clone()).unwrap_or_default();
            eprintln!("--- stderr of {:?} ---\n{log}", self.child.id());
        }
    }
}

/// Reads `from` to its end into a shared buffer, on a thread of its own.
fn capture(from: impl std::io::Read + Send + 'static) -> std::sync::Arc<std::sync::Mutex<String>> {
    let buf = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let sink = buf.clone();
    std::thread::spawn(move || {
        let mut lines = BufReader::new(from);
        let mut line = String::new();
        while lines.read_line(&mut line).map(|n| n > 0).unwrap_or(false) {
            if let Ok(mut s) = sink.lock() {
                s.push_str(&line);
            }
            line.clear();
        }
    });
    buf
}

impl Proc {
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    /// Waits (up to 5 s) for the process to exit by itself, and returns its status.
    pub async fn exited(&mut self) -> std::process::ExitStatus {
        for _ in 0..100 {
            if let Some(s) = self.child.try_wait().unwrap() {
                return s;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("the process has not exited after 5 s");
    }

    /// Sends SIGTERM.
    pub fn terminate(&self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
    }
}

fn spawn(args: &[&str], marker: &str, dir: Option<tempfile::TempDir>) -> Proc {
    spawn_env(args, marker, dir, &[])
}

fn spawn_env(
    args: &[&str],
    marker: &str,
    dir: Option<tempfile::TempDir>,
    env: &[(&str, &str)],
) -> Proc {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_switchyard"));
    cmd.args(args)
        .env("SWITCHYARD_LOG", "warn")
        .envs(env.iter().copied());
    spawn_command(cmd, marker, dir)
}

/// Starts `cmd` (switchyard, or a shell that `exec`s it) and waits for the stdout line
/// starting with `marker` followed by the listen address.
#[allow(clippy::zombie_processes)] // Proc's Drop kills and waits.
pub fn spawn_command(mut cmd: Command, marker: &str, dir: Option<tempfile::TempDir>) -> Proc {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start switchyard");
    let stderr = capture(child.stderr.take().unwrap());
    let stdout = child.stdout.take().unwrap();
    let mut reader = BufReader::new(stdout);
    let mut line = String::new();
    loop {
        line.clear();
        let n = reader.read_line(&mut line).expect("read stdout");
        if n == 0 {
            std::thread::sleep(Duration::from_millis(50));
            let log = stderr.lock().map(|s| s.clone()).unwrap_or_default();
            panic!("process exited before listening: {cmd:?}\n{log}");
        }
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
                stderr,
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
    serve_with_env(config, &[])
}

/// Starts `switchyard serve` with `config` and the variables `env` set.
pub fn serve_with_env(config: &str, env: &[(&str, &str)]) -> Proc {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("switchyard.yaml");
    std::fs::write(&path, config).unwrap();
    let p = path.to_str().unwrap().to_string();
    spawn_env(
        &["serve", "--config", &p, "--listen", "127.0.0.1:0"],
        "switchyard listening on",
        Some(dir),
        env,
    )
}

/// The lines a child process wrote to stderr, collected as they arrive.
#[derive(Clone, Default)]
pub struct Logs(pub std::sync::Arc<std::sync::Mutex<Vec<String>>>);

impl Logs {
    /// The JSON access lines (`--log-format json`, target `switchyard::access`)
    /// written so far whose `request_id` is `id`: their `fields` objects.
    pub fn access(&self, id: &str) -> Vec<serde_json::Value> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|v| v["target"] == "switchyard::access")
            .map(|v| v["fields"].clone())
            .filter(|f| f["request_id"] == id)
            .collect()
    }

    /// Waits (up to 10 s) until request `id` has an access line, and returns its
    /// access lines.
    pub async fn wait_access(&self, id: &str) -> Vec<serde_json::Value> {
        let started = std::time::Instant::now();
        loop {
            let lines = self.access(id);
            if !lines.is_empty() {
                return lines;
            }
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "no access line for request {id}; stderr:\n{}",
                self.0.lock().unwrap().join("\n")
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// Starts `switchyard serve` with `config`, writing JSON logs (warnings and the
/// access lines) to a pipe collected into the returned [`Logs`].
#[allow(clippy::zombie_processes)] // Proc's Drop kills and waits.
pub fn serve_logged(config: &str) -> (Proc, Logs) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("switchyard.yaml");
    std::fs::write(&path, config).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .args([
            "--log-format",
            "json",
            "--log",
            "warn,switchyard::access=info",
        ])
        .args([
            "serve",
            "--config",
            path.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start switchyard");
    let logs = Logs::default();
    let sink = logs.clone();
    let stderr = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { return };
            sink.0.lock().unwrap().push(line);
        }
    });
    let mut reader = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    loop {
        line.clear();
        let n = reader.read_line(&mut line).expect("read stdout");
        assert!(n > 0, "switchyard serve exited before listening");
        if let Some(rest) = line.trim().strip_prefix("switchyard listening on") {
            let addr: SocketAddr = rest.trim().parse().expect("address");
            std::thread::spawn(move || {
                let mut sink = String::new();
                while reader.read_line(&mut sink).map(|n| n > 0).unwrap_or(false) {
                    sink.clear();
                }
            });
            // (Its stderr goes to `logs`, not to `Proc::stderr`.)
            let proc = Proc {
                child,
                addr,
                _dir: Some(dir),
                stderr: Default::default(),
            };
            return (proc, logs);
        }
    }
}

/// Starts `switchyard serve` with `config` and policy files `(name, text)` in a
/// `policies/` directory beside it.
pub fn serve_with_policies(config: &str, policies: &[(&str, &str)]) -> Proc {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("policies")).unwrap();
    for (name, text) in policies {
        // Names may have folders (`builtin/x.policy`).
        let file = dir.path().join("policies").join(name);
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(file, text).unwrap();
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
    request_with(method, url, &[], body).await
}

/// As [`request`], with extra request headers.
pub async fn request_with(
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: impl Into<Bytes>,
) -> Reply {
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let mut req = http::Request::builder()
        .method(method)
        .uri(url)
        .header("content-type", "application/json");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let req = req.body(Full::new(body.into())).unwrap();
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

/// An AWS shared credentials file (`[default]` profile, access key `AKID`) in `dir`,
/// for a Bedrock provider's `credentials_file`; its path.
pub fn aws_credentials(dir: &tempfile::TempDir) -> std::path::PathBuf {
    let credentials = dir.path().join("credentials");
    std::fs::write(
        &credentials,
        "[default]\naws_access_key_id = AKID\naws_secret_access_key = secret\n",
    )
    .unwrap();
    credentials
}

/// A chat body for `model`.
pub fn chat(model: &str, stream: bool, extra: &str) -> String {
    format!(
        r#"{{"model":"{model}","stream":{stream},"messages":[{{"role":"user","content":"hello there"}}]{extra}}}"#
    )
}

/// A gateway started in process (`switchyard::app::App`) on an ephemeral loopback
/// port (whatever `server.listen` says), with `config` (YAML) and policy files `(name, text)` in a `policies/`
/// directory beside it (none: built-ins only). Not watched for changes.
pub struct InProcess {
    pub app: switchyard::app::App,
    pub _dir: tempfile::TempDir,
}

impl InProcess {
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.app.addr(), path)
    }
}

pub async fn start_app(config: &str, policies: &[(&str, &str)]) -> InProcess {
    let dir = tempfile::tempdir().unwrap();
    let mut text = String::new();
    if !policies.is_empty() {
        std::fs::create_dir(dir.path().join("policies")).unwrap();
        for (name, body) in policies {
            std::fs::write(dir.path().join("policies").join(name), body).unwrap();
        }
        text.push_str("policies: { dir: policies }\n");
    }
    text.push_str(config);
    let path = dir.path().join("switchyard.yaml");
    std::fs::write(&path, &text).unwrap();
    let mut config = switchyard::config::parse_str(&text, Some(&path)).expect("valid config");
    config.server.listen = "127.0.0.1:0".parse().unwrap();
    let policy = switchyard::routing::policy::load(&config).expect("valid policies");
    let opts = switchyard::app::AppOptions {
        watch: false,
        ..Default::default()
    };
    let app = switchyard::app::App::start(config, policy, opts)
        .await
        .expect("app starts");
    InProcess { app, _dir: dir }
}

/// An upstream that answers every request with `status` and JSON `body`, one
/// connection per request, counting the requests it got.
pub fn scripted_upstream(
    status: u16,
    body: &'static str,
) -> (SocketAddr, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    sequence_upstream(vec![(status, "", body)])
}

/// One scripted answer: status, extra header lines (`"name: value\r\n"` each), body.
pub type Scripted = (u16, &'static str, &'static str);

/// An upstream that answers its n-th request with `script[n]` (the last entry again
/// once the script runs out), one connection per request, counting requests.
pub fn sequence_upstream(
    script: Vec<Scripted>,
) -> (SocketAddr, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let hits = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = hits.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { return };
            let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
            let mut buf = [0u8; 65536];
            let _ = s.read(&mut buf);
            let n = seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let (status, headers, body) = script[n.min(script.len() - 1)];
            let _ = write!(
                s,
                "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\n{headers}content-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    (addr, hits)
}

/// A JSON chat completion saying `ok`.
pub const COMPLETION: &str = r#"{"id":"x","object":"chat.completion","created":0,"model":"x","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}]}"#;

/// The value of counter or gauge `name` with all of `labels` in a Prometheus text
/// rendering, or 0.
pub fn metric(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(name) && !l.starts_with('#'))
        .filter(|l| {
            labels
                .iter()
                .all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// A `redis-server` on a free loopback port, killed on drop (the shared-state tests
/// of limits and the cache).
pub struct Redis {
    /// The server process.
    pub child: Child,
    /// Its loopback port.
    pub port: u16,
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts a `redis-server` (no persistence) on a free loopback port and waits until
/// it listens.
pub fn start_redis() -> Redis {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("redis-server is required for this test and could not be started ({e}); install it (Debian: apt-get install redis-server; scripts/test.sh does)")
        });
    let started = std::time::Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "redis-server did not listen on {port}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    Redis { child, port }
}

/// An HTTP/2 (prior knowledge) client connection to `addr`: its sender and the
/// connection to spawn.
pub async fn h2_connect<B>(
    addr: SocketAddr,
) -> (
    hyper::client::conn::http2::SendRequest<B>,
    hyper::client::conn::http2::Connection<
        hyper_util::rt::TokioIo<tokio::net::TcpStream>,
        B,
        TokioExecutor,
    >,
)
where
    B: hyper::body::Body + Unpin + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    hyper::client::conn::http2::handshake(
        TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(stream),
    )
    .await
    .unwrap()
}
