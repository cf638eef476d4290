//! An engine in-process over a config dir, for the tests of the crates that drive one.

use std::path::Path;
use std::time::Duration;

use agentmesh_engine::{Engine, EngineOptions, NewTask, Plan, UserRef};

/// An agent `t/a` on the scripted model (`script.yaml` beside the manifests).
pub const SCRIPTED_AGENT: &str = "kind: commonagents.info/v1beta2/agent
namespace: t
name: a
description: Answers.
prompt: Answer.
model: scripted/script.yaml
";

/// A runtime with two workers, all drivers on, for code that drives an engine outside
/// `#[tokio::test]` (a property test's case, a bench).
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Writes `manifests` (as `manifests.yaml`) and `files` (model scripts) into `dir`.
pub fn write_config(dir: &Path, manifests: &str, files: &[(&str, &str)]) {
    std::fs::write(dir.join("manifests.yaml"), manifests).unwrap();
    for (name, text) in files {
        std::fs::write(dir.join(name), text).unwrap();
    }
}

/// An engine over the config dir at `dir` (which must validate) and a store in `dir/data` (a
/// second one reopens it), its reviews timing out after `review_timeout`.
pub fn engine_at(dir: &Path, review_timeout: Option<Duration>) -> Engine {
    let store = agentmesh_store::open(&dir.join("data")).unwrap();
    let options = EngineOptions {
        mount_root: dir.join("data/mounts"),
        review_timeout,
        ..EngineOptions::default()
    };
    engine_on(dir, store, options)
}

/// An engine over the config dir at `dir` (which must validate) and a store in `dir/data`
/// whose every call runs through `offload` ([`agentmesh_store::Offload`]: a function that does
/// not run a call fails it, so a test can make the store fail the calls it names).
pub fn engine_through(dir: &Path, offload: agentmesh_store::Offload) -> Engine {
    let sled = agentmesh_store::open(&dir.join("data")).unwrap();
    let store = std::sync::Arc::new(agentmesh_store::Offloaded::new(sled, offload));
    let options = EngineOptions {
        mount_root: dir.join("data/mounts"),
        ..EngineOptions::default()
    };
    engine_on(dir, store, options)
}

/// An engine over the config dir at `dir` (which must validate), on `store`, with `options`.
pub fn engine_on(
    dir: &Path,
    store: std::sync::Arc<dyn agentmesh_store::Backend>,
    options: EngineOptions,
) -> Engine {
    Engine::new(plan_at(dir), store, options)
}

/// The plan of the config dir at `dir`, which must validate (for [`Engine::reload`] too).
pub fn plan_at(dir: &Path) -> Plan {
    let report = agentmesh_manifest::validate(dir);
    let errors: Vec<String> = report
        .diagnostics
        .iter()
        .filter(|d| d.is_error())
        .map(ToString::to_string)
        .collect();
    assert!(errors.is_empty(), "config invalid:\n{}", errors.join("\n"));
    Plan::build(&report.config, &|_| None).unwrap()
}

/// A new task of `agent` for `user:alice`, its first input the message `message`.
pub fn new_task(agent: &str, message: &str) -> NewTask {
    NewTask {
        agent: agent.into(),
        input: Some(serde_json::json!({ "message": message })),
        user: UserRef {
            id: "user:alice".into(),
            email: None,
        },
    }
}
