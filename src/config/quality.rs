//! `quality:` section: benchmark scores per model and task category, read from a
//! leaderboard file (seed 001, "Routing Strategies" item 4: "an internal leaderboard
//! refreshed weekly from standardized evaluations").
//!
//! The file is YAML, `model → task category → score in [0, 1]`:
//!
//! ```yaml
//! gpt-4o-2024-11-20: { chat: 0.92, code: 0.85, tool_use: 0.88 }
//! claude-sonnet:     { chat: 0.90, code: 0.93, tool_use: 0.91 }
//! ```
//!
//! A model key is matched against an endpoint's upstream model id first (`model:` or
//! `deployment:` of the endpoint), then against its logical model name, so one line
//! can cover every endpoint of a logical model and a specific upstream version can
//! override it. Categories are those of the request classifier: `chat`, `code`,
//! `tool_use`. Relative paths are resolved against the config file's directory. The
//! file is read when the config is loaded (startup and `serve --check`); every problem
//! is reported under `quality.leaderboard`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_yaml::Value;

use crate::suggest::did_you_mean;

/// The task categories the request classifier produces (`request.task`).
pub const TASK_CATEGORIES: [&str; 3] = ["chat", "code", "tool_use"];

/// Largest leaderboard file read, in bytes.
pub const MAX_LEADERBOARD_BYTES: u64 = 4 * 1024 * 1024;

/// Scores by model, then task category; each in [0, 1].
pub type Leaderboard = BTreeMap<String, BTreeMap<String, f64>>;

/// `quality:` section.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct QualityConfig {
    /// The leaderboard file (`leaderboard`), resolved against the config's directory.
    pub leaderboard: Option<PathBuf>,
    /// Its scores (empty without a file).
    pub scores: Leaderboard,
}

impl QualityConfig {
    /// The scores for an endpoint serving `upstream_model` for logical model `model`:
    /// the upstream model's entry if the leaderboard has one, else the logical
    /// model's, else none.
    pub fn scores_for(&self, upstream_model: &str, model: &str) -> Option<&BTreeMap<String, f64>> {
        self.scores
            .get(upstream_model)
            .or_else(|| self.scores.get(model))
    }
}

/// Reads and validates the leaderboard at `path`; problems are sentences (the caller
/// prefixes the config path).
///
/// # Errors
/// Every problem found: unreadable or oversized file, YAML errors, non-mapping
/// entries, unknown categories (with a suggestion), scores that are not numbers in
/// [0, 1].
pub fn read_leaderboard(path: &Path) -> Result<Leaderboard, Vec<String>> {
    let shown = path.display();
    let meta = std::fs::metadata(path).map_err(|e| vec![format!("cannot read {shown}: {e}")])?;
    if meta.len() > MAX_LEADERBOARD_BYTES {
        return Err(vec![format!(
            "{shown} is larger than {MAX_LEADERBOARD_BYTES} bytes"
        )]);
    }
    let text =
        std::fs::read_to_string(path).map_err(|e| vec![format!("cannot read {shown}: {e}")])?;
    parse_leaderboard(&text)
        .map_err(|errs| errs.into_iter().map(|e| format!("{shown}: {e}")).collect())
}

/// Parses leaderboard YAML text (see the module docs).
///
/// # Errors
/// Every problem found, each naming `model.category`.
pub fn parse_leaderboard(text: &str) -> Result<Leaderboard, Vec<String>> {
    let root: Value =
        serde_yaml::from_str(text).map_err(|e| vec![format!("not valid YAML: {e}")])?;
    let mut out = Leaderboard::new();
    let mut errors = Vec::new();
    let map = match root {
        Value::Mapping(m) => m,
        Value::Null => return Ok(out),
        _ => {
            return Err(vec![
                "expected a mapping of model → task category → score".to_string()
            ])
        }
    };
    for (model, cats) in map {
        let Some(model) = model.as_str().map(str::to_string) else {
            errors.push("model names must be strings".to_string());
            continue;
        };
        let Value::Mapping(cats) = cats else {
            errors.push(format!(
                "{model}: expected a mapping of task category → score, like {{ chat: 0.9 }}"
            ));
            continue;
        };
        let mut scores = BTreeMap::new();
        for (cat, score) in cats {
            let Some(cat) = cat.as_str() else {
                errors.push(format!("{model}: task categories must be strings"));
                continue;
            };
            if !TASK_CATEGORIES.contains(&cat) {
                let hint = did_you_mean(cat, TASK_CATEGORIES.iter().copied())
                    .map(|s| format!(" (did you mean \"{s}\"?)"))
                    .unwrap_or_else(|| {
                        format!(" (expected one of: {})", TASK_CATEGORIES.join(", "))
                    });
                errors.push(format!(
                    "{model}.{cat}: unknown task category \"{cat}\"{hint}"
                ));
                continue;
            }
            match score.as_f64() {
                Some(s) if (0.0..=1.0).contains(&s) => {
                    scores.insert(cat.to_string(), s);
                }
                Some(s) => errors.push(format!(
                    "{model}.{cat}: {s} is out of range (expected 0 to 1)"
                )),
                None => errors.push(format!("{model}.{cat}: expected a number from 0 to 1")),
            }
        }
        out.insert(model, scores);
    }
    if errors.is_empty() {
        Ok(out)
    } else {
        Err(errors)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_scores() {
        let lb =
            parse_leaderboard("gpt-4o: { chat: 0.9, code: 0.8 }\nsmol: { tool_use: 0 }\n").unwrap();
        assert_eq!(lb["gpt-4o"]["code"], 0.8);
        assert_eq!(lb["smol"]["tool_use"], 0.0);
        assert_eq!(parse_leaderboard("").unwrap().len(), 0);
    }

    #[test]
    fn reports_every_problem() {
        let errs = parse_leaderboard("a: { chat: 1.5, cod: 0.5 }\nb: 3\nc: { tool_use: high }\n")
            .unwrap_err();
        let want = [
            "a.chat: 1.5 is out of range (expected 0 to 1)",
            "a.cod: unknown task category \"cod\" (did you mean \"code\"?)",
            "b: expected a mapping",
            "c.tool_use: expected a number from 0 to 1",
        ];
        for w in want {
            assert!(
                errs.iter().any(|e| e.starts_with(w)),
                "missing {w:?} in {errs:#?}"
            );
        }
        assert!(parse_leaderboard("[1, 2]").is_err());
        assert!(parse_leaderboard("a: {").unwrap_err()[0].starts_with("not valid YAML"));
    }

    #[test]
    fn upstream_model_wins_over_logical_model() {
        let q = QualityConfig {
            leaderboard: None,
            scores: parse_leaderboard("gpt-4o: { chat: 0.9 }\ngpt-4o-2024-11-20: { chat: 0.95 }")
                .unwrap(),
        };
        assert_eq!(
            q.scores_for("gpt-4o-2024-11-20", "gpt-4o").unwrap()["chat"],
            0.95
        );
        assert_eq!(q.scores_for("gpt-4o-prod", "gpt-4o").unwrap()["chat"], 0.9);
        assert!(q.scores_for("x", "y").is_none());
    }

    #[test]
    fn missing_file_is_one_error() {
        let errs = read_leaderboard(Path::new("/nonexistent/leaderboard.yaml")).unwrap_err();
        assert_eq!(errs.len(), 1);
        assert!(
            errs[0].starts_with("cannot read /nonexistent/leaderboard.yaml"),
            "{errs:?}"
        );
    }
}
