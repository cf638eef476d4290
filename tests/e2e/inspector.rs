//! The inspector (`/ui/`) in a real headless Chromium (Debian's `chromium` and
//! `chromium-driver`) against the real binary on loopback: logging in with a token, a task's
//! event arriving live, approving a review, the reviews inbox's pages, the "triggered turns"
//! filter with a task a real trigger fired, a failing schedule's error, escaping, and the
//! headers and checks a browser relies on (CSP, the session cookie, CSRF).
//!
//! `AGENTMESH_SCREENSHOTS=DIR` makes `every_view_renders_in_the_browser` keep a PNG of each
//! view in DIR (`scripts/screenshots.sh` refreshes `docs/inspector/` this way).

use std::io::{BufReader, Read as _, Write as _};
use std::net::TcpStream;
use std::path::Path;
use std::time::Duration;

use agentmesh_testkit::browser::Browser;
use agentmesh_testkit::fixtures::{
    self, API_TOKEN_ENV, API_TOKENS, echo_tool, reviewed_agent, scripted_agent,
};
use agentmesh_testkit::server::{Server, wait_for};
use serde_json::json;

use crate::AGENTMESH;
use crate::util::rest_of_stream;
use crate::wasm::guest;

/// An agent whose `repo` must have 5 characters or more, and a schedule that ticks every
/// second with a shorter one, so that every tick fails (`validate` checks that required
/// parameters are set, not every constraint of their schema).
const FAILING_SCHEDULE: &str = "kind: commonagents.info/v1beta2/agent
namespace: lab
name: needy
description: Needs a repo.
prompt: Help.
model: scripted/plain.yaml
parameters:
  type: object
  properties:
    repo: {type: string, minLength: 5}
  required: [repo]
---
kind: commonagents.info/v1/schedule
namespace: lab
name: nightly
agent: needy
owner: user:ops
interval: 1s
inputs:
  message: Tick.
  repo: abc
";

/// A tool `lab/notes` on the `notes` guest component (copied in as `notes.wasm`).
const NOTES_TOOL: &str = "kind: commonagents.info/v1beta2/tool
namespace: lab
name: notes
description: Notes.
wasm:
  component: notes.wasm
actions:
  - name: list
    description: List.
---
";

/// `lab/careful` (its `echo` calls reviewed by `user:ops`, then `Echoed.`), `lab/plain`
/// (answers `Plain.` and more), `lab/needy` with its failing schedule, and the API tokens;
/// with `component`, also [`NOTES_TOOL`].
fn start() -> (tempfile::TempDir, Server) {
    start_with(false)
}

fn start_with(component: bool) -> (tempfile::TempDir, Server) {
    let careful = reviewed_agent("lab/careful", "careful.yaml");
    let plain = scripted_agent("lab/plain", "").replace("script.yaml", "plain.yaml");
    let notes = if component { NOTES_TOOL } else { "" };
    let manifests = format!(
        "{notes}{}---\n{careful}---\n{plain}---\n{FAILING_SCHEDULE}---\n{API_TOKENS}",
        echo_tool("lab")
    );
    let (root, dir, data) = fixtures::dirs(&[
        ("manifests.yaml", &manifests),
        (
            "careful.yaml",
            "responses:\n  - tool_calls: [{name: echo, arguments: {text: hi}}]\n  - text: Echoed.\n",
        ),
        (
            "plain.yaml",
            "responses:\n  - text: Plain.\n  - text: Plain again.\n  - text: Plain for the third time.\n",
        ),
    ]);
    if component {
        std::fs::copy(guest("notes"), dir.join("notes.wasm")).unwrap();
    }
    let server = Server::start(AGENTMESH, &dir, &data, &API_TOKEN_ENV);
    (root, server)
}

/// Creates a task of `agent` with `message` as the token's subject; waits until it is idle
/// or waiting.
pub(crate) fn task(server: &Server, token: &str, agent: &str, message: &str) -> String {
    let body = json!({"agent": agent, "input": {"message": message}});
    let id = server.create_task_as(token, &body);
    wait_for(Duration::from_secs(20), || {
        let t = server
            .request("GET", &format!("/v1/tasks/{id}"))
            .header("Authorization", &format!("Bearer {token}"))
            .send()
            .json();
        // A new task is idle before its runner takes the input: settled once it is taken.
        (matches!(t["status"].as_str(), Some("idle" | "waiting")) && t["queue_depth"] == 0)
            .then_some(())
    })
    .unwrap_or_else(|| panic!("task {id} did not settle"));
    id
}

/// Logs the browser in at `server` with `token`, from the page `path` (which sends it to
/// the login page first).
fn log_in(browser: &Browser, server: &Server, token: &str, path: &str) {
    browser.goto(&format!("http://{}{path}", server.addr));
    assert!(
        browser.url().contains("/ui/login"),
        "not sent to the login page: {}",
        browser.url()
    );
    let field = browser.find("input#token");
    browser.type_into(&field, token);
    browser.click(&browser.find("form.login button[type=submit]"));
    let url = browser.wait_for_url(path, Duration::from_secs(10));
    assert!(url.ends_with(path), "after logging in: {url}");
    assert!(!url.contains(token), "the token is in a URL: {url}");
}

#[test]
fn logging_in_shows_the_tasks_and_a_new_event_arrives_live() {
    let (_root, server) = start();
    let id = task(&server, "admin-token", "lab/plain", "hello");
    let browser = Browser::start();
    log_in(&browser, &server, "admin-token", "/ui/");
    assert!(
        browser.wait_for_text(&id, Duration::from_secs(5)),
        "{}",
        browser.text_of_page()
    );
    // The session cookie is out of the page's reach.
    assert_eq!(browser.execute("return document.cookie;"), json!(""));
    // The list's first page follows new tasks without a reload.
    browser.execute("window.sameList = true; return null;");
    let newer = task(&server, "admin-token", "lab/plain", "another");
    assert!(
        browser.wait_for_text(&newer, Duration::from_secs(10)),
        "the new task did not appear: {}",
        browser.text_of_page()
    );
    assert_eq!(
        browser.execute("return window.sameList === true;"),
        json!(true)
    );

    browser.click(&browser.find(&format!("a[href='/ui/tasks/{id}']")));
    assert!(browser.wait_for_text("Plain.", Duration::from_secs(5)));
    assert!(
        browser.wait_for_text("Live", Duration::from_secs(10)),
        "the stream did not open: {}",
        browser.text_of_page()
    );
    // Input through the API: the page shows its answer without being reloaded.
    browser.execute("window.sameDocument = true; return null;");
    let r = server
        .request("POST", &format!("/v1/tasks/{id}/input"))
        .header("Authorization", "Bearer admin-token")
        .json(&json!({"message": "again"}))
        .send();
    assert_eq!(r.status, 202, "{}", r.text());
    assert!(
        browser.wait_for_text("Plain again.", Duration::from_secs(15)),
        "the answer did not arrive live: {}",
        browser.text_of_page()
    );
    assert_eq!(
        browser.execute("return window.sameDocument === true;"),
        json!(true)
    );
    assert!(
        browser.try_find("#timeline tr.fresh").is_some(),
        "no row was added live"
    );

    // The input form of the page sends input too.
    let field = browser.find("textarea#message");
    browser.type_into(&field, "third");
    browser.click(&browser.find("form.input button[type=submit]"));
    assert!(
        browser.wait_for_text("Plain for the third time.", Duration::from_secs(15)),
        "{}",
        browser.text_of_page()
    );
}

#[test]
fn approving_a_review_in_the_inbox_lets_the_task_go_on() {
    let (_root, server) = start();
    let id = task(&server, "ops-token", "lab/careful", "echo hi");
    let browser = Browser::start();
    log_in(&browser, &server, "ops-token", "/ui/reviews");
    assert!(
        browser.wait_for_text(&id, Duration::from_secs(5)),
        "{}",
        browser.text_of_page()
    );
    browser.click(&browser.find("form[action^='/ui/reviews/'] button.ok"));
    let url = browser.wait_for_url(&format!("/ui/tasks/{id}"), Duration::from_secs(10));
    assert!(url.ends_with(&format!("/ui/tasks/{id}")), "{url}");
    assert!(
        browser.wait_for_text("Echoed.", Duration::from_secs(15)),
        "the task did not go on: {}",
        browser.text_of_page()
    );
    // The decision is in the inbox's history, with who made it.
    browser.goto(&format!("http://{}/ui/reviews", server.addr));
    let decided = browser.text_of_page();
    assert!(decided.contains("No review waits for you."), "{decided}");
    assert!(
        decided.contains("approved") && decided.contains("user:ops"),
        "{decided}"
    );
}

#[test]
fn a_failing_schedule_shows_its_error() {
    let (_root, server) = start();
    let browser = Browser::start();
    log_in(&browser, &server, "admin-token", "/ui/triggers");
    let shown = wait_for(Duration::from_secs(20), || {
        browser.goto(&format!("http://{}/ui/triggers", server.addr));
        let row = browser.text(&browser.find("tr[id='schedule-lab/nightly']"));
        row.contains("shorter than 5 characters").then_some(row)
    })
    .unwrap_or_else(|| panic!("no error shown: {}", browser.text_of_page()));
    let failures = browser.text(&browser.find("tr[id='schedule-lab/nightly'] td.bad"));
    assert!(failures.parse::<u64>().unwrap() >= 1, "{shown}");
}

#[test]
fn an_event_carrying_markup_shows_as_text_and_runs_nothing() {
    let (_root, server) = start();
    let attack = "<script>window.pwned = 1</script><img src=x onerror=\"window.pwned = 2\">";
    let id = task(&server, "admin-token", "lab/plain", attack);
    let browser = Browser::start();
    log_in(&browser, &server, "admin-token", &format!("/ui/tasks/{id}"));
    assert!(
        browser.wait_for_text("<script>window.pwned = 1</script>", Duration::from_secs(5)),
        "{}",
        browser.text_of_page()
    );
    assert_eq!(
        browser.execute(
            "return [typeof window.pwned, document.querySelectorAll('main script, main img').length];"
        ),
        json!(["undefined", 0])
    );
}

/// A session cookie for `token` (a login as a browser does it, over plain HTTP).
pub(crate) fn session_cookie(server: &Server, token: &str) -> String {
    let r = server
        .request("POST", "/ui/login")
        .header("Content-Type", "application/x-www-form-urlencoded")
        .body(format!("token={token}&next=%2Fui%2F").into_bytes())
        .send();
    assert_eq!(r.status, 303, "{}", r.text());
    let cookie = r
        .headers
        .iter()
        .find(|(k, _)| k == "set-cookie")
        .map(|(_, v)| v.clone())
        .unwrap();
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    cookie.split(';').next().unwrap().to_owned()
}

/// Opens the live stream at `path` as the holder of session `cookie`, with `headers` (each
/// line ending in CRLF) added; its head read. A read waits at most 5 s: less than the
/// keep-alives' 15 s, so that a stream that goes on is seen going on.
fn open_stream(server: &Server, path: &str, cookie: &str, headers: &str) -> BufReader<TcpStream> {
    let mut stream = TcpStream::connect(server.addr).unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {}\r\nCookie: {cookie}\r\nAccept: text/event-stream\r\n{headers}\r\n",
        server.addr
    )
    .unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).unwrap();
    assert_eq!(&head, b"HTTP/1.1 200", "{path}");
    BufReader::new(stream)
}

/// Logs session `cookie` out, with `csrf`, its forms' token.
fn log_out(server: &Server, cookie: &str, csrf: &str) {
    let out = server
        .request("POST", "/ui/logout")
        .header("Cookie", cookie)
        .header("Content-Type", "application/x-www-form-urlencoded")
        .body(format!("csrf={csrf}").into_bytes())
        .send();
    assert_eq!(out.status, 303, "{}", out.text());
}

/// The CSRF token of a page's forms.
fn csrf_of(html: &str) -> String {
    html.split("name=\"csrf\" value=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("the page's CSRF token")
        .to_owned()
}

#[test]
fn open_live_streams_of_the_inspector_do_not_hold_a_stop() {
    let (_root, mut server) = start();
    let id = task(&server, "admin-token", "lab/plain", "hello");
    let cookie = session_cookie(&server, "admin-token");
    // The task list's notices and a task's rows, both open as a browser holds them.
    let _streams: Vec<BufReader<TcpStream>> = [
        "/ui/changes".to_owned(),
        format!("/ui/tasks/{id}/stream?after=0"),
    ]
    .iter()
    .map(|path| open_stream(&server, path, &cookie, ""))
    .collect();
    assert_eq!(
        server.stop_within(Duration::from_secs(10)),
        Some(0),
        "the server did not stop while live streams were open"
    );
}

#[test]
fn live_streams_end_once_their_session_has_logged_out() {
    let (_root, server) = start();
    let id = task(&server, "alice-token", "lab/plain", "hello");
    let cookie = session_cookie(&server, "alice-token");
    let page = server
        .request("GET", &format!("/ui/tasks/{id}"))
        .header("Cookie", &cookie)
        .send()
        .text();
    let csrf = csrf_of(&page);
    // The task's rows, and the list's notices.
    let paths = [
        format!("/ui/tasks/{id}/stream?after=0"),
        "/ui/changes".into(),
    ];
    let streams: Vec<BufReader<TcpStream>> = paths
        .iter()
        .map(|path| open_stream(&server, path, &cookie, "Connection: close\r\n"))
        .collect();
    log_out(&server, &cookie, &csrf);
    // The task goes on: the stream, whose session ended, shows nothing of it and ends.
    let sent = server
        .request("POST", &format!("/v1/tasks/{id}/input"))
        .header("Authorization", "Bearer admin-token")
        .json(&json!({"message": "sent after the logout"}))
        .send();
    assert_eq!(sent.status, 202, "{}", sent.text());
    for (path, mut stream) in paths.iter().zip(streams) {
        let shown = ["sent after the logout", "Plain again"];
        let (rest, ended) = rest_of_stream(&mut stream, &shown);
        assert!(shown.iter().all(|s| !rest.contains(s)), "{path}: {rest}");
        assert!(ended, "{path} went on after its session ended: {rest}");
    }
}

#[test]
fn pages_carry_a_strict_policy_and_forms_need_the_sessions_csrf_token() {
    let (_root, server) = start();
    let id = task(&server, "admin-token", "lab/plain", "hello");
    // Without a session: the login page, never the data.
    let r = server.request("GET", "/ui/").send();
    assert_eq!(r.status, 303);
    let bad = server
        .request("POST", "/ui/login")
        .header("Content-Type", "application/x-www-form-urlencoded")
        .body(b"token=wrong".to_vec())
        .send();
    assert_eq!(bad.status, 401);
    assert!(bad.text().contains("not valid"), "{}", bad.text());

    let cookie = session_cookie(&server, "admin-token");
    let page = server
        .request("GET", "/ui/")
        .header("Cookie", &cookie)
        .send();
    assert_eq!(page.status, 200);
    let csp = page
        .headers
        .iter()
        .find(|(k, _)| k == "content-security-policy")
        .map(|(_, v)| v.clone())
        .unwrap();
    assert!(
        csp.contains("script-src 'self'") && !csp.contains("unsafe-inline"),
        "{csp}"
    );
    let html = page.text();
    assert!(html.contains(&id));
    assert!(
        !html.contains("<script>") && !html.contains(" style="),
        "inline script or style"
    );

    // A form without the session's CSRF token changes nothing.
    let path = format!("/ui/tasks/{id}/delete");
    let forged = server
        .request("POST", &path)
        .header("Cookie", &cookie)
        .header("Content-Type", "application/x-www-form-urlencoded")
        .body(b"csrf=forged".to_vec())
        .send();
    assert_eq!(forged.status, 403, "{}", forged.text());
    // Nor does a post from another site's page, whatever it carries.
    let elsewhere = server
        .request("POST", "/ui/login")
        .header("Origin", "https://evil.example")
        .header("Content-Type", "application/x-www-form-urlencoded")
        .body(b"token=admin-token".to_vec())
        .send();
    assert_eq!(elsewhere.status, 403, "{}", elsewhere.text());
    let t = server
        .request("GET", &format!("/v1/tasks/{id}"))
        .header("Authorization", "Bearer admin-token")
        .send()
        .json();
    assert_eq!(t["status"], "idle");

    // A read_only token sees the task but no action on it; its posts are refused.
    let audit = session_cookie(&server, "audit-token");
    let seen = server
        .request("GET", &format!("/ui/tasks/{id}"))
        .header("Cookie", &audit)
        .send();
    assert_eq!(seen.status, 200);
    assert!(
        !seen.text().contains("/interrupt"),
        "read_only sees actions"
    );
    // An agent_user sees neither the task nor its page.
    let bob = session_cookie(&server, "bob-token");
    let hidden = server
        .request("GET", &format!("/ui/tasks/{id}"))
        .header("Cookie", &bob)
        .send();
    assert_eq!(hidden.status, 404);
    let list = server.request("GET", "/ui/").header("Cookie", &bob).send();
    assert!(!list.text().contains(&id));

    // Logging out (with the page's CSRF token) ends the session.
    let csrf = csrf_of(&html);
    log_out(&server, &cookie, &csrf);
    let after = server
        .request("GET", "/ui/")
        .header("Cookie", &cookie)
        .send();
    assert_eq!(after.status, 303, "the session outlived its logout");
}

#[test]
fn every_view_renders_in_the_browser() {
    let (_root, server) = start_with(true);
    let plain = task(&server, "admin-token", "lab/plain", "What is 6 × 7?");
    task(&server, "ops-token", "lab/careful", "echo hi");
    let keep = std::env::var_os("AGENTMESH_SCREENSHOTS");
    let scratch = tempfile::tempdir().unwrap();
    let dir = keep.as_deref().map_or(scratch.path(), Path::new);
    std::fs::create_dir_all(dir).unwrap();
    let browser = Browser::start();
    log_in(&browser, &server, "admin-token", "/ui/");
    // Let the failing schedule fail a few times first.
    std::thread::sleep(Duration::from_secs(2));
    for (name, path, needle) in [
        ("tasks", "/ui/".to_owned(), "lab/plain"),
        ("task", format!("/ui/tasks/{plain}"), "Timeline"),
        (
            "reviews",
            "/ui/reviews".to_owned(),
            "Waiting for your decision",
        ),
        ("triggers", "/ui/triggers".to_owned(), "lab/nightly"),
        ("plugins", "/ui/plugins".to_owned(), "tool-plugin"),
        ("login", "/ui/login".to_owned(), "API token"),
    ] {
        browser.goto(&format!("http://{}{path}", server.addr));
        assert!(
            browser.wait_for_text(needle, Duration::from_secs(5)),
            "{name}: {}",
            browser.text_of_page()
        );
        let file = dir.join(format!("{name}.png"));
        browser.screenshot(&file);
        let png = std::fs::read(&file).unwrap();
        assert!(
            png.starts_with(b"\x89PNG") && png.len() > 5_000,
            "{name}: not a PNG"
        );
    }
}

#[test]
fn a_reload_that_removes_a_token_ends_its_sessions() {
    let (root, server) = start();
    let alice = session_cookie(&server, "alice-token");
    let admin = session_cookie(&server, "admin-token");
    let ok = server
        .request("GET", "/ui/")
        .header("Cookie", &alice)
        .send();
    assert_eq!(ok.status, 200);
    let manifests = root.path().join("config/manifests.yaml");
    let text = std::fs::read_to_string(&manifests).unwrap();
    let without = text.replace(
        "  - {subject: \"user:alice\", role: agent_user, env: T_ALICE}\n",
        "",
    );
    assert_ne!(text, without, "the fixture's tokens changed");
    std::fs::write(&manifests, without).unwrap();
    wait_for(Duration::from_secs(10), || {
        let status = server
            .request("GET", "/v1/status")
            .header("Authorization", "Bearer admin-token")
            .send()
            .json();
        (status["reload"]["generation"].as_u64() >= Some(1)).then_some(())
    })
    .expect("the config was not reloaded");
    let gone = server
        .request("GET", "/ui/")
        .header("Cookie", &alice)
        .send();
    assert_eq!(gone.status, 303, "a removed token's session still reads");
    let kept = server
        .request("GET", "/ui/")
        .header("Cookie", &admin)
        .send();
    assert_eq!(kept.status, 200);
}

#[test]
fn pages_fit_a_phone_screen() {
    let (_root, server) = start();
    let id = task(&server, "admin-token", "lab/plain", "hello");
    let browser = Browser::start();
    log_in(&browser, &server, "admin-token", "/ui/");
    browser.resize(390, 844);
    for path in [
        "/ui/".to_owned(),
        format!("/ui/tasks/{id}"),
        "/ui/triggers".to_owned(),
        "/ui/plugins".to_owned(),
    ] {
        browser.goto(&format!("http://{}{path}", server.addr));
        // Wide tables scroll inside their own box; the page itself never scrolls sideways.
        let widths = browser.execute(
            "return [document.documentElement.scrollWidth, document.documentElement.clientWidth];",
        );
        let (page, screen) = (widths[0].as_u64().unwrap(), widths[1].as_u64().unwrap());
        assert!(
            page <= screen,
            "{path}: {page} px wide on a {screen} px screen"
        );
    }
}

#[test]
fn a_tasks_page_lists_its_queued_inputs_in_order() {
    let (_root, server) = start();
    // Waiting in its review: what comes next waits in the queue.
    let id = task(&server, "admin-token", "lab/careful", "echo hi");
    for text in ["first <b>next</b>", "then this"] {
        let r = server
            .request("POST", &format!("/v1/tasks/{id}/input"))
            .header("Authorization", "Bearer admin-token")
            .json(&json!({"message": text}))
            .send();
        assert_eq!(r.status, 202, "{}", r.text());
    }
    let cookie = session_cookie(&server, "admin-token");
    let page = server
        .request("GET", &format!("/ui/tasks/{id}"))
        .header("Cookie", &cookie)
        .send();
    assert_eq!(page.status, 200);
    let html = page.text();
    let queue = &html[html.find("id=\"queue-h\"").expect("no queue section")..];
    let first = queue
        .find("first &lt;b&gt;next&lt;/b&gt;")
        .expect("the first input, escaped");
    let then = queue.find("then this").expect("the second input");
    assert!(first < then, "not in queue order");
    assert!(
        !queue.contains("<b>next</b>"),
        "an input's markup was not escaped"
    );
}

/// The values of attributes that start with `start` (such as `id="review-`) in `html`, in
/// order, without `start`.
fn attributes(html: &str, start: &str) -> Vec<String> {
    html.split(start)
        .skip(1)
        .map(|rest| rest.split('"').next().unwrap().to_owned())
        .collect()
}

/// Walks the pages of one list of the reviews inbox from `path` along its `rel` links,
/// collecting the review ids of its rows (`id="{row}…"`): `part` picks the list's section
/// of a page.
fn walk_inbox(
    server: &Server,
    cookie: &str,
    path: &str,
    rel: &str,
    row: &str,
    part: fn(&str) -> &str,
) -> (Vec<String>, String) {
    let mut seen = Vec::new();
    let mut path = path.to_owned();
    for _ in 0..10 {
        let page = server.request("GET", &path).header("Cookie", cookie).send();
        assert_eq!(page.status, 200, "{path}: {}", page.text());
        let html = page.text();
        let list = part(&html);
        let rows = attributes(list, &format!("id=\"{row}"));
        assert!(rows.len() <= 50, "a page of {} rows", rows.len());
        seen.extend(rows);
        match attributes(list, &format!("rel=\"{rel}\" href=\"")).first() {
            Some(next) => path = next.replace("&amp;", "&"),
            None => return (seen, path),
        }
    }
    panic!("more pages than there are reviews");
}

fn waiting_part(html: &str) -> &str {
    html.split("aria-labelledby=\"decided-h\"").next().unwrap()
}

fn decided_part(html: &str) -> &str {
    html.split("aria-labelledby=\"decided-h\"").nth(1).unwrap()
}

#[test]
fn the_reviews_inbox_pages_through_every_waiting_review_and_decision_once() {
    // More than two pages of 50, waiting and then decided.
    const REVIEWS: usize = 112;
    let (_root, server) = start();
    for i in 0..REVIEWS {
        let body = json!({"agent": "lab/careful", "input": {"message": format!("echo {i}")}});
        server.create_task_as("ops-token", &body);
    }
    let pending = wait_for(Duration::from_secs(60), || {
        let r = server
            .request("GET", "/v1/reviews")
            .header("Authorization", "Bearer ops-token")
            .send()
            .json();
        let reviews = r["reviews"].as_array().unwrap().clone();
        (reviews.len() == REVIEWS).then_some(reviews)
    })
    .expect("the reviews were not all requested");
    let mut expected: Vec<String> = pending
        .iter()
        .map(|r| r["review_id"].as_str().unwrap().to_owned())
        .collect();
    expected.sort();
    let cookie = session_cookie(&server, "ops-token");
    let walk = |path: &str, rel: &str, row: &str, part: fn(&str) -> &str| {
        walk_inbox(&server, &cookie, path, rel, row, part)
    };

    // Forward from the first page, then back from the last: each review once, in the order
    // of the API's list both ways.
    let (forward, last) = walk("/ui/reviews", "next", "review-", waiting_part);
    let in_api_order: Vec<&str> = pending
        .iter()
        .map(|r| r["review_id"].as_str().unwrap())
        .collect();
    assert_eq!(forward, in_api_order);
    let (mut backward, _) = walk(&last, "prev", "review-", waiting_part);
    let last_page = attributes(
        waiting_part(
            &server
                .request("GET", &last)
                .header("Cookie", &cookie)
                .send()
                .text(),
        ),
        "id=\"review-",
    );
    assert!(
        !last_page.is_empty() && last_page.len() < 50,
        "{last_page:?}"
    );
    // The walk back starts with the last page: the pages before it make the rest.
    backward.drain(..last_page.len());
    let mut pages_back: Vec<Vec<String>> = backward.chunks(50).map(<[String]>::to_vec).collect();
    pages_back.reverse();
    let mut rebuilt: Vec<String> = pages_back.concat();
    rebuilt.extend(last_page);
    assert_eq!(rebuilt, forward);

    // Decided, they leave the waiting list and each shows once among the decisions.
    for r in &pending {
        let path = format!(
            "/v1/tasks/{}/reviews/{}",
            r["task_id"].as_str().unwrap(),
            r["review_id"].as_str().unwrap()
        );
        let answer = server
            .request("POST", &path)
            .header("Authorization", "Bearer ops-token")
            .header("Content-Type", "application/json")
            .body(br#"{"approve": true}"#.to_vec())
            .send();
        assert_eq!(answer.status, 200, "{}", answer.text());
    }
    let (waiting, _) = walk("/ui/reviews", "next", "review-", waiting_part);
    assert!(waiting.is_empty(), "{waiting:?}");
    let (mut decided, _) = walk("/ui/reviews", "next", "decision-", decided_part);
    decided.sort();
    assert_eq!(decided, expected);
}

/// A trigger `lab/ping` of `lab/plain`, fired over the API with a bearer source's token.
const API_TRIGGER: &str = "kind: commonagents.info/v1beta2/trigger
namespace: lab
name: ping
agent: plain
owner: user:admin
source: {type: ops}
inputs:
  message: Ping.
";

#[test]
fn the_triggered_turns_filter_shows_a_task_fired_by_a_trigger_and_not_a_typed_one() {
    let plain = scripted_agent("lab/plain", "").replace("script.yaml", "plain.yaml");
    let host = format!(
        "{API_TOKENS}sources:\n  ops: {{signature: bearer, tokens: [{{subject: \"svc:deployer\", env: E2E_OPS_TOKEN}}]}}\n"
    );
    let (_root, dir, data) = fixtures::dirs(&[
        (
            "manifests.yaml",
            &format!("{plain}---\n{API_TRIGGER}---\n{host}"),
        ),
        ("plain.yaml", "responses:\n  - text: Plain.\n"),
    ]);
    let mut env = API_TOKEN_ENV.to_vec();
    env.push(("E2E_OPS_TOKEN", "ops-source-token"));
    let server = Server::start(AGENTMESH, &dir, &data, &env);
    let typed = task(&server, "admin-token", "lab/plain", "Typed by hand.");
    let fire = server
        .request("POST", "/v1/triggers/lab/ping/fire")
        .header("Authorization", "Bearer ops-source-token")
        .json(&json!({}))
        .send();
    assert_eq!(fire.status, 202, "{}", fire.text());
    let fired = fire.json()["task_id"].as_str().unwrap().to_owned();
    wait_for(Duration::from_secs(20), || {
        let t = server
            .request("GET", &format!("/v1/tasks/{fired}"))
            .header("Authorization", "Bearer admin-token")
            .send()
            .json();
        (t["output"][0]["message"][0]["text"] == "Plain.").then_some(())
    })
    .unwrap_or_else(|| panic!("the fired task {fired} did not answer"));

    let browser = Browser::start();
    log_in(&browser, &server, "admin-token", "/ui/");
    assert!(browser.wait_for_text(&fired, Duration::from_secs(5)));
    // The filter, chosen in the form as a person would.
    browser.click(&browser.find("select#f-trigger option[value='api']"));
    browser.click(&browser.find("form.filters button[type=submit]"));
    browser.wait_for_url("trigger=api", Duration::from_secs(10));
    let listed = browser.text(&browser.find("table#tasks tbody"));
    assert!(listed.contains(&fired), "{listed}");
    assert!(
        listed.contains("api"),
        "the row names its trigger source: {listed}"
    );
    assert!(
        !listed.contains(&typed),
        "a typed task under `api`: {listed}"
    );
    // And the other way round.
    browser.goto(&format!("http://{}/ui/?trigger=none", server.addr));
    let listed = browser.text(&browser.find("table#tasks tbody"));
    assert!(listed.contains(&typed), "{listed}");
    assert!(
        !listed.contains(&fired),
        "a fired task under `none`: {listed}"
    );
}
