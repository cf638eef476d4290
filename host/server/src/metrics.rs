//! `/metrics`: counters in the Prometheus text format.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

/// The host's counters.
#[derive(Debug, Default)]
pub struct Metrics {
    /// Tasks created through the API.
    pub tasks_created: AtomicU64,
    /// Inputs queued through the API.
    pub inputs_queued: AtomicU64,
    /// Webhooks accepted (queued on at least one task).
    pub webhooks_accepted: AtomicU64,
    /// Webhooks answered as duplicates.
    pub webhooks_duplicate: AtomicU64,
    /// Webhooks that matched no subscription or trigger (counted and logged, not stored).
    pub webhooks_unmatched: AtomicU64,
    /// Webhooks refused for a bad or missing signature.
    pub webhooks_unauthorized: AtomicU64,
    /// Webhooks refused as malformed or too large.
    pub webhooks_rejected: AtomicU64,
    /// Inputs queued by webhooks (one per matching task).
    pub webhook_inputs: AtomicU64,
    /// Successful reloads of the config dir.
    pub reloads_ok: AtomicU64,
    /// Failed reloads (the last good version kept running).
    pub reloads_failed: AtomicU64,
    /// Trigger and schedule fires that created or fed a task.
    pub trigger_fires: AtomicU64,
    /// Fires dropped by a throttle or quota.
    pub trigger_dropped: AtomicU64,
}

impl Metrics {
    /// Adds one to `counter`.
    pub fn inc(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let counter = |out: &mut String, name: &str, help: &str, labels: &str, v: &AtomicU64| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
            let _ = writeln!(out, "{name}{labels} {}", v.load(Ordering::Relaxed));
        };
        counter(
            &mut out,
            "agentmesh_tasks_created_total",
            "Tasks created through the API.",
            "",
            &self.tasks_created,
        );
        counter(
            &mut out,
            "agentmesh_inputs_queued_total",
            "Inputs queued through the API.",
            "",
            &self.inputs_queued,
        );
        let _ = writeln!(
            out,
            "# HELP agentmesh_webhooks_total Webhook deliveries by result.\n# TYPE agentmesh_webhooks_total counter"
        );
        for (result, v) in [
            ("accepted", &self.webhooks_accepted),
            ("duplicate", &self.webhooks_duplicate),
            ("unmatched", &self.webhooks_unmatched),
            ("unauthorized", &self.webhooks_unauthorized),
            ("rejected", &self.webhooks_rejected),
        ] {
            let _ = writeln!(
                out,
                "agentmesh_webhooks_total{{result=\"{result}\"}} {}",
                v.load(Ordering::Relaxed)
            );
        }
        counter(
            &mut out,
            "agentmesh_webhook_inputs_total",
            "Inputs queued by webhooks, one per matching task.",
            "",
            &self.webhook_inputs,
        );
        let _ = writeln!(
            out,
            "# HELP agentmesh_reloads_total Reloads of the config dir by result.\n# TYPE agentmesh_reloads_total counter"
        );
        let _ = writeln!(
            out,
            "agentmesh_reloads_total{{result=\"ok\"}} {}",
            self.reloads_ok.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            out,
            "agentmesh_reloads_total{{result=\"failed\"}} {}",
            self.reloads_failed.load(Ordering::Relaxed)
        );
        counter(
            &mut out,
            "agentmesh_trigger_fires_total",
            "Trigger and schedule fires.",
            "",
            &self.trigger_fires,
        );
        counter(
            &mut out,
            "agentmesh_trigger_dropped_total",
            "Fires dropped by a throttle or quota.",
            "",
            &self.trigger_dropped,
        );
        out
    }
}
