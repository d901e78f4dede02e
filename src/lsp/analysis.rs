//! What is under the cursor, and where things are defined, across a policy set.
//!
//! Built on the forgiving tokens of [`super::lex`] and the outlines of
//! [`super::outline`], so hover, definition and completion work on a buffer that does
//! not parse. Names and types come from the checker's own tables
//! ([`crate::policy::checked`] fields, the built-in functions) and from the set's
//! registry, so they cannot drift from what `lint` accepts.

use lsp_types::{Location, Url};

use super::lex::{Kind, Tok};
use super::outline::{DefKind, Outline};
use super::text::LineIndex;
use super::workspace::SetView;

/// One file of the set with its outline.
pub struct FileIx {
    /// Source name (absolute path, URI, or `builtin/...`).
    pub name: String,
    /// Its text (the open buffer's when open).
    pub text: String,
    /// Its definitions and blocks.
    pub outline: Outline,
    /// Where it lives (`None` for the embedded built-in strategies).
    pub uri: Option<Url>,
}

/// Every file of a set, indexed, plus the file being asked about.
pub struct SetIndex<'v> {
    /// The files, built-ins first.
    pub files: Vec<FileIx>,
    /// The set (registry, config).
    pub view: &'v SetView,
    /// Index in `files` of the file the request is about.
    pub current: usize,
}

/// Where the cursor is, in tokens of the current file (comments left out).
pub struct Cursor<'a> {
    /// The current file's text.
    pub src: &'a str,
    /// Its tokens without comments.
    pub code: Vec<Tok>,
    /// Index in `code` of the token under the cursor, if any.
    pub at: Option<usize>,
    /// Byte offset of the cursor.
    pub offset: usize,
    /// Whether the cursor is inside a comment.
    pub in_comment: bool,
}

impl<'a> Cursor<'a> {
    /// The cursor at byte `offset` of `file`.
    pub fn new(file: &'a FileIx, offset: usize) -> Cursor<'a> {
        let src = file.text.as_str();
        let in_comment = file
            .outline
            .toks
            .iter()
            .any(|t| t.kind == Kind::Comment && t.start < offset && offset <= t.end);
        let code: Vec<Tok> = file
            .outline
            .toks
            .iter()
            .copied()
            .filter(|t| t.kind != Kind::Comment)
            .collect();
        let mut at = None;
        for (i, t) in code.iter().enumerate() {
            if t.start > offset {
                break;
            }
            if offset <= t.end && (at.is_none() || t.kind != Kind::Punct) {
                at = Some(i);
            }
        }
        Cursor {
            src,
            code,
            at,
            offset,
            in_comment,
        }
    }

    /// The text of token `i` (empty out of range).
    pub fn text(&self, i: usize) -> &'a str {
        self.code.get(i).map_or("", |t| t.text(self.src))
    }

    /// The text of the token `back` places before token `i` (empty if none).
    pub fn before(&self, i: usize, back: usize) -> &'a str {
        i.checked_sub(back).map_or("", |j| self.text(j))
    }
}

/// A name under the cursor and what it names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Subject {
    /// `request.NAME`, `endpoint.NAME`, `outcome.NAME`.
    Field(&'static str, String),
    /// `state.NAME` or an assignment to slot NAME in an `on` block.
    StateSlot(String),
    /// A built-in function name followed by `(`.
    Function(String),
    /// A strategy name after `via` (or `expect strategy`), or at its definition.
    Strategy(String),
    /// A logical model named by a string target.
    Model(String),
    /// An endpoint id after `endpoint`.
    Endpoint(String),
    /// A route name after `expect route`, or at its definition.
    Route(String),
    /// A rule name after `expect rule`, or at its definition.
    Rule(String),
    /// A bare name inside a strategy: a parameter or a `let`.
    Local(String),
}

/// What the token under the cursor names, if anything.
pub fn subject(c: &Cursor<'_>) -> Option<Subject> {
    let i = c.at?;
    let t = c.code[i];
    let w = t.text(c.src);
    match t.kind {
        Kind::Str => {
            let inner = w.trim_start_matches('"').trim_end_matches('"').to_string();
            let prev = c.before(i, 1);
            if prev == "endpoint" {
                return Some(Subject::Endpoint(inner));
            }
            if matches!(prev, "use" | "->" | "fallback")
                || (prev == "model" && matches!(c.before(i, 2), "expect" | "share"))
            {
                return Some(Subject::Model(inner));
            }
            None
        }
        Kind::Ident => {
            let prev = c.before(i, 1);
            if prev == "." {
                let ns = c.before(i, 2);
                return match ns {
                    "request" | "endpoint" | "outcome" => {
                        Some(Subject::Field(static_ns(ns), w.to_string()))
                    }
                    "state" => Some(Subject::StateSlot(w.to_string())),
                    _ => None,
                };
            }
            if c.text(i + 1) == "." {
                return None;
            }
            match prev {
                "via" => return Some(Subject::Strategy(w.to_string())),
                // The definition's own name, or `expect strategy|route|rule NAME`.
                "strategy" => return Some(Subject::Strategy(w.to_string())),
                "route" => return Some(Subject::Route(w.to_string())),
                "rule" => return Some(Subject::Rule(w.to_string())),
                _ => {}
            }
            if c.text(i + 1) == "(" {
                return Some(Subject::Function(w.to_string()));
            }
            Some(Subject::Local(w.to_string()))
        }
        _ => None,
    }
}

fn static_ns(ns: &str) -> &'static str {
    match ns {
        "request" => "request",
        "endpoint" => "endpoint",
        _ => "outcome",
    }
}

impl<'v> SetIndex<'v> {
    /// Indexes every file of `view`; `uri` is the file asked about.
    pub fn new(view: &'v SetView, uri: &Url) -> Option<SetIndex<'v>> {
        let mut files = Vec::new();
        let mut current = None;
        for (_, f) in view.sources.files() {
            let file_uri = view.uris.get(&f.name).cloned();
            if file_uri.as_ref() == Some(uri) {
                current = Some(files.len());
            }
            files.push(FileIx {
                name: f.name.clone(),
                outline: Outline::new(&f.text),
                text: f.text.clone(),
                uri: file_uri,
            });
        }
        Some(SetIndex {
            files,
            view,
            current: current?,
        })
    }

    /// The file asked about.
    pub fn file(&self) -> &FileIx {
        &self.files[self.current]
    }

    /// Every definition of `kind` named `name` in the set, as (file, definition).
    pub fn defs(&self, kind: DefKind, name: &str) -> Vec<(usize, usize)> {
        let mut out = Vec::new();
        for (fi, f) in self.files.iter().enumerate() {
            for (di, d) in f.outline.defs.iter().enumerate() {
                if d.kind == kind && d.name == name {
                    out.push((fi, di));
                }
            }
        }
        out
    }

    /// Every strategy name of the set (plus the built-in `priority`), sorted.
    pub fn strategy_names(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .files
            .iter()
            .flat_map(|f| f.outline.defs.iter())
            .filter(|d| d.kind == DefKind::Strategy)
            .map(|d| d.name.clone())
            .chain([crate::policy::check::BUILTIN_PRIORITY.to_string()])
            .collect();
        v.sort();
        v.dedup();
        v
    }

    /// The LSP location of bytes `span` of file `fi` (`None` for built-ins).
    pub fn location(&self, fi: usize, span: (usize, usize)) -> Option<Location> {
        let f = self.files.get(fi)?;
        let uri = f.uri.clone()?;
        let ix = LineIndex::new(&f.text);
        Some(Location::new(uri, ix.range(&f.text, span.0, span.1)))
    }

    /// Definitions local to the strategy around `offset` of the current file: its
    /// parameters, lets and state slots, as indices into the current outline.
    pub fn locals(&self, offset: usize) -> Vec<usize> {
        let o = &self.file().outline;
        let Some(s) = o.enclosing(offset, &[DefKind::Strategy]) else {
            return Vec::new();
        };
        o.defs
            .iter()
            .enumerate()
            .filter(|(_, d)| d.container == Some(s))
            .map(|(i, _)| i)
            .collect()
    }

    /// The header of definition `di` of file `fi` as written up to its `{` (spaces
    /// collapsed), e.g. `strategy fast(beta = 0.5)`.
    pub fn header(&self, fi: usize, di: usize) -> String {
        let f = &self.files[fi];
        let d = &f.outline.defs[di];
        let end = match d.kind {
            DefKind::Param | DefKind::State | DefKind::Let => d.span.1,
            _ => f.text[d.span.0..]
                .find('{')
                .map_or(d.span.1, |i| d.span.0 + i),
        };
        let mut text = f.text.get(d.span.0..end).unwrap_or("").to_string();
        if matches!(d.kind, DefKind::State | DefKind::Let) {
            text = f.text[d.span.0..].lines().next().unwrap_or("").to_string();
        }
        let one: Vec<&str> = text
            .lines()
            .map(|l| l.split('#').next().unwrap_or(""))
            .flat_map(str::split_whitespace)
            .collect();
        one.join(" ")
            .replace("( ", "(")
            .replace(" )", ")")
            .replace(" ,", ",")
    }
}
