//! `kind: commonagents.info/v1beta2/tool`.

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::common::{ByteSize, Duration, ParameterSchema};

/// A tool: actions the LLM can call and events that resume tasks.
/// ```yaml
/// kind: commonagents.info/v1beta2/tool
/// namespace: engineering
/// name: github-pr
/// description: Pull requests.
/// wasm: {component: plugins/github_pr.wasm, allowed_hosts: ["https://api.github.com"]}
/// actions:
///   - {name: create_pr, description: Open a pull request}
/// ```
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Tool {
    /// `commonagents.info/v1beta2/tool`.
    pub kind: String,
    /// The namespace the tool belongs to.
    pub namespace: String,
    /// Unique within the namespace.
    pub name: String,
    /// What the tool does.
    pub description: String,
    /// Whether actions run synchronously.
    #[serde(default)]
    pub synchronous: bool,
    /// Operator configuration (never shown to the LLM), values from the host's `settings`.
    pub settings: Option<ParameterSchema>,
    /// Parameters shared by every action and event.
    pub parameters: Option<ParameterSchema>,
    /// Outbound functions.
    #[serde(default)]
    pub actions: Vec<Action>,
    /// Inbound signals.
    #[serde(default)]
    pub events: Vec<Event>,
    /// Shared `stateless_http` configuration inherited by actions.
    pub stateless_http: Option<HttpRequest>,
    /// Shared `stateful_session` configuration inherited by actions.
    pub stateful_session: Option<StatefulSession>,
    /// Shared `openapi` configuration.
    pub openapi: Option<OpenApi>,
    /// Shared `mcp` configuration.
    pub mcp: Option<Mcp>,
    /// A component shared by every action (an action without `execute` runs it).
    pub wasm: Option<WasmRuntime>,
}

/// An action: one function the LLM sees.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Action {
    /// The action's name.
    pub name: String,
    /// What the LLM is told it does.
    pub description: String,
    /// Per-action parameters, added to the root ones.
    pub parameters: Option<ParameterSchema>,
    /// Exactly one backend (optional when the tool has a top-level `wasm` block).
    pub execute: Option<Execute>,
}

/// The backend of an action: exactly one key.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Execute {
    /// A CEL expression.
    pub cel: Option<CelRuntime>,
    /// One HTTP request per call.
    pub stateless_http: Option<HttpRequest>,
    /// A remote session kept per task.
    pub stateful_session: Option<StatefulSession>,
    /// An OpenAPI operation.
    pub openapi: Option<OpenApi>,
    /// A tool of an MCP server.
    pub mcp: Option<Mcp>,
    /// A Kubernetes Job.
    pub kubernetes_job: Option<KubernetesJob>,
    /// A Wasm component (this host's runtime).
    pub wasm: Option<WasmRuntime>,
}

impl Tool {
    /// The backend `action` runs: its `execute` block with each runtime block completed,
    /// field by field, from the tool's shared block of the same runtime (the action's own
    /// fields win); for an action without `execute`, the tool's `wasm:` block, if any.
    pub fn execute_of(&self, action: &Action) -> Option<Execute> {
        let Some(own) = &action.execute else {
            return self.wasm.clone().map(|wasm| Execute {
                wasm: Some(wasm),
                ..Execute::default()
            });
        };
        Some(Execute {
            cel: own.cel.clone(),
            stateless_http: inherit(&own.stateless_http, &self.stateless_http),
            stateful_session: inherit(&own.stateful_session, &self.stateful_session),
            openapi: inherit(&own.openapi, &self.openapi),
            mcp: inherit(&own.mcp, &self.mcp),
            kubernetes_job: own.kubernetes_job.clone(),
            wasm: inherit(&own.wasm, &self.wasm),
        })
    }
}

/// A runtime block that can stand in an action's `execute` and, shared, at the tool's top
/// level (tool.md: the action's block inherits the shared one).
pub trait Inherit: Clone {
    /// This block (an action's) completed from `shared` (the tool's): a field set here wins,
    /// a field left out is the shared one; maps merge key by key.
    fn inherit(&self, shared: &Self) -> Self;
}

/// An action's block inherits the shared one only when the action names that runtime: a
/// shared block never turns an action into a runtime it did not choose.
fn inherit<T: Inherit>(own: &Option<T>, shared: &Option<T>) -> Option<T> {
    match (own, shared) {
        (Some(own), Some(shared)) => Some(own.inherit(shared)),
        (own, _) => own.clone(),
    }
}

/// A part of a block (a session's request): `own` completed from `shared` when both are
/// there, else whichever is.
fn complete<T: Inherit>(own: &Option<T>, shared: &Option<T>) -> Option<T> {
    match (own, shared) {
        (Some(own), Some(shared)) => Some(own.inherit(shared)),
        _ => or(own, shared),
    }
}

/// `own`, else `shared`.
fn or<T: Clone>(own: &Option<T>, shared: &Option<T>) -> Option<T> {
    own.as_ref().or(shared.as_ref()).cloned()
}

/// The shared entries, then the own ones replacing any of the same key; `same` compares keys
/// (header names compare without case).
fn merge(
    own: &Option<IndexMap<String, String>>,
    shared: &Option<IndexMap<String, String>>,
    same: fn(&str, &str) -> bool,
) -> Option<IndexMap<String, String>> {
    let (Some(own), Some(shared)) = (own, shared) else {
        return or(own, shared);
    };
    let mut out: IndexMap<String, String> = shared
        .iter()
        .filter(|(k, _)| !own.keys().any(|o| same(o, k)))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    out.extend(own.iter().map(|(k, v)| (k.clone(), v.clone())));
    Some(out)
}

impl Inherit for HttpRequest {
    fn inherit(&self, shared: &Self) -> Self {
        HttpRequest {
            method: self.method.or(shared.method),
            url: or(&self.url, &shared.url),
            headers: merge(&self.headers, &shared.headers, |a, b| {
                a.eq_ignore_ascii_case(b)
            }),
            body: or(&self.body, &shared.body),
            response_path: or(&self.response_path, &shared.response_path),
            timeout: self.timeout.or(shared.timeout),
        }
    }
}

impl Inherit for StatefulSession {
    fn inherit(&self, shared: &Self) -> Self {
        StatefulSession {
            create: complete(&self.create, &shared.create),
            extract: merge(&self.extract, &shared.extract, |a, b| a == b),
            execute: complete(&self.execute, &shared.execute),
            destroy: complete(&self.destroy, &shared.destroy),
            initialize: complete(&self.initialize, &shared.initialize),
            teardown: complete(&self.teardown, &shared.teardown),
        }
    }
}

impl Inherit for OpenApi {
    fn inherit(&self, shared: &Self) -> Self {
        OpenApi {
            url: or(&self.url, &shared.url),
            operation: or(&self.operation, &shared.operation),
            operation_id: or(&self.operation_id, &shared.operation_id),
            base_url: or(&self.base_url, &shared.base_url),
            security: merge(&self.security, &shared.security, |a, b| a == b),
            timeout: self.timeout.or(shared.timeout),
        }
    }
}

impl Inherit for Mcp {
    fn inherit(&self, shared: &Self) -> Self {
        Mcp {
            transport: self.transport.or(shared.transport),
            command: or(&self.command, &shared.command),
            args: or(&self.args, &shared.args),
            url: or(&self.url, &shared.url),
            headers: merge(&self.headers, &shared.headers, |a, b| {
                a.eq_ignore_ascii_case(b)
            }),
            env: merge(&self.env, &shared.env, |a, b| a == b),
            tool_name: or(&self.tool_name, &shared.tool_name),
            allowed_hosts: or(&self.allowed_hosts, &shared.allowed_hosts),
            timeout: self.timeout.or(shared.timeout),
            max_output: self.max_output.or(shared.max_output),
        }
    }
}

impl Inherit for WasmRuntime {
    fn inherit(&self, shared: &Self) -> Self {
        WasmRuntime {
            component: or(&self.component, &shared.component),
            allowed_hosts: or(&self.allowed_hosts, &shared.allowed_hosts),
            memory_limit: self.memory_limit.or(shared.memory_limit),
            timeout: self.timeout.or(shared.timeout),
            max_output: self.max_output.or(shared.max_output),
        }
    }
}

impl Execute {
    /// The names of the backends that are set.
    pub fn backends(&self) -> Vec<&'static str> {
        let mut out = Vec::new();
        let present = [
            ("cel", self.cel.is_some()),
            ("stateless_http", self.stateless_http.is_some()),
            ("stateful_session", self.stateful_session.is_some()),
            ("openapi", self.openapi.is_some()),
            ("mcp", self.mcp.is_some()),
            ("kubernetes_job", self.kubernetes_job.is_some()),
            ("wasm", self.wasm.is_some()),
        ];
        for (name, set) in present {
            if set {
                out.push(name);
            }
        }
        out
    }
}

/// `execute.cel`.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CelRuntime {
    /// CEL over `context`, `input`, `now`, `runtime` (and `mount` with a mount).
    pub expression: String,
}

/// An HTTP request; string fields are `{…}` templates.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HttpRequest {
    /// `GET`, `POST`, `PUT`, `PATCH` or `DELETE`.
    pub method: Option<HttpMethod>,
    /// The URL template.
    pub url: Option<String>,
    /// Header templates.
    pub headers: Option<IndexMap<String, String>>,
    /// A JSON body whose string leaves are templates.
    pub body: Option<Value>,
    /// JSONPath selecting the result from the response.
    pub response_path: Option<String>,
    /// Per-request timeout.
    pub timeout: Option<Duration>,
}

/// An HTTP method.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "UPPERCASE")]
pub enum HttpMethod {
    /// GET.
    Get,
    /// POST.
    Post,
    /// PUT.
    Put,
    /// PATCH.
    Patch,
    /// DELETE.
    Delete,
}

/// `stateful_session`: a remote session created on first use and destroyed at teardown.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StatefulSession {
    /// Creates the session.
    pub create: Option<HttpRequest>,
    /// Session key → JSONPath into the create response.
    pub extract: Option<IndexMap<String, String>>,
    /// The request made per call.
    pub execute: Option<HttpRequest>,
    /// Ends the session.
    pub destroy: Option<HttpRequest>,
    /// The tool page's name for `create`.
    pub initialize: Option<HttpRequest>,
    /// The tool page's name for `destroy`.
    pub teardown: Option<HttpRequest>,
}

/// `openapi`: an operation of an OpenAPI 3.0/3.1 document. In an action's `execute` every
/// field is optional: what it leaves out comes from the tool's top-level `openapi:` block.
/// ```yaml
/// openapi:
///   url: petstore.yaml            # or https://…; a path is relative to the manifest
///   base_url: "{settings.base}"   # instead of the document's first server
///   security: {api_key: "{settings.token}"}
/// actions:
///   - {name: list_pets, description: List pets., execute: {openapi: {operation: listPets}}}
/// ```
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OpenApi {
    /// Where the OpenAPI 3 document is: an `http(s)` URL or a path relative to the manifest.
    /// Not a template (tool.md: interpolation does not apply to it).
    pub url: Option<String>,
    /// The `operationId` of the operation this action calls.
    pub operation: Option<String>,
    /// The same as `operation` (the name this host first read); setting both is an error.
    pub operation_id: Option<String>,
    /// The base URL requests go to instead of the document's first `servers` entry; a
    /// template over `settings`.
    pub base_url: Option<String>,
    /// Security scheme name (of the document's `components.securitySchemes`) → the
    /// credential, a template over `settings`: an API key, a bearer token, or `user:password`
    /// for `http` basic.
    pub security: Option<IndexMap<String, String>>,
    /// Per-request timeout (default 30s).
    pub timeout: Option<Duration>,
}

impl OpenApi {
    /// The operation named, by `operation` or its older name `operation_id`.
    pub fn operation(&self) -> Option<&str> {
        self.operation.as_deref().or(self.operation_id.as_deref())
    }
}

/// `mcp`: the tools of an MCP server. In an action's `execute` every field is optional: what
/// it leaves out comes from the tool's top-level `mcp:` block.
/// ```yaml
/// mcp:
///   transport: stdio
///   command: node
///   args: [server/index.js]
///   env: {API_KEY: "{settings.api_key}"}
///   timeout: 30s
/// actions:
///   - {name: search, description: Search., execute: {mcp: {tool_name: web-search}}}
/// ```
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Mcp {
    /// `stdio`, `sse` or `http`.
    pub transport: Option<McpTransport>,
    /// The program, for stdio: a name looked up in `PATH`, or a path relative to the manifest.
    pub command: Option<String>,
    /// Its arguments.
    pub args: Option<Vec<String>>,
    /// The endpoint, for sse and http.
    pub url: Option<String>,
    /// Headers of the requests, for sse and http (templates over `settings`).
    pub headers: Option<IndexMap<String, String>>,
    /// Environment of the program, for stdio: all it gets (templates over `settings`).
    pub env: Option<IndexMap<String, String>>,
    /// The MCP tool an action calls (the later draft's field; default the action's name).
    pub tool_name: Option<String>,
    /// For sse and http: origins (`scheme://host[:port]`) a `url` with `{settings.*}` holes
    /// may render to. A `url` without holes is allowed by being written; one with holes needs
    /// this list, and an origin outside it is refused.
    pub allowed_hosts: Option<Vec<String>>,
    /// Wall-clock limit of the server's start (Initialize) and of each call (default 30s).
    pub timeout: Option<Duration>,
    /// Largest message the server may send, and so the largest result (default 4 MiB).
    pub max_output: Option<ByteSize>,
}

/// An MCP transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum McpTransport {
    /// A subprocess over stdin/stdout.
    Stdio,
    /// Server-sent events over HTTP (the legacy transport).
    Sse,
    /// Streamable HTTP.
    Http,
}

/// `kubernetes_job`: each call creates a Job, waits for it, returns its pod's log and exit
/// code, and deletes it.
/// ```yaml
/// execute:
///   kubernetes_job:
///     namespace: ci
///     api_server: "{settings.k8s_api}"     # absent: the cluster the host runs in
///     token: "{settings.k8s_token}"
///     timeout: 10m
///     spec:                                # the Job's `spec`; string leaves are templates
///       template:
///         spec:
///           containers:
///             - {name: test, image: "alpine:3", command: [sh, -c, "echo {parameters.suite}"]}
/// ```
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct KubernetesJob {
    /// The Kubernetes namespace (a template).
    pub namespace: String,
    /// The Job's `spec` (with its pod `template`); string leaves are templates.
    pub spec: Value,
    /// The API server's URL, a template over `settings` (absent: the in-cluster API, from
    /// the service account the host runs as).
    pub api_server: Option<String>,
    /// The bearer token, a template over `settings` (absent: the service account's token).
    pub token: Option<String>,
    /// How long a call waits for the Job to end before deleting it (default 10m).
    pub timeout: Option<Duration>,
    /// The most of the pod's log a result holds (default 1MiB).
    pub max_output: Option<ByteSize>,
}

/// A Wasm component of the `tool-plugin` world and its sandbox. In an action's `execute`
/// every field is optional: what it leaves out comes from the tool's top-level `wasm:` block.
/// ```yaml
/// wasm:
///   component: plugins/github_pr.wasm
///   allowed_hosts: ["https://api.github.com"]
///   memory_limit: 64MiB
///   timeout: 10s
/// ```
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WasmRuntime {
    /// Path of the component, relative to the manifest.
    pub component: Option<String>,
    /// Origins (`scheme://host[:port]`) the component may call; everything else is denied
    /// (absent everywhere: none).
    pub allowed_hosts: Option<Vec<String>>,
    /// Linear-memory limit.
    pub memory_limit: Option<ByteSize>,
    /// Wall-clock limit per call.
    pub timeout: Option<Duration>,
    /// Largest result the component may return.
    pub max_output: Option<ByteSize>,
}

/// An event: an inbound signal that resumes subscribed tasks.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Event {
    /// Unique within the tool.
    pub name: String,
    /// Shown in UIs, not to the LLM.
    pub description: Option<String>,
    /// The input injected into the task: a `{…}` template over `event`.
    pub message: String,
    /// How long a task stays subscribed after its last activity.
    pub timeout: Option<Duration>,
    /// Upper bound on any subscription timeout.
    pub max_timeout: Option<Duration>,
    /// Extra parameters usable in this event's filter.
    pub parameters: Option<ParameterSchema>,
    /// Exactly one delivery mechanism.
    pub receive: Receive,
}

/// How events arrive: exactly one key.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Receive {
    /// The platform POSTs to `/v1/webhooks/tools/{namespace}/{tool}`.
    pub webhook: Option<Webhook>,
    /// The host registers a push channel.
    pub subscription: Option<Subscription>,
    /// The host polls an endpoint.
    pub poll: Option<Poll>,
}

impl Receive {
    /// The names of the receive types that are set.
    pub fn kinds(&self) -> Vec<&'static str> {
        [
            ("webhook", self.webhook.is_some()),
            ("subscription", self.subscription.is_some()),
            ("poll", self.poll.is_some()),
        ]
        .into_iter()
        .filter_map(|(n, set)| set.then_some(n))
        .collect()
    }
}

/// `receive.webhook`.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Webhook {
    /// CEL over `event` and `parameters` (the allow lists).
    pub filter: Option<String>,
    /// A `{settings.*}` template giving the HMAC secret; signatures are checked when set.
    pub secret: Option<String>,
    /// An `event-filter-plugin` component that must also pass.
    pub filter_component: Option<String>,
}

/// `receive.subscription`.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Subscription {
    /// CEL over `event` and `parameters`.
    pub filter: Option<String>,
    /// Registers the channel (an HTTP subscription).
    pub subscribe: Option<HttpRequest>,
    /// Removes it (an HTTP subscription).
    pub unsubscribe: Option<HttpRequest>,
    /// On a tool with a shared `mcp` block: the URIs (templates over `settings`) of the
    /// server's resources the host subscribes to; each `notifications/resources/updated` for
    /// one of them is an event with payload `{"uri"}` (this host's extension).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<String>,
}

/// The shortest `receive.poll.interval` this host accepts.
pub const MIN_POLL_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

/// `receive.poll.interval` when the manifest gives none.
pub const DEFAULT_POLL_INTERVAL: std::time::Duration = std::time::Duration::from_secs(60);

/// `receive.poll`.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Poll {
    /// CEL over `event` and `parameters`.
    pub filter: Option<String>,
    /// The request method.
    pub method: Option<HttpMethod>,
    /// The URL template.
    pub url: String,
    /// Header templates.
    pub headers: Option<IndexMap<String, String>>,
    /// CEL over `response` (the answer's JSON body) and `poll` returning the list of items;
    /// each item not seen before is one event.
    pub detect: String,
    /// How often to poll (this host's extension; default 60s, at least 1s).
    pub interval: Option<Duration>,
    /// CEL over `item` giving the id an item is known by, so that it is delivered once (this
    /// host's extension; default: `item.id` when the item has one, else the whole item).
    pub id: Option<String>,
    /// CEL over `response` and `poll` giving the value the next request sees as
    /// `{poll.cursor}` (a `since`, a page token, the last id), kept in the store (this host's
    /// extension; without it `poll.cursor` stays `null`).
    pub cursor: Option<String>,
    /// The request's timeout (default 30s).
    pub timeout: Option<Duration>,
}

impl Poll {
    /// The templates of its request: the URL, then each header's value.
    pub fn templates(&self) -> impl Iterator<Item = &str> {
        std::iter::once(self.url.as_str())
            .chain(self.headers.iter().flatten().map(|(_, v)| v.as_str()))
    }

    /// The parameters its request reads (`{parameters.<name>}`), each once, in order; a
    /// template that does not parse reads none (the checker reports it).
    pub fn parameters_read(&self) -> Vec<String> {
        let mut names: Vec<String> = Vec::new();
        let templates = self
            .templates()
            .filter_map(|t| agentmesh_expr::Template::parse(t).ok());
        for template in templates {
            for (_, e) in template.expressions() {
                for name in e.members("parameters").into_iter().filter_map(|m| m.name) {
                    if !names.contains(&name) {
                        names.push(name);
                    }
                }
            }
        }
        names
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn tool(yaml: &str) -> Tool {
        let value: Value = serde_json::from_str(yaml).unwrap();
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn runtimes_that_do_not_run_yet_inherit_field_by_field_too() {
        let t = tool(
            r#"{"kind": "commonagents.info/v1beta2/tool", "namespace": "t", "name": "x",
            "description": "d",
            "mcp": {"transport": "stdio", "command": "srv", "env": {"A": "1", "B": "2"}},
            "stateful_session": {"create": {"method": "POST", "url": "http://s/new"},
                                 "execute": {"url": "http://s/run", "headers": {"X-A": "1"}}},
            "openapi": {"url": "http://s/openapi.json"},
            "actions": [
              {"name": "m", "description": "d", "execute": {"mcp": {"tool_name": "t", "env": {"B": "3"}}}},
              {"name": "s", "description": "d",
               "execute": {"stateful_session": {"execute": {"method": "PUT", "headers": {"x-a": "2"}}}}},
              {"name": "o", "description": "d", "execute": {"openapi": {"operation_id": "op"}}},
              {"name": "c", "description": "d", "execute": {"cel": {"expression": "1"}}}
            ]}"#,
        );
        let mcp = t.execute_of(&t.actions[0]).unwrap().mcp.unwrap();
        assert_eq!(mcp.command.as_deref(), Some("srv"));
        assert_eq!(mcp.tool_name.as_deref(), Some("t"));
        let env = mcp.env.unwrap();
        assert_eq!((env["A"].as_str(), env["B"].as_str()), ("1", "3"));

        let session = t
            .execute_of(&t.actions[1])
            .unwrap()
            .stateful_session
            .unwrap();
        assert_eq!(session.create.unwrap().url.as_deref(), Some("http://s/new"));
        let execute = session.execute.unwrap();
        assert_eq!(execute.method, Some(HttpMethod::Put));
        assert_eq!(execute.url.as_deref(), Some("http://s/run"));
        // Header names compare without case: the action's `x-a` replaces the shared `X-A`.
        assert_eq!(
            execute.headers.unwrap().into_iter().collect::<Vec<_>>(),
            [("x-a".to_owned(), "2".to_owned())]
        );

        let openapi = t.execute_of(&t.actions[2]).unwrap().openapi.unwrap();
        assert_eq!(openapi.url.as_deref(), Some("http://s/openapi.json"));
        assert_eq!(openapi.operation_id.as_deref(), Some("op"));

        // A shared block never adds a runtime the action did not choose.
        assert_eq!(t.execute_of(&t.actions[3]).unwrap().backends(), ["cel"]);
    }
}
