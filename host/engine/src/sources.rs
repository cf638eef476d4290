//! What the event sources that run by themselves are doing: the pollers of `receive.poll`
//! events (`agentmesh-routing`) and the sessions that receive MCP resource updates
//! (`mcp_events`). Each reports its attempts here; `/v1/status` shows them, so that a poll
//! failing since this morning is seen without reading the log.

use std::collections::BTreeMap;
use std::sync::Mutex;

use agentmesh_secrets::SharedSecrets;

use crate::lock;

/// Which kind of source.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum SourceKind {
    /// A poller of a `receive.poll` event, for one set of parameter values.
    Poll,
    /// The session receiving a tool's MCP resource updates.
    Mcp,
}

impl SourceKind {
    /// The kind as the API names it.
    pub fn as_str(self) -> &'static str {
        match self {
            SourceKind::Poll => "poll",
            SourceKind::Mcp => "mcp",
        }
    }
}

/// One source's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceStatus {
    /// Its kind.
    pub kind: SourceKind,
    /// The poll's key (`tool/event` with its parameter values) or the tool (`namespace/name`).
    pub id: String,
    /// When it last worked (a poll answered; the session subscribed), in ms since the epoch.
    pub last_ok_ms: Option<i64>,
    /// When it last failed, in ms since the epoch, and why (secrets replaced).
    pub last_error: Option<(i64, String)>,
    /// Attempts that failed since it last worked.
    pub failures: u32,
}

/// Every running source's state, by kind and id.
pub struct Sources {
    running: Mutex<BTreeMap<(SourceKind, String), SourceStatus>>,
    /// The secrets scrubbed from errors.
    secrets: SharedSecrets,
}

impl Sources {
    pub(crate) fn new(secrets: SharedSecrets) -> Sources {
        Sources {
            running: Mutex::new(BTreeMap::new()),
            secrets,
        }
    }

    /// Source `id` of `kind` runs (again: what it reported before is forgotten).
    pub fn started(&self, kind: SourceKind, id: &str) {
        lock(&self.running).insert(
            (kind, id.to_owned()),
            SourceStatus {
                kind,
                id: id.to_owned(),
                last_ok_ms: None,
                last_error: None,
                failures: 0,
            },
        );
    }

    /// Source `id` of `kind` worked at `now_ms`.
    pub fn worked(&self, kind: SourceKind, id: &str, now_ms: i64) {
        if let Some(status) = lock(&self.running).get_mut(&(kind, id.to_owned())) {
            status.last_ok_ms = Some(now_ms);
            status.failures = 0;
        }
    }

    /// Source `id` of `kind` failed at `now_ms`, for the reason `why`.
    pub fn failed(&self, kind: SourceKind, id: &str, now_ms: i64, why: &str) {
        let why = self.secrets.get().scrub(why).into_owned();
        if let Some(status) = lock(&self.running).get_mut(&(kind, id.to_owned())) {
            status.last_error = Some((now_ms, why));
            status.failures = status.failures.saturating_add(1);
        }
    }

    /// Source `id` of `kind` stopped (its subscriptions ended, a reload removed it).
    pub fn stopped(&self, kind: SourceKind, id: &str) {
        lock(&self.running).remove(&(kind, id.to_owned()));
    }

    /// Every running source, by kind and id.
    pub fn list(&self) -> Vec<SourceStatus> {
        lock(&self.running).values().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]

    use std::sync::Arc;

    use agentmesh_secrets::Secrets;

    use super::*;

    #[test]
    fn a_source_reports_its_failures_until_it_works_and_errors_lose_their_secrets() {
        let secrets = SharedSecrets::default();
        secrets.set(Arc::new(Secrets::new(["hunter2-hunter2"]).unwrap()));
        let sources = Sources::new(secrets);
        sources.started(SourceKind::Poll, "t/x/e");
        sources.failed(
            SourceKind::Poll,
            "t/x/e",
            10,
            "`https://h/?key=hunter2-hunter2` timed out",
        );
        sources.failed(SourceKind::Poll, "t/x/e", 20, "HTTP 500");
        let [status] = &sources.list()[..] else {
            panic!("{:?}", sources.list());
        };
        assert_eq!(status.failures, 2);
        assert_eq!(status.last_error, Some((20, "HTTP 500".to_owned())));
        sources.failed(
            SourceKind::Poll,
            "t/x/e",
            30,
            "`https://h/?key=hunter2-hunter2` timed out",
        );
        let error = sources.list()[0].last_error.clone().unwrap().1;
        assert!(!error.contains("hunter2-hunter2"), "{error}");
        sources.worked(SourceKind::Poll, "t/x/e", 40);
        let status = &sources.list()[0];
        assert_eq!((status.failures, status.last_ok_ms), (0, Some(40)));
        // The last error stays to be seen; stopping forgets the source.
        assert!(status.last_error.is_some());
        sources.stopped(SourceKind::Poll, "t/x/e");
        assert!(sources.list().is_empty());
        // A report of a source not running is dropped.
        sources.worked(SourceKind::Mcp, "t/x", 50);
        assert!(sources.list().is_empty());
    }
}
