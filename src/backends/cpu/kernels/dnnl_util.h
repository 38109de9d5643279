// Internal: oneDNN plumbing shared by the gemm and conv kernels — the engine, per-thread streams
// and scratch buffers, strided views with gather/convert loops, and the activation post-ops.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "half.h"
#include "rlx/ir/dtype.h"
#include "rlx/runtime/threading.h"

namespace rlx::cpu {

/// The process-wide oneDNN CPU engine. Every primitive and memory object of the kernels is
/// created on it, so primitives built at compile time run on any thread's stream.
inline const dnnl::engine& dnnl_engine() {
  static const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

/// The calling thread's in-order stream on dnnl_engine(). Streams are not thread-safe and clones
/// of one executable run concurrently on different threads, so each thread has its own.
inline dnnl::stream& dnnl_stream() {
  thread_local dnnl::stream stream(dnnl_engine());
  return stream;
}

/// A dnnl::memory over `ptr`, which the primitive only reads when it is an operand (oneDNN's
/// API takes a non-const handle for every argument).
inline dnnl::memory dnnl_memory(const dnnl::memory::desc& md, const void* ptr) {
  return dnnl::memory(md, dnnl_engine(), const_cast<void*>(ptr));
}

/// Whether oneDNN picked its reference (naive loop) implementation for `pd`.
inline bool is_reference_impl(const dnnl::primitive_desc_base& pd) {
  return std::string_view(pd.impl_info_str()).starts_with("ref");
}

/// The oneDNN data type of f32 or bf16 (the types the kernels hand to oneDNN).
inline dnnl::memory::data_type dnnl_type(DType t) {
  return t == DType::bf16 ? dnnl::memory::data_type::bf16 : dnnl::memory::data_type::f32;
}

/// Scratch slots of one kernel call. Kernels run one at a time on a thread and use scratch only
/// within a call, so the slots of a thread are shared by every kernel it runs.
enum ScratchSlot : int {
  kScratchSrc,      // the first operand, packed or converted
  kScratchWeights,  // the second operand, packed or converted
  kScratchBias,     // a converted bias
  kScratchDst,      // a result computed in another type
  kScratchSrcAlt,   // further copies (e.g. reordered to oneDNN's blocked layouts)
  kScratchWeightsAlt,
  kScratchDstAlt,
  kScratchPad,  // oneDNN's scratchpad
  kNumScratch
};

/// At least `bytes` of 64-byte-aligned memory private to the calling thread, valid until the
/// thread next asks for the same slot. Buffers only grow, so steady-state runs do not allocate.
inline std::byte* scratch(ScratchSlot slot, size_t bytes) {
  struct Buffer {
    std::unique_ptr<std::byte, decltype(&std::free)> ptr{nullptr, &std::free};
    size_t size = 0;
  };
  thread_local std::array<Buffer, kNumScratch> buffers;
  Buffer& b = buffers[static_cast<size_t>(slot)];
  if (b.size < bytes) {
    size_t n = (bytes + 63) / 64 * 64;
    b.ptr.reset(static_cast<std::byte*>(std::aligned_alloc(64, n)));
    b.size = b.ptr ? n : 0;
  }
  return b.ptr.get();
}

/// One axis of a strided view: its extent and the distance in elements between consecutive
/// entries (0 for a broadcast axis).
struct Axis {
  int64_t size = 1;
  int64_t stride = 0;
};

/// The single axis that walks the same elements as `outer` then `inner` (outer-major), if any:
/// a size-1 axis is absorbed, otherwise outer.stride must equal inner.stride * inner.size
/// (which also merges two broadcast axes).
inline bool merge_axes(const Axis& outer, const Axis& inner, Axis* merged) {
  if (outer.size == 1) {
    *merged = inner;
  } else if (inner.size == 1) {
    *merged = outer;
  } else if (outer.stride == inner.stride * inner.size) {
    *merged = {outer.size * inner.size, inner.stride};
  } else {
    return false;
  }
  return true;
}

/// `axes` (outermost first) with every mergeable neighbour pair merged and size-1 axes dropped;
/// an empty result is a single element.
inline std::vector<Axis> compact_axes(const std::vector<Axis>& axes) {
  std::vector<Axis> out;
  for (const Axis& a : axes) {
    if (a.size == 1) continue;
    Axis m;
    if (!out.empty() && merge_axes(out.back(), a, &m))
      out.back() = m;
    else
      out.push_back(a);
  }
  return out;
}

/// Element conversion of the gather/convert loops: f16/bf16 widen through f32 (exact), a
/// narrowing to f16/bf16 rounds to nearest even; same-type copies are exact.
template <class D, class S>
inline D convert_elem(S s) {
  if constexpr (std::is_same_v<D, S>) {
    return s;
  } else if constexpr (std::is_same_v<D, f16> || std::is_same_v<D, bf16>) {
    return from_f32<D>(to_f32(s));
  } else {
    return static_cast<D>(to_f32(s));
  }
}

/// Copies the strided view `axes` (outermost first, non-empty, no broadcast axes; compact_axes
/// output keeps the loop short) of `src` into contiguous `dst`, converting each element with
/// convert_elem, in parallel over rows.
template <class S, class D>
void gather(const S* src, const std::vector<Axis>& axes, D* dst) {
  int64_t inner = axes.back().size, inner_stride = axes.back().stride;
  int64_t rows = 1;
  for (size_t i = 0; i + 1 < axes.size(); ++i) rows *= axes[i].size;
  if (rows * inner == 0) return;
  auto body = [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      int64_t offset = 0, rest = r;
      for (size_t i = axes.size() - 1; i-- > 0;) {
        offset += (rest % axes[i].size) * axes[i].stride;
        rest /= axes[i].size;
      }
      const S* s = src + offset;
      D* d = dst + r * inner;
      if (inner_stride == 1) {
        for (int64_t j = 0; j < inner; ++j) d[j] = convert_elem<D>(s[j]);
      } else {
        for (int64_t j = 0; j < inner; ++j) d[j] = convert_elem<D>(s[j * inner_stride]);
      }
    }
  };
  // By reference: a std::function holding the lambda itself would allocate per call.
  parallel_for(0, rows, std::max<int64_t>(1, 32768 / inner), std::ref(body));
}

/// dst[i] = convert_elem<D>(src[i]) for i < n, in parallel.
template <class S, class D>
void convert_n(const S* src, D* dst, int64_t n) {
  parallel_for(0, n, 32768, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) dst[i] = convert_elem<D>(src[i]);
  });
}

/// gather and convert_n over untyped memory, chosen per dtype pair at compile time.
using GatherFn = void (*)(const std::byte*, const std::vector<Axis>&, std::byte*);
using ConvertFn = void (*)(const std::byte*, std::byte*, int64_t);
template <class S, class D>
void gather_bytes(const std::byte* src, const std::vector<Axis>& axes, std::byte* dst) {
  gather(reinterpret_cast<const S*>(src), axes, reinterpret_cast<D*>(dst));
}
template <class S, class D>
void convert_bytes(const std::byte* src, std::byte* dst, int64_t n) {
  convert_n(reinterpret_cast<const S*>(src), reinterpret_cast<D*>(dst), n);
}

/// Appends fused_matmul_bias_act's activation `act` to `po` as eltwise post-ops that match the
/// reference on every input, NaN and ±inf included:
///  - relu: oneDNN's relu (alpha 0) and clip map NaN to 0, so relu is the chain
///    elu(alpha = 2^-149) -> relu(alpha = 2^-149) -> 1*x + 0. For x > 0 each step is the
///    identity; for x <= 0 the elu gives a value in [-2^-149, 0] (-inf gives -2^-149), the
///    leaky relu scales it by 2^-149, which underflows to -0, and +0 added turns -0 into +0;
///    NaN fails every x > 0 test and stays NaN through the products. Exact.
///  - gelu / gelu_tanh / silu: oneDNN's gelu_erf / gelu_tanh / swish(alpha 1), which give NaN
///    at -inf like the reference (x * 0). Measured against the double reference on a dense
///    sweep of [-12, 12]: gelu and gelu_tanh err by at most 1.6e-7 * max(1, |x|) (absolute,
///    so in the negative tail, where the result underflows towards 0, not relatively), silu
///    by at most 3e-7 relative.
inline void append_activation(dnnl::post_ops& po, const std::string& act) {
  using dnnl::algorithm;
  if (act == "relu") {
    constexpr float kTiny = 0x1p-149f;  // the smallest positive subnormal f32
    po.append_eltwise(1.f, algorithm::eltwise_elu, kTiny, 0.f);
    po.append_eltwise(1.f, algorithm::eltwise_relu, kTiny, 0.f);
    po.append_eltwise(1.f, algorithm::eltwise_linear, 1.f, 0.f);
  } else if (act == "gelu") {
    po.append_eltwise(1.f, algorithm::eltwise_gelu_erf, 0.f, 0.f);
  } else if (act == "gelu_tanh") {
    po.append_eltwise(1.f, algorithm::eltwise_gelu_tanh, 0.f, 0.f);
  } else if (act == "silu") {
    po.append_eltwise(1.f, algorithm::eltwise_swish, 1.f, 0.f);
  }
}

}  // namespace rlx::cpu
