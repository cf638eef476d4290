//! Group commit: many callers that each need their writes durable share one fsync.

use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
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
/// concurrent acknowledgements this turns N fsyncs into about one per round. An async caller
/// ([`GroupFlush::durable`]) waits holding no thread, and leads on a blocking thread, waiting
/// for its flush at most [`STUCK_AFTER`] too; a caller of [`GroupFlush::flush`] that leads
/// flushes on its own thread, for as long as the flush takes.
pub(crate) struct GroupFlush {
    state: Mutex<Flushes>,
    finished: Condvar,
    /// The durable write count after each flush, for async callers.
    heard: tokio::sync::watch::Sender<u64>,
}

impl Default for GroupFlush {
    fn default() -> Self {
        GroupFlush {
            state: Mutex::default(),
            finished: Condvar::new(),
            heard: tokio::sync::watch::Sender::new(0),
        }
    }
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
                return self.lead(flush);
            }
            let left = stuck_in(started)?;
            state = self
                .finished
                .wait_timeout(state, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// As [`GroupFlush::flush`], for an async caller: it waits holding no thread, and when it
    /// leads, `flush` runs on a blocking thread of the runtime it is polled on (a flush this
    /// caller gives up on still finishes for the others).
    pub(crate) async fn durable(
        self: Arc<Self>,
        ticket: u64,
        flush: impl FnOnce() -> Result<u64> + Send + 'static,
    ) -> Result<()> {
        let started = Instant::now();
        // Subscribed before looking: a flush that ends after the look is heard.
        let mut heard = self.heard.subscribe();
        loop {
            let lead = {
                let mut state = self.lock();
                if state.done >= ticket {
                    return Ok(());
                }
                !std::mem::replace(&mut state.running, true)
            };
            if lead {
                // Bounded as a wait behind another's flush is: a flush the disk never
                // finishes goes on for the others, and this caller hears the disk is stuck.
                let flushes = Arc::clone(&self);
                let leading = tokio::task::spawn_blocking(move || flushes.lead(flush));
                return match tokio::time::timeout(stuck_in(started)?, leading).await {
                    Ok(led) => {
                        led.map_err(|e| StoreError::Io(format!("a flush did not finish: {e}")))?
                    }
                    Err(_) => Err(stuck()),
                };
            }
            let left = stuck_in(started)?;
            // Ends when a flush ends (however it went) or at the deadline, checked above.
            let _ = tokio::time::timeout(left, heard.changed()).await;
        }
    }

    /// Runs `flush` as the leader (`running` was set by the caller), then tells every waiter.
    fn lead(&self, flush: impl FnOnce() -> Result<u64>) -> Result<()> {
        let covered = flush();
        let mut state = self.lock();
        state.running = false;
        if let Ok(c) = covered {
            state.done = state.done.max(c);
        }
        let done = state.done;
        drop(state);
        self.finished.notify_all();
        self.heard.send_replace(done);
        covered.map(|_| ())
    }

    fn lock(&self) -> MutexGuard<'_, Flushes> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// How long a caller that started waiting at `started` may still wait for another's flush;
/// an error once [`STUCK_AFTER`] has passed.
fn stuck_in(started: Instant) -> Result<Duration> {
    let left = STUCK_AFTER.saturating_sub(started.elapsed());
    if left.is_zero() {
        return Err(stuck());
    }
    Ok(left)
}

/// The error of a caller that gave up on a flush.
fn stuck() -> StoreError {
    StoreError::Io(format!(
        "the disk did not finish a flush in {STUCK_AFTER:?}"
    ))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use std::sync::mpsc;

    use super::*;

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap()
    }

    /// A caller waiting behind a flush that never ends is told the disk is stuck after
    /// `STUCK_AFTER`, async or not: never that its writes are durable.
    #[test]
    fn a_caller_behind_a_stuck_flush_hears_an_error_not_durable() {
        let flushes = Arc::new(GroupFlush::default());
        let (release, stuck) = mpsc::channel::<()>();
        let (started, leading) = mpsc::channel::<()>();
        let leader = {
            let flushes = Arc::clone(&flushes);
            std::thread::spawn(move || {
                flushes.flush(1, || {
                    started.send(()).unwrap();
                    stuck.recv().unwrap();
                    Ok(1)
                })
            })
        };
        leading.recv().unwrap();
        let waiter = {
            let flushes = Arc::clone(&flushes);
            std::thread::spawn(move || flushes.flush(1, || panic!("a second leader")))
        };
        let waited = runtime().block_on(
            Arc::clone(&flushes).durable(1, || -> Result<u64> { panic!("a second leader") }),
        );
        assert!(matches!(waited, Err(StoreError::Io(_))), "{waited:?}");
        let waited = waiter.join().unwrap();
        assert!(matches!(waited, Err(StoreError::Io(_))), "{waited:?}");
        release.send(()).unwrap();
        leader.join().unwrap().unwrap();
    }

    /// An async caller that leads a flush that never ends is told the disk is stuck after
    /// `STUCK_AFTER`, as a caller waiting behind it is; the flush, once it ends, still counts.
    #[test]
    fn an_async_leader_whose_flush_never_ends_hears_an_error_not_durable() {
        let flushes = Arc::new(GroupFlush::default());
        // Made before the channel, so that a failing test drops `release` (ending the flush)
        // before the runtime, which waits for its blocking threads.
        let rt = runtime();
        let (release, stuck) = mpsc::channel::<()>();
        let leading = Arc::clone(&flushes).durable(1, move || {
            stuck.recv().unwrap();
            Ok(1)
        });
        let waited = rt.block_on(async { tokio::time::timeout(3 * STUCK_AFTER, leading).await });
        let waited = waited.expect("the leader still waits for its stuck flush");
        assert!(matches!(waited, Err(StoreError::Io(_))), "{waited:?}");
        release.send(()).unwrap();
        flushes.flush(1, || panic!("flushed again")).unwrap();
    }

    /// A flush that fails makes nothing durable: the leader hears the error, and the next
    /// caller for the same writes flushes again rather than being told they are on disk.
    #[test]
    fn a_failed_flush_counts_for_nobody() {
        let flushes = Arc::new(GroupFlush::default());
        let rt = runtime();
        let failed =
            rt.block_on(Arc::clone(&flushes).durable(1, || Err(StoreError::Io("no space".into()))));
        assert!(matches!(failed, Err(StoreError::Io(_))), "{failed:?}");
        let (ran, heard) = mpsc::channel();
        rt.block_on(Arc::clone(&flushes).durable(1, move || {
            ran.send(()).unwrap();
            Ok(1)
        }))
        .unwrap();
        assert!(
            heard.try_recv().is_ok(),
            "the writes were taken as durable unflushed"
        );
        // Now they are: a later caller for them returns without a flush.
        flushes.flush(1, || panic!("flushed again")).unwrap();
    }
}
