//! The instance pool's capacity: one slot per live component instance, idle tool sessions
//! evicted least recently used when the pool is full, a bounded wait when every instance is in
//! a call, and each component's counters for `/metrics`.
//!
//! Every instantiation (a tool session's Initialize, a middleware step, an event filter) first
//! takes a [`Slot`]; the instance gives it back when its store is dropped. A tool session
//! between calls is *parked* in its [`Cell`]: its instance stays alive (and keeps its slot),
//! but when a slot is wanted and none is free, the least recently used parked session is torn
//! down (Teardown runs) and its slot handed on. Its task's next call opens a new session
//! (Initialize runs again): what must outlive a session belongs in the key-value store.
//!
//! A session's cell is registered once, when the session first parks; a call only locks its
//! own cell. Eviction, which is rare, scans the cells for the least recently used one.

use std::any::Any;
use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

use crate::error::Fault;

/// The upper bounds, in seconds, of the call-latency histogram's buckets (`+Inf` besides).
pub const LATENCY_BUCKETS: [f64; 10] = [0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0];

/// What the pool parks: an idle instance (a tool session's), with its component's counters.
/// The pool keeps it type-erased; whoever parked it takes it back with [`Pooled::into_any`].
pub(crate) trait Pooled: Any + Send {
    /// The counters of its component.
    fn stats(&self) -> &Stats;

    /// Teardown for an evicted instance: frees it (and its slot).
    fn teardown(self: Box<Self>) -> Pin<Box<dyn Future<Output = ()> + Send>>;

    /// Itself, to be downcast to what was parked.
    fn into_any(self: Box<Self>) -> Box<dyn Any>;
}

/// The pool's slots, its parked sessions (`P`) and its counters.
pub(crate) struct Capacity {
    slots: Arc<Semaphore>,
    max: u32,
    wait: Duration,
    /// The cells of sessions that parked (those of ended sessions until the next pruning).
    cells: Mutex<Cells>,
    /// Orders parkings: a cell's `parked_at` is this count when it last parked.
    parkings: AtomicU64,
    /// Signalled when a session is parked: a waiter may now evict it.
    parked: Notify,
    stats: Mutex<BTreeMap<String, Arc<Stats>>>,
}

/// The cells the pool knows. Cells of ended sessions are dropped at each eviction scan, and
/// whenever the list has doubled since it was last pruned.
#[derive(Default)]
struct Cells {
    list: Vec<Weak<Cell>>,
    prune_at: usize,
}

impl Cells {
    fn add(&mut self, cell: Weak<Cell>) {
        if self.list.len() >= self.prune_at {
            self.prune();
            self.prune_at = (self.list.len() * 2).max(64);
        }
        self.list.push(cell);
    }

    fn prune(&mut self) {
        self.list.retain(|cell| cell.strong_count() > 0);
    }
}

/// One tool session's place in the pool: its instance while the session is between calls.
#[derive(Default)]
pub(crate) struct Cell {
    /// The parked instance; `None` while in a call, after a fault, or once evicted.
    idle: Mutex<Option<Box<dyn Pooled>>>,
    /// When it last parked, in the pool's count of parkings (the lowest is the least recently
    /// used).
    parked_at: AtomicU64,
    /// Whether the pool knows this cell (it registers at its first parking).
    registered: AtomicBool,
}

impl Cell {
    /// Whether a session's instance waits here.
    pub(crate) fn is_parked(&self) -> bool {
        self.lock().is_some()
    }

    fn lock(&self) -> MutexGuard<'_, Option<Box<dyn Pooled>>> {
        // The slot is replaced whole; a panic elsewhere leaves it consistent.
        self.idle.lock().unwrap_or_else(PoisonError::into_inner)
    }
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
            cells: Mutex::new(Cells::default()),
            parkings: AtomicU64::new(0),
            parked: Notify::new(),
            stats: Mutex::new(BTreeMap::new()),
        }
    }

    /// The counters of component `name` (shared by all its versions).
    pub(crate) fn stats(&self, name: &str) -> Arc<Stats> {
        Arc::clone(lock(&self.stats).entry(name.to_owned()).or_default())
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

    /// Parks an idle session in its `cell`, where a call takes it back ([`Capacity::unpark`]) or
    /// an eviction tears it down.
    pub(crate) fn park(&self, cell: &Arc<Cell>, session: Box<dyn Pooled>) {
        let order = self.parkings.fetch_add(1, Ordering::Relaxed);
        cell.parked_at.store(order, Ordering::Relaxed);
        *cell.lock() = Some(session);
        if !cell.registered.load(Ordering::Relaxed) {
            cell.registered.store(true, Ordering::Relaxed);
            lock(&self.cells).add(Arc::downgrade(cell));
        }
        self.parked.notify_one();
    }

    /// Takes back the session parked in `cell`; `None` when there is none (it was evicted).
    pub(crate) fn unpark(&self, cell: &Cell) -> Option<Box<dyn Pooled>> {
        cell.lock().take()
    }

    /// Takes the least recently used parked session out, to be torn down.
    fn evict(&self) -> Option<Box<dyn Pooled>> {
        loop {
            let oldest = {
                let mut cells = lock(&self.cells);
                cells.prune();
                let mut oldest: Option<(u64, Arc<Cell>)> = None;
                for cell in cells.list.iter().filter_map(Weak::upgrade) {
                    let parked_at = cell.parked_at.load(Ordering::Relaxed);
                    let is_parked = cell.lock().is_some();
                    if is_parked && oldest.as_ref().is_none_or(|(at, _)| parked_at < *at) {
                        oldest = Some((parked_at, cell));
                    }
                }
                oldest?.1
            };
            // Its call may have taken it back since: then look again.
            if let Some(session) = oldest.lock().take() {
                session.stats().evictions.fetch_add(1, Ordering::Relaxed);
                return Some(session);
            }
        }
    }

    /// A snapshot of the pool for `/metrics`.
    pub(crate) fn metrics(&self) -> PoolMetrics {
        // Idle sessions are counted here rather than at each call: by component, the parked
        // ones among the cells.
        let mut idle: BTreeMap<*const Stats, u64> = BTreeMap::new();
        for cell in lock(&self.cells).list.iter().filter_map(Weak::upgrade) {
            if let Some(parked) = cell.lock().as_ref() {
                *idle.entry(std::ptr::from_ref(parked.stats())).or_default() += 1;
            }
        }
        let mut all = lock(&self.stats);
        // Counters nothing holds any more (no component loaded by the name, no session, no
        // call) are of a component a reload removed: their series end.
        all.retain(|_, stats| Arc::strong_count(stats) > 1);
        PoolMetrics {
            max_instances: self.max,
            components: all
                .iter()
                .map(|(name, stats)| {
                    let parked = idle.get(&Arc::as_ptr(stats)).copied().unwrap_or(0);
                    stats.snapshot(name, parked)
                })
                .collect(),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Entries are added and removed whole; a panic elsewhere leaves the data consistent.
    m.lock().unwrap_or_else(PoisonError::into_inner)
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

/// One component's counters (all its versions together). A call updates as few as it can:
/// the number of calls is the sum of the latency buckets.
#[derive(Default)]
pub(crate) struct Stats {
    in_use: AtomicU64,
    evictions: AtomicU64,
    initializations: AtomicU64,
    /// The time Initializes took together (instantiate and constructor), in microseconds.
    initialize_sum_us: AtomicU64,
    teardowns: AtomicU64,
    errors: AtomicU64,
    /// Calls by the first bucket of [`LATENCY_BUCKETS`] they fit in; the last counts the rest.
    latency: [AtomicU64; LATENCY_BUCKETS.len() + 1],
    latency_sum_us: AtomicU64,
}

impl Stats {
    /// A session was constructed (Initialize ran) in `took` (instantiate and constructor).
    pub(crate) fn initialized(&self, took: Duration) {
        self.initializations.fetch_add(1, Ordering::Relaxed);
        let micros = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        self.initialize_sum_us.fetch_add(micros, Ordering::Relaxed);
    }

    /// A session's destructor ran (Teardown).
    pub(crate) fn torn_down(&self) {
        self.teardowns.fetch_add(1, Ordering::Relaxed);
    }

    /// A call that took `elapsed` ended, failed or not.
    pub(crate) fn called(&self, elapsed: Duration, failed: bool) {
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

    /// Its figures, with `idle` of its sessions parked now.
    fn snapshot(&self, name: &str, idle: u64) -> ComponentMetrics {
        let load = |v: &AtomicU64| v.load(Ordering::Relaxed);
        let mut cumulative = 0;
        let buckets = self
            .latency
            .iter()
            .map(|count| {
                cumulative += load(count);
                cumulative
            })
            .collect::<Vec<u64>>();
        ComponentMetrics {
            component: name.to_owned(),
            instances_in_use: load(&self.in_use),
            idle_sessions: idle,
            evictions: load(&self.evictions),
            initializations: load(&self.initializations),
            initialize_time: Duration::from_micros(load(&self.initialize_sum_us)),
            teardowns: load(&self.teardowns),
            calls: buckets.last().copied().unwrap_or(0),
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
    /// The time those Initializes took together: a fresh store, instantiating the component and
    /// running the session's constructor.
    pub initialize_time: Duration,
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
