//! Guest faults that are not limits — a panic, a request to a host not allowed, a probe of
//! the sandbox, of a previous instance's memory — each end as a recoverable error with a clear
//! message, and the host serves the next call.

use std::sync::Arc;

use agentmesh_plugins::{
    Fault, MemoryKv, MountDir, PluginConfig, PluginHost, Sandbox, ToolError, ToolSession,
};
use serde_json::{Value, json};

use crate::util::{FakeGithub, guest, load};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_is_reported_with_its_message() {
    let mut session = ToolSession::lazy(
        load("test-panic"),
        Sandbox::default(),
        "{}",
        "{}",
        "t_panic",
    )
    .unwrap()
    .open()
    .await
    .unwrap();
    let answer = session.invoke("boom", "{}").await.unwrap();
    let Err(error @ ToolError::Fault(Fault::Panic { message, .. })) = &answer else {
        panic!("{answer:?}")
    };
    // Where it panicked and the message, on one line; then the lines it printed before.
    assert!(
        message.starts_with("panicked at test-programs/panic/src/lib.rs:")
            && message.ends_with(
                ": test-panic panics on purpose in `boom`; its stderr before:\ntest-panic: step 1 of 2 done"
            ),
        "{message}"
    );
    assert!(!error.is_fatal());
    assert!(
        error
            .to_string()
            .starts_with("component `test-panic` panicked: panicked at"),
        "{error}"
    );
    // A fresh instance serves the next call.
    let next = session.invoke("ok", "{}").await.unwrap();
    assert_eq!(next.as_deref(), Ok("\"still alive\""));
}

/// Another tool run by the same file has its own name in its faults, not the name the file
/// was loaded as.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fault_names_the_tool_that_ran_not_the_first_to_load_the_file() {
    let second = Arc::new(load("test-panic").named("t/second"));
    let answer = second
        .call_tool(
            &Sandbox::default(),
            "{}",
            "{}",
            "t_panic_named",
            "boom",
            "{}",
        )
        .await
        .unwrap();
    let error = answer.unwrap_err().to_string();
    assert!(
        error.starts_with("component `t/second` panicked"),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_outside_allowed_hosts_never_leave_the_host() {
    let github = FakeGithub::start().await;
    let port = github.addr.port();
    let sandbox = Sandbox::default().allow(&github.base_url()).unwrap();
    let mut session = ToolSession::lazy(
        load("test-forbidden-host"),
        sandbox,
        "{}",
        "{}",
        "t_forbidden",
    )
    .unwrap()
    .open()
    .await
    .unwrap();

    let refused = [
        // Not listed at all.
        (
            "http://forbidden.example/steal".to_owned(),
            "http://forbidden.example/steal refused: its origin http://forbidden.example:80 is not in allowed_hosts (http://127.0.0.1:",
        ),
        // The listed host on another port, and with another scheme.
        (
            format!("http://127.0.0.1:{}/ping", port.wrapping_add(1)),
            "is not in allowed_hosts",
        ),
        (
            format!("https://127.0.0.1:{port}/ping"),
            "is not in allowed_hosts",
        ),
        // The same machine under another name.
        (
            format!("http://localhost:{port}/ping"),
            "is not in allowed_hosts",
        ),
    ];
    for (url, why) in &refused {
        let answer = session
            .invoke("get", &json!({ "url": url }).to_string())
            .await
            .unwrap();
        let Err(ToolError::Recoverable(message)) = &answer else {
            panic!("{url}: {answer:?}")
        };
        assert!(
            message.starts_with(&format!("GET {url} failed")),
            "{message}"
        );
        assert!(
            message.contains("(the host refused: request to "),
            "{message}"
        );
        assert!(message.contains(why), "{url}: {message}");
    }
    assert!(
        github.received().is_empty(),
        "a refused request reached the server"
    );

    // The allowed origin still works in the same session.
    let ok = session
        .invoke(
            "get",
            &json!({ "url": format!("{}/ping", github.base_url()) }).to_string(),
        )
        .await
        .unwrap();
    assert_eq!(ok.as_deref(), Ok(r#"{"status":200}"#));
    assert_eq!(github.received().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_probe_finds_nothing_outside_its_mount() {
    let mount = tempfile::tempdir().unwrap();
    std::fs::write(mount.path().join("inside.txt"), "mine").unwrap();
    let sandbox = Sandbox::default().with_mount(MountDir::open(mount.path()).unwrap());
    let mut session = ToolSession::lazy(load("test-probe"), sandbox, "{}", "{}", "t_probe")
        .unwrap()
        .open()
        .await
        .unwrap();
    let input = json!({"mount": "/mount", "inside": "/mount/inside.txt"}).to_string();

    for _ in 0..2 {
        let answer = session.invoke("probe", &input).await.unwrap();
        let Err(ToolError::Recoverable(message)) = &answer else {
            panic!("the sandbox leaked: {answer:?}")
        };
        let report: Value =
            serde_json::from_str(message.strip_prefix("the sandbox held: ").unwrap()).unwrap();
        assert_eq!(report["leaked"], json!([]));
        // The positive control: the mount is readable.
        assert_eq!(
            report["allowed"],
            json!([{"what": "/mount/inside.txt", "found": "mine"}])
        );
        let refused: Vec<&str> = report["refused"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["what"].as_str().unwrap())
            .collect();
        for attempt in [
            "/etc/passwd",
            "/proc/self/environ",
            "/mount/../etc/passwd",
            "/mount/../../../../etc/passwd",
            "../etc/passwd",
            "/mount/..",
            "/",
            "environment",
            "arguments",
            "socket 127.0.0.1:9",
        ] {
            assert!(
                refused.contains(&attempt),
                "{attempt} not refused: {report}"
            );
        }
    }

    // Without a mount, even the positive control is refused.
    let mut session = ToolSession::lazy(
        load("test-probe"),
        Sandbox::default(),
        "{}",
        "{}",
        "t_probe",
    )
    .unwrap()
    .open()
    .await
    .unwrap();
    let answer = session.invoke("probe", &input).await.unwrap();
    let Err(ToolError::Recoverable(message)) = &answer else {
        panic!("the sandbox leaked: {answer:?}")
    };
    let report: Value =
        serde_json::from_str(message.strip_prefix("the sandbox held: ").unwrap()).unwrap();
    assert_eq!(report["allowed"], json!([]));
    assert_eq!(report["leaked"], json!([]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_instance_finds_nothing_of_the_previous_one() {
    // A host of one instance: every instance reuses the same pool slot, whose memory is
    // reset in place (the lowest 64 KiB, where a small-stack Rust guest writes) or released.
    let config = PluginConfig {
        max_instances: 1,
        ..PluginConfig::default()
    };
    let host = PluginHost::new(config, Arc::new(MemoryKv::new())).unwrap();
    let probe = host.load(&guest("test-probe")).unwrap();
    let sandbox = Sandbox::default();
    let secret = json!({"secret": "the previous task's secret"}).to_string();

    // The positive control: the instance that remembered finds the secret in its memory.
    let mut session = ToolSession::lazy(probe.clone(), sandbox.clone(), "{}", "{}", "t_1")
        .unwrap()
        .open()
        .await
        .unwrap();
    let remembered = session.invoke("remember", &secret).await.unwrap();
    assert_eq!(remembered.as_deref(), Ok("\"remembered\""));
    let found = session.invoke("recall", &secret).await.unwrap();
    assert!(found.is_ok_and(|f| f.starts_with("{\"found\":[")));
    session.close().await.unwrap();

    for task in ["t_2", "t_3"] {
        let answer = probe
            .call_tool(&sandbox, "{}", "{}", task, "recall", &secret)
            .await
            .unwrap();
        let Err(ToolError::Recoverable(message)) = &answer else {
            panic!("a fresh instance found the previous one's secret: {answer:?}")
        };
        assert!(
            message.starts_with("the sandbox held: no trace"),
            "{message}"
        );
        // Leave the secret again for the next fresh instance to look for.
        let remembered = probe
            .call_tool(&sandbox, "{}", "{}", task, "remember", &secret)
            .await
            .unwrap();
        assert_eq!(remembered.as_deref(), Ok("\"remembered\""));
    }
}
