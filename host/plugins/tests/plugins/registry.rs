//! Hot swap: the registry hands out the current version; sessions and calls in flight keep
//! the version they started with.

use std::sync::Arc;

use agentmesh_plugins::{
    ComponentRegistry, Limits, LoadedComponent, MiddlewareCall, PluginHost, Sandbox, ToolSession,
};

use crate::util::{guest, shared};

/// The host types are shareable across tasks and threads.
#[test]
fn host_types_are_send_and_sync() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<PluginHost>();
    send_sync::<LoadedComponent>();
    send_sync::<ComponentRegistry>();
    send::<ToolSession>();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_swap_leaves_sessions_in_flight_on_their_version() {
    let host = &shared().0;
    let registry = ComponentRegistry::new();
    let v1 = host
        .load_named("engineering/notes", &guest("notes"))
        .unwrap();
    assert!(registry.swap(v1.clone()).is_none());

    let current = registry.get("engineering/notes").unwrap();
    let mut session = ToolSession::lazy(current, Sandbox::default(), "{}", "{}", "t_swap")
        .unwrap()
        .open()
        .await
        .unwrap();

    // A new version (here: another tool built from other sources) replaces the first.
    let v2 = host
        .load_named("engineering/notes", &guest("test-panic"))
        .unwrap();
    let old = registry.swap(v2.clone()).unwrap();
    assert!(Arc::ptr_eq(&old, &v1));
    assert_eq!(registry.get("engineering/notes").unwrap().hash(), v2.hash());
    assert_eq!(
        registry.versions(),
        [("engineering/notes".to_owned(), v2.hash().to_owned())]
    );

    // The session keeps running the version it opened, from another task too.
    assert_eq!(session.component().hash(), v1.hash());
    let answer = tokio::spawn(async move {
        session
            .invoke("put", r#"{"key": "k", "value": "v"}"#)
            .await
            .unwrap()
    })
    .await
    .unwrap();
    assert_eq!(answer.as_deref(), Ok(r#"{"stored":"k"}"#));

    // New calls get the new version.
    let fresh = registry.get("engineering/notes").unwrap();
    let answer = fresh
        .call_tool(&Sandbox::default(), "{}", "{}", "t_swap", "ok", "{}")
        .await
        .unwrap();
    assert_eq!(answer.as_deref(), Ok("\"still alive\""));
    // Every call's future can move to another thread (the engine spawns them).
    fn send<F: Future + Send>(_: F) {}
    let call = MiddlewareCall {
        task_id: "t",
        config: "{}",
        context: "{}",
        input: "{}",
        event: None,
    };
    let limits = Limits::default();
    send(fresh.middleware_before(&limits, &call));
    send(fresh.middleware_after(&limits, &call, "{}"));
    send(fresh.event_filter_matches(&limits, "{}", &[]));
    send(fresh.call_tool(&Sandbox::default(), "{}", "{}", "t", "a", "{}"));
    send(
        ToolSession::lazy(fresh.clone(), Sandbox::default(), "{}", "{}", "t")
            .unwrap()
            .open(),
    );

    assert!(registry.remove("engineering/notes").is_some());
    assert!(registry.get("engineering/notes").is_none());
}
