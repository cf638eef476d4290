//! Limits: a runaway loop is stopped at its timeout, a memory hog at its memory limit, a guest
//! holding host memory through WASI resources at about its memory limit, an oversized answer
//! refused — each a recoverable fault, and the next call is served; a call's log is bounded;
//! the connections an instance holds open are bounded;
//! input nested as deep as the JSON parser allows fits a guest's (small) stack.

use std::time::{Duration, Instant};

use agentmesh_plugins::{Fault, Limits, Sandbox, ToolError, ToolSession};
use serde_json::json;

use crate::util::{FakeGithub, capture_log, load};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_infinite_loop_is_stopped_at_its_timeout() {
    let timeout = Duration::from_millis(300);
    let sandbox = Sandbox::new(Limits {
        timeout,
        ..Limits::default()
    });
    let mut session = ToolSession::lazy(load("test-loop"), sandbox, "{}", "{}", "t_loop")
        .unwrap()
        .open()
        .await
        .unwrap();
    let started = Instant::now();
    // How soon after its timeout the loop stops is measured by the `tool_call` bench; a
    // loop that is never stopped fails here instead of hanging the suite.
    let answer = tokio::time::timeout(Duration::from_secs(60), session.invoke("spin", "{}"))
        .await
        .expect("the loop was never stopped")
        .unwrap();
    let elapsed = started.elapsed();
    let Err(ToolError::Fault(Fault::Timeout { limit, .. })) = &answer else {
        panic!("{answer:?}")
    };
    assert_eq!(*limit, timeout);
    assert!(
        elapsed >= timeout,
        "stopped after {elapsed:?}, before its {timeout:?} timeout"
    );
    let message = answer.unwrap_err().to_string();
    assert_eq!(
        message,
        "component `test-loop` ran longer than its 300ms timeout and was stopped"
    );
    // The session's instance was replaced; the next call runs (and is stopped) again.
    let again = session.invoke("spin", "{}").await.unwrap();
    assert!(
        matches!(again, Err(ToolError::Fault(Fault::Timeout { .. }))),
        "{again:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn looping_guests_leave_the_async_workers() {
    // As many looping guests as the runtime has workers: before calls that run long left the
    // workers, they held both for their whole timeout and nothing else on the runtime ran.
    let timeout = Duration::from_secs(1);
    let calls: Vec<_> = (0..2)
        .map(|i| {
            tokio::spawn(async move {
                let sandbox = Sandbox::new(Limits {
                    timeout,
                    ..Limits::default()
                });
                let mut session =
                    ToolSession::lazy(load("test-loop"), sandbox, "{}", "{}", &format!("t_{i}"))
                        .unwrap()
                        .open()
                        .await
                        .unwrap();
                session.invoke("spin", "{}").await.unwrap()
            })
        })
        .collect();
    // Meanwhile another task of the runtime wakes every 10 ms: ~100 times in the second.
    let woken = tokio::spawn(async move {
        let mut woken = 0;
        let started = Instant::now();
        while started.elapsed() < timeout {
            tokio::time::sleep(Duration::from_millis(10)).await;
            woken += 1;
        }
        woken
    })
    .await
    .unwrap();
    for call in calls {
        let answer = call.await.unwrap();
        assert!(
            matches!(answer, Err(ToolError::Fault(Fault::Timeout { .. }))),
            "{answer:?}"
        );
    }
    assert!(
        woken >= 20,
        "the runtime ran other work {woken} times in a second"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_hog_fails_at_its_memory_limit() {
    let sandbox = Sandbox::new(Limits {
        memory: 32 * 1024 * 1024,
        ..Limits::default()
    });
    let hog = load("test-hog");
    let answer = hog
        .call_tool(&sandbox, "{}", "{}", "t_hog", "eat", "{}")
        .await
        .unwrap();
    let Err(ToolError::Fault(fault @ Fault::MemoryLimit { limit, .. })) = &answer else {
        panic!("{answer:?}")
    };
    assert_eq!(*limit, 32 * 1024 * 1024);
    assert_eq!(
        fault.to_string(),
        "component `test-hog` exceeded its memory limit of 32768 KiB"
    );
    // The host goes on: another component runs in the same host right after.
    let notes = load("notes");
    let next = notes
        .call_tool(&sandbox, "{}", "{}", "t_hog", "list", "{}")
        .await
        .unwrap();
    assert_eq!(next.as_deref(), Ok(r#"{"keys":[]}"#));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_holds_at_most_its_share_of_connections_open() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    // A server that answers every request with a body it never finishes, keeping each
    // connection open until the client lets go; it counts the connections open at once.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (open, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let counts = (Arc::clone(&open), Arc::clone(&most));
    let server = tokio::spawn(async move {
        loop {
            let (mut socket, _) = listener.accept().await.unwrap();
            let (open, most) = (Arc::clone(&counts.0), Arc::clone(&counts.1));
            tokio::spawn(async move {
                let now = open.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                let mut buf = [0u8; 4096];
                let _ = socket.read(&mut buf).await;
                let head = "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n1\r\na\r\n";
                let _ = socket.write_all(head.as_bytes()).await;
                // Open until the client closes it.
                while matches!(socket.read(&mut buf).await, Ok(n) if n > 0) {}
                open.fetch_sub(1, Ordering::SeqCst);
            });
        }
    });

    let sandbox = Sandbox::default().allow(&format!("http://{addr}")).unwrap();
    let mut session = ToolSession::lazy(load("test-header-hog"), sandbox, "{}", "{}", "t_conn")
        .unwrap()
        .open()
        .await
        .unwrap();
    let max = agentmesh_plugins::http::MAX_CONNECTIONS;
    let input = json!({"url": format!("http://{addr}/hold"), "requests": max + 24}).to_string();
    for call in 0..2 {
        let answer = session.invoke("connect", &input).await.unwrap();
        let answer: serde_json::Value = serde_json::from_str(&answer.unwrap()).unwrap();
        assert_eq!(
            answer,
            json!({"answered": max, "refused": 24, "error": "ErrorCode::ConnectionLimitReached"}),
            "call {call}"
        );
        assert!(
            most.load(Ordering::SeqCst) <= max,
            "call {call}: {} connections were open at once",
            most.load(Ordering::SeqCst)
        );
        // The responses went with the call: their connections close.
        let deadline = Instant::now() + Duration::from_secs(10);
        while open.load(Ordering::SeqCst) > 0 {
            assert!(Instant::now() < deadline, "the connections stayed open");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    server.abort();
}

/// A session of `test-header-hog` with a memory limit of 16 MiB.
async fn header_hog(task: &str) -> ToolSession {
    let sandbox = Sandbox::new(Limits {
        memory: 16 * 1024 * 1024,
        ..Limits::default()
    });
    ToolSession::lazy(load("test-header-hog"), sandbox, "{}", "{}", task)
        .unwrap()
        .open()
        .await
        .unwrap()
}

/// Asks `test-header-hog` to hold `bytes` in header values of `value` bytes each; expects it
/// to be stopped with `refusal`, and the session's next call, in a fresh instance, to hold what
/// fits.
async fn assert_header_hog_stopped(task: &str, bytes: u64, value: u64, refusal: &str) {
    let mut session = header_hog(task).await;
    let hold = json!({"bytes": bytes, "value": value}).to_string();
    let answer = session.invoke("hold", &hold).await.unwrap();
    let Err(ToolError::Fault(fault @ Fault::Refused { .. })) = &answer else {
        panic!("the guest held more than its memory limit of 16 MiB: {answer:?}")
    };
    assert_eq!(
        fault.to_string(),
        format!("component `test-header-hog` was stopped: {refusal}")
    );
    let fits = json!({"bytes": 1 << 20, "value": 4 << 10}).to_string();
    let answer = session.invoke("hold", &fits).await.unwrap();
    assert_eq!(answer.as_deref(), Ok(r#"{"fields":256,"held":1048576}"#));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn header_sets_cannot_hold_more_than_the_memory_limit() {
    // 48 MiB, three times the memory limit, in header values of 64 KiB made from one buffer of
    // the guest's: host memory its own memory limit does not see.
    assert_header_hog_stopped(
        "t_headers",
        48 << 20,
        64 << 10,
        "an HTTP header set (wasi:http `fields`) grew past 16384 bytes, the most one may hold in an instance with a memory limit of 16384 KiB",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_holding_too_many_host_resources_is_stopped() {
    // Values of 4 KiB, well within the size of one header set: only their number can stop the
    // guest before it holds 48 MiB (12,288 header sets).
    assert_header_hog_stopped(
        "t_resources",
        48 << 20,
        4 << 10,
        "it held 1024 host resources (WASI streams, HTTP header sets, requests, responses, ...) at once, the most an instance may",
    )
    .await;
}

// On the current-thread runtime: the guest logs on the thread that polls its call, the one
// whose log is captured.
#[tokio::test]
async fn a_call_logs_at_most_its_budget_and_says_what_it_dropped() {
    let (_guard, logged) = capture_log();
    let mut session = ToolSession::lazy(
        load("test-log-flood"),
        Sandbox::default(),
        "{}",
        "{}",
        "t_flood",
    )
    .unwrap()
    .open()
    .await
    .unwrap();
    let flood = |logged: &[crate::util::Logged]| -> Vec<String> {
        logged
            .iter()
            .filter(|l| l.component.as_deref() == Some("test-log-flood"))
            .map(|l| l.message.clone())
            .collect()
    };
    // 10,000 messages of 1 KiB: 10 MB in one call.
    let answer = session
        .invoke(
            "flood",
            &json!({"messages": 10_000, "bytes": 1024}).to_string(),
        )
        .await
        .unwrap();
    assert_eq!(answer.as_deref(), Ok(r#"{"logged":10000}"#));
    let messages = flood(&logged.lock().unwrap());
    let kept: Vec<&String> = messages
        .iter()
        .filter(|m| m.starts_with("message "))
        .collect();
    let bytes: usize = kept.iter().map(|m| m.len()).sum();
    assert!(
        bytes <= 64 * 1024,
        "{} messages, {bytes} bytes reached the log in one call",
        kept.len()
    );
    // The first 64 KiB, in order, then one line for the rest.
    assert_eq!(kept.len(), 64);
    assert!(kept[63].starts_with("message 64 "), "{}", kept[63]);
    let dropped: Vec<&String> = messages
        .iter()
        .filter(|m| m.starts_with("dropped "))
        .collect();
    assert_eq!(
        dropped,
        ["dropped 9936 log messages (10174464 bytes) of this call: over its budget of 65536 bytes"]
    );
    // The budget is per call: the next call logs again.
    logged.lock().unwrap().clear();
    let answer = session
        .invoke("flood", &json!({"messages": 10, "bytes": 1024}).to_string())
        .await
        .unwrap();
    assert_eq!(answer.as_deref(), Ok(r#"{"logged":10}"#));
    let messages = flood(&logged.lock().unwrap());
    let kept = messages
        .iter()
        .filter(|m| m.starts_with("message "))
        .count();
    assert_eq!(kept, 10, "{messages:?}");
    assert!(!messages.iter().any(|m| m.starts_with("dropped ")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_output_is_refused_and_the_session_goes_on() {
    // Room in memory for the 100 MB answer, but a 1 MiB output limit.
    let sandbox = Sandbox::new(Limits {
        memory: 256 * 1024 * 1024,
        max_output: 1024 * 1024,
        ..Limits::default()
    });
    let mut session = ToolSession::lazy(load("test-huge-output"), sandbox, "{}", "{}", "t_huge")
        .unwrap()
        .open()
        .await
        .unwrap();
    let answer = session.invoke("dump", "{}").await.unwrap();
    let Err(ToolError::Fault(fault @ Fault::OutputTooLarge { size, limit, .. })) = &answer else {
        panic!("{answer:?}")
    };
    assert_eq!((*size, *limit), (100_000_000, 1024 * 1024));
    assert_eq!(
        fault.to_string(),
        "component `test-huge-output` returned 100000000 bytes, more than its output limit of 1048576 bytes"
    );
    let small = session
        .invoke("dump", r#"{"bytes": 1000}"#)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(small.len(), 1000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_waiting_on_a_slow_server_is_stopped_at_its_timeout() {
    // The guest is blocked in the host (waiting for the answer), where no epoch check runs:
    // the host-side deadline stops it.
    let github = FakeGithub::start().await;
    let timeout = Duration::from_millis(300);
    let sandbox = Sandbox::new(Limits {
        timeout,
        ..Limits::default()
    })
    .allow(&github.base_url())
    .unwrap();
    let mut session = ToolSession::lazy(load("test-forbidden-host"), sandbox, "{}", "{}", "t_slow")
        .unwrap()
        .open()
        .await
        .unwrap();
    let slow = serde_json::json!({ "url": format!("{}/slow", github.base_url()) }).to_string();
    let started = Instant::now();
    let answer = session.invoke("get", &slow).await.unwrap();
    assert!(
        matches!(answer, Err(ToolError::Fault(Fault::Timeout { .. }))),
        "{answer:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "stopped after {:?}",
        started.elapsed()
    );
    // The session's next call gets a fresh instance and an answer.
    let ping = serde_json::json!({ "url": format!("{}/ping", github.base_url()) }).to_string();
    let answer = session.invoke("get", &ping).await.unwrap();
    assert_eq!(answer.as_deref(), Ok(r#"{"status":200}"#));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn input_nested_to_the_json_limit_fits_a_guest_stack() {
    // The guests link with a 32 KiB stack (`.cargo/config.toml`). Parsing JSON nested up to
    // serde_json's limit of 128 levels fits in it (a 16 KiB stack overflows at 100); deeper
    // input is refused by the parser, not by a stack overflow.
    let program = load("test-huge-output");
    for depth in [126, 127, 10_000] {
        let value = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        let input = format!(r#"{{"bytes": 4, "nested": {value}}}"#);
        let answer = program
            .call_tool(&Sandbox::default(), "{}", "{}", "t_deep", "answer", &input)
            .await
            .unwrap();
        if depth < 127 {
            assert_eq!(answer.as_deref(), Ok(r#""xx""#), "depth {depth}");
        } else {
            let Err(ToolError::Recoverable(message)) = &answer else {
                panic!("depth {depth}: {answer:?}")
            };
            assert!(
                message.contains("recursion limit exceeded"),
                "depth {depth}: {message}"
            );
        }
    }
}
