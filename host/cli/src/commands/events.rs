//! `agentmesh events (--data DIR | --server URL) TASK_ID [--follow]`.

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use agentmesh_store::Typed;
use anyhow::Context;
use serde_json::Value;

/// Arguments of `events`.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    from: super::ReadFrom,
    /// The task.
    task: String,
    /// Keep printing new events until the task terminates.
    #[arg(long)]
    follow: bool,
}

/// Prints the task's event log, one JSON object a line.
pub fn execute(args: &Args) -> anyhow::Result<ExitCode> {
    if let Some(server) = &args.from.server {
        return from_server(server, args);
    }
    let data = args.from.data_dir();
    // Reading must not create: a mistyped `--data` would otherwise become an empty store.
    if !agentmesh_store::exists(&data) {
        anyhow::bail!(
            "no store in {}: give the data dir of `agentmesh run` or `serve` (by default \
             the config dir's `.agentmesh`, or the host config's `data_dir`)",
            data.display()
        );
    }
    let store = agentmesh_store::open(&data).with_context(|| {
        format!(
            "opening the store in {} (while `agentmesh serve` holds it, read it with \
             `--server URL`)",
            data.display()
        )
    })?;
    if store.task::<Value>(&args.task)?.is_none() {
        anyhow::bail!("no task `{}` in {}", args.task, data.display());
    }
    let mut after = 0;
    let mut out = std::io::stdout().lock();
    loop {
        for event in store.events(&args.task, after)? {
            after = event.seq;
            writeln!(out, "{}", serde_json::to_string(&event)?)?;
        }
        out.flush()?;
        let terminated = store
            .task::<Value>(&args.task)?
            .is_some_and(|t| t.get("status").and_then(Value::as_str) == Some("terminated"));
        if !args.follow || terminated {
            return Ok(ExitCode::SUCCESS);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Prints task `args.task`'s log as the host at `server` serves it; with `--follow`, each new
/// event as it is written, until the task terminates.
fn from_server(server: &str, args: &Args) -> anyhow::Result<ExitCode> {
    let api = super::api::Api::new(server)?;
    let path = format!("/v1/tasks/{}/events", args.task);
    let mut out = std::io::stdout().lock();
    if !args.follow {
        let log = api.get(&path)?;
        for event in log["events"].as_array().into_iter().flatten() {
            writeln!(out, "{event}")?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    api.follow(&path, &mut |data| {
        let event: Value = serde_json::from_str(data).context("an event that is not JSON")?;
        writeln!(out, "{event}")?;
        out.flush()?;
        // The stream stays open after the task ends; following stops there.
        let ended = event["kind"] == "ConversationStateUpdateEvent"
            && event["key"] == "status"
            && event["value"] == "terminated";
        Ok(!ended)
    })?;
    Ok(ExitCode::SUCCESS)
}
