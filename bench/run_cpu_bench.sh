#!/usr/bin/env bash
# Runs every CPU benchmark and prints the tables (README "Benchmarks"): sgemm (rlx vs oneDNN vs
# OpenBLAS, default and OPENBLAS_CORETYPE=Haswell), per-op throughput (native vs decomposed vs
# reference evaluator) and the encoder layer against JAX and ONNX Runtime on the same weights.
# Usage: bash bench/run_cpu_bench.sh [build dir, default ./build]. RLX_NUM_THREADS sets the
# thread count of rlx and of every peer (default: physical cores). About 2-4 minutes on 2 cores.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build}"

if [ ! -f "$build/build.ninja" ]; then
  cmake -S "$root" -B "$build" -G Ninja
fi
ninja -C "$build" rlx_bench_cpu
bench="$build/rlx_bench_cpu"

# The encoder's weights, input and rlx output, read by the peer script; removed on exit unless
# RLX_BENCH_KEEP=1.
out="$(mktemp -d -t rlx_bench.XXXXXX)"
if [ "${RLX_BENCH_KEEP:-0}" = 1 ]; then
  echo "encoder files kept in $out"
else
  trap 'rm -rf "$out"' EXIT
fi

# One process per section, so the encoder's peak RSS (VmHWM) is its own. The sgemm section
# times OpenBLAS in child processes of its own (OPENBLAS_CORETYPE is read when the library loads).
"$bench" --section sgemm
"$bench" --section ops | tail -n +2
"$bench" --section encoder --out "$out" | tail -n +2
if python3 -c "import numpy" 2>/dev/null; then
  python3 "$root/bench/encoder_peers.py" --dir "$out"
else
  echo "encoder peers skipped: no python3 with numpy (pip install -r bench/requirements.txt)"
fi
