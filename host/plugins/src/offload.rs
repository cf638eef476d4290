//! Guest calls that run long leave the async workers.
//!
//! A guest call starts on the async worker that awaits it: most calls take microseconds, and
//! handing each to another thread would cost more than the call. A call still in Wasm at a
//! tick of the epoch (at most `PluginConfig::epoch_tick` after it began) yields once
//! (`state::on_tick`); [`poll_guest`] then runs the rest of it with
//! [`tokio::task::block_in_place`], which hands the worker's other tasks to a new worker
//! thread first. So a guest that loops until its timeout holds its own thread, not one of the
//! workers that answer HTTP, and as many such guests as the instance pool admits run side by
//! side while the host answers (`/healthz`, the API, webhooks).
//!
//! On a current-thread runtime (tests, `block_on` outside a runtime) there is no worker to
//! free: the call runs on where it is.

use std::cell::Cell;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::runtime::{Handle, RuntimeFlavor};

thread_local! {
    /// Set by [`yielding`] while this thread polls a guest call: the call yielded because it
    /// runs long.
    static LONG: Cell<bool> = const { Cell::new(false) };
}

/// Says, from the epoch callback of the call this thread is polling, that the call yields
/// because it runs long.
pub(crate) fn yielding() {
    LONG.set(true);
}

/// Polls `call`, a guest call whose epoch callback calls [`yielding`] when it has run into a
/// tick; from then on, runs it to its end off the async workers (see the module docs).
/// `guarded!` polls every guest call through this, in place (the call's future is large:
/// moving it into a wrapper would cost more than the rest of this).
pub(crate) fn poll_guest<F: Future>(
    mut call: Pin<&mut F>,
    cx: &mut Context<'_>,
) -> Poll<F::Output> {
    LONG.set(false);
    match call.as_mut().poll(cx) {
        Poll::Ready(output) => Poll::Ready(output),
        Poll::Pending if LONG.get() => match blocking_allowed() {
            Some(handle) => Poll::Ready(tokio::task::block_in_place(|| handle.block_on(call))),
            None => Poll::Pending,
        },
        Poll::Pending => Poll::Pending,
    }
}

/// The runtime's handle when this thread may block in place: on a multi-threaded runtime.
fn blocking_allowed() -> Option<Handle> {
    Handle::try_current()
        .ok()
        .filter(|h| h.runtime_flavor() == RuntimeFlavor::MultiThread)
}
