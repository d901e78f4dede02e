//! "Did you mean" suggestions for misspelt names in config and policy files.
//!
//! Uses the optimal string alignment distance (Levenshtein's insertions, deletions and
//! substitutions, plus a swap of two adjacent characters as one edit, so `mokc` is one
//! edit from `mock`, as in rustc's suggestions); a candidate is suggested when it is
//! within a third of the word's length (at least 1, at most 3 edits), the usual rule of
//! thumb used by compilers such as rustc for identifier suggestions.

/// Edit distance between `a` and `b`, by chars: insertions, deletions, substitutions
/// and transpositions of two adjacent chars each cost 1 (the optimal string
/// alignment distance: no substring is edited twice).
pub fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    // Three rows of the dynamic programme: i - 2, i - 1 and i.
    let mut before: Vec<usize> = vec![0; b.len() + 1];
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for i in 0..a.len() {
        cur[0] = i + 1;
        for j in 0..b.len() {
            let cost = usize::from(a[i] != b[j]);
            let mut d = (prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1);
            if i > 0 && j > 0 && a[i] == b[j - 1] && a[i - 1] == b[j] {
                d = d.min(before[j - 1] + 1);
            }
            cur[j + 1] = d;
        }
        std::mem::swap(&mut before, &mut prev);
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

/// `message` (a serde error's text) with a "did you mean" added when it is serde's
/// "unknown field `x`, expected one of `a`, `b`, ..." and `x` is close to one of
/// the fields: the sections of the config read through serde (`auth`, `admin`, a
/// provider's `mock`) then suggest as the others do.
pub fn unknown_field_hint(message: String) -> String {
    let Some(rest) = message.strip_prefix("unknown field `") else {
        return message;
    };
    let Some((field, expected)) = rest.split_once('`') else {
        return message;
    };
    let known: Vec<&str> = expected.split('`').skip(1).step_by(2).collect();
    match did_you_mean(field, known.iter().copied()) {
        Some(close) => format!("{message}; did you mean `{close}`?"),
        None => message,
    }
}

/// The closest of `candidates` to `word`, if one is close enough to be a likely typo.
pub fn did_you_mean<'a, I>(word: &str, candidates: I) -> Option<&'a str>
where
    I: IntoIterator<Item = &'a str>,
{
    let limit = (word.chars().count() / 3).clamp(1, 3);
    let lower = word.to_lowercase();
    // Case is compared last: `GPT-4o` is one letter-case away from `gpt-4o`, not three
    // edits, so it is suggested (ahead of any other near miss).
    candidates
        .into_iter()
        .filter(|c| *c != word)
        .map(|c| {
            (
                edit_distance(&lower, &c.to_lowercase()),
                edit_distance(word, c),
                c,
            )
        })
        .filter(|(d, _, _)| *d <= limit)
        .min_by_key(|(d, exact, _)| (*d, *exact))
        .map(|(_, _, c)| c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distances() {
        assert_eq!(edit_distance("azur", "azure"), 1);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        // A swap of two neighbours is one edit, not two.
        assert_eq!(edit_distance("mokc", "mock"), 1);
        assert_eq!(edit_distance("ab", "ba"), 1);
        assert_eq!(edit_distance("ca", "abc"), 3);
    }

    /// Newcomer walk (issue 18): `kind: mokc` got no suggestion, since a transposed
    /// pair is two Levenshtein edits and the limit for four letters is one.
    #[test]
    fn a_transposed_pair_is_suggested() {
        let kinds = ["openai", "anthropic", "gemini", "bedrock", "mock"];
        assert_eq!(did_you_mean("mokc", kinds), Some("mock"));
        assert_eq!(did_you_mean("gemnii", kinds), Some("gemini"));
    }

    /// Found by the operator attack of 2026-12-07: `auth.keys[0].modles` and
    /// `admin.kyes` were reported without the suggestion every other section gives.
    #[test]
    fn serde_unknown_fields_get_a_suggestion() {
        let m =
            "unknown field `modles`, expected one of `id`, `hash`, `org`, `models`, `providers`";
        assert_eq!(
            unknown_field_hint(m.to_string()),
            format!("{m}; did you mean `models`?")
        );
        let far = "unknown field `zzzz`, expected one of `id`, `hash`";
        assert_eq!(unknown_field_hint(far.to_string()), far);
        assert_eq!(
            unknown_field_hint("invalid type".to_string()),
            "invalid type"
        );
    }

    #[test]
    fn suggests_close_names_only() {
        let names = ["azure", "openai", "anthropic"];
        assert_eq!(did_you_mean("azur", names), Some("azure"));
        assert_eq!(did_you_mean("antropic", names), Some("anthropic"));
        assert_eq!(did_you_mean("zzz", names), None);
    }

    #[test]
    fn letter_case_alone_is_a_near_miss() {
        let models = ["gpt-4o", "gpt-4o-mini", "smollm"];
        assert_eq!(did_you_mean("GPT-4o", models), Some("gpt-4o"));
        assert_eq!(did_you_mean("gpt4o", models), Some("gpt-4o"));
        assert_eq!(did_you_mean("SMOLLM", models), Some("smollm"));
        assert_eq!(did_you_mean("gpt-4o", models), None);
    }
}
