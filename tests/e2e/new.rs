//! `agentmesh new tool NAME --lang rust|python|js`: each scaffold, written to a temporary
//! directory, is built and run by the commands its own README gives — as a newcomer would,
//! with `agentmesh` on the `PATH` — and its agent's task gets the example action's answer.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

use crate::AGENTMESH;
use crate::util::{Env, agentmesh_in, events, observations};

/// The commands of the README's first `sh` block (a `  # comment` after a command dropped).
fn readme_commands(project: &Path) -> Vec<String> {
    let readme = std::fs::read_to_string(project.join("README.md")).unwrap();
    let block = readme
        .split("```sh\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .unwrap_or_else(|| panic!("README.md has no ```sh block:\n{readme}"));
    block
        .lines()
        .map(|line| match line.find("  #") {
            Some(at) => line[..at].trim(),
            None => line.trim(),
        })
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .map(str::to_owned)
        .collect()
}

/// Runs `command` with `sh` in `project`, `agentmesh` first on the `PATH` and no
/// `CARGO_TARGET_DIR` (the manifest names the component where a plain build puts it); panics
/// with its output unless it succeeds.
fn sh(project: &Path, command: &str) -> String {
    let bin_dir = Path::new(AGENTMESH).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new("sh")
        .args(["-c", command])
        .current_dir(project)
        .env("PATH", path)
        .env_remove("CARGO_TARGET_DIR")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "`{command}` in {} failed:\n{stdout}\n{}",
        project.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// Writes the `lang` scaffold of tool `name`, follows its README (build, validate, run), then
/// checks the task's observation of `greet` and one `agentmesh call`.
fn scaffold_builds_and_runs(lang: &str, name: &str) {
    let parent = tempfile::tempdir().unwrap();
    let project = parent.path().join(name);
    let (code, out, err) = agentmesh_in(
        &Env {
            cwd: Some(parent.path()),
            vars: &[],
        },
        &["new", "tool", name, "--lang", lang],
    );
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("agentmesh validate ."), "{out}");

    let commands = readme_commands(&project);
    assert_eq!(commands.len(), 3, "build, check, run: {commands:?}");
    assert!(
        commands[1].starts_with("agentmesh validate"),
        "{commands:?}"
    );
    assert!(commands[2].starts_with("agentmesh run"), "{commands:?}");
    sh(&project, &commands[0]);
    sh(&project, &commands[1]);
    // The run command as the README gives it, with `--json` to read back its task.
    let printed = sh(&project, &format!("{} --json", commands[2]));
    let task: Value = serde_json::from_str(printed.trim()).unwrap();
    assert_eq!(task["status"], "idle", "{task}");
    let data = project.join(".agentmesh");
    let seen = observations(&events(&data, &task));
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0]["greeting"], "Hello, Ada!", "{seen:?}");
    assert_eq!(seen[0]["count"], 1, "{seen:?}");

    let called = sh(
        &project,
        &format!("agentmesh call . dev/{name}.greet --input '{{\"name\":\"Grace\"}}'"),
    );
    let answer: Value = serde_json::from_str(called.trim()).unwrap();
    assert_eq!(answer["greeting"], "Hello, Grace!", "{called}");
}

#[test]
fn the_rust_scaffold_builds_validates_and_runs_as_its_readme_says() {
    scaffold_builds_and_runs("rust", "word-count");
}

#[test]
fn the_python_scaffold_builds_validates_and_runs_as_its_readme_says() {
    scaffold_builds_and_runs("python", "word-count");
}

#[test]
fn the_js_scaffold_builds_validates_and_runs_as_its_readme_says() {
    scaffold_builds_and_runs("js", "word-count");
}

#[test]
fn a_bad_name_or_a_directory_in_the_way_writes_nothing() {
    let parent = tempfile::tempdir().unwrap();
    let env = Env {
        cwd: Some(parent.path()),
        vars: &[],
    };
    for bad in ["Word", "9lives", "a_b", "a--b", "trailing-"] {
        let (code, _, err) = agentmesh_in(&env, &["new", "tool", bad, "--lang", "rust"]);
        assert_eq!(code, Some(1), "{bad}: {err}");
        assert!(err.contains("is not a tool name"), "{bad}: {err}");
    }
    let (code, _, err) = agentmesh_in(&env, &["new", "tool", "x", "--lang", "cobol"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("rust, python, js"), "{err}");
    assert_eq!(std::fs::read_dir(parent.path()).unwrap().count(), 0);

    std::fs::create_dir(parent.path().join("taken")).unwrap();
    std::fs::write(parent.path().join("taken/keep.txt"), "mine").unwrap();
    let (code, _, err) = agentmesh_in(&env, &["new", "tool", "taken", "--lang", "rust"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("exists and is not an empty directory"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_dir(parent.path().join("taken"))
            .unwrap()
            .count(),
        1
    );
}
