//! `switchyard dry-run`: one request through the policy set, without a server.
//!
//! Prints the decision and the trace (conditions tried in order with their
//! locations and the values they saw, the split bucket, each endpoint's score). The
//! JSON schema (`switchyard.dry-run/1`) is documented in `docs/lint.md`.

use std::io::Read as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use super::policy::{load_config, say, Format};
use crate::api::ChatRequest;
use crate::policy::ast::PriorityLevel;
use crate::policy::diagnostic::render_all;
use crate::policy::interp::{Decision, TraceEvent};
use crate::policy::jit::engine::{decide_with, EngineMode};
use crate::policy::jit::CompiledPolicySet;
use crate::policy::StatsSnapshot;
use crate::routing::features::{features, Caller};
use crate::routing::policy::{read_sources_from, registry_from_config};

/// `switchyard dry-run` flags.
#[derive(Debug, clap::Args)]
pub struct DryRunArgs {
    /// Engine: `jit`, `interp`, or `both` (compare; a difference is an error).
    #[arg(long, default_value = "both")]
    pub engine: EngineMode,
    /// The OpenAI chat completion body: a file, `-` for standard input, or the JSON
    /// itself when it starts with `{` (at most 32 MiB).
    #[arg(long)]
    pub request: String,
    /// Policy directory (default: the config's `policies.dir`).
    #[arg(long)]
    pub policies: Option<PathBuf>,
    /// Config file; default `./switchyard.yaml` if it exists, else the built-in config.
    #[arg(long, short)]
    pub config: Option<PathBuf>,
    /// A request header `name:value` (repeatable).
    #[arg(long = "header", value_name = "K:V")]
    pub headers: Vec<String>,
    /// Endpoint statistics snapshot (JSON: endpoint id → stats).
    #[arg(long)]
    pub stats: Option<PathBuf>,
    /// Seed of the decision's random source (random splits, sampling strategies).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// The caller's API key id (as ingress would authenticate it).
    #[arg(long)]
    pub api_key: Option<String>,
    /// The caller's organization.
    #[arg(long)]
    pub org: Option<String>,
    /// An OAuth2 scope of the caller's token, for `scope("name")` (repeatable; a
    /// value may hold several, space-separated, like a JWT's `scope` claim).
    #[arg(long = "scope", value_name = "NAME")]
    pub scopes: Vec<String>,
    /// Priority before routing: low, normal, high or critical.
    #[arg(long, default_value = "normal")]
    pub priority: String,
    /// The caller's least budget left, USD, for `request.budget_remaining` (what the
    /// admit phase finds in the caller's budgets; default: no budget applies).
    #[arg(long, value_name = "USD")]
    pub budget_remaining: Option<f64>,
    /// The gateway's off-peak window (`scheduler.off_peak`) holds now, for
    /// `request.off_peak` (default: it does not, as without a configured window).
    #[arg(long)]
    pub off_peak: bool,
    /// Request time as Unix seconds (default: now), for `request.hour` / `weekday`.
    #[arg(long)]
    pub time: Option<u64>,
    /// Print the full trace in human output (JSON always has it).
    #[arg(long)]
    pub explain: bool,
    /// Output format.
    #[arg(long, value_enum, default_value = "human")]
    pub format: Format,
}

fn fail(code: u8, msg: String) -> ExitCode {
    eprintln!("error: {msg}");
    ExitCode::from(code)
}

/// What is wrong with a `--stats` snapshot, one sentence each: ids that are not
/// endpoints of `registry` (with a did-you-mean), then values outside their ranges
/// ([`StatsSnapshot::out_of_range`]).
fn stats_problems(stats: &StatsSnapshot, registry: &crate::policy::Registry) -> Vec<String> {
    let mut out: Vec<String> = stats
        .endpoints
        .keys()
        .filter(|id| registry.endpoint(id).is_none())
        .map(|id| {
            let hint = crate::suggest::did_you_mean(id, registry.endpoint_ids())
                .map(|close| format!("; did you mean `{close}`?"))
                .unwrap_or_default();
            format!("`{id}` is not an endpoint of the config's registry{hint}")
        })
        .collect();
    out.extend(stats.out_of_range());
    out
}

/// Runs `switchyard dry-run`.
pub fn run(a: DryRunArgs) -> ExitCode {
    let cfg = match load_config(a.config.as_deref()) {
        Ok(c) => c,
        Err(e) => return fail(2, e.0),
    };
    let dirs: Vec<PathBuf> = a.policies.iter().cloned().collect();
    let roots = if dirs.is_empty() {
        cfg.policies.dir.iter().cloned().collect()
    } else {
        dirs
    };
    let sources = match read_sources_from(&roots) {
        Ok(s) => s,
        Err(e) => return fail(2, e.to_string()),
    };
    const MAX_REQUEST: u64 = 32 * 1024 * 1024;
    let mut b = Vec::new();
    let body = if a.request.trim_start().starts_with('{') {
        Ok(a.request.clone().into_bytes())
    } else if a.request == "-" {
        std::io::stdin()
            .take(MAX_REQUEST)
            .read_to_end(&mut b)
            .map(|_| b)
    } else {
        std::fs::File::open(&a.request)
            .and_then(|f| f.take(MAX_REQUEST).read_to_end(&mut b))
            .map(|_| b)
    };
    let body = match body {
        Ok(b) => b,
        Err(e) => return fail(2, format!("cannot read request {}: {e}", a.request)),
    };
    let req = match ChatRequest::parse(&body) {
        Ok(r) => r,
        Err(e) => {
            return fail(
                2,
                format!("the request is not a valid chat completion body: {e}"),
            )
        }
    };
    let mut headers = Vec::new();
    for h in &a.headers {
        match h.split_once(':') {
            Some((k, v)) if !k.trim().is_empty() => {
                headers.push((k.trim().to_string(), v.trim().to_string()))
            }
            _ => return fail(2, format!("--header `{h}` is not of the form name:value")),
        }
    }
    let Some(priority) = PriorityLevel::parse(&a.priority) else {
        return fail(
            2,
            format!(
                "--priority `{}` is not one of low, normal, high, critical",
                a.priority
            ),
        );
    };
    if let Some(b) = a.budget_remaining.filter(|b| !b.is_finite() || *b < 0.0) {
        return fail(
            2,
            format!("--budget-remaining `{b}` is not a number of USD, 0 or more"),
        );
    }
    let stats: StatsSnapshot = match &a.stats {
        None => StatsSnapshot::default(),
        Some(p) => match std::fs::read(p)
            .map_err(|e| e.to_string())
            .and_then(|b| serde_json::from_slice(&b).map_err(|e| e.to_string()))
        {
            Ok(s) => s,
            Err(e) => return fail(2, format!("cannot load stats {}: {e}", p.display())),
        },
    };
    if let Some(p) = &a.stats {
        let problems = stats_problems(&stats, &registry_from_config(&cfg));
        if !problems.is_empty() {
            for m in &problems {
                eprintln!("error: stats {}: {m}", p.display());
            }
            return ExitCode::from(2);
        }
    }
    let now = a.time.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0)
    });
    let caller = Caller {
        api_key: a.api_key.as_deref().map(Arc::from),
        org: a.org.as_deref().map(Arc::from),
        priority,
        scopes: crate::policy::features::normalize_scopes(
            a.scopes.iter().flat_map(|s| s.split_whitespace()),
        ),
        budget_remaining: a.budget_remaining,
        ..Caller::default()
    };
    let pairs = headers.iter().map(|(k, v)| (k.as_str(), v.as_str()));
    let mut feats = features(&req, pairs, &caller, now);
    // As the gateway does after `features`: the window is the scheduler's to say.
    feats.off_peak = a.off_peak;
    let set = match crate::policy::parse_and_check(&sources, &registry_from_config(&cfg)) {
        Ok(s) => s,
        Err(d) => {
            eprint!("{}", render_all(&d, &sources));
            return ExitCode::from(1);
        }
    };
    // As the gateway does: the model's tokenizer only for a set that reads the count.
    if crate::routing::reads::reads_input_tokens(&set) {
        let registry = crate::routing::Registry::from_config(&cfg, |name| {
            cfg.providers.iter().position(|p| p.name == name)
        });
        feats.input_tokens = crate::limits::tokens::TokenCounter::new(&registry, false).count(&req);
    }
    // The trace always comes from the interpreter (the reference); the decision comes
    // from the engine asked for, and `both` refuses to answer if the two disagree.
    let compiled = CompiledPolicySet::compile(set);
    let set = compiled.checked();
    let (interp_decision, trace) = crate::policy::explain(set, &feats, &stats, a.seed);
    let decision = match decide_with(&compiled, a.engine, &feats, &stats, a.seed) {
        Ok(d) if a.engine == EngineMode::Interp => {
            debug_assert_eq!(d, interp_decision);
            interp_decision
        }
        Ok(d) => d,
        Err(m) => return fail(1, m.to_string()),
    };
    match a.format {
        Format::Json => {
            let doc = serde_json::json!({
                "schema": "switchyard.dry-run/1",
                "policy_version": set.version,
                "engine": decided_by(a.engine, compiled.engine()),
                "request": feats,
                "decision": decision,
                "trace": trace.events,
            });
            say!(
                "{}\n",
                serde_json::to_string_pretty(&doc).unwrap_or_default()
            );
        }
        Format::Human => say!(
            "{}",
            human(&set.version, &decision, &trace.events, a.explain)
        ),
    }
    ExitCode::SUCCESS
}

/// The engine that made the decision shown: the one asked for (`jit` falls back to
/// the interpreter for a set that does not compile), or `both` when both engines
/// decided and agreed.
fn decided_by(mode: EngineMode, compiled: crate::policy::Engine) -> &'static str {
    use crate::policy::Engine;
    match (mode, compiled) {
        (EngineMode::Interp, _) | (_, Engine::Interp) => "interp",
        (EngineMode::Jit, Engine::Jit) => "jit",
        (EngineMode::Both, Engine::Jit) => "both",
    }
}

fn human(version: &str, d: &Decision, events: &[TraceEvent], explain: bool) -> String {
    let mut s = format!("policy version {version}\n");
    let or_none = |o: &Option<crate::policy::names::Name>| o.as_deref().unwrap_or("-").to_string();
    match &d.reject {
        Some(r) => s.push_str(&format!(
            "decision: reject {} \"{}\"\n",
            r.status, r.message
        )),
        None => s.push_str(&format!(
            "decision: endpoint {} (model {}) via {}\n",
            or_none(&d.endpoint),
            or_none(&d.model),
            or_none(&d.strategy)
        )),
    }
    s.push_str(&format!(
        "  route {}, rule {}, target {}\n",
        or_none(&d.route),
        or_none(&d.rule),
        or_none(&d.target)
    ));
    if let Some(sp) = &d.split {
        s.push_str(&format!(
            "  split arm {} (bucket {}{})\n",
            sp.arm,
            sp.bucket,
            if sp.rolled_back {
                ", canary rolled back"
            } else {
                ""
            }
        ));
    }
    let fb: Vec<&str> = d.fallbacks().map(|f| f.endpoint).collect();
    s.push_str(&format!(
        "  fallbacks: {}\n",
        if fb.is_empty() {
            "none".to_string()
        } else {
            fb.join(" -> ")
        }
    ));
    let cache = match d.cache {
        Some(c) if c.on => format!(
            "{}{}",
            if c.exact { "exact" } else { "on" },
            c.ttl_ms.map(|t| format!(" ttl {t}ms")).unwrap_or_default()
        ),
        Some(_) => "off".into(),
        None => "default".into(),
    };
    let on = d
        .fallback_on
        .as_ref()
        .map(|on| {
            let items: Vec<String> = on.items().iter().map(|i| i.text()).collect();
            format!(", fallback on {}", items.join(", "))
        })
        .unwrap_or_default();
    let hold = if d.hold_off_peak {
        ", hold off_peak"
    } else {
        ""
    };
    s.push_str(&format!(
        "  priority {}, retries {}{on}, cache {cache}{hold}\n",
        d.priority.as_str(),
        d.retries
    ));
    if !explain {
        return s;
    }
    s.push_str("trace:\n");
    for e in events {
        match e {
            TraceEvent::Condition {
                owner,
                at,
                value,
                leaves,
            } => {
                s.push_str(&format!(
                    "  {owner} at {at}: {}\n",
                    if *value { "TRUE" } else { "FALSE" }
                ));
                for l in leaves {
                    let saw = if l.saw.is_empty() {
                        String::new()
                    } else {
                        format!(" (saw {})", l.saw.join(", "))
                    };
                    s.push_str(&format!(
                        "    {} at {}: {}{saw}\n",
                        l.text,
                        l.at,
                        if l.value { "TRUE" } else { "FALSE" }
                    ));
                }
            }
            TraceEvent::Split {
                rule,
                bucket,
                arm,
                key_present,
            } => {
                s.push_str(&format!(
                    "  split in {rule}: bucket {bucket} -> arm {arm}{}\n",
                    if *key_present { "" } else { " (key absent)" }
                ));
            }
            TraceEvent::Candidate {
                strategy,
                endpoint,
                score,
                probability,
                excluded,
            } => {
                let p = probability
                    .map(|p| format!(", p = {p:.4}"))
                    .unwrap_or_default();
                let x = excluded
                    .as_ref()
                    .map(|x| format!(", excluded: {x}"))
                    .unwrap_or_default();
                s.push_str(&format!("  {strategy}: {endpoint} score {score}{p}{x}\n"));
            }
            TraceEvent::Note { message } => s.push_str(&format!("  note: {message}\n")),
        }
    }
    s
}
