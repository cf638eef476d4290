//! Agents: capabilities (resolved by [`crate::resolve`], whose errors are reported here at
//! their keys), what they include and bind, middleware, guardrails, model capabilities, prompt
//! and exposes.

use super::schema::Of;
use super::steps::{self, Around, Layer};
use super::{Checker, I, K, MODEL_REF, Seg, key_pos, member_names, pos_at, scopes};
use crate::load::{Loaded, Source};
use crate::model::Tool;
use crate::model::agent::{Agent, MountScope};
use crate::resolve::{self, Target};
use crate::suggest::{did_you_mean, did_you_mean_hint};

/// Model capabilities that write media to the mount.
const MEDIA: [&str; 3] = ["image-generation", "audio-generation", "video-generation"];

pub(crate) fn check(c: &mut Checker, doc: &Loaded<Agent>) {
    let agent = &doc.value;
    let src = &doc.source;
    c.template(src, &[K("prompt")], &scopes::PROMPT);
    if let Some(parameters) = &agent.parameters {
        super::schema::check(c, src, &[K("parameters")], parameters, Of::Agent);
    }
    check_model(c, src, agent);
    let config = c.config;
    let resolution = resolve::resolve(config, agent);
    check_script_calls(c, agent, &resolution);
    for (key, decl) in &agent.capabilities {
        let cap_path = [K("capabilities"), K(key)];
        // Every resolution error is about a key, and reported there: one that did not
        // resolve is checked no further; a collision comes after the bindings' problems.
        let errors = resolution.errors.iter().filter(|e| e.key() == key);
        let Some(resolved) = resolution.capabilities.iter().find(|r| r.key == key) else {
            for e in errors {
                c.error(src, key_pos(&src.node, &cap_path), e.to_string());
            }
            continue;
        };
        let cap = decl.config();
        if cap.is_some_and(|cap| cap.is_empty()) {
            c.error(
                src,
                pos_at(&src.node, &cap_path),
                format!("capability `{key}` is `{{}}`; write \"*\" for unrestricted access, or set at least one field"),
            );
        }
        let include = cap.and_then(|c| c.include.as_deref());
        let bindings = cap.and_then(|c| c.bindings.as_ref());
        match resolved.target {
            Target::Tool(tool) => {
                check_include(c, src, key, tool, include);
                check_bindings_tool(c, src, key, tool, bindings, include);
            }
            Target::Agent(child) => {
                if include.is_some() {
                    c.error(
                        src,
                        key_pos(&src.node, &[K("capabilities"), K(key), K("include")]),
                        format!("`include` applies to tools; `{key}` is an agent"),
                    );
                }
                check_bindings_agent(c, src, key, child, bindings);
            }
        }
        for e in errors {
            c.error(src, key_pos(&src.node, &cap_path), e.to_string());
        }
        if let Some(bindings) = bindings {
            for name in bindings.keys() {
                let path = [K("capabilities"), K(key), K("bindings"), K(name)];
                let value = bindings.get(name).map(String::as_str).unwrap_or_default();
                let hint = if value.contains('\'') || value.contains('"') {
                    String::new()
                } else {
                    format!("; to bind the literal string, quote it: \"'{value}'\"")
                };
                c.expr(src, &path, &scopes::BINDING, &hint);
            }
        }
        if let Some(cap) = cap {
            let (tool, delegate) = match resolved.target {
                Target::Tool(t) => (Some(t), None),
                Target::Agent(_) => (None, Some(key.as_str())),
            };
            let around = Around {
                namespace: &agent.namespace,
                tool,
                delegate,
            };
            let lists = [
                ("before_first", &cap.before_first, Layer::BeforeFirst),
                ("before", &cap.before, Layer::Before),
                ("after", &cap.after, Layer::After),
            ];
            steps::check_lists(c, src, &[K("capabilities"), K(key)], &lists, &around);
        }
    }
    check_model_capabilities(c, src, agent);
    if let Some(g) = &agent.guardrails {
        let around = Around {
            namespace: &agent.namespace,
            tool: None,
            delegate: None,
        };
        let lists = [
            ("before", &g.before, Layer::GuardBefore),
            ("after", &g.after, Layer::GuardAfter),
        ];
        steps::check_lists(c, src, &[K("guardrails")], &lists, &around);
    }
    if let Some(exposes) = &agent.exposes {
        for key in exposes.keys() {
            c.expr(src, &[K("exposes"), K(key)], &scopes::EXPOSES, "");
        }
    }
}

fn check_include(
    c: &mut Checker,
    src: &Source,
    key: &str,
    tool: &Tool,
    include: Option<&[String]>,
) {
    let Some(include) = include else { return };
    let names = member_names(tool);
    for (i, name) in include.iter().enumerate() {
        if names.contains(&name.as_str()) || name == "*" {
            continue;
        }
        let hint = did_you_mean(name, names.iter().copied())
            .map(|s| format!("; did you mean `{s}`?"))
            .unwrap_or_else(|| format!(" (it has: {})", names.join(", ")));
        c.error(
            src,
            pos_at(&src.node, &[K("capabilities"), K(key), K("include"), I(i)]),
            format!(
                "`include` names `{name}`, which tool `{}/{}` does not have{hint}",
                tool.namespace, tool.name
            ),
        );
    }
}

/// Every parameter name of a tool: root, action and event parameters share one namespace.
fn tool_parameters(tool: &Tool) -> Vec<&str> {
    let mut names: Vec<&str> = Vec::new();
    let schemas = tool
        .parameters
        .iter()
        .chain(tool.actions.iter().filter_map(|a| a.parameters.as_ref()))
        .chain(tool.events.iter().filter_map(|e| e.parameters.as_ref()));
    for schema in schemas {
        for name in schema.properties.keys() {
            if !names.contains(&name.as_str()) {
                names.push(name);
            }
        }
    }
    names
}

fn check_bindings_tool(
    c: &mut Checker,
    src: &Source,
    key: &str,
    tool: &Tool,
    bindings: Option<&indexmap::IndexMap<String, String>>,
    include: Option<&[String]>,
) {
    let declared = tool_parameters(tool);
    let target = format!("tool `{}/{}`", tool.namespace, tool.name);
    // An `openapi` action that declares no parameters takes its operation's, which only the
    // document says: the plan checks the bindings of such a tool once it is loaded.
    let derives = tool
        .actions
        .iter()
        .any(|a| a.parameters.is_none() && tool.execute_of(a).is_some_and(|e| e.openapi.is_some()));
    let checked = if derives { None } else { bindings };
    check_bound_names(c, src, key, checked, &declared, &target, |name| {
        did_you_mean(name, declared.iter().copied())
            .map(|s| format!("; did you mean `{s}`?"))
            .unwrap_or_else(|| match declared.is_empty() {
                true => " (it declares none)".into(),
                false => format!(" (it declares: {})", declared.join(", ")),
            })
    });
    let active = |name: &str| resolve::includes(include, name);
    let mut required: Vec<&str> = Vec::new();
    let root = tool.parameters.iter();
    let actions = tool
        .actions
        .iter()
        .filter(|a| active(&a.name))
        .filter_map(|a| a.parameters.as_ref());
    let events = tool
        .events
        .iter()
        .filter(|e| active(&e.name))
        .filter_map(|e| e.parameters.as_ref());
    for schema in root.chain(actions).chain(events) {
        for (name, prop) in &schema.properties {
            if prop.require_binding && !required.contains(&name.as_str()) {
                required.push(name);
            }
        }
    }
    // A poll's request is made for the values the task's bindings seal: each parameter it
    // reads needs one.
    for event in tool.events.iter().filter(|e| active(&e.name)) {
        let Some(poll) = &event.receive.poll else {
            continue;
        };
        for name in poll.parameters_read() {
            if bindings.is_some_and(|b| b.contains_key(&name)) {
                continue;
            }
            c.error(
                src,
                key_pos(&src.node, &[K("capabilities"), K(key)]),
                format!(
                    "tool `{}/{}`: the poll request of event `{}` reads `parameters.{name}`, so the capability needs `bindings: {{{name}: …}}` (a poll is made for the values bindings seal; or leave the event out with `include`)",
                    tool.namespace, tool.name, event.name
                ),
            );
        }
    }
    for name in required {
        if bindings.is_some_and(|b| b.contains_key(name)) {
            continue;
        }
        c.error(
            src,
            key_pos(&src.node, &[K("capabilities"), K(key)]),
            format!(
                "tool `{}/{}` requires a binding for `{name}` (require_binding: true); add `bindings: {{{name}: …}}`",
                tool.namespace, tool.name
            ),
        );
    }
}

/// Each binding of capability `key` must name one of `declared`, the parameters of `target`
/// (``tool `ns/name` ``); an error, with `hint(name)` after it, for each that does not.
fn check_bound_names(
    c: &mut Checker,
    src: &Source,
    key: &str,
    bindings: Option<&indexmap::IndexMap<String, String>>,
    declared: &[&str],
    target: &str,
    hint: impl Fn(&str) -> String,
) {
    let unknown = bindings
        .into_iter()
        .flat_map(|b| b.keys())
        .filter(|name| !declared.contains(&name.as_str()));
    for name in unknown {
        c.error(
            src,
            key_pos(
                &src.node,
                &[K("capabilities"), K(key), K("bindings"), K(name)],
            ),
            format!(
                "binding `{name}` is not a parameter of {target}{}",
                hint(name)
            ),
        );
    }
}

fn check_bindings_agent(
    c: &mut Checker,
    src: &Source,
    key: &str,
    child: &Agent,
    bindings: Option<&indexmap::IndexMap<String, String>>,
) {
    let declared: Vec<&str> = child
        .parameters
        .iter()
        .flat_map(|p| p.properties.keys().map(String::as_str))
        .collect();
    let target = format!("agent `{}/{}`", child.namespace, child.name);
    check_bound_names(c, src, key, bindings, &declared, &target, |_| String::new());
    for (name, prop) in child.parameters.iter().flat_map(|p| p.properties.iter()) {
        if prop.require_binding && !bindings.is_some_and(|b| b.contains_key(name)) {
            c.error(
                src,
                key_pos(&src.node, &[K("capabilities"), K(key)]),
                format!(
                    "agent `{}/{}` requires a binding for `{name}` (require_binding: true)",
                    child.namespace, child.name
                ),
            );
        }
    }
}

fn check_model_capabilities(c: &mut Checker, src: &Source, agent: &Agent) {
    let Some(list) = &agent.model_capabilities else {
        return;
    };
    for (i, name) in list.iter().enumerate() {
        let path: [Seg; 2] = [K("model_capabilities"), I(i)];
        if agent.capabilities.contains_key(name) {
            c.error(
                src,
                pos_at(&src.node, &path),
                format!("model capability `{name}` duplicates the capability key `{name}`"),
            );
        }
        if MEDIA.contains(&name.as_str()) && agent.mount == MountScope::None {
            c.error(
                src,
                pos_at(&src.node, &path),
                format!("model capability `{name}` writes media to the mount; set the agent's `mount` to task, agent or workspace"),
            );
        }
    }
}

/// Each call in the script of an agent on a `scripted/<file>` model (its own, or the host
/// config's `default_model`) names one of the agent's functions: a warning at the call
/// otherwise (the call would be answered "there is no function", as an LLM's would), since a
/// script is written for its agent — a tool that gains a second action renames its function
/// from `key` to `key_action`.
fn check_script_calls(c: &mut Checker, agent: &Agent, resolution: &resolve::Resolution) {
    let config = c.config;
    let default = config
        .host
        .as_ref()
        .and_then(|h| h.value.default_model.as_deref());
    let model = agent.model.as_deref().or(default);
    let Some(name) = model.and_then(|m| m.strip_prefix("scripted/")) else {
        return;
    };
    let Some(script) = config.script(name) else {
        return;
    };
    let functions: Vec<&str> = resolution
        .capabilities
        .iter()
        .flat_map(|cap| cap.functions.iter().map(|f| f.name.as_str()))
        .chain(resolution.host_functions.iter().copied())
        .collect();
    for (i, response) in script.value.responses.iter().enumerate() {
        for (j, call) in response.tool_calls.iter().enumerate() {
            if functions.contains(&call.name.as_str()) {
                continue;
            }
            let hint = did_you_mean_hint(&call.name, functions.iter().copied());
            let path = [K("responses"), I(i), K("tool_calls"), I(j), K("name")];
            c.warning(
                &script.source,
                pos_at(&script.source.node, &path),
                format!(
                    "agent `{}/{}` has no function `{}`{hint} (its functions: {})",
                    agent.namespace,
                    agent.name,
                    call.name,
                    if functions.is_empty() {
                        "none".to_owned()
                    } else {
                        functions.join(", ")
                    }
                ),
            );
        }
    }
}

/// `model: <provider>/<name>` names a known provider, and a scripted model's file exists.
fn check_model(c: &mut Checker, src: &Source, agent: &Agent) {
    let Some(model) = &agent.model else { return };
    let pos = pos_at(&src.node, &[K("model")]);
    let Some((provider, name)) = c.split_ref(src, pos, "model", model, MODEL_REF) else {
        return;
    };
    let host = c.config.host_config();
    match provider {
        "scripted" => c.scripted_model(src, pos, name),
        "openai" => {}
        other if host.models.contains_key(other) => {}
        other => c.warning(
            src,
            pos,
            format!("model provider `{other}` is not configured in the host config's `models`; tasks of this agent will fail"),
        ),
    }
}
