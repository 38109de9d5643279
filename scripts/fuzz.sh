#!/usr/bin/env bash
# Builds the libFuzzer targets (build-fuzz/: clang, -DRLX_FUZZ=ON, ASan + UBSan) and runs each for
# SECONDS (default 30) on a scratch copy of its seed corpus fuzz/corpus/<target>/ (so the
# committed corpus does not grow) plus fuzz/regressions/<target>/ (so every past crash input
# runs again under ASan and UBSan), with its dictionary fuzz/<target>.dict. Prints executions,
# exec/s, corpus size and findings per target; exits 1 if any target found a crash, a sanitizer
# report, a finding of the target's own checks, a timeout (-timeout, default 10 s per input) or
# an out-of-memory (-rss_limit_mb 2048). Up to RLX_FUZZ_JOBS targets (default: the number of
# cores) run at once, one core each.
#
#   bash scripts/fuzz.sh [SECONDS] [TARGET ...]   # targets: text_ir safetensors tokenizer
#                                                 # model_config gguf onnx_model (default: all)
# RLX_FUZZ_OUT=DIR keeps the scratch directory (DIR/<target>/{corpus,log,crash-*}); reusing it
# continues from the corpus a previous run grew. A finding's input is written there; once the
# parser is fixed, add it to fuzz/regressions/<target>/ (rlx_fuzz_tests replays it).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-30}
shift || true
targets=("$@")
((${#targets[@]})) || targets=(text_ir safetensors tokenizer model_config gguf onnx_model)
jobs=${RLX_FUZZ_JOBS:-$(nproc)}

start=$(date +%s)
CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DRLX_FUZZ=ON >/dev/null
# Quiet unless the build fails: then its whole log, so the error is not cut away.
ninja -C build-fuzz "${targets[@]/#/fuzz_}" >build-fuzz/ninja.log 2>&1 || {
  cat build-fuzz/ninja.log
  exit 1
}
tail -1 build-fuzz/ninja.log
echo "fuzz build: $(($(date +%s) - start)) s"

# UBSan stops at the first report (-fno-sanitize-recover); print where it happened.
export UBSAN_OPTIONS="print_stacktrace=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
out=${RLX_FUZZ_OUT:-$(mktemp -d /tmp/rlx-fuzz.XXXXXX)}
run_target() {
  local t=$1 dir="$out/$1"
  mkdir -p "$dir/corpus"
  cp -n fuzz/corpus/"$t"/* "$dir/corpus/"
  # Every input that ever found a bug runs first, under the sanitizers (libFuzzer reads the
  # directories after the first and writes new inputs only to the first).
  local regressions=()
  [ -d "fuzz/regressions/$t" ] && regressions=("fuzz/regressions/$t")
  local rc=0
  "build-fuzz/fuzz/fuzz_$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -dict="fuzz/$t.dict" -artifact_prefix="$dir/" -print_final_stats=1 "$dir/corpus" \
    "${regressions[@]}" >"$dir/log" 2>&1 || rc=$?
  echo "$rc" >"$dir/rc"
}
running=0
for t in "${targets[@]}"; do
  [ -x "build-fuzz/fuzz/fuzz_$t" ] || { echo "unknown fuzz target '$t'"; exit 2; }
  run_target "$t" &
  running=$((running + 1))
  if ((running >= jobs)); then
    wait -n
    running=$((running - 1))
  fi
done
wait

failed=0
printf '%-14s %12s %9s %8s %9s\n' target executions exec/s corpus findings
for t in "${targets[@]}"; do
  dir="$out/$t"
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$dir/log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$dir/log" | tail -1)
  corpus=$(find "$dir/corpus" -type f | wc -l)
  findings=$(find "$dir" -maxdepth 1 -type f \( -name 'crash-*' -o -name 'leak-*' -o \
    -name 'timeout-*' -o -name 'oom-*' \) | wc -l)
  rc=$(cat "$dir/rc")
  # A nonzero exit without an artifact (e.g. libFuzzer failing to start) is a failure too.
  if ((findings == 0 && rc != 0)); then findings="rc=$rc"; fi
  printf '%-14s %12s %9s %8s %9s\n' "$t" "${execs:-?}" "${rate:-?}" "$corpus" "$findings"
  if [ "$findings" != 0 ]; then
    failed=1
    echo "  $t: see $dir/log; the input is under $dir/"
    grep -m1 -E '==rlx fuzz finding==|ERROR: (AddressSanitizer|libFuzzer|LeakSanitizer)|runtime error:' \
      "$dir/log" | sed 's/^/  /' || true
  fi
done
if [ -z "${RLX_FUZZ_OUT:-}" ] && ((failed == 0)); then
  rm -rf "$out"  # nothing to look at: no finding, and the grown corpus was not asked for
  echo "fuzz step: $(($(date +%s) - start)) s"
else
  echo "fuzz step: $(($(date +%s) - start)) s (scratch: $out)"
fi
exit "$failed"
