//! Text → [`super::ast::PolicyFile`].
//!
//! Three passes, all bounded so no input can make the parser panic, hang or overflow
//! the stack:
//! 1. a lexical pre-scan ([`prescan`]) that enforces [`MAX_INPUT_BYTES`] and
//!    [`MAX_NESTING`] (brackets outside strings and comments), refuses a lone
//!    carriage return, and collects comments;
//! 2. pest with a call limit ([`PEST_CALL_LIMIT`]) and human rule names in errors;
//! 3. conversion to the AST, with a Pratt parser for operator precedence and a bound
//!    on expression depth ([`MAX_EXPR_DEPTH`]).

// A syntax error ends parsing of its item, so the (large) Diagnostic travels up a
// short, cold path once; boxing it everywhere would only add noise.
#![allow(clippy::result_large_err)]

use std::num::NonZeroUsize;
use std::sync::{LazyLock, Once};

use pest::error::InputLocation;
use pest::pratt_parser::{Assoc, Op, PrattParser};
use pest::Parser as _;

use super::ast::*;
use super::diagnostic::{codes, Diagnostic};
use super::grammar::{PolicyGrammar, Rule};
use super::source::SourceMap;

mod literal;

/// Largest accepted policy file, in bytes (1 MiB).
pub const MAX_INPUT_BYTES: usize = 1 << 20;
/// Deepest accepted nesting of `(`, `[` and `{`.
pub const MAX_NESTING: usize = 64;
/// Deepest accepted expression tree (operators and calls), including prefix chains.
pub const MAX_EXPR_DEPTH: u32 = 200;
/// Bound on pest's internal rule calls per parse (pest `set_call_limit`).
pub const PEST_CALL_LIMIT: usize = 50_000_000;

type Res<T> = Result<T, Diagnostic>;

/// Parses file `file` of `sources`.
///
/// # Errors
/// Every problem found: input too large, nesting too deep, the first syntax error
/// (pest stops there), and every malformed literal.
pub fn parse_file(sources: &SourceMap, file: FileId) -> Result<PolicyFile, Vec<Diagnostic>> {
    let Some(src) = sources.get(file) else {
        return Err(vec![Diagnostic::global(
            codes::SYNTAX,
            "the policy file is not in the source map",
        )]);
    };
    let text = src.text.as_str();
    let comments = prescan(text, file).map_err(|d| vec![d])?;
    static LIMIT: Once = Once::new();
    LIMIT.call_once(|| pest::set_call_limit(NonZeroUsize::new(PEST_CALL_LIMIT)));
    let mut pairs =
        PolicyGrammar::parse(Rule::file, text).map_err(|e| vec![pest_error(e, file, text)])?;
    let mut items = Vec::new();
    let mut diags = Vec::new();
    let top = pairs.next().map(|p| p.into_inner());
    for pair in top.into_iter().flatten() {
        if pair.as_rule() == Rule::EOI {
            continue;
        }
        let c = Conv { file };
        let item = match pair.as_rule() {
            Rule::route_def => c.route(pair).map(Item::Route),
            Rule::strategy_def => c.strategy(pair).map(Item::Strategy),
            _ => c.test(pair).map(Item::Test),
        };
        match item {
            Ok(i) => items.push(i),
            Err(d) => diags.push(d),
        }
    }
    if diags.is_empty() {
        Ok(PolicyFile {
            file,
            items,
            comments,
        })
    } else {
        Err(diags)
    }
}

/// Parses one text as a file named `name` in a fresh source map (tests, fuzzing).
///
/// # Errors
/// As [`parse_file`].
pub fn parse_str(
    name: &str,
    text: &str,
) -> Result<(SourceMap, PolicyFile), (SourceMap, Vec<Diagnostic>)> {
    let mut sources = SourceMap::new();
    let id = sources.add(name, text);
    match parse_file(&sources, id) {
        Ok(f) => Ok((sources, f)),
        Err(d) => Err((sources, d)),
    }
}

/// Checks size and bracket nesting and collects comments, without pest.
///
/// # Errors
/// [`codes::INPUT_TOO_LARGE`], [`codes::SYNTAX`] for a lone carriage return, or
/// [`codes::TOO_DEEP`].
pub fn prescan(text: &str, file: FileId) -> Res<Vec<Comment>> {
    if text.len() > MAX_INPUT_BYTES {
        return Err(Diagnostic::error(
            codes::INPUT_TOO_LARGE,
            Span::new(file, 0, 0),
            format!(
                "the policy file is {} bytes; the limit is {} bytes",
                text.len(),
                MAX_INPUT_BYTES
            ),
        )
        .with_help("split the policy set into several files"));
    }
    if let Some(cr) = lone_cr(text) {
        return Err(Diagnostic::error(
            codes::SYNTAX,
            Span::new(file, cr, cr + 1),
            "this line ends with a lone carriage return (CR, old Mac line endings); policy files end lines with LF or CRLF",
        )
        .with_span_label("lone CR")
        .with_help(
            "save the file with LF (Unix) or CRLF (Windows) line endings, e.g. `tr '\\r' '\\n'` for a file that uses CR throughout",
        ));
    }
    let mut comments = Vec::new();
    let mut depth = 0usize;
    let mut in_string = false;
    let mut line_has_code = false;
    let mut it = text.char_indices().peekable();
    while let Some((i, ch)) = it.next() {
        if in_string {
            match ch {
                '\\' => {
                    it.next();
                }
                '"' => in_string = false,
                '\n' => {
                    in_string = false;
                    line_has_code = false;
                }
                _ => {}
            }
            continue;
        }
        match ch {
            '#' => {
                let start = i;
                let mut end = text.len();
                while let Some(&(j, c)) = it.peek() {
                    if c == '\n' {
                        end = j;
                        break;
                    }
                    it.next();
                }
                let body = text.get(start + 1..end).unwrap_or("");
                comments.push(Comment {
                    text: body.trim_end_matches('\r').to_string(),
                    span: Span::new(file, start, end),
                    trailing: line_has_code,
                });
            }
            '"' => {
                in_string = true;
                line_has_code = true;
            }
            '\n' => line_has_code = false,
            '(' | '[' | '{' => {
                depth += 1;
                line_has_code = true;
                if depth > MAX_NESTING {
                    return Err(Diagnostic::error(
                        codes::TOO_DEEP,
                        Span::new(file, i, i + 1),
                        format!("brackets are nested more than {MAX_NESTING} levels deep"),
                    )
                    .with_help("use `let` bindings or simpler conditions"));
                }
            }
            ')' | ']' | '}' => {
                depth = depth.saturating_sub(1);
                line_has_code = true;
            }
            c if c.is_whitespace() => {}
            _ => line_has_code = true,
        }
    }
    Ok(comments)
}

/// The offset of the first `\r` not followed by `\n`.
///
/// A line ends at `\n`, so a CRLF file reads as LF plus a `\r` of whitespace before
/// each line break. A lone CR is not a line break anywhere in the pipeline (grammar,
/// comments, line:col, fmt), so a `#` comment would run on past it to the next `\n`,
/// or to the end of an old-Mac file: it is refused here, where it is, rather than
/// read as one long line.
fn lone_cr(text: &str) -> Option<usize> {
    let b = text.as_bytes();
    b.iter()
        .enumerate()
        .find(|&(i, &c)| c == b'\r' && b.get(i + 1) != Some(&b'\n'))
        .map(|(i, _)| i)
}

fn pest_error(e: pest::error::Error<Rule>, file: FileId, text: &str) -> Diagnostic {
    let (start, end) = match e.location {
        InputLocation::Pos(p) => (p, p),
        InputLocation::Span((s, e)) => (s, e),
    };
    // At least the whole character there (an emoji is four bytes), so no span ends
    // inside a character and an editor's range is never empty.
    let char_end = start
        + text
            .get(start..)
            .and_then(|r| r.chars().next())
            .map_or(1, char::len_utf8);
    let span = Span::new(file, start, end.max(char_end));
    let (positives, negatives) = match &e.variant {
        pest::error::ErrorVariant::ParsingError {
            positives,
            negatives,
        } => (positives.clone(), negatives.clone()),
        pest::error::ErrorVariant::CustomError { message } => {
            let code = if message.contains("call limit") {
                codes::PARSE_LIMIT
            } else {
                codes::SYNTAX
            };
            return Diagnostic::error(code, span, "the policy file takes too much work to parse")
                .with_help("simplify or split the file");
        }
    };
    let mut names: Vec<&str> = Vec::new();
    let mut operator = false;
    for r in &positives {
        let is_op = matches!(
            r,
            Rule::or_op
                | Rule::and_op
                | Rule::not_in_op
                | Rule::in_op
                | Rule::eq_op
                | Rule::ne_op
                | Rule::le_op
                | Rule::ge_op
                | Rule::lt_op
                | Rule::gt_op
                | Rule::add_op
                | Rule::sub_op
                | Rule::mul_op
                | Rule::div_op
                | Rule::rem_op
        );
        let name = if is_op {
            if operator {
                continue;
            }
            operator = true;
            "an operator (`and`, `==`, `+`, ...)"
        } else {
            human_rule_name(*r)
        };
        if !names.contains(&name) {
            names.push(name);
        }
    }
    let found = found_at(text, start);
    let message = if !names.is_empty() {
        format!("expected {}, found {found}", join_or(&names))
    } else if let Some(n) = negatives.first() {
        format!("unexpected {}", human_rule_name(*n))
    } else {
        format!("unexpected {found}")
    };
    if let Some(d) = unterminated_string(text, start, file) {
        return d;
    }
    // A missing `}` shows up only where the next item begins (or at the end of the
    // file): name the block left open, which is where the fix goes. But only when
    // the statement before is complete (the parser was looking for the next one):
    // after `reject 429` the missing piece is the message, and `}` comes later.
    let at_item = found == "the end of the file"
        || ["`route`", "`strategy`", "`test`"].contains(&found.as_str());
    let open = unclosed_brace(text, start).filter(|_| at_item);
    if let Some(open) = open.filter(|_| brace_fits(text, start)) {
        let (line, col) = line_col(text, open);
        return Diagnostic::error(
            codes::SYNTAX,
            span,
            format!("unclosed `{{` opened at {line}:{col}: expected `}}`, found {found}"),
        )
        .with_label(Span::new(file, open, open + 1), "this `{` is never closed")
        .with_help("add the missing `}` where the block ends");
    }
    let mut d = Diagnostic::error(codes::SYNTAX, span, message);
    if let Some(open) = open {
        d = d.with_label(
            Span::new(file, open, open + 1),
            "this `{` is not closed either",
        );
    }
    if operator && found == "`=`" {
        return d.with_help("compare with `==`; a single `=` only assigns");
    }
    match text.get(start..).and_then(|r| r.chars().next()) {
        Some('\u{feff}') => {
            return d.with_help(
                "the file contains a byte order mark (U+FEFF); save it as UTF-8 without a BOM",
            )
        }
        Some('\0') => {
            return d
                .with_help("the file contains a NUL byte (U+0000); policy files are plain text")
        }
        _ => {}
    }
    if let Some(pct) = percent_before(text, start) {
        return d.with_help(format!(
            "`{pct}` is a percentage ({}); for the remainder operator put spaces around it: `{} % ...`",
            percent_value(&pct),
            pct.trim_end_matches('%')
        ));
    }
    d
}

/// Whether the grammar accepts a `}` at `pos`, that is, the statement before `pos`
/// is complete and a block may end there (after `reject 429` it may not: the message
/// is missing). Asked of the grammar itself, by parsing the text up to `pos` with a
/// `}` after it; only on the way to a syntax error.
fn brace_fits(text: &str, pos: usize) -> bool {
    let Some(head) = text.get(..pos) else {
        return false;
    };
    match PolicyGrammar::parse(Rule::file, &format!("{head}}}")) {
        Ok(_) => true,
        Err(e) => match e.location {
            InputLocation::Pos(p) | InputLocation::Span((p, _)) => p > pos,
        },
    }
}

/// The offset of the innermost `{` still open at `upto` (strings and `#` comments
/// skipped), if any.
fn unclosed_brace(text: &str, upto: usize) -> Option<usize> {
    let mut open = Vec::new();
    let mut it = text.get(..upto)?.char_indices();
    while let Some((i, ch)) = it.next() {
        match ch {
            '"' => {
                while let Some((_, c)) = it.next() {
                    match c {
                        '\\' => {
                            it.next();
                        }
                        '"' | '\n' => break,
                        _ => {}
                    }
                }
            }
            '#' => {
                for (_, c) in it.by_ref() {
                    if c == '\n' {
                        break;
                    }
                }
            }
            '{' => open.push(i),
            '}' => {
                open.pop();
            }
            _ => {}
        }
    }
    open.pop()
}

/// 1-based line and column (in characters) of byte `offset` of `text`.
fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = text.get(..offset).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().unwrap_or("").chars().count() + 1;
    (line, col)
}

/// E0101 for a string opened at `pos` that the line ends before closing.
fn unterminated_string(text: &str, pos: usize, file: FileId) -> Option<Diagnostic> {
    let rest = text.get(pos..)?;
    if !rest.starts_with('"') {
        return None;
    }
    let line = rest.lines().next().unwrap_or(rest);
    let mut escaped = false;
    for c in line.chars().skip(1) {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            '"' => return None,
            _ => {}
        }
    }
    let end = pos + line.trim_end_matches('\r').len();
    Some(
        Diagnostic::error(
            codes::SYNTAX,
            Span::new(file, pos, end.max(pos + 1)),
            "this string is not closed: the line ends before its closing `\"`",
        )
        .with_span_label("unterminated string")
        .with_help(
            "add the closing `\"`; a string cannot span lines (write `\\n` for a line break)",
        ),
    )
}

/// The percentage literal (`10%`) that ends right before `pos`, if one does.
fn percent_before(text: &str, pos: usize) -> Option<String> {
    let before = text.get(..pos)?;
    let body = before.strip_suffix('%')?;
    let num: String = body
        .chars()
        .rev()
        .take_while(|c| c.is_ascii_digit() || *c == '.' || *c == '_')
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    let next = text.get(pos..)?.chars().next()?;
    (!num.is_empty() && (next.is_ascii_alphanumeric() || next == '_' || next == '('))
        .then(|| format!("{num}%"))
}

/// `10%` → `0.1`, for help text.
fn percent_value(pct: &str) -> String {
    pct.trim_end_matches('%')
        .replace('_', "")
        .parse::<f64>()
        .map(|v| format!("{}", v / 100.0))
        .unwrap_or_else(|_| "a fraction".to_string())
}

/// "`x`" for the token at `pos`, or "the end of the file".
fn found_at(text: &str, pos: usize) -> String {
    let rest = text.get(pos..).unwrap_or("");
    let word: String = match rest.chars().next() {
        None => return "the end of the file".to_string(),
        Some(c) if c.is_alphanumeric() || c == '_' => rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .take(40)
            .collect(),
        Some('\n' | '\r') => return "a line break".to_string(),
        Some(' ') => return "a space".to_string(),
        Some('\t') => return "a tab".to_string(),
        // Whitespace the grammar does not skip (a no-break space, a form feed) looks
        // like a space but is not one: name it.
        Some(c)
            if c.is_control()
                || c.is_whitespace()
                || matches!(c, '\u{feff}' | '\u{200b}'..='\u{200d}' | '\u{2060}') =>
        {
            return invisible(c);
        }
        Some(c) => c.to_string(),
    };
    format!("`{word}`")
}

/// A visible name for an invisible character: "U+FEFF (a byte order mark)".
fn invisible(c: char) -> String {
    let what = match c {
        '\u{feff}' => " (a byte order mark)",
        '\0' => " (a NUL byte)",
        '\u{200b}' => " (a zero-width space)",
        '\u{a0}' | '\u{202f}' => " (a no-break space)",
        '\u{b}' => " (a vertical tab)",
        '\u{c}' => " (a form feed)",
        _ => "",
    };
    format!("the invisible character U+{:04X}{what}", c as u32)
}

fn join_or(names: &[&str]) -> String {
    match names {
        [] => String::new(),
        [a] => (*a).to_string(),
        [rest @ .., last] => format!("{} or {last}", rest.join(", ")),
    }
}

/// The human name of a grammar rule, as used in "expected ..." messages.
pub fn human_rule_name(rule: Rule) -> &'static str {
    use Rule as R;
    match rule {
        R::EOI => "end of file",
        R::file | R::item => "`route`, `strategy` or `test`",
        R::ident | R::var => "a name like `long_context`",
        R::keyword => "a keyword",
        R::string | R::string_inner => "a string like `\"gpt-4o\"`",
        R::digits | R::int => "a whole number like `100`",
        R::decimal | R::float => "a number like `0.5`",
        R::exponent => "an exponent like `e-3`",
        R::duration => "a duration like `250ms`",
        R::percent => "a percentage like `5%`",
        R::bool => "`true` or `false`",
        R::neg | R::neg_op => "`-`",
        R::literal => "a constant like `0.5`, `2s`, `5%` or `\"text\"`",
        R::expr | R::paren | R::path | R::call | R::list => {
            "an expression like `request.input_tokens > 1000`"
        }
        R::not_op => "`not`",
        R::or_op => "`or`",
        R::and_op => "`and`",
        R::not_in_op => "`not in`",
        R::in_op => "`in`",
        R::eq_op | R::ne_op | R::le_op | R::ge_op | R::lt_op | R::gt_op => "a comparison",
        R::add_op | R::sub_op | R::mul_op | R::div_op | R::rem_op => "an operator",
        R::route_def => "`route`",
        R::item_prio => "`priority N`",
        R::when_clause => "`when` and a condition",
        R::rule_def => "`rule`",
        R::default_def => "`default`",
        R::block => "`{`",
        R::use_action => "`use`",
        R::target => "a target: a model like `\"gpt-4o\"`, `endpoint \"id\"`, `model` or `any`",
        R::endpoint_target => "`endpoint \"id\"`",
        R::any_target => "`any`",
        R::model_target => "`model`",
        R::via_clause => "`via` and a strategy",
        R::args => "strategy arguments like `(beta = 0.1)`",
        R::arg => "an argument like `beta = 0.1`",
        R::split_action => "`split by`",
        R::split_key => {
            "a split key: `api_key`, `org`, `header(\"name\")`, `metadata(\"key\")` or `random`"
        }
        R::header_key => "`header(\"name\")`",
        R::metadata_key => "`metadata(\"key\")`",
        R::api_key_key => "`api_key`",
        R::org_key => "`org`",
        R::random_key => "`random`",
        R::split_seed => "`seed N`",
        R::split_arm => "a split arm like `5% -> use \"gpt-4o\"`",
        R::canary_kw => "`canary`",
        R::rollback => "`rollback when ...`",
        R::reject_action => "`reject STATUS \"message\"`",
        R::reject_status => "an HTTP status like `429`",
        R::reject_message => "the message to answer with, a string like `\"over quota\"`",
        R::set_priority => "`set priority LEVEL`",
        R::priority_level => "a priority: `critical`, `high`, `normal` or `low`",
        R::cache_def => "`cache on`, `cache exact` or `cache off`",
        R::cache_on => "`on`",
        R::cache_exact | R::exact_kw => "`exact`",
        R::cache_off => "`off`",
        R::hold_def | R::hold_kw => "`hold off_peak`",
        R::hold_what => "what to hold the request for: `off_peak`",
        R::fallback_def => "`fallback`",
        R::fallback_on => "`on` and a list of HTTP statuses like `409, 5xx`",
        R::status_class => "a status class like `5xx`",
        R::retries => "`retries N`",
        R::backoff => "`backoff 100ms..2s`",
        R::continue_action => "`continue`",
        R::strategy_def => "`strategy`",
        R::params => "parameters like `(beta = 0.05)`",
        R::param => "a parameter like `beta = 0.05`",
        R::param_range => "a range like `in (0, 1]`",
        R::range_open => "`(` or `[`",
        R::range_close => "`)` or `]`",
        R::state_def => "`state NAME = value`",
        R::join_clause => "`join mean` or `join initial`",
        R::join_mode => "`mean` or `initial`",
        R::let_def => "`let NAME = expression`",
        R::require_def => "`require` and a condition",
        R::prefer_def => "`prefer` and a condition",
        R::score_def => "`score = expression`",
        R::pick_def => "`pick min|max|weighted|sample`",
        R::pick_mode => "`min`, `max`, `weighted` or `sample`",
        R::on_def => "`on success { ... }`",
        R::on_event => "`pick`, `success` or `failure`",
        R::assign => "an assignment like `weight = weight * 2`",
        R::test_def => "`test \"name\" { ... }`",
        R::request_block => "`request { ... }`",
        R::req_assign => "a request field like `input_tokens = 1000`",
        R::req_key => "a request field name",
        R::stats_block => "`stats { ... }`",
        R::stats_entry => "an endpoint entry like `\"openai/gpt-4o\" { health = 0.5 }`",
        R::stat_assign => "a statistic like `health = 0.5`",
        R::stat_key => "a statistic name like `health`",
        R::seed_stmt => "`seed N`",
        R::sample_stmt => "`sample N by KEY`",
        R::expect_stmt => "`expect ...`",
        R::expect_reject => "`reject STATUS`",
        R::expect_is => "an expectation like `rule long_context`",
        R::expect_share => "`share endpoint \"id\" = 5% within 1%`",
        R::expect_what => {
            "`route`, `rule`, `endpoint`, `model`, `strategy`, `arm`, `priority`, `cache` or `hold`"
        }
        R::expect_value => "a name, string or number",
        R::WHITESPACE | R::COMMENT => "whitespace",
        _ => "valid syntax",
    }
}

static PRATT: LazyLock<PrattParser<Rule>> = LazyLock::new(|| {
    // Later ops bind tighter. Prefix `not` sits between `and` and the comparisons so
    // that `not a == b` reads as `not (a == b)` (ENGINE-NOTES, pest).
    PrattParser::new()
        .op(Op::infix(Rule::or_op, Assoc::Left))
        .op(Op::infix(Rule::and_op, Assoc::Left))
        .op(Op::prefix(Rule::not_op))
        .op(Op::infix(Rule::eq_op, Assoc::Left)
            | Op::infix(Rule::ne_op, Assoc::Left)
            | Op::infix(Rule::lt_op, Assoc::Left)
            | Op::infix(Rule::le_op, Assoc::Left)
            | Op::infix(Rule::gt_op, Assoc::Left)
            | Op::infix(Rule::ge_op, Assoc::Left)
            | Op::infix(Rule::in_op, Assoc::Left)
            | Op::infix(Rule::not_in_op, Assoc::Left))
        .op(Op::infix(Rule::add_op, Assoc::Left) | Op::infix(Rule::sub_op, Assoc::Left))
        .op(Op::infix(Rule::mul_op, Assoc::Left)
            | Op::infix(Rule::div_op, Assoc::Left)
            | Op::infix(Rule::rem_op, Assoc::Left))
        .op(Op::prefix(Rule::neg_op))
});

/// Pair → AST conversion for one file.
struct Conv {
    file: FileId,
}

mod convert;

#[cfg(test)]
mod tests;
