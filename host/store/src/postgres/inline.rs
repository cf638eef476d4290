//! Sessions driven on the calling thread: a store call's statement is sent, and its answer
//! read, by the thread that makes the call, which waits for the socket itself (`poll(2)`).
//!
//! A session of the pool runs on the store's runtime: each statement hands its request to that
//! runtime's thread and waits to be woken with the answer, two hand-offs between threads per
//! round trip on top of the database's own. A thread that makes store calls one after another
//! and may block in them — a turn's, marked with [`drive_sessions_here`] — drives a session
//! itself instead: a round trip costs what the database and the socket cost (see
//! BENCHMARKS.md, "A turn on the PostgreSQL store"). Other callers keep the pool, whose one
//! runtime thread serves many concurrent calls with fewer wake-ups (the door under a webhook
//! load). A session belongs to no thread; between calls it waits in the store's [`Sessions`].

use std::cell::Cell;
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream, ToSocketAddrs};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_postgres::config::Host;
use tokio_postgres::tls::NoTlsStream;
use tokio_postgres::{Client, Config, Connection, NoTls, Statement};

use crate::{Result, StoreError};

/// How long a call waits for a session when all of them are busy.
const WAIT_FOR_SESSION: Duration = Duration::from_secs(30);

/// The connect timeout when the URL names none.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

thread_local! {
    /// Whether this thread drives sessions itself ([`drive_sessions_here`]).
    static DRIVES: Cell<bool> = const { Cell::new(false) };
}

/// Marks the calling thread as one that makes store calls one after another and may block in
/// them for as long as they take: on PostgreSQL its calls run on sessions it drives itself.
pub fn drive_sessions_here() {
    DRIVES.with(|d| d.set(true));
}

/// Whether the calling thread drives sessions itself.
pub(crate) fn drives_sessions() -> bool {
    DRIVES.with(Cell::get)
}

/// A session for one call: one the caller drives ([`Sessions::run`]), or one of the pool.
pub(crate) enum Session {
    /// The client of a session driven by the caller, and the statements prepared on it.
    Driven {
        client: Arc<Client>,
        statements: Arc<Mutex<HashMap<&'static str, Statement>>>,
    },
    /// A session of the pool (its connection on the store's runtime).
    Pooled(Box<deadpool_postgres::Object>),
}

impl std::ops::Deref for Session {
    type Target = Client;

    fn deref(&self) -> &Client {
        match self {
            Session::Driven { client, .. } => client,
            Session::Pooled(object) => object,
        }
    }
}

impl Session {
    /// `sql` prepared on this session's connection: once per connection, then from its cache.
    pub(crate) async fn prepare_cached(
        &self,
        sql: &'static str,
    ) -> std::result::Result<Statement, tokio_postgres::Error> {
        let (client, statements) = match self {
            Session::Driven { client, statements } => (client, statements),
            Session::Pooled(object) => return object.prepare_cached(sql).await,
        };
        let cached = lock(statements).get(sql).cloned();
        if let Some(statement) = cached {
            return Ok(statement);
        }
        let statement = client.prepare(sql).await?;
        lock(statements).insert(sql, statement.clone());
        Ok(statement)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A nonblocking socket to the database, shared by the connection (which reads and writes
/// it) and the driver (which waits for it).
enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Stream {
    /// This socket, its reads and writes made not to block.
    fn nonblocking(self) -> std::io::Result<Stream> {
        match &self {
            Stream::Tcp(s) => s.set_nonblocking(true)?,
            Stream::Unix(s) => s.set_nonblocking(true)?,
        }
        Ok(self)
    }

    fn fd(&self) -> BorrowedFd<'_> {
        match self {
            Stream::Tcp(s) => s.as_fd(),
            Stream::Unix(s) => s.as_fd(),
        }
    }
}

/// What the connection reads and writes through, and whether a write is waiting for room.
struct Shared {
    stream: Stream,
    wants_write: AtomicBool,
}

/// The connection's end of the socket: reads and writes that would block are `Pending`, and
/// the driver waits for the socket before polling again (there is no reactor to wake it).
struct Socket(Arc<Shared>);

impl AsyncRead for Socket {
    fn poll_read(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let read = match &self.0.stream {
            Stream::Tcp(s) => (&*s).read(buf.initialize_unfilled()),
            Stream::Unix(s) => (&*s).read(buf.initialize_unfilled()),
        };
        match read {
            Ok(n) => {
                buf.advance(n);
                Poll::Ready(Ok(()))
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Poll::Pending,
            Err(e) => Poll::Ready(Err(e)),
        }
    }
}

impl AsyncWrite for Socket {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let written = match &self.0.stream {
            Stream::Tcp(s) => (&*s).write(buf),
            Stream::Unix(s) => (&*s).write(buf),
        };
        match written {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                self.0.wants_write.store(true, Ordering::Relaxed);
                Poll::Pending
            }
            other => Poll::Ready(other),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let shut = match &self.0.stream {
            Stream::Tcp(s) => s.shutdown(Shutdown::Write),
            Stream::Unix(s) => s.shutdown(Shutdown::Write),
        };
        Poll::Ready(shut)
    }
}

/// Remembers that a future was woken: the driver polls again before it waits for the socket.
struct Woken(AtomicBool);

impl Wake for Woken {
    fn wake(self: Arc<Self>) {
        self.0.store(true, Ordering::Relaxed);
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// An open session: its socket, client (with its prepared statements) and connection.
struct Open {
    shared: Arc<Shared>,
    client: Arc<Client>,
    statements: Arc<Mutex<HashMap<&'static str, Statement>>>,
    connection: Pin<Box<Connection<Socket, NoTlsStream>>>,
}

impl Open {
    /// Whether the connection is still open: what arrived while the session waited (a notice,
    /// the server's goodbye) is read without waiting.
    fn alive(&mut self) -> bool {
        let mut cx = Context::from_waker(Waker::noop());
        self.connection.as_mut().poll(&mut cx).is_pending()
    }
}

/// Polls `future` (and `connection`, when there is one) on this thread until `future` is
/// ready, waiting for the socket whenever neither can move. A connection that ends or fails
/// ends the wait with its error; so does `deadline` passing (the session's state is unknown
/// then: its caller closes it).
fn drive<F: Future>(
    shared: &Shared,
    mut connection: Option<Pin<&mut Connection<Socket, NoTlsStream>>>,
    future: F,
    deadline: Deadline,
) -> Result<F::Output> {
    let woken = Arc::new(Woken(AtomicBool::new(false)));
    let waker = Waker::from(Arc::clone(&woken));
    let mut cx = Context::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    loop {
        woken.0.store(false, Ordering::Relaxed);
        if let Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return Ok(out);
        }
        if let Some(connection) = connection.as_mut() {
            match connection.as_mut().poll(&mut cx) {
                Poll::Pending => {}
                Poll::Ready(Ok(())) => {
                    return Err(StoreError::Io(
                        "PostgreSQL: the session's connection closed".into(),
                    ));
                }
                Poll::Ready(Err(e)) => return Err(super::db(e)),
            }
        }
        if woken.0.load(Ordering::Relaxed) {
            continue;
        }
        // Nothing moves until the socket does.
        let mut flags = PollFlags::IN;
        if shared.wants_write.swap(false, Ordering::Relaxed) {
            flags |= PollFlags::OUT;
        }
        let left = rustix::event::Timespec::try_from(deadline.left()?).ok();
        let mut fds = [PollFd::from_borrowed_fd(shared.stream.fd(), flags)];
        match rustix::event::poll(&mut fds, left.as_ref()) {
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => {
                return Err(StoreError::Io(format!(
                    "PostgreSQL: waiting for the session's socket: {e}"
                )));
            }
        }
    }
}

/// When a call gives up on the database.
#[derive(Clone, Copy)]
struct Deadline {
    at: Instant,
    /// What the wait is for, and the time it was given, for the error.
    waited_for: &'static str,
    given: Duration,
}

impl Deadline {
    fn after(given: Duration, waited_for: &'static str) -> Deadline {
        Deadline {
            at: Instant::now() + given,
            waited_for,
            given,
        }
    }

    /// The time left; an error once there is none.
    fn left(&self) -> Result<Duration> {
        let left = self.at.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(unanswered(self.waited_for, self.given));
        }
        Ok(left)
    }
}

/// The error of a wait for the database (`waited_for`) that gave up after `given`.
pub(crate) fn unanswered(waited_for: &str, given: Duration) -> StoreError {
    StoreError::Io(format!(
        "PostgreSQL did not answer {waited_for} within {:.1}s",
        given.as_secs_f64()
    ))
}

/// Connects to the first of `config`'s hosts that answers, over a nonblocking socket.
fn connect(config: &Config) -> Result<Open> {
    let timeout = config
        .get_connect_timeout()
        .copied()
        .unwrap_or(CONNECT_TIMEOUT);
    let deadline = Deadline::after(timeout, "a new session's start-up");
    let ports = config.get_ports();
    let mut last = String::from("the URL names no host");
    for (i, host) in config.get_hosts().iter().enumerate() {
        let port = ports.get(i).or(ports.first()).copied().unwrap_or(5432);
        let stream = match host {
            Host::Tcp(name) => tcp(name, port, timeout).map(Stream::Tcp),
            Host::Unix(dir) => {
                UnixStream::connect(dir.join(format!(".s.PGSQL.{port}"))).map(Stream::Unix)
            }
        };
        let stream = match stream.and_then(Stream::nonblocking) {
            Ok(stream) => stream,
            Err(e) => {
                last = format!("{host:?} port {port}: {e}");
                continue;
            }
        };
        let shared = Arc::new(Shared {
            stream,
            wants_write: AtomicBool::new(false),
        });
        let socket = Socket(Arc::clone(&shared));
        match drive(&shared, None, config.connect_raw(socket, NoTls), deadline)? {
            Ok((client, connection)) => {
                return Ok(Open {
                    shared,
                    client: Arc::new(client),
                    statements: Arc::default(),
                    connection: Box::pin(connection),
                });
            }
            Err(e) => last = format!("{host:?} port {port}: {e}"),
        }
    }
    Err(StoreError::Io(format!(
        "cannot connect to PostgreSQL: {last}"
    )))
}

/// A TCP connection to `name`:`port` (the first address that answers), without Nagle's delay.
fn tcp(name: &str, port: u16, timeout: Duration) -> std::io::Result<TcpStream> {
    let mut last = std::io::Error::new(std::io::ErrorKind::NotFound, "no address");
    for addr in (name, port).to_socket_addrs()? {
        match TcpStream::connect_timeout(&addr, timeout) {
            Ok(stream) => {
                stream.set_nodelay(true)?;
                return Ok(stream);
            }
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// A store's sessions driven by their callers: at most `max`, opened as calls need them.
pub(crate) struct Sessions {
    config: Config,
    max: usize,
    /// How long a call waits for the database's answer (see [`Sessions::new`]).
    answer_within: Duration,
    /// Sessions waiting for a call, and how many are open in all.
    idle: Mutex<(Vec<Open>, usize)>,
    freed: Condvar,
}

impl Sessions {
    /// Up to `max` sessions to the database of `config` (opened as calls need them), whose
    /// calls fail when the database does not answer them within `answer_within`.
    pub(crate) fn new(config: Config, max: usize, answer_within: Duration) -> Sessions {
        Sessions {
            config,
            max: max.max(1),
            answer_within,
            idle: Mutex::new((Vec::new(), 0)),
            freed: Condvar::new(),
        }
    }

    /// Runs `work` on a session, driving it on this thread; a session whose connection failed,
    /// or whose answer did not come in time, is closed; the others wait for the next call.
    pub(crate) fn run<T, F>(&self, work: impl FnOnce(Session) -> F) -> Result<T>
    where
        F: Future<Output = Result<T>>,
    {
        let mut open = self.take()?;
        let outcome = {
            let Open {
                shared,
                client,
                statements,
                connection,
            } = &mut open;
            let session = Session::Driven {
                client: Arc::clone(client),
                statements: Arc::clone(statements),
            };
            let deadline = Deadline::after(self.answer_within, "a call");
            drive(shared, Some(connection.as_mut()), work(session), deadline)
        };
        match outcome {
            Ok(result) => {
                self.give_back(open);
                result
            }
            Err(e) => {
                self.closed();
                Err(e)
            }
        }
    }

    /// An idle session, a new one while fewer than `max` are open, else the first one freed.
    fn take(&self) -> Result<Open> {
        let mut idle = lock(&self.idle);
        loop {
            while let Some(mut open) = idle.0.pop() {
                if open.alive() {
                    return Ok(open);
                }
                // Closed while it waited (the server went away, or ended idle sessions).
                idle.1 -= 1;
            }
            if idle.1 < self.max {
                idle.1 += 1;
                drop(idle);
                return connect(&self.config).inspect_err(|_| self.closed());
            }
            let (guard, waited) = self
                .freed
                .wait_timeout(idle, WAIT_FOR_SESSION)
                .unwrap_or_else(PoisonError::into_inner);
            idle = guard;
            if waited.timed_out() && idle.0.is_empty() {
                return Err(StoreError::Io(format!(
                    "PostgreSQL: all {} sessions stayed busy for {}s",
                    self.max,
                    WAIT_FOR_SESSION.as_secs()
                )));
            }
        }
    }

    fn give_back(&self, open: Open) {
        lock(&self.idle).0.push(open);
        self.freed.notify_one();
    }

    /// A session was closed (or never opened): room for another.
    fn closed(&self) {
        lock(&self.idle).1 -= 1;
        self.freed.notify_one();
    }
}
