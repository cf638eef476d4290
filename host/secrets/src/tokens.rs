//! Bearer tokens (`Authorization: Bearer <token>`): the API's tokens and the tokens of
//! `bearer` trigger sources, kept only as SHA-256 digests and compared in constant time.

use agentmesh_model::delivery::{Headers, visible_ascii};
use sha2::{Digest, Sha256};
use subtle::{Choice, ConditionallySelectable, ConstantTimeEq};

/// The header a bearer token comes in, as HTTP spells it.
pub const AUTHORIZATION: &str = "Authorization";

/// Why a request's bearer token names nobody.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// No `Authorization` header was sent.
    #[error("missing Authorization header")]
    Missing,
    /// The header is not `Bearer <token>` in visible ASCII.
    #[error("malformed Authorization header: {0}")]
    Malformed(&'static str),
    /// A token that none of the configured tokens equals.
    #[error("bearer token not recognised")]
    Unknown,
}

/// Bearer tokens, kept only as SHA-256 digests, each with what it stands for (a subject, a
/// caller with a role, …).
#[derive(Clone)]
pub struct BearerTokens<T> {
    entries: Vec<(T, [u8; 32])>,
}

impl<T> Default for BearerTokens<T> {
    fn default() -> Self {
        BearerTokens {
            entries: Vec::new(),
        }
    }
}

impl<T> std::fmt::Debug for BearerTokens<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "BearerTokens({} tokens)", self.entries.len())
    }
}

impl<T> BearerTokens<T> {
    /// Digests `tokens` (`(what it stands for, token)` pairs); the tokens are not kept.
    pub fn new<S: AsRef<str>>(tokens: impl IntoIterator<Item = (T, S)>) -> Self {
        BearerTokens {
            entries: tokens
                .into_iter()
                .map(|(value, token)| (value, Sha256::digest(token.as_ref().as_bytes()).into()))
                .collect(),
        }
    }

    /// Whether there are no tokens.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// What the token in `Authorization: Bearer <token>` stands for. Every entry is compared,
    /// in constant time over the digests, so neither which entry matched nor how long a token
    /// is leaks through timing.
    pub fn find(&self, headers: &Headers) -> Result<&T, TokenError> {
        self.find_authorization(headers.get(AUTHORIZATION))
    }

    /// [`BearerTokens::find`] given the `Authorization` header's value (`None`: not sent).
    pub fn find_authorization(&self, authorization: Option<&[u8]>) -> Result<&T, TokenError> {
        let value = visible_ascii(authorization.ok_or(TokenError::Missing)?)
            .ok_or(TokenError::Malformed("not visible ASCII"))?;
        let presented = value
            .split_once(' ')
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, token)| token.trim())
            .filter(|token| !token.is_empty())
            .ok_or(TokenError::Malformed("expected `Bearer <token>`"))?;
        let presented = Sha256::digest(presented.as_bytes());
        let mut found = Choice::from(0);
        let mut index = 0u64;
        for (i, (_, digest)) in self.entries.iter().enumerate() {
            let hit = digest.as_slice().ct_eq(presented.as_slice());
            index.conditional_assign(&(i as u64), hit);
            found |= hit;
        }
        if !bool::from(found) {
            return Err(TokenError::Unknown);
        }
        self.entries
            .get(index as usize)
            .map(|(value, _)| value)
            .ok_or(TokenError::Unknown)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_token_names_its_subject() {
        let tokens = BearerTokens::new([("ci", "tok-ci"), ("ops", "tok-ops-longer")]);
        let auth = |value: &str| -> Headers { [("authorization", value)].into_iter().collect() };
        assert_eq!(tokens.find(&auth("Bearer tok-ops-longer")), Ok(&"ops"));
        assert_eq!(tokens.find(&auth("bearer tok-ci")), Ok(&"ci"));
        assert_eq!(tokens.find(&auth("Bearer tok-c")), Err(TokenError::Unknown));
        assert!(matches!(
            tokens.find(&auth("Basic dG9rLWNp")),
            Err(TokenError::Malformed(_))
        ));
        assert!(matches!(
            tokens.find(&auth("Bearer ")),
            Err(TokenError::Malformed(_))
        ));
        assert_eq!(tokens.find(&Headers::default()), Err(TokenError::Missing));
        let none = BearerTokens::<&str>::new(Vec::<(&str, &str)>::new());
        assert_eq!(none.find(&auth("Bearer tok-ci")), Err(TokenError::Unknown));
    }
}
