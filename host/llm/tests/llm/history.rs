//! The event log as chat messages: parallel calls, condensation, missing observations.

use agentmesh_llm::{
    ChatMessage, Conversation, INTERRUPTED_CALL, SUMMARY_PREFIX, estimate_prompt_tokens,
    to_messages,
};
use agentmesh_model::event::{ContentPart, Event, EventKind, EventSource, ToolCall, ToolSchema};
use serde_json::{Value, json};

/// Builds a log with consecutive sequence numbers from 1.
fn log(kinds: Vec<(EventSource, EventKind)>) -> Vec<Event> {
    kinds
        .into_iter()
        .zip(1u64..)
        .map(|((source, kind), seq)| Event {
            seq,
            id: format!("ev_{seq}"),
            timestamp: "2025-01-01T00:00:00Z".into(),
            source,
            kind,
        })
        .collect()
}

fn system(prompt: &str) -> (EventSource, EventKind) {
    (
        EventSource::Agent,
        EventKind::SystemPromptEvent {
            prompt: prompt.into(),
            tools: vec![ToolSchema {
                name: "lookup".into(),
                description: "Looks things up".into(),
                parameters: json!({"type": "object"}),
            }],
        },
    )
}

fn message(source: EventSource, text: &str) -> (EventSource, EventKind) {
    (
        source,
        EventKind::MessageEvent {
            content: vec![ContentPart::text(text)],
            metadata: None,
        },
    )
}

fn call(id: &str) -> ToolCall {
    ToolCall {
        id: id.into(),
        name: "lookup".into(),
        arguments: json!({"q": id}),
    }
}

fn action(id: &str, response: &str, thought: &str) -> (EventSource, EventKind) {
    (
        EventSource::Agent,
        EventKind::ActionEvent {
            tool_call: call(id),
            llm_response_id: response.into(),
            thought: thought.into(),
        },
    )
}

fn observation(id: &str, result: Value) -> (EventSource, EventKind) {
    (
        EventSource::Environment,
        EventKind::ObservationEvent {
            tool_call_id: id.into(),
            tool_name: "lookup".into(),
            result,
        },
    )
}

fn tool(id: &str, content: &str) -> ChatMessage {
    ChatMessage::Tool {
        tool_call_id: id.into(),
        content: content.into(),
    }
}

/// An assistant message: its text (`None` for a response that is only calls) and its calls.
fn assistant(content: Option<&str>, calls: &[&str]) -> ChatMessage {
    ChatMessage::Assistant {
        content: content.map(str::to_owned),
        tool_calls: calls.iter().map(|id| call(id)).collect(),
    }
}

fn user(content: &str) -> ChatMessage {
    ChatMessage::User {
        content: content.into(),
    }
}

/// Every assistant tool call is answered by exactly one tool message before anything else, and
/// no tool message answers anything else.
fn assert_well_formed(messages: &[ChatMessage]) {
    let mut pending: Vec<&str> = Vec::new();
    for message in messages {
        match message {
            ChatMessage::Tool { tool_call_id, .. } => {
                let position = pending
                    .iter()
                    .position(|id| id == tool_call_id)
                    .unwrap_or_else(|| {
                        panic!("unexpected answer to {tool_call_id}: {messages:#?}")
                    });
                pending.remove(position);
            }
            other => {
                assert!(pending.is_empty(), "unanswered {pending:?}: {messages:#?}");
                if let ChatMessage::Assistant { tool_calls, .. } = other {
                    pending = tool_calls.iter().map(|c| c.id.as_str()).collect();
                }
            }
        }
    }
    assert!(pending.is_empty(), "unanswered {pending:?}: {messages:#?}");
}

#[test]
fn parallel_calls_of_one_response_are_one_assistant_message() {
    let events = log(vec![
        system("You look things up."),
        message(EventSource::User, "Find a and b"),
        action("c1", "resp_abc", "Let me check..."),
        action("c2", "resp_abc", "a later thought is not sent"),
        observation("c1", json!("found a")),
        observation("c2", json!({"b": 2})),
        message(EventSource::Agent, "a and b found"),
    ]);
    let messages = to_messages(&events);
    assert_eq!(
        messages,
        vec![
            ChatMessage::System {
                content: "You look things up.".into()
            },
            user("Find a and b"),
            assistant(Some("Let me check..."), &["c1", "c2"]),
            tool("c1", "found a"),
            tool("c2", r#"{"b":2}"#),
            assistant(Some("a and b found"), &[]),
        ]
    );
    assert_well_formed(&messages);
}

#[test]
fn a_response_without_text_has_no_content() {
    let events = log(vec![
        action("c1", "r1", ""),
        observation("c1", json!(1)),
        action("c2", "r2", ""),
        observation("c2", json!(2)),
    ]);
    let messages = to_messages(&events);
    assert_eq!(
        messages,
        vec![
            assistant(None, &["c1"]),
            tool("c1", "1"),
            assistant(None, &["c2"]),
            tool("c2", "2"),
        ]
    );
}

#[test]
fn internal_events_do_not_split_a_response() {
    let events = log(vec![
        action("c1", "r1", "both"),
        (
            EventSource::Environment,
            EventKind::ConversationStateUpdateEvent {
                key: "status".into(),
                value: json!("running"),
            },
        ),
        action("c2", "r1", ""),
        observation("c1", json!("a")),
        observation("c2", json!("b")),
    ]);
    let messages = to_messages(&events);
    assert_eq!(messages[0], assistant(Some("both"), &["c1", "c2"]));
    assert_eq!(messages.len(), 3);
}

#[test]
fn rejections_and_call_errors_answer_their_calls() {
    let events = log(vec![
        action("c1", "r1", ""),
        action("c2", "r1", ""),
        (
            EventSource::Environment,
            EventKind::UserRejectObservation {
                tool_call_id: "c1".into(),
                tool_name: "lookup".into(),
                reason: "not allowed for this repository".into(),
            },
        ),
        (
            EventSource::Agent,
            EventKind::AgentErrorEvent {
                tool_call_id: Some("c2".into()),
                tool_name: Some("lookup".into()),
                error: "the component trapped".into(),
            },
        ),
        (
            EventSource::Agent,
            EventKind::AgentErrorEvent {
                tool_call_id: None,
                tool_name: None,
                error: "internal only".into(),
            },
        ),
        (EventSource::User, EventKind::PauseEvent {}),
    ]);
    let messages = to_messages(&events);
    assert_eq!(
        messages[1..],
        [
            tool("c1", "not allowed for this repository"),
            tool("c2", "the component trapped"),
        ]
    );
}

#[test]
fn condensed_events_are_replaced_by_their_summary() {
    let events = log(vec![
        system("prompt"),                             // 1
        message(EventSource::User, "first question"), // 2
        action("c1", "r1", "looking"),                // 3
        observation("c1", json!("result")),           // 4
        message(EventSource::Agent, "first answer"),  // 5
        (
            EventSource::Environment,
            EventKind::CondensationSummaryEvent {
                summary: "the user asked one question; it was answered".into(),
            },
        ), // 6
        (
            EventSource::Environment,
            EventKind::Condensation {
                forgotten_from: 2,
                forgotten_to: 5,
                reason: Some("max_tokens".into()),
            },
        ), // 7
        message(EventSource::User, "second question"), // 8
    ]);
    let messages = to_messages(&events);
    assert_eq!(
        messages,
        vec![
            ChatMessage::System {
                content: "prompt".into()
            },
            user(
                "Summary of the earlier conversation: the user asked one question; it was answered"
            ),
            user("second question"),
        ]
    );
    assert_eq!(SUMMARY_PREFIX, "Summary of the earlier conversation: ");
}

fn summary(text: &str) -> (EventSource, EventKind) {
    (
        EventSource::Agent,
        EventKind::CondensationSummaryEvent {
            summary: text.into(),
        },
    )
}

fn condensation(from: u64, to: u64) -> (EventSource, EventKind) {
    (
        EventSource::Environment,
        EventKind::Condensation {
            forgotten_from: from,
            forgotten_to: to,
            reason: None,
        },
    )
}

/// A log condensed twice, as the engine condenses: each range starts at the first event in
/// view, and the second summary was written with the first in its transcript.
fn condensed_twice() -> Vec<Event> {
    log(vec![
        system("prompt"),                    // 1
        message(EventSource::User, "one"),   // 2
        message(EventSource::Agent, "1"),    // 3
        message(EventSource::User, "two"),   // 4
        message(EventSource::Agent, "2"),    // 5
        summary("one, 1"),                   // 6
        condensation(2, 3),                  // 7
        message(EventSource::User, "three"), // 8
        action("c1", "r1", "looking"),       // 9
        observation("c1", json!("found")),   // 10
        message(EventSource::Agent, "3"),    // 11
        summary("one, 1, two, 2, three"),    // 12
        condensation(4, 8),                  // 13
        message(EventSource::User, "four"),  // 14
    ])
}

#[test]
fn only_the_last_summary_is_shown_where_the_forgotten_events_were() {
    let messages = to_messages(&condensed_twice());
    assert_eq!(
        messages,
        vec![
            ChatMessage::System {
                content: "prompt".into()
            },
            user(&format!("{SUMMARY_PREFIX}one, 1, two, 2, three")),
            assistant(Some("looking"), &["c1"]),
            tool("c1", "found"),
            assistant(Some("3"), &[]),
            user("four"),
        ]
    );
}

#[test]
fn a_condensed_log_given_from_past_its_forgotten_range_reads_the_same() {
    // What a turn reads of a condensed log: the system prompt and the events after the last
    // forgotten range.
    let events = condensed_twice();
    let view: Vec<Event> = events
        .iter()
        .filter(|e| e.seq == 1 || e.seq > 8)
        .cloned()
        .collect();
    assert_eq!(to_messages(&view), to_messages(&events));
}

#[test]
fn a_conversation_goes_on_incrementally_after_a_condensation() {
    let events = condensed_twice();
    let mut conversation = Conversation::default();
    for end in 1..=events.len() {
        let (messages, tokens) = conversation.messages(&events[..end]);
        assert_eq!(messages, to_messages(&events[..end]), "after {end} events");
        assert_eq!(
            tokens,
            estimate_prompt_tokens(&messages),
            "after {end} events"
        );
        conversation.restore(messages);
    }
}

#[test]
fn a_condensation_that_splits_a_call_leaves_no_orphan_answer() {
    let events = log(vec![
        message(EventSource::User, "go"),  // 1
        action("c1", "r1", ""),            // 2
        observation("c1", json!("done")),  // 3
        message(EventSource::Agent, "ok"), // 4
        (
            EventSource::Environment,
            EventKind::Condensation {
                forgotten_from: 1,
                forgotten_to: 2,
                reason: None,
            },
        ),
    ]);
    let messages = to_messages(&events);
    assert_eq!(messages, vec![assistant(Some("ok"), &[])]);
}

#[test]
fn later_condensations_add_to_earlier_ones() {
    let events = log(vec![
        message(EventSource::User, "one"), // 1
        message(EventSource::User, "two"), // 2
        (
            EventSource::Environment,
            EventKind::Condensation {
                forgotten_from: 1,
                forgotten_to: 1,
                reason: None,
            },
        ), // 3
        // Forgets the earlier condensation too: what it forgot stays forgotten.
        (
            EventSource::Environment,
            EventKind::Condensation {
                forgotten_from: 2,
                forgotten_to: 3,
                reason: None,
            },
        ), // 4
        message(EventSource::User, "three"), // 5
    ]);
    assert_eq!(to_messages(&events), vec![user("three")]);
}

#[test]
fn calls_without_observations_are_reported_interrupted() {
    let events = log(vec![
        message(EventSource::User, "do three things"),
        action("c1", "r1", "doing"),
        action("c2", "r1", ""),
        action("c3", "r1", ""),
        observation("c2", json!("ok")),
        // The host stopped here; after the restart a new input arrived.
        message(EventSource::User, "are you there?"),
        action("c4", "r2", ""),
    ]);
    let messages = to_messages(&events);
    assert_eq!(
        messages,
        vec![
            user("do three things"),
            assistant(Some("doing"), &["c1", "c2", "c3"]),
            tool("c2", "ok"),
            tool("c1", INTERRUPTED_CALL),
            tool("c3", INTERRUPTED_CALL),
            user("are you there?"),
            assistant(None, &["c4"]),
            tool("c4", INTERRUPTED_CALL),
        ]
    );
    assert_eq!(
        INTERRUPTED_CALL,
        "the call was interrupted before it returned"
    );
    assert_well_formed(&messages);
}

#[test]
fn answers_after_the_conversation_moved_on_are_dropped() {
    let events = log(vec![
        action("c1", "r1", ""),
        message(EventSource::User, "next"),
        observation("c1", json!("late")),
        observation("unknown", json!("never called")),
    ]);
    let messages = to_messages(&events);
    assert_eq!(
        messages,
        vec![
            assistant(None, &["c1"]),
            tool("c1", INTERRUPTED_CALL),
            user("next"),
        ]
    );
    assert_well_formed(&messages);
}
