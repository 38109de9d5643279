// Fused dequantize + matmul over ggml block formats (quant_matmul.h): the kernel body of
// quant_matmul-inl.h compiled for three targets (scalar, AVX2, AVX-512 VNNI) in namespaces of
// their own under `#pragma GCC target`, and the run-time dispatch between them.
//
// AVX-512 runs 256-bit vectors (vpdpbusd ymm, AVX512VL): on Zen 4 a 512-bit op issues as two
// 256-bit halves, so wider vectors would add shuffles and no throughput; the target gains VNNI
// (one instruction for u8 x s8 -> i32 instead of two) and 32 registers (a 4 x 4 tile).
#include "quant_matmul.h"

#include <dnnl.h>
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "rlx/ir/dtype.h"
#include "rlx/ir/error.h"
#include "rlx/runtime/threading.h"

namespace rlx::cpu {

namespace quant_scalar {
#define RLX_QM_LEVEL 0
#include "quant_matmul-inl.h"  // NOLINT(bugprone-suspicious-include)
#undef RLX_QM_LEVEL
}  // namespace quant_scalar

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
namespace quant_avx2 {
#define RLX_QM_LEVEL 1
#include "quant_matmul-inl.h"  // NOLINT(bugprone-suspicious-include)
#undef RLX_QM_LEVEL
}  // namespace quant_avx2
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")
namespace quant_vnni {
#define RLX_QM_LEVEL 2
#include "quant_matmul-inl.h"  // NOLINT(bugprone-suspicious-include)
#undef RLX_QM_LEVEL
}  // namespace quant_vnni
#pragma GCC pop_options

std::string_view quant_target_name(QuantTarget t) {
  switch (t) {
    case QuantTarget::kScalar:
      return "scalar";
    case QuantTarget::kAvx2:
      return "avx2";
    case QuantTarget::kAvx512Vnni:
      return "avx512vnni";
  }
  return "?";
}

bool quant_target_supported(QuantTarget t) {
  switch (t) {
    case QuantTarget::kScalar:
      return true;
    case QuantTarget::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
             __builtin_cpu_supports("f16c");
    case QuantTarget::kAvx512Vnni:
      return quant_target_supported(QuantTarget::kAvx2) && __builtin_cpu_supports("avx512f") &&
             __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
             __builtin_cpu_supports("avx512vnni");
  }
  return false;
}

std::vector<QuantTarget> supported_quant_targets() {
  std::vector<QuantTarget> out;
  for (QuantTarget t : {QuantTarget::kScalar, QuantTarget::kAvx2, QuantTarget::kAvx512Vnni})
    if (quant_target_supported(t)) out.push_back(t);
  return out;
}

QuantTarget default_quant_target() {
  const char* env = std::getenv("RLX_QUANT_TARGET");
  if (env == nullptr || *env == '\0') return supported_quant_targets().back();
  for (QuantTarget t : {QuantTarget::kScalar, QuantTarget::kAvx2, QuantTarget::kAvx512Vnni}) {
    if (quant_target_name(t) == env) {
      check(quant_target_supported(t),
            "RLX_QUANT_TARGET=" + std::string(env) + ": this CPU does not support that target");
      return t;
    }
  }
  throw Error("RLX_QUANT_TARGET='" + std::string(env) +
              "' is not a target; expected scalar, avx2 or avx512vnni");
}

void QuantEpilogue::apply(float* y, int64_t N, int64_t m0, int64_t m1, int64_t n0,
                          int64_t n1) const {
  if (empty() || n1 <= n0) return;
  for (int64_t m = m0; m < m1; ++m) {
    float* row = y + m * N + n0;
    if (bias != nullptr) vec_binary(VecBinary::kAdd, row, bias + n0, row, n1 - n0);
    if (act) vec_apply(*act, row, row, n1 - n0);
  }
}

namespace {

// Throws unless this CPU runs target t. (The checks here build their messages only on failure:
// a decode step's GEMVs take tens of microseconds, of which a message's allocations and
// formatting per call would be a visible share.)
void check_target(const char* what, QuantTarget t) {
  if (!quant_target_supported(t))
    throw Error(std::string(what) + ": target " + std::string(quant_target_name(t)) +
                " is not supported by this CPU");
}

// The sizes quant_matmul and dequant_sgemm accept. False when there is nothing to multiply (y is
// then filled: act(bias) for K == 0).
bool check_sizes(const char* what, QuantFormat f, int64_t M, int64_t K, int64_t N, float* y,
                 const QuantEpilogue& ep) {
  const QuantFormatInfo& info = quant_format_info(f);
  if (!(M >= 0 && N >= 0 && K >= 0))
    throw Error(std::string(what) + ": negative size (M " + std::to_string(M) + ", K " +
                std::to_string(K) + ", N " + std::to_string(N) + ")");
  if (!(K % info.block_size == 0 && (info.block_size == 1 || K % 32 == 0)))
    throw Error(std::string(what) + ": K = " + std::to_string(K) + " is not a multiple of the " +
                std::string(info.name) + " block size " + std::to_string(info.block_size));
  if (M == 0 || N == 0) return false;
  if (K == 0) {
    std::fill_n(y, M * N, 0.0f);
    ep.apply(y, N, 0, M, 0, N);
    return false;
  }
  return true;
}

// f32 bytes of one dequantized panel of W at most (about half a 2 MiB / 1 MiB L2).
constexpr int64_t kPanelBytes = int64_t{512} << 10;

}  // namespace

void dequant_sgemm(QuantFormat f, const float* x, int64_t M, int64_t K, const uint8_t* w, int64_t N,
                   float* y, QuantTarget t, const QuantEpilogue& ep) {
  check_target("dequant_sgemm", t);
  if (!check_sizes("dequant_sgemm", f, M, K, N, y, ep)) return;
  const int64_t rb = quant_row_bytes(f, K);
  // Panels of W small enough to stay in L2 between their dequantization and the sgemm that
  // reads them, and at least two per thread so that a late worker delays little.
  const int64_t threads = num_threads();
  const int64_t rows = std::clamp<int64_t>(
      std::min(kPanelBytes / (K * 4), (N + 2 * threads - 1) / (2 * threads)), 1, N);
  parallel_for(0, (N + rows - 1) / rows, 1, [&](int64_t p0, int64_t p1) {
    thread_local std::vector<float> buffer;
    buffer.resize(static_cast<size_t>(rows * K));
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t n0 = p * rows, n = std::min(rows, N - n0);
      switch (t) {
        case QuantTarget::kScalar:
          quant_scalar::dequantize(f, w + n0 * rb, n, K, buffer.data());
          break;
        case QuantTarget::kAvx2:
          quant_avx2::dequantize(f, w + n0 * rb, n, K, buffer.data());
          break;
        case QuantTarget::kAvx512Vnni:
          quant_vnni::dequantize(f, w + n0 * rb, n, K, buffer.data());
          break;
      }
      // One thread's sgemm (oneDNN runs sequentially inside a parallel region). Arguments are
      // valid by construction (sizes >= 1, leading dims >= row widths), the only failure
      // dnnl_sgemm reports, so its status is not checked.
      dnnl_sgemm('N', 'T', M, n, K, 1.0f, x, K, buffer.data(), K, 0.0f, y + n0, N);
      ep.apply(y, N, 0, M, n0, n0 + n);
    }
  });
}

void quant_matmul(QuantFormat f, const float* x, int64_t M, int64_t K, const uint8_t* w, int64_t N,
                  float* y, QuantTarget t, const QuantEpilogue& ep) {
  check_target("quant_matmul", t);
  if (!check_sizes("quant_matmul", f, M, K, N, y, ep)) return;
  if (t == QuantTarget::kAvx2 && M >= kExactSgemmRows && quant_format_info(f).block_size >= 32) {
    // Without VNNI the integer tiles run at about half the rate of oneDNN's f32 sgemm from 32
    // rows on (see kExactSgemmRows): round x as the int8 kernel would and multiply exactly.
    thread_local std::vector<float> rounded;
    rounded.resize(static_cast<size_t>(M * K));
    float* xr = rounded.data();  // named in the workers' lambda: this thread's buffer, not theirs
    parallel_for(0, M, 8, [&](int64_t b, int64_t e) {
      for (int64_t m = b; m < e; ++m) round_activations_int8(x + m * K, xr + m * K, K);
    });
    return dequant_sgemm(f, xr, M, K, w, N, y, t, ep);
  }
  switch (t) {
    case QuantTarget::kScalar:
      quant_scalar::matmul(f, x, M, K, w, N, y, ep);
      return;
    case QuantTarget::kAvx2:
      quant_avx2::matmul(f, x, M, K, w, N, y, ep);
      return;
    case QuantTarget::kAvx512Vnni:
      quant_vnni::matmul(f, x, M, K, w, N, y, ep);
      return;
  }
}

void quant_matmul_exact(QuantFormat f, const float* x, int64_t M, int64_t K, const uint8_t* w,
                        int64_t N, float* y, QuantTarget t, const QuantEpilogue& ep) {
  if (M >= kExactSgemmRows) return dequant_sgemm(f, x, M, K, w, N, y, t, ep);
  check_target("quant_matmul_exact", t);
  if (!check_sizes("quant_matmul_exact", f, M, K, N, y, ep)) return;
  switch (t) {
    case QuantTarget::kScalar:
      return quant_scalar::exact_matmul(f, x, M, K, w, N, y, ep);
    case QuantTarget::kAvx2:
      return quant_avx2::exact_matmul(f, x, M, K, w, N, y, ep);
    case QuantTarget::kAvx512Vnni:
      return quant_vnni::exact_matmul(f, x, M, K, w, N, y, ep);
  }
}

void quant_matmul(QuantFormat f, const float* x, int64_t M, int64_t K, const uint8_t* w, int64_t N,
                  float* y) {
  quant_matmul(f, x, M, K, w, N, y, default_quant_target());
}

}  // namespace rlx::cpu
