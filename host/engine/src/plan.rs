//! The plan: a validated config compiled for running. Every expression and template is
//! compiled here once; tasks only evaluate. An agent's capabilities, functions and aggregates
//! are compiled from the manifest crate's `resolve`, as the checker saw them. A leaf of the
//! engine: it imports none of the modules that run it.
//!
//! - `analysis`: what a compiled list of steps reads (`Reads`, the context it needs);
//! - `auth`: the host config's auth providers ([`AuthPlan`]);
//! - `host_tools`: the host tools every agent has ([`HostTool`]);
//! - `mcp`: an `mcp` action compiled ([`McpPlan`]);
//! - `openapi`: an `openapi` action compiled, its document loaded ([`OpenApiPlan`]);
//! - `poll`: a `receive.poll` event compiled ([`PollPlan`]);
//! - `secrets`: the plan's secrets, collected when it is built;
//! - `session`: a `stateful_session` action compiled ([`SessionPlan`]);
//! - `triggers`: trigger sources, triggers and schedules compiled, and the default bounds.

mod analysis;
pub mod auth;
mod host_tools;
pub mod kubernetes;
pub mod mcp;
pub mod openapi;
pub mod poll;
mod secrets;
pub mod session;
pub mod triggers;

use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use agentmesh_expr::{Activation, Expression, Needs, Template};
use agentmesh_manifest::Config;
use agentmesh_manifest::credentials::CredentialError;
use agentmesh_manifest::model::agent::{Limits, MountScope};
use agentmesh_manifest::model::common::{
    EnvValue, MiddlewareStep, OnFail, ParameterSchema, Property,
};
use agentmesh_manifest::model::host::HostConfig;
use agentmesh_manifest::model::script::Script;
use agentmesh_manifest::model::tool::{Execute, HttpMethod, HttpRequest, Tool, WasmRuntime};
use agentmesh_manifest::resolve::{self, Resolution, function_name};
use agentmesh_model::event::ToolSchema;
use indexmap::IndexMap;
use serde_json::{Map, Value, json};

use crate::EngineError;

pub(crate) use analysis::{Reads, needs_of};
pub use auth::AuthPlan;
pub use host_tools::HostTool;
pub use mcp::{McpPlan, McpServer};
pub use openapi::OpenApiPlan;
pub use poll::PollPlan;
pub use session::SessionPlan;
pub use triggers::{SchedulePlan, SourcePlan, TriggerPlan};

/// Everything the engine runs, compiled.
pub struct Plan {
    /// Agents by `namespace/name`.
    pub agents: HashMap<String, Arc<AgentPlan>>,
    /// Tools by `namespace/name`.
    pub tools: HashMap<String, Arc<ToolPlan>>,
    /// The host config; `mount.root` is resolved against the config dir (where the host
    /// config says it is relative to), so a mount does not move with the working directory.
    pub host: HostConfig,
    /// The config dir.
    pub base_dir: PathBuf,
    /// Model scripts by path.
    pub scripts: HashMap<String, Script>,
    /// Triggers by `namespace/name`.
    pub triggers: HashMap<String, Arc<TriggerPlan>>,
    /// Schedules by `namespace/name`.
    pub schedules: HashMap<String, Arc<SchedulePlan>>,
    /// The host config's trigger sources by name, secrets resolved.
    pub sources: HashMap<String, Arc<SourcePlan>>,
    /// The host config's auth providers by name, credentials resolved.
    pub auth: HashMap<String, Arc<AuthPlan>>,
    /// The values never shown (CONTRACT §1), collected from the host config, the environment
    /// and the tools' settings when the plan is built.
    pub secrets: Arc<agentmesh_secrets::Secrets>,
}

/// An agent, compiled.
pub struct AgentPlan {
    /// The namespace.
    pub namespace: String,
    /// The name.
    pub name: String,
    /// `<provider>/<name>`.
    pub model: String,
    /// The system prompt.
    pub prompt: Template,
    /// Limits of each task.
    pub limits: Limits,
    /// The mount scope.
    pub mount: MountScope,
    /// The structured input.
    pub parameters: Option<ParameterSchema>,
    /// Its parameters but `message` as one compiled schema, checked on every input.
    pub input_schema: ParamsSchema,
    /// The capabilities, in manifest order.
    pub capabilities: Vec<CapabilityPlan>,
    /// The functions the LLM sees, in order.
    pub functions: Vec<Function>,
    /// Their schemas, as every LLM request sends them.
    pub tools: Arc<[agentmesh_model::event::ToolSchema]>,
    /// Aggregate context entries for tools with several actions: key → function names.
    pub aggregates: Vec<(String, Vec<String>)>,
    /// `guardrails.before`.
    pub guard_before: Steps,
    /// `guardrails.after`.
    pub guard_after: Steps,
    /// `exposes`.
    pub exposes: Vec<(String, Expression)>,
}

impl AgentPlan {
    /// `namespace/name`.
    pub fn id(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// The function the LLM calls `name`.
    pub fn function(&self, name: &str) -> Option<&Function> {
        self.functions.iter().find(|f| f.name == name)
    }
}

/// What a capability key refers to.
pub enum Target {
    /// A tool.
    Tool(Arc<ToolPlan>),
    /// An agent, by `namespace/name`.
    Agent(String),
}

/// One capability of an agent.
pub struct CapabilityPlan {
    /// The key as written.
    pub key: String,
    /// The tool or agent.
    pub target: Target,
    /// Active action and event names (`None`: all).
    pub include: Option<Vec<String>>,
    /// Bound parameters: name → CEL.
    pub bindings: Vec<(String, Expression)>,
    /// The agent's override of its events' subscription timeout.
    pub event_timeout: Option<Duration>,
    /// Steps before the first invocation in a task.
    pub before_first: Steps,
    /// Steps before every invocation.
    pub before: Steps,
    /// Steps after every invocation.
    pub after: Steps,
}

impl CapabilityPlan {
    /// Whether action or event `name` is active.
    pub fn includes(&self, name: &str) -> bool {
        resolve::includes(self.include.as_deref(), name)
    }

    /// The names of bound parameters.
    pub fn bound(&self) -> impl Iterator<Item = &str> {
        self.bindings.iter().map(|(n, _)| n.as_str())
    }
}

/// A function the LLM may call.
pub struct Function {
    /// The function name.
    pub name: String,
    /// Index into the agent's capabilities.
    pub capability: usize,
    /// For a tool: the action's index.
    pub action: Option<usize>,
    /// The LLM-facing schema (bound parameters removed; its description and parameters
    /// scrubbed of the plan's secrets).
    pub schema: ToolSchema,
    /// Set for a host tool every agent has (`request_wakeup`, `cancel_wakeup`); `capability`
    /// and `action` mean nothing then.
    pub host: Option<HostTool>,
}

/// A middleware, guardrail or trigger step, compiled.
pub struct Step {
    /// What the step does.
    pub kind: StepKind,
    /// Only for this action name.
    pub match_action: Option<String>,
    /// Skip unless true.
    pub condition: Option<Expression>,
    /// Told to the LLM on failure.
    pub error_message: Option<Template>,
    /// The failure policy (defaults applied).
    pub on_fail: OnFail,
}

/// A list of steps, with what they read of the context (worked out once, not per run).
pub struct Steps {
    list: Vec<Step>,
    /// The context the steps read.
    pub(crate) needs: Needs,
    /// A `wasm` step is in the list: it gets the context as JSON.
    pub(crate) keep_json: bool,
    /// The other variables the steps read.
    pub(crate) reads: Reads,
}

impl Steps {
    fn new(list: Vec<Step>) -> Steps {
        Steps {
            needs: needs_of(&list),
            reads: Reads::of(&list),
            keep_json: list.iter().any(|s| matches!(s.kind, StepKind::Wasm { .. })),
            list,
        }
    }
}

impl std::ops::Deref for Steps {
    type Target = [Step];

    fn deref(&self) -> &[Step] {
        &self.list
    }
}

/// The action of a step.
pub enum StepKind {
    /// Must be true.
    Assert(Expression),
    /// Calls another tool's action, without middleware.
    Invoke {
        /// The tool.
        tool: Arc<ToolPlan>,
        /// The action's index.
        action: usize,
        /// The step's parameter bindings (they win over the capability's).
        bindings: Vec<(String, Expression)>,
        /// The bindings of the agent's capability for the tool, if it has one.
        capability_bindings: Vec<(String, Expression)>,
        /// The function name the call is recorded under in `context.capabilities`: the
        /// agent's own name for it when the tool is a capability, else the name it would
        /// have as one.
        function: String,
    },
    /// Replaces the input (before) or output (after).
    Transform(Expression),
    /// A middleware component.
    Wasm {
        /// The component's path.
        path: PathBuf,
        /// The step's `config`, as JSON.
        config: Value,
        /// The step's `memory_limit` (bytes) and `timeout`; the plugin host's defaults when
        /// absent.
        memory_limit: Option<u64>,
        /// See `memory_limit`.
        timeout: Option<Duration>,
    },
}

/// A tool, compiled.
pub struct ToolPlan {
    /// The namespace.
    pub namespace: String,
    /// The name.
    pub name: String,
    /// Its actions.
    pub actions: Vec<ActionPlan>,
    /// The manifest.
    pub manifest: Tool,
    /// Its events received by webhook, by MCP subscription or by polling, compiled.
    pub events: Vec<EventPlan>,
    /// The server its MCP events subscribe to (its shared `mcp` block), when it has some.
    pub mcp_events: Option<Arc<mcp::McpPlan>>,
    /// Settings: declared defaults overlaid with the host config's values.
    pub settings: Map<String, Value>,
}

impl ToolPlan {
    /// `namespace/name`.
    pub fn id(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// The activation of templates over `settings` alone (an MCP server's `env`, `url`,
    /// `headers`, its events' `resources`).
    pub(crate) fn settings_activation(&self) -> Activation {
        let mut act = Activation::new();
        act.set("settings", Value::Object(self.settings.clone()));
        act
    }
}

/// A tool event received by webhook, by MCP subscription or by polling, compiled.
pub struct EventPlan {
    /// The event's name.
    pub name: String,
    /// The message template (`{event.payload.*}`).
    pub message: Template,
    /// The event's own subscription timeout.
    pub timeout: Option<Duration>,
    /// The longest timeout an agent may ask for.
    pub max_timeout: Option<Duration>,
    /// The receive type's `filter`, over `event` and `parameters` (allow-list sets); an event
    /// without one passes every event (`true`).
    pub filter: Arc<Expression>,
    /// `receive.webhook.secret`, rendered with `settings`.
    pub secret: Secret,
    /// `receive.webhook.filter_component`: an event-filter component.
    pub filter_component: Option<PathBuf>,
    /// How it arrives.
    pub via: Via,
}

/// How a tool event arrives.
pub enum Via {
    /// POSTed to the tool's webhook route.
    Webhook,
    /// As `notifications/resources/updated` for one of these resources (URI templates over
    /// `settings`) of the tool's MCP server (`receive.subscription.resources`).
    McpResources(Vec<Template>),
    /// As the new items of an endpoint the host polls (`receive.poll`).
    Poll(Arc<PollPlan>),
}

/// The key a tool event's deliveries are signed with.
#[derive(Debug, Clone)]
pub enum Secret {
    /// The event declares no secret: deliveries are not signed.
    None,
    /// The rendered secret.
    Key(String),
    /// The secret template could not be rendered (e.g. a setting the operator did not
    /// configure): every delivery is refused, and this says why.
    Unavailable(String),
}

/// An action, compiled.
pub struct ActionPlan {
    /// The action's name.
    pub name: String,
    /// What the LLM is told.
    pub description: String,
    /// Root and action parameters, merged.
    pub parameters: IndexMap<String, Property>,
    /// The same parameters as one JSON Schema, compiled.
    pub schema: ParamsSchema,
    /// How it runs.
    pub runtime: Runtime,
}

impl ActionPlan {
    /// The action's input from `params` (arguments with bindings merged over them): defaults
    /// filled in, every required parameter present, the whole checked against the parameters'
    /// schema. `Err` names the parameter and the rule it breaks.
    pub(crate) fn complete(&self, mut params: Map<String, Value>) -> Result<Value, String> {
        for (name, prop) in &self.parameters {
            if params.contains_key(name) {
                continue;
            }
            match &prop.default {
                // A `null` default: optional, and left out when absent.
                Some(Value::Null) => {}
                Some(d) => {
                    params.insert(name.clone(), d.clone());
                }
                None => return Err(format!("missing required argument `{name}`")),
            }
        }
        let input = Value::Object(params);
        self.schema.check(&input, "argument")?;
        Ok(input)
    }
}

/// A set of parameters (an action's, an agent's) as one compiled JSON Schema: the values a
/// call or a task's input carries are checked against it (`type`, `enum`, `const`, `required`,
/// nested `properties` and `items`, bounds).
pub struct ParamsSchema {
    validator: Option<jsonschema::Validator>,
    /// A parameter is a secret (`format: password`): messages do not show values.
    secret: bool,
}

impl ParamsSchema {
    /// Compiles `properties` (those with a default are optional).
    pub fn new<'a>(
        properties: impl IntoIterator<Item = (&'a String, &'a Property)>,
    ) -> Result<ParamsSchema, EngineError> {
        let mut props = Map::new();
        let mut required = Vec::new();
        let mut secret = false;
        for (name, p) in properties {
            let prop = p.json_schema();
            secret |= p.is_secret();
            if p.default.is_none() {
                required.push(Value::String(name.clone()));
            }
            props.insert(name.clone(), prop);
        }
        if props.is_empty() {
            return Ok(ParamsSchema {
                validator: None,
                secret,
            });
        }
        let schema = json!({"type": "object", "properties": props, "required": required});
        let validator = jsonschema::validator_for(&schema)
            .map_err(|e| EngineError::Config(format!("a parameter schema is invalid: {e}")))?;
        Ok(ParamsSchema {
            validator: Some(validator),
            secret,
        })
    }

    /// Checks `value`; `Err` says which `what` (argument, parameter) breaks which rule.
    pub(crate) fn check(&self, value: &Value, what: &str) -> Result<(), String> {
        let Some(validator) = &self.validator else {
            return Ok(());
        };
        let mut errors = validator.iter_errors(value).peekable();
        if errors.peek().is_none() {
            return Ok(());
        }
        let shown: Vec<String> = errors
            .take(3)
            .map(|e| {
                let at = e.instance_path().to_string();
                let rule = if self.secret {
                    e.masked().to_string()
                } else {
                    e.to_string()
                };
                match at.trim_start_matches('/').split_once('/') {
                    _ if at.is_empty() => rule,
                    Some((name, rest)) => format!("{what} `{name}` (at `/{rest}`): {rule}"),
                    None => format!("{what} `{}`: {rule}", at.trim_start_matches('/')),
                }
            })
            .collect();
        Err(shown.join("; "))
    }
}

/// An action's backend.
pub enum Runtime {
    /// A CEL expression.
    Cel(Expression),
    /// One HTTP request.
    Http(HttpPlan),
    /// A Wasm component of the `tool-plugin` world.
    Wasm {
        /// The component's path.
        path: PathBuf,
        /// Its sandbox.
        runtime: WasmRuntime,
    },
    /// A tool of an MCP server.
    Mcp(McpPlan),
    /// A Kubernetes Job per call.
    Kubernetes(kubernetes::JobPlan),
    /// A remote session per task.
    Session(Arc<SessionPlan>),
    /// An operation of an OpenAPI document.
    OpenApi(OpenApiPlan),
    /// A backend this host does not run yet.
    Unsupported(&'static str),
}

/// A `stateless_http` request, compiled.
pub struct HttpPlan {
    /// The method.
    pub method: HttpMethod,
    /// The URL template.
    pub url: Template,
    /// Header templates.
    pub headers: Vec<(String, Template)>,
    /// The body, string leaves compiled.
    pub body: Option<BodyTemplate>,
    /// Selects the result from the response.
    pub response_path: Option<String>,
    /// Per-request timeout.
    pub timeout: Duration,
    /// Whether any template reads `context` (it is only built then).
    pub uses_context: bool,
    /// The auth providers its templates name (`{auth.<provider>()}`), by name.
    pub auth: Vec<(String, Arc<AuthPlan>)>,
}

impl BodyTemplate {
    /// The JSON value with every template rendered in `act`.
    pub(crate) fn render(&self, act: &Activation) -> Result<Value, String> {
        Ok(match self {
            BodyTemplate::Text(t) => t.render_value(act).map_err(|e| e.message)?,
            BodyTemplate::List(items) => Value::Array(
                items
                    .iter()
                    .map(|i| i.render(act))
                    .collect::<Result<_, _>>()?,
            ),
            BodyTemplate::Map(entries) => {
                let mut m = Map::new();
                for (k, v) in entries {
                    m.insert(k.clone(), v.render(act)?);
                }
                Value::Object(m)
            }
            BodyTemplate::Literal(v) => v.clone(),
        })
    }

    pub(crate) fn templates<'a>(&'a self, out: &mut Vec<&'a Template>) {
        match self {
            BodyTemplate::Text(t) => out.push(t),
            BodyTemplate::List(items) => items.iter().for_each(|i| i.templates(out)),
            BodyTemplate::Map(entries) => entries.iter().for_each(|(_, v)| v.templates(out)),
            BodyTemplate::Literal(_) => {}
        }
    }
}

/// A JSON body whose string leaves are templates.
pub enum BodyTemplate {
    /// A templated string.
    Text(Template),
    /// A list.
    List(Vec<BodyTemplate>),
    /// A map.
    Map(Vec<(String, BodyTemplate)>),
    /// Any other literal.
    Literal(Value),
}

pub(crate) fn compile(src: &str) -> Result<Expression, EngineError> {
    Expression::compile(src).map_err(|e| EngineError::Config(format!("`{src}`: {e}")))
}

pub(crate) fn template(src: &str) -> Result<Template, EngineError> {
    Template::parse(src).map_err(|e| EngineError::Config(format!("`{src}`: {e}")))
}

impl Plan {
    /// Compiles a validated config. `env` reads `{env: X}` values.
    pub fn build(
        config: &Config,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Plan, EngineError> {
        let mut host = config.host_config();
        let base_dir = config.base_dir();
        if let Some(root) = host.mount.as_mut().and_then(|m| m.root.as_mut()) {
            *root = base_dir.join(&*root).display().to_string();
        }
        let auth = auth::auth_plans(&host, env)?;
        let mut tools = HashMap::new();
        let mut documents = openapi::Documents::default();
        for t in &config.tools {
            let plan = tool_plan(&t.value, &t.source, &host, &auth, env, &mut documents)?;
            tools.insert(plan.id(), Arc::new(plan));
        }
        let secrets = Arc::new(secrets::collect(&host, &tools, &auth, env)?);
        let mut agents = HashMap::new();
        for a in &config.agents {
            let plan = agent_plan(&a.value, &a.source, &host, config, &tools, &secrets)?;
            agents.insert(plan.id(), Arc::new(plan));
        }
        let mut sources = HashMap::new();
        for (name, source) in &host.sources {
            sources.insert(
                name.clone(),
                Arc::new(triggers::source_plan(name, source, env)?),
            );
        }
        let mut triggers = HashMap::new();
        for t in &config.triggers {
            let plan = triggers::trigger_plan(&t.value, &host)?;
            triggers.insert(plan.id(), Arc::new(plan));
        }
        let mut schedules = HashMap::new();
        for s in &config.schedules {
            let plan = triggers::schedule_plan(&s.value, &host)?;
            schedules.insert(plan.id(), Arc::new(plan));
        }
        Ok(Plan {
            agents,
            tools,
            triggers,
            schedules,
            sources,
            auth,
            host,
            base_dir,
            secrets,
            scripts: config
                .scripts
                .iter()
                .map(|(p, s)| (p.clone(), s.value.clone()))
                .collect(),
        })
    }
}

impl Plan {
    /// Every component the plan runs, as the name it runs under and its path, sorted, each
    /// pair once: tool actions under their tool's id, `wasm` middleware steps and
    /// event-filter components under their path. A file that two tools run is there once for
    /// each tool (and loaded once, see `Plugins::preload`).
    pub fn components(&self) -> Vec<(String, PathBuf)> {
        let mut out = BTreeSet::new();
        let mut add = |name: String, path: &PathBuf| {
            out.insert((name, path.clone()));
        };
        for tool in self.tools.values() {
            for action in &tool.actions {
                if let Runtime::Wasm { path, .. } = &action.runtime {
                    add(tool.id(), path);
                }
            }
            for event in &tool.events {
                if let Some(path) = &event.filter_component {
                    add(path.display().to_string(), path);
                }
            }
        }
        for agent in self.agents.values() {
            let caps = agent.capabilities.iter().flat_map(|c| {
                c.before_first
                    .iter()
                    .chain(c.before.iter())
                    .chain(c.after.iter())
            });
            for step in caps
                .chain(agent.guard_before.iter())
                .chain(agent.guard_after.iter())
            {
                if let StepKind::Wasm { path, .. } = &step.kind {
                    add(path.display().to_string(), path);
                }
            }
        }
        out.into_iter().collect()
    }
}

/// What keeps a source or an auth provider from resolving, as one configuration error.
pub(crate) fn credential_errors(errors: Vec<CredentialError>) -> EngineError {
    let said: Vec<String> = errors.into_iter().map(|e| e.message).collect();
    EngineError::Config(said.join("; "))
}

/// Resolves a literal or `{env: X}` value.
pub fn resolve_env(
    value: &EnvValue,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Value, EngineError> {
    match value {
        EnvValue::Literal(v) => Ok(v.clone()),
        EnvValue::Env { env: name } => env(name).map(Value::String).ok_or_else(|| {
            EngineError::Config(format!("environment variable `{name}` is not set"))
        }),
    }
}

fn tool_plan(
    tool: &Tool,
    source: &agentmesh_manifest::Source,
    host: &HostConfig,
    auth: &HashMap<String, Arc<AuthPlan>>,
    env: &dyn Fn(&str) -> Option<String>,
    documents: &mut openapi::Documents,
) -> Result<ToolPlan, EngineError> {
    let base_dir = source.base_dir.as_path();
    let mut settings = Map::new();
    if let Some(schema) = &tool.settings {
        for (k, p) in &schema.properties {
            if let Some(d) = &p.default {
                settings.insert(k.clone(), d.clone());
            }
        }
    }
    if let Some(values) = host
        .settings
        .get(&tool.namespace)
        .and_then(|ns| ns.get(&tool.name))
    {
        let declared = tool.settings.as_ref().map(|s| &s.properties);
        for (k, v) in values {
            let value = resolve_env(v, env)?;
            let from_env = matches!(v, EnvValue::Env { .. });
            let value = match declared.and_then(|d| d.get(k)) {
                Some(prop) => prop.setting(value, from_env),
                None => value,
            };
            settings.insert(k.clone(), value);
        }
    }
    let mut actions = Vec::new();
    for (index, action) in tool.actions.iter().enumerate() {
        let execute = tool.execute_of(action);
        let runtime = match execute.as_ref().and_then(|e| e.openapi.as_ref()) {
            Some(block) => {
                let at = openapi::At {
                    source,
                    index,
                    action: &action.name,
                };
                Runtime::OpenApi(openapi::openapi_plan(block, &at, documents, auth)?)
            }
            None => runtime(execute, &action.name, base_dir, auth)?,
        };
        let mut parameters = IndexMap::new();
        for schema in tool.parameters.iter().chain(action.parameters.iter()) {
            for (k, p) in &schema.properties {
                parameters.insert(k.clone(), p.clone());
            }
        }
        // An `openapi` action without parameters of its own takes the operation's.
        if let (Runtime::OpenApi(op), None) = (&runtime, &action.parameters) {
            for (k, p) in &op.derived {
                parameters.entry(k.clone()).or_insert_with(|| p.clone());
            }
        }
        actions.push(ActionPlan {
            name: action.name.clone(),
            description: action.description.clone(),
            schema: ParamsSchema::new(&parameters)?,
            parameters,
            runtime,
        });
    }
    let mut events = Vec::new();
    let mut mcp_events = None;
    for event in &tool.events {
        // What arrives how: the filter, the secret and filter component (webhooks only).
        let by_mcp = event
            .receive
            .subscription
            .as_ref()
            .filter(|s| !s.resources.is_empty());
        let (filter, secret, filter_component, via) = match (&tool.mcp, by_mcp, &event.receive.poll)
        {
            (Some(shared), Some(sub), _) => {
                if mcp_events.is_none() {
                    mcp_events = Some(Arc::new(mcp::mcp_plan(shared, &event.name, base_dir)?));
                }
                let resources = sub.resources.iter().map(|r| template(r));
                let via = Via::McpResources(resources.collect::<Result<_, _>>()?);
                (sub.filter.as_deref(), Secret::None, None, via)
            }
            (_, _, Some(poll)) => {
                let via = Via::Poll(Arc::new(poll::poll_plan(poll, &event.name, auth)?));
                (poll.filter.as_deref(), Secret::None, None, via)
            }
            _ => {
                let Some(webhook) = &event.receive.webhook else {
                    continue;
                };
                let secret = match &webhook.secret {
                    Some(src) => webhook_secret(src, &settings)?,
                    None => Secret::None,
                };
                let component = webhook.filter_component.as_ref().map(|c| base_dir.join(c));
                (webhook.filter.as_deref(), secret, component, Via::Webhook)
            }
        };
        events.push(EventPlan {
            name: event.name.clone(),
            message: template(&event.message)?,
            timeout: event.timeout.map(|d| d.0),
            max_timeout: event.max_timeout.map(|d| d.0),
            filter: Arc::new(compile(filter.unwrap_or("true"))?),
            secret,
            filter_component,
            via,
        });
    }
    Ok(ToolPlan {
        namespace: tool.namespace.clone(),
        name: tool.name.clone(),
        actions,
        manifest: tool.clone(),
        events,
        mcp_events,
        settings,
    })
}

/// A webhook event's `secret` template `src`, rendered with the tool's string `settings`;
/// one that does not render, or renders empty, refuses every delivery and says why. A setting
/// that is not a string does not render: a blank `secret:` in YAML is null, which a template
/// would write as the text `null`, a key anyone could sign with.
fn webhook_secret(src: &str, settings: &Map<String, Value>) -> Result<Secret, EngineError> {
    let strings: Map<String, Value> = settings
        .iter()
        .filter(|(_, v)| v.is_string())
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let mut act = Activation::new();
    act.set("settings", Value::Object(strings));
    Ok(match template(src)?.render(&act) {
        Ok(key) if !key.is_empty() => Secret::Key(key),
        Ok(_) => Secret::Unavailable(format!("the secret `{src}` is empty")),
        Err(e) => Secret::Unavailable(format!(
            "the secret `{src}` cannot be rendered from the tool's string settings: {e}"
        )),
    })
}

/// The backend of an action, from its `execute` block as [`Tool::execute_of`] completes it
/// from the tool's shared blocks.
fn runtime(
    execute: Option<Execute>,
    action: &str,
    base_dir: &std::path::Path,
    auth: &HashMap<String, Arc<AuthPlan>>,
) -> Result<Runtime, EngineError> {
    let Some(e) = execute else {
        return Ok(Runtime::Unsupported("none"));
    };
    Ok(if let Some(cel) = &e.cel {
        Runtime::Cel(compile(&cel.expression)?)
    } else if let Some(http) = &e.stateless_http {
        Runtime::Http(http_plan(http, auth)?)
    } else if let Some(session) = &e.stateful_session {
        Runtime::Session(Arc::new(session::session_plan(session, action, auth)?))
    } else if let Some(mcp) = &e.mcp {
        Runtime::Mcp(mcp::mcp_plan(mcp, action, base_dir)?)
    } else if let Some(job) = &e.kubernetes_job {
        Runtime::Kubernetes(kubernetes::job_plan(job)?)
    } else if let Some(wasm) = e.wasm {
        let component = wasm.component.as_ref().ok_or_else(|| {
            EngineError::Config(format!(
                "action `{action}`: `wasm` names no component, nor does the tool's `wasm:` block"
            ))
        })?;
        Runtime::Wasm {
            path: base_dir.join(component),
            runtime: wasm,
        }
    } else {
        Runtime::Unsupported("none")
    })
}

/// An HTTP request (already completed from the tool's shared block), compiled; `auth`: the
/// providers its `{auth.<provider>()}` may name.
fn http_plan(
    req: &HttpRequest,
    auth: &HashMap<String, Arc<AuthPlan>>,
) -> Result<HttpPlan, EngineError> {
    let url = req
        .url
        .as_deref()
        .ok_or_else(|| EngineError::Config("an HTTP request without a url".into()))?;
    let headers = req
        .headers
        .iter()
        .flatten()
        .map(|(k, v)| Ok((k.clone(), template(v)?)))
        .collect::<Result<Vec<_>, EngineError>>()?;
    let body = req.body.as_ref().map(body_template).transpose()?;
    let url = template(url)?;
    let mut all = vec![&url];
    all.extend(headers.iter().map(|(_, t)| t));
    if let Some(b) = &body {
        b.templates(&mut all);
    }
    let uses_context = reads_context(&all);
    Ok(HttpPlan {
        auth: providers_of(&all, auth, url.source())?,
        method: req.method.unwrap_or(HttpMethod::Get),
        url,
        uses_context,
        headers,
        body,
        response_path: req.response_path.clone(),
        timeout: req.timeout.map_or(Duration::from_secs(30), |d| d.0),
    })
}

/// The auth providers `templates` (of a request to `url`, as errors show it) name
/// (`{auth.<provider>()}`), each once, in order.
pub(crate) fn providers_of(
    templates: &[&Template],
    auth: &HashMap<String, Arc<AuthPlan>>,
    url: &str,
) -> Result<Vec<(String, Arc<AuthPlan>)>, EngineError> {
    let mut providers: Vec<(String, Arc<AuthPlan>)> = Vec::new();
    for member in templates
        .iter()
        .flat_map(|t| t.expressions())
        .flat_map(|(_, e)| e.members("auth"))
    {
        let name = member.name.ok_or_else(|| {
            EngineError::Config(format!(
                "`{url}`: `auth` is read by provider name (`auth.<provider>()`)"
            ))
        })?;
        if providers.iter().any(|(n, _)| *n == name) {
            continue;
        }
        let plan = auth
            .get(&name)
            .ok_or_else(|| EngineError::Config(format!("unknown auth provider `{name}`")))?;
        providers.push((name, Arc::clone(plan)));
    }
    Ok(providers)
}

/// Whether any of `templates` reads `context` (the variable is only built then).
pub(crate) fn reads_context(templates: &[&Template]) -> bool {
    templates
        .iter()
        .flat_map(|t| t.expressions())
        .any(|(_, e)| e.uses("context") || e.uses("c"))
}

pub(crate) fn body_template(v: &Value) -> Result<BodyTemplate, EngineError> {
    Ok(match v {
        Value::String(s) => BodyTemplate::Text(template(s)?),
        Value::Array(items) => {
            BodyTemplate::List(items.iter().map(body_template).collect::<Result<_, _>>()?)
        }
        Value::Object(m) => BodyTemplate::Map(
            m.iter()
                .map(|(k, v)| Ok((k.clone(), body_template(v)?)))
                .collect::<Result<_, EngineError>>()?,
        ),
        other => BodyTemplate::Literal(other.clone()),
    })
}

fn agent_plan(
    agent: &agentmesh_manifest::model::Agent,
    source: &agentmesh_manifest::Source,
    host: &HostConfig,
    config: &Config,
    tools: &HashMap<String, Arc<ToolPlan>>,
    secrets: &agentmesh_secrets::Secrets,
) -> Result<AgentPlan, EngineError> {
    let model = agent
        .model
        .clone()
        .or_else(|| host.default_model.clone())
        .ok_or_else(|| {
            EngineError::Manifest(agentmesh_manifest::Diagnostic {
                file: source.file.clone(),
                pos: source.node.entry("name").map(|(k, _)| k.pos).unwrap_or_default(),
                severity: agentmesh_manifest::Severity::Error,
                message: format!(
                    "agent `{}/{}` names no `model` and the host config has no `default_model`; set either",
                    agent.namespace, agent.name
                ),
            })
        })?;
    let resolution = resolve::resolve(config, agent).into_result().map_err(|e| {
        EngineError::Config(format!("agent `{}/{}`: {e}", agent.namespace, agent.name))
    })?;
    let scope = StepScope {
        agent,
        base_dir: &source.base_dir,
        tools,
        resolution: &resolution,
    };
    let mut capabilities = Vec::new();
    let mut functions = Vec::new();
    let mut aggregates = Vec::new();
    for resolved in &resolution.capabilities {
        let cap = resolved.decl.config();
        let steps = |list| step_list(list, OnFail::Block, &scope);
        let target = match resolved.target {
            resolve::Target::Tool(_) => {
                let id = resolved.target.id();
                let tool = tools.get(&id).ok_or_else(|| {
                    EngineError::Config(format!("capability `{}`: no tool `{id}`", resolved.key))
                })?;
                let bindings = cap.and_then(|c| c.bindings.as_ref());
                bound_parameters(source, resolved.key, bindings, tool)?;
                Target::Tool(Arc::clone(tool))
            }
            resolve::Target::Agent(_) => Target::Agent(resolved.target.id()),
        };
        let plan = CapabilityPlan {
            key: resolved.key.to_owned(),
            include: cap.and_then(|c| c.include.clone()),
            bindings: compile_bindings(cap.and_then(|c| c.bindings.as_ref()))?,
            event_timeout: cap.and_then(|c| c.event_timeout).map(|d| d.0),
            before_first: steps(cap.and_then(|c| c.before_first.as_ref()))?,
            before: steps(cap.and_then(|c| c.before.as_ref()))?,
            after: steps(cap.and_then(|c| c.after.as_ref()))?,
            target,
        };
        let index = capabilities.len();
        let bound: Vec<&str> = plan.bound().collect();
        for f in &resolved.functions {
            let mut schema = match (&plan.target, resolved.target, f.action) {
                (Target::Tool(tool), _, Some(action)) => {
                    let action = &tool.actions[action];
                    ToolSchema {
                        name: f.name.clone(),
                        description: action.description.clone(),
                        parameters: llm_schema(&action.parameters, &bound),
                    }
                }
                (_, resolve::Target::Agent(child), _) => ToolSchema {
                    name: f.name.clone(),
                    description: child.description.clone(),
                    parameters: json!({
                        "type": "object",
                        "properties": {"message": {"type": "string", "description": "What to ask the agent."}},
                        "required": ["message"]
                    }),
                },
                _ => {
                    return Err(EngineError::Config(format!(
                        "function `{}` of capability `{}` runs no action",
                        f.name, resolved.key
                    )));
                }
            };
            // What the LLM and MCP clients are sent of a function holds no secret (CONTRACT
            // §1), as the log's copy does not. Its name stays: it is the handle they call.
            secrets.scrub_string(&mut schema.description);
            secrets.scrub_json(&mut schema.parameters);
            functions.push(Function {
                name: f.name.clone(),
                capability: index,
                action: f.action,
                schema,
                host: None,
            });
        }
        if let Some(aggregate) = resolved.aggregate() {
            let names = resolved.functions.iter().map(|f| f.name.clone()).collect();
            aggregates.push((aggregate, names));
        }
        capabilities.push(plan);
    }
    let guard = |list| step_list(list, OnFail::LockTask, &scope);
    // Every agent can schedule itself (CONTRACT §5).
    for tool in HostTool::ALL {
        if resolution.host_functions.contains(&tool.name()) {
            functions.push(Function {
                name: tool.name().to_owned(),
                capability: usize::MAX,
                action: None,
                schema: tool.schema(),
                host: Some(tool),
            });
        }
    }
    let guardrails = agent.guardrails.clone().unwrap_or_default();
    Ok(AgentPlan {
        namespace: agent.namespace.clone(),
        name: agent.name.clone(),
        model,
        prompt: template(&agent.prompt)?,
        limits: agent.limits.clone().unwrap_or_default(),
        mount: agent.mount,
        parameters: agent.parameters.clone(),
        // `message` is checked on its own (a string or content parts, see `normalize_input`).
        input_schema: ParamsSchema::new(
            agent
                .parameters
                .iter()
                .flat_map(|p| &p.properties)
                .filter(|(name, _)| *name != "message"),
        )?,
        capabilities,
        tools: functions.iter().map(|f| f.schema.clone()).collect(),
        functions,
        aggregates,
        guard_before: guard(guardrails.before.as_ref())?,
        guard_after: guard(guardrails.after.as_ref())?,
        exposes: agent
            .exposes
            .iter()
            .flatten()
            .filter_map(|(k, v)| v.as_ref().map(|v| (k, v)))
            .map(|(k, v)| Ok((k.clone(), compile(v)?)))
            .collect::<Result<_, EngineError>>()?,
    })
}

/// The JSON Schema the LLM sees: the action's parameters without the bound ones.
fn llm_schema(params: &IndexMap<String, Property>, bound: &[&str]) -> Value {
    let mut properties = Map::new();
    let mut required = Vec::new();
    for (name, p) in params {
        if bound.contains(&name.as_str()) {
            continue;
        }
        properties.insert(name.clone(), p.json_schema());
        if p.default.is_none() {
            required.push(Value::String(name.clone()));
        }
    }
    json!({"type": "object", "properties": properties, "required": required})
}

/// What a step of an agent's needs to know of it and of the config.
struct StepScope<'a> {
    agent: &'a agentmesh_manifest::model::Agent,
    base_dir: &'a std::path::Path,
    tools: &'a HashMap<String, Arc<ToolPlan>>,
    /// The agent's capabilities, resolved.
    resolution: &'a Resolution<'a>,
}

fn step(
    s: &MiddlewareStep,
    default_on_fail: OnFail,
    scope: &StepScope,
) -> Result<Step, EngineError> {
    let (namespace, base_dir, tools) = (&scope.agent.namespace, scope.base_dir, scope.tools);
    let kind = if let Some(a) = &s.assert_expr {
        StepKind::Assert(compile(a)?)
    } else if let Some(t) = &s.transform {
        StepKind::Transform(compile(t)?)
    } else if let Some(target) = &s.invoke {
        let (tool_ref, action) = target
            .split_once(':')
            .ok_or_else(|| EngineError::Config(format!("bad invoke `{target}`")))?;
        let id = if tool_ref.contains('/') {
            tool_ref.to_owned()
        } else {
            format!("{namespace}/{tool_ref}")
        };
        let tool = tools
            .get(&id)
            .ok_or_else(|| EngineError::Config(format!("invoke names unknown tool `{id}`")))?;
        let action = tool
            .actions
            .iter()
            .position(|a| a.name == action)
            .ok_or_else(|| {
                EngineError::Config(format!("invoke names unknown action `{target}`"))
            })?;
        // The agent's capability for the tool, if any: its bindings apply under the step's,
        // and its key names the function.
        let capability = scope.resolution.tool_capability(&tool.manifest);
        let key = capability.map_or(tool_ref, |c| c.key);
        let function = function_name(key, &tool.manifest, &tool.actions[action].name);
        let capability_bindings = compile_bindings(
            capability
                .and_then(|c| c.decl.config())
                .and_then(|c| c.bindings.as_ref()),
        )?;
        StepKind::Invoke {
            tool: Arc::clone(tool),
            action,
            bindings: compile_bindings(s.bindings.as_ref())?,
            capability_bindings,
            function,
        }
    } else if let Some(w) = &s.wasm {
        StepKind::Wasm {
            path: base_dir.join(&w.component),
            config: w.config.clone().unwrap_or(Value::Object(Map::new())),
            memory_limit: w.memory_limit.map(|b| b.0),
            timeout: w.timeout.map(|d| d.0),
        }
    } else {
        return Err(EngineError::Config("a step without an action".into()));
    };
    Ok(Step {
        kind,
        match_action: s.match_action.clone(),
        condition: s.condition.as_deref().map(compile).transpose()?,
        error_message: s.error_message.as_deref().map(template).transpose()?,
        on_fail: s.on_fail.unwrap_or(default_on_fail),
    })
}

/// Compiles a list of steps (none when absent).
fn step_list(
    list: Option<&Vec<MiddlewareStep>>,
    default_on_fail: OnFail,
    scope: &StepScope,
) -> Result<Steps, EngineError> {
    let list = list
        .into_iter()
        .flatten()
        .map(|s| step(s, default_on_fail, scope))
        .collect::<Result<_, _>>()?;
    Ok(Steps::new(list))
}

/// Each binding of capability `key` (of the agent in `source`) names a parameter of `tool`:
/// one it declares, or one an `openapi` action takes from its operation (which the manifest
/// checks cannot see).
fn bound_parameters(
    source: &agentmesh_manifest::Source,
    key: &str,
    bindings: Option<&IndexMap<String, String>>,
    tool: &ToolPlan,
) -> Result<(), EngineError> {
    let manifest = &tool.manifest;
    let declared = manifest
        .parameters
        .iter()
        .chain(manifest.events.iter().filter_map(|e| e.parameters.as_ref()))
        .flat_map(|schema| schema.properties.keys())
        .chain(tool.actions.iter().flat_map(|a| a.parameters.keys()));
    let declared: BTreeSet<&String> = declared.collect();
    let Some(unknown) = bindings
        .into_iter()
        .flat_map(|b| b.keys())
        .find(|name| !declared.contains(name))
    else {
        return Ok(());
    };
    let pos = source
        .node
        .get("capabilities")
        .and_then(|c| c.get(key))
        .and_then(|c| c.get("bindings"))
        .and_then(|b| b.get(unknown))
        .map(|n| n.pos)
        .unwrap_or_default();
    let names: Vec<&str> = declared.iter().map(|n| n.as_str()).collect();
    let hint = agentmesh_manifest::suggest::did_you_mean(unknown, names.iter().copied())
        .map(|s| format!("; did you mean `{s}`?"))
        .unwrap_or_else(|| format!(" (it has: {})", names.join(", ")));
    Err(EngineError::Manifest(agentmesh_manifest::Diagnostic {
        file: source.file.clone(),
        pos,
        severity: agentmesh_manifest::Severity::Error,
        message: format!(
            "binding `{unknown}` is not a parameter of tool `{}`{hint}",
            tool.id()
        ),
    }))
}

/// Compiles a map of parameter bindings, in order.
fn compile_bindings(
    bindings: Option<&IndexMap<String, String>>,
) -> Result<Vec<(String, Expression)>, EngineError> {
    bindings
        .into_iter()
        .flatten()
        .map(|(k, v)| Ok((k.clone(), compile(v)?)))
        .collect()
}
