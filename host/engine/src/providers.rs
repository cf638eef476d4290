//! LLM providers by model string: `scripted/<path>`, `openai/<model>`, or any provider named
//! in the host config's `models` (OpenAI-compatible).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentmesh_llm::{LlmProvider, OpenAiConfig, OpenAiProvider, ScriptedProvider};

use crate::EngineError;
use crate::plan::{Plan, resolve_env};

/// Providers, created on first use and kept.
#[derive(Default)]
pub struct Providers {
    cache: Mutex<HashMap<String, Arc<dyn LlmProvider>>>,
}

impl Providers {
    /// Forgets every provider: the next call of each model makes it anew from the plan in
    /// force (a reload changed a script, an endpoint or its key).
    pub fn clear(&self) {
        self.cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clear();
    }

    /// The provider of `model` (`<provider>/<name>`) and the model name to send it.
    pub fn get(
        &self,
        plan: &Plan,
        model: &str,
    ) -> Result<(Arc<dyn LlmProvider>, String), EngineError> {
        let (provider, name) = model.split_once('/').ok_or_else(|| {
            EngineError::Config(format!("model `{model}` is not `<provider>/<name>`"))
        })?;
        let mut cache = self
            .cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(p) = cache.get(model) {
            return Ok((Arc::clone(p), name.to_owned()));
        }
        let created: Arc<dyn LlmProvider> = if provider == "scripted" {
            let script = plan.scripts.get(name).cloned().ok_or_else(|| {
                EngineError::Config(format!("no model script `{name}` in the config dir"))
            })?;
            Arc::new(ScriptedProvider::new(script))
        } else {
            let endpoint = plan.host.models.get(provider);
            let base_url = match endpoint {
                Some(m) => m.base_url.clone(),
                None if provider == "openai" => "https://api.openai.com/v1".to_owned(),
                None => {
                    return Err(EngineError::Config(format!(
                        "model provider `{provider}` is not configured in the host config's `models`"
                    )));
                }
            };
            let env = |n: &str| std::env::var(n).ok();
            let api_key = match endpoint.and_then(|m| m.api_key.as_ref()) {
                Some(v) => resolve_env(v, &env)?.as_str().map(str::to_owned),
                None => None,
            };
            Arc::new(OpenAiProvider::new(OpenAiConfig {
                base_url,
                api_key,
                timeout: endpoint
                    .and_then(|m| m.timeout)
                    .map_or(Duration::from_secs(60), |d| d.0),
                max_retries: endpoint.and_then(|m| m.max_retries).unwrap_or(3),
            }))
        };
        cache.insert(model.to_owned(), Arc::clone(&created));
        Ok((created, name.to_owned()))
    }
}
