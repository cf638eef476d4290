#!/bin/sh
# Builds {{name}}.wasm, the tool's component, from app.py and tool.py against wit/ (world
# `tool-plugin`). Needs componentize-py 0.25.1: pip install componentize-py==0.25.1
set -eu
cd "$(dirname "$0")"
command -v componentize-py >/dev/null || {
    echo "build.sh: componentize-py is missing; install it with: pip install componentize-py==0.25.1" >&2
    exit 1
}
# Written aside, then renamed: a running `agentmesh serve` sees one complete new file.
componentize-py -d wit -w tool-plugin componentize app -o {{name}}.wasm.tmp
mv {{name}}.wasm.tmp {{name}}.wasm
