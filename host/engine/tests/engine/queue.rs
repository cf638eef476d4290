//! One FIFO per task: human input, webhook events and wakeups arriving in any interleaving,
//! while turns run, are processed one turn at a time in `queued_at` order.

use std::time::Duration;

use agentmesh_engine::Run;
use agentmesh_model::event::{EventKind, EventSource};
use proptest::prelude::*;
use serde_json::json;

use crate::util::{SCRIPTED_AGENT, harness};

/// Who sends an input.
#[derive(Debug, Clone, Copy)]
enum Origin {
    Human,
    Webhook,
    Wakeup,
}

fn origin() -> impl Strategy<Value = Origin> {
    prop_oneof![
        Just(Origin::Human),
        Just(Origin::Webhook),
        Just(Origin::Wakeup)
    ]
}

/// How input `n` from `origin` arrives at the engine.
fn arrival(origin: Origin, n: usize) -> agentmesh_engine::Origin {
    match origin {
        Origin::Human => agentmesh_engine::Origin::User,
        Origin::Webhook => agentmesh_engine::Origin::Webhook { auth_subject: None },
        Origin::Wakeup => agentmesh_engine::Origin::Wakeup {
            id: format!("wk_{n}"),
        },
    }
}

/// The trigger source its envelope names (none for a human's input).
fn source(origin: Origin) -> Option<&'static str> {
    match origin {
        Origin::Human => None,
        Origin::Webhook => Some("webhook"),
        Origin::Wakeup => Some("self-schedule"),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    #[test]
    fn interleaved_inputs_run_one_turn_at_a_time_in_queued_at_order(
        inputs in prop::collection::vec((origin(), 0u64..3), 1..12)
    ) {
        let runtime = agentmesh_testkit::engine::runtime();
        runtime.block_on(async {
            let h = harness(SCRIPTED_AGENT, "responses:\n  - text: first\n");
            let task = h
                .engine
                .create_task(agentmesh_engine::NewTask {
                    agent: "t/a".into(),
                    input: None,
                    user: agentmesh_engine::UserRef { id: "user:alice".into(), email: None },
                }, Run::Caller)
                .await
                .unwrap();
            // Inputs arrive while earlier ones run: each is queued and the runner kicked.
            for (n, (origin, pause_ms)) in inputs.iter().enumerate() {
                h.engine
                    .submit(&task.id, json!({"message": format!("m{n}")}), arrival(*origin, n), Run::Background)
                    .await
                    .unwrap();
                tokio::time::sleep(Duration::from_millis(*pause_ms)).await;
            }
            for _ in 0..400 {
                if !h.engine.is_busy(&task.id) && h.engine.store().queued_count(&task.id).unwrap() == 0 {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            let events = h.engine.events(&task.id, 0).unwrap();
            let mut texts = Vec::new();
            let mut queued = Vec::new();
            let mut status = "idle".to_owned();
            for e in &events {
                match &e.kind {
                    EventKind::MessageEvent { content, metadata } if e.source == EventSource::User => {
                        // A turn starts only when the previous one has ended.
                        assert_eq!(status, "idle", "a turn started while another ran");
                        let text = content[0].text.clone().unwrap_or_default();
                        let n: usize = text[1..].parse().unwrap();
                        texts.push(text);
                        let meta = metadata.as_ref().unwrap();
                        queued.push(meta.queued_at.unwrap());
                        assert_eq!(
                            meta.trigger.as_ref().map(|t| t.source.as_str()),
                            source(inputs[n].0),
                        );
                    }
                    EventKind::ConversationStateUpdateEvent { key, value } if key == "status" => {
                        status = value.as_str().unwrap().to_owned();
                    }
                    _ => {}
                }
            }
            let expected: Vec<String> = (0..inputs.len()).map(|n| format!("m{n}")).collect();
            assert_eq!(texts, expected, "every input, in arrival order");
            assert!(queued.windows(2).all(|w| w[0] <= w[1]), "in queued_at order: {queued:?}");
        });
    }
}

#[tokio::test]
async fn an_interrupted_task_holds_input_no_person_sent_until_a_person_sends_some() {
    let script = "responses:
  - text: one
  - text: two
  - text: three
  - text: four
";
    let h = harness(SCRIPTED_AGENT, script);
    let id = h.run("t/a", "hi").await.id.clone();
    let submit = async |text: &str, origin: agentmesh_engine::Origin| {
        h.engine
            .submit(&id, json!({"message": text}), origin, Run::Caller)
            .await
            .unwrap();
    };
    // An event queued before the interrupt, a wakeup after it: no person sent either.
    submit("event", arrival(Origin::Webhook, 1)).await;
    h.engine.interrupt(&id).await.unwrap();
    submit("wake", arrival(Origin::Wakeup, 2)).await;
    let held = h.engine.run_until_idle(&id).await.unwrap();
    assert!(
        held.interrupted,
        "the interrupt was lifted: {:?}",
        held.inputs
    );
    assert_eq!(held.outputs.len(), 1, "a turn ran: {:?}", held.inputs);
    assert_eq!(h.engine.queued_inputs(&id, 10).unwrap().len(), 2);
    // A person's input lifts the interrupt: what waited runs first, in order.
    submit("back", arrival(Origin::Human, 3)).await;
    let back = h.engine.run_until_idle(&id).await.unwrap();
    assert!(!back.interrupted, "the interrupt was not lifted");
    let asked: Vec<_> = back
        .inputs
        .iter()
        .map(|i| i["message"][0]["text"].clone())
        .collect();
    assert_eq!(asked, ["hi", "event", "wake", "back"]);
    assert_eq!(back.last_output_text().as_deref(), Some("four"));
}
