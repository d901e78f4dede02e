//! The routing policy language: parse, check, interpret, test.
//!
//! Pipeline (each stage its own module and type, Cedar style):
//!
//! ```text
//! text ──parser──► ast::PolicyFile ──check──► CheckedPolicySet ──interp──► Decision
//!                   (spans, comments)          (typed, resolved,            + trace
//!                                               interned)
//! ```
//!
//! Everything here is pure: no I/O, no async. Callers hand in file names and text
//! ([`source::SourceMap`]), a [`Registry`] and, per request, [`RequestFeatures`] and
//! [`EndpointStats`].

pub mod ast;
pub mod diagnostic;
pub mod grammar;
pub mod parser;
pub mod source;

pub use diagnostic::{Diagnostic, Severity};
pub use source::{FileId, SourceMap, Span};
pub mod features;
pub mod registry;

pub use features::{
    Circuit, EndpointStats, EpStats, Outcome, RequestFeatures, StatsSnapshot, StatsSource,
    NO_BUDGET,
};
pub use registry::{Registry, RegistryEndpoint, RegistryModel};
pub mod check;
pub mod checked;
pub mod explain;
pub mod fmt;
pub mod interp;
pub mod jit;
pub mod lint;
pub mod names;
pub mod status;
pub mod testing;

pub use check::{check, parse_and_check};
pub use checked::CheckedPolicySet;
pub use interp::{decide, explain, on_outcome, Decision, Trace};
pub use jit::{engine, live_compiled_modules, CompiledPolicySet, Engine, JitOptions};
pub use status::{FallbackOn, StatusItem};
pub use testing::{run_tests, run_tests_with, TestReport};

#[cfg(test)]
mod tests;
