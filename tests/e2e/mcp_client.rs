//! The `mcp` tool runtime against real MCP servers: `@modelcontextprotocol/server-everything`
//! (npm, over stdio, streamable HTTP and the legacy HTTP+SSE transport), a server built on the `mcp` Python package
//! (`tests/mcp/server.py`, over stdio and streamable HTTP) and one that misbehaves on request
//! (`tests/mcp/misbehaving.py`). Each is what a user would run; `.ci/run` installs them
//! (`npm ci --prefix tests/mcp`, `pip install mcp==2.3.0`).

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use agentmesh_testkit::fixtures::{self, scripted_agent};
use agentmesh_testkit::server::{Server, wait_for};
use serde_json::{Value, json};

use crate::AGENTMESH;
use crate::util::{Env, agentmesh, events, observations, run_in};

/// `tests/mcp/`: the servers' sources and their npm packages.
pub(crate) fn servers() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp")
}

/// The Python interpreter that has the `mcp` package (the one `python3` runs; a test server is
/// started by its absolute path, since a server gets no `PATH` of the host's).
pub(crate) fn python() -> String {
    let out = Command::new("python3")
        .args(["-c", "import mcp, sys; print(sys.executable)"])
        .output();
    match out {
        Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout).trim().to_owned(),
        _ => panic!(
            "python3 with the `mcp` package is missing: install it with `pip install mcp==2.3.0` (.ci/run does)"
        ),
    }
}

/// The entry point of `@modelcontextprotocol/server-everything`.
fn everything() -> PathBuf {
    let path = servers().join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    assert!(
        path.is_file(),
        "{} is missing: install the test servers with `npm ci --prefix tests/mcp` (.ci/run does)",
        path.display()
    );
    path
}

/// A tool `t/NAME` whose shared `mcp:` block is `mcp` (YAML flow-map entries), with settings
/// `settings` (YAML flow map of properties) and `actions` (`name` → `execute.mcp` entries).
fn tool(name: &str, settings: &str, mcp: &str, actions: &[(&str, &str)]) -> String {
    let actions: String = actions
        .iter()
        .map(|(action, own)| {
            format!(
                "  - name: {action}\n    description: The action.\n    parameters: {{type: object, properties: {{}}}}\n    execute: {{mcp: {{{own}}}}}\n"
            )
        })
        .collect();
    format!(
        "kind: commonagents.info/v1beta2/tool
namespace: t
name: {name}
description: The tool under test.
settings: {{properties: {settings}}}
mcp: {{{mcp}}}
actions:
{actions}"
    )
}

/// A config dir with `manifests`, an agent `t/a` with capability `tools` (flow-map entries),
/// and a script making `calls` (function, arguments) one turn each, then answering "done"; a
/// data dir beside it.
fn config(
    manifests: &str,
    capabilities: &str,
    calls: &[(&str, Value)],
    host: &str,
) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let mut script = String::from("responses:\n");
    for (function, arguments) in calls {
        script.push_str(&format!(
            "  - tool_calls: [{{name: {function}, arguments: {arguments}}}]\n"
        ));
    }
    script.push_str("  - text: done\n");
    let agent = scripted_agent("t/a", &format!("capabilities: {{{capabilities}}}\n"));
    fixtures::dirs(&[
        ("manifests.yaml", &format!("{manifests}---\n{agent}")),
        ("host.yaml", &format!("kind: agentmesh/v1/host\n{host}")),
        ("script.yaml", &script),
    ])
}

/// `agentmesh run` of agent `t/a` in `dir`, with `vars` in its environment: the task object
/// (the exit code must be `code`) and the observations of its log.
fn run(dir: &Path, data: &Path, vars: &[(&str, &str)], code: i32) -> (Value, Vec<Value>) {
    let env = Env { cwd: None, vars };
    let (exit, out, err) = run_in(&env, dir, "t/a", "go", data, &["--json"]);
    assert_eq!(exit, Some(code), "{err}");
    let task: Value = serde_json::from_str(&out).unwrap_or_else(|_| panic!("{out}\n{err}"));
    let log = events(data, &task);
    (task, observations(&log))
}

/// Whether process `pid` exists (a zombie too: it is gone once reaped).
fn alive(pid: u64) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// The `error` of an observation that is one.
fn error(observation: &Value) -> &str {
    observation["error"]
        .as_str()
        .unwrap_or_else(|| panic!("not an error: {observation}"))
}

#[test]
fn server_everything_over_stdio_answers_with_text_and_structured_content_and_only_the_given_env() {
    let everything = everything();
    let manifests = tool(
        "everything",
        "{greeting: {type: string}}",
        &format!(
            "transport: stdio, command: node, args: [\"{}\", stdio], env: {{GREETING: \"{{settings.greeting}}\"}}",
            everything.display()
        ),
        &[
            ("echo", ""),
            ("weather", "tool_name: get-structured-content"),
            ("env", "tool_name: get-env"),
        ],
    );
    let (_root, dir, data) = config(
        &manifests,
        "everything: \"*\"",
        &[
            ("everything_echo", json!({"message": "hi"})),
            ("everything_weather", json!({"location": "Chicago"})),
            ("everything_env", json!({})),
        ],
        "settings: {t: {everything: {greeting: from-the-host-config}}}\n",
    );
    let (task, seen) = run(&dir, &data, &[("HOST_ONLY_VARIABLE", "not-for-servers")], 0);
    assert_eq!(task["status"], "idle");
    assert_eq!(seen[0], "Echo: hi");
    // Structured content is preferred to the text parts that repeat it.
    assert!(seen[1]["temperature"].is_number(), "{}", seen[1]);
    assert!(seen[1]["conditions"].is_string(), "{}", seen[1]);
    // The server's environment is its `env`, rendered, and nothing of the host's.
    let env: Value = serde_json::from_str(seen[2].as_str().unwrap()).unwrap();
    assert_eq!(env["GREETING"], "from-the-host-config", "{env}");
    assert!(env.get("HOST_ONLY_VARIABLE").is_none(), "{env}");
    assert!(env.get("PATH").is_none(), "{env}");
}

/// The Python server's tool over stdio, `t/py` (actions `whoami` and `add`), with `extra`
/// entries in its `mcp:` block.
fn python_tool(extra: &str) -> String {
    tool(
        "py",
        "{}",
        &format!(
            "transport: stdio, command: \"{}\", args: [\"{}\", stdio]{extra}",
            python(),
            servers().join("server.py").display()
        ),
        &[("whoami", ""), ("add", "")],
    )
}

#[test]
fn a_task_keeps_one_server_process_for_its_calls_and_run_stops_it() {
    let manifests = python_tool(", env: {MARK: here}");
    let (_root, dir, data) = config(
        &manifests,
        "py: \"*\"",
        &[
            ("py_whoami", json!({})),
            ("py_add", json!({"a": 2, "b": 3})),
            ("py_whoami", json!({})),
        ],
        "",
    );
    let (_, seen) = run(&dir, &data, &[("HOST_ONLY_VARIABLE", "x")], 0);
    let pid = seen[0]["pid"].as_u64().unwrap();
    assert_eq!(seen[1], "5");
    assert_eq!(
        seen[2]["pid"].as_u64(),
        Some(pid),
        "one process for the task"
    );
    assert_eq!(seen[0]["env"]["MARK"], "here");
    assert!(seen[0]["env"].get("HOST_ONLY_VARIABLE").is_none());
    assert!(!alive(pid), "the server outlived `run`");

    // Another task starts its own.
    let (_, again) = run(&dir, &data, &[], 0);
    assert_ne!(again[0]["pid"].as_u64(), Some(pid));
}

/// The misbehaving server's tool, `t/bad`, with `timeout: 3s` and actions named after its
/// behaviours; `args` are the server's arguments after the script, `extra` more entries of
/// its `mcp:` block.
fn misbehaving(args: &str, extra: &str) -> String {
    let actions = [
        "ok",
        "crash",
        "hang",
        "flood",
        "endless",
        "fail",
        "rpc_error",
    ]
    .map(|a| (a, ""));
    tool(
        "bad",
        "{}",
        &format!(
            "transport: stdio, command: \"{}\", args: [\"{}\"{args}], timeout: 3s{extra}",
            python(),
            servers().join("misbehaving.py").display()
        ),
        &actions,
    )
}

#[test]
fn every_failure_of_a_server_is_an_observation_and_the_next_call_starts_it_again() {
    let call = |name: &str| (format!("bad_{name}"), json!({}));
    let calls: Vec<(String, Value)> = [
        "ok",
        "crash",
        "ok",
        "hang",
        "ok",
        "flood",
        "endless",
        "fail",
        "rpc_error",
        "ok",
    ]
    .iter()
    .map(|n| call(n))
    .collect();
    let calls: Vec<(&str, Value)> = calls.iter().map(|(n, a)| (n.as_str(), a.clone())).collect();
    let (_root, dir, data) = config(&misbehaving("", ""), "bad: \"*\"", &calls, "");
    let (task, seen) = run(&dir, &data, &[], 0);
    assert_eq!(task["status"], "idle", "the task went on to its end");
    assert_eq!(task["output"][0]["message"][0]["text"], "done", "{task}");
    let first = seen[0]["pid"].as_u64().unwrap();
    assert!(
        error(&seen[1]).contains("stopped during the call of `crash` (it exited with code 3)"),
        "{}",
        seen[1]
    );
    let second = seen[2]["pid"].as_u64().unwrap();
    assert_ne!(first, second, "the crashed server was started again");
    assert!(!alive(first));
    assert!(
        error(&seen[3]).contains("did not answer `hang` within 3s"),
        "{}",
        seen[3]
    );
    let third = seen[4]["pid"].as_u64().unwrap();
    assert_ne!(second, third, "the hung server was replaced");
    for (i, name) in [(5, "flood"), (6, "endless")] {
        assert!(
            error(&seen[i]).contains(&format!(
                "larger than 4194304 bytes (max_output) in answer to `{name}`"
            )),
            "{}",
            seen[i]
        );
    }
    assert_eq!(error(&seen[7]), "MCP tool `fail` failed: the tool failed");
    assert!(
        error(&seen[8]).contains("the server refused (JSON-RPC error -32000)"),
        "{}",
        seen[8]
    );
    assert!(seen[9]["pid"].is_u64(), "{}", seen[9]);
}

#[test]
fn a_server_that_does_not_start_is_an_observation() {
    for (args, extra, expected) in [
        (
            ", exit",
            "",
            "exited with code 1 at start; its stderr ended with: misbehaving: exiting at start",
        ),
        (", silent", "", "did not start within 3s"),
        (
            "",
            ", max_output: 16",
            "it sent a message larger than 16 bytes (max_output)",
        ),
    ] {
        let (_root, dir, data) = config(
            &misbehaving(args, extra),
            "bad: \"*\"",
            &[("bad_ok", json!({}))],
            "",
        );
        let (task, seen) = run(&dir, &data, &[], 0);
        assert_eq!(task["status"], "idle");
        assert!(error(&seen[0]).contains(expected), "{}", seen[0]);
    }
}

/// A server process the test started, killed when dropped.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A free port on 127.0.0.1 (free when asked; the server started on it takes it).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Starts `command` (a streamable-HTTP server on `port`) and waits until it accepts
/// connections.
fn start_http(mut command: Command, port: u16) -> Running {
    let child = command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let running = Running(child);
    let up = wait_for(Duration::from_secs(30), || {
        TcpStream::connect(("127.0.0.1", port)).ok()
    });
    assert!(up.is_some(), "the MCP server on port {port} did not start");
    running
}

#[test]
fn http_and_legacy_sse_servers_answer_and_a_url_outside_allowed_hosts_is_refused() {
    let py_port = free_port();
    let mut py = Command::new(python());
    py.arg(servers().join("server.py"))
        .args(["http", &py_port.to_string()]);
    let _py = start_http(py, py_port);
    // server-everything over the legacy HTTP+SSE transport (its `/sse` event stream).
    let node_port = free_port();
    let mut node = Command::new("node");
    node.args([everything().to_str().unwrap(), "sse"])
        .env("PORT", node_port.to_string());
    let _node = start_http(node, node_port);

    let manifests = [
        tool(
            "py",
            "{}",
            &format!("transport: http, url: \"http://127.0.0.1:{py_port}/mcp\""),
            &[("add", ""), ("whoami", "")],
        ),
        tool(
            "everything",
            "{addr: {type: string}}",
            &format!(
                "transport: sse, url: \"http://{{settings.addr}}/sse\", allowed_hosts: [\"http://127.0.0.1:{node_port}\"]"
            ),
            &[("echo", ""), ("sum", "tool_name: get-sum")],
        ),
    ]
    .join("---\n");
    let calls = [
        ("py_add", json!({"a": 20, "b": 22})),
        ("py_whoami", json!({})),
        ("py_whoami", json!({})),
        ("everything_echo", json!({"message": "over sse"})),
        ("everything_sum", json!({"a": 1, "b": 2})),
    ];
    let host = |addr: &str| format!("settings: {{t: {{everything: {{addr: \"{addr}\"}}}}}}\n");
    let (_root, dir, data) = config(
        &manifests,
        "py: \"*\", everything: \"*\"",
        &calls,
        &host(&format!("127.0.0.1:{node_port}")),
    );
    let (task, seen) = run(&dir, &data, &[], 0);
    assert_eq!(task["status"], "idle");
    assert_eq!(seen[0], "42");
    assert_eq!(seen[1]["pid"], seen[2]["pid"]);
    assert_eq!(seen[3], "Echo: over sse");
    assert!(seen[4].as_str().unwrap().contains('3'), "{}", seen[4]);

    // Settings that point the URL at an origin the manifest does not allow: the server is
    // never asked, and the task ends (the configuration is wrong, not the call).
    let (_root, dir, data) = config(
        &manifests,
        "py: \"*\", everything: \"*\"",
        &[("everything_echo", json!({"message": "x"}))],
        &host(&format!("127.0.0.1:{py_port}")),
    );
    let (code, _, why) = run_in(&Env::default(), &dir, "t/a", "go", &data, &[]);
    assert_eq!(code, Some(2), "{why}");
    assert!(
        why.contains(&format!(
            "its origin http://127.0.0.1:{py_port} is not in allowed_hosts (http://127.0.0.1:{node_port})"
        )),
        "{why}"
    );
}

/// A task of `t/a` on `server` that called its MCP server once and went idle, and the pid of
/// the server process it reported.
fn idle_after_a_call(server: &Server) -> (String, u64) {
    let id = server.create_task(&json!({"agent": "t/a", "input": {"message": "go"}}));
    let observed = server.wait_for_event(&id, "ObservationEvent");
    let pid = observed["result"]["pid"].as_u64().unwrap();
    server.wait_for_status(&id, "idle");
    (id, pid)
}

#[test]
fn serve_stops_a_tasks_server_when_the_task_is_deleted() {
    let manifests = python_tool("");
    let (_root, dir, data) = config(&manifests, "py: \"*\"", &[("py_whoami", json!({}))], "");
    let server = Server::start(AGENTMESH, &dir, &data, &[]);
    let (id, pid) = idle_after_a_call(&server);
    assert!(alive(pid), "an idle task keeps its session");

    let r = server.request("DELETE", &format!("/v1/tasks/{id}")).send();
    assert_eq!(r.status, 204, "{}", r.text());
    let gone = wait_for(Duration::from_secs(30), || (!alive(pid)).then_some(()));
    assert!(gone.is_some(), "the server of a deleted task still runs");
}

#[test]
fn the_inspector_shows_a_tasks_open_session_with_its_server_process() {
    let manifests = python_tool("");
    let (_root, dir, data) = config(&manifests, "py: \"*\"", &[("py_whoami", json!({}))], "");
    let server = Server::start(AGENTMESH, &dir, &data, &[]);
    let (id, pid) = idle_after_a_call(&server);
    // A loopback host without tokens: the login takes an empty token.
    let cookie = crate::inspector::session_cookie(&server, "");
    let page = |task: &str| {
        let r = server
            .request("GET", &format!("/ui/tasks/{task}"))
            .header("Cookie", &cookie)
            .send();
        assert_eq!(r.status, 200, "{}", r.text());
        r.text()
    };
    let html = page(&id);
    let table = html
        .split("id=\"mcp-sessions\"")
        .nth(1)
        .unwrap_or_else(|| panic!("no MCP sessions on the page: {html}"));
    let table = table.split("</table>").next().unwrap();
    assert!(table.contains("t/py"), "{table}");
    assert!(table.contains("open, idle"), "{table}");
    assert!(table.contains(&format!("pid {pid}")), "{table}");

    // Another task of the host has none.
    let other = server.create_task(&json!({"agent": "t/a"}));
    assert!(page(&other).contains("No MCP session."));
}

#[test]
fn a_full_pool_closes_the_least_recently_used_idle_session() {
    // Two servers of one task, in a pool of one session: each call of the other server takes
    // the place of the idle one, which its next call starts again.
    let manifests = [
        python_tool(""),
        misbehaving("", "").replace("name: bad", "name: other"),
    ]
    .join("---\n");
    let (_root, dir, data) = config(
        &manifests,
        "py: \"*\", other: \"*\"",
        &[
            ("py_whoami", json!({})),
            ("other_ok", json!({})),
            ("py_whoami", json!({})),
        ],
        "policy: {max_mcp_sessions: 1}\n",
    );
    let (task, seen) = run(&dir, &data, &[], 0);
    assert_eq!(task["status"], "idle");
    let first = seen[0]["pid"].as_u64().unwrap();
    assert!(seen[1]["pid"].is_u64(), "{}", seen[1]);
    let again = seen[2]["pid"].as_u64().unwrap();
    assert_ne!(first, again, "the evicted session was opened anew");
    assert!(!alive(first), "the evicted server was stopped");
}

/// A config dir holding `tools.yaml` (`manifest`) and the executable shell scripts `scripts`
/// (name, body after the `#!/bin/sh` line).
fn probe_config(manifest: &str, scripts: &[(&str, &str)]) -> (tempfile::TempDir, PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let (root, dir, _) = fixtures::dirs(&[("tools.yaml", manifest)]);
    for (name, body) in scripts {
        let path = dir.join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    (root, dir)
}

/// `agentmesh validate DIR [--probe]`: exit code, stdout and stderr.
fn validate(dir: &Path, probe: bool) -> (Option<i32>, String, String) {
    let dir = dir.to_str().unwrap();
    match probe {
        true => agentmesh(&["validate", dir, "--probe"]),
        false => agentmesh(&["validate", dir]),
    }
}

#[test]
fn validate_probe_reports_unknown_tools_and_parameters_the_server_disagrees_with() {
    let manifest = format!(
        "kind: commonagents.info/v1beta2/tool
namespace: t
name: everything
description: The tool under test.
mcp: {{transport: stdio, command: node, args: [\"{}\", stdio]}}
actions:
  - name: echo
    description: Echoes.
    parameters: {{type: object, properties: {{message: {{type: string}}}}}}
    execute: {{mcp: {{}}}}
  - name: ecko
    description: Misspelt.
    execute: {{mcp: {{}}}}
  - name: sum
    description: Adds.
    parameters:
      type: object
      properties:
        a: {{type: string}}
        c: {{type: number}}
    execute: {{mcp: {{tool_name: get-sum}}}}
",
        everything().display()
    );
    let (_root, dir) = probe_config(&manifest, &[]);
    let file = dir.join("tools.yaml");
    let file = file.display();

    // Without `--probe`, nothing is started and the config is valid.
    let (code, out, err) = validate(&dir, false);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.starts_with("ok: "), "{out}");
    assert!(!out.contains("probed"), "{out}");

    let (code, out, err) = validate(&dir, true);
    assert_eq!(code, Some(1), "{out}{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 4, "{out}");
    assert!(
        lines[0].starts_with(&format!(
            "{file}:11:5: error: action `ecko`: the MCP server offers no tool `ecko` (did you mean `echo`?); it offers `echo`, "
        )),
        "{out}"
    );
    assert!(lines[0].contains("`get-sum`"), "{out}");
    assert_eq!(
        lines[1],
        format!(
            "{file}:16:5: error: action `sum`: MCP tool `get-sum` requires `b`, which the action's parameters do not declare"
        )
    );
    assert_eq!(
        lines[2],
        format!(
            "{file}:19:9: error: action `sum`: parameter `a` is of type `string`, but MCP tool `get-sum` takes `number`"
        )
    );
    assert_eq!(
        lines[3],
        format!(
            "{file}:20:9: error: action `sum`: parameter `c` is not in the input schema of MCP tool `get-sum`; its properties are `a`, `b`"
        )
    );
    assert!(!out.contains("ok:"), "{out}");
}

#[test]
fn validate_probe_passes_when_every_action_matches_and_stops_the_server() {
    // The server is started through a script that records its process id, then becomes it.
    let manifest = "kind: commonagents.info/v1beta2/tool
namespace: t
name: py
description: The tool under test.
mcp: {transport: stdio, command: ./server.sh}
actions:
  - name: whoami
    description: Who answers.
    parameters: {type: object, properties: {}}
    execute: {mcp: {}}
  - name: sum
    description: Adds.
    parameters: {type: object, properties: {a: {type: integer}, b: {type: integer}}}
    execute: {mcp: {tool_name: add}}
";
    let body = format!(
        "echo $$ > server.pid\nexec \"{}\" \"{}\" stdio",
        python(),
        servers().join("server.py").display()
    );
    let (_root, dir) = probe_config(manifest, &[("server.sh", &body)]);
    let (code, out, err) = validate(&dir, true);
    assert_eq!(code, Some(0), "{out}{err}");
    assert_eq!(
        out,
        "ok: 0 agents, 1 tools, 0 triggers, 0 schedules, 0 components\nprobed: 1 servers, 2 actions\n"
    );
    let pid: u64 = std::fs::read_to_string(dir.join("server.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(!alive(pid), "the server outlived `validate --probe`");
}

#[test]
fn validate_probe_reports_a_server_that_exits_at_once_without_waiting() {
    let manifest = "kind: commonagents.info/v1beta2/tool
namespace: t
name: gone
description: The tool under test.
mcp: {transport: stdio, command: ./gone.sh, timeout: 60s}
actions:
  - name: first
    description: One.
    execute: {mcp: {}}
  - name: second
    description: Two.
    execute: {mcp: {}}
";
    let (_root, dir) = probe_config(manifest, &[("gone.sh", "echo leaving >&2\nexit 3")]);
    let started = std::time::Instant::now();
    let (code, out, err) = validate(&dir, true);
    assert!(started.elapsed() < Duration::from_secs(20), "{out}{err}");
    assert_eq!(code, Some(1), "{out}{err}");
    let file = dir.join("tools.yaml");
    assert_eq!(
        out,
        format!(
            "{}:9:15: error: cannot probe the MCP server of actions `first`, `second`: the MCP server `./gone.sh` did not start: it exited with code 3 at start; its stderr ended with: leaving\n",
            file.display()
        )
    );
}
