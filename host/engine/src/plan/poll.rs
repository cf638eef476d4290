//! A `receive.poll` event compiled: its request, `detect`, the item `id` and the `cursor`,
//! the interval, and the parameters the request reads (a poll is made once per distinct set
//! of their sealed values).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use agentmesh_expr::Expression;
use agentmesh_manifest::model::tool::{DEFAULT_POLL_INTERVAL, HttpRequest, Poll};

use super::auth::AuthPlan;
use super::{HttpPlan, compile, http_plan};
use crate::EngineError;

/// A `receive.poll` block, compiled.
pub struct PollPlan {
    /// The request (no body), over `parameters`, `settings`, `auth`, `runtime` and `poll`.
    pub request: HttpPlan,
    /// Over `response` (the answer's JSON body), `poll` and `parameters`: the list of items.
    pub detect: Expression,
    /// Over `item`: the id an item is known by; `None`: `item.id` when it has one, else the
    /// whole item.
    pub id: Option<Expression>,
    /// Over `response`, `poll` and `parameters`: the next `poll.cursor`.
    pub cursor: Option<Expression>,
    /// The pause between two polls that succeeded.
    pub interval: Duration,
    /// The parameters the request reads, in order: one poller per distinct set of values
    /// tasks' bindings seal for them.
    pub parameters: Vec<String>,
}

/// Compiles `poll` of event `event`.
pub(crate) fn poll_plan(
    poll: &Poll,
    event: &str,
    auth: &HashMap<String, Arc<AuthPlan>>,
) -> Result<PollPlan, EngineError> {
    let at = |e: EngineError| match e {
        EngineError::Config(why) => EngineError::Config(format!("event `{event}`: {why}")),
        other => other,
    };
    let request = HttpRequest {
        method: poll.method,
        url: Some(poll.url.clone()),
        headers: poll.headers.clone(),
        body: None,
        response_path: None,
        timeout: poll.timeout,
    };
    Ok(PollPlan {
        request: http_plan(&request, auth).map_err(at)?,
        detect: compile(&poll.detect).map_err(at)?,
        id: poll.id.as_deref().map(compile).transpose().map_err(at)?,
        cursor: poll
            .cursor
            .as_deref()
            .map(compile)
            .transpose()
            .map_err(at)?,
        interval: poll.interval.map_or(DEFAULT_POLL_INTERVAL, |d| d.0),
        parameters: poll.parameters_read(),
    })
}
