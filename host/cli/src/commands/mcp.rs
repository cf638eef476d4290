//! `agentmesh mcp DIR --agent NS/NAME [--data DIR] [--user ID]`: the agent's functions served
//! as MCP tools on stdin/stdout, one MCP session (one task of the agent) until stdin closes.

use std::path::PathBuf;
use std::process::ExitCode;

use agentmesh_mcp::SessionOf;
use agentmesh_secrets::SharedSecrets;

/// Arguments of `mcp`.
#[derive(clap::Args)]
pub struct Args {
    /// The config dir.
    dir: PathBuf,
    /// The agent, `namespace/name`.
    #[arg(long)]
    agent: String,
    /// The data dir (default: the host config's `data_dir`, else `DIR/.agentmesh`).
    #[arg(long)]
    data: Option<PathBuf>,
    /// The user the session's task runs for.
    #[arg(long, default_value = "user:local")]
    user: String,
}

/// Serves until the client closes stdin: exit 0; 1 for bad usage or config. Nothing but
/// the protocol goes to stdout; diagnostics and logs go to stderr.
pub fn execute(args: &Args, secrets: &SharedSecrets) -> anyhow::Result<ExitCode> {
    let Some((_, plan, dirs)) = super::load(&args.dir, args.data.as_deref())? else {
        return Ok(ExitCode::from(1));
    };
    let (runtime, engine) = super::in_process(plan, &dirs, secrets)?;
    let of = SessionOf {
        agent: args.agent.clone(),
        user: super::user_ref(&args.user),
    };
    let served = runtime.block_on(async {
        let served = agentmesh_mcp::serve_stdio(engine.clone(), of).await;
        engine.shutdown().await;
        served
    });
    engine.flush()?;
    served?;
    Ok(ExitCode::SUCCESS)
}
