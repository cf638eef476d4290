//! What the host config's sources, API tokens and auth providers hold to prove who is who,
//! resolved once:
//!
//! - a source lets deliveries in by a signature checked against a secret (`github`,
//!   `standard-webhooks`), by bearer tokens each read from a variable (`bearer`), or takes no
//!   deliveries at all (an `mcp` source fires on a tool's MCP resource updates): [`source`];
//! - an API token (`api_tokens`) is read from its variable: [`api_tokens`];
//! - an auth provider gives requests a fixed token (`bearer`) or fetches one with the OAuth 2.0
//!   client-credentials grant: [`auth_provider`].
//!
//! The checker reports what does not resolve at its place in the host config; the engine's
//! plan compiles what does. What these types hold is secret: they implement no `Debug`.

use serde_json::Value;

use crate::model::common::EnvValue;
use crate::model::host::{
    ApiToken, AuthKind, AuthProvider, HostConfig, McpSource, SignatureScheme, SourceConfig,
};

/// How a source lets deliveries in.
pub enum SourceAccess<'a> {
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

/// What an auth provider gives requests.
pub enum AuthCredentials<'a> {
    /// A fixed token (never empty).
    Bearer {
        /// The token.
        token: String,
    },
    /// The OAuth 2.0 client-credentials grant (RFC 6749 §4.4).
    ClientCredentials {
        /// The token endpoint, an http(s) URL.
        token_url: &'a str,
        /// The client id (never empty).
        client_id: String,
        /// The client secret (never empty).
        client_secret: String,
    },
}

/// What keeps an entry (`sources.NAME`, `api_tokens[i]`, `auth.NAME`) from resolving, and where
/// in it.
#[derive(Debug, PartialEq, Eq)]
pub struct CredentialError {
    /// Where.
    pub place: Place,
    /// What, naming the entry.
    pub message: String,
}

/// A place in an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// The entry itself (a field it needs is missing).
    Entry,
    /// The key of a field that does not belong to this kind of entry.
    Key(&'static str),
    /// The value of a field.
    Value(&'static str),
    /// The variable a field's `{env: …}` names.
    Variable(&'static str),
    /// The variable item `i` of a list names (`LIST[i].env`: a bearer source's `tokens`, the
    /// host config's `api_tokens`).
    ListVariable(&'static str, usize),
}

/// Collects [`CredentialError`]s.
#[derive(Default)]
struct Errors(Vec<CredentialError>);

impl Errors {
    fn add(&mut self, place: Place, message: String) {
        self.0.push(CredentialError { place, message });
    }

    /// The token variable `var` holds (`whose` it is, at `place`), unless it is not set or
    /// is empty: then that is added.
    fn token(
        &mut self,
        place: Place,
        whose: &str,
        var: &str,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Option<String> {
        let problem = match env(var) {
            Some(value) if !value.is_empty() => return Some(value),
            Some(_) => "is empty",
            None => "is not set",
        };
        self.add(
            place,
            format!("{whose}: environment variable `{var}` {problem}"),
        );
        None
    }

    /// `value` if nothing was added, else what was.
    fn or<T>(self, value: Option<T>) -> Result<T, Vec<CredentialError>> {
        match value {
            Some(value) if self.0.is_empty() => Ok(value),
            _ => Err(self.0),
        }
    }
}

/// Source `name`'s access, its variables read with `env`; or everything that keeps it from
/// resolving, in the order of its entry.
pub fn source<'a>(
    name: &str,
    source: &'a SourceConfig,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<SourceAccess<'a>, Vec<CredentialError>> {
    let mut errors = Errors::default();
    let access = match (&source.mcp, source.signature) {
        (Some(mcp), _) => {
            if source.signature.is_some() || source.secret.is_some() || !source.tokens.is_empty() {
                errors.add(
                    Place::Entry,
                    format!("source `{name}`: an `mcp` source takes no deliveries, so no `signature`, `secret` or `tokens`"),
                );
            }
            Some(SourceAccess::Mcp(mcp))
        }
        (None, None) => {
            errors.add(
                Place::Entry,
                format!("source `{name}` needs a `signature` (github, standard-webhooks or bearer), or `mcp` for MCP resource updates"),
            );
            None
        }
        (None, Some(SignatureScheme::Bearer)) => {
            if source.secret.is_some() {
                errors.add(
                    Place::Key("secret"),
                    format!("source `{name}` takes bearer `tokens`, not a `secret` (that is a signed source's)"),
                );
            }
            if source.tokens.is_empty() {
                errors.add(
                    Place::Entry,
                    format!("source `{name}` accepts bearer tokens but names none, and every delivery would be refused; add `tokens: [{{subject: …, env: …}}]`"),
                );
            }
            let mut tokens = Vec::new();
            for (i, token) in source.tokens.iter().enumerate() {
                let whose = format!("source `{name}`, token `{}`", token.subject);
                let place = Place::ListVariable("tokens", i);
                if let Some(value) = errors.token(place, &whose, &token.env, env) {
                    tokens.push((token.subject.as_str(), value));
                }
            }
            Some(SourceAccess::Bearer(tokens))
        }
        (None, Some(scheme)) => {
            if !source.tokens.is_empty() {
                errors.add(
                    Place::Key("tokens"),
                    format!("source `{name}` is signed: it checks a `secret`, not `tokens` (those are a `bearer` source's)"),
                );
            }
            let secret = match &source.secret {
                None => {
                    errors.add(
                        Place::Entry,
                        format!("source `{name}` is signed but has no `secret` (e.g. `secret: {{env: WEBHOOK_SECRET}}`)"),
                    );
                    None
                }
                Some(value) => read(value, env)
                    .map_err(|var| {
                        errors.add(
                            Place::Variable("secret"),
                            format!(
                                "source `{name}`, secret: environment variable `{var}` is not set"
                            ),
                        );
                    })
                    .ok()
                    .map(|value| match value {
                        Value::String(text) => text,
                        other => other.to_string(),
                    }),
            };
            if secret.as_ref().is_some_and(String::is_empty) {
                errors.add(
                    Place::Value("secret"),
                    format!(
                        "source `{name}`: the secret is empty, and every delivery would be refused"
                    ),
                );
            }
            secret.map(|secret| SourceAccess::Signed { scheme, secret })
        }
    };
    errors.or(access)
}

/// The host config's API tokens, each read from its variable with `env`, beside its entry; or
/// every token whose variable is not set or is empty (no caller could present an empty token).
pub fn api_tokens<'a>(
    host: &'a HostConfig,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<(String, &'a ApiToken)>, Vec<CredentialError>> {
    let mut errors = Errors::default();
    let mut tokens = Vec::new();
    for (i, token) in host.api_tokens.iter().enumerate() {
        let whose = format!("api token `{}`", token.subject);
        let place = Place::ListVariable("api_tokens", i);
        if let Some(value) = errors.token(place, &whose, &token.env, env) {
            tokens.push((value, token));
        }
    }
    errors.or(Some(tokens))
}

/// The fields of an auth provider, and the type each belongs to.
const AUTH_FIELDS: [(&str, AuthKind); 6] = [
    ("token", AuthKind::Bearer),
    ("token_url", AuthKind::OAuth2ClientCredentials),
    ("client_id", AuthKind::OAuth2ClientCredentials),
    ("client_secret", AuthKind::OAuth2ClientCredentials),
    ("scopes", AuthKind::OAuth2ClientCredentials),
    ("timeout", AuthKind::OAuth2ClientCredentials),
];

/// Auth provider `name`'s credentials, its variables read with `env`; or everything that
/// keeps it from resolving: a field its type needs that is missing or not a non-empty string,
/// a field of the other type, a token URL that is not http(s).
pub fn auth_provider<'a>(
    name: &str,
    provider: &'a AuthProvider,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<AuthCredentials<'a>, Vec<CredentialError>> {
    let mut errors = Errors::default();
    let kind = match provider.kind {
        AuthKind::Bearer => "bearer",
        AuthKind::OAuth2ClientCredentials => "oauth2_client_credentials",
    };
    for (field, belongs) in AUTH_FIELDS {
        if belongs != provider.kind && given(provider, field) {
            errors.add(
                Place::Key(field),
                format!("auth provider `{name}`: `{field}` is not a field of type `{kind}`"),
            );
        }
    }
    let text = |errors: &mut Errors, field: &'static str, value: &Option<EnvValue>| {
        let Some(value) = value else {
            errors.add(
                Place::Entry,
                format!("auth provider `{name}` of type `{kind}` needs `{field}`"),
            );
            return None;
        };
        match read(value, env) {
            Ok(Value::String(text)) if !text.is_empty() => Some(text),
            Ok(_) => {
                errors.add(
                    Place::Value(field),
                    format!("auth provider `{name}`: `{field}` must be a non-empty string"),
                );
                None
            }
            Err(var) => {
                errors.add(
                    Place::Variable(field),
                    format!(
                        "auth provider `{name}`, `{field}`: environment variable `{var}` is not set"
                    ),
                );
                None
            }
        }
    };
    let credentials = match provider.kind {
        AuthKind::Bearer => text(&mut errors, "token", &provider.token)
            .map(|token| AuthCredentials::Bearer { token }),
        AuthKind::OAuth2ClientCredentials => {
            let token_url = match provider.token_url.as_deref() {
                None => {
                    errors.add(
                        Place::Entry,
                        format!("auth provider `{name}` of type `{kind}` needs `token_url`"),
                    );
                    None
                }
                Some(url) if !(url.starts_with("http://") || url.starts_with("https://")) => {
                    errors.add(
                        Place::Value("token_url"),
                        format!("auth provider `{name}`: `token_url` must be an http:// or https:// URL, found `{url}`"),
                    );
                    None
                }
                Some(url) => Some(url),
            };
            let client_id = text(&mut errors, "client_id", &provider.client_id);
            let client_secret = text(&mut errors, "client_secret", &provider.client_secret);
            match (token_url, client_id, client_secret) {
                (Some(token_url), Some(client_id), Some(client_secret)) => {
                    Some(AuthCredentials::ClientCredentials {
                        token_url,
                        client_id,
                        client_secret,
                    })
                }
                _ => None,
            }
        }
    };
    errors.or(credentials)
}

/// Whether `field` of `p` is given.
fn given(p: &AuthProvider, field: &str) -> bool {
    match field {
        "token" => p.token.is_some(),
        "token_url" => p.token_url.is_some(),
        "client_id" => p.client_id.is_some(),
        "client_secret" => p.client_secret.is_some(),
        "scopes" => p.scopes.is_some(),
        _ => p.timeout.is_some(),
    }
}

/// `value`, or the value of the variable it names; `Err` names a variable that is not set.
fn read(value: &EnvValue, env: &dyn Fn(&str) -> Option<String>) -> Result<Value, String> {
    match value {
        EnvValue::Literal(v) => Ok(v.clone()),
        EnvValue::Env { env: var } => env(var).map(Value::String).ok_or_else(|| var.clone()),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::{
        AuthCredentials, CredentialError, Place, SourceAccess, api_tokens, auth_provider, source,
    };
    use crate::model::host::{AuthProvider, HostConfig, SignatureScheme, SourceConfig};

    fn parse<T: serde::de::DeserializeOwned>(json: &str) -> T {
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
    fn source_places(json: &str) -> Vec<Place> {
        let config: SourceConfig = parse(json);
        let Err(errors) = source("s", &config, &env) else {
            panic!("{json} resolves");
        };
        errors.into_iter().map(|e| e.place).collect()
    }

    /// Where each error of the auth provider `json` is.
    fn provider_places(json: &str) -> Vec<Place> {
        let config: AuthProvider = parse(json);
        let Err(errors) = auth_provider("p", &config, &env) else {
            panic!("{json} resolves");
        };
        errors.into_iter().map(|e| e.place).collect()
    }

    #[test]
    fn a_source_resolves_to_how_it_lets_deliveries_in() {
        let signed: SourceConfig = parse(r#"{"signature": "github", "secret": {"env": "SET"}}"#);
        let Ok(SourceAccess::Signed { scheme, secret }) = source("s", &signed, &env) else {
            panic!("a signed source resolves to its scheme and secret");
        };
        assert_eq!(
            (scheme, secret.as_str()),
            (SignatureScheme::Github, "s3cret")
        );
        let literal: SourceConfig = parse(r#"{"signature": "standard-webhooks", "secret": 42}"#);
        let Ok(SourceAccess::Signed { secret, .. }) = source("s", &literal, &env) else {
            panic!("a literal secret is read as text");
        };
        assert_eq!(secret, "42");
        let bearer: SourceConfig =
            parse(r#"{"signature": "bearer", "tokens": [{"subject": "ops", "env": "SET"}]}"#);
        let Ok(SourceAccess::Bearer(tokens)) = source("s", &bearer, &env) else {
            panic!("a bearer source resolves to its tokens");
        };
        assert_eq!(tokens, [("ops", "s3cret".to_owned())]);
        let mcp: SourceConfig = parse(r#"{"mcp": {"tool": "lab/srv", "event": "changed"}}"#);
        let Ok(SourceAccess::Mcp(watched)) = source("s", &mcp, &env) else {
            panic!("an mcp source resolves to its tool's event");
        };
        assert_eq!(Some(watched), mcp.mcp.as_ref());
    }

    #[test]
    fn what_keeps_a_source_from_resolving_is_each_said_at_its_place() {
        assert_eq!(
            source_places(r#"{"secret": {"env": "SET"}}"#),
            [Place::Entry]
        );
        assert_eq!(source_places(r#"{"signature": "github"}"#), [Place::Entry]);
        assert_eq!(
            source_places(
                r#"{"signature": "github", "secret": {"env": "UNSET"}, "tokens": [{"subject": "a", "env": "SET"}]}"#
            ),
            [Place::Key("tokens"), Place::Variable("secret")]
        );
        assert_eq!(
            source_places(r#"{"signature": "github", "secret": {"env": "EMPTY"}}"#),
            [Place::Value("secret")]
        );
        assert_eq!(
            source_places(r#"{"signature": "github", "secret": ""}"#),
            [Place::Value("secret")]
        );
        assert_eq!(
            source_places(r#"{"signature": "bearer", "secret": "x"}"#),
            [Place::Key("secret"), Place::Entry]
        );
        assert_eq!(
            source_places(
                r#"{"signature": "bearer", "tokens": [{"subject": "a", "env": "SET"}, {"subject": "b", "env": "UNSET"}, {"subject": "c", "env": "EMPTY"}]}"#
            ),
            [
                Place::ListVariable("tokens", 1),
                Place::ListVariable("tokens", 2)
            ]
        );
        assert_eq!(
            source_places(
                r#"{"signature": "github", "mcp": {"tool": "lab/srv", "event": "changed"}}"#
            ),
            [Place::Entry]
        );
    }

    #[test]
    fn a_message_names_the_entry_and_what_to_set() {
        let unset: SourceConfig =
            parse(r#"{"signature": "bearer", "tokens": [{"subject": "ops", "env": "OPS_TOKEN"}]}"#);
        let Err(errors) = source("ci", &unset, &env) else {
            panic!("a token whose variable is not set does not resolve");
        };
        assert_eq!(
            errors,
            [CredentialError {
                place: Place::ListVariable("tokens", 0),
                message: "source `ci`, token `ops`: environment variable `OPS_TOKEN` is not set"
                    .into()
            }]
        );
        let unset: AuthProvider = parse(r#"{"type": "bearer", "token": {"env": "CRM_TOKEN"}}"#);
        let Err(errors) = auth_provider("crm", &unset, &env) else {
            panic!("a token whose variable is not set does not resolve");
        };
        assert_eq!(
            errors,
            [CredentialError {
                place: Place::Variable("token"),
                message:
                    "auth provider `crm`, `token`: environment variable `CRM_TOKEN` is not set"
                        .into()
            }]
        );
    }

    #[test]
    fn an_api_token_is_read_from_a_variable_that_holds_one() {
        let host: HostConfig = parse(
            r#"{"kind": "agentmesh/v1/host", "api_tokens": [{"subject": "user:a", "role": "admin", "env": "SET"},
                {"subject": "user:b", "role": "admin", "env": "EMPTY"},
                {"subject": "user:c", "role": "admin", "env": "UNSET"}]}"#,
        );
        let Err(errors) = api_tokens(&host, &env) else {
            panic!("tokens whose variables are empty or not set do not resolve");
        };
        let said: Vec<(Place, &str)> = errors
            .iter()
            .map(|e| (e.place, e.message.as_str()))
            .collect();
        assert_eq!(
            said,
            [
                (
                    Place::ListVariable("api_tokens", 1),
                    "api token `user:b`: environment variable `EMPTY` is empty"
                ),
                (
                    Place::ListVariable("api_tokens", 2),
                    "api token `user:c`: environment variable `UNSET` is not set"
                ),
            ]
        );
        let host: HostConfig = parse(
            r#"{"kind": "agentmesh/v1/host", "api_tokens": [{"subject": "user:a", "role": "admin", "env": "SET"}]}"#,
        );
        let Ok(tokens) = api_tokens(&host, &env) else {
            panic!("a token whose variable holds one resolves");
        };
        let read: Vec<(&str, &str)> = tokens
            .iter()
            .map(|(token, entry)| (token.as_str(), entry.subject.as_str()))
            .collect();
        assert_eq!(read, [("s3cret", "user:a")]);
    }

    #[test]
    fn an_auth_provider_resolves_to_what_it_gives_requests() {
        let bearer: AuthProvider = parse(r#"{"type": "bearer", "token": {"env": "SET"}}"#);
        let Ok(AuthCredentials::Bearer { token }) = auth_provider("p", &bearer, &env) else {
            panic!("a bearer provider resolves to its token");
        };
        assert_eq!(token, "s3cret");
        let grant: AuthProvider = parse(
            r#"{"type": "oauth2_client_credentials", "token_url": "https://id.example.com/token",
                "client_id": "app", "client_secret": {"env": "SET"}, "scopes": ["read"]}"#,
        );
        let Ok(AuthCredentials::ClientCredentials {
            token_url,
            client_id,
            client_secret,
        }) = auth_provider("p", &grant, &env)
        else {
            panic!("a client-credentials provider resolves to its endpoint and client");
        };
        assert_eq!(
            (token_url, client_id.as_str(), client_secret.as_str()),
            ("https://id.example.com/token", "app", "s3cret")
        );
    }

    #[test]
    fn what_keeps_an_auth_provider_from_resolving_is_each_said_at_its_place() {
        assert_eq!(provider_places(r#"{"type": "bearer"}"#), [Place::Entry]);
        assert_eq!(
            provider_places(r#"{"type": "bearer", "token": {"env": "EMPTY"}, "scopes": []}"#),
            [Place::Key("scopes"), Place::Value("token")]
        );
        assert_eq!(
            provider_places(r#"{"type": "bearer", "token": 7}"#),
            [Place::Value("token")]
        );
        assert_eq!(
            provider_places(
                r#"{"type": "oauth2_client_credentials", "token_url": "ftp://id.example.com/token",
                    "client_id": {"env": "UNSET"}, "token": "t"}"#
            ),
            [
                Place::Key("token"),
                Place::Value("token_url"),
                Place::Variable("client_id"),
                Place::Entry
            ]
        );
    }
}
