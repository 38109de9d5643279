// Custom ops in the IR (rlx/ir/custom_op.h): registration and its errors, the builder, the text
// form (a registered op prints and parses as its own name), attribute and arity errors, and the
// reference evaluator against independent formulas. The test ops are tests/ops/cases/custom.cc.
#include "rlx/ir/custom_op.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "../common/test_util.h"
#include "../ops/op_case.h"
#include "rlx/ir/error.h"
#include "rlx/ir/evaluator.h"

namespace rlx {
namespace {

using testing::error_of;

class CustomOp : public ::testing::Test {
 protected:
  void SetUp() override { testing::register_test_custom_ops(); }
};

AttrMap beta(double b) {
  AttrMap a;
  a.set("beta", b);
  return a;
}

// A definition with the two required members: the identity on one operand.
CustomOpDef identity_def(std::string name) {
  CustomOpDef d;
  d.name = std::move(name);
  d.num_operands = 1;
  d.infer = [](const InferContext& ctx) { return std::vector<TensorType>{ctx.operands[0]}; };
  d.reference = [](std::span<const Tensor> in, const AttrMap&) {
    return std::vector<Tensor>{in[0]};
  };
  return d;
}

TEST_F(CustomOp, BuilderPrintsAndParsesAsItsName) {
  Graph g("c");
  Value x = g.input("x", DType::f32, {2, 3});
  Value y = custom_call(g, "test.softplus", {x}, beta(0.5), "y")[0];
  std::vector<Value> sc = custom_call(g, "test.sincos", {y}, {}, "sc");
  ASSERT_EQ(sc.size(), 2u);
  Value z = custom_call(g, "test.softplus", {sc[1]})[0];  // beta defaults to 1.0
  g.set_outputs({z, sc[0]});
  EXPECT_TRUE(g.verify().empty());
  EXPECT_EQ(g.node(z).attrs.get_float("beta"), 1.0);
  const std::string text = g.to_string();
  EXPECT_NE(text.find("%y = test.softplus %x {beta=0.5} : f32[2,3]"), std::string::npos) << text;
  EXPECT_NE(text.find("%sc:2 = test.sincos %y : f32[2,3], f32[2,3]"), std::string::npos) << text;
  Graph back = Graph::parse(text);
  EXPECT_EQ(back.to_string(), text);
  EXPECT_TRUE(back == g);
  EXPECT_EQ(back.node(back.find("y")).op, OpKind::CustomCall);
  EXPECT_EQ(custom_op_of(back.node(back.find("y"))).name, "test.softplus");
  // The generic spelling parses to the same node.
  Graph generic = Graph::parse(
      "graph @c { %x = input : f32[4]\n %y:2 = custom_call %x {name=\"test.sincos\"} : f32[4], "
      "f32[4]\n return %y#1 }");
  EXPECT_NE(generic.to_string().find("%y:2 = test.sincos %x"), std::string::npos);
}

TEST_F(CustomOp, EvaluatorRunsTheReferenceKernel) {
  Graph g("c");
  Value x = g.input("x", DType::f64, {5});
  Value y = custom_call(g, "test.softplus", {x}, beta(2.0))[0];
  std::vector<Value> sc = custom_call(g, "test.sincos", {x});
  g.set_outputs({y, sc[0], sc[1]});
  std::vector<double> xs{-30.0, -1.5, 0.0, 0.25, 40.0};
  auto out = evaluate(g, {{"x", Tensor::from_doubles(DType::f64, {5}, xs)}});
  for (size_t i = 0; i < xs.size(); ++i) {
    // softplus(2x)/2 written independently as log(1 + e^(2x)) / 2 (exact enough here).
    double want = xs[i] > 20 ? xs[i] : std::log(1.0 + std::exp(2.0 * xs[i])) / 2.0;
    EXPECT_NEAR(out[0].get_f64(static_cast<int64_t>(i)), want, 1e-12 * (1 + std::fabs(want)));
    EXPECT_DOUBLE_EQ(out[1].get_f64(static_cast<int64_t>(i)), std::sin(xs[i]));
    EXPECT_DOUBLE_EQ(out[2].get_f64(static_cast<int64_t>(i)), std::cos(xs[i]));
  }
  // evaluate_op infers the result types through the custom op's shape function.
  AttrMap a;
  a.set("name", std::string("test.host_cube"));
  auto cube = evaluate_op(OpKind::CustomCall,
                          {Tensor::from_doubles(DType::f32, {2}, std::vector<double>{-2, 3})}, a);
  EXPECT_EQ(cube[0].get_f64(0), -8.0);
  EXPECT_EQ(cube[0].get_f64(1), 27.0);
}

TEST_F(CustomOp, AttributeArityAndTypeErrorsNameTheCustomOp) {
  Graph g("c");
  Value x = g.input("x", DType::f32, {3});
  Value i = g.input("i", DType::i32, {3});
  EXPECT_EQ(error_of([&] {
              AttrMap a;
              a.set("beta", int64_t{2});
              custom_call(g, "test.softplus", {x}, a, "bad");
            }),
            "op 'test.softplus' (node %bad): attribute 'beta' must be a float, got a int");
  EXPECT_EQ(error_of([&] {
              AttrMap a;
              a.set("gamma", 1.0);
              custom_call(g, "test.softplus", {x}, a, "bad");
            }),
            "op 'test.softplus' (node %bad): unknown attribute 'gamma' (known: name, beta)");
  EXPECT_EQ(error_of([&] { custom_call(g, "test.softplus", {x}, beta(-1.0), "bad"); }),
            "op 'test.softplus' (node %bad): beta must be > 0, got -1.000000; operand types: "
            "f32[3]");
  EXPECT_EQ(error_of([&] {
              custom_call(g, "test.softplus", {x, x}, {}, "bad");
            }),
            "op 'test.softplus' (node %bad): expected 1 operands, got 2; operand types: f32[3], "
            "f32[3]");
  EXPECT_EQ(error_of([&] { custom_call(g, "test.sincos", {i}, {}, "bad"); }),
            "op 'test.sincos' (node %bad): operand must be f32 or f64, got i32; operand types: "
            "i32[3]");
  std::string unknown = error_of([&] { custom_call(g, "test.nothing", {x}, {}, "bad"); });
  EXPECT_NE(unknown.find("op 'custom_call' (node %bad): unknown custom op 'test.nothing' "
                         "(registered: "),
            std::string::npos)
      << unknown;
  EXPECT_NE(unknown.find("test.softplus"), std::string::npos) << unknown;
  EXPECT_EQ(error_of([&] { g.emit(OpKind::CustomCall, {x}, {}, "bad"); }),
            "op 'custom_call' (node %bad): missing required attribute 'name' (string)");
  EXPECT_EQ(g.nodes().size(), 2u);  // failed emits leave the graph unchanged
}

TEST_F(CustomOp, MoreBuilderAndRegistrationErrors) {
  Graph g("c");
  Value x = g.input("x", DType::f32, {3});
  EXPECT_EQ(error_of([&] {
              AttrMap a;
              a.set("name", int64_t{3});
              g.emit(OpKind::CustomCall, {x}, a, "bad");
            }),
            "op 'custom_call' (node %bad): attribute 'name' must be a string, got a int");
  EXPECT_EQ(error_of([&] {
              AttrMap a;
              a.set("name", std::string("test.softplus"));
              custom_call(g, "test.softplus", {x}, a);
            }),
            "custom_call('test.softplus'): pass the op's own attributes; 'name' is the op's name");
  EXPECT_EQ(error_of([&] { custom_op_of(g.node(x)); }),
            "custom_op_of: node %x is a 'input', not a custom_call");
  EXPECT_EQ(error_of([] {
              CustomOpDef d = identity_def("test.bad_arity");
              d.num_operands = -2;
              register_custom_op(d);
            }),
            "register_custom_op('test.bad_arity'): num_operands must be >= 0 or -1 (variadic)");
  CustomOpDef none = identity_def("test.no_results");
  none.infer = [](const InferContext&) { return std::vector<TensorType>{}; };
  register_custom_op(none);
  EXPECT_EQ(error_of([&] { custom_call(g, "test.no_results", {x}, {}, "bad"); }),
            "op 'test.no_results' (node %bad): the shape function returned no results (a custom "
            "op has >= 1); operand types: f32[3]");
  EXPECT_EQ(error_of([] {
              Graph::parse(
                  "graph @c {\n %x = input : f32[3]\n %y = test.softplus %x "
                  "{name=\"test.softplus\"} : f32[3]\n return %y }");
            }),
            "line 3:7: custom op 'test.softplus' takes its name from the op; remove the 'name' "
            "attribute");
}

TEST_F(CustomOp, ParseErrorsAreLocated) {
  EXPECT_EQ(error_of([] {
              Graph::parse(
                  "graph @c {\n %x = input : f32[3]\n %y = test.nothing %x : f32[3]\n "
                  "return %y }");
            }),
            "line 3:7: unknown op 'test.nothing'");
  EXPECT_EQ(error_of([] {
              Graph::parse(
                  "graph @c {\n %x = input : f32[3]\n %y = test.softplus %x {beta=1} : "
                  "f32[3]\n return %y }");
            }),
            "line 3:30: attribute 'beta' of op 'test.softplus' must be a float, found an int");
  std::string wrong_type = error_of([] {
    Graph::parse("graph @c {\n %x = input : f32[3]\n %y = test.softplus %x : f64[3]\n return %y }");
  });
  EXPECT_NE(wrong_type.find("line 3"), std::string::npos) << wrong_type;
  EXPECT_NE(wrong_type.find("%y"), std::string::npos) << wrong_type;
}

TEST_F(CustomOp, RegistrationErrors) {
  EXPECT_EQ(error_of([] { register_custom_op(identity_def("test.softplus")); }),
            "register_custom_op('test.softplus'): a custom op of this name is already registered");
  EXPECT_EQ(error_of([] { register_custom_op(identity_def("add")); }),
            "register_custom_op('add'): the name is a built-in op's mnemonic; choose another "
            "(e.g. 'my.add')");
  EXPECT_EQ(error_of([] { register_custom_op(identity_def("my op")); }),
            "register_custom_op('my op'): the name must be words [A-Za-z_][A-Za-z0-9_]* joined "
            "by '.' (e.g. 'my.op')");
  for (const char* bad : {"", "my..op", ".op", "op.", "my.2op", "my-op"})
    EXPECT_NE(error_of([&] { register_custom_op(identity_def(bad)); }).find("joined by '.'"),
              std::string::npos)
        << bad;
  EXPECT_EQ(error_of([] {
              CustomOpDef d = identity_def("test.no_reference");
              d.reference = nullptr;
              register_custom_op(d);
            }),
            "register_custom_op('test.no_reference'): a reference kernel (reference) is required");
  EXPECT_EQ(error_of([] {
              CustomOpDef d = identity_def("test.no_infer");
              d.infer = nullptr;
              register_custom_op(d);
            }),
            "register_custom_op('test.no_infer'): a shape function (infer) is required");
  EXPECT_EQ(error_of([] {
              CustomOpDef d = identity_def("test.reserved");
              d.attrs = {{"name", AttrType::Int}};
              register_custom_op(d);
            }),
            "register_custom_op('test.reserved'): attribute 'name' is reserved (it holds the op's "
            "name)");
  EXPECT_EQ(find_custom_op("test.no_reference"), nullptr);
}

TEST_F(CustomOp, ConcurrentRegistrationAndLookupAreSafe) {
  constexpr int kThreads = 8;
  std::atomic<int> duplicates{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; ++t)
    ts.emplace_back([t, &duplicates] {
      // Each thread registers its own op and races the others on one shared name.
      register_custom_op(identity_def("test.thread" + std::to_string(t)));
      try {
        register_custom_op(identity_def("test.shared"));
      } catch (const Error&) {
        ++duplicates;
      }
      for (int k = 0; k < 100; ++k) EXPECT_NE(find_custom_op("test.softplus"), nullptr);
    });
  for (std::thread& t : ts) t.join();
  EXPECT_EQ(duplicates.load(), kThreads - 1);
  for (int t = 0; t < kThreads; ++t)
    EXPECT_NE(find_custom_op("test.thread" + std::to_string(t)), nullptr);
}

}  // namespace
}  // namespace rlx
