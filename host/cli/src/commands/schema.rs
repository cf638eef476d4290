//! `agentmesh schema KIND`.

use std::process::ExitCode;

use agentmesh_manifest::model::Kind;
use anyhow::anyhow;

/// Arguments of `schema`.
#[derive(clap::Args)]
pub struct Args {
    /// `agent`, `tool`, `trigger`, `schedule`, `bundle` or `host` (or the full `kind:` string),
    /// or `script` (a scripted model's file).
    kind: String,
}

/// Prints the kind's JSON Schema (draft 2020-12); `script` is the scripted model's file (the
/// responses of `model: scripted/<file>`).
pub fn execute(args: &Args) -> anyhow::Result<ExitCode> {
    if args.kind == "script" {
        let schema = agentmesh_manifest::model::script::Script::schema();
        println!("{}", serde_json::to_string_pretty(&schema)?);
        return Ok(ExitCode::SUCCESS);
    }
    let kind = Kind::parse(&args.kind).ok_or_else(|| {
        let names: Vec<&str> = Kind::ALL.iter().map(|k| k.short_name()).collect();
        anyhow!(
            "unknown kind `{}` (expected one of: {}, or script)",
            args.kind,
            names.join(", ")
        )
    })?;
    println!("{}", serde_json::to_string_pretty(&kind.schema())?);
    Ok(ExitCode::SUCCESS)
}
