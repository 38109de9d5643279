// Op cases of the control-flow ops cond, while_loop and scan: the text round trip of their
// regions in every dtype a carry can have, and the CPU backend and XLA (the CPU parity and PJRT
// suites) against the reference evaluator. Their values are tested in
// tests/ir/control_flow_test.cc (evaluator) and against JAX in tests/golden (ops.json, also on
// cpu and pjrt:0); the ad_* cases with float bodies also run the finite-difference and vmap
// suites. The Python parity suite cannot build bodies from a case: python/tests/
// test_control_flow*.py check them against jax.lax instead (docs/ops.md's declared holes).
#include "common.h"

namespace rlx::testing {
namespace {

using namespace cases;

constexpr uint32_t kSuites = kTextSuite | kCpuSuite | kPjrtSuite;
constexpr const char* kWhy =
    "bodies come from Python functions: python/tests/test_control_flow*.py check control flow "
    "against jax.lax on the evaluator, the CPU backend and pjrt:0";

// A body over inputs of `types` returning its first input (combined with the second when
// there is one and the dtype has arithmetic) plus, if `extra`, one more value of type 0.
Graph passthrough(const std::string& name, const std::vector<TensorType>& types, bool extra) {
  Graph b(name);
  std::vector<Value> in;
  for (size_t i = 0; i < types.size(); ++i)
    in.push_back(b.input("a" + std::to_string(i), types[i].dtype, types[i].shape));
  Value r = in[0];
  if (in.size() > 1 && b.type(in[1]) == b.type(in[0]) && !is_bool(b.dtype(in[0])))
    r = b.add(in[0], in[1]);
  std::vector<Value> outs{r};
  if (extra) outs.push_back(in[0]);
  b.set_outputs(outs);
  return b;
}

// Nontrivial float bodies for the autodiff suites (finite differences: grad, jvp, hvp).

// An RNN cell: consts (w [n,n]), carry h [b,n], x_t [b,n] -> (tanh(h w + x_t), sin(h') * x_t).
Graph rnn_cell(DType t, int64_t b, int64_t n) {
  Graph cell("cell");
  Value w = cell.input("w", t, {n, n});
  Value h = cell.input("h", t, {b, n});
  Value x = cell.input("x", t, {b, n});
  Value h2 = cell.tanh(cell.add(cell.matmul(h, w), x));
  cell.set_outputs({h2, cell.mul(cell.sin(h2), x)});
  return cell;
}

// Branches over (x, y) returning two values of x's type.
Graph branch(const std::string& name, DType t, int k) {
  Graph b(name);
  Value x = b.input("x", t, {3});
  Value y = b.input("y", t, {3});
  if (k == 0) b.set_outputs({b.mul(b.tanh(x), y), b.sin(x)});
  if (k == 1) b.set_outputs({b.add(b.mul(x, y), y), b.exp(b.mul(y, b.scalar(0.5, t)))});
  if (k == 2) b.set_outputs({b.mul(x, x), b.cos(b.add(x, y))});
  return b;
}

}  // namespace

void add_control_flow_cases(CaseList& cs) {
  // The dtype is that of the carried / branch values; the predicate and index are fixed.
  cs.add(OpKind::Cond, "pred")
      .in(kAnyDTypes)
      .sample({fixed(DType::bool_, {}, {1}), T({2, 3}), T({2, 3})},
              [](Graph& g, const std::vector<Value>& in, DType) {
                std::vector<TensorType> ts{g.type(in[1]), g.type(in[2])};
                return g.cond(in[0], passthrough("t", ts, false), passthrough("f", ts, false),
                              {in[1], in[2]});
              })
      .only(kSuites, kWhy);
  cs.add(OpKind::Cond, "switch")
      .in(kAnyDTypes)
      .sample({fixed(DType::i32, {}, {2}), T({4})},
              [](Graph& g, const std::vector<Value>& in, DType) {
                std::vector<TensorType> ts{g.type(in[1])};
                std::vector<Graph> bs;
                for (int k = 0; k < 3; ++k)
                  bs.push_back(passthrough("b" + std::to_string(k), ts, true));
                return g.switch_case(in[0], std::move(bs), {in[1]});
              })
      .only(kSuites, kWhy);
  cs.add(OpKind::WhileLoop, "bounded")
      .in(kAnyDTypes)
      .sample({fixed(DType::i32, {}, {3}), T({3})},
              [](Graph& g, const std::vector<Value>& in, DType) {
                Graph c("c");
                Value n = c.input("n", DType::i32, {});
                c.input("x", g.dtype(in[1]), {3});
                c.set_outputs({c.gt(n, c.scalar(0, DType::i32))});
                std::vector<TensorType> ts{g.type(in[0]), g.type(in[1])};
                Graph b("b");
                b.input("n", DType::i32, {});
                Value x = b.input("x", g.dtype(in[1]), {3});
                b.set_outputs({x});
                return g.while_loop(std::move(c), std::move(b), {in[1]}, {in[0]}, 4);
              })
      .only(kSuites, kWhy);
  cs.add(OpKind::Scan, "carry_and_ys")
      .in(kAnyDTypes)
      .sample({T({2}), T({5, 2})},
              [](Graph& g, const std::vector<Value>& in, DType t) {
                std::vector<TensorType> ts{{t, {2}}, {t, {2}}};
                ScanOptions o;
                o.reverse = true;
                return g.scan(passthrough("step", ts, true), {in[0]}, {in[1]}, {}, o);
              })
      .sample({T({0, 3})},
              [](Graph& g, const std::vector<Value>& in, DType t) {
                std::vector<TensorType> ts{{t, {3}}};
                return g.scan(passthrough("empty", ts, false), {}, {in[0]});
              })
      .only(kSuites, kWhy);

  cs.add(OpKind::Cond, "ad_pred")
      .in(kFloatDTypes)
      .sample({fixed(DType::bool_, {}, {1}), T({3}), T({3})},
              [](Graph& g, const std::vector<Value>& in, DType t) {
                return g.cond(in[0], branch("t", t, 0), branch("f", t, 1), {in[1], in[2]});
              })
      .sample({fixed(DType::bool_, {}, {0}), T({3}), T({3})},
              [](Graph& g, const std::vector<Value>& in, DType t) {
                return g.cond(in[0], branch("t", t, 0), branch("f", t, 1), {in[1], in[2]});
              })
      .only(kSuites | kFdSuite | kVmapSuite, kWhy);
  cs.add(OpKind::Cond, "ad_switch")
      .in(kFloatDTypes)
      .sample({fixed(DType::i32, {}, {2}), T({3}), T({3})},
              [](Graph& g, const std::vector<Value>& in, DType t) {
                std::vector<Graph> bs;
                for (int k = 0; k < 3; ++k) bs.push_back(branch("b" + std::to_string(k), t, k));
                return g.switch_case(in[0], std::move(bs), {in[1], in[2]});
              })
      .only(kSuites | kFdSuite | kVmapSuite, kWhy);
  cs.add(OpKind::Scan, "ad_rnn")
      .in(kFloatDTypes)
      .sample({T({3, 3}), T({2, 3}), T({5, 2, 3})},
              [](Graph& g, const std::vector<Value>& in, DType t) {
                return g.scan(rnn_cell(t, 2, 3), {in[1]}, {in[2]}, {in[0]});
              })
      .sample({T({3, 3}), T({2, 3}), T({4, 2, 3})},
              [](Graph& g, const std::vector<Value>& in, DType t) {
                ScanOptions o;
                o.reverse = true;
                return g.scan(rnn_cell(t, 2, 3), {in[1]}, {in[2]}, {in[0]}, o);
              })
      .only(kSuites | kFdSuite | kVmapSuite, kWhy);
  // A bounded loop that stops on its counter after 3 of at most 5 trips, with a float carry
  // updated from a float const.
  cs.add(OpKind::WhileLoop, "ad_bounded")
      .in(kFloatDTypes)
      .sample({T({3}), T({3})},
              [](Graph& g, const std::vector<Value>& in, DType t) {
                Graph c("c");
                c.input("a", t, {3});
                Value n = c.input("n", DType::i32, {});
                c.input("x", t, {3});
                c.set_outputs({c.lt(n, c.scalar(3, DType::i32))});
                Graph b("b");
                Value a = b.input("a", t, {3});
                Value bn = b.input("n", DType::i32, {});
                Value x = b.input("x", t, {3});
                b.set_outputs({b.add(bn, b.scalar(1, DType::i32)), b.add(b.mul(b.sin(x), a), x)});
                Value zero = g.scalar(0, DType::i32);
                return std::vector<Value>{
                    g.while_loop(std::move(c), std::move(b), {zero, in[1]}, {in[0]}, 5)[1]};
              })
      .only(kSuites | kFdSuite | kVmapSuite, kWhy);
}

}  // namespace rlx::testing
