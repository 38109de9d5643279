#!/usr/bin/env bash
# The README's main command: install dependencies, build, and run the main job.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
bash scripts/build.sh rlx
./build/rlx demo
