// StableHLO lowering of threefry2x32: the cipher's 20 rounds written out with i32 add (two's
// complement, the same bits as u32 addition), xor, or, shift_left and shift_right_logical (a
// rotation is (x << r) | (x >>> (32 - r))), as jax lowers its threefry2x32_p when it unrolls the
// rounds. Not stablehlo.rng_bit_generator: its THREE_FRY stream is XLA's own counter layout,
// not jax.random's, and the ops must give the same bits on every backend (rlx/ir/threefry.h).
#include <map>

#include "lower.h"
#include "rlx/ir/threefry.h"

namespace rlx::pjrt::lower {
namespace {

std::vector<std::string> threefry2x32(Emitter& e, const Node& n) {
  const TensorType t = n.results[0];
  std::vector<Operand> w = e.broadcast_operands(n);  // k0, k1, x0, x1 at the result shape
  auto op = [&](const char* name, const Operand& a, const Operand& b) {
    return Operand{e.emit(name, {a, b}, "", t), t};
  };
  std::map<uint32_t, Operand> constants;  // each splat constant emitted once
  auto constant = [&](uint32_t v) {
    auto it = constants.find(v);
    if (it == constants.end())
      it = constants
               .emplace(v, Operand{e.splat(DType::i32, t.shape,
                                           static_cast<double>(static_cast<int32_t>(v))),
                                   t})
               .first;
    return it->second;
  };
  auto rotl = [&](const Operand& x, uint32_t r) {
    return op("stablehlo.or", op("stablehlo.shift_left", x, constant(r)),
              op("stablehlo.shift_right_logical", x, constant(32 - r)));
  };
  const Operand ks[3] = {
      w[0], w[1], op("stablehlo.xor", op("stablehlo.xor", w[0], w[1]), constant(kThreefryParity))};
  Operand x0 = op("stablehlo.add", w[2], ks[0]);
  Operand x1 = op("stablehlo.add", w[3], ks[1]);
  for (uint32_t i = 1; i <= 5; ++i) {
    for (uint32_t r : kThreefryRotations[(i - 1) % 2]) {
      x0 = op("stablehlo.add", x0, x1);
      x1 = op("stablehlo.xor", rotl(x1, r), x0);
    }
    x0 = op("stablehlo.add", x0, ks[i % 3]);
    x1 = op("stablehlo.add", op("stablehlo.add", x1, ks[(i + 1) % 3]), constant(i));
  }
  return {x0.name, x1.name};
}

}  // namespace

void register_random_lowerings(OpTable<LowerFn>& t) { t.set(OpKind::Threefry2x32, threefry2x32); }

}  // namespace rlx::pjrt::lower
