#![allow(clippy::unwrap_used, missing_docs)]
use agentmesh_plugins::{MemoryKv, PluginConfig, PluginHost, Sandbox};
use std::path::Path;
use std::sync::Arc;
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
const INPUT: &str = r#"{"key": "plan", "value": "ship on friday"}"#;
fn main() {
    let wasm = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../guests/target/wasm32-wasip2/release/notes.wasm");
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
    let host = PluginHost::new(config, kv).unwrap();
    let notes = host.load(&wasm).unwrap();
    let sandbox = Sandbox::default();
    let n: usize = std::env::args()
        .nth(1)
        .map_or(100_000, |a| a.parse().unwrap());
    runtime.block_on(async {
        for _ in 0..1000 {
            notes
                .call_tool(&sandbox, "{}", "{}", "bench", "put", INPUT)
                .await
                .unwrap()
                .unwrap();
        }
        let t = std::time::Instant::now();
        for _ in 0..n {
            notes
                .call_tool(&sandbox, "{}", "{}", "bench", "put", INPUT)
                .await
                .unwrap()
                .unwrap();
        }
        println!("{:.2} us/call", t.elapsed().as_secs_f64() * 1e6 / n as f64);
    });
}
