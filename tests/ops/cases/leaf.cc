// Op cases of the leaf family: input, param, constant, iota.
#include "common.h"

namespace rlx::testing {

using namespace cases;

void add_leaf_cases(CaseList& cs) {
  auto identity = [](Graph&, const std::vector<Value>& in, DType) { return in; };
  cs.add(OpKind::Input, "passthrough").sample({T({2, 3}, specials())}, identity);
  cs.add(OpKind::Param, "passthrough").sample({param({2, 3}, specials())}, identity);
  cs.add(OpKind::Param, "matmul")
      .in(kNumericDTypes)
      .sample({T({2, 3}), param({3, 4})}, [](Graph& g, const std::vector<Value>& in, DType) {
        return std::vector<Value>{g.matmul(in[0], in[1])};
      });
  // A constant of the case's dtype, returned and compared with an input.
  cs.add(OpKind::Constant, "dense")
      .sample({T({2, 3}, integral(0, 3))}, [](Graph& g, auto& in, DType t) {
        Value c =
            g.constant(Tensor::from_doubles(t, {2, 3}, std::vector<double>{0, 1, 2, 0, 1, 2}));
        return std::vector<Value>{c, g.eq(c, in[0])};
      });
  cs.add(OpKind::Constant, "splat").sample({}, [](Graph& g, auto&, DType t) {
    return std::vector<Value>{g.constant(Tensor::full(t, {3, 4}, 1))};
  });
  auto iota = [](Shape s, int64_t dim) {
    return [s, dim](Graph& g, const std::vector<Value>&, DType t) {
      return std::vector<Value>{g.iota(t, s, dim)};
    };
  };
  cs.add(OpKind::Iota, "basic").sample({}, iota({3, 4}, 1)).sample({}, iota({2, 3}, 0));
  cs.add(OpKind::Iota, "plus_input").sample({T({3, 4})}, [](Graph& g, auto& in, DType t) {
    return std::vector<Value>{g.add(g.iota(t, {3, 4}, 1), in[0])};
  });
  cs.add(OpKind::Iota, "sized")
      .sample({}, iota({7, 33}, 1))
      .sample({}, iota({5, 3, 129}, 0))
      .sample({}, iota({0, 4}, 1))
      .only(kSizedSuites, kSizedWhy);
}

}  // namespace rlx::testing
