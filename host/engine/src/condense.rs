//! Condensation (the event-log seed's "condenser"): when the events the LLM would see pass the
//! host's budget (`condensation.max_events`, `condensation.max_tokens`), the older ones are
//! replaced in its view by a summary the LLM writes. The log keeps everything: a
//! `CondensationSummaryEvent` and a `Condensation` naming the forgotten range are appended.

use agentmesh_llm::{ChatMessage, ChatRequest, SUMMARY_PREFIX, to_messages};
use agentmesh_manifest::model::host::Condensation;
use agentmesh_model::event::{Event, EventKind, EventSource};
use agentmesh_store::now_ms;

use crate::plan::{AgentPlan, Plan};
use crate::records::forgotten_to;
use crate::task::TaskRecord;
use crate::{Engine, Result};

/// Conversation events kept verbatim when the host config says nothing.
pub const DEFAULT_KEEP_RECENT: u32 = 10;

/// What the LLM is asked when it condenses.
const INSTRUCTION: &str = "Summarize the conversation below for your own later use: the user's \
goals, decisions made, facts learned from tools, and what is still open. Be concise; keep \
names, numbers and identifiers exactly.";

/// Whether an event is part of the conversation the LLM sees.
fn conversational(kind: &EventKind) -> bool {
    matches!(
        kind,
        EventKind::MessageEvent { .. }
            | EventKind::ActionEvent { .. }
            | EventKind::ObservationEvent { .. }
            | EventKind::UserRejectObservation { .. }
            | EventKind::AgentErrorEvent { .. }
            | EventKind::CondensationSummaryEvent { .. }
    )
}

/// The range to forget, if `history` is past the budget: the conversation events in view
/// except the last `keep_recent`, never separating a call from its answer. `tokens`: the
/// prompt token estimate of `history` as chat messages (read under `max_tokens` only).
fn range_to_forget(
    history: &[Event],
    config: &Condensation,
    tokens: u64,
) -> Option<(u64, u64, String)> {
    let forgotten_to = forgotten_to(history);
    let in_view: Vec<&Event> = history
        .iter()
        .filter(|e| e.seq > forgotten_to && conversational(&e.kind))
        .filter(|e| !matches!(e.kind, EventKind::CondensationSummaryEvent { .. }))
        .collect();
    let events_over = config
        .max_events
        .filter(|max| in_view.len() > *max as usize)
        .map(|max| format!("{} events in view exceed max_events {max}", in_view.len()));
    let tokens_over = config.max_tokens.and_then(|max| {
        (tokens > max).then(|| format!("~{tokens} prompt tokens exceed max_tokens {max}"))
    });
    let reason = events_over.or(tokens_over)?;
    let keep = config.keep_recent.unwrap_or(DEFAULT_KEEP_RECENT) as usize;
    let mut split = in_view.len().checked_sub(keep)?;
    // Keep a call with its answers, and parallel calls together.
    while split > 0 {
        let first_kept = in_view[split];
        let previous = in_view[split - 1];
        let same_response = match (&previous.kind, &first_kept.kind) {
            (
                EventKind::ActionEvent {
                    llm_response_id: a, ..
                },
                EventKind::ActionEvent {
                    llm_response_id: b, ..
                },
            ) => a == b,
            _ => false,
        };
        if first_kept.kind.answered_call().is_some() || same_response {
            split -= 1;
        } else {
            break;
        }
    }
    if split == 0 {
        return None;
    }
    Some((in_view[0].seq, in_view[split - 1].seq, reason))
}

/// The forgotten events as a transcript for the summarizing call, after the summary in view
/// (only the newest summary is shown, so it carries the earlier ones forward).
fn transcript(history: &[Event], from: u64, to: u64) -> String {
    let previous = history
        .windows(2)
        .rev()
        .find_map(|w| match (&w[0].kind, &w[1].kind) {
            (EventKind::CondensationSummaryEvent { summary }, EventKind::Condensation { .. }) => {
                Some(summary)
            }
            _ => None,
        });
    // Earlier summaries in the range are not repeated: the one in view carries them.
    let part: Vec<Event> = history
        .iter()
        .filter(|e| (from..=to).contains(&e.seq))
        .filter(|e| {
            !matches!(
                e.kind,
                EventKind::CondensationSummaryEvent { .. } | EventKind::Condensation { .. }
            )
        })
        .cloned()
        .collect();
    let lines = to_messages(&part).into_iter().map(|m| match m {
        ChatMessage::System { content } => format!("system: {content}"),
        ChatMessage::User { content } => format!("user: {content}"),
        ChatMessage::Assistant {
            content,
            tool_calls,
        } => {
            let calls: Vec<String> = tool_calls
                .iter()
                .map(|c| format!("{}({})", c.name, c.arguments))
                .collect();
            format!(
                "assistant: {}{}",
                content.unwrap_or_default(),
                if calls.is_empty() {
                    String::new()
                } else {
                    format!(" [calls: {}]", calls.join(", "))
                }
            )
        }
        ChatMessage::Tool { content, .. } => format!("tool result: {content}"),
    });
    previous
        .map(|summary| format!("user: {SUMMARY_PREFIX}{summary}"))
        .into_iter()
        .chain(lines)
        .collect::<Vec<_>>()
        .join("\n")
}

/// Condenses `record`'s view when its log (the journal's view) is past the host's budget:
/// one summarizing LLM call (counted like any other), then the summary and the `Condensation`
/// logged. Nothing happens when under budget or when the call fails (the conversation then
/// simply goes on uncondensed, and the failure is logged). `agent` is `plan`'s: the step's
/// one version of the config names the model, and says what the budget is.
pub(crate) async fn maybe_condense(
    engine: &Engine,
    (plan, agent): (&Plan, &AgentPlan),
    record: &mut TaskRecord,
) -> Result<()> {
    let Some(config) = &plan.host.condensation else {
        return Ok(());
    };
    // The conversation's kept estimate: the view is not converted again at every step.
    let tokens = config
        .max_tokens
        .map_or(0, |_| record.journal.prompt_estimate());
    let history = record.journal.view();
    let Some((from, to, reason)) = range_to_forget(history, config, tokens) else {
        return Ok(());
    };
    let transcript = transcript(history, from, to);
    let (provider, model) = match engine.inner.providers.get(plan, &agent.model) {
        Ok(p) => p,
        Err(e) => {
            tracing::warn!(task.id = %record.id, "condensation skipped: {e}");
            return Ok(());
        }
    };
    let request = ChatRequest {
        task_id: record.id.clone(),
        call_index: record.llm_calls,
        model,
        messages: vec![
            ChatMessage::System {
                content: INSTRUCTION.into(),
            },
            ChatMessage::User {
                content: transcript,
            },
        ],
        tools: Vec::new().into(),
        prompt_estimate: None,
    };
    if !provider.in_process() {
        engine.records().write_ahead(record)?;
    }
    let response = match provider.complete(&request).await {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(task.id = %record.id, "condensation failed: {e}");
            return Ok(());
        }
    };
    record.llm_calls += 1;
    record.prompt_tokens += response.usage.prompt_tokens;
    record.completion_tokens += response.usage.completion_tokens;
    record.history.push("llm".into());
    record.last_activity_ms = now_ms();
    record.condensed_to = record.condensed_to.max(to);
    let events = vec![
        (
            EventSource::Agent,
            EventKind::CondensationSummaryEvent {
                summary: response.text,
            },
        ),
        (
            EventSource::Environment,
            EventKind::Condensation {
                forgotten_from: from,
                forgotten_to: to,
                reason: Some(reason),
            },
        ),
    ];
    engine.records().log(record, events)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // Tests fail loudly.
mod tests {
    use agentmesh_model::event::ContentPart;

    use super::*;

    fn log(kinds: Vec<EventKind>) -> Vec<Event> {
        kinds
            .into_iter()
            .zip(1u64..)
            .map(|(kind, seq)| Event {
                seq,
                id: format!("ev_{seq}"),
                timestamp: "2026-01-01T00:00:00Z".into(),
                source: EventSource::User,
                kind,
            })
            .collect()
    }

    fn message(text: &str) -> EventKind {
        EventKind::MessageEvent {
            content: vec![ContentPart::text(text)],
            metadata: None,
        }
    }

    #[test]
    fn a_transcript_starts_from_the_summary_in_view_and_repeats_no_other() {
        let history = log(vec![
            message("one"), // 1
            message("two"), // 2
            EventKind::CondensationSummaryEvent {
                summary: "one was said".into(),
            }, // 3
            EventKind::Condensation {
                forgotten_from: 1,
                forgotten_to: 1,
                reason: None,
            }, // 4
            message("three"), // 5
        ]);
        assert_eq!(
            transcript(&history, 2, 5),
            format!("user: {SUMMARY_PREFIX}one was said\nuser: two\nuser: three")
        );
    }
}
