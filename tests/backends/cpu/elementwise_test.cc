// The CPU backend's elementwise kernels (src/backends/cpu/kernels/elementwise.cc) against the
// reference evaluator: every elementwise op x every dtype it accepts, on broadcasting shapes
// (N x 1 with 1 x M, scalars, size 0, odd sizes, long rows), special values, regions with
// several outputs, mixed dtypes and constants, in-place chains, large parallel tensors and
// concurrent clones. Every check also asserts that the op ran natively (kernel report).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/test_util.h"
#include "rlx/ir/evaluator.h"
#include "rlx/runtime/session.h"

namespace rlx {
namespace {

using testing::random_tensor;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

const DType kFloats[] = {DType::f32, DType::f16, DType::bf16, DType::f64};
const DType kInts[] = {DType::i8, DType::u8, DType::i32, DType::i64};
const DType kNumeric[] = {DType::f32, DType::f16, DType::bf16, DType::f64,
                          DType::i8,  DType::u8,  DType::i32,  DType::i64};
const DType kAll[] = {DType::f32, DType::f16, DType::bf16, DType::f64,  DType::i8,
                      DType::u8,  DType::i32, DType::i64,  DType::bool_};

Session& session() {
  static Session s;
  return s;
}

/// Allowed difference: ulps of the dtype at the reference value plus atol; {0, 0} is exact
/// (bit-equal values; any NaN matches any NaN). Zeros must match in sign either way.
struct Tol {
  double ulps = 0;
  double atol = 0;
};
constexpr Tol kExact{};

double ulp_of(DType t, double v) {
  int mant = 52, emin = -1022;
  if (t == DType::f32) mant = 23, emin = -126;
  if (t == DType::f16) mant = 10, emin = -14;
  if (t == DType::bf16) mant = 7, emin = -126;
  int e = 0;
  std::frexp(v, &e);
  return std::ldexp(1.0, std::max(e - 1, emin) - mant);
}

::testing::AssertionResult matches(const Tensor& got, const Tensor& want, Tol tol) {
  if (got.type() != want.type())
    return ::testing::AssertionFailure()
           << "type " << got.type().to_string() << " vs " << want.type().to_string();
  for (int64_t i = 0; i < got.numel(); ++i) {
    if (!is_float(got.dtype())) {
      if (got.get_i64(i) != want.get_i64(i))
        return ::testing::AssertionFailure()
               << "element " << i << ": " << got.get_i64(i) << " vs " << want.get_i64(i);
      continue;
    }
    double g = got.get_f64(i), w = want.get_f64(i);
    bool ok;
    if (std::isnan(g) || std::isnan(w))
      ok = std::isnan(g) && std::isnan(w);
    else if (w == 0 && g == 0)
      ok = std::signbit(g) == std::signbit(w);
    else if (std::isinf(g) || std::isinf(w) || (tol.ulps == 0 && tol.atol == 0))
      ok = g == w;
    else
      ok = std::fabs(g - w) <= tol.ulps * ulp_of(got.dtype(), w) + tol.atol;
    if (!ok)
      return ::testing::AssertionFailure()
             << "element " << i << ": " << g << " vs reference " << w << " (diff " << g - w << ", "
             << tol.ulps << " ulp + " << tol.atol << ")";
  }
  return ::testing::AssertionSuccess();
}

/// Compiles g on the CPU backend, runs it and compares every output with the reference
/// evaluator; `op` must have run natively at least once (unless the outputs are empty) and
/// never through the fallback.
std::shared_ptr<Executable> check(const Graph& g, const TensorMap& feeds, OpKind op, Tol tol,
                                  const CompileOptions& options = {}) {
  std::shared_ptr<Executable> exe = session().compile(g, options);
  std::vector<Tensor> got = exe->run(feeds);
  std::vector<Tensor> want = evaluate(g, feeds);
  EXPECT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size() && i < want.size(); ++i)
    EXPECT_TRUE(matches(got[i], want[i], tol)) << g.name() << " output " << i << "\n"
                                               << g.to_string();
  // A node without elements computes nothing and has no kernel at all.
  bool empty = false;
  for (const Tensor& t : want) empty |= t.numel() == 0;
  auto [native, reference] = exe->kernels().count(op);
  if (!empty) {
    EXPECT_GE(native, 1) << g.name() << "\n" << exe->kernel_report();
  }
  EXPECT_EQ(reference, 0) << g.name() << "\n" << exe->kernel_report();
  return exe;
}

/// Random values in [lo, hi) with every 5th element replaced by a special value of the dtype:
/// NaN, +-inf, +-0, subnormals, huge, halves (ties) for floats; min, max, 0, +-1 for integers.
Tensor random_with_specials(DType t, const Shape& shape, uint64_t seed, double lo, double hi) {
  Tensor x = random_tensor(t, shape, seed, lo, hi);
  const double floats[] = {kNaN, kInf, -kInf, 0.0,  -0.0,  1e-40, -3e-42, 1e30,  -1e30,
                           2.5,  -0.5, 65504, 1e-6, -7e-8, 0.5,   88.0,   -110.0};
  int64_t imin = t == DType::i8 ? -128 : t == DType::i32 ? INT32_MIN : INT64_MIN;
  int64_t imax = t == DType::i8    ? 127
                 : t == DType::u8  ? 255
                 : t == DType::i32 ? INT32_MAX
                                   : INT64_MAX;
  if (t == DType::u8) imin = 0;
  const int64_t ints[] = {imin, imax, 0, 1, -1, imin + 1};
  for (int64_t i = 0; i < x.numel(); i += 5) {
    auto k = static_cast<size_t>((static_cast<uint64_t>(i) / 5 + seed) % 17);
    if (is_float(t))
      x.set_f64(i, floats[k]);
    else if (is_integer(t))
      x.set_i64(i, ints[k % 6]);
  }
  return x;
}

// ---- unary

struct UnaryCase {
  OpKind op;
  double lo, hi;    // input range
  double f32_ulps;  // 0: exact
};

// Input ranges keep the ops where the reference's double formula is itself accurate to far
// below an f32 ulp (its gelu and gelu_tanh cancel in 1 + erf / 1 + tanh far in the negative
// tail, where they return -0 early).
const UnaryCase kFloatUnary[] = {
    {OpKind::Neg, -4, 4, 0},          {OpKind::Abs, -4, 4, 0},
    {OpKind::Sign, -4, 4, 0},         {OpKind::Floor, -9, 9, 0},
    {OpKind::Ceil, -9, 9, 0},         {OpKind::Round, -9, 9, 0},
    {OpKind::Relu, -4, 4, 0},         {OpKind::Sqrt, -1, 9, 0},
    {OpKind::Rsqrt, -1, 9, 0},        {OpKind::Exp, -20, 20, 1.5},
    {OpKind::Expm1, -3, 3, 4.5},      {OpKind::Log, -1, 50, 1.5},
    {OpKind::Log1p, -1.5, 9, 3.5},    {OpKind::Sin, -40, 40, 1.5},
    {OpKind::Cos, -40, 40, 1.5},      {OpKind::Tan, -4, 4, 1.5},
    {OpKind::Tanh, -5, 5, 3.5},       {OpKind::Atan, -9, 9, 3.5},
    {OpKind::Logistic, -20, 20, 3.5}, {OpKind::Erf, -4, 4, 2.5},
    {OpKind::Gelu, -6, 6, 6.5},       {OpKind::GeluTanh, -2.5, 4, 4.5},
    {OpKind::Silu, -20, 20, 4.5},     {OpKind::Softplus, -20, 20, 4.5},
    {OpKind::LeakyRelu, -4, 4, 0},
};

// f32: the case's ulps (exact ops: bit-equal); f16 / bf16: exact for the exact ops, else 1 ulp
// of the dtype (an f32 result a few f32 ulp off rounds to the nearest or the next 16-bit
// value); f64: exact (the same libm calls and formulas as the reference).
Tol unary_tol(const UnaryCase& c, DType t) {
  if (t == DType::f64) return kExact;
  if (t == DType::f32) return {c.f32_ulps, 0};
  // bf16 leaky_relu results below 2^-126 may round twice (vec_math.h).
  bool exact16 = c.f32_ulps == 0 && !(c.op == OpKind::LeakyRelu && t == DType::bf16);
  return exact16 ? kExact : Tol{1, 0};
}

TEST(ElementwiseCpu, UnaryFloatOpsEveryDtype) {
  const Shape shapes[] = {Shape{1}, Shape{37}, Shape{3, 0}, Shape{3, 333}, Shape{2, 1, 1500}};
  uint64_t seed = 1;
  for (const UnaryCase& c : kFloatUnary)
    for (DType t : kFloats)
      for (const Shape& s : shapes) {
        Graph g(std::string(op_name(c.op)) + "_" + std::string(dtype_name(t)));
        Value x = g.input("x", t, s);
        Value y = c.op == OpKind::LeakyRelu ? g.leaky_relu(x, 0.2) : g.emit1(c.op, {x});
        g.set_outputs({y});
        check(g, {{"x", random_with_specials(t, s, ++seed, c.lo, c.hi)}}, c.op, unary_tol(c, t));
      }
}

// Special values one per element, through every lane position and the masked tail.
TEST(ElementwiseCpu, UnarySpecialValuesMatchReference) {
  const double specials[] = {kNaN,   -kNaN, kInf,  -kInf, 0.0,   -0.0,    1e-45,  -1e-45, 1e-40,
                             -1e-40, 1e30,  -1e30, 88.72, 88.73, -103.9,  -104.5, 0.5,    -0.5,
                             1.5,    2.5,   -2.5,  1e-7,  -1e-7, 65520.0, -20.0,  20.0,   3.92,
                             -15.0,  1e5,   1e7,   -3.0,  1.0,   -1.0};
  const auto n = static_cast<int64_t>(std::size(specials));
  for (const UnaryCase& c : kFloatUnary)
    for (DType t : kFloats) {
      Tensor x(t, Shape{n});
      for (int64_t i = 0; i < n; ++i) x.set_f64(i, specials[i]);
      Graph g(std::string(op_name(c.op)) + "_specials_" + std::string(dtype_name(t)));
      Value in = g.input("x", t, Shape{n});
      g.set_outputs({c.op == OpKind::LeakyRelu ? g.leaky_relu(in) : g.emit1(c.op, {in})});
      check(g, {{"x", x}}, c.op, unary_tol(c, t));
    }
}

TEST(ElementwiseCpu, UnaryIntegerAndBoolOps) {
  uint64_t seed = 100;
  for (OpKind op : {OpKind::Neg, OpKind::Abs, OpKind::Sign, OpKind::Relu, OpKind::Not})
    for (DType t : kInts)
      for (const Shape& s : {Shape{29}, Shape{4, 300}}) {
        Graph g(std::string(op_name(op)) + "_" + std::string(dtype_name(t)));
        g.set_outputs({g.emit1(op, {g.input("x", t, s)})});
        check(g, {{"x", random_with_specials(t, s, ++seed, -200, 200)}}, op, kExact);
      }
  Graph g("not_bool");
  g.set_outputs({g.logical_not(g.input("x", DType::bool_, Shape{3, 41}))});
  check(g, {{"x", random_tensor(DType::bool_, Shape{3, 41}, 7)}}, OpKind::Not, kExact);
}

// Every pair of dtypes: float -> int truncates and saturates (NaN -> 0), -> f16 / bf16 rounds
// once (also from i64 beyond 2^24), int -> int wraps, -> bool is != 0.
TEST(ElementwiseCpu, ConvertEveryDtypePair) {
  uint64_t seed = 200;
  for (DType from : kAll)
    for (DType to : kAll) {
      if (from == to) continue;  // simplified away
      Shape s{7, 53};
      Tensor x = random_with_specials(from, s, ++seed, -300, 300);
      if (from == DType::i64)  // large values that f32 / f16 / bf16 must round once
        for (int64_t i = 1; i < x.numel(); i += 5)
          x.set_i64(i, (int64_t{1} << 40) + 4097 * i + (int64_t{1} << (i % 60)));
      if (from == DType::i32)
        for (int64_t i = 1; i < x.numel(); i += 5) x.set_i64(i, 16777217 + 2 * i);
      Graph g("convert_" + std::string(dtype_name(from)) + "_" + std::string(dtype_name(to)));
      g.set_outputs({g.convert(g.input("x", from, s), to)});
      check(g, {{"x", x}}, OpKind::Convert, kExact);
    }
}

// bool bytes other than 0 / 1 (e.g. in borrowed memory) read as true, as the reference reads
// them, in single ops and in regions.
TEST(ElementwiseCpu, NonCanonicalBoolBytes) {
  std::vector<uint8_t> bytes(37);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>((i * 89) % 5 * 63);
  Tensor p =
      Tensor::borrow(DType::bool_, Shape{37}, reinterpret_cast<const std::byte*>(bytes.data()));
  TensorMap feeds{{"p", p},
                  {"q", random_tensor(DType::bool_, Shape{37}, 81)},
                  {"x", random_tensor(DType::f32, Shape{37}, 82)}};
  Graph g("bool_bytes");
  Value vp = g.input("p", DType::bool_, Shape{37});
  Value vq = g.input("q", DType::bool_, Shape{37});
  Value vx = g.input("x", DType::f32, Shape{37});
  g.set_outputs({g.logical_and(vp, vq), g.eq(vp, vq), g.logical_not(vp), g.convert(vp, DType::i32),
                 g.select(vp, vx, g.neg(vx)), g.logical_xor(vp, vq)});
  check(g, feeds, OpKind::ElementwiseRegion, kExact);
  CompileOptions no_regions;
  no_regions.dispatch = DispatchOptions{};
  no_regions.dispatch->overrides[OpKind::ElementwiseRegion] = KernelDispatch::ForceCommon;
  for (OpKind op : {OpKind::And, OpKind::Eq, OpKind::Not, OpKind::Convert, OpKind::Select})
    check(g, feeds, op, kExact, no_regions);
}

// ---- binary with broadcasting

struct ShapePair {
  Shape a, b;
};
const ShapePair kBroadcasts[] = {
    {Shape{17}, Shape{17}},
    {Shape{5, 1}, Shape{1, 7}},
    {Shape{}, Shape{3, 4}},
    {Shape{3, 4}, Shape{}},
    {Shape{2, 0, 3}, Shape{1, 3}},
    {Shape{3, 1, 5}, Shape{4, 1}},
    {Shape{3, 700}, Shape{700}},
    {Shape{600, 1}, Shape{600, 3}},
    {Shape{2, 3, 1, 300}, Shape{3, 2, 300}},
};

// Operand ranges per op: divisors and exponents near 0 so that x / 0, x rem 0, x / -1 and
// negative exponents occur.
std::pair<double, double> second_range(OpKind op) {
  if (op == OpKind::Div || op == OpKind::Rem) return {-3, 4};
  if (op == OpKind::Pow) return {-3, 9};
  return {-100, 100};
}

TEST(ElementwiseCpu, BinaryArithmeticEveryDtypeAndBroadcast) {
  uint64_t seed = 300;
  for (OpKind op : {OpKind::Add, OpKind::Sub, OpKind::Mul, OpKind::Div, OpKind::Pow, OpKind::Max,
                    OpKind::Min, OpKind::Rem})
    for (DType t : kNumeric)
      for (const ShapePair& sp : kBroadcasts) {
        Graph g(std::string(op_name(op)) + "_" + std::string(dtype_name(t)));
        g.set_outputs({g.emit1(op, {g.input("a", t, sp.a), g.input("b", t, sp.b)})});
        auto [lo, hi] = second_range(op);
        double alo = op == OpKind::Pow ? -4 : -100, ahi = op == OpKind::Pow ? 5 : 100;
        TensorMap feeds{{"a", random_with_specials(t, sp.a, ++seed, alo, ahi)},
                        {"b", random_with_specials(t, sp.b, ++seed, lo, hi)}};
        check(g, feeds, op, kExact);
      }
}

TEST(ElementwiseCpu, BitwiseAndCompareEveryDtype) {
  uint64_t seed = 400;
  for (OpKind op : {OpKind::And, OpKind::Or, OpKind::Xor})
    for (DType t : {DType::i8, DType::u8, DType::i32, DType::i64, DType::bool_})
      for (const ShapePair& sp : kBroadcasts) {
        Graph g(std::string(op_name(op)) + "_" + std::string(dtype_name(t)));
        g.set_outputs({g.emit1(op, {g.input("a", t, sp.a), g.input("b", t, sp.b)})});
        check(g,
              {{"a", random_with_specials(t, sp.a, ++seed, -100, 100)},
               {"b", random_with_specials(t, sp.b, ++seed, -100, 100)}},
              op, kExact);
      }
  for (OpKind op : {OpKind::Eq, OpKind::Ne, OpKind::Lt, OpKind::Le, OpKind::Gt, OpKind::Ge})
    for (DType t : kAll)
      for (const ShapePair& sp : {kBroadcasts[0], kBroadcasts[1], kBroadcasts[5], kBroadcasts[6]}) {
        Graph g(std::string(op_name(op)) + "_" + std::string(dtype_name(t)));
        g.set_outputs({g.emit1(op, {g.input("a", t, sp.a), g.input("b", t, sp.b)})});
        // Few distinct values, so that equality is frequent.
        check(g,
              {{"a", random_with_specials(t, sp.a, ++seed, -3, 3)},
               {"b", random_with_specials(t, sp.b, ++seed, -3, 3)}},
              op, kExact);
      }
}

TEST(ElementwiseCpu, SelectAndClampThreeWayBroadcast) {
  struct Shapes {
    Shape a, b, c;
  };
  const Shapes shapes[] = {{Shape{4, 1}, Shape{1, 5}, Shape{4, 5}},
                           {Shape{}, Shape{3, 7}, Shape{7}},
                           {Shape{2, 1, 300}, Shape{1, 3, 300}, Shape{300}},
                           {Shape{33}, Shape{33}, Shape{}},
                           {Shape{0, 3}, Shape{3}, Shape{1, 3}}};
  uint64_t seed = 500;
  for (DType t : kAll)
    for (const Shapes& s : shapes) {
      Graph g("select_" + std::string(dtype_name(t)));
      g.set_outputs(
          {g.select(g.input("p", DType::bool_, s.a), g.input("x", t, s.b), g.input("y", t, s.c))});
      check(g,
            {{"p", random_tensor(DType::bool_, s.a, ++seed)},
             {"x", random_with_specials(t, s.b, ++seed, -50, 50)},
             {"y", random_with_specials(t, s.c, ++seed, -50, 50)}},
            OpKind::Select, kExact);
    }
  for (DType t : kNumeric)
    for (const Shapes& s : shapes) {
      Graph g("clamp_" + std::string(dtype_name(t)));
      g.set_outputs({g.clamp(g.input("lo", t, s.a), g.input("x", t, s.b), g.input("hi", t, s.c))});
      check(g,
            {{"lo", random_with_specials(t, s.a, ++seed, -60, 0)},
             {"x", random_with_specials(t, s.b, ++seed, -100, 100)},
             {"hi", random_with_specials(t, s.c, ++seed, 0, 60)}},
            OpKind::Clamp, kExact);
    }
}

// ---- regions

const Graph* find_region_body(const Executable& exe) {
  for (const Node& n : exe.compiled_graph().nodes())
    if (n.op == OpKind::ElementwiseRegion) return &n.attrs.get_graph("body");
  return nullptr;
}

// A region with three outputs (an intermediate is exported too), operands broadcasting along
// both axes and a scalar constant pulled into the body.
TEST(ElementwiseCpu, RegionWithSeveralOutputsAndBroadcasting) {
  for (DType t : kFloats)
    for (auto [n, m] : {std::pair<int64_t, int64_t>{5, 7}, {64, 700}, {300, 3}, {1, 1}}) {
      Graph g("region_" + std::string(dtype_name(t)));
      Value x = g.input("x", t, Shape{n, m});
      Value w = g.input("w", t, Shape{m});
      Value b = g.input("b", t, Shape{n, 1});
      Value h = g.add(g.mul(x, w), b);
      Value y = g.gelu(h);
      Value z = g.exp(g.neg(g.mul(h, g.scalar(0.5, t))));
      g.set_outputs({y, z, h});
      uint64_t seed = static_cast<uint64_t>(n * 7 + m);
      TensorMap feeds{{"x", random_tensor(t, Shape{n, m}, seed)},
                      {"w", random_tensor(t, Shape{m}, seed + 1)},
                      {"b", random_tensor(t, Shape{n, 1}, seed + 2)}};
      Tol tol = t == DType::f64 ? kExact : t == DType::f32 ? Tol{6.5, 0} : Tol{1, 0};
      auto exe = check(g, feeds, OpKind::ElementwiseRegion, tol);
      const Graph* body = find_region_body(*exe);
      ASSERT_NE(body, nullptr) << exe->compiled_graph().to_string();
      EXPECT_EQ(body->outputs().size(), 3u);
      EXPECT_EQ(exe->kernels().count(OpKind::Gelu).fallback, 0);
    }
}

// Compare, select, convert, integer arithmetic and bool logic in one region: every value kind.
TEST(ElementwiseCpu, RegionWithMixedDtypes) {
  for (DType t : {DType::f32, DType::f16, DType::bf16, DType::f64})
    for (int64_t n : {1, 37, 5000}) {
      Graph g("mixed_" + std::string(dtype_name(t)));
      Value x = g.input("x", t, Shape{n});
      Value y = g.input("y", t, Shape{1});
      Value k = g.input("k", DType::i32, Shape{n});
      Value gt = g.gt(x, y);
      Value s = g.select(gt, x, g.mul(y, x));
      Value c = g.convert(g.mul(s, g.scalar(100, t)), DType::i32);
      Value r = g.add(g.mul(c, k), g.scalar(7, DType::i32));
      Value q = g.logical_and(gt, g.lt(r, g.scalar(0, DType::i32)));
      g.set_outputs({g.convert(r, DType::i8), q, g.convert(r, t)});
      TensorMap feeds{{"x", random_with_specials(t, Shape{n}, 11, -3, 3)},
                      {"y", random_tensor(t, Shape{1}, 12)},
                      {"k", random_with_specials(DType::i32, Shape{n}, 13, -1000, 1000)}};
      check(g, feeds, OpKind::ElementwiseRegion, kExact);
    }
}

// 16-bit intermediates are rounded after every step as the reference rounds every node: a
// chain of exact ops must then match bit for bit.
TEST(ElementwiseCpu, RegionRoundsHalfIntermediates) {
  for (DType t : {DType::f16, DType::bf16}) {
    Graph g("chain_" + std::string(dtype_name(t)));
    Value x = g.input("x", t, Shape{3, 501});
    Value y = g.input("y", t, Shape{501});
    Value v = g.div(g.sub(g.mul(g.add(x, y), x), y), g.sqrt(g.abs(y)));
    g.set_outputs({g.max(g.floor(v), g.mul(v, v))});
    check(g,
          {{"x", random_with_specials(t, Shape{3, 501}, 21, -8, 8)},
           {"y", random_with_specials(t, Shape{501}, 22, -8, 8)}},
          OpKind::ElementwiseRegion, kExact);
  }
}

// A body whose nodes have smaller shapes than its outputs, an input used only as an output, and
// a body built by hand (not by the fusion pass).
TEST(ElementwiseCpu, HandBuiltRegionBody) {
  Graph body("body");
  Value a = body.input("a", DType::f32, Shape{1, 6});
  Value b = body.input("b", DType::f32, Shape{4, 6});
  Value e = body.exp(a);  // [1, 6], broadcast into [4, 6]
  body.set_outputs({body.mul(e, b), body.add(b, body.scalar(1, DType::f32)), b});
  Graph g("hand_region");
  Value ga = g.input("a", DType::f32, Shape{1, 6});
  Value gb = g.input("b", DType::f32, Shape{4, 6});
  std::vector<Value> r =
      g.emit(OpKind::ElementwiseRegion, {ga, gb}, {{"body", std::make_shared<const Graph>(body)}});
  g.set_outputs(r);
  check(g,
        {{"a", random_tensor(DType::f32, Shape{1, 6}, 31)},
         {"b", random_tensor(DType::f32, Shape{4, 6}, 32)}},
        OpKind::ElementwiseRegion, {1.5, 0});
}

// exp(add(x, y)) on large shapes with regions off: exp writes in place over add's arena
// buffer (the memory plan's in-place rule), so kernels must read each element before writing
// it. With regions on, the chain after a reduction is one region writing over its input.
TEST(ElementwiseCpu, InPlaceChains) {
  const Shape s{512, 700};
  Graph g("inplace");
  Value x = g.input("x", DType::f32, s);
  Value y = g.input("y", DType::f32, Shape{700});
  Value t = g.add(x, y);
  Value u = g.exp(g.mul(t, g.scalar(0.25, DType::f32)));
  g.set_outputs({g.sub(u, t)});
  TensorMap feeds{{"x", random_tensor(DType::f32, s, 41)},
                  {"y", random_tensor(DType::f32, Shape{700}, 42)}};
  CompileOptions no_regions;
  no_regions.dispatch = DispatchOptions{};
  no_regions.dispatch->overrides[OpKind::ElementwiseRegion] = KernelDispatch::ForceCommon;
  auto exe = check(g, feeds, OpKind::Exp, {1.5, 1e-6}, no_regions);
  // Some elementwise result shares its operand's arena offset.
  const MemoryPlan& plan = exe->memory_plan();
  bool in_place = false;
  for (const BufferAssignment& a : plan.buffers)
    for (const BufferAssignment& b : plan.buffers)
      in_place |= a.value.node < b.value.node && !a.is_view && !b.is_view && a.offset == b.offset &&
                  a.last_use == b.first_use;
  EXPECT_TRUE(in_place) << plan.to_string();

  Graph r("inplace_region");
  Value x3 = r.input("x", DType::f32, Shape{64, 300, 4});
  Value sum = r.reduce_sum(x3, {2});
  r.set_outputs({r.tanh(r.add(r.mul(sum, sum), r.scalar(1, DType::f32)))});
  check(r, {{"x", random_tensor(DType::f32, Shape{64, 300, 4}, 43)}}, OpKind::ElementwiseRegion,
        {3.5, 0});
}

// Large tensors run in parallel chunks; every chunk boundary must be seamless.
TEST(ElementwiseCpu, LargeTensorsInParallel) {
  const Shape s{1 << 10, 1025};
  Graph g("large");
  Value x = g.input("x", DType::f32, s);
  Value b = g.input("b", DType::bf16, Shape{1 << 10, 1});
  Value y = g.silu(g.add(x, g.convert(b, DType::f32)));
  g.set_outputs({y, g.convert(g.max(x, y), DType::f16)});
  check(g,
        {{"x", random_tensor(DType::f32, s, 51)},
         {"b", random_tensor(DType::bf16, Shape{1 << 10, 1}, 52)}},
        OpKind::ElementwiseRegion, {4.5, 0});
}

// Clones of one executable share kernels and run concurrently (per-thread scratch).
TEST(ElementwiseCpu, ConcurrentClones) {
  Graph g("clones");
  Value x = g.input("x", DType::f16, Shape{300, 257});
  Value w = g.input("w", DType::f16, Shape{257});
  g.set_outputs({g.gelu_tanh(g.mul(x, w))});
  std::shared_ptr<Executable> exe = session().compile(g);
  std::vector<TensorMap> feeds;
  std::vector<std::vector<Tensor>> want, got(4);
  for (uint64_t i = 0; i < 4; ++i) {
    feeds.push_back({{"x", random_tensor(DType::f16, Shape{300, 257}, 60 + i)},
                     {"w", random_tensor(DType::f16, Shape{257}, 70 + i)}});
    want.push_back(evaluate(g, feeds.back()));
  }
  std::vector<std::thread> threads;
  for (size_t i = 0; i < 4; ++i)
    threads.emplace_back([&, i] {
      std::unique_ptr<Executable> clone = exe->clone();
      for (int rep = 0; rep < 5; ++rep) got[i] = clone->run(feeds[i]);
    });
  for (std::thread& t : threads) t.join();
  for (size_t i = 0; i < 4; ++i) EXPECT_TRUE(matches(got[i][0], want[i][0], {1, 0})) << i;
}

}  // namespace
}  // namespace rlx
