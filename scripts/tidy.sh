#!/usr/bin/env bash
# Runs clang-tidy (the committed .clang-tidy) on tracked .cc files, with the compile commands of
# a configured build tree (default build/; CMAKE_EXPORT_COMPILE_COMMANDS is on), two files at a
# time. Fails on any warning, naming file:line and the check.
# Usage: bash scripts/tidy.sh [-b BUILD_DIR] [PATH ...]   (default: every tracked .cc file;
#        PATHs are files or directories, e.g. src/io tools)
set -euo pipefail
cd "$(dirname "$0")/.."
build=build
if [ "${1:-}" = "-b" ]; then
  build="$2"
  shift 2
fi
if ! command -v clang-tidy >/dev/null; then
  echo "tidy: clang-tidy not found (apt install clang-tidy)" >&2
  exit 1
fi
if [ ! -f "$build/compile_commands.json" ]; then
  echo "tidy: no $build/compile_commands.json (configure first: bash scripts/build.sh)" >&2
  exit 1
fi
# Only files the build compiles (the fake PJRT plugin and the example have no entry there).
mapfile -t files < <(git ls-files -- "${@:-.}" | grep '\.cc$' |
  grep -Fxf <(python3 -c 'import json, os, sys
for e in json.load(open(sys.argv[1])):
    print(os.path.relpath(e["file"]))' "$build/compile_commands.json" | sort -u))
start=$(date +%s)
log="$(mktemp -t rlx_tidy.XXXXXX)"
trap 'rm -f "$log"' EXIT
status=0
# GCC-only flags of the Python module (LTO) mean nothing to clang; drop them.
printf '%s\0' "${files[@]}" | xargs -0 -n 1 -P 2 clang-tidy -p "$build" --quiet \
  --extra-arg=-Wno-unknown-warning-option --extra-arg=-fno-lto >"$log" 2>&1 || status=$?
grep -E '^[^ ].*: (warning|error): ' "$log" | sort -u || true
warnings=$(grep -cE '^[^ ].*: (warning|error): ' "$log" || true)
echo "tidy: ${#files[@]} files, $warnings warning(s), $(($(date +%s) - start)) s"
if [ "$warnings" -ne 0 ] || [ "$status" -ne 0 ]; then
  [ "$warnings" -ne 0 ] || cat "$log"
  exit 1
fi
