//! Which request facts a checked policy set reads, so the request path computes the
//! costly ones (the BPE count behind `request.input_tokens`) only for sets that
//! read them.
//!
//! The walk visits every expression of every route (conditions, `set priority`
//! guards, canary rollbacks) and of every strategy some route's `use` or split arm
//! calls (state initialisers, lets, filters, the score, `on` updates). The built-in
//! strategies that read `request.input_tokens` (`least_latency`, `cost_optimized`,
//! `multi_objective`) count only when a route uses them.
//!
//! [`read_names`] does the same for the headers and metadata keys a set reads by
//! name, so the request's features keep only those ([`ReadNames`]): copying every
//! header of every request into the features' maps was 10 allocations per request
//! for a policy that reads one header (`benches/load/callgrind.sh`).

use crate::policy::checked::{
    CArm, CBody, CRoute, CRule, CSetPriority, CSplit, CSplitKey, CStrategy, CTerminal, CUse,
    CheckedPolicySet, ReqField, TExpr, TExprKind,
};

/// Whether any expression of `set` reads `request.input_tokens` (or tests its
/// presence).
pub fn reads_input_tokens(set: &CheckedPolicySet) -> bool {
    let mut used = vec![false; set.strategies.len()];
    for r in &set.routes {
        for rule in r.rules.iter().chain(std::iter::once(&r.default)) {
            let uses: Vec<&CUse> = match &rule.body.terminal {
                Some(CTerminal::Use(u)) => vec![u],
                Some(CTerminal::Split(s)) => s.arms.iter().map(|a| &a.action).collect(),
                _ => Vec::new(),
            };
            for u in uses {
                if let Some(slot) = u.strategy.and_then(|i| used.get_mut(i as usize)) {
                    *slot = true;
                }
            }
        }
    }
    set.routes.iter().any(route_reads)
        || set
            .strategies
            .iter()
            .zip(&used)
            .any(|(s, &u)| u && strategy_reads(s))
}

fn route_reads(r: &CRoute) -> bool {
    r.when.as_ref().is_some_and(expr_reads)
        || r.set_priority
            .iter()
            .any(|p| p.when.as_ref().is_some_and(expr_reads))
        || r.rules.iter().any(rule_reads)
        || rule_reads(&r.default)
}

fn rule_reads(r: &CRule) -> bool {
    r.when.as_ref().is_some_and(expr_reads) || body_reads(&r.body)
}

fn body_reads(b: &CBody) -> bool {
    let split = match &b.terminal {
        Some(CTerminal::Split(s)) => s
            .arms
            .iter()
            .any(|a| a.rollback.as_ref().is_some_and(expr_reads)),
        _ => false,
    };
    split
        || b.set_priority
            .iter()
            .any(|p| p.when.as_ref().is_some_and(expr_reads))
}

fn strategy_reads(s: &CStrategy) -> bool {
    s.exprs().any(expr_reads)
}

fn expr_reads(e: &TExpr) -> bool {
    e.any_node(&mut |k| {
        matches!(
            k,
            TExprKind::Req(ReqField::InputTokens) | TExprKind::Has(ReqField::InputTokens)
        )
    })
}

/// The request headers and metadata keys a policy set reads by name: in any
/// expression (`header("x")`, `metadata("k")`, under `has()` or not) of any route or
/// strategy, and as a split's sticky key. The features a request is decided on need
/// no others ([`crate::routing::features::features_reading`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReadNames {
    /// Header names, lowercased (a request's header names are matched lowercased).
    pub headers: Vec<String>,
    /// Metadata keys, as written (case-sensitive).
    pub metadata: Vec<String>,
}

impl ReadNames {
    /// Whether header `name` (lowercased) is read.
    pub fn header(&self, name: &str) -> bool {
        self.headers.iter().any(|h| h == name)
    }

    /// Whether metadata key `key` is read.
    pub fn metadata(&self, key: &str) -> bool {
        self.metadata.iter().any(|m| m == key)
    }

    fn add_header(&mut self, name: &str) {
        let name = name.to_ascii_lowercase();
        if !self.header(&name) {
            self.headers.push(name);
        }
    }

    fn add_metadata(&mut self, key: &str) {
        if !self.metadata(key) {
            self.metadata.push(key.to_string());
        }
    }
}

/// The headers and metadata keys `set` reads. Every strategy of the set counts,
/// used by a route or not (a conservative superset: a name read by no decision
/// only costs its copy).
pub fn read_names(set: &CheckedPolicySet) -> ReadNames {
    let mut names = ReadNames::default();
    let mut visit = |e: &TExpr| {
        e.any_node(&mut |k| {
            match k {
                TExprKind::Req(f) | TExprKind::Has(f) => match f {
                    ReqField::Header(s) => names.add_header(set.strings.resolve(*s)),
                    ReqField::Metadata(s) => names.add_metadata(set.strings.resolve(*s)),
                    _ => {}
                },
                _ => {}
            }
            false
        });
    };
    // Every struct is taken apart whole (no `..`): a field added to one of them
    // later is a compile error here until the walk says whether it reads names.
    let mut keys = Vec::new();
    let guards = |set_priority: &[CSetPriority], visit: &mut dyn FnMut(&TExpr)| {
        for CSetPriority {
            level: _,
            when,
            span: _,
        } in set_priority
        {
            when.iter().for_each(&mut *visit);
        }
    };
    for route in &set.routes {
        let CRoute {
            name: _,
            priority: _,
            when,
            set_priority,
            cache: _,
            hold_off_peak: _,
            fallback: _,
            rules,
            default,
            span: _,
        } = route;
        when.iter().for_each(&mut visit);
        guards(set_priority, &mut visit);
        for rule in rules.iter().chain(std::iter::once(default)) {
            let CRule {
                name: _,
                priority: _,
                when,
                body,
                span: _,
            } = rule;
            let CBody {
                terminal,
                set_priority,
                cache: _,
                hold_off_peak: _,
                fallback: _,
            } = body;
            when.iter().for_each(&mut visit);
            guards(set_priority, &mut visit);
            match terminal {
                Some(CTerminal::Split(CSplit {
                    key,
                    seed: _,
                    arms,
                    stable_arm: _,
                    span: _,
                })) => {
                    keys.push(key);
                    for CArm {
                        share_bp: _,
                        upto_bp: _,
                        canary: _,
                        action: _,
                        rollback,
                    } in arms
                    {
                        rollback.iter().for_each(&mut visit);
                    }
                }
                // Taken apart whole too: a field added to either that holds an
                // expression is a compile error here until the walk reads it.
                Some(CTerminal::Use(crate::policy::checked::CUse {
                    target: _,
                    described: _,
                    strategy: _,
                    args: _,
                    span: _,
                }))
                | Some(CTerminal::Reject {
                    status: _,
                    message: _,
                    span: _,
                })
                | None => {}
            }
        }
    }
    for s in &set.strategies {
        s.exprs().for_each(&mut visit);
    }
    for key in keys {
        match key {
            CSplitKey::Header(h) => names.add_header(h),
            CSplitKey::Metadata(m) => names.add_metadata(m),
            CSplitKey::ApiKey | CSplitKey::Org | CSplitKey::Random => {}
        }
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The built-ins and `text`, checked against the embedded config's registry.
    fn checked(text: &str) -> CheckedPolicySet {
        let (config, _) = crate::config::embedded(|_| false);
        let registry = crate::routing::policy::registry_from_config(&config);
        let mut sources = crate::routing::policy::read_sources(None).unwrap();
        sources.add("t.policy", text);
        crate::policy::parse_and_check(&sources, &registry).expect("checks")
    }

    fn snap(text: &str) -> bool {
        reads_input_tokens(&checked(text))
    }

    /// A set that reads headers and metadata in every place a set can.
    const READS_EVERYWHERE: &str = concat!(
        "strategy s {\n",
        "  state w = 0.0 join mean\n",
        "  let lift = if(has(metadata(\"lift\")), 1.0, 0.0)\n",
        "  require has(header(\"X-In-Strategy\"))\n",
        "  prefer has(header(\"x-prefer\"))\n",
        "  score = if(has(metadata(\"boost\")), 2.0, 1.0) + lift + state.w\n",
        "  pick max\n",
        "  on success {\n",
        "    w = state.w + if(has(header(\"x-on-success\")), 1.0, 0.0)\n",
        "  }\n",
        "  on failure {\n",
        "    w = state.w - if(has(metadata(\"on-failure\")), 1.0, 0.0)\n",
        "  }\n",
        "}\n",
        "route r when has(header(\"X-Route\")) {\n",
        "  set priority high when has(header(\"x-prio\")) and header(\"x-prio\") == \"1\"\n",
        "  rule a when has(metadata(\"Tier\")) and metadata(\"Tier\") == \"gold\" {\n",
        "    set priority low when has(header(\"x-rule-prio\"))\n",
        "    use model\n",
        "  }\n",
        "  rule b when request.stream {\n",
        "    split by header(\"X-User\") {\n",
        "      50% -> use model\n",
        "      50% -> canary use model rollback when has(header(\"x-rollback\"))\n",
        "    }\n",
        "  }\n",
        "  rule c when request.stream {\n",
        "    split by metadata(\"cohort\") {\n",
        "      100% -> use model\n",
        "    }\n",
        "  }\n",
        "  default use model via s\n",
        "}\n",
    );

    /// The names [`read_names`] finds in the set of the built-ins and `text`.
    fn names(text: &str) -> ReadNames {
        read_names(&checked(text))
    }

    #[test]
    fn finds_header_and_metadata_names_wherever_a_set_reads_them() {
        assert_eq!(
            names("route r {\n  default use model\n}\n"),
            ReadNames::default()
        );
        let n = names(READS_EVERYWHERE);
        let mut headers = n.headers.clone();
        headers.sort();
        assert_eq!(
            headers,
            [
                "x-in-strategy",
                "x-on-success",
                "x-prefer",
                "x-prio",
                "x-rollback",
                "x-route",
                "x-rule-prio",
                "x-user"
            ]
        );
        let mut metadata = n.metadata.clone();
        metadata.sort();
        assert_eq!(metadata, ["Tier", "boost", "cohort", "lift", "on-failure"]);
    }

    /// Review of the header filter: decisions made on the features that keep only
    /// the names a set reads equal those made on every header, over the shipped
    /// example policies, [`READS_EVERYWHERE`] and requests with and without each name.
    #[test]
    fn a_set_decides_alike_on_the_names_it_reads_and_on_every_header() {
        use crate::policy::interp::decide;
        use crate::policy::registry::Registry;
        use crate::routing::features::{features, features_reading, Caller};
        let mut sources = crate::routing::policy::read_sources(None).unwrap();
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/policies");
        let mut files: Vec<_> = std::fs::read_dir(root)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "policy"))
            .collect();
        files.sort();
        assert!(files.len() >= 4, "{files:?}");
        for p in &files {
            sources.add(p.display().to_string(), std::fs::read_to_string(p).unwrap());
        }
        sources.add("t.policy", READS_EVERYWHERE);
        let registry = Registry::example();
        let set = crate::policy::parse_and_check(&sources, &registry).expect("checks");
        let names = read_names(&set);
        assert!(
            names.header("x-team") && names.header("x-interactive"),
            "{names:?}"
        );
        let pool = [
            ("x-team", "search"),
            ("X-Team", "blocked"),
            ("x-interactive", "1"),
            ("x-route", "1"),
            ("x-user", "u-17"),
            ("x-prio", "1"),
            ("x-rule-prio", "1"),
            ("x-in-strategy", "1"),
            ("x-prefer", "1"),
            ("x-rollback", "1"),
            ("x-switchyard-meta-Tier", "gold"),
            ("x-switchyard-meta-cohort", "c1"),
            ("x-switchyard-meta-lift", "1"),
            ("x-noise", "1"),
            ("authorization", "Bearer k"),
        ];
        let mut models: Vec<&str> = registry.models.iter().map(|m| m.name.as_str()).collect();
        models.push("not-a-model");
        let stats = crate::policy::StatsSnapshot::default();
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut decided = 0;
        for model in models {
            for metadata in [
                "",
                r#","stream":true"#,
                r#","metadata":{"boost":"1","lift":"1","job":"nightly"}"#,
                r#","stream":true,"metadata":{"cohort":"c2","Tier":"gold"}"#,
            ] {
                let body = format!(
                    r#"{{"model":"{model}","messages":[{{"role":"user","content":"hi"}}]{metadata}}}"#
                );
                let req = crate::api::ChatRequest::parse(body.as_bytes()).unwrap();
                for _ in 0..40 {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let headers: Vec<(&str, &str)> = pool
                        .iter()
                        .enumerate()
                        .filter(|(i, _)| x >> i & 1 == 1)
                        .map(|(_, h)| *h)
                        .collect();
                    let caller = Caller {
                        api_key: (x >> 40 & 1 == 1).then(|| "key-a".into()),
                        ..Caller::default()
                    };
                    let all = features(&req, headers.iter().copied(), &caller, 1_704_114_000);
                    let some = features_reading(
                        &req,
                        headers.iter().copied(),
                        &caller,
                        1_704_114_000,
                        Some(&names),
                    );
                    for seed in 0..2 {
                        assert_eq!(
                            decide(&set, &some, &stats, seed),
                            decide(&set, &all, &stats, seed),
                            "{model} {headers:?} {metadata}"
                        );
                        decided += 1;
                    }
                }
            }
        }
        assert!(decided > 500);
    }

    #[test]
    fn finds_input_tokens_in_conditions_and_strategies() {
        assert!(!snap("route r {\n  default use model\n}\n"));
        assert!(snap(
            "route r {\n  rule big when request.input_tokens > 1000 { use model }\n  default use model\n}\n"
        ));
        assert!(snap(
            "strategy s {\n  require endpoint.context_window == 0 or endpoint.context_window > request.input_tokens\n  score = 1.0\n  pick max\n}\nroute r {\n  default use model via s\n}\n"
        ));
        // A built-in strategy that reads it counts only once a route uses it.
        assert!(snap(
            "route r {\n  default use model via least_latency\n}\n"
        ));
    }
}
