//! `cargo bench --bench validate`: how long `validate` takes on a config dir of 1,000
//! manifests (250 tools, 500 agents, 125 triggers, 125 schedules, spread over 100 files, every
//! agent with bindings, middleware, guardrails and exposes). Prints the in-process figure and
//! the whole `agentmesh validate` command (process start included).

// A bench is a program that reports; failing to set up is a crash worth seeing.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

const FILES: usize = 100;

fn main() {
    let dir = std::env::temp_dir().join(format!("agentmesh-bench-validate-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    let manifests = generate(&dir);

    let report = agentmesh_manifest::validate(&dir);
    assert!(
        !report.has_errors(),
        "generated config is invalid: {:?}",
        report.diagnostics.first()
    );
    let s = &report.summary;
    assert_eq!(s.agents + s.tools + s.triggers + s.schedules, manifests);

    let in_process = time(10, || {
        let r = agentmesh_manifest::validate(&dir);
        assert!(!r.has_errors());
    });
    let command = time(5, || {
        let out = Command::new(env!("CARGO_BIN_EXE_agentmesh"))
            .arg("validate")
            .arg(&dir)
            .output()
            .expect("run agentmesh");
        assert!(out.status.success());
    });
    println!("validate: {manifests} manifests in {FILES} files");
    println!(
        "  in process        median {:>8.1} ms   min {:>8.1} ms",
        ms(in_process.0),
        ms(in_process.1)
    );
    println!(
        "  agentmesh command median {:>8.1} ms   min {:>8.1} ms",
        ms(command.0),
        ms(command.1)
    );
    println!(
        "  per manifest      {:.1} µs (in process, median)",
        in_process.0.as_secs_f64() * 1e6 / manifests as f64
    );
    let _ = std::fs::remove_dir_all(&dir);
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Median and minimum of `runs` timings.
fn time(runs: usize, mut f: impl FnMut()) -> (Duration, Duration) {
    let mut samples: Vec<Duration> = (0..runs)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed()
        })
        .collect();
    samples.sort();
    (samples[runs / 2], samples[0])
}

/// Writes the config dir; returns the number of manifests.
fn generate(dir: &Path) -> usize {
    let mut files = vec![String::new(); FILES];
    let mut count = 0;
    files[0].push_str(
        "kind: agentmesh/v1/host\nsources:\n  github: {signature: github, secret: bench-secret}\n---\n",
    );
    for t in 0..250 {
        let f = &mut files[t % FILES];
        write!(
            f,
            "kind: commonagents.info/v1beta2/tool
namespace: bench
name: tool-{t}
description: Tool {t}.
parameters:
  type: object
  properties:
    owner: {{type: string, require_binding: true}}
actions:
  - name: read
    description: Read a thing.
    parameters:
      type: object
      properties:
        path: {{type: string}}
    execute:
      cel:
        expression: \"{{'owner': input.owner, 'path': input.path, 'at': now}}\"
  - name: write
    description: Write a thing.
    parameters:
      type: object
      properties:
        path: {{type: string}}
        content: {{type: string}}
    execute:
      stateless_http:
        method: POST
        url: \"https://example.com/{{parameters.owner}}/{{parameters.path}}\"
        headers: {{Authorization: \"Bearer {{settings.token}}\"}}
        body: {{content: \"{{parameters.content}}\"}}
events:
  - name: changed
    message: \"Changed: {{event.payload.path}} by {{event.payload.user}}\"
    timeout: 24h
    max_timeout: 72h
    parameters:
      type: object
      properties:
        path: {{type: string}}
    receive:
      webhook:
        filter: \"event.payload.owner == parameters.owner && event.payload.path == parameters.path\"
---
"
        )
        .unwrap();
        count += 1;
    }
    for a in 0..500 {
        let f = &mut files[(a * 7) % FILES];
        let t = a % 250;
        write!(
            f,
            "kind: commonagents.info/v1beta2/agent
namespace: bench
name: agent-{a}
description: Agent {a}.
prompt: |
  You help {{context.user.id}} at {{now}}.
  Be brief.
limits: {{max_turns: 20, max_age: 2h}}
capabilities:
  tool-{t}:
    bindings:
      owner: \"context.user.id\"
    include: [read, write, changed]
    before:
      - assert: \"context.capabilities['tool_{u}'].count_successful < 20\"
        error_message: \"Limit reached for {{context.user.id}}.\"
      - assert: \"!has(event) || event.payload.user != 'bot'\"
    after:
      - transform: \"has(event) ? '[ACTION REQUIRED] ' + input.message : output\"
guardrails:
  before:
    - assert: \"size(input.message) < 50000\"
      error_message: \"Input too large.\"
exposes:
  reads: \"context.capabilities.tool_{u}_read.count_successful\"
---
",
            u = t
        )
        .unwrap();
        count += 1;
    }
    for r in 0..125 {
        let f = &mut files[(r * 3) % FILES];
        write!(
            f,
            "kind: commonagents.info/v1beta2/trigger
namespace: bench
name: trigger-{r}
agent: agent-{r}
owner: user:bench@example.com
source:
  type: github
  before:
    - assert: \"event.payload.action == 'opened'\"
message: \"New issue #{{event.payload.issue.number}}: {{event.payload.issue.title}}\"
enabled: true
---
kind: commonagents.info/v1/schedule
namespace: bench
name: schedule-{r}
agent: agent-{r}
cron: \"*/15 9-17 * * 1-5\"
timezone: Europe/Berlin
owner: user:bench@example.com
inputs:
  message: [{{mimeType: text/plain, text: \"Tick {r}.\"}}]
enabled: true
---
"
        )
        .unwrap();
        count += 2;
    }
    for (i, text) in files.iter().enumerate() {
        std::fs::write(dir.join(format!("m{i:03}.yaml")), text).unwrap();
    }
    count
}
