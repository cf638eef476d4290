//! The workspace mount as the host config places it: `mount.root` is relative to the config
//! dir, whatever directory `agentmesh` is started from.

use crate::util::{Env, run_in};

#[test]
fn a_relative_mount_root_is_under_the_config_dir_not_the_working_dir() {
    let dir = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("host.yaml"),
        "kind: agentmesh/v1/host\nmount: {backend: file, root: files}\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("all.yaml"),
        "kind: commonagents.info/v1beta2/tool
namespace: t
name: files
description: Saves files.
actions:
  - name: save
    description: Save a file in the agent's mount.
    parameters: {type: object, properties: {path: {type: string}, text: {type: string}}}
    execute: {cel: {expression: \"mount.write(input.path, input.text)\"}}
---
kind: commonagents.info/v1beta2/agent
namespace: t
name: a
description: Saves notes.
prompt: Save what you are told.
model: scripted/script.yaml
mount: agent
capabilities: {files: \"*\"}
",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("script.yaml"),
        "responses:
  - tool_calls: [{name: files, arguments: {path: note.txt, text: remembered}}]
  - text: done
",
    )
    .unwrap();
    let data = dir.path().join("data");
    let (code, out, err) = run_in(
        &Env {
            cwd: Some(elsewhere.path()),
            ..Env::default()
        },
        dir.path(),
        "t/a",
        "go",
        &data,
        &[],
    );
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out.trim(), "done");
    let file = dir.path().join("files/t/a/note.txt");
    assert_eq!(
        std::fs::read_to_string(&file).ok().as_deref(),
        Some("remembered"),
        "{} holds nothing",
        file.display()
    );
    assert!(!elsewhere.path().join("files").exists());
}
