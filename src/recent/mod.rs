//! What the gateway did lately, for the status page (`/ui`) and its admin views: the
//! requests each endpoint served in the last minutes ([`traffic`]) and the last
//! routing decisions ([`decisions`]).
//!
//! Both are fixed-size rings allocated when the gateway is built and written once per
//! request by the log phase, when the access line is written
//! (`gateway::access::Facts::emit`). Writing never allocates and never waits: the
//! traffic ring is one atomic add in the common case, the decision ring copies a few
//! short strings into a slot's reused buffers under a `try_lock` that gives up rather
//! than wait for a reader.

pub mod decisions;
pub mod traffic;

pub use decisions::{Decision, DecisionRing};
pub use traffic::{Traffic, TrafficReport};
