//! The cranelift back end: checked policies compiled to native code that decides
//! exactly as the reference interpreter ([`crate::policy::interp`]) does.
//!
//! ```text
//! CheckedPolicySet ──lower──► ir::Node trees + layout ──codegen──► cranelift ──► Native
//!                     (strings → ids and host atoms)                        (owns JITModule)
//! per request: host fills the feature vectors ─► compiled selection / guards /
//!              strategy functions ─► host builds the Decision (plan, strings)
//! ```
//!
//! Module map: [`ir`] (the small IR), [`layout`] (feature vectors and how the host
//! fills them), [`index`] (rule indexing: which rules a request can match),
//! [`lower`] (checked expressions → IR), [`codegen`] (IR → cranelift,
//! safe), [`native`] (the only `unsafe`: module ownership, calls, freeing),
//! [`compile`] (driver), [`run`] (host side of a decision), [`engine`] (choosing or
//! comparing engines).
//!
//! If compilation fails for any reason the set still decides, on the interpreter, and
//! [`CompiledPolicySet::fallback_reason`] says why: it never fails open.

#![warn(missing_docs)]

use std::sync::Arc;

use crate::policy::ast::Event;
use crate::policy::checked::{CheckedPolicySet, Const};
use crate::policy::features::{Outcome, RequestFeatures, StatsSource};
use crate::policy::interp::{self, Decision, StateUpdate, StrategyCall};

pub mod codegen;
pub mod compile;
pub mod engine;
pub mod index;
pub mod ir;
pub mod layout;
pub mod lower;
pub mod native;
pub mod run;

pub use compile::JitOptions;
pub use engine::{decide_with, EngineMode, Mismatch};
pub use native::live_compiled_modules;

/// Which engine a compiled set decides with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Engine {
    /// Native code from cranelift.
    Jit,
    /// The reference interpreter.
    Interp,
}

/// A checked set plus, when compilation succeeded, its native code. Cloning shares
/// the code; the code is freed when the last clone drops.
#[derive(Clone)]
pub struct CompiledPolicySet {
    set: Arc<CheckedPolicySet>,
    code: Option<Arc<compile::JitCode>>,
    fallback: Option<String>,
}

impl std::fmt::Debug for CompiledPolicySet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompiledPolicySet")
            .field("version", &self.set.version)
            .field("engine", &self.engine())
            .field("fallback", &self.fallback)
            .finish()
    }
}

/// One strategy candidate as ranked: endpoint id, score, pick probability (plan
/// order, the pick first).
pub type RankedCandidate = (String, f64, f64);

impl CompiledPolicySet {
    /// Compiles `set`. Never fails: on any compile error (or a panic inside the code
    /// generator) the result runs on the interpreter and
    /// [`CompiledPolicySet::fallback_reason`] says why.
    pub fn compile(set: CheckedPolicySet) -> CompiledPolicySet {
        CompiledPolicySet::compile_arc(Arc::new(set))
    }

    /// [`CompiledPolicySet::compile`] for a shared set.
    pub fn compile_arc(set: Arc<CheckedPolicySet>) -> CompiledPolicySet {
        CompiledPolicySet::compile_with(set, JitOptions::default())
    }

    /// [`CompiledPolicySet::compile`] with explicit code generation options (tests
    /// use it to index every route).
    pub fn compile_with(set: Arc<CheckedPolicySet>, opts: JitOptions) -> CompiledPolicySet {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            compile::compile(&set, opts)
        }));
        let (code, fallback) = match r {
            Ok(Ok(code)) => (Some(Arc::new(code)), None),
            Ok(Err(e)) => (None, Some(e)),
            Err(_) => (None, Some("the code generator panicked".to_string())),
        };
        CompiledPolicySet {
            set,
            code,
            fallback,
        }
    }

    /// A set that always runs on the interpreter (`--engine interp`).
    pub fn interpreted(set: CheckedPolicySet) -> CompiledPolicySet {
        CompiledPolicySet {
            set: Arc::new(set),
            code: None,
            fallback: Some("the interpreter was requested".to_string()),
        }
    }

    /// The checked set (the interpreter's input and the source of traces).
    pub fn checked(&self) -> &CheckedPolicySet {
        &self.set
    }

    /// The engine [`CompiledPolicySet::decide`] uses.
    pub fn engine(&self) -> Engine {
        if self.code.is_some() {
            Engine::Jit
        } else {
            Engine::Interp
        }
    }

    /// Machine code bytes of the compiled functions (0 on the interpreter).
    pub fn code_bytes(&self) -> usize {
        self.code.as_ref().map(|c| c.code_bytes).unwrap_or(0)
    }

    /// Why the set runs on the interpreter (`None` when it is compiled).
    pub fn fallback_reason(&self) -> Option<&str> {
        self.fallback.as_deref()
    }

    /// Decides for `req`: same signature and result as [`interp::decide`], on the
    /// compiled code when there is some.
    pub fn decide(&self, req: &RequestFeatures, stats: &dyn StatsSource, seed: u64) -> Decision {
        self.decide_on(self.engine(), req, stats, seed)
    }

    /// [`CompiledPolicySet::decide`] for the gateway, which tries the plan in order
    /// and usually stops at its first endpoint: on the compiled code, a ranking of
    /// many candidates without a fallback chain leaves its fallbacks unordered in
    /// [`Decision::rest`] (`plan` is then the pick alone), to be ordered only when
    /// the first endpoint fails. Once ordered, the plan is the one `decide` gives.
    pub fn decide_lazy(
        &self,
        req: &RequestFeatures,
        stats: &dyn StatsSource,
        seed: u64,
    ) -> Decision {
        if let Some(code) = &self.code {
            let mut d = Decision::blank(req.priority, self.set.names.endpoints());
            let mut run = run::JRun::new(&self.set, code, req, stats, seed).lazy_rest();
            if run.decide_into(&mut d).is_some() {
                return d;
            }
        }
        interp::decide(&self.set, req, stats, seed)
    }

    /// Decides on a chosen engine (`Jit` without code runs the interpreter).
    pub fn decide_on(
        &self,
        engine: Engine,
        req: &RequestFeatures,
        stats: &dyn StatsSource,
        seed: u64,
    ) -> Decision {
        if let (Engine::Jit, Some(code)) = (engine, &self.code) {
            let mut d = Decision::blank(req.priority, self.set.names.endpoints());
            let mut run = run::JRun::new(&self.set, code, req, stats, seed);
            if run.decide_into(&mut d).is_some() {
                return d;
            }
        }
        interp::decide(&self.set, req, stats, seed)
    }

    /// Outcome updates ([`interp::on_outcome`]) on a chosen engine.
    #[allow(clippy::too_many_arguments)]
    pub fn on_outcome_on(
        &self,
        engine: Engine,
        call: &StrategyCall,
        req: &RequestFeatures,
        stats: &dyn StatsSource,
        endpoint: &str,
        success: bool,
        outcome: &Outcome,
    ) -> Option<StateUpdate> {
        let event = if success {
            Event::Success
        } else {
            Event::Failure
        };
        if let (Engine::Jit, Some(code), Some(si)) = (engine, &self.code, call.strategy) {
            let s = self.set.strategies.get(si as usize)?;
            let key = (si, compile::args_key(&call.args));
            if let Some(inst) = code.by_args.get(&key).and_then(|i| code.instances.get(*i)) {
                let cands = run::refs(&self.set, &call.candidates);
                let r = run::JRun::new(&self.set, code, req, stats, 0);
                if let Some(u) =
                    r.update(inst, s, &call.args, &cands, endpoint, event, Some(outcome))
                {
                    return u;
                }
            }
        }
        interp::on_outcome(&self.set, call, req, stats, endpoint, success, outcome)
    }

    /// Ranks the available endpoints among `candidates` (registry indices, as in a
    /// [`StrategyCall`]) with strategy
    /// `strategy` and `args` on a chosen engine: plan order with scores and
    /// probabilities (`None`: no such strategy). On the JIT this needs a `use` of the
    /// same strategy with the same arguments somewhere in the set; otherwise it runs
    /// the interpreter.
    #[allow(clippy::too_many_arguments)]
    pub fn rank_on(
        &self,
        engine: Engine,
        strategy: u32,
        args: &[Const],
        candidates: &[usize],
        req: &RequestFeatures,
        stats: &dyn StatsSource,
        seed: u64,
    ) -> Option<Vec<RankedCandidate>> {
        let s = self.set.strategies.get(strategy as usize)?;
        let cands = run::refs(&self.set, candidates);
        let out = |v: Vec<interp::eval::EpCtx<'_>>| {
            v.iter()
                .map(|c| (c.reg.endpoint.id.clone(), c.score, c.probability))
                .collect()
        };
        if let (Engine::Jit, Some(code)) = (engine, &self.code) {
            let key = (strategy, compile::args_key(args));
            if let Some(inst) = code.by_args.get(&key).and_then(|i| code.instances.get(*i)) {
                let mut r = run::JRun::new(&self.set, code, req, stats, seed);
                if let Some(v) = r.rank(inst, s, args, &cands) {
                    return Some(v);
                }
            }
        }
        let mut rng = interp::hash::SplitMix64::new(seed);
        let r = interp::strategy::rank(
            &self.set,
            s,
            args,
            req,
            stats,
            &cands,
            Some(&mut rng),
            false,
        );
        Some(out(r.order))
    }
}

#[cfg(test)]
mod tests;
