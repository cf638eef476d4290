//! The host config's auth providers, compiled: credentials read from the environment once,
//! when the plan is built.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use agentmesh_manifest::model::host::{AuthKind, AuthProvider, HostConfig};
use serde_json::Value;

use super::resolve_env;
use crate::EngineError;

/// How long a token request may take when the provider does not say.
pub const DEFAULT_TOKEN_TIMEOUT: Duration = Duration::from_secs(10);

/// An auth provider, ready to give header values (no `Debug`: it holds credentials).
pub enum AuthPlan {
    /// A fixed token: the header value is `Bearer <token>`.
    Bearer {
        /// The token.
        token: String,
    },
    /// The OAuth 2.0 client-credentials grant: a token fetched from `token_url`, cached until
    /// it expires.
    ClientCredentials {
        /// The token endpoint.
        token_url: String,
        /// The client id.
        client_id: String,
        /// The client secret.
        client_secret: String,
        /// The scopes asked for (space-separated in the request; none: left out).
        scopes: Vec<String>,
        /// How long a token request may take.
        timeout: Duration,
    },
}

/// Every provider of `host`, by name. A credential that is missing or not a string is a
/// configuration error naming the provider (`validate` reports it first, with its place).
pub(crate) fn auth_plans(
    host: &HostConfig,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<HashMap<String, Arc<AuthPlan>>, EngineError> {
    host.auth
        .iter()
        .map(|(name, p)| Ok((name.clone(), Arc::new(auth_plan(name, p, env)?))))
        .collect()
}

fn auth_plan(
    name: &str,
    p: &AuthProvider,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<AuthPlan, EngineError> {
    let text = |field: &str, v: &Option<_>| -> Result<String, EngineError> {
        let missing = || EngineError::Config(format!("auth provider `{name}` needs `{field}`"));
        match resolve_env(v.as_ref().ok_or_else(missing)?, env)? {
            Value::String(s) if !s.is_empty() => Ok(s),
            _ => Err(EngineError::Config(format!(
                "auth provider `{name}`: `{field}` must be a non-empty string"
            ))),
        }
    };
    Ok(match p.kind {
        AuthKind::Bearer => AuthPlan::Bearer {
            token: text("token", &p.token)?,
        },
        AuthKind::OAuth2ClientCredentials => AuthPlan::ClientCredentials {
            token_url: p.token_url.clone().ok_or_else(|| {
                EngineError::Config(format!("auth provider `{name}` needs `token_url`"))
            })?,
            client_id: text("client_id", &p.client_id)?,
            client_secret: text("client_secret", &p.client_secret)?,
            scopes: p.scopes.clone().unwrap_or_default(),
            timeout: p.timeout.map_or(DEFAULT_TOKEN_TIMEOUT, |d| d.0),
        },
    })
}

/// The credentials of every provider that are secrets: tokens, client ids and secrets (given
/// literally; those read from `{env: …}` are secrets already).
pub(crate) fn secret_values(plans: &HashMap<String, Arc<AuthPlan>>) -> Vec<String> {
    let mut out = Vec::new();
    for plan in plans.values() {
        match &**plan {
            AuthPlan::Bearer { token } => out.push(token.clone()),
            AuthPlan::ClientCredentials {
                client_id,
                client_secret,
                ..
            } => {
                out.push(client_id.clone());
                out.push(client_secret.clone());
            }
        }
    }
    out
}
