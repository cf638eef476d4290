//! What the benches that drive the real binary share beyond `agentmesh-testkit` (which
//! starts it and talks to it): the binary, percentiles, and what the machine was doing.

use std::time::Duration;

/// The binary under test, which Cargo builds for the benches.
pub const AGENTMESH: &str = env!("CARGO_BIN_EXE_agentmesh");

/// `AGENTMESH_LOG` for a measured server: warnings only, so that logging is not what is
/// measured.
pub const QUIET: (&str, &str) = ("AGENTMESH_LOG", "warn");

/// The `p` quantile (0–1) of `sorted`, nearest rank.
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// Cores and CPU model.
pub fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_owned())
        })
        .unwrap_or_default();
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    format!("{cores} CPUs, {cpu}")
}

/// The 1-, 5- and 15-minute load averages, as `/proc/loadavg` gives them.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}
