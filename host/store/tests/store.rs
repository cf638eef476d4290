//! The store on a real sled directory: logs, queues, transactions, reopening.

// Test code may panic: a panic is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use agentmesh_model::event::{ContentPart, Event, EventKind, EventSource};
use agentmesh_store::{Dedupe, Durability, PluginKv, Queues, TaskLogs};
use agentmesh_store::{Delivery, RecordWrite, SledStore, StoreError, Typed};
use serde_json::{Value, json};

fn message(text: &str) -> (EventSource, EventKind) {
    (
        EventSource::User,
        EventKind::MessageEvent {
            content: vec![ContentPart::text(text)],
            metadata: None,
        },
    )
}

/// Commits a whole record `{}` to task `task` with one message event per text.
fn commit(store: &SledStore, task: &str, texts: &[&str]) -> Vec<Event> {
    let events = texts.iter().map(|t| message(t)).collect();
    store.commit_buffered(task, &json!({}), events).unwrap()
}

#[test]
fn events_get_gapless_sequence_numbers_per_task() {
    let dir = tempfile::tempdir().unwrap();
    let store = SledStore::open(dir.path()).unwrap();
    commit(&store, "a", &["1", "2"]);
    commit(&store, "b", &["x"]);
    let third = commit(&store, "a", &["3"]);
    assert_eq!(third[0].seq, 3);
    let seqs = |after| -> Vec<u64> {
        let events = store.events("a", after).unwrap();
        events.iter().map(|e| e.seq).collect()
    };
    assert_eq!(seqs(0), [1, 2, 3]);
    assert_eq!(seqs(2), [3]);
    // From inside one write's events (1 and 2 were written together).
    assert_eq!(seqs(1), [2, 3]);
    assert!(seqs(3).is_empty());
    // A write that would leave a gap or number an event twice is refused, writing nothing.
    for first in [5, 3, 2] {
        let events = store.stamp(first, vec![message("stray")]).unwrap();
        assert!(
            store
                .write_record_buffered("a", RecordWrite::whole(&json!({})), &events, None)
                .is_err()
        );
    }
    assert_eq!(seqs(0), [1, 2, 3]);
    assert_eq!(store.events("b", 0).unwrap().len(), 1);
    assert_eq!(store.last_event_seq("a").unwrap(), 3);
}

#[test]
fn a_range_of_events_reads_only_the_entries_that_hold_it() {
    let dir = tempfile::tempdir().unwrap();
    let store = SledStore::open(dir.path()).unwrap();
    // Entries: [1, 2], [3], [4, 5, 6].
    commit(&store, "a", &["1", "2"]);
    commit(&store, "a", &["3"]);
    store
        .commit_buffered(
            "a",
            &json!({}),
            (4..=6).map(|i| message(&i.to_string())).collect(),
        )
        .unwrap();
    commit(&store, "b", &["x"]);
    let seqs = |from, to| -> Vec<u64> {
        let (events, _) = store.events_between("a", from, to).unwrap();
        events.iter().map(|e| e.seq).collect()
    };
    assert_eq!(seqs(2, 2), [2]);
    assert_eq!(seqs(2, 4), [2, 3, 4]);
    assert_eq!(seqs(5, u64::MAX), [5, 6]);
    assert!(seqs(7, 9).is_empty());
    // The first entry alone is read for event 1.
    let (_, first) = store.events_between("a", 1, 1).unwrap();
    let (_, all) = store.events_between("a", 1, u64::MAX).unwrap();
    let (_, last) = store.events_between("a", 4, 6).unwrap();
    let (_, middle) = store.events_between("a", 3, 3).unwrap();
    assert_eq!(first + middle + last, all);
}

#[test]
fn queue_is_fifo_by_queued_at_and_taken_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let store = SledStore::open(dir.path()).unwrap();
    store.enqueue_durably("t", 300, &json!("late")).unwrap();
    store.enqueue_durably("t", 100, &json!("early")).unwrap();
    store
        .enqueue_durably("t", 100, &json!("early, second"))
        .unwrap();
    store
        .enqueue_durably("other", 50, &json!("elsewhere"))
        .unwrap();
    assert_eq!(store.queued_count("t").unwrap(), 3);

    let mut taken = Vec::new();
    while let Some((key, input)) = store.next_queued::<Value>("t").unwrap() {
        let next = store.last_event_seq("t").unwrap() + 1;
        let events = store.stamp(next, vec![message("turn")]).unwrap();
        let record = json!({"n": taken.len()});
        assert!(
            store
                .write_record_buffered("t", RecordWrite::whole(&record), &events, Some(&key))
                .unwrap()
                .is_some()
        );
        // A second take of the same entry writes nothing.
        let again = store.stamp(next + 1, vec![message("again")]).unwrap();
        assert!(
            store
                .write_record_buffered("t", RecordWrite::whole(&json!({})), &again, Some(&key))
                .unwrap()
                .is_none()
        );
        taken.push(input);
    }
    assert_eq!(
        taken,
        [json!("early"), json!("early, second"), json!("late")]
    );
    assert_eq!(store.events("t", 0).unwrap().len(), 3);
    assert_eq!(store.queued_tasks().unwrap(), ["other"]);
}

#[test]
fn an_input_cleared_after_it_was_read_is_not_taken_and_a_write_behind_the_log_conflicts() {
    let dir = tempfile::tempdir().unwrap();
    let store = SledStore::open(dir.path()).unwrap();
    store
        .commit_buffered("t", &json!({"n": 0}), vec![message("start")])
        .unwrap();
    store.enqueue_durably("t", 1, &json!("input")).unwrap();
    let (key, _) = store.next_queued::<Value>("t").unwrap().unwrap();
    // The task is deleted meanwhile: its queue is cleared.
    assert_eq!(store.clear_queue_buffered("t").unwrap(), 1);
    let events = store.stamp(2, vec![message("turn")]).unwrap();
    let written = store
        .write_record_buffered(
            "t",
            RecordWrite::whole(&json!({"n": 1})),
            &events,
            Some(&key),
        )
        .unwrap();
    assert!(written.is_none());
    assert_eq!(store.task::<Value>("t").unwrap(), Some(json!({"n": 0})));
    assert_eq!(store.last_event_seq("t").unwrap(), 1);

    // Events 2..3, then a write starting again at 2 (ending elsewhere): refused.
    let events = store.stamp(2, vec![message("a"), message("b")]).unwrap();
    store
        .write_record_buffered("t", RecordWrite::whole(&json!({"n": 2})), &events, None)
        .unwrap()
        .unwrap();
    let behind = store
        .stamp(2, vec![message("c"), message("d"), message("e")])
        .unwrap();
    assert!(matches!(
        store.write_record_buffered("t", RecordWrite::whole(&json!({"n": 3})), &behind, None),
        Err(StoreError::Conflict(_))
    ));
    assert_eq!(store.last_event_seq("t").unwrap(), 3);
    assert_eq!(store.task::<Value>("t").unwrap(), Some(json!({"n": 2})));
}

#[test]
fn everything_survives_reopening() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = SledStore::open(dir.path()).unwrap();
        store
            .commit_buffered("t", &json!({"status": "idle"}), vec![message("hello")])
            .unwrap();
        store.enqueue_durably("t", 1, &json!("queued")).unwrap();
        store.kv_put_buffered("comp/t", "k", b"v").unwrap();
        store.flush().unwrap();
    }
    let store = SledStore::open(dir.path()).unwrap();
    assert_eq!(
        store.task::<Value>("t").unwrap(),
        Some(json!({"status": "idle"}))
    );
    assert_eq!(store.events("t", 0).unwrap().len(), 1);
    assert_eq!(
        store.next_queued::<Value>("t").unwrap().map(|(_, v)| v),
        Some(json!("queued"))
    );
    assert_eq!(store.kv_value("comp/t", "k").unwrap(), Some(b"v".to_vec()));
    assert_eq!(store.kv_value("comp/other", "k").unwrap(), None);
}

#[test]
fn tasks_whose_ids_share_a_prefix_keep_their_logs_and_queues_apart() {
    let dir = tempfile::tempdir().unwrap();
    let store = SledStore::open(dir.path()).unwrap();
    commit(&store, "t1", &["1", "2"]);
    store.enqueue_durably("t1", 1, &json!("for t1")).unwrap();
    // "t" has nothing yet: nothing of "t1" (the next keys in order) is its.
    assert_eq!(store.last_event_seq("t").unwrap(), 0);
    assert!(store.next_queued::<Value>("t").unwrap().is_none());
    commit(&store, "t", &["x"]);
    store.enqueue_durably("t", 2, &json!("for t")).unwrap();
    assert_eq!(store.last_event_seq("t").unwrap(), 1);
    assert_eq!(store.last_event_seq("t1").unwrap(), 2);
    assert_eq!(
        store.next_queued::<Value>("t").unwrap().map(|(_, v)| v),
        Some(json!("for t"))
    );
    assert_eq!(
        store.next_queued::<Value>("t1").unwrap().map(|(_, v)| v),
        Some(json!("for t1"))
    );
    assert_eq!(store.last_event_seq("t2").unwrap(), 0);
    assert!(store.next_queued::<Value>("t2").unwrap().is_none());
}

#[test]
fn a_delivery_is_queued_once_and_inputs_without_one_are_queued_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let store = SledStore::open(dir.path()).unwrap();
    let until = agentmesh_store::now_ms() + 60_000;
    let inputs = [("a", 10, &json!("for a")), ("b", 10, &json!("for b"))];
    let first = store
        .deliver_durably(Some(("d-1", until)), &inputs)
        .unwrap();
    assert!(matches!(&first, Delivery::Queued { keys, .. } if keys.len() == 2));
    assert!(store.is_remembered("d-1").unwrap());
    // The repeat queues nothing, on any task.
    let again = store.deliver_durably(Some(("d-1", until)), &[("c", 11, &json!("for c"))]);
    assert_eq!(again.unwrap(), Delivery::Duplicate);
    assert_eq!(
        (
            store.queued_count("a").unwrap(),
            store.queued_count("b").unwrap(),
            store.queued_count("c").unwrap()
        ),
        (1, 1, 0)
    );
    // Without a delivery id: one input, then several at once, taken in `queued_at` order.
    store
        .deliver_durably(None, &[("a", 30, &json!("third"))])
        .unwrap();
    let two = [("a", 20, &json!("second")), ("b", 20, &json!("b, second"))];
    assert!(
        matches!(store.deliver_durably(None, &two).unwrap(), Delivery::Queued { keys, .. } if keys.len() == 2)
    );
    let mut taken = Vec::new();
    while let Some((key, input)) = store.next_queued::<Value>("a").unwrap() {
        let next = store.last_event_seq("a").unwrap() + 1;
        let events = store.stamp(next, vec![message("turn")]).unwrap();
        store
            .write_record_buffered("a", RecordWrite::whole(&json!({})), &events, Some(&key))
            .unwrap();
        taken.push(input);
    }
    assert_eq!(taken, [json!("for a"), json!("second"), json!("third")]);
    assert_eq!(store.queued_count("b").unwrap(), 2);
    // All of it is on disk.
    drop(store);
    let store = SledStore::open(dir.path()).unwrap();
    assert_eq!(store.queued_count("b").unwrap(), 2);
    assert!(store.is_remembered("d-1").unwrap());
}
