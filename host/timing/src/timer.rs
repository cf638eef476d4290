//! The timer: many armed deadlines, earliest first.
//!
//! [`Timer`] is the plain data structure — a binary heap of `(deadline, sequence, id)` with
//! lazy cancellation: disarming or re-arming an id only forgets it in a map, and its old heap
//! entry is dropped when it surfaces. Every change is O(log n), nothing is scanned.
//!
//! [`TimerHandle`] shares one for tokio: clones arm and disarm from any task, and one driver
//! task loops on [`TimerHandle::next_due`], which sleeps until the earliest deadline and wakes
//! early when an earlier one is armed.

use std::cmp::{Ordering, Reverse};
use std::collections::binary_heap::PeekMut;
use std::collections::{BinaryHeap, HashMap};
use std::hash::Hash;
use std::pin::pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;

use crate::clock::now_ms;

/// A deadline that has come.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Due<Id> {
    /// What was armed.
    pub id: Id,
    /// The deadline it was armed for, epoch ms (the tick's due time, which may be earlier
    /// than when it is popped).
    pub at_ms: i64,
}

/// Armed deadlines keyed by `Id`: at most one per id.
#[derive(Debug)]
pub struct Timer<Id> {
    heap: BinaryHeap<Reverse<Entry<Id>>>,
    armed: HashMap<Id, Slot>,
    next_seq: u64,
    /// Heap entries whose id was since disarmed or re-armed.
    stale: usize,
}

/// An id's current arming: the sequence number of its live heap entry and its deadline.
#[derive(Debug, Clone, Copy)]
struct Slot {
    seq: u64,
    at_ms: i64,
}

#[derive(Debug)]
struct Entry<Id> {
    at_ms: i64,
    /// Unique per arming: orders equal deadlines by arming order and tells a live entry from a
    /// stale one of the same id.
    seq: u64,
    id: Id,
}

impl<Id> Entry<Id> {
    fn key(&self) -> (i64, u64) {
        (self.at_ms, self.seq)
    }
}

impl<Id> PartialEq for Entry<Id> {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}

impl<Id> Eq for Entry<Id> {}

impl<Id> PartialOrd for Entry<Id> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<Id> Ord for Entry<Id> {
    fn cmp(&self, other: &Self) -> Ordering {
        self.key().cmp(&other.key())
    }
}

/// Below this many stale entries the heap is never rebuilt: rebuilding a small heap often would
/// cost more than the entries it frees.
const COMPACT_MIN_STALE: usize = 64;

impl<Id> Default for Timer<Id> {
    fn default() -> Self {
        Timer {
            heap: BinaryHeap::new(),
            armed: HashMap::new(),
            next_seq: 0,
            stale: 0,
        }
    }
}

impl<Id: Clone + Eq + Hash> Timer<Id> {
    /// An empty timer.
    pub fn new() -> Self {
        Self::default()
    }

    /// Arms `id` for `at_ms` (epoch ms), replacing its deadline if it was armed: this is also
    /// how a schedule is re-armed. A deadline already past is due at the next
    /// [`pop_due`](Self::pop_due).
    pub fn arm(&mut self, id: Id, at_ms: i64) {
        let seq = self.next_seq;
        self.next_seq += 1;
        if self.armed.insert(id.clone(), Slot { seq, at_ms }).is_some() {
            self.note_stale();
        }
        self.heap.push(Reverse(Entry { at_ms, seq, id }));
    }

    /// Disarms `id`; whether it was armed.
    pub fn disarm(&mut self, id: &Id) -> bool {
        let was_armed = self.armed.remove(id).is_some();
        if was_armed {
            self.note_stale();
        }
        was_armed
    }

    /// The deadline `id` is armed for.
    pub fn deadline(&self, id: &Id) -> Option<i64> {
        self.armed.get(id).map(|slot| slot.at_ms)
    }

    /// How many ids are armed.
    pub fn len(&self) -> usize {
        self.armed.len()
    }

    /// Whether no id is armed.
    pub fn is_empty(&self) -> bool {
        self.armed.is_empty()
    }

    /// The earliest armed deadline.
    pub fn next_deadline(&mut self) -> Option<i64> {
        while let Some(top) = self.heap.peek_mut() {
            if is_live(&self.armed, &top.0) {
                return Some(top.0.at_ms);
            }
            PeekMut::pop(top);
            self.stale = self.stale.saturating_sub(1);
        }
        None
    }

    /// Disarms and returns every id whose deadline is at or before `now_ms`, earliest first
    /// (equal deadlines in arming order).
    pub fn pop_due(&mut self, now_ms: i64) -> Vec<Due<Id>> {
        let mut due = Vec::new();
        while let Some(top) = self.heap.peek_mut()
            && top.0.at_ms <= now_ms
        {
            let Reverse(entry) = PeekMut::pop(top);
            if is_live(&self.armed, &entry) {
                self.armed.remove(&entry.id);
                due.push(Due {
                    id: entry.id,
                    at_ms: entry.at_ms,
                });
            } else {
                self.stale = self.stale.saturating_sub(1);
            }
        }
        due
    }

    /// Counts one more stale entry, and rebuilds the heap without them once they outnumber the
    /// live ones: a schedule re-armed forever ahead of its deadline would otherwise grow the
    /// heap without bound. The rebuild is O(n) after at least n/2 changes, so O(1) amortized.
    fn note_stale(&mut self) {
        self.stale += 1;
        if self.stale > COMPACT_MIN_STALE && self.stale > self.armed.len() {
            let armed = &self.armed;
            self.heap.retain(|Reverse(entry)| is_live(armed, entry));
            self.stale = 0;
        }
    }
}

/// Whether `entry` is its id's current arming (not one since disarmed or re-armed).
fn is_live<Id: Eq + Hash>(armed: &HashMap<Id, Slot>, entry: &Entry<Id>) -> bool {
    armed
        .get(&entry.id)
        .is_some_and(|slot| slot.seq == entry.seq)
}

/// The longest [`TimerHandle::next_due`] sleeps before reading the wall clock again. Deadlines
/// are wall-clock times but tokio sleeps on the monotonic clock, which a clock step (NTP, a
/// suspended VM) leaves behind; this bounds how late such a step can make a tick.
const MAX_SLEEP: Duration = Duration::from_secs(10);

/// A [`Timer`] shared between tasks: cheap to clone, `Send + Sync` for a `Send` id.
///
/// Any clone arms and disarms; one driver task loops on [`next_due`](Self::next_due). The lock
/// is a std mutex held only for a heap operation, never across an `.await`.
#[derive(Debug)]
pub struct TimerHandle<Id> {
    shared: Arc<Shared<Id>>,
}

#[derive(Debug)]
struct Shared<Id> {
    timer: Mutex<Timer<Id>>,
    /// Signalled when a deadline earlier than every armed one is armed.
    earlier: Notify,
}

impl<Id> Clone for TimerHandle<Id> {
    fn clone(&self) -> Self {
        TimerHandle {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<Id: Clone + Eq + Hash> Default for TimerHandle<Id> {
    fn default() -> Self {
        TimerHandle {
            shared: Arc::new(Shared {
                timer: Mutex::new(Timer::new()),
                earlier: Notify::new(),
            }),
        }
    }
}

impl<Id: Clone + Eq + Hash> TimerHandle<Id> {
    /// An empty timer.
    pub fn new() -> Self {
        Self::default()
    }

    /// Arms (or re-arms) `id` for `at_ms`, waking the driver if this is now the earliest
    /// deadline.
    pub fn arm(&self, id: Id, at_ms: i64) {
        let mut timer = self.lock();
        let earliest = timer.next_deadline();
        timer.arm(id, at_ms);
        drop(timer);
        if earliest.is_none_or(|earliest| at_ms < earliest) {
            self.shared.earlier.notify_waiters();
        }
    }

    /// Disarms `id`; whether it was armed. The driver is not woken: it finds nothing due at
    /// the stale deadline and sleeps again.
    pub fn disarm(&self, id: &Id) -> bool {
        self.lock().disarm(id)
    }

    /// The deadline `id` is armed for.
    pub fn deadline(&self, id: &Id) -> Option<i64> {
        self.lock().deadline(id)
    }

    /// How many ids are armed.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no id is armed.
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    /// Waits until at least one deadline has come and returns everything due (disarmed,
    /// earliest first). Cancel-safe: the due ids are taken from the timer only in the poll
    /// that returns them.
    pub async fn next_due(&self) -> Vec<Due<Id>> {
        loop {
            // Registered before the timer is read, so an earlier arm between the read and the
            // sleep still wakes this wait.
            let mut earlier = pin!(self.shared.earlier.notified());
            earlier.as_mut().enable();
            let now = now_ms();
            let next = {
                let mut timer = self.lock();
                let due = timer.pop_due(now);
                if !due.is_empty() {
                    return due;
                }
                timer.next_deadline()
            };
            let sleep = next.map_or(MAX_SLEEP, |at_ms| {
                let until = u64::try_from(at_ms.saturating_sub(now)).unwrap_or(0);
                Duration::from_millis(until).min(MAX_SLEEP)
            });
            tokio::select! {
                () = tokio::time::sleep(sleep) => {}
                () = earlier => {}
            }
        }
    }

    /// The lock never stays poisoned: a panic inside a timer operation (only an id's own
    /// `Hash`, `Eq` or `Clone` can panic there) leaves at worst a heap entry the map disagrees
    /// with, which lazy cancellation treats as stale.
    fn lock(&self) -> MutexGuard<'_, Timer<Id>> {
        self.shared
            .timer
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handle_is_send_and_sync() {
        fn shareable<T: Send + Sync + Clone>() {}
        shareable::<TimerHandle<String>>();
    }

    #[test]
    fn stale_entries_are_compacted() {
        let mut timer = Timer::new();
        for round in 0..1_000 {
            timer.arm("a", 10_000 + round);
        }
        assert!(timer.heap.len() < 2 * COMPACT_MIN_STALE + 2);
        assert_eq!(timer.next_deadline(), Some(10_999));
    }

    #[test]
    fn equal_deadlines_pop_in_arming_order() {
        let mut timer = Timer::new();
        for id in ["c", "a", "b"] {
            timer.arm(id, 5);
        }
        let ids: Vec<_> = timer.pop_due(5).into_iter().map(|d| d.id).collect();
        assert_eq!(ids, ["c", "a", "b"]);
    }
}
