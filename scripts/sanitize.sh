#!/usr/bin/env bash
# Builds and runs the C++ test suites under a sanitizer (CMakePresets.json):
#   scripts/sanitize.sh asan [SUITE...]  ASan + UBSan (LeakSanitizer on): the given CTest suites
#                                        (default: the memory-handling ones listed below)
#   scripts/sanitize.sh tsan             TSan: the concurrency tests (clones run from many
#                                        threads, the Session cache under concurrent compiles,
#                                        the stress test, rlx's thread pool)
# CI (scripts/test.sh) runs `asan` on a subset that fits its time budget, and `tsan`.
# Any report aborts its test (-fno-sanitize-recover, halt_on_error), so a finding fails the run.
# TSan cannot see the barriers of libgomp (OpenMP, uninstrumented, which oneDNN's GEMMs use), so
# the TSan run keeps intra-op parallelism at one thread: every race it reports is between the
# threads the tests start themselves, which is what these tests are about. rlx's own pool is
# instrumented (std::thread and atomics): its tests (PoolRegions) set their thread counts.
set -euo pipefail
cd "$(dirname "$0")/.."
kind=${1:?usage: scripts/sanitize.sh asan [SUITE...] | tsan}
shift
dir=build-$kind
cmake --preset "$kind" >/dev/null
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# PJRT plugin and oneDNN allocate at load time with nothing to free them at exit: LSan's
# suppressions name them (scripts/lsan.supp says why for each).
export LSAN_OPTIONS=suppressions=$PWD/scripts/lsan.supp:print_suppressions=0
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1
export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1
case "$kind" in
  asan)
    # The suites that exercise memory-handling code: IR, passes, the runtime, the CPU kernels,
    # the file readers and models, the fuzz inputs' replay. Left out for time (golden, autodiff,
    # pjrt, ops and train ran clean under ASan+UBSan when this job was set up; tool did not run).
    suites=("$@")
    ((${#suites[@]})) || suites=(rlx_ir_tests rlx_opt_tests rlx_runtime_tests rlx_cpu_tests
      rlx_io_tests rlx_models_tests rlx_fuzz_tests)
    start=$(date +%s)
    ninja -C "$dir" "${suites[@]}" >"$dir/ninja.log" 2>&1 || {
      cat "$dir/ninja.log"
      exit 1
    }
    echo "asan build (${suites[*]}): $(($(date +%s) - start)) s"
    # Each test carries its suite's label (CMakeLists.txt: rlx_register_tests). Left out: the
    # numerical-parity runs of whole real models (MiniLM quantized five ways and under the bf16
    # policy, SmolLM2's 30-layer KV-cache checks, every code point through the tokenizer) and
    # the dense numeric sweeps (every quantized format's exact paths against dequantize-then-
    # matmul, the vector-math ULP sweep), 20-90 s each under ASan; their code paths run here on
    # the small models, shapes and inputs of the same suites, and the tokenizer is fuzzed.
    labels=$(IFS='|'; echo "^(${suites[*]})\$")
    slow='^(MiniLM\.(Q[0-9]_[0-9K]LinearWeightsStayClose|Q8_0WithInt8ActivationsStaysClose|Bf16PolicyStaysClose)|SmolLm2Cache.*|TokenizerParity\.EveryCodePointMatchesHuggingFace|QuantMatmul\.ExactPathsMatchDequantizeThenMatmulInF32|VecMath\.MaxUlpOverDenseSweeps)$'
    ctest --test-dir "$dir" --output-on-failure -j"$(nproc)" --timeout 900 -L "$labels" -E "$slow"
    echo "asan step: $(($(date +%s) - start)) s"
    ;;
  tsan)
    ninja -C "$dir" rlx_runtime_tests
    RLX_NUM_THREADS=1 OMP_NUM_THREADS=1 ctest --test-dir "$dir" --output-on-failure \
      -j"$(nproc)" --timeout 900 -R '^(ExecutableClones|Stress|SessionCache|PoolRegions)\.'
    ;;
  *)
    echo "scripts/sanitize.sh: unknown kind '$kind' (asan or tsan)" >&2
    exit 2
    ;;
esac
