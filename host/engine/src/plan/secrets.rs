//! The secrets of a plan (CONTRACT §1), collected once when it is built; the engine's
//! `secrets` scrubs every logged event by them.

use std::collections::HashMap;
use std::sync::Arc;

use agentmesh_expr::{Activation, Template};
use agentmesh_manifest::model::common::EnvValue;
use agentmesh_manifest::model::host::HostConfig;
use agentmesh_secrets::Secrets;
use percent_encoding::percent_decode_str;
use serde_json::Value;

use super::openapi::basic_credential;
use super::{HttpPlan, ToolPlan};
use crate::EngineError;

/// The secrets of a configuration: every value the host config reads from `{env: …}` (at any
/// depth, so API and source tokens too), model API keys, source secrets and auth-provider
/// credentials given literally, every tool setting whose schema says `format: password`
/// (configured or default), the signing key of every tool event, the credential of every
/// `openapi` security scheme (and the base64 an `Authorization: Basic` carries of it), and
/// the password of a request URL's user info (and the `Basic` credential sent for it).
pub(crate) fn collect(
    host: &HostConfig,
    tools: &HashMap<String, Arc<ToolPlan>>,
    auth: &HashMap<String, Arc<super::AuthPlan>>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Secrets, EngineError> {
    let mut values = super::auth::secret_values(auth);
    if let Ok(config) = serde_json::to_value(host) {
        env_values(&config, env, &mut values);
    }
    // The scalars the loader replaced by their variables' values.
    values.extend(host.env_reads.iter().filter_map(|name| env(name)));
    let literal = |v: Option<&EnvValue>| match v {
        Some(EnvValue::Literal(value)) => secret_text(value),
        _ => None,
    };
    values.extend(
        host.models
            .values()
            .filter_map(|m| literal(m.api_key.as_ref())),
    );
    values.extend(
        host.sources
            .values()
            .filter_map(|s| literal(s.secret.as_ref())),
    );
    for tool in tools.values() {
        // A webhook's signing key is a secret whatever the setting it comes from says.
        values.extend(tool.events.iter().filter_map(|e| match &e.secret {
            crate::plan::Secret::Key(key) => Some(key.clone()),
            crate::plan::Secret::None | crate::plan::Secret::Unavailable(_) => None,
        }));
        // An `openapi` credential is a secret whatever the setting it comes from says.
        let settings = tool.settings_activation();
        for action in &tool.actions {
            if let crate::plan::Runtime::OpenApi(op) = &action.runtime {
                for credential in &op.security {
                    let Ok(value) = credential.template.render(&settings) else {
                        continue;
                    };
                    if let crate::plan::openapi::CredentialKind::Basic = credential.kind {
                        // What is sent is the base64 of the whole, and shown if echoed.
                        values.push(basic_credential(&value));
                        if let Some((_, password)) = value.split_once(':') {
                            values.push(password.to_owned());
                        }
                    }
                    values.push(value);
                }
            }
            for http in action_requests(&action.runtime) {
                userinfo_credential(&http.url, &settings, &mut values);
            }
        }
        for event in &tool.events {
            if let crate::plan::Via::Poll(poll) = &event.via {
                userinfo_credential(&poll.request.url, &settings, &mut values);
            }
        }
        let Some(schema) = &tool.manifest.settings else {
            continue;
        };
        for (name, property) in &schema.properties {
            if property.is_secret()
                && let Some(value) = tool.settings.get(name).and_then(secret_text)
            {
                values.push(value);
            }
        }
    }
    Secrets::new(values).map_err(|e| EngineError::Config(e.to_string()))
}

/// The HTTP requests an action makes itself (`stateless_http`, `stateful_session`).
fn action_requests(runtime: &crate::plan::Runtime) -> Vec<&HttpPlan> {
    match runtime {
        crate::plan::Runtime::Http(http) => vec![http],
        crate::plan::Runtime::Session(session) => [&session.create, &session.execute]
            .into_iter()
            .chain(session.destroy.as_ref())
            .collect(),
        _ => Vec::new(),
    }
}

/// The password of a request URL's user info, when the URL renders from settings alone
/// (`http://ops:{settings.pw}@host/`), and what the client sends for it: reqwest turns user
/// info into `Authorization: Basic` of the decoded `user:password`.
fn userinfo_credential(url: &Template, settings: &Activation, out: &mut Vec<String>) {
    let Ok(url) = url.render(settings) else {
        return;
    };
    let Ok(url) = reqwest::Url::parse(&url) else {
        return;
    };
    let decoded = |part: &str| percent_decode_str(part).decode_utf8_lossy().into_owned();
    if let Some(password) = url.password().map(decoded) {
        out.push(basic_credential(&format!(
            "{}:{password}",
            decoded(url.username())
        )));
        out.push(password);
    }
}

/// The values of every `env: NAME` in the host config: the `{env: NAME}` form of a scalar and
/// the `env` field of an API or source token both name a variable holding a secret.
fn env_values(config: &Value, env: &dyn Fn(&str) -> Option<String>, out: &mut Vec<String>) {
    match config {
        Value::Object(map) => {
            if let Some(Value::String(name)) = map.get("env")
                && let Some(value) = env(name)
            {
                out.push(value);
            }
            map.values().for_each(|v| env_values(v, env, out));
        }
        Value::Array(items) => items.iter().for_each(|v| env_values(v, env, out)),
        _ => {}
    }
}

/// The text a secret's value shows wherever it is rendered: a string's, or a number's (an
/// unquoted `key: 48151623162342` in YAML is a number, and templates render it as its digits).
fn secret_text(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}
