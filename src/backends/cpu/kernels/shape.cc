// Native CPU kernels of the shape family: data movement (reshape ... expand_dims) and iota.
// Data movement works on element bytes (1, 2, 4 or 8 wide), so every dtype is covered and
// values come through bit-exact; scatter_add and iota are the ops that do arithmetic.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "../kernel.h"
#include "half.h"
#include "rlx/runtime/threading.h"

namespace rlx::cpu {
namespace {

using Ints = std::vector<int64_t>;

// More merged dims than this take the reference kernel (no real graph comes close).
constexpr int kMaxDims = 16;
// A parallel task moves at least this many bytes, so small copies stay on the calling thread.
constexpr int64_t kTaskBytes = kParallelChunkBytes;

/// Calls fn(U{}) with the unsigned integer type of `esize` bytes (the element carrier).
template <class F>
void with_elem(int esize, F&& fn) {
  switch (esize) {
    case 1:
      return fn(uint8_t{});
    case 2:
      return fn(uint16_t{});
    case 4:
      return fn(uint32_t{});
    default:
      return fn(uint64_t{});
  }
}

/// Calls fn(I{}) with the storage type of integer index dtype `t`.
template <class F>
void with_index(DType t, F&& fn) {
  switch (t) {
    case DType::i8:
      return fn(int8_t{});
    case DType::u8:
      return fn(uint8_t{});
    case DType::i32:
      return fn(int32_t{});
    default:
      return fn(int64_t{});
  }
}

/// Calls fn(T{}) with the storage type of numeric (non-bool) dtype `t`.
template <class F>
void with_numeric(DType t, F&& fn) {
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
    case DType::i32:
      return fn(int32_t{});
    default:
      return fn(int64_t{});
  }
}

template <class T>
inline constexpr bool kIsFloat =
    std::is_floating_point_v<T> || std::is_same_v<T, f16> || std::is_same_v<T, bf16>;

// Rounds a double to float dtype T once (round to nearest even, as the convert op).
template <class T>
T round_from_double(double v) {
  if constexpr (std::is_same_v<T, f16>)
    return f16_from_double(v);
  else if constexpr (std::is_same_v<T, bf16>)
    return bf16_from_double(v);
  else
    return static_cast<T>(v);
}

// ---------------------------------------------------------------- the strided copy

/// out[out_offset + sum_k i_k * out_strides[k]] = in[in_offset + sum_k i_k * in_strides[k]] for
/// every index i of dims (offsets and strides in elements; in strides may be 0 for broadcast or
/// negative for reverse). Canonical form: size-1 dims dropped, dims that are adjacent in both
/// layouts merged, innermost last. The innermost dim decides the loop: contiguous in both
/// (memcpy runs), broadcast into contiguous (fill runs), reversed into contiguous (vector
/// lane reversal), a transpose (the input is contiguous along another dim: cache-blocked
/// tiles), or a plain strided loop.
struct CopyPlan {
  enum class Inner : uint8_t { kMemcpy, kFill, kReverse, kTile, kStrided };
  int esize = 4;
  bool empty = false;
  Inner inner = Inner::kStrided;
  int64_t in_offset = 0, out_offset = 0;
  int64_t n = 1, in_stride = 1, out_stride = 1;  // the innermost dim
  int64_t rows = 1, row_out_stride = 0;          // kTile: the dim with in stride 1
  Ints dims, in_strides, out_strides;            // the outer dims the odometer walks
  int64_t outer = 1;                             // their element count
  int64_t pieces = 1;                            // tasks per outer index (row blocks or run chunks)
};

// Walks the outer dims of a plan in row-major order, tracking both offsets.
struct Cursor {
  int rank = 0;
  const int64_t *dims = nullptr, *in_strides = nullptr, *out_strides = nullptr;
  int64_t idx[kMaxDims] = {};
  int64_t in = 0, out = 0;

  Cursor(const Ints& d, const Ints& is, const Ints& os, int64_t in0, int64_t out0, int64_t flat)
      : rank(static_cast<int>(d.size())),
        dims(d.data()),
        in_strides(is.data()),
        out_strides(os.data()),
        in(in0),
        out(out0) {
    for (int k = rank - 1; k >= 0; --k) {
      idx[k] = flat % dims[k];
      flat /= dims[k];
      in += idx[k] * in_strides[k];
      out += idx[k] * out_strides[k];
    }
  }
  void next() {
    for (int k = rank - 1; k >= 0; --k) {
      in += in_strides[k];
      out += out_strides[k];
      if (++idx[k] < dims[k]) return;
      in -= idx[k] * in_strides[k];
      out -= idx[k] * out_strides[k];
      idx[k] = 0;
    }
  }
};

// Rows of a transpose panel (one parallel task of a kTile copy).
constexpr int64_t kTileRows = 256;

CopyPlan make_copy_plan(int esize, const Ints& dims, const Ints& in_strides,
                        const Ints& out_strides, int64_t in_offset = 0, int64_t out_offset = 0) {
  CopyPlan p;
  p.esize = esize;
  p.in_offset = in_offset;
  p.out_offset = out_offset;
  Ints d, is, os;  // innermost first while merging
  for (size_t k = dims.size(); k-- > 0;) {
    if (dims[k] == 0) p.empty = true;
    if (dims[k] <= 1) continue;
    if (!d.empty() && in_strides[k] == is.back() * d.back() &&
        out_strides[k] == os.back() * d.back()) {
      d.back() *= dims[k];
      continue;
    }
    d.push_back(dims[k]);
    is.push_back(in_strides[k]);
    os.push_back(out_strides[k]);
  }
  if (d.empty()) {  // a single element
    d = {1};
    is = {1};
    os = {1};
  }
  p.n = d[0];
  p.in_stride = is[0];
  p.out_stride = os[0];
  size_t tile = 0;  // index in d of the dim the input is contiguous along, 0 if none
  // A short fill whose next dims read the input contiguously (repeating each element a few
  // times: nearest upsampling) runs as a tile with input stride 0, a vector at a time, instead
  // of one short fill per cursor step.
  const bool short_fill = p.in_stride == 0 && p.out_stride == 1 && p.n * esize < 64 && d.size() > 1;
  if (p.in_stride == 1 && p.out_stride == 1) {
    p.inner = CopyPlan::Inner::kMemcpy;
  } else if (p.in_stride == 0 && p.out_stride == 1 && !short_fill) {
    p.inner = CopyPlan::Inner::kFill;
  } else if (p.in_stride == -1 && p.out_stride == 1) {
    p.inner = CopyPlan::Inner::kReverse;
  } else if (p.out_stride == 1) {
    for (size_t k = 1; k < d.size(); ++k)
      if (is[k] == 1) tile = k;
    if (tile != 0) {
      p.inner = CopyPlan::Inner::kTile;
      p.rows = d[tile];
      p.row_out_stride = os[tile];
    } else if (short_fill) {
      p.inner = CopyPlan::Inner::kFill;
    }
  }
  for (size_t k = d.size(); k-- > 1;) {
    if (k == tile) continue;
    p.dims.push_back(d[k]);
    p.in_strides.push_back(is[k]);
    p.out_strides.push_back(os[k]);
    p.outer *= d[k];
  }
  const int64_t run_bytes = p.n * esize;
  if (p.inner == CopyPlan::Inner::kTile)
    p.pieces = (p.rows + kTileRows - 1) / kTileRows;
  else if (p.inner == CopyPlan::Inner::kMemcpy || p.inner == CopyPlan::Inner::kFill)
    p.pieces = std::clamp<int64_t>(run_bytes / kTaskBytes, 1, 256);  // >= one task each
  return p;
}

bool plan_fits(const CopyPlan& p) { return p.dims.size() <= kMaxDims; }

// A 16-byte vector of U (GCC vector extension: SSE2 on x86-64, NEON on arm64).
template <class U>
struct Vec16 {
  typedef U type __attribute__((vector_size(16)));
};

// Lanes [0, N/2) (kHigh false) or [N/2, N) of a and b interleaved: a_k, b_k, a_k+1, b_k+1, ...
template <bool kHigh, class V, size_t... I>
inline V interleave(V a, V b, std::index_sequence<I...>) {
  constexpr size_t kN = sizeof...(I);
  return __builtin_shufflevector(a, b, (I / 2 + (kHigh ? kN / 2 : 0) + (I % 2 ? kN : 0))...);
}

// Transposes the N x N block (N = 16 / sizeof(U)) of rows in[i * is, + N) into rows
// out[j * os, + N), out[j][i] = in[i][j], in registers: log2(N) rounds of interleaving rows i
// and i + N/2 (the perfect shuffle) transpose it.
template <class U>
inline void transpose_block(const U* in, int64_t is, U* out, int64_t os) {
  using V = typename Vec16<U>::type;
  constexpr size_t kN = 16 / sizeof(U);
  constexpr auto lanes = std::make_index_sequence<kN>{};
  V r[kN], t[kN];
  // Fully unrolled, so the arrays live in registers.
#pragma GCC unroll 16
  for (size_t i = 0; i < kN; ++i) std::memcpy(&r[i], in + static_cast<int64_t>(i) * is, 16);
#pragma GCC unroll 4
  for (size_t round = 1; round < kN; round *= 2) {
#pragma GCC unroll 8
    for (size_t i = 0; i < kN / 2; ++i) {
      t[2 * i] = interleave<false>(r[i], r[i + kN / 2], lanes);
      t[2 * i + 1] = interleave<true>(r[i], r[i + kN / 2], lanes);
    }
#pragma GCC unroll 16
    for (size_t i = 0; i < kN; ++i) r[i] = t[i];
  }
#pragma GCC unroll 16
  for (size_t j = 0; j < kN; ++j) std::memcpy(out + static_cast<int64_t>(j) * os, &r[j], 16);
}

// Transposes rows [a0, a1) of a [rows, n] panel: out[a * os + b] = in[a + b * is]. Columns go
// in strips one cache line wide, so every output row gets whole lines while the strip's input
// rows stay in cache; inside a strip, vector blocks (transpose_block), elements at ragged edges.
template <class U>
void transpose_panel(const U* in, U* out, int64_t a0, int64_t a1, int64_t n, int64_t is,
                     int64_t os) {
  constexpr int64_t kTile = 64 / sizeof(U), kBlock = 16 / sizeof(U);
  for (int64_t b0 = 0; b0 < n; b0 += kTile) {
    const int64_t b1 = std::min(n, b0 + kTile);
    const int64_t b_vec = b0 + (b1 - b0) / kBlock * kBlock;
    int64_t a = a0;
    for (; a + kBlock <= a1; a += kBlock) {
      for (int64_t b = b0; b < b_vec; b += kBlock)
        transpose_block(in + a + b * is, is, out + a * os + b, os);
      for (int64_t aa = a; aa < a + kBlock; ++aa)
        for (int64_t b = b_vec; b < b1; ++b) out[aa * os + b] = in[aa + b * is];
    }
    for (; a < a1; ++a)
      for (int64_t b = b0; b < b1; ++b) out[a * os + b] = in[a + b * is];
  }
}

template <class V, size_t... I>
inline V reverse_lanes(V v, std::index_sequence<I...>) {
  return __builtin_shufflevector(v, v, (sizeof...(I) - 1 - I)...);
}

// dst[j] = src[-j] for j < n, a vector at a time.
template <class U>
void reverse_run(const U* src, U* dst, int64_t n) {
  using V = typename Vec16<U>::type;
  constexpr int64_t kN = 16 / sizeof(U);
  int64_t j = 0;
  for (; j + kN <= n; j += kN) {
    V v;
    std::memcpy(&v, src - j - (kN - 1), 16);
    v = reverse_lanes(v, std::make_index_sequence<kN>{});
    std::memcpy(dst + j, &v, 16);
  }
  for (; j < n; ++j) dst[j] = src[-j];
}

template <class U>
void run_copy_typed(const CopyPlan& p, const U* in, U* out) {
  const int64_t piece_bytes =
      p.inner == CopyPlan::Inner::kTile ? kTileRows * p.n * p.esize : p.n * p.esize / p.pieces;
  const int64_t grain = std::max<int64_t>(1, kTaskBytes / std::max<int64_t>(1, piece_bytes));
  parallel_for(0, p.outer * p.pieces, grain, [&](int64_t b, int64_t e) {
    Cursor c(p.dims, p.in_strides, p.out_strides, p.in_offset, p.out_offset, b / p.pieces);
    for (int64_t item = b; item < e; ++item) {
      const int64_t piece = item % p.pieces;
      if (item != b && piece == 0) c.next();
      switch (p.inner) {
        case CopyPlan::Inner::kMemcpy: {
          const int64_t lo = p.n * piece / p.pieces, hi = p.n * (piece + 1) / p.pieces;
          std::memcpy(out + c.out + lo, in + c.in + lo, static_cast<size_t>(hi - lo) * sizeof(U));
          break;
        }
        case CopyPlan::Inner::kFill: {
          const int64_t lo = p.n * piece / p.pieces, hi = p.n * (piece + 1) / p.pieces;
          std::fill(out + c.out + lo, out + c.out + hi, in[c.in]);
          break;
        }
        case CopyPlan::Inner::kReverse:
          reverse_run(in + c.in, out + c.out, p.n);
          break;
        case CopyPlan::Inner::kTile: {
          const int64_t a0 = piece * kTileRows, a1 = std::min(p.rows, a0 + kTileRows);
          // The panel is [rows, n], the input contiguous along rows, the output along n.
          transpose_panel(in + c.in, out + c.out, a0, a1, p.n, p.in_stride, p.row_out_stride);
          break;
        }
        case CopyPlan::Inner::kStrided: {
          const U* src = in + c.in;
          U* dst = out + c.out;
          for (int64_t j = 0; j < p.n; ++j) dst[j * p.out_stride] = src[j * p.in_stride];
          break;
        }
      }
    }
  });
}

void run_copy(const CopyPlan& p, const std::byte* in, std::byte* out) {
  if (p.empty) return;
  with_elem(p.esize, [&](auto tag) {
    using U = decltype(tag);
    run_copy_typed(p, reinterpret_cast<const U*>(in), reinterpret_cast<U*>(out));
  });
}

/// A kernel that runs one copy plan from operand 0 to result 0 (or the reference kernel when
/// the plan has too many dims).
Kernel copy_kernel(CopyPlan p) {
  if (!plan_fits(p)) return {};
  return [p = std::move(p)](const KernelIO& io) { run_copy(p, io.in[0], io.out[0]); };
}

// x viewed as [outer, n, inner] around one axis.
struct AxisSplit {
  int64_t outer = 1, n = 1, inner = 1;
};

AxisSplit split_at(const Shape& s, int axis) {
  AxisSplit a;
  for (int i = 0; i < s.rank(); ++i) (i < axis ? a.outer : i == axis ? a.n : a.inner) *= s[i];
  return a;
}

// ---------------------------------------------------------------- ops that are one copy

// reshape, squeeze and expand_dims keep the row-major order: one contiguous run (the memory
// plan usually makes them views, and then no kernel runs).
Kernel make_flat_copy(const Graph& g, const Node& node) {
  const TensorType& t = g.type(node.operands[0]);
  const int64_t n = t.shape.numel();
  return copy_kernel(make_copy_plan(dtype_size(t.dtype), {n}, {1}, {1}));
}

Kernel make_transpose(const Graph& g, const Node& node) {
  const TensorType& t = g.type(node.operands[0]);
  const Ints& perm = node.attrs.get_ints("permutation");
  const Ints xs = t.shape.strides();
  const Shape& out = node.results[0].shape;
  Ints in_strides;
  for (int64_t p : perm) in_strides.push_back(xs[static_cast<size_t>(p)]);
  return copy_kernel(make_copy_plan(dtype_size(t.dtype), out.dims(), in_strides, out.strides()));
}

Kernel make_broadcast_in_dim(const Graph& g, const Node& node) {
  const TensorType& t = g.type(node.operands[0]);
  const Ints& bd = node.attrs.get_ints("broadcast_dimensions");
  const Shape& out = node.results[0].shape;
  const Ints xs = t.shape.strides();
  Ints in_strides(static_cast<size_t>(out.rank()), 0);
  for (size_t i = 0; i < bd.size(); ++i)
    if (t.shape[static_cast<int>(i)] != 1) in_strides[static_cast<size_t>(bd[i])] = xs[i];
  return copy_kernel(make_copy_plan(dtype_size(t.dtype), out.dims(), in_strides, out.strides()));
}

Kernel make_expand(const Graph& g, const Node& node) {
  const TensorType& t = g.type(node.operands[0]);
  const Shape& out = node.results[0].shape;
  const Ints xs = t.shape.strides();
  const int shift = out.rank() - t.shape.rank();  // numpy aligns trailing dims
  Ints in_strides(static_cast<size_t>(out.rank()), 0);
  for (int i = 0; i < t.shape.rank(); ++i)
    if (t.shape[i] != 1) in_strides[static_cast<size_t>(i + shift)] = xs[static_cast<size_t>(i)];
  return copy_kernel(make_copy_plan(dtype_size(t.dtype), out.dims(), in_strides, out.strides()));
}

Kernel make_slice(const Graph& g, const Node& node) {
  const TensorType& t = g.type(node.operands[0]);
  const Ints& start = node.attrs.get_ints("start");
  const Ints& steps = node.attrs.get_ints("strides");
  const Shape& out = node.results[0].shape;
  const Ints xs = t.shape.strides();
  Ints in_strides;
  int64_t offset = 0;
  for (size_t k = 0; k < xs.size(); ++k) {
    in_strides.push_back(xs[k] * (steps.empty() ? 1 : steps[k]));
    offset += start[k] * xs[k];
  }
  return copy_kernel(
      make_copy_plan(dtype_size(t.dtype), out.dims(), in_strides, out.strides(), offset));
}

Kernel make_reverse(const Graph& g, const Node& node) {
  const TensorType& t = g.type(node.operands[0]);
  const Ints xs = t.shape.strides();
  Ints in_strides = xs;
  int64_t offset = 0;
  std::vector<bool> flip(static_cast<size_t>(t.shape.rank()), false);
  for (int64_t a : node.attrs.get_ints("axes"))
    flip[static_cast<size_t>(t.shape.normalize_axis(a))] = true;
  for (size_t k = 0; k < xs.size(); ++k) {
    if (!flip[k] || t.shape[static_cast<int>(k)] == 0) continue;
    in_strides[k] = -xs[k];
    offset += (t.shape[static_cast<int>(k)] - 1) * xs[k];
  }
  return copy_kernel(make_copy_plan(dtype_size(t.dtype), t.shape.dims(), in_strides, xs, offset));
}

// ---------------------------------------------------------------- concatenate, pad

Kernel make_concatenate(const Graph& g, const Node& node) {
  const Shape& out = node.results[0].shape;
  const int dim = out.normalize_axis(node.attrs.get_int("dimension"));
  const Ints os = out.strides();
  std::vector<CopyPlan> plans;
  int64_t at = 0;
  for (Value v : node.operands) {
    const TensorType& t = g.type(v);
    plans.push_back(make_copy_plan(dtype_size(t.dtype), t.shape.dims(), t.shape.strides(), os, 0,
                                   at * os[static_cast<size_t>(dim)]));
    if (!plan_fits(plans.back())) return {};
    at += t.shape[dim];
  }
  return [plans = std::move(plans)](const KernelIO& io) {
    for (size_t i = 0; i < plans.size(); ++i) run_copy(plans[i], io.in[i], io.out[0]);
  };
}

// Fills n elements of esize bytes at out with the element at value.
void fill_elements(std::byte* out, int64_t n, const std::byte* value, int esize) {
  with_elem(esize, [&](auto tag) {
    using U = decltype(tag);
    U v;
    std::memcpy(&v, value, sizeof(U));
    U* o = reinterpret_cast<U*>(out);
    parallel_for(0, n, kTaskBytes / static_cast<int64_t>(sizeof(U)),
                 [&](int64_t b, int64_t e) { std::fill(o + b, o + e, v); });
  });
}

// lax.pad: x element i lands at low + i * (interior + 1) per dim. The kernel fills the result
// with the padding value (unless x covers it all) and copies the part of x that lands inside.
Kernel make_pad(const Graph& g, const Node& node) {
  const TensorType& t = g.type(node.operands[0]);
  const Shape& out = node.results[0].shape;
  const Ints& low = node.attrs.get_ints("low");
  const Ints& interior = node.attrs.get_ints("interior");
  const Ints xs = t.shape.strides(), os = out.strides();
  Ints dims, in_strides, out_strides;
  int64_t in_offset = 0, out_offset = 0;
  bool covers = true;
  for (size_t k = 0; k < xs.size(); ++k) {
    const int64_t d = t.shape[static_cast<int>(k)], o = out[static_cast<int>(k)];
    const int64_t step = (interior.empty() ? 0 : interior[k]) + 1;
    // x indices [i0, i1) land in [0, o).
    const int64_t i0 = low[k] < 0 ? (-low[k] + step - 1) / step : 0;
    const int64_t i1 = o - 1 - low[k] < 0 ? 0 : std::min(d, (o - 1 - low[k]) / step + 1);
    const int64_t count = std::max<int64_t>(0, i1 - i0);
    covers = covers && step == 1 && count == o;
    dims.push_back(count);
    in_strides.push_back(xs[k]);
    out_strides.push_back(step * os[k]);
    in_offset += i0 * xs[k];
    out_offset += (low[k] + i0 * step) * os[k];
  }
  CopyPlan plan =
      make_copy_plan(dtype_size(t.dtype), dims, in_strides, out_strides, in_offset, out_offset);
  if (!plan_fits(plan)) return {};
  const int64_t n = out.numel();
  return [plan = std::move(plan), covers, n](const KernelIO& io) {
    if (!covers) fill_elements(io.out[0], n, io.in[1], plan.esize);
    run_copy(plan, io.in[0], io.out[0]);
  };
}

// ---------------------------------------------------------------- dynamic slices

// Element offset in x of a dynamic block: the start-index operands [first, first + rank) of
// dtype `index` read at run time, each clamped to [0, x.dim - block.dim] (lax semantics).
int64_t dynamic_offset(const KernelIO& io, size_t first, DType index, const Ints& x_dims,
                       const Ints& x_strides, const Ints& block) {
  int64_t offset = 0;
  with_index(index, [&](auto tag) {
    using I = decltype(tag);
    for (size_t k = 0; k < x_dims.size(); ++k) {
      const auto s = static_cast<int64_t>(*io.input<I>(first + k));
      offset += std::clamp<int64_t>(s, 0, x_dims[k] - block[k]) * x_strides[k];
    }
  });
  return offset;
}

// The dtype of the start indices from operand `first` (i32 when x is rank 0 and has none).
DType index_dtype(const Graph& g, const Node& node, size_t first) {
  return node.operands.size() > first ? g.dtype(node.operands[first]) : DType::i32;
}

// The block is copied row by row (one copy plan over the block's dims, built at compile time;
// only its base offset in x is known at run time).
Kernel make_dynamic_slice(const Graph& g, const Node& node) {
  const TensorType& t = g.type(node.operands[0]);
  const Shape& out = node.results[0].shape;
  const int esize = dtype_size(t.dtype);
  const Ints xs = t.shape.strides();
  CopyPlan plan = make_copy_plan(esize, out.dims(), xs, out.strides());
  if (!plan_fits(plan)) return {};
  return [plan = std::move(plan), esize, xs, x_dims = t.shape.dims(), block = out.dims(),
          index = index_dtype(g, node, 1)](const KernelIO& io) {
    const int64_t offset = dynamic_offset(io, 1, index, x_dims, xs, block);
    run_copy(plan, io.in[0] + offset * esize, io.out[0]);
  };
}

// x copied to the result, then the update's rows written over it. When the memory plan puts
// the result in x's storage (x dies here, see plan_memory), the first copy is skipped, so
// the kernel moves only the update's bytes.
Kernel make_dynamic_update_slice(const Graph& g, const Node& node) {
  const TensorType& t = g.type(node.operands[0]);
  const Shape& upd = g.shape(node.operands[1]);
  const int esize = dtype_size(t.dtype);
  const Ints xs = t.shape.strides();
  CopyPlan plan = make_copy_plan(esize, upd.dims(), upd.strides(), xs);
  if (!plan_fits(plan)) return {};
  CopyPlan whole = make_copy_plan(esize, {t.shape.numel()}, {1}, {1});
  return [plan = std::move(plan), whole = std::move(whole), esize, xs, x_dims = t.shape.dims(),
          block = upd.dims(), index = index_dtype(g, node, 2)](const KernelIO& io) {
    if (io.out[0] != io.in[0]) run_copy(whole, io.in[0], io.out[0]);
    const int64_t offset = dynamic_offset(io, 2, index, x_dims, xs, block);
    run_copy(plan, io.in[1], io.out[0] + offset * esize);
  };
}

// ---------------------------------------------------------------- gather, take_along_axis

// jnp.take(x, indices, axis) with clamped indices: x as [outer, n, inner], the result as
// [outer, N, inner]; every (outer, index) pair copies one run of inner elements.
template <class U, class I>
void gather(int64_t outer, int64_t n, int64_t inner, int64_t count, const U* x, const I* idx,
            U* out) {
  const int64_t grain =
      std::max<int64_t>(1, kTaskBytes / (inner * static_cast<int64_t>(sizeof(U))));
  parallel_for(0, outer * count, grain, [&](int64_t b, int64_t e) {
    for (int64_t item = b; item < e; ++item) {
      const int64_t o = item / count, j = item % count;
      const int64_t row = std::clamp<int64_t>(static_cast<int64_t>(idx[j]), 0, n - 1);
      const U* src = x + (o * n + row) * inner;
      U* dst = out + item * inner;
      if (inner == 1)
        *dst = *src;
      else
        std::memcpy(dst, src, static_cast<size_t>(inner) * sizeof(U));
    }
  });
}

Kernel make_gather(const Graph& g, const Node& node) {
  const TensorType& t = g.type(node.operands[0]);
  const TensorType& it = g.type(node.operands[1]);
  const AxisSplit s = split_at(t.shape, t.shape.normalize_axis(node.attrs.get_int("axis")));
  const int64_t count = it.shape.numel();
  return [=, esize = dtype_size(t.dtype), index = it.dtype](const KernelIO& io) {
    with_elem(esize, [&](auto u) {
      using U = decltype(u);
      with_index(index, [&](auto i) {
        using I = decltype(i);
        gather(s.outer, s.n, s.inner, count, io.input<U>(0), io.input<I>(1), io.output<U>(0));
      });
    });
  };
}

// jnp.take_along_axis: for each result index, x is read at the same index (size-1 dims of x
// and of the indices broadcast) except along `axis`, where the clamped index is used.
struct TakePlan {
  Ints dims, x_strides, idx_strides;  // outer dims of the result (all but the last)
  int64_t n = 1;                      // the last result dim
  int64_t x_last = 0, idx_last = 0;   // strides along it (x_last = 0 when it is the axis)
  int64_t axis_stride = 0, axis_size = 1;
  int64_t rows = 1;
  int esize = 4;
  DType index = DType::i32;
};

template <class U, class I>
void take_along_axis(const TakePlan& p, const U* x, const I* idx, U* out) {
  const int64_t grain = std::max<int64_t>(1, kTaskBytes / (p.n * static_cast<int64_t>(sizeof(U))));
  parallel_for(0, p.rows, grain, [&](int64_t b, int64_t e) {
    Cursor c(p.dims, p.x_strides, p.idx_strides, 0, 0, b);
    for (int64_t r = b; r < e; ++r) {
      if (r != b) c.next();
      U* dst = out + r * p.n;
      for (int64_t j = 0; j < p.n; ++j) {
        const int64_t k = std::clamp<int64_t>(static_cast<int64_t>(idx[c.out + j * p.idx_last]), 0,
                                              p.axis_size - 1);
        dst[j] = x[c.in + j * p.x_last + k * p.axis_stride];
      }
    }
  });
}

Kernel make_take_along_axis(const Graph& g, const Node& node) {
  const TensorType& t = g.type(node.operands[0]);
  const TensorType& it = g.type(node.operands[1]);
  const Shape& out = node.results[0].shape;
  const int rank = out.rank();
  const int axis = t.shape.normalize_axis(node.attrs.get_int("axis"));
  if (rank - 1 > kMaxDims) return {};
  const Ints xs = t.shape.strides(), is = it.shape.strides();
  TakePlan p;
  p.esize = dtype_size(t.dtype);
  p.index = it.dtype;
  p.axis_stride = xs[static_cast<size_t>(axis)];
  p.axis_size = t.shape[axis];
  for (int d = 0; d < rank; ++d) {
    const auto k = static_cast<size_t>(d);
    const int64_t x_stride = d == axis || t.shape[d] == 1 ? 0 : xs[k];
    const int64_t i_stride = it.shape[d] == 1 ? 0 : is[k];
    if (d == rank - 1) {
      p.n = out[d];
      p.x_last = x_stride;
      p.idx_last = i_stride;
    } else {
      p.dims.push_back(out[d]);
      p.x_strides.push_back(x_stride);
      p.idx_strides.push_back(i_stride);
      p.rows *= out[d];
    }
  }
  return [p = std::move(p)](const KernelIO& io) {
    with_elem(p.esize, [&](auto u) {
      using U = decltype(u);
      with_index(p.index, [&](auto i) {
        using I = decltype(i);
        take_along_axis(p, io.input<U>(0), io.input<I>(1), io.output<U>(0));
      });
    });
  };
}

// ---------------------------------------------------------------- scatter_add

// The accumulator of scatter_add as the reference keeps it: double for floats (the result is
// rounded once, so it equals the reference bit for bit), 64-bit wrap-around for integers.
template <class T>
using ScatterAcc = std::conditional_t<kIsFloat<T>, double, uint64_t>;

template <class T>
inline ScatterAcc<T> scatter_value(T v) {
  if constexpr (std::is_same_v<T, f16> || std::is_same_v<T, bf16>)
    return static_cast<double>(to_f32(v));
  else if constexpr (kIsFloat<T>)
    return static_cast<double>(v);
  else
    return static_cast<uint64_t>(static_cast<int64_t>(v));
}

template <class T>
inline T scatter_store(ScatterAcc<T> a) {
  if constexpr (kIsFloat<T>)
    return round_from_double<T>(a);
  else
    return static_cast<T>(a);
}

// x as [outer, n, inner], updates as [outer, N, inner]. The in-range indices are grouped by
// target row (a sort of (target, j) pairs, so each group lists its updates in order j); each
// (outer, target) row is then x's row plus its updates in that order, computed by one task,
// so the result does not depend on the thread count and no two tasks write one row.
template <class T, class I>
void scatter_add(int64_t outer, int64_t n, int64_t inner, int64_t count, const T* x, const I* idx,
                 const T* upd, T* out) {
  parallel_for(0, outer * n * inner, kTaskBytes / static_cast<int64_t>(sizeof(T)),
               [&](int64_t b, int64_t e) { std::copy(x + b, x + e, out + b); });
  thread_local std::vector<std::pair<int64_t, int64_t>> order;  // per-thread: clones run at once
  thread_local std::vector<int64_t> starts;
  order.clear();
  for (int64_t j = 0; j < count; ++j) {
    const auto target = static_cast<int64_t>(idx[j]);
    if (target >= 0 && target < n) order.emplace_back(target, j);
  }
  std::sort(order.begin(), order.end());
  starts.clear();
  for (size_t k = 0; k < order.size(); ++k)
    if (k == 0 || order[k].first != order[k - 1].first) starts.push_back(static_cast<int64_t>(k));
  const auto groups = static_cast<int64_t>(starts.size());
  starts.push_back(static_cast<int64_t>(order.size()));
  const auto& ord = order;
  const auto& st = starts;
  const int64_t grain =
      std::max<int64_t>(1, kTaskBytes / (inner * static_cast<int64_t>(sizeof(T))));
  parallel_for(0, outer * groups, grain, [&](int64_t b, int64_t e) {
    constexpr int64_t kWidth = 512;
    ScatterAcc<T> acc[kWidth];
    for (int64_t item = b; item < e; ++item) {
      const int64_t o = item / groups, gi = item % groups;
      const int64_t first = st[static_cast<size_t>(gi)], last = st[static_cast<size_t>(gi) + 1];
      const int64_t target = ord[static_cast<size_t>(first)].first;
      const T* xrow = x + (o * n + target) * inner;
      T* orow = out + (o * n + target) * inner;
      for (int64_t c0 = 0; c0 < inner; c0 += kWidth) {
        const int64_t w = std::min(kWidth, inner - c0);
        for (int64_t c = 0; c < w; ++c) acc[c] = scatter_value(xrow[c0 + c]);
        for (int64_t k = first; k < last; ++k) {
          const T* urow = upd + (o * count + ord[static_cast<size_t>(k)].second) * inner + c0;
          for (int64_t c = 0; c < w; ++c) acc[c] += scatter_value(urow[c]);
        }
        for (int64_t c = 0; c < w; ++c) orow[c0 + c] = scatter_store<T>(acc[c]);
      }
    }
  });
}

Kernel make_scatter_add(const Graph& g, const Node& node) {
  const TensorType& t = g.type(node.operands[0]);
  const TensorType& it = g.type(node.operands[1]);
  if (is_bool(t.dtype)) return {};
  const AxisSplit s = split_at(t.shape, t.shape.normalize_axis(node.attrs.get_int("axis")));
  const int64_t count = it.shape.numel();
  return [=, dtype = t.dtype, index = it.dtype](const KernelIO& io) {
    with_numeric(dtype, [&](auto tag) {
      using T = decltype(tag);
      with_index(index, [&](auto i) {
        using I = decltype(i);
        scatter_add(s.outer, s.n, s.inner, count, io.input<T>(0), io.input<I>(1), io.input<T>(2),
                    io.output<T>(0));
      });
    });
  };
}

// ---------------------------------------------------------------- iota

// Element i along `dimension`, converted as the convert op converts an integer: floats
// rounded once to nearest even, narrower integers wrapped.
template <class T>
T iota_value(int64_t i) {
  if constexpr (kIsFloat<T>)
    return round_from_double<T>(static_cast<double>(i));
  else
    return static_cast<T>(i);
}

Kernel make_iota(const Graph&, const Node& node) {
  const TensorType& t = node.results[0];
  const AxisSplit s = split_at(t.shape, static_cast<int>(node.attrs.get_int("dimension")));
  return [s, dtype = t.dtype](const KernelIO& io) {
    with_numeric(dtype, [&](auto tag) {
      using T = decltype(tag);
      T* out = io.output<T>(0);
      const int64_t grain =
          std::max<int64_t>(1, kTaskBytes / (s.inner * static_cast<int64_t>(sizeof(T))));
      parallel_for(0, s.outer * s.n, grain, [&](int64_t b, int64_t e) {
        for (int64_t row = b; row < e; ++row)
          std::fill(out + row * s.inner, out + (row + 1) * s.inner, iota_value<T>(row % s.n));
      });
    });
  };
}

}  // namespace

void register_shape_kernels() {
  const std::string too_many = "more than 16 dims after collapsing contiguous ones";
  register_native(OpKind::Iota, make_iota);
  register_native(OpKind::Reshape, make_flat_copy);
  register_native(OpKind::Squeeze, make_flat_copy);
  register_native(OpKind::ExpandDims, make_flat_copy);
  register_native(OpKind::Transpose, make_transpose, too_many);
  register_native(OpKind::BroadcastInDim, make_broadcast_in_dim, too_many);
  register_native(OpKind::Expand, make_expand, too_many);
  register_native(OpKind::Slice, make_slice, too_many);
  register_native(OpKind::Reverse, make_reverse, too_many);
  register_native(OpKind::Concatenate, make_concatenate, too_many);
  register_native(OpKind::Pad, make_pad, too_many);
  register_native(OpKind::DynamicSlice, make_dynamic_slice, too_many);
  register_native(OpKind::DynamicUpdateSlice, make_dynamic_update_slice, too_many);
  register_native(OpKind::Gather, make_gather);
  register_native(OpKind::TakeAlongAxis, make_take_along_axis, "a rank above 17");
  register_native(OpKind::ScatterAdd, make_scatter_add);
}

}  // namespace rlx::cpu
