//! Regression tests of issue 18 ("the first hour of a new user"), each named after
//! the stumble: exit codes, `serve --check` as startup, the policy directory's empty
//! and missing states, what `/admin/policies` says is serving, diagnostics, lint
//! paths, the examples' own registry, colourless redirected logs.

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use crate::common::*;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn switchyard(args: &[&str], cwd: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .args(args)
        .current_dir(cwd)
        .env("SWITCHYARD_LOG", "warn")
        .output()
        .expect("the binary runs")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn serve_with_a_missing_config_exits_2_as_an_io_error() {
    let dir = tempfile::tempdir().unwrap();
    for args in [
        &["serve", "-c", "missing.yaml"][..],
        &["serve", "--check", "-c", "missing.yaml"][..],
        &["lint", "-c", "missing.yaml"][..],
    ] {
        let o = switchyard(args, dir.path());
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o));
        assert!(
            text(&o).contains("cannot read config missing.yaml"),
            "{}",
            text(&o)
        );
    }
    // An invalid config is 1.
    std::fs::write(dir.path().join("bad.yaml"), "server: { listen: nowhere }\n").unwrap();
    let o = switchyard(&["serve", "--check", "-c", "bad.yaml"], dir.path());
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
}

/// Newcomer walk: `fmt --check` with nothing to read passed silently where `lint` and
/// `test` say that no policy files were given.
#[test]
fn fmt_with_no_policy_files_says_so_like_lint() {
    let dir = tempfile::tempdir().unwrap();
    for cmd in ["fmt", "lint", "test"] {
        let o = switchyard(
            &[cmd, "--check"][..if cmd == "fmt" { 2 } else { 1 }],
            dir.path(),
        );
        assert!(
            text(&o).contains("no policy files given"),
            "{cmd}: {}",
            text(&o)
        );
    }
}

/// Newcomer walk: the README's JWT block reported its unset secret variable first and
/// its missing JWKS file only on the next run; both come in one `--check`.
#[test]
fn serve_check_names_every_jwt_setup_problem_at_once() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("switchyard.yaml"),
        "auth:\n  mode: jwt\n  jwt:\n    hs256_secret_env: SWITCHYARD_TEST_UNSET_SECRET\n    jwks_file: jwks.json\n",
    )
    .unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .args(["serve", "--check", "-c", "switchyard.yaml"])
        .current_dir(dir.path())
        .env("SWITCHYARD_LOG", "warn")
        .env_remove("SWITCHYARD_TEST_UNSET_SECRET")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let t = text(&o);
    assert!(t.contains("SWITCHYARD_TEST_UNSET_SECRET is not set"), "{t}");
    assert!(t.contains("auth.jwt.jwks_file"), "{t}");
}

/// `serve --check` passed a config whose authentication `serve` then could not set
/// up (an API key file that does not exist).
#[test]
fn serve_check_fails_where_serve_fails_on_a_missing_key_file() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("switchyard.yaml"),
        "auth: { mode: keys, key_file: keys.yaml }\nproviders:\n  p: { kind: mock }\nmodels:\n  m: { endpoints: [ { provider: p, model: x } ] }\n",
    )
    .unwrap();
    let checked = switchyard(&["serve", "--check", "-c", "switchyard.yaml"], dir.path());
    let served = switchyard(
        &["serve", "-c", "switchyard.yaml", "--listen", "127.0.0.1:0"],
        dir.path(),
    );
    assert_eq!(served.status.code(), Some(1), "{}", text(&served));
    assert_eq!(checked.status.code(), Some(1), "{}", text(&checked));
    assert!(text(&checked).contains("keys.yaml"), "{}", text(&checked));
}

/// The shipped example policies sat in `policies/`, the directory a config at the
/// repository root loads by default: 110 errors, nothing saying they were examples.
#[test]
fn no_config_at_the_repository_root_loads_the_example_policies() {
    let default_dir = root().join("policies");
    let shipped: Vec<_> = std::fs::read_dir(&default_dir)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(shipped.is_empty(), "files in ./policies: {shipped:?}");
    // And checked against another registry, they say whose registry they need.
    let o = switchyard(&["lint", "examples/policies"], root());
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o).contains("--config examples/policies/switchyard.yaml"),
        "{}",
        text(&o)
    );
    let o = switchyard(
        &["lint", "--config", "examples/policies/switchyard.yaml"],
        root(),
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}

#[test]
fn a_missing_closing_brace_names_the_unclosed_block() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("a.policy"),
        "route a when request.model == \"m\" {\n  default use model\n\nroute b when request.model == \"n\" {\n  default use model\n}\n",
    )
    .unwrap();
    let o = switchyard(&["lint", "a.policy"], dir.path());
    let t = text(&o);
    assert_eq!(o.status.code(), Some(1), "{t}");
    assert!(t.contains("unclosed `{` opened at 1:35"), "{t}");
    assert!(t.contains("a.policy:1:35"), "{t}");
}

/// A secondary snippet was printed with a narrower gutter than the primary; every
/// `|` of one diagnostic must line up (rustc's layout).
#[test]
fn secondary_snippets_share_the_widest_gutter() {
    let dir = tempfile::tempdir().unwrap();
    let route = "route a when request.model == \"mock\" {\n  default use model\n}\n";
    std::fs::write(
        dir.path().join("dup.policy"),
        format!("{route}{}{route}", "\n".repeat(8)),
    )
    .unwrap();
    let o = switchyard(&["lint", "dup.policy"], dir.path());
    let t = text(&o);
    assert!(t.contains(":::"), "{t}");
    let bars: Vec<usize> = t
        .lines()
        .filter(|l| {
            let head = l.trim_start();
            head.starts_with('|')
                || head
                    .split(' ')
                    .next()
                    .is_some_and(|w| w.parse::<u32>().is_ok())
        })
        .filter_map(|l| l.find('|'))
        .collect();
    assert!(bars.len() >= 4, "{t}");
    assert!(bars.iter().all(|&b| b == bars[0]), "{bars:?}\n{t}");
    assert!(t.contains("-->") && t.contains("  ::: "), "{t}");
}

/// Lint printed a file by the path it was reached through: `canary.policy` for a
/// directory, `./examples/...` or an absolute path for a file.
#[test]
fn lint_names_files_relative_to_the_current_directory_however_given() {
    let abs = root().join("examples/policies/canary.policy");
    let cfg = "examples/policies/switchyard.yaml";
    for path in [
        "examples/policies",
        "./examples/policies/",
        "examples/policies/canary.policy",
        "./examples/policies/canary.policy",
        abs.to_str().unwrap(),
    ] {
        let o = switchyard(&["lint", "--config", cfg, "--format", "json", path], root());
        let doc: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
        let files: Vec<&str> = doc["files"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|f| f.as_str())
            .collect();
        assert!(
            files.contains(&"examples/policies/canary.policy"),
            "{path}: {files:?}"
        );
    }
}

/// Log lines carried ANSI colour codes into redirected files.
#[test]
fn redirected_logs_have_no_colour_codes() {
    let gw = serve("providers:\n  p: { kind: mock }\nmodels:\n  m: { endpoints: [ { provider: p, model: x } ] }\n");
    // No admin keys: a warning is logged at startup, before `listening`.
    let deadline = Instant::now() + Duration::from_secs(10);
    let log = loop {
        let log = gw.stderr.lock().unwrap().clone();
        if log.contains("WARN") || Instant::now() > deadline {
            break log;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(log.contains("WARN"), "{log}");
    assert!(!log.contains('\u{1b}'), "{log:?}");
}

fn pinned(endpoint: &str) -> String {
    format!("route pin when request.model == \"m\" {{\n  default use endpoint \"{endpoint}\"\n}}\n")
}

const TWO: &str = "providers:\n  a: { kind: mock }\n  b: { kind: mock }\nmodels:\n  m:\n    endpoints:\n      - { provider: a, model: x, priority: 1 }\n      - { provider: b, model: x, priority: 2 }\n";

async fn served_by(gw: &Proc) -> String {
    let r = post(
        &gw.url("/v1/chat/completions"),
        &chat("m", false, r#","max_tokens":1"#),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    r.headers["x-switchyard-endpoint"]
        .to_str()
        .unwrap()
        .to_string()
}

async fn admin_until(gw: &Proc, what: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let v = get(&gw.url("/admin/policies")).await.json();
        if what(&v) {
            return v;
        }
        assert!(Instant::now() < deadline, "never: {v}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Deleting the only `.policy` file silently reloaded to the built-ins, while deleting
/// the directory was refused: both are refused now, and `/admin/policies` says what
/// serves; an empty `.policy` file asks for the built-ins only.
#[tokio::test]
async fn deleting_the_only_policy_file_is_refused_like_deleting_the_directory() {
    let gw = serve_with_policies(TWO, &[("pin.policy", &pinned("b/x"))]);
    let dir = gw._dir.as_ref().unwrap().path().join("policies");
    let v = admin_until(&gw, |v| v["operator_files"] == 1).await;
    assert!(v["serving"].as_str().unwrap().contains("pin.policy"), "{v}");
    assert_eq!(served_by(&gw).await, "b/x");

    std::fs::remove_file(dir.join("pin.policy")).unwrap();
    let v = admin_until(&gw, |v| !v["last_error"].is_null()).await;
    let err = v["last_error"]["message"].as_str().unwrap();
    assert!(err.contains("holds no .policy file"), "{v}");
    assert!(v["serving"].as_str().unwrap().contains("pin.policy"), "{v}");
    assert_eq!(served_by(&gw).await, "b/x");

    std::fs::write(dir.join("pin.policy"), pinned("b/x")).unwrap();
    admin_until(&gw, |v| v["last_error"].is_null()).await;
    std::fs::remove_dir_all(&dir).unwrap();
    let v = admin_until(&gw, |v| !v["last_error"].is_null()).await;
    assert!(
        v["last_error"]["message"]
            .as_str()
            .unwrap()
            .contains("is gone"),
        "{v}"
    );
    assert_eq!(served_by(&gw).await, "b/x");

    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("none.policy"), "").unwrap();
    let v = admin_until(&gw, |v| {
        v["operator_files"] == 1
            && v["last_error"].is_null()
            && v["files"].to_string().contains("none.policy")
    })
    .await;
    assert!(
        v["serving"].as_str().unwrap().contains("none.policy"),
        "{v}"
    );
    assert_eq!(served_by(&gw).await, "a/x");
}
