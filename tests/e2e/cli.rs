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
fn schema_prints_the_model_script_format_and_an_unnamed_script_is_reported_as_one() {
    let (code, out, err) = agentmesh(&["schema", "script"]);
    assert_eq!(code, Some(0), "{err}");
    let schema: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(schema["type"], "object");
    assert!(schema["properties"]["responses"].is_object(), "{schema}");

    // A script file no agent names is not a manifest without `kind`.
    let (_root, dir, _data) =
        agentmesh_testkit::fixtures::dirs(&[("orphan.yaml", "responses:\n  - text: hi\n")]);
    let (code, out, _) = agentmesh(&["validate", dir.to_str().unwrap()]);
    assert_eq!(code, Some(1));
    assert!(
        out.contains(
            "orphan.yaml:1:1: error: a model script (it has `responses`) that no agent names"
        ),
        "{out}"
    );
}

#[test]
fn schema_of_unknown_kind_is_an_error() {
    let (code, _, err) = agentmesh(&["schema", "agnet"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("unknown kind `agnet`"), "{err}");
}

#[test]
fn validate_skips_build_tools_and_output_but_not_other_folders() {
    let not_a_manifest = "name: some-package\nversion: 1\n";
    let dir = agentmesh_testkit::fixtures::config_dir(&[
        ("node_modules/pkg/config.yaml", not_a_manifest),
        ("target/debug/out.yml", not_a_manifest),
        (".hidden/x.yaml", not_a_manifest),
    ]);
    let (code, out, err) = agentmesh(&["validate", dir.path().to_str().unwrap()]);
    assert_eq!(code, Some(0), "{out}{err}");
    // The same file in a folder of the config's own is read, and reported.
    std::fs::create_dir(dir.path().join("tools")).unwrap();
    std::fs::write(dir.path().join("tools/pkg.yaml"), not_a_manifest).unwrap();
    let (code, out, err) = agentmesh(&["validate", dir.path().to_str().unwrap()]);
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(out.contains("tools/pkg.yaml:1:1: error"), "{out}{err}");
}

/// A scripted model calling a function its agent does not have (a tool that gained a second
/// action is called `key_action`, no longer `key`) is a warning at the call, with the agent's
/// functions; the config stays valid. The same holds for a script the agent runs as the host
/// config's `default_model`.
#[test]
fn validate_warns_of_a_script_call_its_agent_has_no_function_for() {
    let tool = agentmesh_testkit::fixtures::echo_tool("t").replace(
        "actions:\n",
        "actions:\n  - name: shout\n    description: Shout.\n    execute:\n      cel: {expression: \"{'said': 'HI'}\"}\n",
    );
    let agent =
        agentmesh_testkit::fixtures::scripted_agent("t/a", "capabilities:\n  echo: \"*\"\n");
    let on_default = agent.replace("model: scripted/script.yaml\n", "");
    let host = "kind: agentmesh/v1/host\ndefault_model: scripted/script.yaml\n";
    for (agent, host) in [(agent.as_str(), None), (on_default.as_str(), Some(host))] {
        let mut files = vec![
            ("echo.yaml", tool.as_str()),
            ("agent.yaml", agent),
            (
                "script.yaml",
                "responses:\n  - tool_calls: [{name: echo_say, arguments: {}}]\n  - tool_calls:\n      - {name: echo, arguments: {}}\n",
            ),
        ];
        files.extend(host.map(|h| ("host.yaml", h)));
        let dir = agentmesh_testkit::fixtures::config_dir(&files);
        let (code, out, err) = agentmesh(&["validate", dir.path().to_str().unwrap()]);
        assert_eq!(code, Some(0), "{out}{err}");
        let warnings: Vec<&str> = out.lines().filter(|l| l.contains("warning:")).collect();
        assert_eq!(warnings.len(), 1, "{out}");
        assert!(
            warnings[0].contains("script.yaml:4:16: warning: agent `t/a` has no function `echo`"),
            "{out}"
        );
        assert!(
            warnings[0]
                .contains("(its functions: echo_shout, echo_say, request_wakeup, cancel_wakeup)"),
            "{out}"
        );
    }
}

/// Log lines written to a file or a pipe carry no terminal colour codes.
#[test]
fn logs_to_a_pipe_are_plain_text() {
    let dir =
        agentmesh_testkit::fixtures::config_dir(&[("notes.yaml", &crate::wasm::notes_tool())]);
    let env = crate::util::Env {
        cwd: None,
        vars: &[("AGENTMESH_LOG", "debug")],
    };
    let (code, out, err) =
        crate::util::agentmesh_in(&env, &["validate", dir.path().to_str().unwrap()]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(err.contains("DEBUG"), "no log lines: {err}");
    assert!(!err.contains('\u{1b}'), "{err:?}");
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
    // A `cel` tool has no component, so no Initialize (the config's component still loads).
    assert!(err.starts_with("validated in "), "{err}");
    assert!(err.contains("; first call "), "{err}");
    assert!(!err.contains("Initialize"), "{err}");

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
    // The component's own figures split the first call: its Initialize and the action.
    assert!(err.contains("1 component(s) "), "{err}");
    assert!(err.contains(" (Initialize "), "{err}");
    assert!(err.contains(" ms, the action in the component "), "{err}");
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

#[test]
fn a_setting_read_from_the_environment_takes_its_schemas_type() {
    use agentmesh_testkit::fixtures::dirs;

    use crate::util::{Env, agentmesh_in};

    // The API answers with the body it was sent: the values the templates computed.
    let (port, _received) = agentmesh_testkit::serve(1, |r| ("200 OK", r.body.clone()));
    let host = "kind: agentmesh/v1/host\nsettings:\n  t:\n    knobs:\n      \
                retries: {env: KNOB_RETRIES}\n      ratio: {env: KNOB_RATIO}\n      \
                verbose: {env: KNOB_VERBOSE}\n      region: {env: KNOB_REGION}\n      \
                pin: 1234\n";
    let tool = format!(
        r#"kind: commonagents.info/v1beta2/tool
namespace: t
name: knobs
description: Sends typed settings.
settings:
  type: object
  properties:
    retries: {{type: integer, minimum: 0}}
    ratio: {{type: number}}
    verbose: {{type: boolean}}
    region: {{type: string}}
    pin: {{type: string}}
actions:
  - name: send
    description: Sends them.
    execute:
      stateless_http:
        method: POST
        url: "http://127.0.0.1:{port}/knobs"
        body:
          next: "{{settings.retries + 1}}"
          half: "{{settings.ratio / 2.0}}"
          quiet: "{{!settings.verbose}}"
          region: "{{settings.region + '!'}}"
          pin: "{{settings.pin + '#'}}"
"#
    );
    let (_root, dir, data) = dirs(&[("host.yaml", host), ("knobs.yaml", &tool)]);
    let (dir, data) = (dir.to_str().unwrap(), data.to_str().unwrap());
    let call = |vars: &[(&str, &str)]| {
        let env = Env { cwd: None, vars };
        agentmesh_in(&env, &["call", dir, "t/knobs", "--data", data])
    };
    let typed = [
        ("KNOB_RETRIES", " 3"),
        ("KNOB_RATIO", "0.5"),
        ("KNOB_VERBOSE", "true"),
        ("KNOB_REGION", "42"),
    ];
    let (code, out, err) = call(&typed);
    assert_eq!(code, Some(0), "{out}{err}");
    let result: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        result,
        serde_json::json!({"next": 4, "half": 0.25, "quiet": false, "region": "42!", "pin": "1234#"})
    );

    // Text that is not of the type is refused where it is written, and not shown.
    for (name, text, said) in [
        (
            "KNOB_RETRIES",
            "three",
            "setting `retries` of tool `t/knobs`: value is not of type \"integer\"",
        ),
        (
            "KNOB_RETRIES",
            "-1",
            "setting `retries` of tool `t/knobs`: value is less than the minimum",
        ),
        (
            "KNOB_VERBOSE",
            "yes",
            "setting `verbose` of tool `t/knobs`: value is not of type \"boolean\"",
        ),
    ] {
        let mut vars = typed.to_vec();
        vars.retain(|(n, _)| *n != name);
        vars.push((name, text));
        let (code, out, err) = call(&vars);
        assert_eq!(code, Some(1), "{name}={text}: {out}{err}");
        assert!(err.contains("host.yaml:"), "{name}={text}: {err}");
        assert!(
            err.contains(said),
            "{name}={text}: missing `{said}` in {err}"
        );
        assert!(
            !err.contains(text),
            "{name}={text}: the value is shown: {err}"
        );
    }
}

#[test]
fn validate_call_and_run_share_one_compiled_cache() {
    use agentmesh_testkit::fixtures::{dirs, scripted_agent};

    use crate::util::{Env, agentmesh_in};

    let notes = crate::wasm::notes_tool();
    let agent = scripted_agent("t/a", "capabilities:\n  notes: \"*\"\n");
    let script =
        "responses:\n  - tool_calls: [{name: notes_get, arguments: {key: k}}]\n  - text: done\n";
    let (root, dir, data) = dirs(&[
        ("notes.yaml", &notes),
        ("agent.yaml", &agent),
        ("script.yaml", script),
    ]);
    let home = root.path().join("home");
    let home = home.to_str().unwrap();
    let cache = root.path().join("home/.cache/agentmesh/components");
    // No AGENTMESH_CACHE_DIR or XDG_CACHE_HOME: the user's cache under HOME.
    let vars = [
        ("HOME", home),
        ("AGENTMESH_CACHE_DIR", ""),
        ("XDG_CACHE_HOME", ""),
    ];
    let env = Env {
        cwd: None,
        vars: &vars,
    };
    let artifacts = || -> Vec<(std::path::PathBuf, std::time::SystemTime)> {
        let Ok(entries) = std::fs::read_dir(&cache) else {
            return Vec::new();
        };
        let mut found: Vec<_> = entries
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "cwasm"))
            .map(|p| {
                let modified = std::fs::metadata(&p).unwrap().modified().unwrap();
                (p, modified)
            })
            .collect();
        found.sort();
        found
    };
    let dir = dir.to_str().unwrap();
    let (code, out, err) = agentmesh_in(&env, &["validate", dir]);
    assert_eq!(code, Some(0), "{out}{err}");
    let compiled = artifacts();
    assert_eq!(
        compiled.len(),
        1,
        "validate compiled the component into {}",
        cache.display()
    );

    // `call` and `run` load it from there: nothing is compiled again, and the default data
    // dir holds no cache of its own.
    let (code, out, err) = agentmesh_in(
        &env,
        &["call", dir, "t/notes.get", "--input", r#"{"key": "k"}"#],
    );
    assert_eq!(code, Some(0), "{out}{err}");
    let (code, out, err) = agentmesh_in(&env, &["run", dir, "--agent", "t/a", "-m", "go"]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert_eq!(artifacts(), compiled);
    let own = std::path::Path::new(dir).join(".agentmesh");
    assert!(own.join("store").is_dir(), "run used the default data dir");
    assert!(!own.join("components").exists());

    // A data dir given on the command line holds its own cache.
    let data = data.to_str().unwrap();
    let (code, out, err) = agentmesh_in(
        &env,
        &["run", dir, "--agent", "t/a", "-m", "go", "--data", data],
    );
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(std::path::Path::new(data).join("components").is_dir());
    assert_eq!(artifacts(), compiled);
}

/// The sections of ELF file `path` (`readelf -S`).
fn sections(path: &std::path::Path) -> String {
    let out = std::process::Command::new("readelf")
        .arg("-S")
        .arg(path)
        .output()
        .expect("readelf (binutils) is needed: apt-get install binutils");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn the_shipped_binary_keeps_its_debug_info_beside_it() {
    // What `scripts/setup.sh` does to the release binary, done to a copy of this build's.
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("agentmesh");
    std::fs::copy(crate::AGENTMESH, &bin).unwrap();
    let before = std::fs::metadata(&bin).unwrap().len();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/split-debuginfo.sh");
    let split = || {
        let out = std::process::Command::new("bash")
            .arg(script)
            .arg(&bin)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    split();
    let debug = dir.path().join("agentmesh.debug");
    let (shipped, kept) = (sections(&bin), sections(&debug));
    assert!(!shipped.contains(".debug_line"), "{shipped}");
    assert!(shipped.contains(".gnu_debuglink"), "{shipped}");
    // Function names go with the line tables: a backtrace reads both from the debug file.
    assert!(!shipped.contains(".symtab"), "{shipped}");
    assert!(kept.contains(".debug_line"), "{kept}");
    assert!(kept.contains(".symtab"), "{kept}");
    assert!(std::fs::metadata(&bin).unwrap().len() < before / 2);
    let out = std::process::Command::new(&bin)
        .arg("--version")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    // Again: the binary is split already, and the debug file is kept as it was.
    let kept_size = std::fs::metadata(&debug).unwrap().len();
    assert!(split().contains("already split"));
    assert_eq!(std::fs::metadata(&debug).unwrap().len(), kept_size);
}

/// A Wasm tool's `allowed_hosts` entry that is not an origin would fail every call of the
/// tool: `validate` reports it where it stands, in the shared `wasm:` block and an action's.
#[test]
fn validate_reports_a_wasm_allowed_hosts_entry_that_is_not_an_origin() {
    let tool = format!(
        "kind: commonagents.info/v1beta2/tool
namespace: t
name: probe
description: Looks around.
wasm:
  component: {probe}
  allowed_hosts: [api.github.com, \"https://api.github.com\"]
actions:
  - name: probe
    description: Look.
  - name: fetch
    description: Fetch.
    execute:
      wasm: {{allowed_hosts: [\"https://api.github.com/v3\"]}}
",
        probe = crate::wasm::guest("test_probe").display()
    );
    let agent =
        agentmesh_testkit::fixtures::scripted_agent("t/a", "capabilities:\n  probe: \"*\"\n");
    let dir = agentmesh_testkit::fixtures::config_dir(&[
        ("probe.yaml", &tool),
        ("agent.yaml", &agent),
        ("script.yaml", "responses:\n  - text: hi\n"),
    ]);
    let (code, out, err) = agentmesh(&["validate", dir.path().to_str().unwrap()]);
    assert_eq!(code, Some(1), "{out}{err}");
    let errors: Vec<&str> = out.lines().filter(|l| l.contains(": error")).collect();
    assert_eq!(errors.len(), 2, "{out}");
    assert!(
        errors[0].contains("probe.yaml:7:19: error: `api.github.com` is not an origin"),
        "{out}"
    );
    assert!(
        errors[1].contains("probe.yaml:14:30: error: `https://api.github.com/v3` is not an origin"),
        "{out}"
    );
}
