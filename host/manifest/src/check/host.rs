//! The host config: variables it reads must be set; addresses and models must parse; tool
//! settings name settings their tools declare, with values those settings' schemas accept.

use std::net::SocketAddr;

use serde_json::Value;

use super::{Checker, I, K, MODEL_REF, Seg, key_pos, pos_at};
use crate::credentials::{self, CredentialError, Place, SourceAccess};
use crate::load::Source;
use crate::model::common::EnvValue;
use crate::model::host::{HostConfig, McpSource, StoreBackend, StoreConfig};
use crate::suggest::did_you_mean_hint;
use crate::yaml::{Node, Pos};

pub(crate) fn check(c: &mut Checker) {
    let Some(doc) = c.config.host.as_ref() else {
        return;
    };
    let host = &doc.value;
    let src = &doc.source;
    if let Some(listen) = &host.listen
        && listen.parse::<SocketAddr>().is_err()
    {
        c.error(
            src,
            pos_at(&src.node, &[K("listen")]),
            format!("`listen` must be an address such as 127.0.0.1:8080, found `{listen}`"),
        );
    }
    if let Some(model) = &host.default_model {
        let pos = pos_at(&src.node, &[K("default_model")]);
        if let Some(("scripted", name)) = c.split_ref(src, pos, "default_model", model, MODEL_REF) {
            c.scripted_model(src, pos, name);
        }
    }
    if let Some(store) = &host.store {
        store_config(c, src, store);
    }
    tool_settings(c, src, host);
    let mut vars: Vec<(Vec<Seg>, &str)> = Vec::new();
    if let Err(errors) = credentials::api_tokens(host, &|var: &str| c.env_var(var)) {
        unresolved(c, src, &[], errors);
    }
    for (ns, tools) in &host.settings {
        for (tool, keys) in tools {
            for (key, value) in keys {
                if let EnvValue::Env { env } = value {
                    vars.push((vec![K("settings"), K(ns), K(tool), K(key), K("env")], env));
                }
            }
        }
    }
    for (name, source) in &host.sources {
        let env = |var: &str| c.env_var(var);
        let (errors, mcp) = match credentials::source(name, source, &env) {
            Ok(SourceAccess::Mcp(mcp)) => (Vec::new(), Some(mcp)),
            Ok(_) => (Vec::new(), None),
            Err(errors) => (errors, source.mcp.as_ref()),
        };
        unresolved(c, src, &[K("sources"), K(name)], errors);
        if let Some(mcp) = mcp {
            mcp_source(c, src, name, mcp);
        }
    }
    for (name, provider) in &host.auth {
        let env = |var: &str| c.env_var(var);
        if let Err(errors) = credentials::auth_provider(name, provider, &env) {
            unresolved(c, src, &[K("auth"), K(name)], errors);
        }
    }
    for (name, model) in &host.models {
        if let Some(EnvValue::Env { env }) = &model.api_key {
            vars.push((vec![K("models"), K(name), K("api_key"), K("env")], env));
        }
    }
    for (path, var) in vars {
        if c.env_var(var).is_none() {
            c.error(
                src,
                pos_at(&src.node, &path),
                format!("environment variable `{var}` is not set"),
            );
        }
    }
}

/// `settings.NS.TOOL.KEY`: a tool the configuration does not hold is a warning (its bundle may
/// come after its operator's settings, as a setting nobody set is); a key the tool does not
/// declare, which no template can read, is an error, and so is a value its setting's schema
/// refuses, read as the plan reads it ([`crate::model::common::Property::setting`]: text from
/// the environment is JSON where the setting wants a number, a flag, an object or a list); a
/// message never shows a value of a secret (a `format: password` setting, any variable).
fn tool_settings(c: &mut Checker, src: &Source, host: &HostConfig) {
    for (ns, tools) in &host.settings {
        for (name, keys) in tools {
            let at = [K("settings"), K(ns), K(name)];
            let Some(tool) = c
                .config
                .tools
                .iter()
                .find(|t| t.value.namespace == *ns && t.value.name == *name)
            else {
                let ids = c.tool_ids();
                let hint =
                    did_you_mean_hint(&format!("{ns}/{name}"), ids.iter().map(String::as_str));
                c.warning(
                    src,
                    key_pos(&src.node, &at),
                    format!("settings for tool `{ns}/{name}`, which the configuration does not hold{hint}"),
                );
                continue;
            };
            let declared = tool.value.settings.as_ref().map(|s| &s.properties);
            for (key, value) in keys {
                let path = [K("settings"), K(ns), K(name), K(key)];
                let Some(prop) = declared.and_then(|d| d.get(key)) else {
                    let names = declared
                        .into_iter()
                        .flat_map(|d| d.keys().map(String::as_str));
                    let hint = did_you_mean_hint(key, names);
                    c.error(
                        src,
                        key_pos(&src.node, &path),
                        format!("tool `{ns}/{name}` declares no setting `{key}`{hint}"),
                    );
                    continue;
                };
                let password = prop.is_secret();
                let (value, secret) = match value {
                    EnvValue::Literal(v) => (prop.setting(v.clone(), false), password),
                    // Unset is reported below.
                    EnvValue::Env { env } => match c.env_var(env) {
                        Some(text) => (prop.setting(Value::String(text), true), true),
                        None => continue,
                    },
                };
                if let Some(why) = super::schema::refused(prop, &value, secret) {
                    c.error(
                        src,
                        key_pos(&src.node, &path),
                        format!("setting `{key}` of tool `{ns}/{name}`: {why}"),
                    );
                }
            }
        }
    }
}

/// A PostgreSQL store names its database; a sled store takes none of `url`, `pool`, `lease`.
fn store_config(c: &mut Checker, src: &Source, store: &StoreConfig) {
    match store.backend {
        StoreBackend::Postgres => {
            if store.url.is_none() {
                c.error(
                    src,
                    pos_at(&src.node, &[K("store")]),
                    "a `postgres` store needs `url` (e.g. `url: {env: DATABASE_URL}`)",
                );
            }
            if store.pool == Some(0) {
                c.error(
                    src,
                    pos_at(&src.node, &[K("store"), K("pool")]),
                    "`pool` must be at least 1",
                );
            }
            if let Some(lease) = &store.lease
                && lease.0 < std::time::Duration::from_secs(1)
            {
                c.error(
                    src,
                    pos_at(&src.node, &[K("store"), K("lease")]),
                    "`lease` must be at least 1s: a host renews it every third of it",
                );
            }
        }
        StoreBackend::Sled => {
            let given = [
                ("url", store.url.is_some()),
                ("pool", store.pool.is_some()),
                ("lease", store.lease.is_some()),
            ];
            for (key, given) in given {
                if given {
                    c.error(
                        src,
                        pos_at(&src.node, &[K("store"), K(key)]),
                        format!(
                            "`{key}` is for a `postgres` store; a `sled` store lives in `data_dir`"
                        ),
                    );
                }
            }
        }
    }
}

/// How a place is found in a document: [`pos_at`] (a value) or [`key_pos`] (a key).
type Locate = fn(&Node, &[Seg]) -> Pos;

/// Reports what keeps the entry at `entry` (a source, an auth provider; the whole config for
/// its API tokens) from resolving, each error at its place.
fn unresolved(c: &mut Checker, src: &Source, entry: &[Seg], errors: Vec<CredentialError>) {
    for CredentialError { place, message } in errors {
        let (tail, at): (Vec<Seg>, Locate) = match place {
            Place::Entry => (vec![], pos_at),
            Place::Key(key) => (vec![K(key)], key_pos),
            Place::Value(key) => (vec![K(key)], pos_at),
            Place::Variable(key) => (vec![K(key), K("env")], pos_at),
            Place::ListVariable(list, i) => (vec![K(list), I(i), K("env")], pos_at),
        };
        c.error(src, at(&src.node, &[entry, &tail].concat()), message);
    }
}

/// An `mcp` source's event is one an MCP tool receives by subscription.
fn mcp_source(c: &mut Checker, src: &Source, name: &str, mcp: &McpSource) {
    let at = pos_at(&src.node, &[K("sources"), K(name), K("mcp")]);
    let ids = c.tool_ids();
    let found = ids.iter().position(|id| *id == mcp.tool);
    let Some(tool) = found.map(|i| c.config.tools[i].value.clone()) else {
        let hint = did_you_mean_hint(&mcp.tool, ids.iter().map(String::as_str));
        c.error(
            src,
            at,
            format!("source `{name}`: no tool `{}`{hint}", mcp.tool),
        );
        return;
    };
    let watched = tool.events.iter().find(|e| e.name == mcp.event);
    match watched {
        Some(e)
            if tool.mcp.is_some()
                && e.receive
                    .subscription
                    .as_ref()
                    .is_some_and(|s| !s.resources.is_empty()) => {}
        Some(_) => c.error(
            src,
            at,
            format!(
                "source `{name}`: event `{}` of tool `{}` is not received by MCP subscription (`receive.subscription.resources` on a tool with a shared `mcp` block)",
                mcp.event, mcp.tool
            ),
        ),
        None => {
            let hint = did_you_mean_hint(
                &mcp.event,
                tool.events.iter().map(|e| e.name.as_str()),
            );
            c.error(
                src,
                at,
                format!("source `{name}`: tool `{}` has no event `{}`{hint}", mcp.tool, mcp.event),
            );
        }
    }
}
