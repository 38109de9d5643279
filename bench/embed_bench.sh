#!/usr/bin/env bash
# MiniLM (all-MiniLM-L6-v2) sentence embeddings (README "Benchmarks"), batch 1 and 32 x seq 128,
# every row 128 real tokens. Two modes:
# - default: rlx vs ONNX Runtime vs JAX, model only (token ids -> embeddings) and end to end
#   (texts -> embeddings), peers in bench/embed_peers.py;
# - RLX_BENCH_QUANT=FORMAT (e.g. q8_0): block-quantized Linear weights (rlx_bench_embed
#   --quantize) vs rlx f32 vs ORT-fused f32 vs ORT's dynamic int8, model only, with each
#   quantized model's min cosine to its f32 twin (bench/embed_quant_peers.py).
# Builds rlx_bench_embed and exports the ONNX models once into ~/.cache/rlx/minilm/ if missing
# (as exported, ORT-fused and ORT int8; needs torch, transformers and onnx that one time).
# Usage: bash bench/embed_bench.sh [build dir, default ./build] [rlx_bench_embed options, e.g.
# --batches 1 --budget 5]. RLX_NUM_THREADS sets the thread count of rlx and of every peer
# (default: physical cores). About 3-4 minutes on 2 cores.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build}"
shift || true
quant="${RLX_BENCH_QUANT:-}"

if [ ! -f "$build/build.ninja" ]; then
  cmake -S "$root" -B "$build" -G Ninja
fi
ninja -C "$build" rlx_bench_embed

onnx="${RLX_CACHE_DIR:-$HOME/.cache/rlx}/minilm/all-MiniLM-L6-v2.onnx"
if [ ! -f "$onnx" ] || [ ! -f "${onnx%.onnx}.ort-fused.onnx" ] ||
  { [ -n "$quant" ] && [ ! -f "${onnx%.onnx}.ort-int8.onnx" ]; }; then
  python3 "$root/bench/export_minilm_onnx.py" --out "$onnx" ||
    echo "ONNX export failed (pip install torch transformers onnx): the ORT columns will be empty"
fi

# Texts, token ids, outputs and timings of rlx, read by the peer script; removed on exit unless
# RLX_BENCH_KEEP=1.
out="$(mktemp -d -t rlx_embed.XXXXXX)"
if [ "${RLX_BENCH_KEEP:-0}" = 1 ]; then
  echo "bench files kept in $out"
else
  trap 'rm -rf "$out"' EXIT
fi

if [ -z "$quant" ]; then
  "$build/rlx_bench_embed" --out "$out" "$@"
  python3 "$root/bench/embed_peers.py" --dir "$out" --onnx "$onnx"
else
  "$build/rlx_bench_embed" --out "$out/f32" "$@"
  "$build/rlx_bench_embed" --out "$out/quant" --quantize "$quant" "$@"
  python3 "$root/bench/embed_quant_peers.py" --f32 "$out/f32" --quant "$out/quant" --onnx "$onnx"
fi
