//! `agentmesh events --data DIR TASK_ID [--follow]`.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use agentmesh_store::Typed;
use anyhow::Context;
use serde_json::Value;

/// Arguments of `events`.
#[derive(clap::Args)]
pub struct Args {
    /// The data dir.
    #[arg(long)]
    data: PathBuf,
    /// The task.
    task: String,
    /// Keep printing new events until the task terminates.
    #[arg(long)]
    follow: bool,
}

/// Prints the task's event log, one JSON object a line.
pub fn execute(args: &Args) -> anyhow::Result<ExitCode> {
    // Reading must not create: a mistyped `--data` would otherwise become an empty store.
    if !agentmesh_store::exists(&args.data) {
        anyhow::bail!(
            "no store in {}: give the data dir of `agentmesh run` or `serve` (by default \
             the config dir's `.agentmesh`, or the host config's `data_dir`)",
            args.data.display()
        );
    }
    let store = agentmesh_store::open(&args.data).with_context(|| {
        format!(
            "opening the store in {} (while `agentmesh serve` holds it, use GET /v1/tasks/{}/events)",
            args.data.display(),
            args.task
        )
    })?;
    if store.task::<Value>(&args.task)?.is_none() {
        anyhow::bail!("no task `{}` in {}", args.task, args.data.display());
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
