// Internal: fused dequantize + matmul over ggml block-quantized weights (rlx/ir/quant.h), the
// kernel a `quant_matmul` op calls: y[M, N] = x[M, K] (f32) . dequant(W)[N, K]^T.
//
// Algorithm (ggml's vec_dot scheme): every row of x is quantized once to int8 blocks of 32
// (Q8_0-style: d = max|x| / 127, q = round-to-nearest-even(x / d), plus the f32 sums d * sum q
// of each half-block) into thread-local buffers; y is then the integer dot products of the
// weight bytes with them (AVX512-VNNI vpdpbusd, or AVX2 vpmaddubsw + vpmaddwd) times the f32
// scales, plus offset coefficient * activation sum for the formats with a zero point or min
// (Q4_0, Q4_1, Q5_*, Q2_K..Q6_K; ggml's bsums trick). With M <= 8 (GEMV, decode) the SIMD
// targets expand every 32-weight sub-block in a register, one integer dot and one FMA per
// sub-block and activation row, with the scales, scale products and offset terms of 8
// sub-blocks computed as vectors one group ahead (on VNNI, Q4_0 / Q4_1 with M = 1 dot two
// blocks per vector and fold 8 blocks' integer sums into one vector before the FMA, Q4_0's zero
// point subtracted there as 8 x the activation blocks' integer sums; quant_matmul-inl.h;
// docs/runtime.md has the details and bench/quant_bench.cc the figures); with more rows (GEMM), and
// on the scalar target, each weight panel (a few rows of W) is unpacked once to bytes with one f32
// scale and offset coefficient per 16 elements and reused by every activation row (on VNNI by every
// row of a block of rows that stays in L2, the panel packed once per block). F32 / F16 / BF16
// weights skip the int8 step (f32 FMA dot products). Every format runs on every target; the scalar
// target computes the same sums in plain C++ and is what the SIMD targets are tested against. The
// op itself (quant_matmul_auto) takes dequant_sgemm instead from kDequantGemmRows rows on: the
// activations are then not rounded to 8 bits (MiniLM Q8_0 keeps cosine >= 0.999 against f32 only
// so), and on AVX2 oneDNN's f32 GEMM outruns the int8 tiles there.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "rlx/ir/quant.h"
#include "vec_math.h"

namespace rlx::cpu {

/// The bias and activation the quant_matmul op applies after the product (its optional bias
/// operand and "activation" attribute): y[m, n] = act(y[m, n] + bias[n]) in f32 (vec_binary's
/// add, vec_apply's activation: the ops the unfused add and activation run). The kernels below
/// apply it to each block of output columns as soon as the block is complete, while it is
/// still in cache, instead of in a pass of its own over y.
struct QuantEpilogue {
  const float* bias = nullptr;  ///< N values, or null: no bias
  std::optional<VecFn> act;     ///< the activation, or none
  bool empty() const { return bias == nullptr && !act; }
  /// Applies to rows [m0, m1) x columns [n0, n1) of y (row-major, N columns).
  void apply(float* y, int64_t N, int64_t m0, int64_t m1, int64_t n0, int64_t n1) const;
};

/// Instruction-set targets of the quantized kernels (runtime dispatch on the CPU's flags).
enum class QuantTarget : uint8_t {
  kScalar,      ///< portable C++
  kAvx2,        ///< AVX2 + FMA + F16C (vpmaddubsw)
  kAvx512Vnni,  ///< AVX-512 F/BW/VL + VNNI (vpdpbusd on 256-bit vectors, 32 registers)
};

/// "scalar", "avx2", "avx512vnni".
std::string_view quant_target_name(QuantTarget t);
/// Whether this CPU can run `t` (cpuid through __builtin_cpu_supports).
bool quant_target_supported(QuantTarget t);
/// The targets this CPU can run, scalar first.
std::vector<QuantTarget> supported_quant_targets();
/// RLX_QUANT_TARGET when set ("scalar", "avx2", "avx512vnni"), else the best supported target.
/// Throws rlx::Error when the variable names an unknown target or one this CPU lacks.
QuantTarget default_quant_target();

/// y[m * N + n] = sum_k x[m * K + k] * dequant(w row n)[k], w holding N rows of
/// quant_row_bytes(f, K) bytes (ggml's row layout). x is quantized to int8 blocks of 32 for
/// the block formats, so y differs from the f32 product of the dequantized weights by at most
/// sum_b (max|x| over block b) / 254 * sum_{k in b} |w_k| plus f32 rounding: y is the f32
/// product of the dequantized weights with round_activations_int8(x) (rlx/ir/quant.h), which
/// the AVX2 target computes literally from kExactSgemmRows rows (dequant_sgemm). Runs on the
/// runtime's thread pool (parallel over output columns). Throws rlx::Error for negative
/// sizes, K not a multiple of the format's block size, or a target this CPU lacks. `ep` is
/// applied to y last (QuantEpilogue; y = act(bias) for K = 0).
void quant_matmul(QuantFormat f, const float* x, int64_t M, int64_t K, const uint8_t* w, int64_t N,
                  float* y, QuantTarget t, const QuantEpilogue& ep = {});
/// From this many rows of x quant_matmul_exact runs dequant_sgemm; below, f32 dot products with
/// each dequantized weight row (a panel's dequantization then costs more than the products).
/// On the AVX2 target (no VNNI) quant_matmul too runs dequant_sgemm from here, on x rounded by
/// round_activations_int8: oneDNN's f32 sgemm on L2-resident dequantized panels outruns the
/// integer tiles there (bench/quant_bench.cc `gemm`, 4096 x 4096, 2-core AVX2 EPYC, 2 threads,
/// idle; int8 tiles / dequant+sgemm GFLOP/s: q8_0 71 / 54 at M = 16, 70 / 74 at 32, 61 / 145 at
/// 128; q4_0 114 / 151 and q4_K 112 / 149 at 128).
inline constexpr int64_t kExactSgemmRows = 32;

/// y = x . dequant(W)^T in f32: each thread dequantizes panels of W on target `t` (at most
/// 512 KiB of f32 each, so a weight is never expanded whole: weight = scale * q + offset per 16
/// elements, ggml's values up to f32 rounding) and multiplies them by oneDNN's sgemm.
/// No activation rounding: y is the f32 product of the dequantized weights up to summation
/// order. Same layouts, sizes, epilogue and errors as quant_matmul; runs on the runtime's
/// thread pool.
void dequant_sgemm(QuantFormat f, const float* x, int64_t M, int64_t K, const uint8_t* w, int64_t N,
                   float* y, QuantTarget t, const QuantEpilogue& ep = {});

/// y = x . dequant(W)^T without activation rounding (the quant_matmul op with act_quant "none"):
/// dequant_sgemm from kExactSgemmRows rows, else f32 dot products of x's rows with each weight
/// row dequantized on target `t`. Same layouts, sizes, epilogue and errors as quant_matmul.
void quant_matmul_exact(QuantFormat f, const float* x, int64_t M, int64_t K, const uint8_t* w,
                        int64_t N, float* y, QuantTarget t, const QuantEpilogue& ep = {});
/// The int8 kernel (quant_matmul above) on default_quant_target().
void quant_matmul(QuantFormat f, const float* x, int64_t M, int64_t K, const uint8_t* w, int64_t N,
                  float* y);

}  // namespace rlx::cpu
