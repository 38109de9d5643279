// Internal: the CPU backend's direct f32 GEMM for small problems (an RNN step, a batch-1
// layer), where oneDNN's per-call overhead (argument maps, primitive dispatch) costs more than
// the arithmetic. AVX2 + FMA register-blocked micro-kernel; single-threaded; allocates nothing.
#pragma once

#include <cstdint>

namespace rlx::cpu {

/// Whether small_sgemm runs on this CPU (AVX2 and FMA; else callers use oneDNN).
bool small_sgemm_supported();

/// The largest M * N * K (per call of small_sgemm, summed over a batch by the caller) for which
/// the gemm kernels take small_sgemm instead of oneDNN: below it oneDNN's fixed cost per call
/// (~1 us) dominates; above it oneDNN's blocking and threads win (bench/cpu_kernels_bench.cc
/// "gemm" measures both).
inline constexpr int64_t kSmallGemmMaxWork = int64_t{1} << 17;

/// C[i, j] = sum_p A[i * a_row + p * a_col] * B[p * b_row + j] for i < m, j < n, p < k, with C
/// row-major (row stride c_row). Sums run over p in order with f32 fused multiply-adds, so an
/// element errs by at most ~K * 2^-24 * sum_p |a_p b_p|. Requires small_sgemm_supported(),
/// m, n, k >= 1; C must not overlap A or B.
void small_sgemm(int64_t m, int64_t n, int64_t k, const float* a, int64_t a_row, int64_t a_col,
                 const float* b, int64_t b_row, float* c, int64_t c_row);

}  // namespace rlx::cpu
