//! What a tool call costs, three ways, in one run: the `notes` component in a fresh instance
//! (open a session, `put`, close — what a stateless call does), the same tool as a native
//! Rust function, and the same tool as a native program started per call. Prints p50/p99 and
//! the ratios. For reference it also measures `notes` in a session kept alive (what a task's
//! second and later calls cost) and the floor of a fresh instance (`label-filter`: one call,
//! no constructor, no host calls).
//!
//! Needs the guests built (`cargo build --release --target wasm32-wasip2 --manifest-path
//! guests/Cargo.toml`); run with `cargo bench -p agentmesh-plugins --bench tool_call`.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentmesh_plugins::{
    AllowList, KvScope, KvStore, Limits, MemoryKv, PluginConfig, PluginHost, Sandbox, ToolSession,
};

mod notes_twin;

/// Calls measured per way (after warm-up).
const COMPONENT_CALLS: usize = 5000;
const NATIVE_CALLS: usize = 5000;
const SUBPROCESS_CALLS: usize = 300;
const WARMUP: usize = 200;

const INPUT: &str = r#"{"key": "plan", "value": "ship on friday"}"#;
const ANSWER: &str = r#"{"stored":"plan"}"#;

/// `notes_twin::Kv` over the host's in-memory store, scoped like the component's.
struct Scoped<'a>(&'a MemoryKv, KvScope);

impl notes_twin::Kv for Scoped<'_> {
    fn get(&self, key: &str) -> Option<Vec<u8>> {
        self.0.get(&self.1, key).unwrap()
    }

    fn set(&self, key: &str, value: &[u8]) {
        self.0.set(&self.1, key, value).unwrap();
    }
}

struct Figures {
    p50: Duration,
    p99: Duration,
    /// CPU time of this thread per call (mean), when the platform reports it.
    cpu: Option<Duration>,
}

fn figures(mut samples: Vec<Duration>, cpu: Option<Duration>) -> Figures {
    samples.sort_unstable();
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
    let calls = u32::try_from(samples.len()).unwrap();
    Figures {
        p50: at(0.50),
        p99: at(0.99),
        cpu: cpu.map(|c| c / calls),
    }
}

/// This thread's CPU time so far (Linux: `/proc/thread-self/schedstat`). On a shared machine
/// wall-clock percentiles include time the thread waited for a core; CPU time does not.
fn thread_cpu() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let ns: u64 = stat.split_whitespace().next()?.parse().ok()?;
    Some(Duration::from_nanos(ns))
}

/// CPU time spent since `start`, if measurable.
fn cpu_since(start: Option<Duration>) -> Option<Duration> {
    Some(thread_cpu()?.saturating_sub(start?))
}

fn us(d: Duration) -> String {
    format!("{:>9.1} µs", d.as_secs_f64() * 1e6)
}

fn main() {
    let wasm = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../guests/target/wasm32-wasip2/release/notes.wasm");
    assert!(
        wasm.exists(),
        "{} is missing: build the guests first:\n    cargo build --release --target wasm32-wasip2 --manifest-path guests/Cargo.toml",
        wasm.display()
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let kv = Arc::new(MemoryKv::new());
    let cache = tempfile::tempdir().unwrap();
    let config = PluginConfig {
        cache_dir: Some(cache.path().to_owned()),
        max_instances: 16,
        ..PluginConfig::default()
    };
    let host = PluginHost::new(config, kv.clone()).unwrap();
    let started = Instant::now();
    let notes = host.load(&wasm).unwrap();
    let compile = started.elapsed();
    let started = Instant::now();
    let _cached = host.load(&wasm).unwrap();
    let cached_load = started.elapsed();
    let sandbox = Sandbox::default();

    // 1. The component, a fresh instance per call.
    let component = runtime.block_on(async {
        let mut samples = Vec::with_capacity(COMPONENT_CALLS);
        let mut cpu = None;
        for i in 0..WARMUP + COMPONENT_CALLS {
            if i == WARMUP {
                cpu = thread_cpu();
            }
            let started = Instant::now();
            let answer = notes
                .call_tool(&sandbox, "{}", "{}", "bench", "put", INPUT)
                .await
                .unwrap();
            let elapsed = started.elapsed();
            assert_eq!(answer.as_deref(), Ok(ANSWER));
            if i >= WARMUP {
                samples.push(elapsed);
            }
        }
        figures(samples, cpu_since(cpu))
    });

    // 1c. For reference: the floor of a fresh instance — the `label-filter` component, one
    // call, no constructor, no host calls.
    let filter = host
        .load(&wasm.with_file_name("label_filter.wasm"))
        .unwrap();
    let floor = runtime.block_on(async {
        let limits = Limits::default();
        let event = r#"{"payload": {"labels": ["bug"]}}"#;
        let lists = [AllowList {
            name: "labels".into(),
            values: vec!["bug".into()],
        }];
        let mut samples = Vec::with_capacity(COMPONENT_CALLS);
        let mut cpu = None;
        for i in 0..WARMUP + COMPONENT_CALLS {
            if i == WARMUP {
                cpu = thread_cpu();
            }
            let started = Instant::now();
            let matched = filter
                .event_filter_matches(&limits, event, &lists)
                .await
                .unwrap();
            let elapsed = started.elapsed();
            assert!(matched);
            if i >= WARMUP {
                samples.push(elapsed);
            }
        }
        figures(samples, cpu_since(cpu))
    });

    // 1b. For reference: the same call in a session kept alive (instance reused).
    let session = runtime.block_on(async {
        let mut session = ToolSession::open(notes.clone(), sandbox.clone(), "{}", "{}", "bench")
            .await
            .unwrap();
        let mut samples = Vec::with_capacity(COMPONENT_CALLS);
        let mut cpu = None;
        for i in 0..WARMUP + COMPONENT_CALLS {
            if i == WARMUP {
                cpu = thread_cpu();
            }
            let started = Instant::now();
            let answer = session.invoke("put", INPUT).await.unwrap();
            let elapsed = started.elapsed();
            assert_eq!(answer.as_deref(), Ok(ANSWER));
            if i >= WARMUP {
                samples.push(elapsed);
            }
        }
        figures(samples, cpu_since(cpu))
    });

    // 2. The same tool as a native function, on the same store.
    let native = {
        let scoped = Scoped(&kv, KvScope::new("notes", "bench-native"));
        let mut samples = Vec::with_capacity(NATIVE_CALLS);
        let mut cpu = None;
        for i in 0..WARMUP + NATIVE_CALLS {
            if i == WARMUP {
                cpu = thread_cpu();
            }
            let started = Instant::now();
            let answer = notes_twin::invoke(&scoped, "put", std::hint::black_box(INPUT)).unwrap();
            let elapsed = started.elapsed();
            assert_eq!(answer, ANSWER);
            if i >= WARMUP {
                samples.push(elapsed);
            }
        }
        figures(samples, cpu_since(cpu))
    };

    // 3. The same tool as a program started per call (input on stdin, answer on stdout).
    let program = env!("CARGO_BIN_EXE_notes-native");
    let subprocess = {
        let mut samples = Vec::with_capacity(SUBPROCESS_CALLS);
        for i in 0..20 + SUBPROCESS_CALLS {
            let started = Instant::now();
            let mut child = Command::new(program)
                .arg("put")
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .unwrap();
            child
                .stdin
                .take()
                .unwrap()
                .write_all(INPUT.as_bytes())
                .unwrap();
            let output = child.wait_with_output().unwrap();
            let elapsed = started.elapsed();
            assert_eq!(String::from_utf8_lossy(&output.stdout).trim(), ANSWER);
            if i >= 20 {
                samples.push(elapsed);
            }
        }
        // The work happens in the children; this thread's CPU time says nothing about it.
        figures(samples, None)
    };

    println!("tool call: `notes` put, {} bytes of input", INPUT.len());
    println!(
        "  component load: compile {:.1} ms, from cache {:.2} ms",
        compile.as_secs_f64() * 1e3,
        cached_load.as_secs_f64() * 1e3
    );
    println!(
        "  {:<40} {:>12} {:>12} {:>16}",
        "", "p50", "p99", "CPU/call (mean)"
    );
    let row = |name: &str, f: &Figures| {
        let cpu = f.cpu.map_or_else(
            || format!("{:>16}", "-"),
            |c| format!("{:>13.1} µs", c.as_secs_f64() * 1e6),
        );
        println!("  {name:<40} {} {} {cpu}", us(f.p50), us(f.p99));
    };
    row("component, fresh instance per call", &component);
    row("component, session kept alive", &session);
    row("floor: label-filter, fresh instance", &floor);
    row("native Rust function", &native);
    row("native program, one process per call", &subprocess);
    let ratio = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64();
    println!(
        "  subprocess / component (p50): the component is {:.0}x faster",
        ratio(subprocess.p50, component.p50)
    );
    println!(
        "  component / native (p50): the component costs {:.1}x a native call",
        ratio(component.p50, native.p50)
    );
    println!(
        "  targets: component p50 < 30 µs: {}; >= 30x faster than a subprocess: {}",
        if component.p50 < Duration::from_micros(30) {
            "met"
        } else {
            "MISSED"
        },
        if ratio(subprocess.p50, component.p50) >= 30.0 {
            "met"
        } else {
            "MISSED"
        }
    );
    if let Ok(load) = std::fs::read_to_string("/proc/loadavg") {
        let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
        println!(
            "  machine: {cores} cores, load average {} (wall-clock figures include waiting for a core)",
            load.split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        );
    }
}
