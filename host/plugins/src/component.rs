//! A loaded component: compiled, its world detected, pre-linked — ready to instantiate in a
//! fresh store per call (or per tool session).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use wasmtime::component::{Component, InstancePre};
use wasmtime::{Engine, Store};

use crate::bindings;
use crate::capacity::{Slot, Stats};
use crate::error::{PluginError, Result};
use crate::kv::KvScope;
use crate::sandbox::Limits;
use crate::state::{PluginState, Shared, StoreSpec, begin_call, new_store};

/// The world a component implements, detected from its exports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum World {
    /// `tool-plugin`: exports `tool`.
    Tool,
    /// `middleware-plugin`: exports `middleware`.
    Middleware,
    /// `event-filter-plugin`: exports `event-filter`.
    EventFilter,
}

impl World {
    /// The world's WIT name.
    pub fn as_str(self) -> &'static str {
        match self {
            World::Tool => "tool-plugin",
            World::Middleware => "middleware-plugin",
            World::EventFilter => "event-filter-plugin",
        }
    }

    /// The one world whose interface `component` exports, or a description of what it
    /// exports instead.
    pub(crate) fn detect(component: &Component, engine: &Engine) -> Result<World, String> {
        let names: Vec<String> = component
            .component_type()
            .exports(engine)
            .map(|(name, _)| name.to_owned())
            .collect();
        let found: Vec<World> = names
            .iter()
            .filter_map(|name| {
                let interface = name.strip_prefix("agentmesh:plugin/")?;
                let (interface, version) = interface.split_once('@')?;
                // Any 0.1.x: minor versions only add functions.
                if !version.starts_with("0.1.") {
                    return None;
                }
                match interface {
                    "tool" => Some(World::Tool),
                    "middleware" => Some(World::Middleware),
                    "event-filter" => Some(World::EventFilter),
                    _ => None,
                }
            })
            .collect();
        match found.as_slice() {
            [world] => Ok(*world),
            [] if names.is_empty() => Err("nothing".into()),
            [] => Err(names.join(", ")),
            _ => Err(format!("several plugin interfaces ({})", names.join(", "))),
        }
    }
}

impl std::fmt::Display for World {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The pre-linked component, typed by world. Cloning it is cheap (it holds `Arc`s).
#[derive(Clone)]
pub(crate) enum Pre {
    Tool(bindings::tool::ToolPluginPre<PluginState>),
    Middleware(bindings::middleware::MiddlewarePluginPre<PluginState>),
    EventFilter(bindings::event_filter::EventFilterPluginPre<PluginState>),
}

/// A component ready to run. Cheap to share: hold it in an `Arc`.
///
/// Hot swap: a `serve` process loads the new version aside and replaces the `Arc` it hands out
/// (see [`crate::ComponentRegistry`]); calls and sessions in flight keep their `Arc` of the old
/// version, which is freed when the last of them ends.
pub struct LoadedComponent {
    name: String,
    path: PathBuf,
    hash: String,
    world: World,
    from_cache: bool,
    pre: Pre,
    shared: Arc<Shared>,
    /// Its name's counters in the instance pool.
    stats: Arc<Stats>,
}

impl LoadedComponent {
    pub(crate) fn new(
        name: &str,
        path: &Path,
        hash: String,
        world: World,
        from_cache: bool,
        pre: InstancePre<PluginState>,
        shared: Arc<Shared>,
    ) -> Result<Self> {
        let typed = |e: wasmtime::Error| PluginError::Link {
            path: path.to_owned(),
            world: world.as_str(),
            message: format!("{e:#}"),
        };
        let pre = match world {
            World::Tool => Pre::Tool(bindings::tool::ToolPluginPre::new(pre).map_err(typed)?),
            World::Middleware => {
                Pre::Middleware(bindings::middleware::MiddlewarePluginPre::new(pre).map_err(typed)?)
            }
            World::EventFilter => Pre::EventFilter(
                bindings::event_filter::EventFilterPluginPre::new(pre).map_err(typed)?,
            ),
        };
        let stats = shared.capacity.stats(name);
        Ok(LoadedComponent {
            stats,
            name: name.to_owned(),
            path: path.to_owned(),
            hash,
            world,
            from_cache,
            pre,
            shared,
        })
    }

    /// The same compiled, pre-linked component as `name`: another tool run by the same file.
    /// Cheap (nothing is compiled or linked again). The view has its own name in logs and
    /// errors, its own key-value scopes and its own counters in the instance pool; its path,
    /// hash and world are this one's.
    pub fn named(&self, name: &str) -> LoadedComponent {
        LoadedComponent {
            name: name.to_owned(),
            path: self.path.clone(),
            hash: self.hash.clone(),
            world: self.world,
            from_cache: self.from_cache,
            pre: self.pre.clone(),
            shared: Arc::clone(&self.shared),
            stats: self.shared.capacity.stats(name),
        }
    }

    /// Its name: the one it was loaded as, or given by [`LoadedComponent::named`].
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The file it was loaded from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The SHA-256 of its bytes, in hex: its version (`GET /v1/status` shows it).
    pub fn hash(&self) -> &str {
        &self.hash
    }

    /// The world it implements.
    pub fn world(&self) -> World {
        self.world
    }

    /// Whether its compiled code came from the cache.
    pub fn from_cache(&self) -> bool {
        self.from_cache
    }

    pub(crate) fn shared(&self) -> &Shared {
        &self.shared
    }

    pub(crate) fn stats(&self) -> &Arc<Stats> {
        &self.stats
    }

    /// A slot in the instance pool and a fresh store for one call of this component (a
    /// middleware step, an event filter), with the call's deadline armed. Bind them in this
    /// order, `let (_slot, mut store, deadline) = …`: locals drop in reverse, so the store
    /// (the instance) is freed before its slot is given back.
    pub(crate) async fn fresh_store(
        &self,
        limits: &Limits,
        kv_scope: Option<KvScope>,
    ) -> Result<(Slot, Store<PluginState>, tokio::time::Instant)> {
        let slot = self
            .shared
            .capacity
            .acquire(self.name(), self.stats())
            .await?;
        let spec = StoreSpec {
            limits,
            allowed_hosts: &[],
            mount: None,
            kv_scope,
        };
        let mut store = new_store(&self.shared, self.name(), spec)?;
        let deadline = begin_call(&mut store, limits, &self.shared.clock);
        Ok((slot, store, deadline))
    }

    /// Counts one call of this component when dropped: failed unless marked `ok`, taking the
    /// time it is given (none if it never reached the guest).
    pub(crate) fn count_call(&self) -> CallCount<'_> {
        CallCount {
            stats: &self.stats,
            took: std::time::Duration::ZERO,
            ok: false,
        }
    }

    pub(crate) fn pre(&self) -> &Pre {
        &self.pre
    }

    /// The error for using this component as a `expected` component.
    pub(crate) fn wrong_world(&self, expected: World) -> PluginError {
        PluginError::WrongWorld {
            component: self.name.clone(),
            expected: expected.as_str(),
            actual: self.world.as_str(),
        }
    }
}

/// One call in its component's counters, counted when dropped — however the call ends.
pub(crate) struct CallCount<'a> {
    stats: &'a Stats,
    /// The time the guest's call took.
    pub(crate) took: std::time::Duration,
    /// Whether the call succeeded.
    pub(crate) ok: bool,
}

impl Drop for CallCount<'_> {
    fn drop(&mut self) {
        self.stats.called(self.took, !self.ok);
    }
}

impl std::fmt::Debug for LoadedComponent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadedComponent")
            .field("name", &self.name)
            .field("path", &self.path)
            .field("hash", &self.hash)
            .field("world", &self.world)
            .field("from_cache", &self.from_cache)
            .finish_non_exhaustive()
    }
}
