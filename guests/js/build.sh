#!/usr/bin/env bash
# Builds every JavaScript guest, guests/js/<dir>/, into guests/target/js/<dir>.wasm.
#
# Each <dir> is an npm project with a committed package-lock.json whose `build` script runs
# componentize-js on its sources against ../../../wit (world `tool-plugin`) and accepts
# `--out PATH` appended to it. This script installs the project's dependencies with `npm ci`
# when node_modules is missing or was installed from another lock file, then builds it,
# unless the component is newer than the project's files and wit/.
#
# Usage: bash guests/js/build.sh        (from any directory; needs node >= 18 and npm)
set -euo pipefail

cd "$(dirname "$0")/../.."
root=$PWD
out_dir=$root/guests/target/js

fail() {
    echo "guests/js/build.sh: error: $*" >&2
    exit 1
}

command -v node >/dev/null || fail "node is not installed (the JavaScript guests need node >= 18 and npm)"
command -v npm >/dev/null || fail "npm is not installed (the JavaScript guests need node >= 18 and npm)"

shopt -s nullglob
projects=(guests/js/*/package.json)
((${#projects[@]})) || fail "no project found (guests/js/*/package.json)"
mkdir -p "$out_dir"

# The first file `$2` is older than among those it is built from: the project's own files
# (not its dependencies) and wit/.
newer_source() {
    find "$1" wit -name node_modules -prune -o -type f ! -name '*.wasm' -newer "$2" -print -quit
}

for manifest in "${projects[@]}"; do
    dir=$(dirname "$manifest")
    name=$(basename "$dir")
    out=$out_dir/$name.wasm

    # Dependencies: `npm ci` (exactly the lock file) when node_modules was not installed from
    # this very lock file.
    [[ -f $dir/package-lock.json ]] ||
        fail "$dir has no package-lock.json: run \`npm install\` there and commit the lock file"
    lock_sum=$(sha256sum "$dir/package-lock.json" | cut -d' ' -f1)
    stamp=$dir/node_modules/.agentmesh-lock-sha256
    if [[ ! -f $stamp || $(<"$stamp") != "$lock_sum" ]]; then
        echo "==> $name: installing dependencies (npm ci)"
        (cd "$dir" && npm ci --no-audit --no-fund) ||
            fail "$name: \`npm ci\` failed in $dir (is the npm registry reachable? does package-lock.json match package.json?)"
        echo "$lock_sum" >"$stamp"
    fi

    # Up to date: the component is newer than every source file.
    if [[ -f $out && -z $(newer_source "$dir" "$out") ]]; then
        echo "==> $name: up to date ($out)"
        continue
    fi

    # componentize-js reports a syntax error without its place; node says where it is.
    while IFS= read -r file; do
        node --check "$file" || fail "$name: $file is not valid JavaScript (see above)"
    done < <(find "$dir" -name node_modules -prune -o -type f \( -name '*.js' -o -name '*.mjs' \) -print)

    echo "==> $name: building $out"
    rm -f "$out.tmp"
    (cd "$dir" && npm run --silent build -- --out "$out.tmp") ||
        fail "$name: \`npm run build\` failed in $dir (see above)"
    [[ -s $out.tmp ]] || fail "$name: \`npm run build\` wrote no component (does its build script take --out?)"
    mv "$out.tmp" "$out"
    echo "    $(du -h "$out" | cut -f1) $out"
done
