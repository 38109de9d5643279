#!/usr/bin/env bash
# The README's test command: install dependencies, build, run every test suite with CTest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
bash scripts/build.sh
ctest --test-dir build --output-on-failure -j"$(nproc)"
