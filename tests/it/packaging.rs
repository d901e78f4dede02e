//! Packaging (issue 16 part 6): `${VAR}` substitution in the config, the container
//! image's configs, `switchyard health` (the image's healthcheck) and shell
//! completions.

use std::path::Path;
use std::process::{Command, Output};

use crate::common::*;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Runs the binary in `cwd` with extra environment variables.
fn switchyard(args: &[&str], cwd: &Path, env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_switchyard"));
    c.args(args).current_dir(cwd).env("SWITCHYARD_LOG", "warn");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("the binary runs")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A config in a fresh directory; the directory lives as long as the guard.
fn config_dir(yaml: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("switchyard.yaml"), yaml).unwrap();
    dir
}

const WITH_VARS: &str = "server: { listen: \"${SY_PKG_LISTEN:-127.0.0.1:0}\", max_body_bytes: \"${SY_PKG_MAX_BODY}\" }\nproviders:\n  p: { kind: openai-compatible, base_url: \"http://${SY_PKG_HOST}:9/v1\" }\nmodels:\n  m: { endpoints: [ { provider: p, model: x } ] }\n";

#[test]
fn an_unset_variable_is_an_error_naming_the_value_and_the_variable() {
    let dir = config_dir(WITH_VARS);
    let o = switchyard(
        &["serve", "--check", "-c", "switchyard.yaml"],
        dir.path(),
        &[("SY_PKG_MAX_BODY", "4096")],
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let t = text(&o);
    assert!(t.contains("providers.p.base_url"), "{t}");
    assert!(t.contains("`SY_PKG_HOST` is not set"), "{t}");
    // The default of the other one applied: no complaint about server.listen.
    assert!(!t.contains("server.listen"), "{t}");
}

#[test]
fn a_whole_value_reference_keeps_its_type() {
    let dir = config_dir(WITH_VARS);
    let ok = switchyard(
        &["serve", "--check", "-c", "switchyard.yaml"],
        dir.path(),
        &[("SY_PKG_MAX_BODY", "4096"), ("SY_PKG_HOST", "127.0.0.1")],
    );
    assert_eq!(ok.status.code(), Some(0), "{}", text(&ok));
    // Not a number: the ordinary type error at the value's path.
    let bad = switchyard(
        &["serve", "--check", "-c", "switchyard.yaml"],
        dir.path(),
        &[("SY_PKG_MAX_BODY", "lots"), ("SY_PKG_HOST", "127.0.0.1")],
    );
    assert_eq!(bad.status.code(), Some(1), "{}", text(&bad));
    assert!(
        text(&bad).contains("server.max_body_bytes"),
        "{}",
        text(&bad)
    );
}

#[tokio::test]
async fn a_substituted_limit_is_the_one_enforced() {
    let dir = config_dir(WITH_VARS);
    let mut child = Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .args(["serve", "-c", "switchyard.yaml"])
        .current_dir(dir.path())
        .env("SWITCHYARD_LOG", "warn")
        .env("SY_PKG_MAX_BODY", "2048")
        .env("SY_PKG_HOST", "127.0.0.1")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let addr = {
        use std::io::BufRead;
        let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
        loop {
            let line = lines.next().expect("a listening line").unwrap();
            if let Some(a) = line.trim().strip_prefix("switchyard listening on") {
                break a.trim().to_string();
            }
        }
    };
    let big = chat("m", false, &format!(r#","user":"{}""#, "y".repeat(3000)));
    let r = post(&format!("http://{addr}/v1/chat/completions"), &big).await;
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(r.status, 413, "{}", r.text());
}

#[test]
fn the_container_configs_pass_serve_check() {
    let deploy = root().join("deploy");
    for file in ["switchyard.yaml", "compose.switchyard.yaml"] {
        let o = switchyard(
            &["serve", "--check", "-c", file],
            &deploy,
            &[("UPSTREAM_BASE_URL", "http://127.0.0.1:9/v1")],
        );
        assert_eq!(o.status.code(), Some(0), "{file}: {}", text(&o));
    }
    // The Dockerfile's healthcheck and entrypoint name commands that exist.
    let dockerfile = std::fs::read_to_string(root().join("Dockerfile")).unwrap();
    assert!(dockerfile.contains(r#"CMD ["switchyard", "health""#));
    assert!(dockerfile.contains("USER 10001"));
    assert!(dockerfile.contains("COPY deploy/switchyard.yaml"));
}

#[tokio::test]
async fn health_exits_0_on_a_serving_gateway_and_1_on_a_closed_port() {
    let m = mock(&[]);
    let gw = serve(&config(
        &[("p", &m)],
        "",
        "  m: { endpoints: [ { provider: p, model: x } ] }\n",
    ));
    let cwd = std::env::temp_dir();
    let up = switchyard(&["health", "--url", &gw.url("/health")], &cwd, &[]);
    assert_eq!(up.status.code(), Some(0), "{}", text(&up));
    let ready = switchyard(&["health", "--url", &gw.url("/ready")], &cwd, &[]);
    assert_eq!(ready.status.code(), Some(0), "{}", text(&ready));
    // Another status is unhealthy.
    let missing = switchyard(&["health", "--url", &gw.url("/nope")], &cwd, &[]);
    assert_eq!(missing.status.code(), Some(1), "{}", text(&missing));
    assert!(text(&missing).contains("HTTP 404"), "{}", text(&missing));
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let down = switchyard(
        &[
            "health",
            "--url",
            &format!("http://{closed}/health"),
            "--timeout-ms",
            "1000",
        ],
        &cwd,
        &[],
    );
    assert_eq!(down.status.code(), Some(1), "{}", text(&down));
    assert!(text(&down).starts_with("unhealthy:"), "{}", text(&down));
    let bad = switchyard(&["health", "--url", "https://x/health"], &cwd, &[]);
    assert_eq!(bad.status.code(), Some(2), "{}", text(&bad));
}

#[test]
fn completions_are_generated_for_each_shell() {
    let cwd = std::env::temp_dir();
    for (shell, marker) in [
        ("bash", "complete -F"),
        ("zsh", "#compdef switchyard"),
        ("fish", "complete -c switchyard"),
    ] {
        let o = switchyard(&["completions", shell], &cwd, &[]);
        assert_eq!(o.status.code(), Some(0), "{shell}: {}", text(&o));
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(out.contains(marker), "{shell}: {out}");
        for sub in ["serve", "dry-run", "keys", "health"] {
            assert!(out.contains(sub), "{shell} completes {sub}");
        }
    }
    let o = switchyard(&["completions", "tcsh"], &cwd, &[]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
}

/// The profile-guided release build (`scripts/rustc-pgo`, `.cargo/config.toml`): the
/// wrapper run with a stand-in rustc that prints its arguments (and an LLVM version
/// for `-vV`), so each case shows which flags a real compilation would get.
mod profile_guided_build {
    use super::root;
    use std::process::Command;

    /// The arguments the stand-in rustc was run with, one per line, for wrapper
    /// arguments `args` with the stand-in reporting LLVM `llvm` and `env` set.
    fn wrapped(args: &[&str], llvm: u32, env: &[(&str, &str)]) -> Vec<String> {
        wrapped_by(args, llvm, "1.95.0", env).0
    }

    /// [`wrapped`], with the stand-in reporting rustc `release`; also what the
    /// wrapper wrote to stderr.
    fn wrapped_by(
        args: &[&str],
        llvm: u32,
        release: &str,
        env: &[(&str, &str)],
    ) -> (Vec<String>, String) {
        let dir = tempfile::tempdir().unwrap();
        let fake = dir.path().join("rustc");
        std::fs::write(
            &fake,
            format!(
                "#!/bin/sh\nif [ \"$1\" = -vV ]; then echo 'rustc {release} (0123456789 2026-04-14)'; echo 'LLVM version: {llvm}.1.2'; exit 0; fi\nfor a in \"$@\"; do echo \"$a\"; done\n"
            ),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut c = Command::new(root().join("scripts/rustc-pgo"));
        c.arg(&fake).args(args).env_remove("SWITCHYARD_PGO");
        for (k, v) in env {
            c.env(k, v);
        }
        let o = c.output().expect("the wrapper runs");
        let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
        assert!(o.status.success(), "{stderr}");
        let args = String::from_utf8(o.stdout)
            .unwrap()
            .lines()
            .map(str::to_owned)
            .collect();
        (args, stderr)
    }

    const RELEASE: [&str; 5] = ["--crate-name", "hyper", "-C", "opt-level=3", "src/lib.rs"];

    fn profile_flag() -> String {
        let dir = root().join("pgo").canonicalize().unwrap();
        format!(
            "-Cprofile-use={}",
            dir.join("switchyard.profdata").display()
        )
    }

    fn llvm_major() -> u32 {
        let t = std::fs::read_to_string(root().join("pgo/llvm-major")).unwrap();
        t.trim().parse().expect("pgo/llvm-major holds a number")
    }

    #[test]
    fn the_committed_profile_is_an_indexed_llvm_profile() {
        let bytes = std::fs::read(root().join("pgo/switchyard.profdata")).unwrap();
        // llvm-profdata's indexed format starts with this magic (InstrProf.h).
        assert!(
            bytes.starts_with(b"\xfflprofi\x81"),
            "not an indexed profile"
        );
        assert!(
            bytes.len() > 100_000,
            "{} bytes: an empty training?",
            bytes.len()
        );
        assert!(llvm_major() >= 19);
    }

    /// SHA-256 of `bytes`, in lowercase hex (as `sha256sum` prints it).
    fn sha256(bytes: &[u8]) -> String {
        let d = ring::digest::digest(&ring::digest::SHA256, bytes);
        d.as_ref().iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Cargo hashes the dependency set into every crate's symbol names, and the
    /// profile finds functions by name: recorded before a dependency or a feature
    /// changed, it matches nothing in the crates that depend on it (measured: a
    /// profile applied to a source whose only dependency change was one serde
    /// feature kept 2,800 of the 16,600 instructions per JSON request it saves).
    /// So a change to `Cargo.lock` or to `Cargo.toml` (beyond comments) fails here
    /// until the profile is recorded again (`benches/load/pgo.sh --save`).
    #[test]
    fn the_profile_was_recorded_with_this_dependency_set() {
        let recorded = std::fs::read_to_string(root().join("pgo/recorded-with")).unwrap();
        let lock = std::fs::read(root().join("Cargo.lock")).unwrap();
        let manifest = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
        let mut kept = String::new();
        for line in manifest.lines() {
            let t = line.trim_start();
            if !t.is_empty() && !t.starts_with('#') {
                kept.push_str(line);
                kept.push('\n');
            }
        }
        let stale = "the profile in pgo/ was recorded with other dependencies: run \
                     benches/load/pgo.sh --save and commit pgo/ (README, \"Two commands\")";
        assert!(
            recorded.contains(&format!("Cargo.lock {}\n", sha256(&lock))),
            "Cargo.lock changed; {stale}"
        );
        assert!(
            recorded.contains(&format!("Cargo.toml {}\n", sha256(kept.as_bytes()))),
            "Cargo.toml changed; {stale}"
        );
    }

    /// A toolchain other than the one the profile was recorded with voided it
    /// silently: cargo hashes the toolchain into the symbol names the profile is
    /// matched by, so the build was about as fast as one without a profile and
    /// nothing said so. The wrapper now warns when this package's crates compile.
    #[test]
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    fn another_toolchain_voided_the_profile_silently() {
        let recorded = std::fs::read_to_string(root().join("pgo/recorded-with")).unwrap();
        let recorded = recorded
            .lines()
            .find_map(|l| l.strip_prefix("rustc "))
            .and_then(|v| v.split_whitespace().next())
            .expect("pgo/recorded-with names the rustc")
            .to_string();
        let ours = [
            "--crate-name",
            "switchyard",
            "-C",
            "opt-level=3",
            "src/lib.rs",
        ];
        let (args, said) = wrapped_by(&ours, llvm_major(), "9.99.0", &[]);
        assert!(args.contains(&profile_flag()), "{args:?}");
        assert!(
            said.starts_with(&format!(
                "warning: pgo/switchyard.profdata was recorded with rustc {recorded}, this is rustc 9.99.0"
            )) && said.contains("benches/load/pgo.sh --save"),
            "{said}"
        );
        // The recorded toolchain, or another crate: nothing is said.
        let (_, said) = wrapped_by(&ours, llvm_major(), &recorded, &[]);
        assert_eq!(said, "");
        let (_, said) = wrapped_by(&RELEASE, llvm_major(), "9.99.0", &[]);
        assert_eq!(said, "");
    }

    #[test]
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    fn an_optimized_compilation_gets_the_committed_profile() {
        let args = wrapped(&RELEASE, llvm_major(), &[]);
        assert_eq!(&args[..5], &RELEASE[..]);
        assert_eq!(args[5], profile_flag());
        assert_eq!(args[6], "-Cllvm-args=-no-pgo-warn-mismatch");
        assert_eq!(args.len(), 7);
        // A newer LLVM reads an older profile.
        let newer = wrapped(&RELEASE, llvm_major() + 1, &[]);
        assert!(newer.contains(&profile_flag()), "{newer:?}");
        // The target named as the host is.
        let named = [&RELEASE[..], &["--target=x86_64-unknown-linux-gnu"]].concat();
        let named = wrapped(&named, llvm_major(), &[]);
        assert!(named.contains(&profile_flag()), "{named:?}");
    }

    #[test]
    fn every_other_compilation_passes_through_unchanged() {
        let debug = [
            "--crate-name",
            "switchyard",
            "-C",
            "debuginfo=2",
            "src/lib.rs",
        ];
        let generate = [&RELEASE[..], &["-Cprofile-generate=/tmp/p"]].concat();
        let own_profile = [&RELEASE[..], &["-Cprofile-use=/tmp/x.profdata"]].concat();
        let other_target = [&RELEASE[..], &["--target", "aarch64-unknown-linux-gnu"]].concat();
        for (args, env) in [
            (&debug[..], &[][..]),
            (&generate[..], &[][..]),
            (&own_profile[..], &[][..]),
            (&other_target[..], &[][..]),
            (&RELEASE[..], &[("SWITCHYARD_PGO", "off")][..]),
        ] {
            assert_eq!(wrapped(args, llvm_major(), env), args, "{env:?}");
        }
        // An older LLVM than the profile's may not read its format.
        assert_eq!(wrapped(&RELEASE, llvm_major() - 1, &[]), RELEASE);
        // cargo's own queries.
        assert_eq!(
            wrapped(&["-vV"], 22, &[]),
            [
                "rustc 1.95.0 (0123456789 2026-04-14)",
                "LLVM version: 22.1.2"
            ]
        );
    }
}
