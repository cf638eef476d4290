//! A component's stdout and stderr: lines go to the host's log (`tracing`), tagged with the
//! component's name; nothing reaches the host's own stdio.
//!
//! The last whole lines written to stderr are kept for the current call: a Rust guest prints its
//! panic message there before it traps, and the host puts that message into the error.
//!
//! What a call writes through the `log` import is budgeted here too ([`LogBudget`]).

use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use agentmesh_secrets::SharedSecrets;
use bytes::Bytes;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};

/// The longest line logged; the rest of a longer line is dropped.
///
/// A guest controls what it prints: without a bound one `print!` of its whole memory would
/// become one giant log record in every log pipeline downstream.
const MAX_LINE: usize = 4096;
/// How much a store may log over its life before its output is dropped (with one warning).
///
/// Stops a guest printing in a loop from flooding the host's log (and disk).
const MAX_TOTAL: usize = 1024 * 1024;
/// How much of stderr is kept for the error message of the current call (whole lines: a
/// longer line is not kept).
const TAIL: usize = 2048;

/// Which stream.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Stream {
    Stdout,
    Stderr,
}

impl Stream {
    fn name(self) -> &'static str {
        match self {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        }
    }
}

/// What a store's two streams share.
#[derive(Debug, Default)]
pub(crate) struct Output {
    /// Bytes logged so far.
    total: usize,
    /// Whether the flood warning was given.
    warned: bool,
    /// The end of stderr since the current call began.
    pub(crate) stderr_tail: String,
}

impl Output {
    /// Clears the per-call stderr tail (a call begins).
    pub(crate) fn begin_call(&mut self) {
        self.stderr_tail.clear();
    }
}

/// One of a component's output streams.
#[derive(Clone)]
pub(crate) struct LogStream {
    component: Arc<str>,
    stream: Stream,
    output: Arc<Mutex<Output>>,
    /// Hidden in a line before it is cut at [`MAX_LINE`].
    secrets: SharedSecrets,
    /// A line not yet ended: at most [`MAX_LINE`] bytes and as many more as the longest
    /// secret, so that a secret across the cut is hidden whole.
    pending: Vec<u8>,
}

impl LogStream {
    pub(crate) fn new(
        component: Arc<str>,
        stream: Stream,
        output: Arc<Mutex<Output>>,
        secrets: SharedSecrets,
    ) -> Self {
        LogStream {
            component,
            stream,
            output,
            secrets,
            pending: Vec::new(),
        }
    }

    fn accept(&mut self, bytes: &[u8]) {
        let mut output = self.output.lock().unwrap_or_else(PoisonError::into_inner);
        if let Stream::Stderr = self.stream {
            output.stderr_tail.push_str(&String::from_utf8_lossy(bytes));
            let excess = output.stderr_tail.len().saturating_sub(TAIL);
            if excess > 0 {
                // Whole lines go, never the start of one: the tail ends up in an error, whose
                // secrets are hidden by value, and a secret cut here would not be recognised.
                let cut = output.stderr_tail.as_bytes()[excess..]
                    .iter()
                    .position(|&b| b == b'\n')
                    .map_or(output.stderr_tail.len(), |at| excess + at + 1);
                output.stderr_tail.drain(..cut);
            }
        }
        if output.total >= MAX_TOTAL {
            if !output.warned {
                output.warned = true;
                tracing::warn!(
                    component.name = &*self.component,
                    "component output exceeds {MAX_TOTAL} bytes; dropping the rest"
                );
            }
            return;
        }
        output.total += bytes.len();
        drop(output);
        let read = MAX_LINE.saturating_add(self.secrets.get().longest());
        for &b in bytes {
            if b == b'\n' {
                self.emit();
            } else if self.pending.len() < read {
                self.pending.push(b);
            }
        }
    }

    fn emit(&mut self) {
        let line = String::from_utf8_lossy(&self.pending);
        let secrets = self.secrets.get();
        let (line, _) = secrets.scrub_prefix(&line, MAX_LINE);
        let line = line.trim_end_matches('\r');
        match self.stream {
            Stream::Stdout => tracing::info!(
                component.name = &*self.component,
                stream = "stdout",
                "{line}"
            ),
            Stream::Stderr => tracing::warn!(
                component.name = &*self.component,
                stream = "stderr",
                "{line}"
            ),
        }
        self.pending.clear();
    }
}

impl Drop for LogStream {
    fn drop(&mut self) {
        if !self.pending.is_empty() {
            self.emit();
        }
    }
}

impl LogStream {
    /// The same stream, with no line pending.
    fn fresh(&self) -> LogStream {
        LogStream::new(
            self.component.clone(),
            self.stream,
            self.output.clone(),
            self.secrets.clone(),
        )
    }
}

impl IsTerminal for LogStream {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for LogStream {
    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.fresh())
    }

    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.fresh())
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for LogStream {
    async fn ready(&mut self) {}
}

impl OutputStream for LogStream {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.accept(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(64 * 1024)
    }
}

impl tokio::io::AsyncWrite for LogStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.accept(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

impl std::fmt::Debug for LogStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LogStream({}, {})", self.component, self.stream.name())
    }
}

/// How many bytes of log messages one call may write; the call's later messages are dropped,
/// and one line says how many.
///
/// Each message is cut at 4 KiB (see `host`), but a guest calling `log` in a loop would flood
/// the host's log (its disk, every sink downstream) for as long as its timeout lets it run.
const MAX_LOG_PER_CALL: usize = 64 * 1024;

/// What a store's `log` calls have taken of the current call's budget
/// ([`MAX_LOG_PER_CALL`]).
#[derive(Debug, Default)]
pub(crate) struct LogBudget {
    /// Bytes logged in the current call.
    used: usize,
    /// A message of the current call did not fit: this and every later one is dropped.
    spent: bool,
    /// Messages dropped since the last report.
    dropped: usize,
    /// Their bytes.
    dropped_bytes: usize,
}

impl LogBudget {
    /// Gives the new call the whole budget (a call begins).
    pub(crate) fn begin_call(&mut self) {
        *self = LogBudget::default();
    }

    /// Whether a message of `len` bytes is logged: it fits what is left of the call's budget,
    /// and no earlier message of the call was dropped (the log keeps the call's first messages,
    /// in order). A message not logged is counted.
    pub(crate) fn admit(&mut self, len: usize) -> bool {
        if !self.spent && self.used + len <= MAX_LOG_PER_CALL {
            self.used += len;
            return true;
        }
        self.spent = true;
        self.dropped += 1;
        self.dropped_bytes += len;
        false
    }

    /// The line saying what was dropped since it last said so, if anything was.
    pub(crate) fn take_dropped(&mut self) -> Option<String> {
        if self.dropped == 0 {
            return None;
        }
        let line = format!(
            "dropped {} log messages ({} bytes) of this call: over its budget of {MAX_LOG_PER_CALL} bytes",
            self.dropped, self.dropped_bytes
        );
        self.dropped = 0;
        self.dropped_bytes = 0;
        Some(line)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_stderr_tail_drops_whole_lines_only() {
        let output = Arc::new(Mutex::new(Output::default()));
        let secrets = SharedSecrets::default();
        let mut stream = LogStream::new("c".into(), Stream::Stderr, Arc::clone(&output), secrets);
        // The cut of the first 10 bytes over the tail falls inside the first line.
        stream.accept(b"sk-secret-value-1\n");
        stream.accept(format!("{}\n", "x".repeat(TAIL - 18 + 9)).as_bytes());
        let tail = output.lock().unwrap().stderr_tail.clone();
        assert!(!tail.contains("value-1"), "{tail}");
        stream.accept(b"panicked at src/lib.rs:1:2:\n");
        let tail = output.lock().unwrap().stderr_tail.clone();
        // Over the tail again: the long line goes whole.
        assert_eq!(tail, "panicked at src/lib.rs:1:2:\n");
    }

    /// What a test's log records were written as.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_secret_across_a_lines_cut_is_hidden_whole() {
        let secret = "sk-live-0123456789abcdef";
        let secrets = SharedSecrets::default();
        secrets.set(Arc::new(agentmesh_secrets::Secrets::new([secret]).unwrap()));
        let logged = Captured::default();
        let writer = logged.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            let output = Arc::new(Mutex::new(Output::default()));
            let mut stream = LogStream::new("c".into(), Stream::Stdout, output, secrets);
            stream.accept(format!("{}{secret} and on\n", "x".repeat(MAX_LINE - 5)).as_bytes());
        });
        let logged = String::from_utf8(logged.0.lock().unwrap().clone()).unwrap();
        assert!(logged.contains("xxxxx***"), "{logged}");
        assert!(!logged.contains("sk-li"), "{logged}");
    }

    #[test]
    fn the_log_budget_keeps_a_calls_first_messages_and_counts_the_rest() {
        let mut budget = LogBudget::default();
        assert!(budget.admit(MAX_LOG_PER_CALL - 10));
        assert_eq!(budget.take_dropped(), None);
        assert!(!budget.admit(11));
        // Once one is dropped, so are the later ones, even those that would fit.
        assert!(!budget.admit(1));
        assert_eq!(
            budget.take_dropped().as_deref(),
            Some("dropped 2 log messages (12 bytes) of this call: over its budget of 65536 bytes")
        );
        assert_eq!(budget.take_dropped(), None);
        assert!(!budget.admit(1));
        assert!(budget.take_dropped().is_some());
        // The next call has the whole budget again.
        budget.begin_call();
        assert!(budget.admit(MAX_LOG_PER_CALL));
    }
}
