// Fused dequantize + matmul over ggml block formats (quant_matmul.h): the kernel body of
// quant_matmul-inl.h compiled for three targets (scalar, AVX2, AVX-512 VNNI) in namespaces of
// their own under `#pragma GCC target`, and the run-time dispatch between them.
//
// AVX-512 runs 256-bit vectors (vpdpbusd ymm, AVX512VL): on Zen 4 a 512-bit op issues as two
// 256-bit halves, so wider vectors would add shuffles and no throughput; the target gains VNNI
// (one instruction for u8 x s8 -> i32 instead of two) and 32 registers (a 4 x 4 tile).
#include "quant_matmul.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

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

void quant_matmul(QuantFormat f, const float* x, int64_t M, int64_t K, const uint8_t* w, int64_t N,
                  float* y, QuantTarget t) {
  const QuantFormatInfo& info = quant_format_info(f);
  check(M >= 0 && N >= 0 && K >= 0, "quant_matmul: negative size (M " + std::to_string(M) + ", K " +
                                        std::to_string(K) + ", N " + std::to_string(N) + ")");
  check(K % info.block_size == 0 && (info.block_size == 1 || K % 32 == 0),
        "quant_matmul: K = " + std::to_string(K) + " is not a multiple of the " +
            std::string(info.name) + " block size " + std::to_string(info.block_size));
  check(quant_target_supported(t), "quant_matmul: target " + std::string(quant_target_name(t)) +
                                       " is not supported by this CPU");
  if (M == 0 || N == 0) return;
  if (K == 0) {
    std::fill_n(y, M * N, 0.0f);
    return;
  }
  switch (t) {
    case QuantTarget::kScalar:
      quant_scalar::matmul(f, x, M, K, w, N, y);
      return;
    case QuantTarget::kAvx2:
      quant_avx2::matmul(f, x, M, K, w, N, y);
      return;
    case QuantTarget::kAvx512Vnni:
      quant_vnni::matmul(f, x, M, K, w, N, y);
      return;
  }
}

void quant_matmul(QuantFormat f, const float* x, int64_t M, int64_t K, const uint8_t* w, int64_t N,
                  float* y) {
  quant_matmul(f, x, M, K, w, N, y, default_quant_target());
}

}  // namespace rlx::cpu
