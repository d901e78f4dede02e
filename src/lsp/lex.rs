//! A forgiving tokenizer of policy text for editor features.
//!
//! Diagnostics come from the real parser; hover, definition, completion and the
//! outline must also work on a buffer that is half typed and does not parse, so they
//! read this token stream instead. It accepts any text: an unknown character is a
//! one-character punctuation token, an unterminated string ends at its line's end.

/// What a token is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A word: name or keyword (`[A-Za-z_][A-Za-z0-9_]*`).
    Ident,
    /// A string literal, quotes included (the closing one may be missing).
    Str,
    /// A number with its unit: `42`, `1.5`, `250ms`, `5%`, `5xx`.
    Num,
    /// `# ...` to the end of the line.
    Comment,
    /// Anything else: `{`, `->`, `==`, `.`, ...
    Punct,
}

/// One token: its kind and byte range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tok {
    /// What it is.
    pub kind: Kind,
    /// First byte.
    pub start: usize,
    /// One past the last byte.
    pub end: usize,
}

impl Tok {
    /// The token's text in `src`.
    pub fn text<'s>(&self, src: &'s str) -> &'s str {
        src.get(self.start..self.end).unwrap_or("")
    }
}

/// Every token of `src`, in order (whitespace dropped).
pub fn lex(src: &str) -> Vec<Tok> {
    let b = src.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let start = i;
        let kind = match c {
            b' ' | b'\t' | b'\r' | b'\n' => {
                i += 1;
                continue;
            }
            b'#' => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
                Kind::Comment
            }
            b'"' => {
                i += 1;
                while i < b.len() && b[i] != b'"' && b[i] != b'\n' {
                    i += if b[i] == b'\\' && i + 1 < b.len() && b[i + 1] != b'\n' {
                        2
                    } else {
                        1
                    };
                }
                if i < b.len() && b[i] == b'"' {
                    i += 1;
                }
                Kind::Str
            }
            b'0'..=b'9' => {
                while i < b.len()
                    && (b[i].is_ascii_alphanumeric()
                        || b[i] == b'_'
                        || b[i] == b'%'
                        || (b[i] == b'.' && b.get(i + 1).is_some_and(u8::is_ascii_digit)))
                {
                    i += 1;
                }
                Kind::Num
            }
            c if c.is_ascii_alphabetic() || c == b'_' => {
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                    i += 1;
                }
                Kind::Ident
            }
            _ => {
                let two = b.get(i..i + 2).unwrap_or(&[]);
                i += if matches!(two, b"->" | b"==" | b"!=" | b"<=" | b">=" | b"..") {
                    2
                } else {
                    // One character, however many bytes it takes.
                    src[i..].chars().next().map_or(1, char::len_utf8)
                };
                Kind::Punct
            }
        };
        out.push(Tok {
            kind,
            start,
            end: i,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_of_a_line() {
        let src = "rule é when request.x >= 5% { use \"a\\\"b\" } # c\n\"open";
        let toks: Vec<(Kind, &str)> = lex(src).iter().map(|t| (t.kind, t.text(src))).collect();
        assert_eq!(
            toks,
            vec![
                (Kind::Ident, "rule"),
                (Kind::Punct, "é"),
                (Kind::Ident, "when"),
                (Kind::Ident, "request"),
                (Kind::Punct, "."),
                (Kind::Ident, "x"),
                (Kind::Punct, ">="),
                (Kind::Num, "5%"),
                (Kind::Punct, "{"),
                (Kind::Ident, "use"),
                (Kind::Str, "\"a\\\"b\""),
                (Kind::Punct, "}"),
                (Kind::Comment, "# c"),
                (Kind::Str, "\"open"),
            ]
        );
    }
}
