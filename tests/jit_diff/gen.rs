//! Random well-typed policy sets (as source text), requests and endpoint snapshots for
//! the JIT-vs-interpreter differential test. Deterministic given a seed.

use std::collections::BTreeMap;

use switchyard::policy::ast::PriorityLevel;
use switchyard::policy::{Circuit, EndpointStats, Outcome, RequestFeatures, StatsSnapshot};

/// SplitMix64: the generator's randomness.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    pub fn u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.u64() % n.max(1) as u64) as usize
    }
    pub fn chance(&mut self, percent: u64) -> bool {
        self.u64() % 100 < percent
    }
    pub fn pick<'a, T>(&mut self, v: &'a [T]) -> &'a T {
        &v[self.below(v.len())]
    }
}

const MODELS: [&str; 6] = [
    "gpt-4o",
    "gpt-4o-mini",
    "gpt-4o-next",
    "claude-sonnet",
    "smollm",
    "mock",
];
const ENDPOINTS: [&str; 8] = [
    "openai/gpt-4o",
    "azure/gpt-4o",
    "openai/gpt-4o-mini",
    "openai/gpt-4.1",
    "anthropic/claude-sonnet",
    "bedrock/claude-sonnet",
    "local/smollm",
    "mock/mock-1",
];
/// Scope names policies test; requests carry some of them plus `"other"`.
const SCOPES: [&str; 5] = ["pro", "beta", "chat:write", "admin", "a"];

const WORDS: [&str; 8] = [
    "gpt-4o",
    "search",
    "code",
    "chat",
    "t1",
    "acme",
    "",
    "gpt-4o-mini",
];
const INTS: [&str; 11] = [
    "0",
    "1",
    "-1",
    "7",
    "100_000",
    "9223372036854775807",
    "3",
    "-2",
    "4611686018427387904",
    "(0 - 9223372036854775807 - 1)",
    "-9223372036854775808",
];
const FLOATS: [&str; 10] = [
    "0.0", "1.5", "-2.25", "1e300", "0.1", "5%", "1e-300", "3.0", "-0.0", "0.5",
];

/// What an expression may read.
#[derive(Clone, Copy, PartialEq)]
pub enum Ctx {
    /// Route/rule conditions: request only.
    Request,
    /// Rollback guards: request and endpoint.
    Guard,
    /// Strategy filters (no aggregates).
    Filter,
    /// Strategy lets and score (aggregates allowed).
    Score,
    /// `on success/failure` blocks: also outcome, score, probability.
    On,
    /// `on pick`: score and probability, no outcome.
    OnPick,
    /// Inside an aggregate argument.
    AggArg,
}

/// Names a strategy body can use.
#[derive(Default, Clone)]
pub struct Names {
    pub float_params: Vec<String>,
    pub int_params: Vec<String>,
    pub states: Vec<String>,
    pub lets: Vec<String>,
}

pub struct Gen<'r> {
    pub r: &'r mut Rng,
    pub names: Names,
}

impl Gen<'_> {
    fn endpoint_ok(c: Ctx) -> bool {
        c != Ctx::Request
    }

    pub fn boolean(&mut self, c: Ctx, d: u32) -> String {
        let leaf = d == 0 || self.r.chance(25);
        if !leaf {
            match self.r.below(5) {
                0 => return format!("not ({})", self.boolean(c, d - 1)),
                1 => {
                    return format!(
                        "({} and {})",
                        self.boolean(c, d - 1),
                        self.boolean(c, d - 1)
                    )
                }
                2 => return format!("({} or {})", self.boolean(c, d - 1), self.boolean(c, d - 1)),
                3 => {
                    return format!(
                        "if({}, {}, {})",
                        self.boolean(c, d - 1),
                        self.boolean(c, d - 1),
                        self.boolean(c, d - 1)
                    )
                }
                _ => {}
            }
        }
        if Self::endpoint_ok(c) && self.r.chance(8) {
            // Circuit states only: any other word is a checker error.
            let st = *self.r.pick(&["closed", "half_open", "open"]);
            let eq = *self.r.pick(&["==", "!="]);
            return match self.r.below(3) {
                0 => format!("endpoint.circuit {eq} \"{st}\""),
                1 => format!("endpoint.circuit in [\"{st}\"]"),
                _ => format!("starts_with(endpoint.circuit, \"{}\")", &st[..2]),
            };
        }
        let ops = ["==", "!=", "<", "<=", ">", ">="];
        let op = *self.r.pick(&ops);
        let w = *self.r.pick(&WORDS);
        match self.r.below(16) {
            0 => format!(
                "{} {op} {}",
                self.int(c, d.saturating_sub(1)),
                self.int(c, d.saturating_sub(1))
            ),
            1 | 2 => format!(
                "{} {op} {}",
                self.float(c, d.saturating_sub(1)),
                self.float(c, d.saturating_sub(1))
            ),
            3 => format!(
                "{} {op} {}",
                self.int(c, d.saturating_sub(1)),
                self.float(c, d.saturating_sub(1))
            ),
            4 => {
                let lv = *self.r.pick(&["low", "normal", "high", "critical"]);
                format!("request.priority {op} \"{lv}\"")
            }
            5 => {
                let f = self.str_field(c);
                let eq = *self.r.pick(&["==", "!="]);
                if self.r.chance(30) {
                    let g = self.str_field(c);
                    format!("{f} {eq} {g}")
                } else {
                    format!("{f} {eq} \"{w}\"")
                }
            }
            6 => {
                let f = self.str_field(c);
                let n = self.r.below(4);
                let items: Vec<String> = (0..n)
                    .map(|_| format!("\"{}\"", self.r.pick(&WORDS)))
                    .collect();
                let neg = if self.r.chance(30) { "not in" } else { "in" };
                format!("{f} {neg} [{}]", items.join(", "))
            }
            7 => {
                let n = self.r.below(4);
                let items: Vec<&str> = (0..n).map(|_| *self.r.pick(&INTS[..6])).collect();
                format!("{} in [{}]", self.int(c, 0), items.join(", "))
            }
            8 => {
                let n = self.r.below(4);
                let items: Vec<&str> = (0..n).map(|_| *self.r.pick(&FLOATS)).collect();
                format!("{} in [{}]", self.float(c, 0), items.join(", "))
            }
            9 | 10 => {
                let f = self.str_field(c);
                let (func, pat) = match self.r.below(5) {
                    0 => ("starts_with", *self.r.pick(&["gpt", "c", "", "acme"])),
                    1 => ("ends_with", *self.r.pick(&["o", "mini", "h"])),
                    2 => ("contains", *self.r.pick(&["4", "-", "ea"])),
                    3 => ("glob", *self.r.pick(&["gpt-4*", "*o", "c?de", "*", "?"])),
                    _ => (
                        "matches",
                        *self.r.pick(&["^gpt", "[0-9]+", "^(chat|code)$", "e$"]),
                    ),
                };
                format!("{func}({f}, \"{pat}\")")
            }
            11 => {
                let o = *self.r.pick(&[
                    "request.max_tokens",
                    "request.temperature",
                    "request.api_key",
                    "request.org",
                    "header(\"x-a\")",
                    "metadata(\"tier\")",
                ]);
                format!("has({o})")
            }
            12 => (*self.r.pick(&[
                "request.stream",
                "request.tools",
                "request.off_peak",
                "true",
                "false",
            ]))
            .to_string(),
            13 => format!("scope(\"{}\")", self.r.pick(&SCOPES)),
            _ => {
                let h = *self.r.pick(&["x-a", "x-b"]);
                format!("(has(header(\"{h}\")) and header(\"{h}\") == \"{w}\")")
            }
        }
    }

    fn str_field(&mut self, c: Ctx) -> String {
        let mut opts = vec![
            "request.model".to_string(),
            "request.task".to_string(),
            "if(has(request.api_key), request.api_key, \"none\")".to_string(),
            "if(has(header(\"x-a\")), header(\"x-a\"), \"\")".to_string(),
            "if(has(request.org), request.org, \"acme\")".to_string(),
        ];
        if Self::endpoint_ok(c) {
            for f in [
                "endpoint.id",
                "endpoint.provider",
                "endpoint.model",
                "endpoint.upstream_model",
            ] {
                opts.push(f.to_string());
            }
        }
        self.r.pick(&opts).clone()
    }

    pub fn int(&mut self, c: Ctx, d: u32) -> String {
        if d > 0 && self.r.chance(60) {
            let op = *self.r.pick(&["+", "-", "*", "/", "%"]);
            return match self.r.below(8) {
                0 => format!("-({})", self.int(c, d - 1)),
                1 => format!("abs({})", self.int(c, d - 1)),
                2 => format!("min({}, {})", self.int(c, d - 1), self.int(c, d - 1)),
                3 => format!("max({}, {})", self.int(c, d - 1), self.int(c, d - 1)),
                4 => format!(
                    "clamp({}, {}, {})",
                    self.int(c, d - 1),
                    self.int(c, d - 1),
                    self.int(c, d - 1)
                ),
                5 => format!(
                    "if({}, {}, {})",
                    self.boolean(c, d - 1),
                    self.int(c, d - 1),
                    self.int(c, d - 1)
                ),
                _ => format!("({} {op} {})", self.int(c, d - 1), self.int(c, d - 1)),
            };
        }
        let mut opts: Vec<String> = INTS.iter().map(|s| s.to_string()).collect();
        for f in [
            "request.input_tokens",
            "request.messages",
            "request.hour",
            "request.weekday",
            "if(has(request.max_tokens), request.max_tokens, 17)",
        ] {
            opts.push(f.to_string());
        }
        if Self::endpoint_ok(c) {
            for f in [
                "endpoint.in_flight",
                "endpoint.weight",
                "endpoint.priority",
                "endpoint.context_window",
            ] {
                opts.push(f.to_string());
            }
        }
        if matches!(
            c,
            Ctx::Score | Ctx::On | Ctx::OnPick | Ctx::AggArg | Ctx::Filter
        ) {
            opts.extend(self.names.int_params.iter().cloned());
        }
        if matches!(c, Ctx::Score | Ctx::On | Ctx::OnPick) {
            opts.push("count()".into());
        }
        if c == Ctx::On {
            opts.push("outcome.input_tokens".into());
            opts.push("outcome.output_tokens".into());
        }
        self.r.pick(&opts).clone()
    }

    pub fn float(&mut self, c: Ctx, d: u32) -> String {
        if d > 0 && self.r.chance(60) {
            let op = *self.r.pick(&["+", "-", "*", "/", "%"]);
            return match self.r.below(12) {
                0 => format!("-({})", self.float(c, d - 1)),
                1 => format!("abs({})", self.float(c, d - 1)),
                2 => format!("min({}, {})", self.float(c, d - 1), self.int(c, d - 1)),
                3 => format!("max({}, {})", self.float(c, d - 1), self.float(c, d - 1)),
                4 => format!(
                    "clamp({}, {}, {})",
                    self.float(c, d - 1),
                    self.float(c, d - 1),
                    self.float(c, d - 1)
                ),
                5 => format!(
                    "if({}, {}, {})",
                    self.boolean(c, d - 1),
                    self.float(c, d - 1),
                    self.float(c, d - 1)
                ),
                6 => format!(
                    "{}({})",
                    self.r.pick(&["exp", "ln", "sqrt"]),
                    self.float(c, d - 1)
                ),
                7 => format!("pow({}, {})", self.float(c, d - 1), self.float(c, d - 1)),
                8 => format!("float({})", self.int(c, d - 1)),
                9 => format!("({} {op} {})", self.int(c, d - 1), self.float(c, d - 1)),
                10 if matches!(c, Ctx::Score | Ctx::On | Ctx::OnPick) => {
                    let f = *self.r.pick(&["sum", "mean", "lowest", "highest"]);
                    format!("{f}({})", self.float(Ctx::AggArg, d - 1))
                }
                _ => format!("({} {op} {})", self.float(c, d - 1), self.float(c, d - 1)),
            };
        }
        let mut opts: Vec<String> = FLOATS.iter().map(|s| s.to_string()).collect();
        opts.push("if(has(request.temperature), request.temperature, 0.7)".into());
        opts.push("request.budget_remaining".into());
        if Self::endpoint_ok(c) {
            for f in [
                "health",
                "latency_ewma_ms",
                "ttft_ewma_ms",
                "capacity",
                "error_rate",
                "cost_in",
                "cost_out",
                "quality",
            ] {
                opts.push(format!("endpoint.{f}"));
            }
        }
        if matches!(
            c,
            Ctx::Score | Ctx::On | Ctx::OnPick | Ctx::AggArg | Ctx::Filter
        ) {
            opts.extend(self.names.float_params.iter().cloned());
            opts.extend(self.names.states.iter().map(|s| format!("state.{s}")));
        }
        if matches!(c, Ctx::Score | Ctx::On | Ctx::OnPick) {
            opts.extend(self.names.lets.iter().cloned());
        }
        if matches!(c, Ctx::On | Ctx::OnPick) {
            opts.push("score".into());
            opts.push("probability".into());
        }
        if c == Ctx::On {
            opts.push("outcome.latency_ms".into());
            opts.push("outcome.ttft_ms".into());
        }
        self.r.pick(&opts).clone()
    }
}

/// A generated strategy: text, name, parameters (name, is float).
type GenStrategy = (String, String, Vec<(String, bool)>);

/// A strategy definition; returns its text, name and parameter names.
fn strategy(r: &mut Rng, i: usize) -> GenStrategy {
    let name = format!("s{i}");
    let mut g = Gen {
        r,
        names: Names::default(),
    };
    let mut params = Vec::new();
    let mut decl = Vec::new();
    for k in 0..g.r.below(3) {
        let is_float = g.r.chance(60);
        let p = format!("p{k}");
        let lit = if is_float {
            *g.r.pick(&FLOATS)
        } else {
            *g.r.pick(&["0", "1", "7", "-3"])
        };
        let lit = lit.trim_start_matches('(');
        decl.push(format!(
            "{p} = {}",
            if lit.contains("922") { "1" } else { lit }
        ));
        if is_float {
            g.names.float_params.push(p.clone());
        } else {
            g.names.int_params.push(p.clone());
        }
        params.push((p, is_float));
    }
    let mut body = Vec::new();
    for k in 0..g.r.below(3) {
        let s = format!("w{k}");
        let init = match g.names.float_params.first() {
            Some(p) if g.r.chance(50) => format!("{p} * 2"),
            _ => (*g.r.pick(&["1.0", "0.0", "0.5"])).to_string(),
        };
        let join = *g.r.pick(&["", " join mean", " join initial"]);
        body.push(format!("  state {s} = {init}{join}"));
        g.names.states.push(s);
    }
    for k in 0..g.r.below(3) {
        let l = format!("l{k}");
        let e = g.float(Ctx::Score, 2);
        body.push(format!("  let {l} = {e}"));
        g.names.lets.push(l);
    }
    for _ in 0..g.r.below(2) {
        let e = g.boolean(Ctx::Filter, 2);
        body.push(format!("  require {e}"));
    }
    for _ in 0..g.r.below(2) {
        let e = g.boolean(Ctx::Filter, 2);
        body.push(format!("  prefer {e}"));
    }
    let score = g.float(Ctx::Score, 3);
    body.push(format!("  score = {score}"));
    body.push(format!(
        "  pick {}",
        g.r.pick(&["min", "max", "weighted", "sample"])
    ));
    if !g.names.states.is_empty() {
        for ev in ["pick", "success", "failure"] {
            if g.r.chance(60) {
                let states = g.names.states.clone();
                let mut assigns = Vec::new();
                for s in &states {
                    if g.r.chance(70) {
                        let c = if ev == "pick" { Ctx::OnPick } else { Ctx::On };
                        assigns.push(format!("{s} = {}", g.float(c, 3)));
                    }
                }
                if !assigns.is_empty() {
                    body.push(format!("  on {ev} {{ {} }}", assigns.join("  ")));
                }
            }
        }
    }
    let text = format!(
        "strategy {name}({}) {{\n{}\n}}\n",
        decl.join(", "),
        body.join("\n")
    );
    (text, name, params)
}

fn target(r: &mut Rng) -> String {
    match r.below(5) {
        0 => format!("\"{}\"", r.pick(&MODELS)),
        1 => format!("endpoint \"{}\"", r.pick(&ENDPOINTS)),
        2 => "model".into(),
        3 => "any".into(),
        _ => format!("\"{}\"", r.pick(&MODELS[..2])),
    }
}

fn use_action(r: &mut Rng, strategies: &[GenStrategy]) -> String {
    let t = target(r);
    if strategies.is_empty() || r.chance(25) {
        return format!("use {t}");
    }
    let (_, name, params) = r.pick(strategies);
    let mut args = Vec::new();
    for (p, f) in params {
        if r.chance(50) {
            let v = if *f {
                *r.pick(&["0.25", "2.0", "1e9"])
            } else {
                *r.pick(&["2", "0", "-5"])
            };
            args.push(format!("{p} = {v}"));
        }
    }
    if args.is_empty() {
        format!("use {t} via {name}")
    } else {
        format!("use {t} via {name}({})", args.join(", "))
    }
}

/// A whole policy set as text, routes with fewer than `max_rules` rules each.
pub fn policy(seed: u64, max_rules: usize) -> String {
    let mut r = Rng::new(seed);
    let strategies: Vec<_> = (0..r.below(3)).map(|i| strategy(&mut r, i)).collect();
    let mut out: String = strategies.iter().map(|(t, _, _)| t.as_str()).collect();
    for ri in 0..1 + r.below(3) {
        let mut g = Gen {
            r: &mut r,
            names: Names::default(),
        };
        let when = if g.r.chance(70) {
            format!(" when {}", g.boolean(Ctx::Request, 3))
        } else {
            String::new()
        };
        let prio = if g.r.chance(20) {
            format!(" priority {}", g.r.below(3))
        } else {
            String::new()
        };
        let mut lines = Vec::new();
        if g.r.chance(30) {
            let c = g.boolean(Ctx::Request, 2);
            lines.push(format!(
                "  set priority {} when {c}",
                g.r.pick(&["low", "high", "critical"])
            ));
        }
        if g.r.chance(30) {
            lines.push(
                (*g.r.pick(&[
                    "  cache on",
                    "  cache off",
                    "  cache on ttl 5m",
                    "  cache exact ttl 1s",
                ]))
                .to_string(),
            );
        }
        if g.r.chance(15) {
            lines.push("  hold off_peak".to_string());
        }
        if g.r.chance(30) {
            let on = *g.r.pick(&["", " on 409, 5xx", " on 400"]);
            lines.push(format!(
                "  fallback \"{}\" -> \"mock\"{on} retries 2 backoff 100ms..2s",
                g.r.pick(&MODELS[..5])
            ));
        }
        for k in 0..g.r.below(max_rules) {
            let cond = if g.r.chance(85) {
                format!(" when {}", g.boolean(Ctx::Request, 3))
            } else {
                String::new()
            };
            let rp = if g.r.chance(15) {
                format!(" priority {}", g.r.below(4))
            } else {
                String::new()
            };
            let mut body = Vec::new();
            if g.r.chance(20) {
                let c = g.boolean(Ctx::Request, 1);
                body.push(format!(
                    "set priority {} when {c}",
                    g.r.pick(&["low", "high"])
                ));
            }
            if g.r.chance(15) {
                body.push("cache off".into());
            }
            if g.r.chance(20) {
                body.push("hold off_peak".into());
            }
            if g.r.chance(15) {
                body.push(
                    (*g.r.pick(&[
                        "fallback \"smollm\" retries 1",
                        "fallback \"smollm\" on 4xx retries 1",
                    ]))
                    .to_string(),
                );
            }
            body.push(match g.r.below(6) {
                0 => "continue".into(),
                1 => format!("reject {} \"no\"", g.r.pick(&["429", "403", "503"])),
                2 | 3 => {
                    let key = *g.r.pick(&[
                        "api_key",
                        "org",
                        "header(\"x-a\")",
                        "metadata(\"tier\")",
                        "random",
                    ]);
                    let stable = use_action(g.r, &strategies);
                    let other = use_action(g.r, &strategies);
                    let (a, b) = *g.r.pick(&[(50, 50), (95, 5), (1, 99), (33, 67)]);
                    let arm2 = if g.r.chance(60) {
                        let guard = Gen {
                            r: g.r,
                            names: Names::default(),
                        }
                        .boolean(Ctx::Guard, 2);
                        format!("{b}% -> canary {other} rollback when {guard}")
                    } else {
                        format!("{b}% -> {other}")
                    };
                    format!(
                        "split by {key} seed {} {{ {a}% -> {stable} {arm2} }}",
                        g.r.below(5)
                    )
                }
                _ => use_action(g.r, &strategies),
            });
            lines.push(format!("  rule r{k}{rp}{cond} {{ {} }}", body.join("  ")));
        }
        lines.push(format!("  default {}", use_action(g.r, &strategies)));
        out.push_str(&format!(
            "route q{ri}{prio}{when} {{\n{}\n}}\n",
            lines.join("\n")
        ));
    }
    out
}

fn some_float(r: &mut Rng) -> f64 {
    *r.pick(&[
        0.0,
        -0.0,
        0.5,
        1.0,
        250.0,
        1e300,
        -1.0,
        f64::INFINITY,
        f64::NAN,
        5e-324,
        0.3,
        f64::NAN,
        f64::NEG_INFINITY,
    ])
}

/// A random request.
pub fn request(r: &mut Rng) -> RequestFeatures {
    let mut q = RequestFeatures::for_model(*r.pick(&[
        MODELS[0],
        MODELS[1],
        MODELS[3],
        MODELS[4],
        "unknown-model",
        "gpt-4o",
    ]));
    q.input_tokens = *r.pick(&[0, 1, 50, 100_000, u64::MAX, 1 << 63, 12_345]);
    q.max_tokens = r.chance(50).then(|| *r.pick(&[0, 3, 500, u64::MAX]));
    q.temperature = r.chance(75).then(|| some_float(r));
    q.stream = r.chance(50);
    q.tools = r.chance(50);
    q.off_peak = r.chance(50);
    q.messages = r.below(5) as u64;
    for h in ["x-a", "x-b"] {
        if r.chance(50) {
            q.headers.insert(h.into(), (*r.pick(&WORDS)).into());
        }
    }
    if r.chance(40) {
        q.metadata
            .insert("tier".into(), (*r.pick(&["batch", "gold", ""])).into());
    }
    q.api_key = r
        .chance(60)
        .then(|| format!("key-{}", r.below(1000)).into());
    q.org = r
        .chance(40)
        .then(|| (*r.pick(&["acme", "acme-labs", "other"])).into());
    let mut scopes: Vec<String> = SCOPES
        .iter()
        .chain(&["other"])
        .filter(|_| r.chance(35))
        .map(|s| s.to_string())
        .collect();
    if r.chance(20) {
        // Unsorted, with a duplicate: a hand-built list answers the same.
        scopes.reverse();
        scopes.extend(scopes.first().cloned());
        q.scopes = scopes;
    } else {
        q.set_scopes(scopes);
    }
    q.priority = PriorityLevel::ALL[r.below(4)].1;
    q.hour = r.below(24) as u8;
    q.weekday = 1 + r.below(7) as u8;
    q.task = (*r.pick(&["chat", "code", "tool_use", "weird"])).into();
    q.budget_remaining = if r.chance(30) {
        switchyard::policy::NO_BUDGET
    } else {
        some_float(r)
    };
    q
}

/// A random stats snapshot (state under each strategy name `s0`..`s2`).
pub fn stats(r: &mut Rng) -> StatsSnapshot {
    let mut s = StatsSnapshot::default();
    for id in ENDPOINTS {
        if r.chance(30) {
            continue;
        }
        let mut e = EndpointStats {
            available: r.chance(85),
            health: some_float(r),
            latency_ewma_ms: some_float(r),
            ttft_ewma_ms: some_float(r),
            capacity: some_float(r),
            in_flight: *r.pick(&[0, 3, u64::MAX]),
            error_rate: some_float(r),
            cost_in_per_token: r.chance(30).then(|| some_float(r)),
            cost_out_per_token: r.chance(30).then(|| some_float(r)),
            context_window: r
                .chance(40)
                .then(|| *r.pick(&[0, 1, 8_192, 200_000, u64::MAX])),
            circuit: *r.pick(&Circuit::ALL),
            ..EndpointStats::default()
        };
        if r.chance(50) {
            e.quality.insert("chat".into(), some_float(r));
        }
        for st in ["s0", "s1", "s2"] {
            let mut m = BTreeMap::new();
            for w in ["w0", "w1", "w2"] {
                if r.chance(50) {
                    m.insert(w.to_string(), some_float(r));
                }
            }
            e.state.insert(st.into(), m);
        }
        s.endpoints.insert(id.into(), e);
    }
    s
}

/// A random outcome.
pub fn outcome(r: &mut Rng) -> Outcome {
    Outcome {
        latency_ms: some_float(r),
        ttft_ms: some_float(r),
        input_tokens: *r.pick(&[0, 10, u64::MAX]),
        output_tokens: *r.pick(&[0, 7, 1 << 63]),
    }
}

/// A set whose decisions expose expression values directly: three strategies score
/// every candidate with a random Int, Float and Bool expression (as 1.0/0.0), and a
/// random split sends each request to one of them. Rankings are compared bitwise.
pub fn probe_policy(seed: u64) -> String {
    let mut r = Rng::new(seed);
    let mut g = Gen {
        r: &mut r,
        names: Names::default(),
    };
    g.names.float_params = vec!["pf".into()];
    g.names.int_params = vec!["pi".into()];
    g.names.states = vec!["w0".into()];
    let i = g.int(Ctx::Score, 5);
    let f = g.float(Ctx::Score, 5);
    let b = g.boolean(Ctx::Score, 4);
    let head = "(pf = 0.5, pi = 3) {\n  state w0 = 1.0 join mean\n";
    format!(
        "strategy s0{head}  score = float({i})\n  pick max\n}}\n\
         strategy s1{head}  score = {f}\n  pick min\n}}\n\
         strategy s2{head}  score = if({b}, 1.0, 0.0)\n  pick weighted\n}}\n\
         route all {{\n  default split by random {{ 33% -> use any via s0 33% -> use any via s1 34% -> use any via s2 }}\n}}\n"
    )
}
