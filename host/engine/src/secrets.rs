//! The secrets of a plan (CONTRACT §1), collected once when it is built, and the scrubbing of
//! events by them as they are logged: every event passes [`Engine::log`](crate::Engine), so
//! the event log, the API and SSE that serve it, and the conversation the LLM is sent (read
//! from the log) never hold a secret; and of the errors a client's call is answered with
//! (`direct`).

use agentmesh_model::event::{
    ContentPart, EventKind, MessageMetadata, ToolCall, ToolSchema, TriggerEnvelope,
};
use agentmesh_secrets::Secrets;
use serde_json::Value;

use crate::EngineError;

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
            call_id: _,
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

/// `error` with every secret in its message replaced: for an error that leaves the host as
/// it is (a client's call). The store's errors and manifest diagnostics name no secret.
pub(crate) fn scrub_error(secrets: &Secrets, mut error: EngineError) -> EngineError {
    match &mut error {
        EngineError::Config(text)
        | EngineError::Input(text)
        | EngineError::NotFound(text)
        | EngineError::Conflict(text)
        | EngineError::Forbidden(text)
        | EngineError::Internal(text) => secrets.scrub_string(text),
        EngineError::Store(_) | EngineError::Manifest(_) => {}
    }
    error
}
