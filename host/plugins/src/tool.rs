//! `interface tool`: tool sessions.
//!
//! A [`ToolSession`] is one `session` resource of one component in one task, in a store of
//! its own kept alive between calls: opening it instantiates the component and runs the
//! constructor (Initialize); [`ToolSession::close`] runs the destructor (Teardown). A fault
//! (trap, timeout, memory limit) leaves the instance unusable, so the session drops it and
//! constructs a fresh one before the next call — its key-value entries survive, its memory
//! does not. For stateless use, [`LoadedComponent::call_tool`] runs one call in a fresh store.
//!
//! Between calls a session is parked in the host's instance pool (see `capacity`): when the
//! pool is full and another instance is wanted, the least recently used parked session is
//! evicted — Teardown runs and its instance is freed — and its next call opens the session
//! anew (Initialize runs again). Again the key-value entries survive and the memory does not.

use std::any::Any;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use wasmtime::Store;
use wasmtime::component::ResourceAny;

use crate::bindings::tool::ToolPlugin;
use crate::bindings::tool::agentmesh::plugin::types::ToolError as WitToolError;
use crate::capacity::{Cell, Pooled, Slot, Stats};
use crate::component::{LoadedComponent, Pre, World};
use crate::error::{Fault, PluginError, Result, ToolError};
use crate::kv::KvScope;
use crate::sandbox::{Limits, Sandbox};
use crate::state::{
    EpochClock, Failure, GuestPhase, PluginState, StoreSpec, begin_call, call_time, denials,
    guarded, instantiate, new_store,
};

/// A live instance and its session resource.
struct Live {
    store: Store<PluginState>,
    plugin: ToolPlugin,
    session: ResourceAny,
    /// The instance's place in the pool, given back after the store is dropped (fields drop
    /// in order).
    slot: Slot,
}

/// A session's instance with what tearing it down needs: parked in the pool between calls
/// (evicting it runs Teardown), taken out for a call. Boxed once when the session opens, so
/// that parking moves a pointer.
pub(crate) struct Parked {
    live: Live,
    limits: Limits,
    clock: Arc<EpochClock>,
    stats: Arc<Stats>,
}

impl Pooled for Parked {
    fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Runs the destructor and frees the instance. A fault in the destructor is only worth a
    /// log line: the instance is freed either way.
    fn teardown(self: Box<Self>) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        Box::pin(self.evicted())
    }

    fn into_any(self: Box<Self>) -> Box<dyn Any> {
        self
    }
}

impl Parked {
    /// Teardown after an eviction (see [`Pooled::teardown`]).
    async fn evicted(self: Box<Self>) {
        let Parked {
            live,
            limits,
            clock,
            stats,
        } = *self;
        let component = live.store.data().component.clone();
        tracing::debug!(component.name = %component, "evicting an idle tool session");
        if let Err(e) = destroy(live, &limits, &clock, &stats).await {
            tracing::warn!(component.name = %component, "evicted session's teardown failed: {e}");
        }
    }
}

/// What a session is opened with (kept to reopen it after a fault).
struct Spec {
    component: Arc<LoadedComponent>,
    sandbox: Sandbox,
    settings: String,
    parameters: String,
    task: String,
}

impl Spec {
    /// Checks that `component` is a tool (a [`MountDir`](crate::MountDir) is a directory
    /// already).
    fn new(
        component: Arc<LoadedComponent>,
        sandbox: Sandbox,
        settings: &str,
        parameters: &str,
        task: &str,
    ) -> Result<Spec> {
        if component.world() != World::Tool {
            return Err(component.wrong_world(World::Tool));
        }
        Ok(Spec {
            component,
            sandbox,
            settings: settings.to_owned(),
            parameters: parameters.to_owned(),
            task: task.to_owned(),
        })
    }

    /// `live`, an instance of this spec's session, ready to park.
    fn parked(&self, live: Live) -> Box<Parked> {
        let component = &self.component;
        Box::new(Parked {
            live,
            limits: self.sandbox.limits,
            clock: Arc::clone(&component.shared().clock),
            stats: Arc::clone(component.stats()),
        })
    }

    /// The answer to a call whose session could not be opened (counted as a failed call): a
    /// guest fault or a full pool is the call's recoverable error, anything else the host's.
    fn not_started(&self, error: PluginError) -> Result<Result<String, ToolError>> {
        self.component.stats().called(Duration::ZERO, true);
        match error {
            PluginError::Guest(fault) => Ok(Err(ToolError::Fault(fault))),
            e => Err(e),
        }
    }
}

/// One tool session of one task (see the module docs).
pub struct ToolSession {
    spec: Spec,
    /// Its place in the pool, where its instance waits between calls.
    cell: Arc<Cell>,
}

impl ToolSession {
    /// A session of `component` (a `tool-plugin` component) for task `task_id`, opened at its
    /// first call, or now by [`ToolSession::open`]: instantiated in `sandbox`, its `session`
    /// constructed with `settings` and `parameters` (JSON objects). Opened at its first call,
    /// that call's answer also reports a fault of the constructor, or that no instance was
    /// free in time ([`Fault::Busy`]).
    pub fn lazy(
        component: Arc<LoadedComponent>,
        sandbox: Sandbox,
        settings: &str,
        parameters: &str,
        task_id: &str,
    ) -> Result<ToolSession> {
        let spec = Spec::new(component, sandbox, settings, parameters, task_id)?;
        Ok(ToolSession {
            spec,
            cell: Arc::default(),
        })
    }

    /// Opens this session now (see [`ToolSession::lazy`]). A guest fault here is
    /// [`PluginError::Guest`], and so is [`Fault::Busy`] when no instance frees up in time.
    pub async fn open(self) -> Result<ToolSession> {
        let live = start(&self.spec).await?;
        let parked = self.spec.parked(live);
        self.park(parked);
        Ok(self)
    }

    /// The component this session runs (the version it was opened with).
    pub fn component(&self) -> &Arc<LoadedComponent> {
        &self.spec.component
    }

    /// The settings its `session` was constructed with (JSON).
    pub fn settings(&self) -> &str {
        &self.spec.settings
    }

    /// The task this session belongs to.
    pub fn task_id(&self) -> &str {
        &self.spec.task
    }

    /// Runs `action` with `input` (the call's resolved parameters, a JSON object).
    ///
    /// - `Ok(Ok(json))`: the observation;
    /// - `Ok(Err(ToolError))`: the guest's `tool-error`, or a [`Fault`] (recoverable; the
    ///   message says what happened, including outgoing requests the host refused);
    /// - `Err(PluginError)`: the host failed (the key-value store, or instantiating for a
    ///   reason other than a full pool); the call may be retried.
    ///
    /// When the session was evicted since its last call, it is opened anew first (Initialize);
    /// when no instance frees up in time, the answer is a recoverable [`Fault::Busy`].
    pub async fn invoke(&mut self, action: &str, input: &str) -> Result<Result<String, ToolError>> {
        let mut instance = match self.unpark() {
            Some(instance) => instance,
            None => match start(&self.spec).await {
                Ok(live) => self.spec.parked(live),
                Err(e) => return self.spec.not_started(e),
            },
        };
        // The call is written out here rather than in a function of its own: its future is
        // large, and awaiting another function's would copy it at every call.
        let Live {
            store,
            plugin,
            session,
            ..
        } = &mut instance.live;
        let component = &self.spec.component;
        let limits = self.spec.sandbox.limits;
        let deadline = begin_call(store, &limits, &component.shared().clock);
        let tool = plugin.agentmesh_plugin_tool().session();
        // The bindings take `&String` (WIT's `json` is an alias of `string`).
        let input = input.to_owned();
        let result = guarded!(
            store,
            &limits,
            GuestPhase::Call,
            deadline,
            tool.call_invoke(&mut *store, *session, action, &input)
        );
        let took = call_time(store);
        component.stats().called(took, !matches!(result, Ok(Ok(_))));
        tracing::debug!(
            component.name = component.name(),
            component.hash = component.hash(),
            task.id = %self.spec.task,
            action,
            elapsed_us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX),
            "tool call"
        );
        let result = match result {
            Ok(result) => result,
            // The instance is unusable after a fault: dropped here (its store, then its slot,
            // for a waiter to take), and the next call starts a fresh one.
            Err(Failure::Fault(fault)) => return Ok(Err(ToolError::Fault(fault))),
            Err(Failure::Host(e)) => return Err(e),
        };
        let refused = denials(store);
        self.park(instance);
        let max = limits.max_output;
        let too_large = |size| {
            ToolError::Fault(Fault::OutputTooLarge {
                component: component.name().to_owned(),
                size,
                limit: max,
            })
        };
        Ok(match result {
            Ok(json) if json.len() > max => Err(too_large(json.len())),
            Ok(json) => Ok(json),
            Err(WitToolError::Recoverable(m) | WitToolError::Fatal(m)) if m.len() > max => {
                Err(too_large(m.len()))
            }
            Err(WitToolError::Recoverable(m)) => {
                Err(ToolError::Recoverable(with_denials(m, &refused)))
            }
            Err(WitToolError::Fatal(m)) => Err(ToolError::Fatal(with_denials(m, &refused))),
        })
    }

    /// Ends the session (Teardown): runs the guest's destructor, then frees the instance.
    /// Dropping a session without closing it frees the instance without the destructor.
    pub async fn close(self) -> Result<()> {
        let Some(instance) = self.unpark() else {
            return Ok(());
        };
        let component = &self.spec.component;
        destroy(
            instance.live,
            &self.spec.sandbox.limits,
            &component.shared().clock,
            component.stats(),
        )
        .await
    }

    /// Parks the instance in the pool until the next call.
    fn park(&self, instance: Box<Parked>) {
        let capacity = &self.spec.component.shared().capacity;
        capacity.park(&self.cell, instance);
    }

    /// Takes the parked instance back; `None` when there is none (a fault) or it was evicted.
    fn unpark(&self) -> Option<Box<Parked>> {
        let parked = self.spec.component.shared().capacity.unpark(&self.cell)?;
        // Only this session parks in its cell.
        parked.into_any().downcast::<Parked>().ok()
    }
}

impl Drop for ToolSession {
    /// Frees a parked instance without Teardown (see [`ToolSession::close`]).
    fn drop(&mut self) {
        drop(self.unpark());
    }
}

/// Teardown: runs the session's destructor, then frees the instance.
async fn destroy(live: Live, limits: &Limits, clock: &EpochClock, stats: &Stats) -> Result<()> {
    let Live {
        mut store,
        session,
        slot,
        ..
    } = live;
    stats.torn_down();
    let deadline = begin_call(&mut store, limits, clock);
    let dropped = guarded!(
        store,
        limits,
        GuestPhase::Call,
        deadline,
        session.resource_drop_async(&mut store)
    );
    // The instance first, then its slot: whoever takes the slot finds the pool's room free.
    drop(store);
    drop(slot);
    dropped.map_err(PluginError::from)
}

/// Instantiates the component in a fresh store and constructs the session.
async fn start(spec: &Spec) -> Result<Live> {
    let Pre::Tool(pre) = spec.component.pre() else {
        return Err(spec.component.wrong_world(World::Tool));
    };
    let limits = spec.sandbox.limits;
    let component = &spec.component;
    let slot = component
        .shared()
        .capacity
        .acquire(component.name(), component.stats())
        .await?;
    let started = std::time::Instant::now();
    let mut store = new_store(
        spec.component.shared(),
        spec.component.name(),
        StoreSpec {
            limits: &limits,
            allowed_hosts: &spec.sandbox.allowed_hosts,
            mount: spec.sandbox.mount.as_ref(),
            kv_scope: Some(KvScope::new(spec.component.name(), spec.task.as_str())),
        },
    )?;
    let deadline = begin_call(&mut store, &limits, &spec.component.shared().clock);
    let plugin = instantiate(&mut store, &limits, deadline, async |s| {
        pre.instantiate_async(s).await
    })
    .await?;
    let constructor = plugin.agentmesh_plugin_tool().session();
    let session = guarded!(
        store,
        &limits,
        GuestPhase::Call,
        deadline,
        constructor.call_constructor(&mut store, &spec.settings, &spec.parameters)
    )?;
    // From the new store on: waiting for a free instance is not Initialize's time.
    component.stats().initialized(started.elapsed());
    Ok(Live {
        store,
        plugin,
        session,
        slot,
    })
}

impl LoadedComponent {
    /// One tool call in a fresh instance: open a session, invoke `action`, close it. Results
    /// as for [`ToolSession::invoke`]; a fault while opening, or no free instance, is a
    /// recoverable [`ToolError`].
    #[allow(clippy::too_many_arguments)]
    pub async fn call_tool(
        self: &Arc<Self>,
        sandbox: &Sandbox,
        settings: &str,
        parameters: &str,
        task_id: &str,
        action: &str,
        input: &str,
    ) -> Result<Result<String, ToolError>> {
        let mut session =
            ToolSession::lazy(self.clone(), sandbox.clone(), settings, parameters, task_id)?;
        let result = session.invoke(action, input).await?;
        // The answer stands even if the destructor faults; that is only worth a log line.
        if let Err(e) = session.close().await {
            tracing::warn!(component.name = self.name(), "session teardown failed: {e}");
        }
        Ok(result)
    }
}

/// Appends the host's refusals to a guest's error message, so the LLM learns why.
fn with_denials(message: String, refused: &[String]) -> String {
    if refused.is_empty() {
        message
    } else {
        format!("{message} (the host refused: {})", refused.join("; "))
    }
}

impl std::fmt::Debug for ToolSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolSession")
            .field("component", &self.spec.component.name())
            .field("task", &self.spec.task)
            .field("parked", &self.cell.is_parked())
            .finish_non_exhaustive()
    }
}
