#!/usr/bin/env bash
# MiniLM with block-quantized Linear weights (README "Benchmarks"): rlx --quantize FORMAT vs rlx
# f32 vs ONNX Runtime f32 (ORT-fused) vs ORT's dynamic int8 quantization, batch 1 and 32 x seq
# 128, model only. Builds rlx_bench_embed, exports the ONNX models once if missing (needs torch,
# transformers and onnx that one time), runs rlx twice and bench/embed_quant_peers.py.
# Usage: bash bench/embed_quant_bench.sh [build dir, default ./build] [rlx_bench_embed options,
# e.g. --batches 1 --budget 5]. RLX_BENCH_QUANT picks the format (default q8_0);
# RLX_NUM_THREADS the thread count of rlx and ORT (default: physical cores).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build}"
shift || true
if [ ! -f "$build/build.ninja" ]; then
  cmake -S "$root" -B "$build" -G Ninja
fi
ninja -C "$build" rlx_bench_embed
onnx="${RLX_CACHE_DIR:-$HOME/.cache/rlx}/minilm/all-MiniLM-L6-v2.onnx"
if [ ! -f "${onnx%.onnx}.ort-int8.onnx" ]; then
  python3 "$root/bench/export_minilm_onnx.py" --out "$onnx"
fi
out="$(mktemp -d -t rlx_embed_quant.XXXXXX)"
trap 'rm -rf "$out"' EXIT
"$build/rlx_bench_embed" --out "$out/f32" "$@"
"$build/rlx_bench_embed" --out "$out/quant" --quantize "${RLX_BENCH_QUANT:-q8_0}" "$@"
python3 "$root/bench/embed_quant_peers.py" --f32 "$out/f32" --quant "$out/quant" --onnx "$onnx"
