//! `agentmesh call DIR NS/TOOL.ACTION --input JSON [--repeat N] [--data DIR]`: one call of a
//! tool's action, as a task would make it, for developing a tool without an agent or an LLM.
//!
//! The call is a client call ([`Engine::call_direct`]) in a task of an agent made for it —
//! `call` in the tool's namespace (another name if that one is taken), with the tool as its one
//! capability — so it runs in the sandbox, with the limits and settings, a task would: the
//! host config's settings, `policy`, the component's `allowed_hosts`. Its task lives in a
//! temporary store; compiled components go to the cache `validate`, `run` and `serve` share
//! ([`component_cache`](super::component_cache)), so a component compiles once.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use agentmesh_engine::{ComponentMetrics, DirectEnd, Engine, EngineOptions, check_components};
use agentmesh_manifest::suggest::did_you_mean_hint;
use agentmesh_secrets::SharedSecrets;
use anyhow::Context;
use serde_json::{Value, json};

/// Arguments of `call`.
#[derive(clap::Args)]
pub struct Args {
    /// The config dir.
    dir: PathBuf,
    /// The tool and action, `namespace/tool.action` (`namespace/tool` for a tool with one
    /// action).
    target: String,
    /// The call's input (a JSON object of the action's parameters).
    #[arg(long, default_value = "{}")]
    input: String,
    /// Calls made (one session); with more than one, the latency's p50 and p99 are printed.
    #[arg(long, default_value_t = 1)]
    repeat: u32,
    /// The data dir, for the mounts (default: the host config's `data_dir`, else
    /// `DIR/.agentmesh`).
    #[arg(long)]
    data: Option<PathBuf>,
}

/// Prints the first call's result on stdout and the timings on stderr: exit 0; 1 for bad
/// usage or config, or when a call fails (the error on stderr).
pub fn execute(args: &Args, secrets: &SharedSecrets) -> anyhow::Result<ExitCode> {
    let input: Value = serde_json::from_str(&args.input)
        .with_context(|| format!("--input is not JSON: `{}`", args.input))?;
    if args.repeat == 0 {
        anyhow::bail!("--repeat must be at least 1");
    }
    let started = Instant::now();
    let mut report = agentmesh_manifest::validate(&args.dir);
    let data = super::data_dir(
        args.data.as_deref(),
        &report.config.base_dir(),
        &report.config.host_config(),
    );
    if report.has_errors() {
        return Ok(invalid(&report));
    }
    let (tool, action) = match target(&report.config, &args.target) {
        Ok(found) => found,
        Err(why) => {
            eprintln!("error: {why}");
            return Ok(ExitCode::from(1));
        }
    };
    let agent = caller(&mut report, &tool)?;
    let cache = super::component_cache(
        args.data.as_deref(),
        &report.config.base_dir(),
        &report.config.host_config(),
    );
    let compiling = Instant::now();
    let components = check_components(&mut report, Some(&cache), false);
    let compiled = compiling.elapsed();
    if report.has_errors() {
        return Ok(invalid(&report));
    }
    let Some(plan) = super::compile(&mut report) else {
        return Ok(invalid(&report));
    };
    let Some(function) = plan.agents.get(&agent).and_then(|a| {
        a.functions
            .iter()
            .find(|f| f.host.is_none() && f.action == Some(action))
            .map(|f| f.name.clone())
    }) else {
        anyhow::bail!(
            "the agent made for the call has no function for `{}`",
            args.target
        );
    };
    let validated = started.elapsed() - compiled;

    let tasks = tempfile::tempdir().context("cannot make a temporary store")?;
    let store = agentmesh_store::open(tasks.path()).context("opening a temporary store")?;
    let options = EngineOptions {
        mount_root: data.join("mounts"),
        component_cache: Some(cache),
        review_timeout: Some(Duration::ZERO),
        secrets: secrets.clone(),
        ..EngineOptions::default()
    };
    let runtime = agentmesh_engine::async_runtime(&plan.host.policy)?;
    let engine = Engine::new(plan, store, options);
    let call = Call {
        agent: &agent,
        function: &function,
        tool: &tool,
    };
    let ended = runtime.block_on(calls(&engine, &call, input, args.repeat));
    runtime.block_on(engine.shutdown());
    let (first, times, component) = ended?;
    let mut said = format!("validated in {:.1} ms", ms(validated));
    if components.files > 0 {
        let how = if components.from_cache == components.files {
            "loaded from the compiled cache"
        } else {
            "compiled"
        };
        said.push_str(&format!(
            "; {} component(s) {how} in {:.1} ms",
            components.files,
            ms(compiled)
        ));
    }
    said.push_str(&format!("; first call {:.2} ms", ms(times[0])));
    // What the component's own figures say of the first call: its Initialize (a fresh store,
    // instantiate, the session's constructor) and the call inside the instance.
    if let Some(first) = component.filter(|c| c.initializations > 0) {
        said.push_str(&format!(
            " (Initialize {:.2} ms, the action in the component {:.2} ms)",
            ms(first.initialize_time),
            ms(first.latency_sum)
        ));
    }
    if times.len() > 1 {
        let mut warm: Vec<Duration> = times[1..].to_vec();
        warm.sort();
        let at = |q: f64| warm[((warm.len() - 1) as f64 * q).round() as usize];
        said.push_str(&format!(
            "; {} more calls: p50 {:.1} µs, p99 {:.1} µs",
            warm.len(),
            at(0.5).as_secs_f64() * 1e6,
            at(0.99).as_secs_f64() * 1e6
        ));
    }
    // What the call answered may hold a secret the tool was given (the engine published them).
    let secrets = secrets.get();
    match first {
        DirectEnd::Observation(result) => {
            println!("{}", secrets.scrub(&serde_json::to_string_pretty(&result)?));
            eprintln!("{said}");
            Ok(ExitCode::SUCCESS)
        }
        DirectEnd::Error(why) | DirectEnd::Rejected(why) | DirectEnd::Terminated(why) => {
            eprintln!("error: {}", secrets.scrub(&why));
            eprintln!("{said}");
            Ok(ExitCode::from(1))
        }
        DirectEnd::Unknown => anyhow::bail!("no function `{function}`"),
    }
}

/// What `call` calls: the agent made for it, its function for the action, and the tool.
struct Call<'a> {
    agent: &'a str,
    function: &'a str,
    tool: &'a str,
}

/// Makes `repeat` calls in one session: the first one's end, each call's time, and the tool's
/// component figures right after the first call (none for a tool that is not a component).
async fn calls(
    engine: &Engine,
    call: &Call<'_>,
    input: Value,
    repeat: u32,
) -> anyhow::Result<(DirectEnd, Vec<Duration>, Option<ComponentMetrics>)> {
    engine.load_components().await?;
    let user = super::user_ref("user:local");
    let task = engine
        .open_session(call.agent, user, json!({"name": "agentmesh call"}))
        .await?;
    let mut first = None;
    let mut component = None;
    let mut times = Vec::with_capacity(repeat as usize);
    for _ in 0..repeat {
        let start = Instant::now();
        let end = engine
            .call_direct(
                &task.id,
                call.function,
                input.clone(),
                std::future::pending(),
            )
            .await?;
        times.push(start.elapsed());
        let failed = !matches!(end, DirectEnd::Observation(_));
        if first.is_none() {
            component = engine
                .pool_metrics()
                .and_then(|p| p.components.into_iter().find(|c| c.component == call.tool));
            first = Some(end);
        }
        if failed {
            break;
        }
    }
    engine.close_session(&task.id).await?;
    let first = first.unwrap_or(DirectEnd::Unknown);
    Ok((first, times, component))
}

/// The tool (`namespace/name`) and the index of the action `target` names.
fn target(config: &agentmesh_manifest::Config, target: &str) -> Result<(String, usize), String> {
    let (tool_ref, action) = match target.split_once('.') {
        Some((tool, action)) => (tool, Some(action)),
        None => (target, None),
    };
    let Some((namespace, name)) = tool_ref.split_once('/') else {
        return Err(format!(
            "`{target}` is not NAMESPACE/TOOL.ACTION (or NAMESPACE/TOOL for a tool with one action)"
        ));
    };
    let Some(tool) = config.tool(namespace, name) else {
        let ids: Vec<String> = config
            .tools
            .iter()
            .map(|t| format!("{}/{}", t.value.namespace, t.value.name))
            .collect();
        let hint = did_you_mean_hint(tool_ref, ids.iter().map(String::as_str));
        return Err(format!("no tool `{tool_ref}`{hint}"));
    };
    let actions: Vec<&str> = tool.value.actions.iter().map(|a| a.name.as_str()).collect();
    let index = match action {
        Some(action) => actions.iter().position(|a| *a == action),
        None if actions.len() == 1 => Some(0),
        None => {
            return Err(format!(
                "tool `{tool_ref}` has several actions: name one ({})",
                actions.join(", ")
            ));
        }
    };
    index.map(|i| (tool_ref.to_owned(), i)).ok_or_else(|| {
        format!(
            "tool `{tool_ref}` has no action `{}` (it has: {})",
            action.unwrap_or_default(),
            actions.join(", ")
        )
    })
}

/// Adds the agent that makes the call to `report`'s config: `NAMESPACE/call` (or
/// `call-2`, … when taken) with `tool` as its one capability. Returns its id.
fn caller(report: &mut agentmesh_manifest::Report, tool: &str) -> anyhow::Result<String> {
    let (namespace, name) = tool.split_once('/').unwrap_or(("", tool));
    let config = &mut report.config;
    let agent = (1..)
        .map(|n| match n {
            1 => "call".to_owned(),
            n => format!("call-{n}"),
        })
        .find(|a| config.agent(namespace, a).is_none())
        .unwrap_or_default();
    let manifest = json!({
        "kind": "commonagents.info/v1beta2/agent",
        "namespace": namespace,
        "name": agent,
        "description": "Makes the calls of `agentmesh call`.",
        "prompt": "",
        // Never asked: the calls are a client's, not an LLM's.
        "model": "scripted/none",
        "capabilities": {name: "*"},
    });
    let base = config.base_dir();
    let mut diags = Vec::new();
    let env = |n: &str| std::env::var(n).ok();
    agentmesh_manifest::load::load_text(
        &manifest.to_string(),
        (&base.join("(agentmesh call)"), &base),
        &env,
        config,
        &mut diags,
    );
    if let Some(d) = diags.first() {
        anyhow::bail!("the agent made for the call does not load: {d}");
    }
    Ok(format!("{namespace}/{agent}"))
}

fn invalid(report: &agentmesh_manifest::Report) -> ExitCode {
    for d in &report.diagnostics {
        eprintln!("{d}");
    }
    ExitCode::from(1)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
