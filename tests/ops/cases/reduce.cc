// Op cases of the reduction family: reduce_sum / mean / max / min / prod, argmax / argmin,
// cumsum and top_k.
#include "common.h"

namespace rlx::testing {
namespace {

using namespace cases;

AttrMap axes(Ints a, bool keepdims = false) { return {{"axes", a}, {"keepdims", keepdims}}; }
AttrMap arg(int64_t axis, bool keepdims = false, DType index = DType::i32) {
  return {{"axis", axis}, {"keepdims", keepdims}, {"index_dtype", index}};
}
AttrMap cumsum(int64_t axis, bool exclusive = false, bool reverse = false) {
  return {{"axis", axis}, {"exclusive", exclusive}, {"reverse", reverse}};
}

void add_reductions(CaseList& cs) {
  for (OpKind op : {OpKind::ReduceSum, OpKind::ReduceMean, OpKind::ReduceMax, OpKind::ReduceMin,
                    OpKind::ReduceProd}) {
    // Products stay near 1 (no overflow of long products); integers small.
    bool prod = op == OpKind::ReduceProd;
    Values v = prod ? range(0.5, 1.5).ints(-2, 2) : range(-2, 2).ints(-6, 6);
    cs.add(op, "basic").sample({T({2, 3, 4}, v)}, axes({0, -1}));
    cs.add(op, "keepdims").sample({T({2, 3, 4}, v)}, axes({1}, true));
    cs.add(op, "configs")
        .sample({T({3, 4, 5}, specials())}, axes({1}))
        .sample({T({2, 0, 3}, v)}, axes({1}))
        .sample({T({4, 6}, v)}, axes({0, 1}))
        .sample({T({5}, v)}, axes({0}, true))
        .sample({T({3, 2}, v)}, axes({}))
        .only(kNoPjrt, kSpecialsWhy);
    // Every axis set of a rank-3 shape, a long vector, a long row and empty dims.
    Values sv = prod ? range(0.9, 1.1).with(Specials::All) : specials();
    OpCase& sized = cs.add(op, "sized");
    bool keep = false;
    for (Ints a : std::vector<Ints>{{0}, {1}, {2}, {0, 2}, {1, 2}, {0, 1, 2}, {}, {-1}}) {
      sized.sample({T({7, 33, 5}, sv)}, axes(a, keep));
      keep = !keep;
    }
    sized.sample({T({70001}, sv)}, axes({0}))
        .sample({T({3, 1, 1029}, sv)}, axes({2}, true))
        .sample({T({0, 4}, sv)}, axes({0}))
        .sample({T({0, 4}, sv)}, axes({1}))
        .only(kSizedSuites, kSizedWhy);
  }
  // Rows with one zero and with two zeros: reduce_prod's zero-aware vjp.
  cs.add(OpKind::ReduceProd, "zeros")
      .in(kFloatDTypes)
      .sample({T({3, 4}, range(0.5, 1.5))}, [](Graph& g, auto& in, DType t) {
        Tensor m = Tensor::from_doubles(t, {3, 4},
                                        std::vector<double>{1, 0, 1, 1, 0, 1, 0, 1, 1, 1, 1, 1});
        return std::vector<Value>{g.reduce_prod(g.mul(in[0], g.constant(m)), {1})};
      });
}

void add_arg_reductions(CaseList& cs) {
  for (OpKind op : {OpKind::ArgMax, OpKind::ArgMin}) {
    // Integral values: ties, which go to the first index.
    cs.add(op, "ties").sample({T({3, 5, 4}, integral(-2, 2))}, arg(1));
    cs.add(op, "keepdims_i64").sample({T({3, 5, 4})}, arg(-1, true, DType::i64));
    cs.add(op, "specials")
        .sample({T({3, 5, 4}, specials())}, arg(1))
        .sample({T({6, 2}, specials())}, arg(0, false, DType::i64));
    OpCase& sized = cs.add(op, "sized");
    for (int64_t a : {0, 1, 2, -1}) sized.sample({T({7, 33, 5}, specials())}, arg(a, a == 1));
    sized.sample({T({70001}, specials())}, arg(0, false, DType::i64));
    sized.only(kSizedSuites, kSizedWhy);
  }
}

void add_cumsum(CaseList& cs) {
  const Values v = range(-0.9, 0.9).ints(-6, 6);
  cs.add(OpKind::CumSum, "basic").sample({T({3, 4}, v)}, cumsum(1));
  cs.add(OpKind::CumSum, "exclusive_reverse").sample({T({3, 4}, v)}, cumsum(0, true, true));
  cs.add(OpKind::CumSum, "configs")
      .sample({T({3, 4, 2}, v)}, cumsum(0))
      .sample({T({3, 4, 2}, v)}, cumsum(-1, true))
      .sample({T({3, 4, 2}, v)}, cumsum(1, false, true))
      .sample({T({3, 4, 2}, v)}, cumsum(1, true, true));
  OpCase& sized = cs.add(OpKind::CumSum, "sized");
  for (int64_t a : {0, 1, 2})
    for (bool ex : {false, true})
      for (bool rev : {false, true}) sized.sample({T({7, 33, 5}, specials())}, cumsum(a, ex, rev));
  sized.sample({T({1031}, specials())}, cumsum(0))
      .sample({T({0, 3}, specials())}, cumsum(0))
      .only(kSizedSuites, kSizedWhy);
}

void add_top_k(CaseList& cs) {
  auto k = [](int64_t n) { return AttrMap{{"k", n}}; };
  cs.add(OpKind::TopK, "basic").sample({T({3, 6})}, k(3));
  cs.add(OpKind::TopK, "configs")
      .sample({T({3, 4, 5})}, k(1))
      .sample({T({3, 4, 5})}, k(2))
      .sample({T({3, 4, 5})}, k(5))
      .sample({T({9})}, k(4));
  // Ties go to the lower index; k = 0 and k = n.
  cs.add(OpKind::TopK, "ties")
      .sample({T({4, 7}, integral(-3, 3))}, k(3))
      .sample({T({4, 7}, integral(-3, 3))}, k(7))
      .sample({T({4, 7}, integral(-3, 3))}, k(0));
  OpCase& sized = cs.add(OpKind::TopK, "sized");
  for (int64_t n : {1, 7, 33, 0}) sized.sample({T({5, 33}, specials())}, k(n));
  sized.sample({T({1031}, specials())}, k(16));
  sized.only(kSizedSuites, kSizedWhy);
  // NaN above +inf, +0 above -0 (rlx's order; lax.top_k sorts -0 below +0).
  cs.add(OpKind::TopK, "specials")
      .sample({T({5, 9}, specials())}, k(4))
      .only(kAllSuites & ~kPythonSuite,
            "lax.top_k orders -0 below +0 and NaN differently from rlx's pinned order (NaN "
            "first, then IEEE total order); the CPU and PJRT suites check rlx's order");
}

}  // namespace

void add_reduce_cases(CaseList& cs) {
  add_reductions(cs);
  add_arg_reductions(cs);
  add_cumsum(cs);
  add_top_k(cs);
}

}  // namespace rlx::testing
