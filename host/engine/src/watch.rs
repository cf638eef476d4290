//! What other crates keep in step with the engine: a [`Watcher`] (the routing index of inbound
//! events, the scheduler of triggers) is given every task record at start and after a reload,
//! each record as it is saved, and told of reloads and deleted tasks; a [`HostTools`] runs
//! the host tools another crate provides (the wakeup tools of the scheduler).
//!
//! Both get the engine as an argument instead of keeping it, so that nothing the engine holds
//! holds the engine.

use serde_json::Value;

use crate::Engine;
use crate::plan::{HostTool, Plan};
use crate::task::TaskRecord;

/// Something kept in step with the task records and the plan (registered with
/// [`Engine::watch`]). Its methods run on the thread that saved the record, while the task is
/// locked: they must be quick, and must neither save a task record nor register a watcher.
pub trait Watcher: Send + Sync {
    /// Every stored task record, under `plan` (at [`Engine::recover`] and after each reload).
    fn rebuild(&self, plan: &Plan, records: &[TaskRecord]) {
        let _ = (plan, records);
    }

    /// `record` as it was just saved (created, after a turn, interrupted, resumed, …).
    fn saved(&self, plan: &Plan, record: &TaskRecord) {
        let _ = (plan, record);
    }

    /// A new plan is in force (after [`Engine::reload`]); an error fails the reload's answer.
    fn reloaded(&self, engine: &Engine) -> crate::Result<()> {
        let _ = engine;
        Ok(())
    }

    /// Task `task` was deleted (its record is saved as terminated first).
    fn deleted(&self, engine: &Engine, task: &str) -> crate::Result<()> {
        let _ = (engine, task);
        Ok(())
    }
}

/// What a host tool tells the LLM went wrong: the call's error result (a recoverable one).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct HostToolError(pub String);

/// The host tools (`request_wakeup`, `cancel_wakeup`) a crate other than the engine runs
/// (registered with [`Engine::provide_host_tools`]).
pub trait HostTools: Send + Sync {
    /// Runs `tool` for task `record` with `args`: its result, or the error the LLM is told.
    fn call(
        &self,
        engine: &Engine,
        record: &TaskRecord,
        tool: HostTool,
        args: &Value,
    ) -> Result<Value, HostToolError>;
}
