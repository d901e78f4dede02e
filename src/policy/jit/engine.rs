//! Choosing an engine per call, and comparing the two (`--engine jit|interp|both` of
//! `switchyard dry-run` and `switchyard test`).
//!
//! Equality rule for `both`: every field of the two [`Decision`]s must be equal;
//! floats (state update values) are equal when their bits are equal or both are NaN
//! (NaN payloads are not part of the language's semantics).

use std::fmt;
use std::str::FromStr;

use crate::policy::features::{RequestFeatures, StatsSnapshot, StatsSource};
use crate::policy::interp::Decision;
use crate::policy::testing::{
    run_tests_parallel, run_tests_within, test_threads, TestReport, TestResults,
};

use super::{CompiledPolicySet, Engine};

/// What to run: one engine, or both compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EngineMode {
    /// The compiled code (the interpreter if the set did not compile).
    Jit,
    /// The reference interpreter.
    Interp,
    /// Both; any difference is an error. The default for tests.
    #[default]
    Both,
}

impl FromStr for EngineMode {
    type Err = String;

    /// Parses `jit`, `interp` or `both`.
    fn from_str(s: &str) -> Result<EngineMode, String> {
        match s {
            "jit" => Ok(EngineMode::Jit),
            "interp" => Ok(EngineMode::Interp),
            "both" => Ok(EngineMode::Both),
            _ => Err(format!(
                "unknown engine `{s}`: expected `jit`, `interp` or `both`"
            )),
        }
    }
}

/// The first difference between the interpreter's and the JIT's decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    /// The decision field, e.g. `endpoint` or `state_updates[0].slots.weight`.
    pub field: String,
    /// The interpreter's value (debug form).
    pub interp: String,
    /// The JIT's value (debug form).
    pub jit: String,
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the JIT and the interpreter disagree on `{}`: interpreter {}, JIT {}",
            self.field, self.interp, self.jit
        )
    }
}

impl std::error::Error for Mismatch {}

/// Floats equal by the rule above.
pub fn same_f64(a: f64, b: f64) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

fn differ<T: fmt::Debug + PartialEq>(field: &str, a: &T, b: &T) -> Option<Mismatch> {
    (a != b).then(|| Mismatch {
        field: field.to_string(),
        interp: format!("{a:?}"),
        jit: format!("{b:?}"),
    })
}

/// The first field where `interp` and `jit` differ (`None`: identical).
pub fn diff(interp: &Decision, jit: &Decision) -> Option<Mismatch> {
    let (a, b) = (interp, jit);
    differ("route", &a.route, &b.route)
        .or_else(|| differ("rule", &a.rule, &b.rule))
        .or_else(|| differ("split", &a.split, &b.split))
        .or_else(|| differ("target", &a.target, &b.target))
        .or_else(|| differ("strategy", &a.strategy, &b.strategy))
        .or_else(|| differ("endpoint", &a.endpoint, &b.endpoint))
        .or_else(|| differ("model", &a.model, &b.model))
        .or_else(|| {
            let (x, y): (Vec<_>, Vec<_>) = (a.fallbacks().collect(), b.fallbacks().collect());
            differ("fallbacks", &x, &y)
        })
        .or_else(|| differ("retries", &a.retries, &b.retries))
        .or_else(|| differ("backoff_ms", &a.backoff_ms, &b.backoff_ms))
        .or_else(|| differ("fallback_on", &a.fallback_on, &b.fallback_on))
        .or_else(|| differ("priority", &a.priority, &b.priority))
        .or_else(|| differ("cache", &a.cache, &b.cache))
        .or_else(|| differ("hold_off_peak", &a.hold_off_peak, &b.hold_off_peak))
        .or_else(|| differ("reject", &a.reject, &b.reject))
        .or_else(|| differ("call", &a.call, &b.call))
        .or_else(|| {
            differ(
                "state_updates.len",
                &a.state_updates.len(),
                &b.state_updates.len(),
            )
        })
        .or_else(|| {
            a.state_updates
                .iter()
                .zip(&b.state_updates)
                .enumerate()
                .find_map(|(i, (x, y))| {
                    let f = |n: &str| format!("state_updates[{i}].{n}");
                    differ(&f("endpoint"), &x.endpoint, &y.endpoint)
                        .or_else(|| differ(&f("strategy"), &x.strategy, &y.strategy))
                        .or_else(|| differ(&f("event"), &x.event, &y.event))
                        .or_else(|| {
                            let kx: Vec<_> = x.slots.keys().collect();
                            let ky: Vec<_> = y.slots.keys().collect();
                            differ(&f("slots"), &kx, &ky)
                        })
                        .or_else(|| {
                            x.slots.iter().zip(&y.slots).find_map(|((k, u), (_, v))| {
                                (!same_f64(*u, *v)).then(|| Mismatch {
                                    field: f(&format!("slots.{k}")),
                                    interp: format!("{u:?} ({:#x})", u.to_bits()),
                                    jit: format!("{v:?} ({:#x})", v.to_bits()),
                                })
                            })
                        })
                })
        })
}

/// Decides with `mode`. `Both` runs the interpreter and the JIT and returns the
/// interpreter's decision if they agree, else the first [`Mismatch`]; the other
/// modes never fail.
pub fn decide_with(
    set: &CompiledPolicySet,
    mode: EngineMode,
    req: &RequestFeatures,
    stats: &dyn StatsSource,
    seed: u64,
) -> Result<Decision, Mismatch> {
    match mode {
        EngineMode::Jit => Ok(set.decide_on(Engine::Jit, req, stats, seed)),
        EngineMode::Interp => Ok(set.decide_on(Engine::Interp, req, stats, seed)),
        EngineMode::Both => {
            let a = set.decide_on(Engine::Interp, req, stats, seed);
            let b = set.decide_on(Engine::Jit, req, stats, seed);
            match diff(&a, &b) {
                None => Ok(a),
                Some(m) => Err(m),
            }
        }
    }
}

/// Runs the set's policy tests with `mode` (`Both`: a disagreement fails the test).
pub fn run_tests(set: &CompiledPolicySet, mode: EngineMode) -> TestReport {
    run_tests_budgeted(set, mode, None)
}

/// The self-check of a set on (re)load: its tests on both engines within a total
/// `budget` of test requests, on every core, re-running in full only the tests whose
/// inputs changed since `previous` (the results of the last run; the others run on
/// the JIT alone against the interpreter's remembered decisions, see
/// [`crate::policy::testing::run`]). Returns the report and the results to pass to
/// the next run.
pub fn self_check(
    set: &CompiledPolicySet,
    budget: Option<u64>,
    previous: Option<&TestResults>,
) -> (TestReport, TestResults) {
    let full = |r: &RequestFeatures, s: &StatsSnapshot, seed: u64| {
        decide_with(set, EngineMode::Both, r, s, seed).map_err(|m| m.to_string())
    };
    let jit = |r: &RequestFeatures, s: &StatsSnapshot, seed: u64| {
        Ok(set.decide_on(Engine::Jit, r, s, seed))
    };
    run_tests_parallel(set.checked(), &full, &jit, budget, previous, test_threads())
}

/// Runs the set's policy tests with `mode` within a total `budget` of test requests
/// ([`crate::policy::testing::run_tests_within`]; `None`: unlimited).
pub fn run_tests_budgeted(
    set: &CompiledPolicySet,
    mode: EngineMode,
    budget: Option<u64>,
) -> TestReport {
    run_tests_within(
        set.checked(),
        &|r, s, seed| decide_with(set, mode, r, s, seed).map_err(|m| m.to_string()),
        budget,
    )
}
