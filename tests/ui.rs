//! Snapshot ("UI") tests of `agentmesh validate`.
//!
//! Every case in `tests/ui/invalid/` — a `NAME.yaml` file or a `NAME/` config dir — is
//! validated by the real binary; its output must equal `NAME.expected` byte for byte and the
//! exit code must be 1. Every case in `tests/ui/valid/` and every directory of `examples/` must
//! validate with exit 0. Run with `AGENTMESH_BLESS=1` to rewrite the `.expected` files from the
//! current output (then review the diff).

// Test code may panic: a panic is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let bless = std::env::var_os("AGENTMESH_BLESS").is_some();
    let mut passed = 0;
    let mut failures = Vec::new();

    let invalid = root.join("tests/ui/invalid");
    for case in cases(&invalid) {
        let name = case
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let stem = name.trim_end_matches(".yaml");
        let expected_path = invalid.join(format!("{stem}.expected"));
        let (code, out) = validate(&invalid, &name);
        if bless && let Err(e) = std::fs::write(&expected_path, &out) {
            failures.push(format!(
                "{name}: cannot write {}: {e}",
                expected_path.display()
            ));
        }
        let expected = std::fs::read_to_string(&expected_path).unwrap_or_default();
        if code != Some(1) {
            failures.push(format!("{name}: expected exit 1, got {code:?}\n{out}"));
        } else if out != expected {
            failures.push(format!(
                "{name}: output differs\n--- expected\n{expected}--- actual\n{out}"
            ));
        } else if !out.contains(": error: ") {
            failures.push(format!("{name}: no error reported"));
        } else {
            passed += 1;
        }
    }
    for orphan in orphans(&invalid) {
        failures.push(format!("{} has no case beside it", orphan.display()));
    }

    let mut valid: Vec<(PathBuf, String)> = cases(&root.join("tests/ui/valid"))
        .into_iter()
        .map(|p| (root.join("tests/ui/valid"), file_name(&p)))
        .collect();
    valid.extend(
        cases(&root.join("examples"))
            .into_iter()
            .filter(|p| p.is_dir())
            .map(|p| (root.join("examples"), file_name(&p))),
    );
    for (dir, name) in valid {
        let (code, out) = validate(&dir, &name);
        if code == Some(0) && out.starts_with("ok: ") {
            passed += 1;
        } else {
            failures.push(format!(
                "{}/{name}: expected ok, got {code:?}\n{out}",
                dir.display()
            ));
        }
    }

    for f in &failures {
        eprintln!("FAILED {f}\n");
    }
    println!("{passed} passed, {} failed", failures.len());
    if !failures.is_empty() {
        std::process::exit(1);
    }
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The `.yaml` files and directories directly inside `dir`, sorted.
fn cases(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| rd.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    out.retain(|p| p.is_dir() || p.extension().is_some_and(|e| e == "yaml"));
    out.sort();
    out
}

/// `.expected` files whose case is missing.
fn orphans(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = entry.path();
        if p.extension().is_some_and(|e| e == "expected") {
            let stem = p
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            if !dir.join(format!("{stem}.yaml")).exists() && !dir.join(&stem).is_dir() {
                out.push(p);
            }
        }
    }
    out
}

/// Runs `agentmesh validate NAME` in `dir`; the exit code and stdout.
fn validate(dir: &Path, name: &str) -> (Option<i32>, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_agentmesh"))
        .arg("validate")
        .arg(name)
        .current_dir(dir)
        .env_remove("AGENTMESH_UI_UNSET")
        .env("AGENTMESH_UI_SET", "set")
        .env("AGENTMESH_UI_EMPTY", "")
        .output();
    match output {
        Ok(o) => (
            o.status.code(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
        ),
        Err(e) => (None, format!("cannot run agentmesh: {e}")),
    }
}
