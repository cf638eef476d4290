//! Bearer-token auth with the spec's roles: `admin` sees and does everything, `agent_user`
//! sees and drives only the tasks it owns, `read_only` reads everything and changes nothing.
//! With no `api_tokens` configured (allowed only on a loopback address) every caller is an
//! anonymous admin.

use axum::http::HeaderMap;
use subtle::ConstantTimeEq;

use crate::error::ApiError;

/// A role of the spec.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Everything.
    Admin,
    /// Own tasks only.
    AgentUser,
    /// Reads only.
    ReadOnly,
}

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

/// The configured tokens.
#[derive(Debug, Clone, Default)]
pub struct Auth {
    tokens: Vec<Token>,
}

impl Auth {
    /// Auth over `tokens` (none: open).
    pub fn new(tokens: Vec<Token>) -> Self {
        Auth { tokens }
    }

    /// Whether tokens are required.
    pub fn enabled(&self) -> bool {
        !self.tokens.is_empty()
    }

    /// The caller of a request.
    pub fn caller(&self, headers: &HeaderMap) -> Result<Caller, ApiError> {
        if self.tokens.is_empty() {
            return Ok(Caller {
                subject: "anonymous".into(),
                role: Role::Admin,
            });
        }
        let presented = bearer(headers)
            .ok_or_else(|| ApiError::unauthorized("missing `Authorization: Bearer <token>`"))?;
        // Compare against every token, in constant time, so timing says nothing about which
        // (or whether any) token is close.
        let mut found = None;
        for t in &self.tokens {
            if bool::from(t.secret.as_bytes().ct_eq(presented.as_bytes())) {
                found = Some(t);
            }
        }
        found
            .map(|t| Caller {
                subject: t.subject.clone(),
                role: t.role,
            })
            .ok_or_else(|| ApiError::unauthorized("the bearer token is not valid"))
    }
}

/// The token of an `Authorization: Bearer …` header.
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers
        .get(axum::http::header::AUTHORIZATION)?
        .to_str()
        .ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}
