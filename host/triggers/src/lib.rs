//! Trigger, schedule and wakeup firing for agentmesh (CONTRACT §1, §3, §5; the Trigger and
//! Schedule pages): everything that starts or wakes a task without a user typing, from the
//! fire to the engine's door. Timing itself (cron, the timer, throttles) is
//! `agentmesh-timing`; sources, triggers and schedules are compiled with the engine's plan.
//!
//! - `triggers`: trigger sources and cold-start triggers (a source webhook, an API fire):
//!   authentication, `source.before`, the message, the bounds (throttle, daily quota, `ttl`),
//!   one new task per passing trigger, and each trigger's [`FireStatus`];
//! - `schedules`: schedules and the one scheduler ([`Triggers::run`]) that fires them and the
//!   wakeups;
//! - `wakeups`: the self-scheduling host tools `request_wakeup` / `cancel_wakeup` and the
//!   wakeups they keep.
//!
//! [`Triggers::new`] hooks a [`Triggers`] to its engine: the engine runs the wakeup tools
//! through it, and tells it of reloads (schedules re-armed) and deleted tasks (their wakeups
//! deleted).

mod schedules;
mod triggers;
mod wakeups;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use agentmesh_engine::plan::HostTool;
use agentmesh_engine::{Engine, EngineError, HostToolError, HostTools, TaskRecord, Watcher};
use agentmesh_timing::{DailyQuota, Throttle, TimerHandle};
use serde_json::Value;

pub use schedules::{ScheduleView, Scheduled};
pub use triggers::{FireError, FireStatus, SourceDelivery, TriggerView};
pub use wakeups::WakeupRecord;

/// The crate's result.
pub type Result<T, E = EngineError> = std::result::Result<T, E>;

/// What the scheduler's timer waits for.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum TimerId {
    /// A schedule manifest, by `namespace/name`.
    Schedule(String),
    /// A self-scheduled wakeup, by its `schedule_id`.
    Wakeup(String),
}

/// The live state of firing triggers, schedules and wakeups: one per engine, shared by its
/// [`Triggers`] handles and the hooks the engine calls.
#[derive(Default)]
pub(crate) struct Firing {
    /// Every armed schedule and wakeup; one driver ([`Triggers::run`]) fires them.
    pub(crate) timer: TimerHandle<TimerId>,
    /// Schedule ids armed (so a reload can disarm the ones that went).
    pub(crate) armed: Mutex<HashSet<String>>,
    /// Fire-rate bounds by `trigger:ID` / `schedule:ID` / `wakeup:ID`, with the limit they
    /// were made for: the counts kept in the store, read on first use.
    pub(crate) throttles: Mutex<HashMap<String, (u32, Throttle)>>,
    /// The per-user daily quota, with the limit it was made for (its counts kept in the store
    /// too).
    pub(crate) quota: Mutex<Option<(u32, DailyQuota)>>,
    /// Read-modify-writes of statuses and wakeups, one at a time.
    pub(crate) state: Mutex<()>,
    /// Triggers whose final fire is under way ([`triggers::FinalFire`]).
    pub(crate) finals: Mutex<HashSet<String>>,
}

/// Firing for one engine: a cheap handle (clone it freely).
#[derive(Clone)]
pub struct Triggers {
    engine: Engine,
    firing: Arc<Firing>,
}

/// What the engine calls: the wakeup tools, reloads and deletions.
struct Hooks(Arc<Firing>);

impl Hooks {
    fn triggers(&self, engine: &Engine) -> Triggers {
        Triggers {
            engine: engine.clone(),
            firing: Arc::clone(&self.0),
        }
    }
}

impl Watcher for Hooks {
    fn reloaded(&self, engine: &Engine) -> Result<()> {
        let triggers = self.triggers(engine);
        triggers.register_triggers()?;
        triggers.arm_schedules(false)
    }

    fn deleted(&self, engine: &Engine, task: &str) -> Result<()> {
        self.triggers(engine).delete_task_wakeups(task).map(drop)
    }
}

impl HostTools for Hooks {
    fn call(
        &self,
        engine: &Engine,
        record: &TaskRecord,
        tool: HostTool,
        args: &Value,
    ) -> std::result::Result<Value, HostToolError> {
        wakeups::call(&self.triggers(engine), record, tool, args).map_err(HostToolError)
    }
}

impl Triggers {
    /// Firing for `engine`: it runs the wakeup tools through this from now on and tells it of
    /// reloads and deleted tasks. Call [`Triggers::start`], then run [`Triggers::run`], to
    /// fire schedules and wakeups as they come due (`agentmesh run` never does: a wakeup it
    /// keeps fires once a host serves).
    pub fn new(engine: Engine) -> Result<Triggers> {
        let firing = Arc::new(Firing::default());
        let hooks = Arc::new(Hooks(Arc::clone(&firing)));
        engine.watch(Arc::clone(&hooks) as Arc<dyn Watcher>)?;
        engine.provide_host_tools(hooks);
        Ok(Triggers { engine, firing })
    }

    /// The engine it fires into.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
