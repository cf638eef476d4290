//! Tool events arriving by webhook (CONTRACT §3, §5): the signature of each event on the raw
//! bytes, delivery-id dedupe, routing through the subscription index, the event filter
//! component, capability middleware with `event` in scope, the event's message, and one
//! durable queue entry per matching task with the trigger envelope.

use std::collections::HashMap;
use std::time::SystemTime;

use agentmesh_model::event::ContentPart;
use agentmesh_plugins::{AllowList, Limits};
use agentmesh_routing::{Event as RoutedEvent, Headers, Inbound, signature};
use agentmesh_store::now_rfc3339;
use serde_json::{Value, json};

use crate::door::{Accepted, Input, Origin, Run};
use crate::plan::{AgentPlan, EventPlan, Secret, Target, ToolPlan};
use crate::steps::{self, Phase, Replay, StepVars, Verdict};
use crate::task::Status;
use crate::{Engine, EngineError};

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

/// Why a delivery was refused.
#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    /// No tool `ns/name`, or it declares no webhook event.
    #[error("no tool `{0}` with webhook events")]
    UnknownTool(String),
    /// No trigger source of this name in the host config.
    #[error("no trigger source `{0}` in the host config")]
    UnknownSource(String),
    /// No event of the tool accepts the signature.
    #[error("{0}")]
    Unauthorized(String),
    /// The body is not JSON.
    #[error("the body is not JSON: {0}")]
    NotJson(String),
    /// The host failed.
    #[error(transparent)]
    Engine(#[from] EngineError),
}

impl Engine {
    /// Delivers a webhook for tool `tool_id` (`namespace/name`): see the module docs. A 2xx
    /// may be answered once this returns `Ok`: what was queued is on disk.
    pub async fn deliver_tool_webhook(
        &self,
        tool_id: &str,
        delivery: Inbound<'_>,
    ) -> Result<WebhookOutcome, WebhookError> {
        let Inbound { headers, body } = delivery;
        let plan = self.plan();
        let tool = plan
            .tools
            .get(tool_id)
            .filter(|t| !t.events.is_empty())
            .ok_or_else(|| WebhookError::UnknownTool(tool_id.to_owned()))?;
        let events = verified_events(tool, headers, body)?;
        let payload: Value =
            serde_json::from_slice(body).map_err(|e| WebhookError::NotJson(e.to_string()))?;
        let Some(arrival) = self.arrive(headers).await? else {
            return Ok(WebhookOutcome::Duplicate);
        };
        let fired_at = arrival.fired_at();
        let mut inputs: Vec<Input> = Vec::new();
        for event in events {
            let event_json = arrival.event(&event.name, &payload);
            let routed = RoutedEvent::new(event_json.clone());
            let tasks = self
                .routes()
                .route(&tool.id(), &event.name, &routed, fired_at);
            for task in tasks {
                let Some(text) = self
                    .admit(tool, event, &task, &event_json)
                    .await
                    .unwrap_or_else(|e| {
                        tracing::warn!(task.id = %task, tool.name = %tool.id(), "event dropped: {e}");
                        None
                    })
                else {
                    continue;
                };
                inputs.push(Input {
                    task,
                    io: json!({"message": [ContentPart::text(text)]}),
                    origin: Origin::Webhook { auth_subject: None },
                });
            }
        }
        if inputs.is_empty() {
            tracing::info!(tool.name = %tool_id, delivery.id = ?agentmesh_routing::delivery_id(headers), "webhook matched no subscription");
            return Ok(WebhookOutcome::Unmatched);
        }
        match arrival.accept(self, inputs, Run::Background).await? {
            Accepted::Duplicate => Ok(WebhookOutcome::Duplicate),
            Accepted::Queued { tasks, .. } => Ok(WebhookOutcome::Accepted(tasks)),
        }
    }

    /// Whether task `task` takes `event`: the filter component, then the capability's
    /// `before` steps with `event` in scope, the message, and its `after` transforms. Returns
    /// the message text to queue, or `None` when the event is dropped for this task.
    async fn admit(
        &self,
        tool: &ToolPlan,
        event: &EventPlan,
        task: &str,
        event_json: &Value,
    ) -> crate::Result<Option<String>> {
        let mut record = self.task(task)?;
        if record.status() == Status::Terminated || record.interrupted {
            return Ok(None);
        }
        let agent = self.agent(&record.agent)?;
        let tool_id = tool.id();
        let Some(cap) = agent
            .capabilities
            .iter()
            .find(|c| matches!(&c.target, Target::Tool(t) if t.id() == tool_id))
        else {
            return Ok(None);
        };
        if let Some(path) = &event.filter_component
            && !self
                .filter_component(path, event_json, record.allow_lists.get(&tool_id))
                .await
        {
            return Ok(None);
        }
        let message = message_text(&agent, event, event_json, &record);
        let mut vars = StepVars {
            input: json!({"message": message}),
            output: None,
            event: event_json.clone(),
            guardrail: false,
            call_id: None,
            replay: Replay::default(),
        };
        // Middleware decides on a copy: routing changes nothing in the task.
        let verdict = steps::run(
            self,
            &agent,
            &mut record,
            &cap.before,
            Some(&event.name),
            Phase::Before,
            &mut vars,
        )
        .await?;
        if let Verdict::Block(reason) | Verdict::Lock(reason) = verdict {
            tracing::debug!(task.id = %task, event = %event.name, "event refused by middleware: {reason}");
            return Ok(None);
        }
        vars.output = Some(vars.input.clone());
        let verdict = steps::run(
            self,
            &agent,
            &mut record,
            &cap.after,
            Some(&event.name),
            Phase::After,
            &mut vars,
        )
        .await?;
        if let Verdict::Block(reason) | Verdict::Lock(reason) = verdict {
            tracing::debug!(task.id = %task, event = %event.name, "event refused by middleware: {reason}");
            return Ok(None);
        }
        // An `after` transform yielding a string replaces the text; a map replaces the input.
        Ok(Some(match vars.output {
            Some(Value::String(text)) => text,
            Some(Value::Object(m)) => match m.get("message") {
                Some(Value::String(text)) => text.clone(),
                _ => Value::Object(m).to_string(),
            },
            _ => message,
        }))
    }

    /// Runs an event-filter component; a failure is a refusal (fail closed), logged.
    async fn filter_component(
        &self,
        path: &std::path::Path,
        event_json: &Value,
        lists: Option<&agentmesh_routing::AllowLists>,
    ) -> bool {
        let plugins = match self.plugins() {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!("event filter component not run: {e}");
                return false;
            }
        };
        let component = match plugins.component(&path.display().to_string(), path) {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!("event filter component `{}`: {e}", path.display());
                return false;
            }
        };
        let parameters: Vec<AllowList> = lists
            .into_iter()
            .flatten()
            .map(|(name, values)| AllowList {
                name: name.clone(),
                values: values.iter().cloned().collect(),
            })
            .collect();
        match component
            .event_filter_matches(&Limits::default(), &event_json.to_string(), &parameters)
            .await
        {
            Ok(pass) => pass,
            Err(e) => {
                tracing::warn!("event filter component `{}` failed: {e}", path.display());
                false
            }
        }
    }
}

/// The events of `tool` whose signature check `body` passes; when none does, the first
/// failure says why.
fn verified_events<'t>(
    tool: &'t ToolPlan,
    headers: &Headers,
    body: &[u8],
) -> Result<Vec<&'t EventPlan>, WebhookError> {
    let now = SystemTime::now();
    let mut passed = Vec::new();
    let mut first_error = None;
    // Several events often share one secret: check each distinct secret once.
    let mut checked: HashMap<&str, bool> = HashMap::new();
    for event in &tool.events {
        let ok = match &event.secret {
            Secret::None => true,
            Secret::Key(key) => *checked.entry(key.as_str()).or_insert_with(|| {
                match signature::verify(key, headers, body, now) {
                    Ok(_) => true,
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
    Ok(passed)
}

/// The event's message (`{event.payload.*}`), rendered; a hole that cannot be rendered
/// leaves the template's text and the error, so the agent still hears of the event.
fn message_text(
    agent: &AgentPlan,
    event: &EventPlan,
    event_json: &Value,
    record: &crate::TaskRecord,
) -> String {
    let mut needs = agentmesh_expr::Needs::default();
    needs.add_template(&event.message, &["context", "c"]);
    let mut act = agentmesh_expr::Activation::new();
    act.set("event", event_json.clone())
        .set("now", json!(now_rfc3339()));
    // Most messages read only the event: the context is built only for what they read.
    if !needs.is_empty() {
        act.set_aliased("context", "c", record.context_for(agent, &needs));
    }
    event.message.render(&act).unwrap_or_else(|e| {
        format!(
            "{} (the message could not be rendered: {e})",
            event.message.source()
        )
    })
}
