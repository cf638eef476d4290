//! What a tool call costs, three ways, in one run: the `notes` component in a fresh instance
//! (open a session, `put`, close — what a stateless call does), the same tool as a native
//! Rust function, and the same tool as a native program started per call. Prints p50/p99 and
//! the ratios. For reference it also measures where a fresh instance's time goes (open,
//! invoke, close), `notes` in a session kept alive (what a task's second and later calls
//! cost) and the floor of a fresh instance (`label-filter`: one call, no constructor, no host
//! calls). Last, the same trivial tool in three languages — the `counter` example in Rust,
//! Python and JavaScript, its `count` action — by component size, compile time, a call in a
//! fresh instance and a call in a kept session.
//!
//! The ways are measured in interleaved rounds, each starting with unrecorded warm-up calls,
//! so that load from other processes on a shared machine falls on all of them alike. Besides
//! wall-clock percentiles it reports, per call, this thread's CPU time (which excludes waiting
//! for a core) and minor page faults (a fresh instance faults in the pages it writes above the
//! lowest 64 KiB of its memory: the instance pool decommits those between uses).
//!
//! Needs the guests built (`cargo build --release --target wasm32-wasip2 --manifest-path
//! guests/Cargo.toml`, `bash guests/python/build.sh`, `bash guests/js/build.sh`); run with
//! `cargo bench -p agentmesh-plugins --bench tool_call`.

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

/// The allocator of the `agentmesh` binary, so the figures are the shipped host's (the
/// subprocess is a program of its own, on the system allocator).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Rounds; every way is measured once per round, in turn.
const ROUNDS: usize = 5;
/// Calls recorded per way and round (5,000 per way in all).
const CALLS: usize = 1000;
/// Processes started per round (300 in all): each costs about a millisecond.
const SUBPROCESS_CALLS: usize = 60;
/// Unrecorded calls at the start of each way's turn in a round.
const WARMUP: usize = 50;

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

/// What this thread has used so far (Linux: `/proc/thread-self`).
#[derive(Clone, Copy, Default)]
struct Usage {
    cpu: Duration,
    minor_faults: u64,
}

impl Usage {
    fn now() -> Option<Usage> {
        let schedstat = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
        let cpu_ns = schedstat.split_whitespace().next()?.parse().ok()?;
        // `pid (comm) state ppid … minflt …`: minflt is the 8th field after the command.
        let stat = std::fs::read_to_string("/proc/thread-self/stat").ok()?;
        let minor_faults = stat
            .rsplit(')')
            .next()?
            .split_whitespace()
            .nth(7)?
            .parse()
            .ok()?;
        Some(Usage {
            cpu: Duration::from_nanos(cpu_ns),
            minor_faults,
        })
    }
}

/// The recorded calls of one way.
#[derive(Default)]
struct Samples {
    wall: Vec<Duration>,
    /// This thread's usage over the recorded calls, if the platform reports it.
    used: Option<Usage>,
}

impl Samples {
    /// Makes `warmup` unrecorded calls, then records `calls` calls.
    async fn record(&mut self, warmup: usize, calls: usize, mut call: impl AsyncFnMut()) {
        for _ in 0..warmup {
            call().await;
        }
        let before = Usage::now();
        for _ in 0..calls {
            let started = Instant::now();
            call().await;
            self.wall.push(started.elapsed());
        }
        if let (Some(before), Some(after)) = (before, Usage::now()) {
            let used = self.used.get_or_insert_default();
            used.cpu += after.cpu.saturating_sub(before.cpu);
            used.minor_faults += after.minor_faults.saturating_sub(before.minor_faults);
        }
    }

    fn figures(&self) -> Figures {
        let mut wall = self.wall.clone();
        wall.sort_unstable();
        let at = |q: f64| wall[((wall.len() - 1) as f64 * q).round() as usize];
        let calls = u32::try_from(wall.len()).unwrap();
        Figures {
            p50: at(0.50),
            p99: at(0.99),
            used: self
                .used
                .map(|u| (u.cpu / calls, u.minor_faults as f64 / f64::from(calls))),
        }
    }
}

struct Figures {
    p50: Duration,
    p99: Duration,
    /// CPU time and minor page faults of this thread per call (means).
    used: Option<(Duration, f64)>,
}

fn us(d: Duration) -> String {
    format!("{:>9.2} µs", d.as_secs_f64() * 1e6)
}

fn row(name: &str, f: &Figures) {
    let used = match f.used {
        Some((cpu, faults)) => format!("{} {faults:>11.1}", us(cpu)),
        None => format!("{:>12} {:>11}", "-", "-"),
    };
    println!("  {name:<42} {} {} {used}", us(f.p50), us(f.p99));
}

/// Cores, CPU model and kernel.
fn machine() -> String {
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name")?.split_once(':'))
        .map_or("unknown CPU", |(_, m)| m.trim());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    format!("{cores} cores, {model}, kernel {}", kernel.trim())
}

/// All CPUs' (steal, total) time so far, in ticks (`/proc/stat`).
fn cpu_ticks() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let ticks: Vec<u64> = stat
        .lines()
        .next()?
        .split_whitespace()
        .skip(1)
        .take(8)
        .map(|t| t.parse().ok())
        .collect::<Option<_>>()?;
    Some((*ticks.get(7)?, ticks.iter().sum()))
}

fn main() {
    // `NOTES_WASM` measures another build of `notes` (say, the previous commit's) in its place.
    let release =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../guests/target/wasm32-wasip2/release");
    let wasm =
        std::env::var_os("NOTES_WASM").map_or_else(|| release.join("notes.wasm"), Into::into);
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
    let (host, notes, compile, _cache) = first_load(&kv, &wasm);
    let started = Instant::now();
    let _cached = host.load(&wasm).unwrap();
    let cached_load = started.elapsed();
    let filter = host.load(&release.join("label_filter.wasm")).unwrap();
    let sandbox = Sandbox::default();
    let limits = Limits::default();
    let event = r#"{"payload": {"labels": ["bug"]}}"#;
    let lists = [AllowList {
        name: "labels".into(),
        values: vec!["bug".into()],
    }];
    let scoped = Scoped(&kv, KvScope::new("notes", "bench-native"));
    let program = env!("CARGO_BIN_EXE_notes-native");

    let mut component = Samples::default();
    let mut open = Samples::default();
    let mut invoke = Samples::default();
    let mut close = Samples::default();
    let mut session = Samples::default();
    let mut floor = Samples::default();
    let mut native = Samples::default();
    let mut subprocess = Samples::default();
    let ticks = cpu_ticks();
    runtime.block_on(async {
        let mut live = ToolSession::lazy(notes.clone(), sandbox.clone(), "{}", "{}", "bench")
            .unwrap()
            .open()
            .await
            .unwrap();
        for _ in 0..ROUNDS {
            // 1. The component, a fresh instance per call.
            component
                .record(WARMUP, CALLS, async || {
                    let answer = notes
                        .call_tool(&sandbox, "{}", "{}", "bench", "put", INPUT)
                        .await
                        .unwrap();
                    assert_eq!(answer.as_deref(), Ok(ANSWER));
                })
                .await;

            // 1a. The same, phase by phase: open (new store, instantiate, constructor), invoke,
            // close (destructor, teardown).
            for i in 0..WARMUP + CALLS {
                let started = Instant::now();
                let mut fresh =
                    ToolSession::lazy(notes.clone(), sandbox.clone(), "{}", "{}", "bench")
                        .unwrap()
                        .open()
                        .await
                        .unwrap();
                let opened = Instant::now();
                let answer = fresh.invoke("put", INPUT).await.unwrap();
                let invoked = Instant::now();
                fresh.close().await.unwrap();
                let closed = Instant::now();
                assert_eq!(answer.as_deref(), Ok(ANSWER));
                if i >= WARMUP {
                    open.wall.push(opened - started);
                    invoke.wall.push(invoked - opened);
                    close.wall.push(closed - invoked);
                }
            }

            // 1b. For reference: the same call in a session kept alive (instance reused).
            session
                .record(WARMUP, CALLS, async || {
                    let answer = live.invoke("put", INPUT).await.unwrap();
                    assert_eq!(answer.as_deref(), Ok(ANSWER));
                })
                .await;

            // 1c. For reference: the floor of a fresh instance.
            floor
                .record(WARMUP, CALLS, async || {
                    let matched = filter
                        .event_filter_matches(&limits, event, &lists)
                        .await
                        .unwrap();
                    assert!(matched);
                })
                .await;

            // 2. The same tool as a native function, on the same store.
            native
                .record(WARMUP, CALLS, async || {
                    let answer =
                        notes_twin::invoke(&scoped, "put", std::hint::black_box(INPUT)).unwrap();
                    assert_eq!(answer, ANSWER);
                })
                .await;

            // 3. The same tool as a program started per call (input on stdin, answer on
            // stdout), with an empty environment: a host gives a tool server the environment
            // it chooses, and `cargo bench`'s own (a `LD_LIBRARY_PATH` of build directories
            // the loader searches) would add ~200 µs to every start.
            subprocess
                .record(WARMUP / 10, SUBPROCESS_CALLS, async || {
                    let mut child = Command::new(program)
                        .env_clear()
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
                    assert_eq!(String::from_utf8_lossy(&output.stdout).trim(), ANSWER);
                })
                .await;
        }
        live.close().await.unwrap();
    });
    let stolen = match (ticks, cpu_ticks()) {
        (Some((steal0, total0)), Some((steal1, total1))) if total1 > total0 => {
            format!(
                "{:.0}%",
                100.0 * (steal1 - steal0) as f64 / (total1 - total0) as f64
            )
        }
        _ => "unknown".into(),
    };
    // The work of a subprocess happens in the child: this thread's usage says nothing of it.
    subprocess.used = None;

    let [
        component,
        open,
        invoke,
        close,
        session,
        floor,
        native,
        subprocess,
    ] = [
        &component,
        &open,
        &invoke,
        &close,
        &session,
        &floor,
        &native,
        &subprocess,
    ]
    .map(Samples::figures);
    println!(
        "tool call: `notes` put, {} bytes of input; {ROUNDS} interleaved rounds",
        INPUT.len()
    );
    println!("  machine: {}", machine());
    println!(
        "  component load: compile {:.1} ms, from cache {:.2} ms",
        compile.as_secs_f64() * 1e3,
        cached_load.as_secs_f64() * 1e3
    );
    println!(
        "  {:<42} {:>12} {:>12} {:>12} {:>11}",
        "", "p50", "p99", "mean CPU", "mean faults"
    );
    row("component, fresh instance per call", &component);
    row("  open: new store, instantiate, constructor", &open);
    row("  invoke", &invoke);
    row("  close: destructor, teardown", &close);
    row("component, session kept alive", &session);
    row("floor: label-filter, fresh instance", &floor);
    row("native Rust function", &native);
    row("native program, one process per call", &subprocess);
    let ratio = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64();
    let speedup = ratio(subprocess.p50, component.p50);
    println!(
        "  p50, fresh instance: {speedup:.0}x faster than the subprocess, {:.1}x the native call",
        ratio(component.p50, native.p50)
    );
    let verdict = |met: bool| if met { "met" } else { "MISSED" };
    println!(
        "  targets: component p50 < 30 µs: {}; >= 30x faster than a subprocess: {}",
        verdict(component.p50 < Duration::from_micros(30)),
        verdict(speedup >= 30.0)
    );
    runaway_loop(&host, &release.join("test_loop.wasm"));
    languages(&runtime, &kv, &release);
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "  during the run: load average {}, {stolen} of CPU time stolen by the hypervisor \
         (wall-clock figures include waiting for a core, mean CPU does not)",
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
}

/// A plugin host on `kv` with a compiled cache of its own (kept while the `TempDir` lives),
/// and `wasm` loaded into it: a first compile, and the time it took.
fn first_load(
    kv: &Arc<MemoryKv>,
    wasm: &Path,
) -> (
    PluginHost,
    Arc<agentmesh_plugins::LoadedComponent>,
    Duration,
    tempfile::TempDir,
) {
    let cache = tempfile::tempdir().unwrap();
    let config = PluginConfig {
        cache_dir: Some(cache.path().to_owned()),
        max_instances: 16,
        ..PluginConfig::default()
    };
    let host = PluginHost::new(config, kv.clone()).unwrap();
    let started = Instant::now();
    let component = host.load(wasm).unwrap();
    (host, component, started.elapsed(), cache)
}

/// The `counter` example in each language: size, compile time, and `count` in a fresh instance
/// and in a kept session, in interleaved rounds.
fn languages(runtime: &tokio::runtime::Runtime, kv: &Arc<MemoryKv>, release: &Path) {
    const FRESH_CALLS: usize = 40;
    let guests = release.join("../..");
    let languages = [
        (
            "Rust",
            release.join("counter.wasm"),
            "cargo build … (above)",
        ),
        (
            "Python",
            guests.join("python/counter.wasm"),
            "bash guests/python/build.sh",
        ),
        (
            "JavaScript",
            guests.join("js/counter.wasm"),
            "bash guests/js/build.sh",
        ),
    ];
    let sandbox = Sandbox::default();
    let mut loaded = Vec::new();
    for (name, wasm, build) in &languages {
        assert!(
            wasm.exists(),
            "{} is missing: build it first: {build}",
            wasm.display()
        );
        let (host, component, compile, cache) = first_load(kv, wasm);
        let size = std::fs::metadata(wasm).unwrap().len();
        loaded.push((*name, size, compile, component, host, cache));
    }
    let mut fresh: Vec<Samples> = languages.iter().map(|_| Samples::default()).collect();
    let mut kept: Vec<Samples> = languages.iter().map(|_| Samples::default()).collect();
    runtime.block_on(async {
        let mut sessions = Vec::new();
        for (_, _, _, component, _, _) in &loaded {
            let session = ToolSession::lazy(component.clone(), sandbox.clone(), "{}", "{}", "t")
                .unwrap()
                .open()
                .await
                .unwrap();
            sessions.push(session);
        }
        for _ in 0..ROUNDS {
            for (i, (_, _, _, component, _, _)) in loaded.iter().enumerate() {
                fresh[i]
                    .record(2, FRESH_CALLS, async || {
                        let answer = component
                            .call_tool(&sandbox, "{}", "{}", "t", "count", "{}")
                            .await
                            .unwrap();
                        // A fresh instance counts from 1 (Python's JSON has a space).
                        let answer = answer.unwrap().replace(' ', "");
                        assert_eq!(answer, r#"{"count":1}"#);
                    })
                    .await;
                let session = &mut sessions[i];
                kept[i]
                    .record(WARMUP, CALLS, async || {
                        let answer = session.invoke("count", "{}").await.unwrap();
                        assert!(answer.is_ok(), "{answer:?}");
                    })
                    .await;
            }
        }
    });
    println!("  the `counter` example's `count` in three languages ({ROUNDS} interleaved rounds):");
    println!(
        "  {:<12} {:>9} {:>10} {:>12} {:>12} {:>12} {:>12}",
        "", "size", "compile", "fresh p50", "fresh p99", "kept p50", "kept p99"
    );
    for (i, (name, size, compile, ..)) in loaded.iter().enumerate() {
        let (fresh, kept) = (fresh[i].figures(), kept[i].figures());
        println!(
            "  {name:<12} {:>6.2} MB {:>8.2} s {} {} {} {}",
            *size as f64 / 1e6,
            compile.as_secs_f64(),
            us(fresh.p50),
            us(fresh.p99),
            us(kept.p50),
            us(kept.p99)
        );
    }
}

/// How soon after its timeout a guest looping in Wasm is stopped (the epoch tick and the move
/// off the async workers), on a multi-threaded runtime as the host runs.
fn runaway_loop(host: &PluginHost, wasm: &Path) {
    const TIMEOUT: Duration = Duration::from_millis(300);
    const RUNS: usize = 5;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let component = host.load(wasm).unwrap();
    let sandbox = Sandbox::new(Limits {
        timeout: TIMEOUT,
        ..Limits::default()
    });
    let mut late: Vec<Duration> = runtime.block_on(async {
        let mut late = Vec::new();
        for _ in 0..RUNS {
            let started = Instant::now();
            let answer = component
                .call_tool(&sandbox, "{}", "{}", "bench-loop", "spin", "{}")
                .await
                .unwrap();
            assert!(answer.is_err(), "the loop answered: {answer:?}");
            late.push(started.elapsed().saturating_sub(TIMEOUT));
        }
        late
    });
    late.sort();
    let (p50, max) = (late[RUNS / 2], late[RUNS - 1]);
    println!(
        "  runaway loop (`test-loop`, {} ms timeout), {RUNS} calls: stopped {:.1} ms after it \
         (p50), {:.1} ms (max); target within 100 ms: {}",
        TIMEOUT.as_millis(),
        p50.as_secs_f64() * 1e3,
        max.as_secs_f64() * 1e3,
        if max <= Duration::from_millis(100) {
            "met"
        } else {
            "MISSED"
        }
    );
}
