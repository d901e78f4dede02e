//! Switchyard: an LLM gateway where routing is code (policy work tree).

pub mod policy;
pub mod suggest;
