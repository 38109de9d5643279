// Native CPU kernels of the reduce family: reduce_sum / mean / max / min / prod, argmax /
// argmin, cumsum and top_k, for every dtype each op accepts.
//
// The sum / max / min inner loops are Highway SIMD code compiled for every x86 target and
// picked at run time (this file is re-included once per target by foreach_target.h).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/reduce.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#ifndef RLX_CPU_KERNELS_REDUCE_SHARED
#define RLX_CPU_KERNELS_REDUCE_SHARED

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "../kernel.h"
#include "half.h"
#include "rlx/runtime/threading.h"

namespace rlx::cpu::reduce_simd {

enum class ReduceOp : uint8_t { kSum, kMax, kMin };

/// A reduction's running value: `f` for float dtypes (sums in double, max/min exact), `u` for
/// integer sums and products (wrapping; reduced mod 2^bits of the dtype on store), `i` for
/// integer max/min.
union Acc {
  double f;
  int64_t i;
  uint64_t u;
};
static_assert(sizeof(Acc) == sizeof(double), "an Acc array is read as doubles by ReduceColumns");

/// Calls fn(T{}) with the storage type of numeric dtype `t` (bool is stored as uint8_t).
template <class F>
void visit_dtype(DType t, F&& fn) {
  switch (t) {
    case DType::f32:
      return fn(float{});
    case DType::f16:
      return fn(f16{});
    case DType::bf16:
      return fn(bf16{});
    case DType::f64:
      return fn(double{});
    case DType::i8:
      return fn(int8_t{});
    case DType::u8:
      return fn(uint8_t{});
    case DType::bool_:
      return fn(uint8_t{});
    case DType::i32:
      return fn(int32_t{});
    case DType::i64:
      return fn(int64_t{});
  }
}

template <class T>
inline constexpr bool kIsFloat =
    std::is_floating_point_v<T> || std::is_same_v<T, f16> || std::is_same_v<T, bf16>;

/// The type kernels compute in: f32 for the 16-bit floats (exact widening), else T itself.
template <class T>
using Compute = std::conditional_t<std::is_same_v<T, f16> || std::is_same_v<T, bf16>, float, T>;

template <class T>
inline Compute<T> load_compute(T v) {
  if constexpr (std::is_same_v<T, f16> || std::is_same_v<T, bf16>)
    return to_f32(v);
  else
    return v;
}

/// Sums of f32 / f16 / bf16 rows are formed in f32 lanes over blocks of this many elements
/// (column sums: over blocks of kSumRowBlock rows) and the block sums are added in double.
inline constexpr int64_t kSumBlock = 512;
inline constexpr int64_t kSumRowBlock = 64;
/// Columns reduced together by ReduceCols (at most).
inline constexpr int64_t kColumnBlock = 4096;

}  // namespace rlx::cpu::reduce_simd

#endif  // RLX_CPU_KERNELS_REDUCE_SHARED

// ---- per-target SIMD loops
HWY_BEFORE_NAMESPACE();
namespace rlx::cpu::reduce_simd {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

template <class D, class T>
HWY_INLINE hn::Vec<D> LoadLanes(D d, const T* HWY_RESTRICT p) {
  if constexpr (std::is_same_v<T, f16>) {
    const hn::Rebind<hwy::float16_t, D> dh;
    return hn::PromoteTo(d, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(p)));
  } else if constexpr (std::is_same_v<T, bf16>) {
    const hn::Rebind<hwy::bfloat16_t, D> dh;
    return hn::PromoteTo(d, hn::LoadU(dh, reinterpret_cast<const hwy::bfloat16_t*>(p)));
  } else {
    return hn::LoadU(d, p);
  }
}

template <ReduceOp kOp, class L>
constexpr L identity_of() {
  if constexpr (kOp == ReduceOp::kSum) return L{0};
  if constexpr (kOp == ReduceOp::kMax)
    return std::is_floating_point_v<L> ? -std::numeric_limits<L>::infinity()
                                       : std::numeric_limits<L>::lowest();
  return std::is_floating_point_v<L> ? std::numeric_limits<L>::infinity()
                                     : std::numeric_limits<L>::max();
}

template <ReduceOp kOp, class V>
HWY_INLINE V Apply(V a, V b) {
  if constexpr (kOp == ReduceOp::kSum) return hn::Add(a, b);
  if constexpr (kOp == ReduceOp::kMax) return hn::Max(a, b);
  if constexpr (kOp == ReduceOp::kMin) return hn::Min(a, b);
}

// Scalar form of Apply. Integer sums wrap (done in the unsigned type: no signed overflow);
// float max/min ignore NaN here because NaN is tracked separately (see Fold).
template <ReduceOp kOp, class L>
HWY_INLINE L ApplyScalar(L a, L b) {
  if constexpr (kOp == ReduceOp::kSum) {
    if constexpr (std::is_integral_v<L>) {
      using U = std::make_unsigned_t<L>;
      return static_cast<L>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
    } else {
      return a + b;
    }
  }
  if constexpr (kOp == ReduceOp::kMax) return b > a ? b : a;
  if constexpr (kOp == ReduceOp::kMin) return b < a ? b : a;
}

// Folds a partial result into an accumulator: float sums in double, float max/min with NaN
// propagation (lax.max/min), integer sums with 64-bit wrap-around, integer max/min in int64.
template <ReduceOp kOp, class L>
HWY_INLINE void Fold(Acc& acc, L part) {
  if constexpr (std::is_floating_point_v<L>) {
    double p = static_cast<double>(part);
    if constexpr (kOp == ReduceOp::kSum) {
      acc.f += p;
    } else if (std::isnan(acc.f) || std::isnan(p)) {
      acc.f = std::numeric_limits<double>::quiet_NaN();
    } else {
      acc.f = kOp == ReduceOp::kMax ? std::max(acc.f, p) : std::min(acc.f, p);
    }
  } else if constexpr (kOp == ReduceOp::kSum) {
    acc.u += static_cast<uint64_t>(static_cast<int64_t>(part));
  } else {
    auto p = static_cast<int64_t>(part);
    acc.i = kOp == ReduceOp::kMax ? std::max(acc.i, p) : std::min(acc.i, p);
  }
}

// Folds the n contiguous elements at x into `acc`. Float max/min track NaN lanes in a mask
// vector because hn::Max/Min do not propagate NaN. Accuracy of f32/f16/bf16 sums: each block
// of kSumBlock elements is summed in f32 (4 vector accumulators of kSumBlock / (4 * lanes)
// elements each, combined, the lanes folded, then at most 4 * lanes - 1 tail elements): at
// most ~90 roundings on 16-lane AVX-512 (fewer on narrower targets), so the error is below
// ~90 * 2^-24 (5e-6) of the block's sum of |x| (typically ~1e-7); the block sums are added in
// double. f64 sums use the same tree in double.
template <ReduceOp kOp, class T>
HWY_NOINLINE void ReduceRow(const T* HWY_RESTRICT x, int64_t n, Acc& acc) {
  using L = Compute<T>;
  constexpr bool kTrackNan = std::is_floating_point_v<L> && kOp != ReduceOp::kSum;
  const hn::ScalableTag<L> d;
  const auto lanes = static_cast<int64_t>(hn::Lanes(d));
  const int64_t block = kOp == ReduceOp::kSum && std::is_same_v<L, float> ? kSumBlock : n;
  HWY_ALIGN L buf[HWY_MAX_BYTES / sizeof(L)];
  HWY_ALIGN L nan_buf[HWY_MAX_BYTES / sizeof(L)];
  for (int64_t start = 0; start < n; start += block) {
    const int64_t len = std::min(block, n - start);
    const T* p = x + start;
    auto v0 = hn::Set(d, identity_of<kOp, L>()), v1 = v0, v2 = v0, v3 = v0;
    auto nan = hn::Zero(d);
    int64_t j = 0;
    for (; j + 4 * lanes <= len; j += 4 * lanes) {
      auto a0 = LoadLanes(d, p + j), a1 = LoadLanes(d, p + j + lanes);
      auto a2 = LoadLanes(d, p + j + 2 * lanes), a3 = LoadLanes(d, p + j + 3 * lanes);
      v0 = Apply<kOp>(v0, a0);
      v1 = Apply<kOp>(v1, a1);
      v2 = Apply<kOp>(v2, a2);
      v3 = Apply<kOp>(v3, a3);
      if constexpr (kTrackNan) {
        auto m =
            hn::Or(hn::Or(hn::VecFromMask(d, hn::IsNaN(a0)), hn::VecFromMask(d, hn::IsNaN(a1))),
                   hn::Or(hn::VecFromMask(d, hn::IsNaN(a2)), hn::VecFromMask(d, hn::IsNaN(a3))));
        nan = hn::Or(nan, m);
      }
    }
    for (; j + lanes <= len; j += lanes) {
      auto a = LoadLanes(d, p + j);
      v0 = Apply<kOp>(v0, a);
      if constexpr (kTrackNan) nan = hn::Or(nan, hn::VecFromMask(d, hn::IsNaN(a)));
    }
    v0 = Apply<kOp>(Apply<kOp>(v0, v1), Apply<kOp>(v2, v3));
    hn::Store(v0, d, buf);
    L part = buf[0];
    for (int64_t k = 1; k < lanes; ++k) part = ApplyScalar<kOp>(part, buf[k]);
    bool saw_nan = false;
    for (; j < len; ++j) {
      L v = load_compute(p[j]);
      if constexpr (kTrackNan) saw_nan = saw_nan || std::isnan(v);
      part = ApplyScalar<kOp>(part, v);
    }
    if constexpr (kTrackNan) {
      hn::Store(nan, d, nan_buf);
      for (int64_t k = 0; k < lanes; ++k) saw_nan = saw_nan || std::isnan(nan_buf[k]);
      if (saw_nan) part = std::numeric_limits<L>::quiet_NaN();
    }
    Fold<kOp>(acc, part);
  }
}

// acc[c] folds column c < width (<= kColumnBlock) of `rows` rows that are `stride` elements
// apart. Rows are streamed whole (one contiguous run of the block each, four rows combined per
// pass) into per-column partials held in cache; a tail of columns narrower than a vector folds
// element by element. Accuracy of f32/f16/bf16 sums: f32 partials over blocks of kSumRowBlock
// rows (kSumRowBlock / 4 + 2 roundings each), each block then added in double: the error is
// below ~18 * 2^-24 (1e-6) of the block's column sum of |x|.
template <ReduceOp kOp, class T>
HWY_NOINLINE void ReduceColumns(const T* HWY_RESTRICT x, int64_t rows, int64_t stride,
                                int64_t width, Acc* acc) {
  using L = Compute<T>;
  constexpr bool kTrackNan = std::is_floating_point_v<L> && kOp != ReduceOp::kSum;
  const hn::ScalableTag<L> d;
  const auto lanes = static_cast<int64_t>(hn::Lanes(d));
  const int64_t vec_width = width / lanes * lanes;
  const int64_t block = kOp == ReduceOp::kSum && std::is_same_v<L, float> ? kSumRowBlock : rows;
  HWY_ALIGN L part[kColumnBlock];
  HWY_ALIGN L nan[kTrackNan ? kColumnBlock : 1];
  for (int64_t r0 = 0; r0 < rows && vec_width > 0; r0 += block) {
    const int64_t r1 = std::min(rows, r0 + block);
    for (int64_t c = 0; c < vec_width; c += lanes) {
      hn::Store(hn::Set(d, identity_of<kOp, L>()), d, part + c);
      if constexpr (kTrackNan) hn::Store(hn::Zero(d), d, nan + c);
    }
    int64_t r = r0;
    for (; r + 4 <= r1; r += 4) {  // four rows per pass over the partials
      const T* p = x + r * stride;
      for (int64_t c = 0; c < vec_width; c += lanes) {
        auto a0 = LoadLanes(d, p + c), a1 = LoadLanes(d, p + stride + c);
        auto a2 = LoadLanes(d, p + 2 * stride + c), a3 = LoadLanes(d, p + 3 * stride + c);
        auto a = Apply<kOp>(Apply<kOp>(a0, a1), Apply<kOp>(a2, a3));
        hn::Store(Apply<kOp>(hn::Load(d, part + c), a), d, part + c);
        if constexpr (kTrackNan) {
          auto m =
              hn::Or(hn::Or(hn::VecFromMask(d, hn::IsNaN(a0)), hn::VecFromMask(d, hn::IsNaN(a1))),
                     hn::Or(hn::VecFromMask(d, hn::IsNaN(a2)), hn::VecFromMask(d, hn::IsNaN(a3))));
          hn::Store(hn::Or(hn::Load(d, nan + c), m), d, nan + c);
        }
      }
    }
    for (; r < r1; ++r) {
      const T* p = x + r * stride;
      for (int64_t c = 0; c < vec_width; c += lanes) {
        auto a = LoadLanes(d, p + c);
        hn::Store(Apply<kOp>(hn::Load(d, part + c), a), d, part + c);
        if constexpr (kTrackNan)
          hn::Store(hn::Or(hn::Load(d, nan + c), hn::VecFromMask(d, hn::IsNaN(a))), d, nan + c);
      }
    }
    if constexpr (kOp == ReduceOp::kSum && std::is_same_v<L, float>) {
      // acc[c].f += part[c], vectorized: this runs every kSumRowBlock rows.
      const hn::ScalableTag<double> dd;
      const hn::Rebind<float, decltype(dd)> df;
      const auto dlanes = static_cast<int64_t>(hn::Lanes(dd));
      double* sums = &acc[0].f;  // Acc is one 8-byte member: an array of doubles here
      int64_t c = 0;
      for (; c + dlanes <= vec_width; c += dlanes)
        hn::StoreU(hn::Add(hn::LoadU(dd, sums + c), hn::PromoteTo(dd, hn::Load(df, part + c))), dd,
                   sums + c);
      for (; c < vec_width; ++c) sums[c] += static_cast<double>(part[c]);
    } else {
      for (int64_t c = 0; c < vec_width; ++c) {
        L v = part[c];
        if constexpr (kTrackNan)
          if (std::isnan(nan[c])) v = std::numeric_limits<L>::quiet_NaN();
        Fold<kOp>(acc[c], v);
      }
    }
  }
  for (int64_t c = vec_width; c < width; ++c) {
    for (int64_t r = 0; r < rows; ++r) {
      L v = load_compute(x[r * stride + c]);
      // One element at a time: Fold handles NaN (and its f32 sums run in double).
      Fold<kOp>(acc[c], v);
    }
  }
}

template <class F>
void WithOp(ReduceOp op, F&& fn) {
  switch (op) {
    case ReduceOp::kSum:
      return fn(std::integral_constant<ReduceOp, ReduceOp::kSum>{});
    case ReduceOp::kMax:
      return fn(std::integral_constant<ReduceOp, ReduceOp::kMax>{});
    case ReduceOp::kMin:
      return fn(std::integral_constant<ReduceOp, ReduceOp::kMin>{});
  }
}

// acc[r] folds row r of `rows` contiguous rows of n elements of dtype t.
void ReduceRows(ReduceOp op, DType t, const std::byte* x, int64_t rows, int64_t n, Acc* acc) {
  visit_dtype(t, [&](auto tag) {
    using T = decltype(tag);
    WithOp(op, [&](auto kop) {
      const T* p = reinterpret_cast<const T*>(x);
      for (int64_t r = 0; r < rows; ++r) ReduceRow<kop.value>(p + r * n, n, acc[r]);
    });
  });
}

// acc[c] folds column c < width of `rows` rows of dtype t that are `stride` elements apart.
void ReduceCols(ReduceOp op, DType t, const std::byte* x, int64_t rows, int64_t stride,
                int64_t width, Acc* acc) {
  visit_dtype(t, [&](auto tag) {
    using T = decltype(tag);
    WithOp(op, [&](auto kop) {
      ReduceColumns<kop.value>(reinterpret_cast<const T*>(x), rows, stride, width, acc);
    });
  });
}

}  // namespace HWY_NAMESPACE
}  // namespace rlx::cpu::reduce_simd
HWY_AFTER_NAMESPACE();

#if HWY_ONCE

namespace rlx::cpu {
namespace reduce_simd {
HWY_EXPORT(ReduceRows);
HWY_EXPORT(ReduceCols);

// The best target's ReduceRows / ReduceCols (chosen on the first call).
void simd_rows(ReduceOp op, DType t, const std::byte* x, int64_t rows, int64_t n, Acc* acc) {
  HWY_DYNAMIC_DISPATCH(ReduceRows)(op, t, x, rows, n, acc);
}
void simd_cols(ReduceOp op, DType t, const std::byte* x, int64_t rows, int64_t stride,
               int64_t width, Acc* acc) {
  HWY_DYNAMIC_DISPATCH(ReduceCols)(op, t, x, rows, stride, width, acc);
}
}  // namespace reduce_simd

namespace {

using reduce_simd::Acc;
using reduce_simd::Compute;
using reduce_simd::kIsFloat;
using reduce_simd::load_compute;
using reduce_simd::visit_dtype;

// More merged dims than this take the reference kernel (no real graph comes close).
constexpr int kMaxDims = 16;
// Work below this many elements per task is not worth waking the pool for.
constexpr int64_t kGrainElems = kParallelChunkElements;

// ---------------------------------------------------------------- reduce_{sum,mean,max,min,prod}

enum class Reduction : uint8_t { kSum, kMean, kMax, kMin, kProd };

template <class T>
Acc identity(Reduction r) {
  Acc a{};
  if constexpr (kIsFloat<T>) {
    if (r == Reduction::kProd) a.f = 1;
    if (r == Reduction::kMax) a.f = -INFINITY;
    if (r == Reduction::kMin) a.f = INFINITY;
  } else {
    if (r == Reduction::kProd) a.u = 1;
    if (r == Reduction::kMax) a.i = std::numeric_limits<T>::lowest();
    if (r == Reduction::kMin) a.i = std::numeric_limits<T>::max();
  }
  return a;
}

// Folds one element (or another accumulator's value) into `a`, as the reference does: floats
// in double (max/min propagate NaN), integer sums and products wrapping in 64 bits.
template <class T>
void fold(Reduction r, Acc& a, Acc b) {
  if constexpr (kIsFloat<T>) {
    switch (r) {
      case Reduction::kSum:
      case Reduction::kMean:
        a.f += b.f;
        return;
      case Reduction::kProd:
        a.f *= b.f;
        return;
      case Reduction::kMax:
      case Reduction::kMin:
        if (std::isnan(a.f) || std::isnan(b.f))
          a.f = NAN;
        else
          a.f = r == Reduction::kMax ? std::max(a.f, b.f) : std::min(a.f, b.f);
        return;
    }
  } else {
    switch (r) {
      case Reduction::kSum:
      case Reduction::kMean:
        a.u += b.u;
        return;
      case Reduction::kProd:
        a.u *= b.u;
        return;
      case Reduction::kMax:
        a.i = std::max(a.i, b.i);
        return;
      case Reduction::kMin:
        a.i = std::min(a.i, b.i);
        return;
    }
  }
}

template <class T>
Acc element_acc(T v) {
  Acc a{};
  if constexpr (kIsFloat<T>)
    a.f = static_cast<double>(load_compute(v));
  else
    a.i = static_cast<int64_t>(v);  // a.u holds the same bits: the wrap-around value
  return a;
}

// Stores a finished accumulator: floats rounded once from double (the mean divided by `count`
// first, 0 / 0 = NaN for an empty mean), integers wrapped to the dtype.
template <class T>
T finish(Reduction r, Acc a, double count) {
  if constexpr (kIsFloat<T>) {
    double v = r == Reduction::kMean ? a.f / count : a.f;
    if constexpr (std::is_same_v<T, f16>)
      return f16_from_double(v);
    else if constexpr (std::is_same_v<T, bf16>)
      return bf16_from_double(v);
    else
      return static_cast<T>(v);
  } else if (r == Reduction::kMax || r == Reduction::kMin) {
    return static_cast<T>(a.i);
  } else {
    return static_cast<T>(a.u);
  }
}

reduce_simd::ReduceOp simd_op(Reduction r) {
  switch (r) {
    case Reduction::kMax:
      return reduce_simd::ReduceOp::kMax;
    case Reduction::kMin:
      return reduce_simd::ReduceOp::kMin;
    default:
      return reduce_simd::ReduceOp::kSum;
  }
}

// A reduction over x's merged dims. Canonical (one reduced run of dims): x is
// [outer, reduced, inner] and the SIMD row / column loops apply. General (reduced dims not
// adjacent, or reduce_prod): an odometer over the kept dims, a strided loop over the reduced.
struct ReducePlan {
  Reduction kind = Reduction::kSum;
  DType dtype = DType::f32;
  double count = 1;    // elements per output (the mean's divisor)
  bool empty = false;  // the reduced extent is 0: every output is the identity
  bool canonical = true;
  int64_t outer = 1, reduced = 1, inner = 1;
  std::vector<int64_t> kept_dims, kept_strides, red_dims, red_strides;
  int64_t n_out = 1;
};

template <class T>
void fill_identity(const ReducePlan& p, T* out) {
  std::fill(out, out + p.n_out, finish<T>(p.kind, identity<T>(p.kind), p.count));
}

// inner == 1: each output reduces one contiguous row. Few long rows are split into chunks
// reduced in parallel and folded in chunk order (the split depends on the shape only, so
// results do not depend on the thread count).
template <class T>
void reduce_rows(const ReducePlan& p, const T* x, T* out) {
  auto* rows = reduce_simd::simd_rows;
  const reduce_simd::ReduceOp op = simd_op(p.kind);
  constexpr int64_t kSplit = 1 << 16;
  if (p.outer < 8 && p.reduced >= 2 * kSplit) {
    const int64_t chunks = std::min<int64_t>(64, p.reduced / kSplit);
    Acc partial[8 * 64];
    parallel_for(0, p.outer * chunks, 1, [&](int64_t b, int64_t e) {
      for (int64_t item = b; item < e; ++item) {
        int64_t o = item / chunks, c = item % chunks;
        int64_t lo = p.reduced * c / chunks, hi = p.reduced * (c + 1) / chunks;
        partial[item] = identity<T>(p.kind);
        rows(op, p.dtype, reinterpret_cast<const std::byte*>(x + o * p.reduced + lo), 1, hi - lo,
             &partial[item]);
      }
    });
    for (int64_t o = 0; o < p.outer; ++o) {
      Acc a = partial[o * chunks];
      for (int64_t c = 1; c < chunks; ++c) fold<T>(p.kind, a, partial[o * chunks + c]);
      out[o] = finish<T>(p.kind, a, p.count);
    }
    return;
  }
  const int64_t grain = std::max<int64_t>(1, kGrainElems / p.reduced);
  parallel_for(0, p.outer, grain, [&](int64_t b, int64_t e) {
    constexpr int64_t kBatch = 256;
    Acc acc[kBatch];
    for (int64_t o = b; o < e; o += kBatch) {
      const int64_t m = std::min(kBatch, e - o);
      std::fill(acc, acc + m, identity<T>(p.kind));
      rows(op, p.dtype, reinterpret_cast<const std::byte*>(x + o * p.reduced), m, p.reduced, acc);
      for (int64_t k = 0; k < m; ++k) out[o + k] = finish<T>(p.kind, acc[k], p.count);
    }
  });
}

// inner > 1: outputs [o, c .. c + w) fold w contiguous columns over `reduced` rows; tasks are
// (outer row, column block) pairs. Few tasks over many rows also split the rows into chunks
// whose partial results are folded in chunk order (the split depends on the shape only, so
// results do not depend on the thread count).
template <class T>
void reduce_columns(const ReducePlan& p, const T* x, T* out) {
  auto* cols = reduce_simd::simd_cols;
  const reduce_simd::ReduceOp op = simd_op(p.kind);
  constexpr int64_t kWidth = reduce_simd::kColumnBlock;
  const int64_t blocks = (p.inner + kWidth - 1) / kWidth;
  const int64_t tasks = p.outer * blocks;
  const int64_t chunks = tasks >= 8 ? 1 : std::clamp<int64_t>(p.reduced / 512, 1, 16);
  // One task's columns of one row chunk: rows [lo, hi) into acc[0, w).
  auto run = [&](int64_t task, int64_t lo, int64_t hi, Acc* acc) {
    const int64_t o = task / blocks, c = (task % blocks) * kWidth;
    const int64_t w = std::min(kWidth, p.inner - c);
    std::fill(acc, acc + w, identity<T>(p.kind));
    cols(op, p.dtype, reinterpret_cast<const std::byte*>(x + (o * p.reduced + lo) * p.inner + c),
         hi - lo, p.inner, w, acc);
    return std::pair{o * p.inner + c, w};
  };
  if (chunks == 1) {
    const int64_t grain =
        std::max<int64_t>(1, kGrainElems / (p.reduced * std::min(kWidth, p.inner)));
    parallel_for(0, tasks, grain, [&](int64_t b, int64_t e) {
      Acc acc[kWidth];
      for (int64_t task = b; task < e; ++task) {
        auto [at, w] = run(task, 0, p.reduced, acc);
        for (int64_t k = 0; k < w; ++k) out[at + k] = finish<T>(p.kind, acc[k], p.count);
      }
    });
    return;
  }
  thread_local std::vector<Acc> scratch;  // per calling thread: clones run concurrently
  scratch.resize(static_cast<size_t>(tasks * chunks * kWidth));
  Acc* partial = scratch.data();
  parallel_for(0, tasks * chunks, 1, [&](int64_t b, int64_t e) {
    for (int64_t item = b; item < e; ++item) {
      const int64_t task = item / chunks, c = item % chunks;
      run(task, p.reduced * c / chunks, p.reduced * (c + 1) / chunks, partial + item * kWidth);
    }
  });
  for (int64_t task = 0; task < tasks; ++task) {
    const int64_t o = task / blocks, c0 = (task % blocks) * kWidth;
    const int64_t w = std::min(kWidth, p.inner - c0);
    for (int64_t k = 0; k < w; ++k) {
      Acc a = partial[task * chunks * kWidth + k];
      for (int64_t c = 1; c < chunks; ++c)
        fold<T>(p.kind, a, partial[(task * chunks + c) * kWidth + k]);
      out[o * p.inner + c0 + k] = finish<T>(p.kind, a, p.count);
    }
  }
}

// The general strided loop: each output walks its reduced elements with an odometer (the
// innermost reduced dim as a tight loop), folding one element at a time in the reference's
// accumulator types.
template <class T>
void reduce_general(const ReducePlan& p, const T* x, T* out) {
  const int kr = static_cast<int>(p.kept_dims.size());
  const int rr = static_cast<int>(p.red_dims.size());
  const int64_t grain = std::max<int64_t>(1, kGrainElems / std::max<int64_t>(1, p.reduced));
  parallel_for(0, p.n_out, grain, [&](int64_t b, int64_t e) {
    int64_t kidx[kMaxDims] = {}, ridx[kMaxDims] = {};
    int64_t base = 0;
    for (int64_t rem = b, k = kr - 1; k >= 0; --k) {  // unravel b over the kept dims
      kidx[k] = rem % p.kept_dims[k];
      rem /= p.kept_dims[k];
      base += kidx[k] * p.kept_strides[k];
    }
    const int64_t last_n = p.red_dims[rr - 1], last_s = p.red_strides[rr - 1];
    for (int64_t o = b; o < e; ++o) {
      Acc a = identity<T>(p.kind);
      std::fill(ridx, ridx + rr, 0);
      int64_t off = base;
      for (;;) {
        for (int64_t j = 0; j < last_n; ++j) fold<T>(p.kind, a, element_acc(x[off + j * last_s]));
        int k = rr - 2;
        for (; k >= 0; --k) {
          off += p.red_strides[k];
          if (++ridx[k] < p.red_dims[k]) break;
          off -= ridx[k] * p.red_strides[k];
          ridx[k] = 0;
        }
        if (k < 0) break;
      }
      out[o] = finish<T>(p.kind, a, p.count);
      for (int k = kr - 1; k >= 0; --k) {
        base += p.kept_strides[k];
        if (++kidx[k] < p.kept_dims[k]) break;
        base -= kidx[k] * p.kept_strides[k];
        kidx[k] = 0;
      }
    }
  });
}

Kernel make_reduce(const Graph& g, const Node& node) {
  const TensorType& xt = g.type(node.operands[0]);
  const Shape& in = xt.shape;
  ReducePlan p;
  switch (node.op) {
    case OpKind::ReduceSum:
      p.kind = Reduction::kSum;
      break;
    case OpKind::ReduceMean:
      p.kind = Reduction::kMean;
      break;
    case OpKind::ReduceMax:
      p.kind = Reduction::kMax;
      break;
    case OpKind::ReduceMin:
      p.kind = Reduction::kMin;
      break;
    default:
      p.kind = Reduction::kProd;
      break;
  }
  p.dtype = xt.dtype;
  if (is_bool(p.dtype) || (p.kind == Reduction::kMean && !is_float(p.dtype))) return {};
  std::vector<bool> mask(static_cast<size_t>(in.rank()), false);
  for (int64_t a : node.attrs.get_ints("axes"))
    mask[static_cast<size_t>(in.normalize_axis(a))] = true;
  p.count = 1;
  for (int i = 0; i < in.rank(); ++i)
    if (mask[static_cast<size_t>(i)]) p.count *= static_cast<double>(in[i]);
  p.n_out = node.results[0].shape.numel();
  p.empty = p.count == 0;

  // Merge runs of adjacent kept / reduced dims (size-1 dims dropped), innermost last.
  std::vector<int64_t> dims, strides;
  std::vector<bool> red;
  const std::vector<int64_t> row_strides = in.strides();
  for (int i = 0; i < in.rank(); ++i) {
    if (in[i] == 1) continue;
    bool r = mask[static_cast<size_t>(i)];
    if (!dims.empty() && red.back() == r) {
      dims.back() *= in[i];
      strides.back() = row_strides[static_cast<size_t>(i)];
    } else {
      dims.push_back(in[i]);
      strides.push_back(row_strides[static_cast<size_t>(i)]);
      red.push_back(r);
    }
  }
  int reduced_runs = 0;
  for (bool r : red) reduced_runs += r;
  p.canonical = p.kind != Reduction::kProd && reduced_runs <= 1;
  if (p.canonical) {
    bool seen = false;
    for (size_t i = 0; i < dims.size(); ++i) {
      if (red[i]) {
        p.reduced = dims[i];
        seen = true;
      } else {
        (seen ? p.inner : p.outer) *= dims[i];
      }
    }
    if (!seen) {  // nothing is reduced: a [1, 1, n] column pass copies (and rounds) x
      p.inner *= p.outer;
      p.outer = 1;
    }
  } else {
    for (size_t i = 0; i < dims.size(); ++i) {
      (red[i] ? p.red_dims : p.kept_dims).push_back(dims[i]);
      (red[i] ? p.red_strides : p.kept_strides).push_back(strides[i]);
    }
    if (p.red_dims.empty()) {  // reduce_prod over size-1 dims only
      p.red_dims.push_back(1);
      p.red_strides.push_back(1);
    }
    if (p.kept_dims.size() > kMaxDims || p.red_dims.size() > kMaxDims) return {};
  }
  p.reduced = p.canonical ? p.reduced : static_cast<int64_t>(p.count);

  return [p](const KernelIO& io) {
    visit_dtype(p.dtype, [&](auto tag) {
      using T = decltype(tag);
      const T* x = io.input<T>(0);
      T* out = io.output<T>(0);
      if (p.empty)
        fill_identity(p, out);
      else if (!p.canonical)
        reduce_general(p, x, out);
      else if (p.inner == 1)
        reduce_rows(p, x, out);
      else
        reduce_columns(p, x, out);
    });
  };
}

// ---------------------------------------------------------------- argmax / argmin

// x viewed as [outer, n, inner] around one axis.
struct AxisSplit {
  int64_t outer = 1, n = 1, inner = 1;
};

AxisSplit split_at(const Shape& s, int axis) {
  AxisSplit a;
  for (int i = 0; i < s.rank(); ++i) (i < axis ? a.outer : i == axis ? a.n : a.inner) *= s[i];
  return a;
}

// True when v should replace the best value b of an argmax (kMax) / argmin scan: NaN counts as
// the extremum and the first one wins; a strict comparison keeps the first of equal values.
template <bool kMax, class L>
inline bool arg_better(L v, L b) {
  if constexpr (std::is_floating_point_v<L>) {
    if (std::isnan(b)) return false;
    if (std::isnan(v)) return true;
  }
  return kMax ? v > b : v < b;
}

template <bool kMax, class T, class I>
void arg_reduce(const AxisSplit& s, DType t, const T* x, I* out) {
  using L = Compute<T>;
  if (s.inner == 1) {
    // Two passes per row: the SIMD max (min) with NaN detection, then the first index holding
    // that value (or the first NaN): the first extremum, as the reference's scan finds it.
    const auto op = kMax ? reduce_simd::ReduceOp::kMax : reduce_simd::ReduceOp::kMin;
    parallel_for(0, s.outer, std::max<int64_t>(1, kGrainElems / s.n), [&](int64_t b, int64_t e) {
      for (int64_t o = b; o < e; ++o) {
        const T* row = x + o * s.n;
        Acc a = identity<T>(kMax ? Reduction::kMax : Reduction::kMin);
        reduce_simd::simd_rows(op, t, reinterpret_cast<const std::byte*>(row), 1, s.n, &a);
        int64_t j = 0;
        if constexpr (std::is_floating_point_v<L>) {
          if (std::isnan(a.f)) {
            while (!std::isnan(load_compute(row[j]))) ++j;
          } else {
            const auto target = static_cast<L>(a.f);
            while (load_compute(row[j]) != target) ++j;
          }
        } else {
          const auto target = static_cast<L>(a.i);
          while (row[j] != target) ++j;
        }
        out[o] = static_cast<I>(j);
      }
    });
    return;
  }
  // inner > 1: scan rows of a column block, keeping the best value and index per column.
  constexpr int64_t kWidth = 256;
  const int64_t blocks = (s.inner + kWidth - 1) / kWidth;
  const int64_t grain = std::max<int64_t>(1, kGrainElems / (s.n * std::min(kWidth, s.inner)));
  parallel_for(0, s.outer * blocks, grain, [&](int64_t b, int64_t e) {
    L best[kWidth];
    int64_t bi[kWidth];
    for (int64_t item = b; item < e; ++item) {
      const int64_t o = item / blocks, c0 = (item % blocks) * kWidth;
      const int64_t w = std::min(kWidth, s.inner - c0);
      const T* base = x + o * s.n * s.inner + c0;
      for (int64_t c = 0; c < w; ++c) {
        best[c] = load_compute(base[c]);
        bi[c] = 0;
      }
      for (int64_t j = 1; j < s.n; ++j) {
        const T* row = base + j * s.inner;
        for (int64_t c = 0; c < w; ++c) {
          L v = load_compute(row[c]);
          if (arg_better<kMax>(v, best[c])) {
            best[c] = v;
            bi[c] = j;
          }
        }
      }
      for (int64_t c = 0; c < w; ++c) out[o * s.inner + c0 + c] = static_cast<I>(bi[c]);
    }
  });
}

Kernel make_arg_reduce(const Graph& g, const Node& node) {
  const TensorType& xt = g.type(node.operands[0]);
  const AxisSplit s = split_at(xt.shape, xt.shape.normalize_axis(node.attrs.get_int("axis")));
  const bool is_max = node.op == OpKind::ArgMax;
  const DType t = xt.dtype, index = node.results[0].dtype;
  return [s, is_max, t, index](const KernelIO& io) {
    visit_dtype(t, [&](auto tag) {
      using T = decltype(tag);
      const T* x = io.input<T>(0);
      auto run = [&](auto* out) {
        if (is_max)
          arg_reduce<true>(s, t, x, out);
        else
          arg_reduce<false>(s, t, x, out);
      };
      if (index == DType::i32)
        run(io.output<int32_t>(0));
      else
        run(io.output<int64_t>(0));
    });
  };
}

// ---------------------------------------------------------------- cumsum

// The running sum is kept as the reference keeps it, in double for floats (each output rounded
// once from it: the results equal the reference's) and in 64-bit wrap-around for integers.
template <class T>
using RunningSum = std::conditional_t<kIsFloat<T>, double, uint64_t>;

template <class T>
inline RunningSum<T> running_value(T v) {
  if constexpr (kIsFloat<T>)
    return static_cast<double>(load_compute(v));
  else
    return static_cast<uint64_t>(static_cast<int64_t>(v));
}

template <class T>
inline T store_running(RunningSum<T> s) {
  if constexpr (std::is_same_v<T, f16>)
    return f16_from_double(s);
  else if constexpr (std::is_same_v<T, bf16>)
    return bf16_from_double(s);
  else
    return static_cast<T>(s);
}

template <class T>
void cumsum(const AxisSplit& s, bool exclusive, bool reverse, const T* x, T* out) {
  using S = RunningSum<T>;
  if (s.inner == 1) {  // the axis is the last: one running sum per row
    parallel_for(0, s.outer, std::max<int64_t>(1, kGrainElems / s.n), [&](int64_t b, int64_t e) {
      const int64_t first = reverse ? s.n - 1 : 0, step = reverse ? -1 : 1;
      for (int64_t o = b; o < e; ++o) {
        const T* xr = x + o * s.n + first;
        T* orow = out + o * s.n + first;
        S acc{0};
        for (int64_t j = 0; j < s.n; ++j) {
          const S v = running_value(xr[j * step]);
          if (exclusive) orow[j * step] = store_running<T>(acc);
          acc += v;
          if (!exclusive) orow[j * step] = store_running<T>(acc);
        }
      }
    });
    return;
  }
  // The axis is not the last: rows of a column block are scanned together.
  constexpr int64_t kWidth = 256;
  const int64_t w_max = std::min(kWidth, s.inner);
  const int64_t blocks = (s.inner + w_max - 1) / w_max;
  const int64_t grain = std::max<int64_t>(1, kGrainElems / (s.n * w_max));
  parallel_for(0, s.outer * blocks, grain, [&](int64_t b, int64_t e) {
    S acc[kWidth];
    for (int64_t item = b; item < e; ++item) {
      const int64_t o = item / blocks, c0 = (item % blocks) * w_max;
      const int64_t w = std::min(w_max, s.inner - c0);
      std::fill(acc, acc + w, S{0});
      for (int64_t step = 0; step < s.n; ++step) {
        const int64_t j = reverse ? s.n - 1 - step : step;
        const int64_t off = (o * s.n + j) * s.inner + c0;
        const T* xr = x + off;
        T* orow = out + off;
        for (int64_t c = 0; c < w; ++c) {
          if (exclusive) orow[c] = store_running<T>(acc[c]);
          acc[c] += running_value(xr[c]);
          if (!exclusive) orow[c] = store_running<T>(acc[c]);
        }
      }
    }
  });
}

Kernel make_cumsum(const Graph& g, const Node& node) {
  const TensorType& xt = g.type(node.operands[0]);
  if (is_bool(xt.dtype)) return {};
  const AxisSplit s = split_at(xt.shape, xt.shape.normalize_axis(node.attrs.get_int("axis")));
  const bool exclusive = node.attrs.get_bool("exclusive"), reverse = node.attrs.get_bool("reverse");
  return [s, exclusive, reverse, t = xt.dtype](const KernelIO& io) {
    visit_dtype(t, [&](auto tag) {
      using T = decltype(tag);
      cumsum(s, exclusive, reverse, io.input<T>(0), io.output<T>(0));
    });
  };
}

// ---------------------------------------------------------------- top_k

// An order-preserving unsigned key of top_k's descending order (the reference's comparator):
// floats map through their IEEE bits so that -0 < +0, and every NaN (either sign) maps to the
// largest key; signed integers flip the sign bit. 16-bit floats use their exact f32 value.
template <class T>
inline auto sort_key(T v) {
  if constexpr (std::is_same_v<T, double>) {
    if (std::isnan(v)) return ~uint64_t{0};
    auto b = std::bit_cast<uint64_t>(v);
    return (b >> 63) != 0 ? ~b : b | (uint64_t{1} << 63);
  } else if constexpr (kIsFloat<T>) {
    float f = load_compute(v);
    if (std::isnan(f)) return ~uint32_t{0};
    auto b = std::bit_cast<uint32_t>(f);
    return (b >> 31) != 0 ? ~b : b | (uint32_t{1} << 31);
  } else if constexpr (std::is_same_v<T, int64_t>) {
    return static_cast<uint64_t>(v) ^ (uint64_t{1} << 63);
  } else if constexpr (std::is_signed_v<T>) {
    return static_cast<uint32_t>(static_cast<int32_t>(v)) ^ (uint32_t{1} << 31);
  } else {
    return static_cast<uint32_t>(v);
  }
}

// Per row: the k greatest (key, index) items, sorted. The order is total (ties go to the lower
// index), so the result equals the reference's stable sort. Small k keeps a min-heap of the
// best k seen and compares each element with its least (a scan that rarely touches the heap on
// unordered data); large k selects with nth_element over all n items.
template <class T>
void top_k(int64_t rows, int64_t n, int64_t k, const T* x, T* values, int32_t* indices) {
  using Key = decltype(sort_key(T{}));
  struct Item {
    Key key;
    int32_t index;
  };
  auto greater = [](const Item& a, const Item& b) {
    return a.key > b.key || (a.key == b.key && a.index < b.index);
  };
  const bool use_heap = k > 0 && k * 16 <= n;
  parallel_for(0, rows, std::max<int64_t>(1, kGrainElems / n), [&](int64_t b, int64_t e) {
    thread_local std::vector<Item> items;  // per-thread scratch: clones run concurrently
    items.resize(static_cast<size_t>(use_heap ? k : n));
    for (int64_t r = b; r < e; ++r) {
      const T* row = x + r * n;
      if (use_heap) {
        // items[0, k) is a heap whose front is the least of the best k (heap order: greater).
        for (int64_t j = 0; j < k; ++j)
          items[static_cast<size_t>(j)] = {sort_key(row[j]), static_cast<int32_t>(j)};
        std::make_heap(items.begin(), items.end(), greater);
        for (int64_t j = k; j < n; ++j) {
          const Key key = sort_key(row[j]);
          if (key <= items.front().key) continue;  // equal keys lose: j is a later index
          std::pop_heap(items.begin(), items.end(), greater);
          items.back() = {key, static_cast<int32_t>(j)};
          std::push_heap(items.begin(), items.end(), greater);
        }
      } else {
        for (int64_t j = 0; j < n; ++j)
          items[static_cast<size_t>(j)] = {sort_key(row[j]), static_cast<int32_t>(j)};
        if (k < n) std::nth_element(items.begin(), items.begin() + k, items.end(), greater);
      }
      std::sort(items.begin(), items.begin() + k, greater);
      for (int64_t j = 0; j < k; ++j) {
        int32_t src = items[static_cast<size_t>(j)].index;
        values[r * k + j] = row[src];
        indices[r * k + j] = src;
      }
    }
  });
}

Kernel make_top_k(const Graph& g, const Node& node) {
  const TensorType& xt = g.type(node.operands[0]);
  const int64_t n = xt.shape[xt.shape.rank() - 1];
  const int64_t k = node.attrs.get_int("k");
  if (is_bool(xt.dtype) || n > std::numeric_limits<int32_t>::max()) return {};
  const int64_t rows = n == 0 ? 0 : xt.shape.numel() / n;
  return [rows, n, k, t = xt.dtype](const KernelIO& io) {
    visit_dtype(t, [&](auto tag) {
      using T = decltype(tag);
      top_k(rows, n, k, io.input<T>(0), io.output<T>(0), io.output<int32_t>(1));
    });
  };
}

}  // namespace

void register_reduce_kernels() {
  for (OpKind op : {OpKind::ReduceSum, OpKind::ReduceMean, OpKind::ReduceMax, OpKind::ReduceMin,
                    OpKind::ReduceProd})
    register_native(op, make_reduce, "more than 16 kept or reduced dims after collapsing");
  register_native(OpKind::ArgMax, make_arg_reduce);
  register_native(OpKind::ArgMin, make_arg_reduce);
  register_native(OpKind::CumSum, make_cumsum);
  register_native(OpKind::TopK, make_top_k, "a last dim of 2^31 or more elements (i32 indices)");
}

}  // namespace rlx::cpu

#endif  // HWY_ONCE
