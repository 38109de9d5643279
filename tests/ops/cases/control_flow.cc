// Op cases of the control-flow ops cond, while_loop and scan: the text round trip of their
// regions in every dtype a carry can have. Their values are tested in tests/ir/control_flow_test.cc
// (evaluator) and against JAX in tests/golden (control_flow_ref.json); the CPU parity sweep runs
// them on the CPU backend; the other suites wait for their lowerings and autodiff rules
// (docs/ops.md's declared holes).
#include "common.h"

namespace rlx::testing {
namespace {

using namespace cases;

constexpr const char* kWhy =
    "control flow runs on the reference evaluator and the CPU backend only so far: no "
    "StableHLO lowering, vjp or batching rule yet (issue 16)";

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
      .only(kTextSuite | kCpuSuite, kWhy);
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
      .only(kTextSuite | kCpuSuite, kWhy);
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
      .only(kTextSuite | kCpuSuite, kWhy);
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
      .only(kTextSuite | kCpuSuite, kWhy);
}

}  // namespace rlx::testing
