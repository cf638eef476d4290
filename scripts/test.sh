#!/usr/bin/env bash
# Runs every check and test: the MCP packages the tests use (pip, npm), formatting, lints, API
# docs, the guest components the tests load (Rust, Python, JavaScript), and the whole test suite, optimized (the `ci`
# profile: release without LTO; wasmtime is 15–30× slower in debug). The guests always build
# into guests/target, where the tests look for them, whatever CARGO_TARGET_DIR says.
set -euo pipefail
cd "$(dirname "$0")/.."

rustup target add wasm32-wasip2 >/dev/null 2>&1 || rustup target add wasm32-wasip2
# The MCP servers the `mcp` runtime's end-to-end tests run (a Python one on the `mcp` package,
# and `@modelcontextprotocol/server-everything` from tests/mcp/package-lock.json), and the
# official Python SDK's client, which drives `agentmesh mcp` and `/mcp`: the Python package is
# installed unless in place, the npm one from its lockfile (a few seconds, offline from npm's
# cache once fetched).
python3 -c 'import importlib.metadata as m; assert m.version("mcp") == "2.3.0"' 2>/dev/null \
  || python3 -m pip install --quiet --disable-pip-version-check 'mcp==2.3.0'
npm ci --prefix tests/mcp --no-audit --no-fund --loglevel=error
# The PostgreSQL store's tests start a real server (initdb, pg_ctl) from the Debian package.
compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null \
  || { apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y postgresql; }
# The inspector's browser tests drive a real headless Chromium over WebDriver (Debian's
# `chromium` and `chromium-driver`); without them those tests fail, saying what to install.
{ command -v chromium >/dev/null && command -v chromedriver >/dev/null; } \
  || { apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y chromium chromium-driver; }
cargo fmt --all --check
# No module of a crate imports a module that imports it back.
python3 scripts/module-cycles.py
if [ -f guests/Cargo.toml ]; then
  cargo fmt --manifest-path guests/Cargo.toml --all --check
  cargo build --release --target wasm32-wasip2 --manifest-path guests/Cargo.toml \
    --target-dir guests/target
  # The guest SDK's own tests, natively.
  cargo test --quiet --manifest-path guests/Cargo.toml --target-dir guests/target \
    -p agentmesh-guest -p notes
fi
# The Python and JavaScript guests (componentize-py from PyPI, componentize-js from npm; each
# script installs its toolchain when missing and skips what is up to date).
bash guests/python/build.sh
bash guests/js/build.sh
cargo clippy --profile ci --workspace --all-targets -- -D warnings
# The API docs build without a broken link or a link to a private item.
RUSTDOCFLAGS="-D warnings" cargo doc --profile ci --workspace --no-deps
cargo test --profile ci --workspace
