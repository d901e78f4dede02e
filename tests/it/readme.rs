//! The README, run as written (issue 18, "the first hour of a new user"): every config
//! block that is a whole config passes `serve --check` copied into an empty directory,
//! the policy-tool commands run at the repository root, and the example ports do not
//! clash.

use std::path::Path;
use std::process::Command;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn readme() -> String {
    std::fs::read_to_string(root().join("README.md")).expect("README.md")
}

/// The fenced code blocks of `text` whose info string is `lang`, in order.
fn blocks(text: &str, lang: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        let fence = line.trim_start().strip_prefix("```");
        match (&mut current, fence) {
            (None, Some(info)) if info.trim() == lang => current = Some(String::new()),
            (Some(_), Some(_)) => out.extend(current.take()),
            (Some(b), None) => {
                b.push_str(line);
                b.push('\n');
            }
            _ => {}
        }
    }
    out
}

/// A block that is a whole config (not a fragment of one): it has both top-level
/// `providers:` and `models:`.
fn is_whole_config(block: &str) -> bool {
    let top = |k: &str| block.lines().any(|l| l.starts_with(k));
    top("providers:") && top("models:")
}

/// Issue 18: the README's reference `switchyard.yaml` failed when copied as is
/// (`quality.leaderboard: cannot read ./leaderboard.yaml`; `policies.dir` must exist).
#[test]
fn every_readme_config_passes_serve_check_copied_into_an_empty_directory() {
    let configs: Vec<String> = blocks(&readme(), "yaml")
        .into_iter()
        .filter(|b| is_whole_config(b))
        .collect();
    assert!(configs.len() >= 6, "found only {} configs", configs.len());
    for config in configs {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("switchyard.yaml"), &config).unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_switchyard"));
        cmd.args(["serve", "--check", "--config", "switchyard.yaml"])
            .current_dir(dir.path())
            .env("HOME", dir.path());
        for var in ["OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY"] {
            cmd.env_remove(var);
        }
        // The Bedrock example says it needs AWS credentials; give it some.
        cmd.env("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE").env(
            "AWS_SECRET_ACCESS_KEY",
            "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
        );
        let out = cmd.output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "README config fails `serve --check`:\n{config}\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// Issue 18: the policy-tool commands of "The policy language" ran against
/// `policies/`, which any config at the repository root loaded by default; they now
/// name `examples/policies/` and its own registry, and run as written.
#[test]
fn the_readme_policy_tool_commands_run_at_the_repository_root() {
    let block = blocks(&readme(), "sh")
        .into_iter()
        .find(|b| b.contains("switchyard lint") && b.contains("switchyard dry-run"))
        .expect("the policy tools block");
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_switchyard"))
        .parent()
        .unwrap();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new("sh")
        .args(["-ec", &block])
        .current_dir(root())
        .env("PATH", path)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{block}\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("\"decision\"") || stdout.contains("decision"),
        "{stdout}"
    );
}

/// Issue 19: the `switchyard explain` commands of "Editor support" run as written.
#[test]
fn the_readme_explain_commands_run() {
    let block = blocks(&readme(), "sh")
        .into_iter()
        .find(|b| b.contains("switchyard explain"))
        .expect("the explain block");
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_switchyard"))
        .parent()
        .unwrap();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new("sh")
        .args(["-ec", &block])
        .current_dir(root())
        .env("PATH", path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{block}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("# W0206: unused-target"), "{stdout}");
    assert!(stdout.contains("E0101  syntax error"), "{stdout}");
}

/// Issue 18: the README's mock example and its llama.cpp example both used port 8081.
#[test]
fn readme_example_upstream_ports_do_not_clash() {
    let text = readme();
    let port_after = |s: &str, marker: &str| -> Vec<String> {
        s.match_indices(marker)
            .map(|(i, _)| {
                s[i + marker.len()..]
                    .chars()
                    .take_while(char::is_ascii_digit)
                    .collect::<String>()
            })
            .filter(|p| !p.is_empty())
            .collect()
    };
    let mock_ports = port_after(&text, "mock --listen 127.0.0.1:");
    let upstream_ports = port_after(&text, "base_url: http://127.0.0.1:");
    assert!(!mock_ports.is_empty() && !upstream_ports.is_empty());
    for p in &upstream_ports {
        assert!(
            !mock_ports.contains(p),
            "port {p} is both a mock's and a base_url's"
        );
        assert_ne!(p, "8080", "a base_url on Switchyard's own port");
    }
}

/// Issue 18: the README says Apache-2.0, but there was no `LICENSE` file.
#[test]
fn the_licence_the_readme_names_is_in_the_repository() {
    assert!(readme().contains("License: Apache-2.0 (`LICENSE`)"));
    let licence = std::fs::read_to_string(root().join("LICENSE")).expect("LICENSE");
    assert!(licence.contains("Apache License"));
    assert!(licence.contains("Version 2.0, January 2004"));
    assert!(licence.contains("END OF TERMS AND CONDITIONS"));
    let cargo = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    assert!(cargo.contains("license = \"Apache-2.0\""));
}
