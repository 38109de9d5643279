// CPU kernel of threefry2x32 (rlx/ir/threefry.h): the four broadcast operands are gathered in
// blocks into u32 buffers (read in place through their broadcast strides), the 20 rounds run on
// Highway vectors of u32 (add, rotate, xor; AVX-512 / AVX2 picked at run time among the targets
// CMake's HWY_DISABLED_TARGETS leaves; this file is re-included once per target by
// foreach_target.h), blocks split across threads. rng_key has no kernel: it decomposes to a
// constant.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/random.cc"
// clang-format off
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
// clang-format on

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>

#include "rlx/ir/threefry.h"

HWY_BEFORE_NAMESPACE();
namespace rlx::cpu::random_simd {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DU = hn::ScalableTag<uint32_t>;
using VU = hn::Vec<DU>;

// Four rounds with the rotation amounts of group G (x0 += x1; x1 = rotl(x1, r) ^ x0).
template <size_t G>
HWY_INLINE void Rounds(VU& x0, VU& x1) {
  constexpr auto r = kThreefryRotations[G];
  x0 = hn::Add(x0, x1);
  x1 = hn::Xor(hn::RotateRight<32 - r[0]>(x1), x0);
  x0 = hn::Add(x0, x1);
  x1 = hn::Xor(hn::RotateRight<32 - r[1]>(x1), x0);
  x0 = hn::Add(x0, x1);
  x1 = hn::Xor(hn::RotateRight<32 - r[2]>(x1), x0);
  x0 = hn::Add(x0, x1);
  x1 = hn::Xor(hn::RotateRight<32 - r[3]>(x1), x0);
}

// y = threefry2x32(k0, k1, x0, x1) for n elements (rlx/ir/threefry.h, unrolled).
void Threefry(const uint32_t* k0, const uint32_t* k1, const uint32_t* x0, const uint32_t* x1,
              uint32_t* y0, uint32_t* y1, size_t n) {
  const DU d;
  const size_t lanes = hn::Lanes(d);
  size_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    const VU a = hn::LoadU(d, k0 + i), b = hn::LoadU(d, k1 + i);
    const VU ks[3] = {a, b, hn::Xor(hn::Xor(a, b), hn::Set(d, kThreefryParity))};
    VU v0 = hn::Add(hn::LoadU(d, x0 + i), ks[0]);
    VU v1 = hn::Add(hn::LoadU(d, x1 + i), ks[1]);
    for (uint32_t r = 1; r <= 5; ++r) {  // unrolled by the compiler: r is known per step
      if (r % 2 == 1)
        Rounds<0>(v0, v1);
      else
        Rounds<1>(v0, v1);
      v0 = hn::Add(v0, ks[r % 3]);
      v1 = hn::Add(v1, hn::Add(ks[(r + 1) % 3], hn::Set(d, r)));
    }
    hn::StoreU(v0, d, y0 + i);
    hn::StoreU(v1, d, y1 + i);
  }
  for (; i < n; ++i) {
    auto [a, b] = threefry2x32(k0[i], k1[i], x0[i], x1[i]);
    y0[i] = a;
    y1[i] = b;
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace rlx::cpu::random_simd
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "../kernel.h"
#include "broadcast.h"
#include "rlx/runtime/threading.h"

namespace rlx::cpu {
namespace random_simd {
HWY_EXPORT(Threefry);
}  // namespace random_simd

namespace {

constexpr int64_t kBlock = 512;  // elements per block: 4 inputs + 2 outputs of 2 KiB each

Kernel make_threefry2x32(const Graph& g, const Node& node) {
  const Shape& out = node.results[0].shape;
  std::array<Shape, 4> shapes;
  for (size_t k = 0; k < 4; ++k) shapes[k] = g.shape(node.operands[k]);
  std::optional<BroadcastLayout> layout = BroadcastLayout::make(out, shapes);
  if (!layout) return {};
  return [l = *layout](const KernelIO& io) {
    const int64_t blocks = (l.numel + kBlock - 1) / kBlock;
    parallel_for(0, blocks, 8, [&](int64_t b0, int64_t b1) {
      alignas(64) std::array<std::array<uint32_t, kBlock>, 4> w;
      for (int64_t b = b0; b < b1; ++b) {
        const int64_t start = b * kBlock, n = std::min(kBlock, l.numel - start);
        for (size_t k = 0; k < 4; ++k) {
          const auto* src = io.input<uint32_t>(k);
          uint32_t* dst = w[k].data();
          l.walk(k, start, n, [&](int64_t pos, int64_t len, int64_t off, int64_t step) {
            if (step == 1)
              std::memcpy(dst + pos, src + off, static_cast<size_t>(len) * sizeof(uint32_t));
            else
              std::fill_n(dst + pos, len, src[off]);
          });
        }
        HWY_DYNAMIC_DISPATCH(random_simd::Threefry)
        (w[0].data(), w[1].data(), w[2].data(), w[3].data(), io.output<uint32_t>(0) + start,
         io.output<uint32_t>(1) + start, static_cast<size_t>(n));
      }
    });
  };
}

}  // namespace

void register_random_kernels() {
  register_native(OpKind::Threefry2x32, make_threefry2x32,
                  "broadcasting needs more than BroadcastLayout::kMaxRank collapsed dims");
}

}  // namespace rlx::cpu
#endif  // HWY_ONCE
