//! `agentmesh validate DIR`.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `validate`.
#[derive(clap::Args)]
pub struct Args {
    /// The config dir (or a single manifest file).
    dir: PathBuf,
}

/// Prints every diagnostic as `FILE:LINE:COL: error: MESSAGE` (exit 1), or the `ok:` summary.
pub fn execute(args: &Args) -> anyhow::Result<ExitCode> {
    let report = agentmesh_manifest::validate(&args.dir);
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
