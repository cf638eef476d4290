//! Condensation: past the host's event budget the older conversation is replaced, in the
//! LLM's view only, by a summary the LLM writes; the log keeps every event.

use agentmesh_engine::Status;
use agentmesh_llm::{ChatMessage, SUMMARY_PREFIX, to_messages};
use agentmesh_store::event::EventKind;

use crate::util::{echo_agent, harness};

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
    let (from, to) = events
        .iter()
        .find_map(|e| match e.kind {
            EventKind::Condensation {
                forgotten_from,
                forgotten_to,
                ..
            } => Some((forgotten_from, forgotten_to)),
            _ => None,
        })
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
