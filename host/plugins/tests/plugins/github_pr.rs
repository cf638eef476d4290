//! `github-pr` against the fake GitHub server: real HTTP over wasi-http, through the host's
//! allow list.

use agentmesh_plugins::{Sandbox, ToolError, ToolSession};
use serde_json::{Value, json};

use crate::util::{FakeGithub, load};

async fn session(github: &FakeGithub) -> ToolSession {
    let sandbox = Sandbox::default().allow(&github.base_url()).unwrap();
    let settings = json!({"base_url": github.base_url(), "token": "test-token"}).to_string();
    let parameters = json!({"owner": "acme", "repo": "web"}).to_string();
    ToolSession::lazy(
        load("github-pr"),
        sandbox,
        &settings,
        &parameters,
        "t_github",
    )
    .unwrap()
    .open()
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_pr_posts_to_github_and_returns_its_answer() {
    let github = FakeGithub::start().await;
    let mut session = session(&github).await;
    let input = json!({"title": "Fix the login page", "head": "fix-login", "base": "main", "body": "It was broken.", "author": "alice"});
    let observation = session
        .invoke("create_pr", &input.to_string())
        .await
        .unwrap()
        .unwrap();

    let answer: Value = serde_json::from_str(&observation).unwrap();
    assert_eq!(answer["number"], 42);
    assert_eq!(answer["title"], "Fix the login page");
    assert_eq!(
        answer["html_url"],
        "https://github.example/acme/web/pull/42"
    );

    let received = github.received();
    assert_eq!(received.len(), 1);
    let request = &received[0];
    assert_eq!(
        (request.method.as_str(), request.path.as_str()),
        ("POST", "/repos/acme/web/pulls")
    );
    assert_eq!(request.header("authorization"), Some("Bearer test-token"));
    assert_eq!(
        request.header("accept"),
        Some("application/vnd.github+json")
    );
    assert_eq!(request.header("user-agent"), Some("agentmesh-github-pr"));
    assert_eq!(request.body["head"], "fix-login");
    assert_eq!(request.body["base"], "main");
    assert_eq!(
        request.body["body"],
        "It was broken.\n\nRequested by @alice."
    );
    session.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_prs_and_comment_use_the_session_parameters() {
    let github = FakeGithub::start().await;
    let mut session = session(&github).await;

    let listed = session
        .invoke("list_prs", r#"{"state": "open"}"#)
        .await
        .unwrap()
        .unwrap();
    let listed: Value = serde_json::from_str(&listed).unwrap();
    assert_eq!(listed[0]["number"], 42);

    let input = json!({"number": 42, "body": "Looks good.", "author": "bob"});
    let comment = session
        .invoke("comment", &input.to_string())
        .await
        .unwrap()
        .unwrap();
    let comment: Value = serde_json::from_str(&comment).unwrap();
    assert_eq!(comment["id"], 7);

    let paths: Vec<String> = github
        .received()
        .iter()
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    assert_eq!(
        paths,
        [
            "GET /repos/acme/web/pulls?state=open",
            "POST /repos/acme/web/issues/42/comments"
        ]
    );
    assert_eq!(github.received()[1].body["body"], "Looks good.\n\n— @bob");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn github_errors_and_bad_names_are_recoverable() {
    let github = FakeGithub::start().await;
    let mut session = session(&github).await;

    // The fake server knows no `other` repository: GitHub's 404 becomes a recoverable error.
    let answer = session
        .invoke("list_prs", r#"{"repo": "other"}"#)
        .await
        .unwrap();
    assert_eq!(
        answer,
        Err(ToolError::Recoverable(
            "GitHub answered 404: Not Found".into()
        ))
    );

    // A name that would change the request path never leaves the component.
    let answer = session
        .invoke("list_prs", r#"{"owner": "../admin"}"#)
        .await
        .unwrap();
    let Err(ToolError::Recoverable(message)) = answer else {
        panic!("{answer:?}")
    };
    assert!(
        message.contains("`owner` is not a GitHub name"),
        "{message}"
    );
    assert_eq!(github.received().len(), 1);

    // An unknown action is the guest's own `fatal`.
    let answer = session.invoke("merge", "{}").await.unwrap();
    assert!(matches!(&answer, Err(e) if e.is_fatal()), "{answer:?}");
}
