//! The plugin host: one wasmtime engine (pooling allocator, epoch interruption), its linkers
//! (one per world), the compiled-component cache, and loading.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use agentmesh_secrets::SharedSecrets;
use wasmtime::component::Linker;
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

use crate::cache::{Cache, content_hash};
use crate::capacity::{Capacity, PoolMetrics};
use crate::component::{LoadedComponent, World};
use crate::error::{PluginError, Result};
use crate::kv::KvStore;
use crate::state::{EpochClock, PluginState, Shared};

/// How the plugin host is set up. Every field has a default suited to a small server.
#[derive(Debug, Clone)]
pub struct PluginConfig {
    /// Where compiled components are cached (the host's `data_dir`/`components`); `None`
    /// compiles every load.
    pub cache_dir: Option<PathBuf>,
    /// How many component instances may be alive at once (tool sessions, calls in flight).
    /// The pool reserves address space for this many up front. When all are taken, the least
    /// recently used idle tool session is evicted (Teardown) to make room.
    pub max_instances: u32,
    /// How long a call waits for an instance when every one is busy in a call; then it fails
    /// with [`crate::Fault::Busy`].
    pub instance_wait: Duration,
    /// The largest memory limit any sandbox may ask for, in bytes (a pool slot's size).
    pub max_memory: u64,
    /// The resolution of timeouts: the epoch advances once per tick, and a call is stopped
    /// at most one tick after its limit.
    pub epoch_tick: Duration,
    /// The secrets in force: hidden in what components print and log before a line too long
    /// is cut, so that no start of one is left at the cut (the host's log writer scrubs whole
    /// lines, and would not know it).
    pub secrets: SharedSecrets,
}

impl Default for PluginConfig {
    fn default() -> Self {
        PluginConfig {
            cache_dir: None,
            max_instances: 100,
            instance_wait: Duration::from_secs(10),
            max_memory: 512 * 1024 * 1024,
            epoch_tick: Duration::from_millis(5),
            secrets: SharedSecrets::default(),
        }
    }
}

/// Hits and misses of the compiled-component cache since the host started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Loads served from a cached artifact.
    pub hits: u64,
    /// Loads that compiled (no cache, no artifact, or an unusable one).
    pub misses: u64,
}

/// The linkers, one per world: a world gets exactly its imports (plus WASI, which every
/// `wasm32-wasip2` program imports and whose context denies everything not granted).
struct Linkers {
    tool: Linker<PluginState>,
    middleware: Linker<PluginState>,
    event_filter: Linker<PluginState>,
}

/// The plugin host: loads components and hands out [`LoadedComponent`]s to call.
///
/// ```no_run
/// # async fn demo() -> Result<(), agentmesh_plugins::PluginError> {
/// use std::sync::Arc;
/// use agentmesh_plugins::{MemoryKv, PluginConfig, PluginHost, Sandbox, ToolSession};
///
/// let host = PluginHost::new(PluginConfig::default(), Arc::new(MemoryKv::new()))?;
/// let notes = host.load("notes.wasm".as_ref())?;
/// let mut session = ToolSession::lazy(notes, Sandbox::default(), "{}", "{}", "t_1")?.open().await?;
/// let answer = session.invoke("put", r#"{"key": "a", "value": "b"}"#).await?;
/// assert_eq!(answer.as_deref(), Ok(r#"{"stored":"a"}"#));
/// # Ok(()) }
/// ```
pub struct PluginHost {
    config: PluginConfig,
    shared: Arc<Shared>,
    linkers: Linkers,
    cache: Option<Cache>,
    hits: AtomicU64,
    misses: AtomicU64,
}

impl PluginHost {
    /// Creates the engine (and its epoch ticker thread), the linkers and the cache directory.
    /// Plugin key-value entries go to `kv`.
    pub fn new(config: PluginConfig, kv: Arc<dyn KvStore>) -> Result<Self> {
        let engine = Engine::new(&engine_config(&config)?)
            .map_err(|e| PluginError::Config(format!("{e:#}")))?;
        let clock = start_ticker(&engine, config.epoch_tick)?;
        let linkers = Linkers {
            tool: linker(&engine, World::Tool)?,
            middleware: linker(&engine, World::Middleware)?,
            event_filter: linker(&engine, World::EventFilter)?,
        };
        let cache = match &config.cache_dir {
            Some(dir) => Some(Cache::open(dir, &engine).map_err(|e| {
                PluginError::Config(format!("cache directory {}: {e}", dir.display()))
            })?),
            None => None,
        };
        let tls = crate::http::tls_config().map_err(PluginError::Config)?;
        let shared = Arc::new(Shared {
            engine,
            kv,
            tls: Arc::new(tls),
            max_memory: config.max_memory,
            clock,
            capacity: Capacity::new(config.max_instances.max(1), config.instance_wait),
            secrets: config.secrets.clone(),
        });
        Ok(PluginHost {
            config,
            shared,
            linkers,
            cache,
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        })
    }

    /// Loads the component at `path`, named after its file stem (see [`PluginHost::load_named`]).
    pub fn load(&self, path: &Path) -> Result<Arc<LoadedComponent>> {
        let name = path
            .file_stem()
            .map_or_else(|| "component".into(), |s| s.to_string_lossy());
        self.load_named(&name, path)
    }

    /// Loads the component at `path` as `name`: reads and hashes it, takes its compiled code
    /// from the cache or compiles it (and caches it), detects its world from its exports and
    /// pre-links it against that world's imports.
    ///
    /// `name` identifies the component in logs, errors and key-value scopes; give a new version
    /// of the same component the same name (e.g. `engineering/github-pr`) so tasks keep
    /// their state across a hot swap. Another tool run by the same file takes a view of the
    /// result under its own name ([`LoadedComponent::named`]) rather than loading it again.
    pub fn load_named(&self, name: &str, path: &Path) -> Result<Arc<LoadedComponent>> {
        let bytes = std::fs::read(path).map_err(|source| PluginError::Read {
            path: path.to_owned(),
            source,
        })?;
        let hash = content_hash(&bytes);
        let engine = &self.shared.engine;
        let cached = self.cache.as_ref().and_then(|c| c.load(engine, &hash));
        let from_cache = cached.is_some();
        let component = match cached {
            Some(component) => {
                self.hits.fetch_add(1, Ordering::Relaxed);
                component
            }
            None => {
                self.misses.fetch_add(1, Ordering::Relaxed);
                let component =
                    wasmtime::component::Component::new(engine, &bytes).map_err(|e| {
                        PluginError::Compile {
                            path: path.to_owned(),
                            message: format!("{e:#}"),
                        }
                    })?;
                if let Some(cache) = &self.cache {
                    cache.store(&hash, &component);
                }
                component
            }
        };
        tracing::info!(
            component.name = name,
            component.hash = %hash,
            cache = if from_cache { "hit" } else { "miss" },
            "loaded component {}",
            path.display()
        );
        let world = World::detect(&component, engine).map_err(|found| PluginError::World {
            path: path.to_owned(),
            found,
        })?;
        let linker = match world {
            World::Tool => &self.linkers.tool,
            World::Middleware => &self.linkers.middleware,
            World::EventFilter => &self.linkers.event_filter,
        };
        let pre = linker
            .instantiate_pre(&component)
            .map_err(|e| PluginError::Link {
                path: path.to_owned(),
                world: world.as_str(),
                message: format!("{e:#}"),
            })?;
        LoadedComponent::new(
            name,
            path,
            hash,
            world,
            from_cache,
            pre,
            self.shared.clone(),
        )
        .map(Arc::new)
    }

    /// The configuration the host was created with.
    pub fn config(&self) -> &PluginConfig {
        &self.config
    }

    /// The instance pool: its size, and each loaded component's instances and calls.
    pub fn pool_metrics(&self) -> PoolMetrics {
        self.shared.capacity.metrics()
    }

    /// The cache's hits and misses so far.
    pub fn cache_stats(&self) -> CacheStats {
        CacheStats {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
        }
    }
}

/// The engine's configuration: async calls, epoch interruption, and a pooling allocator with
/// small explicit totals (the defaults reserve address space for 1000 instances of 4 GiB).
fn engine_config(config: &PluginConfig) -> Result<Config> {
    let max_memory = usize::try_from(config.max_memory).map_err(|_| {
        PluginError::Config(format!(
            "max_memory of {} bytes is too large",
            config.max_memory
        ))
    })?;
    let instances = config.max_instances.max(1);
    let mut pool = PoolingAllocationConfig::new();
    // A `wasm32-wasip2` Rust component has one main module and a few adapter shims: a handful
    // of core instances, one memory and a couple of tables each.
    pool.total_component_instances(instances)
        .total_core_instances(instances.saturating_mul(8))
        .total_memories(instances.saturating_mul(2))
        .total_tables(instances.saturating_mul(4))
        .total_stacks(instances)
        .max_core_instances_per_component(16)
        .max_memories_per_component(2)
        .max_tables_per_component(8)
        .max_memory_size(max_memory)
        // Between uses, a slot's memory above its lowest `linear_memory_keep_resident` bytes
        // is decommitted with `madvise`, and the next instance takes a page fault (~1.6 µs
        // here) for every page of it that it touches. The lowest bytes are instead reset in
        // place — zeroed with `memset`, the data image copied back — and stay resident.
        // A Rust component lays out its stack, then its data, then its heap. With the default
        // 1 MiB stack the pages a call writes (stack top, data, heap start) lie above 1 MiB:
        // 6 faults per fresh `notes` instance. Linked with a 32 KiB stack, as the guests are
        // (`.cargo/config.toml`; the README's guide asks it of every component), they fall in
        // the first 64 KiB: no fault at all, a fresh `notes` call 41 → 25 µs, of which the
        // reset costs ~3 µs. A component with a 1 MiB stack still faults, and pays that reset
        // for 64 KiB of stack it never touches (3–5 µs per instance).
        // Either way every byte a previous instance could have written is reset or released
        // before the slot is reused (`a_fresh_instance_finds_nothing_of_the_previous_one`).
        //
        // Not `pagemap_scan`, which resets exactly the written pages and keeps them resident:
        // wasmtime 48's scan skips written pages that are swapped out or being migrated, and
        // the next instance in the slot reads them (bytecodealliance/wasmtime#14357): one
        // task's memory could leak into another's.
        .linear_memory_keep_resident(64 * 1024)
        // Tables are a page or two that every instance writes: `memset` them rather than
        // fault them back (3 faults, 6 µs).
        .table_keep_resident(64 * 1024)
        // Decommit in batches: one `madvise` call (and TLB flush) per 16 freed memories and
        // tables, about 5 instances. (A batch of 1 gains nothing measurable when nothing is
        // left to decommit, and costs a 1 MiB-stack component ~8 µs per instance.)
        .decommit_batch_size(16.min(instances as usize));
    // Measured and left at wasmtime's defaults: eager table initialization
    // (`table_lazy_init(false)`, +8 µs per fresh `notes` instance: it fills all 84 entries of
    // the main table up front) and copy-on-write memory images (`memory_init_cow(false)` gains
    // nothing once the image's pages are kept resident).
    let mut wasm = Config::new();
    wasm.epoch_interruption(true)
        .allocation_strategy(InstanceAllocationStrategy::Pooling(pool))
        .wasm_backtrace_max_frames(std::num::NonZeroUsize::new(20));
    Ok(wasm)
}

/// Starts the thread that advances the engine's epoch once per `tick`; it ends by itself when
/// the engine is dropped (the last component and the host gone).
fn start_ticker(engine: &Engine, tick: Duration) -> Result<Arc<EpochClock>> {
    let clock = Arc::new(EpochClock::new(tick));
    let weak = engine.weak();
    std::thread::Builder::new()
        .name("agentmesh-epoch".into())
        .spawn(move || {
            loop {
                std::thread::sleep(tick);
                let Some(engine) = weak.upgrade() else { break };
                engine.increment_epoch();
            }
        })
        .map_err(|e| PluginError::Config(format!("cannot start the epoch ticker: {e}")))?;
    Ok(clock)
}

/// The linker of `world`.
fn linker(engine: &Engine, world: World) -> Result<Linker<PluginState>> {
    let mut linker = Linker::new(engine);
    let link = |e: wasmtime::Error| {
        PluginError::Config(format!("linking the {} world: {e:#}", world.as_str()))
    };
    wasmtime_wasi::p2::add_to_linker_async(&mut linker).map_err(link)?;
    match world {
        World::Tool => {
            wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker).map_err(link)?;
            crate::host::add_to_linker(&mut linker).map_err(link)?;
        }
        World::Middleware => crate::host::add_to_linker(&mut linker).map_err(link)?,
        World::EventFilter => {}
    }
    Ok(linker)
}
