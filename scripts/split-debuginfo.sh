#!/usr/bin/env bash
# Moves a binary's debug info (its line tables) and its symbol table into `BINARY.debug`
# beside it and leaves a debug link in the binary: what ships is code and data only. A
# backtrace shows function names, files and lines while the debug file is beside the binary
# (std's backtrace follows the debug link and reads both from there); without it, bare
# addresses. A binary already split (no `.debug_line` of its own) is left as it is, so running
# this again keeps the debug file.
set -euo pipefail
bin="$1"
if ! readelf -S "$bin" | grep -q '\.debug_line'; then
  echo "split-debuginfo: $bin has no debug info of its own (already split); left as it is"
  exit 0
fi
objcopy --only-keep-debug "$bin" "$bin.debug"
objcopy --strip-all --add-gnu-debuglink="$bin.debug" "$bin"
echo "split-debuginfo: $bin $(stat -c %s "$bin") bytes, $bin.debug $(stat -c %s "$bin.debug") bytes"
