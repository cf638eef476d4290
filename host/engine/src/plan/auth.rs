//! The host config's auth providers, compiled: credentials read from the environment once,
//! when the plan is built.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use agentmesh_manifest::credentials::{self, AuthCredentials};
use agentmesh_manifest::model::host::{AuthProvider, HostConfig};

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

/// Every provider of `host`, by name, compiled from its credentials
/// ([`credentials::auth_provider`]); what keeps one from resolving is a configuration error
/// (`validate` reports each at its place).
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
    match credentials::auth_provider(name, p, env) {
        Ok(AuthCredentials::Bearer { token }) => Ok(AuthPlan::Bearer { token }),
        Ok(AuthCredentials::ClientCredentials {
            token_url,
            client_id,
            client_secret,
        }) => Ok(AuthPlan::ClientCredentials {
            token_url: token_url.to_owned(),
            client_id,
            client_secret,
            scopes: p.scopes.clone().unwrap_or_default(),
            timeout: p.timeout.map_or(DEFAULT_TOKEN_TIMEOUT, |d| d.0),
        }),
        Err(errors) => Err(super::credential_errors(errors)),
    }
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
