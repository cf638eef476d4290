#!/usr/bin/env bash
# Refreshes the inspector's screenshots in docs/inspector/ (tasks, task, reviews, triggers,
# plugins, login): the browser test that renders every view in a real headless Chromium keeps a
# PNG of each when AGENTMESH_SCREENSHOTS names a directory. Needs Debian's `chromium` and
# `chromium-driver`.
set -euo pipefail
cd "$(dirname "$0")/.."
{ command -v chromium >/dev/null && command -v chromedriver >/dev/null; } \
  || { apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y chromium chromium-driver; }
mkdir -p docs/inspector
AGENTMESH_SCREENSHOTS="$PWD/docs/inspector" \
  cargo test --profile ci --test e2e -- --exact inspector::every_view_renders_in_the_browser
ls -l docs/inspector/*.png
