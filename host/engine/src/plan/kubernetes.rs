//! A `kubernetes_job` action compiled: where the API is, the namespace and the Job's spec as
//! templates (rendered per call), and the call's limits.

use std::time::Duration;

use agentmesh_expr::Template;
use agentmesh_manifest::model::tool::KubernetesJob;

use super::{BodyTemplate, body_template, reads_context, template};
use crate::EngineError;

/// How long a call waits for its Job when the manifest does not say.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

/// The most of a pod's log a result holds when the manifest does not say: the log becomes
/// part of the LLM's context and the event log, so a Job that prints gigabytes is cut here.
pub const DEFAULT_MAX_OUTPUT: usize = 1024 * 1024;

/// A `kubernetes_job` action, compiled.
pub struct JobPlan {
    /// Where the API server is (`None`: the cluster the host runs in).
    pub api_server: Option<Template>,
    /// The bearer token (`None`: the service account's).
    pub token: Option<Template>,
    /// The namespace.
    pub namespace: Template,
    /// The Job's `spec`, string leaves compiled.
    pub spec: BodyTemplate,
    /// How long a call waits for the Job to end.
    pub timeout: Duration,
    /// The most of the log a result holds.
    pub max_output: usize,
    /// Whether any template reads `context` (it is only built then).
    pub uses_context: bool,
}

/// Compiles `job`.
pub(crate) fn job_plan(job: &KubernetesJob) -> Result<JobPlan, EngineError> {
    let namespace = template(&job.namespace)?;
    let spec = body_template(&job.spec)?;
    let mut all = vec![&namespace];
    spec.templates(&mut all);
    let uses_context = reads_context(&all);
    Ok(JobPlan {
        api_server: job.api_server.as_deref().map(template).transpose()?,
        token: job.token.as_deref().map(template).transpose()?,
        namespace,
        spec,
        timeout: job.timeout.map_or(DEFAULT_TIMEOUT, |d| d.0),
        max_output: job.max_output.map_or(DEFAULT_MAX_OUTPUT, |b| {
            usize::try_from(b.0).unwrap_or(usize::MAX)
        }),
        uses_context,
    })
}
