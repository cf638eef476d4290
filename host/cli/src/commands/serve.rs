//! `agentmesh serve DIR [--listen ADDR] [--data DIR]`: the host as a service.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use agentmesh_engine::{Engine, EngineOptions};
use agentmesh_routing::EventRouter;
use agentmesh_secrets::SharedSecrets;
use agentmesh_server::health::Probe;
use agentmesh_server::reload::max_body_of;
use agentmesh_server::{AppState, Auth, Limits, Serving, tokens_of};
use agentmesh_triggers::Triggers;
use anyhow::{Context, bail};

/// Arguments of `serve`.
#[derive(clap::Args)]
pub struct Args {
    /// The config dir (watched: changes are reloaded).
    dir: PathBuf,
    /// Where to listen (default: the host config's `listen`, else 127.0.0.1:8080).
    #[arg(long)]
    listen: Option<String>,
    /// The data dir (default: the host config's `data_dir`, else `DIR/.agentmesh`).
    #[arg(long)]
    data: Option<PathBuf>,
}

/// How often the config dir is checked for changes.
const RELOAD_POLL: Duration = Duration::from_millis(500);

/// How often expired subscriptions and delivery ids are swept.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// Serves until SIGINT or SIGTERM, then drains and exits 0.
pub fn execute(args: &Args, secrets: &SharedSecrets) -> anyhow::Result<ExitCode> {
    let Some((_, plan, dirs)) = super::load(&args.dir, args.data.as_deref())? else {
        return Ok(ExitCode::from(1));
    };
    let super::Dirs { data, cache } = dirs;
    let host = plan.host.clone();
    let listen = args
        .listen
        .clone()
        .or_else(|| host.listen.clone())
        .unwrap_or_else(|| "127.0.0.1:8080".into());
    let addr: SocketAddr = listen
        .parse()
        .with_context(|| format!("`{listen}` is not an address like 127.0.0.1:8080"))?;
    let tokens = tokens_of(&host, &|n| std::env::var(n).ok())?;
    if !addr.ip().is_loopback() && tokens.is_empty() {
        bail!(
            "refusing to listen on {addr} without `api_tokens`: anyone who can reach it could \
             drive every task; configure api_tokens or listen on a loopback address"
        );
    }
    // Before the store opens its files: every descriptor counts.
    let limits = Limits::at_start(&host.policy);
    let store = super::open_store(&host, &data)?;
    let mut options = EngineOptions {
        mount_root: data.join("mounts"),
        component_cache: Some(cache),
        secrets: secrets.clone(),
        ..EngineOptions::default()
    };
    bound_the_drain().context("cannot listen for SIGTERM")?;
    let runtime = agentmesh_engine::async_runtime(&host.policy)?;
    // Task runners run here, where a store call that blocks stalls turns but not the server.
    let turns = agentmesh_engine::turn_runtime(&host.policy)?;
    options.turns = Some(turns.handle().clone());
    let served = runtime.block_on(async {
        // Listened for before the address is announced: a stop that comes as soon as a client
        // (or a supervisor) sees the server up is a drain, not missed.
        let stop = StopSignals::listen().context("cannot listen for SIGTERM")?;
        // Bound before the engine starts, so that `runtime.api_root` is the server's own base
        // URL in every expression, those of tasks resumed at start included. Connections made
        // meanwhile wait in the backlog until the server accepts.
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("cannot listen on {addr}"))?;
        let bound = listener.local_addr()?;
        options.runtime["api_root"] = serde_json::Value::String(format!("http://{bound}"));
        let probed = Arc::clone(&store);
        let engine = Engine::new(plan, store, options);
        // Compile every component before taking traffic (a broken one is a start-up error).
        engine
            .load_components()
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        // The routing index follows the task records from the first one `recover` reads.
        let router = EventRouter::new(engine.clone())?;
        let triggers = Triggers::new(engine.clone())?;
        let resumed = engine.recover()?;
        // Schedules and wakeups are armed (what was missed while down fires now) before the
        // first request: a wakeup the API revokes is already known.
        triggers.start().await?;
        let state = Arc::new(AppState::new(
            router.clone(),
            triggers.clone(),
            Serving {
                auth: Auth::new(tokens),
                config_dir: args.dir.clone(),
                max_body_bytes: max_body_of(&host),
                limits,
                bound,
            },
        ));
        agentmesh_server::health::watch(
            Arc::clone(&probed),
            Arc::clone(&state.health),
            Probe::default(),
        )?;
        // The one line a supervisor (or a test) reads to learn the address.
        eprintln!("agentmesh: listening on http://{bound}");
        tracing::info!(%bound, resumed, "serving");
        let watcher = tokio::spawn(agentmesh_server::reload::watch(
            Arc::clone(&state),
            RELOAD_POLL,
        ));
        let mcp_events = tokio::spawn(route_mcp_updates(router.clone(), triggers.clone()));
        let pollers = {
            let router = router.clone();
            tokio::spawn(async move { router.run_pollers().await })
        };
        let sweeper = tokio::spawn(sweep(router));
        let hosting = {
            let engine = engine.clone();
            let lease = super::lease_of(&host);
            tokio::spawn(async move { engine.serve_hosts(lease).await })
        };
        let scheduler = tokio::spawn(triggers.run());
        agentmesh_server::serve(Arc::clone(&state), listener, limits, stop.received()).await;
        watcher.abort();
        sweeper.abort();
        hosting.abort();
        scheduler.abort();
        mcp_events.abort();
        pollers.abort();
        engine.shutdown().await;
        engine.store().flush()?;
        eprintln!("agentmesh: stopped");
        anyhow::Ok(())
    });
    // Turns still going are left as a stop leaves them (the next start resumes them); waiting
    // for a call blocked in the store would hold the exit.
    turns.shutdown_background();
    served?;
    Ok(ExitCode::SUCCESS)
}

/// Expires subscriptions and forgets old delivery ids, every [`SWEEP_EVERY`].
async fn sweep(router: EventRouter) {
    let engine = router.engine();
    let mut tick = tokio::time::interval(SWEEP_EVERY);
    let mut rounds: u64 = 0;
    loop {
        tick.tick().await;
        if let Err(e) = router.expire_subscriptions().await {
            tracing::warn!("expiring subscriptions failed: {e}");
        }
        rounds += 1;
        if rounds.is_multiple_of(3600)
            && let Err(e) = engine.store().forget_expired_buffered()
        {
            tracing::warn!("pruning delivery ids failed: {e}");
        }
    }
}

/// Holds the MCP sessions of tools whose events are resource updates, and routes each update
/// to the subscribed tasks and to the triggers of the `mcp-event` sources naming its event.
async fn route_mcp_updates(router: EventRouter, triggers: Triggers) {
    let (tx, mut rx) = tokio::sync::mpsc::channel(MCP_UPDATES_BUFFERED);
    let engine = router.engine().clone();
    let watching = engine.watch_mcp_resources(tx);
    tokio::pin!(watching);
    loop {
        let update = tokio::select! {
            () = &mut watching => return,
            update = rx.recv() => match update {
                Some(update) => update,
                None => return,
            },
        };
        let (tool, uri) = (&update.tool, &update.uri);
        match router.deliver_mcp_update(&update).await {
            Ok(tasks) => {
                tracing::debug!(tool.name = %tool, resource = %uri, tasks = tasks.len(), "MCP resource update routed");
            }
            Err(e) => {
                tracing::warn!(tool.name = %tool, resource = %uri, "MCP resource update not routed: {e}");
            }
        }
        if let Err(e) = triggers.deliver_mcp_update(&update).await {
            tracing::warn!(tool.name = %tool, resource = %uri, "MCP resource update fired no trigger: {e}");
        }
    }
}

/// How many resource updates wait to be routed before their watches wait.
const MCP_UPDATES_BUFFERED: usize = 256;

/// How long a stop (SIGINT/SIGTERM) may take: requests in flight finish and tool sessions are
/// torn down within it, or the process exits anyway.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(30);

/// Ends the process [`DRAIN_TIMEOUT`] after the first SIGINT or SIGTERM if it has not ended by
/// then. Runs on a thread and a runtime of its own, so that a stop is obeyed even when every
/// worker of the host's runtime is stuck.
fn bound_the_drain() -> std::io::Result<()> {
    let guard = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    // Registered before the thread starts: a stop that comes at once is not missed.
    let (mut term, mut int) = {
        let _in = guard.enter();
        (
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?,
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?,
        )
    };
    std::thread::Builder::new()
        .name("drain-deadline".into())
        .spawn(move || {
            guard.block_on(async {
                tokio::select! {
                    _ = term.recv() => {},
                    _ = int.recv() => {},
                }
                tokio::time::sleep(DRAIN_TIMEOUT).await;
            });
            eprintln!("agentmesh: the drain did not finish in {DRAIN_TIMEOUT:?}; exiting");
            std::process::exit(1);
        })?;
    Ok(())
}

/// SIGTERM and SIGINT, listened for from when [`StopSignals::listen`] returns: a signal that
/// comes later, however soon, is seen by [`StopSignals::received`].
struct StopSignals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl StopSignals {
    /// Starts listening (in a tokio runtime).
    fn listen() -> std::io::Result<StopSignals> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(StopSignals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
        })
    }

    /// Completes on the first SIGTERM or SIGINT.
    async fn received(mut self) {
        tokio::select! {
            _ = self.term.recv() => {},
            _ = self.int.recv() => {},
        }
        eprintln!("agentmesh: draining");
    }
}
