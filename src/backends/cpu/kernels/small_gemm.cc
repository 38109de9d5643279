// The small f32 GEMM (small_gemm.h): blocks of up to 4 rows x 16 columns of C held in eight
// AVX registers, accumulating one rank-1 update per p (a broadcast element of A times a row
// of B); the last columns of a row use masked loads and stores.
#include "small_gemm.h"

#include <immintrin.h>

#include <algorithm>

namespace rlx::cpu {

bool small_sgemm_supported() {
  static const bool ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return ok;
}

#pragma GCC push_options
#pragma GCC target("avx2,fma")
namespace {

// Lane mask of the first `n` (0..8) of 8 floats.
__m256i lane_mask(int64_t n) {
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), lanes);
}

// C rows [0, MR) x columns [0, nr) (nr <= 16) of the block at `a`, `b`, `c`; MR <= 4. Each
// row's two accumulators are named registers (an array of them the compiler keeps on the
// stack); rows past MR are not computed.
template <int MR, bool kFull>
void block(int64_t k, const float* a, int64_t a_row, int64_t a_col, const float* b, int64_t b_row,
           float* c, int64_t c_row, int64_t nr) {
  __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00,
         c30 = c00, c31 = c00;
  __m256i m0 = lane_mask(std::min<int64_t>(nr, 8)), m1 = lane_mask(std::max<int64_t>(nr - 8, 0));
  const float* a0 = a;
  const float* a1 = a + a_row * (MR > 1);
  const float* a2 = a + 2 * a_row * (MR > 2);
  const float* a3 = a + 3 * a_row * (MR > 3);
  for (int64_t p = 0; p < k; ++p) {
    const float* bp = b + p * b_row;
    __m256 b0 = kFull ? _mm256_loadu_ps(bp) : _mm256_maskload_ps(bp, m0);
    __m256 b1 = kFull ? _mm256_loadu_ps(bp + 8) : _mm256_maskload_ps(bp + 8, m1);
    int64_t o = p * a_col;
    // One row's rank-1 update: its element of A broadcast times the B row, into its registers.
    auto update = [&](const float* ar, __m256& lo, __m256& hi) {
      __m256 x = _mm256_broadcast_ss(ar + o);
      lo = _mm256_fmadd_ps(x, b0, lo);
      hi = _mm256_fmadd_ps(x, b1, hi);
    };
    update(a0, c00, c01);
    if constexpr (MR > 1) update(a1, c10, c11);
    if constexpr (MR > 2) update(a2, c20, c21);
    if constexpr (MR > 3) update(a3, c30, c31);
  }
  auto store = [&](float* row, __m256 lo, __m256 hi) {
    if (kFull) {
      _mm256_storeu_ps(row, lo);
      _mm256_storeu_ps(row + 8, hi);
    } else {
      _mm256_maskstore_ps(row, m0, lo);
      _mm256_maskstore_ps(row + 8, m1, hi);
    }
  };
  store(c, c00, c01);
  if constexpr (MR > 1) store(c + c_row, c10, c11);
  if constexpr (MR > 2) store(c + 2 * c_row, c20, c21);
  if constexpr (MR > 3) store(c + 3 * c_row, c30, c31);
}

// Rows [0, MR) of the column panel at `b`, `c` (nr <= 16 columns).
template <int MR>
void rows(int64_t k, const float* a, int64_t a_row, int64_t a_col, const float* b, int64_t b_row,
          float* c, int64_t c_row, int64_t nr) {
  if (nr == 16)
    block<MR, true>(k, a, a_row, a_col, b, b_row, c, c_row, nr);
  else
    block<MR, false>(k, a, a_row, a_col, b, b_row, c, c_row, nr);
}

}  // namespace

void small_sgemm(int64_t m, int64_t n, int64_t k, const float* a, int64_t a_row, int64_t a_col,
                 const float* b, int64_t b_row, float* c, int64_t c_row) {
  // Column panels outermost: a k x 16 panel of B stays in L1 while every row block uses it.
  for (int64_t j = 0; j < n; j += 16) {
    int64_t nr = std::min<int64_t>(16, n - j);
    int64_t i = 0;
    for (; i + 4 <= m; i += 4)
      rows<4>(k, a + i * a_row, a_row, a_col, b + j, b_row, c + i * c_row + j, c_row, nr);
    const float* ai = a + i * a_row;
    float* ci = c + i * c_row + j;
    switch (m - i) {
      case 3:
        rows<3>(k, ai, a_row, a_col, b + j, b_row, ci, c_row, nr);
        break;
      case 2:
        rows<2>(k, ai, a_row, a_col, b + j, b_row, ci, c_row, nr);
        break;
      case 1:
        rows<1>(k, ai, a_row, a_col, b + j, b_row, ci, c_row, nr);
        break;
      default:
        break;
    }
  }
}
#pragma GCC pop_options

}  // namespace rlx::cpu
