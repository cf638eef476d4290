//! Group commit: many callers that each need their writes durable share one fsync.

use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crate::{Result, StoreError};

/// How long a caller waits for another caller's flush before it reports the disk as stuck.
/// A healthy fsync takes well under a millisecond to a few tens; a flush still running after
/// this is a file system that stopped answering (seen: sled's flush after a refused write).
pub(crate) const STUCK_AFTER: Duration = Duration::from_secs(5);

/// Hands out flushes. A caller brings a ticket (the write count it needs on disk); if a flush
/// that started after its writes has completed, it returns at once; if none is running, it
/// becomes the leader and flushes for everyone waiting behind it; otherwise it waits for the
/// running one, at most [`STUCK_AFTER`]. sled's `flush` is an fsync (~135 µs here), so under
/// concurrent acknowledgements this turns N fsyncs into about one per round.
#[derive(Default)]
pub(crate) struct GroupFlush {
    state: Mutex<Flushes>,
    finished: Condvar,
}

#[derive(Default)]
struct Flushes {
    /// The highest write count known to be durable.
    done: u64,
    /// Whether a leader is flushing now.
    running: bool,
}

impl GroupFlush {
    /// Ensures writes up to `ticket` are durable; `flush` performs one flush and returns the
    /// write count it covered.
    pub(crate) fn flush(&self, ticket: u64, flush: impl FnOnce() -> Result<u64>) -> Result<()> {
        let started = Instant::now();
        let mut state = self.lock();
        loop {
            if state.done >= ticket {
                return Ok(());
            }
            if !state.running {
                state.running = true;
                drop(state);
                let covered = flush();
                let mut state = self.lock();
                state.running = false;
                if let Ok(c) = covered {
                    state.done = state.done.max(c);
                }
                self.finished.notify_all();
                return covered.map(|_| ());
            }
            let left = STUCK_AFTER.saturating_sub(started.elapsed());
            if left.is_zero() {
                return Err(StoreError::Io(format!(
                    "the disk did not finish a flush in {STUCK_AFTER:?}"
                )));
            }
            state = self
                .finished
                .wait_timeout(state, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    fn lock(&self) -> MutexGuard<'_, Flushes> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
