use super::*;

fn fmt(text: &str) -> String {
    match format_str("t.policy", text) {
        Ok(s) => s,
        Err(FmtError::Parse(m, d)) => {
            panic!("{}", crate::policy::diagnostic::render_all(&d, &m))
        }
        Err(FmtError::Unsafe(why)) => panic!("{why}"),
    }
}

fn shipped() -> Vec<(String, String)> {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/policies");
    let mut out = Vec::new();
    for dir in [root.to_string(), format!("{root}/builtin")] {
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            if e.path().extension().is_some_and(|x| x == "policy") {
                out.push((
                    e.path().display().to_string(),
                    std::fs::read_to_string(e.path()).unwrap_or_default(),
                ));
            }
        }
    }
    out.sort();
    assert!(out.len() > 5, "no shipped policies under {root}");
    out
}

#[test]
fn shipped_policies_are_formatted_and_idempotent() {
    for (name, text) in shipped() {
        let once = fmt(&text);
        assert_eq!(fmt(&once), once, "{name}: not idempotent");
        assert_eq!(once, text, "{name}: differs from its canonical form");
    }
}

#[test]
fn messy_input_gets_canonical_layout_and_keeps_comments() {
    let src = "# head\nroute  r   priority 2 when (request.stream)and request.input_tokens>5{ # t\n\n\n rule a when not(request.tools) { use \"gpt-4o\" via x( b = 1 ) } # after a\n# before default\n default use   model\n}\n";
    let want = "# head\nroute r priority 2 when request.stream and request.input_tokens > 5 { # t\n  rule a when not request.tools {\n    use \"gpt-4o\" via x(b = 1)\n  } # after a\n  # before default\n  default use model\n}\n";
    assert_eq!(fmt(src), want);
    assert_eq!(fmt(want), want);
}

#[test]
fn parentheses_kept_only_where_needed() {
    let src = "strategy s(a = 1) {\n  score = (1 - a) * (endpoint.health / (2 + a)) - (-a)\n  pick min\n}\n";
    assert_eq!(fmt(src), "strategy s(a = 1) {\n  score = (1 - a) * (endpoint.health / (2 + a)) - -a\n  pick min\n}\n");
}

#[test]
fn semantics_preserved_on_shipped_policies() {
    for (name, text) in shipped() {
        let (_, a) = crate::policy::parser::parse_str(&name, &text)
            .map_err(|(_, d)| d)
            .expect("parses");
        let (_, b) = crate::policy::parser::parse_str(&name, &fmt(&text))
            .map_err(|(_, d)| d)
            .expect("reparses");
        assert_eq!(a.items, b.items, "{name}");
    }
}

#[test]
fn fallback_on_round_trips_in_canonical_form() {
    let src = "route r {\n  fallback \"gpt-4o\"->endpoint \"local/smollm\"   on 409 ,422,  5xx retries 2 backoff 100ms..2s\n  default use model\n}\n";
    let want = "route r {\n  fallback \"gpt-4o\" -> endpoint \"local/smollm\" on 409, 422, 5xx retries 2 backoff 100ms..2s\n  default use model\n}\n";
    assert_eq!(fmt(src), want);
    assert_eq!(fmt(want), want);
    let rule = "route r {\n  rule a when request.stream {\n    use \"smollm\"\n    fallback \"gpt-4o\" on 4xx\n  }\n  default use model\n}\n";
    assert_eq!(fmt(rule), rule);
}

/// `src` formats to `want`, formatting that again changes nothing, and both parse
/// to the same policy.
fn assert_canonical(src: &str, want: &str) {
    let once = fmt(src);
    assert_eq!(once, want);
    assert_eq!(fmt(&once), once, "idempotent");
    let (_, a) = crate::policy::parser::parse_str("t.policy", src)
        .map_err(|(_, d)| d)
        .expect("parses");
    let (_, b) = crate::policy::parser::parse_str("t.policy", &once)
        .map_err(|(_, d)| d)
        .expect("reparses");
    assert_eq!(a.items, b.items, "same policy after formatting");
}

#[test]
fn cache_statements_round_trip_in_canonical_form() {
    let src = "route r {\n  cache   exact   ttl 5m\n  rule a when request.stream {\n    cache exact\n    use model\n  }\n  rule b when request.tools {\n    cache  on ttl 250ms\n    use model\n  }\n  rule c when request.input_tokens > 5 { cache off use model }\n  default use model\n}\n";
    let want = "route r {\n  cache exact ttl 5m\n  rule a when request.stream {\n    cache exact\n    use model\n  }\n  rule b when request.tools {\n    cache on ttl 250ms\n    use model\n  }\n  rule c when request.input_tokens > 5 {\n    cache off\n    use model\n  }\n  default use model\n}\n";
    assert_canonical(src, want);
}

#[test]
fn hold_statements_round_trip_in_canonical_form() {
    let src = "route r {\n  hold    off_peak # route-wide\n  rule a when request.off_peak { hold off_peak use model }\n  default   hold  off_peak\n}\n";
    let want = "route r {\n  hold off_peak # route-wide\n  rule a when request.off_peak {\n    hold off_peak\n    use model\n  }\n  default hold off_peak\n}\n";
    assert_canonical(src, want);
}

#[test]
fn fmt_default_split_dropped_seed_canary_and_rollback() {
    let src = "route r {\n  default split by api_key seed 1 {\n    95% -> use \"gpt-4o\" via least_latency(beta = 1.0)\n    5% -> canary use \"gpt-4o-next\" rollback when endpoint.health < 0.5\n  }\n}\n";
    let want = "route r {\n  default split by api_key seed 1 {\n    95% -> use \"gpt-4o\" via least_latency(beta = 1.0)\n    5% -> canary use \"gpt-4o-next\"\n      rollback when endpoint.health < 0.5\n  }\n}\n";
    assert_canonical(src, want);
}

#[test]
fn fmt_copied_a_comment_inside_a_literal_or_endpoint_target_twice() {
    let src = "strategy s(a = - # sign\n  5) {\n  score = a\n  pick min\n}\n\nroute r {\n  default use endpoint # id\n    \"openai/gpt-4o\"\n}\n";
    let want = "strategy s(a = -5) { # sign\n  score = a\n  pick min\n}\n\nroute r {\n  default use endpoint \"openai/gpt-4o\" # id\n}\n";
    let once = fmt(src);
    assert_eq!(once, want);
    assert_eq!(fmt(&once), once, "idempotent");
}

/// `-9223372036854775808` was refused as too large; accepted now, `fmt` keeps it a
/// negative literal wherever it stands (and `- 5` closes up like `-5`).
#[test]
fn i64_min_literal_was_refused_as_too_large_fmt_keeps_it() {
    let src = "strategy s(a = - 9223372036854775808) {\n  require request.input_tokens in [ -9223372036854775808, - 5 ]\n  score = a * - 5 - -9223372036854775808\n  pick min\n}\n\nroute r priority -9223372036854775808 when request.input_tokens > - 9223372036854775808 {\n  default use model\n}\n";
    let want = "strategy s(a = -9223372036854775808) {\n  require request.input_tokens in [-9223372036854775808, -5]\n  score = a * -5 - -9223372036854775808\n  pick min\n}\n\nroute r priority -9223372036854775808 when request.input_tokens > -9223372036854775808 {\n  default use model\n}\n";
    assert_canonical(src, want);
}

/// Comments inside a statement that `fmt` lays out on several lines (a condition
/// broken before `and`/`or`, a clause broken before `when`, a canary's `rollback`)
/// were all gathered at the statement's end, joined on one line (`{ # streaming #
/// big`), and a comment before a broken `when` moved into the block. Each now stays
/// beside the line it was written on, or before the line it preceded.
#[test]
fn fmt_gathered_comments_inside_a_multi_line_statement_at_its_end() {
    let src = "route r when request.stream # streaming\n  and request.input_tokens > 5 # big\n{\n  default use model\n}\n\nroute s\n  # why\n  when request.tools {\n  rule a when request.stream and # after and\n      # before tools\n      request.tools # t\n  {\n    use model\n  }\n  default split by api_key {\n    95% -> use \"gpt-4o\" # main\n    5% -> canary use \"gpt-4o-next\" # canary\n      rollback when endpoint.health < 0.5 # guard\n  }\n}\n\nstrategy q(a = 1) {\n  require endpoint.health > 0.5 # healthy\n\n    and endpoint.error_rate < 0.1 # few errors\n  score = a\n  pick min\n}\n";
    let want = "route r when request.stream # streaming\n    and request.input_tokens > 5 { # big\n  default use model\n}\n\nroute s\n  # why\n  when request.tools {\n  rule a when request.stream # after and\n      # before tools\n      and request.tools { # t\n    use model\n  }\n  default split by api_key {\n    95% -> use \"gpt-4o\" # main\n    5% -> canary use \"gpt-4o-next\" # canary\n      rollback when endpoint.health < 0.5 # guard\n  }\n}\n\nstrategy q(a = 1) {\n  require endpoint.health > 0.5 # healthy\n      and endpoint.error_rate < 0.1 # few errors\n  score = a\n  pick min\n}\n";
    assert_canonical(src, want);
    // Lines that `fmt` joins keep their comments at the end of the joined line.
    let joined = "strategy q(a = 1) {\n  score = a # first\n    + 2 # second\n  pick min\n}\n";
    assert_canonical(
        joined,
        "strategy q(a = 1) {\n  score = a + 2 # first # second\n  pick min\n}\n",
    );
}

/// A comment added at the end of a line of a shipped policy's multi-line statements
/// (and the lines around them), or on a line of its own before it, is kept (once),
/// and the result is canonical and means the same.
#[test]
fn fmt_keeps_a_comment_added_at_any_line_of_a_multi_line_statement() {
    for (name, text) in shipped() {
        let lines: Vec<&str> = text.lines().collect();
        let continued = |l: &str| {
            let t = l.trim_start();
            ["and ", "or ", "when ", "rollback "]
                .iter()
                .any(|k| t.starts_with(k))
        };
        let near =
            |i: usize| (i.saturating_sub(2)..(i + 3).min(lines.len())).any(|j| continued(lines[j]));
        for i in (0..lines.len()).filter(|&i| near(i)) {
            for own in [false, true] {
                let mut v: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
                if own {
                    v.insert(i, "# added".to_string());
                } else {
                    v[i].push_str(" # added");
                }
                let src = format!("{}\n", v.join("\n"));
                let Ok(once) = format_str("t.policy", &src) else {
                    panic!("{name} line {i}: does not parse:\n{src}")
                };
                assert_eq!(fmt(&once), once, "{name} line {i}: not idempotent:\n{src}");
                assert_eq!(
                    once.matches("# added").count(),
                    1,
                    "{name} line {i}:\n{once}"
                );
                let (_, a) = crate::policy::parser::parse_str("t.policy", &src)
                    .map_err(|(_, d)| d)
                    .expect("parses");
                let (_, b) = crate::policy::parser::parse_str("t.policy", &once)
                    .map_err(|(_, d)| d)
                    .expect("reparses");
                assert_eq!(a.items, b.items, "{name} line {i}");
            }
        }
    }
}

/// The tester's file: `(s or (s or ... ) and true) and true`, 33 levels. The
/// clarifying brackets around each `and` inside `or` doubled them to 66, past the
/// parser's 64, so `fmt` wrote a file that no longer parsed.
fn nested_and_in_or(levels: usize) -> String {
    let mut e = "request.stream".to_string();
    for _ in 0..levels {
        e = format!("(request.stream or {e}) and true");
    }
    format!("route r when {e} {{\n  default use model\n}}\n")
}

#[test]
fn fmt_doubled_brackets_past_the_nesting_limit() {
    let src = nested_and_in_or(33);
    let (_, before) = crate::policy::parser::parse_str("t.policy", &src)
        .map_err(|(_, d)| d)
        .expect("the source parses");
    let once = fmt(&src);
    let (_, after) = crate::policy::parser::parse_str("t.policy", &once)
        .map_err(|(_, d)| d)
        .expect("fmt's output parses");
    assert_eq!(before.items, after.items);
    assert_eq!(fmt(&once), once, "not idempotent");
    // Far from the limit the clarifying brackets are still added.
    assert!(fmt(&nested_and_in_or(2)).contains("or ((request.stream or"));
}

#[test]
fn fmt_refuses_output_that_would_not_parse() {
    // Each one-line rule gains indentation and line breaks: a file just under the
    // 1 MiB input limit would come out over it. fmt says so rather than return it.
    let rule = "rule a when request.stream { use model }\n";
    let n = (crate::policy::parser::MAX_INPUT_BYTES - 64) / rule.len();
    let src = format!("route r {{\n{}default use model\n}}\n", rule.repeat(n));
    assert!(src.len() <= crate::policy::parser::MAX_INPUT_BYTES);
    match format_str("t.policy", &src) {
        Err(FmtError::Unsafe(why)) => assert!(why.contains("would not parse"), "{why}"),
        other => panic!(
            "expected FmtError::Unsafe, got {:?}",
            other.map(|s| s.len())
        ),
    }
}
