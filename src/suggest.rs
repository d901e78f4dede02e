//! "Did you mean" suggestions for misspelt names in config and policy files.
//!
//! Uses the Levenshtein edit distance; a candidate is suggested when it is within a
//! third of the word's length (at least 1, at most 3 edits), the usual rule of thumb
//! used by compilers such as rustc for identifier suggestions.

/// Edit distance (insertions, deletions, substitutions) between `a` and `b`, by chars.
pub fn levenshtein(a: &str, b: &str) -> usize {
    let b_chars: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b_chars.len()).collect();
    let mut cur = vec![0; b_chars.len() + 1];
    for (i, ca) in a.chars().enumerate() {
        cur[0] = i + 1;
        for (j, cb) in b_chars.iter().enumerate() {
            let cost = usize::from(ca != *cb);
            cur[j + 1] = (prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b_chars.len()]
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
                levenshtein(&lower, &c.to_lowercase()),
                levenshtein(word, c),
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
        assert_eq!(levenshtein("azur", "azure"), 1);
        assert_eq!(levenshtein("", "abc"), 3);
        assert_eq!(levenshtein("kitten", "sitting"), 3);
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
