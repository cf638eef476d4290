//! `agentmesh tasks (--data DIR | --server URL) [--agent] [--status] [--owner] [--limit]
//! [--json]`: the tasks, newest first, as a table or as task objects (one JSON line each).

use std::io::Write;
use std::process::ExitCode;

use agentmesh_engine::Status;
use anyhow::{Context, bail};
use serde_json::Value;

/// Arguments of `tasks`.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    from: super::ReadFrom,
    /// Only tasks of this agent (`ns/name`).
    #[arg(long)]
    agent: Option<String>,
    /// Only tasks in this status: idle, running, waiting or terminated.
    #[arg(long)]
    status: Option<String>,
    /// Only tasks of this owner (a user id).
    #[arg(long)]
    owner: Option<String>,
    /// At most this many tasks, the newest.
    #[arg(long, default_value_t = 100)]
    limit: usize,
    /// Task objects (as the API gives them), one JSON object a line, instead of a table.
    #[arg(long)]
    json: bool,
}

/// Lists the tasks.
pub fn execute(args: &Args) -> anyhow::Result<ExitCode> {
    let status = args
        .status
        .as_deref()
        .map(|s| {
            serde_json::from_value::<Status>(Value::from(s)).map_err(|_| {
                anyhow::anyhow!(
                    "unknown status `{s}`: expected idle, running, waiting or terminated"
                )
            })
        })
        .transpose()?;
    if args.limit == 0 {
        bail!("`--limit` must be at least 1");
    }
    let tasks = match &args.from.server {
        Some(server) => from_server(server, args)?,
        None => from_store(args, status)?,
    };
    let mut out = std::io::stdout().lock();
    if args.json {
        for task in &tasks {
            writeln!(out, "{task}")?;
        }
    } else {
        print_table(&mut out, &tasks)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The tasks through the API, page by page, up to `--limit`.
fn from_server(server: &str, args: &Args) -> anyhow::Result<Vec<Value>> {
    let api = super::api::Api::new(server)?;
    let mut query = Vec::new();
    for (key, value) in [
        ("agent", &args.agent),
        ("status", &args.status),
        ("owner", &args.owner),
    ] {
        if let Some(value) = value {
            query.push(format!("{key}={}", encode(value)));
        }
    }
    let mut tasks = Vec::new();
    let mut cursor: Option<String> = None;
    while tasks.len() < args.limit {
        let mut page_query = query.clone();
        page_query.push(format!("limit={}", (args.limit - tasks.len()).min(1000)));
        if let Some(c) = &cursor {
            page_query.push(format!("cursor={}", encode(c)));
        }
        let page = api.get(&format!("/v1/tasks?{}", page_query.join("&")))?;
        tasks.extend(page["tasks"].as_array().cloned().unwrap_or_default());
        match page["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
    }
    Ok(tasks)
}

/// `value` percent-encoded for a query string.
fn encode(value: &str) -> String {
    percent_encoding::utf8_percent_encode(value, percent_encoding::NON_ALPHANUMERIC).to_string()
}

/// The tasks of a store no host serves, newest first.
fn from_store(args: &Args, status: Option<Status>) -> anyhow::Result<Vec<Value>> {
    let data = args.from.data_dir();
    // Reading must not create: a mistyped `--data` would otherwise become an empty store.
    if !agentmesh_store::exists(&data) {
        bail!(
            "no store in {}: give the data dir of `agentmesh run` or `serve` (by default the \
             config dir's `.agentmesh`, or the host config's `data_dir`), or `--server URL`",
            data.display()
        );
    }
    let store = agentmesh_store::open(&data).with_context(|| {
        format!(
            "opening the store in {} (while `agentmesh serve` holds it, list with \
             `--server URL`)",
            data.display()
        )
    })?;
    let mut records: Vec<_> = agentmesh_engine::stored_tasks(store.as_ref())?
        .into_iter()
        .filter(|t| args.agent.as_ref().is_none_or(|a| &t.agent == a))
        .filter(|t| status.is_none_or(|s| t.status() == s))
        .filter(|t| args.owner.as_ref().is_none_or(|o| &t.user.id == o))
        .collect();
    records.sort_by(|a, b| (b.created_ms, &b.id).cmp(&(a.created_ms, &a.id)));
    records
        .iter()
        .take(args.limit)
        .map(|r| {
            let depth = store.queued_count(&r.id)?;
            Ok(agentmesh_server::resources::task(r, depth))
        })
        .collect()
}

/// One line a task: id, status, agent, owner, queue depth, created, and its last answer's
/// first line.
fn print_table(out: &mut impl Write, tasks: &[Value]) -> std::io::Result<()> {
    let rows: Vec<[String; 7]> = tasks
        .iter()
        .map(|t| {
            let text = |v: &Value| v.as_str().unwrap_or("").to_owned();
            let status = match t["reason"].as_str() {
                Some(reason) => format!("{} ({reason})", text(&t["status"])),
                None => text(&t["status"]),
            };
            let last = t["output"]
                .as_array()
                .and_then(|o| o.last())
                .and_then(|o| o["message"].as_array())
                .and_then(|parts| parts.iter().find_map(|p| p["text"].as_str()))
                .and_then(|s| s.lines().next())
                .unwrap_or("")
                .chars()
                .take(50)
                .collect();
            [
                text(&t["id"]),
                status,
                text(&t["agent"]),
                text(&t["owner"]),
                t["queue_depth"].to_string(),
                text(&t["created_at"]),
                last,
            ]
        })
        .collect();
    let header = [
        "ID",
        "STATUS",
        "AGENT",
        "OWNER",
        "QUEUED",
        "CREATED",
        "LAST ANSWER",
    ];
    let mut widths = header.map(str::len);
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: [&str; 7]| {
        let mut s = String::new();
        for (i, (cell, w)) in cells.iter().zip(widths).enumerate() {
            if i + 1 == cells.len() {
                s.push_str(cell);
            } else {
                s.push_str(&format!("{cell:<w$}  "));
            }
        }
        s.trim_end().to_owned()
    };
    writeln!(out, "{}", line(header))?;
    for row in &rows {
        writeln!(out, "{}", line(row.each_ref().map(String::as_str)))?;
    }
    Ok(())
}
