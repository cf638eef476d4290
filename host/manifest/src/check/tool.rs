//! Tools: one backend per action, one receive type per event, timeouts, expressions and
//! templates of every runtime, components.

use std::collections::HashMap;

use super::schema::Of;
use super::{Checker, ComponentWorld, I, K, Seg, key_pos, pos_at, scopes};
use crate::load::{Loaded, Source};
use crate::model::Tool;
use crate::model::tool::{HttpRequest, KubernetesJob, MIN_POLL_INTERVAL, Poll};

const BACKENDS: &str = "cel, stateless_http, stateful_session, openapi, mcp, kubernetes_job, wasm";

pub(crate) fn check(c: &mut Checker, doc: &Loaded<Tool>) {
    let tool = &doc.value;
    let src = &doc.source;
    unique_names(
        c,
        src,
        "action",
        tool.actions.iter().map(|a| a.name.as_str()),
        "actions",
    );
    unique_names(
        c,
        src,
        "event",
        tool.events.iter().map(|e| e.name.as_str()),
        "events",
    );
    if let Some(settings) = &tool.settings {
        super::schema::check(c, src, &[K("settings")], settings, Of::Settings);
    }
    if let Some(parameters) = &tool.parameters {
        super::schema::check(c, src, &[K("parameters")], parameters, Of::Parameters);
    }
    if let Some(wasm) = &tool.wasm {
        c.component(src, &[K("wasm"), K("component")], ComponentWorld::Tool);
        let hosts = wasm.allowed_hosts.as_deref();
        super::mcp::allowed_hosts(c, src, &[K("wasm"), K("allowed_hosts")], hosts);
    }
    if let Some(shared) = &tool.stateless_http {
        http(c, src, &[K("stateless_http")], shared, &scopes::HTTP);
    }
    for (i, action) in tool.actions.iter().enumerate() {
        let path = [K("actions"), I(i)];
        if let Some(parameters) = &action.parameters {
            let at = [K("actions"), I(i), K("parameters")];
            super::schema::check(c, src, &at, parameters, Of::Parameters);
        }
        let backends = action
            .execute
            .as_ref()
            .map(|e| e.backends())
            .unwrap_or_default();
        match backends.as_slice() {
            [] if tool.wasm.as_ref().is_some_and(|w| w.component.is_some()) => {}
            [] => c.error(
                src,
                action.execute.as_ref().map_or_else(
                    || pos_at(&src.node, &path),
                    |_| pos_at(&src.node, &[K("actions"), I(i), K("execute")]),
                ),
                format!(
                    "action `{}` has no `execute` backend; it needs exactly one of: {BACKENDS}",
                    action.name
                ),
            ),
            [_] => {}
            several => c.error(
                src,
                key_pos(
                    &src.node,
                    &[K("actions"), I(i), K("execute"), K(several[1])],
                ),
                format!(
                    "action `{}` has {} backends ({}); it needs exactly one",
                    action.name,
                    several.len(),
                    several.join(", ")
                ),
            ),
        }
        let Some(execute) = &action.execute else {
            continue;
        };
        let exec = |key: &'static str| [K("actions"), I(i), K("execute"), K(key)];
        if execute.cel.is_some() {
            let mut p = exec("cel").to_vec();
            p.push(K("expression"));
            c.expr(src, &p, &scopes::CEL_TOOL, "");
        }
        if let Some(req) = &execute.stateless_http {
            http(c, src, &exec("stateless_http"), req, &scopes::HTTP);
            if req.url.is_none() && tool.stateless_http.as_ref().is_none_or(|s| s.url.is_none()) {
                c.error(
                    src,
                    pos_at(&src.node, &exec("stateless_http")),
                    format!("action `{}`: `stateless_http` needs a `url` (here or in the tool's shared block)", action.name),
                );
            }
        }
        if let Some(job) = &execute.kubernetes_job {
            kubernetes_job(c, src, &exec("kubernetes_job"), job, &action.name);
        }
        if let Some(wasm) = &execute.wasm {
            let in_wasm = |key| [exec("wasm").as_slice(), &[K(key)]].concat();
            let hosts = wasm.allowed_hosts.as_deref();
            super::mcp::allowed_hosts(c, src, &in_wasm("allowed_hosts"), hosts);
            c.component(src, &in_wasm("component"), ComponentWorld::Tool);
            if wasm.component.is_none() && tool.wasm.as_ref().is_none_or(|w| w.component.is_none())
            {
                c.error(
                    src,
                    pos_at(&src.node, &exec("wasm")),
                    format!("action `{}`: `wasm` needs a `component` (here or in the tool's shared `wasm:` block)", action.name),
                );
            }
        }
    }
    for (i, event) in tool.events.iter().enumerate() {
        let path = |key: &'static str| [K("events"), I(i), K(key)];
        if let Some(parameters) = &event.parameters {
            super::schema::check(c, src, &path("parameters"), parameters, Of::Parameters);
        }
        c.template(src, &path("message"), &scopes::EVENT_MESSAGE);
        if let (Some(t), Some(max)) = (event.timeout, event.max_timeout)
            && max < t
        {
            c.error(
                src,
                pos_at(&src.node, &path("max_timeout")),
                format!(
                    "`max_timeout` ({max}) is shorter than `timeout` ({t}) of event `{}`",
                    event.name
                ),
            );
        }
        let kinds = event.receive.kinds();
        match kinds.as_slice() {
            [_] => {}
            [] => c.error(
                src,
                pos_at(&src.node, &path("receive")),
                format!("event `{}` needs exactly one receive type (webhook, subscription or poll); it has none", event.name),
            ),
            several => c.error(
                src,
                key_pos(&src.node, &[K("events"), I(i), K("receive"), K(several[1])]),
                format!(
                    "event `{}` needs exactly one receive type; it has {}",
                    event.name,
                    several.join(" and ")
                ),
            ),
        }
        let recv = |kind: &'static str, key: &'static str| {
            vec![K("events"), I(i), K("receive"), K(kind), K(key)]
        };
        if let Some(hook) = &event.receive.webhook {
            c.expr(src, &recv("webhook", "filter"), &scopes::FILTER, "");
            c.template(src, &recv("webhook", "secret"), &scopes::SECRET);
            if hook.filter_component.is_some() {
                c.component(
                    src,
                    &recv("webhook", "filter_component"),
                    ComponentWorld::EventFilter,
                );
            }
        }
        if let Some(sub) = &event.receive.subscription {
            c.expr(src, &recv("subscription", "filter"), &scopes::FILTER, "");
            for (key, req, scope) in [
                ("subscribe", &sub.subscribe, &scopes::SUBSCRIBE),
                ("unsubscribe", &sub.unsubscribe, &scopes::UNSUBSCRIBE),
            ] {
                if let Some(req) = req {
                    http(c, src, &recv("subscription", key), req, scope);
                }
            }
        }
        // Written in the spec, but not run by this host: an error, so that no event is
        // accepted that would never arrive.
        let http_subscription = event
            .receive
            .subscription
            .as_ref()
            .is_some_and(|s| tool.mcp.is_none() && s.resources.is_empty());
        // An event with several receive types has its error already.
        if http_subscription && kinds.len() == 1 {
            c.error(
                src,
                key_pos(&src.node, &[K("events"), I(i), K("receive"), K("subscription")]),
                format!(
                    "event `{}`: this host does not run `receive.subscription` over HTTP: the event would never arrive (it runs `receive.webhook`, `receive.poll`, and `receive.subscription.resources` of an MCP tool)",
                    event.name
                ),
            );
        }
        if let Some(poll) = &event.receive.poll {
            c.expr(src, &recv("poll", "filter"), &scopes::FILTER, "");
            c.expr(src, &recv("poll", "detect"), &scopes::POLL_DETECT, "");
            c.expr(src, &recv("poll", "cursor"), &scopes::POLL_DETECT, "");
            c.expr(src, &recv("poll", "id"), &scopes::POLL_ITEM, "");
            c.template(src, &recv("poll", "url"), &scopes::POLL_REQUEST);
            c.templates_in(src, &recv("poll", "headers"), &scopes::POLL_REQUEST);
            poll_parameters(c, src, tool, &event.name, poll, &recv("poll", "url"));
            if let Some(interval) = poll.interval
                && interval.0 < MIN_POLL_INTERVAL
            {
                c.error(
                    src,
                    pos_at(&src.node, &recv("poll", "interval")),
                    format!(
                        "event `{}`: `interval` is {interval}; this host polls at most once a second",
                        event.name
                    ),
                );
            }
        }
    }
    super::mcp::check(c, src, tool);
    super::session::check(c, src, tool);
    super::openapi::check(c, src, tool);
    settings_configured(c, src, tool);
}

/// A poll request reads parameters by name, and only those the tool declares (their values
/// are the ones the task's bindings seal).
fn poll_parameters(
    c: &mut Checker,
    src: &Source,
    tool: &Tool,
    event: &str,
    poll: &Poll,
    at: &[Seg],
) {
    let whole = poll
        .templates()
        .filter_map(|t| agentmesh_expr::Template::parse(t).ok())
        .any(|t| {
            t.expressions()
                .any(|(_, e)| e.members("parameters").iter().any(|m| m.name.is_none()))
        });
    if whole {
        c.error(
            src,
            pos_at(&src.node, at),
            format!("event `{event}`: a poll request reads `parameters` by name (`{{parameters.<name>}}`)"),
        );
    }
    let declared = |name: &str| {
        tool.parameters
            .iter()
            .chain(tool.actions.iter().filter_map(|a| a.parameters.as_ref()))
            .chain(tool.events.iter().filter_map(|e| e.parameters.as_ref()))
            .any(|schema| schema.properties.contains_key(name))
    };
    for name in poll.parameters_read() {
        if !declared(&name) {
            c.error(
                src,
                pos_at(&src.node, at),
                format!("event `{event}`: the poll request reads `parameters.{name}`, which the tool does not declare"),
            );
        }
    }
}

/// A `kubernetes_job` block: its templates, and a `spec` that is a Job's spec.
fn kubernetes_job(c: &mut Checker, src: &Source, path: &[Seg], job: &KubernetesJob, action: &str) {
    let sub = |key: &'static str| {
        let mut p = path.to_vec();
        p.push(K(key));
        p
    };
    c.template(src, &sub("namespace"), &scopes::KUBERNETES_JOB);
    c.templates_in(src, &sub("spec"), &scopes::KUBERNETES_JOB);
    for key in ["api_server", "token"] {
        c.template(src, &sub(key), &scopes::KUBERNETES_API);
    }
    let containers = job
        .spec
        .pointer("/template/spec/containers")
        .and_then(|c| c.as_array());
    if containers.is_none_or(|c| c.is_empty()) {
        c.error(
            src,
            pos_at(&src.node, &sub("spec")),
            format!(
                "action `{action}`: `kubernetes_job.spec` is a Job's `spec`: it needs `template.spec.containers` with at least one container"
            ),
        );
    }
}

/// Templates of one HTTP request.
pub(super) fn http(
    c: &mut Checker,
    src: &Source,
    path: &[Seg],
    req: &HttpRequest,
    scope: &agentmesh_expr::Scope,
) {
    let sub = |key: &'static str| {
        let mut p = path.to_vec();
        p.push(K(key));
        p
    };
    if req.url.is_some() {
        c.template(src, &sub("url"), scope);
    }
    if req.headers.is_some() {
        c.templates_in(src, &sub("headers"), scope);
    }
    if req.body.is_some() {
        c.templates_in(src, &sub("body"), scope);
    }
}

fn unique_names<'a>(
    c: &mut Checker,
    src: &Source,
    what: &str,
    names: impl Iterator<Item = &'a str>,
    list: &'static str,
) {
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for (i, name) in names.enumerate() {
        if let Some(first) = seen.get(name) {
            let message = format!("duplicate {what} name `{name}` (also {list}[{first}])");
            c.error(src, pos_at(&src.node, &[K(list), I(i), K("name")]), message);
        } else {
            seen.insert(name, i);
        }
    }
}

/// A setting without a default that the host config does not provide: a warning, since a
/// bundle's tool may be loaded before its operator configures it.
fn settings_configured(c: &mut Checker, src: &Source, tool: &Tool) {
    let Some(settings) = &tool.settings else {
        return;
    };
    let host = c.config.host_config();
    let configured = host
        .settings
        .get(&tool.namespace)
        .and_then(|ns| ns.get(&tool.name));
    for (name, prop) in &settings.properties {
        if prop.default.is_none() && !configured.is_some_and(|s| s.contains_key(name)) {
            c.warning(
                src,
                key_pos(&src.node, &[K("settings"), K("properties"), K(name)]),
                format!(
                    "setting `{name}` has no default and the host config does not set `settings.{}.{}.{name}`",
                    tool.namespace, tool.name
                ),
            );
        }
    }
}
