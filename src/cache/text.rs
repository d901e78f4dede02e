//! Prompt text → normalized text → 128-bit SimHash (seed 001, "Cache Key Generation").
//!
//! **Normalization** (what the cache treats as the same text):
//! 1. Unicode lowercase.
//! 2. Whitespace runs (any Unicode whitespace) become one space; leading and trailing
//!    whitespace goes. The indentation of a line after the first (after any line
//!    break: LF, CR, CR LF, VT, FF, NEL, U+2028, U+2029), when it is a tab
//!    or at least two columns, is kept as a word of its own (`⇥` and its width in
//!    spaces and tabs, such as `⇥4s0t`): in code it is meaning (a Python statement
//!    in or out of its loop), while one space after a line break is how prose is
//!    wrapped and pasted.
//! 3. Sentence punctuation at the edges of a word goes: `. , ; : ! ?`, typographic
//!    quotes, `…` and `¿ ¡`. Everything else stays, so `-5`, `$5`, `5%`, `x > y`,
//!    `c++`, `3.14`, `'5'`, `(a)`, `[]` and `{}` keep their sign, unit, operator,
//!    inner dot, quotes and brackets (in code `'5' + 3` is not `5 + 3`, nor `[] + {}`
//!    `{} + []`; ASCII quotes, backticks and brackets were dropped too until an
//!    outside attack, 2026-12-07). A token made only of sentence punctuation
//!    disappears at the start or end of a line (`Quoi ?`, `... and then`) and stays,
//!    whole, between two words of one, where it is what is asked about: `the ?
//!    operator` is not `the ! operator`, nor `the ; token` `the : token` (it
//!    disappeared everywhere until an outside attack, 2026-12-08, and those pairs
//!    were served each other's answers). `’` inside a word becomes `'`.
//!    One edge mark is part of a number and stays: a leading `.` before a digit (the
//!    decimal point of `.5`, which is not `5`). A trailing `!` after a digit goes
//!    (`1991!` is an exclamation far more often than a factorial).
//!
//! Why edge punctuation only: a trailing `?` or a comma does not change what is asked,
//! but an inner `.` (`3.14` vs `314`), a leading `-` or a symbol token (`<` vs `>`) can.
//!
//! **SimHash**: features are the character 3-grams of the normalized text, with each
//! word first replaced by its canonical synonym (`synonyms.txt`) and the filler words
//! that open or close the prompt (`verify::FILLER`, `verify::canon`) left out,
//! weighted by how often they occur. Why fold them: one changed word of a short
//! prompt moves ~20 of the 128 bits, so without folding a listed synonym or a
//! `please` would be out of reach of any useful τ (on the evaluation set, filler
//! variants went from 15 of 226 found to all of them); the
//! folding cannot cost precision, as verification still checks every word. Each feature is hashed with XXH3-128 (seed 0, the same on every
//! instance and release, pinned by a test); bit `i` of the SimHash is set when more
//! features have bit `i` set than not. Texts shorter than 3 characters are one feature.
//!
//! Why n = 3: on the evaluation set (`tests/data/cache-pairs.jsonl`) trigrams keep
//! an edit's footprint small (one changed character touches 3 features), while
//! 1- and 2-grams are shared by almost every English text and carry little signal.

use std::fmt::Write as _;

use xxhash_rust::xxh3::xxh3_128;

use super::verify::canon;

/// Character n-gram length of the SimHash features.
pub const NGRAM: usize = 3;

fn is_edge_punct(c: char) -> bool {
    matches!(
        c,
        '.' | ',' | ';' | ':' | '!' | '?' | '“' | '”' | '‘' | '’' | '«' | '»' | '…' | '¿' | '¡'
    )
}

/// `word` without its edge punctuation, except the decimal point that opens a number
/// (`.5`; module docs).
fn trim_edges(word: &str) -> &str {
    let mut s = word;
    loop {
        let mut rest = s.chars();
        match rest.next() {
            Some(c)
                if is_edge_punct(c)
                    && !(c == '.' && rest.clone().next().is_some_and(|d| d.is_ascii_digit())) =>
            {
                s = rest.as_str();
            }
            _ => break,
        }
    }
    s.trim_end_matches(is_edge_punct)
}

/// The normalized form of `text` (module docs): lowercase words of it without edge
/// punctuation, separated by single spaces.
pub fn normalize(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    // Every line break Unicode names (CR LF counts as two, the empty line between
    // them having no indentation): the indentation fix first split on LF alone, so
    // code with CR or U+2028 breaks still lost its indentation (review, 2026-12-07).
    let breaks = |c: char| {
        matches!(
            c,
            '\n' | '\r' | '\u{0B}' | '\u{0C}' | '\u{85}' | '\u{2028}' | '\u{2029}'
        )
    };
    for (i, line) in text.split(breaks).enumerate() {
        let body = line.trim_start();
        let indent = &line[..line.len() - body.len()];
        let tabs = indent.matches('\t').count();
        // Two columns or a tab: a code block's indentation (one space after a line
        // break is how prose is wrapped and pasted).
        if i > 0 && !body.is_empty() && (tabs > 0 || indent.chars().count() >= 2) {
            if !out.is_empty() {
                out.push(' ');
            }
            let spaces = indent.chars().count() - tabs;
            let _ = write!(out, "⇥{spaces}s{tabs}t");
        }
        push_words(&mut out, body);
    }
    out
}

/// Appends the normalized words of `text` (one line) to `out`, a space before each.
fn push_words(out: &mut String, text: &str) {
    let mut words = text.split_whitespace().peekable();
    let mut first = true;
    while let Some(raw) = words.next() {
        let mut word = trim_edges(raw);
        // Sentence punctuation alone: kept between two words (module docs).
        if word.is_empty() && !first && words.peek().is_some() {
            word = raw;
        }
        first = false;
        if word.is_empty() {
            continue;
        }
        if !out.is_empty() {
            out.push(' ');
        }
        for c in word.chars() {
            if c == '’' {
                out.push('\'');
            } else if c.is_ascii() {
                out.push(c.to_ascii_lowercase());
            } else {
                out.extend(c.to_lowercase());
            }
        }
    }
}

/// The 128-bit SimHash of normalized text `normalized` (module docs).
pub fn simhash(normalized: &str) -> u128 {
    simhash_of_canon(&canon(normalized).content)
}

/// `SIGNS[b][k]`: +1 if bit `k` of byte `b` is set, else −1.
const SIGNS: [[i32; 8]; 256] = {
    let mut t = [[0i32; 8]; 256];
    let mut b = 0;
    while b < 256 {
        let mut k = 0;
        while k < 8 {
            t[b][k] = if (b >> k) & 1 == 1 { 1 } else { -1 };
            k += 1;
        }
        b += 1;
    }
    t
};

/// The SimHash of canonical content `folded` ([`super::verify::Canon::content`]).
pub fn simhash_of_canon(folded: &str) -> u128 {
    let mut counts = [[0i32; 8]; 16];
    let mut add = |feature: &[u8]| {
        // Byte j of the hash holds bits 8j..8j+8: one 8-lane add per byte.
        for (lane, byte) in counts.iter_mut().zip(xxh3_128(feature).to_le_bytes()) {
            let signs = &SIGNS[usize::from(byte)];
            for k in 0..8 {
                lane[k] += signs[k];
            }
        }
    };
    let bytes = folded.as_bytes();
    if folded.is_ascii() {
        if bytes.len() < NGRAM {
            add(bytes);
        }
        for w in bytes.windows(NGRAM) {
            add(w);
        }
    } else {
        // Character (not byte) n-grams: byte offsets of every character start.
        let starts: Vec<usize> = folded.char_indices().map(|(i, _)| i).collect();
        if starts.len() < NGRAM {
            add(bytes);
        } else {
            for w in 0..=starts.len() - NGRAM {
                let end = starts.get(w + NGRAM).copied().unwrap_or(bytes.len());
                add(&bytes[starts[w]..end]);
            }
        }
    }
    let mut out = 0u128;
    for (j, lane) in counts.iter().enumerate() {
        for (k, c) in lane.iter().enumerate() {
            if *c > 0 {
                out |= 1 << (8 * j + k);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by the cache attack of 2026-12-08: a token of sentence punctuation
    /// alone disappeared, so `What does the ? operator do` and `... the !
    /// operator ...` had one key and passed verification (distance 0), each served
    /// the other's answer; so did `the ; token` and `the : token`, and `the ...
    /// spread syntax` and `the spread syntax`. Between two words such a token stays.
    #[test]
    fn a_punctuation_token_between_words_was_dropped_so_operators_shared_answers() {
        assert_eq!(
            normalize("What does the ? operator do in Rust"),
            "what does the ? operator do in rust"
        );
        for (a, b) in [
            ("What does the ? operator do", "What does the ! operator do"),
            ("what does the ; token do", "what does the : token do"),
            ("Explain the ... spread syntax", "Explain the spread syntax"),
        ] {
            assert_ne!(normalize(a), normalize(b), "{a} / {b}");
            assert_ne!(
                canon(&normalize(a)).content,
                canon(&normalize(b)).content,
                "{a} / {b}"
            );
        }
        // At a line's edges it is sentence punctuation and goes.
        assert_eq!(normalize("Quoi ?"), "quoi");
        assert_eq!(normalize("... and then ?\n? next"), "and then next");
    }

    #[test]
    fn normalization_drops_case_spacing_and_edge_punctuation_only() {
        assert_eq!(
            normalize("  What IS\tthe capital,  of \"France\"?? "),
            "what is the capital of \"france\""
        );
        assert_eq!(normalize("Is -5 < $3.50 (or 5%)?"), "is -5 < $3.50 (or 5%)");
        assert_eq!(normalize("don’t ... stop"), "don't ... stop");
        assert_eq!(normalize(" ?! "), "");
        assert_eq!(normalize("ÉCOLE Straße"), "école straße");
    }

    // Regression (outside attack, 2026-12-07): quotes, brackets and indentation were
    // normalized away, so code prompts that differ in them were exact hits on each
    // other's answers (`'5' + 3` on `5 + 3`, `[] + {}` on `{} + []`, a Python
    // `print` in its loop on one after it).
    #[test]
    fn code_quotes_brackets_and_indentation_stay_apart() {
        for (a, b) in [
            (
                "What is '5' + 3 in JavaScript?",
                "What is 5 + 3 in JavaScript?",
            ),
            ("What is [] + {} in JS", "What is {} + [] in JS"),
            ("What is `x` here", "What is x here"),
            (
                "What does this print?\nfor i in range(3):\n    pass\n    print(i)",
                "What does this print?\nfor i in range(3):\n    pass\nprint(i)",
            ),
            ("if x:\n\tf()", "if x:\n    f()"),
        ] {
            assert_ne!(normalize(a), normalize(b), "{a:?} / {b:?}");
            assert!(!super::super::verify::equivalent(
                &normalize(a),
                &normalize(b)
            ));
        }
        assert_eq!(normalize("a\n  b"), "a ⇥2s0t b");
        for nl in ["\r\n", "\r", "\u{2028}", "\u{85}", "\u{0C}"] {
            let (a, b) = (
                format!("for i in x:{nl}    pass{nl}    print(i)"),
                format!("for i in x:{nl}    pass{nl}print(i)"),
            );
            assert_ne!(normalize(&a), normalize(&b), "{nl:?}");
        }
        // Prose line breaks, one space after them and the first line's indentation
        // are still spacing.
        assert_eq!(normalize("  one\ntwo \n\n three"), "one two three");
    }

    #[test]
    fn a_leading_decimal_point_is_not_dropped() {
        // Found by audit (2026-12-05): `.5` normalized to `5`, so "what is .5 times
        // 4" was an exact hit on the answer to "what is 5 times 4".
        assert_eq!(normalize("What is .5 times 4?"), "what is .5 times 4");
        assert_ne!(
            normalize("what is .5 times 4"),
            normalize("what is 5 times 4")
        );
        assert_eq!(normalize("(.75)"), "(.75)");
        assert_eq!(normalize(".75"), ".75");
        assert_eq!(normalize("x=.5."), "x=.5");
        // Sentence punctuation around numbers and words still goes.
        assert_eq!(
            normalize("Is it 5? Yes, 5. In 1991!"),
            "is it 5 yes 5 in 1991"
        );
        assert_eq!(normalize("... ok"), "ok");
    }

    #[test]
    fn simhash_is_pinned_across_releases() {
        // Entries in a shared Redis outlive a deploy: a changed hash would orphan
        // them. This value must only change with a new key namespace.
        let h = simhash(&normalize("What is the capital of France?"));
        assert_eq!(h, 78829717815075527594788779932494842197);
        assert_eq!(simhash(""), simhash(""));
        assert_ne!(simhash("ab"), simhash("ba"));
    }

    #[test]
    fn a_listed_synonym_or_filler_costs_no_bits_an_unlisted_word_many() {
        let a = simhash("explain how tides work");
        assert_eq!(a, simhash("describe how tides work"));
        assert_eq!(a, simhash("hi please explain how tides work"));
        assert!((a ^ simhash("explain how rivers work")).count_ones() > 6);
    }
}
