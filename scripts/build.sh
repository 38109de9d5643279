#!/usr/bin/env bash
# Configures and builds rlx into build/ (Ninja, RelWithDebInfo, warnings as errors), the Python
# extension included (build/python/rlx is the importable package). Arguments are Ninja targets
# (default: everything, tests included).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DRLX_WERROR=ON -DRLX_BUILD_PYTHON=ON >/dev/null
ninja -C build "$@"
