//! Tools written in Rust, Python and JavaScript: the `counter` guest of each language
//! (guests/counter, on the Rust guest SDK; guests/python/counter, built with componentize-py by
//! `bash guests/python/build.sh`; guests/js/counter, built with componentize-js by `bash
//! guests/js/build.sh`), called by agent runs of the real binary. In each, a session keeps
//! state between the calls of a task,
//! key-value entries stay in their task, outgoing HTTP reaches only the origins of
//! `allowed_hosts`, an uncaught exception reaches the task's error observation, and the
//! guest's `tool-error`s are recoverable or fatal as it says.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use agentmesh_testkit::fixtures::{config_dir, dirs};
use serde_json::{Value, json};

use crate::util::{Env, agentmesh_in, events, first, observations, run_in};

/// A language with a `counter` example guest.
#[derive(Clone, Copy)]
enum Lang {
    Python,
    Js,
    Rust,
}

impl Lang {
    /// The built `counter` component.
    fn component(self) -> PathBuf {
        let (folder, script) = match self {
            Lang::Python => ("python", "guests/python/build.sh"),
            Lang::Js => ("js", "guests/js/build.sh"),
            Lang::Rust => return crate::wasm::guest("counter"),
        };
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join(format!("guests/target/{folder}/counter.wasm"));
        assert!(
            path.is_file(),
            "{} is missing: build the guests first with `bash {script}`",
            path.display()
        );
        path
    }

    /// The compiled cache of this language's tests. A Python or JavaScript component is
    /// 13–19 MB (the interpreter is in it) and takes seconds and ~0.5 GB to compile, so it
    /// compiles once (here, by `validate`) for all of them, not once per data dir.
    fn compiled_cache(self) -> &'static str {
        static CACHES: [OnceLock<String>; 3] = [OnceLock::new(), OnceLock::new(), OnceLock::new()];
        CACHES[self as usize].get_or_init(|| {
            let cache = Path::new(env!("CARGO_TARGET_TMPDIR"))
                .join(format!("counter-guest-components-{}", self as usize));
            let cache = cache.to_str().unwrap().to_owned();
            let config = config_dir(&[("counter.yaml", &counter_tool(self, &[]))]);
            let env = Env {
                cwd: None,
                vars: &[("AGENTMESH_CACHE_DIR", cache.as_str())],
            };
            let (code, out, err) =
                agentmesh_in(&env, &["validate", config.path().to_str().unwrap()]);
            assert_eq!(code, Some(0), "{out}{err}");
            cache
        })
    }
}

/// The tool `t/counter`, run by `lang`'s `counter` guest, whose outgoing HTTP may reach
/// `allowed_hosts` (origins, e.g. `http://127.0.0.1:8080`).
fn counter_tool(lang: Lang, allowed_hosts: &[String]) -> String {
    format!(
        "kind: commonagents.info/v1beta2/tool
namespace: t
name: counter
description: The example tool.
wasm: {{component: {component}, allowed_hosts: {allowed}}}
actions:
  - name: count
    description: Count the calls of this action in the session.
  - name: remember
    description: Store a value under a key.
    parameters: {{type: object, properties: {{key: {{type: string}}, value: {{type: string}}}}}}
  - name: recall
    description: Read the value stored under a key.
    parameters: {{type: object, properties: {{key: {{type: string}}}}}}
  - name: fetch
    description: GET a URL.
    parameters: {{type: object, properties: {{url: {{type: string}}}}}}
  - name: fail
    description: Raise an uncaught exception.
",
        component = lang.component().display(),
        allowed = json!(allowed_hosts),
    )
}

/// An agent `t/NAME` using `t/counter`, on the scripted model answering from `NAME.yaml`.
fn agent(name: &str) -> String {
    format!(
        "kind: commonagents.info/v1beta2/agent
namespace: t
name: {name}
description: Uses the example tool.
prompt: Go.
model: scripted/{name}.yaml
capabilities:
  counter: \"*\"
"
    )
}

/// Runs agent `t/NAME` of `config` with data dir `data` to idle or termination: the exit
/// code and the task.
fn run_agent(lang: Lang, config: &Path, name: &str, data: &Path) -> (Option<i32>, Value) {
    let env = Env {
        cwd: None,
        vars: &[("AGENTMESH_CACHE_DIR", lang.compiled_cache())],
    };
    let agent = format!("t/{name}");
    let (code, out, err) = run_in(&env, config, &agent, "go", data, &["--json"]);
    let task = serde_json::from_str(&out)
        .unwrap_or_else(|e| panic!("no task object printed ({e}): {out}\n{err}"));
    (code, task)
}

/// [`run_agent`] of one agent `t/a` answering `script`, for a task that must end idle: the
/// observations of its tool calls.
fn observed(lang: Lang, tool: &str, script: &str) -> Vec<Value> {
    let (_root, config, data) = dirs(&[
        ("counter.yaml", tool),
        ("agent.yaml", &agent("a")),
        ("a.yaml", script),
    ]);
    let (code, task) = run_agent(lang, &config, "a", &data);
    assert_eq!(code, Some(0), "{task}");
    assert_eq!(task["status"], "idle", "{task}");
    observations(&events(&data, &task))
}

/// A session keeps its state between the calls of one task (`count` answers 1, then 2), and
/// the next task gets a new session, which counts from 1 again.
fn a_session_keeps_state_between_the_calls_of_a_task(lang: Lang) {
    let script = "responses:
  - tool_calls: [{name: counter_count, arguments: {}}]
  - tool_calls: [{name: counter_count, arguments: {}}]
  - text: done
";
    for _ in 0..2 {
        let seen = observed(lang, &counter_tool(lang, &[]), script);
        assert_eq!(seen, [json!({"count": 1}), json!({"count": 2})]);
    }
}

/// The host's key-value store, through the `host` import: what `remember` stores, `recall`
/// reads back later in the same task; another task does not see it (keys are per task).
fn key_value_entries_stay_in_their_task(lang: Lang) {
    let (_root, config, data) = dirs(&[
        ("counter.yaml", &counter_tool(lang, &[])),
        (
            "agents.yaml",
            &format!("{}---\n{}", agent("writer"), agent("reader")),
        ),
        (
            "writer.yaml",
            "responses:
  - tool_calls: [{name: counter_remember, arguments: {key: plan, value: ship it}}]
  - tool_calls: [{name: counter_recall, arguments: {key: plan}}]
  - text: done
",
        ),
        (
            "reader.yaml",
            "responses:
  - tool_calls: [{name: counter_recall, arguments: {key: plan}}]
  - text: done
",
        ),
    ]);
    let (_, writer) = run_agent(lang, &config, "writer", &data);
    assert_eq!(
        observations(&events(&data, &writer)),
        [
            json!({"stored": "plan"}),
            json!({"key": "plan", "value": "ship it"})
        ]
    );
    let (_, reader) = run_agent(lang, &config, "reader", &data);
    assert_eq!(
        observations(&events(&data, &reader)),
        [json!({"key": "plan", "value": null})]
    );
}

/// Outgoing HTTP over `wasi:http`: a GET of an origin not in `allowed_hosts` is refused by
/// the host (the server there receives nothing) and comes back as a recoverable error, so the
/// task goes on; a GET of an allowed origin returns the server's status and the first 1,000
/// characters of its body, the path and query as the tool sent them. Returns the refusal's
/// error and the refused URL.
fn only_allowed_hosts_are_reached(lang: Lang) -> (String, String) {
    let body = format!(r#"{{"padding":"{}"}}"#, "x".repeat(1500));
    let answer = body.clone();
    let (allowed_port, received) = agentmesh_testkit::serve(1, move |_| ("200 OK", answer.clone()));
    let (denied_port, denied) = agentmesh_testkit::serve(1, |_| ("200 OK", "{}".to_owned()));
    let denied_url = format!("http://127.0.0.1:{denied_port}/");
    let script = format!(
        "responses:
  - tool_calls: [{{name: counter_fetch, arguments: {{url: \"{denied_url}\"}}}}]
  - tool_calls: [{{name: counter_fetch, arguments: {{url: \"http://127.0.0.1:{allowed_port}/padded?size=1500\"}}}}]
  - text: done
"
    );
    let tool = counter_tool(lang, &[format!("http://127.0.0.1:{allowed_port}")]);
    let seen = observed(lang, &tool, &script);
    assert_eq!(seen.len(), 2, "{seen:?}");
    let error = seen[0]["error"].as_str().unwrap_or_default().to_owned();
    // The host appends what it refused, and why, to the guest's own message.
    let refused = format!("the host refused: request to {denied_url} refused");
    assert!(error.contains(&refused), "no `{refused}` in {}", seen[0]);
    assert!(error.contains("is not in allowed_hosts"), "{}", seen[0]);
    assert!(
        denied.try_recv().is_err(),
        "the refused origin got a request"
    );

    assert_eq!(seen[1], json!({"status": 200, "body": &body[..1000]}));
    let request = received
        .recv_timeout(Duration::from_secs(10))
        .expect("the allowed origin got no request");
    assert_eq!(request.request_line, "GET /padded?size=1500 HTTP/1.1");
    (error, denied_url)
}

/// An uncaught exception faults the call; the task goes on, and the tool's next call gets a
/// new session (its count starts over). Returns the fault's error observation.
fn an_uncaught_exception_faults_the_call(lang: Lang) -> String {
    let seen = observed(
        lang,
        &counter_tool(lang, &[]),
        "responses:
  - tool_calls: [{name: counter_count, arguments: {}}]
  - tool_calls: [{name: counter_fail, arguments: {}}]
  - tool_calls: [{name: counter_count, arguments: {}}]
  - text: done
",
    );
    assert_eq!(seen.len(), 3, "{seen:?}");
    assert_eq!(seen[0], json!({"count": 1}));
    assert_eq!(seen[2], json!({"count": 1}));
    seen[1]["error"].as_str().unwrap_or_default().to_owned()
}

/// The two sides of a `tool-error`: input the guest cannot use is a recoverable error the LLM
/// sees (the task goes on); an action the guest does not have is a fatal one, which terminates
/// the task with the guest's message. Returns the two messages.
fn tool_errors_are_recoverable_or_fatal_as_the_guest_says(lang: Lang) -> (String, String) {
    // `recall` without a parameter schema, so the host passes the input on unchecked, and
    // `forget`, which the component does not implement.
    let tool = format!(
        "{}  - name: forget
    description: Not implemented by the component.
",
        counter_tool(lang, &[]).replace(
            "    parameters: {type: object, properties: {key: {type: string}}}\n",
            ""
        )
    );
    let (_root, config, data) = dirs(&[
        ("counter.yaml", &tool),
        ("agent.yaml", &agent("a")),
        (
            "a.yaml",
            "responses:
  - tool_calls: [{name: counter_recall, arguments: {key: 7}}]
  - tool_calls: [{name: counter_forget, arguments: {}}]
  - text: never said
",
        ),
    ]);
    let (code, task) = run_agent(lang, &config, "a", &data);
    assert_eq!(code, Some(2), "a terminated task: {task}");
    assert_eq!(task["status"], "terminated", "{task}");
    assert_eq!(task["reason"], "error", "{task}");
    let events = events(&data, &task);
    let seen = observations(&events);
    assert_eq!(seen.len(), 1, "{seen:?}");
    let fatal = first(&events, "AgentErrorEvent")["error"].clone();
    (
        seen[0]["error"].as_str().unwrap_or_default().to_owned(),
        fatal.as_str().unwrap_or_default().to_owned(),
    )
}

#[test]
fn a_python_session_keeps_state_between_the_calls_of_a_task() {
    a_session_keeps_state_between_the_calls_of_a_task(Lang::Python);
}

#[test]
fn a_js_session_keeps_state_between_the_calls_of_a_task() {
    a_session_keeps_state_between_the_calls_of_a_task(Lang::Js);
}

#[test]
fn a_python_tools_key_value_entries_stay_in_their_task() {
    key_value_entries_stay_in_their_task(Lang::Python);
}

#[test]
fn a_js_tools_key_value_entries_stay_in_their_task() {
    key_value_entries_stay_in_their_task(Lang::Js);
}

/// Python's refusal names the URL and the `wasi:http` error code the guest got.
#[test]
fn a_python_tool_reaches_only_allowed_hosts_and_a_refusal_is_recoverable() {
    let (error, url) = only_allowed_hosts_are_reached(Lang::Python);
    for said in [
        format!("GET {url} was refused"),
        "HttpRequestDenied".to_owned(),
    ] {
        assert!(error.contains(&said), "no `{said}` in {error}");
    }
}

/// `fetch()` says only "NetworkError"; the guest names the URL.
#[test]
fn a_js_tools_fetch_reaches_only_allowed_hosts_and_a_refusal_is_recoverable() {
    let (error, url) = only_allowed_hosts_are_reached(Lang::Js);
    assert!(error.contains(&format!("GET {url} failed")), "{error}");
}

/// The error observation names the tool and carries the traceback the guest printed on
/// stderr, down to the helper that raised.
#[test]
fn a_python_traceback_reaches_the_error_observation() {
    let error = an_uncaught_exception_faults_the_call(Lang::Python);
    for said in [
        "component `t/counter` panicked",
        "Traceback (most recent call last):",
        ", in fail\n",
        ", in average\n",
        "ZeroDivisionError: division by zero",
    ] {
        assert!(error.contains(said), "no `{said}` in {error}");
    }
}

/// The error observation names the tool and carries the Error's message and the stack the
/// guest printed on stderr, down to the line of app.js that threw.
#[test]
fn a_js_uncaught_error_reaches_the_error_observation() {
    let error = an_uncaught_exception_faults_the_call(Lang::Js);
    for said in [
        "component `t/counter` trapped",
        "Error: counter failed on purpose\n",
        "#run@app.js:",
        "invoke@app.js:",
    ] {
        assert!(error.contains(said), "no `{said}` in {error}");
    }
}

#[test]
fn a_python_tool_error_is_recoverable_or_fatal_as_the_guest_says() {
    let said = tool_errors_are_recoverable_or_fatal_as_the_guest_says(Lang::Python);
    let expected = (
        "`key` (a string) is required",
        "counter has no action `forget`",
    );
    assert_eq!((said.0.as_str(), said.1.as_str()), expected);
}

#[test]
fn a_js_tool_error_is_recoverable_or_fatal_as_the_guest_says() {
    let said = tool_errors_are_recoverable_or_fatal_as_the_guest_says(Lang::Js);
    let expected = (
        "`key` (a string) is required",
        "counter has no action `forget`",
    );
    assert_eq!((said.0.as_str(), said.1.as_str()), expected);
}

#[test]
fn a_rust_session_keeps_state_between_the_calls_of_a_task() {
    a_session_keeps_state_between_the_calls_of_a_task(Lang::Rust);
}

#[test]
fn a_rust_tools_key_value_entries_stay_in_their_task() {
    key_value_entries_stay_in_their_task(Lang::Rust);
}

/// The SDK's client names the request and the refusal.
#[test]
fn a_rust_tool_reaches_only_allowed_hosts_and_a_refusal_is_recoverable() {
    let (error, url) = only_allowed_hosts_are_reached(Lang::Rust);
    let said = format!("GET {url}: denied by the host");
    assert!(error.contains(&said), "no `{said}` in {error}");
}

/// The error observation names the tool and carries the panic's message.
#[test]
fn a_rust_panic_reaches_the_error_observation() {
    let error = an_uncaught_exception_faults_the_call(Lang::Rust);
    for said in [
        "component `t/counter` panicked",
        "counter failed on purpose",
    ] {
        assert!(error.contains(said), "no `{said}` in {error}");
    }
}

/// The SDK answers input that does not fit the action's input type, and an action it does not
/// have, with what it expected.
#[test]
fn a_rust_tool_error_is_recoverable_or_fatal_as_the_sdk_says() {
    let (recoverable, fatal) = tool_errors_are_recoverable_or_fatal_as_the_guest_says(Lang::Rust);
    assert!(
        recoverable
            .starts_with("the input of `recall`: invalid type: integer `7`, expected a string"),
        "{recoverable}"
    );
    assert_eq!(
        fatal,
        "no action `forget` (this component has: count, remember, recall, fetch, fail)"
    );
}
