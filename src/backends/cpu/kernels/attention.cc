// Native CPU kernels of attention and packed_qkv_attention: FlashAttention-style (Dao et al.,
// 2022) blocked attention with an online softmax, for f32, f16, bf16 (computed in f32) and f64,
// every mask kind and GQA. Highway SIMD code compiled for every x86 target and picked at run time
// (this file is re-included once per target by foreach_target.h).
//
// Every path reads q, k, v rows and writes output rows through a RowLayout (row s of head h of
// batch b at off + b sb + h sh + s ss): attention's contiguous [B,H,S,D], or
// packed_qkv_attention's column blocks of the packed projection [B,S,(Hq+2Hkv)D] (a head's
// strided rows are copied contiguous before the products: read in place they contend for a few
// L1 sets) and its token-major output [B,S,Hq D], written in place: no transposes around the op.
// The two ops run the same arithmetic, so their results are bitwise equal.
//
// Work is split into (batch, query head, block of kBlockQ query rows) items. An item keeps the
// transposed query block Qt [D, Bq] and output accumulator Ot [Dv, Bq] in per-thread scratch and
// walks the key blocks of kBlockK keys that its mask leaves visible: scores St = K Qt [Bk, Bq],
// scale and mask, online softmax update (running max m and sum l per query, rescaling Ot), then
// Ot += V^T St. Vectors run along the query rows, so the per-query max and sum are lane-wise and
// K and V are read in place, row by row, with no packing. Scratch is O(Bq (D + Bk + Dv) + Bk
// (D + Dv)); the [Sq, Sk] score matrix never exists.
//
// causal_lengths (a KV cache: row b has lengths[b] valid keys, its queries aligned to the last
// of them) is a positional mask with a per-row offset: an item walks only the key blocks up to
// its row's length, so a decode step costs O(length), not O(cache size).
//
// f32 with at most kDecodeMaxQueries query rows (a KV-cache decode step) and a positional mask or
// none takes the decode path: per (batch, head) item and query row, the visible keys' scores are
// dot products along the head dim (vectors along D: the blocked path's vectors run along query
// rows and would be 15/16 padding for one row), one exact softmax over the row, and O = P V
// accumulated along Dv. It reads K and V once per row, only up to the row's last visible key.
//
// f32, f16 and bf16 without a positional mask and with at most kDirectMaxKeys keys (encoders such
// as BERT) take a direct path instead (f16 / bf16 widened to f32, the output rounded once): per
// (batch, head) K is packed transposed, Kt [D, Sk] (f32 K straight from its rows, strided or not,
// in 16 x 16 register blocks on AVX-512), and V to whole vectors where needed (strided V rows are
// copied: read in place they would contend for a few L1 sets), once for all its query blocks, and
// the next (batch, head)'s rows are prefetched into L2 while this one computes (a packed
// projection's rows are a token apart, too far apart for the hardware prefetcher: loaded on
// demand they cost a fifth of the op at B = 32); per item, S = scale Q K^T [Bq, Sk] and O = P V / l
// run on register tiles (8 rows x 3 vectors on AVX-512; all scalar lanes are f32 FMA sums over the
// head dim or the keys), with one exact two-pass softmax over each whole score row in between.
// Where the mask row is the same for all query rows (none, or an encoder's [B, 1, 1, Sk] padding
// mask), the score tiles apply it and track each row's maximum as they store, so the softmax is one
// exp pass; the trailing keys such a bool mask hides are not computed at all. The whole row fits in
// L2 (kBlockQ x kDirectMaxKeys floats), so no online rescaling is needed; items are (batch, head,
// query block), and threads claim them one (batch, head) at a time (parallel_runs), so a claim's
// items share the packed K and V.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/attention.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#ifndef RLX_CPU_KERNELS_ATTENTION_SHARED
#define RLX_CPU_KERNELS_ATTENTION_SHARED

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "../kernel.h"
#include "half.h"
#include "rlx/runtime/threading.h"

namespace rlx::cpu::attention_simd {

enum class MaskKind : uint8_t { kNone, kCausal, kSlidingWindow, kCausalLengths, kBool, kBias };

/// Query rows and keys per block. 64 x 64 keeps an item's scratch (Qt, St, Ot and the 16-bit
/// K / V blocks) within L2 for head dims up to 256.
inline constexpr int64_t kBlockQ = 64;
inline constexpr int64_t kBlockK = 64;
/// Most keys the direct f32 path takes: a block's score rows (kBlockQ x this, 256 KiB) stay in L2.
inline constexpr int64_t kDirectMaxKeys = 1024;
/// Most query rows per head the decode path takes; from there the blocked path's vectors along
/// query rows are mostly real rows.
inline constexpr int64_t kDecodeMaxQueries = 4;

/// Where the rows of one operand live: row `s` of head `h` of batch `b` starts at element
/// off + b * sb + h * sh + s * ss of its buffer. attention's [B,H,S,D] is {0, H*S*D, S*D, D};
/// packed_qkv_attention's q / k / v are column blocks of the [B,S,W] projection (ss = W, sh = D)
/// and its output is token-major [B,S,Hq*D].
struct RowLayout {
  int64_t off = 0, sb = 0, sh = 0, ss = 0;
  int64_t at(int64_t b, int64_t h, int64_t s) const { return off + b * sb + h * sh + s * ss; }
};

/// Shapes and attributes of one attention node; items are (query block, batch, head) triples.
struct AttentionTask {
  DType dtype;
  int64_t batch, heads, kv_heads, sq, sk, d, dv;
  double scale;
  MaskKind mask;
  int64_t window;  // sliding_window, clamped to sk like the reference
  int64_t
      mask_strides[4];  // element strides of the mask tensor over [B, Hq, Sq, Sk]; 0 = broadcast
  DType lengths_dtype;  // causal_lengths: the integer dtype of the lengths operand
  int64_t q_blocks;
  RowLayout lq, lk, lv, lo;                    // rows of q, k, v and the output
  int q_in = 0, k_in = 1, v_in = 2, m_in = 3;  // operand indices of q, k, v and the mask
};

/// Per-thread scratch of at least n elements of C (clones of one executable run concurrently
/// and share their kernels, so scratch is per thread, never captured by a kernel).
template <class C>
C* scratch(size_t n) {
  thread_local std::vector<C> buffer;
  if (buffer.size() < n) buffer.resize(n);
  return buffer.data();
}

/// causal_lengths: the valid key count of row `b` (operand 3), clamped to [0, sk + sq], which
/// keeps the same visible keys (a row at or past the end sees them all, one below 0 none) and
/// keeps positions exact in f32 lanes.
inline int64_t RowLength(const AttentionTask& t, const KernelIO& io, int64_t b) {
  int64_t len = 0;
  switch (t.lengths_dtype) {
    case DType::i8:
      len = reinterpret_cast<const int8_t*>(io.in[t.m_in])[b];
      break;
    case DType::u8:
      len = reinterpret_cast<const uint8_t*>(io.in[t.m_in])[b];
      break;
    case DType::i32:
      len = reinterpret_cast<const int32_t*>(io.in[t.m_in])[b];
      break;
    default:
      len = reinterpret_cast<const int64_t*>(io.in[t.m_in])[b];
      break;
  }
  return std::clamp<int64_t>(len, 0, t.sk + t.sq);
}

}  // namespace rlx::cpu::attention_simd

#endif  // RLX_CPU_KERNELS_ATTENTION_SHARED

// ---- per-target SIMD code (math-inl.h and half-inl.h are per-target too, so they follow
// foreach_target.h)
#include <hwy/contrib/math/math-inl.h>

#include "half-inl.h"

HWY_BEFORE_NAMESPACE();
namespace rlx::cpu::attention_simd {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

template <class T>
using Calc = std::conditional_t<std::is_same_v<T, double>, double, float>;

using half_simd::HWY_NAMESPACE::kF16Hardware;  // half-inl.h
using half_simd::HWY_NAMESPACE::Narrow;
using half_simd::HWY_NAMESPACE::Widen;

// Query vectors per register tile: 4 x 4 accumulators fit AVX-512's 32 registers, 4 x 2 the 16
// of narrower targets.
constexpr size_t kMaxTileVectors = HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3 ? 4 : 2;

template <class C>
constexpr C kInf = std::numeric_limits<C>::infinity();

// Rows of storage type T as Calc<T>: T's own memory for float / double, else widened into buf.
template <class T>
HWY_INLINE const Calc<T>* ReadRows(const T* src, size_t n, Calc<T>* buf) {
  if constexpr (std::is_same_v<T, Calc<T>>) {
    return src;
  } else {
    Widen(src, buf, n);
    return buf;
  }
}

// Copies the n values at src to dst: whole vectors, then the tail. Short rows (a head's 32 floats)
// copied by std::copy cost a memmove call each.
template <class C>
HWY_INLINE void CopyRow(const C* HWY_RESTRICT src, size_t n, C* HWY_RESTRICT dst) {
  const hn::ScalableTag<C> d;
  const size_t lanes = hn::Lanes(d);
  size_t i = 0;
  for (; i + lanes <= n; i += lanes) hn::StoreU(hn::LoadU(d, src + i), d, dst + i);
  for (; i < n; ++i) dst[i] = src[i];
}

// n rows of `width` values, `stride` apart, as contiguous Calc<T> rows: in place where they are
// contiguous and of the compute type, else copied (widened) into buf [n, width].
template <class T>
HWY_INLINE const Calc<T>* ReadStridedRows(const T* src, size_t n, size_t width, size_t stride,
                                          Calc<T>* buf) {
  if (stride == width) return ReadRows(src, n * width, buf);
  for (size_t r = 0; r < n; ++r) {
    if constexpr (std::is_same_v<T, Calc<T>>)
      CopyRow(src + r * stride, width, buf + r * width);
    else
      Widen(src + r * stride, buf + r * width, width);
  }
  return buf;
}

template <class C, class T>
HWY_INLINE C ToCalc(T v) {
  if constexpr (std::is_same_v<T, C>)
    return v;
  else
    return to_f32(v);
}

// What a register tile does to its sums before it stores them: times `scale`, or row r times
// row_scale[r]; then (score tiles of the direct path) -inf where keep[column] == 0 (a bool mask
// and padding keys), plus bias[column], and a running maximum per row into row_max (one vector
// per row). Pointers address the tile's first row and column (At moves them).
template <class C>
struct TileOut {
  C scale = 1;
  const C* row_scale = nullptr;
  const C* keep = nullptr;
  const C* bias = nullptr;
  C* row_max = nullptr;
  TileOut At(size_t row, size_t col, size_t lanes) const {
    TileOut o = *this;
    if (row_scale) o.row_scale += row;
    if (keep) o.keep += col;
    if (bias) o.bias += col;
    if (row_max) o.row_max += row * lanes;
    return o;
  }
};

// C[r][t-th vector] = sum_{x < kdim} A[r][x] * B[x][t-th vector] for MR rows of A (row stride
// lda) and NV vectors of B (row stride ldb), an MR x NV register tile finished by `out` and
// stored to C (row stride ldc). The blocked path's scores (A = K, B = Qt) and both direct-path
// products. The loops over the tile's rows and vectors are unrolled (GCC at -O2 would keep the
// accumulators in a stack array).
template <size_t MR, size_t NV, class D, class C>
HWY_INLINE void GemmTile(D d, const C* HWY_RESTRICT a, size_t lda, size_t kdim,
                         const C* HWY_RESTRICT b, size_t ldb, const TileOut<C>& out,
                         C* HWY_RESTRICT c, size_t ldc) {
  const size_t lanes = hn::Lanes(d);
  hn::Vec<D> acc[MR][NV];
#pragma GCC unroll 16
  for (size_t r = 0; r < MR; ++r) {
#pragma GCC unroll 16
    for (size_t t = 0; t < NV; ++t) acc[r][t] = hn::Zero(d);
  }
  for (size_t x = 0; x < kdim; ++x) {
    hn::Vec<D> bv[NV];
#pragma GCC unroll 16
    for (size_t t = 0; t < NV; ++t) bv[t] = hn::LoadU(d, b + x * ldb + t * lanes);
#pragma GCC unroll 16
    for (size_t r = 0; r < MR; ++r) {
      const auto av = hn::Set(d, a[r * lda + x]);
#pragma GCC unroll 16
      for (size_t t = 0; t < NV; ++t) acc[r][t] = hn::MulAdd(av, bv[t], acc[r][t]);
    }
  }
  const auto vs = hn::Set(d, out.scale), neg_inf = hn::Set(d, -kInf<C>);
#pragma GCC unroll 16
  for (size_t r = 0; r < MR; ++r) {
    const auto rs = out.row_scale ? hn::Set(d, out.row_scale[r]) : vs;
    auto mx = neg_inf;
    auto nan = hn::FirstN(d, 0);
#pragma GCC unroll 16
    for (size_t t = 0; t < NV; ++t) {
      auto v = hn::Mul(acc[r][t], rs);
      if (out.keep)
        v = hn::IfThenElse(hn::Ne(hn::LoadU(d, out.keep + t * lanes), hn::Zero(d)), v, neg_inf);
      if (out.bias) v = hn::Add(v, hn::LoadU(d, out.bias + t * lanes));
      if (out.row_max) {
        mx = hn::Max(mx, v);
        nan = hn::Or(nan, hn::IsNaN(v));
      }
      hn::StoreU(v, d, c + r * ldc + t * lanes);
    }
    if (out.row_max) {  // NaN in the lanes that saw one (Max may return either operand of NaN)
      C* m = out.row_max + r * lanes;
      const auto old = hn::LoadU(d, m);
      nan = hn::Or(nan, hn::IsNaN(old));
      hn::StoreU(
          hn::IfThenElse(nan, hn::Set(d, std::numeric_limits<C>::quiet_NaN()), hn::Max(old, mx)), d,
          m);
    }
  }
}

// GemmTile over the first nv vectors of B's rows, at most NVMax at a time.
template <size_t MR, size_t NVMax = kMaxTileVectors, class D, class C>
HWY_INLINE void GemmRows(D d, size_t nv, const C* a, size_t lda, size_t kdim, const C* b,
                         size_t ldb, const TileOut<C>& out, C* c, size_t ldc) {
  const size_t lanes = hn::Lanes(d);
  for (size_t v = 0; v < nv; v += NVMax) {
    const size_t off = v * lanes;
    const TileOut<C> o = out.At(0, off, lanes);
    switch (std::min(NVMax, nv - v)) {
      case 1:
        GemmTile<MR, 1>(d, a, lda, kdim, b + off, ldb, o, c + off, ldc);
        break;
      case 2:
        if constexpr (NVMax >= 2) GemmTile<MR, 2>(d, a, lda, kdim, b + off, ldb, o, c + off, ldc);
        break;
      case 3:
        if constexpr (NVMax >= 3) GemmTile<MR, 3>(d, a, lda, kdim, b + off, ldb, o, c + off, ldc);
        break;
      default:
        GemmTile<MR, NVMax>(d, a, lda, kdim, b + off, ldb, o, c + off, ldc);
        break;
    }
  }
}

// St [nk, bq] = scale * K [nk, dim] Qt [dim, bq].
template <class D, class C>
HWY_INLINE void Scores(D d, size_t nv, const C* k, size_t nk, size_t dim, const C* qt, size_t bq,
                       C scale, C* st) {
  TileOut<C> out;
  out.scale = scale;
  size_t j = 0;
  for (; j + 4 <= nk; j += 4)
    GemmRows<4>(d, nv, k + j * dim, dim, dim, qt, bq, out, st + j * bq, bq);
  for (; j < nk; ++j) GemmRows<1>(d, nv, k + j * dim, dim, dim, qt, bq, out, st + j * bq, bq);
}

// Ot[e][v-th vector] += sum_j V[j][e] * Pt[j][.] for ME value dims e and NV query vectors.
template <size_t ME, size_t NV, class D, class C>
HWY_INLINE void ValueTile(D d, const C* HWY_RESTRICT v, size_t dv, const C* HWY_RESTRICT pt,
                          size_t nk, size_t bq, C* HWY_RESTRICT ot) {
  const size_t lanes = hn::Lanes(d);
  hn::Vec<D> acc[ME][NV];
  for (size_t r = 0; r < ME; ++r)
    for (size_t t = 0; t < NV; ++t) acc[r][t] = hn::LoadU(d, ot + r * bq + t * lanes);
  for (size_t j = 0; j < nk; ++j) {
    hn::Vec<D> p[NV];
    for (size_t t = 0; t < NV; ++t) p[t] = hn::LoadU(d, pt + j * bq + t * lanes);
    for (size_t r = 0; r < ME; ++r) {
      const auto vv = hn::Set(d, v[j * dv + r]);
      for (size_t t = 0; t < NV; ++t) acc[r][t] = hn::MulAdd(vv, p[t], acc[r][t]);
    }
  }
  for (size_t r = 0; r < ME; ++r)
    for (size_t t = 0; t < NV; ++t) hn::StoreU(acc[r][t], d, ot + r * bq + t * lanes);
}

template <size_t ME, class D, class C>
HWY_INLINE void ValueRows(D d, size_t nv, const C* v, size_t dv, const C* pt, size_t nk, size_t bq,
                          C* ot) {
  const size_t lanes = hn::Lanes(d);
  for (size_t w = 0; w < nv; w += kMaxTileVectors) {
    const size_t off = w * lanes;
    switch (std::min(kMaxTileVectors, nv - w)) {
      case 1:
        ValueTile<ME, 1>(d, v, dv, pt + off, nk, bq, ot + off);
        break;
      case 2:
        ValueTile<ME, 2>(d, v, dv, pt + off, nk, bq, ot + off);
        break;
      case 3:
        ValueTile<ME, 3>(d, v, dv, pt + off, nk, bq, ot + off);
        break;
      default:
        ValueTile<ME, kMaxTileVectors>(d, v, dv, pt + off, nk, bq, ot + off);
        break;
    }
  }
}

// Ot [dv, bq] += V^T [dv, nk] Pt [nk, bq].
template <class D, class C>
HWY_INLINE void Values(D d, size_t nv, const C* v, size_t nk, size_t dv, const C* pt, size_t bq,
                       C* ot) {
  size_t e = 0;
  for (; e + 4 <= dv; e += 4) ValueRows<4>(d, nv, v + e, dv, pt, nk, bq, ot + e * bq);
  for (; e < dv; ++e) ValueRows<1>(d, nv, v + e, dv, pt, nk, bq, ot + e * bq);
}

// Whether v[0, n) holds only finite values. Masked keys must contribute exactly 0 (docs/ir.md),
// but 0 * inf or 0 * NaN in the P V product is NaN, so blocks with a non-finite value take the
// exact, slower accumulation of ValuesVisible instead of Values.
template <class C>
HWY_INLINE bool AllFinite(const C* HWY_RESTRICT v, size_t n) {
  const hn::ScalableTag<C> d;
  const size_t lanes = hn::Lanes(d);
  auto bad = hn::FirstN(d, 0);
  size_t i = 0;
  for (; i + lanes <= n; i += lanes) bad = hn::Or(bad, hn::Not(hn::IsFinite(hn::LoadU(d, v + i))));
  bool ok = hn::AllFalse(d, bad);
  for (; i < n; ++i) ok = ok && std::isfinite(v[i]);
  return ok;
}

// Ot [dv, bq] += V^T Pt over the keys j that query lane r sees (keep[j * bq + r] != 0) only.
template <class C>
void ValuesVisible(const C* v, size_t nk, size_t dv, const C* pt, const C* keep, size_t bq, C* ot) {
  for (size_t j = 0; j < nk; ++j)
    for (size_t r = 0; r < bq; ++r)
      if (keep[j * bq + r] != C(0))
        for (size_t e = 0; e < dv; ++e) ot[e * bq + r] += v[j * dv + e] * pt[j * bq + r];
}

// One work item's per-query state, one lane per query row.
template <class C>
struct RowState {
  C* m;        // running max of visible scores (-inf: none finite yet)
  C* l;        // running sum of exp(score - m)
  C* bad;      // 1 where a visible score is NaN or +inf: the row is NaN, as in the reference
  C* visible;  // 1 where some key is visible: an all -inf row is then NaN, else 0
};

// Online softmax step over the block's scores St [nk, bq] (masked ones already -inf): the
// lane-wise block max raises m, Ot and l are rescaled by exp(m_old - m_new), and St is replaced
// by exp(score - m_new) (Highway exp: within 1 ulp, arguments <= 0, so no overflow).
template <class D, class C>
HWY_INLINE void SoftmaxStep(D d, size_t nv, size_t nk, size_t bq, size_t dv, C* st,
                            const RowState<C>& s, C* ot) {
  const size_t lanes = hn::Lanes(d);
  const auto neg_inf = hn::Set(d, -kInf<C>), one = hn::Set(d, C(1));
  for (size_t w = 0; w < nv; ++w) {
    const size_t off = w * lanes;
    auto mb = neg_inf;
    auto nan = hn::FirstN(d, 0);
    for (size_t j = 0; j < nk; ++j) {
      const auto x = hn::LoadU(d, st + j * bq + off);
      mb = hn::Max(mb, x);
      nan = hn::Or(nan, hn::IsNaN(x));
    }
    const auto bad = hn::Or(hn::Gt(hn::LoadU(d, s.bad + off), hn::Zero(d)),
                            hn::Or(nan, hn::Eq(mb, hn::Set(d, kInf<C>))));
    hn::StoreU(hn::IfThenElseZero(bad, one), d, s.bad + off);
    const auto m_old = hn::LoadU(d, s.m + off);
    // Bad lanes keep m = 0 so their arithmetic stays finite; their output is NaN anyway.
    const auto m_new = hn::IfThenZeroElse(bad, hn::Max(m_old, mb));
    hn::StoreU(m_new, d, s.m + off);
    // While nothing finite is visible m is -inf; exponents then use 0 so masked scores give 0.
    const auto m_use = hn::IfThenZeroElse(hn::Eq(m_new, neg_inf), m_new);
    const auto alpha = hn::Exp(d, hn::Sub(m_old, m_use));
    auto sum = hn::Zero(d);
    for (size_t j = 0; j < nk; ++j) {
      const auto p = hn::Exp(d, hn::Sub(hn::LoadU(d, st + j * bq + off), m_use));
      hn::StoreU(p, d, st + j * bq + off);
      sum = hn::Add(sum, p);
    }
    hn::StoreU(hn::MulAdd(hn::LoadU(d, s.l + off), alpha, sum), d, s.l + off);
    if (!hn::AllTrue(d, hn::Eq(alpha, one)))
      for (size_t e = 0; e < dv; ++e)
        hn::StoreU(hn::Mul(hn::LoadU(d, ot + e * bq + off), alpha), d, ot + e * bq + off);
  }
}

// Masks scores of keys [j0, j0 + nk) for query rows whose position (i + Sk - Sq) is `pos0` for
// lane 0: causal sees keys <= pos, sliding_window(w) keys in (pos - w, pos].
template <class D, class C>
HWY_INLINE void MaskPositions(D d, size_t nv, size_t nk, size_t bq, int64_t j0, int64_t pos0,
                              int64_t window, C* st) {
  const size_t lanes = hn::Lanes(d);
  const auto neg_inf = hn::Set(d, -kInf<C>);
  for (size_t w = 0; w < nv; ++w) {
    const size_t off = w * lanes;
    const auto pos = hn::Iota(d, static_cast<C>(pos0 + static_cast<int64_t>(off)));
    for (size_t j = 0; j < nk; ++j) {
      const auto key = hn::Set(d, static_cast<C>(j0 + static_cast<int64_t>(j)));
      auto visible = hn::Ge(pos, key);
      if (window > 0) visible = hn::And(visible, hn::Lt(pos, hn::Add(key, hn::Set(d, C(window)))));
      C* row = st + j * bq + off;
      hn::StoreU(hn::IfThenElse(visible, hn::LoadU(d, row), neg_inf), d, row);
    }
  }
}

// The mask tensor's block [nq, nk] transposed into mt [nk, bq] (C values: bias, or 0 / 1).
template <class T, class C>
HWY_INLINE void GatherMask(const T* mask, const int64_t* strides, int64_t base, int64_t i0,
                           size_t nq, int64_t j0, size_t nk, size_t bq, C* mt, C* row) {
  const size_t rows = strides[2] == 0 ? 1 : nq;  // a mask broadcast over queries: one row
  for (size_t r = 0; r < rows; ++r) {
    const int64_t off = base + (i0 + static_cast<int64_t>(r)) * strides[2] + j0 * strides[3];
    if constexpr (!std::is_same_v<T, uint8_t>) {
      if (strides[3] == 1) {  // a contiguous row of the bias: widened with SIMD
        const C* src = ReadRows(mask + off, nk, row);
        for (size_t j = 0; j < nk; ++j) mt[j * bq + r] = src[j];
        continue;
      }
    }
    for (size_t j = 0; j < nk; ++j)
      mt[j * bq + r] = ToCalc<C>(mask[off + static_cast<int64_t>(j) * strides[3]]);
  }
  if (rows == 1)
    for (size_t j = 0; j < nk; ++j) std::fill(mt + j * bq + 1, mt + j * bq + nq, mt[j * bq]);
}

template <class T>
void AttentionImpl(const AttentionTask& t, const KernelIO& io, int64_t begin, int64_t end) {
  using C = Calc<T>;
  const hn::ScalableTag<C> d;
  const size_t lanes = hn::Lanes(d);
  const T* q = io.input<T>(t.q_in);
  const T* k = io.input<T>(t.k_in);
  const T* v = io.input<T>(t.v_in);
  const auto dim = static_cast<size_t>(t.d), dv = static_cast<size_t>(t.dv);
  const size_t bq = (static_cast<size_t>(std::min(kBlockQ, t.sq)) + lanes - 1) / lanes * lanes;
  const size_t nv = bq / lanes;
  const auto bk = static_cast<size_t>(kBlockK);
  const bool narrow = !std::is_same_v<T, C>;
  const bool has_tensor = t.mask == MaskKind::kBool || t.mask == MaskKind::kBias;
  // Scratch layout: Qt, St, Ot, state (4 rows), mask block, widened K and V blocks, a row,
  // the visibility of a block's scores (blocks whose V holds inf / NaN only).
  const size_t n_qt = dim * bq, n_st = bk * bq, n_ot = dv * bq, n_state = 4 * bq;
  const size_t n_mt = has_tensor ? bk * bq : 0;
  const size_t n_kv = narrow || t.lk.ss != t.d || t.lv.ss != t.dv ? bk * (dim + dv) : 0;
  const size_t n_row = std::max({dim, dv, bk});
  C* qt = scratch<C>(n_qt + n_st + n_ot + n_state + n_mt + n_kv + n_row + n_st);
  C* st = qt + n_qt;
  C* ot = st + n_st;
  const RowState<C> s{ot + n_ot, ot + n_ot + bq, ot + n_ot + 2 * bq, ot + n_ot + 3 * bq};
  C* mt = s.m + n_state;
  C* kbuf = mt + n_mt;
  C* vbuf = kbuf + (n_kv != 0 ? bk * dim : 0);
  C* row = kbuf + n_kv;
  C* keep = row + n_row;
  const int64_t group = t.heads / t.kv_heads;
  const C scale = static_cast<C>(t.scale);
  const bool positional = t.mask == MaskKind::kCausal || t.mask == MaskKind::kSlidingWindow ||
                          t.mask == MaskKind::kCausalLengths;
  const int64_t window = t.mask == MaskKind::kSlidingWindow ? t.window : 0;

  for (int64_t item = begin; item < end; ++item) {
    // Query blocks in zig-zag order (0, last, 1, last - 1, ...) so the contiguous item ranges of
    // the threads mix long and short causal rows.
    const int64_t bh_count = t.batch * t.heads;
    const int64_t z = item / bh_count, bh = item % bh_count;
    const int64_t qb = z % 2 == 0 ? z / 2 : t.q_blocks - 1 - z / 2;
    const int64_t b = bh / t.heads, h = bh % t.heads, kh = h / group;
    const int64_t i0 = qb * kBlockQ;
    const auto nq = static_cast<size_t>(std::min(kBlockQ, t.sq - i0));
    // Position of the block's first query: the last query sits at the last (valid) key.
    const int64_t pos0 =
        i0 + (t.mask == MaskKind::kCausalLengths ? RowLength(t, io, b) : t.sk) - t.sq;
    const int64_t pos_last = pos0 + static_cast<int64_t>(nq) - 1;

    // Qt [dim, bq] with zero padding lanes.
    std::fill(qt, qt + n_qt, C(0));
    for (size_t r = 0; r < nq; ++r) {
      const C* src = ReadRows(q + t.lq.at(b, h, i0 + static_cast<int64_t>(r)), dim, row);
      for (size_t c = 0; c < dim; ++c) qt[c * bq + r] = src[c];
    }
    std::fill(ot, ot + n_ot, C(0));
    std::fill(s.m, s.m + bq, -kInf<C>);
    std::fill(s.l, s.l + 2 * bq, C(0));  // l and bad
    for (size_t r = 0; r < bq; ++r) {
      bool vis = false;
      switch (t.mask) {
        case MaskKind::kNone:
          vis = t.sk > 0;
          break;
        case MaskKind::kCausal:
        case MaskKind::kSlidingWindow:
        case MaskKind::kCausalLengths:
          // A row at position >= 0 sees key 0, if there is one (causal_lengths rows may reach
          // past an empty cache).
          vis = pos0 + static_cast<int64_t>(r) >= 0 && t.sk > 0;
          break;
        default:
          break;  // bool: set where a key is unmasked; bias: -inf is masked
      }
      s.visible[r] = vis ? C(1) : C(0);
    }

    // The keys any row of the block can see.
    int64_t kbegin = 0, kend = t.sk;
    if (positional) kend = std::clamp<int64_t>(pos_last + 1, 0, t.sk);
    if (window > 0) kbegin = std::clamp<int64_t>(pos0 - window + 1, 0, t.sk);
    const T* kbase = k + t.lk.at(b, kh, 0);
    const T* vbase = v + t.lv.at(b, kh, 0);
    const int64_t mask_base = b * t.mask_strides[0] + h * t.mask_strides[1];
    for (int64_t j0 = kbegin; j0 < kend; j0 += kBlockK) {
      const auto nk = static_cast<size_t>(std::min(kBlockK, kend - j0));
      const C* kb =
          ReadStridedRows(kbase + j0 * t.lk.ss, nk, dim, static_cast<size_t>(t.lk.ss), kbuf);
      const C* vb =
          ReadStridedRows(vbase + j0 * t.lv.ss, nk, dv, static_cast<size_t>(t.lv.ss), vbuf);
      Scores(d, nv, kb, nk, dim, qt, bq, scale, st);
      // Positional masks only touch blocks that some row sees only in part.
      const int64_t j_last = j0 + static_cast<int64_t>(nk) - 1;
      if (positional && (j_last > pos0 || (window > 0 && j0 <= pos_last - window)))
        MaskPositions(d, nv, nk, bq, j0, pos0, window, st);
      if (has_tensor) {
        if (t.mask == MaskKind::kBool)
          GatherMask(reinterpret_cast<const uint8_t*>(io.in[t.m_in]), t.mask_strides, mask_base, i0,
                     nq, j0, nk, bq, mt, row);
        else
          GatherMask(io.input<T>(t.m_in), t.mask_strides, mask_base, i0, nq, j0, nk, bq, mt, row);
        const auto neg_inf = hn::Set(d, -kInf<C>), zero = hn::Zero(d);
        for (size_t w = 0; w < nv; ++w) {
          const size_t off = w * lanes;
          auto seen = hn::Gt(hn::LoadU(d, s.visible + off), zero);
          for (size_t j = 0; j < nk; ++j) {
            const auto x = hn::LoadU(d, st + j * bq + off), m = hn::LoadU(d, mt + j * bq + off);
            if (t.mask == MaskKind::kBool) {
              const auto keep = hn::Ne(m, zero);
              seen = hn::Or(seen, keep);
              hn::StoreU(hn::IfThenElse(keep, x, neg_inf), d, st + j * bq + off);
            } else {
              hn::StoreU(hn::Add(x, m), d, st + j * bq + off);
            }
          }
          hn::StoreU(hn::IfThenElseZero(seen, hn::Set(d, C(1))), d, s.visible + off);
        }
      }
      // Visibility as the reference defines it: the positional or bool mask, or for a bias a
      // finite (or +inf / NaN) biased score; with no mask every key is visible.
      const bool exact = !AllFinite(vb, nk * dv);
      if (exact)
        for (size_t j = 0; j < nk; ++j)
          for (size_t r = 0; r < bq; ++r) {
            const int64_t key = j0 + static_cast<int64_t>(j), pos = pos0 + static_cast<int64_t>(r);
            bool vis = true;
            if (positional) vis = key <= pos && (window == 0 || key > pos - window);
            if (t.mask == MaskKind::kBool) vis = mt[j * bq + r] != C(0);
            if (t.mask == MaskKind::kBias) vis = st[j * bq + r] != -kInf<C>;
            keep[j * bq + r] = vis ? C(1) : C(0);
          }
      SoftmaxStep(d, nv, nk, bq, dv, st, s, ot);
      if (exact)
        ValuesVisible(vb, nk, dv, st, keep, bq, ot);
      else
        Values(d, nv, vb, nk, dv, st, bq, ot);
    }

    // out = Ot / l; rows with nothing finite visible give 0 (fully masked) or NaN (visible
    // scores all -inf), bad rows NaN.
    const auto neg_inf = hn::Set(d, -kInf<C>), zero = hn::Zero(d);
    const auto nan = hn::Set(d, std::numeric_limits<C>::quiet_NaN());
    for (size_t w = 0; w < nv; ++w) {
      const size_t off = w * lanes;
      const auto l = hn::LoadU(d, s.l + off);
      const auto empty = hn::Eq(hn::LoadU(d, s.m + off), neg_inf);
      const auto fill = hn::IfThenElse(hn::Gt(hn::LoadU(d, s.visible + off), zero), nan, zero);
      const auto bad = hn::Gt(hn::LoadU(d, s.bad + off), zero);
      for (size_t e = 0; e < dv; ++e) {
        const auto o = hn::Div(hn::LoadU(d, ot + e * bq + off), l);
        hn::StoreU(hn::IfThenElse(bad, nan, hn::IfThenElse(empty, fill, o)), d, ot + e * bq + off);
      }
    }
    for (size_t r = 0; r < nq; ++r) {
      T* out = io.output<T>(0) + t.lo.at(b, h, i0 + static_cast<int64_t>(r));
      if constexpr (std::is_same_v<T, C>) {
        for (size_t e = 0; e < dv; ++e) out[e] = ot[e * bq + r];
      } else {
        for (size_t e = 0; e < dv; ++e) row[e] = ot[e * bq + r];
        Narrow(row, out, dv);
      }
    }
  }
}

// ---- direct path (f32, mask none / bool / bias)

// Softmax state of one score row; see AttentionImpl's output rules, which this path shares.
struct DirectRow {
  float inv_l;  // 1 / sum of exp(score - max)
  bool bad;     // a visible score is NaN or +inf: the row is NaN
  bool empty;   // no finite visible score: the row is 0 (nothing visible) or NaN
};

// Replaces the masked score row x[0, n) (n a multiple of the lane count; padding and masked
// entries -inf) by exp(x - max). The maximum comes from row_max (lane maxima the score tiles
// tracked, NaN in lanes that saw a NaN) or, if null, from a first pass over the row; then exp and
// sum in one pass.
HWY_INLINE DirectRow DirectSoftmaxRow(float* HWY_RESTRICT x, size_t n,
                                      const float* HWY_RESTRICT row_max) {
  const hn::ScalableTag<float> d;
  const size_t lanes = hn::Lanes(d);
  const auto inf = hn::Set(d, kInf<float>);
  auto mx = hn::Neg(inf);
  auto bad = hn::FirstN(d, 0);
  if (row_max) {
    mx = hn::LoadU(d, row_max);
    bad = hn::Or(hn::IsNaN(mx), hn::Eq(mx, inf));
  } else {
    for (size_t i = 0; i < n; i += lanes) {
      const auto v = hn::LoadU(d, x + i);
      mx = hn::Max(mx, v);
      bad = hn::Or(bad, hn::Or(hn::IsNaN(v), hn::Eq(v, inf)));
    }
  }
  if (!hn::AllFalse(d, bad)) return {0.0f, true, false};
  const float m = hn::GetLane(hn::MaxOfLanes(d, mx));
  if (m == -kInf<float>) return {0.0f, false, true};
  const auto vm = hn::Set(d, m);
  auto sum = hn::Zero(d);
  for (size_t i = 0; i < n; i += lanes) {
    const auto p = hn::Exp(d, hn::Sub(hn::LoadU(d, x + i), vm));  // arguments <= 0: no overflow
    hn::StoreU(p, d, x + i);
    sum = hn::Add(sum, p);
  }
  return {1.0f / hn::GetLane(hn::SumOfLanes(d, sum)), false, false};
}

// Applies the bool mask (mrow 0: masked, score -inf) or the additive bias in mrow to the score
// row x[0, n); returns whether some key is visible (bool masks only: the others report false,
// as AttentionImpl's `visible` state does for bias).
HWY_INLINE bool DirectMaskRow(MaskKind kind, const float* HWY_RESTRICT mrow, float* HWY_RESTRICT x,
                              size_t n) {
  const hn::ScalableTag<float> d;
  const size_t lanes = hn::Lanes(d);
  const auto zero = hn::Zero(d), neg_inf = hn::Set(d, -kInf<float>);
  auto seen = hn::FirstN(d, 0);
  for (size_t i = 0; i < n; i += lanes) {
    const auto v = hn::LoadU(d, x + i), m = hn::LoadU(d, mrow + i);
    if (kind == MaskKind::kBool) {
      const auto keep = hn::Ne(m, zero);
      seen = hn::Or(seen, keep);
      hn::StoreU(hn::IfThenElse(keep, v, neg_inf), d, x + i);
    } else {
      hn::StoreU(hn::Add(v, m), d, x + i);
    }
  }
  return !hn::AllFalse(d, seen);
}

// Starts loading the cache lines of the n bytes at p into L2 (prefetcht1 in volatile asm: GCC
// deletes _mm_prefetch loops it inlines as side-effect free).
HWY_INLINE void PrefetchBytes(const void* p, size_t n) {
  const uintptr_t first = reinterpret_cast<uintptr_t>(p) & ~uintptr_t{63};
  const uintptr_t last = reinterpret_cast<uintptr_t>(p) + n - 1;
  for (uintptr_t line = first; line <= last; line += 64) {
#if HWY_ARCH_X86
    asm volatile("prefetcht1 %0" : : "m"(*reinterpret_cast<const char*>(line)));
#else
    __builtin_prefetch(reinterpret_cast<const char*>(line), 0, 2);
#endif
  }
}

// kt [d, ld] = the transpose of the n rows of d floats at src (`stride` apart), each kt row
// zero padded from n to ld. On AVX-512 16 x 16 blocks go through registers straight from the
// (strided) rows: 64 shuffles per 256 values instead of a load and a store per value; the
// tails, and narrower targets, are scalar.
HWY_INLINE void TransposeRows(const float* HWY_RESTRICT src, size_t n, size_t d, size_t stride,
                              float* HWY_RESTRICT kt, size_t ld) {
  size_t n16 = 0;  // rows transposed by whole blocks
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  n16 = n / 16 * 16;
  const size_t d16 = d / 16 * 16;
  for (size_t j = 0; j < n16; j += 16) {
    for (size_t c = 0; c < d16; c += 16) {
      __m512 r[16], u[16];
      for (size_t i = 0; i < 16; ++i) r[i] = _mm512_loadu_ps(src + (j + i) * stride + c);
      // Pairs of rows interleaved by 32 bits, then quads by 64 bits: in 128-bit block k,
      // u[4 g + m] holds column 4 k + m of rows 4 g .. 4 g + 3.
      for (size_t i = 0; i < 16; i += 2) {
        u[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        u[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
      }
      for (size_t g = 0; g < 16; g += 4) {
        const __m512d t0 = _mm512_castps_pd(u[g]), t1 = _mm512_castps_pd(u[g + 1]);
        const __m512d t2 = _mm512_castps_pd(u[g + 2]), t3 = _mm512_castps_pd(u[g + 3]);
        r[g] = _mm512_castpd_ps(_mm512_unpacklo_pd(t0, t2));
        r[g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(t0, t2));
        r[g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(t1, t3));
        r[g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(t1, t3));
      }
      // Column 4 k + m of all 16 rows: block k of r[m], r[4 + m], r[8 + m], r[12 + m].
      for (size_t m = 0; m < 4; ++m) {
        const __m512 e0 = _mm512_shuffle_f32x4(r[m], r[4 + m], 0x44);
        const __m512 e1 = _mm512_shuffle_f32x4(r[m], r[4 + m], 0xEE);
        const __m512 e2 = _mm512_shuffle_f32x4(r[8 + m], r[12 + m], 0x44);
        const __m512 e3 = _mm512_shuffle_f32x4(r[8 + m], r[12 + m], 0xEE);
        _mm512_storeu_ps(kt + (c + m) * ld + j, _mm512_shuffle_f32x4(e0, e2, 0x88));
        _mm512_storeu_ps(kt + (c + 4 + m) * ld + j, _mm512_shuffle_f32x4(e0, e2, 0xDD));
        _mm512_storeu_ps(kt + (c + 8 + m) * ld + j, _mm512_shuffle_f32x4(e1, e3, 0x88));
        _mm512_storeu_ps(kt + (c + 12 + m) * ld + j, _mm512_shuffle_f32x4(e1, e3, 0xDD));
      }
    }
    for (size_t c = d16; c < d; ++c)
      for (size_t i = j; i < j + 16; ++i) kt[c * ld + i] = src[i * stride + c];
  }
#endif
  for (size_t c = 0; c < d; ++c) {
    float* row = kt + c * ld;
    for (size_t i = n16; i < n; ++i) row[i] = src[i * stride + c];
    std::fill(row + n, row + ld, 0.0f);
  }
}

// Register tiles of the direct path's products: kDirectRows rows of A by up to
// kDirectVectors vectors of B (24 accumulators of AVX-512's 32 registers, 12 of the 16 of
// narrower targets).
constexpr size_t kDirectRows = HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3 ? 8 : 4;
constexpr size_t kDirectVectors = 3;

// C [m, nv vectors] = A [m, kdim] B [kdim, nv vectors] in register tiles finished by `out`, B's
// vector columns outer so that a panel of B (kdim x kDirectVectors vectors) stays in L1 while all
// rows of A pass over it.
template <class D>
HWY_INLINE void DirectGemm(D d, size_t m, size_t nv, const float* a, size_t lda, size_t kdim,
                           const float* b, size_t ldb, const TileOut<float>& out, float* c,
                           size_t ldc) {
  const size_t lanes = hn::Lanes(d);
  for (size_t v = 0; v < nv; v += kDirectVectors) {
    const size_t n = std::min(kDirectVectors, nv - v), off = v * lanes;
    size_t r = 0;
    for (; r + kDirectRows <= m; r += kDirectRows)
      GemmRows<kDirectRows, kDirectVectors>(d, n, a + r * lda, lda, kdim, b + off, ldb,
                                            out.At(r, off, lanes), c + r * ldc + off, ldc);
    for (; r + 2 <= m; r += 2)
      GemmRows<2, kDirectVectors>(d, n, a + r * lda, lda, kdim, b + off, ldb, out.At(r, off, lanes),
                                  c + r * ldc + off, ldc);
    for (; r < m; ++r)
      GemmRows<1, kDirectVectors>(d, n, a + r * lda, lda, kdim, b + off, ldb, out.At(r, off, lanes),
                                  c + r * ldc + off, ldc);
  }
}

// The direct path for storage type T (f32, or f16 / bf16 widened to f32: the item's query rows,
// its head's K and V once per (batch, head), the output rounded back per item). Per (batch,
// head) K is packed transposed, Kt [D, ld] (zero padded to whole vectors), and V to whole
// vectors of Dv where needed, and both stay in cache for all the head's query blocks. Items
// [begin, end) are this call's; the calling thread goes on to the items up to run_end (its
// parallel_runs run), so the rows of the (batch, head) after an item are prefetched while the
// item computes only when that head is before run_end.
template <class T>
void DirectImpl(const AttentionTask& t, const KernelIO& io, int64_t begin, int64_t end,
                int64_t run_end) {
  const hn::ScalableTag<float> d;
  const auto lanes = static_cast<int64_t>(hn::Lanes(d));
  const int64_t ld = (t.sk + lanes - 1) / lanes * lanes;   // score row stride, padded with -inf
  const int64_t ldv = (t.dv + lanes - 1) / lanes * lanes;  // V and output row stride
  const bool has_tensor = t.mask == MaskKind::kBool || t.mask == MaskKind::kBias;
  constexpr bool narrow = !std::is_same_v<T, float>;
  // Q and V rows are read in place where they are contiguous f32 rows, else copied (widened) row
  // by row into wq / wv first: the products' panels of strided rows (packed QKV: rows
  // (Hq+2Hkv)D apart) would contend for a few L1 sets. f32 K is transposed from its rows in
  // place; 16-bit K is widened into wk first. The output is written in place, strided or not,
  // where its rows are whole vectors.
  const bool out_in_place = !narrow && ldv == t.dv;
  const bool v_in_place = out_in_place && t.lv.ss == t.dv;
  const int64_t n_q = narrow || t.lq.ss != t.d ? kBlockQ * t.d : 0;
  const int64_t n_k = narrow ? t.sk * t.d : 0;
  const int64_t n_v = v_in_place ? 0 : t.sk * ldv;
  const int64_t n_o = out_in_place ? 0 : kBlockQ * ldv;
  float* st = scratch<float>(static_cast<size_t>(kBlockQ * ld + 2 * ld + kBlockQ * lanes +
                                                 t.d * ld + n_q + n_k + n_v + n_o));
  float* mrow = st + kBlockQ * ld;
  float* kpad = mrow + ld;
  float* rmax = kpad + ld;
  float* kt = rmax + kBlockQ * lanes;
  float* wq = kt + t.d * ld;
  float* wk = wq + n_q;
  float* wv = wk + n_k;
  float* wo = wv + n_v;
  std::fill(mrow + t.sk, mrow + ld, 0.0f);  // padding keys: visible to the mask, -inf scores
  std::fill(kpad, kpad + t.sk, 1.0f);       // keeps the real keys (no mask / bias masks)
  std::fill(kpad + t.sk, kpad + ld, 0.0f);
  const int64_t group = t.heads / t.kv_heads;
  const T* q = io.input<T>(t.q_in);
  const T* k = io.input<T>(t.k_in);
  const T* v = io.input<T>(t.v_in);
  T* out = io.output<T>(0);
  const int64_t ldo = out_in_place ? t.lo.ss : ldv;  // row stride of the rows P V writes
  DirectRow rows[kBlockQ];
  float inv_l[kBlockQ];
  int64_t packed = -1;  // the (batch, kv head) whose K and V kt / vb hold
  const float* vb = nullptr;
  bool v_finite = true;
  for (int64_t item = begin; item < end; ++item) {
    const int64_t bh = item / t.q_blocks, qb = item % t.q_blocks;
    const int64_t b = bh / t.heads, h = bh % t.heads, kh = h / group;
    const int64_t i0 = qb * kBlockQ, nq = std::min(kBlockQ, t.sq - i0);
    if (b * t.kv_heads + kh != packed) {
      packed = b * t.kv_heads + kh;
      // f32 K is transposed straight from its (strided) rows; 16-bit K is widened first.
      const T* kr = k + t.lk.at(b, kh, 0);
      if constexpr (narrow)
        TransposeRows(ReadStridedRows(kr, static_cast<size_t>(t.sk), static_cast<size_t>(t.d),
                                      static_cast<size_t>(t.lk.ss), wk),
                      static_cast<size_t>(t.sk), static_cast<size_t>(t.d), static_cast<size_t>(t.d),
                      kt, static_cast<size_t>(ld));
      else
        TransposeRows(kr, static_cast<size_t>(t.sk), static_cast<size_t>(t.d),
                      static_cast<size_t>(t.lk.ss), kt, static_cast<size_t>(ld));
      const T* vr = v + t.lv.at(b, kh, 0);
      if constexpr (!narrow) {
        if (v_in_place) vb = vr;
      }
      if (!v_in_place) {
        for (int64_t j = 0; j < t.sk; ++j) {
          if constexpr (narrow)
            Widen(vr + j * t.lv.ss, wv + j * ldv, static_cast<size_t>(t.dv));
          else
            CopyRow(vr + j * t.lv.ss, static_cast<size_t>(t.dv), wv + j * ldv);
          std::fill(wv + j * ldv + t.dv, wv + (j + 1) * ldv, 0.0f);
        }
        vb = wv;
      }
      v_finite = AllFinite(vb, static_cast<size_t>(t.sk * ldv));
    }
    T* out_rows = out + t.lo.at(b, h, i0);
    float* ob = nullptr;
    if constexpr (narrow)
      ob = wo;
    else
      ob = out_in_place ? out_rows : wo;
    if (!v_finite) {
      // Masked keys must not contribute 0 * inf: the blocked path's exact accumulation, on its
      // item of the same (query block, batch, head) (its zig-zag order inverted).
      const int64_t z = qb < (t.q_blocks + 1) / 2 ? 2 * qb : 2 * (t.q_blocks - 1 - qb) + 1;
      AttentionImpl<T>(t, io, z * t.batch * t.heads + bh, z * t.batch * t.heads + bh + 1);
      continue;
    }
    // The next (batch, head)'s rows are fetched into L2 meanwhile, a few per score row: the packed
    // layout's rows are a token (W floats) apart, too far for the hardware prefetcher, and
    // contiguous heads gain too (1 thread, B 32: 17 % and 7 % faster). Only a head of this
    // thread's run (see DirectImpl's comment): the one after the run's last is another thread's.
    const bool has_next = (bh + 1) * t.q_blocks < run_end;
    const int64_t nb = (bh + 1) / t.heads, nh = (bh + 1) % t.heads, nkh = nh / group;
    auto prefetch_next = [&](int64_t u) {
      if (!has_next) return;
      PrefetchBytes(q + t.lq.at(nb, nh, u), static_cast<size_t>(t.d) * sizeof(T));
      PrefetchBytes(out + t.lo.at(nb, nh, u), static_cast<size_t>(t.dv) * sizeof(T));
      if (nh % group != 0) return;  // the same K and V as this head
      for (int64_t j = u * t.sk / t.sq; j < (u + 1) * t.sk / t.sq; ++j) {
        PrefetchBytes(k + t.lk.at(nb, nkh, j), static_cast<size_t>(t.d) * sizeof(T));
        PrefetchBytes(v + t.lv.at(nb, nkh, j), static_cast<size_t>(t.dv) * sizeof(T));
      }
    };
    const int64_t mask_base = b * t.mask_strides[0] + h * t.mask_strides[1];
    auto gather_mask = [&](int64_t r) {
      const int64_t off = mask_base + (i0 + r) * t.mask_strides[2];
      if (t.mask == MaskKind::kBool) {
        const auto* m = reinterpret_cast<const uint8_t*>(io.in[t.m_in]) + off;
        for (int64_t j = 0; j < t.sk; ++j) mrow[j] = m[j * t.mask_strides[3]] ? 1.0f : 0.0f;
      } else {
        const T* m = io.input<T>(t.m_in) + off;
        for (int64_t j = 0; j < t.sk; ++j) mrow[j] = ToCalc<float>(m[j * t.mask_strides[3]]);
      }
    };
    // Keys [0, ske) are computed. A bool mask broadcast over the query rows (an encoder's
    // padding mask) is gathered once per item, and its trailing masked keys (padding) are
    // skipped: their weights are exactly 0, so the sums over the rest are bitwise the same.
    // A bias mask keeps them (NaN + -inf is NaN: a NaN score poisons its row even there).
    int64_t ske = t.sk;
    if (has_tensor && t.mask_strides[2] == 0) {
      gather_mask(0);
      if (t.mask == MaskKind::kBool)
        while (ske > 0 && mrow[ske - 1] == 0.0f) --ske;
    }
    const int64_t lde = (ske + lanes - 1) / lanes * lanes;
    const float* qb_rows =
        ReadStridedRows(q + t.lq.at(b, h, i0), static_cast<size_t>(nq), static_cast<size_t>(t.d),
                        static_cast<size_t>(t.lq.ss), wq);
    // S = scale Q K^T. Where the mask row is the same for all the item's query rows, the score
    // tiles apply it (and mask the padding keys) and track each row's maximum as they store.
    const bool fused = !has_tensor || t.mask_strides[2] == 0;
    TileOut<float> so;
    so.scale = static_cast<float>(t.scale);
    if (fused) {
      std::fill(rmax, rmax + nq * lanes, -kInf<float>);
      so.row_max = rmax;
      // Padding keys (and a bool mask's hidden keys) become -inf; no keep row without either.
      if (t.mask == MaskKind::kBool || ske != ld) so.keep = t.mask == MaskKind::kBool ? mrow : kpad;
      if (t.mask == MaskKind::kBias) so.bias = mrow;
    }
    DirectGemm(d, static_cast<size_t>(nq), static_cast<size_t>(lde / lanes), qb_rows,
               static_cast<size_t>(t.d), static_cast<size_t>(t.d), kt, static_cast<size_t>(ld), so,
               st, static_cast<size_t>(ld));
    for (int64_t r = 0; r < nq; ++r) {
      prefetch_next(i0 + r);
      float* x = st + r * ld;
      // sk >= 1 on this path; a bias reports nothing visible, as AttentionImpl's state does.
      bool visible = t.mask == MaskKind::kNone || (t.mask == MaskKind::kBool && ske > 0);
      if (!fused) {
        std::fill(x + ske, x + lde, -kInf<float>);
        gather_mask(r);
        visible = DirectMaskRow(t.mask, mrow, x, static_cast<size_t>(lde));
      }
      rows[r] = DirectSoftmaxRow(x, static_cast<size_t>(lde), fused ? rmax + r * lanes : nullptr);
      if (rows[r].empty && visible) rows[r].bad = true;  // visible scores all -inf: NaN
      inv_l[r] = rows[r].bad || rows[r].empty ? 0.0f : rows[r].inv_l;
    }
    // O = P V / l over the keys [0, ske) (P's padding columns are exp(-inf) = 0, not read).
    TileOut<float> po;
    po.row_scale = inv_l;
    DirectGemm(d, static_cast<size_t>(nq), static_cast<size_t>(ldv / lanes), st,
               static_cast<size_t>(ld), static_cast<size_t>(ske), vb, static_cast<size_t>(ldv), po,
               ob, static_cast<size_t>(ldo));
    for (int64_t r = 0; r < nq; ++r) {
      float* o = ob + r * ldo;
      if (rows[r].bad || rows[r].empty)
        std::fill(o, o + t.dv, rows[r].bad ? std::numeric_limits<float>::quiet_NaN() : 0.0f);
      if (!out_in_place) {
        if constexpr (narrow)
          Narrow(o, out_rows + r * t.lo.ss, static_cast<size_t>(t.dv));
        else
          std::copy(o, o + t.dv, out_rows + r * t.lo.ss);
      }
    }
  }
}

// ---- decode path (f32, or f16 widened to f32 as rows are read: at most
// kDecodeMaxQueries query rows, positional mask or none)

// f32 lanes of storage T at p: f32, or f16 converted in registers (targets with F16C).
template <class D, class T>
HWY_INLINE hn::Vec<D> LoadWide(D d, const T* HWY_RESTRICT p) {
  if constexpr (std::is_same_v<T, float>) {
    return hn::LoadU(d, p);
  } else {
    const hn::Rebind<hwy::float16_t, D> dh;
    return hn::PromoteTo(d, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(p)));
  }
}

// s[j] = scale * dot(q, k_j) for the n key rows of k (`dim` values each, rows ldk apart), four
// keys at a time.
template <class T>
HWY_INLINE void DecodeScores(const float* HWY_RESTRICT q, const T* HWY_RESTRICT k, size_t n,
                             size_t dim, size_t ldk, float scale, float* HWY_RESTRICT s) {
  const hn::ScalableTag<float> d;
  const size_t lanes = hn::Lanes(d);
  const size_t vec_dim = dim / lanes * lanes;
  auto sum = [&](auto v) { return hn::GetLane(hn::SumOfLanes(d, v)); };
  size_t j = 0;
  for (; j + 4 <= n; j += 4) {
    const T* k0 = k + j * ldk;
    auto a0 = hn::Zero(d), a1 = hn::Zero(d), a2 = hn::Zero(d), a3 = hn::Zero(d);
    for (size_t c = 0; c < vec_dim; c += lanes) {
      const auto qv = hn::LoadU(d, q + c);
      a0 = hn::MulAdd(LoadWide(d, k0 + c), qv, a0);
      a1 = hn::MulAdd(LoadWide(d, k0 + ldk + c), qv, a1);
      a2 = hn::MulAdd(LoadWide(d, k0 + 2 * ldk + c), qv, a2);
      a3 = hn::MulAdd(LoadWide(d, k0 + 3 * ldk + c), qv, a3);
    }
    float r[4] = {sum(a0), sum(a1), sum(a2), sum(a3)};
    for (size_t c = vec_dim; c < dim; ++c)
      for (size_t u = 0; u < 4; ++u) r[u] += q[c] * to_f32(k0[u * ldk + c]);
    for (size_t u = 0; u < 4; ++u) s[j + u] = r[u] * scale;
  }
  for (; j < n; ++j) {
    const T* kj = k + j * ldk;
    auto a = hn::Zero(d);
    for (size_t c = 0; c < vec_dim; c += lanes)
      a = hn::MulAdd(LoadWide(d, kj + c), hn::LoadU(d, q + c), a);
    float r = sum(a);
    for (size_t c = vec_dim; c < dim; ++c) r += q[c] * to_f32(kj[c]);
    s[j] = r * scale;
  }
}

// o[0, dv) = sum_j p[j] * v_j over the n value rows of v (rows ldv apart), divided by l.
template <class T>
HWY_INLINE void DecodeValues(const float* HWY_RESTRICT p, const T* HWY_RESTRICT v, size_t n,
                             size_t dv, size_t ldv, float l, float* HWY_RESTRICT o) {
  const hn::ScalableTag<float> d;
  const size_t lanes = hn::Lanes(d);
  const auto inv = hn::Set(d, 1.0f / l);
  size_t e = 0;
  for (; e + 4 * lanes <= dv; e += 4 * lanes) {  // four vectors of O in registers
    auto o0 = hn::Zero(d), o1 = hn::Zero(d), o2 = hn::Zero(d), o3 = hn::Zero(d);
    for (size_t j = 0; j < n; ++j) {
      const auto pj = hn::Set(d, p[j]);
      const T* vj = v + j * ldv + e;
      o0 = hn::MulAdd(pj, LoadWide(d, vj), o0);
      o1 = hn::MulAdd(pj, LoadWide(d, vj + lanes), o1);
      o2 = hn::MulAdd(pj, LoadWide(d, vj + 2 * lanes), o2);
      o3 = hn::MulAdd(pj, LoadWide(d, vj + 3 * lanes), o3);
    }
    hn::StoreU(hn::Mul(o0, inv), d, o + e);
    hn::StoreU(hn::Mul(o1, inv), d, o + e + lanes);
    hn::StoreU(hn::Mul(o2, inv), d, o + e + 2 * lanes);
    hn::StoreU(hn::Mul(o3, inv), d, o + e + 3 * lanes);
  }
  for (; e + lanes <= dv; e += lanes) {
    auto acc = hn::Zero(d);
    for (size_t j = 0; j < n; ++j)
      acc = hn::MulAdd(hn::Set(d, p[j]), LoadWide(d, v + j * ldv + e), acc);
    hn::StoreU(hn::Mul(acc, inv), d, o + e);
  }
  for (; e < dv; ++e) {
    float acc = 0;
    for (size_t j = 0; j < n; ++j) acc += p[j] * to_f32(v[j * ldv + e]);
    o[e] = acc / l;
  }
}

// Items are (batch, head) pairs; each runs its sq query rows. The output rules are
// AttentionImpl's: a row with no visible key is 0, one whose visible scores hold NaN or +inf,
// or are all -inf, is NaN. Only visible keys are read, so masked cache slots never contribute.
// n rows of K or V (`width` values, `stride` apart) as DecodeScores / DecodeValues read them:
// T itself (kInRegisters, rows `stride` apart), or widened into `into` (rows `width` apart);
// *ld is set to the row stride of the result.
template <bool kInRegisters, class T>
HWY_INLINE auto KvRows(const T* rows, size_t n, size_t width, size_t stride, float* into,
                       size_t* ld) {
  if constexpr (kInRegisters) {
    (void)n;
    (void)width;
    (void)into;
    *ld = stride;
    return rows;
  } else {
    *ld = width;
    return ReadStridedRows(rows, n, width, stride, into);
  }
}

// Storage type f16: the query row is widened to f32 and the output row narrowed once; K and V
// are converted in registers as they are loaded (F16C targets) or, on older targets, their
// visible rows widened into a per-thread buffer, never the whole cache.
template <class T>
void DecodeImpl(const AttentionTask& t, const KernelIO& io, int64_t begin, int64_t end) {
  const hn::ScalableTag<float> d;
  const size_t lanes = hn::Lanes(d);
  const auto dim = static_cast<size_t>(t.d), dv = static_cast<size_t>(t.dv);
  float* s = scratch<float>((static_cast<size_t>(t.sk) + lanes - 1) / lanes * lanes);
  constexpr bool wide = !std::is_same_v<T, float>;
  constexpr bool in_registers = !wide || kF16Hardware;
  // Widened q row, output row, then (not in registers) K and V rows of the longest range.
  thread_local std::vector<float> buf;
  const size_t need = dim + dv + (in_registers ? 0 : static_cast<size_t>(t.sk) * (dim + dv));
  if (wide && buf.size() < need) buf.resize(need);
  float *qbuf = buf.data(), *obuf = qbuf + dim, *kbuf = obuf + dv;
  const T* q = io.input<T>(t.q_in);
  const T* k = io.input<T>(t.k_in);
  const T* v = io.input<T>(t.v_in);
  T* out = io.output<T>(0);
  const int64_t group = t.heads / t.kv_heads;
  const auto inf = hn::Set(d, kInf<float>), neg_inf = hn::Neg(inf);
  for (int64_t item = begin; item < end; ++item) {
    const int64_t b = item / t.heads, h = item % t.heads, kh = h / group;
    const T* kbase = k + t.lk.at(b, kh, 0);
    const T* vbase = v + t.lv.at(b, kh, 0);
    const int64_t len = t.mask == MaskKind::kCausalLengths ? RowLength(t, io, b) : t.sk;
    for (int64_t i = 0; i < t.sq; ++i) {
      T* orow = out + t.lo.at(b, h, i);
      float* o;
      if constexpr (wide)
        o = obuf;
      else
        o = orow;
      auto store = [&] {
        if constexpr (wide) Narrow(obuf, orow, dv);
      };
      // Visible keys [kb, ke): the row's position is i + len - sq (its last query at the last
      // valid key), as MaskPositions and the reference place it.
      int64_t kb = 0, ke = t.sk;
      if (t.mask != MaskKind::kNone) {
        const int64_t pos = i + len - t.sq;
        ke = std::clamp<int64_t>(pos + 1, 0, t.sk);
        if (t.mask == MaskKind::kSlidingWindow)
          kb = std::clamp<int64_t>(pos - t.window + 1, 0, t.sk);
      }
      if (kb >= ke) {
        std::fill(o, o + dv, 0.0f);
        store();
        continue;
      }
      const auto n = static_cast<size_t>(ke - kb);
      size_t ldk = 0, ldv = 0;
      const auto* krows = KvRows<in_registers>(kbase + kb * t.lk.ss, n, dim,
                                               static_cast<size_t>(t.lk.ss), kbuf, &ldk);
      DecodeScores(ReadRows(q + t.lq.at(b, h, i), dim, qbuf), krows, n, dim, ldk,
                   static_cast<float>(t.scale), s);
      const size_t padded = (n + lanes - 1) / lanes * lanes;
      std::fill(s + n, s + padded, -kInf<float>);
      auto mx = neg_inf;
      auto bad = hn::FirstN(d, 0);
      for (size_t j = 0; j < padded; j += lanes) {
        const auto x = hn::LoadU(d, s + j);
        mx = hn::Max(mx, x);
        bad = hn::Or(bad, hn::Or(hn::IsNaN(x), hn::Eq(x, inf)));
      }
      const float m = hn::GetLane(hn::MaxOfLanes(d, mx));
      if (!hn::AllFalse(d, bad) || m == -kInf<float>) {
        std::fill(o, o + dv, std::numeric_limits<float>::quiet_NaN());
        store();
        continue;
      }
      const auto vm = hn::Set(d, m);
      auto sum = hn::Zero(d);
      for (size_t j = 0; j < padded; j += lanes) {
        const auto p = hn::Exp(d, hn::Sub(hn::LoadU(d, s + j), vm));  // arguments <= 0
        hn::StoreU(p, d, s + j);
        sum = hn::Add(sum, p);
      }
      const auto* vrows = KvRows<in_registers>(vbase + kb * t.lv.ss, n, dv,
                                               static_cast<size_t>(t.lv.ss), kbuf + n * dim, &ldv);
      DecodeValues(s, vrows, n, dv, ldv, hn::GetLane(hn::SumOfLanes(d, sum)), o);
      store();
    }
  }
}

void DecodeRange(const AttentionTask& t, const KernelIO& io, int64_t begin, int64_t end) {
  switch (t.dtype) {
    case DType::f16:
      return DecodeImpl<f16>(t, io, begin, end);
    default:
      return DecodeImpl<float>(t, io, begin, end);
  }
}

void DirectRange(const AttentionTask& t, const KernelIO& io, int64_t begin, int64_t end,
                 int64_t run_end) {
  switch (t.dtype) {
    case DType::f32:
      return DirectImpl<float>(t, io, begin, end, run_end);
    case DType::f16:
      return DirectImpl<f16>(t, io, begin, end, run_end);
    case DType::bf16:
      return DirectImpl<bf16>(t, io, begin, end, run_end);
    default:
      return;
  }
}

void AttentionRange(const AttentionTask& t, const KernelIO& io, int64_t begin, int64_t end) {
  switch (t.dtype) {
    case DType::f32:
      return AttentionImpl<float>(t, io, begin, end);
    case DType::f64:
      return AttentionImpl<double>(t, io, begin, end);
    case DType::f16:
      return AttentionImpl<f16>(t, io, begin, end);
    case DType::bf16:
      return AttentionImpl<bf16>(t, io, begin, end);
    default:
      return;
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace rlx::cpu::attention_simd
HWY_AFTER_NAMESPACE();

// ---- kernel factory (compiled once)
#if HWY_ONCE
namespace rlx::cpu {
namespace attention_simd {

HWY_EXPORT(AttentionRange);
HWY_EXPORT(DirectRange);
HWY_EXPORT(DecodeRange);

namespace {

// The mask attributes of `node` (attention or packed_qkv_attention) into t, the mask tensor
// being operand t.m_in; t's shapes must be set. False where positions would not compare exactly.
bool read_mask(const Graph& g, const Node& node, AttentionTask& t) {
  t.scale = node.attrs.has("scale") ? node.attrs.get_float("scale")
                                    : 1.0 / std::sqrt(static_cast<double>(t.d));
  const std::string& kind = node.attrs.get_string("mask");
  t.mask = kind == "causal"           ? MaskKind::kCausal
           : kind == "sliding_window" ? MaskKind::kSlidingWindow
           : kind == "causal_lengths" ? MaskKind::kCausalLengths
           : kind == "bool"           ? MaskKind::kBool
           : kind == "bias"           ? MaskKind::kBias
                                      : MaskKind::kNone;
  t.window = std::min(node.attrs.get_int("window"), t.sk);
  // Positions are compared in the compute type's lanes: exact for integers below 2^24 in f32.
  if (t.dtype != DType::f64 && t.sq + t.sk + t.window >= (int64_t{1} << 24)) return false;
  const auto m_in = static_cast<size_t>(t.m_in);
  if (t.mask == MaskKind::kCausalLengths) {
    t.lengths_dtype = g.type(node.operands[m_in]).dtype;
  } else if (node.operands.size() == m_in + 1) {
    const Shape& ms = g.type(node.operands[m_in]).shape;
    int64_t stride = 1;
    for (int i = 3, j = ms.rank() - 1; i >= 0; --i, --j) {
      const int64_t size = j >= 0 ? ms[j] : 1;
      t.mask_strides[i] = size == 1 ? 0 : stride;
      stride *= size;
    }
  }
  return true;
}

// The kernel of task t: the decode, direct or blocked path (file comment).
Kernel make_kernel(AttentionTask t) {
  const DType dt = t.dtype;
  t.q_blocks = (t.sq + kBlockQ - 1) / kBlockQ;
  const int64_t items = t.q_blocks * t.batch * t.heads;
  if ((dt == DType::f32 || dt == DType::f16) && t.sq <= kDecodeMaxQueries &&
      t.mask != MaskKind::kBool && t.mask != MaskKind::kBias && t.d >= 1 && t.dv >= 1) {
    const int64_t rows = t.batch * t.heads;
    return [t, rows](const KernelIO& io) {
      parallel_for(0, rows, 1, [&](int64_t b, int64_t e) {
        HWY_DYNAMIC_DISPATCH(DecodeRange)(t, io, b, e);
      });
    };
  }
  if (dt != DType::f64 && t.mask != MaskKind::kCausal && t.mask != MaskKind::kSlidingWindow &&
      t.mask != MaskKind::kCausalLengths && t.sk >= 1 && t.sk <= kDirectMaxKeys && t.d >= 1 &&
      t.dv >= 1) {
    // Threads claim one (batch, head) at a time (its query blocks share K and V), so a worker
    // that starts late (a loaded machine) holds the call back by one head, not by half of them;
    // each goes through its own run of consecutive heads (parallel_runs), so the head it
    // prefetches during one is usually the one it takes next.
    return [t, items](const KernelIO& io) {
      parallel_runs(0, items, t.q_blocks, [&](const RunChunk& c) {
        HWY_DYNAMIC_DISPATCH(DirectRange)(t, io, c.begin, c.end, c.run_end);
      });
    };
  }
  return [t, items](const KernelIO& io) {
    parallel_for(0, items, 1, [&](int64_t b, int64_t e) {
      HWY_DYNAMIC_DISPATCH(AttentionRange)(t, io, b, e);
    });
  };
}

bool kernel_dtype(DType dt) {
  return dt == DType::f32 || dt == DType::f64 || dt == DType::f16 || dt == DType::bf16;
}

// attention: q [B,Hq,Sq,D], k [B,Hkv,Sk,D], v [B,Hkv,Sk,Dv] and the output contiguous.
Kernel attention_factory(const Graph& g, const Node& node) {
  const TensorType& qt = g.type(node.operands[0]);
  const DType dt = qt.dtype;
  if (!kernel_dtype(dt)) return {};
  for (size_t i = 1; i < 3; ++i)
    if (g.type(node.operands[i]).dtype != dt) return {};
  const Shape& ks = g.type(node.operands[1]).shape;
  const Shape& vs = g.type(node.operands[2]).shape;
  AttentionTask t{};
  t.dtype = dt;
  t.batch = qt.shape[0];
  t.heads = qt.shape[1];
  t.sq = qt.shape[2];
  t.d = qt.shape[3];
  t.kv_heads = ks[1];
  t.sk = ks[2];
  t.dv = vs[3];
  t.q_in = 0, t.k_in = 1, t.v_in = 2, t.m_in = 3;
  t.lq = {0, t.heads * t.sq * t.d, t.sq * t.d, t.d};
  t.lk = {0, t.kv_heads * t.sk * t.d, t.sk * t.d, t.d};
  t.lv = {0, t.kv_heads * t.sk * t.dv, t.sk * t.dv, t.dv};
  t.lo = {0, t.heads * t.sq * t.dv, t.sq * t.dv, t.dv};
  if (!read_mask(g, node, t)) return {};
  return make_kernel(t);
}

// packed_qkv_attention: q, k and v are the column blocks of qkv [B,S,(Hq+2Hkv)D] (rows of one
// token W = (Hq+2Hkv)D apart, heads D apart), read in place; the output is [B,S,Hq D].
Kernel packed_qkv_attention_factory(const Graph& g, const Node& node) {
  const TensorType& xt = g.type(node.operands[0]);
  if (!kernel_dtype(xt.dtype)) return {};
  AttentionTask t{};
  t.dtype = xt.dtype;
  t.heads = node.attrs.get_int("heads");
  t.kv_heads = node.attrs.has("kv_heads") ? node.attrs.get_int("kv_heads") : t.heads;
  const int64_t w = xt.shape[2];
  t.batch = xt.shape[0];
  t.sq = t.sk = xt.shape[1];
  t.d = t.dv = w / (t.heads + 2 * t.kv_heads);
  t.q_in = t.k_in = t.v_in = 0;
  t.m_in = 1;
  t.lq = {0, t.sq * w, t.d, w};
  t.lk = {t.heads * t.d, t.sq * w, t.d, w};
  t.lv = {(t.heads + t.kv_heads) * t.d, t.sq * w, t.d, w};
  t.lo = {0, t.sq * t.heads * t.d, t.d, t.heads * t.d};
  if (!read_mask(g, node, t)) return {};
  return make_kernel(t);
}

}  // namespace
}  // namespace attention_simd

void register_attention_kernels() {
  const char* why =
      "query + key positions (sq + sk + window) reach 2^24 outside f64, where positions no "
      "longer compare exactly in f32 lanes";
  register_native(OpKind::Attention, attention_simd::attention_factory, why);
  register_native(OpKind::PackedQkvAttention, attention_simd::packed_qkv_attention_factory, why);
}

}  // namespace rlx::cpu
#endif  // HWY_ONCE
