//! The workspace mount as the host config places it: `mount.root` is relative to the config
//! dir, whatever directory `agentmesh` is started from.

use std::path::Path;

use crate::util::{Env, run_in};

/// A config dir with the mount under `files` (relative to it), tools and agent `all`, and the
/// scripted model's `script`.
fn write_config(dir: &Path, all: &str, script: &str) {
    std::fs::write(
        dir.join("host.yaml"),
        "kind: agentmesh/v1/host\nmount: {backend: file, root: files}\n",
    )
    .unwrap();
    std::fs::write(dir.join("all.yaml"), all).unwrap();
    std::fs::write(dir.join("script.yaml"), script).unwrap();
}

#[test]
fn a_relative_mount_root_is_under_the_config_dir_not_the_working_dir() {
    let dir = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    write_config(
        dir.path(),
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
        "responses:
  - tool_calls: [{name: files, arguments: {path: note.txt, text: remembered}}]
  - text: done
",
    );
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

/// A symbolic link put where the agent's prefix directory goes (by a component of an agent
/// with a wider mount, or by anything else with access to the root) would lead the prefix out
/// of the mount: neither the CEL functions nor a component's preopened directory follow it.
#[test]
fn a_link_in_place_of_the_prefix_directory_leads_nowhere() {
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.txt"), "kept outside the mount").unwrap();
    std::fs::create_dir_all(dir.path().join("files/t")).unwrap();
    std::os::unix::fs::symlink(outside.path(), dir.path().join("files/t/a")).unwrap();
    write_config(
        dir.path(),
        &format!(
            "kind: commonagents.info/v1beta2/tool
namespace: t
name: files
description: Reads and writes files.
actions:
  - name: read
    description: Read a file of the agent's mount.
    parameters: {{type: object, properties: {{path: {{type: string}}}}}}
    execute: {{cel: {{expression: \"mount.read(input.path)\"}}}}
  - name: save
    description: Save a file in the agent's mount.
    parameters: {{type: object, properties: {{path: {{type: string}}, text: {{type: string}}}}}}
    execute: {{cel: {{expression: \"mount.write(input.path, input.text)\"}}}}
---
{probe}kind: commonagents.info/v1beta2/agent
namespace: t
name: a
description: Reads files.
prompt: Read what you are told.
model: scripted/script.yaml
mount: agent
capabilities: {{files: \"*\", probe: \"*\"}}
",
            probe = crate::wasm::probe_tool()
        ),
        "responses:
  - tool_calls:
      - {name: files_read, arguments: {path: secret.txt}}
      - {name: files_save, arguments: {path: planted.txt, text: written through the link}}
      - {name: probe, arguments: {inside: /mount/secret.txt}}
  - text: done
",
    );
    let data = dir.path().join("data");
    let task = crate::util::run_json(dir.path(), "t/a", "go", &data, &[]);
    let log = crate::util::events_text(&data, &task);
    assert!(
        !log.contains("kept outside the mount"),
        "a file outside the mount was read through the link: {log}"
    );
    assert!(
        !outside.path().join("planted.txt").exists(),
        "a file was written outside the mount through the link"
    );
    let refusals = log.matches("symbolic links are not followed").count();
    assert!(
        refusals >= 3,
        "each of the three calls should be refused for the link: {log}"
    );
}
