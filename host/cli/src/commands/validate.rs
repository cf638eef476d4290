//! `agentmesh validate DIR [--probe]`.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use agentmesh_engine::{About, Finding, check_components};
use agentmesh_manifest::yaml::{Node, Pos};
use agentmesh_manifest::{Config, Diagnostic, Report};
use anyhow::Context;

/// Arguments of `validate`.
#[derive(clap::Args)]
pub struct Args {
    /// The config dir (or a single manifest file).
    dir: PathBuf,
    /// Once the config is valid, also start (or connect to) each MCP server of the `mcp`
    /// actions, list its tools, and report actions naming a tool it does not offer or whose
    /// parameters disagree with the tool's input schema.
    #[arg(long)]
    probe: bool,
}

/// Prints every diagnostic as `FILE:LINE:COL: error: MESSAGE` (exit 1), or the `ok:` summary
/// (and, with `--probe`, what was probed).
pub fn execute(args: &Args) -> anyhow::Result<ExitCode> {
    let mut report = agentmesh_manifest::validate(&args.dir);
    // Into the cache every command shares: `run`, `serve` and `call` find them compiled.
    let cache = super::component_cache(
        None,
        &report.config.base_dir(),
        &report.config.host_config(),
    );
    check_components(&mut report, Some(&cache), std::io::stderr().is_terminal());
    // What `serve` would run: the compilation's errors are the config's too.
    let plan = match report.has_errors() {
        true => None,
        false => super::compile(&mut report),
    };
    let mut probed = None;
    if let Some(plan) = plan.filter(|_| args.probe) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("starting the async runtime of the probe")?;
        let probe = runtime.block_on(agentmesh_engine::probe(&plan));
        let found: Vec<Diagnostic> = probe
            .findings
            .iter()
            .map(|f| diagnostic(&report.config, f))
            .collect();
        report.add_diagnostics(found);
        probed = Some((probe.servers, probe.actions));
    }
    print(&report, probed)
}

/// Prints `report`'s diagnostics, then the `ok:` lines when it has no error.
fn print(report: &Report, probed: Option<(usize, usize)>) -> anyhow::Result<ExitCode> {
    let mut out = std::io::stdout().lock();
    for d in &report.diagnostics {
        writeln!(out, "{d}")?;
    }
    if report.has_errors() {
        return Ok(ExitCode::from(1));
    }
    let s = &report.summary;
    writeln!(
        out,
        "ok: {} agents, {} tools, {} triggers, {} schedules, {} components",
        s.agents, s.tools, s.triggers, s.schedules, s.components
    )?;
    if let Some((servers, actions)) = probed {
        writeln!(out, "probed: {servers} servers, {actions} actions")?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `finding` as an error at its place in the tool's manifest: the declared parameter, the
/// `tool_name` (else the action's `name`), the action's `parameters` or its `execute.mcp`,
/// whichever it is about; the action itself when that is not written.
fn diagnostic(config: &Config, finding: &Finding) -> Diagnostic {
    let Some(source) = config
        .tools
        .iter()
        .find(|t| format!("{}/{}", t.value.namespace, t.value.name) == finding.tool)
        .map(|t| &t.source)
    else {
        return Diagnostic::error(
            config.base_dir(),
            Pos::default(),
            format!("tool `{}`: {}", finding.tool, finding.message),
        );
    };
    let root = &source.node;
    let action = root.get("actions").and_then(|a| a.index(finding.action));
    let key =
        |node: Option<&Node>, name: &str| node.and_then(|n| n.entry(name)).map(|(k, _)| k.pos);
    let mcp = action
        .and_then(|a| a.get("execute"))
        .and_then(|e| e.get("mcp"));
    let params = |node: Option<&Node>, name: &str| {
        key(
            node.and_then(|n| n.get("parameters"))
                .and_then(|p| p.get("properties")),
            name,
        )
    };
    let pos = match &finding.about {
        About::Server => key(action.and_then(|a| a.get("execute")), "mcp"),
        About::ToolName => key(mcp, "tool_name").or_else(|| key(action, "name")),
        About::Parameter(name) => params(action, name)
            .or_else(|| params(Some(root), name))
            .or_else(|| key(action, "parameters")),
        About::Parameters => key(action, "parameters").or_else(|| key(Some(root), "parameters")),
    };
    let pos = pos.or(action.map(|a| a.pos)).unwrap_or_default();
    Diagnostic::error(&source.file, pos, finding.message.clone())
}
