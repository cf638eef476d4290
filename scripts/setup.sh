#!/usr/bin/env bash
# Builds everything on a fresh machine — the wasm32-wasip2 target, the `agentmesh` binary in
# release (whole-program LTO: 8–15 minutes from scratch on two cores), the guest components in
# Rust, Python and JavaScript (with their toolchains: componentize-py, componentize-js) —
# then runs the main job on the quickstart example: a task of `demo/assistant`, offline, with
# the scripted model.
set -euo pipefail
cd "$(dirname "$0")/.."

rustup target add wasm32-wasip2
cargo build --release -p agentmesh --bin agentmesh
target_dir="${CARGO_TARGET_DIR:-target}"
bash scripts/split-debuginfo.sh "$target_dir/release/agentmesh"
if [ -f guests/Cargo.toml ]; then
  cargo build --release --target wasm32-wasip2 --manifest-path guests/Cargo.toml \
    --target-dir guests/target
fi
# The Python and JavaScript guests, installing componentize-py (pip) and componentize-js (npm).
bash guests/python/build.sh
bash guests/js/build.sh

"$target_dir/release/agentmesh" validate examples/quickstart
"$target_dir/release/agentmesh" run examples/quickstart --agent demo/assistant \
  -m "What is 6 × 7?" --data "$(mktemp -d)"
