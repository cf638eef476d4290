#!/usr/bin/env bash
# Builds every Python guest, guests/python/<name>/app.py, into the component
# guests/target/python/<name>.wasm (world `tool-plugin` of ../../wit) with componentize-py,
# installing componentize-py 0.25.1 with pip first if it is missing.
#
#   bash guests/python/build.sh          # from any directory
#
# A component newer than its project's files, the WIT files and this script is not rebuilt.
# Set FORCE=1 to rebuild anyway.
set -euo pipefail

VERSION=0.25.1
cd "$(dirname "$0")/../.."

fail() {
    echo "guests/python/build.sh: $*" >&2
    exit 1
}

if ! python3 -c "import importlib.metadata as m; assert m.version('componentize-py') == '$VERSION'" 2>/dev/null; then
    echo "installing componentize-py $VERSION with pip" >&2
    python3 -m pip install --quiet "componentize-py==$VERSION" \
        || fail "cannot install componentize-py $VERSION with \`python3 -m pip install componentize-py==$VERSION\`"
fi

# Runs componentize-py from the python3 that has it (its console script may not be on PATH).
componentize_py() {
    python3 -c 'import sys, componentize_py; sys.exit(componentize_py.script())' "$@"
}

projects=(guests/python/*/app.py)
[[ -e ${projects[0]} ]] || fail "no guests/python/*/app.py to build"

out_dir=guests/target/python
mkdir -p "$out_dir"
for app in "${projects[@]}"; do
    project=$(dirname "$app")
    name=$(basename "$project")
    out="$out_dir/$name.wasm"
    if [[ -z ${FORCE:-} && -f $out ]] \
        && [[ -z $(find "$project" wit guests/python/build.sh -newer "$out" -type f -not -path '*/__pycache__/*' -print -quit) ]]; then
        echo "$out is up to date"
        continue
    fi
    echo "building $out from $project"
    # Written aside and renamed into place: a failed build leaves no half-written component,
    # and a host watching the file sees one change.
    if ! componentize_py -d wit -w tool-plugin componentize -p "$project" app -o "$out.tmp"; then
        rm -f "$out.tmp"
        fail "building $project failed (componentize-py's error is above)"
    fi
    mv "$out.tmp" "$out"
done
