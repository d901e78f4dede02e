//! The model registry as the policy language sees it: logical models and their
//! provider endpoints (seed 001, "Model Mapping").
//!
//! The gateway builds a [`Registry`] from its config (`models:` and the providers'
//! prices); the checker resolves model and endpoint names against it and the
//! interpreter reads endpoint priority, weight and prices from it.

use serde::{Deserialize, Serialize};

/// Logical models → endpoints.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Registry {
    /// Logical models in config order; names unique.
    pub models: Vec<RegistryModel>,
}

/// One logical model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RegistryModel {
    /// The name clients send as `model`, e.g. `gpt-4o`.
    pub name: String,
    /// Its endpoints in config order.
    pub endpoints: Vec<RegistryEndpoint>,
}

/// One provider endpoint of a logical model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RegistryEndpoint {
    /// Unique endpoint id used in policies, metrics and stats, e.g. `openai/gpt-4o`.
    pub id: String,
    /// The provider's name (a key of the config's `providers:`).
    pub provider: String,
    /// The upstream model id sent to the provider.
    pub model: String,
    /// Lower is preferred (config `priority`, default 1).
    pub priority: u32,
    /// Share among endpoints of equal priority (config `weight`, default 1).
    pub weight: u32,
    /// USD per 1M input tokens.
    pub input_per_mtok: f64,
    /// USD per 1M output tokens.
    pub output_per_mtok: f64,
    /// The upstream model's context window in tokens (config `context_window`;
    /// `None`: unknown, read by policies as 0).
    #[serde(default)]
    pub context_window: Option<u64>,
}

/// An endpoint together with the logical model it serves.
#[derive(Debug, Clone, Copy)]
pub struct EndpointRef<'a> {
    /// The logical model.
    pub model: &'a RegistryModel,
    /// The endpoint.
    pub endpoint: &'a RegistryEndpoint,
    /// Its position among every endpoint of the registry, in config order: the
    /// endpoint index the gateway's registry, statistics and upstream plan use.
    pub index: usize,
}

impl Registry {
    /// A registry from `(logical model, endpoints)` pairs.
    pub fn new(models: Vec<RegistryModel>) -> Registry {
        Registry { models }
    }

    /// The logical model named `name`.
    pub fn model(&self, name: &str) -> Option<&RegistryModel> {
        self.models.iter().find(|m| m.name == name)
    }

    /// Every endpoint with its model and index, in config order.
    pub fn endpoints(&self) -> impl Iterator<Item = EndpointRef<'_>> {
        self.models
            .iter()
            .flat_map(|m| m.endpoints.iter().map(move |e| (m, e)))
            .enumerate()
            .map(|(index, (model, endpoint))| EndpointRef {
                model,
                endpoint,
                index,
            })
    }

    /// The endpoints of the logical model named `name`, with their indices, in
    /// config order (`None`: no such model). Visits the models before it, not their
    /// endpoints.
    pub fn model_endpoints<'r>(
        &'r self,
        name: &str,
    ) -> Option<impl ExactSizeIterator<Item = EndpointRef<'r>> + 'r> {
        let mut base = 0;
        for model in &self.models {
            if model.name == name {
                return Some(
                    model
                        .endpoints
                        .iter()
                        .enumerate()
                        .map(move |(i, endpoint)| EndpointRef {
                            model,
                            endpoint,
                            index: base + i,
                        }),
                );
            }
            base += model.endpoints.len();
        }
        None
    }

    /// The endpoints with ids `ids`, in the order of `ids`; ids the registry does not
    /// know are left out. Ids in registry order (a [`crate::policy::interp::StrategyCall`]'s
    /// candidates) are found in one pass over the registry; others one by one.
    pub fn endpoints_by_id<'r>(&'r self, ids: &[String]) -> Vec<EndpointRef<'r>> {
        let mut out = Vec::with_capacity(ids.len());
        let mut next = 0;
        for e in self.endpoints() {
            let Some(id) = ids.get(next) else { break };
            // In registry order the first endpoint of an id is met first, as
            // `endpoint` finds it; an id listed twice in a row is left to the slow
            // path (`endpoint` would find the same endpoint twice).
            if *id == e.endpoint.id {
                out.push(e);
                next += 1;
                if ids.get(next) == Some(id) {
                    break;
                }
            }
        }
        if next == ids.len() {
            return out;
        }
        ids.iter().filter_map(|id| self.endpoint(id)).collect()
    }

    /// The endpoints with registry indices `indices`, in that order; indices past
    /// the end are left out. Ascending indices (a
    /// [`crate::policy::interp::StrategyCall`]'s candidates) are found in one pass.
    pub fn endpoints_at<'r>(&'r self, indices: &[usize]) -> Vec<EndpointRef<'r>> {
        let mut out = Vec::with_capacity(indices.len());
        let mut all = self.endpoints().peekable();
        let mut sorted = true;
        for &i in indices {
            while all.next_if(|e| e.index < i).is_some() {}
            match all.peek() {
                Some(e) if e.index == i => out.push(*e),
                _ => {
                    sorted = false;
                    break;
                }
            }
        }
        if sorted {
            return out;
        }
        let all: Vec<EndpointRef<'r>> = self.endpoints().collect();
        indices
            .iter()
            .filter_map(|&i| all.get(i).copied())
            .collect()
    }

    /// The endpoint with id `id` (the first, if a config repeats an id).
    pub fn endpoint(&self, id: &str) -> Option<EndpointRef<'_>> {
        self.endpoints().find(|e| e.endpoint.id == id)
    }

    /// Logical model names, for did-you-mean.
    pub fn model_names(&self) -> impl Iterator<Item = &str> {
        self.models.iter().map(|m| m.name.as_str())
    }

    /// Endpoint ids, for did-you-mean.
    pub fn endpoint_ids(&self) -> impl Iterator<Item = &str> {
        self.endpoints().map(|e| e.endpoint.id.as_str())
    }

    /// The example registry the shipped policies assume (`examples/policies/README.md`):
    /// logical models `gpt-4o`, `gpt-4o-mini`, `gpt-4o-next`, `claude-sonnet`, `smollm`
    /// and `mock`.
    pub fn example() -> Registry {
        fn ep(
            id: &str,
            provider: &str,
            model: &str,
            priority: u32,
            inp: f64,
            out: f64,
        ) -> RegistryEndpoint {
            RegistryEndpoint {
                id: id.to_string(),
                provider: provider.to_string(),
                model: model.to_string(),
                priority,
                weight: 1,
                input_per_mtok: inp,
                output_per_mtok: out,
                context_window: None,
            }
        }
        let m = |name: &str, endpoints| RegistryModel {
            name: name.to_string(),
            endpoints,
        };
        let mut reg = Registry::new(vec![
            m(
                "gpt-4o",
                vec![
                    ep("openai/gpt-4o", "openai", "gpt-4o-2024-11-20", 1, 2.5, 10.0),
                    ep("azure/gpt-4o", "azure", "gpt-4o-prod", 2, 2.5, 10.0),
                ],
            ),
            m(
                "gpt-4o-mini",
                vec![ep(
                    "openai/gpt-4o-mini",
                    "openai",
                    "gpt-4o-mini",
                    1,
                    0.15,
                    0.6,
                )],
            ),
            m(
                "gpt-4o-next",
                vec![ep("openai/gpt-4.1", "openai", "gpt-4.1", 1, 2.0, 8.0)],
            ),
            m(
                "claude-sonnet",
                vec![
                    ep(
                        "anthropic/claude-sonnet",
                        "anthropic",
                        "claude-sonnet-4-20250514",
                        1,
                        3.0,
                        15.0,
                    ),
                    ep(
                        "bedrock/claude-sonnet",
                        "bedrock",
                        "anthropic.claude-sonnet-4",
                        2,
                        3.0,
                        15.0,
                    ),
                ],
            ),
            m(
                "smollm",
                vec![ep(
                    "local/smollm",
                    "local",
                    "smollm2-1.7b-instruct",
                    1,
                    0.0,
                    0.0,
                )],
            ),
            m(
                "mock",
                vec![ep("mock/mock-1", "mock", "mock-1", 1, 0.0, 0.0)],
            ),
        ]);
        // Context windows as in examples/policies/switchyard.yaml; the others unknown.
        for m in &mut reg.models {
            for e in &mut m.endpoints {
                e.context_window = match m.name.as_str() {
                    "gpt-4o" | "gpt-4o-mini" => Some(128_000),
                    "claude-sonnet" => Some(200_000),
                    "smollm" => Some(8_192),
                    _ => None,
                };
            }
        }
        reg
    }
}
