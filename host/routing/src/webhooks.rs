//! Tool events arriving by webhook (CONTRACT §3, §5), from the delivery to the door: the
//! signature of each event on the raw bytes, then the engine's door ([`Engine::arrive`]):
//! the delivery id checked and held (dedupe) while `admit` routes the events and each matched
//! task admits them, then one durable queue entry per admitted task with the trigger
//! envelope.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::SystemTime;

use agentmesh_engine::plan::{EventPlan, Secret, ToolPlan, Via};
use agentmesh_engine::{
    Arrival, Delivered, Engine, EngineError, Entrance, Origin, ResourceUpdate, Through,
    WebhookError,
};
use agentmesh_expr::Bound;
use agentmesh_store::now_ms;
use serde_json::json;

use crate::admit;
use crate::routes::SharedRoutes;
use crate::{Headers, Inbound, Proof, delivery_id, signature};

/// The origin of a webhook's tool events (a tool webhook names no `auth_subject`).
pub(crate) const WEBHOOK: Origin = Origin::Webhook { auth_subject: None };

/// What became of a delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WebhookOutcome {
    /// Queued (durably) on these tasks.
    Accepted(Vec<String>),
    /// A repeat of a delivery id seen within the dedupe window: nothing was queued.
    Duplicate,
    /// No subscription matched; nothing was stored.
    Unmatched,
}

/// Inbound tool events for one engine: the routing index, kept in step with the engine's
/// task records, and the pipeline from a delivery to the door.
#[derive(Clone)]
pub struct EventRouter {
    pub(crate) engine: Engine,
    pub(crate) routes: Arc<SharedRoutes>,
}

impl EventRouter {
    /// A router for `engine`, its index kept in step with the engine's task records from now
    /// on (see [`Engine::watch`]: create it before [`Engine::recover`]).
    pub fn new(engine: Engine) -> Result<EventRouter, EngineError> {
        let routes = Arc::new(SharedRoutes::default());
        engine.watch(Arc::clone(&routes) as Arc<dyn agentmesh_engine::Watcher>)?;
        Ok(EventRouter { engine, routes })
    }

    /// The engine it routes to.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Delivers a webhook for tool `tool_id` (`namespace/name`): see the module docs. A 2xx
    /// may be answered once this returns `Ok`: what was queued is on disk.
    pub async fn deliver_tool_webhook(
        &self,
        tool_id: &str,
        delivery: Inbound<'_>,
    ) -> Result<WebhookOutcome, WebhookError> {
        let Inbound { headers, body } = delivery;
        let plan = self.engine.plan();
        let tool = plan
            .tools
            .get(tool_id)
            .filter(|t| t.events.iter().any(|e| matches!(e.via, Via::Webhook)))
            .ok_or_else(|| WebhookError::UnknownTool(tool_id.to_owned()))?;
        let (events, proof) = verified_events(tool, headers, body)?;
        let payload = serde_json::from_slice(body)
            .map(Bound::new)
            .map_err(|e| WebhookError::NotJson(e.to_string()))?;
        let routes = &*self.routes;
        let admit = async |arrival: &Arrival<'_>| {
            let admitted = admit::tool_events(
                &self.engine,
                routes,
                (tool, &events),
                (&payload, &WEBHOOK),
                arrival,
                |_| true,
            );
            Ok::<_, WebhookError>(admitted.await?)
        };
        let delivered = Delivered::new(headers, proof, Entrance::Tool(tool_id));
        match self.engine.arrive(delivered, admit).await? {
            Through::Duplicate => Ok(WebhookOutcome::Duplicate),
            Through::Queued { tasks, .. } => Ok(WebhookOutcome::Accepted(tasks)),
            Through::Nothing(()) => {
                tracing::info!(tool.name = %tool_id, delivery.id = ?delivery_id(headers, proof), "webhook matched no subscription");
                Ok(WebhookOutcome::Unmatched)
            }
        }
    }

    /// Routes a resource update of an MCP server to the tasks subscribed to the events that
    /// name the resource, as a webhook's events are routed (filters, allow lists, middleware),
    /// with payload `{"uri"}` and the trigger source `mcp-event`. Returns the tasks it was
    /// queued on (on disk).
    pub async fn deliver_mcp_update(
        &self,
        update: &ResourceUpdate,
    ) -> Result<Vec<String>, EngineError> {
        let pick = |e: &EventPlan| {
            matches!(e.via, Via::McpResources(_)) && update.events.contains(&e.name)
        };
        let payload = Bound::new(json!({"uri": update.uri}));
        // No delivery id: an update is never a repeat of another.
        self.deliver_events(
            (&update.tool, pick),
            (&payload, &Origin::McpEvent),
            &Headers::default(),
            |_| true,
        )
        .await
    }

    /// Routes `payload` as the events of tool `tool_id` that `pick` keeps (from `origin`) to
    /// the subscribed tasks that `keep` keeps, through the door with `headers` (a delivery id
    /// among them, which the host made, makes it idempotent; it is remembered apart from the
    /// tool's webhook deliveries, [`Entrance::Poll`]). Returns the tasks it was queued on (on
    /// disk).
    pub(crate) async fn deliver_events(
        &self,
        (tool_id, pick): (&str, impl Fn(&EventPlan) -> bool),
        (payload, origin): (&Bound, &Origin),
        headers: &Headers,
        keep: impl Fn(&str) -> bool,
    ) -> Result<Vec<String>, EngineError> {
        let plan = self.engine.plan();
        let Some(tool) = plan.tools.get(tool_id) else {
            return Ok(Vec::new());
        };
        let events: Vec<&EventPlan> = tool.events.iter().filter(|e| pick(e)).collect();
        let routes = &*self.routes;
        let admit = async |arrival: &Arrival<'_>| {
            admit::tool_events(
                &self.engine,
                routes,
                (tool, &events),
                (payload, origin),
                arrival,
                keep,
            )
            .await
        };
        let delivered = Delivered::new(headers, Proof::Unsigned, Entrance::Poll(tool_id));
        match self.engine.arrive(delivered, admit).await? {
            Through::Queued { tasks, .. } => Ok(tasks),
            Through::Duplicate | Through::Nothing(()) => Ok(Vec::new()),
        }
    }

    /// Removes the subscriptions that have expired by now (see
    /// [`Engine::expire_subscriptions`]). Returns how many tasks lost subscriptions.
    pub async fn expire_subscriptions(&self) -> Result<usize, EngineError> {
        let expired = self.routes.read().expired(now_ms());
        if expired.is_empty() {
            return Ok(0);
        }
        self.engine.expire_subscriptions(&expired).await
    }
}

/// The events of `tool` whose signature check `body` passes, and what proved the delivery
/// (the scheme of a signature that passed; [`Proof::Unsigned`] when only events without a
/// secret took it); when none does, the first failure says why.
fn verified_events<'t>(
    tool: &'t ToolPlan,
    headers: &Headers,
    body: &[u8],
) -> Result<(Vec<&'t EventPlan>, Proof), WebhookError> {
    let now = SystemTime::now();
    let mut passed = Vec::new();
    let mut proof = Proof::Unsigned;
    let mut first_error = None;
    // Several events often share one secret: check each distinct secret once.
    let mut checked: HashMap<&str, bool> = HashMap::new();
    // Events received by MCP subscription are not POSTed: a delivery never stands for one.
    for event in tool.events.iter().filter(|e| matches!(e.via, Via::Webhook)) {
        let ok = match &event.secret {
            Secret::None => true,
            Secret::Key(key) => *checked.entry(key.as_str()).or_insert_with(|| {
                match signature::verify(key, headers, body, now) {
                    Ok(scheme) => {
                        proof = scheme.into();
                        true
                    }
                    Err(e) => {
                        first_error.get_or_insert_with(|| e.to_string());
                        false
                    }
                }
            }),
            Secret::Unavailable(why) => {
                first_error.get_or_insert_with(|| {
                    format!("event `{}` cannot verify signatures: {why}", event.name)
                });
                false
            }
        };
        if ok {
            passed.push(event);
        }
    }
    if passed.is_empty() {
        return Err(WebhookError::Unauthorized(
            first_error.unwrap_or_else(|| "no event accepts this delivery".into()),
        ));
    }
    Ok((passed, proof))
}
