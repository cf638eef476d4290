//! `agentmesh review approve|deny TASK REVIEW --server URL`: a person's decision on a review a
//! running host waits for (the token in `AGENTMESH_TOKEN` names who decides).

use std::process::ExitCode;

use serde_json::json;

/// Arguments of `review`.
#[derive(clap::Args)]
pub struct Args {
    /// `approve` or `deny`.
    decision: Decision,
    /// The task.
    task: String,
    /// The review (`rv_…`, from the task's `ReviewRequestEvent` or `GET /v1/reviews`).
    review: String,
    /// The running host's base URL (`http://127.0.0.1:8080`).
    #[arg(long)]
    server: String,
}

/// A decision.
#[derive(Clone, Copy, clap::ValueEnum)]
enum Decision {
    Approve,
    Deny,
}

/// Decides the review and prints the host's answer.
pub fn execute(args: &Args) -> anyhow::Result<ExitCode> {
    let api = super::api::Api::new(&args.server)?;
    let approve = matches!(args.decision, Decision::Approve);
    let answer = api.post(
        &format!("/v1/tasks/{}/reviews/{}", args.task, args.review),
        &json!({ "approve": approve }),
    )?;
    println!("{answer}");
    Ok(ExitCode::SUCCESS)
}
