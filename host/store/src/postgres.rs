//! [`PgStore`]: the backend on PostgreSQL, for a host whose state lives in a database it
//! already operates.
//!
//! Every operation is one statement (a multi-step write is a function the schema defines), so
//! it is one transaction and one round trip. Durability maps onto PostgreSQL's own: the pool's
//! sessions commit with `synchronous_commit = off` (a `…_buffered` write is atomic at once,
//! durable once the write-ahead log reaches the disk), while `…_durably` writes and
//! [`Durability::flush`] commit synchronously — a synchronous commit waits for the log up to
//! itself, which covers every earlier commit, so concurrent flushes share the server's fsyncs
//! (its own group commit).
//!
//! The schema is versioned ([`migrate`]): migrations are compiled into the binary and applied
//! under an advisory lock, so hosts starting together migrate once; a database whose schema is
//! newer than the binary knows is refused. The migrations hold the tables; the functions are
//! kept as the newest version has them (`migrations/postgres/functions.sql`) and installed in
//! the transaction that brings a database to that version.
//!
//! The client is `tokio-postgres`. The backend traits are synchronous: a call waits for its
//! statement on the calling thread (see `PgStore::run`), so async code calls the store where
//! a thread may block — the engine does so on its turn pool, or after `block_in_place` (its
//! `Offloaded` store) — and a slow database holds up no worker that must answer. A turn's
//! thread drives a session of its own while a call lasts (`inline`, [`drive_sessions_here`]);
//! other callers' sessions come from a pool (`deadpool-postgres`) whose connections run on a
//! small runtime of the store's own, with the session that listens for the other hosts'
//! notices.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use agentmesh_model::event::Event;
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;
use tokio_postgres::{NoTls, Row};

use crate::chunk;
use crate::copy::{Copied, Item};

mod inline;

use crate::{
    AppendHook, Dedupe, Delivery, Durability, Durable, HostState, Lease, Leases, Notice,
    NoticeHook, PluginKv, QueueKey, Queues, RawRecord, RawWrite, Result, StoreError, TaskLogs,
    Written, now_ms,
};
pub use inline::drive_sessions_here;

/// The schema's migrations, in order: version `i + 1` is `MIGRATIONS[i]`.
const MIGRATIONS: [&str; 10] = [
    include_str!("../migrations/postgres/0001_store.sql"),
    include_str!("../migrations/postgres/0002_hosts.sql"),
    include_str!("../migrations/postgres/0003_queue_after_write.sql"),
    include_str!("../migrations/postgres/0004_one_row_a_write.sql"),
    include_str!("../migrations/postgres/0005_forget_dead_hosts.sql"),
    include_str!("../migrations/postgres/0006_a_lapsed_writer_takes_nothing.sql"),
    include_str!("../migrations/postgres/0007_a_lapsed_writer_takes_no_free_lease.sql"),
    include_str!("../migrations/postgres/0008_queued_input_tells_its_holder.sql"),
    include_str!("../migrations/postgres/0009_queuing_says_whom_it_told.sql"),
    include_str!("../migrations/postgres/0010_functions_in_one_place.sql"),
];

/// The schema's functions as the newest version has them, installed with the migrations that
/// bring a database to it (see `apply_migrations`).
const FUNCTIONS: &str = include_str!("../migrations/postgres/functions.sql");

/// Drops every `agentmesh_` function of the schema, whatever its arguments, before
/// [`FUNCTIONS`] are installed: a database at any version ends with those and no other.
const DROP_FUNCTIONS: &str = r"DO $$
DECLARE
    f regprocedure;
BEGIN
    FOR f IN SELECT p.oid::regprocedure FROM pg_proc p
             WHERE p.proname LIKE 'agentmesh\_%' AND p.pronamespace = current_schema()::regnamespace
    LOOP
        EXECUTE 'DROP ROUTINE ' || f;
    END LOOP;
END
$$";

/// The advisory lock key under which migrations run (any number; this one spells "agentmsh").
const MIGRATION_LOCK: i64 = 0x6167_656e_746d_7368;

/// Ids a store takes from the database at once: the schema's sequence steps by this much, and
/// a store hands out the ids of its block in order before it asks for the next.
const ID_BLOCK: u64 = 1024;

/// How a [`PgStore`] is opened.
#[derive(Debug, Clone)]
pub struct PgOptions {
    /// `postgres://user:password@host:port/db` or `postgres:///db?host=/run/postgresql`.
    pub url: String,
    /// Connections in the pool.
    pub pool: usize,
    /// How long this host stays live after each [`Leases::renew_host`]: a host not heard from
    /// for this long loses its tasks to the others.
    pub lease: std::time::Duration,
}

/// The lease period when the host config names none.
pub const DEFAULT_LEASE: std::time::Duration = std::time::Duration::from_secs(10);

/// The channel hosts announce writes and send messages on (see the schema's `agentmesh_write`).
const CHANNEL: &str = "agentmesh";

/// The hooks the connection that listens on [`CHANNEL`] calls.
#[derive(Default)]
struct Hooks {
    append: std::sync::OnceLock<AppendHook>,
    notice: std::sync::OnceLock<NoticeHook>,
}

/// The store in a PostgreSQL database.
pub struct PgStore {
    /// The runtime the client runs on (taken when the store is dropped).
    runtime: Option<tokio::runtime::Runtime>,
    /// Sessions of callers that do not drive their own, and of migrations and imports.
    pool: Pool,
    /// Sessions driven by their callers (see `inline`).
    sessions: inline::Sessions,
    /// This host's id among those sharing the database.
    host: String,
    /// [`PgOptions::lease`], in seconds.
    lease_secs: f64,
    /// How long a call waits for the database's answer: the lease, past which this host's
    /// tasks would pass to another host anyway.
    answer_within: std::time::Duration,
    /// See [`PgStore::schema`].
    schema: (i32, i32),
    writes: AtomicU64,
    /// Calls that went to the database (each one statement and round trip, but for a
    /// session's first use of a statement, which prepares it too).
    round_trips: AtomicU64,
    /// The next id to give and the end of its block (see [`ID_BLOCK`]).
    ids: std::sync::Mutex<(u64, u64)>,
    /// The write count the last completed flush covered.
    flushed: AtomicU64,
    hooks: Arc<Hooks>,
    /// Whether [`Leases::end_host`] ran (else dropping the store runs it).
    ended: std::sync::atomic::AtomicBool,
    /// Whether this host registered itself once (see [`Leases::renew_host`]).
    registered: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore").finish_non_exhaustive()
    }
}

/// A database error as a store error: events that do not continue a log are a
/// [`StoreError::Conflict`], a lost connection [`StoreError::Io`] (it may pass), the rest
/// [`StoreError::Database`].
// By value: it is what `map_err` passes.
#[allow(clippy::needless_pass_by_value)]
fn db(e: tokio_postgres::Error) -> StoreError {
    let Some(d) = e.as_db_error() else {
        return StoreError::Io(format!("PostgreSQL: {e}"));
    };
    if d.code() == &SqlState::from_code("AM001") {
        StoreError::Conflict(d.message().to_owned())
    } else if d.code() == &SqlState::from_code("AM002") {
        StoreError::LeaseLost(d.message().to_owned())
    } else {
        StoreError::Database(format!("PostgreSQL: {}", d.message()))
    }
}

/// What failed in a schema change, with the server's detail (a migration is blocked by objects
/// of the database's own, which the detail names).
fn failure(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(d) => match d.detail() {
            Some(detail) => format!("PostgreSQL: {} ({detail})", d.message()),
            None => format!("PostgreSQL: {}", d.message()),
        },
        None => format!("PostgreSQL: {e}"),
    }
}

/// A session could not be had from the pool (the database is unreachable, or every session
/// stayed busy past the wait).
#[allow(clippy::needless_pass_by_value)]
fn no_session(e: deadpool_postgres::PoolError) -> StoreError {
    StoreError::Io(format!("PostgreSQL: {e}"))
}

/// The connection string `url` without its password, for messages: `***` stands for it in
/// each form libpq reads — a URL's user info (`postgres://ann:pw@host`) or `password`
/// parameter (`?password=pw`), and a `key=value` string's `password`, bare or quoted
/// (`password='p w'`). The parts are split as `tokio_postgres` splits them.
fn redacted(url: &str) -> String {
    let Some(rest) = ["postgres://", "postgresql://"]
        .iter()
        .find_map(|prefix| url.strip_prefix(prefix))
    else {
        return redacted_pairs(url);
    };
    let mut out = url[..url.len() - rest.len()].to_owned();
    // The user info ends at the first `@` (one in a password is written `%40`).
    let rest = match rest.split_once('@') {
        Some((credentials, rest)) => {
            match credentials.split_once(':') {
                Some((user, _)) => out.push_str(&format!("{user}:{REDACTED}@")),
                None => out.push_str(&format!("{credentials}@")),
            }
            rest
        }
        None => rest,
    };
    let Some((place, params)) = rest.split_once('?') else {
        out.push_str(rest);
        return out;
    };
    let params: Vec<String> = params
        .split('&')
        .map(|param| match param.split_once('=') {
            Some(("password", _)) => format!("password={REDACTED}"),
            _ => param.to_owned(),
        })
        .collect();
    out.push_str(&format!("{place}?{}", params.join("&")));
    out
}

/// What stands for a password in a message.
const REDACTED: &str = "***";

/// A `key=value …` connection string with the value of `password` replaced. What does not
/// read as `key=value` (libpq refuses it too) is hidden whole: it may hold the password.
fn redacted_pairs(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    loop {
        let key = rest.trim_start();
        out.push_str(&rest[..rest.len() - key.len()]);
        if key.is_empty() {
            return out;
        }
        let name_len = key
            .find(|c: char| c == '=' || c.is_whitespace())
            .unwrap_or(key.len());
        let Some(after) = key[name_len..].trim_start().strip_prefix('=') else {
            out.push_str(REDACTED);
            return out;
        };
        let value = after.trim_start();
        out.push_str(&key[..key.len() - value.len()]);
        let value_len = value_len(value);
        if &key[..name_len] == "password" {
            out.push_str(REDACTED);
        } else {
            out.push_str(&value[..value_len]);
        }
        rest = &value[value_len..];
    }
}

/// The length of the value `text` begins with: quoted (`'…'`) or up to whitespace, `\`
/// escaping the character after it in both.
fn value_len(text: &str) -> usize {
    let quoted = text.starts_with('\'');
    let mut chars = text.char_indices().skip(usize::from(quoted));
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' => {
                chars.next();
            }
            '\'' if quoted => return i + 1,
            c if !quoted && c.is_whitespace() => return i,
            _ => {}
        }
    }
    text.len()
}

impl PgStore {
    /// Connects to the database of `options`, applies the migrations it lacks (see
    /// [`migrate`]), records this host as live and listens for the other hosts' notices.
    pub fn open(options: &PgOptions) -> Result<PgStore> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("agentmesh-postgres")
            .enable_all()
            .build()
            .map_err(|e| StoreError::Io(format!("starting the PostgreSQL client: {e}")))?;
        let mut config: tokio_postgres::Config = options.url.parse().map_err(|e| {
            StoreError::Database(format!(
                "`{}` is not a PostgreSQL URL: {e}",
                redacted(&options.url)
            ))
        })?;
        let session = match config.get_options() {
            Some(given) => format!("{given} -c synchronous_commit=off"),
            None => "-c synchronous_commit=off".to_owned(),
        };
        config.options(&session);
        config.application_name("agentmesh");
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(std::time::Duration::from_secs(10));
        }
        let listener_config = config.clone();
        let sessions = inline::Sessions::new(config.clone(), options.pool, options.lease);
        let manager = Manager::from_config(
            config,
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(options.pool.max(1))
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .wait_timeout(Some(std::time::Duration::from_secs(30)))
            .create_timeout(Some(std::time::Duration::from_secs(10)))
            .build()
            .map_err(|e| StoreError::Database(format!("PostgreSQL pool: {e}")))?;
        let url = redacted(&options.url);
        let schema = {
            let _store_runtime = runtime.enter();
            wait(async {
                let client = pool.get().await.map_err(|e| {
                    StoreError::Io(format!("cannot connect to PostgreSQL at {url}: {e}"))
                })?;
                migrate_client(&client).await
            })?
        };
        let hooks = Arc::new(Hooks::default());
        let host = host_id();
        let (listening, listened) = std::sync::mpsc::channel();
        runtime.spawn(listen(
            listener_config,
            host.clone(),
            Arc::clone(&hooks),
            listening,
        ));
        let store = PgStore {
            runtime: Some(runtime),
            pool,
            sessions,
            host,
            lease_secs: options.lease.as_secs_f64(),
            answer_within: options.lease,
            schema,
            writes: AtomicU64::new(0),
            round_trips: AtomicU64::new(0),
            ids: std::sync::Mutex::new((0, 0)),
            flushed: AtomicU64::new(0),
            hooks,
            ended: std::sync::atomic::AtomicBool::new(false),
            registered: std::sync::atomic::AtomicBool::new(false),
        };
        // Listening before registering: the other hosts' writes tell this one of themselves
        // once it is registered (see the schema's `agentmesh_write`).
        match listened.recv_timeout(std::time::Duration::from_secs(30)) {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(e),
            Err(_) => {
                return Err(StoreError::Io(format!(
                    "PostgreSQL at {url}: listening for the other hosts' notices did not start"
                )));
            }
        }
        store.renew_host()?;
        Ok(store)
    }

    /// How many calls this store made to the database (see `round_trips`).
    pub fn round_trips(&self) -> u64 {
        self.round_trips.load(Ordering::Relaxed)
    }

    /// The schema version the database had when this store opened it, and the version it has
    /// now (this binary's newest).
    pub fn schema(&self) -> (i32, i32) {
        self.schema
    }

    /// Runs `work` on a session: on a thread that drives its own (see `inline`), one of
    /// those; elsewhere one of the pool.
    fn run<T, F>(&self, work: impl FnOnce(inline::Session) -> F) -> Result<T>
    where
        F: Future<Output = Result<T>>,
    {
        if inline::drives_sessions() {
            self.round_trips.fetch_add(1, Ordering::Relaxed);
            return self.sessions.run(work);
        }
        let limit = self.answer_within;
        let answered = self.pooled(|client| async move {
            let session = inline::Session::Pooled(Box::new(client));
            Ok(tokio::time::timeout(limit, work(session)).await)
        })?;
        match answered {
            Ok(answered) => answered,
            Err(_) => {
                // The session went back to the pool with its call unanswered; so may others
                // of a database that stopped answering: open them anew when needed.
                self.pool.retain(|_, _| false);
                Err(inline::unanswered("a call", limit))
            }
        }
    }

    /// Runs `work` with a session of the pool, its connection on the store's runtime (also
    /// for what needs a transaction of several statements: an import).
    fn pooled<T, F>(&self, work: impl FnOnce(deadpool_postgres::Object) -> F) -> Result<T>
    where
        F: Future<Output = Result<T>>,
    {
        let Some(runtime) = &self.runtime else {
            return Err(StoreError::Io("the PostgreSQL store is closed".into()));
        };
        let pool = &self.pool;
        self.round_trips.fetch_add(1, Ordering::Relaxed);
        // The client's sessions and timers belong to the store's runtime; the call itself is
        // polled here, so that waiting for it costs this thread and nothing else.
        let _store_runtime = runtime.enter();
        wait(tokio::task::coop::unconstrained(async move {
            let client = pool.get().await.map_err(no_session)?;
            work(client).await
        }))
    }

    fn wrote(&self) {
        self.writes.fetch_add(1, Ordering::SeqCst);
    }

    /// Copies what `export` hands over (see [`crate::copy`]) into this database, in one
    /// transaction committed durably: everything, or nothing when `export` fails. Refused,
    /// copying nothing, when the database already holds tasks, queued input or records.
    pub fn import(
        &self,
        export: impl FnOnce(&mut dyn FnMut(Item) -> Result<()>) -> Result<()> + Send,
    ) -> Result<Copied> {
        // `Some(item)`, then `None` once the export is complete; an error ends it.
        let (tx, mut rx) = tokio::sync::mpsc::channel::<Result<Option<Item>>>(64);
        std::thread::scope(|s| {
            s.spawn(move || {
                let outcome = export(&mut |item| {
                    tx.blocking_send(Ok(Some(item)))
                        .map_err(|_| StoreError::Io("the copy's writer stopped".into()))
                });
                let _ = tx.blocking_send(outcome.map(|()| None));
            });
            self.pooled(|mut c| async move {
                let t = c.transaction().await.map_err(db)?;
                t.batch_execute("SET LOCAL synchronous_commit = on")
                    .await
                    .map_err(db)?;
                let held: i64 = t
                    .query_one(
                        "SELECT (SELECT count(*) FROM agentmesh_tasks) \
                         + (SELECT count(*) FROM agentmesh_queue) \
                         + (SELECT count(*) FROM agentmesh_state) \
                         + (SELECT count(*) FROM agentmesh_kv)",
                        &[],
                    )
                    .await
                    .map_err(db)?
                    .get(0);
                if held > 0 {
                    return Err(StoreError::Database(format!(
                        "the database already holds {held} task(s), queued input(s) or \
                         record(s): copy into a database no host has used"
                    )));
                }
                let mut copied = Copied::default();
                loop {
                    let item = match rx.recv().await {
                        Some(Ok(Some(item))) => item,
                        Some(Ok(None)) => break,
                        Some(Err(e)) => return Err(e),
                        None => return Err(StoreError::Io("the copy's reader stopped".into())),
                    };
                    copied.count(&item);
                    insert(&t, item).await?;
                }
                t.commit().await.map_err(db)?;
                Ok(copied)
            })
        })
    }

    /// The rows of `sql` (a statement prepared once per session) with `params`.
    fn rows(&self, sql: &'static str, params: &[&(dyn ToSql + Sync)]) -> Result<Vec<Row>> {
        self.run(|c| async move {
            let statement = c.prepare_cached(sql).await.map_err(db)?;
            c.query(&statement, params).await.map_err(db)
        })
    }

    /// The one row of `sql` with `params`.
    fn row(&self, sql: &'static str, params: &[&(dyn ToSql + Sync)]) -> Result<Row> {
        self.run(|c| async move {
            let statement = c.prepare_cached(sql).await.map_err(db)?;
            c.query_one(&statement, params).await.map_err(db)
        })
    }

    /// Runs the writing statement `sql` with `params`, counted as a write; returns the rows it
    /// changed.
    fn write(&self, sql: &'static str, params: &[&(dyn ToSql + Sync)]) -> Result<usize> {
        let n = self.run(|c| async move {
            let statement = c.prepare_cached(sql).await.map_err(db)?;
            c.execute(&statement, params).await.map_err(db)
        })?;
        self.wrote();
        Ok(n as usize)
    }
}

/// Wakes the thread that [`wait`]s.
struct Unpark(std::thread::Thread);

impl std::task::Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}

/// Polls `future` on the calling thread until it is ready, parking the thread between polls.
/// Unlike a runtime's `block_on`, it may run on any thread, a tokio worker's included: the
/// engine calls the store on its turn pool (or after `block_in_place`), where blocking is
/// allowed.
fn wait<F: Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    let waker = std::task::Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = std::task::Context::from_waker(&waker);
    loop {
        if let std::task::Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return out;
        }
        std::thread::park();
    }
}

impl Drop for PgStore {
    fn drop(&mut self) {
        if !self.ended.load(Ordering::SeqCst)
            && let Err(e) = self.end_host()
        {
            tracing::warn!("giving up this host's leases failed: {e}");
        }
        // Dropping a runtime may block, which a runtime forbids on its own threads.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// Applies the migrations the database at `options.url` lacks: what `agentmesh store migrate`
/// runs. Returns the schema version before and after.
pub fn migrate(options: &PgOptions) -> Result<(i32, i32)> {
    let store = PgStore::open(options)?;
    let schema = store.schema();
    store.end_host()?;
    Ok(schema)
}

/// A host id unique among those sharing a database: the machine's name, the process and the
/// time it started.
fn host_id() -> String {
    let name = std::fs::read_to_string("/etc/hostname")
        .ok()
        .map(|n| n.trim().to_owned())
        .filter(|n| !n.is_empty() && !n.contains(char::is_whitespace))
        .unwrap_or_else(|| "host".to_owned());
    let started = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{name}-{}-{started:x}", std::process::id())
}

/// Listens on [`CHANNEL`] for as long as the store's runtime runs, on a session of its own,
/// and hands each notice to `hooks`: a write of another host (`w HOST TASK`), a message to
/// this one (`m HOST BODY`) and input queued for a task it holds (`q HOST TASK`). A lost
/// session is opened again, and [`Notice::Missed`] told.
/// `started` is told once whether the first `LISTEN` took.
async fn listen(
    config: tokio_postgres::Config,
    host: String,
    hooks: Arc<Hooks>,
    started: std::sync::mpsc::Sender<Result<()>>,
) {
    let mut started = Some(started);
    loop {
        let listened = async {
            let (client, mut connection) = config.connect(NoTls).await.map_err(db)?;
            let (lost, ended) = tokio::sync::oneshot::channel::<()>();
            let (host, hooks) = (host.clone(), Arc::clone(&hooks));
            tokio::spawn(async move {
                while let Some(Ok(message)) =
                    std::future::poll_fn(|cx| connection.poll_message(cx)).await
                {
                    if let tokio_postgres::AsyncMessage::Notification(n) = message {
                        hear(&host, &hooks, n.payload());
                    }
                }
                drop(lost);
            });
            client
                .batch_execute(&format!("LISTEN {CHANNEL}"))
                .await
                .map_err(db)?;
            Ok::<_, StoreError>((client, ended))
        }
        .await;
        match listened {
            Ok((client, ended)) => {
                match started.take() {
                    Some(started) => drop(started.send(Ok(()))),
                    None => {
                        if let Some(hook) = hooks.notice.get() {
                            hook(Notice::Missed);
                        }
                    }
                }
                let _ = ended.await;
                drop(client);
                tracing::warn!("the PostgreSQL session listening for other hosts was lost");
            }
            Err(e) => {
                if let Some(started) = started.take() {
                    drop(started.send(Err(e)));
                    return;
                }
                tracing::warn!("listening for other hosts on PostgreSQL failed: {e}");
            }
        }
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    }
}

/// Hands notice `payload` (see [`listen`]) to `hooks`, unless it is this host's own write, or
/// a message or queued input for another host.
fn hear(host: &str, hooks: &Hooks, payload: &str) {
    let mut words = payload.splitn(3, ' ');
    let (Some(kind), Some(from_or_to), Some(rest)) = (words.next(), words.next(), words.next())
    else {
        return;
    };
    match kind {
        "w" if from_or_to != host => {
            if let Some(hook) = hooks.append.get() {
                hook(rest);
            }
            if let Some(hook) = hooks.notice.get() {
                hook(Notice::Written(rest));
            }
        }
        "m" if from_or_to == host => {
            if let Some(hook) = hooks.notice.get() {
                hook(Notice::Message(rest));
            }
        }
        "q" if from_or_to == host => {
            if let Some(hook) = hooks.notice.get() {
                hook(Notice::Queued(rest));
            }
        }
        _ => {}
    }
}

/// The newest schema version this binary knows.
pub fn latest_schema() -> i32 {
    MIGRATIONS.len() as i32
}

/// Applies the migrations the database lacks, under the migration lock; returns the version
/// found and the version now.
async fn migrate_client(client: &deadpool_postgres::Object) -> Result<(i32, i32)> {
    client
        .query_one("SELECT pg_advisory_lock($1)", &[&MIGRATION_LOCK])
        .await
        .map_err(db)?;
    let outcome = apply_migrations(client).await;
    let unlocked = client
        .query_one("SELECT pg_advisory_unlock($1)", &[&MIGRATION_LOCK])
        .await
        .map_err(db);
    let versions = outcome?;
    unlocked?;
    Ok(versions)
}

/// Brings the database to the newest schema version: the migrations it lacks, each recorded in
/// `agentmesh_schema`, and [`FUNCTIONS`] in place of whatever functions it had, in one
/// transaction. A database at the newest version is left as it is.
async fn apply_migrations(client: &deadpool_postgres::Object) -> Result<(i32, i32)> {
    client
        .batch_execute(
            "CREATE TABLE IF NOT EXISTS agentmesh_schema (
                 version    integer PRIMARY KEY,
                 applied_at timestamptz NOT NULL DEFAULT now()
             )",
        )
        .await
        .map_err(db)?;
    let have: i32 = client
        .query_one(
            "SELECT coalesce(max(version), 0) FROM agentmesh_schema",
            &[],
        )
        .await
        .map_err(db)?
        .get(0);
    let known = latest_schema();
    if have > known {
        return Err(StoreError::Database(format!(
            "the database's schema is version {have}, newer than this agentmesh knows \
             (version {known}): run a newer agentmesh"
        )));
    }
    if have == known {
        return Ok((have, known));
    }
    // The migrations the database lacks, each recorded, then the functions as they are now,
    // in one transaction committed durably: the database is at the newest version with its
    // functions, or as it was.
    let install = async {
        client
            .batch_execute("BEGIN; SET LOCAL synchronous_commit = on")
            .await
            .map_err(|e| format!("schema migration {}: {}", have + 1, failure(&e)))?;
        for (i, sql) in MIGRATIONS.iter().enumerate().skip(have.max(0) as usize) {
            let version = i as i32 + 1;
            let script =
                format!("{sql}\n;INSERT INTO agentmesh_schema (version) VALUES ({version})");
            client
                .batch_execute(&script)
                .await
                .map_err(|e| format!("schema migration {version}: {}", failure(&e)))?;
        }
        client
            .batch_execute(&format!("{DROP_FUNCTIONS}\n;{FUNCTIONS}\n;COMMIT"))
            .await
            .map_err(|e| format!("the schema's functions (version {known}): {}", failure(&e)))
    };
    if let Err(failed) = install.await {
        let _ = client.batch_execute("ROLLBACK").await;
        return Err(StoreError::Database(format!(
            "{failed}; the database is left at version {have}"
        )));
    }
    Ok((have, known))
}

/// Writes one copied item in transaction `t`.
async fn insert(t: &tokio_postgres::Transaction<'_>, item: Item) -> Result<()> {
    match item {
        Item::Task { id, record, events } => {
            let parts = record.parts.len() as i64;
            t.execute(
                "INSERT INTO agentmesh_tasks (id, head, parts) VALUES ($1, $2, $3)",
                &[&id, &record.head, &parts],
            )
            .await
            .map_err(db)?;
            let numbers: Vec<i64> = (1..=parts).collect();
            t.execute(
                "INSERT INTO agentmesh_task_parts (task_id, n, body) \
                 SELECT $1, n, b FROM unnest($2::bigint[], $3::bytea[]) AS p(n, b)",
                &[&id, &numbers, &record.parts],
            )
            .await
            .map_err(db)?;
            let seqs: Vec<i64> = events.iter().map(|e| e.seq as i64).collect();
            let bodies = events
                .iter()
                .map(serde_json::to_vec)
                .collect::<std::result::Result<Vec<_>, _>>()?;
            t.execute(
                "INSERT INTO agentmesh_events (task_id, seq, body) \
                 SELECT $1, s, b FROM unnest($2::bigint[], $3::bytea[]) AS e(s, b)",
                &[&id, &seqs, &bodies],
            )
            .await
            .map_err(db)?;
        }
        Item::Queued {
            task_id,
            queued_at,
            input,
        } => {
            t.execute(
                "INSERT INTO agentmesh_queue (task_id, queued_at, input) VALUES ($1, $2, $3)",
                &[&task_id, &queued_at, &input],
            )
            .await
            .map_err(db)?;
        }
        Item::Delivery { id, until } => {
            t.execute(
                "INSERT INTO agentmesh_deliveries (id, until_ms) VALUES ($1, $2) \
                 ON CONFLICT (id) DO UPDATE SET until_ms = excluded.until_ms",
                &[&id, &until],
            )
            .await
            .map_err(db)?;
        }
        Item::State { ns, key, value } => {
            t.execute(
                "INSERT INTO agentmesh_state (ns, key, value) VALUES ($1, $2, $3)",
                &[&ns, &key, &value],
            )
            .await
            .map_err(db)?;
        }
        Item::Kv { scope, key, value } => {
            t.execute(
                "INSERT INTO agentmesh_kv (scope, key, value) VALUES ($1, $2, $3)",
                &[&scope, &key, &value],
            )
            .await
            .map_err(db)?;
        }
        Item::NextId(next) => {
            let next = clamp(next);
            t.execute(
                "SELECT setval('agentmesh_ids', greatest($1, \
                 (SELECT last_value FROM agentmesh_ids)))",
                &[&next],
            )
            .await
            .map_err(db)?;
        }
    }
    Ok(())
}

/// A queue key from the queue row's id.
fn queue_key(id: i64) -> QueueKey {
    QueueKey(id.to_be_bytes().to_vec())
}

/// The queue row's id of a key from [`queue_key`] (`None` for a key of another backend).
fn queue_id(key: &QueueKey) -> Option<i64> {
    <[u8; 8]>::try_from(key.0.as_slice())
        .ok()
        .map(i64::from_be_bytes)
}

impl TaskLogs for PgStore {
    fn write_buffered(
        &self,
        task_id: &str,
        record: RawWrite<'_>,
        events: &[Event],
        take: Option<&QueueKey>,
    ) -> Result<Option<Written>> {
        let take = match take {
            Some(key) => match queue_id(key) {
                Some(id) => Some(id),
                None => return Ok(None),
            },
            None => None,
        };
        let (first, last, chunk) = match (events.first(), events.last()) {
            (Some(first), Some(last)) => (
                clamp(first.seq),
                clamp(last.seq),
                Some(chunk::encode(events)?),
            ),
            _ => (0, 0, None),
        };
        let event_bytes = chunk.as_ref().map_or(0, Vec::len);
        let parts = record.parts as i64;
        let host = self.host.as_str();
        let written: i32 = self.run(|c| async move {
            let statement = c
                .prepare_cached("SELECT agentmesh_write($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)")
                .await
                .map_err(db)?;
            let row = c
                .query_one(
                    &statement,
                    &[
                        &task_id,
                        &record.head,
                        &parts,
                        &record.new_part,
                        &first,
                        &last,
                        &chunk,
                        &take,
                        &host,
                        &record.active,
                    ],
                )
                .await
                .map_err(db)?;
            Ok(row.get(0))
        })?;
        if written == 0 {
            return Ok(None);
        }
        self.wrote();
        if !events.is_empty()
            && let Some(hook) = self.hooks.append.get()
        {
            hook(task_id);
        }
        Ok(Some(Written {
            record_bytes: record.head.len(),
            part_bytes: record.new_part.map_or(0, <[u8]>::len),
            event_bytes,
            queue_empty: written == 2,
        }))
    }

    fn record(&self, task_id: &str) -> Result<Option<RawRecord>> {
        // One statement: the head and the parts it counts, read from one snapshot.
        let rows = self.rows(
            "SELECT t.head, ARRAY(SELECT p.body FROM agentmesh_task_parts p \
             WHERE p.task_id = t.id AND p.n <= t.parts ORDER BY p.n) \
             FROM agentmesh_tasks t WHERE t.id = $1",
            &[&task_id],
        )?;
        Ok(rows.first().map(|r| RawRecord {
            head: r.get(0),
            parts: r.get(1),
        }))
    }

    fn record_ids(&self) -> Result<Vec<String>> {
        let rows = self.rows("SELECT id FROM agentmesh_tasks ORDER BY id", &[])?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    fn events_between(&self, task_id: &str, from: u64, to: u64) -> Result<(Vec<Event>, usize)> {
        // Rows are keyed by their last event (see `chunk`): from the first that ends at `from`
        // or later to the first that ends at `to` or later.
        let rows = self.rows(
            "SELECT body FROM agentmesh_events WHERE task_id = $1 AND seq >= $2 \
             AND seq <= coalesce((SELECT min(seq) FROM agentmesh_events \
                                  WHERE task_id = $1 AND seq >= $3), $3) \
             ORDER BY seq",
            &[&task_id, &clamp(from), &clamp(to)],
        )?;
        let (mut events, mut bytes) = (Vec::new(), 0);
        for row in &rows {
            let body: &[u8] = row.get(0);
            bytes += body.len();
            chunk::read_between(body, from, to, &mut events)?;
        }
        Ok((events, bytes))
    }

    fn last_event_seq(&self, task_id: &str) -> Result<u64> {
        let row = self.row(
            "SELECT coalesce(max(seq), 0) FROM agentmesh_events WHERE task_id = $1",
            &[&task_id],
        )?;
        Ok(row.get::<_, i64>(0) as u64)
    }

    fn next_id(&self) -> Result<u64> {
        let mut ids = self
            .ids
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if ids.0 >= ids.1 {
            let row = self.row("SELECT nextval('agentmesh_ids')", &[])?;
            let start = row.get::<_, i64>(0) as u64;
            *ids = (start, start + ID_BLOCK);
        }
        let id = ids.0;
        ids.0 += 1;
        Ok(id)
    }

    fn set_append_hook(&self, hook: AppendHook) {
        let _ = self.hooks.append.set(hook);
    }
}

/// A `u64` bound as PostgreSQL's `bigint`.
fn clamp(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl Queues for PgStore {
    fn queue_deferred(
        &self,
        delivery: Option<(&str, i64)>,
        inputs: &[(&str, i64, &[u8])],
    ) -> Result<(Delivery, Durable)> {
        // Its commit is synchronous: durable when it returns.
        let outcome = self.queue_durably(delivery, inputs)?;
        Ok((outcome, crate::backend::durable_now()))
    }

    fn queue_durably(
        &self,
        delivery: Option<(&str, i64)>,
        inputs: &[(&str, i64, &[u8])],
    ) -> Result<Delivery> {
        let (id, until) = match delivery {
            Some((id, until)) => (Some(id), Some(until)),
            None => (None, None),
        };
        let tasks: Vec<&str> = inputs.iter().map(|i| i.0).collect();
        let at: Vec<i64> = inputs.iter().map(|i| i.1).collect();
        let bodies: Vec<&[u8]> = inputs.iter().map(|i| i.2).collect();
        let now = now_ms();
        // Its commit is synchronous: it makes every write before it durable too.
        let covers = self.writes.load(Ordering::SeqCst);
        let host = self.host.as_str();
        let (ids, told): (Option<Vec<i64>>, Vec<String>) = self.run(|c| async move {
            let statement = c
                .prepare_cached(
                    "SELECT ids, told FROM agentmesh_queue_inputs($1, $2, $3, $4, $5, $6, $7)",
                )
                .await
                .map_err(db)?;
            let row = c
                .query_one(
                    &statement,
                    &[&id, &until, &now, &tasks, &at, &bodies, &host],
                )
                .await
                .map_err(db)?;
            Ok((row.get(0), row.get(1)))
        })?;
        self.wrote();
        self.flushed.fetch_max(covers, Ordering::SeqCst);
        Ok(match ids {
            None => Delivery::Duplicate,
            Some(ids) => Delivery::Queued {
                keys: ids.into_iter().map(queue_key).collect(),
                told,
            },
        })
    }

    fn first_queued(&self, task_id: &str) -> Result<Option<(QueueKey, Vec<u8>)>> {
        let rows = self.rows(
            "SELECT id, input FROM agentmesh_queue WHERE task_id = $1 \
             ORDER BY queued_at, id LIMIT 1",
            &[&task_id],
        )?;
        Ok(rows.first().map(|r| (queue_key(r.get(0)), r.get(1))))
    }

    fn queued(&self, task_id: &str, limit: usize) -> Result<Vec<(QueueKey, Vec<u8>)>> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = self.rows(
            "SELECT id, input FROM agentmesh_queue WHERE task_id = $1 \
             ORDER BY queued_at, id LIMIT $2",
            &[&task_id, &limit],
        )?;
        Ok(rows
            .iter()
            .map(|r| (queue_key(r.get(0)), r.get(1)))
            .collect())
    }

    fn queued_count(&self, task_id: &str) -> Result<usize> {
        let row = self.row(
            "SELECT count(*) FROM agentmesh_queue WHERE task_id = $1",
            &[&task_id],
        )?;
        Ok(row.get::<_, i64>(0) as usize)
    }

    fn queued_tasks(&self) -> Result<Vec<String>> {
        let rows = self.rows(
            "SELECT DISTINCT task_id FROM agentmesh_queue ORDER BY task_id",
            &[],
        )?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    fn clear_queue_buffered(&self, task_id: &str) -> Result<usize> {
        self.write(
            "DELETE FROM agentmesh_queue WHERE task_id = $1",
            &[&task_id],
        )
    }
}

impl Dedupe for PgStore {
    fn is_remembered(&self, id: &str) -> Result<bool> {
        let row = self.row(
            "SELECT EXISTS (SELECT 1 FROM agentmesh_deliveries WHERE id = $1 AND until_ms > $2)",
            &[&id, &now_ms()],
        )?;
        Ok(row.get(0))
    }

    fn forget_expired_buffered(&self) -> Result<usize> {
        self.write(
            "DELETE FROM agentmesh_deliveries WHERE until_ms <= $1",
            &[&now_ms()],
        )
    }
}

impl HostState for PgStore {
    fn state_value(&self, ns: &str, key: &str) -> Result<Option<Vec<u8>>> {
        let rows = self.rows(
            "SELECT value FROM agentmesh_state WHERE ns = $1 AND key = $2",
            &[&ns, &key],
        )?;
        Ok(rows.first().map(|r| r.get(0)))
    }

    fn state_values(&self, ns: &str) -> Result<Vec<(String, Vec<u8>)>> {
        let rows = self.rows(
            "SELECT key, value FROM agentmesh_state WHERE ns = $1 ORDER BY key",
            &[&ns],
        )?;
        Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
    }

    fn put_state_buffered(&self, ns: &str, key: &str, value: &[u8]) -> Result<()> {
        self.write(
            "INSERT INTO agentmesh_state (ns, key, value) VALUES ($1, $2, $3) \
             ON CONFLICT (ns, key) DO UPDATE SET value = excluded.value",
            &[&ns, &key, &value],
        )
        .map(drop)
    }

    fn delete_state_buffered(&self, ns: &str, key: &str) -> Result<()> {
        self.write(
            "DELETE FROM agentmesh_state WHERE ns = $1 AND key = $2",
            &[&ns, &key],
        )
        .map(drop)
    }
}

impl PluginKv for PgStore {
    fn kv_value(&self, scope: &str, key: &str) -> Result<Option<Vec<u8>>> {
        let rows = self.rows(
            "SELECT value FROM agentmesh_kv WHERE scope = $1 AND key = $2",
            &[&scope, &key],
        )?;
        Ok(rows.first().map(|r| r.get(0)))
    }

    fn kv_put_buffered(&self, scope: &str, key: &str, value: &[u8]) -> Result<()> {
        self.write(
            "INSERT INTO agentmesh_kv (scope, key, value) VALUES ($1, $2, $3) \
             ON CONFLICT (scope, key) DO UPDATE SET value = excluded.value",
            &[&scope, &key, &value],
        )
        .map(drop)
    }

    fn kv_delete_buffered(&self, scope: &str, key: &str) -> Result<()> {
        self.write(
            "DELETE FROM agentmesh_kv WHERE scope = $1 AND key = $2",
            &[&scope, &key],
        )
        .map(drop)
    }

    fn kv_clear_task_buffered(&self, task: &str) -> Result<()> {
        let suffix = format!("/{task}");
        self.write(
            "DELETE FROM agentmesh_kv WHERE right(scope, char_length($1)) = $1",
            &[&suffix],
        )
        .map(drop)
    }
}

impl Durability for PgStore {
    fn flush(&self) -> Result<()> {
        let covers = self.writes.load(Ordering::SeqCst);
        if covers <= self.flushed.load(Ordering::SeqCst) {
            return Ok(());
        }
        self.run(|c| async move { c.execute("SELECT agentmesh_flush()", &[]).await.map_err(db) })?;
        self.flushed.fetch_max(covers, Ordering::SeqCst);
        Ok(())
    }

    fn write_count(&self) -> u64 {
        self.writes.load(Ordering::SeqCst)
    }
}

impl Leases for PgStore {
    fn shared(&self) -> bool {
        true
    }

    fn host_id(&self) -> &str {
        &self.host
    }

    fn take_lease(&self, task_id: &str) -> Result<Lease> {
        let row = self.row(
            "SELECT holder, was_active, taken_from FROM agentmesh_take_lease($1, $2)",
            &[&task_id, &self.host],
        )?;
        let holder: String = row.get(0);
        if holder != self.host {
            return Ok(Lease::HeldBy(holder));
        }
        Ok(Lease::Held {
            was_active: row.get::<_, Option<bool>>(1).unwrap_or(false),
            taken_from: row.get(2),
        })
    }

    fn renew_host(&self) -> Result<()> {
        // Registers the host when it is not (see the schema's `agentmesh_register_host`): at
        // its start, or when the other hosts forgot it, not having heard from it for a lease
        // past its expiry. Then the writes made meanwhile were announced to nobody.
        let anew: bool = self
            .row(
                "SELECT agentmesh_register_host($1, $2)",
                &[&self.host, &self.lease_secs],
            )?
            .get(0);
        if anew
            && self.registered.swap(true, Ordering::SeqCst)
            && let Some(hook) = self.hooks.notice.get()
        {
            tracing::warn!(
                "this host was not heard from for a lease past its expiry and registered anew: \
                 reading other hosts' tasks again"
            );
            hook(Notice::Missed);
        }
        Ok(())
    }

    fn orphaned_tasks(&self, limit: usize) -> Result<Vec<String>> {
        let limit = i32::try_from(limit).unwrap_or(i32::MAX);
        let rows = self.rows(
            "SELECT * FROM agentmesh_orphans($1, $2)",
            &[&self.host, &limit],
        )?;
        let mut ids: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
        ids.dedup();
        Ok(ids)
    }

    fn end_host(&self) -> Result<()> {
        self.ended.store(true, Ordering::SeqCst);
        self.run(|c| async move {
            c.execute(
                "WITH given_up AS (DELETE FROM agentmesh_leases l WHERE l.owner = $1 \
                 AND NOT l.active \
                 AND NOT EXISTS (SELECT 1 FROM agentmesh_queue q WHERE q.task_id = l.task_id)) \
                 DELETE FROM agentmesh_hosts WHERE id = $1",
                &[&self.host],
            )
            .await
            .map_err(db)
        })
        .map(drop)
    }

    fn tell(&self, host: &str, body: &str) -> Result<()> {
        let payload = format!("m {host} {body}");
        self.row("SELECT pg_notify('agentmesh', $1)::text", &[&payload])
            .map(drop)
    }

    fn set_notice_hook(&self, hook: NoticeHook) {
        let _ = self.hooks.notice.set(hook);
    }
}

/// The backend opened as `Arc<dyn Backend>`.
pub fn open(options: &PgOptions) -> Result<Arc<dyn crate::Backend>> {
    Ok(Arc::new(PgStore::open(options)?))
}

#[cfg(test)]
mod tests {
    use super::{FUNCTIONS, latest_schema, redacted};

    /// A database already at the newest version keeps its functions, so a change of
    /// `functions.sql` reaches databases only with a new migration. When this fails, add one
    /// (its comment says what changed) and pin the new version and sum here.
    #[test]
    fn functions_change_only_with_a_new_schema_version() {
        // FNV-1a: any change of the text changes it.
        let sum = FUNCTIONS.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
        assert_eq!(
            (latest_schema(), sum),
            (10, 5081145922135943666),
            "functions.sql changed: add a migration"
        );
    }

    #[test]
    fn every_form_of_a_password_is_redacted() {
        for (url, shown) in [
            (
                "postgres://ann:p%40ss@db:5432/x",
                "postgres://ann:***@db:5432/x",
            ),
            (
                "postgresql://ann@db/x?sslmode=disable&password=pw%20x&application_name=a",
                "postgresql://ann@db/x?sslmode=disable&password=***&application_name=a",
            ),
            (
                "postgres:///x?host=/run/postgresql",
                "postgres:///x?host=/run/postgresql",
            ),
            (
                "host=db user=ann password=pw-bare dbname=x",
                "host=db user=ann password=*** dbname=x",
            ),
            (
                r"host=db password = 'p w \' x' dbname=x",
                "host=db password = *** dbname=x",
            ),
            ("host=db password", "host=db ***"),
        ] {
            assert_eq!(redacted(url), shown, "{url}");
        }
    }
}
