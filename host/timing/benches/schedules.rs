//! `cargo bench -p agentmesh-timing --bench schedules`: 10,000 schedules driven by the timer on
//! a multi-threaded tokio runtime for 20 s. Nine in ten are intervals of 1–5 s with random
//! phases, so that they tick throughout the run; one in ten is `* * * * *` in one of three
//! zones, which fire together at a minute boundary (a burst of 1,000, if the run crosses one).
//! One driver task pops what is due and hands it to a second task, which re-arms each
//! schedule's next fire, as the host does.
//!
//! Prints the machine, the memory the armed schedules take (VmRSS before and after arming), and
//! the lateness of ticks: when the driver popped them minus when they were due.

// A bench is a program that reports; failing to set up is a crash worth seeing.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use agentmesh_timing::clock::now_ms;
use agentmesh_timing::{Due, Interval, TimerHandle, Timing};
use chrono_tz::Tz;

const SCHEDULES: u32 = 10_000;
const RUN: Duration = Duration::from_secs(20);
const ZONES: [Tz; 3] = [Tz::UTC, Tz::America__New_York, Tz::Europe__Berlin];

fn main() {
    print_machine();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(run());
}

async fn run() {
    let rss_before = rss_kib();
    let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
    let now = now_ms();
    let timings: Arc<Vec<Timing>> = Arc::new(
        (0..SCHEDULES)
            .map(|i| {
                if i % 10 == 0 {
                    let tz = ZONES[rng.below(3) as usize];
                    Timing::Cron(agentmesh_timing::Cron::new("* * * * *", tz).unwrap())
                } else {
                    let every = Duration::from_millis(1_000 + rng.below(4_001));
                    Timing::Interval(Interval::new(every, now + rng.below(5_000) as i64).unwrap())
                }
            })
            .collect(),
    );
    let rss_timings = rss_kib();
    let timer = TimerHandle::new();
    for (id, timing) in (0..SCHEDULES).zip(timings.iter()) {
        timer.arm(id, timing.next_after(now).unwrap());
    }
    let rss_armed = rss_kib();
    let per_schedule = |from: i64, to: i64| (to - from) as f64 * 1024.0 / f64::from(SCHEDULES);
    println!(
        "memory:   VmRSS {rss_before} KiB before, {rss_timings} KiB with the timings, {rss_armed} KiB armed: {:.0} bytes per schedule ({:.0} the timing, {:.0} the timer entry)",
        per_schedule(rss_before, rss_armed),
        per_schedule(rss_before, rss_timings),
        per_schedule(rss_timings, rss_armed),
    );

    let (to_rearm, mut rearm) = tokio::sync::mpsc::unbounded_channel::<Vec<Due<u32>>>();
    let rearmer = tokio::spawn({
        let timer = timer.clone();
        let timings = Arc::clone(&timings);
        async move {
            while let Some(due) = rearm.recv().await {
                let now = now_ms();
                for Due { id, at_ms } in due {
                    if let Some(next) = timings[id as usize].next_after(now.max(at_ms)) {
                        timer.arm(id, next);
                    }
                }
            }
        }
    });

    let cpu_before = cpu_secs();
    let mut lateness_us = Vec::new();
    let mut cron_ticks = 0usize;
    let deadline = tokio::time::Instant::now() + RUN;
    while let Ok(due) = tokio::time::timeout_at(deadline, timer.next_due()).await {
        let fired_us = now_us();
        for d in &due {
            lateness_us.push(fired_us - d.at_ms * 1_000);
            cron_ticks += usize::from(d.id % 10 == 0);
        }
        to_rearm.send(due).unwrap();
    }
    let cpu = cpu_secs() - cpu_before;
    drop(to_rearm);
    rearmer.await.unwrap();

    lateness_us.sort_unstable();
    let pct = |p: f64| {
        let rank = (p * (lateness_us.len() - 1) as f64).round() as usize;
        lateness_us[rank] as f64 / 1_000.0
    };
    println!(
        "ticks:    {} in {:.0} s ({cron_ticks} of them cron), {:.0} per second; process CPU {cpu:.2} s ({:.1}% of one core)",
        lateness_us.len(),
        RUN.as_secs_f64(),
        lateness_us.len() as f64 / RUN.as_secs_f64(),
        cpu / RUN.as_secs_f64() * 100.0
    );
    println!(
        "lateness: p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms (fire time minus due time)",
        pct(0.50),
        pct(0.99),
        pct(1.0)
    );
    println!("rss end:  VmRSS {} KiB", rss_kib());
}

fn print_machine() {
    let cpus = std::thread::available_parallelism().map_or(0, usize::from);
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, m)| m.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown".into());
    println!("machine:  {cpus} CPUs available (nproc), {model}");
    println!(
        "schedules: {SCHEDULES} ({} intervals of 1–5 s with random phases, {} `* * * * *` in UTC, New York, Berlin), run {} s",
        SCHEDULES - SCHEDULES / 10,
        SCHEDULES / 10,
        RUN.as_secs()
    );
}

/// VmRSS of this process, KiB.
fn rss_kib() -> i64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// User + system CPU time of this process, seconds (from /proc/self/stat, in the usual 100 Hz
/// clock ticks).
fn cpu_secs() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    // Fields after the parenthesised command name; utime and stime are the 14th and 15th.
    let after_name = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    ticks as f64 / 100.0
}

fn now_us() -> i64 {
    let since = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    i64::try_from(since.as_micros()).unwrap()
}

/// A small deterministic generator: the bench needs spread, not quality.
struct XorShift(u64);

impl XorShift {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}
