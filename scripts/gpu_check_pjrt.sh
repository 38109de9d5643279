#!/usr/bin/env bash
# Runs the PJRT backend's tests against XLA's CUDA plugin on a machine with an NVIDIA GPU.
# Usage: bash scripts/gpu_check_pjrt.sh [build dir]   (default build-pjrt)
# The plugin wheel comes from RLX_CUDA_PJRT_WHEEL, else /tmp/pjrt/jax_cuda13_pjrt-*.whl, else
# PyPI (jax-cuda13-pjrt). It needs an NVIDIA driver and the CUDA 13 libraries (the nvidia-*-cu13
# wheels that `pip install "jax[cuda13]"` brings, or a system CUDA 13).
set -euo pipefail
cd "$(dirname "$0")/.."
build="${1:-build-pjrt}"

if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu_check_pjrt: no NVIDIA GPU visible (nvidia-smi -L failed)" >&2
  exit 1
fi
nvidia-smi -L

wheel="${RLX_CUDA_PJRT_WHEEL:-}"
if [[ -z "$wheel" ]]; then
  wheel="$(ls /tmp/pjrt/jax_cuda13_pjrt-*.whl 2>/dev/null | head -n 1 || true)"
fi
if [[ -n "$wheel" ]]; then
  python3 -m pip install --quiet --no-deps "$wheel"
else
  python3 -m pip install --quiet jax-cuda13-pjrt
fi
# The wheel installs jax_plugins/xla_cuda13/xla_cuda_plugin.so (a namespace package).
plugin="$(python3 -c 'import os, jax_plugins.xla_cuda13 as m; print(os.path.join(list(m.__path__)[0], "xla_cuda_plugin.so"))')"
echo "plugin: $plugin"

cmake -S . -B "$build" -G Ninja -DRLX_WERROR=ON >/dev/null
ninja -C "$build" -j2 rlx rlx_pjrt_tests
RLX_PJRT_PLUGIN="$plugin" "$build/rlx" devices
RLX_PJRT_PLUGIN="$plugin" "$build/rlx_pjrt_tests"
