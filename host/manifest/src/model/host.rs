//! `kind: agentmesh/v1/host`: the host's own configuration. Every field is optional.

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{ByteSize, Duration, EnvValue};

/// The host configuration (at most one per config dir).
/// ```yaml
/// kind: agentmesh/v1/host
/// listen: 127.0.0.1:8080
/// data_dir: .agentmesh
/// sources:
///   github: {signature: github, secret: {env: GITHUB_TRIGGER_SECRET}}
/// ```
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HostConfig {
    /// `agentmesh/v1/host`.
    pub kind: String,
    /// Address `serve` binds; a non-loopback address requires `api_tokens`.
    pub listen: Option<String>,
    /// The store, mounts and compiled-component cache (relative to the config dir).
    pub data_dir: Option<String>,
    /// The model of agents that name none.
    pub default_model: Option<String>,
    /// Bearer tokens for the task API.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub api_tokens: Vec<ApiToken>,
    /// Tool settings: namespace → tool → key → value.
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub settings: IndexMap<String, IndexMap<String, IndexMap<String, EnvValue>>>,
    /// Receive runtimes named by trigger `source.type`.
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub sources: IndexMap<String, SourceConfig>,
    /// LLM provider endpoints by provider name.
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub models: IndexMap<String, ModelProvider>,
    /// Auth providers for `{auth.<name>()}` in request templates, by name.
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub auth: IndexMap<String, AuthProvider>,
    /// The workspace mount.
    pub mount: Option<MountConfig>,
    /// Where the host keeps its state: sled in `data_dir` when absent.
    pub store: Option<StoreConfig>,
    /// Bounds on triggers, wakeups and webhooks.
    #[serde(default)]
    pub policy: Policy,
    /// When the LLM's view of a task is condensed (the log itself is never shortened).
    pub condensation: Option<Condensation>,
    /// The variables the loader read for `{env: NAME}` scalars (their values are secrets).
    #[serde(skip)]
    #[schemars(skip)]
    pub env_reads: Vec<String>,
}

/// Condensation: when the events the LLM sees pass a budget, the older ones are replaced in
/// its view by a summary it writes itself.
///
/// ```yaml
/// condensation: {max_events: 200, max_tokens: 60000, keep_recent: 20}
/// ```
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Condensation {
    /// Condense when the LLM would see more than this many conversation events.
    pub max_events: Option<u32>,
    /// Condense when the prompt is estimated at more than this many tokens.
    pub max_tokens: Option<u64>,
    /// Conversation events kept verbatim after a condensation (default 10).
    pub keep_recent: Option<u32>,
}

/// A bearer token of the task API.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ApiToken {
    /// Who the token authenticates, e.g. `user:ops@example.com`.
    pub subject: String,
    /// What it may do.
    pub role: Role,
    /// The environment variable holding the token.
    pub env: String,
}

/// An API role.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Everything.
    Admin,
    /// Own tasks only.
    AgentUser,
    /// Read everything, change nothing.
    ReadOnly,
}

/// A server-side receive runtime for triggers.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SourceConfig {
    /// How deliveries are authenticated (a webhook source).
    pub signature: Option<SignatureScheme>,
    /// The MCP resource updates this source fires on (an `mcp-event` source), instead of
    /// deliveries.
    pub mcp: Option<McpSource>,
    /// The HMAC secret, for `github` and `standard-webhooks`.
    pub secret: Option<EnvValue>,
    /// Accepted bearer tokens, for `bearer`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tokens: Vec<SourceToken>,
}

/// An `mcp-event` source: the resource updates an event of an MCP tool receives
/// (`receive.subscription.resources`) also fire the triggers of this source.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct McpSource {
    /// The tool, `namespace/name`.
    pub tool: String,
    /// Its event.
    pub event: String,
}

/// A signature scheme.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum SignatureScheme {
    /// `X-Hub-Signature-256: sha256=<hex HMAC>`.
    Github,
    /// `webhook-id`, `webhook-timestamp`, `webhook-signature: v1,<base64 HMAC>`.
    StandardWebhooks,
    /// `Authorization: Bearer <token>`.
    Bearer,
}

/// A bearer token of a source.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SourceToken {
    /// Recorded as the fire's `auth_subject`.
    pub subject: String,
    /// The environment variable holding the token.
    pub env: String,
}

/// An LLM provider endpoint.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ModelProvider {
    /// The API root, e.g. `https://api.openai.com/v1`.
    pub base_url: String,
    /// The API key.
    pub api_key: Option<EnvValue>,
    /// Per-request timeout (default 60s).
    pub timeout: Option<Duration>,
    /// Retries on 429 and 5xx (default 3).
    pub max_retries: Option<u32>,
}

/// An auth provider: what `{auth.<name>()}` in a request template yields, the value of an
/// `Authorization` header (`Bearer <token>`).
///
/// ```yaml
/// auth:
///   github: {type: bearer, token: {env: GITHUB_TOKEN}}
///   crm: {type: oauth2_client_credentials, token_url: https://id.example.com/token,
///         client_id: {env: CRM_ID}, client_secret: {env: CRM_SECRET}, scopes: [read]}
/// ```
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AuthProvider {
    /// `bearer` (a fixed token) or `oauth2_client_credentials` (a token fetched, cached until
    /// it expires, fetched again).
    #[serde(rename = "type")]
    pub kind: AuthKind,
    /// The token, for `bearer`.
    pub token: Option<EnvValue>,
    /// The token endpoint, for `oauth2_client_credentials`.
    pub token_url: Option<String>,
    /// The client id, for `oauth2_client_credentials`.
    pub client_id: Option<EnvValue>,
    /// The client secret, for `oauth2_client_credentials`.
    pub client_secret: Option<EnvValue>,
    /// The scopes asked for, for `oauth2_client_credentials` (none: the endpoint's default).
    pub scopes: Option<Vec<String>>,
    /// How long a token request may take (default 10s), for `oauth2_client_credentials`.
    pub timeout: Option<Duration>,
}

/// The type of an auth provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum AuthKind {
    /// A fixed bearer token.
    Bearer,
    /// The OAuth 2.0 client-credentials grant (RFC 6749 §4.4).
    #[serde(rename = "oauth2_client_credentials")]
    OAuth2ClientCredentials,
}

/// The workspace mount.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MountConfig {
    /// Only `file` in this host.
    pub backend: MountBackend,
    /// Where files are stored (relative to the config dir).
    pub root: Option<String>,
    /// Prefix templates with `{namespace}`, `{agent}`, `{task}`.
    pub path_prefixes: Option<PathPrefixes>,
}

/// A mount backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum MountBackend {
    /// Files under `root`.
    File,
}

/// The store.
///
/// ```yaml
/// store: {backend: postgres, url: {env: DATABASE_URL}, pool: 16}
/// ```
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StoreConfig {
    /// `sled` (embedded, in `data_dir`) or `postgres`.
    pub backend: StoreBackend,
    /// The database (`postgres` only): `postgres://user:password@host:port/db`, or
    /// `postgres:///db?host=/run/postgresql` over a Unix socket.
    pub url: Option<String>,
    /// Connections in the pool (`postgres` only; default 16).
    pub pool: Option<u32>,
    /// How long a host not heard from keeps its tasks (`postgres` only; default 10s): past
    /// it, another host on the database takes them over. Hosts renew it every third of it.
    pub lease: Option<Duration>,
}

/// A store backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum StoreBackend {
    /// sled in `data_dir`, the embedded default.
    Sled,
    /// A PostgreSQL database.
    Postgres,
}

/// The spec's prefix templates.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PathPrefixes {
    /// e.g. `/{namespace}/`.
    pub workspace: Option<String>,
    /// e.g. `/{namespace}/{agent}/`.
    pub agent: Option<String>,
    /// e.g. `/{namespace}/{agent}/{task}/`.
    pub task: Option<String>,
}

/// Bounds from the triggers spec; each overridable.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    /// Lifetime of self-schedules and API-created schedules (default 168h).
    pub trigger_ttl: Option<Duration>,
    /// How far ahead a wakeup may be (default 168h).
    pub max_wakeup_horizon: Option<Duration>,
    /// Pending wakeups per task (default 50).
    pub max_wakeups_per_task: Option<u32>,
    /// Fires per trigger per hour (default 60).
    pub trigger_max_per_hour: Option<u32>,
    /// Trigger-fired turns per user per day (default 1000).
    pub triggered_turns_per_user_per_day: Option<u32>,
    /// How long delivery ids are remembered (default 720h).
    pub dedupe_window: Option<Duration>,
    /// Largest webhook body (default 25 MiB).
    pub max_body_bytes: Option<ByteSize>,
    /// How much memory the request bodies being handled may take together (default
    /// 256 MiB), each counted as its bytes plus the most its JSON can take once parsed (up
    /// to ~6× the bytes for a typical webhook, far more for a body of tiny values). A body
    /// that does not fit beside the others gets a 503 (`busy`, retry after 1 s); one that
    /// could never fit, a 413. Applies at once on a reload.
    /// ```yaml
    /// policy: {max_body_memory: 1GiB}
    /// ```
    pub max_body_memory: Option<ByteSize>,
    /// Connections served at once (default 1024, and never more than half the process's
    /// file-descriptor limit); further clients wait in the listen backlog until one closes.
    /// Applies at the next restart.
    pub max_connections: Option<u32>,
    /// How long a client may take to send a request's head once its first byte arrived
    /// (default 10s); a slower one is disconnected. Applies at the next restart.
    pub header_timeout: Option<Duration>,
    /// How long a client may take to send a whole request body (default 60s); a slower one
    /// gets a 408. Applies at the next restart.
    pub body_timeout: Option<Duration>,
    /// How long a connection may stay open with no request in flight and no byte arriving
    /// (default 30s), a freshly accepted one included. Applies at the next restart.
    pub idle_timeout: Option<Duration>,
    /// How many Wasm component instances may be alive at once (default 100): tool sessions
    /// kept between calls, and calls in flight. The pool reserves address space for each up
    /// front. When all are taken, the least recently used idle tool session is evicted
    /// (Teardown) to make room; its task's next call opens a new session. Read at start.
    /// ```yaml
    /// policy: {max_instances: 500, instance_wait: 10s}
    /// ```
    pub max_instances: Option<u32>,
    /// How long a call waits for an instance when every one is busy in a call (default 10s);
    /// then it is an error the LLM sees, and the task goes on. Read at start.
    pub instance_wait: Option<Duration>,
    /// How many MCP sessions (an stdio server process, or a streamable-HTTP session) may be
    /// open at once (default 64). Each task has its own session of an `mcp` tool; when all
    /// are taken, the least recently used session not in a call is closed to make room (its
    /// task's next call opens a new one), and a call that finds every session in a call waits
    /// up to its `timeout` for one, then is an error the LLM sees. Applies at once on a reload.
    pub max_mcp_sessions: Option<u32>,
    /// How long a session of `serve`'s `/mcp` may go unused before it is closed and its task
    /// ends (default 5m): no request of it, and no answer or stream of it open — a call
    /// waiting for a review is not idle. Applies at the next restart.
    pub mcp_session_idle: Option<Duration>,
    /// How many sessions of `serve`'s `/mcp` one caller (a token's subject) may hold open at
    /// once (default 32, at least 1): an `initialize` beyond them is refused (429) until one
    /// of the caller's sessions ends. Applies at once on a reload.
    pub mcp_sessions_per_caller: Option<u32>,
    /// How many remote sessions (`stateful_session`) may be kept at once (default 1024). Each
    /// task has its own session of a tool's session block; when all are taken, the least
    /// recently used session not in a call is destroyed to make room (its task's next call
    /// creates a new one), and a call that finds every session in a call waits up to its
    /// `execute` request's `timeout` for one, then is an error the LLM sees. Applies at once on
    /// a reload.
    pub max_remote_sessions: Option<u32>,
}
