//! The data of one `Store`: the component's WASI context (its sandbox), its outgoing-HTTP
//! policy, its memory limiter and the bounds on the WASI resources it holds, its key-value
//! scope — and the bookkeeping that turns a failed call into a precise [`Fault`].

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use agentmesh_secrets::SharedSecrets;
use wasmtime::component::{ResourceTable, ResourceTableError};
use wasmtime::{ResourceLimiter, Store, Trap, UpdateDeadline};
use wasmtime_wasi::{FsPerms, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};
use wasmtime_wasi_http::{FieldMapError, WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use crate::capacity::Capacity;
use crate::error::{Fault, PluginError, Result};
use crate::http::{Origin, OutgoingPolicy};
use crate::kv::{KvError, KvScope, KvStore};
use crate::sandbox::{Limits, MOUNT_GUEST_PATH, MountDir};
use crate::stdio::{LogBudget, LogStream, Output, Stream};

/// The most table elements a component may grow a table to.
///
/// Tables hold function references; a guest growing one without bound would make the host
/// allocate (8 bytes per element) outside the memory limit.
const MAX_TABLE_ELEMENTS: usize = 100_000;

/// The most WASI resources an instance may hold at once: entries of its store's resource
/// table — streams, pollables, HTTP header sets, requests, bodies and responses, open files.
///
/// Each is host memory that the instance's memory limit does not see. wasmtime allows
/// 1,000,000 by default: enough for a guest to make the host allocate gigabytes (header sets of
/// 64 KiB, made over and over from the same few bytes of its own memory). The example guests
/// in Rust, Python and JavaScript hold at most 7 at once (the JavaScript `counter` in an
/// outgoing request, measured): 1024 leaves room for over a hundred requests in flight.
const MAX_RESOURCES: usize = 1024;
/// The least host memory one resource may hold, whatever the memory limit: the headers of an
/// ordinary request fit (proxies commonly allow 8 KiB).
const MIN_RESOURCE_BYTES: usize = 8 * 1024;
/// The most host memory one resource may hold: wasi-http's own bound on a header set.
const MAX_RESOURCE_BYTES: usize = 128 * 1024;

/// How much host memory one resource of an instance whose memory limit is `memory` may hold:
/// the most bytes in a header set, and in one write to an outgoing body. The memory limit is
/// shared out over [`MAX_RESOURCES`], so that all of the instance's resources together hold
/// about as much as its own memory (no more than [`MIN_RESOURCE_BYTES`] × [`MAX_RESOURCES`],
/// 8 MiB, below an 8 MiB limit), within [`MIN_RESOURCE_BYTES`] and [`MAX_RESOURCE_BYTES`].
pub(crate) fn resource_bytes(memory: u64) -> usize {
    let share = memory / MAX_RESOURCES as u64;
    usize::try_from(share)
        .unwrap_or(usize::MAX)
        .clamp(MIN_RESOURCE_BYTES, MAX_RESOURCE_BYTES)
}

/// What a store holds for its component.
pub(crate) struct PluginState {
    /// The component's name, for logs and errors.
    pub(crate) component: Arc<str>,
    wasi: WasiCtx,
    http: WasiHttpCtx,
    table: ResourceTable,
    policy: OutgoingPolicy,
    pub(crate) limiter: MemoryLimiter,
    /// The key-value store and this store's scope in it (`None` for event filters).
    pub(crate) kv: Option<(Arc<dyn KvStore>, KvScope)>,
    /// `kv-set`/`kv-delete` calls in the current call.
    pub(crate) kv_writes: u32,
    /// The store failed during the current call (a host fault).
    pub(crate) kv_failure: Option<KvError>,
    /// The guest broke a host bound during the current call.
    pub(crate) refusal: Option<String>,
    /// What the guest's `log` calls have taken of the current call's budget.
    pub(crate) log: LogBudget,
    /// The secrets in force, hidden in a `log` message before it is cut.
    pub(crate) secrets: SharedSecrets,
    /// Stdout/stderr bookkeeping.
    output: Arc<Mutex<Output>>,
    /// Outgoing requests refused during the current call.
    denials: Arc<Mutex<Vec<String>>>,
    /// When the current call began.
    started: Instant,
    /// When the current call must have ended (its `timeout` after it began).
    deadline: Instant,
    /// Set once the current guest function has run into a tick of the epoch: it yielded once
    /// to leave the async workers (see `offload`), and runs on.
    pub(crate) yielded: bool,
}

impl WasiView for PluginState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl WasiHttpView for PluginState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            ctx: &mut self.http,
            table: &mut self.table,
            hooks: &mut self.policy,
        }
    }
}

/// Enforces [`Limits::memory`] over all of an instance's linear memories together, and
/// remembers when it refused, so the resulting trap is reported as a memory-limit fault.
pub(crate) struct MemoryLimiter {
    limit: usize,
    used: usize,
    pub(crate) hit: bool,
}

impl ResourceLimiter for MemoryLimiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let total = self.used.saturating_sub(current).saturating_add(desired);
        if total > self.limit {
            self.hit = true;
            return Ok(false);
        }
        self.used = total;
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= MAX_TABLE_ELEMENTS)
    }
}

/// The engine's epoch: it advances once per `tick`. A call's deadline is kept in wall-clock
/// time and checked at each tick it runs into (`state::on_tick`), so a ticker that wakes late
/// on a busy machine only makes that check late, never early.
pub(crate) struct EpochClock {
    tick: Duration,
}

impl EpochClock {
    /// A clock that ticks every `tick`.
    pub(crate) fn new(tick: Duration) -> Self {
        EpochClock { tick }
    }

    /// The tick length.
    pub(crate) fn tick(&self) -> Duration {
        self.tick
    }
}

/// What every component and store of one plugin host shares.
pub(crate) struct Shared {
    pub(crate) engine: wasmtime::Engine,
    pub(crate) kv: Arc<dyn KvStore>,
    pub(crate) tls: Arc<rustls::ClientConfig>,
    pub(crate) max_memory: u64,
    pub(crate) clock: Arc<EpochClock>,
    /// The instance pool's slots, parked tool sessions and counters.
    pub(crate) capacity: Capacity,
    /// The secrets in force (see [`crate::PluginConfig::secrets`]).
    pub(crate) secrets: SharedSecrets,
}

/// What a new store needs besides the component.
pub(crate) struct StoreSpec<'a> {
    pub(crate) limits: &'a Limits,
    pub(crate) allowed_hosts: &'a [Origin],
    pub(crate) mount: Option<&'a MountDir>,
    pub(crate) kv_scope: Option<KvScope>,
}

/// A fresh store for component `name` in the sandbox `spec` describes.
pub(crate) fn new_store(
    shared: &Shared,
    name: &str,
    spec: StoreSpec<'_>,
) -> Result<Store<PluginState>> {
    if spec.limits.memory > shared.max_memory {
        return Err(PluginError::Sandbox(format!(
            "memory limit of {} bytes exceeds the host's maximum of {} bytes",
            spec.limits.memory, shared.max_memory
        )));
    }
    let name: Arc<str> = name.into();
    let output = Arc::new(Mutex::new(Output::default()));
    let denials = Arc::new(Mutex::new(Vec::new()));

    // Everything not granted here is denied: no env, no args, no stdin, no sockets, no files.
    let mut wasi = WasiCtxBuilder::new();
    let stream =
        |stream| LogStream::new(name.clone(), stream, output.clone(), shared.secrets.clone());
    wasi.stdout(stream(Stream::Stdout))
        .stderr(stream(Stream::Stderr))
        .allow_tcp(false)
        .allow_udp(false)
        .allow_ip_name_lookup(false)
        .socket_addr_check(|_, _| Box::pin(async { false }));
    if let Some(dir) = spec.mount {
        wasi.preopened_dir(dir.handle_path(), MOUNT_GUEST_PATH, FsPerms::ReadWrite)
            .map_err(|e| {
                PluginError::Sandbox(format!("cannot open mount {}: {e}", dir.shown().display()))
            })?;
    }

    let kv = spec.kv_scope.map(|scope| (shared.kv.clone(), scope));
    let resource_bytes = resource_bytes(spec.limits.memory);
    let mut http = WasiHttpCtx::new();
    http.set_field_size_limit(resource_bytes);
    let mut table = ResourceTable::new();
    table.set_max_capacity(MAX_RESOURCES);
    let state = PluginState {
        component: name.clone(),
        wasi: wasi.build(),
        http,
        table,
        policy: OutgoingPolicy::new(
            spec.allowed_hosts,
            shared.tls.clone(),
            name,
            denials.clone(),
            resource_bytes,
        ),
        limiter: MemoryLimiter {
            limit: usize::try_from(spec.limits.memory).unwrap_or(usize::MAX),
            used: 0,
            hit: false,
        },
        kv,
        kv_writes: 0,
        kv_failure: None,
        refusal: None,
        log: LogBudget::default(),
        secrets: shared.secrets.clone(),
        output,
        denials,
        started: Instant::now(),
        deadline: Instant::now(),
        yielded: false,
    };
    let mut store = Store::new(&shared.engine, state);
    store.limiter(|s| &mut s.limiter);
    store.epoch_deadline_callback(|mut store| Ok(on_tick(store.data_mut())));
    Ok(store)
}

/// Runs at each tick of the epoch while a call is in Wasm: past its deadline the call traps
/// (a timeout); at its first tick it yields once, so that `offload` moves the rest of it off
/// the async workers; after that it runs on.
fn on_tick(state: &mut PluginState) -> UpdateDeadline {
    if Instant::now() >= state.deadline {
        return UpdateDeadline::Interrupt;
    }
    if state.yielded {
        return UpdateDeadline::Continue(1);
    }
    state.yielded = true;
    crate::offload::yielding();
    UpdateDeadline::Yield(1)
}

/// A call about to run: resets the per-call bookkeeping and arms the deadline. Returns the
/// deadline of the host-side timeout.
pub(crate) fn begin_call(
    store: &mut Store<PluginState>,
    limits: &Limits,
    clock: &EpochClock,
) -> tokio::time::Instant {
    let state = store.data_mut();
    state.kv_writes = 0;
    state.kv_failure = None;
    state.refusal = None;
    state.log.begin_call();
    state.limiter.hit = false;
    state
        .output
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .begin_call();
    state
        .denials
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clear();
    let started = Instant::now();
    state.started = started;
    state.deadline = started + limits.timeout;
    store.set_epoch_deadline(1);
    // Host-side waits (outgoing HTTP, WASI sleeps) do not see the epoch: the same limit bounds
    // them, one tick later so that a guest spinning in Wasm is reported by the epoch.
    tokio::time::Instant::from_std(started + limits.timeout + clock.tick())
}

/// How long the current call (since [`begin_call`]) has taken.
pub(crate) fn call_time(store: &Store<PluginState>) -> Duration {
    store.data().started.elapsed()
}

/// The outgoing requests refused during the current call.
pub(crate) fn denials(store: &Store<PluginState>) -> Vec<String> {
    store
        .data()
        .denials
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone()
}

/// Why a call failed, once classified.
pub(crate) enum Failure {
    /// The guest faulted; its instance is unusable.
    Fault(Fault),
    /// The host failed.
    Host(PluginError),
}

impl From<Failure> for PluginError {
    fn from(f: Failure) -> Self {
        match f {
            Failure::Fault(fault) => PluginError::Guest(fault),
            Failure::Host(e) => e,
        }
    }
}

/// What was running when a failure happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GuestPhase {
    /// Instantiation: an error that is not a trap or a limit is the host's (e.g. the instance
    /// pool is exhausted).
    Instantiate,
    /// A guest function.
    Call,
}

/// Classifies the outcome of a call that did not return: `None` from the host-side timeout,
/// else wasmtime's error.
pub(crate) fn classify(
    state: &mut PluginState,
    limits: &Limits,
    phase: GuestPhase,
    error: Option<wasmtime::Error>,
) -> Failure {
    let component = state.component.to_string();
    let Some(error) = error else {
        return Failure::Fault(Fault::Timeout {
            component,
            limit: limits.timeout,
        });
    };
    if let Some(e) = state.kv_failure.take() {
        return Failure::Host(PluginError::Kv(e));
    }
    if let Some(message) = state.refusal.take() {
        return Failure::Fault(Fault::Refused { component, message });
    }
    if let Some(message) = resource_refusal(&error, limits) {
        return Failure::Fault(Fault::Refused { component, message });
    }
    let trap = error.downcast_ref::<Trap>().copied();
    if trap == Some(Trap::Interrupt) {
        return Failure::Fault(Fault::Timeout {
            component,
            limit: limits.timeout,
        });
    }
    if state.limiter.hit {
        return Failure::Fault(Fault::MemoryLimit {
            component,
            limit: limits.memory,
        });
    }
    let stderr = state
        .output
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .stderr_tail
        .clone();
    if trap == Some(Trap::UnreachableCodeReached)
        && let Some(at) = stderr.find("panicked at")
    {
        // `panicked at src/lib.rs:1:2:\nthe message` on one line.
        let panic = &stderr[at..];
        // Without the hint about backtraces, which the guest cannot act on.
        let panic = panic
            .split("note: run with `RUST_BACKTRACE")
            .next()
            .unwrap_or(panic);
        let mut message = panic.split_whitespace().collect::<Vec<_>>().join(" ");
        // What the guest printed before it panicked, too (whole lines: the panic's own line
        // starts with the thread's name): its author's clues.
        let before = stderr[..at].rfind('\n').map_or("", |end| &stderr[..end]);
        message.push_str(&last_lines("; its stderr before", before));
        return Failure::Fault(Fault::Panic { component, message });
    }
    let message = match trap {
        Some(trap) => format!("{trap}{}", last_lines("; its stderr ended with", &stderr)),
        None if phase == GuestPhase::Instantiate => {
            return Failure::Host(PluginError::Runtime {
                component,
                message: format!("cannot instantiate: {error:#}"),
            });
        }
        None => format!(
            "{error:#}{}",
            last_lines("; its stderr ended with", &stderr)
        ),
    };
    Failure::Fault(Fault::Trap { component, message })
}

/// What the guest did, when `error` is wasmtime refusing it more host memory through
/// resources: a resource table at [`MAX_RESOURCES`], or a header set over [`resource_bytes`]
/// (wasi:http 0.2 has no error for that: it traps).
fn resource_refusal(error: &wasmtime::Error, limits: &Limits) -> Option<String> {
    if let Some(ResourceTableError::Full) = error.downcast_ref() {
        return Some(format!(
            "it held {MAX_RESOURCES} host resources (WASI streams, HTTP header sets, requests, responses, ...) at once, the most an instance may"
        ));
    }
    if let Some(FieldMapError::TotalSizeTooBig | FieldMapError::TooManyFields) =
        error.downcast_ref()
    {
        return Some(format!(
            "an HTTP header set (wasi:http `fields`) grew past {} bytes, the most one may hold in an instance with a memory limit of {} KiB",
            resource_bytes(limits.memory),
            limits.memory / 1024
        ));
    }
    None
}

/// How many of the last lines of a guest's stderr a fault's message carries.
const STDERR_LINES: usize = 10;

/// `said: ` and the last [`STDERR_LINES`] non-blank lines of `stderr` (already bounded to its
/// last 2 KiB), one per line; empty when there are none.
fn last_lines(said: &str, stderr: &str) -> String {
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    let shown = &lines[lines.len().saturating_sub(STDERR_LINES)..];
    match shown {
        [] => String::new(),
        _ => format!("{said}:\n{}", shown.join("\n")),
    }
}

/// Awaits a guest call until the deadline `begin_call` gave — off the async workers once it runs
/// long (see `offload`) — says what the call's log dropped, and classifies a failure:
/// `guarded!(store, limits, phase, deadline, call)` → `Result<T, Failure>`.
macro_rules! guarded {
    ($store:ident, $limits:expr, $phase:expr, $deadline:expr, $call:expr) => {{
        $store.data_mut().yielded = false;
        // Polled where it is built: a guest call's future is large, and moving it into a
        // wrapper costs more than the wrapper's work.
        let outcome = {
            let mut call = ::std::pin::pin!(tokio::time::timeout_at($deadline, $call));
            ::std::future::poll_fn(|cx| $crate::offload::poll_guest(call.as_mut(), cx)).await
        };
        $store.data_mut().report_dropped_log();
        match outcome {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(error)) => Err($crate::state::classify(
                $store.data_mut(),
                $limits,
                $phase,
                Some(error),
            )),
            Err(_) => Err($crate::state::classify(
                $store.data_mut(),
                $limits,
                $phase,
                None,
            )),
        }
    }};
}
pub(crate) use guarded;

/// Instantiates a component in `store` (`instantiate` is its world's `instantiate_async`)
/// before `deadline`: a trap, a limit or the deadline is the guest's fault, any other error
/// the host's (see [`classify`]).
pub(crate) async fn instantiate<P>(
    store: &mut Store<PluginState>,
    limits: &Limits,
    deadline: tokio::time::Instant,
    instantiate: impl AsyncFnOnce(&mut Store<PluginState>) -> wasmtime::Result<P>,
) -> Result<P> {
    Ok(guarded!(
        store,
        limits,
        GuestPhase::Instantiate,
        deadline,
        instantiate(&mut *store)
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resources_share_the_memory_limit_within_bounds() {
        const MIB: u64 = 1024 * 1024;
        assert_eq!(resource_bytes(64 * MIB), 64 * 1024);
        assert_eq!(resource_bytes(16 * MIB), 16 * 1024);
        // All resources together hold at most the memory limit...
        for memory in [8 * MIB, 16 * MIB, 64 * MIB, 128 * MIB] {
            assert!(resource_bytes(memory) * MAX_RESOURCES <= memory as usize);
        }
        // ...within bounds: the headers of an ordinary request fit under a small limit, and a
        // large limit buys no more than wasi-http's own bound.
        assert_eq!(resource_bytes(MIB), MIN_RESOURCE_BYTES);
        assert_eq!(resource_bytes(4096 * MIB), MAX_RESOURCE_BYTES);
        assert_eq!(resource_bytes(u64::MAX), MAX_RESOURCE_BYTES);
    }
}
