// Op cases of the random-number family: rng_key (seeded and from the compile seed, which is 0
// in every suite: the evaluator's default and CompileOptions' default) and threefry2x32 over
// full-range 32-bit words, broadcast operands and sizes for the CPU kernel's blocks.
#include "common.h"

namespace rlx::testing {

using namespace cases;

void add_random_cases(CaseList& cs) {
  cs.add(OpKind::RngKey, "seeded").sample({}, [](Graph& g, auto&, DType) {
    return std::vector<Value>{g.rng_key(42), g.rng_key((uint64_t{1} << 40) + 5),
                              g.rng_key(~uint64_t{0})};
  });
  cs.add(OpKind::RngKey, "compile_seed")
      .sample({typed(DType::i32, {2})}, [](Graph& g, auto& in, DType) {
        return std::vector<Value>{g.add(g.rng_key(), in[0])};
      });
  const Values words = ints(INT32_MIN, INT32_MAX);
  cs.add(OpKind::Threefry2x32, "basic")
      .sample({T({3, 4}, words), T({3, 4}, words), T({3, 4}, words), T({3, 4}, words)});
  // A key per row against a row of counters (the shape random::bits emits), and scalars.
  cs.add(OpKind::Threefry2x32, "broadcast")
      .sample({T({2, 1}, words), T({2, 1}, words), T({}, words), T({5}, words)})
      .sample({T({}, words), T({}, words), T({}, words), T({})});
  cs.add(OpKind::Threefry2x32, "sized")
      .sample({T({}, words), T({}, words), T({}), T({1031}, words)})
      .sample({T({7, 1, 1}, words), T({7, 1, 1}, words), T({33, 1}, words), T({33, 5}, words)})
      .only(kSizedSuites, kSizedWhy);
}

}  // namespace rlx::testing
