//! Bounded connections: the accept loop behind [`crate::serve`].
//!
//! Every open connection holds one of the process's file descriptors, and the descriptors
//! run out long before memory does: with a limit of 1,024, about a thousand clients that
//! connect and send nothing (or a byte a minute) used to take the server offline, and a
//! request announcing a body it never sent held its connection for as long as the client
//! liked. So:
//! - at most [`Limits::max_connections`] connections are served at once; further clients
//!   wait in the kernel's listen backlog, which costs no descriptor of ours, until one closes;
//! - a connection with no request in flight is closed after [`Limits::idle_timeout`] without
//!   a byte, or [`Limits::header_timeout`] after a request's first byte without its whole head
//!   (the clocks run only between requests, and an answer's bytes going out restart the idle
//!   one: a long answer, an event stream, a large body read slowly, is not idle);
//! - a body is read within [`Limits::body_timeout`] (the `Body` extractor answers a JSON 408);
//! - a head whose URI or header fields pass the bounds below gets a JSON 414 or 431 from
//!   [`head_limits`]; hyper's own, higher, bounds answer with an empty body before any of our
//!   code runs, as does its 400 for a head that does not parse.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use agentmesh_manifest::model::host::Policy;
use axum::Router;
use axum::extract::Request;
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http_body_util::BodyExt;
use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, Semaphore};
use tokio::time::Instant;
use tower::ServiceExt;

use crate::ApiError;

/// Connections served at once unless `policy.max_connections` says otherwise.
const DEFAULT_MAX_CONNECTIONS: usize = 1024;

/// How long a request's head may take once its first byte arrived, by default.
const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a whole request body may take, by default: 25 MiB (the default body cap) at
/// about 440 KB/s.
const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(60);

/// How long a connection may stay open with nothing in flight and nothing arriving, by default.
const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// The longest URI answered; longer ones get a JSON 414. No route needs more (ids are short,
/// query strings hold a few filters), and a long URI only costs parsing and log space.
pub const MAX_URI_BYTES: usize = 8 * 1024;

/// The most header fields a request may carry; more get a JSON 431 (hyper refuses past
/// 200 on its own). Each field costs a map entry per request.
pub const MAX_HEADERS: usize = 100;

/// The most bytes of header fields (names and values) a request may carry; more get a JSON
/// 431. Webhook platforms send a few KiB; the bound keeps a request's head small.
pub const MAX_HEADER_BYTES: usize = 64 * 1024;

/// Header fields hyper parses before it refuses a head itself (an empty 431): above
/// [`MAX_HEADERS`], so that the JSON answer is the one clients normally see.
const HYPER_MAX_HEADERS: usize = 2 * MAX_HEADERS;

/// The read buffer of a connection: hyper refuses a head still unfinished once this much is
/// buffered (an empty 431; it checks after each read, so the bound is loose by up to one
/// read). Above [`MAX_HEADER_BYTES`] plus [`MAX_URI_BYTES`], and what bounds the memory a
/// connection sending a head can make the server hold.
const HYPER_MAX_BUF: usize = 256 * 1024;

/// The descriptors held back from connections for the store, the compiled-component cache,
/// the config watcher and outgoing calls: half of the limit.
fn connection_share(fd_limit: u64) -> usize {
    usize::try_from(fd_limit / 2).unwrap_or(usize::MAX).max(1)
}

/// The connection bounds in force (`policy.max_connections`, `header_timeout`,
/// `body_timeout`, `idle_timeout`); they apply at start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Connections served at once.
    pub max_connections: usize,
    /// How long a request's head may take once its first byte arrived.
    pub header_timeout: Duration,
    /// How long a whole request body may take.
    pub body_timeout: Duration,
    /// How long a connection may stay open with nothing in flight and nothing arriving.
    pub idle_timeout: Duration,
}

impl Limits {
    /// The bounds of `policy` for this process, once its file-descriptor soft limit is raised
    /// to its hard limit; logs the limit and the connection cap.
    pub fn at_start(policy: &Policy) -> Limits {
        let fd_limit = raise_fd_limit().unwrap_or_else(|e| {
            let limit = fd_limit().unwrap_or(ASSUMED_FD_LIMIT);
            tracing::warn!(
                "cannot raise the file-descriptor soft limit to the hard limit ({e}); \
                 it stays {limit}"
            );
            limit
        });
        let limits = Limits::of(policy, fd_limit);
        tracing::info!(
            "file-descriptor limit {fd_limit}: serving at most {} connections at once",
            limits.max_connections
        );
        limits
    }

    /// The bounds of `policy` for a process allowed `fd_limit` descriptors: the connection cap
    /// is never more than half of them, whatever the policy says.
    pub fn of(policy: &Policy, fd_limit: u64) -> Limits {
        let wanted = policy.max_connections.map_or(DEFAULT_MAX_CONNECTIONS, |n| {
            usize::try_from(n).unwrap_or(usize::MAX)
        });
        let share = connection_share(fd_limit);
        if wanted > share {
            tracing::warn!(
                "policy.max_connections is {wanted}, but the file-descriptor limit {fd_limit} \
                 leaves room for {share}: serving at most {share} connections"
            );
        }
        Limits {
            max_connections: wanted.min(share).max(1),
            header_timeout: policy
                .header_timeout
                .map_or(DEFAULT_HEADER_TIMEOUT, |d| d.0),
            body_timeout: policy.body_timeout.map_or(DEFAULT_BODY_TIMEOUT, |d| d.0),
            idle_timeout: policy.idle_timeout.map_or(DEFAULT_IDLE_TIMEOUT, |d| d.0),
        }
    }
}

/// The descriptor limit assumed when the system does not tell: the usual soft limit.
const ASSUMED_FD_LIMIT: u64 = 1024;

/// Raises the process's file-descriptor soft limit to its hard limit; the limit in force
/// after, or the error of the system call (the limit is then unchanged).
fn raise_fd_limit() -> io::Result<u64> {
    let (_, hard) = rlimit::Resource::NOFILE.get()?;
    rlimit::increase_nofile_limit(hard)
}

/// The file-descriptor soft limit in force, `None` when it cannot be read.
fn fd_limit() -> Option<u64> {
    rlimit::Resource::NOFILE.get().ok().map(|(soft, _)| soft)
}

/// Accepts connections on `listener` and serves `router` on each, within `limits`, until
/// `shutdown` completes; then stops accepting and waits for the open connections to finish
/// their requests in flight.
pub async fn serve(
    router: Router,
    listener: TcpListener,
    limits: Limits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let graceful = GracefulShutdown::new();
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            () = &mut shutdown => break,
            accepted = accept(&listener, &permits) => accepted,
        };
        let (stream, permit) = accepted;
        let connection = serve_connection(stream, router.clone(), limits, graceful.watcher());
        tokio::spawn(async move {
            connection.await;
            drop(permit);
        });
    }
    drop(listener);
    graceful.shutdown().await;
}

/// The next connection, once one of `permits` is free: the backlog holds the others.
async fn accept(
    listener: &TcpListener,
    permits: &Arc<Semaphore>,
) -> (TcpStream, tokio::sync::OwnedSemaphorePermit) {
    loop {
        // The semaphore is never closed.
        let Ok(permit) = Arc::clone(permits).acquire_owned().await else {
            continue;
        };
        match listener.accept().await {
            Ok((stream, _)) => return (stream, permit),
            Err(e) => {
                // Out of descriptors (EMFILE) or a connection reset while queued: the open
                // connections close by their timeouts; try again shortly instead of spinning.
                tracing::warn!("accepting a connection failed: {e}");
                drop(permit);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// What a connection is doing, as the idle and header clocks see it.
#[derive(Debug, Clone, Copy)]
enum Phase {
    /// No request in flight and no byte of the next one, since then.
    Idle(Instant),
    /// The first byte of a request's head arrived then; the head is not complete.
    Head(Instant),
    /// This many requests are in flight (their answers not yet fully sent).
    Busy(usize),
}

/// A connection's [`Phase`], shared by its reader, its service and its watchdog.
struct Activity {
    phase: Mutex<Phase>,
    changed: Notify,
}

impl Activity {
    fn new() -> Arc<Self> {
        Arc::new(Activity {
            phase: Mutex::new(Phase::Idle(Instant::now())),
            changed: Notify::new(),
        })
    }

    fn update(&self, f: impl FnOnce(Phase) -> Phase) {
        let mut phase = self.phase.lock().unwrap_or_else(PoisonError::into_inner);
        *phase = f(*phase);
        self.changed.notify_waiters();
    }

    /// Bytes arrived from the client.
    fn received(&self) {
        self.update(|phase| match phase {
            Phase::Idle(_) => Phase::Head(Instant::now()),
            other => other,
        });
    }

    /// Bytes of an answer went out: a connection still sending what a finished request
    /// answered (hyper holds a large body after it took it from the handler) is not idle.
    /// The watchdog reads the new start when its sleep ends; no need to wake it.
    fn sent(&self) {
        let mut phase = self.phase.lock().unwrap_or_else(PoisonError::into_inner);
        if let Phase::Idle(_) = *phase {
            *phase = Phase::Idle(Instant::now());
        }
    }

    /// A request's head is complete: it is in flight until the guard is dropped.
    fn begin(self: &Arc<Self>) -> InFlight {
        self.update(|phase| match phase {
            Phase::Busy(n) => Phase::Busy(n + 1),
            _ => Phase::Busy(1),
        });
        InFlight(Arc::clone(self))
    }

    /// When the connection is to be closed if nothing changes, `None` while busy.
    fn deadline(&self, limits: Limits) -> Option<Instant> {
        match *self.phase.lock().unwrap_or_else(PoisonError::into_inner) {
            Phase::Idle(since) => Some(since + limits.idle_timeout),
            Phase::Head(since) => Some(since + limits.header_timeout),
            Phase::Busy(_) => None,
        }
    }

    /// Completes when the connection has been idle, or reading a head, for too long.
    async fn expired(&self, limits: Limits) {
        loop {
            // Made before the phase is read, so that no change is missed.
            let changed = self.changed.notified();
            match self.deadline(limits) {
                Some(at) if at <= Instant::now() => return,
                Some(at) => tokio::select! {
                    () = tokio::time::sleep_until(at) => {},
                    () = changed => {},
                },
                None => changed.await,
            }
        }
    }
}

/// A request in flight on a connection; dropped once its answer is sent (or abandoned).
struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.update(|phase| match phase {
            Phase::Busy(n) if n > 1 => Phase::Busy(n - 1),
            _ => Phase::Idle(Instant::now()),
        });
    }
}

/// Serves one connection until it closes, until it stays idle (or in a head) too long, or,
/// once `drain` signals the shutdown, until its requests in flight are answered.
async fn serve_connection(stream: TcpStream, router: Router, limits: Limits, drain: Watcher) {
    let activity = Activity::new();
    let io = TokioIo::new(Watched {
        stream,
        activity: Arc::clone(&activity),
    });
    let requests = Arc::clone(&activity);
    let service = hyper::service::service_fn(move |request: Request<hyper::body::Incoming>| {
        let in_flight = requests.begin();
        let answer = router.clone().oneshot(request.map(axum::body::Body::new));
        async move {
            let Ok(response) = answer.await;
            // The guard lives as long as the answer's body: until it is sent or dropped.
            Ok::<_, Infallible>(response.map(|body| {
                axum::body::Body::new(body.map_frame(move |frame| {
                    let _in_flight = &in_flight;
                    frame
                }))
            }))
        }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .max_headers(HYPER_MAX_HEADERS)
        .max_buf_size(HYPER_MAX_BUF)
        // The header and idle clocks are ours (see `Activity`): hyper's would start when the
        // previous answer ends, so a kept-alive connection could not idle longer than a head
        // may take.
        .header_read_timeout(None);
    let connection = drain.watch(builder.serve_connection(io, service));
    tokio::pin!(connection);
    tokio::select! {
        served = connection.as_mut() => {
            if let Err(e) = served {
                tracing::debug!("connection ended with an error: {e}");
            }
        }
        () = activity.expired(limits) => {
            tracing::debug!("closing a connection idle or in a request head for too long");
        }
    }
}

/// A client connection whose reads move its [`Activity`] out of idle, and whose writes
/// restart its idle clock.
struct Watched {
    stream: TcpStream,
    activity: Arc<Activity>,
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let read = Pin::new(&mut self.stream).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.received();
        }
        read
    }
}

impl Watched {
    /// Tells the activity that bytes went out, if `written` says some did.
    fn wrote(&self, written: &Poll<io::Result<usize>>) {
        if matches!(written, Poll::Ready(Ok(n)) if *n > 0) {
            self.activity.sent();
        }
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let written = Pin::new(&mut self.stream).poll_write(cx, buf);
        self.wrote(&written);
        written
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let written = Pin::new(&mut self.stream).poll_write_vectored(cx, bufs);
        self.wrote(&written);
        written
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

/// Refuses a request whose URI or header fields pass [`MAX_URI_BYTES`], [`MAX_HEADERS`] or
/// [`MAX_HEADER_BYTES`] with a JSON 414 or 431, before any handler runs.
pub async fn head_limits(request: Request, next: Next) -> Response {
    let uri = request.uri().to_string().len();
    if uri > MAX_URI_BYTES {
        return ApiError::new(
            StatusCode::URI_TOO_LONG,
            "uri_too_long",
            format!("the URI has {uri} bytes; at most {MAX_URI_BYTES} are accepted"),
        )
        .into_response();
    }
    let headers = request.headers();
    let bytes: usize = headers
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len())
        .sum();
    if headers.len() > MAX_HEADERS || bytes > MAX_HEADER_BYTES {
        return ApiError::new(
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "headers_too_large",
            format!(
                "the request has {} header fields of {bytes} bytes; at most {MAX_HEADERS} \
                 fields of {MAX_HEADER_BYTES} bytes in all are accepted",
                headers.len()
            ),
        )
        .into_response();
    }
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_cap_stays_under_half_the_descriptor_limit() {
        let policy = Policy::default();
        assert_eq!(Limits::of(&policy, 1_048_576).max_connections, 1024);
        assert_eq!(Limits::of(&policy, 1024).max_connections, 512);
        assert_eq!(Limits::of(&policy, 256).max_connections, 128);
        let policy = Policy {
            max_connections: Some(100),
            ..Policy::default()
        };
        assert_eq!(Limits::of(&policy, 1024).max_connections, 100);
        assert_eq!(Limits::of(&policy, 0).max_connections, 1);
    }

    #[test]
    fn timeouts_default_when_the_policy_names_none() {
        let limits = Limits::of(&Policy::default(), 1024);
        assert_eq!(limits.header_timeout, DEFAULT_HEADER_TIMEOUT);
        assert_eq!(limits.body_timeout, DEFAULT_BODY_TIMEOUT);
        assert_eq!(limits.idle_timeout, DEFAULT_IDLE_TIMEOUT);
    }
}
