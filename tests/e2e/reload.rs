//! Hot reload of the config dir: replacing a component changes behaviour without a restart;
//! replacing it with garbage, or with a component of another world, keeps the last good
//! version and reports why.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::server::{Server, wait_for};

fn guest(name: &str) -> PathBuf {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(format!("guests/target/wasm32-wasip2/release/{name}.wasm"));
    assert!(
        path.is_file(),
        "{} is missing: build the guests first",
        path.display()
    );
    path
}

fn config(dir: &Path) {
    std::fs::write(
        dir.join("manifests.yaml"),
        "kind: commonagents.info/v1beta2/tool
namespace: lab
name: box
description: Whatever component is in box.wasm.
wasm:
  component: box.wasm
actions:
  - name: list
    description: List.
---
kind: commonagents.info/v1beta2/agent
namespace: lab
name: user
description: Calls the box.
prompt: Call the box.
model: scripted/script.yaml
capabilities:
  box: \"*\"
",
    )
    .unwrap();
    std::fs::write(
        dir.join("script.yaml"),
        "responses:\n  - tool_calls: [{name: box, arguments: {}}]\n  - text: done\n",
    )
    .unwrap();
}

/// Runs a new task calling the box; returns the observation's result.
fn call_box(server: &Server) -> Value {
    let id = server.create_task(&json!({"agent": "lab/user", "input": {"message": "go"}}));
    server.wait_for_event(&id, "ObservationEvent")["result"].clone()
}

fn box_hash(server: &Server) -> Option<String> {
    let status = server.request("GET", "/v1/status").send().json();
    status["components"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "lab/box")
        .and_then(|c| c["hash"].as_str().map(str::to_owned))
}

#[test]
fn a_replaced_component_is_swapped_in_and_garbage_keeps_the_last_good_one() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("config");
    std::fs::create_dir_all(&dir).unwrap();
    config(&dir);
    std::fs::copy(guest("notes"), dir.join("box.wasm")).unwrap();
    let server = Server::start(&dir, &root.path().join("data"), &[]);
    let v1 = box_hash(&server).expect("the component is loaded at start");
    assert_eq!(
        call_box(&server),
        json!({"keys": []}),
        "v1 is the notes tool"
    );

    // Replace it (write aside, then rename, as deployments do).
    std::fs::copy(guest("test_probe"), dir.join("box.wasm.new")).unwrap();
    std::fs::rename(dir.join("box.wasm.new"), dir.join("box.wasm")).unwrap();
    let replaced = Instant::now();
    let v2 = wait_for(Duration::from_secs(2), || {
        box_hash(&server).filter(|h| *h != v1)
    });
    assert!(v2.is_some(), "the new version is in force within 2 s");
    eprintln!("swapped in after {:?}", replaced.elapsed());
    let probe = call_box(&server);
    assert!(
        probe["error"]
            .as_str()
            .is_some_and(|e| e.contains("refused")),
        "v2 is the probe: {probe}"
    );

    // Garbage: the last good version stays, and the error shows in the status.
    std::fs::write(dir.join("box.wasm"), b"\0asm garbage").unwrap();
    let error = wait_for(Duration::from_secs(5), || {
        let status = server.request("GET", "/v1/status").send().json();
        status["reload"]["last_error"]["message"]
            .as_str()
            .map(str::to_owned)
    })
    .expect("the failed reload is reported");
    assert!(error.contains("box.wasm"), "{error}");
    assert_eq!(box_hash(&server), v2);
    let still = call_box(&server);
    assert!(
        still["error"]
            .as_str()
            .is_some_and(|e| e.contains("refused")),
        "the probe still answers: {still}"
    );

    // A component of another world (an event filter as the tool) is refused as well.
    std::fs::copy(guest("label_filter"), dir.join("box.wasm.new")).unwrap();
    std::fs::rename(dir.join("box.wasm.new"), dir.join("box.wasm")).unwrap();
    let error = wait_for(Duration::from_secs(5), || {
        let status = server.request("GET", "/v1/status").send().json();
        status["reload"]["last_error"]["message"]
            .as_str()
            .filter(|m| m.contains("event-filter-plugin"))
            .map(str::to_owned)
    })
    .expect("the refused reload is reported");
    assert!(error.contains("must implement `tool-plugin`"), "{error}");
    assert_eq!(box_hash(&server), v2);
}
