//! A `stateful_session` action compiled: its `create`, `execute` and `destroy` requests (the
//! tool page's `initialize` and `teardown` read as `create` and `destroy`) and what `extract`
//! takes of the create response.

use std::collections::HashMap;
use std::sync::Arc;

use agentmesh_manifest::model::tool::StatefulSession;

use super::auth::AuthPlan;
use super::{HttpPlan, http_plan};
use crate::EngineError;

/// A `stateful_session` action (its block completed from the tool's shared one), compiled.
pub struct SessionPlan {
    /// Creates the session (Initialize).
    pub create: HttpPlan,
    /// Session key → JSONPath into the create response; `None`: the session is the whole
    /// response (when it is a JSON object).
    pub extract: Option<Vec<(String, String)>>,
    /// The request of each call, with `{session.*}` in scope.
    pub execute: HttpPlan,
    /// Ends the session (Teardown), with `{session.*}` in scope.
    pub destroy: Option<HttpPlan>,
    /// What a task's session is known by within the tool: actions whose `create`, `extract`
    /// and `destroy` come out the same share one session.
    pub session: String,
}

impl SessionPlan {
    /// Whether any of its requests reads `context` (it is only built then).
    pub fn uses_context(&self) -> bool {
        [
            Some(&self.create),
            Some(&self.execute),
            self.destroy.as_ref(),
        ]
        .into_iter()
        .flatten()
        .any(|r| r.uses_context)
    }
}

/// Compiles `block` of action `action`.
pub(crate) fn session_plan(
    block: &StatefulSession,
    action: &str,
    auth: &HashMap<String, Arc<AuthPlan>>,
) -> Result<SessionPlan, EngineError> {
    let missing = |what: &str| {
        EngineError::Config(format!(
            "action `{action}`: `stateful_session` has no `{what}` request"
        ))
    };
    let create = block
        .create
        .as_ref()
        .or(block.initialize.as_ref())
        .ok_or_else(|| missing("create"))?;
    let execute = block.execute.as_ref().ok_or_else(|| missing("execute"))?;
    let destroy = block.destroy.as_ref().or(block.teardown.as_ref());
    let identity =
        serde_json::json!({"create": create, "extract": block.extract, "destroy": destroy});
    Ok(SessionPlan {
        create: http_plan(create, auth)?,
        extract: block
            .extract
            .as_ref()
            .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect()),
        execute: http_plan(execute, auth)?,
        destroy: destroy.map(|d| http_plan(d, auth)).transpose()?,
        session: identity.to_string(),
    })
}
