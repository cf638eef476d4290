//! The `redact` middleware component: replacing fields, denying, passing.

use agentmesh_plugins::{Limits, MiddlewareCall, MiddlewareVerdict, PluginError, Sandbox};
use serde_json::{Value, json};

use crate::util::load;

fn call<'a>(config: &'a str, input: &'a str) -> MiddlewareCall<'a> {
    MiddlewareCall {
        task_id: "t_mw",
        config,
        context: "{}",
        input,
        event: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_replaces_configured_fields_at_any_depth() {
    let redact = load("redact");
    let config = json!({"fields": ["token", "password"]}).to_string();
    let output =
        json!({"user": "alice", "token": "s3cr3t", "nested": [{"password": "hunter2", "keep": 1}]});
    let verdict = redact
        .middleware_after(
            &Limits::default(),
            &call(&config, "{}"),
            &output.to_string(),
        )
        .await
        .unwrap();
    let MiddlewareVerdict::Replace(json) = verdict else {
        panic!("{verdict:?}")
    };
    let replaced: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(
        replaced,
        json!({"user": "alice", "token": "[redacted]", "nested": [{"password": "[redacted]", "keep": 1}]})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn before_and_after_deny_on_configured_fields() {
    let redact = load("redact");
    let config = json!({"deny_fields": ["ssn"]}).to_string();
    let input = json!({"name": "bob", "ssn": "123-45-6789"}).to_string();
    let before = redact
        .middleware_before(&Limits::default(), &call(&config, &input))
        .await
        .unwrap();
    assert_eq!(
        before,
        MiddlewareVerdict::Deny(
            "the input contains `ssn`, which this step does not let through".into()
        )
    );
    let after = redact
        .middleware_after(&Limits::default(), &call(&config, "{}"), &input)
        .await
        .unwrap();
    assert!(
        matches!(&after, MiddlewareVerdict::Deny(reason) if reason.contains("output contains `ssn`")),
        "{after:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_to_redact_passes() {
    let redact = load("redact");
    let config = json!({"fields": ["token"], "deny_fields": ["ssn"]}).to_string();
    let clean = json!({"user": "alice"}).to_string();
    let limits = Limits::default();
    assert_eq!(
        redact
            .middleware_before(&limits, &call(&config, &clean))
            .await
            .unwrap(),
        MiddlewareVerdict::Pass
    );
    assert_eq!(
        redact
            .middleware_after(&limits, &call(&config, "{}"), &clean)
            .await
            .unwrap(),
        MiddlewareVerdict::Pass
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_component_is_used_only_as_its_world() {
    let redact = load("redact");
    let err = redact
        .call_tool(&Sandbox::default(), "{}", "{}", "t_mw", "x", "{}")
        .await
        .unwrap_err();
    assert!(
        matches!(
            &err,
            PluginError::WrongWorld {
                expected: "tool-plugin",
                actual: "middleware-plugin",
                ..
            }
        ),
        "{err}"
    );
    let notes = load("notes");
    let err = notes
        .middleware_before(&Limits::default(), &call("{}", "{}"))
        .await
        .unwrap_err();
    assert!(matches!(err, PluginError::WrongWorld { .. }), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_middleware_step_is_stopped_at_its_own_timeout_and_memory_limit() {
    let greedy = load("test-greedy-middleware");
    let timeout = std::time::Duration::from_millis(200);
    let limits = Limits {
        timeout,
        ..Limits::default()
    };
    let looping = greedy
        .middleware_before(&limits, &call("loop", "{}"))
        .await
        .unwrap_err();
    assert_eq!(
        looping.to_string(),
        "component `test-greedy-middleware` ran longer than its 200ms timeout and was stopped"
    );
    let limits = Limits {
        memory: 4 * 1024 * 1024,
        ..Limits::default()
    };
    let hog = greedy
        .middleware_before(&limits, &call("hog", "{}"))
        .await
        .unwrap_err();
    assert!(
        hog.to_string().contains("memory limit of 4096 KiB"),
        "{hog}"
    );
    // Within its limits it passes.
    let pass = greedy
        .middleware_before(&limits, &call("{}", "{}"))
        .await
        .unwrap();
    assert_eq!(pass, MiddlewareVerdict::Pass);
}
