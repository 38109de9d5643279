// CPU kernel of threefry2x32 (rlx/ir/threefry.h): the four broadcast operands are gathered in
// blocks into u32 buffers (read in place through their broadcast strides), the cipher runs on
// each block in a loop the compiler vectorizes (AVX2/AVX-512 add, rotate, xor), blocks split
// across threads. rng_key has no kernel: it decomposes to a constant.
#include <algorithm>
#include <array>
#include <cstring>

#include "../kernel.h"
#include "broadcast.h"
#include "rlx/ir/threefry.h"
#include "rlx/runtime/threading.h"

namespace rlx::cpu {
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
        uint32_t* y0 = io.output<uint32_t>(0) + start;
        uint32_t* y1 = io.output<uint32_t>(1) + start;
        for (int64_t i = 0; i < n; ++i) {
          auto [a, c] = threefry2x32(w[0][i], w[1][i], w[2][i], w[3][i]);
          y0[i] = a;
          y1[i] = c;
        }
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
