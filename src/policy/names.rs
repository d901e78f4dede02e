//! The names a decision reports (route, rule, target, strategy, endpoint, model,
//! state slots), made once per checked set and shared: a decision copies a pointer
//! ([`Name`]) where it used to copy text, and refers to the endpoints of its plan by
//! registry index ([`PlanNames`]), so deciding allocates nothing per endpoint.

use std::sync::Arc;

use super::checked::{CRoute, CStrategy};
use super::registry::Registry;

/// A shared, immutable name.
pub type Name = Arc<str>;

/// The names of one registry endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointNames {
    /// Endpoint id.
    pub id: Name,
    /// Its logical model.
    pub model: Name,
    /// Its provider.
    pub provider: Name,
}

/// Every endpoint's names, by registry index; shared by a set's decisions.
#[derive(Clone, Default)]
pub struct PlanNames(Arc<[EndpointNames]>);

impl PlanNames {
    /// The names of the endpoint with registry index `index`.
    pub fn get(&self, index: usize) -> Option<&EndpointNames> {
        self.0.get(index)
    }
}

impl std::fmt::Debug for PlanNames {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PlanNames({} endpoints)", self.0.len())
    }
}

impl PartialEq for PlanNames {
    fn eq(&self, other: &PlanNames) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.0 == other.0
    }
}

/// The names of a checked set, by index.
#[derive(Debug, Clone, Default)]
pub struct Names {
    routes: Vec<Name>,
    /// Per route: its rules in evaluation order, then `default`.
    rules: Vec<Vec<Name>>,
    strategies: Vec<Name>,
    /// Per strategy: its state slots.
    slots: Vec<Vec<Name>>,
    priority: Name,
    endpoints: PlanNames,
}

impl Names {
    /// The names of `routes`, `strategies` and `registry`.
    pub fn new(routes: &[CRoute], strategies: &[CStrategy], registry: &Registry) -> Names {
        let name = |s: &str| -> Name { Arc::from(s) };
        Names {
            routes: routes.iter().map(|r| name(&r.name)).collect(),
            rules: routes
                .iter()
                .map(|r| {
                    r.rules
                        .iter()
                        .chain(std::iter::once(&r.default))
                        .map(|k| name(&k.name))
                        .collect()
                })
                .collect(),
            strategies: strategies.iter().map(|s| name(&s.name)).collect(),
            slots: strategies
                .iter()
                .map(|s| s.states.iter().map(|st| name(&st.name)).collect())
                .collect(),
            priority: name(super::check::BUILTIN_PRIORITY),
            endpoints: PlanNames(
                registry
                    .endpoints()
                    .map(|e| EndpointNames {
                        id: name(&e.endpoint.id),
                        model: name(&e.model.name),
                        provider: name(&e.endpoint.provider),
                    })
                    .collect(),
            ),
        }
    }

    /// Route `ri`'s name.
    pub fn route(&self, ri: usize) -> Option<Name> {
        self.routes.get(ri).cloned()
    }

    /// The name of rule `ki` of route `ri` (`default` after the rules).
    pub fn rule(&self, ri: usize, ki: usize) -> Option<Name> {
        self.rules.get(ri)?.get(ki).cloned()
    }

    /// Strategy `si`'s name; `None`: the built-in `priority`.
    pub fn strategy(&self, si: Option<u32>) -> Name {
        si.and_then(|i| self.strategies.get(i as usize))
            .unwrap_or(&self.priority)
            .clone()
    }

    /// The name of state slot `slot` of strategy `si`.
    pub fn slot(&self, si: u32, slot: u32) -> Option<Name> {
        self.slots.get(si as usize)?.get(slot as usize).cloned()
    }

    /// Every endpoint's names, for decisions.
    pub fn endpoints(&self) -> &PlanNames {
        &self.endpoints
    }
}
