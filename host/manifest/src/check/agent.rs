//! Agents: capabilities and what they reference, bindings, middleware, guardrails, function
//! names, model capabilities, prompt and exposes.

use std::collections::HashMap;

use super::steps::{self, Around, Layer};
use super::{
    Checker, I, K, MODEL_REF, Seg, function_name, key_pos, member_names, pos_at, sanitize, scopes,
};
use crate::load::{Loaded, Source};
use crate::model::Tool;
use crate::model::agent::{Agent, CapabilityDecl, MountScope};
use crate::suggest::did_you_mean;

/// The functions every agent has from the host (self-scheduling).
pub(crate) const HOST_FUNCTIONS: [&str; 2] = ["request_wakeup", "cancel_wakeup"];

/// Model capabilities that write media to the mount.
const MEDIA: [&str; 3] = ["image-generation", "audio-generation", "video-generation"];

/// What a capability key refers to.
enum Target<'a> {
    Tool(&'a Tool),
    Agent(&'a Agent),
}

pub(crate) fn check(c: &mut Checker, doc: &Loaded<Agent>) {
    let agent = &doc.value;
    let src = &doc.source;
    c.template(src, &[K("prompt")], &scopes::PROMPT);
    check_model(c, src, agent);
    let mut functions: HashMap<String, String> = HOST_FUNCTIONS
        .iter()
        .map(|f| (f.to_string(), "the host's self-scheduling tools".to_owned()))
        .collect();
    for (key, decl) in &agent.capabilities {
        let cap_path = [K("capabilities"), K(key)];
        let Some(target) = resolve(c, src, agent, key) else {
            continue;
        };
        let cap = match decl {
            CapabilityDecl::All(_) => None,
            CapabilityDecl::Config(cap) => Some(cap),
        };
        if cap.is_some_and(|cap| cap.is_empty()) {
            c.error(
                src,
                pos_at(&src.node, &cap_path),
                format!("capability `{key}` is `{{}}`; write \"*\" for unrestricted access, or set at least one field"),
            );
        }
        let include = cap.and_then(|c| c.include.as_ref());
        let bindings = cap.and_then(|c| c.bindings.as_ref());
        match target {
            Target::Tool(tool) => {
                check_include(c, src, key, tool, include);
                check_bindings_tool(c, src, key, tool, bindings, include);
                let active = |name: &str| include.is_none_or(|inc| inc.iter().any(|i| i == name));
                let single = tool.actions.len() == 1;
                let names: Vec<String> = tool
                    .actions
                    .iter()
                    .filter(|a| active(&a.name))
                    .map(|a| function_name(key, &a.name, single))
                    .collect();
                for name in names {
                    claim(c, src, &mut functions, name, key);
                }
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
                claim(c, src, &mut functions, sanitize(&child.name), key);
            }
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
            let tool = match target {
                Target::Tool(t) => Some(t),
                Target::Agent(_) => None,
            };
            let around = Around {
                namespace: &agent.namespace,
                tool,
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

/// Finds the tool or agent a capability key names: `name` in the agent's namespace, or
/// `namespace/name`.
fn resolve<'a>(c: &mut Checker<'a>, src: &Source, agent: &Agent, key: &str) -> Option<Target<'a>> {
    let (ns, name) = key.split_once('/').unwrap_or((&agent.namespace, key));
    let config = c.config;
    if let Some(t) = config.tool(ns, name) {
        return Some(Target::Tool(&t.value));
    }
    if let Some(a) = config.agent(ns, name) {
        if a.value.name == agent.name && a.value.namespace == agent.namespace {
            c.error(
                src,
                key_pos(&src.node, &[K("capabilities"), K(key)]),
                format!("agent `{ns}/{name}` cannot delegate to itself"),
            );
            return None;
        }
        return Some(Target::Agent(&a.value));
    }
    let candidates: Vec<&str> = config
        .tools
        .iter()
        .filter(|t| t.value.namespace == ns)
        .map(|t| t.value.name.as_str())
        .chain(
            config
                .agents
                .iter()
                .filter(|a| a.value.namespace == ns)
                .map(|a| a.value.name.as_str()),
        )
        .collect();
    let hint = did_you_mean(name, candidates.iter().copied())
        .map(|s| format!("; did you mean `{s}`?"))
        .unwrap_or_default();
    c.error(
        src,
        key_pos(&src.node, &[K("capabilities"), K(key)]),
        format!("capability `{key}` names no tool or agent in namespace `{ns}`{hint}"),
    );
    None
}

fn check_include(
    c: &mut Checker,
    src: &Source,
    key: &str,
    tool: &Tool,
    include: Option<&Vec<String>>,
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
    include: Option<&Vec<String>>,
) {
    let declared = tool_parameters(tool);
    let target = format!("tool `{}/{}`", tool.namespace, tool.name);
    check_bound_names(c, src, key, bindings, &declared, &target, |name| {
        did_you_mean(name, declared.iter().copied())
            .map(|s| format!("; did you mean `{s}`?"))
            .unwrap_or_else(|| match declared.is_empty() {
                true => " (it declares none)".into(),
                false => format!(" (it declares: {})", declared.join(", ")),
            })
    });
    let active = |name: &str| include.is_none_or(|inc| inc.iter().any(|i| i == name || i == "*"));
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

/// Records a function name; a second capability with the same name is an error.
fn claim(
    c: &mut Checker,
    src: &Source,
    functions: &mut HashMap<String, String>,
    name: String,
    key: &str,
) {
    match functions.get(&name) {
        Some(owner) => {
            let message =
                format!("function name `{name}` of capability `{key}` collides with {owner}");
            c.error(
                src,
                key_pos(&src.node, &[K("capabilities"), K(key)]),
                message,
            );
        }
        None => {
            functions.insert(name, format!("capability `{key}`"));
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
