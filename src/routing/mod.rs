//! Routing (seed 001, "Routing Engine" and "Model Mapping"): from the logical model a
//! client asked for to an ordered plan of endpoints to try.
//!
//! This is the registry-order router the gateway uses when no policy decides: the
//! endpoints of the model, lowest `priority` first; among endpoints of equal priority
//! the first is drawn at random in proportion to `weight` (so traffic splits by weight
//! with no shared counter or lock on the request path), the rest follow by descending
//! weight. Endpoints of weight 0 are never used.

pub mod policy;

#[cfg(test)]
mod builtin_tests;

use std::collections::HashMap;
use std::sync::Arc;

use rand::Rng;

use crate::config::Config;
use crate::error::{ErrorKind, GatewayError};

/// One provider endpoint of a logical model, resolved for the request path.
#[derive(Debug, Clone)]
pub struct Endpoint {
    /// Unique endpoint name (config `name`, default `<provider>/<model>`).
    pub id: Arc<str>,
    /// The logical model it serves.
    pub model: Arc<str>,
    /// Index of its provider in the gateway's upstream list.
    pub provider: usize,
    /// Model id (or Azure deployment) sent upstream.
    pub upstream_model: String,
    /// Lower is preferred.
    pub priority: u32,
    /// Share among equal-priority endpoints.
    pub weight: u32,
}

/// A logical model and its endpoints.
#[derive(Debug, Clone)]
pub struct Model {
    /// The name clients send.
    pub name: Arc<str>,
    /// Indices into [`Registry::endpoints`], sorted by priority then weight (descending).
    pub endpoints: Vec<usize>,
}

/// The model registry in request-path form.
#[derive(Debug, Clone, Default)]
pub struct Registry {
    /// Every endpoint of every model.
    pub endpoints: Vec<Endpoint>,
    /// Logical models by name.
    pub models: HashMap<Arc<str>, Model>,
    /// Model names in config order (for `GET /v1/models`).
    pub model_order: Vec<Arc<str>>,
}

impl Registry {
    /// Builds the registry from config; `provider_index` maps a provider name to the
    /// index of its upstream.
    pub fn from_config(
        config: &Config,
        provider_index: impl Fn(&str) -> Option<usize>,
    ) -> Registry {
        let mut reg = Registry::default();
        for m in &config.models {
            let name: Arc<str> = Arc::from(m.name.as_str());
            let mut idx = Vec::new();
            for e in &m.endpoints {
                let Some(provider) = provider_index(&e.provider) else {
                    continue;
                };
                idx.push(reg.endpoints.len());
                reg.endpoints.push(Endpoint {
                    id: Arc::from(e.id.as_str()),
                    model: name.clone(),
                    provider,
                    upstream_model: e.model.clone(),
                    priority: e.priority,
                    weight: e.weight,
                });
            }
            let eps = &reg.endpoints;
            idx.sort_by_key(|&i| (eps[i].priority, std::cmp::Reverse(eps[i].weight)));
            reg.model_order.push(name.clone());
            reg.models.insert(
                name.clone(),
                Model {
                    name,
                    endpoints: idx,
                },
            );
        }
        reg
    }

    /// The model named `name`.
    ///
    /// # Errors
    /// 404 `model_not_found` naming the model.
    pub fn model(&self, name: &str) -> Result<&Model, GatewayError> {
        self.models.get(name).ok_or_else(|| {
            GatewayError::invalid_field(
                "model",
                format!("The model `{name}` does not exist or you do not have access to it."),
            )
            .with_kind(ErrorKind::NotFound)
            .with_code("model_not_found")
        })
    }

    /// The ordered endpoints to try for `model` (see the module docs).
    ///
    /// # Errors
    /// 503 when every endpoint has weight 0.
    pub fn plan(&self, model: &Model) -> Result<Vec<usize>, GatewayError> {
        let mut plan: Vec<usize> = model
            .endpoints
            .iter()
            .copied()
            .filter(|&i| self.endpoints[i].weight > 0)
            .collect();
        if plan.is_empty() {
            return Err(GatewayError::new(
                ErrorKind::NoEndpoint,
                format!("no endpoint is available for model `{}`", model.name),
            )
            .with_code("no_endpoint"));
        }
        let top = self.endpoints[plan[0]].priority;
        let group = plan
            .iter()
            .take_while(|&&i| self.endpoints[i].priority == top)
            .count();
        if group > 1 {
            let total: u64 = plan[..group]
                .iter()
                .map(|&i| u64::from(self.endpoints[i].weight))
                .sum();
            let mut draw = rand::rng().random_range(0..total);
            let pick = plan[..group]
                .iter()
                .position(|&i| {
                    let w = u64::from(self.endpoints[i].weight);
                    if draw < w {
                        true
                    } else {
                        draw -= w;
                        false
                    }
                })
                .unwrap_or(0);
            plan[..=pick].rotate_right(1);
        }
        Ok(plan)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn registry(yaml: &str) -> Registry {
        let c = crate::config::parse_str(yaml, None).unwrap();
        Registry::from_config(&c, |n| c.providers.iter().position(|p| p.name == n))
    }

    const YAML: &str = r#"
providers: { a: { kind: mock }, b: { kind: mock } }
models:
  m:
    endpoints:
      - { provider: a, model: x, priority: 2 }
      - { provider: a, model: heavy, priority: 1, weight: 3 }
      - { provider: b, model: light, priority: 1, weight: 1 }
      - { provider: b, model: off, priority: 1, weight: 0 }
"#;

    #[test]
    fn priority_first_then_weighted_draw() {
        let r = registry(YAML);
        let m = r.model("m").unwrap();
        let mut heavy_first = 0;
        for _ in 0..4000 {
            let plan = r.plan(m).unwrap();
            let names: Vec<&str> = plan
                .iter()
                .map(|&i| r.endpoints[i].upstream_model.as_str())
                .collect();
            assert_eq!(names.len(), 3, "weight 0 is excluded");
            assert_eq!(names[2], "x", "lower priority comes last");
            if names[0] == "heavy" {
                heavy_first += 1;
            }
        }
        // Expected 3000 of 4000; 6 sigma is about 165.
        assert!((2835..=3165).contains(&heavy_first), "{heavy_first}");
    }

    #[test]
    fn unknown_model_is_404() {
        let r = registry(YAML);
        let e = r.model("nope").unwrap_err();
        assert_eq!(e.status(), 404);
        assert_eq!(e.code, Some("model_not_found"));
    }
}
