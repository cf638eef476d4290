//! MCP resource updates as tool events: for each tool whose events are received by MCP
//! subscription (`receive.subscription.resources`), one session of the tool's server (its
//! shared `mcp` block) held for as long as the host serves, subscribed (`resources/subscribe`)
//! to every resource its events name. Each `notifications/resources/updated` becomes a
//! [`ResourceUpdate`]; the caller routes it as it routes a webhook's events (`agentmesh-routing`)
//! and fires the triggers of the `mcp-event` sources that name the event (`agentmesh-triggers`).
//!
//! A session that cannot open, or that ends (the server exits, the connection drops), is opened
//! again after a pause that doubles from 1 s up to 60 s; updates sent meanwhile are missed, as
//! MCP keeps none. A reload that changes a tool opens its session anew.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use agentmesh_store::now_ms;
use rmcp::model::SubscribeRequestParams;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep, timeout};

use crate::Engine;
use crate::plan::{ToolPlan, Via};
use crate::sources::SourceKind;

/// The first pause before a session is opened again.
const FIRST_RETRY: Duration = Duration::from_secs(1);

/// The longest pause before a session is opened again.
const LAST_RETRY: Duration = Duration::from_secs(60);

/// How often the plan is looked at for tools added, changed or removed by a reload.
const PLAN_CHECK: Duration = Duration::from_millis(500);

/// How many updates of one session wait to be routed before more are dropped.
const UPDATES_BUFFERED: usize = 1024;

/// A resource of a tool's MCP server was updated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceUpdate {
    /// The tool, `namespace/name`.
    pub tool: String,
    /// Its events that subscribe to the resource.
    pub events: Vec<String>,
    /// The resource's URI: the event's payload is `{"uri": uri}`.
    pub uri: String,
}

impl Engine {
    /// Holds a session with the MCP server of every tool whose events are received by MCP
    /// subscription, following reloads, and sends each resource update to `updates`. Runs
    /// until `updates` is closed; dropping the future closes every session.
    pub async fn watch_mcp_resources(&self, updates: mpsc::Sender<ResourceUpdate>) {
        let mut running = Watches::default();
        loop {
            let plan = self.plan();
            let wanted: HashMap<&String, &Arc<ToolPlan>> = plan
                .tools
                .iter()
                .filter(|(_, t)| t.mcp_events.is_some())
                .collect();
            running.0.retain(|id, (tool, task)| {
                let keep = wanted.get(id).is_some_and(|t| Arc::ptr_eq(t, tool));
                if !keep {
                    task.abort();
                    self.event_sources().stopped(SourceKind::Mcp, id);
                }
                keep
            });
            for (id, tool) in wanted {
                if !running.0.contains_key(id) {
                    let watch = watch_tool(self.clone(), Arc::clone(tool), updates.clone());
                    running
                        .0
                        .insert(id.clone(), (Arc::clone(tool), tokio::spawn(watch)));
                }
            }
            tokio::select! {
                () = updates.closed() => return,
                () = sleep(PLAN_CHECK) => {}
            }
        }
    }
}

/// The running watches by tool id, with the tool they watch; dropped, it stops them all.
#[derive(Default)]
struct Watches(HashMap<String, (Arc<ToolPlan>, JoinHandle<()>)>);

impl Drop for Watches {
    fn drop(&mut self) {
        for (_, task) in self.0.values() {
            task.abort();
        }
    }
}

/// Keeps `tool`'s session open, opening it again after a pause whenever it fails or ends.
async fn watch_tool(engine: Engine, tool: Arc<ToolPlan>, updates: mpsc::Sender<ResourceUpdate>) {
    let id = tool.id();
    let sources = engine.event_sources();
    sources.started(SourceKind::Mcp, &id);
    let mut pause = FIRST_RETRY;
    loop {
        let opened = Instant::now();
        match watch_session(&engine, &tool, &updates).await {
            Ok(()) if updates.is_closed() => return,
            Ok(()) => {
                sources.failed(SourceKind::Mcp, &id, now_ms(), "the session ended");
                tracing::warn!(tool.name = %id, "the MCP session of the tool's events ended; it is opened again in {pause:?}")
            }
            Err(why) => {
                sources.failed(SourceKind::Mcp, &id, now_ms(), &why);
                tracing::warn!(tool.name = %id, "MCP resource updates of the tool's events: {why}; trying again in {pause:?}")
            }
        }
        if opened.elapsed() > LAST_RETRY {
            pause = FIRST_RETRY;
        }
        sleep(pause).await;
        pause = (pause * 2).min(LAST_RETRY);
    }
}

/// One session of `tool`'s server: opened, subscribed to every resource its events name, then
/// forwarding updates until it ends. `Err` says why it did not open or subscribe.
async fn watch_session(
    engine: &Engine,
    tool: &ToolPlan,
    updates: &mpsc::Sender<ResourceUpdate>,
) -> Result<(), String> {
    let Some(plan) = &tool.mcp_events else {
        return Ok(());
    };
    let watched = resources(tool)?;
    let (tx, mut rx) = mpsc::channel(UPDATES_BUFFERED);
    let session = engine.inner.mcp.open_for_events(tool, plan, tx).await?;
    let offered = session
        .client
        .peer_info()
        .and_then(|info| info.capabilities.resources.as_ref()?.subscribe)
        .unwrap_or(false);
    if !offered {
        return Err("the MCP server does not offer resource subscriptions (`resources.subscribe` is not in its capabilities)".into());
    }
    for uri in watched.keys() {
        // `resources/subscribe` is what the protocol versions this host speaks have (a later
        // one replaces it with `subscriptions/listen`).
        #[allow(deprecated)]
        let asked = session
            .client
            .peer()
            .subscribe(SubscribeRequestParams::new(uri.clone()));
        match timeout(plan.timeout, asked).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => return Err(format!("`resources/subscribe` to `{uri}` failed: {e}")),
            Err(_) => {
                return Err(format!(
                    "`resources/subscribe` to `{uri}` had no answer within {:?} (the timeout)",
                    plan.timeout
                ));
            }
        }
    }
    let id = tool.id();
    engine
        .event_sources()
        .worked(SourceKind::Mcp, &id, now_ms());
    tracing::info!(tool.name = %id, resources = watched.len(), "subscribed to the MCP server's resource updates");
    let crate::mcp::Session {
        client, process, ..
    } = session;
    let ended = client.waiting();
    tokio::pin!(ended);
    loop {
        tokio::select! {
            _ = &mut ended => break,
            uri = rx.recv() => {
                let Some(uri) = uri else { break };
                let Some(events) = watched.get(&uri) else {
                    tracing::debug!(tool.name = %id, resource = %uri, "an update of a resource not subscribed to: ignored");
                    continue;
                };
                let update = ResourceUpdate { tool: id.clone(), events: events.clone(), uri };
                if updates.send(update).await.is_err() {
                    break;
                }
            }
        }
    }
    if let Some(process) = process {
        process.stop().await;
    }
    Ok(())
}

/// The resources `tool`'s events subscribe to, rendered with its settings, and the events
/// that name each.
fn resources(tool: &ToolPlan) -> Result<HashMap<String, Vec<String>>, String> {
    let settings = tool.settings_activation();
    let mut out: HashMap<String, Vec<String>> = HashMap::new();
    for event in &tool.events {
        let Via::McpResources(uris) = &event.via else {
            continue;
        };
        for uri in uris {
            let uri = uri.render(&settings).map_err(|e| {
                format!(
                    "a resource of event `{}` cannot be rendered: {}",
                    event.name, e.message
                )
            })?;
            out.entry(uri).or_default().push(event.name.clone());
        }
    }
    Ok(out)
}
