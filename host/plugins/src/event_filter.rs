//! `interface event-filter`: custom event filters (`receive.webhook.filter_component`).
//!
//! Each call runs in a fresh instance with no imports beyond WASI (no key-value store, no
//! network, no files). A guest fault is [`crate::PluginError::Guest`]; routing treats it as
//! "does not match" (filters fail closed).

use crate::bindings::event_filter::exports::agentmesh::plugin::event_filter::AllowList as WitAllowList;
use crate::component::{LoadedComponent, Pre, World};
use crate::error::Result;
use crate::sandbox::Limits;
use crate::state::{GuestPhase, call_time, guarded, instantiate};

/// The allow-list set of one tool parameter of a task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowList {
    /// The parameter's name.
    pub name: String,
    /// The values the task may act on.
    pub values: Vec<String>,
}

impl LoadedComponent {
    /// Whether this `event-filter-plugin` component passes `event` (a JSON object) for a task
    /// with the allow lists `parameters`.
    pub async fn event_filter_matches(
        &self,
        limits: &Limits,
        event: &str,
        parameters: &[AllowList],
    ) -> Result<bool> {
        let mut count = self.count_call();
        let Pre::EventFilter(pre) = self.pre() else {
            return Err(self.wrong_world(World::EventFilter));
        };
        let (_slot, mut store, deadline) = self.fresh_store(limits, None).await?;
        let plugin = instantiate(&mut store, limits, deadline, async |s| {
            pre.instantiate_async(s).await
        })
        .await?;
        let lists: Vec<WitAllowList> = parameters
            .iter()
            .map(|p| WitAllowList {
                name: p.name.clone(),
                values: p.values.clone(),
            })
            .collect();
        let guest = plugin.agentmesh_plugin_event_filter();
        let event = event.to_owned();
        let matched = guarded!(
            store,
            limits,
            GuestPhase::Call,
            deadline,
            guest.call_matches(&mut store, &event, &lists)
        );
        count.took = call_time(&store);
        count.ok = matched.is_ok();
        Ok(matched?)
    }
}
