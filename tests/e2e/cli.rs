//! The command line: `schema`, `validate` on generated input, exit codes.

use crate::util::agentmesh;

#[test]
fn schema_prints_json_schema_for_every_kind() {
    for kind in ["agent", "tool", "trigger", "schedule", "bundle", "host"] {
        let (code, out, err) = agentmesh(&["schema", kind]);
        assert_eq!(code, Some(0), "{kind}: {err}");
        let schema: serde_json::Value =
            serde_json::from_str(&out).unwrap_or_else(|e| panic!("{kind}: not JSON: {e}"));
        assert_eq!(schema["type"], "object", "{kind}");
        assert!(schema["properties"]["kind"]["const"].is_string(), "{kind}");
    }
}

#[test]
fn schema_of_unknown_kind_is_an_error() {
    let (code, _, err) = agentmesh(&["schema", "agnet"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("unknown kind `agnet`"), "{err}");
}

#[test]
fn validate_of_missing_dir_is_an_error_not_a_panic() {
    let (code, out, _) = agentmesh(&["validate", "/nonexistent/agentmesh-config"]);
    assert_eq!(code, Some(1));
    assert!(out.contains("no such file or directory"), "{out}");
}

#[test]
fn call_runs_one_action_as_a_task_would_and_reports_its_timings() {
    use agentmesh_testkit::fixtures::{dirs, echo_tool};

    let notes = crate::wasm::notes_tool();
    let echo = echo_tool("t");
    let (_root, dir, data) = dirs(&[("notes.yaml", &notes), ("echo.yaml", &echo)]);
    let dir = dir.to_str().unwrap();
    let data = data.to_str().unwrap();

    // A tool with one action is named alone; the result is on stdout, the timings on stderr.
    let (code, out, err) = agentmesh(&[
        "call",
        dir,
        "t/echo",
        "--input",
        r#"{"text": "hi"}"#,
        "--data",
        data,
    ]);
    assert_eq!(code, Some(0), "{out}{err}");
    let result: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(result, serde_json::json!({"said": "hi"}));
    assert!(err.contains("first call (instance and call)"), "{err}");

    // A Wasm tool's action, repeated in one session: the guest keeps its state between calls
    // of the session, and the latency's percentiles are reported.
    let put = r#"{"key": "k", "value": "v"}"#;
    let (code, out, err) = agentmesh(&[
        "call",
        dir,
        "t/notes.put",
        "--input",
        put,
        "--repeat",
        "20",
        "--data",
        data,
    ]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(err.contains("19 more calls: p50 "), "{err}");
    assert!(err.contains(" µs, p99 "), "{err}");

    // Mistakes say what and where; a failed call exits 1 with its error.
    for (args, said) in [
        (vec!["t/echoo"], "no tool `t/echoo`; did you mean `t/echo`?"),
        (
            vec!["t/notes"],
            "tool `t/notes` has several actions: name one (put, get)",
        ),
        (
            vec!["t/notes.delete"],
            "tool `t/notes` has no action `delete` (it has: put, get)",
        ),
        (vec!["echo"], "`echo` is not NAMESPACE/TOOL.ACTION"),
        (
            vec!["t/echo", "--input", "{not json"],
            "--input is not JSON",
        ),
        (vec!["t/echo", "--input", r#"{"text": 5}"#], "error: "),
    ] {
        let mut all = vec!["call", dir];
        all.extend(args.iter().copied());
        all.extend(["--data", data]);
        let (code, out, err) = agentmesh(&all);
        assert_eq!(code, Some(1), "{all:?}: {out}{err}");
        assert!(err.contains(said), "{all:?}: missing `{said}` in {err}");
    }
}
