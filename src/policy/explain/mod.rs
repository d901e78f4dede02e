//! The long explanation of every diagnostic code, for `switchyard explain CODE`
//! (like `rustc --explain`): what the code means, an example that produces it and
//! the fix. One markdown file per code in this directory is the only place the
//! text lives; `docs/lint.md` and `docs/policy-language.md` point here.
//!
//! Each file is `# CODE: title`, paragraphs, `## Example` with a ```` ```policy ````
//! block that produces the code when linted against the example registry
//! (`Registry::example`), and `## Fix` with the corrected policy. Codes whose
//! example cannot be written out (a file over 1 MiB, bytes that are not UTF-8)
//! show a ```` ```text ```` description instead; the tests build those inputs.

/// Every explained code with its text, sorted by code.
pub const EXPLANATIONS: &[(&str, &str)] = &[
    ("E0101", include_str!("E0101.md")),
    ("E0102", include_str!("E0102.md")),
    ("E0103", include_str!("E0103.md")),
    ("E0104", include_str!("E0104.md")),
    ("E0105", include_str!("E0105.md")),
    ("E0106", include_str!("E0106.md")),
    ("E0201", include_str!("E0201.md")),
    ("E0202", include_str!("E0202.md")),
    ("E0203", include_str!("E0203.md")),
    ("E0204", include_str!("E0204.md")),
    ("E0205", include_str!("E0205.md")),
    ("E0206", include_str!("E0206.md")),
    ("E0207", include_str!("E0207.md")),
    ("E0301", include_str!("E0301.md")),
    ("E0302", include_str!("E0302.md")),
    ("E0303", include_str!("E0303.md")),
    ("E0304", include_str!("E0304.md")),
    ("E0401", include_str!("E0401.md")),
    ("E0402", include_str!("E0402.md")),
    ("E0501", include_str!("E0501.md")),
    ("E0502", include_str!("E0502.md")),
    ("E0503", include_str!("E0503.md")),
    ("E0601", include_str!("E0601.md")),
    ("E0602", include_str!("E0602.md")),
    ("E0603", include_str!("E0603.md")),
    ("E0604", include_str!("E0604.md")),
    ("E0605", include_str!("E0605.md")),
    ("E0701", include_str!("E0701.md")),
    ("E0801", include_str!("E0801.md")),
    ("E0802", include_str!("E0802.md")),
    ("W0201", include_str!("W0201.md")),
    ("W0202", include_str!("W0202.md")),
    ("W0203", include_str!("W0203.md")),
    ("W0204", include_str!("W0204.md")),
    ("W0205", include_str!("W0205.md")),
    ("W0206", include_str!("W0206.md")),
    ("W0207", include_str!("W0207.md")),
    ("W0208", include_str!("W0208.md")),
    ("W0209", include_str!("W0209.md")),
    ("W0210", include_str!("W0210.md")),
];

/// The code families, for a message about an unknown code.
pub const FAMILIES: &str = "E01xx syntax and limits, E02xx names, E03xx types, E04xx registry references, E05xx values and ranges, E06xx structure, E07xx complexity, E08xx policy tests, W02xx lint warnings";

/// The explanation of `code` (case-insensitive: `e0401` is `E0401`).
pub fn explain(code: &str) -> Option<&'static str> {
    EXPLANATIONS
        .iter()
        .find(|(c, _)| c.eq_ignore_ascii_case(code.trim()))
        .map(|(_, t)| *t)
}

/// The one-line title of an explanation (its first line after `CODE: `).
pub fn title(text: &str) -> &str {
    let first = text.lines().next().unwrap_or("");
    first.split_once(": ").map_or(first, |(_, t)| t)
}

/// The ```` ```policy ```` blocks of an explanation, in order: the example, then the
/// fixed policy.
pub fn policy_blocks(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur: Option<String> = None;
    for line in text.lines() {
        match (&mut cur, line.trim_end()) {
            (None, "```policy") => cur = Some(String::new()),
            (Some(_), "```") => out.extend(cur.take()),
            (Some(b), l) => {
                b.push_str(l);
                b.push('\n');
            }
            (None, _) => {}
        }
    }
    out
}

#[cfg(test)]
mod tests;
