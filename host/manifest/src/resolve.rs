//! Capability resolution, done once: which tool or agent each capability key of an agent
//! names, and the functions the LLM sees for it. The checker reports what does not resolve
//! with its position; the engine's plan compiles what does.
//!
//! A key is `name` in the agent's own namespace or `namespace/name`; tools are looked up before
//! agents. A tool yields one function per action its `include` keeps, named by
//! [`function_name`]; an agent yields one function, its name [`sanitize`]d. Every agent also
//! has the host's self-scheduling functions ([`HOST_FUNCTIONS`]); two functions of one name are
//! an error.

use std::collections::HashMap;
use std::fmt;

use crate::load::Config;
use crate::model::Tool;
use crate::model::agent::{Agent, CapabilityDecl};
use crate::suggest::did_you_mean;

/// The functions every agent has from the host (self-scheduling), in the order the LLM sees
/// them.
pub const HOST_FUNCTIONS: [&str; 2] = ["request_wakeup", "cancel_wakeup"];

/// An agent's capabilities, resolved.
#[derive(Debug)]
pub struct Resolution<'a> {
    /// The capabilities whose key names a tool or another agent, in manifest order.
    pub capabilities: Vec<Capability<'a>>,
    /// The host functions the agent keeps: [`HOST_FUNCTIONS`] but those a capability names
    /// (which is also a [`ResolveError::Collision`]).
    pub host_functions: Vec<&'static str>,
    /// What did not resolve, in manifest order.
    pub errors: Vec<ResolveError>,
}

impl<'a> Resolution<'a> {
    /// The resolution, or its first error.
    pub fn into_result(mut self) -> Result<Resolution<'a>, ResolveError> {
        match self.errors.is_empty() {
            true => Ok(self),
            false => Err(self.errors.swap_remove(0)),
        }
    }

    /// The first capability that names `tool`, if any.
    pub fn tool_capability(&self, tool: &Tool) -> Option<&Capability<'a>> {
        self.capabilities.iter().find(|c| match c.target {
            Target::Tool(t) => t.namespace == tool.namespace && t.name == tool.name,
            Target::Agent(_) => false,
        })
    }
}

/// One capability that resolved.
#[derive(Debug)]
pub struct Capability<'a> {
    /// The key as written.
    pub key: &'a str,
    /// Its declaration.
    pub decl: &'a CapabilityDecl,
    /// The tool or agent the key names.
    pub target: Target<'a>,
    /// The functions it yields, in the order of the tool's actions.
    pub functions: Vec<Function>,
}

impl Capability<'_> {
    /// The name of the aggregate context entry of a tool with several actions (the key,
    /// sanitized); `None` for a tool with one action and for an agent.
    pub fn aggregate(&self) -> Option<String> {
        match self.target {
            Target::Tool(tool) if tool.actions.len() != 1 => Some(sanitize(self.key)),
            _ => None,
        }
    }
}

/// What a capability key names.
#[derive(Debug, Clone, Copy)]
pub enum Target<'a> {
    /// A tool.
    Tool(&'a Tool),
    /// Another agent (delegation).
    Agent(&'a Agent),
}

impl Target<'_> {
    /// `namespace/name`.
    pub fn id(&self) -> String {
        match self {
            Target::Tool(t) => format!("{}/{}", t.namespace, t.name),
            Target::Agent(a) => format!("{}/{}", a.namespace, a.name),
        }
    }
}

/// A function the LLM may call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Function {
    /// Its name.
    pub name: String,
    /// For a tool, the index of the action it runs.
    pub action: Option<usize>,
}

/// Why a capability did not resolve; every one is reported at the capability's key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    /// The key names no tool or agent.
    #[error(
        "capability `{key}` names no tool or agent in namespace `{namespace}`{}",
        suggestion.as_ref().map(|s| format!("; did you mean `{s}`?")).unwrap_or_default()
    )]
    Unknown {
        /// The key.
        key: String,
        /// The namespace it was looked up in.
        namespace: String,
        /// The closest tool or agent name of that namespace, when one is close.
        suggestion: Option<String>,
    },
    /// The key names the agent itself.
    #[error("agent `{agent}` cannot delegate to itself")]
    SelfDelegation {
        /// The key.
        key: String,
        /// The agent, `namespace/name`.
        agent: String,
    },
    /// A function of the capability has the name of an earlier one.
    #[error("function name `{name}` of capability `{key}` collides with {owner}")]
    Collision {
        /// The key.
        key: String,
        /// The function name.
        name: String,
        /// Who has the name already.
        owner: Owner,
    },
}

impl ResolveError {
    /// The capability key the error is about.
    pub fn key(&self) -> &str {
        match self {
            ResolveError::Unknown { key, .. }
            | ResolveError::SelfDelegation { key, .. }
            | ResolveError::Collision { key, .. } => key,
        }
    }
}

/// Who has a function name first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Owner {
    /// The capability with this key.
    Capability(String),
    /// The host's self-scheduling functions ([`HOST_FUNCTIONS`]).
    Host,
}

impl fmt::Display for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Owner::Capability(key) => write!(f, "capability `{key}`"),
            Owner::Host => f.write_str("the host's self-scheduling tools"),
        }
    }
}

/// Resolves every capability of `agent` against `config`.
pub fn resolve<'a>(config: &'a Config, agent: &'a Agent) -> Resolution<'a> {
    let mut owners: HashMap<String, Owner> = HOST_FUNCTIONS
        .iter()
        .map(|f| (f.to_string(), Owner::Host))
        .collect();
    let mut capabilities = Vec::new();
    let mut errors = Vec::new();
    for (key, decl) in &agent.capabilities {
        let target = match target(config, agent, key) {
            Ok(target) => target,
            Err(e) => {
                errors.push(e);
                continue;
            }
        };
        let functions = functions(key, decl, target);
        for f in &functions {
            match owners.get(&f.name) {
                Some(owner) => errors.push(ResolveError::Collision {
                    key: key.clone(),
                    name: f.name.clone(),
                    owner: owner.clone(),
                }),
                None => {
                    owners.insert(f.name.clone(), Owner::Capability(key.clone()));
                }
            }
        }
        capabilities.push(Capability {
            key,
            decl,
            target,
            functions,
        });
    }
    let host_functions = HOST_FUNCTIONS
        .into_iter()
        .filter(|h| {
            !capabilities
                .iter()
                .flat_map(|c| &c.functions)
                .any(|f| f.name == *h)
        })
        .collect();
    Resolution {
        capabilities,
        host_functions,
        errors,
    }
}

/// The tool or agent `key` names: `name` in the agent's namespace, or `namespace/name`.
fn target<'a>(config: &'a Config, agent: &Agent, key: &str) -> Result<Target<'a>, ResolveError> {
    let (ns, name) = key.split_once('/').unwrap_or((&agent.namespace, key));
    if let Some(t) = config.tool(ns, name) {
        return Ok(Target::Tool(&t.value));
    }
    if let Some(a) = config.agent(ns, name) {
        if a.value.name == agent.name && a.value.namespace == agent.namespace {
            return Err(ResolveError::SelfDelegation {
                key: key.to_owned(),
                agent: format!("{ns}/{name}"),
            });
        }
        return Ok(Target::Agent(&a.value));
    }
    let tools = config.tools.iter().map(|t| &t.value);
    let candidates = tools
        .filter(|t| t.namespace == ns)
        .map(|t| t.name.as_str())
        .chain(
            config
                .agents
                .iter()
                .filter(|a| a.value.namespace == ns)
                .map(|a| a.value.name.as_str()),
        );
    Err(ResolveError::Unknown {
        key: key.to_owned(),
        namespace: ns.to_owned(),
        suggestion: did_you_mean(name, candidates).map(str::to_owned),
    })
}

/// The functions capability `key` yields.
fn functions(key: &str, decl: &CapabilityDecl, target: Target) -> Vec<Function> {
    match target {
        Target::Tool(tool) => {
            let include = decl.config().and_then(|c| c.include.as_deref());
            tool.actions
                .iter()
                .enumerate()
                .filter(|(_, a)| includes(include, &a.name))
                .map(|(i, a)| Function {
                    name: function_name(key, tool, &a.name),
                    action: Some(i),
                })
                .collect()
        }
        Target::Agent(child) => vec![Function {
            name: sanitize(&child.name),
            action: None,
        }],
    }
}

/// Whether a capability's `include` keeps action or event `name`: it is unset, or lists the
/// name or `"*"`.
pub fn includes(include: Option<&[String]>, name: &str) -> bool {
    include.is_none_or(|inc| inc.iter().any(|i| i == name || i == "*"))
}

/// The function the LLM calls for action `action` of `tool` bound as capability `key`: the key
/// alone when the tool has one action, else `key_action`, both [`sanitize`]d. An action that
/// `include` hides has this name too where it is invoked by a step.
pub fn function_name(key: &str, tool: &Tool, action: &str) -> String {
    if tool.actions.len() == 1 {
        sanitize(key)
    } else {
        format!("{}_{}", sanitize(key), sanitize(action))
    }
}

/// `github-pr` → `github_pr`: the CEL-safe function name of a reference.
pub fn sanitize(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::path::Path;

    use super::*;

    /// A config of these manifests (which must load cleanly).
    fn config(text: &str) -> Config {
        let mut config = Config::default();
        let mut diags = Vec::new();
        let place = (Path::new("test.yaml"), Path::new("."));
        crate::load::load_text(text, place, &|_| None, &mut config, &mut diags);
        assert!(diags.is_empty(), "{diags:?}");
        config
    }

    fn tool(ns: &str, name: &str, actions: &[&str]) -> String {
        let actions: String = actions
            .iter()
            .map(|a| {
                format!(
                    "  - name: {a}\n    description: {a}.\n    execute: {{cel: {{expression: \"true\"}}}}\n"
                )
            })
            .collect();
        format!(
            "kind: commonagents.info/v1beta2/tool\nnamespace: {ns}\nname: {name}\ndescription: A tool.\nactions:\n{actions}---\n"
        )
    }

    fn agent(ns: &str, name: &str, capabilities: &str) -> String {
        format!(
            "kind: commonagents.info/v1beta2/agent\nnamespace: {ns}\nname: {name}\ndescription: An agent.\nprompt: Help.\ncapabilities:\n{capabilities}---\n"
        )
    }

    fn names<'a>(c: &'a Capability) -> Vec<&'a str> {
        c.functions.iter().map(|f| f.name.as_str()).collect()
    }

    #[test]
    fn tools_are_looked_up_before_agents_and_other_namespaces_by_their_id() {
        let text = [
            tool("eng", "helper", &["run"]),
            agent("eng", "helper", "  notes: \"*\"\n"),
            tool("eng", "notes", &["read"]),
            agent("ops", "pager", "  notes: \"*\"\n"),
            agent(
                "eng",
                "coder",
                "  helper: \"*\"\n  ops/pager: \"*\"\n  ops-pager: \"*\"\n",
            ),
        ]
        .concat();
        let config = config(&text);
        let coder = &config.agent("eng", "coder").unwrap().value;
        let r = resolve(&config, coder);
        let targets: Vec<(bool, String)> = r
            .capabilities
            .iter()
            .map(|c| (matches!(c.target, Target::Tool(_)), c.target.id()))
            .collect();
        assert_eq!(
            targets,
            [(true, "eng/helper".into()), (false, "ops/pager".into())]
        );
        assert_eq!(names(&r.capabilities[1]), ["pager"]);
        assert_eq!(r.capabilities[1].functions[0].action, None);
        assert_eq!(
            r.errors,
            [ResolveError::Unknown {
                key: "ops-pager".into(),
                namespace: "eng".into(),
                suggestion: None,
            }]
        );
    }

    #[test]
    fn include_keeps_the_actions_it_names_and_star_keeps_all() {
        let text = [
            tool("eng", "github-pr", &["create_pr", "list-prs", "merge"]),
            agent(
                "eng",
                "a",
                "  github-pr: {include: [merge, create_pr]}\n  eng/github-pr: {include: [\"*\"]}\n",
            ),
        ]
        .concat();
        let config = config(&text);
        let a = &config.agent("eng", "a").unwrap().value;
        let r = resolve(&config, a);
        let first = &r.capabilities[0];
        assert_eq!(names(first), ["github_pr_create_pr", "github_pr_merge"]);
        let actions: Vec<_> = first.functions.iter().map(|f| f.action).collect();
        assert_eq!(actions, [Some(0), Some(2)]);
        assert_eq!(first.aggregate().as_deref(), Some("github_pr"));
        assert_eq!(
            names(&r.capabilities[1]),
            [
                "eng_github_pr_create_pr",
                "eng_github_pr_list_prs",
                "eng_github_pr_merge"
            ]
        );
        assert!(r.errors.is_empty());
        assert_eq!(r.host_functions, HOST_FUNCTIONS);
    }

    #[test]
    fn a_single_action_tool_is_called_by_its_key_and_has_no_aggregate() {
        let text = [
            tool("eng", "slack-post", &["post"]),
            agent("eng", "a", "  slack-post: \"*\"\n"),
        ]
        .concat();
        let config = config(&text);
        let a = &config.agent("eng", "a").unwrap().value;
        let r = resolve(&config, a);
        assert_eq!(names(&r.capabilities[0]), ["slack_post"]);
        assert_eq!(r.capabilities[0].aggregate(), None);
    }

    #[test]
    fn colliding_function_names_are_errors_and_a_claimed_host_function_is_dropped() {
        let text = [
            tool("eng", "slack-post", &["post"]),
            tool("eng", "slack_post", &["post"]),
            tool("eng", "request-wakeup", &["wake"]),
            agent(
                "eng",
                "a",
                "  slack-post: \"*\"\n  slack_post: \"*\"\n  request-wakeup: \"*\"\n",
            ),
        ]
        .concat();
        let config = config(&text);
        let a = &config.agent("eng", "a").unwrap().value;
        let r = resolve(&config, a);
        assert_eq!(r.capabilities.len(), 3);
        let messages: Vec<String> = r.errors.iter().map(ToString::to_string).collect();
        assert_eq!(
            messages,
            [
                "function name `slack_post` of capability `slack_post` collides with capability `slack-post`",
                "function name `request_wakeup` of capability `request-wakeup` collides with the host's self-scheduling tools",
            ]
        );
        assert_eq!(r.host_functions, ["cancel_wakeup"]);
        assert_eq!(
            r.into_result().unwrap_err().key(),
            "slack_post",
            "the plan fails on the first error"
        );
    }

    #[test]
    fn an_agent_cannot_delegate_to_itself_and_a_near_miss_is_suggested() {
        let text = [
            tool("eng", "github-pr", &["create_pr"]),
            agent("eng", "a", "  a: \"*\"\n  github-prs: \"*\"\n"),
        ]
        .concat();
        let config = config(&text);
        let a = &config.agent("eng", "a").unwrap().value;
        let messages: Vec<String> = resolve(&config, a)
            .errors
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            messages,
            [
                "agent `eng/a` cannot delegate to itself",
                "capability `github-prs` names no tool or agent in namespace `eng`; did you mean `github-pr`?",
            ]
        );
    }

    #[test]
    fn tool_capability_finds_the_first_key_naming_the_tool() {
        let text = [
            tool("eng", "echo", &["say", "shout"]),
            agent("eng", "a", "  eng/echo: \"*\"\n  echo: \"*\"\n"),
        ]
        .concat();
        let config = config(&text);
        let a = &config.agent("eng", "a").unwrap().value;
        let echo = &config.tool("eng", "echo").unwrap().value;
        let r = resolve(&config, a);
        assert_eq!(r.tool_capability(echo).map(|c| c.key), Some("eng/echo"));
        assert_eq!(function_name("echo", echo, "shout"), "echo_shout");
    }
}
