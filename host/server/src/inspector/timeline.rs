//! A task's events as readable rows: who, what (a message's text, a call with its arguments, a
//! result, an error, a block by middleware, a review, a condensation, a state change) and the
//! event's JSON in a closed `<details>`. The same rows are rendered for the page and for its
//! live stream, so what arrives live reads as what was there.

use agentmesh_model::event::{ContentPart, Event, EventKind, EventSource};
use agentmesh_secrets::Secrets;
use maud::{Markup, html};
use serde_json::Value;

use super::layout::{compact, cut, json_details, time_rfc3339};

/// Characters of a text or a JSON value shown in a row's summary.
const SUMMARY_CHARS: usize = 600;

/// Bytes of an event's pretty JSON shown in its `<details>`; past that, a link to all of it.
const DETAILS_BYTES: usize = 6 * 1024;

fn source_name(source: EventSource) -> &'static str {
    match source {
        EventSource::User => "user",
        EventSource::Agent => "agent",
        EventSource::Environment => "environment",
    }
}

/// The row's class, its label, and what it says (long texts cut, see [`cut`]).
fn describe(kind: &EventKind, secrets: &Secrets) -> (&'static str, &'static str, Markup) {
    let text = |text: &str| cut(secrets, text, SUMMARY_CHARS);
    let json = |value: &Value| compact(secrets, value, SUMMARY_CHARS);
    match kind {
        EventKind::SystemPromptEvent { prompt, tools } => (
            "prompt",
            "System prompt",
            html! { (text(prompt)) span.note { " · " (tools.len()) " function(s)" } },
        ),
        EventKind::MessageEvent { content, metadata } => {
            let trigger = metadata.as_ref().and_then(|m| m.trigger.as_ref());
            (
                "message",
                "Message",
                html! {
                    @if let Some(t) = trigger { span.tag { "triggered: " (t.source) } " " }
                    span.text { (text(&ContentPart::join(content))) }
                },
            )
        }
        EventKind::ActionEvent {
            tool_call, thought, ..
        } => (
            "call",
            "Tool call",
            html! {
                @if !thought.is_empty() { span.text { (text(thought)) } br; }
                code { (tool_call.name) } " "
                code.args { (json(&tool_call.arguments)) }
            },
        ),
        EventKind::ObservationEvent {
            tool_name, result, ..
        } => (
            "observation",
            "Observation",
            html! { code { (tool_name) } " → " code.args { (json(result)) } },
        ),
        EventKind::UserRejectObservation {
            tool_name, reason, ..
        } => (
            "blocked",
            "Blocked",
            html! { code { (tool_name) } " refused: " span.text { (text(reason)) } },
        ),
        EventKind::AgentErrorEvent {
            tool_name, error, ..
        } => (
            "error",
            "Error",
            html! {
                @if let Some(t) = tool_name { code { (t) } ": " }
                span.text { (text(error)) }
            },
        ),
        EventKind::CondensationSummaryEvent { summary } => (
            "condensation",
            "Condensation summary",
            html! { span.text { (text(summary)) } },
        ),
        EventKind::Condensation {
            forgotten_from,
            forgotten_to,
            reason,
        } => (
            "condensation",
            "Condensation",
            html! {
                "events " (forgotten_from) "–" (forgotten_to) " left the LLM's view"
                @if let Some(r) = reason { " (" (r) ")" }
            },
        ),
        EventKind::CondensationRequest {} => ("condensation", "Condensation requested", html! {}),
        EventKind::ConversationStateUpdateEvent { key, value } => (
            "state",
            "State change",
            html! { code { (key) } " = " code.args { (json(value)) } },
        ),
        EventKind::PauseEvent {} => ("state", "Interrupted", html! {}),
        EventKind::ReviewRequestEvent {
            review_id,
            reviewer,
            subject,
            ..
        } => (
            "review",
            "Review requested",
            html! {
                "from " strong { (reviewer) } " (" code { (review_id) } "): "
                code.args { (json(subject)) }
            },
        ),
        EventKind::ReviewDecisionEvent {
            review_id,
            approve,
            decided_by,
        } => (
            "review",
            if *approve {
                "Review approved"
            } else {
                "Review denied"
            },
            html! { code { (review_id) } " by " strong { (decided_by) } },
        ),
    }
}

/// The status a state-change event sets, if it sets one.
fn status_set(kind: &EventKind) -> Option<&str> {
    match kind {
        EventKind::ConversationStateUpdateEvent { key, value } if key == "status" => value.as_str(),
        _ => None,
    }
}

/// One event as a table row of task `task_id`'s timeline.
pub fn row(task_id: &str, event: &Event, secrets: &Secrets) -> Markup {
    let (class, label, what) = describe(&event.kind, secrets);
    let json = serde_json::to_value(event).unwrap_or(Value::Null);
    let whole = format!("/ui/tasks/{task_id}/events/{}", event.seq);
    html! {
        tr id={ "ev-" (event.seq) } class=(class) data-status=[status_set(&event.kind)] {
            td.seq { (event.seq) }
            td.when { (time_rfc3339(&event.timestamp)) }
            td.source { (source_name(event.source)) }
            td.what {
                strong.kind { (label) } " "
                (what)
                (json_details(secrets, "JSON", &json, DETAILS_BYTES, Some(&whole)))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(kind: EventKind) -> Event {
        Event {
            seq: 7,
            id: "ev_1".into(),
            timestamp: "2026-11-26T11:02:03.120Z".into(),
            source: EventSource::User,
            kind,
        }
    }

    #[test]
    fn a_message_carrying_markup_is_shown_as_text() {
        let html = row(
            "t_1",
            &event(EventKind::MessageEvent {
                content: vec![ContentPart::text("<script>alert(1)</script>")],
                metadata: None,
            }),
            &Secrets::default(),
        )
        .into_string();
        assert!(!html.contains("<script>"), "{html}");
        assert!(
            html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
            "{html}"
        );
    }

    #[test]
    fn a_status_change_names_the_status_for_the_live_page() {
        let html = row(
            "t_1",
            &event(EventKind::ConversationStateUpdateEvent {
                key: "status".into(),
                value: Value::String("idle".into()),
            }),
            &Secrets::default(),
        )
        .into_string();
        assert!(html.contains(r#"data-status="idle""#), "{html}");
        assert!(html.contains(r#"id="ev-7""#), "{html}");
    }
}
