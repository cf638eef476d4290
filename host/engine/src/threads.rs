//! Where blocking work runs, so that what must answer (`/healthz`, the API, webhooks) never
//! waits behind it:
//!
//! - task runners run on the **turn pool** ([`turn_runtime`]), a runtime of their own, whose
//!   threads may block in a store call: a stuck disk stalls turns, never the server;
//! - every store call made elsewhere (an API request, the door, a trigger) first moves the
//!   async worker's other tasks to another thread ([`store_call`]);
//! - long work anywhere (an expression that iterates, an fsync) does the same
//!   ([`off_the_workers`]).

use std::cell::Cell;

use agentmesh_manifest::model::host::Policy;

thread_local! {
    /// Whether this thread belongs to the turn pool.
    static TURN_THREAD: Cell<bool> = const { Cell::new(false) };
}

/// Marks the calling thread as one of the turn pool's (see [`turn_runtime`]): store calls made
/// on it block it as they are (on PostgreSQL, on a session it drives itself). For a runtime
/// that runs turns only (a bench's, a command's that serves nothing).
pub fn mark_turn_thread() {
    TURN_THREAD.with(|t| t.set(true));
    agentmesh_store::postgres::drive_sessions_here();
}

/// The turn pool: a multi-threaded runtime, a worker a core, whose threads are marked (see
/// [`mark_turn_thread`]). `serve` gives its handle to the engine
/// (`EngineOptions::turns`), which starts every task runner on it.
pub fn turn_runtime(policy: &Policy) -> std::io::Result<tokio::runtime::Runtime> {
    crate::wasm::runtime_builder(policy)
        .thread_name("agentmesh-turn")
        .on_thread_start(mark_turn_thread)
        .build()
}

/// Runs `f`, which may keep a thread busy or blocked for long (an expression that iterates, up
/// to its budget's time; an fsync), so that it holds up no async worker: on a worker of a
/// multi-threaded tokio runtime, the worker's other tasks move to another thread first.
pub(crate) fn off_the_workers(f: &mut dyn FnMut()) {
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current() {
        Ok(h) if h.runtime_flavor() == RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(f);
        }
        _ => f(),
    }
}

/// Runs store call `f`: as it is on a thread of the turn pool (whose runners may wait for the
/// store), else off the async workers ([`off_the_workers`]).
pub(crate) fn store_call(_name: &'static str, f: &mut dyn FnMut()) {
    if TURN_THREAD.with(Cell::get) {
        f();
    } else {
        off_the_workers(f);
    }
}
