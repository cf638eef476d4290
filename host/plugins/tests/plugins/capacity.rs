//! Capacity: when every instance of the pool is taken, the least recently used idle tool
//! session is torn down to make room (its next call opens a new one), and a call that finds
//! every instance busy in a call waits a bounded time, then fails recoverably.

use std::sync::Arc;
use std::time::Duration;

use agentmesh_plugins::{
    ComponentMetrics, Fault, Limits, LoadedComponent, MemoryKv, PluginConfig, PluginHost, Sandbox,
    ToolError, ToolSession,
};

use crate::util::guest;

/// A host of its own with `max_instances` instances, where a call waits at most 200 ms.
fn host(max_instances: u32) -> PluginHost {
    let config = PluginConfig {
        max_instances,
        instance_wait: Duration::from_millis(200),
        ..PluginConfig::default()
    };
    PluginHost::new(config, Arc::new(MemoryKv::new())).unwrap()
}

/// The pool's counters of component `name`.
fn metrics(host: &PluginHost, name: &str) -> ComponentMetrics {
    let pool = host.pool_metrics();
    let found = pool.components.into_iter().find(|c| c.component == name);
    found.unwrap_or_else(|| panic!("no metrics for {name}"))
}

fn probe(host: &PluginHost) -> Arc<LoadedComponent> {
    host.load_named("test-probe", &guest("test-probe")).unwrap()
}

async fn open(component: &Arc<LoadedComponent>, task: &str) -> ToolSession {
    ToolSession::lazy(component.clone(), Sandbox::default(), "{}", "{}", task)
        .unwrap()
        .open()
        .await
        .unwrap()
}

/// Whether `session`'s instance still holds `secret` (the probe's `recall`).
async fn remembers(session: &mut ToolSession, secret: &str) -> bool {
    let input = format!(r#"{{"secret": "{secret}"}}"#);
    match session.invoke("recall", &input).await.unwrap() {
        Ok(_) => true,
        Err(ToolError::Recoverable(m)) if m.contains("no trace") => false,
        Err(other) => panic!("{other:?}"),
    }
}

async fn remember(session: &mut ToolSession, secret: &str) {
    let input = format!(r#"{{"secret": "{secret}"}}"#);
    session.invoke("remember", &input).await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_pool_evicts_the_least_recently_used_idle_session() {
    let host = host(2);
    let probe = probe(&host);
    let mut a = open(&probe, "t_a").await;
    let mut b = open(&probe, "t_b").await;
    remember(&mut a, "secret-a").await;
    remember(&mut b, "secret-b").await;
    // `a` was used last: `b` is the least recently used.
    assert!(remembers(&mut a, "secret-a").await);

    let mut c = open(&probe, "t_c").await;
    remember(&mut c, "secret-c").await;
    assert!(
        remembers(&mut a, "secret-a").await,
        "the more recently used session was evicted"
    );
    // `b` was evicted: its next call runs in a new session (and evicts `c`, now the least
    // recently used), whose memory holds nothing of the old one.
    assert!(!remembers(&mut b, "secret-b").await);
    assert!(remembers(&mut a, "secret-a").await);
    assert!(!remembers(&mut c, "secret-c").await);

    let counted = metrics(&host, "test-probe");
    // Initialize: a, b, c, b again, c again; evicted: b, c, a (by c's reopening).
    assert_eq!(counted.initializations, 5, "{counted:?}");
    assert_eq!(counted.evictions, 3, "{counted:?}");
    assert_eq!(counted.teardowns, 3, "{counted:?}");
    assert_eq!(counted.instances_in_use, 2, "{counted:?}");
    assert_eq!(counted.idle_sessions, 2, "{counted:?}");
    assert_eq!(counted.calls, 8, "{counted:?}");
    assert_eq!(
        counted.errors, 2,
        "the two recalls that found nothing: {counted:?}"
    );
    assert_eq!(counted.latency_buckets.last(), Some(&8), "{counted:?}");

    // Closing runs Teardown for a session still parked (`c`) and nothing for an evicted one
    // (`b`); dropping one frees its instance without Teardown (`a`).
    drop(a);
    b.close().await.unwrap();
    c.close().await.unwrap();
    let counted = metrics(&host, "test-probe");
    assert_eq!(counted.teardowns, 4, "{counted:?}");
    assert_eq!(counted.instances_in_use, 0, "{counted:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_component_no_longer_loaded_leaves_the_metrics() {
    let host = host(2);
    let probe = probe(&host);
    let mut session = open(&probe, "t_a").await;
    remember(&mut session, "secret").await;
    assert_eq!(metrics(&host, "test-probe").calls, 1);
    // Still loaded with no session: its counters stay.
    session.close().await.unwrap();
    assert_eq!(metrics(&host, "test-probe").calls, 1);
    // Unloaded (a reload removed its tool): its series end.
    drop(probe);
    let listed: Vec<String> = host
        .pool_metrics()
        .components
        .into_iter()
        .map(|c| c.component)
        .collect();
    assert!(
        listed.is_empty(),
        "an unloaded component's counters: {listed:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_finds_every_instance_busy_waits_then_fails_recoverably() {
    let host = host(1);
    let spin = host.load_named("test-loop", &guest("test-loop")).unwrap();
    let sandbox = Sandbox::new(Limits {
        timeout: Duration::from_secs(3),
        ..Limits::default()
    });
    let mut busy = ToolSession::lazy(spin.clone(), sandbox.clone(), "{}", "{}", "t_busy")
        .unwrap()
        .open()
        .await
        .unwrap();
    let running = tokio::spawn(async move { busy.invoke("spin", "{}").await });
    // Until the spinning call holds the one instance, the session is idle (and evictable):
    // wait (at most 10 s) for the call to take it.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let now = metrics(&host, "test-loop");
        if now.instances_in_use == 1 && now.idle_sessions == 0 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{now:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let answer = spin
        .call_tool(&sandbox, "{}", "{}", "t_waits", "spin", "{}")
        .await;
    let Ok(Err(ToolError::Fault(Fault::Busy {
        component,
        instances,
        waited,
    }))) = &answer
    else {
        panic!("not a recoverable busy error: {answer:?}")
    };
    assert_eq!(
        (component.as_str(), *instances, *waited),
        ("test-loop", 1, Duration::from_millis(200))
    );
    assert_eq!(
        answer.unwrap().unwrap_err().to_string(),
        "component `test-loop` could not run: all 1 instances of the host are busy in calls (waited 200ms); try again later"
    );
    // The busy call changed nothing for the one in progress, which runs to its timeout.
    let spun = running.await.unwrap().unwrap();
    assert!(
        matches!(spun, Err(ToolError::Fault(Fault::Timeout { .. }))),
        "{spun:?}"
    );
    let counted = metrics(&host, "test-loop");
    assert_eq!((counted.calls, counted.errors), (2, 2), "{counted:?}");
    assert_eq!(counted.evictions, 0, "{counted:?}");
}
