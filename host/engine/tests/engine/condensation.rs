//! Condensation: past the host's event budget the older conversation is replaced, in the
//! LLM's view only, by a summary the LLM writes; the log keeps every event.

use agentmesh_engine::{Origin, Run, Status};
use agentmesh_llm::{ChatMessage, SUMMARY_PREFIX, to_messages};
use agentmesh_model::event::EventKind;

use serde_json::json;

use crate::util::{echo_agent, engine_at, harness};

const SCRIPT: &str = "responses:
  - tool_calls: [{name: echo_say, arguments: {text: a}}]
  - tool_calls: [{name: echo_say, arguments: {text: b}}]
  - tool_calls: [{name: echo_say, arguments: {text: c}}]
  - text: \"SUMMARY: the user said go; a and b were echoed\"
  - text: done
";

fn config(budget: &str) -> String {
    echo_agent(&format!(
        "capabilities:
  echo: \"*\"
---
kind: agentmesh/v1/host
condensation: {budget}
"
    ))
}

#[tokio::test]
async fn past_max_events_the_view_is_condensed_and_the_log_keeps_everything() {
    let h = harness(&config("{max_events: 6, keep_recent: 2}"), SCRIPT);
    let task = h.run("t/a", "go").await;
    assert_eq!(task.status(), Status::Idle);
    assert_eq!(task.last_output_text().as_deref(), Some("done"));
    let events = h.events(&task);
    let (from, to) = *condensations(&events)
        .first()
        .expect("a Condensation event");
    let first_message = events
        .iter()
        .find(|e| matches!(e.kind, EventKind::MessageEvent { .. }))
        .unwrap();
    assert_eq!(from, first_message.seq, "from the first conversation event");
    let observations: Vec<u64> = events
        .iter()
        .filter(|e| matches!(e.kind, EventKind::ObservationEvent { .. }))
        .map(|e| e.seq)
        .collect();
    assert_eq!(
        to, observations[1],
        "up to b's result: c's call and result are kept"
    );
    // Nothing was removed from the log.
    assert_eq!(observations.len(), 3);
    assert!(events.windows(2).all(|w| w[1].seq == w[0].seq + 1));

    // The LLM's view: the prompt, the summary in place of the forgotten events, then c.
    let view = to_messages(&events);
    assert!(matches!(&view[0], ChatMessage::System { .. }), "{view:?}");
    match &view[1] {
        ChatMessage::User { content } => {
            assert_eq!(
                content,
                &format!("{SUMMARY_PREFIX}SUMMARY: the user said go; a and b were echoed")
            );
        }
        other => panic!("expected the summary, got {other:?}"),
    }
    assert!(
        matches!(&view[2], ChatMessage::Assistant { tool_calls, .. } if tool_calls[0].arguments["text"] == "c"),
        "{view:?}"
    );
    assert!(matches!(&view[3], ChatMessage::Tool { .. }), "{view:?}");
    assert_eq!(view.len(), 5, "{view:?}");
    assert_eq!(
        task.llm_calls, 5,
        "the summary is an LLM call like any other"
    );
}

#[tokio::test]
async fn under_the_budget_nothing_is_condensed() {
    let h = harness(&config("{max_events: 100}"), SCRIPT);
    let task = h.run("t/a", "go").await;
    assert!(
        !h.events(&task)
            .iter()
            .any(|e| matches!(e.kind, EventKind::Condensation { .. }))
    );
    assert_eq!(
        task.last_output_text().as_deref(),
        Some("SUMMARY: the user said go; a and b were echoed"),
        "without condensation the fourth response is the answer"
    );
}

/// The `(forgotten_from, forgotten_to)` of every `Condensation` in `events`.
fn condensations(events: &[agentmesh_model::event::Event]) -> Vec<(u64, u64)> {
    events
        .iter()
        .filter_map(|e| match e.kind {
            EventKind::Condensation {
                forgotten_from,
                forgotten_to,
                ..
            } => Some((forgotten_from, forgotten_to)),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_task_condensed_many_times_shows_its_last_summary_and_reads_only_its_view() {
    // Text answers only: the summarizing calls take the next response like any other call.
    let mut script = String::from("responses:\n");
    for i in 1..=80 {
        script.push_str(&format!("  - text: \"r{i}\"\n"));
    }
    let h = harness(&config("{max_events: 4, keep_recent: 2}"), &script);
    let task = h.run("t/a", "q0").await;
    let id = task.id.clone();
    for i in 1..12 {
        h.engine
            .submit(
                &id,
                json!({"message": format!("q{i}")}),
                Origin::User,
                Run::Caller,
            )
            .await
            .unwrap();
        let task = h.engine.run_until_idle(&id).await.unwrap();
        assert_eq!(task.status(), Status::Idle);
    }
    let events = h.events(&task);
    let ranges = condensations(&events);
    assert!(ranges.len() >= 3, "condensed several times: {ranges:?}");
    let record = h.engine.task(&id).unwrap();
    assert_eq!(
        record.condensed_to,
        ranges.iter().map(|r| r.1).max().unwrap()
    );
    let prompt = events
        .iter()
        .find(|e| matches!(e.kind, EventKind::SystemPromptEvent { .. }))
        .unwrap();
    assert_eq!(record.prompt_seq, prompt.seq);

    // The view: the prompt, the last summary alone (it was written with the one before it
    // in its transcript), then what came after the forgotten range.
    let view = to_messages(&events);
    let last_summary = events
        .iter()
        .rev()
        .find_map(|e| match &e.kind {
            EventKind::CondensationSummaryEvent { summary } => Some(summary.clone()),
            _ => None,
        })
        .unwrap();
    let summaries: Vec<&ChatMessage> = view
        .iter()
        .filter(
            |m| matches!(m, ChatMessage::User { content } if content.starts_with(SUMMARY_PREFIX)),
        )
        .collect();
    assert_eq!(summaries.len(), 1, "{view:?}");
    assert!(matches!(&view[0], ChatMessage::System { .. }), "{view:?}");
    assert_eq!(
        view[1],
        ChatMessage::User {
            content: format!("{SUMMARY_PREFIX}{last_summary}")
        }
    );

    // A restarted engine reads the prompt and the events past the forgotten range, and that
    // gives the same conversation as the whole log; the task goes on from it.
    let dir = h.dir;
    drop(h.engine);
    let engine = engine_at(dir.path());
    assert_eq!(engine.conversation(&id).unwrap(), view);
    engine
        .submit(&id, json!({"message": "q12"}), Origin::User, Run::Caller)
        .await
        .unwrap();
    let task = engine.run_until_idle(&id).await.unwrap();
    assert_eq!(task.status(), Status::Idle);
    let events = engine.events(&id, 0).unwrap();
    assert_eq!(engine.conversation(&id).unwrap(), to_messages(&events));
    assert_eq!(
        task.last_output_text(),
        match to_messages(&events).last() {
            Some(ChatMessage::Assistant { content, .. }) => content.clone(),
            other => panic!("the turn ends with an answer: {other:?}"),
        }
    );
}
