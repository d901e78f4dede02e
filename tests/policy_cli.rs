//! The policy tools through the real binary: exit codes, JSON schemas, `fmt --check`,
//! `dry-run --format json`, `test` pass/fail.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn config() -> PathBuf {
    root().join("examples/policies/switchyard.yaml")
}

fn run(args: &[&str], cwd: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .args(args)
        .current_dir(cwd)
        .output()
        .expect("the binary runs")
}

fn json(o: &Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}): {}",
            String::from_utf8_lossy(&o.stdout)
        )
    })
}

/// Asserts that the command exited 0, showing its output otherwise.
#[track_caller]
fn assert_success(o: &Output) {
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).expect("writable");
    p
}

/// Runs `test` with the shipped config on the fixture `tests/policies/valid/<name>`
/// in `dir` (all `passed` tests must pass) and `fmt --check` on it (it must be
/// formatted); returns the fixture's path for further commands.
fn fixture_passes(name: &str, passed: usize, dir: &Path) -> String {
    let c = config();
    let fixture = root().join("tests/policies/valid").join(name);
    let fixture = fixture.to_str().unwrap_or("").to_string();
    let o = run(
        &["test", "--config", c.to_str().unwrap_or(""), &fixture],
        dir,
    );
    let text = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{text}");
    assert!(
        text.contains(&format!("{passed} passed, 0 failed")),
        "{text}"
    );
    let o = run(&["fmt", "--check", &fixture], dir);
    assert_success(&o);
    fixture
}

#[test]
fn lint_shipped_policies_is_clean() {
    let c = config();
    let o = run(
        &[
            "lint",
            "--config",
            c.to_str().unwrap_or(""),
            "--deny-warnings",
        ],
        root(),
    );
    assert_success(&o);
}

#[test]
fn lint_exit_codes_and_json_schema() {
    let dir = tempfile::tempdir().expect("tempdir");
    let c = config();
    let c = c.to_str().unwrap_or("");
    let warn = write(dir.path(), "warn.policy", "route r {\n  rule a when request.stream { use \"gpt-4o\" }\n  rule b when request.stream and request.tools { use \"smollm\" }\n  default use model\n}\n");
    let bad = write(
        dir.path(),
        "bad.policy",
        "route r {\n  default use \"gpt-4\"\n}\n",
    );
    let w = warn.to_str().unwrap_or("");
    assert_eq!(
        run(&["lint", "--config", c, w], dir.path()).status.code(),
        Some(0)
    );
    assert_eq!(
        run(&["lint", "--config", c, "--deny-warnings", w], dir.path())
            .status
            .code(),
        Some(1)
    );
    let o = run(&["lint", "--config", c, "--format", "json", w], dir.path());
    let v = json(&o);
    assert_eq!(v["schema"], "switchyard.lint/1");
    assert_eq!(v["summary"]["warnings"], 1);
    let d = &v["diagnostics"][0];
    assert_eq!(d["code"], "W0202");
    assert_eq!(d["name"], "shadowed-rule");
    assert_eq!(d["severity"], "warning");
    assert_eq!(
        (d["line"].as_u64(), d["column"].as_u64()),
        (Some(3), Some(8))
    );
    assert!(d["labels"][0]["line"].is_number());

    let o = run(
        &["lint", "--config", c, bad.to_str().unwrap_or("")],
        dir.path(),
    );
    assert_eq!(o.status.code(), Some(1));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("error[E0401]")
            && text.contains("bad.policy:2:15")
            && text.contains("did you mean `gpt-4o`?"),
        "{text}"
    );
    assert!(text.contains("^^^^^^^"), "{text}");

    assert_eq!(
        run(&["lint", "--config", c, "missing.policy"], dir.path())
            .status
            .code(),
        Some(2)
    );
    assert_eq!(
        run(&["lint", "--format", "xml"], dir.path()).status.code(),
        Some(2)
    );
}

#[test]
fn lint_uses_local_switchyard_yaml_and_its_policy_dir() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir(dir.path().join("pol")).expect("mkdir");
    write(dir.path(), "switchyard.yaml", "policies: { dir: pol }\nproviders:\n  mock: { kind: mock }\nmodels:\n  mock: { endpoints: [ { provider: mock, model: mock-1 } ] }\n");
    write(
        &dir.path().join("pol"),
        "a.policy",
        "route r {\n  default use \"mock\"\n}\n",
    );
    let o = run(&["lint"], dir.path());
    assert_success(&o);
}

#[test]
fn fmt_check_lists_files_and_fmt_rewrites() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = write(
        dir.path(),
        "a.policy",
        "route  r {\ndefault   use model\n}\n",
    );
    let ps = p.to_str().unwrap_or("");
    let c = config();
    let c = c.to_str().unwrap_or("");
    let o = run(&["fmt", "--config", c, "--check", ps], dir.path());
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stdout).contains("a.policy"));
    assert_eq!(
        run(&["fmt", "--config", c, ps], dir.path()).status.code(),
        Some(0)
    );
    assert_eq!(
        std::fs::read_to_string(&p).unwrap_or_default(),
        "route r {\n  default use model\n}\n"
    );
    assert_eq!(
        run(&["fmt", "--config", c, "--check", ps], dir.path())
            .status
            .code(),
        Some(0)
    );
    let shipped = root().join("examples/policies");
    assert_eq!(
        run(
            &[
                "fmt",
                "--config",
                c,
                "--check",
                shipped.to_str().unwrap_or("")
            ],
            dir.path()
        )
        .status
        .code(),
        Some(0)
    );
}

/// `fmt` doubled the brackets of 33 nested `(s or X) and true` to 66, past the
/// parser's 64, and wrote a file `lint` refused (E0103).
#[test]
fn fmt_wrote_a_file_nested_past_the_bracket_limit() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut e = "request.stream".to_string();
    for _ in 0..33 {
        e = format!("(request.stream or {e}) and true");
    }
    let p = write(
        dir.path(),
        "nest.policy",
        &format!("route r when {e} {{\n  default use model\n}}\n"),
    );
    let c = config();
    let c = c.to_str().unwrap_or("");
    assert_success(&run(&["fmt", "--config", c, "nest.policy"], dir.path()));
    assert_success(&run(&["lint", "--config", c, "nest.policy"], dir.path()));
    assert_success(&run(
        &["fmt", "--config", c, "--check", "nest.policy"],
        dir.path(),
    ));
    assert!(p.exists());
}

/// The safety net: output that would not parse (here, over the 1 MiB input limit
/// once indented) is not written; fmt names the file and exits 1.
#[test]
fn fmt_writes_nothing_when_its_output_would_not_parse() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rule = "rule a when request.stream { use model }\n";
    let src = format!(
        "route r {{\n{}default use model\n}}\n",
        rule.repeat(((1 << 20) - 64) / rule.len())
    );
    let p = write(dir.path(), "big.policy", &src);
    let c = config();
    let o = run(
        &["fmt", "--config", c.to_str().unwrap_or(""), "big.policy"],
        dir.path(),
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("big.policy") && err.contains("would not parse"),
        "{err}"
    );
    assert_eq!(std::fs::read_to_string(&p).unwrap_or_default(), src);
}

/// `dry-run --config` printed a policy version that changed with the current
/// directory (file names were hashed relative to it), never the one `serve` sends.
#[test]
fn dry_run_policy_version_depended_on_the_current_directory() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir_all(dir.path().join("srv/policies/sub")).expect("mkdir");
    std::fs::create_dir_all(dir.path().join("elsewhere")).expect("mkdir");
    let cfg = write(
        &dir.path().join("srv"),
        "switchyard.yaml",
        "policies:\n  dir: ./policies\nproviders:\n  a: { kind: mock }\nmodels:\n  mock:\n    endpoints:\n      - { name: a/m, provider: a, model: mock-1 }\n",
    );
    write(
        &dir.path().join("srv/policies"),
        "main.policy",
        "route r { default use model }\n",
    );
    write(&dir.path().join("srv/policies/sub"), "x.policy", "# x\n");
    // What `serve` loads and sends as `x-switchyard-policy`.
    let (config, _) = switchyard::config::locate_and_load(Some(&cfg)).expect("config");
    let serve = switchyard::routing::policy::load(&config)
        .expect("the set loads")
        .version;
    let c = cfg.to_str().unwrap_or("");
    let req = r#"{"model":"mock","messages":[{"role":"user","content":"hi"}]}"#;
    for cwd in [
        dir.path().to_path_buf(),
        dir.path().join("srv"),
        dir.path().join("srv/policies"),
        dir.path().join("elsewhere"),
    ] {
        let o = run(
            &[
                "dry-run",
                "--config",
                c,
                "--request",
                req,
                "--format",
                "json",
            ],
            &cwd,
        );
        assert_success(&o);
        assert_eq!(
            json(&o)["policy_version"],
            serve.as_str(),
            "{}",
            cwd.display()
        );
        let o = run(&["lint", "--config", c, "--format", "json"], &cwd);
        assert_success(&o);
        assert_eq!(
            json(&o)["policy_version"],
            serve.as_str(),
            "{}",
            cwd.display()
        );
    }
}

/// `dry-run --stats` took endpoint ids the registry does not have and values
/// outside their ranges (`health: 5`) without a word; an unknown field was
/// already refused. Now all three exit 2 naming the id and field.
#[test]
fn dry_run_stats_accepted_unknown_endpoints_and_out_of_range_values() {
    let dir = tempfile::tempdir().expect("tempdir");
    let c = config();
    let c = c.to_str().unwrap_or("");
    let req = r#"{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}"#;
    let dry_run = |stats: &str| {
        write(dir.path(), "stats.json", stats);
        run(
            &[
                "dry-run",
                "--config",
                c,
                "--request",
                req,
                "--stats",
                "stats.json",
            ],
            dir.path(),
        )
    };
    let o = dry_run(r#"{"openai/gpt4o":{"health":0.5}}"#);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("`openai/gpt4o` is not an endpoint")
            && err.contains("did you mean `openai/gpt-4o`?"),
        "{err}"
    );
    let o = dry_run(r#"{"openai/gpt-4o":{"health":5,"latency_ewma_ms":-1,"quality":{"code":2}}}"#);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    for field in [
        "`health` is 5",
        "`latency_ewma_ms` is -1",
        "`quality.code` is 2",
    ] {
        assert!(err.contains(&format!("`openai/gpt-4o`: {field}")), "{err}");
    }
    let o = dry_run(r#"{"openai/gpt-4o":{"helth":0.5}}"#);
    assert_eq!(o.status.code(), Some(2));
    assert_success(&dry_run(
        r#"{"openai/gpt-4o":{"health":0.5,"error_rate":0,"capacity":1,"quality":{"code":0.9}}}"#,
    ));
}

/// README said files are named relative to the current directory however they
/// were given, but a file outside it (`lint ../ty/t1.policy`) is named by its
/// absolute path: the README now states that rule; this pins it.
#[test]
fn lint_named_a_file_outside_the_cwd_by_its_absolute_path() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir_all(dir.path().join("ty")).expect("mkdir");
    std::fs::create_dir_all(dir.path().join("cwd")).expect("mkdir");
    write(
        &dir.path().join("ty"),
        "t1.policy",
        "route r {\n  default use \"nope\"\n}\n",
    );
    let c = config();
    let c = c.to_str().unwrap_or("");
    let abs = std::fs::canonicalize(dir.path().join("ty/t1.policy")).expect("exists");
    let want = format!("--> {}:2:15", abs.display());
    for (cwd, arg) in [("cwd", "../ty/t1.policy"), ("cwd", "../ty/./t1.policy")] {
        let o = run(&["lint", "--config", c, arg], &dir.path().join(cwd));
        let text = String::from_utf8_lossy(&o.stdout);
        assert!(text.contains(&want), "{arg}: {text}");
    }
    let o = run(&["lint", "--config", c, "./ty/../ty/t1.policy"], dir.path());
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("--> ty/t1.policy:2:15"), "{text}");
}

#[test]
fn dry_run_json_has_the_documented_fields() {
    let dir = tempfile::tempdir().expect("tempdir");
    let req = write(
        dir.path(),
        "req.json",
        r#"{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}"#,
    );
    let c = config();
    let o = run(
        &[
            "dry-run",
            "--config",
            c.to_str().unwrap_or(""),
            "--request",
            req.to_str().unwrap_or(""),
            "--api-key",
            "k1",
            "--format",
            "json",
            "--time",
            "0",
        ],
        dir.path(),
    );
    assert_success(&o);
    let v = json(&o);
    assert_eq!(v["schema"], "switchyard.dry-run/1");
    assert!(v["policy_version"].as_str().is_some_and(|s| s.len() == 16));
    assert_eq!(v["decision"]["rule"], "next_canary");
    assert_eq!(v["decision"]["route"], "gpt4o");
    assert!(v["decision"]["endpoint"].is_string());
    assert!(v["decision"]["strategy"].is_string());
    assert!(v["decision"]["fallbacks"].is_array());
    let trace = v["trace"].as_array().cloned().unwrap_or_default();
    assert!(trace.iter().any(|e| e["kind"] == "condition"
        && e["at"]
            .as_str()
            .is_some_and(|a| a.contains("canary.policy:"))));
    assert!(trace.iter().any(|e| e["kind"] == "split"));
    let o = run(
        &[
            "dry-run",
            "--config",
            c.to_str().unwrap_or(""),
            "--request",
            "nope.json",
        ],
        dir.path(),
    );
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn test_command_exit_codes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let c = config();
    let c = c.to_str().unwrap_or("");
    let shipped = root().join("examples/policies");
    let o = run(
        &["test", "--config", c, shipped.to_str().unwrap_or("")],
        dir.path(),
    );
    assert_success(&o);
    let failing = write(dir.path(), "f.policy", "route r {\n  default use \"gpt-4o\"\n}\n\ntest \"wrong\" {\n  request { model = \"gpt-4o\" }\n  expect endpoint \"azure/gpt-4o\"\n}\n");
    let o = run(
        &["test", "--config", c, failing.to_str().unwrap_or("")],
        dir.path(),
    );
    assert_eq!(o.status.code(), Some(1));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("FAIL wrong") && text.contains("f.policy:7:3"),
        "{text}"
    );
}

/// `test --format json` printed nothing on stdout when the set did not check (a
/// test expecting an unknown model, E0801); now the document comes with the
/// diagnostics, as `lint --format json` gives them, and the exit code stays 1.
#[test]
fn test_format_json_printed_nothing_when_the_set_did_not_check() {
    let dir = tempfile::tempdir().expect("tempdir");
    let c = config();
    let c = c.to_str().unwrap_or("");
    write(
        dir.path(),
        "t.policy",
        "route r {\n  default use model\n}\n\ntest \"bad\" {\n  request { model = \"gpt-4o\" }\n  expect model \"nope\"\n}\n",
    );
    let o = run(
        &["test", "--config", c, "--format", "json", "t.policy"],
        dir.path(),
    );
    assert_eq!(o.status.code(), Some(1));
    let v = json(&o);
    let diags = v["diagnostics"].as_array().expect("diagnostics");
    assert!(
        diags
            .iter()
            .any(|d| d["code"] == "E0801" && d["file"] == "t.policy" && d["line"].is_u64()),
        "{v}"
    );
    assert_eq!(v["cases"], serde_json::json!([]));
    assert_eq!(v["passed"], 0);
    // A set that checks: the same document, with no diagnostics.
    write(
        dir.path(),
        "t.policy",
        "route r {\n  default use model\n}\n",
    );
    let o = run(
        &["test", "--config", c, "--format", "json", "t.policy"],
        dir.path(),
    );
    assert_success(&o);
    assert_eq!(json(&o)["diagnostics"], serde_json::json!([]));
}

#[test]
fn test_command_runs_the_resilience_fixture() {
    // endpoint.context_window (from the config and a stats override), endpoint.circuit
    // in `stats`, and a fallback with `on`, on both engines.
    let dir = tempfile::tempdir().expect("tempdir");
    fixture_passes("resilience.policy", 3, dir.path());
}

#[test]
fn test_command_runs_the_scopes_fixture_and_dry_run_takes_scopes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fixture = fixture_passes("scopes.policy", 3, dir.path());
    let fixture = fixture.as_str();
    let c = config();
    let c = c.to_str().unwrap_or("");
    let o = run(&["lint", "--config", c, fixture], dir.path());
    assert_success(&o);
    // dry-run: `--scope` is repeatable and splits on spaces like a `scope` claim.
    let req = r#"{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}"#;
    let decide = |scopes: &[&str]| {
        let mut args = vec!["dry-run", "--config", c, "--policies", fixture];
        args.extend(["--request", req, "--format", "json"]);
        for s in scopes {
            args.extend(["--scope", s]);
        }
        let o = run(&args, dir.path());
        assert_success(&o);
        let v = json(&o);
        (
            v["decision"]["route"].clone(),
            v["decision"]["rule"].clone(),
        )
    };
    assert_eq!(decide(&["beta"]).0, "beta");
    assert_eq!(decide(&["pro beta"]).1, "pro");
    assert_eq!(decide(&["pro", "beta"]).1, "pro");
    assert_eq!(decide(&["pro"]).0, serde_json::Value::Null);
    assert_eq!(decide(&[]).0, serde_json::Value::Null);
}

#[test]
fn test_command_runs_the_budget_fixture_and_dry_run_takes_budget_remaining() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fixture = fixture_passes("budget.policy", 3, dir.path());
    let fixture = fixture.as_str();
    let c = config();
    let c = c.to_str().unwrap_or("");
    let req = r#"{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}"#;
    let decide = |extra: &[&str]| {
        let mut args = vec!["dry-run", "--config", c, "--policies", fixture];
        args.extend(["--request", req, "--format", "json"]);
        args.extend(extra);
        let o = run(&args, dir.path());
        (o.status.code(), json(&o)["decision"]["rule"].clone())
    };
    assert_eq!(
        decide(&["--budget-remaining", "0.5"]),
        (Some(0), "near_budget".into())
    );
    assert_eq!(
        decide(&["--budget-remaining", "3"]),
        (Some(0), "default".into())
    );
    assert_eq!(decide(&[]), (Some(0), "default".into()));
    let mut args = vec!["dry-run", "--config", c, "--policies", fixture];
    args.extend(["--request", req, "--budget-remaining=-1"]);
    let o = run(&args, dir.path());
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--budget-remaining"));
}

#[test]
fn lint_caps_fallback_chains_with_the_configs_max_attempts() {
    let dir = tempfile::tempdir().expect("tempdir");
    // No config file (the embedded one serves `mock` only): the default cap of 8, said so.
    write(
        dir.path(),
        "a.policy",
        "route r {\n  fallback \"mock\" -> any retries 3\n  default use \"mock\"\n}\n",
    );
    let o = run(&["lint", "a.policy"], dir.path());
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("warning[W0210]")
            && text.contains("server.max_attempts is 8 (the default: lint ran without a config), so any is never tried"),
        "{text}"
    );
    let policy = "route r {\n  fallback \"b\" -> \"c\" retries 3\n  default use \"a\"\n}\n";
    write(dir.path(), "a.policy", policy);
    let models = "models:\n  a: { endpoints: [ { provider: mock, model: a, context_window: 8192 } ] }\n  b: { endpoints: [ { provider: mock, model: b } ] }\n  c: { endpoints: [ { provider: mock, model: c } ] }\n";
    // The local config's cap.
    write(
        dir.path(),
        "switchyard.yaml",
        &format!("server: {{ max_attempts: 12 }}\nproviders:\n  mock: {{ kind: mock }}\n{models}"),
    );
    let o = run(&["lint", "a.policy"], dir.path());
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("0 error(s), 0 warning(s)"), "{text}");
    write(
        dir.path(),
        "switchyard.yaml",
        &format!("server: {{ max_attempts: 4 }}\nproviders:\n  mock: {{ kind: mock }}\n{models}"),
    );
    let o = run(&["lint", "--format", "json", "a.policy"], dir.path());
    let v = json(&o);
    let d = &v["diagnostics"][0];
    assert_eq!(d["code"], "W0210", "{v}");
    assert_eq!(d["name"], "attempts-exceed-cap", "{v}");
    assert!(
        d["message"]
            .as_str()
            .unwrap_or("")
            .contains("server.max_attempts is 4, so \"b\" and \"c\" are never tried"),
        "{v}"
    );
}

#[test]
fn dry_run_reports_a_cache_exact_setting() {
    let dir = tempfile::tempdir().expect("tempdir");
    write(
        dir.path(),
        "a.policy",
        "route r {\n  cache exact ttl 30s\n  default use \"mock\"\n}\n",
    );
    let req = r#"{"model":"mock","messages":[{"role":"user","content":"hi"}]}"#;
    let args = ["dry-run", "--policies", "a.policy", "--request", req];
    let o = run(&args, dir.path());
    let text = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{text}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(text.contains("cache exact ttl 30000ms"), "{text}");
    let o = run(&[&args[..], &["--format", "json"]].concat(), dir.path());
    assert_eq!(
        json(&o)["decision"]["cache"],
        serde_json::json!({"on": true, "ttl_ms": 30000, "exact": true})
    );
}

#[test]
fn test_command_runs_the_off_peak_fixture_and_dry_run_takes_off_peak() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fixture = fixture_passes("off_peak.policy", 3, dir.path());
    let fixture = fixture.as_str();
    let c = config();
    let c = c.to_str().unwrap_or("");
    let req = r#"{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}],"metadata":{"job":"nightly"}}"#;
    let dry_run = |extra: &[&str]| {
        let mut args = vec!["dry-run", "--config", c, "--policies", fixture];
        args.extend(["--request", req]);
        args.extend(extra);
        let o = run(&args, dir.path());
        assert_success(&o);
        o
    };
    let v = json(&dry_run(&["--format", "json"]));
    assert_eq!(v["request"]["off_peak"], false);
    assert_eq!(v["decision"]["rule"], "default");
    assert_eq!(v["decision"]["hold_off_peak"], true);
    assert_eq!(v["decision"]["priority"], "low");
    let v = json(&dry_run(&["--off-peak", "--format", "json"]));
    assert_eq!(v["request"]["off_peak"], true);
    assert_eq!(v["decision"]["rule"], "in_window");
    assert_eq!(v["decision"]["hold_off_peak"], false);
    let text = String::from_utf8_lossy(&dry_run(&[]).stdout).to_string();
    assert!(
        text.contains("  priority low, retries 0, cache default, hold off_peak\n"),
        "{text}"
    );
    let text = String::from_utf8_lossy(&dry_run(&["--off-peak"]).stdout).to_string();
    assert!(
        text.contains("  priority low, retries 0, cache default\n") && !text.contains("hold"),
        "{text}"
    );
}

#[test]
fn lint_not_utf8_gives_a_code_and_a_location() {
    let dir = tempfile::tempdir().expect("tempdir");
    let c = config();
    let p = dir.path().join("latin1.policy");
    std::fs::write(&p, b"route r {\n  # caf\xe9\n  default use model\n}\n").expect("writable");
    let o = run(
        &[
            "lint",
            "--config",
            c.to_str().unwrap_or(""),
            p.to_str().unwrap_or(""),
        ],
        dir.path(),
    );
    let text = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{text}");
    assert!(
        text.contains("error[E0106]")
            && text.contains("latin1.policy:2:8")
            && text.contains("0xE9"),
        "{text}"
    );
}

/// Outside tester (atkB): `lint --format json` and `test --format json` on a file
/// that is not UTF-8 printed the human rendering of E0106 on stdout, not the JSON
/// document: the loader handed the diagnostic up as text. Both documents now carry
/// it like any other diagnostic (every such file, not just the first), exit 1.
#[test]
fn json_formats_printed_human_text_for_a_file_that_is_not_utf8() {
    let dir = tempfile::tempdir().expect("tempdir");
    let c = config();
    let c = c.to_str().unwrap_or("");
    std::fs::write(
        dir.path().join("a.policy"),
        b"route r {\n  # caf\xe9\n  default use model\n}\n",
    )
    .expect("writable");
    std::fs::write(dir.path().join("b.policy"), b"# \xff\n").expect("writable");
    let e0106 = |d: &serde_json::Value, file: &str, line: u64, column: u64| {
        d["code"] == "E0106"
            && d["severity"] == "error"
            && d["file"] == file
            && d["line"] == line
            && d["column"] == column
            && d["message"]
                .as_str()
                .is_some_and(|m| m.contains("not valid UTF-8"))
            && d["labels"].is_array()
            && d.get("suggestion").is_some()
    };
    let files = ["a.policy", "b.policy"];
    let o = run(
        &[&["lint", "--config", c, "--format", "json"], &files[..]].concat(),
        dir.path(),
    );
    assert_eq!(o.status.code(), Some(1));
    let v = json(&o);
    assert_eq!(v["schema"], "switchyard.lint/1");
    assert_eq!(v["summary"]["errors"], 2, "{v}");
    assert!(v["policy_version"].is_null(), "{v}");
    let diags = v["diagnostics"].as_array().expect("diagnostics");
    assert!(e0106(&diags[0], "a.policy", 2, 8), "{v}");
    assert!(e0106(&diags[1], "b.policy", 1, 3), "{v}");
    let o = run(
        &[&["test", "--config", c, "--format", "json"], &files[..]].concat(),
        dir.path(),
    );
    assert_eq!(o.status.code(), Some(1));
    let v = json(&o);
    assert_eq!(v["cases"], serde_json::json!([]));
    let diags = v["diagnostics"].as_array().expect("diagnostics");
    assert_eq!(diags.len(), 2, "{v}");
    assert!(e0106(&diags[0], "a.policy", 2, 8), "{v}");
    // The human format is unchanged.
    let o = run(&["test", "--config", c, "a.policy"], dir.path());
    assert_eq!(o.status.code(), Some(1));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("error[E0106]") && text.contains("a.policy:2:8"),
        "{text}"
    );
}

#[test]
fn lint_deny_warnings_accepts_fallbacks_behind_filtering_strategies() {
    // Regression (issue 19): W0206 said these fallbacks were never tried, though the
    // strategies' `prefer` can drop the endpoints that the fallback adds back.
    let dir = tempfile::tempdir().expect("tempdir");
    let c = config();
    let p = write(
        dir.path(),
        "strategies.policy",
        "route fast when request.stream {\n  fallback \"claude-sonnet\"\n  default use \"claude-sonnet\" via least_latency\n}\n\nroute cheap priority -1 {\n  fallback \"gpt-4o\"\n  default use any via cost_optimized(max_latency = 1s)\n}\n",
    );
    let o = run(
        &[
            "lint",
            "--config",
            c.to_str().unwrap_or(""),
            "--deny-warnings",
            p.to_str().unwrap_or(""),
        ],
        dir.path(),
    );
    assert_success(&o);
}

#[test]
fn test_command_skips_tests_over_the_budget() {
    let dir = tempfile::tempdir().expect("tempdir");
    let c = config();
    let c = c.to_str().unwrap_or("");
    let p = write(
        dir.path(),
        "big.policy",
        "route r {\n  default use \"gpt-4o\"\n}\n\ntest \"many\" {\n  request { model = \"gpt-4o\" }\n  sample 500 by api_key\n  expect share endpoint \"openai/gpt-4o\" = 100% within 1%\n}\n\ntest \"one\" {\n  request { model = \"gpt-4o\" }\n  expect endpoint \"openai/gpt-4o\"\n}\n",
    );
    let p = p.to_str().unwrap_or("");
    let o = run(
        &["test", "--config", c, "--test-budget", "100", p],
        dir.path(),
    );
    let text = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{text}");
    assert!(
        text.contains("SKIP many") && text.contains("PASS one"),
        "{text}"
    );
    assert!(
        text.contains("1 passed, 0 failed, 1 skipped: over the total test budget of 100 requests"),
        "{text}"
    );
    assert_success(&run(
        &["test", "--config", c, "--test-budget", "0", p],
        dir.path(),
    ));
    assert_success(&run(&["test", "--config", c, p], dir.path()));
}

#[test]
fn dry_run_reports_the_engine_that_decided() {
    let dir = tempfile::tempdir().expect("tempdir");
    let c = config();
    let req = r#"{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}"#;
    for (engine, want) in [("interp", "interp"), ("jit", "jit"), ("both", "both")] {
        let o = run(
            &[
                "dry-run",
                "--config",
                c.to_str().unwrap_or(""),
                "--request",
                req,
                "--engine",
                engine,
                "--format",
                "json",
                "--time",
                "0",
            ],
            dir.path(),
        );
        assert_success(&o);
        assert_eq!(json(&o)["engine"], want, "--engine {engine}");
    }
}

#[test]
fn explain_prints_a_code_s_text_and_refuses_an_unknown_code() {
    let o = run(&["explain", "e0401"], root());
    assert_success(&o);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.starts_with("# E0401: unknown logical model"), "{text}");
    assert!(
        text.contains("## Example") && text.contains("## Fix"),
        "{text}"
    );
    let o = run(&["explain"], root());
    assert_success(&o);
    let list = String::from_utf8_lossy(&o.stdout);
    assert!(
        list.lines()
            .any(|l| l.starts_with("W0210  attempts-exceed-cap")),
        "{list}"
    );
    let o = run(&["explain", "X1234"], root());
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("not a Switchyard diagnostic code"), "{err}");
    assert!(
        err.contains("E01xx syntax") && err.contains("W02xx lint warnings"),
        "{err}"
    );
}

#[test]
fn lint_a_file_named_twice_was_read_twice_and_its_routes_defined_twice() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sub = dir.path().join("p");
    std::fs::create_dir(&sub).expect("mkdir");
    let p = write(&sub, "a.policy", "route r {\n  default use model\n}\n");
    let abs = p.to_str().unwrap_or("");
    let c = config();
    let c = c.to_str().unwrap_or("");
    for paths in [
        vec!["p/a.policy", "p/a.policy"],
        vec!["p/a.policy", "./p/a.policy", abs],
        vec!["p", "p/a.policy"],
    ] {
        let mut args = vec!["lint", "--config", c];
        args.extend(&paths);
        let o = run(&args, dir.path());
        assert_success(&o);
        let mut args = vec!["test", "--config", c];
        args.extend(&paths);
        assert_success(&run(&args, dir.path()));
    }
}

/// Found by the policy attack: `fmt` stopped at a file that is not UTF-8 ("cannot
/// read ...: stream did not contain valid UTF-8", exit 2) and formatted none of the
/// files after it, where `lint` reports E0106 at the byte and goes on.
#[test]
fn fmt_stopped_at_a_file_that_is_not_utf8() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bad = dir.path().join("a.policy");
    std::fs::write(&bad, b"# caf\xe9\nroute r {\n  default use model\n}\n").expect("write");
    let good = write(
        dir.path(),
        "b.policy",
        "route  s {\ndefault   use model\n}\n",
    );
    let c = config();
    let c = c.to_str().unwrap_or("");
    let (b, g) = (bad.to_str().unwrap_or(""), good.to_str().unwrap_or(""));
    let o = run(&["fmt", "--config", c, b, g], dir.path());
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("E0106") && err.contains("0xE9"), "{err}");
    assert_eq!(
        std::fs::read_to_string(&good).unwrap_or_default(),
        "route s {\n  default use model\n}\n"
    );
}

/// `fmt` rewrote a file in place (`fs::write`: truncate, then write), so the policy
/// watch of a running gateway could read it empty or half written. The file is now
/// replaced by a rename (a new inode), keeps its permissions, is formatted through
/// a symlink without replacing the link, and no temporary file is left behind.
#[cfg(unix)]
#[test]
fn fmt_rewrote_files_in_place_so_the_watcher_could_see_them_half_written() {
    use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
    let dir = tempfile::tempdir().expect("tempdir");
    let messy = "route  r {\ndefault   use model\n}\n";
    let want = "route r {\n  default use model\n}\n";
    let p = write(dir.path(), "a.policy", messy);
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o640)).expect("chmod");
    let before = std::fs::metadata(&p).expect("stat").ino();
    let store = dir.path().join("store");
    std::fs::create_dir(&store).expect("mkdir");
    let target = write(&store, "b.policy", messy);
    let link = dir.path().join("b.policy");
    std::os::unix::fs::symlink(&target, &link).expect("symlink");
    let c = config();
    let o = run(
        &[
            "fmt",
            "--config",
            c.to_str().unwrap_or(""),
            p.to_str().unwrap_or(""),
            link.to_str().unwrap_or(""),
        ],
        dir.path(),
    );
    assert_success(&o);
    let after = std::fs::metadata(&p).expect("stat");
    assert_eq!(std::fs::read_to_string(&p).unwrap_or_default(), want);
    assert_ne!(
        after.ino(),
        before,
        "replaced by a rename, not written in place"
    );
    assert_eq!(after.permissions().mode() & 0o7777, 0o640);
    assert!(std::fs::symlink_metadata(&link)
        .expect("lstat")
        .file_type()
        .is_symlink());
    assert_eq!(std::fs::read_to_string(&target).unwrap_or_default(), want);
    let mut left: Vec<String> = std::fs::read_dir(dir.path())
        .expect("ls")
        .chain(std::fs::read_dir(&store).expect("ls"))
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, ["a.policy", "b.policy", "b.policy", "store"]);
}

/// Found by the operator attack of 2026-12-07: `switchyard completions bash | true`
/// panicked ("failed to write completion file: BrokenPipe", exit 101): the reader
/// had closed the pipe. A closed pipe now ends the command quietly, exit 0.
#[test]
fn completions_into_a_closed_pipe_panicked() {
    use std::process::Stdio;
    for shell in ["bash", "fish", "zsh"] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_switchyard"))
            .args(["completions", shell])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the binary runs");
        // The reader goes away before reading anything.
        drop(child.stdout.take());
        let out = child.wait_with_output().expect("it ends");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{shell}: {stderr}");
        assert!(!stderr.contains("panicked"), "{shell}: {stderr}");
    }
    let o = run(&["completions", "bash"], root());
    assert_success(&o);
    assert!(String::from_utf8_lossy(&o.stdout).contains("switchyard"));
}

/// Found by the operator attack of 2026-12-07: `health --url 'http://[::1'` said
/// "unhealthy" (exit 1); a URL it cannot use is exit 2, as is a 0 ms deadline.
#[test]
fn health_with_an_unusable_url_exits_2() {
    for args in [
        &["health", "--url", "http://[::1"][..],
        &["health", "--url", "http://::1:80/health"],
        &["health", "--timeout-ms", "0"],
    ] {
        let o = run(args, root());
        assert_eq!(
            o.status.code(),
            Some(2),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
}
