//! What other crates keep in step with the task records: a [`Watcher`] (the routing index of
//! inbound events is one) is given every record at start and after a reload, and each record
//! as it is saved.

use crate::plan::Plan;
use crate::task::TaskRecord;

/// Something kept in step with the task records (registered with [`crate::Engine::watch`]).
/// Its methods run on the thread that saved the record, while the task is locked: they must
/// be quick and must not call back into the engine.
pub trait Watcher: Send + Sync {
    /// Every stored task record, under `plan` (at registration and after each reload).
    fn rebuild(&self, plan: &Plan, records: &[TaskRecord]);

    /// `record` as it was just saved (created, after a turn, interrupted, resumed, …).
    fn saved(&self, plan: &Plan, record: &TaskRecord);
}
