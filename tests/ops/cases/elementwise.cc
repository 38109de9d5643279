// Op cases of the elementwise family: unary math and activations, convert, not, stop_gradient,
// binary arithmetic / bitwise / compare ops with numpy broadcasting, select and clamp.
#include "common.h"

namespace rlx::testing {
namespace {

using namespace cases;

// Shapes off the vector width (17, 33, 129, 1031), size 0, rank 0 and one large enough to be
// split across threads: the CPU kernels' tails and parallel chunks.
const std::vector<Shape> kSizedUnary{Shape{17}, Shape{3, 33}, Shape{2, 3, 129}, Shape{0, 5},
                                     Shape{},   Shape{1},     Shape{1031},      Shape{70001}};
const std::vector<std::pair<Shape, Shape>> kSizedBinary{
    {Shape{3, 33}, Shape{3, 33}},  {Shape{3, 33}, Shape{33}},    {Shape{33}, Shape{3, 33}},
    {Shape{3, 1}, Shape{1, 33}},   {Shape{}, Shape{17}},         {Shape{17}, Shape{}},
    {Shape{2, 1, 5}, Shape{4, 1}}, {Shape{0, 3}, Shape{3}},      {Shape{5, 7, 1}, Shape{5, 1, 9}},
    {Shape{70001}, Shape{70001}},  {Shape{257, 129}, Shape{129}}};
// Small broadcasting pairs with special values: equal shapes, both sides broadcast, a scalar,
// a size-0 dim.
const std::vector<std::pair<Shape, Shape>> kSpecialBinary{{Shape{3, 4}, Shape{3, 4}},
                                                          {Shape{2, 1, 4}, Shape{3, 1}},
                                                          {Shape{}, Shape{2, 3}},
                                                          {Shape{0, 3}, Shape{1, 3}}};

// The value range of each unary op's basic case: inside its domain and away from poles, so
// that finite differences and XLA's approximations are well conditioned.
Values unary_domain(OpKind op) {
  switch (op) {
    case OpKind::Log:
    case OpKind::Sqrt:
    case OpKind::Rsqrt:
      return range(0.3, 3);
    case OpKind::Log1p:
      return range(-0.5, 3);
    case OpKind::Sin:
    case OpKind::Cos:
    case OpKind::Atan:
    case OpKind::Gelu:
    case OpKind::GeluTanh:
    case OpKind::Silu:
    case OpKind::Softplus:
      return range(-3, 3);
    case OpKind::Tan:
      return range(-1.2, 1.2);
    case OpKind::Logistic:
      return range(-4, 4);
    default:
      return range(-2, 2);
  }
}

// Unary elementwise ops (activations included): basic, special values, sizes.
void add_unary(CaseList& cs) {
  for (int k = 0; k < kNumOps; ++k) {
    auto op = static_cast<OpKind>(k);
    const OpInfo& info = op_info(op);
    if (!info.has(kUnary) || !info.has(kElementwise) || op == OpKind::Convert) continue;
    cs.add(op, "basic").sample({T({2, 3}, unary_domain(op))});
    cs.add(op, "specials")
        .sample({T({3, 5}, specials())})
        .sample({T({2, 0, 3})})
        .sample({T({}, specials())})
        .only(kNoPjrt, kSpecialsWhy);
    OpCase& sized = cs.add(op, "sized");
    for (const Shape& s : kSizedUnary) sized.sample({T(s, specials())});
    sized.only(kSizedSuites, kSizedWhy);
  }
  cs.add(OpKind::LeakyRelu, "alpha").sample({T({7})}, {{"alpha", 0.3}});
  cs.add(OpKind::LeakyRelu, "alpha_specials")
      .sample({T({3, 4}, specials())}, {{"alpha", 0.2}})
      .only(kNoPjrt, kSpecialsWhy);
  // Exact halves: round's ties go to even.
  cs.add(OpKind::Round, "ties")
      .sample({T({3, 5}, integral(-8, 8))}, [](Graph& g, auto& in, DType t) {
        return std::vector<Value>{g.round(g.mul(in[0], g.scalar(0.5, t)))};
      });
  cs.add(OpKind::StopGradient, "basic").sample({T({2, 3})});
  cs.add(OpKind::StopGradient, "specials")
      .sample({T({2, 3}, specials())})
      .only(kNoPjrt, kSpecialsWhy);
}

// convert: to every dtype from every dtype, finite and with special values (saturation, NaN).
void add_convert(CaseList& cs) {
  for (int d = 0; d < kNumDTypes; ++d) {
    auto to = static_cast<DType>(d);
    std::string name(dtype_name(to));
    OpCase& finite = cs.add(OpKind::Convert, "to_" + name + "_finite")
                         .sample({T({3, 5}, range(-80, 80).ints(-120, 120))}, {{"dtype", to}});
    if (is_float(to) && to != DType::f64)
      finite.only(kAllSuites & ~kFdSuite,
                  "rounding f64 to a narrower float swamps the finite-difference step (the "
                  "chain case and the grad references check convert's cotangent)");
    cs.add(OpKind::Convert, "to_" + name)
        .sample({T({1031}, specials())}, {{"dtype", to}})
        .sample({T({3, 33}, specials())}, {{"dtype", to}})
        .sample({T({0}, specials())}, {{"dtype", to}})
        .only(kNoPjrt, kSpecialsWhy);
  }
  // A float -> float convert passes the cotangent back; float -> int -> float carries none.
  cs.add(OpKind::Convert, "chain")
      .in(kFloatDTypes)
      .sample({T({2, 3})}, [](Graph& g, auto& in, DType) {
        return std::vector<Value>{g.mul(g.convert(in[0], DType::f64),
                                        g.convert(g.convert(in[0], DType::i32), DType::f64))};
      });
}

// The value ranges of a binary op's basic cases: divisors away from 0, pow on positive bases,
// rem on divisors near 1 (its discontinuities stay away from the samples).
std::pair<Values, Values> binary_domain(OpKind op) {
  switch (op) {
    case OpKind::Div:
      return {range(-2, 2), range(0.5, 2).ints(1, 9)};
    case OpKind::Pow:
      return {range(0.5, 2).ints(-3, 3), range(-1.5, 1.5).ints(-2, 5)};
    case OpKind::Rem:
      return {range(-3, 3), range(0.7, 1.3).ints(-9, 9)};
    default:
      if (op_info(op).has(kCompare)) return {integral(-2, 2), integral(-2, 2)};
      return {range(-2, 2), range(-2, 2)};
  }
}

void add_binary(CaseList& cs) {
  for (int k = 0; k < kNumOps; ++k) {
    auto op = static_cast<OpKind>(k);
    if (!op_info(op).has(kBinary)) continue;
    auto [x, y] = binary_domain(op);
    cs.add(op, "bcast_row").sample({T({2, 3}, x), T({3}, y)});
    cs.add(op, "bcast_outer").sample({T({2, 1}, x), T({1, 3}, y)});
    OpCase& sp = cs.add(op, "specials");
    for (const auto& [a, b] : kSpecialBinary) sp.sample({T(a, specials()), T(b, specials())});
    sp.only(kNoPjrt, kSpecialsWhy);
    OpCase& sized = cs.add(op, "sized");
    for (const auto& [a, b] : kSizedBinary) sized.sample({T(a, specials()), T(b, specials())});
    sized.only(kSizedSuites, kSizedWhy);
  }
  // A value used twice accumulates both cotangents.
  cs.add(OpKind::Mul, "same_operand").sample({T({4})}, [](Graph& g, auto& in, DType) {
    return std::vector<Value>{g.mul(in[0], in[0])};
  });
}

void add_select_clamp(CaseList& cs) {
  cs.add(OpKind::Select, "basic")
      .sample({fixed(DType::bool_, {2, 3}, {1, 0, 1, 0, 0, 1}), T({2, 3}), T({3})});
  cs.add(OpKind::Select, "broadcast")
      .sample({typed(DType::bool_, {3, 1}), T({3, 33}, specials()), T({33}, specials())})
      .sample({typed(DType::bool_, {1031}), T({1031}, specials()), T({}, specials())})
      .sample({typed(DType::bool_, {}), T({0, 2}), T({2})});
  cs.add(OpKind::Clamp, "basic")
      .sample({T({3}, range(-1, 0).ints(-5, 0)), T({2, 3}), T({}, range(0.5, 1).ints(1, 5))});
  cs.add(OpKind::Clamp, "sized")
      .sample({T({33}, specials()), T({3, 33}, specials()), T({}, specials())})
      .sample({T({1031}, specials()), T({1031}, specials()), T({1031}, specials())})
      .only(kSizedSuites, kSizedWhy);
}

}  // namespace

void add_elementwise_cases(CaseList& cs) {
  add_unary(cs);
  add_convert(cs);
  add_binary(cs);
  add_select_clamp(cs);
}

}  // namespace rlx::testing
