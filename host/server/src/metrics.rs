//! `/metrics`: counters in the Prometheus text format, and the Wasm instance pool's gauges,
//! counters and call-latency histograms per component.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

use agentmesh_engine::{ComponentMetrics, LATENCY_BUCKETS, PoolMetrics};

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

    /// The Prometheus text exposition; with `pool`, the Wasm instance pool's series too.
    pub fn render(&self, pool: Option<&PoolMetrics>) -> String {
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
        if let Some(pool) = pool {
            render_pool(&mut out, pool);
        }
        out
    }
}

/// A per-component series of one number: its name, Prometheus type, help text, and value.
type Series = (
    &'static str,
    &'static str,
    &'static str,
    fn(&ComponentMetrics) -> u64,
);

/// The per-component series of one number: `# HELP`, `# TYPE`, one sample per component.
fn per_component(out: &mut String, (name, kind, help, value): Series, pool: &PoolMetrics) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
    for c in &pool.components {
        let label = escape(&c.component);
        let _ = writeln!(out, "{name}{{component=\"{label}\"}} {}", value(c));
    }
}

/// The instance pool: its size, then per component its instances, sessions and calls.
fn render_pool(out: &mut String, pool: &PoolMetrics) {
    let _ = writeln!(
        out,
        "# HELP agentmesh_component_instances_max Wasm instances that may be alive at once (policy.max_instances).\n\
         # TYPE agentmesh_component_instances_max gauge\n\
         agentmesh_component_instances_max {}",
        pool.max_instances
    );
    let series: [Series; 7] = [
        (
            "agentmesh_component_instances_in_use",
            "gauge",
            "Instances alive: in a call, or kept by an idle tool session.",
            |c| c.instances_in_use,
        ),
        (
            "agentmesh_component_idle_sessions",
            "gauge",
            "Tool sessions between calls (evictable when the pool is full).",
            |c| c.idle_sessions,
        ),
        (
            "agentmesh_component_evictions_total",
            "counter",
            "Idle tool sessions torn down to free their instance.",
            |c| c.evictions,
        ),
        (
            "agentmesh_component_initializations_total",
            "counter",
            "Tool sessions constructed (Initialize).",
            |c| c.initializations,
        ),
        (
            "agentmesh_component_teardowns_total",
            "counter",
            "Tool sessions destroyed (Teardown): closed with their task, or evicted.",
            |c| c.teardowns,
        ),
        (
            "agentmesh_component_calls_total",
            "counter",
            "Calls: tool invocations, middleware steps, event-filter checks.",
            |c| c.calls,
        ),
        (
            "agentmesh_component_errors_total",
            "counter",
            "Calls that did not succeed (tool errors, faults, no instance in time).",
            |c| c.errors,
        ),
    ];
    for one in series {
        per_component(out, one, pool);
    }
    latency(out, pool);
}

/// The call-latency histogram of each component.
fn latency(out: &mut String, pool: &PoolMetrics) {
    let name = "agentmesh_component_call_duration_seconds";
    let _ = writeln!(
        out,
        "# HELP {name} How long the guest's calls took.\n# TYPE {name} histogram"
    );
    for c in &pool.components {
        let label = escape(&c.component);
        let bounds = LATENCY_BUCKETS.iter().map(|b| b.to_string());
        for (le, count) in bounds.chain(["+Inf".to_owned()]).zip(&c.latency_buckets) {
            let _ = writeln!(
                out,
                "{name}_bucket{{component=\"{label}\",le=\"{le}\"}} {count}"
            );
        }
        let _ = writeln!(
            out,
            "{name}_sum{{component=\"{label}\"}} {}\n{name}_count{{component=\"{label}\"}} {}",
            c.latency_sum.as_secs_f64(),
            c.latency_buckets.last().copied().unwrap_or(0)
        );
    }
}

/// A label value as the text format wants it: `\`, `"` and newlines escaped.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}
