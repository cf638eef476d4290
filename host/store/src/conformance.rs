//! The suite every store backend must pass, whatever it stores in: each check opens the
//! backend in a directory of its own (through the caller's `open`, twice where it checks what
//! survives a reopen) and panics, saying what broke, when the backend does not hold the
//! property. `host/store/tests/conformance.rs` runs it for sled; another backend's tests run
//! [`ALL`] the same way.
//!
//! What a crash in the middle of a write leaves can only be staged inside a backend (sled's
//! own tests in `head.rs` cut its writes short); the suite checks the refusals that must write
//! nothing, and what a flush makes durable across a reopen.

// A conformance check reports a broken property by panicking with what broke.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::sync::Arc;

use agentmesh_model::event::{Event, EventKind, EventSource};

use crate::{Backend, Delivery, Durable, RawWrite, StoreError};

/// Opens the backend under test on `dir` (the same `dir` again reopens it).
pub type Open<'a> = &'a dyn Fn(&Path) -> Arc<dyn Backend>;

/// One check: the backend opened with `open` in `dir` holds a property, or it panics.
pub type Check = fn(&Path, Open<'_>);

/// Every check, by name, for a backend's test to run one by one.
pub const ALL: [(&str, Check); 10] = [
    ("queue_order_and_take_once", queue_order_and_take_once),
    (
        "a_write_that_does_not_continue_the_log_writes_nothing",
        log_continuity,
    ),
    (
        "events_read_between_any_two_numbers_whatever_writes_held_them",
        events_between,
    ),
    ("a_delivery_id_queues_once_within_its_window", dedupe),
    (
        "what_a_flush_made_durable_survives_a_reopen",
        durable_across_reopen,
    ),
    (
        "concurrent_writers_share_flushes_and_lose_nothing",
        group_commit,
    ),
    (
        "a_deferred_delivery_is_durable_once_its_wait_ends",
        deferred_delivery,
    ),
    (
        "host_state_and_plugin_kv_by_namespace_and_scope",
        state_and_kv,
    ),
    (
        "every_buffered_write_counts_for_the_next_flush",
        buffered_writes_counted,
    ),
    (
        "the_append_hook_hears_of_each_write_with_events",
        append_hook,
    ),
];

/// Events `first` to `first + n - 1` of a log (pauses, as a backend stores any event).
pub fn events(first: u64, n: u64) -> Vec<Event> {
    (first..first + n)
        .map(|seq| Event {
            seq,
            id: format!("ev_{seq}"),
            timestamp: "2026-01-01T00:00:00.000Z".into(),
            source: EventSource::Environment,
            kind: EventKind::PauseEvent {},
        })
        .collect()
}

fn record(head: &[u8]) -> RawWrite<'_> {
    RawWrite {
        head,
        parts: 0,
        new_part: None,
        active: false,
    }
}

/// Inputs come out in `queued_at` order (then arrival), per task; the write that takes one
/// removes it with the record, says whether it took the last one, and a write taking one
/// already taken writes nothing.
pub fn queue_order_and_take_once(dir: &Path, open: Open<'_>) {
    let b = open(dir);
    let queued = b
        .queue_durably(
            None,
            &[
                ("t_1", 30, b"\"c\""),
                ("t_1", 10, b"\"a\""),
                ("t_2", 5, b"\"x\""),
            ],
        )
        .unwrap();
    let Delivery::Queued { keys, told } = queued else {
        panic!("inputs without a delivery id were not queued: {queued:?}")
    };
    assert_eq!(keys.len(), 3);
    assert!(told.is_empty(), "no other host holds these tasks: {told:?}");
    b.queue_durably(None, &[("t_1", 20, b"\"b\"")]).unwrap();
    assert_eq!(b.queued_count("t_1").unwrap(), 3);
    let listed: Vec<Vec<u8>> = b
        .queued("t_1", 10)
        .unwrap()
        .into_iter()
        .map(|(_, input)| input)
        .collect();
    assert_eq!(
        listed,
        [b"\"a\"".to_vec(), b"\"b\"".to_vec(), b"\"c\"".to_vec()]
    );
    assert_eq!(b.queued("t_1", 1).unwrap().len(), 1);
    assert_eq!(b.queued_tasks().unwrap(), ["t_1", "t_2"]);
    let mut seen = Vec::new();
    let mut seq = 0;
    while let Some((key, input)) = b.first_queued("t_1").unwrap() {
        seq += 1;
        let written = b
            .write_buffered("t_1", record(b"{}"), &events(seq, 1), Some(&key))
            .unwrap();
        let Some(written) = written else {
            panic!("taking a queued input wrote nothing")
        };
        // The write says whether it took the last input (the runner then asks no more).
        assert_eq!(
            written.queue_empty,
            seq == 3,
            "write {seq} of 3 said the queue was empty: {}",
            written.queue_empty
        );
        // The same entry again: gone, so nothing is written.
        let again = b
            .write_buffered(
                "t_1",
                record(b"{\"again\":1}"),
                &events(seq + 1, 1),
                Some(&key),
            )
            .unwrap();
        assert!(again.is_none(), "an input was taken twice");
        assert_eq!(
            b.last_event_seq("t_1").unwrap(),
            seq,
            "a refused take wrote events"
        );
        seen.push(String::from_utf8(input).unwrap());
    }
    assert_eq!(seen, ["\"a\"", "\"b\"", "\"c\""]);
    assert_eq!(
        b.queued_count("t_2").unwrap(),
        1,
        "another task's queue changed"
    );
    assert_eq!(b.clear_queue_buffered("t_2").unwrap(), 1);
    assert!(b.first_queued("t_2").unwrap().is_none());
}

/// A write whose events leave a gap, or start behind the log's end, is a conflict and writes
/// nothing: neither its events nor its record.
pub fn log_continuity(dir: &Path, open: Open<'_>) {
    let b = open(dir);
    b.write_buffered("t_1", record(b"{\"v\":1}"), &events(1, 2), None)
        .unwrap();
    for first in [4, 2] {
        let refused = b.write_buffered("t_1", record(b"{\"v\":2}"), &events(first, 1), None);
        assert!(
            matches!(refused, Err(StoreError::Conflict(_))),
            "events from {first} after 2 were not a conflict: {refused:?}"
        );
    }
    assert_eq!(b.last_event_seq("t_1").unwrap(), 2);
    assert_eq!(b.record("t_1").unwrap().unwrap().head, b"{\"v\":1}");
    let (log, _) = b.events_between("t_1", 1, u64::MAX).unwrap();
    assert_eq!(log.iter().map(|e| e.seq).collect::<Vec<_>>(), [1, 2]);
}

/// Events read between any two numbers are exactly those numbers of the log, in order,
/// wherever the writes that appended them began and ended.
pub fn events_between(dir: &Path, open: Open<'_>) {
    let b = open(dir);
    for (first, n) in [(1, 3), (4, 3), (7, 3), (10, 1)] {
        b.write_buffered("t_1", record(b"{}"), &events(first, n), None)
            .unwrap();
    }
    for from in 0..=11 {
        for to in from..=12 {
            let (log, _) = b.events_between("t_1", from, to).unwrap();
            let read: Vec<u64> = log.iter().map(|e| e.seq).collect();
            let want: Vec<u64> = (from.max(1)..=to.min(10)).collect();
            assert_eq!(read, want, "events {from}..={to}");
        }
    }
    let (log, _) = b.events_between("t_1", 5, u64::MAX).unwrap();
    assert_eq!(log.len(), 6);
    assert!(b.events_between("t_2", 0, u64::MAX).unwrap().0.is_empty());
}

/// A delivery id is remembered for its window: a repeat within it queues nothing, the id is
/// forgotten once the window has passed.
pub fn dedupe(dir: &Path, open: Open<'_>) {
    let b = open(dir);
    let far = i64::MAX / 2;
    let first = b
        .queue_durably(Some(("d-1", far)), &[("t_1", 1, b"1")])
        .unwrap();
    assert!(
        matches!(first, Delivery::Queued { ref keys, .. } if keys.len() == 1),
        "{first:?}"
    );
    let again = b
        .queue_durably(Some(("d-1", far)), &[("t_1", 2, b"2")])
        .unwrap();
    assert_eq!(again, Delivery::Duplicate);
    assert_eq!(
        b.queued_count("t_1").unwrap(),
        1,
        "a duplicate queued input"
    );
    assert!(b.is_remembered("d-1").unwrap());
    // A window that has passed: not a duplicate, and forgotten by the sweep.
    b.queue_durably(Some(("d-old", 1)), &[("t_2", 1, b"1")])
        .unwrap();
    assert!(!b.is_remembered("d-old").unwrap());
    assert!(b.forget_expired_buffered().unwrap() >= 1);
    assert!(
        b.is_remembered("d-1").unwrap(),
        "the sweep forgot a live id"
    );
}

/// What was written and flushed (and what was queued durably) reads back the same after the
/// backend is closed and opened again.
pub fn durable_across_reopen(dir: &Path, open: Open<'_>) {
    {
        let b = open(dir);
        let w = RawWrite {
            head: b"{\"status\":\"idle\"}",
            parts: 2,
            new_part: Some(b"[2]"),
            active: false,
        };
        b.write_buffered(
            "t_1",
            RawWrite {
                head: b"{}",
                parts: 1,
                new_part: Some(b"[1]"),
                active: false,
            },
            &events(1, 1),
            None,
        )
        .unwrap();
        b.write_buffered("t_1", w, &events(2, 2), None).unwrap();
        b.queue_durably(None, &[("t_1", 7, b"\"next\"")]).unwrap();
        b.put_state_buffered("wakeup", "wk_1", b"{\"n\":1}")
            .unwrap();
        b.kv_put_buffered("notes/t_1", "k", b"v").unwrap();
        b.flush().unwrap();
    }
    let b = open(dir);
    let rec = b.record("t_1").unwrap().expect("the record is gone");
    assert_eq!(rec.head, b"{\"status\":\"idle\"}");
    assert_eq!(rec.parts, [b"[1]".to_vec(), b"[2]".to_vec()]);
    assert_eq!(b.last_event_seq("t_1").unwrap(), 3);
    assert_eq!(b.events_between("t_1", 2, 3).unwrap().0.len(), 2);
    let (_, input) = b.first_queued("t_1").unwrap().expect("the input is gone");
    assert_eq!(input, b"\"next\"");
    assert_eq!(
        b.state_value("wakeup", "wk_1").unwrap().as_deref(),
        Some(&b"{\"n\":1}"[..])
    );
    assert_eq!(
        b.kv_value("notes/t_1", "k").unwrap().as_deref(),
        Some(&b"v"[..])
    );
    assert_eq!(b.record_ids().unwrap(), ["t_1"]);
    let id = b.next_id().unwrap();
    assert!(b.next_id().unwrap() > id, "ids do not grow");
}

/// Writers of different tasks flushing at once each get their flush, and every write is
/// there after a reopen.
pub fn group_commit(dir: &Path, open: Open<'_>) {
    const WRITERS: usize = 8;
    const WRITES: u64 = 20;
    {
        let b = open(dir);
        std::thread::scope(|s| {
            for w in 0..WRITERS {
                let b = Arc::clone(&b);
                s.spawn(move || {
                    let task = format!("t_{w}");
                    for seq in 1..=WRITES {
                        b.write_buffered(&task, record(b"{}"), &events(seq, 1), None)
                            .unwrap();
                        b.flush().unwrap();
                    }
                });
            }
        });
        assert!(b.write_count() >= WRITERS as u64 * WRITES);
    }
    let b = open(dir);
    for w in 0..WRITERS {
        assert_eq!(
            b.last_event_seq(&format!("t_{w}")).unwrap(),
            WRITES,
            "writer {w}"
        );
    }
}

/// Deliveries queued deferred, their waits awaited at once on a runtime, are all there after
/// a reopen, each id remembered; a repeat of an id is a duplicate that writes nothing and
/// whose wait ends too.
pub fn deferred_delivery(dir: &Path, open: Open<'_>) {
    const DELIVERIES: usize = 8;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    {
        let b = open(dir);
        let waits: Vec<Durable> = (0..DELIVERIES)
            .map(|i| {
                let (id, task) = (format!("d-{i}"), format!("t_{i}"));
                let (outcome, wait) = b
                    .queue_deferred(Some((&id, i64::MAX)), &[(&task, 1, b"1")])
                    .unwrap();
                assert!(matches!(outcome, Delivery::Queued { .. }), "delivery {i}");
                wait
            })
            .collect();
        runtime.block_on(async {
            let waiting: Vec<_> = waits.into_iter().map(tokio::spawn).collect();
            for (i, w) in waiting.into_iter().enumerate() {
                w.await.unwrap().unwrap_or_else(|e| panic!("wait {i}: {e}"));
            }
        });
        let (again, wait) = b
            .queue_deferred(Some(("d-0", i64::MAX)), &[("t_0", 2, b"2")])
            .unwrap();
        assert_eq!(again, Delivery::Duplicate);
        runtime.block_on(wait).unwrap();
    }
    let b = open(dir);
    for i in 0..DELIVERIES {
        let (_, input) = b
            .first_queued(&format!("t_{i}"))
            .unwrap()
            .unwrap_or_else(|| panic!("delivery {i} is gone after a reopen"));
        assert_eq!(input, b"1");
        assert!(b.is_remembered(&format!("d-{i}")).unwrap(), "id d-{i}");
    }
    assert_eq!(b.queued_count("t_0").unwrap(), 1, "the repeat was queued");
}

/// Host state is kept by namespace and plugin values by scope: one never reads another's.
pub fn state_and_kv(dir: &Path, open: Open<'_>) {
    let b = open(dir);
    b.put_state_buffered("trigger", "a", b"1").unwrap();
    b.put_state_buffered("trigger", "b", b"2").unwrap();
    b.put_state_buffered("trigge", "rx", b"3").unwrap();
    let values = b.state_values("trigger").unwrap();
    assert_eq!(
        values,
        [
            ("a".to_owned(), b"1".to_vec()),
            ("b".to_owned(), b"2".to_vec())
        ]
    );
    b.delete_state_buffered("trigger", "a").unwrap();
    assert!(b.state_value("trigger", "a").unwrap().is_none());
    b.kv_put_buffered("c/t_1", "k", b"1").unwrap();
    b.kv_put_buffered("ns/d/t_1", "k", b"1").unwrap();
    b.kv_put_buffered("c/t_12", "k", b"2").unwrap();
    b.kv_put_buffered("c/xt_1", "k", b"3").unwrap();
    // Every component's scope of the task, and no other task's.
    b.kv_clear_task_buffered("t_1").unwrap();
    assert!(b.kv_value("c/t_1", "k").unwrap().is_none());
    assert!(b.kv_value("ns/d/t_1", "k").unwrap().is_none());
    assert_eq!(
        b.kv_value("c/t_12", "k").unwrap().as_deref(),
        Some(&b"2"[..])
    );
    assert_eq!(
        b.kv_value("c/xt_1", "k").unwrap().as_deref(),
        Some(&b"3"[..])
    );
    b.kv_delete_buffered("c/t_12", "k").unwrap();
    assert!(b.kv_value("c/t_12", "k").unwrap().is_none());
}

/// One write of [`buffered_writes_counted`].
type Write = dyn Fn(&dyn Backend);

/// Every buffered write advances the write count, which is what a flush covers: a write left
/// out of it could be skipped by a flush that finds nothing new since the last one, and be
/// lost in a crash after its caller was told it is durable.
pub fn buffered_writes_counted(dir: &Path, open: Open<'_>) {
    let b = open(dir);
    b.queue_durably(None, &[("t", 1, b"1"), ("t", 2, b"2")])
        .unwrap();
    b.flush().unwrap();
    let writes: [(&str, &Write); 9] = [
        ("write_buffered", &|b| {
            b.write_buffered("t", record(b"{}"), &events(1, 1), None)
                .map(|_| ())
                .unwrap()
        }),
        ("clear_queue_buffered", &|b| {
            b.clear_queue_buffered("t").map(|_| ()).unwrap()
        }),
        ("put_state_buffered", &|b| {
            b.put_state_buffered("ns", "k", b"1").unwrap()
        }),
        ("delete_state_buffered", &|b| {
            b.delete_state_buffered("ns", "k").unwrap()
        }),
        ("kv_put_buffered", &|b| {
            b.kv_put_buffered("s", "k", b"1").unwrap()
        }),
        ("kv_delete_buffered", &|b| {
            b.kv_delete_buffered("s", "k").unwrap()
        }),
        ("kv_put_buffered again", &|b| {
            b.kv_put_buffered("s", "k", b"2").unwrap()
        }),
        ("kv_clear_task_buffered", &|b| {
            b.kv_clear_task_buffered("t").unwrap()
        }),
        ("queue_durably", &|b| {
            b.queue_durably(Some(("d-1", i64::MAX)), &[("u", 1, b"1")])
                .map(|_| ())
                .unwrap()
        }),
    ];
    for (name, write) in writes {
        let before = b.write_count();
        write(b.as_ref());
        assert!(
            b.write_count() > before,
            "`{name}` did not advance the write count"
        );
    }
}

/// The hook set with [`crate::TaskLogs::set_append_hook`] is told the task of every write
/// that appends events, and of no other.
pub fn append_hook(dir: &Path, open: Open<'_>) {
    let b = open(dir);
    let (tx, rx) = std::sync::mpsc::channel();
    let tx = std::sync::Mutex::new(tx);
    b.set_append_hook(Box::new(move |task| {
        let _ = tx.lock().unwrap().send(task.to_owned());
    }));
    b.write_buffered("a", record(b"{}"), &events(1, 2), None)
        .unwrap();
    b.write_buffered("b", record(b"{}"), &[], None).unwrap();
    b.write_buffered("c", record(b"{}"), &events(1, 1), None)
        .unwrap();
    let heard: Vec<String> = rx.try_iter().collect();
    assert_eq!(heard, ["a", "c"]);
}
