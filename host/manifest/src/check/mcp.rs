//! `mcp` blocks, without running anything: the transport and the fields it needs, a stdio
//! `command` that exists and is executable, an endpoint that is an `http(s)` URL (or a template
//! over `settings` with the `allowed_hosts` it may render to), origins in `allowed_hosts`, and
//! `url`, `env` values and `headers` whose `{settings.*}` name settings the tool declares.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use agentmesh_expr::Template;

use super::{Checker, I, K, Seg, key_pos, pos_at, scopes};
use crate::load::Source;
use crate::model::Tool;
use crate::model::tool::{Mcp, McpTransport};
use crate::suggest::did_you_mean_hint;
use crate::yaml::Pos;

/// Checks tool `tool`'s shared `mcp` block, then each action's own block and what the two
/// make together.
pub(super) fn check(c: &mut Checker, src: &Source, tool: &Tool) {
    if let Some(shared) = &tool.mcp {
        fields(c, src, tool, &[K("mcp")], shared);
    }
    for (i, action) in tool.actions.iter().enumerate() {
        let Some(own) = action.execute.as_ref().and_then(|e| e.mcp.as_ref()) else {
            continue;
        };
        let path = [K("actions"), I(i), K("execute"), K("mcp")];
        fields(c, src, tool, &path, own);
        let Some(mcp) = tool.execute_of(action).and_then(|e| e.mcp) else {
            continue;
        };
        let at = key_pos(&src.node, &path);
        transport(c, src, at, &format!("action `{}`", action.name), &mcp);
    }
    subscriptions(c, src, tool);
}

/// What `mcp`'s transport needs, and the fields that belong to the other one; `who` says whose
/// block it is in an error.
fn transport(c: &mut Checker, src: &Source, at: Pos, who: &str, mcp: &Mcp) {
    let Some(transport) = mcp.transport else {
        c.error(
            src,
            at,
            format!("{who}: `mcp` needs a `transport`: stdio, sse or http"),
        );
        return;
    };
    let (missing, needs, others, belong) = match transport {
        McpTransport::Stdio => (
            mcp.command.is_none(),
            "an stdio `mcp` server needs a `command`",
            ["url", "headers", "allowed_hosts"],
            "the sse and http transports, not stdio",
        ),
        McpTransport::Sse | McpTransport::Http => (
            mcp.url.is_none(),
            "an sse or http `mcp` server needs a `url`",
            ["command", "args", "env"],
            "the stdio transport, not sse or http",
        ),
    };
    if missing {
        c.error(src, at, format!("{who}: {needs}"));
    }
    for field in others.into_iter().filter(|f| set(mcp, f)) {
        c.error(src, at, format!("{who}: `{field}` is for {belong}"));
    }
    let templated = mcp.url.as_deref().is_some_and(has_holes);
    if transport != McpTransport::Stdio && templated && mcp.allowed_hosts.is_none() {
        c.error(
            src,
            at,
            format!("{who}: a `url` with `{{…}}` holes needs `allowed_hosts`, the origins it may render to"),
        );
    }
}

/// Events received by subscription: on a tool with a shared `mcp` block, the MCP server's
/// resource updates (`resources`, templates over `settings`, and no HTTP requests); otherwise
/// the spec's `subscribe` and `unsubscribe` requests.
fn subscriptions(c: &mut Checker, src: &Source, tool: &Tool) {
    for (i, event) in tool.events.iter().enumerate() {
        let Some(sub) = &event.receive.subscription else {
            continue;
        };
        let path = [K("events"), I(i), K("receive"), K("subscription")];
        let at = key_pos(&src.node, &path);
        let name = &event.name;
        match &tool.mcp {
            Some(shared) => {
                if sub.resources.is_empty() {
                    c.error(
                        src,
                        at,
                        format!("event `{name}`: a subscription on an MCP tool needs `resources`, the URIs of the server's resources to subscribe to"),
                    );
                }
                for (field, present) in [
                    ("subscribe", sub.subscribe.is_some()),
                    ("unsubscribe", sub.unsubscribe.is_some()),
                ] {
                    if present {
                        c.error(
                            src,
                            at,
                            format!("event `{name}`: `{field}` is for an HTTP subscription; on an MCP tool the host subscribes with `resources/subscribe`"),
                        );
                    }
                }
                let mut at_resources = path.to_vec();
                at_resources.push(K("resources"));
                c.templates_in(src, &at_resources, &scopes::MCP);
                for (j, uri) in sub.resources.iter().enumerate() {
                    let mut p = at_resources.clone();
                    p.push(I(j));
                    undeclared_settings(c, src, tool, &p, uri);
                }
                transport(c, src, key_pos(&src.node, &[K("mcp")]), "the tool's shared `mcp` block (the server its events subscribe to)", shared);
            }
            None if !sub.resources.is_empty() => c.error(
                src,
                at,
                format!("event `{name}`: `resources` names resources of the MCP server in the tool's shared `mcp` block, and this tool has none"),
            ),
            None => {
                for (field, present) in [
                    ("subscribe", sub.subscribe.is_some()),
                    ("unsubscribe", sub.unsubscribe.is_some()),
                ] {
                    if !present {
                        c.error(
                            src,
                            at,
                            format!("event `{name}`: an HTTP subscription needs `{field}`"),
                        );
                    }
                }
            }
        }
    }
}

/// Whether `field` of `mcp` is set.
fn set(mcp: &Mcp, field: &str) -> bool {
    match field {
        "command" => mcp.command.is_some(),
        "args" => mcp.args.is_some(),
        "env" => mcp.env.is_some(),
        "url" => mcp.url.is_some(),
        "headers" => mcp.headers.is_some(),
        "allowed_hosts" => mcp.allowed_hosts.is_some(),
        _ => false,
    }
}

/// The fields one block sets, at `path`.
fn fields(c: &mut Checker, src: &Source, tool: &Tool, path: &[Seg], mcp: &Mcp) {
    let at = |key: &'static str| {
        let mut p = path.to_vec();
        p.push(K(key));
        p
    };
    if let Some(command) = &mcp.command
        && let Err(why) = runnable(c, &src.base_dir, command)
    {
        c.error(
            src,
            pos_at(&src.node, &at("command")),
            format!("`mcp` command `{command}` {why}"),
        );
    }
    if let Some(url) = &mcp.url {
        if has_holes(url) {
            c.templates_in(src, &at("url"), &scopes::MCP);
            undeclared_settings(c, src, tool, &at("url"), url);
        } else if let Err(why) = endpoint(url) {
            c.error(
                src,
                pos_at(&src.node, &at("url")),
                format!("`mcp` url `{url}` {why}"),
            );
        }
    }
    allowed_hosts(c, src, &at("allowed_hosts"), mcp.allowed_hosts.as_deref());
    for (key, values) in [("env", &mcp.env), ("headers", &mcp.headers)] {
        let Some(values) = values else { continue };
        c.templates_in(src, &at(key), &scopes::MCP);
        for (name, value) in values {
            let mut p = at(key);
            p.push(K(name));
            undeclared_settings(c, src, tool, &p, value);
        }
    }
}

/// Reports each `settings.X` that template `text` (at `path`) reads and `tool` does not declare.
fn undeclared_settings(c: &mut Checker, src: &Source, tool: &Tool, path: &[Seg], text: &str) {
    for setting in settings_named(text) {
        if declares(tool, &setting) {
            continue;
        }
        let declared: Vec<&str> = tool
            .settings
            .iter()
            .flat_map(|s| s.properties.keys())
            .map(String::as_str)
            .collect();
        let hint = did_you_mean_hint(&setting, declared.iter().copied());
        c.error(
            src,
            pos_at(&src.node, path),
            format!(
                "`settings.{setting}` is not a setting of tool `{}/{}`{hint}",
                tool.namespace, tool.name
            ),
        );
    }
}

/// Whether template `text` has `{…}` holes (a text that does not parse counts as having them:
/// the template check reports it).
fn has_holes(text: &str) -> bool {
    Template::parse(text).map_or(true, |t| !t.is_literal())
}

/// Whether `command` names a program that can run (see [`mcp_program`]), with the host's
/// `PATH` as the checker sees it.
fn runnable(c: &Checker, base_dir: &Path, command: &str) -> Result<(), String> {
    let path = c.env_var("PATH").unwrap_or_default();
    mcp_program(command, base_dir, OsStr::new(&path)).map(drop)
}

/// The program an stdio `mcp` `command` names: a path (with a `/`, relative to `base_dir`) to
/// an executable file, or the first executable of that name in the directories of `path` (a
/// `PATH` value). The error completes "`command` …".
pub fn mcp_program(command: &str, base_dir: &Path, path: &OsStr) -> Result<PathBuf, String> {
    if command.is_empty() {
        return Err("is empty".into());
    }
    if command.contains('/') {
        let path = base_dir.join(command);
        return match executable(&path) {
            true => Ok(path),
            false if path.exists() => Err("is not an executable file".into()),
            false => Err("does not exist (a path is relative to the manifest)".into()),
        };
    }
    std::env::split_paths(path)
        .map(|dir| dir.join(command))
        .find(|p| executable(p))
        .ok_or_else(|| "is not an executable in the host's PATH".into())
}

fn executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Whether `url` is an absolute `http` or `https` URL with a host.
fn endpoint(url: &str) -> Result<(), String> {
    let not_absolute = || "is not an absolute http or https URL".to_owned();
    let uri: http::Uri = url.parse().map_err(|_| not_absolute())?;
    match (uri.scheme_str(), uri.host()) {
        (Some("http" | "https"), Some(host)) if !host.is_empty() => Ok(()),
        (Some("http" | "https"), _) => Err("has no host".into()),
        _ => Err(not_absolute()),
    }
}

/// Checks that each entry of the `allowed_hosts` list at `path` (an `mcp` or `wasm` block's)
/// is an origin.
pub(super) fn allowed_hosts(c: &mut Checker, src: &Source, path: &[Seg], hosts: Option<&[String]>) {
    for (i, host) in hosts.into_iter().flatten().enumerate() {
        if let Err(why) = origin(host) {
            let mut p = path.to_vec();
            p.push(I(i));
            c.error(
                src,
                pos_at(&src.node, &p),
                format!("`{host}` is not an origin (scheme://host[:port]): {why}"),
            );
        }
    }
}

/// Whether `text` is an origin, `http(s)://host[:port]` (a trailing `/` is accepted; a path,
/// query, user info or `*` is not).
fn origin(text: &str) -> Result<(), String> {
    let uri: http::Uri = text
        .parse()
        .map_err(|_| "it does not parse as a URL".to_owned())?;
    let bare = uri.path() == "/" || uri.path().is_empty();
    match (uri.scheme_str(), uri.authority()) {
        (Some("http" | "https"), Some(a))
            if !a.host().is_empty() && !a.as_str().contains(['@', '*']) =>
        {
            match bare && uri.query().is_none() {
                true => Ok(()),
                false => Err("only scheme, host and port are allowed".into()),
            }
        }
        (Some("http" | "https"), _) => Err("it has no host".into()),
        _ => Err("the scheme must be http or https".into()),
    }
}

/// The names `X` of `settings.X` that template `text`'s holes read (none when it does not
/// parse: that error is reported on its own).
fn settings_named(text: &str) -> Vec<String> {
    let Ok(template) = Template::parse(text) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (_, expr) in template.expressions() {
        let src = expr.source();
        for (at, m) in src.match_indices("settings.") {
            let prev = src[..at].chars().next_back();
            if prev.is_some_and(|p| p.is_ascii_alphanumeric() || p == '_' || p == '.') {
                continue;
            }
            let tail = &src[at + m.len()..];
            let len = tail
                .find(|ch: char| !(ch.is_ascii_alphanumeric() || ch == '_'))
                .unwrap_or(tail.len());
            if len > 0 {
                out.push(tail[..len].to_owned());
            }
        }
    }
    out
}

/// Whether `tool` declares setting `name`.
fn declares(tool: &Tool, name: &str) -> bool {
    tool.settings
        .as_ref()
        .is_some_and(|s| s.properties.contains_key(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_named_in_templates() {
        assert_eq!(settings_named("Bearer {settings.token}"), ["token"]);
        assert_eq!(settings_named("{settings.a}:{settings.b_2}"), ["a", "b_2"]);
        assert!(settings_named("{my_settings.a} {x.settings.b}").is_empty());
        assert!(settings_named("path/settings.json, no holes").is_empty());
    }

    #[test]
    fn origins() {
        assert!(origin("https://mcp.example.com").is_ok());
        assert!(origin("http://127.0.0.1:8080/").is_ok());
        assert!(origin("https://mcp.example.com/mcp").is_err());
        assert!(origin("https://user@mcp.example.com").is_err());
        assert!(origin("ftp://mcp.example.com").is_err());
        assert!(origin("mcp.example.com").is_err());
        assert!(origin("https://*.example.com").is_err());
    }

    #[test]
    fn holes() {
        assert!(has_holes("https://{settings.host}/mcp"));
        assert!(!has_holes("https://mcp.example.com/mcp"));
    }

    #[test]
    fn endpoints() {
        assert!(endpoint("https://mcp.example.com/mcp").is_ok());
        assert!(endpoint("http://127.0.0.1:8080/sse").is_ok());
        assert!(endpoint("ftp://example.com").is_err());
        assert!(endpoint("example.com/mcp").is_err());
        assert!(endpoint("not a url").is_err());
    }
}
