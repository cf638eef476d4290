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
