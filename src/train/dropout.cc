// Dropout and the training step's key (include/rlx/train/dropout.h).
#include "rlx/train/dropout.h"

#include <string>

#include "rlx/ir/error.h"
#include "rlx/ir/random.h"
#include "rlx/train/optimizer.h"

namespace rlx::train {

Value step_key(Graph& g, int64_t stream) {
  const int32_t id = g.find(kStepInput);
  Value step;
  if (id < 0) {
    step = g.input(kStepInput, DType::f32, Shape{});
  } else {
    const Node& n = g.node(id);
    check(n.op == OpKind::Input && n.results[0] == TensorType{DType::f32, Shape{}},
          std::string("step_key: graph '") + g.name() + "' has a leaf '" + kStepInput +
              "' that is not an f32[] input (it is " + std::string(op_name(n.op)) + " " +
              n.results[0].to_string() + ")");
    step = Value{id, 0};
  }
  // t is a whole number below 2^24 in practice, so the f32 -> i32 convert is exact.
  Value key = random::fold_in(g, g.rng_key(), g.convert(step, DType::i32));
  return random::fold_in(g, key, g.scalar(static_cast<double>(stream), DType::i64));
}

Value dropout(Graph& g, Value x, double rate, Value key) {
  check(rate >= 0.0 && rate < 1.0, "dropout: rate must be in [0, 1), got " + std::to_string(rate));
  check(is_float(g.dtype(x)), "dropout: x must be float, got " + g.type(x).to_string());
  check(g.type(key) == TensorType{DType::i32, Shape{2}},
        "dropout: key must be i32[2], got " + g.type(key).to_string());
  if (rate == 0.0) return x;
  const double keep = 1.0 - rate;
  Value mask = random::bernoulli(g, key, keep, g.shape(x));
  return g.select(mask, g.div(x, g.scalar_like(x, keep)), g.scalar_like(x, 0.0));
}

}  // namespace rlx::train
