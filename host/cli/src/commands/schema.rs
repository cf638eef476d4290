//! `agentmesh schema KIND`.

use std::process::ExitCode;

use agentmesh_manifest::model::Kind;
use anyhow::anyhow;

/// Arguments of `schema`.
#[derive(clap::Args)]
pub struct Args {
    /// `agent`, `tool`, `trigger`, `schedule`, `bundle` or `host` (or the full `kind:` string).
    kind: String,
}

/// Prints the kind's JSON Schema (draft 2020-12).
pub fn execute(args: &Args) -> anyhow::Result<ExitCode> {
    let kind = Kind::parse(&args.kind).ok_or_else(|| {
        let names: Vec<&str> = Kind::ALL.iter().map(|k| k.short_name()).collect();
        anyhow!(
            "unknown kind `{}` (expected one of: {})",
            args.kind,
            names.join(", ")
        )
    })?;
    println!("{}", serde_json::to_string_pretty(&kind.schema())?);
    Ok(ExitCode::SUCCESS)
}
