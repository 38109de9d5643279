// Reference kernels for the random-number ops: rng_key (the key of attr seed, 0 when absent,
// which is CompileOptions' default seed) and threefry2x32 (rlx/ir/threefry.h, element by
// element over the broadcast operands).
#include "eval.h"
#include "rlx/ir/threefry.h"

namespace rlx::detail {
namespace {

// Attr seed is the seed's 64 bits as int64 (Graph::rng_key).
std::vector<Tensor> eval_rng_key(const EvalContext& ctx) {
  const auto seed =
      static_cast<uint64_t>(ctx.attrs().has("seed") ? ctx.attrs().get_int("seed") : 0);
  const std::array<uint32_t, 2> k = threefry_seed(seed);
  Tensor out(DType::i32, Shape{2});
  for (size_t i = 0; i < 2; ++i) out.data_as<int32_t>()[i] = static_cast<int32_t>(k[i]);
  return {out};
}

std::vector<Tensor> eval_threefry2x32(const EvalContext& ctx) {
  const Shape& s = ctx.result_type(0).shape;
  Tensor y0(DType::i32, s), y1(DType::i32, s);
  std::array<BroadcastIndexer, 4> ix{
      BroadcastIndexer(ctx.operands[0].shape(), s), BroadcastIndexer(ctx.operands[1].shape(), s),
      BroadcastIndexer(ctx.operands[2].shape(), s), BroadcastIndexer(ctx.operands[3].shape(), s)};
  auto word = [&](size_t k, int64_t i) {
    return static_cast<uint32_t>(ctx.operands[k].data_as<int32_t>()[ix[k](i)]);
  };
  for (int64_t i = 0; i < y0.numel(); ++i) {
    auto [a, b] = threefry2x32(word(0, i), word(1, i), word(2, i), word(3, i));
    y0.data_as<int32_t>()[i] = static_cast<int32_t>(a);
    y1.data_as<int32_t>()[i] = static_cast<int32_t>(b);
  }
  return {y0, y1};
}

}  // namespace

void register_eval_random() {
  set_eval(OpKind::RngKey, eval_rng_key);
  set_eval(OpKind::Threefry2x32, eval_threefry2x32);
}

}  // namespace rlx::detail
