#!/usr/bin/env bash
# MiniLM (all-MiniLM-L6-v2) sentence embeddings (README "Benchmarks"), batch 1 and 32 x seq 128,
# every row 128 real tokens. Two modes:
# - default: rlx vs ONNX Runtime vs JAX, model only (token ids -> embeddings) and end to end
#   (texts -> embeddings), peers in bench/embed_peers.py;
# - RLX_BENCH_QUANT=FORMAT (e.g. q8_0): block-quantized Linear weights (rlx_bench_embed
#   --quantize) vs rlx f32 vs ORT-fused f32 vs ORT's dynamic int8, model only, with each
#   quantized model's min cosine to its f32 twin (bench/embed_quant_peers.py).
# Builds rlx_bench_embed and exports the ONNX models once into ~/.cache/rlx/minilm/ if missing
# (as exported, ORT-fused and ORT int8; needs onnx and onnxruntime that one time, and uses
# torch.onnx when torch and transformers are installed).
# - RLX_BENCH_PRECISION=POLICY (e.g. auto-mixed-bf16): rlx alone, always-f32 and POLICY
#   (rlx_bench_embed --precision) interleaved over RLX_BENCH_ROUNDS rounds (default 3), then the
#   medians over the rounds of each shape's model-only and end-to-end times, the speed-up
#   f32 / POLICY and POLICY's smallest cosine to the f32 embeddings of the same tokens.
# - RLX_BENCH_ROUNDS=N (N > 1) in the default mode: N rounds of rlx then its peers, then each
#   implementation's median over the rounds and the ratios of those medians (the peers' 2-thread
#   batch-1 figures scatter ~20 % between single runs on small VMs).
# - RLX_BENCH_LOAD=1: the default mode three times, idle with 1 thread, idle with
#   RLX_NUM_THREADS (default 2) threads and with those threads while one busy process (a shell
#   loop, not pinned, bounded by `timeout`, killed on exit) competes for the cores.
# Usage: bash bench/embed_bench.sh [build dir, default ./build] [rlx_bench_embed options, e.g.
# --batches 1 --budget 5]. RLX_NUM_THREADS sets the thread count of rlx and of every peer
# (default: physical cores); RLX_BENCH_CPU_TIME=1 with RLX_NUM_THREADS=1 times rlx and the peers
# in process CPU time (rlx_bench_embed). About 3-4 minutes on 2 cores (three times that with
# RLX_BENCH_LOAD).
# Like `import rlx`, the script sets GOMP_SPINCOUNT=300 (libgomp's idle threads spin a few
# microseconds, then block) unless OMP_WAIT_POLICY or GOMP_SPINCOUNT is set; rlx's C++ programs
# read them when they start (docs/runtime.md "Threads").
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build}"
shift || true
quant="${RLX_BENCH_QUANT:-}"
precision="${RLX_BENCH_PRECISION:-}"

if [ ! -f "$build/build.ninja" ]; then
  cmake -S "$root" -B "$build" -G Ninja
fi
ninja -C "$build" rlx_bench_embed

onnx="${RLX_CACHE_DIR:-$HOME/.cache/rlx}/minilm/all-MiniLM-L6-v2.onnx"
# (RLX_BENCH_PRECISION times rlx alone: no ONNX files.)
if [ -z "$precision" ] && { [ ! -f "$onnx" ] || [ ! -f "${onnx%.onnx}.ort-fused.onnx" ] ||
  { [ -n "$quant" ] && [ ! -f "${onnx%.onnx}.ort-int8.onnx" ]; }; }; then
  python3 "$root/bench/export_minilm_onnx.py" --out "$onnx" ||
    echo "ONNX export failed (pip install onnx onnxruntime): the ORT columns will be empty"
fi

# Texts, token ids, outputs and timings of rlx, read by the peer script; removed on exit unless
# RLX_BENCH_KEEP=1.
out="$(mktemp -d -t rlx_embed.XXXXXX)"
# The busy process of RLX_BENCH_LOAD, stopped by stop_load or on exit.
busy_pid=""
stop_load() {
  if [ -n "$busy_pid" ]; then
    kill "$busy_pid" 2>/dev/null || true
    wait "$busy_pid" 2>/dev/null || true
    busy_pid=""
  fi
}
trap 'stop_load; if [ "${RLX_BENCH_KEEP:-0}" != 1 ]; then rm -rf "$out"; fi' EXIT
if [ "${RLX_BENCH_KEEP:-0}" = 1 ]; then
  echo "bench files kept in $out"
fi

if [ -z "${OMP_WAIT_POLICY:-}" ] && [ -z "${GOMP_SPINCOUNT:-}" ]; then
  export GOMP_SPINCOUNT=300
fi
echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs; flags:" \
  "$(grep -m1 -o -w -E 'avx2|avx512f|avx512_vnni|avx512_bf16|amx_bf16|avx512_fp16' /proc/cpuinfo |
    sort -u | tr '\n' ' ')"
echo "libgomp: OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-(unset)} GOMP_SPINCOUNT=${GOMP_SPINCOUNT:-(unset)}"

# One pass of the default mode into $out/$1 (rlx, then the peers on the same inputs). A failed
# peer script (a peer missing, outputs that disagree) fails the run at the end, after the
# remaining passes.
peers_failed=0
embed_pass() {
  "$build/rlx_bench_embed" --out "$out/$1" "${@:2}"
  python3 "$root/bench/embed_peers.py" --dir "$out/$1" --onnx "$onnx" \
    --json "$out/$1/peers.json" || peers_failed=1
}

if [ -n "$precision" ]; then
  rounds="${RLX_BENCH_ROUNDS:-3}"
  for ((r = 1; r <= rounds; ++r)); do
    for p in always-f32 "$precision"; do
      echo; echo "=== round $r, $p, $(uptime | sed 's/.*load/load/')"
      "$build/rlx_bench_embed" --out "$out/$p.$r" --precision "$p" "$@"
    done
  done
  python3 - "$out" "$precision" "$rounds" <<'PY'
import json, os, statistics, sys
out, policy, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
def meta(p, r, b):
    with open(os.path.join(out, f"{p}.{r}", b, "meta.json")) as f:
        return json.load(f)
shapes = sorted(os.listdir(os.path.join(out, f"{policy}.1")), key=lambda b: int(b[1:]))
print(f"\nmedians over {rounds} interleaved rounds ({meta(policy, 1, shapes[0])['clock']} time, "
      f"{meta(policy, 1, shapes[0])['threads']} threads), ms:")
print(f"{'batch':>6} {'f32 model':>10} {policy + ' model':>22} {'speed-up':>9} "
      f"{'f32 e2e':>9} {policy + ' e2e':>20} {'speed-up':>9} {'min cosine':>11}")
for b in shapes:
    med = lambda p, k: statistics.median(meta(p, r, b)[k]["median_ms"] for r in range(1, rounds + 1))
    cos = min(meta(policy, r, b)["min_cosine_vs_f32"] for r in range(1, rounds + 1))
    fm, pm = med("always-f32", "rlx_model"), med(policy, "rlx_model")
    fe, pe = med("always-f32", "rlx_e2e"), med(policy, "rlx_e2e")
    print(f"{b[1:]:>6} {fm:10.2f} {pm:22.2f} {fm / pm:9.2f} {fe:9.2f} {pe:20.2f} {fe / pe:9.2f} "
          f"{cos:11.6f}")
PY
elif [ -z "$quant" ] && [ "${RLX_BENCH_LOAD:-0}" = 1 ]; then
  threads="${RLX_NUM_THREADS:-2}"
  echo; echo "=== idle, 1 thread"
  RLX_NUM_THREADS=1 embed_pass idle1 "$@"
  echo; echo "=== idle, $threads threads"
  RLX_NUM_THREADS="$threads" embed_pass idle "$@"
  echo; echo "=== loaded: one busy process (not pinned) competes for the cores, $threads threads"
  timeout 1800 sh -c 'while :; do :; done' &
  busy_pid=$!
  RLX_NUM_THREADS="$threads" embed_pass loaded "$@"
  stop_load
elif [ -z "$quant" ] && [ "${RLX_BENCH_ROUNDS:-1}" -gt 1 ]; then
  rounds="$RLX_BENCH_ROUNDS"
  for ((r = 1; r <= rounds; ++r)); do
    echo; echo "=== round $r of $rounds, $(uptime | sed 's/.*load/load/')"
    embed_pass "r$r" "$@"
  done
  python3 - "$out" "$rounds" <<'PY'
import json, os, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
runs = [json.load(open(os.path.join(out, f"r{r}", "peers.json"))) for r in range(1, rounds + 1)]
names = [("rlx", "rlx"), ("ort", "ORT"), ("ortf", "ORT-fused"), ("jax", "JAX")]
print(f"\nmedians over {rounds} rounds (each: rlx, then ORT, ORT-fused, JAX), ms; rlx/X < 1: rlx "
      "is faster")
print(f"{'batch':>5} {'mode':>10} " + " ".join(f"{label:>10}" for _, label in names) + " " +
      " ".join(f"{'rlx/' + label:>13}" for _, label in names[1:]))
for b in runs[0]:
    for mode in runs[0][b]:
        med = {k: statistics.median(run[b][mode][k] for run in runs)
               for k, _ in names if k in runs[0][b][mode]}
        print(f"{b:>5} {mode:>10} " +
              " ".join(f"{med[k]:>10.2f}" if k in med else f"{'-':>10}" for k, _ in names) + " " +
              " ".join(f"{med['rlx'] / med[k]:>13.2f}" if k in med else f"{'-':>13}"
                       for k, _ in names[1:]))
PY
elif [ -z "$quant" ]; then
  embed_pass . "$@"
else
  "$build/rlx_bench_embed" --out "$out/f32" "$@"
  "$build/rlx_bench_embed" --out "$out/quant" --quantize "$quant" "$@"
  python3 "$root/bench/embed_quant_peers.py" --f32 "$out/f32" --quant "$out/quant" --onnx "$onnx"
fi
exit "$peers_failed"
