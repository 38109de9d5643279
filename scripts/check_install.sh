#!/usr/bin/env bash
# Proves the installed C++ package works from another project: installs the headers, libraries
# and CMake package of a built tree (default build/) into a temporary prefix, then configures,
# builds and runs examples/cpp against it with find_package(rlx), out of the source tree.
# Usage: bash scripts/check_install.sh [build dir]   (after bash scripts/build.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
build="${1:-build}"
tmp="$(mktemp -d -t rlx_install.XXXXXX)"
trap 'rm -rf "$tmp"' EXIT

cmake --install "$build" --prefix "$tmp/prefix" --component devel >/dev/null
start=$(date +%s%N)
cmake -S examples/cpp -B "$tmp/example" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$tmp/prefix" >"$tmp/configure.log" || { cat "$tmp/configure.log"; exit 1; }
cmake --build "$tmp/example" >"$tmp/build.log" || { cat "$tmp/build.log"; exit 1; }
end=$(date +%s%N)
out="$("$tmp/example/run_graph")"
# The graph's text form, the result's type and a kernel report from the CPU backend.
for want in "graph @mlp" "f32[4,16]" "softmax"; do
  grep -qF -- "$want" <<<"$out" || { echo "check_install: '$want' not in the output:"; echo "$out"; exit 1; }
done
ms=$(((end - start) / 1000000))
printf 'check_install: examples/cpp configured and built against the installed rlx in %d.%d s, ran OK\n' \
  $((ms / 1000)) $((ms % 1000 / 100))
