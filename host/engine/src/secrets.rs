//! The secrets of a plan (CONTRACT §1), collected once when it is built, and the scrubbing of
//! events by them as they are logged: every event passes [`Engine::log`](crate::Engine), so
//! the event log, the API and SSE that serve it, and the conversation the LLM is sent (read
//! from the log) never hold a secret.

use std::collections::HashMap;
use std::sync::Arc;

use agentmesh_manifest::model::common::EnvValue;
use agentmesh_manifest::model::host::HostConfig;
use agentmesh_model::event::{
    ContentPart, EventKind, MessageMetadata, ToolCall, ToolSchema, TriggerEnvelope,
};
use agentmesh_secrets::Secrets;
use serde_json::Value;

use crate::EngineError;
use crate::plan::ToolPlan;

/// The secrets of a configuration: every value the host config reads from `{env: …}` (at any
/// depth, so API and source tokens too), model API keys and source secrets given literally,
/// every tool setting whose schema says `format: password` (configured or default), and the
/// signing key of every tool event.
pub(crate) fn collect(
    host: &HostConfig,
    tools: &HashMap<String, Arc<ToolPlan>>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Secrets, EngineError> {
    let mut values = Vec::new();
    if let Ok(config) = serde_json::to_value(host) {
        env_values(&config, env, &mut values);
    }
    // The scalars the loader replaced by their variables' values.
    values.extend(host.env_reads.iter().filter_map(|name| env(name)));
    let literal = |v: Option<&EnvValue>| match v {
        Some(EnvValue::Literal(Value::String(s))) => Some(s.clone()),
        _ => None,
    };
    values.extend(
        host.models
            .values()
            .filter_map(|m| literal(m.api_key.as_ref())),
    );
    values.extend(
        host.sources
            .values()
            .filter_map(|s| literal(s.secret.as_ref())),
    );
    for tool in tools.values() {
        // A webhook's signing key is a secret whatever the setting it comes from says.
        values.extend(tool.events.iter().filter_map(|e| match &e.secret {
            crate::plan::Secret::Key(key) => Some(key.clone()),
            crate::plan::Secret::None | crate::plan::Secret::Unavailable(_) => None,
        }));
        let Some(schema) = &tool.manifest.settings else {
            continue;
        };
        for (name, property) in &schema.properties {
            if property.format.as_deref() == Some("password")
                && let Some(Value::String(value)) = tool.settings.get(name)
            {
                values.push(value.clone());
            }
        }
    }
    Secrets::new(values).map_err(|e| EngineError::Config(e.to_string()))
}

/// The values of every `env: NAME` in the host config: the `{env: NAME}` form of a scalar and
/// the `env` field of an API or source token both name a variable holding a secret.
fn env_values(config: &Value, env: &dyn Fn(&str) -> Option<String>, out: &mut Vec<String>) {
    match config {
        Value::Object(map) => {
            if let Some(Value::String(name)) = map.get("env")
                && let Some(value) = env(name)
            {
                out.push(value);
            }
            map.values().for_each(|v| env_values(v, env, out));
        }
        Value::Array(items) => items.iter().for_each(|v| env_values(v, env, out)),
        _ => {}
    }
}

/// Replaces every secret in the text of an event. Every field is named (no `..`), so a field
/// added to an event kind must be considered here before the engine compiles.
pub(crate) fn scrub_event(secrets: &Secrets, kind: &mut EventKind) {
    let text = |s: &mut String| secrets.scrub_string(s);
    let json = |v: &mut Value| secrets.scrub_json(v);
    match kind {
        EventKind::SystemPromptEvent { prompt, tools } => {
            text(prompt);
            for ToolSchema {
                name,
                description,
                parameters,
            } in tools
            {
                text(name);
                text(description);
                json(parameters);
            }
        }
        EventKind::MessageEvent { content, metadata } => {
            for ContentPart {
                mime_type,
                text: part,
                uri,
            } in content
            {
                text(mime_type);
                part.iter_mut().chain(uri.iter_mut()).for_each(text);
            }
            if let Some(MessageMetadata {
                queued_at: _,
                trigger,
            }) = metadata
                && let Some(TriggerEnvelope {
                    source,
                    fired_at: _,
                    schedule_id,
                    delivery_id,
                    headers,
                    auth_subject,
                }) = trigger
            {
                text(source);
                schedule_id
                    .iter_mut()
                    .chain(delivery_id.iter_mut())
                    .chain(auth_subject.iter_mut())
                    .for_each(text);
                headers.iter_mut().for_each(json);
            }
        }
        EventKind::ActionEvent {
            tool_call:
                ToolCall {
                    id,
                    name,
                    arguments,
                },
            llm_response_id,
            thought,
        } => {
            [id, name, llm_response_id, thought]
                .into_iter()
                .for_each(text);
            json(arguments);
        }
        EventKind::ObservationEvent {
            tool_call_id,
            tool_name,
            result,
        } => {
            text(tool_call_id);
            text(tool_name);
            json(result);
        }
        EventKind::UserRejectObservation {
            tool_call_id,
            tool_name,
            reason,
        } => [tool_call_id, tool_name, reason].into_iter().for_each(text),
        EventKind::AgentErrorEvent {
            tool_call_id,
            tool_name,
            error,
        } => {
            tool_call_id
                .iter_mut()
                .chain(tool_name.iter_mut())
                .for_each(text);
            text(error);
        }
        EventKind::CondensationSummaryEvent { summary } => text(summary),
        EventKind::Condensation {
            forgotten_from: _,
            forgotten_to: _,
            reason,
        } => reason.iter_mut().for_each(text),
        EventKind::CondensationRequest {} | EventKind::PauseEvent {} => {}
        EventKind::ConversationStateUpdateEvent { key, value } => {
            text(key);
            json(value);
        }
        EventKind::ReviewRequestEvent {
            review_id,
            reviewer,
            subject,
        } => {
            text(review_id);
            text(reviewer);
            json(subject);
        }
        EventKind::ReviewDecisionEvent {
            review_id,
            approve: _,
            decided_by,
        } => {
            text(review_id);
            text(decided_by);
        }
    }
}
