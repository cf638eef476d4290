//! The host config: variables it reads must be set; addresses and models must parse.

use std::net::SocketAddr;

use super::{Checker, I, K, MODEL_REF, Seg, pos_at};
use crate::model::common::EnvValue;

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
    let mut vars: Vec<(Vec<Seg>, &str)> = Vec::new();
    for (i, token) in host.api_tokens.iter().enumerate() {
        vars.push((vec![K("api_tokens"), I(i), K("env")], &token.env));
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
        if let Some(EnvValue::Env { env }) = &source.secret {
            vars.push((vec![K("sources"), K(name), K("secret"), K("env")], env));
        }
        for (i, token) in source.tokens.iter().enumerate() {
            vars.push((
                vec![K("sources"), K(name), K("tokens"), I(i), K("env")],
                &token.env,
            ));
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
