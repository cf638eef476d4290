//! A task's event log as chat messages (the event-log seed's "LLM integration").
//!
//! | event | message |
//! |---|---|
//! | `SystemPromptEvent` | system |
//! | `MessageEvent` from the user (or the environment) | user, the text parts joined |
//! | `MessageEvent` from the agent | assistant |
//! | `ActionEvent`s of one response (one `llm_response_id`, consecutive) | one assistant message with all their tool calls; its text is the first event's `thought` |
//! | `ObservationEvent` | tool: the result as JSON text (a JSON string without its quotes) |
//! | `UserRejectObservation` | tool: the reason |
//! | `AgentErrorEvent` with a `tool_call_id` | tool: the error (without one: nothing) |
//! | `CondensationSummaryEvent` | user: [`SUMMARY_PREFIX`] + the summary, in place of the events its `Condensation` (the next event) forgets; only the last one is shown (it summarizes the one before) |
//! | `Condensation` | the events with `seq` in `forgotten_from..=forgotten_to` are left out |
//! | every other kind | nothing (internal) |
//!
//! The result is always a well-formed conversation for chat-completions APIs: each assistant tool
//! call is followed, before any other user, assistant or system message, by exactly one tool
//! message. A call the log never answers (the host stopped mid-call) is answered with
//! [`INTERRUPTED_CALL`]; a second answer to a call, or an answer whose call is not in view (it was
//! condensed away), is left out.

use agentmesh_model::event::{ContentPart, Event, EventKind, EventSource};
use serde_json::Value;

use crate::{ChatMessage, estimate_call_tokens, estimate_message_tokens};

/// The tool message standing in for a call the log has no answer to.
pub const INTERRUPTED_CALL: &str = "the call was interrupted before it returned";

/// What precedes a condensation summary in its user message.
pub const SUMMARY_PREFIX: &str = "Summary of the earlier conversation: ";

/// Converts a task's event log to chat messages (see the module docs for the mapping).
pub fn to_messages(events: &[Event]) -> Vec<ChatMessage> {
    build(events).finish()
}

/// The conversation of `events`, not finished (calls not answered yet stay pending).
///
/// Only the last summary (a `CondensationSummaryEvent` right before a `Condensation`) is
/// shown: each summary is written with the one before it in its transcript, so the last
/// stands for everything forgotten. It is placed before the first event at or after the
/// start of its condensation's range — where the forgotten events were, or, when the log is
/// given from a later point on, at the start of what is given (after the system prompt).
fn build(events: &[Event]) -> Builder {
    let mut forgotten: Vec<(u64, u64)> = Vec::new();
    // The seq of every summary written for a condensation, and the last with its range start.
    let mut summaries: Vec<u64> = Vec::new();
    let mut last_summary: Option<(u64, usize)> = None;
    for (i, event) in events.iter().enumerate() {
        if let EventKind::Condensation {
            forgotten_from,
            forgotten_to,
            ..
        } = event.kind
        {
            forgotten.push((forgotten_from, forgotten_to));
            if let Some(p) = i.checked_sub(1)
                && matches!(events[p].kind, EventKind::CondensationSummaryEvent { .. })
            {
                summaries.push(events[p].seq);
                last_summary = Some((forgotten_from, p));
            }
        }
    }
    forgotten.sort_unstable();
    // Ranges merged, so that a seq is looked up by bisection.
    let mut ranges: Vec<(u64, u64)> = Vec::with_capacity(forgotten.len());
    for (from, to) in forgotten {
        match ranges.last_mut() {
            Some(last) if from <= last.1.saturating_add(1) => last.1 = last.1.max(to),
            _ => ranges.push((from, to)),
        }
    }
    let is_forgotten = |seq: u64| {
        let i = ranges.partition_point(|&(from, _)| from <= seq);
        i > 0 && seq <= ranges[i - 1].1
    };
    let mut builder = Builder::default();
    for event in events {
        if let Some((from, at)) = last_summary
            && event.seq >= from
        {
            builder.push(&events[at]);
            last_summary = None;
        }
        if summaries.binary_search(&event.seq).is_ok() || is_forgotten(event.seq) {
            continue;
        }
        builder.push(event);
    }
    builder
}

/// A task's conversation kept up to date with its growing log: each call converts only the
/// events added since the last one (a turn asks twice or more, every turn again), and adds
/// their messages' token estimate to the conversation's.
///
/// The messages are lent to a request ([`Conversation::messages`]) and given back after it
/// ([`Conversation::restore`]); if they are not given back, the next call converts the whole
/// log again. New events that condense (a summary, a `Condensation`) make it convert the
/// whole log given: a condensation changes what came before it.
#[derive(Debug, Default)]
pub struct Conversation {
    builder: Builder,
    /// The `seq` of the last event converted (0: none).
    upto: u64,
    /// The messages are out on loan, or the state is not to be trusted.
    stale: bool,
}

impl Conversation {
    /// The conversation of `events`, a task's log in order: exactly [`to_messages`] of it, with
    /// its [`estimate_prompt_tokens`](crate::estimate_prompt_tokens).
    pub fn messages(&mut self, events: &[Event]) -> (Vec<ChatMessage>, u64) {
        let last = events.last().map_or(0, |e| e.seq);
        if self.stale || last < self.upto {
            self.reset();
        }
        let new = &events[events.partition_point(|e| e.seq <= self.upto)..];
        let condenses = new.iter().any(|e| {
            matches!(
                e.kind,
                EventKind::Condensation { .. } | EventKind::CondensationSummaryEvent { .. }
            )
        });
        if condenses {
            self.builder = build(events);
        } else {
            for event in new {
                self.builder.push(event);
            }
        }
        self.upto = last;
        if self.builder.pending.is_empty() {
            self.stale = true;
            (
                std::mem::take(&mut self.builder.messages),
                self.builder.tokens,
            )
        } else {
            // Calls not answered yet are answered as interrupted in this request only.
            let mut copy = Builder {
                messages: self.builder.messages.clone(),
                open_response: None,
                pending: self.builder.pending.clone(),
                tokens: self.builder.tokens,
            };
            copy.close_calls();
            (copy.messages, copy.tokens)
        }
    }

    /// Takes back the messages [`Conversation::messages`] lent out.
    pub fn restore(&mut self, messages: Vec<ChatMessage>) {
        if self.stale && self.builder.messages.is_empty() {
            self.builder.messages = messages;
            self.stale = false;
        }
    }

    /// Forgets everything: the next call converts the whole log.
    pub fn reset(&mut self) {
        *self = Conversation::default();
    }
}

/// The conversation under construction.
#[derive(Debug, Default)]
struct Builder {
    messages: Vec<ChatMessage>,
    /// The last message is an assistant message with tool calls of this `llm_response_id`, and
    /// nothing visible came after it yet: a further `ActionEvent` of the same response joins it.
    open_response: Option<String>,
    /// Calls of the last assistant message not answered yet, in call order.
    pending: Vec<String>,
    /// The token estimate of `messages` (kept while they are lent out).
    tokens: u64,
}

impl Builder {
    fn push(&mut self, event: &Event) {
        match &event.kind {
            EventKind::SystemPromptEvent { prompt, .. } => self.message(ChatMessage::System {
                content: prompt.clone(),
            }),
            EventKind::MessageEvent { content, .. } => {
                let content = message_text(content);
                self.message(match event.source {
                    EventSource::Agent => ChatMessage::Assistant {
                        content: Some(content),
                        tool_calls: Vec::new(),
                    },
                    EventSource::User | EventSource::Environment => ChatMessage::User { content },
                });
            }
            EventKind::ActionEvent {
                tool_call,
                llm_response_id,
                thought,
            } => {
                if self.open_response.as_ref() == Some(llm_response_id)
                    && let Some(ChatMessage::Assistant { tool_calls, .. }) =
                        self.messages.last_mut()
                {
                    self.tokens += estimate_call_tokens(tool_call);
                    tool_calls.push(tool_call.clone());
                    self.pending.push(tool_call.id.clone());
                    return;
                }
                self.message(ChatMessage::Assistant {
                    content: (!thought.is_empty()).then(|| thought.clone()),
                    tool_calls: vec![tool_call.clone()],
                });
                self.open_response = Some(llm_response_id.clone());
                self.pending = vec![tool_call.id.clone()];
            }
            EventKind::ObservationEvent {
                tool_call_id,
                result,
                ..
            } => self.answer(tool_call_id, result_text(result)),
            EventKind::UserRejectObservation {
                tool_call_id,
                reason,
                ..
            } => self.answer(tool_call_id, reason.clone()),
            EventKind::AgentErrorEvent {
                tool_call_id: Some(tool_call_id),
                error,
                ..
            } => self.answer(tool_call_id, error.clone()),
            EventKind::CondensationSummaryEvent { summary } => self.message(ChatMessage::User {
                content: format!("{SUMMARY_PREFIX}{summary}"),
            }),
            EventKind::AgentErrorEvent {
                tool_call_id: None, ..
            }
            | EventKind::Condensation { .. }
            | EventKind::CondensationRequest {}
            | EventKind::ConversationStateUpdateEvent { .. }
            | EventKind::PauseEvent {}
            | EventKind::ReviewRequestEvent { .. }
            | EventKind::ReviewDecisionEvent { .. } => {}
        }
    }

    /// Appends a user, assistant or system message, answering the open calls first.
    fn message(&mut self, message: ChatMessage) {
        self.close_calls();
        self.push_message(message);
    }

    /// Appends `message`, counting its tokens.
    fn push_message(&mut self, message: ChatMessage) {
        self.tokens += estimate_message_tokens(&message);
        self.messages.push(message);
    }

    /// Appends the answer to a pending call; an answer to anything else is dropped.
    fn answer(&mut self, tool_call_id: &str, content: String) {
        let Some(position) = self.pending.iter().position(|id| id == tool_call_id) else {
            return;
        };
        let tool_call_id = self.pending.remove(position);
        self.open_response = None;
        self.push_message(ChatMessage::Tool {
            tool_call_id,
            content,
        });
    }

    /// Answers every pending call as interrupted.
    fn close_calls(&mut self) {
        self.open_response = None;
        for tool_call_id in std::mem::take(&mut self.pending) {
            self.push_message(ChatMessage::Tool {
                tool_call_id,
                content: INTERRUPTED_CALL.to_owned(),
            });
        }
    }

    fn finish(mut self) -> Vec<ChatMessage> {
        self.close_calls();
        self.messages
    }
}

/// The text of a message: its text parts, and a reference for each media part, one a line.
fn message_text(parts: &[ContentPart]) -> String {
    parts
        .iter()
        .filter_map(|part| match (&part.text, &part.uri) {
            (Some(text), _) => Some(text.clone()),
            (None, Some(uri)) => Some(format!("[attachment {}: {uri}]", part.mime_type)),
            (None, None) => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A function result as the LLM reads it: a JSON string as itself, anything else as JSON text.
fn result_text(result: &Value) -> String {
    match result {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // Tests fail loudly.
mod tests {
    use super::*;
    use serde_json::json;

    fn event(seq: u64, source: EventSource, kind: EventKind) -> Event {
        Event {
            seq,
            id: format!("ev_{seq}"),
            timestamp: "2025-01-01T00:00:00Z".into(),
            source,
            kind,
        }
    }

    #[test]
    fn json_string_results_lose_their_quotes() {
        assert_eq!(result_text(&json!("done")), "done");
        assert_eq!(result_text(&json!({"a": 1})), r#"{"a":1}"#);
        assert_eq!(result_text(&json!(null)), "null");
    }

    #[test]
    fn media_parts_become_references() {
        let parts = vec![
            ContentPart::text("look"),
            ContentPart {
                mime_type: "image/png".into(),
                text: None,
                uri: Some("mount://a.png".into()),
            },
        ];
        assert_eq!(
            message_text(&parts),
            "look\n[attachment image/png: mount://a.png]"
        );
    }

    #[test]
    fn environment_messages_are_user_messages() {
        let log = vec![event(
            1,
            EventSource::Environment,
            EventKind::MessageEvent {
                content: vec![ContentPart::text("a"), ContentPart::text("b")],
                metadata: None,
            },
        )];
        assert_eq!(
            to_messages(&log),
            vec![ChatMessage::User {
                content: "a\nb".into()
            }]
        );
    }

    #[test]
    fn agent_errors_without_a_call_are_internal() {
        let log = vec![event(
            1,
            EventSource::Agent,
            EventKind::AgentErrorEvent {
                tool_call_id: None,
                tool_name: None,
                error: "boom".into(),
            },
        )];
        assert!(to_messages(&log).is_empty());
    }

    fn call(seq: u64, id: &str, response: &str) -> Event {
        event(
            seq,
            EventSource::Agent,
            EventKind::ActionEvent {
                tool_call: agentmesh_model::event::ToolCall {
                    id: id.into(),
                    name: "f".into(),
                    arguments: json!({"n": seq}),
                },
                llm_response_id: response.into(),
                thought: if id.ends_with('a') {
                    "thinking".into()
                } else {
                    String::new()
                },
            },
        )
    }

    fn answer(seq: u64, id: &str) -> Event {
        event(
            seq,
            EventSource::Environment,
            EventKind::ObservationEvent {
                tool_call_id: id.into(),
                tool_name: "f".into(),
                result: json!({"ok": seq}),
            },
        )
    }

    fn text(seq: u64, source: EventSource, text: &str) -> Event {
        event(
            seq,
            source,
            EventKind::MessageEvent {
                content: vec![ContentPart::text(text)],
                metadata: None,
            },
        )
    }

    /// Turns with parallel calls, a call answered late, one never answered, and internal events.
    fn long_log() -> Vec<Event> {
        vec![
            event(
                1,
                EventSource::Agent,
                EventKind::SystemPromptEvent {
                    prompt: "be brief".into(),
                    tools: Vec::new(),
                },
            ),
            text(2, EventSource::User, "hi"),
            call(3, "c1a", "r1"),
            call(4, "c1b", "r1"),
            answer(5, "c1b"),
            event(
                6,
                EventSource::Environment,
                EventKind::ConversationStateUpdateEvent {
                    key: "status".into(),
                    value: json!("running"),
                },
            ),
            answer(7, "c1a"),
            text(8, EventSource::Agent, "done"),
            text(9, EventSource::User, "again"),
            call(10, "c2a", "r2"),
            event(
                11,
                EventSource::Environment,
                EventKind::UserRejectObservation {
                    tool_call_id: "c2a".into(),
                    tool_name: "f".into(),
                    reason: "no".into(),
                },
            ),
            call(12, "c3", "r3"),
            text(13, EventSource::User, "still there?"),
            answer(14, "c3"),
            text(15, EventSource::Agent, "yes"),
        ]
    }

    /// What a kept conversation must give for `log`: its messages and their token estimate.
    fn converted(log: &[Event]) -> (Vec<ChatMessage>, u64) {
        let messages = to_messages(log);
        let tokens = crate::estimate_prompt_tokens(&messages);
        (messages, tokens)
    }

    #[test]
    fn a_kept_conversation_is_the_whole_log_converted_at_every_length() {
        let log = long_log();
        // Growing one event at a time, and in steps of three, lending and restoring.
        for step in [1, 3] {
            let mut conversation = Conversation::default();
            let mut end = 0;
            while end < log.len() {
                end = (end + step).min(log.len());
                let kept = conversation.messages(&log[..end]);
                assert_eq!(kept, converted(&log[..end]), "after {end} events");
                conversation.restore(kept.0);
            }
        }
        // Not given back: the next call starts over, and is still right.
        let mut conversation = Conversation::default();
        let _lent = conversation.messages(&log[..9]);
        assert_eq!(conversation.messages(&log), converted(&log));
        // A shorter log (read anew) starts over too.
        let kept = conversation.messages(&log[..4]);
        assert_eq!(kept, converted(&log[..4]));
        conversation.restore(kept.0);
        // A condensation is converted whole.
        let mut condensed = log.clone();
        condensed.push(event(
            16,
            EventSource::Agent,
            EventKind::CondensationSummaryEvent {
                summary: "they talked".into(),
            },
        ));
        condensed.push(event(
            17,
            EventSource::Environment,
            EventKind::Condensation {
                forgotten_from: 2,
                forgotten_to: 8,
                reason: None,
            },
        ));
        assert_eq!(conversation.messages(&condensed), converted(&condensed));
    }

    #[test]
    fn a_second_answer_to_a_call_is_dropped() {
        let call = agentmesh_model::event::ToolCall {
            id: "c1".into(),
            name: "f".into(),
            arguments: json!({}),
        };
        let log = vec![
            event(
                1,
                EventSource::Agent,
                EventKind::ActionEvent {
                    tool_call: call,
                    llm_response_id: "r1".into(),
                    thought: String::new(),
                },
            ),
            event(
                2,
                EventSource::Agent,
                EventKind::AgentErrorEvent {
                    tool_call_id: Some("c1".into()),
                    tool_name: Some("f".into()),
                    error: "timed out".into(),
                },
            ),
            event(
                3,
                EventSource::Environment,
                EventKind::ObservationEvent {
                    tool_call_id: "c1".into(),
                    tool_name: "f".into(),
                    result: json!("late"),
                },
            ),
        ];
        let messages = to_messages(&log);
        assert_eq!(messages.len(), 2);
        assert_eq!(
            messages[1],
            ChatMessage::Tool {
                tool_call_id: "c1".into(),
                content: "timed out".into()
            }
        );
    }
}
