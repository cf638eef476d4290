//! Bearer-token auth with the spec's roles: `admin` sees and does everything, `agent_user`
//! sees and drives only the tasks it owns, `read_only` reads everything and changes nothing.
//! With no `api_tokens` configured (allowed only on a loopback address) every caller is an
//! anonymous admin.

use agentmesh_engine::Decider;
use agentmesh_manifest::credentials;
use agentmesh_manifest::model::host::HostConfig;
use agentmesh_secrets::{BearerTokens, TokenError};
use axum::http::HeaderMap;

use crate::error::ApiError;

/// A role of the spec, as the host config names it.
pub use agentmesh_manifest::model::host::Role;

/// Who is calling.
#[derive(Debug, Clone)]
pub struct Caller {
    /// The token's subject, e.g. `user:ops@example.com`.
    pub subject: String,
    /// Its role.
    pub role: Role,
}

impl Caller {
    /// Whether the caller may see task owned by `owner`.
    pub fn may_see(&self, owner: &str) -> bool {
        self.role != Role::AgentUser || self.subject == owner
    }

    /// Refuses callers that may only read.
    pub fn require_write(&self) -> Result<(), ApiError> {
        if self.role == Role::ReadOnly {
            return Err(ApiError::forbidden(
                "a read_only token cannot change anything",
            ));
        }
        Ok(())
    }

    /// Who the caller is when deciding a review: an admin decides any, others only those
    /// naming them.
    pub fn decider(&self) -> Decider<'_> {
        match self.role {
            Role::Admin => Decider::Admin(&self.subject),
            Role::AgentUser | Role::ReadOnly => Decider::Subject(&self.subject),
        }
    }

    /// Refuses callers that are not admins.
    pub fn require_admin(&self) -> Result<(), ApiError> {
        if self.role != Role::Admin {
            return Err(ApiError::forbidden("this needs an admin token"));
        }
        Ok(())
    }
}

/// A configured token.
#[derive(Clone)]
pub struct Token {
    /// The secret value.
    pub secret: String,
    /// Who it is.
    pub subject: String,
    /// What it may do.
    pub role: Role,
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Token")
            .field("subject", &self.subject)
            .field("role", &self.role)
            .finish_non_exhaustive()
    }
}

/// The configured tokens, kept as digests.
#[derive(Debug, Clone, Default)]
pub struct Auth {
    tokens: BearerTokens<Caller>,
}

impl Auth {
    /// Auth over `tokens` (none: open).
    pub fn new(tokens: Vec<Token>) -> Self {
        Auth {
            tokens: BearerTokens::new(tokens.into_iter().map(|t| {
                let caller = Caller {
                    subject: t.subject,
                    role: t.role,
                };
                (caller, t.secret)
            })),
        }
    }

    /// Whether no token is configured (the API is open: loopback only).
    pub fn is_open(&self) -> bool {
        self.tokens.is_empty()
    }

    /// The caller of a request.
    pub fn caller(&self, headers: &HeaderMap) -> Result<Caller, ApiError> {
        if self.tokens.is_empty() {
            return Ok(Caller {
                subject: "anonymous".into(),
                role: Role::Admin,
            });
        }
        let authorization = headers
            .get(axum::http::header::AUTHORIZATION)
            .map(|v| v.as_bytes());
        match self.tokens.find_authorization(authorization) {
            Ok(caller) => Ok(caller.clone()),
            Err(TokenError::Unknown) => {
                Err(ApiError::unauthorized("the bearer token is not valid"))
            }
            Err(_) => Err(ApiError::unauthorized(
                "missing `Authorization: Bearer <token>`",
            )),
        }
    }
}

/// API tokens whose variables are not set or are empty: the message names each token and its
/// variable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct MissingToken(String);

/// The tokens of `host`'s `api_tokens`, each read from its variable through `env`
/// ([`credentials::api_tokens`]). `Err` names each token whose variable is not set or is empty
/// (`validate` reports each at its place).
pub fn tokens_of(
    host: &HostConfig,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<Token>, MissingToken> {
    match credentials::api_tokens(host, env) {
        Ok(tokens) => Ok(tokens
            .into_iter()
            .map(|(secret, t)| Token {
                secret,
                subject: t.subject.clone(),
                role: t.role,
            })
            .collect()),
        Err(errors) => {
            let said: Vec<String> = errors.into_iter().map(|e| e.message).collect();
            Err(MissingToken(said.join("; ")))
        }
    }
}
