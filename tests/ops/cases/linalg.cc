// Op cases of the linear-algebra family: dot_general and matmul.
#include "common.h"

namespace rlx::testing {
namespace {

using namespace cases;

AttrMap dims(Ints lb, Ints rb, Ints lc, Ints rc) {
  return {{"lhs_batch", lb}, {"rhs_batch", rb}, {"lhs_contract", lc}, {"rhs_contract", rc}};
}

}  // namespace

void add_linalg_cases(CaseList& cs) {
  // Integer operands stay small so that sums of products do not wrap differently from jnp's.
  const Values v = range(-2, 2).ints(-6, 6);
  cs.add(OpKind::DotGeneral, "batch_first")
      .sample({T({2, 3, 4}, v), T({2, 4, 5}, v)}, dims({0}, {0}, {2}, {1}));
  cs.add(OpKind::DotGeneral, "batch_mid")
      .sample({T({2, 3, 4}, v), T({4, 2, 5}, v)}, dims({0}, {1}, {2}, {0}));
  cs.add(OpKind::DotGeneral, "two_contract_swapped")
      .sample({T({3, 4, 2}, v), T({2, 5, 4}, v)}, dims({}, {}, {1, 2}, {2, 0}));
  cs.add(OpKind::DotGeneral, "matrix_vector")
      .sample({T({2, 3, 4}, v), T({4}, v)}, dims({}, {}, {2}, {0}));
  cs.add(OpKind::DotGeneral, "transposed")
      .sample({T({4, 3}, v), T({5, 4}, v)}, dims({}, {}, {0}, {1}));
  cs.add(OpKind::DotGeneral, "size0")
      .sample({T({2, 0, 4}, v), T({2, 4, 3}, v)}, dims({0}, {0}, {2}, {1}));
  AttrMap preferred = dims({}, {}, {1}, {0});
  preferred.set("preferred", DType::f32);
  cs.add(OpKind::DotGeneral, "preferred_f32")
      .in({DType::bf16, DType::f16})
      .sample({T({3, 8}), T({8, 2})}, preferred);
  cs.add(OpKind::DotGeneral, "sized")
      .sample({T({2, 7, 5}, range(-1, 1)), T({2, 5, 3}, range(-1, 1))}, dims({0}, {0}, {2}, {1}))
      .sample({T({5, 7}, range(-1, 1)), T({5, 3}, range(-1, 1))}, dims({}, {}, {0}, {0}))
      .sample({T({3, 4, 5}, range(-1, 1)), T({4, 5, 6}, range(-1, 1))},
              dims({}, {}, {1, 2}, {0, 1}))
      .sample({T({4, 9, 33}, range(-1, 1)), T({33, 4, 17}, range(-1, 1))}, dims({0}, {1}, {2}, {0}))
      .only(kSizedSuites, kSizedWhy);

  cs.add(OpKind::MatMul, "basic").sample({T({3, 4}, v), T({4, 5}, v)});
  cs.add(OpKind::MatMul, "broadcast_batch").sample({T({2, 3, 4}, v), T({4, 5}, v)});
  cs.add(OpKind::MatMul, "batched").sample({T({2, 1, 3, 4}, v), T({5, 4, 2}, v)});
  cs.add(OpKind::MatMul, "vector_left").sample({T({4}, v), T({2, 4, 3}, v)});
  cs.add(OpKind::MatMul, "vector_right").sample({T({3, 4}, v), T({4}, v)});
  cs.add(OpKind::MatMul, "vector_vector").sample({T({4}, v), T({4}, v)});
  cs.add(OpKind::MatMul, "size0").sample({T({2, 3, 0}, v), T({0, 2}, v)});
  OpCase& sized = cs.add(OpKind::MatMul, "sized");
  for (const auto& [a, b] :
       std::vector<std::pair<Shape, Shape>>{{Shape{1, 1}, Shape{1, 1}},
                                            {Shape{7, 13}, Shape{13, 5}},
                                            {Shape{33, 65}, Shape{65, 17}},
                                            {Shape{64, 64}, Shape{64, 64}},
                                            {Shape{2, 1, 5, 7}, Shape{3, 7, 4}},
                                            {Shape{5}, Shape{5, 3}},
                                            {Shape{4, 5}, Shape{5}},
                                            {Shape{0, 5}, Shape{5, 3}},
                                            {Shape{3, 0}, Shape{0, 4}},
                                            {Shape{129, 257}, Shape{257, 31}}})
    sized.sample({T(a, range(-1, 1)), T(b, range(-1, 1))});
  sized.only(kSizedSuites, kSizedWhy);
}

}  // namespace rlx::testing
