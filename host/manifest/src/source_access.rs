//! How a host source lets deliveries in, resolved once: a signature checked against a secret
//! (`github`, `standard-webhooks`), bearer tokens each read from a variable (`bearer`), or no
//! deliveries at all (an `mcp` source fires on a tool's MCP resource updates). The checker
//! reports what does not resolve at its place in the host config; the engine's plan compiles
//! what does.

use serde_json::Value;

use crate::model::common::EnvValue;
use crate::model::host::{McpSource, SignatureScheme, SourceConfig};

/// How a source lets deliveries in.
#[derive(Debug, PartialEq, Eq)]
pub enum Access<'a> {
    /// Deliveries signed under `scheme` (`github` or `standard-webhooks`) with `secret`.
    Signed {
        /// The scheme.
        scheme: SignatureScheme,
        /// The secret, read (never empty).
        secret: String,
    },
    /// Deliveries that bear one of these tokens, each with the subject it is recorded as:
    /// `(subject, token)`, tokens read (never empty).
    Bearer(Vec<(&'a str, String)>),
    /// No deliveries: the source fires on the MCP resource updates of a tool's event.
    Mcp(&'a McpSource),
}

/// What keeps a source from resolving, and where in its entry.
#[derive(Debug, PartialEq, Eq)]
pub struct SourceError {
    /// Where.
    pub place: Place,
    /// What, naming the source.
    pub message: String,
}

/// A place in a source's entry (`sources.NAME`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// The entry itself.
    Entry,
    /// The key of a field that does not belong to this kind of source (`secret`, `tokens`).
    Key(&'static str),
    /// The value of `secret`.
    Secret,
    /// The variable `secret: {env: …}` names.
    SecretVariable,
    /// The variable token `i`'s `env` names.
    TokenVariable(usize),
}

/// Source `name`'s access, its variables read with `env`; or everything that keeps it from
/// resolving, in the order of its entry.
pub fn resolve<'a>(
    name: &str,
    source: &'a SourceConfig,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Access<'a>, Vec<SourceError>> {
    let mut errors = Vec::new();
    let mut error = |place, message: String| errors.push(SourceError { place, message });
    let access = match (&source.mcp, source.signature) {
        (Some(mcp), _) => {
            if source.signature.is_some() || source.secret.is_some() || !source.tokens.is_empty() {
                error(
                    Place::Entry,
                    format!(
                        "source `{name}`: an `mcp` source takes no deliveries, so no `signature`, `secret` or `tokens`"
                    ),
                );
            }
            Some(Access::Mcp(mcp))
        }
        (None, None) => {
            error(
                Place::Entry,
                format!(
                    "source `{name}` needs a `signature` (github, standard-webhooks or bearer), or `mcp` for MCP resource updates"
                ),
            );
            None
        }
        (None, Some(SignatureScheme::Bearer)) => {
            if source.secret.is_some() {
                error(
                    Place::Key("secret"),
                    format!(
                        "source `{name}` takes bearer `tokens`, not a `secret` (that is a signed source's)"
                    ),
                );
            }
            if source.tokens.is_empty() {
                error(
                    Place::Entry,
                    format!(
                        "source `{name}` accepts bearer tokens but names none, and every delivery would be refused; add `tokens: [{{subject: …, env: …}}]`"
                    ),
                );
            }
            let mut tokens = Vec::new();
            for (i, token) in source.tokens.iter().enumerate() {
                let said = format!(
                    "source `{name}`, token `{}`: environment variable `{}`",
                    token.subject, token.env
                );
                match env(&token.env) {
                    None => error(Place::TokenVariable(i), format!("{said} is not set")),
                    Some(value) if value.is_empty() => {
                        error(Place::TokenVariable(i), format!("{said} is empty"));
                    }
                    Some(value) => tokens.push((token.subject.as_str(), value)),
                }
            }
            Some(Access::Bearer(tokens))
        }
        (None, Some(scheme)) => {
            if !source.tokens.is_empty() {
                error(
                    Place::Key("tokens"),
                    format!(
                        "source `{name}` is signed: it checks a `secret`, not `tokens` (those are a `bearer` source's)"
                    ),
                );
            }
            let secret = match &source.secret {
                None => {
                    error(
                        Place::Entry,
                        format!(
                            "source `{name}` is signed but has no `secret` (e.g. `secret: {{env: WEBHOOK_SECRET}}`)"
                        ),
                    );
                    None
                }
                Some(EnvValue::Literal(Value::String(text))) => Some(text.clone()),
                Some(EnvValue::Literal(other)) => Some(other.to_string()),
                Some(EnvValue::Env { env: var }) => {
                    let read = env(var);
                    if read.is_none() {
                        error(
                            Place::SecretVariable,
                            format!(
                                "source `{name}`, secret: environment variable `{var}` is not set"
                            ),
                        );
                    }
                    read
                }
            };
            if secret.as_ref().is_some_and(String::is_empty) {
                error(
                    Place::Secret,
                    format!(
                        "source `{name}`: the secret is empty, and every delivery would be refused"
                    ),
                );
            }
            secret.map(|secret| Access::Signed { scheme, secret })
        }
    };
    match access {
        Some(access) if errors.is_empty() => Ok(access),
        _ => Err(errors),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::{Access, Place, SourceError, resolve};
    use crate::model::host::{SignatureScheme, SourceConfig};

    fn source(json: &str) -> SourceConfig {
        serde_json::from_str(json).unwrap_or_else(|e| panic!("{json}: {e}"))
    }

    fn env(name: &str) -> Option<String> {
        match name {
            "SET" => Some("s3cret".into()),
            "EMPTY" => Some(String::new()),
            _ => None,
        }
    }

    /// Where each error of the source `json` is.
    fn places(json: &str) -> Vec<Place> {
        let source = source(json);
        let errors = resolve("s", &source, &env).expect_err(json);
        errors.into_iter().map(|e| e.place).collect()
    }

    #[test]
    fn a_source_resolves_to_how_it_lets_deliveries_in() {
        let signed = source(r#"{"signature": "github", "secret": {"env": "SET"}}"#);
        assert_eq!(
            resolve("s", &signed, &env),
            Ok(Access::Signed {
                scheme: SignatureScheme::Github,
                secret: "s3cret".into()
            })
        );
        let literal = source(r#"{"signature": "standard-webhooks", "secret": 42}"#);
        assert_eq!(
            resolve("s", &literal, &env),
            Ok(Access::Signed {
                scheme: SignatureScheme::StandardWebhooks,
                secret: "42".into()
            })
        );
        let bearer =
            source(r#"{"signature": "bearer", "tokens": [{"subject": "ops", "env": "SET"}]}"#);
        assert_eq!(
            resolve("s", &bearer, &env),
            Ok(Access::Bearer(vec![("ops", "s3cret".into())]))
        );
        let mcp = source(r#"{"mcp": {"tool": "lab/srv", "event": "changed"}}"#);
        assert_eq!(
            resolve("s", &mcp, &env),
            Ok(Access::Mcp(mcp.mcp.as_ref().unwrap()))
        );
    }

    #[test]
    fn what_keeps_a_source_from_resolving_is_each_said_at_its_place() {
        assert_eq!(places(r#"{"secret": {"env": "SET"}}"#), [Place::Entry]);
        assert_eq!(places(r#"{"signature": "github"}"#), [Place::Entry]);
        assert_eq!(
            places(
                r#"{"signature": "github", "secret": {"env": "UNSET"}, "tokens": [{"subject": "a", "env": "SET"}]}"#
            ),
            [Place::Key("tokens"), Place::SecretVariable]
        );
        assert_eq!(
            places(r#"{"signature": "github", "secret": {"env": "EMPTY"}}"#),
            [Place::Secret]
        );
        assert_eq!(
            places(r#"{"signature": "github", "secret": ""}"#),
            [Place::Secret]
        );
        assert_eq!(
            places(r#"{"signature": "bearer", "secret": "x"}"#),
            [Place::Key("secret"), Place::Entry]
        );
        assert_eq!(
            places(
                r#"{"signature": "bearer", "tokens": [{"subject": "a", "env": "SET"}, {"subject": "b", "env": "UNSET"}, {"subject": "c", "env": "EMPTY"}]}"#
            ),
            [Place::TokenVariable(1), Place::TokenVariable(2)]
        );
        assert_eq!(
            places(r#"{"signature": "github", "mcp": {"tool": "lab/srv", "event": "changed"}}"#),
            [Place::Entry]
        );
    }

    #[test]
    fn a_message_names_the_source_and_what_to_set() {
        let unset = source(
            r#"{"signature": "bearer", "tokens": [{"subject": "ops", "env": "OPS_TOKEN"}]}"#,
        );
        assert_eq!(
            resolve("ci", &unset, &env),
            Err(vec![SourceError {
                place: Place::TokenVariable(0),
                message: "source `ci`, token `ops`: environment variable `OPS_TOKEN` is not set"
                    .into()
            }])
        );
    }
}
