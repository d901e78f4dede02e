//! Switchyard: an LLM gateway where routing is code.
//!
//! The request path, top to bottom (see `README.md` and `../shared/DESIGN.md`):
//!
//! ```text
//! client ─► ingress ─► gateway::chat ─► routing ─► providers (transform) ─► egress ─► provider
//! ```
//!
//! Modules mirror it one layer each; `config`, `cli`, `server` and `mock` sit beside it.

pub mod admin;
pub mod api;
pub mod body;
pub mod cli;
pub mod config;
pub mod egress;
pub mod error;
pub mod gateway;
pub mod ingress;
pub mod mock;
pub mod policy;
pub mod providers;
pub mod reload;
pub mod routing;
pub mod server;
pub mod sse;
pub mod stats;
pub mod suggest;
pub mod telemetry;
