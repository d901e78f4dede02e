//! Verification of a semantic candidate (issue 14, item 2): a SimHash within τ only
//! nominates an entry; it is served only if its normalized text and the request's
//! differ in ways proven harmless.
//!
//! Both texts are already normalized (`text::normalize`: case, whitespace and edge
//! punctuation are gone). Then, word by word:
//! 1. each word is replaced by its canonical synonym (`synonyms.txt`);
//! 2. the words that are not [`FILLER`] must form the same sequence on both sides:
//!    same words, same order. So a negation word, a digit, a name, a date or any
//!    other content word one side lacks fails (content-word budget: 0), and so does a
//!    swapped comparison (`a larger than b` vs `b larger than a`: same words, other
//!    order);
//! 3. filler words (politeness and greetings) may differ by at most
//!    [`FILLER_BUDGET`] words (counted as a multiset difference). A word is filler
//!    only where politeness goes: in the run of [`FILLER`] words that opens the
//!    prompt (not `thanks`) or the run that closes it (`please`, `pls`, `plz`,
//!    `kindly`, `thanks`). Elsewhere it is a content word: `translate hello to
//!    french` is not `translate hi to french`, nor `how do you say hello` `how do
//!    you say hi`. Filler may be added or left out, never exchanged for other
//!    filler in the same run: the two opening runs (and the two closing runs) must
//!    be one within the other, as multisets. An exchanged word at an edge is the
//!    subject more often than politeness (`translate into french: thanks` is not
//!    `...: please`, nor `hello in japanese` `hey in japanese`; an outside attack,
//!    2026-12-07). A prompt of filler alone matches only the same filler words.
//!
//! What this cannot tell: a prompt whose subject is a filler word at its edge
//! against the same prompt without it (`translate to german: please` and
//! `translate to german`): normalization has dropped the punctuation that would
//! tell a plea from a quoted word.
//!
//! Why the content budget is 0: the hard negatives include "one added constraint"
//! (`briefly`, `in French`, `as a haiku`), a single added content word that changes
//! the answer; no budget above 0 can tell those from harmless additions.

use std::sync::OnceLock;

use rustc_hash::FxHashMap;

/// The synonym groups (format and rules in the file's header).
pub const SYNONYMS: &str = include_str!("synonyms.txt");

/// Words that carry no request: they may be present on one side only, up to
/// [`FILLER_BUDGET`] of them. Never a negation, number or content word.
pub const FILLER: [&str; 8] = [
    "please", "pls", "plz", "kindly", "thanks", "hi", "hello", "hey",
];

/// How many filler words the two texts may differ by.
pub const FILLER_BUDGET: u32 = 2;

fn synonyms() -> &'static FxHashMap<&'static str, &'static str> {
    static MAP: OnceLock<FxHashMap<&'static str, &'static str>> = OnceLock::new();
    MAP.get_or_init(|| {
        let mut map = FxHashMap::default();
        for line in SYNONYMS.lines() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let Some((canon, rest)) = line.split_once(':') else {
                continue;
            };
            for word in rest.split(',') {
                let word = word.trim();
                if !word.is_empty() {
                    map.insert(word, canon.trim());
                }
            }
        }
        map
    })
}

/// `word`'s canonical synonym, or `word` itself when it is in no group.
pub fn canonical(word: &str) -> &str {
    synonyms().get(word).copied().unwrap_or(word)
}

fn filler_index(word: &str) -> Option<usize> {
    // Lengths differ for most words, so this is a few integer compares.
    FILLER.iter().position(|f| *f == word)
}

/// Whether `word` (normalized) is a [`FILLER`] word.
pub fn is_filler(word: &str) -> bool {
    filler_index(word).is_some()
}

/// Whether filler `word` is filler where it stands: `leading` in the run that opens
/// a prompt (a greeting or a plea), else in the run that closes it (a plea or
/// thanks).
fn filler_at_edge(word: &str, leading: bool) -> bool {
    match word {
        "please" | "pls" | "plz" | "kindly" => true,
        "hi" | "hello" | "hey" => leading,
        "thanks" => !leading,
        _ => false,
    }
}

/// What verification compares, computed once per key and per stored entry: the
/// canonical content words joined by single spaces (synonyms folded, filler left
/// out; also what the SimHash is computed over) and how often each filler occurs
/// in the opening and in the closing run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Canon {
    /// Canonical content words, in order, separated by one space.
    pub content: String,
    /// Occurrences of each [`FILLER`] word in the run that opens the prompt
    /// (saturating); a prompt of filler alone counts here.
    pub lead: [u16; FILLER.len()],
    /// Occurrences of each [`FILLER`] word in the run that closes it (saturating).
    pub trail: [u16; FILLER.len()],
}

/// The [`Canon`] of normalized text `normalized`.
pub fn canon(normalized: &str) -> Canon {
    let mut c = Canon {
        content: String::with_capacity(normalized.len()),
        lead: [0; FILLER.len()],
        trail: [0; FILLER.len()],
    };
    let words: Vec<&str> = normalized.split(' ').filter(|w| !w.is_empty()).collect();
    // The opening and closing runs of filler (module docs); the rest is content.
    let start = words
        .iter()
        .position(|w| !filler_at_edge(w, true))
        .unwrap_or(words.len());
    let end = words[start..]
        .iter()
        .rposition(|w| !filler_at_edge(w, false))
        .map_or(start, |i| start + i + 1);
    for (at, word) in words.iter().enumerate() {
        if at < start || at >= end {
            if let Some(i) = filler_index(word) {
                let run = if at < start {
                    &mut c.lead
                } else {
                    &mut c.trail
                };
                run[i] = run[i].saturating_add(1);
            }
            continue;
        }
        if !c.content.is_empty() {
            c.content.push(' ');
        }
        c.content.push_str(canonical(word));
    }
    c
}

/// Whether two canonical forms may share an answer (module docs): the same content
/// words in the same order (words hold no spaces, so string equality is sequence
/// equality), each filler run within the other's (added or left out, never
/// exchanged) and at most [`FILLER_BUDGET`] filler words apart in all.
pub fn same(a: &Canon, b: &Canon) -> bool {
    if a.content.is_empty() {
        // Filler alone (`hi`, `thanks`): the words are the whole request.
        return b.content.is_empty() && a.lead == b.lead && a.trail == b.trail;
    }
    a.content == b.content
        && nested(&a.lead, &b.lead)
        && nested(&a.trail, &b.trail)
        && apart(&a.lead, &b.lead) + apart(&a.trail, &b.trail) <= FILLER_BUDGET
}

/// Whether one filler run is within the other, as multisets.
fn nested(a: &[u16; FILLER.len()], b: &[u16; FILLER.len()]) -> bool {
    a.iter().zip(b).all(|(x, y)| x <= y) || a.iter().zip(b).all(|(x, y)| x >= y)
}

/// How many filler words two runs differ by.
fn apart(a: &[u16; FILLER.len()], b: &[u16; FILLER.len()]) -> u32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| u32::from(x.abs_diff(*y)))
        .sum()
}

/// Whether normalized texts `a` and `b` may share an answer (module docs).
pub fn equivalent(a: &str, b: &str) -> bool {
    a == b || same(&canon(a), &canon(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Words that flip or restrict a request; none may be a synonym or filler.
    const NEGATIONS: [&str; 22] = [
        "not",
        "no",
        "never",
        "none",
        "nor",
        "neither",
        "nobody",
        "nothing",
        "nowhere",
        "without",
        "cannot",
        "can't",
        "don't",
        "doesn't",
        "isn't",
        "aren't",
        "won't",
        "wouldn't",
        "shouldn't",
        "didn't",
        "except",
        "avoid",
    ];

    #[test]
    fn the_synonym_list_holds_no_negation_digit_or_repeated_word() {
        let mut seen = std::collections::HashSet::new();
        for line in SYNONYMS
            .lines()
            .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        {
            let (canon, rest) = line.split_once(':').expect("`canonical: synonyms` lines");
            for w in std::iter::once(canon).chain(rest.split(',')).map(str::trim) {
                assert!(!w.is_empty() && w == w.to_lowercase(), "{line}");
                assert!(!NEGATIONS.contains(&w), "negation {w} in {line}");
                assert!(!w.chars().any(|c| c.is_ascii_digit()), "digit in {line}");
                assert!(filler_index(w).is_none(), "filler {w} in {line}");
                assert!(seen.insert(w.to_string()), "{w} in two groups");
            }
        }
        for f in FILLER {
            assert!(!NEGATIONS.contains(&f));
        }
    }

    #[test]
    fn harmless_differences_pass() {
        assert!(equivalent(
            "explain how tides work",
            "describe how tides work"
        ));
        assert!(equivalent("please explain tides", "explain tides thanks"));
        assert!(equivalent("hi explain tides", "explain tides"));
    }

    // Regression (outside attack, 2026-12-07): a filler word at an edge exchanged for
    // another is often the subject, and listed synonyms that name commands or
    // functions changed the question; each pair shared an answer.
    #[test]
    fn an_exchanged_edge_filler_or_a_command_name_is_not_a_variant() {
        use crate::cache::text::normalize;
        for (a, b) in [
            (
                "Translate into French: thanks",
                "Translate into French: please",
            ),
            ("hello in Japanese?", "please in Japanese?"),
            ("hello in Japanese?", "Hey in Japanese"),
            ("How do you say please", "How do you say thanks"),
            ("Linux find command", "Linux locate command"),
            (
                "Difference between find and locate",
                "Difference between locate and find",
            ),
            (
                "What does Python's enumerate do",
                "What does Python's list do",
            ),
            ("CSS display property", "CSS show property"),
            ("make a docker image", "generate a docker image"),
        ] {
            assert!(!equivalent(&normalize(a), &normalize(b)), "{a} / {b}");
        }
        // Filler added or left out at either edge still passes.
        assert!(equivalent(
            &normalize("Hi, explain tides"),
            &normalize("explain tides, please")
        ));
    }

    #[test]
    fn meaningful_differences_fail() {
        let base = "is 7 larger than 5 in base 10";
        for other in [
            "is 7 not larger than 5 in base 10",
            "is 8 larger than 5 in base 10",
            "is 5 larger than 7 in base 10",
            "is 7 larger than 5 in base 10 briefly",
            "is 7 larger than 5",
            "est-ce que 7 est plus grand que 5 en base 10",
        ] {
            assert!(!equivalent(base, other), "{other}");
        }
        // Filler beyond the budget.
        assert!(!equivalent(
            "explain tides",
            "hi hello please explain tides"
        ));
    }

    #[test]
    fn a_filler_word_that_is_the_subject_of_the_prompt_is_content() {
        // Found by audit (2026-12-05): filler words were dropped wherever they stood,
        // so prompts differing only in the greeting they are about shared an answer.
        for (a, b) in [
            ("translate hello to french", "translate hi to french"),
            ("how do you say hello", "how do you say hi"),
            ("what does please mean", "what does kindly mean"),
            ("thanks", "hello"),
            ("hi", "hey"),
        ] {
            assert!(!equivalent(a, b), "{a} / {b}");
        }
        // Politeness at the edges is still harmless.
        assert!(equivalent("hi explain tides", "explain tides thanks"));
        assert!(equivalent(
            "hello please explain tides",
            "please explain tides"
        ));
        assert!(equivalent("hi", "hi"));
        assert_eq!(canon("say hello thanks").content, "say hello");
    }
}
