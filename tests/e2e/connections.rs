//! Bounded connections of `agentmesh serve`: header, body and idle timeouts, the cap on
//! connections under a low descriptor limit, and protocol errors in the API's error shape.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use agentmesh_testkit::client::Response;
use agentmesh_testkit::fixtures::{
    self, API_TOKEN_ENV, API_TOKENS, config_dir, echo_tool, reviewed_agent, scripted_agent, zeros,
};
use agentmesh_testkit::server::{RETURN_FREED_MEMORY, Server, wait_for};
use serde_json::json;

use crate::AGENTMESH;

/// A config dir holding only a host config with `policy`.
fn host_with(policy: &str) -> tempfile::TempDir {
    config_dir(&[(
        "host.yaml",
        &format!("kind: agentmesh/v1/host\npolicy: {{{policy}}}\n"),
    )])
}

/// A started server over a config dir with `policy` (the dirs live as long as the server).
fn serve(policy: &str) -> (Server, tempfile::TempDir, tempfile::TempDir) {
    let dir = host_with(policy);
    let data = tempfile::tempdir().unwrap();
    let server = Server::start(AGENTMESH, dir.path(), data.path(), &[RETURN_FREED_MEMORY]);
    (server, dir, data)
}

/// A connection to `server` that gives up reading after `limit`.
fn connect(server: &Server, limit: Duration) -> TcpStream {
    let stream = TcpStream::connect(server.addr).unwrap();
    stream.set_read_timeout(Some(limit)).unwrap();
    stream
}

/// Reads until the server closes `stream`: what it sent, or a panic naming `what` when it is
/// still open when the read timeout passes.
fn read_until_closed(stream: &mut TcpStream, what: &str) -> Vec<u8> {
    let mut got = Vec::new();
    let mut buf = [0; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return got,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::ConnectionReset => return got,
            Err(e) => panic!(
                "{what}: the server kept the connection open ({e}); it sent {:?}",
                String::from_utf8_lossy(&got)
            ),
        }
    }
}

/// One `GET /healthz` over `stream`, kept alive: the status line, or `None` when the
/// connection gives no answer.
fn healthz_on(stream: &mut TcpStream) -> Option<String> {
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .ok()?;
    let mut got = Vec::new();
    let mut buf = [0; 1024];
    // `ok` is the whole body: the answer is complete once it arrived.
    while !got.ends_with(b"ok") {
        let n = stream.read(&mut buf).ok()?;
        if n == 0 {
            return None;
        }
        got.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&got).into_owned();
    text.lines().next().map(str::to_owned)
}

/// The status of `GET /healthz` on a fresh connection, or `None` without an answer in 5 s.
fn healthz_fresh(server: &Server) -> Option<String> {
    let mut stream = TcpStream::connect(server.addr).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    healthz_on(&mut stream)
}

#[test]
fn stalled_request_head_is_disconnected_after_the_header_timeout() {
    let (server, _dir, _data) = serve("header_timeout: 1s");
    let mut stream = connect(&server, Duration::from_secs(20));
    // The head is never finished: no blank line.
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        .unwrap();
    let got = read_until_closed(&mut stream, "a request head stalled for 20 s");
    assert!(
        !String::from_utf8_lossy(&got).contains(" 200 "),
        "an unfinished head was answered: {}",
        String::from_utf8_lossy(&got)
    );
}

#[test]
fn body_slower_than_the_body_timeout_gets_a_json_408() {
    let (server, _dir, _data) = serve("body_timeout: 1s");
    let mut stream = connect(&server, Duration::from_secs(20));
    // The body is announced as 1000 bytes; 9 arrive, then nothing.
    write!(
        stream,
        "POST /v1/tasks HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
         Content-Length: 1000\r\n\r\n{{\"agent\":",
        server.addr
    )
    .unwrap();
    let got = read_until_closed(&mut stream, "a body stalled for 20 s");
    let text = String::from_utf8_lossy(&got);
    assert!(text.starts_with("HTTP/1.1 408 "), "{text}");
    let body = text.split("\r\n\r\n").nth(1).unwrap_or_default();
    let json: serde_json::Value =
        serde_json::from_str(body).unwrap_or_else(|e| panic!("the 408 is not JSON ({e}): {text}"));
    assert_eq!(json["error"]["code"], "body_timeout", "{json}");
}

#[test]
fn idle_connection_is_closed_after_the_idle_timeout() {
    let (server, _dir, _data) = serve("idle_timeout: 1s");
    let mut stream = connect(&server, Duration::from_secs(20));
    let status = healthz_on(&mut stream).expect("no answer on a fresh connection");
    assert!(status.contains(" 200 "), "{status}");
    // Kept alive, then left idle.
    read_until_closed(&mut stream, "a connection idle for 20 s");
}

#[test]
fn idle_connections_beyond_the_descriptor_limit_do_not_take_the_server_offline() {
    let dir = host_with("idle_timeout: 3s, header_timeout: 3s");
    let data = tempfile::tempdir().unwrap();
    let server = Server::start_with_nofile(AGENTMESH, dir.path(), data.path(), 128, 128);
    let mut kept = connect(&server, Duration::from_secs(20));
    assert!(healthz_on(&mut kept).is_some_and(|s| s.contains(" 200 ")));
    // More idle connections than the server has descriptors; they send nothing. The first
    // one the kernel's listen backlog has no room for ends the flood. Meanwhile, a connection
    // the server had already accepted is still served.
    let mut idle = Vec::new();
    while idle.len() < 400 {
        let Ok(stream) = TcpStream::connect_timeout(&server.addr, Duration::from_millis(500))
        else {
            break;
        };
        idle.push(stream);
        if idle.len() % 50 == 0 {
            let status = healthz_on(&mut kept).unwrap_or_else(|| {
                panic!(
                    "the open connection got no answer after {} more",
                    idle.len()
                )
            });
            assert!(status.contains(" 200 "), "{status}");
        }
    }
    assert!(
        idle.len() > 128,
        "only {} connections were made",
        idle.len()
    );
    // A new one is served once the idle ones time out.
    let status =
        wait_for(Duration::from_secs(90), || healthz_fresh(&server)).unwrap_or_else(|| {
            let made = idle.len();
            panic!("a fresh connection got no answer in 90 s behind {made} idle connections")
        });
    assert!(status.contains(" 200 "), "{status}");
    drop(idle);
    assert_eq!(
        server.terminate(),
        Some(0),
        "the server did not drain and exit 0"
    );
}

#[test]
fn start_raises_the_descriptor_soft_limit_to_the_hard_limit() {
    let dir = host_with("");
    let data = tempfile::tempdir().unwrap();
    let server = Server::start_with_nofile(AGENTMESH, dir.path(), data.path(), 200, 300);
    let startup = server.startup.join("\n");
    assert!(
        startup.contains("descriptor limit 300"),
        "the raised limit is not logged:\n{startup}"
    );
}

/// The answer to `GET /healthz` with `extra` header lines, on a fresh connection.
fn healthz_with(server: &Server, path: &str, extra: &str) -> (u16, serde_json::Value, String) {
    let mut stream = connect(server, Duration::from_secs(20));
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{extra}\r\n"
    )
    .unwrap();
    let got = read_until_closed(&mut stream, "an oversized request");
    let text = String::from_utf8_lossy(&got).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line: {text}"));
    let body = text.split("\r\n\r\n").nth(1).unwrap_or_default();
    let json = serde_json::from_str(body).unwrap_or(serde_json::Value::Null);
    (status, json, text)
}

#[test]
fn uri_too_long_answers_the_json_error_shape() {
    let (server, _dir, _data) = serve("");
    let path = format!("/healthz?pad={}", "a".repeat(16 * 1024));
    let (status, json, text) = healthz_with(&server, &path, "");
    assert_eq!(status, 414, "{text}");
    assert_eq!(json["error"]["code"], "uri_too_long", "{text}");
}

#[test]
fn headers_too_large_answer_the_json_error_shape() {
    let (server, _dir, _data) = serve("");
    let big = format!("X-Pad: {}\r\n", "a".repeat(100 * 1024));
    let (status, json, text) = healthz_with(&server, "/healthz", &big);
    assert_eq!(status, 431, "{text}");
    assert_eq!(json["error"]["code"], "headers_too_large", "{text}");
    let many: String = (0..150).map(|i| format!("X-Pad-{i}: a\r\n")).collect();
    let (status, json, text) = healthz_with(&server, "/healthz", &many);
    assert_eq!(status, 431, "{text}");
    assert_eq!(json["error"]["code"], "headers_too_large", "{text}");
}

#[test]
fn a_large_answer_read_slowly_is_not_cut_by_the_idle_timeout() {
    let manifests = format!(
        "{}---\nkind: agentmesh/v1/host\npolicy: {{idle_timeout: 1s}}\n",
        scripted_agent("lab/big", "")
    );
    let (_root, dir, data) = fixtures::dirs(&[
        ("manifests.yaml", &manifests),
        (
            "script.yaml",
            "responses:\n  - text: Noted.\n  - text: Noted.\n",
        ),
    ]);
    let server = Server::start(AGENTMESH, &dir, &data, &[]);
    // Two inputs of 10 MB: an events answer larger than the loopback socket buffers hold, so
    // most of it is still in the server when the client starts reading.
    let message = "x".repeat(10_000_000);
    let id = server.create_task(&json!({"agent": "lab/big", "input": {"message": message}}));
    server.send_input(&id, &message);
    wait_for(Duration::from_secs(60), || {
        let r = server
            .request("GET", &format!("/v1/tasks/{id}/events"))
            .send();
        let events = r.json()["events"].as_array()?.clone();
        let answers = events
            .iter()
            .filter(|e| e["kind"] == "MessageEvent" && e["source"] == "agent");
        (answers.count() >= 2).then_some(())
    })
    .expect("the task did not answer both inputs in 60 s");

    let mut stream = connect(&server, Duration::from_secs(20));
    write!(
        stream,
        "GET /v1/tasks/{id}/events HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
        server.addr
    )
    .unwrap();
    // The client reads slowly (about 6 MB/s, in 64 KiB reads), for about three idle
    // timeouts: the server is sending an answer all along, which is not idleness.
    let mut got = Vec::new();
    let mut buf = vec![0; 64 * 1024];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::ConnectionReset => break,
            Err(e) => panic!("the answer stalled: {e}"),
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let text = String::from_utf8_lossy(&got);
    let (head, body) = text.split_once("\r\n\r\n").expect("no answer head");
    let length: usize = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-length: ")?
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("no Content-Length: {head}"));
    assert!(length > 20_000_000, "{head}");
    assert_eq!(body.len(), length, "the answer was cut short");
}

/// The head of the answer on `stream` (up to the blank line), or a panic naming `what` when
/// none comes before the stream's read timeout.
fn answer_head(stream: &mut TcpStream, what: &str) -> String {
    let mut got = Vec::new();
    let mut byte = [0; 1];
    while !got.ends_with(b"\r\n\r\n") {
        match stream.read(&mut byte) {
            Ok(1) => got.push(byte[0]),
            Ok(_) => break,
            Err(e) => panic!("{what}: no answer ({e})"),
        }
    }
    String::from_utf8_lossy(&got).into_owned()
}

#[test]
fn a_large_body_is_not_waited_for_from_a_caller_without_a_token() {
    let dir = config_dir(&[("host.yaml", API_TOKENS)]);
    let data = tempfile::tempdir().unwrap();
    let server = Server::start(AGENTMESH, dir.path(), data.path(), &API_TOKEN_ENV);
    // Each request announces 20 MB and sends one byte: an answer that waits for the body
    // (up to the 60 s body timeout) would let callers without a token hold that much each.
    let requests = [
        ("/v1/tasks", "application/json", ""),
        (
            "/v1/tasks",
            "application/json",
            "Authorization: Bearer wrong\r\n",
        ),
        ("/v1/tasks/t_x/input", "application/json", ""),
        ("/v1/tasks/t_x/reviews/r_x", "application/json", ""),
        ("/ui/login", "application/x-www-form-urlencoded", ""),
    ];
    for (path, kind, auth) in requests {
        let mut stream = connect(&server, Duration::from_secs(10));
        write!(
            stream,
            "POST {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: {kind}\r\n\
             Content-Length: 20000000\r\n{auth}\r\n{{",
            server.addr
        )
        .unwrap();
        let head = answer_head(&mut stream, &format!("POST {path} {auth}"));
        let expected = match path {
            // The login form is the token: it is read, but a form is never that large.
            "/ui/login" => " 413 ",
            _ => " 401 ",
        };
        assert!(head.contains(expected), "POST {path} {auth}: {head}");
    }
}

/// A started server whose tool `lab/feed` takes unsigned webhook deliveries, with `policy`
/// (the dirs live as long as the server).
fn serve_feed(policy: &str) -> (Server, tempfile::TempDir, tempfile::TempDir) {
    serve_feed_with(policy, "posted", &[])
}

/// [`serve_feed`] with the event's message template `message` and more config `files`.
fn serve_feed_with(
    policy: &str,
    message: &str,
    files: &[(&str, &str)],
) -> (Server, tempfile::TempDir, tempfile::TempDir) {
    let tool = format!(
        "kind: commonagents.info/v1beta2/tool
namespace: lab
name: feed
description: A feed that signs nothing.
actions:
  - name: read
    description: Read.
    execute: {{cel: {{expression: \"'read'\"}}}}
events:
  - name: posted
    message: \"{message}\"
    receive:
      webhook: {{}}
"
    );
    let host = format!("kind: agentmesh/v1/host\npolicy: {{{policy}}}\n");
    let mut files = files.to_vec();
    files.extend([("feed.yaml", tool.as_str()), ("host.yaml", &host)]);
    let dir = config_dir(&files);
    let data = tempfile::tempdir().unwrap();
    let server = Server::start(AGENTMESH, dir.path(), data.path(), &[RETURN_FREED_MEMORY]);
    (server, dir, data)
}

/// A delivery of JSON `body` to `lab/feed`.
fn to_feed(server: &Server, body: &[u8]) -> Response {
    server
        .request("POST", "/v1/webhooks/tools/lab/feed")
        .header("Content-Type", "application/json")
        .body(body.to_vec())
        .send()
}

/// What `/metrics` says the bodies being handled take.
fn body_memory(server: &Server) -> usize {
    let metrics = server.request("GET", "/metrics").send().text();
    metrics
        .lines()
        .find_map(|l| l.strip_prefix("agentmesh_body_memory_bytes "))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no agentmesh_body_memory_bytes in /metrics: {metrics}"))
}

#[test]
fn a_body_of_tiny_json_values_is_refused_before_it_is_parsed() {
    // 20 MB of `[0,0,…]`, under the default 25 MiB body cap and with no signature to check:
    // parsed, it is 10 million 80-byte values, and routing copied the tree for every event.
    // The host's peak memory grew by ~2 GB for it, and it was answered 202 after 4 s; now it
    // is refused unparsed, within the default max_body_memory (256 MiB).
    let (server, _dir, _data) = serve_feed("");
    let body = zeros(10_000_000);
    let before = server.peak_rss_kib();
    let r = to_feed(&server, &body);
    assert_eq!(r.status, 413, "{}", r.text());
    assert_eq!(r.json()["error"]["code"], "too_large");
    assert!(r.text().contains("max_body_memory"), "{}", r.text());
    let grew = server.peak_rss_kib().saturating_sub(before);
    assert!(
        grew < 256 * 1024,
        "the host's peak memory grew by {grew} KiB for one body"
    );
    // An ordinary delivery is taken.
    let r = to_feed(&server, br#"{"text": "hello"}"#);
    assert_eq!(r.status, 202, "{}", r.text());
}

#[test]
fn a_routed_body_takes_no_more_memory_than_it_was_charged() {
    // A body is charged for its bytes and for one parsed tree of its JSON. Routing it to a
    // task made more trees of it: the event's envelope, the routing filter's variable, the
    // task's middleware variables, the message's. A task whose middleware and message read the
    // event is where they all exist at once.
    let reader = scripted_agent(
        "lab/reader",
        "capabilities:
  feed:
    before:
      - assert: \"!has(event) || size(event.payload) > 0\"
",
    );
    let script = "responses:\n  - text: Ready.\n  - text: Read.\n";
    let (server, _dir, _data) = serve_feed_with(
        "max_body_memory: 64MiB",
        "posted {size(event.payload)}",
        &[("reader.yaml", &reader), ("script.yaml", script)],
    );
    let id = server.create_task(&json!({"agent": "lab/reader", "input": {"message": "go"}}));
    server.wait_for_status(&id, "idle");
    // Charged ~59 MB of the 64 MiB: 262,145 values of two bytes each, one past a power of two
    // (the array's `Vec` has just grown: its old block and its new one held at once).
    let body = zeros(262_145);
    let r = server.grows_less_than(64 * 1024, || to_feed(&server, &body));
    assert_eq!(r.status, 202, "{}", r.text());
    // The task took it: the event reached its message.
    let took = wait_for(Duration::from_secs(20), || {
        let log = server
            .request("GET", &format!("/v1/tasks/{id}/events"))
            .send()
            .text();
        log.contains("posted 262145").then_some(())
    });
    assert!(took.is_some(), "the task never took the delivery");
}

#[test]
fn a_tasks_input_takes_no_more_memory_than_it_was_charged() {
    // A body is charged for one parsed tree of its JSON; an input's was parsed, then copied
    // whole by its normalization, and its message copied again.
    let careful = format!(
        "{}parameters:\n  type: object\n  properties:\n    data: {{type: array, default: []}}\n",
        reviewed_agent("lab/careful", "script.yaml")
    );
    let script = "responses:\n  - tool_calls: [{name: echo, arguments: {text: hi}}]\n";
    let echo = echo_tool("lab");
    let (server, _dir, _data) = serve_feed_with(
        "max_body_memory: 64MiB",
        "posted",
        &[
            ("careful.yaml", &careful),
            ("echo.yaml", &echo),
            ("script.yaml", script),
        ],
    );
    let id = server.create_task(&json!({"agent": "lab/careful", "input": {"message": "go"}}));
    // Its turn waits for a review: the input below is queued, and nothing runs it.
    server.wait_for_event(&id, "ReviewRequestEvent");
    // Charged ~59 MB of the 64 MiB, as a routed body of the same zeros is.
    let mut body =
        br#"{"message": [{"mimeType": "text/plain", "text": "more"}], "data": "#.to_vec();
    body.extend(zeros(262_145));
    body.push(b'}');
    let input = server
        .request("POST", &format!("/v1/tasks/{id}/input"))
        .header("Content-Type", "application/json")
        .body(body);
    let r = server.grows_less_than(64 * 1024, || input.send());
    assert_eq!(r.status, 202, "{}", r.text());
}

#[test]
fn a_body_that_does_not_fit_beside_the_others_is_503_until_they_are_done() {
    let (server, _dir, _data) = serve_feed("max_body_memory: 1MiB");
    // One client sends all but the last byte of 1,000 KiB, and holds it there.
    let announced = 1000 * 1024;
    let mut holding = connect(&server, Duration::from_secs(20));
    write!(
        holding,
        "POST /v1/webhooks/tools/lab/feed HTTP/1.1\r\nHost: {}\r\n\
         Content-Type: application/json\r\nContent-Length: {announced}\r\n\r\n",
        server.addr
    )
    .unwrap();
    holding.write_all(&vec![b' '; announced - 1]).unwrap();
    let held = wait_for(Duration::from_secs(20), || {
        let charged = body_memory(&server);
        (charged >= announced - 1).then_some(charged)
    });
    assert!(
        held.is_some(),
        "the first body is never all read: {}",
        body_memory(&server)
    );
    // 30 KiB of text fits in 1 MiB alone, not in what the first one leaves.
    let delivery = json!({"text": "x".repeat(30 * 1024)}).to_string();
    let send = || to_feed(&server, delivery.as_bytes());
    let busy = send();
    assert_eq!(busy.status, 503, "{}", busy.text());
    assert_eq!(busy.json()["error"]["code"], "busy", "{}", busy.text());
    let retry = busy
        .headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("retry-after"));
    assert_eq!(
        retry.map(|(_, v)| v.as_str()),
        Some("1"),
        "{:?}",
        busy.headers
    );
    // Once the first client is gone, its room is given back.
    drop(holding);
    let freed = wait_for(Duration::from_secs(20), || {
        (body_memory(&server) == 0).then_some(())
    });
    assert!(freed.is_some(), "still charged: {}", body_memory(&server));
    let taken = send();
    assert_eq!(taken.status, 202, "{}", taken.text());
    // A body whose JSON could never fit is a 413, not a 503 to retry: 100 KiB of `[0,…]`.
    let r = to_feed(&server, &zeros(50 * 1024));
    assert_eq!(r.status, 413, "{}", r.text());
}

#[test]
fn a_body_sent_in_chunks_without_a_length_is_read_whole() {
    let (server, _dir, _data) = serve_feed("max_body_memory: 1MiB");
    let mut stream = connect(&server, Duration::from_secs(20));
    write!(
        stream,
        "POST /v1/webhooks/tools/lab/feed HTTP/1.1\r\nHost: {}\r\n\
         Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n",
        server.addr
    )
    .unwrap();
    // 200 KiB in 1 KiB chunks: `{"text": "xx…x"}`.
    let text = "x".repeat(200 * 1024);
    let body = format!("{{\"text\": \"{text}\"}}");
    for chunk in body.as_bytes().chunks(1024) {
        write!(stream, "{:x}\r\n", chunk.len()).unwrap();
        stream.write_all(chunk).unwrap();
        stream.write_all(b"\r\n").unwrap();
    }
    stream.write_all(b"0\r\n\r\n").unwrap();
    let head = answer_head(&mut stream, "a chunked delivery");
    assert!(head.starts_with("HTTP/1.1 202 "), "{head}");
}

#[test]
fn a_reload_puts_a_new_max_body_memory_in_force() {
    let (server, dir, _data) = serve_feed("max_body_memory: 1MiB");
    // 30 KiB of `[0,…]`: ~2.5 MB once parsed.
    let body = zeros(15 * 1024);
    let send = || to_feed(&server, &body);
    let r = send();
    assert_eq!(r.status, 413, "{}", r.text());
    assert!(
        r.text().contains("max_body_memory (1048576 bytes)"),
        "{}",
        r.text()
    );
    std::fs::write(
        dir.path().join("host.yaml"),
        "kind: agentmesh/v1/host\npolicy: {max_body_memory: 8MiB}\n",
    )
    .unwrap();
    let taken = wait_for(Duration::from_secs(30), || {
        let r = send();
        (r.status != 413).then_some(r)
    })
    .unwrap_or_else(|| panic!("the reloaded bound is never in force: {}", send().text()));
    assert_eq!(taken.status, 202, "{}", taken.text());
}
