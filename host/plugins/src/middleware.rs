//! `interface middleware`: custom middleware steps (`wasm: {component, config}`).
//!
//! Each call runs in a fresh instance; the component's key-value scope is (component, task),
//! as for tools. A guest fault is [`PluginError::Guest`]: the step failed, and the step's
//! `on_fail` decides what happens to the call.

use crate::bindings::middleware::exports::agentmesh::plugin::middleware::Verdict as WitVerdict;
use crate::component::{LoadedComponent, Pre, World};
use crate::error::{Fault, PluginError, Result};
use crate::kv::KvScope;
use crate::sandbox::Limits;
use crate::state::{GuestPhase, call_time, guarded, instantiate};

/// What a middleware step decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MiddlewareVerdict {
    /// Let the call (or event) through unchanged.
    Pass,
    /// Refuse it, with the reason.
    Deny(String),
    /// Let it through with this JSON in place of the input (`before`) or the output (`after`).
    Replace(String),
}

/// The arguments of a middleware call (JSON documents, as in `interface middleware`).
#[derive(Debug, Clone, Copy)]
pub struct MiddlewareCall<'a> {
    /// The task the call belongs to (the key-value scope).
    pub task_id: &'a str,
    /// The step's `config` block.
    pub config: &'a str,
    /// The task's context, as CEL sees it.
    pub context: &'a str,
    /// The call's resolved parameters (for an event: `{"message": ...}`).
    pub input: &'a str,
    /// The event, in event activations.
    pub event: Option<&'a str>,
}

impl LoadedComponent {
    /// Runs the `before` step of this `middleware-plugin` component.
    pub async fn middleware_before(
        &self,
        limits: &Limits,
        call: &MiddlewareCall<'_>,
    ) -> Result<MiddlewareVerdict> {
        self.middleware(limits, call, None).await
    }

    /// Runs the `after` step of this `middleware-plugin` component on `output`.
    pub async fn middleware_after(
        &self,
        limits: &Limits,
        call: &MiddlewareCall<'_>,
        output: &str,
    ) -> Result<MiddlewareVerdict> {
        self.middleware(limits, call, Some(output)).await
    }

    async fn middleware(
        &self,
        limits: &Limits,
        call: &MiddlewareCall<'_>,
        output: Option<&str>,
    ) -> Result<MiddlewareVerdict> {
        let mut count = self.count_call();
        let Pre::Middleware(pre) = self.pre() else {
            return Err(self.wrong_world(World::Middleware));
        };
        let scope = KvScope::new(self.name(), call.task_id);
        let (_slot, mut store, deadline) = self.fresh_store(limits, Some(scope)).await?;
        let plugin = instantiate(&mut store, limits, deadline, async |s| {
            pre.instantiate_async(s).await
        })
        .await?;
        let guest = plugin.agentmesh_plugin_middleware();
        // The bindings take `&String` (WIT's `json` is an alias of `string`).
        let (config, context, input) = (
            call.config.to_owned(),
            call.context.to_owned(),
            call.input.to_owned(),
        );
        let event = call.event.map(str::to_owned);
        let output = output.map(str::to_owned);
        let verdict = match output {
            None => guarded!(
                store,
                limits,
                GuestPhase::Call,
                deadline,
                guest.call_before(&mut store, &config, &context, &input, event.as_ref())
            ),
            Some(output) => guarded!(
                store,
                limits,
                GuestPhase::Call,
                deadline,
                guest.call_after(
                    &mut store,
                    &config,
                    &context,
                    &input,
                    &output,
                    event.as_ref()
                )
            ),
        };
        count.took = call_time(&store);
        let verdict = verdict?;
        let size = match &verdict {
            WitVerdict::Pass => 0,
            WitVerdict::Deny(text) | WitVerdict::Replace(text) => text.len(),
        };
        if size > limits.max_output {
            return Err(PluginError::Guest(Fault::OutputTooLarge {
                component: self.name().to_owned(),
                size,
                limit: limits.max_output,
            }));
        }
        count.ok = true;
        Ok(match verdict {
            WitVerdict::Pass => MiddlewareVerdict::Pass,
            WitVerdict::Deny(reason) => MiddlewareVerdict::Deny(reason),
            WitVerdict::Replace(json) => MiddlewareVerdict::Replace(json),
        })
    }
}
