// Graph::verify() on valid graphs, and the builder's checks that keep ill-typed graphs from
// being built at all: located error messages, no partial changes on failure, unique names.
#include <gtest/gtest.h>

#include <string>

#include "../common/test_util.h"
#include "rlx/ir/error.h"
#include "rlx/ir/graph.h"

namespace rlx {
namespace {

using testing::error_of;

using Ints = std::vector<int64_t>;

TEST(Verify, ValidGraphsHaveNoDiagnostics) {
  Graph g("mlp");
  Value x = g.input("x", DType::f32, {2, 4});
  Value w = g.param("w", DType::f32, {4, 3});
  Value b = g.param("b", DType::f32, {3});
  Value h = g.add(g.matmul(x, w), b);
  Value y = g.softmax(g.relu(h), -1);
  Value i = g.argmax(y, 1);
  g.set_outputs({y, i});
  EXPECT_TRUE(g.verify().empty());
}

TEST(Verify, LeafGraphAndParsedGraphHaveNoDiagnostics) {
  Graph g("leaves");
  Value i = g.iota(DType::i32, {3}, 0);
  Value c = g.constant(Tensor::full(DType::f16, {2, 2}, 0.25));
  g.set_outputs({i, c});
  EXPECT_TRUE(g.verify().empty());
  EXPECT_TRUE(Graph::parse(g.to_string()).verify().empty());
  EXPECT_TRUE(Graph("empty").verify().empty());
}

TEST(Verify, BuilderErrorNamesOpNodeAndOperandShapes) {
  Graph g;
  Value a = g.input("a", DType::f32, {2, 3});
  Value b = g.input("b", DType::f32, {4});
  std::string msg = error_of([&] { g.add(a, b); });
  EXPECT_NE(msg.find("op 'add'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("(node %"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[2,3]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[4]"), std::string::npos) << msg;
}

TEST(Verify, LeafInferenceErrorIsLocated) {
  Graph g;
  std::string msg = error_of([&] { g.iota(DType::f32, {2, 3}, 2); });
  EXPECT_EQ(msg,
            "op 'iota' (node %0): dimension 2 is out of range for rank 2; operand types: (none)");
  msg = error_of([&] { g.iota(DType::bool_, {2}, 0); });
  EXPECT_NE(msg.find("dtype must be a float or integer type (not bool), got bool"),
            std::string::npos)
      << msg;
}

TEST(Verify, FailedEmitLeavesGraphUnchanged) {
  Graph g;
  Value a = g.input("a", DType::f32, {2, 3});
  Value b = g.input("b", DType::f32, {3, 2});
  size_t before = g.nodes().size();
  std::string text = g.to_string();
  // Inference failure of a named node.
  EXPECT_FALSE(error_of([&] { g.emit(OpKind::Add, {a, b}, {}, "bad"); }).empty());
  // Schema failures: a missing required attribute, an unknown one, a wrong attribute type.
  std::string msg = error_of([&] { g.emit(OpKind::Constant, {}, {}, "bad"); });
  EXPECT_NE(msg.find("missing required attribute 'value'"), std::string::npos) << msg;
  AttrMap iota{{"dtype", DType::i32}, {"shape", Ints{2}}, {"dimension", int64_t{0}}};
  AttrMap extra = iota;
  extra.set("axis", int64_t{0});
  msg = error_of([&] { g.emit(OpKind::Iota, {}, extra, "bad"); });
  EXPECT_NE(msg.find("unknown attribute 'axis'"), std::string::npos) << msg;
  AttrMap wrong = iota;
  wrong.set("dimension", 0.5);
  msg = error_of([&] { g.emit(OpKind::Iota, {}, wrong, "bad"); });
  EXPECT_NE(msg.find("attribute 'dimension' must be a int, got a float"), std::string::npos) << msg;
  // Arity failure, and an operand from beyond the graph.
  msg = error_of([&] { g.emit(OpKind::Neg, {a, b}, {}, "bad"); });
  EXPECT_NE(msg.find("expected 1 operands, got 2"), std::string::npos) << msg;
  msg = error_of([&] { g.emit(OpKind::Neg, {Value{7, 0}}, {}, "bad"); });
  EXPECT_NE(msg.find("bad operand"), std::string::npos) << msg;
  EXPECT_EQ(g.nodes().size(), before);
  EXPECT_EQ(g.find("bad"), -1);
  EXPECT_EQ(g.to_string(), text);
  EXPECT_TRUE(g.verify().empty());
  // The name is still free.
  Value ok = g.emit1(OpKind::Neg, {a}, {}, "bad");
  EXPECT_EQ(g.node(ok).name, "bad");
}

TEST(Verify, DuplicateLeafNamesAreRejected) {
  Graph g("net");
  g.input("x", DType::f32, {2});
  std::string msg = error_of([&] { g.input("x", DType::f32, {2}); });
  EXPECT_EQ(msg, "input 'x': a node of that name already exists in graph 'net'");
  msg = error_of([&] { g.param("x", DType::f16, {}); });
  EXPECT_EQ(msg, "param 'x': a node of that name already exists in graph 'net'");
  EXPECT_EQ(g.nodes().size(), 1u);
  EXPECT_TRUE(g.verify().empty());
}

TEST(Verify, BadLeafNamesAndShapesAreRejected) {
  Graph g;
  EXPECT_NE(error_of([&] { g.input("a b", DType::f32, {2}); }).find("invalid node name 'a b'"),
            std::string::npos);
  EXPECT_EQ(error_of([&] { g.input("", DType::f32, {2}); }), "node names must not be empty");
  std::string msg = error_of([&] { g.input("n", DType::f32, {2, -1}); });
  EXPECT_NE(msg.find("negative dim in shape [2,-1]"), std::string::npos) << msg;
  EXPECT_TRUE(g.nodes().empty());
}

TEST(Verify, BuilderNamesNeverCollideWithGivenNames) {
  // An explicit name equal to the next free number is skipped by later unnamed nodes.
  Graph g;
  Value x = g.input("0", DType::f32, {2});
  Value y = g.neg(x);
  EXPECT_EQ(g.node(y).name, "1");
  Value z = g.emit1(OpKind::Neg, {y}, {}, "1");  // a taken hint gets a suffix
  EXPECT_EQ(g.node(z).name, "1_1");
  g.set_outputs({z});
  EXPECT_TRUE(g.verify().empty());
}

}  // namespace
}  // namespace rlx
