//! Group commit: many callers that each need their writes durable share one fsync.

use std::sync::Mutex;

use crate::Result;

/// Hands out flushes. A caller brings a ticket (the write count it needs on disk); if a flush
/// that started after its writes has completed, it returns at once, otherwise it becomes the
/// leader and flushes for everyone waiting behind it. sled's `flush` is an fsync (~135 µs
/// here), so under concurrent acknowledgements this turns N fsyncs into about one per round.
#[derive(Default)]
pub(crate) struct GroupFlush {
    /// The highest write count known to be durable.
    done: Mutex<u64>,
}

impl GroupFlush {
    /// Ensures writes up to `ticket` are durable; `flush` performs one flush and returns the
    /// write count it covered.
    pub(crate) fn flush(&self, ticket: u64, flush: impl FnOnce() -> Result<u64>) -> Result<()> {
        let mut done = self
            .done
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if *done >= ticket {
            return Ok(());
        }
        let covered = flush()?;
        *done = (*done).max(covered);
        Ok(())
    }
}
