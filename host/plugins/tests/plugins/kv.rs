//! `notes` and the key-value store: private to (component, task), surviving between calls.
//! Two tools run by one file are two components here, each with its own entries.

use std::sync::Arc;

use agentmesh_plugins::{KvScope, KvStore, Sandbox};
use serde_json::{Value, json};

use crate::util::{load, shared};

async fn call(task: &str, action: &str, input: Value) -> Value {
    let notes = load("notes");
    let answer = notes
        .call_tool(
            &Sandbox::default(),
            "{}",
            "{}",
            task,
            action,
            &input.to_string(),
        )
        .await
        .unwrap()
        .unwrap();
    serde_json::from_str(&answer).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notes_survive_between_calls_of_one_task() {
    // Each call runs in a fresh instance: only the store carries the note across.
    let stored = call(
        "t_kv_a",
        "put",
        json!({"key": "plan", "value": "ship on friday"}),
    )
    .await;
    assert_eq!(stored, json!({"stored": "plan"}));
    call("t_kv_a", "put", json!({"key": "owner", "value": "alice"})).await;

    let got = call("t_kv_a", "get", json!({"key": "plan"})).await;
    assert_eq!(got, json!({"key": "plan", "value": "ship on friday"}));
    let listed = call("t_kv_a", "list", json!({})).await;
    assert_eq!(listed, json!({"keys": ["plan", "owner"]}));

    // The entries are in the host's store, under the component's name and the task.
    let kv = &shared().1;
    let scope = KvScope::new("notes", "t_kv_a");
    assert_eq!(
        kv.get(&scope, "note/plan").unwrap(),
        Some(b"ship on friday".to_vec())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notes_of_one_task_are_invisible_to_another() {
    call("t_kv_b", "put", json!({"key": "secret", "value": "42"})).await;
    let other = call("t_kv_c", "get", json!({"key": "secret"})).await;
    assert_eq!(other, json!({"key": "secret", "value": null}));
    let listed = call("t_kv_c", "list", json!({})).await;
    assert_eq!(listed, json!({"keys": []}));
}

/// Another tool run by the same file keeps its notes under its own name, apart from the
/// first's, and its calls are counted under its own name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_tool_on_the_same_file_keeps_its_own_notes_and_counters() {
    let notes = load("notes");
    let journal = Arc::new(notes.named("journal"));
    assert_eq!(
        (journal.path(), journal.hash(), journal.world()),
        (notes.path(), notes.hash(), notes.world())
    );
    let put = json!({"key": "plan", "value": "ship it"}).to_string();
    let stored = journal
        .call_tool(&Sandbox::default(), "{}", "{}", "t_kv_d", "put", &put)
        .await
        .unwrap();
    assert_eq!(stored.as_deref(), Ok(r#"{"stored":"plan"}"#));

    let got = call("t_kv_d", "get", json!({"key": "plan"})).await;
    assert_eq!(got, json!({"key": "plan", "value": null}));
    let kv = &shared().1;
    assert_eq!(
        kv.get(&KvScope::new("journal", "t_kv_d"), "note/plan")
            .unwrap(),
        Some(b"ship it".to_vec())
    );
    let metrics = shared().0.pool_metrics();
    let calls = metrics
        .components
        .iter()
        .find(|c| c.component == "journal")
        .map(|c| c.calls);
    assert_eq!(calls, Some(1));
}

/// `counter`, on the Rust guest SDK: `kv::set_json`/`kv::get_json` keep any JSON value under
/// a key, across fresh instances, and a session of the SDK keeps its own state between calls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdks_typed_kv_and_session_state_work_through_the_host() {
    let counter = load("counter");
    let call = |action: &'static str, input: Value| {
        let counter = counter.clone();
        async move {
            let answer = counter
                .call_tool(
                    &Sandbox::default(),
                    "{}",
                    "{}",
                    "t_sdk",
                    action,
                    &input.to_string(),
                )
                .await
                .unwrap()
                .unwrap();
            serde_json::from_str::<Value>(&answer).unwrap()
        }
    };
    let value = json!({"steps": [1, 2, 3], "done": false});
    let stored = call("remember", json!({"key": "plan", "value": value})).await;
    assert_eq!(stored, json!({"stored": "plan"}));
    let recalled = call("recall", json!({"key": "plan"})).await;
    assert_eq!(recalled, json!({"key": "plan", "value": value}));

    let mut session = agentmesh_plugins::ToolSession::lazy(
        counter.clone(),
        Sandbox::default(),
        "{}",
        "{}",
        "t_sdk",
    )
    .unwrap()
    .open()
    .await
    .unwrap();
    for expected in 1..=3 {
        let answer = session.invoke("count", "{}").await.unwrap();
        assert_eq!(
            answer.as_deref(),
            Ok(&*format!(r#"{{"count":{expected}}}"#))
        );
    }
}
