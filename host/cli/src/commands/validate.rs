//! `agentmesh validate DIR`.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use agentmesh_engine::check_components;

/// Arguments of `validate`.
#[derive(clap::Args)]
pub struct Args {
    /// The config dir (or a single manifest file).
    dir: PathBuf,
}

/// Prints every diagnostic as `FILE:LINE:COL: error: MESSAGE` (exit 1), or the `ok:` summary.
pub fn execute(args: &Args) -> anyhow::Result<ExitCode> {
    let mut report = agentmesh_manifest::validate(&args.dir);
    // Compiled aside, not into a data dir: validating writes nothing.
    check_components(&mut report, None, std::io::stderr().is_terminal());
    // What `serve` would run: the compilation's errors are the config's too.
    if !report.has_errors() {
        super::compile(&mut report);
    }
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
    Ok(ExitCode::SUCCESS)
}
