// Random-number ops (rng_key, threefry2x32): schemas, inference and builders. Higher-level
// draws built from them (bits, uniform, fold_in, split) are in src/ir/random.cc.
#include <string>
#include <vector>

#include "registry.h"
#include "rlx/ir/graph.h"

namespace rlx {
namespace detail {
namespace {

std::vector<TensorType> infer_rng_key(const InferContext&) { return {{DType::i32, Shape{2}}}; }

// Four i32 operands (u32 words as bit patterns) broadcast to one shape; two results of it.
std::vector<TensorType> infer_threefry2x32(const InferContext& ctx) {
  static const char* const kNames[] = {"k0", "k1", "x0", "x1"};
  for (size_t i = 0; i < 4; ++i)
    ctx.require_op_dtype(
        ctx.operands[i].dtype,
        std::string("operand ") + kNames[i] + " (32-bit words are carried as i32 bit patterns)");
  Shape s = broadcast_operands(ctx);
  return {{DType::i32, s}, {DType::i32, s}};
}

}  // namespace

void register_random_ops() {
  define_op(OpKind::RngKey, {opt("seed", AttrType::Int)}, infer_rng_key);
  define_op(OpKind::Threefry2x32, {}, infer_threefry2x32);
}

}  // namespace detail

Value Graph::rng_key(std::optional<uint64_t> seed) {
  AttrMap attrs;
  // The text form's integers are int64: a seed >= 2^63 is stored as its two's-complement bits.
  if (seed) attrs.set("seed", static_cast<int64_t>(*seed));
  return emit1(OpKind::RngKey, {}, std::move(attrs));
}

std::pair<Value, Value> Graph::threefry2x32(Value k0, Value k1, Value x0, Value x1) {
  std::vector<Value> r = emit(OpKind::Threefry2x32, {k0, k1, x0, x1});
  return {r[0], r[1]};
}

}  // namespace rlx
