//! Trigger sources, triggers and schedules, compiled once per plan (run by the engine's
//! `triggers`, `schedules` and `wakeups`), and the host's default bounds for them.

use std::time::{Duration, SystemTime};

use agentmesh_expr::{Expression, Template};
use agentmesh_manifest::credentials::{self, SourceAccess};
use agentmesh_manifest::model::host::{HostConfig, SignatureScheme, SourceConfig};
use agentmesh_manifest::model::{Schedule, Trigger};
use agentmesh_model::delivery::{Inbound, Proof};
use agentmesh_secrets::signature;
use agentmesh_secrets::{BearerTokens, TokenError};
use agentmesh_timing::Timing;
use serde_json::{Map, Value};

use super::{compile, template};
use crate::EngineError;

/// Lifetime of self-schedules (and of anything else given no `ttl`) by default: 7 days, the
/// triggers page's recommendation.
pub const DEFAULT_TRIGGER_TTL: Duration = Duration::from_secs(168 * 3600);
/// How far ahead a wakeup may first fire by default.
pub const DEFAULT_MAX_WAKEUP_HORIZON: Duration = Duration::from_secs(168 * 3600);
/// Pending wakeups per task by default.
pub const DEFAULT_MAX_WAKEUPS_PER_TASK: u32 = 50;
/// Fires per trigger per rolling hour by default.
pub const DEFAULT_TRIGGER_MAX_PER_HOUR: u32 = 60;
/// Trigger-fired turns per user per UTC day by default.
pub const DEFAULT_TRIGGERED_TURNS_PER_USER_PER_DAY: u32 = 1000;

/// A `sources` entry of the host config, compiled. Holds no secret in a form worth logging and
/// implements no `Debug`.
pub enum SourcePlan {
    /// HMAC-signed deliveries, verified on the raw bytes with this secret.
    Signed {
        /// `github` or `standard-webhooks`.
        scheme: SignatureScheme,
        /// The shared secret.
        secret: String,
    },
    /// `Authorization: Bearer <token>`: the accepted tokens, as SHA-256 digests only.
    Bearer(BearerTokens<String>),
    /// Fired by the resource updates event `event` of MCP tool `tool` receives; it takes no
    /// deliveries.
    Mcp {
        /// The tool, `namespace/name`.
        tool: String,
        /// Its event.
        event: String,
    },
}

/// Why a delivery to a source is refused: a bad or missing signature or bearer token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Unauthenticated(pub String);

impl SourcePlan {
    /// What proves where its deliveries came from: its signature scheme, or nothing for a
    /// `bearer` source (whose token holders name their own delivery ids).
    pub fn proof(&self) -> Proof {
        match self {
            SourcePlan::Signed {
                scheme: SignatureScheme::Github,
                ..
            } => Proof::GitHub,
            SourcePlan::Signed { .. } => Proof::StandardWebhooks,
            SourcePlan::Bearer(_) | SourcePlan::Mcp { .. } => Proof::Unsigned,
        }
    }

    /// Authenticates a delivery: `Ok(auth_subject)` (a bearer token's subject; `None` for a
    /// signed delivery), or why it is refused.
    pub fn authenticate(
        &self,
        delivery: Inbound<'_>,
    ) -> std::result::Result<Option<String>, Unauthenticated> {
        let Inbound { headers, body } = delivery;
        match self {
            SourcePlan::Signed { scheme, secret } => {
                let checked = match scheme {
                    SignatureScheme::Github => signature::verify_github(secret, headers, body),
                    _ => signature::verify_standard_webhooks(
                        secret,
                        headers,
                        body,
                        SystemTime::now(),
                    ),
                };
                checked
                    .map(|()| None)
                    .map_err(|e| Unauthenticated(e.to_string()))
            }
            SourcePlan::Mcp { tool, event } => Err(Unauthenticated(format!(
                "this source fires on the MCP resource updates of event `{event}` of tool `{tool}`; it takes no deliveries"
            ))),
            SourcePlan::Bearer(tokens) => match tokens.find(headers) {
                Ok(subject) => Ok(Some(subject.clone())),
                Err(TokenError::Unknown) => Err(Unauthenticated(
                    "the bearer token is not valid for this source".to_owned(),
                )),
                Err(_) => Err(Unauthenticated(
                    "missing `Authorization: Bearer <token>`".to_owned(),
                )),
            },
        }
    }
}

/// Source `name`, compiled from its access ([`credentials::source`]); what keeps it from
/// resolving is a configuration error (`validate` reports each at its place).
pub(crate) fn source_plan(
    name: &str,
    source: &SourceConfig,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<SourcePlan, EngineError> {
    match credentials::source(name, source, env) {
        Ok(SourceAccess::Signed { scheme, secret }) => Ok(SourcePlan::Signed { scheme, secret }),
        Ok(SourceAccess::Bearer(tokens)) => Ok(SourcePlan::Bearer(BearerTokens::new(
            tokens
                .into_iter()
                .map(|(subject, token)| (subject.to_owned(), token)),
        ))),
        Ok(SourceAccess::Mcp(mcp)) => Ok(SourcePlan::Mcp {
            tool: mcp.tool.clone(),
            event: mcp.event.clone(),
        }),
        Err(errors) => Err(super::credential_errors(errors)),
    }
}

/// A `source.before` assert, compiled.
pub struct TriggerAssert {
    /// Skip unless true.
    pub condition: Option<Expression>,
    /// Must be true.
    pub expr: Expression,
    /// Said (and logged) when it fails.
    pub error_message: Option<String>,
}

/// A trigger manifest, compiled.
pub struct TriggerPlan {
    /// The namespace.
    pub namespace: String,
    /// The name.
    pub name: String,
    /// The agent, `namespace/name`.
    pub agent: String,
    /// The user the tasks run as.
    pub owner: String,
    /// The source name (`source.type`).
    pub source: String,
    /// `source.before`.
    pub before: Vec<TriggerAssert>,
    /// The first message's template over `event` and `now`.
    pub message: Option<Template>,
    /// Values for the agent's parameters.
    pub inputs: Map<String, Value>,
    /// Inactive triggers create no tasks.
    pub enabled: bool,
    /// Fires per rolling hour.
    pub max_per_hour: u32,
    /// Fires one final time when this has passed since it was first loaded.
    pub ttl: Option<Duration>,
}

impl TriggerPlan {
    /// `namespace/name`.
    pub fn id(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// A schedule manifest, compiled.
pub struct SchedulePlan {
    /// The namespace.
    pub namespace: String,
    /// The name.
    pub name: String,
    /// The agent, `namespace/name`.
    pub agent: String,
    /// The user the tasks run as.
    pub owner: String,
    /// When it fires.
    pub timing: Timing,
    /// The task input.
    pub inputs: Map<String, Value>,
    /// Inactive schedules do not tick.
    pub enabled: bool,
    /// Fires per rolling hour.
    pub max_per_hour: u32,
    /// Fires one final time when this has passed since it was first loaded.
    pub ttl: Option<Duration>,
    /// The manifest (for the API).
    pub manifest: Schedule,
}

impl SchedulePlan {
    /// `namespace/name`, also its `schedule_id`.
    pub fn id(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

fn agent_id(namespace: &str, agent: &str) -> String {
    if agent.contains('/') {
        agent.to_owned()
    } else {
        format!("{namespace}/{agent}")
    }
}

fn max_per_hour(
    throttle: Option<&agentmesh_manifest::model::trigger::Throttle>,
    host: &HostConfig,
) -> u32 {
    throttle.map_or_else(
        || {
            host.policy
                .trigger_max_per_hour
                .unwrap_or(DEFAULT_TRIGGER_MAX_PER_HOUR)
        },
        |t| t.max_per_hour,
    )
}

/// Compiles a trigger manifest. Only `assert` steps run in `source.before` (the page names no
/// other); any other step is a configuration error rather than silently ignored.
pub(crate) fn trigger_plan(t: &Trigger, host: &HostConfig) -> Result<TriggerPlan, EngineError> {
    let mut before = Vec::new();
    for step in t.source.before.iter().flatten() {
        let Some(expr) = &step.assert_expr else {
            return Err(EngineError::Config(format!(
                "trigger `{}/{}`: `source.before` takes only `assert` steps",
                t.namespace, t.name
            )));
        };
        before.push(TriggerAssert {
            condition: step.condition.as_deref().map(compile).transpose()?,
            expr: compile(expr)?,
            error_message: step.error_message.clone(),
        });
    }
    Ok(TriggerPlan {
        namespace: t.namespace.clone(),
        name: t.name.clone(),
        agent: agent_id(&t.namespace, &t.agent),
        owner: t.owner.clone(),
        source: t.source.source_type.clone(),
        before,
        message: t.message.as_deref().map(template).transpose()?,
        inputs: t
            .inputs
            .iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        enabled: t.enabled,
        max_per_hour: max_per_hour(t.throttle.as_ref(), host),
        ttl: t.ttl.map(|d| d.0),
    })
}

/// Compiles a schedule manifest.
pub(crate) fn schedule_plan(s: &Schedule, host: &HostConfig) -> Result<SchedulePlan, EngineError> {
    let timing = Timing::from_parts(
        s.cron.as_deref(),
        s.timezone.as_deref(),
        s.interval.map(|d| d.0),
        s.at.as_deref(),
    )
    .map_err(|e| EngineError::Config(format!("schedule `{}/{}`: {e}", s.namespace, s.name)))?;
    Ok(SchedulePlan {
        namespace: s.namespace.clone(),
        name: s.name.clone(),
        agent: agent_id(&s.namespace, &s.agent),
        owner: s.owner.clone(),
        timing,
        inputs: s
            .inputs
            .iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        enabled: s.enabled,
        max_per_hour: max_per_hour(s.throttle.as_ref(), host),
        ttl: s.ttl.map(|d| d.0),
        manifest: s.clone(),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use agentmesh_model::delivery::Headers;

    use super::*;

    fn bearer_source(tokens: &[(&str, &str)]) -> SourcePlan {
        SourcePlan::Bearer(BearerTokens::new(
            tokens
                .iter()
                .map(|(subject, token)| ((*subject).to_owned(), *token)),
        ))
    }

    fn auth(value: &str) -> Headers {
        [("Authorization", value)].into_iter().collect()
    }

    fn authenticate(
        src: &SourcePlan,
        headers: &Headers,
    ) -> Result<Option<String>, Unauthenticated> {
        src.authenticate(Inbound {
            headers,
            body: b"{}",
        })
    }

    #[test]
    fn bearer_source_names_the_subject_of_the_matching_token() {
        let src = bearer_source(&[("svc:a", "token-a"), ("svc:b", "token-b")]);
        assert_eq!(
            authenticate(&src, &auth("Bearer token-b")).unwrap(),
            Some("svc:b".to_owned())
        );
    }

    #[test]
    fn bearer_source_refuses_a_wrong_or_missing_token() {
        let src = bearer_source(&[("svc:a", "token-a")]);
        assert!(authenticate(&src, &auth("Bearer token-")).is_err());
        assert!(authenticate(&src, &auth("Basic token-a")).is_err());
        assert!(authenticate(&src, &Headers::default()).is_err());
    }
}
