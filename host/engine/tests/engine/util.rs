//! A config dir, a store and an engine per test.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use agentmesh_engine::{Engine, NewTask, Run, TaskRecord, UserRef};
use agentmesh_model::event::{Event, EventKind};
use agentmesh_testkit::engine::write_config;
use serde_json::{Value, json};

pub struct Harness {
    pub dir: tempfile::TempDir,
    pub engine: Engine,
}

/// Writes `manifests` (and the model `script` as `script.yaml`) into a fresh config dir,
/// validates it, and starts an engine on a store in `DIR/data`.
pub fn harness(manifests: &str, script: &str) -> Harness {
    harness_with(manifests, &[("script.yaml", script)])
}

/// Like [`harness`], with any files (model scripts) beside the manifests.
pub fn harness_with(manifests: &str, files: &[(&str, &str)]) -> Harness {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), manifests, files);
    let engine = engine_at(dir.path());
    Harness { dir, engine }
}

/// An engine over the config dir and data dir at `dir` (a second one reopens the store).
pub fn engine_at(dir: &Path) -> Engine {
    engine_with_review_timeout(dir, Some(Duration::from_secs(5)))
}

/// Like [`engine_at`], with reviews timing out after `review_timeout`.
pub fn engine_with_review_timeout(dir: &Path, review_timeout: Option<Duration>) -> Engine {
    agentmesh_testkit::engine::engine_at(dir, review_timeout)
}

impl Harness {
    /// Runs a new task of `agent` with `message` to idle or termination.
    pub async fn run(&self, agent: &str, message: &str) -> Arc<TaskRecord> {
        self.run_input(agent, json!({"message": message})).await
    }

    pub async fn run_input(&self, agent: &str, input: Value) -> Arc<TaskRecord> {
        let task = self
            .engine
            .create_task(
                NewTask {
                    agent: agent.into(),
                    input: Some(input),
                    user: UserRef {
                        id: "user:alice@example.com".into(),
                        email: Some("alice@example.com".into()),
                    },
                },
                Run::Caller,
            )
            .await
            .unwrap();
        self.engine.run_until_idle(&task.id).await.unwrap()
    }

    pub fn events(&self, task: &TaskRecord) -> Vec<Event> {
        self.engine.events(&task.id, 0).unwrap()
    }
}

/// The results the LLM saw, in order: observations as their JSON, rejections as
/// `{"rejected": reason}`.
pub fn observations(events: &[Event]) -> Vec<Value> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ObservationEvent { result, .. } => Some(result.clone()),
            EventKind::UserRejectObservation { reason, .. } => Some(json!({"rejected": reason})),
            _ => None,
        })
        .collect()
}

/// The function names the LLM was given.
pub fn functions(events: &[Event]) -> Vec<String> {
    events
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::SystemPromptEvent { tools, .. } => {
                Some(tools.iter().map(|t| t.name.clone()).collect())
            }
            _ => None,
        })
        .unwrap_or_default()
}

/// The `limit_exceeded` state update's limit.
pub fn limit(events: &[Event]) -> Option<String> {
    events.iter().find_map(|e| match &e.kind {
        EventKind::ConversationStateUpdateEvent { key, value } if key == "limit_exceeded" => value
            .get("limit")
            .and_then(Value::as_str)
            .map(str::to_owned),
        _ => None,
    })
}

/// An agent `t/a` on the scripted model (`script.yaml`), with no capabilities.
pub use agentmesh_testkit::engine::SCRIPTED_AGENT;

/// [`ECHO_TOOL`] and an agent `t/a` on the scripted model (`script.yaml`), its manifest
/// ending with `rest` (capabilities, limits, parameters, …).
pub fn echo_agent(rest: &str) -> String {
    format!(
        "{ECHO_TOOL}kind: commonagents.info/v1beta2/agent
namespace: t
name: a
description: Test agent.
prompt: Work.
model: scripted/script.yaml
{rest}"
    )
}

/// An agent `t/researcher` on the scripted model `child.yaml`, for delegation.
pub const RESEARCHER: &str = "kind: commonagents.info/v1beta2/agent
namespace: t
name: researcher
description: Researches.
prompt: Research.
model: scripted/child.yaml
";

/// A tool `t/echo` with actions `say` (returns its input) and `shout`, root parameter
/// `owner`, plus whatever agent YAML follows.
pub const ECHO_TOOL: &str = "kind: commonagents.info/v1beta2/tool
namespace: t
name: echo
description: Echoes.
parameters:
  type: object
  properties:
    owner: {type: string, default: nobody}
actions:
  - name: say
    description: Returns its input.
    parameters:
      type: object
      properties:
        text: {type: string}
    execute:
      cel: {expression: \"{'owner': input.owner, 'text': input.text}\"}
  - name: shout
    description: Returns its input, loudly.
    parameters:
      type: object
      properties:
        text: {type: string}
    execute:
      cel: {expression: \"{'text': input.text + '!'}\"}
---
";
