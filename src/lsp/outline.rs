//! The shape of one policy file from its tokens: definitions (routes, rules,
//! strategies, parameters, state slots, lets, tests) and blocks, for navigation,
//! hover, completion and the document outline. Works on any text, parsed or not:
//! an unclosed block runs to the end of the file.

use super::lex::{lex, Kind, Tok};

/// What a definition defines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DefKind {
    /// `route NAME`
    Route,
    /// `rule NAME` inside a route
    Rule,
    /// `strategy NAME(...)`
    Strategy,
    /// A strategy parameter `NAME = literal`
    Param,
    /// `state NAME = ...` in a strategy
    State,
    /// `let NAME = ...` in a strategy
    Let,
    /// `test "NAME"`
    Test,
}

/// One definition.
#[derive(Debug, Clone)]
pub struct Def {
    /// What it defines.
    pub kind: DefKind,
    /// The name (a test's without quotes).
    pub name: String,
    /// Byte range of the name as written.
    pub name_span: (usize, usize),
    /// Byte range of the whole definition (to its closing brace, or to the end of
    /// its header for parameters, states and lets).
    pub span: (usize, usize),
    /// Index of the enclosing definition (the route of a rule, the strategy of a
    /// parameter).
    pub container: Option<usize>,
}

/// What kind of block a `{ ... }` is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Block {
    /// A route's body.
    Route,
    /// A rule's body.
    Rule,
    /// A `default { ... }` body.
    Default,
    /// A split's arms.
    Split,
    /// A strategy's body.
    Strategy,
    /// An `on EVENT { ... }` block.
    On,
    /// A test's body.
    Test,
    /// A test's `request { ... }`.
    Request,
    /// A test's `stats { ... }` or one of its entries.
    Stats,
    /// Anything else.
    Other,
}

/// One block.
#[derive(Debug, Clone, Copy)]
pub struct Frame {
    /// What kind.
    pub kind: Block,
    /// Byte offset of `{`.
    pub start: usize,
    /// Byte offset after `}` (one past the text's length when unclosed).
    pub end: usize,
}

/// The definitions and blocks of one file.
#[derive(Debug, Default)]
pub struct Outline {
    /// Definitions in source order.
    pub defs: Vec<Def>,
    /// Blocks in order of their `{`.
    pub frames: Vec<Frame>,
    /// The tokens, comments included.
    pub toks: Vec<Tok>,
}

impl Outline {
    /// Scans `src`.
    pub fn new(src: &str) -> Outline {
        let toks = lex(src);
        let code: Vec<Tok> = toks
            .iter()
            .copied()
            .filter(|t| t.kind != Kind::Comment)
            .collect();
        let mut o = Outline {
            toks,
            ..Outline::default()
        };
        let text = |i: usize| code.get(i).map_or("", |t| t.text(src));
        let kind = |i: usize| code.get(i).map(|t| t.kind);
        // Open blocks: (frame index, the definition that owns it).
        let mut stack: Vec<(usize, Option<usize>)> = Vec::new();
        let mut pending: Option<usize> = None;
        let mut i = 0;
        while i < code.len() {
            let t = code[i];
            let inside = stack.last().map(|(f, _)| o.frames[*f].kind);
            let owner = stack.last().and_then(|(_, d)| *d);
            let def = |k: DefKind, at: usize| (k, at);
            let found = match (t.kind, t.text(src), inside) {
                (Kind::Ident, "route", None) if kind(i + 1) == Some(Kind::Ident) => {
                    Some(def(DefKind::Route, i + 1))
                }
                (Kind::Ident, "strategy", None) if kind(i + 1) == Some(Kind::Ident) => {
                    Some(def(DefKind::Strategy, i + 1))
                }
                (Kind::Ident, "test", None) if kind(i + 1) == Some(Kind::Str) => {
                    Some(def(DefKind::Test, i + 1))
                }
                (Kind::Ident, "rule", Some(Block::Route)) if kind(i + 1) == Some(Kind::Ident) => {
                    Some(def(DefKind::Rule, i + 1))
                }
                (Kind::Ident, "state", Some(Block::Strategy))
                    if kind(i + 1) == Some(Kind::Ident) =>
                {
                    Some(def(DefKind::State, i + 1))
                }
                (Kind::Ident, "let", Some(Block::Strategy)) if kind(i + 1) == Some(Kind::Ident) => {
                    Some(def(DefKind::Let, i + 1))
                }
                _ => None,
            };
            if let Some((k, at)) = found {
                let n = code[at];
                let name = match k {
                    DefKind::Test => n.text(src).trim_matches('"').to_string(),
                    _ => n.text(src).to_string(),
                };
                let container = match k {
                    DefKind::Rule | DefKind::State | DefKind::Let => owner,
                    _ => None,
                };
                o.defs.push(Def {
                    kind: k,
                    name,
                    name_span: (n.start, n.end),
                    span: (t.start, n.end),
                    container,
                });
                let me = o.defs.len() - 1;
                if matches!(
                    k,
                    DefKind::Route | DefKind::Strategy | DefKind::Test | DefKind::Rule
                ) {
                    pending = Some(me);
                }
                if k == DefKind::Strategy && text(at + 1) == "(" {
                    i = o.params(src, &code, at + 2, me);
                    continue;
                }
                i = at + 1;
                continue;
            }
            match t.text(src) {
                "{" if t.kind == Kind::Punct => {
                    let kind = block_kind(src, &code, i, inside);
                    let owner = match kind {
                        Block::Route | Block::Strategy | Block::Test | Block::Rule => {
                            pending.take()
                        }
                        _ => owner,
                    };
                    o.frames.push(Frame {
                        kind,
                        start: t.start,
                        // Past the text until closed: an unclosed block holds the
                        // end of the text too.
                        end: src.len() + 1,
                    });
                    stack.push((o.frames.len() - 1, owner));
                }
                "}" if t.kind == Kind::Punct => {
                    if let Some((f, d)) = stack.pop() {
                        o.frames[f].end = t.end;
                        if let Some(d) = d.filter(|_| {
                            matches!(
                                o.frames[f].kind,
                                Block::Route | Block::Strategy | Block::Test | Block::Rule
                            )
                        }) {
                            o.defs[d].span.1 = t.end;
                        }
                    }
                }
                _ => {}
            }
            i += 1;
        }
        // Unclosed definitions run to the end of the text.
        for (f, d) in stack {
            if let Some(d) = d {
                if o.defs[d].span.0 < o.frames[f].start {
                    o.defs[d].span.1 = src.len();
                }
            }
        }
        o
    }

    /// Parameters of strategy `owner` from token `i` (after its `(`) to the closing
    /// `)`; returns the index after it.
    fn params(&mut self, src: &str, code: &[Tok], mut i: usize, owner: usize) -> usize {
        let mut depth = 1;
        while i < code.len() && depth > 0 {
            let t = code[i];
            match t.text(src) {
                "(" | "[" => depth += 1,
                ")" | "]" => depth -= 1,
                "{" | "}" => return i,
                _ => {}
            }
            if depth == 1
                && t.kind == Kind::Ident
                && code.get(i + 1).is_some_and(|n| n.text(src) == "=")
                && i > 0
                && matches!(code[i - 1].text(src), "(" | ",")
            {
                // The parameter runs to the next `,` at this depth or the `)`.
                let mut end = i + 1;
                let mut d = 0;
                while let Some(n) = code.get(end) {
                    match n.text(src) {
                        "(" | "[" => d += 1,
                        ")" | "]" if d > 0 => d -= 1,
                        ")" | "," | "{" | "}" if d == 0 => break,
                        _ => {}
                    }
                    end += 1;
                }
                let last = code[end.saturating_sub(1).max(i)].end;
                self.defs.push(Def {
                    kind: DefKind::Param,
                    name: t.text(src).to_string(),
                    name_span: (t.start, t.end),
                    span: (t.start, last),
                    container: Some(owner),
                });
            }
            i += 1;
        }
        i
    }

    /// The blocks that contain byte `offset`, outermost first.
    pub fn frames_at(&self, offset: usize) -> Vec<Frame> {
        self.frames
            .iter()
            .filter(|f| f.start < offset && offset < f.end)
            .copied()
            .collect()
    }

    /// The innermost definition of one of `kinds` whose extent holds `offset`.
    pub fn enclosing(&self, offset: usize, kinds: &[DefKind]) -> Option<usize> {
        self.defs
            .iter()
            .enumerate()
            .filter(|(_, d)| kinds.contains(&d.kind) && d.span.0 <= offset && offset <= d.span.1)
            .map(|(i, _)| i)
            .next_back()
    }

    /// The token that holds or ends at byte `offset` (comments included), preferring
    /// a word, string or number to punctuation.
    pub fn token_at(&self, offset: usize) -> Option<usize> {
        let mut best = None;
        for (i, t) in self.toks.iter().enumerate() {
            if t.start > offset {
                break;
            }
            if offset <= t.end && (best.is_none() || t.kind != Kind::Punct) {
                best = Some(i);
            }
        }
        best
    }

    /// The comment lines directly above byte `offset` (a definition's doc), without
    /// their `#`, stopping at a blank line.
    pub fn doc_above(&self, src: &str, offset: usize) -> String {
        let mut offset = offset.min(src.len());
        while !src.is_char_boundary(offset) {
            offset -= 1;
        }
        // The lines above the one `offset` is on.
        let before = &src[..src[..offset].rfind('\n').map_or(0, |i| i + 1)];
        let mut lines: Vec<&str> = Vec::new();
        for line in before.lines().rev() {
            let l = line.trim();
            match l.strip_prefix('#') {
                Some(c) => lines.push(c.strip_prefix(' ').unwrap_or(c)),
                None => break,
            }
        }
        lines.reverse();
        lines.join("\n")
    }
}

/// The kind of the block opened by the `{` at `code[i]`, from the nearest keyword of
/// its statement.
fn block_kind(src: &str, code: &[Tok], i: usize, inside: Option<Block>) -> Block {
    if i > 0 && code[i - 1].kind == Kind::Str && inside == Some(Block::Stats) {
        return Block::Stats;
    }
    let mut j = i;
    while j > 0 {
        j -= 1;
        let t = code[j];
        let w = t.text(src);
        if w == "{" || w == "}" {
            break;
        }
        let dotted = (j > 0 && code[j - 1].text(src) == ".")
            || code.get(j + 1).is_some_and(|n| n.text(src) == ".");
        if t.kind != Kind::Ident || dotted {
            continue;
        }
        let next = code.get(j + 1).map_or("", |n| n.text(src));
        return match (w, inside) {
            ("route", None) => Block::Route,
            ("strategy", None) => Block::Strategy,
            ("test", None) => Block::Test,
            ("rule", Some(Block::Route)) => Block::Rule,
            ("default", Some(Block::Route)) => Block::Default,
            ("split", _) => Block::Split,
            ("on", Some(Block::Strategy)) if matches!(next, "pick" | "success" | "failure") => {
                Block::On
            }
            ("request", Some(Block::Test)) => Block::Request,
            ("stats", Some(Block::Test)) => Block::Stats,
            _ => continue,
        };
    }
    Block::Other
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn definitions_and_blocks_of_a_broken_file() {
        let src = "# Fast.\nstrategy fast(beta = 0.5 in [0, 1], k = 2) {\n  state w = 1.0\n  let s = beta\n  score = s\n  pick min\n}\nroute r when request.model == \"x\" {\n  rule a { use \"m\" via fast(beta = \n}\n";
        let o = Outline::new(src);
        let names: Vec<(DefKind, &str)> =
            o.defs.iter().map(|d| (d.kind, d.name.as_str())).collect();
        assert_eq!(
            names,
            vec![
                (DefKind::Strategy, "fast"),
                (DefKind::Param, "beta"),
                (DefKind::Param, "k"),
                (DefKind::State, "w"),
                (DefKind::Let, "s"),
                (DefKind::Route, "r"),
                (DefKind::Rule, "a"),
            ]
        );
        assert_eq!(o.defs[6].container, Some(5));
        assert_eq!(o.defs[1].container, Some(0));
        assert_eq!(
            &src[o.defs[1].span.0..o.defs[1].span.1],
            "beta = 0.5 in [0, 1]"
        );
        assert_eq!(o.doc_above(src, o.defs[0].span.0), "Fast.");
        let at = src.find("beta = \n").unwrap();
        let kinds: Vec<Block> = o.frames_at(at).iter().map(|f| f.kind).collect();
        assert_eq!(kinds, vec![Block::Route, Block::Rule]);
        assert_eq!(o.enclosing(at, &[DefKind::Route]), Some(5));
    }
}
