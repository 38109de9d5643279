// Native CPU kernels of the nn family: softmax, log_softmax, layer_norm, rms_norm, their fused
// residual forms, rope and softmax_cross_entropy, for f32, f16, bf16 and f64 (attention is in
// attention.cc and registered from here).
//
// Rows are computed in f32 (f64 for f64) with Highway SIMD code compiled for every x86 target and
// picked at run time (this file is re-included once per target by foreach_target.h); f16 / bf16
// rows are widened into per-thread f32 scratch, computed there and rounded once on store.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/nn.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#ifndef RLX_CPU_KERNELS_NN_SHARED
#define RLX_CPU_KERNELS_NN_SHARED

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "../kernel.h"
#include "half.h"
#include "rlx/opt/rewrite.h"
#include "rlx/runtime/threading.h"

namespace rlx::cpu::nn_simd {

/// softmax / log_softmax over axis of x viewed as [outer, n, inner]. Work units are rows
/// (inner == 1) or (outer index, block of kColumnBlock columns) pairs (inner > 1).
struct SoftmaxTask {
  DType dtype;
  int64_t outer, n, inner;
  bool log;
};
inline constexpr int64_t kColumnBlock = 1024;

/// layer_norm / rms_norm of rows of n elements; with `residual`, operand 1 is added first and
/// the sum is result 1 (the fused_residual_* ops). Work units are rows. `write_sum` is false
/// when nothing in the graph reads result 1 (a post-norm encoder such as BERT normalises the sum
/// and never reads it again): the sum then stays in a row buffer, one store stream less.
struct NormTask {
  DType dtype;
  int64_t rows, n;
  double eps;
  bool layer, residual, write_sum = true;
};

/// rope of x [..., D] viewed as rows of D; `lead` are x's leading dims (x.shape[:-1]) and the
/// strides are the element strides of cos / sin rows over them (0 where broadcast).
struct RopeTask {
  DType dtype;
  int64_t rows, d, half;
  bool neox;
  std::vector<int64_t> lead, cos_strides, sin_strides;
};

/// softmax_cross_entropy of rows of c logits with integer labels of dtype `labels`.
struct CrossEntropyTask {
  DType dtype, labels;
  int64_t rows, c;
};

/// Per-thread scratch of at least n elements of C in slot `slot` (< 5). Clones of one
/// executable run concurrently and share their kernels, so scratch is per thread, never
/// captured by a kernel.
template <class C>
C* scratch(size_t slot, size_t n) {
  thread_local std::vector<C> buffers[5];
  std::vector<C>& b = buffers[slot];
  if (b.size() < n) b.resize(n);
  return b.data();
}

}  // namespace rlx::cpu::nn_simd

#endif  // RLX_CPU_KERNELS_NN_SHARED

// ---- per-target SIMD code (math-inl.h and half-inl.h are per-target too, so they follow
// foreach_target.h)
#include <hwy/contrib/math/math-inl.h>

#include "half-inl.h"

HWY_BEFORE_NAMESPACE();
namespace rlx::cpu::nn_simd {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// f32 for every float storage type but f64.
template <class T>
using Calc = std::conditional_t<std::is_same_v<T, double>, double, float>;

using half_simd::HWY_NAMESPACE::Narrow;  // half-inl.h
using half_simd::HWY_NAMESPACE::Widen;

// A row of storage type T as Calc<T>: T's own memory when T is float / double, else widened into
// `buf`.
template <class T>
HWY_INLINE const Calc<T>* ReadRow(const T* src, size_t n, Calc<T>* buf) {
  if constexpr (std::is_same_v<T, Calc<T>>) {
    return src;
  } else {
    Widen(src, buf, n);
    return buf;
  }
}

// Where a row of results is computed: the destination itself, or `buf` for 16-bit storage
// (then WriteRow rounds it into the destination).
template <class T>
HWY_INLINE Calc<T>* RowTarget(T* dst, Calc<T>* buf) {
  if constexpr (std::is_same_v<T, Calc<T>>)
    return dst;
  else
    return buf;
}

template <class T>
HWY_INLINE void WriteRow(const Calc<T>* buf, T* dst, size_t n) {
  if constexpr (!std::is_same_v<T, Calc<T>>) Narrow(buf, dst, n);
}

// dst = src converted to Calc<T> (a copy for float / double).
template <class T>
HWY_INLINE void CopyToCalc(const T* src, Calc<T>* dst, size_t n) {
  if constexpr (std::is_same_v<T, Calc<T>>)
    std::copy(src, src + n, dst);
  else
    Widen(src, dst, n);
}

template <class T>
HWY_INLINE void CopyFromCalc(const Calc<T>* src, T* dst, size_t n) {
  if constexpr (std::is_same_v<T, Calc<T>>)
    std::copy(src, src + n, dst);
  else
    Narrow(src, dst, n);
}

template <class C>
constexpr C kNegInf = -std::numeric_limits<C>::infinity();
template <class C>
constexpr C kNaN = std::numeric_limits<C>::quiet_NaN();

template <class C>
HWY_INLINE void Fill(C* y, size_t n, C value) {
  std::fill(y, y + n, value);
}

// Max of x[0, n), and whether any element is NaN (x86 max drops NaN operands, so NaN is
// tracked separately; the max is meaningful only when there is none).
template <class C>
HWY_INLINE C RowMax(const C* HWY_RESTRICT x, size_t n, bool* any_nan) {
  const hn::ScalableTag<C> d;
  const size_t lanes = hn::Lanes(d);
  auto m0 = hn::Set(d, kNegInf<C>), m1 = m0;
  auto nan = hn::FirstN(d, 0);
  size_t i = 0;
  for (; i + 2 * lanes <= n; i += 2 * lanes) {
    const auto a = hn::LoadU(d, x + i), b = hn::LoadU(d, x + i + lanes);
    m0 = hn::Max(m0, a);
    m1 = hn::Max(m1, b);
    nan = hn::Or(nan, hn::Or(hn::IsNaN(a), hn::IsNaN(b)));
  }
  for (; i + lanes <= n; i += lanes) {
    const auto a = hn::LoadU(d, x + i);
    m0 = hn::Max(m0, a);
    nan = hn::Or(nan, hn::IsNaN(a));
  }
  C m = hn::GetLane(hn::MaxOfLanes(d, hn::Max(m0, m1)));
  bool found = !hn::AllFalse(d, nan);
  for (; i < n; ++i) {
    found = found || std::isnan(x[i]);
    m = x[i] > m ? x[i] : m;
  }
  *any_nan = found;
  return m;
}

// Sum of exp(x[i] - m) over i < n for a finite m >= every x[i] (arguments <= 0, so no overflow;
// Highway's exp is within 1 ulp and flushes arguments below -104 to 0, under f32's smallest
// subnormal). With e != nullptr the terms are stored there too.
template <class C>
HWY_INLINE C ExpSum(const C* HWY_RESTRICT x, C* e, size_t n, C m) {
  const hn::ScalableTag<C> d;
  const hn::CappedTag<C, 1> d1;
  const size_t lanes = hn::Lanes(d);
  const auto vm = hn::Set(d, m);
  auto s0 = hn::Zero(d), s1 = s0;
  size_t i = 0;
  for (; i + 2 * lanes <= n; i += 2 * lanes) {
    const auto a = hn::Exp(d, hn::Sub(hn::LoadU(d, x + i), vm));
    const auto b = hn::Exp(d, hn::Sub(hn::LoadU(d, x + i + lanes), vm));
    if (e != nullptr) {
      hn::StoreU(a, d, e + i);
      hn::StoreU(b, d, e + i + lanes);
    }
    s0 = hn::Add(s0, a);
    s1 = hn::Add(s1, b);
  }
  for (; i + lanes <= n; i += lanes) {
    const auto a = hn::Exp(d, hn::Sub(hn::LoadU(d, x + i), vm));
    if (e != nullptr) hn::StoreU(a, d, e + i);
    s0 = hn::Add(s0, a);
  }
  C sum = hn::GetLane(hn::SumOfLanes(d, hn::Add(s0, s1)));
  for (; i < n; ++i) {
    const C v = hn::GetLane(hn::Exp(d1, hn::Set(d1, x[i] - m)));
    if (e != nullptr) e[i] = v;
    sum += v;
  }
  return sum;
}

// softmax / log_softmax of one contiguous row (y may equal x). Max-subtracted as the reference:
// a row holding NaN or +inf, or all -inf, is NaN. Accuracy: softmax within ~3 ulp (exp 1 ulp,
// the rounding of x - max, one multiply by 1 / sum); log_softmax within 2 ulp of
// (x - max) - log(sum) plus the sum's rounding.
template <class C>
HWY_INLINE void SoftmaxRow(const C* x, C* y, size_t n, bool log) {
  bool any_nan = false;
  const C m = RowMax(x, n, &any_nan);
  if (any_nan || !std::isfinite(m)) return Fill(y, n, kNaN<C>);
  const C sum = ExpSum(x, log ? nullptr : y, n, m);  // >= 1: the max contributes exp(0)
  const hn::ScalableTag<C> d;
  const size_t lanes = hn::Lanes(d);
  size_t i = 0;
  if (log) {
    const C lse = std::log(sum);
    const auto vm = hn::Set(d, m), vl = hn::Set(d, lse);
    for (; i + lanes <= n; i += lanes)
      hn::StoreU(hn::Sub(hn::Sub(hn::LoadU(d, x + i), vm), vl), d, y + i);
    for (; i < n; ++i) y[i] = (x[i] - m) - lse;
  } else {
    const C inv = C(1) / sum;
    const auto vi = hn::Set(d, inv);
    for (; i + lanes <= n; i += lanes) hn::StoreU(hn::Mul(hn::LoadU(d, y + i), vi), d, y + i);
    for (; i < n; ++i) y[i] *= inv;
  }
}

// softmax / log_softmax down the columns of an [n, width] block of x whose rows are `stride`
// elements apart, into y alike: the strided-axis form of SoftmaxRow with a state per column in
// `state` (3 * width elements). The block's row segments stream in order through three passes:
// max (NaN-propagating); exp and sum; scale. f32 / f64 keep exp(x - max) in y between the last
// two; 16-bit storage cannot hold it unrounded, so there it is recomputed.
template <class T>
HWY_INLINE void SoftmaxStrided(const T* x, T* y, size_t stride, size_t n, size_t width, bool log,
                               Calc<T>* state) {
  using C = Calc<T>;
  constexpr bool kKeep = std::is_same_v<T, C>;
  const hn::ScalableTag<C> d;
  const size_t lanes = hn::Lanes(d);
  const size_t full = width / lanes * lanes;
  C *m = state, *sum = m + width, *buf = sum + width;
  std::fill(m, m + width, kNegInf<C>);
  std::fill(sum, sum + width, C(0));
  for (size_t j = 0; j < n; ++j) {
    const C* r = ReadRow(x + j * stride, width, buf);
    for (size_t c = 0; c < full; c += lanes) {
      const auto v = hn::LoadU(d, r + c), mv = hn::LoadU(d, m + c);
      const auto nan = hn::Or(hn::IsNaN(v), hn::IsNaN(mv));
      hn::StoreU(hn::IfThenElse(nan, hn::Add(v, mv), hn::Max(mv, v)), d, m + c);
    }
    for (size_t c = full; c < width; ++c) m[c] = std::isnan(r[c]) || r[c] > m[c] ? r[c] : m[c];
  }
  // A column holding NaN or +inf, or all -inf, is NaN: its max becomes NaN, which every later
  // step propagates (Highway's exp maps NaN to 0, so exp results are masked explicitly).
  for (size_t c = 0; c < width; ++c)
    if (!std::isfinite(m[c])) m[c] = kNaN<C>;
  const bool keep = kKeep && !log;
  for (size_t j = 0; j < n; ++j) {
    const C* r = ReadRow(x + j * stride, width, buf);
    C* e = keep ? reinterpret_cast<C*>(y + j * stride) : nullptr;
    size_t c = 0;
    for (; c < full; c += lanes) {
      const auto ev = hn::Exp(d, hn::Sub(hn::LoadU(d, r + c), hn::LoadU(d, m + c)));
      if (keep) hn::StoreU(ev, d, e + c);
      hn::StoreU(hn::Add(hn::LoadU(d, sum + c), ev), d, sum + c);
    }
    const hn::CappedTag<C, 1> d1;
    for (; c < width; ++c) {
      const C ev = hn::GetLane(hn::Exp(d1, hn::Set(d1, r[c] - m[c])));
      if (keep) e[c] = ev;
      sum[c] += ev;
    }
  }
  // sum becomes log(sum) (log_softmax) or 1 / sum (softmax), NaN for NaN columns.
  for (size_t c = 0; c < width; ++c)
    sum[c] = std::isnan(m[c]) ? kNaN<C> : log ? std::log(sum[c]) : C(1) / sum[c];
  for (size_t j = 0; j < n; ++j) {
    const C* r =
        keep ? reinterpret_cast<const C*>(y + j * stride) : ReadRow(x + j * stride, width, buf);
    C* o = RowTarget(y + j * stride, buf);
    size_t c = 0;
    for (; c < full; c += lanes) {
      const auto v = hn::LoadU(d, r + c), k = hn::LoadU(d, sum + c), mv = hn::LoadU(d, m + c);
      const auto res = log    ? hn::Sub(hn::Sub(v, mv), k)
                       : keep ? hn::Mul(v, k)
                              : hn::Mul(hn::Exp(d, hn::Sub(v, mv)), k);
      hn::StoreU(hn::IfThenElse(hn::IsNaN(k), k, res), d, o + c);
    }
    const hn::CappedTag<C, 1> d1;
    for (; c < width; ++c) {
      const C k = sum[c];
      o[c] = std::isnan(k) ? k
             : log         ? (r[c] - m[c]) - k
             : keep        ? r[c] * k
                           : hn::GetLane(hn::Exp(d1, hn::Set(d1, r[c] - m[c]))) * k;
    }
    WriteRow(buf, y + j * stride, width);
  }
}

template <class T>
void SoftmaxImpl(const SoftmaxTask& t, const KernelIO& io, int64_t begin, int64_t end) {
  using C = Calc<T>;
  const T* x = io.input<T>(0);
  T* y = io.output<T>(0);
  const auto n = static_cast<size_t>(t.n);
  if (t.inner == 1) {
    C* buf = std::is_same_v<T, C> ? nullptr : scratch<C>(0, n);
    for (int64_t r = begin; r < end; ++r) {
      const C* row = ReadRow(x + r * t.n, n, buf);
      SoftmaxRow(row, RowTarget(y + r * t.n, buf), n, t.log);
      WriteRow(buf, y + r * t.n, n);
    }
    return;
  }
  // Strided axis: blocks of kColumnBlock columns.
  const int64_t blocks = (t.inner + kColumnBlock - 1) / kColumnBlock;
  for (int64_t u = begin; u < end; ++u) {
    const int64_t o = u / blocks, c0 = (u % blocks) * kColumnBlock;
    const auto width = static_cast<size_t>(std::min(kColumnBlock, t.inner - c0));
    const int64_t base = o * t.n * t.inner + c0;
    SoftmaxStrided(x + base, y + base, static_cast<size_t>(t.inner), n, width, t.log,
                   scratch<C>(0, 3 * width));
  }
}

void SoftmaxRange(const SoftmaxTask& t, const KernelIO& io, int64_t begin, int64_t end) {
  switch (t.dtype) {
    case DType::f32:
      return SoftmaxImpl<float>(t, io, begin, end);
    case DType::f64:
      return SoftmaxImpl<double>(t, io, begin, end);
    case DType::f16:
      return SoftmaxImpl<f16>(t, io, begin, end);
    case DType::bf16:
      return SoftmaxImpl<bf16>(t, io, begin, end);
    default:
      return;
  }
}

// Sum of x[0, n) in vector lanes (pairwise across lanes).
template <class C>
HWY_INLINE C RowSum(const C* HWY_RESTRICT x, size_t n) {
  const hn::ScalableTag<C> d;
  const size_t lanes = hn::Lanes(d);
  auto s0 = hn::Zero(d), s1 = s0;
  size_t i = 0;
  for (; i + 2 * lanes <= n; i += 2 * lanes) {
    s0 = hn::Add(s0, hn::LoadU(d, x + i));
    s1 = hn::Add(s1, hn::LoadU(d, x + i + lanes));
  }
  for (; i + lanes <= n; i += lanes) s0 = hn::Add(s0, hn::LoadU(d, x + i));
  C s = hn::GetLane(hn::SumOfLanes(d, hn::Add(s0, s1)));
  for (; i < n; ++i) s += x[i];
  return s;
}

// Sum of (x[i] - mean)^2 over i < n.
template <class C>
HWY_INLINE C CenteredSquares(const C* HWY_RESTRICT x, size_t n, C mean) {
  const hn::ScalableTag<C> d;
  const size_t lanes = hn::Lanes(d);
  const auto vm = hn::Set(d, mean);
  auto s0 = hn::Zero(d), s1 = s0;
  size_t i = 0;
  for (; i + 2 * lanes <= n; i += 2 * lanes) {
    const auto a = hn::Sub(hn::LoadU(d, x + i), vm);
    const auto b = hn::Sub(hn::LoadU(d, x + i + lanes), vm);
    s0 = hn::MulAdd(a, a, s0);
    s1 = hn::MulAdd(b, b, s1);
  }
  for (; i + lanes <= n; i += lanes) {
    const auto a = hn::Sub(hn::LoadU(d, x + i), vm);
    s0 = hn::MulAdd(a, a, s0);
  }
  C s = hn::GetLane(hn::SumOfLanes(d, hn::Add(s0, s1)));
  for (; i < n; ++i) s += (x[i] - mean) * (x[i] - mean);
  return s;
}

// layer_norm (bias != nullptr) / rms_norm (mean 0) of one row: two passes like the reference
// (mean, then the mean of centred squares; never E[x^2] - E[x]^2), rsqrt(var + eps) in double,
// then y = (x - mean) * rstd * scale + bias. Accuracy: the f32 sums carry ~log2(n) ulp of
// rounding; each output is within a few ulp of the reference for well-conditioned rows.
template <class C>
HWY_INLINE void NormRow(const C* x, C* y, size_t n, const C* scale, const C* bias, double eps) {
  const C mean = bias != nullptr ? RowSum(x, n) / static_cast<C>(n) : C(0);
  const double var = static_cast<double>(CenteredSquares(x, n, mean)) / static_cast<double>(n);
  const auto rstd = static_cast<C>(1.0 / std::sqrt(var + eps));
  const hn::ScalableTag<C> d;
  const size_t lanes = hn::Lanes(d);
  const auto vm = hn::Set(d, mean), vr = hn::Set(d, rstd);
  size_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    const auto v = hn::Mul(hn::Sub(hn::LoadU(d, x + i), vm), vr);
    const auto s = hn::LoadU(d, scale + i);
    hn::StoreU(bias != nullptr ? hn::MulAdd(v, s, hn::LoadU(d, bias + i)) : hn::Mul(v, s), d,
               y + i);
  }
  for (; i < n; ++i) {
    const C v = (x[i] - mean) * rstd;
    y[i] = bias != nullptr ? v * scale[i] + bias[i] : v * scale[i];
  }
}

// y = a + b elementwise (y may be a).
template <class C>
HWY_INLINE void AddRows(const C* a, const C* b, C* y, size_t n) {
  const hn::ScalableTag<C> d;
  const size_t lanes = hn::Lanes(d);
  size_t i = 0;
  for (; i + lanes <= n; i += lanes)
    hn::StoreU(hn::Add(hn::LoadU(d, a + i), hn::LoadU(d, b + i)), d, y + i);
  for (; i < n; ++i) y[i] = a[i] + b[i];
}

// Operands: x, [residual,] scale[, bias]; results: y[, h = x + residual].
template <class T>
void NormImpl(const NormTask& t, const KernelIO& io, int64_t begin, int64_t end) {
  using C = Calc<T>;
  const auto n = static_cast<size_t>(t.n);
  const size_t p = t.residual ? 2 : 1;  // operand index of scale
  const T* x = io.input<T>(0);
  const T* res = t.residual ? io.input<T>(1) : nullptr;
  const C* scale = ReadRow(io.input<T>(p), n, scratch<C>(0, n));
  const C* bias = t.layer ? ReadRow(io.input<T>(p + 1), n, scratch<C>(1, n)) : nullptr;
  T* y = io.output<T>(0);
  T* h = t.residual && t.write_sum ? io.output<T>(1) : nullptr;
  // An unread sum of T rows lives in hbuf instead of h (its row rounded to T all the same).
  T* hbuf = t.residual && !t.write_sum ? scratch<T>(4, n) : nullptr;
  C* xbuf = std::is_same_v<T, C> ? nullptr : scratch<C>(2, n);
  C* ybuf = std::is_same_v<T, C> ? nullptr : scratch<C>(3, n);
  for (int64_t r = begin; r < end; ++r) {
    const int64_t off = r * t.n;
    T* hrow = h != nullptr ? h + off : hbuf;
    const C* row;
    if (res == nullptr) {
      row = ReadRow(x + off, n, xbuf);
    } else if constexpr (std::is_same_v<T, C>) {
      AddRows(x + off, res + off, hrow, n);
      row = hrow;
    } else {  // h is rounded to T (it is a result) and normalised as rounded, like the reference
      Widen(x + off, xbuf, n);
      Widen(res + off, ybuf, n);
      AddRows(xbuf, ybuf, xbuf, n);
      Narrow(xbuf, hrow, n);
      Widen(hrow, xbuf, n);
      row = xbuf;
    }
    NormRow(row, RowTarget(y + off, ybuf), n, scale, bias, t.eps);
    WriteRow(ybuf, y + off, n);
  }
}

void NormRange(const NormTask& t, const KernelIO& io, int64_t begin, int64_t end) {
  switch (t.dtype) {
    case DType::f32:
      return NormImpl<float>(t, io, begin, end);
    case DType::f64:
      return NormImpl<double>(t, io, begin, end);
    case DType::f16:
      return NormImpl<f16>(t, io, begin, end);
    case DType::bf16:
      return NormImpl<bf16>(t, io, begin, end);
    default:
      return;
  }
}

// Rotates one row of d values: neox pairs (i, i + half), gptj pairs (2i, 2i + 1), each
// (a, b) -> (a cos - b sin, b cos + a sin) with one fused multiply-add (within 1 ulp); dims
// from 2 * half on are copied.
template <class C>
HWY_INLINE void RopeRow(const C* HWY_RESTRICT x, C* HWY_RESTRICT y, const C* HWY_RESTRICT cs,
                        const C* HWY_RESTRICT sn, size_t dim, size_t half, bool neox) {
  const hn::ScalableTag<C> d;
  const size_t lanes = hn::Lanes(d);
  size_t i = 0;
  if (neox) {
    for (; i + lanes <= half; i += lanes) {
      const auto a = hn::LoadU(d, x + i), b = hn::LoadU(d, x + half + i);
      const auto c = hn::LoadU(d, cs + i), s = hn::LoadU(d, sn + i);
      hn::StoreU(hn::MulSub(a, c, hn::Mul(b, s)), d, y + i);
      hn::StoreU(hn::MulAdd(b, c, hn::Mul(a, s)), d, y + half + i);
    }
    for (; i < half; ++i) {
      const C a = x[i], b = x[half + i];
      y[i] = a * cs[i] - b * sn[i];
      y[half + i] = b * cs[i] + a * sn[i];
    }
  } else {
    for (; i + lanes <= half; i += lanes) {
      hn::Vec<decltype(d)> a, b;
      hn::LoadInterleaved2(d, x + 2 * i, a, b);
      const auto c = hn::LoadU(d, cs + i), s = hn::LoadU(d, sn + i);
      hn::StoreInterleaved2(hn::MulSub(a, c, hn::Mul(b, s)), hn::MulAdd(b, c, hn::Mul(a, s)), d,
                            y + 2 * i);
    }
    for (; i < half; ++i) {
      const C a = x[2 * i], b = x[2 * i + 1];
      y[2 * i] = a * cs[i] - b * sn[i];
      y[2 * i + 1] = b * cs[i] + a * sn[i];
    }
  }
  std::copy(x + 2 * half, x + dim, y + 2 * half);
}

template <class T>
void RopeImpl(const RopeTask& t, const KernelIO& io, int64_t begin, int64_t end) {
  using C = Calc<T>;
  const T* x = io.input<T>(0);
  const T* cos = io.input<T>(1);
  const T* sin = io.input<T>(2);
  T* y = io.output<T>(0);
  const auto dim = static_cast<size_t>(t.d), half = static_cast<size_t>(t.half);
  const bool narrow = !std::is_same_v<T, C>;
  C* xbuf = narrow ? scratch<C>(0, dim) : nullptr;
  C* ybuf = narrow ? scratch<C>(1, dim) : nullptr;
  C* cbuf = narrow ? scratch<C>(2, half) : nullptr;
  C* sbuf = narrow ? scratch<C>(3, half) : nullptr;
  // The multi-index of row `begin` over the leading dims, then advanced row by row (no
  // division per row).
  const size_t rank = t.lead.size();
  int64_t idx[16] = {};
  int64_t rest = begin, cos_off = 0, sin_off = 0;
  for (size_t k = rank; k-- > 0;) {
    idx[k] = rest % t.lead[k];
    rest /= t.lead[k];
    cos_off += idx[k] * t.cos_strides[k];
    sin_off += idx[k] * t.sin_strides[k];
  }
  for (int64_t r = begin; r < end; ++r) {
    const C* xr = ReadRow(x + r * t.d, dim, xbuf);
    const C* cr = ReadRow(cos + cos_off, half, cbuf);
    const C* sr = ReadRow(sin + sin_off, half, sbuf);
    RopeRow(xr, RowTarget(y + r * t.d, ybuf), cr, sr, dim, half, t.neox);
    WriteRow(ybuf, y + r * t.d, dim);
    for (size_t k = rank; k-- > 0;) {
      cos_off += t.cos_strides[k];
      sin_off += t.sin_strides[k];
      if (++idx[k] < t.lead[k]) break;
      cos_off -= idx[k] * t.cos_strides[k];
      sin_off -= idx[k] * t.sin_strides[k];
      idx[k] = 0;
    }
  }
}

void RopeRange(const RopeTask& t, const KernelIO& io, int64_t begin, int64_t end) {
  switch (t.dtype) {
    case DType::f32:
      return RopeImpl<float>(t, io, begin, end);
    case DType::f64:
      return RopeImpl<double>(t, io, begin, end);
    case DType::f16:
      return RopeImpl<f16>(t, io, begin, end);
    case DType::bf16:
      return RopeImpl<bf16>(t, io, begin, end);
    default:
      return;
  }
}

// -log_softmax(x)[label] = log(sum exp(x - max)) - (x[label] - max), NaN when the row holds
// NaN or +inf or is all -inf (as the reference). Accuracy: a few ulp of the larger of
// log(sum) and |x[label] - max|.
template <class C>
HWY_INLINE C CrossEntropyRow(const C* x, size_t n, size_t label) {
  bool any_nan = false;
  const C m = RowMax(x, n, &any_nan);
  if (any_nan || !std::isfinite(m)) return kNaN<C>;
  return -((x[label] - m) - std::log(ExpSum(x, static_cast<C*>(nullptr), n, m)));
}

template <class L>
HWY_INLINE int64_t LabelAt(const std::byte* labels, int64_t r) {
  return static_cast<int64_t>(reinterpret_cast<const L*>(labels)[r]);
}

template <class T>
void CrossEntropyImpl(const CrossEntropyTask& t, const KernelIO& io, int64_t begin, int64_t end) {
  using C = Calc<T>;
  const T* x = io.input<T>(0);
  T* y = io.output<T>(0);
  const auto n = static_cast<size_t>(t.c);
  C* buf = std::is_same_v<T, C> ? nullptr : scratch<C>(0, n);
  for (int64_t r = begin; r < end; ++r) {
    int64_t label = 0;
    switch (t.labels) {
      case DType::i8:
        label = LabelAt<int8_t>(io.in[1], r);
        break;
      case DType::u8:
        label = LabelAt<uint8_t>(io.in[1], r);
        break;
      case DType::i32:
        label = LabelAt<int32_t>(io.in[1], r);
        break;
      default:
        label = LabelAt<int64_t>(io.in[1], r);
        break;
    }
    label = std::clamp<int64_t>(label, 0, t.c - 1);  // as gather clamps
    const C loss = CrossEntropyRow(ReadRow(x + r * t.c, n, buf), n, static_cast<size_t>(label));
    if constexpr (std::is_same_v<T, C>)
      y[r] = loss;
    else
      y[r] = from_f32<T>(loss);
  }
}

void CrossEntropyRange(const CrossEntropyTask& t, const KernelIO& io, int64_t begin, int64_t end) {
  switch (t.dtype) {
    case DType::f32:
      return CrossEntropyImpl<float>(t, io, begin, end);
    case DType::f64:
      return CrossEntropyImpl<double>(t, io, begin, end);
    case DType::f16:
      return CrossEntropyImpl<f16>(t, io, begin, end);
    case DType::bf16:
      return CrossEntropyImpl<bf16>(t, io, begin, end);
    default:
      return;
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace rlx::cpu::nn_simd
HWY_AFTER_NAMESPACE();

// ---- kernel factories (compiled once)
#if HWY_ONCE
namespace rlx::cpu {

void register_attention_kernels();  // attention.cc

namespace nn_simd {

HWY_EXPORT(SoftmaxRange);
HWY_EXPORT(NormRange);
HWY_EXPORT(RopeRange);
HWY_EXPORT(CrossEntropyRange);

namespace {

bool is_float_storage(DType t) {
  return t == DType::f32 || t == DType::f64 || t == DType::f16 || t == DType::bf16;
}

// Whether some node of `g` or a graph output reads result `index` of `node` (use_counts; a
// node that is not one of g's own counts as read).
bool result_is_read(const Graph& g, const Node& node, size_t index) {
  const std::vector<Node>& nodes = g.nodes();
  if (&node < nodes.data() || &node >= nodes.data() + nodes.size()) return true;
  return use_counts(g)[static_cast<size_t>(&node - nodes.data())][index] > 0;
}

// Work units per parallel chunk so that a chunk holds at least kParallelChunkElements elements.
int64_t grain_for(int64_t elements_per_unit) {
  return std::max<int64_t>(1, kParallelChunkElements / std::max<int64_t>(1, elements_per_unit));
}

Kernel softmax_factory(const Graph& g, const Node& node) {
  const TensorType& x = g.type(node.operands[0]);
  if (!is_float_storage(x.dtype)) return {};
  const Shape& s = x.shape;
  const int axis = s.normalize_axis(node.attrs.get_int("axis"));
  SoftmaxTask t{x.dtype, 1, s[axis], 1, node.op == OpKind::LogSoftmax};
  for (int i = 0; i < axis; ++i) t.outer *= s[i];
  for (int i = axis + 1; i < s.rank(); ++i) t.inner *= s[i];
  const int64_t units =
      t.inner == 1 ? t.outer : t.outer * ((t.inner + kColumnBlock - 1) / kColumnBlock);
  const int64_t grain = grain_for(t.n * std::min(t.inner, kColumnBlock));
  return [t, units, grain](const KernelIO& io) {
    parallel_for(0, units, grain, [&](int64_t b, int64_t e) {
      HWY_DYNAMIC_DISPATCH(SoftmaxRange)(t, io, b, e);
    });
  };
}

Kernel norm_factory(const Graph& g, const Node& node) {
  const TensorType& x = g.type(node.operands[0]);
  if (!is_float_storage(x.dtype)) return {};
  const Shape& s = x.shape;
  const int axis = s.normalize_axis(node.attrs.get_int("axis"));
  const bool residual =
      node.op == OpKind::FusedResidualLayerNorm || node.op == OpKind::FusedResidualRmsNorm;
  const bool layer = node.op == OpKind::LayerNorm || node.op == OpKind::FusedResidualLayerNorm;
  NormTask t{x.dtype, 1, 1, node.attrs.get_float("eps"), layer, residual};
  if (residual) t.write_sum = result_is_read(g, node, 1);
  for (int i = 0; i < axis; ++i) t.rows *= s[i];
  for (int i = axis; i < s.rank(); ++i) t.n *= s[i];
  const int64_t grain = grain_for(t.n);
  return [t, grain](const KernelIO& io) {
    parallel_for(0, t.rows, grain, [&](int64_t b, int64_t e) {
      HWY_DYNAMIC_DISPATCH(NormRange)(t, io, b, e);
    });
  };
}

Kernel rope_factory(const Graph& g, const Node& node) {
  const TensorType& x = g.type(node.operands[0]);
  if (!is_float_storage(x.dtype)) return {};
  const Shape& s = x.shape;
  const int lead = s.rank() - 1;
  if (lead > 16) return {};  // RopeImpl's multi-index holds 16 dims
  RopeTask t{x.dtype, 1, s[lead], 0, node.attrs.get_string("layout") == "neox", {}, {}, {}};
  for (int i = 0; i < lead; ++i) {
    t.rows *= s[i];
    t.lead.push_back(s[i]);
  }
  // Element strides of the cos / sin rows over x's leading dims: their own row-major strides,
  // right-aligned to x, 0 where they broadcast.
  for (size_t k = 1; k < 3; ++k) {
    const Shape& cs = g.type(node.operands[k]).shape;
    t.half = cs[cs.rank() - 1];
    std::vector<int64_t> strides(static_cast<size_t>(lead), 0);
    int64_t stride = t.half;
    for (int i = cs.rank() - 2, j = lead - 1; i >= 0; --i, --j) {
      if (cs[i] != 1) strides[static_cast<size_t>(j)] = stride;
      stride *= cs[i];
    }
    (k == 1 ? t.cos_strides : t.sin_strides) = std::move(strides);
  }
  const int64_t grain = grain_for(t.d);
  return [t, grain](const KernelIO& io) {
    parallel_for(0, t.rows, grain, [&](int64_t b, int64_t e) {
      HWY_DYNAMIC_DISPATCH(RopeRange)(t, io, b, e);
    });
  };
}

Kernel cross_entropy_factory(const Graph& g, const Node& node) {
  const TensorType& logits = g.type(node.operands[0]);
  const DType labels = g.type(node.operands[1]).dtype;
  if (!is_float_storage(logits.dtype)) return {};
  if (labels != DType::i8 && labels != DType::u8 && labels != DType::i32 && labels != DType::i64)
    return {};
  const Shape& s = logits.shape;
  CrossEntropyTask t{logits.dtype, labels, 1, s[s.rank() - 1]};
  for (int i = 0; i + 1 < s.rank(); ++i) t.rows *= s[i];
  const int64_t grain = grain_for(t.c);
  return [t, grain](const KernelIO& io) {
    parallel_for(0, t.rows, grain, [&](int64_t b, int64_t e) {
      HWY_DYNAMIC_DISPATCH(CrossEntropyRange)(t, io, b, e);
    });
  };
}

}  // namespace
}  // namespace nn_simd

void register_nn_kernels() {
  register_native(OpKind::Softmax, nn_simd::softmax_factory);
  register_native(OpKind::LogSoftmax, nn_simd::softmax_factory);
  register_native(OpKind::LayerNorm, nn_simd::norm_factory);
  register_native(OpKind::RmsNorm, nn_simd::norm_factory);
  register_native(OpKind::FusedResidualLayerNorm, nn_simd::norm_factory);
  register_native(OpKind::FusedResidualRmsNorm, nn_simd::norm_factory);
  register_native(OpKind::Rope, nn_simd::rope_factory, "more than 16 leading dims");
  register_native(OpKind::SoftmaxCrossEntropy, nn_simd::cross_entropy_factory);
  register_attention_kernels();
}

}  // namespace rlx::cpu
#endif  // HWY_ONCE
