//! Config dirs in temp dirs, and the manifests several tests and benches write into them.
//!
//! The manifests are YAML text, as a user writes them, so that a test reads like the config
//! it runs. What differs from test to test (capabilities, guardrails, a message template)
//! is a parameter; the rest is fixed here and documented on each helper.

use std::path::{Path, PathBuf};

use tempfile::TempDir;

/// Writes `files` (name, text; a name may hold folders) into `dir`, creating the folders.
pub fn write(dir: &Path, files: &[(&str, &str)]) {
    std::fs::create_dir_all(dir).unwrap();
    for (name, text) in files {
        let path = dir.join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        std::fs::write(path, text).unwrap();
    }
}

/// The JSON array of `n` zeros: two bytes a value, the most values a body of its size holds
/// (the body whose parsed JSON takes the most memory for its size).
pub fn zeros(n: usize) -> Vec<u8> {
    format!("[{}0]", "0,".repeat(n - 1)).into_bytes()
}

/// A temp dir holding `files` (name, text): a config dir. A test that wants a data dir puts
/// it inside (`data/`; the config loader reads only YAML files).
pub fn config_dir(files: &[(&str, &str)]) -> TempDir {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), files);
    dir
}

/// A temp dir holding a config dir, `config/`, with `files` (name, text), and beside it the
/// place of a data dir, `data/`, left for the host to create: the temp dir (both go when it
/// is dropped), the config dir and the data dir.
pub fn dirs(files: &[(&str, &str)]) -> (TempDir, PathBuf, PathBuf) {
    let root = tempfile::tempdir().unwrap();
    let config = root.path().join("config");
    write(&config, files);
    let data = root.path().join("data");
    (root, config, data)
}

/// An agent `NAMESPACE/NAME` (`id`) on the scripted model, answering from `script.yaml` in the
/// config dir, with `rest` after it (top-level keys: capabilities, guardrails, …):
///
/// ```yaml
/// kind: commonagents.info/v1beta2/agent
/// namespace: NAMESPACE
/// name: NAME
/// description: Test agent.
/// prompt: Help.
/// model: scripted/script.yaml
/// ```
pub fn scripted_agent(id: &str, rest: &str) -> String {
    let (namespace, name) = id
        .split_once('/')
        .unwrap_or_else(|| panic!("agent id `{id}` is not NAMESPACE/NAME"));
    format!(
        "kind: commonagents.info/v1beta2/agent
namespace: {namespace}
name: {name}
description: Test agent.
prompt: Help.
model: scripted/script.yaml
{rest}"
    )
}

/// An agent `id` on the scripted model (`script`, a file in the config dir) whose calls of the
/// `echo` tool ([`echo_tool`]) wait for `user:ops` to approve them in a review.
pub fn reviewed_agent(id: &str, script: &str) -> String {
    scripted_agent(
        id,
        "capabilities:
  echo:
    before:
      - assert: \"review('user:ops')\"
        error_message: Not approved.
",
    )
    .replace("scripted/script.yaml", &format!("scripted/{script}"))
}

/// A tool `NAMESPACE/echo` whose one action, `say(text)`, answers `{'said': text}` (CEL).
pub fn echo_tool(namespace: &str) -> String {
    format!(
        "kind: commonagents.info/v1beta2/tool
namespace: {namespace}
name: echo
description: Echoes.
actions:
  - name: say
    description: Say it.
    parameters: {{type: object, properties: {{text: {{type: string}}}}}}
    execute:
      cel: {{expression: \"{{'said': input.text}}\"}}
"
    )
}

/// A tool `ops/pager`: one action, `ack` (answers `{'ok': true}`), and one event, `alert`,
/// received by webhook at `/v1/webhooks/tools/ops/pager`, signed as GitHub signs (HMAC) with
/// the secret in the tool's setting `secret` (which [`PAGER_HOST`] reads from the variable
/// `PAGER_SECRET`). `message` is the alert's message template; `filter`, when given, its CEL
/// filter.
pub fn pager_tool(message: &str, filter: Option<&str>) -> String {
    let filter = filter
        .map(|f| format!("        filter: \"{f}\"\n"))
        .unwrap_or_default();
    format!(
        "kind: commonagents.info/v1beta2/tool
namespace: ops
name: pager
description: Pages.
settings:
  type: object
  properties:
    secret: {{type: string}}
actions:
  - name: ack
    description: Acknowledge.
    execute:
      cel: {{expression: \"{{'ok': true}}\"}}
events:
  - name: alert
    message: \"{message}\"
    receive:
      webhook:
        secret: \"{{settings.secret}}\"
{filter}"
    )
}

/// A host config giving [`pager_tool`] its secret from the variable `PAGER_SECRET`.
pub const PAGER_HOST: &str = "kind: agentmesh/v1/host
settings:
  ops:
    pager:
      secret: {env: PAGER_SECRET}
";

/// A host config with API tokens, each read from a variable named after its subject: an
/// `admin` (`user:admin`, `T_ADMIN`), three `agent_user`s (`user:ops`, `user:alice`,
/// `user:bob`: `T_OPS`, `T_ALICE`, `T_BOB`) and a `read_only` (`svc:audit`, `T_AUDIT`).
/// [`API_TOKEN_ENV`] sets them.
pub const API_TOKENS: &str = "kind: agentmesh/v1/host
api_tokens:
  - {subject: \"user:admin\", role: admin, env: T_ADMIN}
  - {subject: \"user:ops\", role: agent_user, env: T_OPS}
  - {subject: \"user:alice\", role: agent_user, env: T_ALICE}
  - {subject: \"user:bob\", role: agent_user, env: T_BOB}
  - {subject: \"svc:audit\", role: read_only, env: T_AUDIT}
";

/// The variables [`API_TOKENS`] reads and the tokens they hold: `admin-token`, `ops-token`,
/// `alice-token`, `bob-token` and `audit-token`.
pub const API_TOKEN_ENV: [(&str, &str); 5] = [
    ("T_ADMIN", "admin-token"),
    ("T_OPS", "ops-token"),
    ("T_ALICE", "alice-token"),
    ("T_BOB", "bob-token"),
    ("T_AUDIT", "audit-token"),
];

/// A tool `NAMESPACE/slow` whose one action, `wait`, asks the HTTP server on `port` (one
/// started by [`crate::serve`] whose answer takes its time), then a `---` line.
pub fn slow_tool(namespace: &str, port: u16) -> String {
    format!(
        "kind: commonagents.info/v1beta2/tool
namespace: {namespace}
name: slow
description: Answers slowly.
actions:
  - name: wait
    description: Wait.
    execute: {{stateless_http: {{method: GET, url: \"http://127.0.0.1:{port}/slow\"}}}}
---
"
    )
}
