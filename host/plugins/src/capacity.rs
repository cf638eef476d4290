//! The instance pool's capacity: one slot per live component instance, idle tool sessions
//! evicted least recently used when the pool is full, a bounded wait when every instance is in
//! a call, and each component's counters for `/metrics`.
//!
//! Every instantiation (a tool session's Initialize, a middleware step, an event filter) first
//! takes a [`Slot`]; the instance gives it back when its store is dropped. A tool session
//! between calls is *parked* here: its instance stays alive (and keeps its slot), but when a
//! slot is wanted and none is free, the least recently used parked session is torn down
//! (Teardown runs) and its slot handed on. Its task's next call opens a new session
//! (Initialize runs again): what must outlive a session belongs in the key-value store.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

use crate::error::Fault;
use crate::tool::Parked;

/// The upper bounds, in seconds, of the call-latency histogram's buckets (`+Inf` besides).
pub const LATENCY_BUCKETS: [f64; 10] = [0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0];

/// The pool's slots, its parked sessions and its counters.
pub(crate) struct Capacity {
    slots: Arc<Semaphore>,
    max: u32,
    wait: Duration,
    idle: Mutex<Idle>,
    /// Signalled when a session is parked: a waiter may now evict it.
    parked: Notify,
    stats: Mutex<BTreeMap<String, Arc<Stats>>>,
}

/// Parked sessions by the order they were parked in (the first is the least recently used).
#[derive(Default)]
struct Idle {
    next: u64,
    sessions: BTreeMap<u64, Parked>,
}

/// One instance's claim on the pool; dropped with (after) the instance's store.
pub(crate) struct Slot {
    _permit: OwnedSemaphorePermit,
    stats: Arc<Stats>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.stats.in_use.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Capacity {
    /// A pool of `max` instances where a call waits at most `wait` for one.
    pub(crate) fn new(max: u32, wait: Duration) -> Self {
        Capacity {
            slots: Arc::new(Semaphore::new(max as usize)),
            max,
            wait,
            idle: Mutex::new(Idle::default()),
            parked: Notify::new(),
            stats: Mutex::new(BTreeMap::new()),
        }
    }

    /// The counters of component `name` (shared by all its versions).
    pub(crate) fn stats(&self, name: &str) -> Arc<Stats> {
        let mut all = self.stats.lock().unwrap_or_else(PoisonError::into_inner);
        Arc::clone(all.entry(name.to_owned()).or_default())
    }

    /// A slot for an instance of `component`: a free one, else the slot of the least recently
    /// used parked session (torn down first), else the first one freed within the pool's
    /// wait. After that, [`Fault::Busy`].
    pub(crate) async fn acquire(&self, component: &str, stats: &Arc<Stats>) -> Result<Slot, Fault> {
        // The common case, a free slot, reads no clock.
        if let Ok(permit) = Arc::clone(&self.slots).try_acquire_owned() {
            return Ok(Slot::new(permit, stats));
        }
        let deadline = tokio::time::Instant::now() + self.wait;
        loop {
            if let Ok(permit) = Arc::clone(&self.slots).try_acquire_owned() {
                return Ok(Slot::new(permit, stats));
            }
            if let Some(victim) = self.evict() {
                victim.teardown().await;
                continue;
            }
            let parked = self.parked.notified();
            tokio::select! {
                permit = Arc::clone(&self.slots).acquire_owned() => {
                    if let Ok(permit) = permit {
                        return Ok(Slot::new(permit, stats));
                    }
                }
                () = parked => {}
                () = tokio::time::sleep_until(deadline) => {
                    return Err(Fault::Busy {
                        component: component.to_owned(),
                        instances: self.max,
                        waited: self.wait,
                    });
                }
            }
        }
    }

    /// Parks an idle session; answers its ticket for [`Capacity::unpark`].
    pub(crate) fn park(&self, session: Parked) -> u64 {
        session.stats().idle.fetch_add(1, Ordering::Relaxed);
        let ticket = {
            let mut idle = self.idle();
            let ticket = idle.next;
            idle.next += 1;
            idle.sessions.insert(ticket, session);
            ticket
        };
        self.parked.notify_one();
        ticket
    }

    /// Takes back the session parked with `ticket`; `None` when it was evicted meanwhile.
    pub(crate) fn unpark(&self, ticket: u64) -> Option<Parked> {
        let session = self.idle().sessions.remove(&ticket)?;
        session.stats().idle.fetch_sub(1, Ordering::Relaxed);
        Some(session)
    }

    /// Takes the least recently used parked session out, to be torn down.
    fn evict(&self) -> Option<Parked> {
        let (_, session) = self.idle().sessions.pop_first()?;
        let stats = session.stats();
        stats.idle.fetch_sub(1, Ordering::Relaxed);
        stats.evictions.fetch_add(1, Ordering::Relaxed);
        Some(session)
    }

    fn idle(&self) -> std::sync::MutexGuard<'_, Idle> {
        // Entries are inserted and removed whole; a panic elsewhere leaves the map consistent.
        self.idle.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A snapshot of the pool for `/metrics`.
    pub(crate) fn metrics(&self) -> PoolMetrics {
        let all = self.stats.lock().unwrap_or_else(PoisonError::into_inner);
        PoolMetrics {
            max_instances: self.max,
            components: all
                .iter()
                .map(|(name, stats)| stats.snapshot(name))
                .collect(),
        }
    }
}

impl Slot {
    fn new(permit: OwnedSemaphorePermit, stats: &Arc<Stats>) -> Self {
        stats.in_use.fetch_add(1, Ordering::Relaxed);
        Slot {
            _permit: permit,
            stats: Arc::clone(stats),
        }
    }
}

/// One component's counters (all its versions together).
#[derive(Default)]
pub(crate) struct Stats {
    in_use: AtomicU64,
    idle: AtomicU64,
    evictions: AtomicU64,
    initializations: AtomicU64,
    teardowns: AtomicU64,
    calls: AtomicU64,
    errors: AtomicU64,
    /// Calls by the first bucket of [`LATENCY_BUCKETS`] they fit in; the last counts the rest.
    latency: [AtomicU64; LATENCY_BUCKETS.len() + 1],
    latency_sum_us: AtomicU64,
}

impl Stats {
    /// A session was constructed (Initialize ran).
    pub(crate) fn initialized(&self) {
        self.initializations.fetch_add(1, Ordering::Relaxed);
    }

    /// A session's destructor ran (Teardown).
    pub(crate) fn torn_down(&self) {
        self.teardowns.fetch_add(1, Ordering::Relaxed);
    }

    /// A call that took `elapsed` ended, failed or not.
    pub(crate) fn called(&self, elapsed: Duration, failed: bool) {
        self.calls.fetch_add(1, Ordering::Relaxed);
        if failed {
            self.errors.fetch_add(1, Ordering::Relaxed);
        }
        let seconds = elapsed.as_secs_f64();
        let bucket = LATENCY_BUCKETS
            .iter()
            .position(|bound| seconds <= *bound)
            .unwrap_or(LATENCY_BUCKETS.len());
        if let Some(count) = self.latency.get(bucket) {
            count.fetch_add(1, Ordering::Relaxed);
        }
        let micros = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
        self.latency_sum_us.fetch_add(micros, Ordering::Relaxed);
    }

    fn snapshot(&self, name: &str) -> ComponentMetrics {
        let load = |v: &AtomicU64| v.load(Ordering::Relaxed);
        let mut cumulative = 0;
        let buckets = self
            .latency
            .iter()
            .map(|count| {
                cumulative += load(count);
                cumulative
            })
            .collect();
        ComponentMetrics {
            component: name.to_owned(),
            instances_in_use: load(&self.in_use),
            idle_sessions: load(&self.idle),
            evictions: load(&self.evictions),
            initializations: load(&self.initializations),
            teardowns: load(&self.teardowns),
            calls: load(&self.calls),
            errors: load(&self.errors),
            latency_buckets: buckets,
            latency_sum: Duration::from_micros(load(&self.latency_sum_us)),
        }
    }
}

/// The instance pool as `/metrics` shows it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PoolMetrics {
    /// How many instances may be alive at once (`PluginConfig::max_instances`).
    pub max_instances: u32,
    /// Each component that was loaded, by name.
    pub components: Vec<ComponentMetrics>,
}

/// One component's instances and calls since the host started (all its versions together).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ComponentMetrics {
    /// The component's name (for a tool, the tool's `namespace/name`).
    pub component: String,
    /// Instances alive now: in a call, or an idle tool session's.
    pub instances_in_use: u64,
    /// Tool sessions alive now between calls (evictable when the pool is full).
    pub idle_sessions: u64,
    /// Idle tool sessions torn down to free their instance for another.
    pub evictions: u64,
    /// Tool sessions constructed (Initialize ran).
    pub initializations: u64,
    /// Tool sessions destroyed (Teardown ran): closed with their task, or evicted.
    pub teardowns: u64,
    /// Calls: tool invocations, middleware steps, event-filter checks.
    pub calls: u64,
    /// Calls that did not succeed (a tool error, a fault, no instance in time).
    pub errors: u64,
    /// Cumulative call counts per bucket of [`LATENCY_BUCKETS`], then the total (`+Inf`).
    pub latency_buckets: Vec<u64>,
    /// The time all calls took together.
    pub latency_sum: Duration,
}
