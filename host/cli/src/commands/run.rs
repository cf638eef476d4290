//! `agentmesh run DIR --agent NS/NAME [-m TEXT] [--param K=V]... [--data DIR] [--user ID] [--json]`.

use std::path::PathBuf;
use std::process::ExitCode;

use agentmesh_engine::{Engine, NewTask, Origin, Run, Status, TaskRecord};
use agentmesh_model::event::EventKind;
use agentmesh_secrets::SharedSecrets;
use anyhow::bail;
use serde_json::{Map, Value};

/// Arguments of `run`.
#[derive(clap::Args)]
pub struct Args {
    /// The config dir.
    dir: PathBuf,
    /// The agent, `namespace/name`.
    #[arg(long)]
    agent: String,
    /// The message.
    #[arg(short = 'm', long = "message")]
    message: Option<String>,
    /// A parameter value, `KEY=VALUE` (VALUE is parsed as JSON when it is JSON).
    #[arg(long = "param", value_name = "KEY=VALUE")]
    params: Vec<String>,
    /// The data dir (default: the host config's `data_dir`, else `DIR/.agentmesh`).
    #[arg(long)]
    data: Option<PathBuf>,
    /// The user the task runs for.
    #[arg(long, default_value = "user:local")]
    user: String,
    /// Continue this task (from the same data dir) instead of starting a new one.
    #[arg(long)]
    task: Option<String>,
    /// Print the task object instead of the answer.
    #[arg(long)]
    json: bool,
}

/// Runs one task in-process to idle or termination: exit 0 idle, 2 terminated, 1 bad
/// usage or config.
pub fn execute(args: &Args, secrets: &SharedSecrets) -> anyhow::Result<ExitCode> {
    let Some((_, plan, dirs)) = super::load(&args.dir, args.data.as_deref())? else {
        return Ok(ExitCode::from(1));
    };
    if let Some(id) = &args.task
        && super::postgres_options(&plan.host).is_none()
        && !agentmesh_store::exists(&dirs.data)
    {
        bail!(
            "no store in {}, so no task `{id}`: give the data dir the task ran in (--data)",
            dirs.data.display()
        );
    }
    let (runtime, engine) = super::in_process(plan, &dirs, secrets)?;
    let input = input(args)?;
    let no_input = input.is_none();
    let record = runtime.block_on(async {
        let id = match &args.task {
            Some(id) => {
                let task = engine.task(id)?;
                if task.agent != args.agent {
                    bail!(
                        "task `{id}` runs agent `{}`, not `{}`",
                        task.agent,
                        args.agent
                    );
                }
                if let Some(host) = engine.holder(id).await? {
                    bail!(
                        "task `{id}` runs on host `{host}`, which shares the store: send it input \
                         through a host's API (POST /v1/tasks/{id}/input)"
                    );
                }
                if let Some(input) = input {
                    engine.submit(id, input, Origin::User, Run::Caller).await?;
                }
                id.clone()
            }
            None => {
                let new = NewTask {
                    agent: args.agent.clone(),
                    input,
                    user: super::user_ref(&args.user),
                };
                engine.create_task(new, Run::Caller).await?.id
            }
        };
        let record = engine.run_until_idle(&id).await;
        engine.shutdown().await;
        anyhow::Ok(record?)
    })?;
    // What is printed comes from the task's record as well as its (already scrubbed) log.
    let secrets = secrets.get();
    if args.json {
        // Why the task ended goes to stderr in both forms: the object says only the reason.
        if record.status() == Status::Terminated {
            eprintln!(
                "task {} terminated: {}",
                record.id,
                secrets.scrub(&termination(&engine, &record))
            );
        }
        let object = engine.read_task(&record.id, agentmesh_server::resources::task)?;
        let object = serde_json::to_string_pretty(&object)?;
        println!("{}", secrets.scrub(&object));
    } else {
        match record.status() {
            Status::Terminated => eprintln!(
                "task {} terminated: {}",
                record.id,
                secrets.scrub(&termination(&engine, &record))
            ),
            _ if record.outputs.is_empty() && no_input => {
                eprintln!("no input given (-m TEXT or --param KEY=VALUE): the task waits for it");
            }
            _ => println!(
                "{}",
                secrets.scrub(&record.last_output_text().unwrap_or_default())
            ),
        }
        eprintln!("task: {}", record.id);
    }
    Ok(if record.status() == Status::Terminated {
        ExitCode::from(2)
    } else {
        ExitCode::SUCCESS
    })
}

/// Why a terminated task ended, as its log says: the reason (`error`, `limit_exceeded`,
/// `locked`, `deleted`) and the message of the event that ended it, e.g. `error: configuration:
/// no model script …` or `limit_exceeded (max_turns): …`.
fn termination(engine: &Engine, record: &TaskRecord) -> String {
    let reason = record
        .reason
        .and_then(|r| serde_json::to_value(r).ok())
        .and_then(|r| r.as_str().map(str::to_owned))
        .unwrap_or_else(|| "terminated".into());
    let reason = match &record.limit {
        Some(limit) => format!("{reason} ({limit})"),
        None => reason,
    };
    // The last event naming why: `error`, `limit_exceeded` or `locked` with a message.
    let message = engine.events(&record.id, 0).ok().and_then(|events| {
        events.iter().rev().find_map(|e| match &e.kind {
            EventKind::ConversationStateUpdateEvent { key, value }
                if matches!(key.as_str(), "error" | "limit_exceeded" | "locked") =>
            {
                value["message"].as_str().map(str::to_owned)
            }
            _ => None,
        })
    });
    match message {
        Some(message) => format!("{reason}: {message}"),
        None => reason,
    }
}

fn input(args: &Args) -> anyhow::Result<Option<Value>> {
    if args.message.is_none() && args.params.is_empty() {
        return Ok(None);
    }
    let mut m = Map::new();
    if let Some(text) = &args.message {
        m.insert("message".into(), Value::String(text.clone()));
    }
    for p in &args.params {
        let Some((k, v)) = p.split_once('=') else {
            bail!("--param takes KEY=VALUE, got `{p}`");
        };
        let value = serde_json::from_str(v).unwrap_or_else(|_| Value::String(v.to_owned()));
        m.insert(k.to_owned(), value);
    }
    Ok(Some(Value::Object(m)))
}
