//! The pest parser generated from `grammar/policy.pest`.
//!
//! This is the only module that touches pest's generated `Rule` enum (which is why no
//! policy concept is called `Rule`: rules of a policy are [`super::ast::RuleDef`]).

use pest_derive::Parser;

/// The generated parser; use [`super::parser::parse_file`] instead of calling it.
#[derive(Parser)]
#[grammar = "../grammar/policy.pest"]
pub struct PolicyGrammar;
