//! `switchyard explain [CODE]`: the long description of a diagnostic code, with an
//! example and the fix (the text is in `src/policy/explain/`). Without a code, the
//! list of codes with their titles.
//!
//! Exit codes: 0 explained (or listed), 2 an unknown code.

use std::process::ExitCode;

use super::policy::say;
use crate::policy::explain::{explain, title, EXPLANATIONS, FAMILIES};

/// `switchyard explain` arguments.
#[derive(Debug, clap::Args)]
pub struct ExplainArgs {
    /// A diagnostic code such as `E0401` or `W0206` (case-insensitive); without it,
    /// every code is listed.
    pub code: Option<String>,
}

/// Runs `switchyard explain`.
pub fn run(a: &ExplainArgs) -> ExitCode {
    let Some(code) = &a.code else {
        for (c, text) in EXPLANATIONS {
            say!("{c}  {}\n", title(text));
        }
        return ExitCode::SUCCESS;
    };
    match explain(code) {
        Some(text) => {
            say!("{text}");
            ExitCode::SUCCESS
        }
        None => {
            let guess = crate::suggest::did_you_mean(
                &code.to_ascii_uppercase(),
                EXPLANATIONS.iter().map(|(c, _)| *c),
            );
            let hint = guess
                .map(|g| format!(" (did you mean `{g}`?)"))
                .unwrap_or_default();
            eprintln!(
                "error: `{code}` is not a Switchyard diagnostic code{hint}; codes are {FAMILIES}; `switchyard explain` lists them all"
            );
            ExitCode::from(2)
        }
    }
}
