//! Parser tests: every construct parses, precedence, errors with line:col, limits.

use super::*;

const CHAT: &str = r#"# Chat routing.
route chat priority 5 when request.model in ["gpt-4o", "gpt-4o-mini"] {
  set priority high when has(header("x-interactive")) and header("x-interactive") == "1"
  cache on ttl 5m

  rule long_context priority 10 when request.input_tokens > 100_000 {
    use "claude-sonnet" via least_latency(beta = 0.1)
  }
  rule search_team when has(header("x-team")) and header("x-team") == "search" {
    split by api_key seed 7 {
      95% -> use "gpt-4o"
       5% -> canary use "gpt-4o-next" rollback when endpoint.health < 0.8
    }
  }
  rule batch when request.priority == "low" { use any via cost_optimized(max_latency = 2s) continue }
  rule blocked when not request.stream and -request.messages < -100 { reject 429 "too many \"messages\"" }
  default use model
  fallback "gpt-4o" -> endpoint "anthropic/claude-sonnet" retries 2 backoff 100ms..2s
}

strategy least_latency(beta = 0.05, alpha = 0.3 in (0, 1]) {
  state lat = 0.0 join mean
  let base = endpoint.latency_ewma_ms
  require endpoint.health > 0.3
  score = base + beta * request.input_tokens
  pick min
  on success { lat = alpha * outcome.latency_ms + (1 - alpha) * lat }
}

test "long prompts" {
  request { model = "gpt-4o", input_tokens = 150000, header("x-team") = "search" }
  stats { "openai/gpt-4o" { health = 0.5, state.least_latency.lat = 1.0 } }
  seed 3
  expect rule long_context
  expect endpoint "anthropic/claude-sonnet"
}
test "split" {
  request { model = "gpt-4o" header("x-team") = "search" }
  sample 10000 by api_key
  expect share model "gpt-4o-next" = 5% within 1%
  expect reject 429
}
"#;

fn parse_ok(text: &str) -> PolicyFile {
    match parse_str("t.policy", text) {
        Ok((_, f)) => f,
        Err((m, d)) => panic!("{}", crate::policy::diagnostic::render_all(&d, &m)),
    }
}

pub(crate) fn parse_err(text: &str) -> String {
    match parse_str("t.policy", text) {
        Ok(_) => panic!("expected an error for {text:?}"),
        Err((m, d)) => d.iter().map(|d| d.render(&m)).collect(),
    }
}

#[test]
fn every_construct_parses() {
    let f = parse_ok(CHAT);
    assert_eq!(f.items.len(), 4);
    assert_eq!(f.comments.len(), 1);
    assert_eq!(f.comments[0].text, " Chat routing.");
    let Item::Route(r) = &f.items[0] else {
        panic!()
    };
    assert_eq!(r.name.name, "chat");
    assert_eq!(r.priority.as_ref().map(|p| p.node), Some(5));
    assert_eq!(r.items.len(), 8);
    let Item::Strategy(s) = &f.items[1] else {
        panic!()
    };
    assert_eq!(s.params.len(), 2);
    assert!(s.params[1]
        .range
        .as_ref()
        .is_some_and(|r| !r.lo_inclusive && r.hi_inclusive));
    let Item::Test(t) = &f.items[3] else { panic!() };
    assert_eq!(t.items.len(), 4);
}

fn expr_of(src: &str) -> Expr {
    let f = parse_ok(&format!("route r when {src} {{ default use model }}"));
    let Item::Route(r) = f.items.into_iter().next().unwrap() else {
        panic!()
    };
    r.when.unwrap()
}

fn show(e: &Expr) -> String {
    match &e.kind {
        ExprKind::Binary(op, a, b) => format!("({} {} {})", show(a), op.as_str(), show(b)),
        ExprKind::Unary(UnaryOp::Not, a) => format!("(not {})", show(a)),
        ExprKind::Unary(UnaryOp::Neg, a) => format!("(-{})", show(a)),
        ExprKind::Var(i) => i.name.clone(),
        ExprKind::Lit(LitKind::Int(v)) => v.to_string(),
        ExprKind::Path(p) => p
            .iter()
            .map(|i| i.name.as_str())
            .collect::<Vec<_>>()
            .join("."),
        other => format!("{other:?}"),
    }
}

#[test]
fn precedence() {
    assert_eq!(show(&expr_of("a or b and c")), "(a or (b and c))");
    assert_eq!(show(&expr_of("not a == b")), "(not (a == b))");
    assert_eq!(show(&expr_of("not a and b")), "((not a) and b)");
    assert_eq!(show(&expr_of("1 + 2 * 3 - 4")), "((1 + (2 * 3)) - 4)");
    assert_eq!(show(&expr_of("-a * b")), "((-a) * b)");
    assert_eq!(
        show(&expr_of("a not in b or c in d")),
        "((a not in b) or (c in d))"
    );
    assert_eq!(show(&expr_of("(1 + 2) * 3")), "((1 + 2) * 3)");
    assert_eq!(show(&expr_of("index > 1")), "(index > 1)");
}

#[test]
fn equality_ignores_layout() {
    let a = parse_ok("route r { default use model }");
    let b = parse_ok("route   r {\n\n  default   use model   # c\n}");
    assert_eq!(a.items, b.items);
}

#[test]
fn syntax_errors_have_human_names_and_positions() {
    let e = parse_err("route r {\n  cache on ttl 5\n}");
    assert!(e.contains("t.policy:2:16"), "{e}");
    assert!(e.contains("a duration like `250ms`"), "{e}");
    let e = parse_err("route and { default use model }");
    assert!(e.contains("t.policy:1:7"), "{e}");
    assert!(e.contains("a name like"), "{e}");
    let e = parse_err("route r { rule x when a == { use model } default use model }");
    assert!(e.contains("expression"), "{e}");
}

#[test]
fn literal_errors_are_reported() {
    let e = parse_err("route r { rule x when a == \"\\q\" { use model } default use model }");
    assert!(
        e.contains("E0104") && e.contains("not a known escape"),
        "{e}"
    );
    let e = parse_err("route r { cache on ttl 1.5ms default use model }");
    assert!(e.contains("whole number of milliseconds"), "{e}");
}

#[test]
fn limits_are_enforced_without_overflow() {
    let deep = format!(
        "route r when {}1{} {{ default use model }}",
        "(".repeat(5000),
        ")".repeat(5000)
    );
    assert!(parse_err(&deep).contains("E0103"));
    let nots = format!(
        "route r when {}a {{ default use model }}",
        "not ".repeat(100_000)
    );
    assert!(parse_err(&nots).contains("E0103"));
    let chain = format!(
        "route r when a{} {{ default use model }}",
        " or a".repeat(50_000)
    );
    assert!(parse_err(&chain).contains("E0103"));
    let big = "#".repeat(MAX_INPUT_BYTES + 1);
    assert!(parse_err(&big).contains("E0102"));
}

#[test]
fn garbage_never_panics() {
    for s in [
        "",
        "route",
        "route r {",
        "\"",
        "route r when \"abc",
        "}}}}",
        "route r { split by { } }",
        "test \"x\" { expect share arm 1 = 5% within }",
        "strategy s( { }",
        "\u{0}\u{ffff}",
        "route r when 1 +",
    ] {
        let _ = parse_str("t.policy", s);
    }
}

/// Syntax errors point at the offending spot (file:line:col and a caret) and say
/// what was expected in words, never in grammar rule names.
#[test]
fn syntax_errors_name_the_spot_and_what_was_expected() {
    for (text, at) in [
        ("route r {\n  cache on ttl 5\n}", "t.policy:2:"),
        (
            "route r {\n  rule x when request.model = \"a\" { use model }\n}",
            "t.policy:2:",
        ),
        (
            "route r { default use model }\nstrategy s { pick best }",
            "t.policy:2:",
        ),
        (
            "test \"t\" { expect share arm 1 = 5% within }",
            "t.policy:1:",
        ),
    ] {
        let err = parse_err(text);
        assert!(err.contains(at), "{text:?} -> {err}");
        assert!(err.contains('^'), "no caret: {err}");
        assert!(err.contains("expected"), "says nothing expected: {err}");
        assert!(
            !err.contains("_lit") && !err.contains("EOI"),
            "rule names: {err}"
        );
    }
}

#[test]
fn fallback_on_lists_statuses_and_classes_before_retries() {
    let f = parse_ok(
        "route r {\n  fallback \"gpt-4o\" -> \"smollm\" on 409, 422,5xx retries 1 backoff 1s\n  default use model\n}\n",
    );
    let Item::Route(r) = &f.items[0] else {
        panic!("not a route")
    };
    let RouteItem::Fallback(fb) = &r.items[0] else {
        panic!("not a fallback")
    };
    let on = fb.on.as_ref().expect("an on clause");
    let items: Vec<StatusLit> = on.items.iter().map(|i| i.node).collect();
    assert_eq!(
        items,
        [
            StatusLit::Code(409),
            StatusLit::Code(422),
            StatusLit::Class(5)
        ]
    );
    assert_eq!((on.span.start, on.span.end), (42, 57));
    assert_eq!(fb.retries.as_ref().map(|r| r.node), Some(1));
    // Without `on` nothing changes.
    let f = parse_ok("route r {\n  fallback \"gpt-4o\" retries 1\n  default use model\n}\n");
    let Item::Route(r) = &f.items[0] else {
        panic!("not a route")
    };
    assert!(matches!(&r.items[0], RouteItem::Fallback(fb) if fb.on.is_none()));
}

#[test]
fn fallback_on_syntax_errors_point_at_the_list() {
    let e = parse_err("route r {\n  fallback \"gpt-4o\" on retries 1\n  default use model\n}\n");
    assert!(e.contains("t.policy:2:24"), "{e}");
    // `on` goes before `retries`.
    let e =
        parse_err("route r {\n  fallback \"gpt-4o\" retries 1 on 409\n  default use model\n}\n");
    assert!(e.contains("t.policy:2:31"), "{e}");
    let e = parse_err("route r {\n  fallback \"gpt-4o\" on 409,\n  default use model\n}\n");
    assert!(e.contains("t.policy:3:3"), "{e}");
}

#[test]
fn cache_exact_parses_with_and_without_a_ttl() {
    let cache = |text: &str| match &parse_ok(text).items[0] {
        Item::Route(r) => match &r.items[0] {
            RouteItem::Cache(c) => (c.on, c.exact, c.ttl_ms.as_ref().map(|t| t.node)),
            other => panic!("{other:?}"),
        },
        other => panic!("{other:?}"),
    };
    assert_eq!(
        cache("route r {\n  cache exact ttl 5m\n  default use model\n}"),
        (true, true, Some(300_000))
    );
    assert_eq!(
        cache("route r {\n  cache exact\n  default use model\n}"),
        (true, true, None)
    );
    assert_eq!(
        cache("route r {\n  cache on ttl 2s\n  default use model\n}"),
        (true, false, Some(2000))
    );
    assert_eq!(
        cache("route r {\n  cache off\n  default use model\n}"),
        (false, false, None)
    );
    let e = parse_err("route r {\n  cache exactly\n  default use model\n}");
    assert!(e.contains("t.policy:2:9"), "{e}");
    assert!(e.contains("`exact`"), "{e}");
    let e = parse_err("route r {\n  cache exact ttl 5\n}");
    assert!(e.contains("a duration like `250ms`"), "{e}");
}

#[test]
fn hold_parses_in_a_route_a_rule_and_the_default() {
    let f = parse_ok(concat!(
        "route r {\n",
        "  hold off_peak\n",
        "  rule a when request.off_peak {\n    hold off_peak\n    use model\n  }\n",
        "  default hold off_peak\n",
        "}\n",
    ));
    let Item::Route(r) = &f.items[0] else {
        panic!("{:?}", f.items[0]);
    };
    let RouteItem::Hold(h) = &r.items[0] else {
        panic!("{:?}", r.items[0]);
    };
    assert_eq!(h.what.name, "off_peak");
    assert_eq!(
        (h.what.span.start, h.what.span.end, h.span.start, h.span.end),
        (17, 25, 12, 25)
    );
    let RouteItem::Rule(rule) = &r.items[1] else {
        panic!("{:?}", r.items[1]);
    };
    assert!(matches!(&rule.body[0], Action::Hold(h) if h.what.name == "off_peak"));
    let RouteItem::Default(d) = &r.items[2] else {
        panic!("{:?}", r.items[2]);
    };
    assert!(matches!(&d.body[..], [Action::Hold(_)]));
    // Any name parses (the checker says which are allowed); the keyword is a word.
    let f = parse_ok("route r {\n  hold peak\n  default use model\n}\n");
    let Item::Route(r) = &f.items[0] else {
        panic!("{:?}", f.items[0]);
    };
    assert!(matches!(&r.items[0], RouteItem::Hold(h) if h.what.name == "peak"));
    let e = parse_err("route r {\n  holdoff_peak\n  default use model\n}\n");
    assert!(e.contains("t.policy:2:3"), "{e}");
    let e = parse_err("route r {\n  default use model\n  hold\n}\n");
    assert!(
        e.contains("t.policy:4:1") && e.contains("what to hold the request for: `off_peak`"),
        "{e}"
    );
}

#[test]
fn a_no_break_space_or_form_feed_was_called_a_line_break() {
    for (text, want) in [
        (
            "route\u{a0}a { default use model }",
            "U+00A0 (a no-break space)",
        ),
        ("route\u{c}a { default use model }", "U+000C (a form feed)"),
        (
            "route\u{b}a { default use model }",
            "U+000B (a vertical tab)",
        ),
        ("route\u{2003}a { default use model }", "U+2003"),
    ] {
        let err = parse_err(text);
        assert!(err.contains(want), "{text:?} -> {err}");
        assert!(!err.contains("line break"), "{text:?} -> {err}");
    }
}

/// `-9223372036854775808` was refused as too large: the sign was parsed apart from
/// the digits, and the digits alone are one past `i64::MAX`.
#[test]
fn i64_min_literal_was_refused_as_too_large() {
    const MIN: &str = "-9223372036854775808";
    // In an expression, an `in` list, a strategy parameter and a priority.
    assert_eq!(
        show(&expr_of(&format!("a > {MIN}"))),
        format!("(a > {MIN})")
    );
    assert_eq!(
        show(&expr_of(&format!("a - - {MIN}"))),
        format!("(a - (-{MIN}))")
    );
    assert_eq!(
        show(&expr_of(&format!("{MIN} * b"))),
        format!("({MIN} * b)")
    );
    assert_eq!(show(&expr_of("-5 * b")), "(-5 * b)");
    let f = parse_ok(&format!(
        "strategy s(a = {MIN}) {{\n  require request.input_tokens in [{MIN}, 1]\n  pick min\n}}\n\
         route r priority {MIN} {{\n  default use model\n}}\n"
    ));
    let [Item::Strategy(s), Item::Route(r)] = &f.items[..] else {
        panic!("{:?}", f.items)
    };
    assert_eq!(s.params[0].default.kind, LitKind::Int(i64::MIN));
    assert_eq!(r.priority.as_ref().map(|p| p.node), Some(i64::MIN));
    // One further is out of range, with a clear error at the number.
    for text in [
        "route r when a > -9223372036854775809 { default use model }",
        "route r priority -9_223_372_036_854_775_809 { default use model }",
        "strategy s(a = - 9223372036854775809) { pick min }",
    ] {
        let e = parse_err(text);
        assert!(
            e.contains("E0104") && e.contains("the smallest is -9223372036854775808"),
            "{e}"
        );
    }
    let e = parse_err("route r priority -99999999999999999999 { default use model }");
    assert!(e.contains("t.policy:1:18"), "{e}");
    // The digits without a sign, or with the sign outside parentheses, stay too large.
    for text in [
        "route r when a > 9223372036854775808 { default use model }",
        "route r when a > -(9223372036854775808) { default use model }",
    ] {
        let e = parse_err(text);
        assert!(e.contains("E0104") && e.contains("too large"), "{e}");
    }
}

/// Lone-CR line endings (old Mac) made a `#` comment run on to the end of the file,
/// which then read as "unclosed `{`". A lone CR is refused where it is; CRLF is read
/// as before.
#[test]
fn lone_cr_line_endings_made_a_comment_swallow_the_rest_of_the_file() {
    let e = parse_err("route r { # c\r  default use model\r}\r");
    assert!(
        e.contains("E0101") && e.contains("lone carriage return") && e.contains("t.policy:1:14"),
        "{e}"
    );
    assert!(!e.contains("unclosed") && !e.contains('\r'), "{e:?}");
    // The first lone CR, after CRLF lines, inside a string or a comment alike.
    let e = parse_err("# a\r\nroute r {\r\n  default reject 400 \"a\rb\"\r\n}\r\n");
    assert!(e.contains("t.policy:3:24"), "{e}");
    let e = parse_err("route r {\n  default use model # x\r}\n");
    assert!(e.contains("t.policy:2:24"), "{e}");
    // CRLF: the comment ends at the line break, as with LF.
    let f = parse_ok("route r { # c\r\n  default use model\r\n}\r\n");
    assert_eq!(f.comments.len(), 1);
    assert_eq!(f.comments[0].text, " c");
}

/// `default reject 4` at the end of the file said "unclosed `{` ...: expected `}`":
/// the block's missing `}` was named although the statement before it stopped half
/// way. The missing piece is named now, with the open block as a second label; a
/// complete statement at the end still gets "unclosed `{`".
#[test]
fn reject_without_its_message_at_the_end_of_the_file_said_expected_brace() {
    let e = parse_err("route r {\n  default reject 4");
    assert!(
        e.contains("expected the message to answer with, a string like `\"over quota\"`, found the end of the file"),
        "{e}"
    );
    assert!(
        e.contains("t.policy:2:19") && e.contains("this `{` is not closed either"),
        "{e}"
    );
    assert!(!e.contains("expected `}`"), "{e}");
    // Before `}` or the next definition, and without the status.
    let e = parse_err(
        "route r {\n  rule a when request.stream { reject 429 }\n  default use model\n}\n",
    );
    assert!(
        e.contains("expected the message to answer with") && e.contains("found `}`"),
        "{e}"
    );
    let e = parse_err("route r {\n  default reject 4\nroute s {\n  default use model\n}\n");
    assert!(
        e.contains("expected the message to answer with") && e.contains("found `route`"),
        "{e}"
    );
    let e = parse_err("route r {\n  default reject");
    assert!(
        e.contains("expected an HTTP status like `429`, found the end of the file"),
        "{e}"
    );
    let e = parse_err("test \"t\" {\n  expect reject\n}\n");
    assert!(
        e.contains("expected an HTTP status like `429`, found `}`"),
        "{e}"
    );
    // Other statements cut short at the end name what they miss, too.
    let e = parse_err("route r {\n  cache on ttl");
    assert!(
        e.contains("expected a duration like `250ms`, found the end of the file"),
        "{e}"
    );
    // A complete statement at the end: the block is what is left open.
    for (text, at) in [
        ("route r {\n  default reject 429 \"no\"\n", "1:9"),
        ("strategy s(a = 1) {\n  on success { a = a + 1\n", "2:14"),
        ("test \"t\" {\n  request { model = \"x\"\n", "2:11"),
    ] {
        let e = parse_err(text);
        assert!(
            e.contains(&format!("unclosed `{{` opened at {at}: expected `}}`")),
            "{e}"
        );
    }
    // An unterminated message is still an unterminated string.
    let e = parse_err("route r {\n  default reject 429 \"no\n}\n");
    assert!(e.contains("this string is not closed"), "{e}");
}
