//! The embedded default configuration, used when neither `--config` nor
//! `./switchyard.yaml` exists, so that `switchyard serve` answers at once.
//!
//! Providers are enabled by the presence of their usual API-key variables
//! (`OPENAI_API_KEY`, `ANTHROPIC_API_KEY`, `GEMINI_API_KEY`). The in-process mock
//! provider always serves the logical model `mock` (it costs nothing), so the README's
//! first request works whatever keys the shell holds.

use super::{parse_str, Config};

/// The environment variables that enable a real provider in the embedded default.
pub const PROVIDER_KEY_VARS: [&str; 3] = ["OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY"];

/// Builds the embedded default config from the environment, via `has_var`.
///
/// Returns the config and the one-line summary logged at startup, which names every
/// model the config serves.
pub fn embedded(has_var: impl Fn(&str) -> bool) -> (Config, String) {
    let mut providers = String::new();
    let mut models = String::new();
    let mut enabled = Vec::new();
    if has_var("OPENAI_API_KEY") {
        providers.push_str("  openai: { kind: openai, api_key_env: OPENAI_API_KEY }\n");
        models.push_str(
            "  gpt-4o-mini: { endpoints: [ { provider: openai, model: gpt-4o-mini } ] }\n",
        );
        models.push_str("  gpt-4o: { endpoints: [ { provider: openai, model: gpt-4o } ] }\n");
        enabled.push("openai (gpt-4o-mini, gpt-4o)");
    }
    if has_var("ANTHROPIC_API_KEY") {
        providers.push_str("  anthropic: { kind: anthropic, api_key_env: ANTHROPIC_API_KEY }\n");
        models.push_str("  claude-sonnet: { endpoints: [ { provider: anthropic, model: claude-sonnet-4-20250514 } ] }\n");
        models.push_str("  claude-haiku: { endpoints: [ { provider: anthropic, model: claude-3-5-haiku-latest } ] }\n");
        enabled.push("anthropic (claude-sonnet, claude-haiku)");
    }
    if has_var("GEMINI_API_KEY") {
        providers.push_str("  gemini: { kind: gemini, api_key_env: GEMINI_API_KEY }\n");
        models.push_str(
            "  gemini-flash: { endpoints: [ { provider: gemini, model: gemini-2.0-flash } ] }\n",
        );
        enabled.push("gemini (gemini-flash)");
    }
    providers.push_str("  mock: { kind: mock }\n");
    models.push_str("  mock: { endpoints: [ { provider: mock, model: mock-1 } ] }\n");
    let summary = if enabled.is_empty() {
        format!(
            "no config file and none of {} set: serving model \"mock\" (the built-in mock provider)",
            PROVIDER_KEY_VARS.join(", ")
        )
    } else {
        format!(
            "no config file: serving model \"mock\" (the built-in mock provider) and {}",
            enabled.join(", ")
        )
    };
    let text = format!("providers:\n{providers}models:\n{models}");
    // The text is built here from fixed pieces; a failure is a bug caught by the tests.
    let mut config = parse_str(&text, None).unwrap_or_else(|e| panic!("embedded config: {e}"));
    config.source = "<embedded default>".to_string();
    config.policies.dir = None;
    (config, summary)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ProviderKind;

    #[test]
    fn mock_when_no_keys() {
        let (c, line) = embedded(|_| false);
        assert_eq!(c.providers.len(), 1);
        assert_eq!(c.providers[0].kind, ProviderKind::Mock);
        assert!(c.model("mock").is_some());
        assert!(line.contains("mock"));
    }

    #[test]
    fn every_provider_when_all_keys() {
        let (c, line) = embedded(|_| true);
        assert_eq!(c.providers.len(), 4);
        assert!(c.model("claude-sonnet").is_some());
        assert!(line.contains("gemini"));
    }

    /// Issue 18: with `OPENAI_API_KEY` in the shell the built-in config dropped `mock`,
    /// so the README's first request got a 404.
    #[test]
    fn built_in_config_serves_mock_even_with_a_provider_key_set() {
        let (c, line) = embedded(|v| v == "OPENAI_API_KEY");
        assert!(c.model("mock").is_some());
        assert!(c.model("gpt-4o-mini").is_some());
        assert!(line.contains("\"mock\""), "{line}");
        assert!(line.contains("gpt-4o-mini, gpt-4o"), "{line}");
    }
}
