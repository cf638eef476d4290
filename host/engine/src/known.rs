//! Each task's queue as far as this host knows it without asking the store
//! ([`KnownQueues`]): every write says whether it left the queue empty, the door says what it
//! queued, the runner takes from it. [`crate::records::Records`] keeps one for the engine.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use agentmesh_store::QueueKey;

use crate::{QueuedInput, lock};

/// Tasks whose queue is tracked at most; past it every task's queue is unknown again (and read
/// from the store at its next turn).
const MAX_TASKS: usize = 65_536;

/// Inputs known of one task's queue at most; past it the queue is unknown again (its inputs
/// stay in the store, read one by one).
const MAX_KNOWN: usize = 64;

/// One task's queue as known here (`K`: a queue entry's key).
struct Known<K> {
    /// Moved on by every change made here (see [`KnownQueues`]).
    generation: u64,
    /// The task's queue, in order, when known exactly; `None` when it must be read.
    queue: Option<VecDeque<(K, Box<QueuedInput>)>>,
    /// The latest entry a write here took: the door's word of an entry up to it comes late
    /// (the runner may have read it from the store and taken it already).
    last_taken: Option<K>,
}

impl<K> Default for Known<K> {
    fn default() -> Self {
        Known {
            generation: 0,
            queue: None,
            last_taken: None,
        }
    }
}

/// What the runner does next for a task (see [`KnownQueues::next`]).
#[derive(Debug)]
pub(crate) enum Next<K = QueueKey> {
    /// Runs this input, the earliest queued (taken out of the known queue).
    Input(K, Box<QueuedInput>),
    /// Nothing is queued.
    Idle,
    /// The queue is not known here: read the store.
    Ask,
}

/// What this host knows of each task's queue without asking the store, so that a turn need
/// not ask for its input: on PostgreSQL each question is a round trip.
///
/// A task's queue is known exactly from the moment a write of its record says the queue was
/// empty after it ([`Written::queue_empty`](agentmesh_store::Written)); from then on the door
/// adds what it queues for the task on this host ([`KnownQueues::queued`]) and the runner takes
/// from it ([`KnownQueues::next`]) instead of reading the store. Anything else that may change
/// the queue makes it unknown again ([`KnownQueues::forget`]): input another host queued (it
/// kicks the runner), another host's write, a missed notice, a takeover, a cleared queue, a
/// failed turn. Unknown, the runner reads the store as before.
///
/// A write's answer may be stale by the time it is heard: the door may have queued in between.
/// Each task has a generation, moved on by every change made here; a write takes a ticket (the
/// generation) before it starts, and its answer counts only if the generation is unchanged
/// when it is heard ([`KnownQueues::written`]). Input the door queued before the write read the
/// queue makes the write's answer "not empty"; input queued after it is added by the door once
/// it is written, after the answer or (moving the generation on) instead of it.
///
/// Entries are keyed by `K`.
pub(crate) struct KnownQueues<K = QueueKey> {
    tasks: Mutex<HashMap<String, Known<K>>>,
}

impl<K> Default for KnownQueues<K> {
    fn default() -> Self {
        KnownQueues {
            tasks: Mutex::default(),
        }
    }
}

impl<K: Ord> KnownQueues<K> {
    /// The next input of task `id`, taken out of its known queue, or that the store must be
    /// asked. Call holding the task's lock, as its runner.
    pub(crate) fn next(&self, id: &str) -> Next<K> {
        let mut tasks = lock(&self.tasks);
        let Some(queue) = tasks.get_mut(id).and_then(|k| k.queue.as_mut()) else {
            return Next::Ask;
        };
        match queue.pop_front() {
            Some((key, input)) => Next::Input(key, input),
            None => Next::Idle,
        }
    }

    /// Whether task `id`'s queue is known exactly here (nothing of it is only in the store).
    pub(crate) fn is_known(&self, id: &str) -> bool {
        lock(&self.tasks)
            .get(id)
            .is_some_and(|known| known.queue.is_some())
    }

    /// A ticket for a write of task `id`'s record: give it to [`KnownQueues::written`] with the
    /// write's answer.
    pub(crate) fn ticket(&self, id: &str) -> u64 {
        let mut tasks = lock(&self.tasks);
        if let Some(known) = tasks.get(id) {
            return known.generation;
        }
        if tasks.len() >= MAX_TASKS {
            tasks.clear();
        }
        tasks.entry(id.to_owned()).or_default().generation
    }

    /// A write of task `id`'s record that took `ticket` (and the queue entry `taken`, if it
    /// took one) found the queue empty once it was done (`queue_empty`), or not. An empty queue
    /// becomes known unless something changed it here since the ticket; a queue that is not
    /// empty stays as known (the runner's own view, when exact) or unknown.
    pub(crate) fn written(&self, id: &str, ticket: u64, taken: Option<K>, queue_empty: bool) {
        let mut tasks = lock(&self.tasks);
        let Some(known) = tasks.get_mut(id) else {
            return;
        };
        if let Some(taken) = taken
            && known.last_taken.as_ref().is_none_or(|last| taken > *last)
        {
            known.last_taken = Some(taken);
        }
        if known.generation != ticket {
            return;
        }
        match (&known.queue, queue_empty) {
            (_, true) => known.queue = Some(VecDeque::new()),
            // The runner took what it knows; the store holds more than that.
            (Some(queue), false) if queue.is_empty() => known.queue = None,
            (_, false) => {}
        }
    }

    /// The door queued `input` as `key` for task `id` (written to the store): a known queue
    /// grows by it. Call once the write is done, before the task's runner is woken. A key not
    /// past the latest one taken here makes the queue unknown: the runner may have read and
    /// taken that entry already, or it was queued behind one taken (it is read from the store).
    pub(crate) fn queued(&self, id: &str, key: K, input: QueuedInput) {
        let mut tasks = lock(&self.tasks);
        let Some(known) = tasks.get_mut(id) else {
            return;
        };
        known.generation += 1;
        if known.last_taken.as_ref().is_some_and(|last| key <= *last) {
            known.queue = None;
        }
        if let Some(queue) = &mut known.queue {
            if queue.len() < MAX_KNOWN {
                queue.push_back((key, Box::new(input)));
            } else {
                known.queue = None;
            }
        }
    }

    /// Task `id`'s queue may have changed other than through this host's door: it is read
    /// from the store at the next turn.
    pub(crate) fn forget(&self, id: &str) {
        let mut tasks = lock(&self.tasks);
        if let Some(known) = tasks.get_mut(id) {
            known.generation += 1;
            known.queue = None;
        }
    }

    /// Every task's queue may have changed: each is read from the store at its next turn.
    pub(crate) fn forget_all(&self) {
        let mut tasks = lock(&self.tasks);
        for known in tasks.values_mut() {
            known.generation += 1;
            known.queue = None;
        }
    }
}

#[cfg(test)]
#[allow(clippy::panic)] // Tests fail loudly.
mod tests {
    use serde_json::json;

    use super::*;

    fn input(n: i64) -> QueuedInput {
        QueuedInput {
            io: json!({"message": n}),
            queued_at: n,
            trigger: None,
            lock: None,
        }
    }

    fn key(n: u8) -> u8 {
        n
    }

    fn taken(next: Next<u8>) -> i64 {
        match next {
            Next::Input(_, input) => input.queued_at,
            other => panic!("expected an input, got {other:?}"),
        }
    }

    #[test]
    fn a_queue_is_unknown_until_a_write_finds_it_empty() {
        let known = KnownQueues::<u8>::default();
        assert!(matches!(known.next("t"), Next::Ask));
        // The door's input for an unknown queue changes nothing: the runner reads the store.
        known.queued("t", key(1), input(1));
        assert!(matches!(known.next("t"), Next::Ask));
        let ticket = known.ticket("t");
        known.written("t", ticket, None, false);
        assert!(matches!(known.next("t"), Next::Ask));
        let ticket = known.ticket("t");
        known.written("t", ticket, None, true);
        assert!(matches!(known.next("t"), Next::Idle));
    }

    #[test]
    fn the_door_adds_to_a_known_queue_in_order() {
        let known = KnownQueues::<u8>::default();
        let ticket = known.ticket("t");
        known.written("t", ticket, None, true);
        known.queued("t", key(1), input(1));
        known.queued("t", key(2), input(2));
        assert_eq!(taken(known.next("t")), 1);
        // The write that takes the first finds the second still queued: the runner's view
        // (one left) stands.
        let ticket = known.ticket("t");
        known.written("t", ticket, None, false);
        assert_eq!(taken(known.next("t")), 2);
        let ticket = known.ticket("t");
        known.written("t", ticket, None, true);
        assert!(matches!(known.next("t"), Next::Idle));
    }

    #[test]
    fn an_answer_older_than_the_doors_input_does_not_count() {
        let known = KnownQueues::<u8>::default();
        // A write starts; the door queues for the task while it runs; the write found the
        // queue empty before the input arrived. Its answer must not hide the input.
        let ticket = known.ticket("t");
        known.queued("t", key(1), input(1));
        known.written("t", ticket, None, true);
        assert!(matches!(known.next("t"), Next::Ask));
    }

    #[test]
    fn a_queue_the_runner_emptied_but_the_store_did_not_is_read_again() {
        let known = KnownQueues::<u8>::default();
        let ticket = known.ticket("t");
        known.written("t", ticket, None, true);
        known.queued("t", key(1), input(1));
        assert_eq!(taken(known.next("t")), 1);
        // Written by the door after this host's view was made (another host's input, say).
        let ticket = known.ticket("t");
        known.written("t", ticket, None, false);
        assert!(matches!(known.next("t"), Next::Ask));
    }

    #[test]
    fn forgetting_makes_a_queue_unknown_and_voids_answers_in_flight() {
        let known = KnownQueues::<u8>::default();
        let ticket = known.ticket("t");
        known.written("t", ticket, None, true);
        let in_flight = known.ticket("t");
        known.forget("t");
        known.written("t", in_flight, None, true);
        assert!(matches!(known.next("t"), Next::Ask));
        let ticket = known.ticket("u");
        known.written("u", ticket, None, true);
        known.forget_all();
        assert!(matches!(known.next("u"), Next::Ask));
    }

    #[test]
    fn an_input_the_runner_read_and_took_before_the_door_told_is_not_run_again() {
        let known = KnownQueues::<u8>::default();
        let ticket = known.ticket("t");
        known.written("t", ticket, None, true);
        known.forget("t");
        // The door wrote input 1; the runner, woken for something else, read it from the
        // store and took it; only then does the door tell of it.
        let ticket = known.ticket("t");
        known.written("t", ticket, Some(1), true);
        known.queued("t", key(1), input(1));
        assert!(matches!(known.next("t"), Next::Ask));
        // Input queued after the take is added as before.
        let ticket = known.ticket("t");
        known.written("t", ticket, None, true);
        known.queued("t", key(2), input(2));
        assert_eq!(taken(known.next("t")), 2);
    }

    #[test]
    fn a_long_queue_is_not_held_twice() {
        let known = KnownQueues::<u8>::default();
        let ticket = known.ticket("t");
        known.written("t", ticket, None, true);
        for n in 0..=MAX_KNOWN as u8 {
            known.queued("t", key(n), input(i64::from(n)));
        }
        assert!(matches!(known.next("t"), Next::Ask));
    }
}
