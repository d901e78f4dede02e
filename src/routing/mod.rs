//! Routing (seed 001, "Routing Engine" and "Model Mapping"): the model registry in
//! request-path form (endpoints by index, models by name) and the policy set that
//! decides, per request, the ordered plan of endpoints to try ([`policy`]). The
//! ordering itself, including the built-in `priority` strategy used when no route
//! takes a request, lives in the policy interpreter and JIT.

pub mod features;
pub mod policy;
pub mod reads;

#[cfg(test)]
mod builtin_tests;
#[cfg(test)]
mod live_tests;

use std::collections::HashMap;
use std::sync::Arc;

use crate::config::Config;
use crate::error::{ErrorKind, GatewayError};

/// Longest model name echoed back in an error message, in bytes.
pub const MAX_ECHOED_NAME: usize = 256;

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
    /// The upstream model's context window in tokens (config `context_window`);
    /// `None` when the config does not say.
    pub context_window: Option<u64>,
    /// The most output tokens per request (config `max_output_tokens`); `None` when
    /// the config does not say.
    pub max_output_tokens: Option<u64>,
    /// Most attempts in flight at once (config `max_in_flight`); `None`: no limit
    /// and no queue ([`crate::sched`]).
    pub max_in_flight: Option<u32>,
}

impl Endpoint {
    /// Whether a request of `tokens` tokens (input plus the output it asks for) can
    /// fit the endpoint's context window: false only when the window is known and
    /// smaller than `tokens`; true when the window is unknown (the provider decides).
    pub fn fits(&self, tokens: u64) -> bool {
        self.context_window.is_none_or(|w| tokens <= w)
    }

    /// Whether a request of `input` tokens asking for up to `output` output tokens
    /// (`None`: no cap asked) can be served here: `output` within
    /// `max_output_tokens` and `input + output` within `context_window`, each
    /// only when known.
    pub fn fits_request(&self, input: u64, output: Option<u64>) -> bool {
        let out = output.unwrap_or(0);
        self.max_output_tokens.is_none_or(|m| out <= m) && self.fits(input.saturating_add(out))
    }

    /// Whether [`Endpoint::fits_request`] needs the input token count at all.
    pub fn has_context_window(&self) -> bool {
        self.context_window.is_some()
    }
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
    /// Whether some endpoint has a `context_window` or `max_output_tokens`: without
    /// one, no plan needs checking against them ([`crate::gateway`]'s fit phase
    /// skips its scans).
    pub has_limits: bool,
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
                    context_window: e.context_window,
                    max_output_tokens: e.max_output_tokens,
                    max_in_flight: e.max_in_flight,
                });
                reg.has_limits |= e.context_window.is_some() || e.max_output_tokens.is_some();
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

    /// Whether the endpoint at `index` can take a request of `tokens` tokens
    /// ([`Endpoint::fits`]); true for an index outside the registry (nothing is known
    /// about it, so nothing rules it out).
    pub fn fits(&self, index: usize, tokens: u64) -> bool {
        self.endpoints.get(index).is_none_or(|e| e.fits(tokens))
    }

    /// The model named `name`.
    ///
    /// # Errors
    /// 404 `model_not_found` naming the model (cut to [`MAX_ECHOED_NAME`] bytes: a
    /// 1 MB name must not make a 1 MB answer).
    pub fn model(&self, name: &str) -> Result<&Model, GatewayError> {
        self.models.get(name).ok_or_else(|| model_not_found(name))
    }
}

/// 404 `model_not_found` naming the model `name` (cut to [`MAX_ECHOED_NAME`] bytes),
/// `param: "model"`, in OpenAI's words: the model "does not exist or you do not have
/// access to it" (so it also answers for a model a key may not see).
pub fn model_not_found(name: &str) -> GatewayError {
    let shown = crate::error::bounded(name, MAX_ECHOED_NAME);
    GatewayError::invalid_field(
        "model",
        format!("The model `{shown}` does not exist or you do not have access to it."),
    )
    .with_kind(ErrorKind::NotFound)
    .with_code(crate::error::Code::ModelNotFound)
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
    fn fits_is_false_only_for_a_known_window_that_is_too_small() {
        let r = registry(
            "providers: { a: { kind: mock } }\nmodels: { m: { endpoints: [ { provider: a, model: x, context_window: 1000 }, { provider: a, model: y } ] } }\n",
        );
        assert_eq!(r.endpoints[0].context_window, Some(1000));
        assert!(r.fits(0, 999) && r.fits(0, 1000) && !r.fits(0, 1001));
        assert!(
            r.fits(1, u64::MAX),
            "an unknown window never rules an endpoint out"
        );
        assert!(r.fits(7, 5), "an unknown endpoint is not ruled out");
    }

    #[test]
    fn unknown_model_is_404() {
        let r = registry(YAML);
        let e = r.model("nope").unwrap_err();
        assert_eq!(e.status(), 404);
        assert_eq!(e.code, Some(crate::error::Code::ModelNotFound));
    }
}
