// Text form (docs/ir.md): exact canonical printing, print -> parse -> print identity for every op,
// bit-exact float constants and located parse errors (inline and tests/ir/invalid/*.rlx).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <sstream>
#include <string>

#include "ops/op_case.h"
#include "rlx/ir/error.h"
#include "rlx/ir/graph.h"

namespace rlx {
namespace {

using Ints = std::vector<int64_t>;

// The message of the rlx::Error that parsing `text` throws ("" when it parses).
std::string parse_error(std::string_view text) {
  try {
    Graph::parse(text);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Prints g, parses the text back and checks the graph and the re-printed text are identical.
void expect_round_trip(const Graph& g) {
  std::string text = g.to_string();
  Graph back = Graph::parse(text);
  EXPECT_TRUE(back == g) << text;
  EXPECT_EQ(back.to_string(), text);
  EXPECT_TRUE(back.verify().empty()) << text;
}

// ---------------------------------------------------------------- exact printing

TEST(Text, PrintsCanonicalForm) {
  Graph g("demo");
  Value x = g.input("x", DType::f32, {2, 4});
  Value w = g.param("w", DType::f32, {4, 3});
  Value b = g.param("b", DType::f32, {3});
  std::vector<double> cvals{0.5, -1.0, 1e-5, INFINITY};
  Value c = g.constant(Tensor::from_doubles(DType::f32, {4}, cvals), "c");
  Value s = g.constant(Tensor::full(DType::f32, {2, 4}, 2.0), "s");
  Value sum = g.add(x, c);
  auto top = g.emit(OpKind::TopK, {sum}, {{"k", int64_t{2}}}, "top");
  Value idx = g.convert(top[1], DType::f32);
  Value red = g.reduce_sum(x, {0, 1}, true);
  Value leaky = g.leaky_relu(x, 0.2);
  Value mm = g.fused_matmul_bias_act(x, w, b, "gelu");
  Graph body("body");
  Value ba = body.input("a", DType::f32, {2, 4});
  Value bb = body.input("b", DType::f32, {2, 4});
  Value prod = body.mul(ba, bb);
  body.set_outputs({prod, body.sub(prod, ba)});
  auto region = g.emit(OpKind::ElementwiseRegion, {x, s},
                       {{"body", std::make_shared<const Graph>(body)}}, "r");
  g.set_outputs({top[0], idx, red, leaky, mm, region[1]});

  const char* want = R"(graph @demo {
  %x = input : f32[2,4]
  %w = param : f32[4,3]
  %b = param : f32[3]
  %c = constant {value=dense<f32[4]: 0.5, -1.0, 1e-05, inf>} : f32[4]
  %s = constant {value=splat<f32[2,4]: 2.0>} : f32[2,4]
  %0 = add %x, %c : f32[2,4]
  %top:2 = top_k %0 {k=2} : f32[2,2], i32[2,2]
  %1 = convert %top#1 {dtype=f32} : f32[2,2]
  %2 = reduce_sum %x {axes=[0,1], keepdims=true} : f32[1,1]
  %3 = leaky_relu %x {alpha=0.2} : f32[2,4]
  %4 = fused_matmul_bias_act %x, %w, %b {activation="gelu"} : f32[2,3]
  %r:2 = elementwise_region %x, %s {body=graph @body {
    %a = input : f32[2,4]
    %b = input : f32[2,4]
    %0 = mul %a, %b : f32[2,4]
    %1 = sub %0, %a : f32[2,4]
    return %0, %1
  }} : f32[2,4], f32[2,4]
  return %top#0, %1, %2, %3, %4, %r#1
}
)";
  EXPECT_EQ(g.to_string(), want);
  expect_round_trip(g);
}

TEST(Text, LeafOnlyGraphPrintsExactly) {
  // Only leaf ops: checks the printer independently of every op family.
  Graph g("leaves");
  g.input("in.0/x-1", DType::bf16, {});
  g.param("w", DType::u8, {0, 3});
  Value i = g.iota(DType::i64, {2, 3}, 1);
  Value k = g.constant(Tensor::from_ints(DType::i8, {3}, std::vector<int64_t>{-128, 0, 127}));
  Value e = g.constant(Tensor(DType::f64, {0}), "empty");
  Value s = g.scalar(-0.0, DType::f32);
  Value t = g.constant(Tensor::full(DType::bool_, {2}, 1.0), "t");
  g.set_outputs({i, k, e, s, t, i});
  const char* want = R"(graph @leaves {
  %in.0/x-1 = input : bf16[]
  %w = param : u8[0,3]
  %0 = iota {dtype=i64, shape=[2,3], dimension=1} : i64[2,3]
  %1 = constant {value=dense<i8[3]: -128, 0, 127>} : i8[3]
  %empty = constant {value=dense<f64[0]: >} : f64[0]
  %2 = constant {value=dense<f32[]: -0.0>} : f32[]
  %t = constant {value=splat<bool[2]: true>} : bool[2]
  return %0, %1, %empty, %2, %t, %0
}
)";
  EXPECT_EQ(g.to_string(), want);
  expect_round_trip(g);
}

TEST(Text, EmptyReturnAndNoNodes) {
  Graph g("nothing");
  EXPECT_EQ(g.to_string(), "graph @nothing {\n  return\n}\n");
  expect_round_trip(g);
}

// ---------------------------------------------------------------- every op round-trips

// Every case of the op-case table (tests/ops/op_case.h), in every dtype it runs in, prints
// and parses back to the same graph.
class TextRoundTrip : public ::testing::TestWithParam<const testing::OpCase*> {};

TEST_P(TextRoundTrip, PrintParsePrintIsIdentity) {
  const testing::OpCase& c = *GetParam();
  for (DType t : testing::suite_dtypes(c, testing::kTextSuite)) {
    SCOPED_TRACE(c.name + " in " + std::string(dtype_name(t)));
    Graph g = testing::case_graph(c, t);
    // The op itself is in the graph (not only its operands).
    bool present = false;
    for (const Node& n : g.nodes()) present = present || n.op == c.op;
    EXPECT_TRUE(present);
    expect_round_trip(g);
  }
}

std::vector<const testing::OpCase*> text_cases() {
  std::vector<const testing::OpCase*> out;
  for (const testing::OpCase& c : testing::op_cases())
    if (testing::runs_in(c, testing::kTextSuite)) out.push_back(&c);
  return out;
}

INSTANTIATE_TEST_SUITE_P(OpCases, TextRoundTrip, ::testing::ValuesIn(text_cases()),
                         [](const auto& info) { return testing::test_name(info.param->name); });

// ---------------------------------------------------------------- floats and tensors

uint64_t bits_of(const Tensor& t, int64_t i) {
  uint64_t b = 0;
  auto w = static_cast<size_t>(dtype_size(t.dtype()));
  std::memcpy(&b, t.data() + static_cast<size_t>(i) * w, w);
  return b;
}

TEST(Text, SpecialFloatsRoundTripBitExactly) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<double> vals{nan,  INFINITY, -INFINITY, 1e-5,    0.1,
                           -0.0, 65504.0,  3.0e38,    1.4e-45, 5e-324};
  for (DType t : {DType::f32, DType::f16, DType::bf16, DType::f64}) {
    SCOPED_TRACE(std::string(dtype_name(t)));
    Graph g;
    Tensor x = Tensor::from_doubles(t, {static_cast<int64_t>(vals.size())}, vals);
    g.set_outputs({g.constant(x, "c")});
    Graph back = Graph::parse(g.to_string());
    ASSERT_TRUE(back == g) << g.to_string();
    const Tensor& y = back.node(0).attrs.get_tensor("value");
    for (int64_t i = 0; i < x.numel(); ++i) EXPECT_EQ(bits_of(y, i), bits_of(x, i)) << i;
    EXPECT_EQ(back.to_string(), g.to_string());
  }
}

TEST(Text, LowPrecisionFloatsPrintShortest) {
  // Shortest digits that round back to the same f16 / bf16 value (numpy's repr of np.float16
  // gives the same digits: 1e-05, 0.1, 65500.0); f32 and f64 use their own shortest forms.
  Graph g;
  std::vector<double> vals{1e-5, 0.1, 65504.0};
  Value h = g.constant(Tensor::from_doubles(DType::f16, {3}, vals), "h");
  Value b = g.constant(Tensor::from_doubles(DType::bf16, {3}, vals), "b");
  Value f = g.constant(Tensor::from_doubles(DType::f32, {3}, vals), "f");
  Value d = g.constant(Tensor::from_doubles(DType::f64, {3}, vals), "d");
  g.set_outputs({h, b, f, d});
  std::string text = g.to_string();
  EXPECT_NE(text.find("dense<f16[3]: 1e-05, 0.1, 65500.0>"), std::string::npos) << text;
  EXPECT_NE(text.find("dense<bf16[3]: 1e-05, 0.1, 65500.0>"), std::string::npos) << text;
  EXPECT_NE(text.find("dense<f32[3]: 1e-05, 0.1, 65504.0>"), std::string::npos) << text;
  EXPECT_NE(text.find("dense<f64[3]: 1e-05, 0.1, 65504.0>"), std::string::npos) << text;
}

TEST(Text, FloatAttributesAreDoubles) {
  // 1/3 prints with double's 16 digits (f32 would print 0.33333334), even on an f16 op.
  Graph g;
  Value y = g.leaky_relu(g.input("x", DType::f16, {2}), 1.0 / 3.0);
  g.set_outputs({y});
  EXPECT_NE(g.to_string().find("{alpha=0.3333333333333333}"), std::string::npos) << g.to_string();
  expect_round_trip(g);
}

TEST(Text, ParsesSplatScalarDenseAndIntElements) {
  Graph g = Graph::parse(R"(graph @t {
    %a = constant {value=splat<f32[]: 0.5>} : f32[]
    %b = constant {value=splat<i32[2,2]: -7>} : i32[2,2]
    %c = constant {value=dense<f32[2]: 1, -2>} : f32[2]
    %d = constant {value=dense<u8[2]: 0, 255>} : u8[2]
    %e = constant {value=splat<i8[0]: 5>} : i8[0]
    return %a, %b, %c, %d, %e
  })");
  EXPECT_EQ(g.node(0).attrs.get_tensor("value").get_f64(0), 0.5);
  const Tensor& b = g.node(1).attrs.get_tensor("value");
  ASSERT_EQ(b.numel(), 4);
  for (int64_t i = 0; i < 4; ++i) EXPECT_EQ(b.get_i64(i), -7);
  EXPECT_EQ(g.node(2).attrs.get_tensor("value").get_f64(1), -2.0);
  EXPECT_EQ(g.node(3).attrs.get_tensor("value").get_i64(1), 255);
  EXPECT_EQ(g.node(4).attrs.get_tensor("value").numel(), 0);
  // Canonical re-print: a rank-0 splat prints dense; ints in a float tensor print as floats.
  std::string text = g.to_string();
  EXPECT_NE(text.find("%a = constant {value=dense<f32[]: 0.5>} : f32[]"), std::string::npos);
  EXPECT_NE(text.find("%b = constant {value=splat<i32[2,2]: -7>} : i32[2,2]"), std::string::npos);
  EXPECT_NE(text.find("%c = constant {value=dense<f32[2]: 1.0, -2.0>} : f32[2]"),
            std::string::npos);
  EXPECT_NE(text.find("%e = constant {value=dense<i8[0]: >} : i8[0]"), std::string::npos);
  expect_round_trip(g);
}

TEST(Text, IntExtremesRoundTrip) {
  Graph g;
  std::vector<int64_t> v{std::numeric_limits<int64_t>::min(), -1, 0,
                         std::numeric_limits<int64_t>::max()};
  g.set_outputs({g.constant(Tensor::from_ints(DType::i64, {4}, v))});
  EXPECT_NE(g.to_string().find("dense<i64[4]: -9223372036854775808, -1, 0, 9223372036854775807>"),
            std::string::npos);
  expect_round_trip(g);
}

// ---------------------------------------------------------------- parser leniency

TEST(Text, ParserAcceptsCommentsAnyAttrOrderAndFillsDefaults) {
  Graph g = Graph::parse(R"(// a leading comment
graph @m {   // after the header
  %x = input : f32[2,3]
  %s = reduce_sum %x {keepdims=true,axes=[1]}: f32[2,1]  // attributes in any order
  %t:2=top_k %x{k=1}:f32[2,1],i32[2,1]
  %c = cumsum %x {axis=1} : f32[2,3]   // exclusive and reverse take their defaults
  return %s, %t, %t#1, %c
}
// a trailing comment)");
  Graph want("m");
  Value x = want.input("x", DType::f32, {2, 3});
  Value s = want.emit1(OpKind::ReduceSum, {x}, {{"axes", Ints{1}}, {"keepdims", true}}, "s");
  auto t = want.emit(OpKind::TopK, {x}, {{"k", int64_t{1}}}, "t");
  Value c = want.emit1(OpKind::CumSum, {x}, {{"axis", int64_t{1}}}, "c");
  want.set_outputs({s, t[0], t[1], c});
  EXPECT_TRUE(g == want) << g.to_string();
  EXPECT_EQ(g.node(3).attrs.get_bool("exclusive"), false);
  EXPECT_NE(g.to_string().find("return %s, %t#0, %t#1, %c"), std::string::npos);
}

TEST(Text, NamesAreKeptExactly) {
  Graph g = Graph::parse(R"(graph @n {
  %7 = input : f32[2]
  %a.b/c-d_e = iota {dtype=i32, shape=[2], dimension=0} : i32[2]
  %0 = iota {dtype=i32, shape=[2], dimension=0} : i32[2]
  return %7, %a.b/c-d_e, %0
})");
  ASSERT_EQ(g.nodes().size(), 3u);
  EXPECT_EQ(g.node(0).name, "7");
  EXPECT_EQ(g.node(1).name, "a.b/c-d_e");
  EXPECT_EQ(g.node(2).name, "0");
  EXPECT_EQ(g.inputs(), std::vector<int32_t>{0});
}

TEST(Text, StringEscapesAreDecoded) {
  // The decoded string reaches the schema's choice check, whose message shows it raw.
  std::string msg = parse_error(R"(graph @g {
  %x = input : f32[2,3]
  %w = input : f32[3,4]
  %b = input : f32[4]
  %y = fused_matmul_bias_act %x, %w, %b {activation="a\"b\\c\nd"} : f32[2,4]
  return %y
})");
  EXPECT_NE(msg.find("line 5:8: "), std::string::npos) << msg;
  EXPECT_NE(msg.find("is \"a\"b\\c\nd\"; expected one of none, relu"), std::string::npos) << msg;
}

// ---------------------------------------------------------------- parse errors

struct ErrorCase {
  const char* what;
  const char* text;
  const char* message;  // the full rlx::Error message
};

const ErrorCase kErrorCases[] = {
    {"missing '='", "graph @g {\n  %x input : f32[2]\n  return %x\n}",
     "line 2:6: expected '=', found 'input'"},
    {"unknown op", "graph @g {\n  %x = input : f32[2]\n  %y = foo %x : f32[2]\n  return %y\n}",
     "line 3:8: unknown op 'foo'"},
    {"unknown dtype", "graph @g {\n  %x = input : f33[2]\n  return %x\n}",
     "line 2:16: unknown dtype 'f33'"},
    {"undefined value", "graph @g {\n  %x = input : f32[2]\n  return %x, %y\n}",
     "line 3:14: use of undefined value %y"},
    {"redefinition", "graph @g {\n  %x = input : f32[2]\n  %x = param : f32[2]\n  return %x\n}",
     "line 3:3: redefinition of %x"},
    {"bad result index",
     "graph @g {\n  %x = input : f32[4]\n  %t:2 = top_k %x {k=2} : f32[2], i32[2]\n"
     "  return %t#5\n}",
     "line 4:10: %t has 2 results, #5 is out of range"},
    {"index on a single-result value", "graph @g {\n  %x = input : f32[4]\n  return %x#1\n}",
     "line 3:10: %x has 1 result, #1 is out of range"},
    {"type annotation mismatch",
     "graph @g {\n  %x = input : f32[2]\n  %y = iota {dtype=i32, shape=[3], dimension=0} : i32[2]\n"
     "  return %y\n}",
     "line 3:51: declared type i32[2] of %y does not match the inferred type i32[3]"},
    {"unterminated string",
     "graph @g {\n  %x = input : f32[2]\n  %y = softmax %x {axis=\"oops} : f32[2]\n  return %y\n}",
     "line 3:25: unterminated string"},
    {"int overflow",
     "graph @g {\n  %y = iota {dtype=i32, shape=[99999999999999999999], dimension=0} : i32[2]\n"
     "  return %y\n}",
     "line 2:32: integer 99999999999999999999 does not fit in int64"},
    {"missing 'return'", "graph @g {\n  %x = input : f32[2]\n}",
     "line 3:1: expected a statement or 'return', found '}'"},
    {"trailing garbage", "graph @g {\n  return\n} extra",
     "line 3:3: expected end of input, found 'extra'"},
    {"unknown attribute",
     "graph @g {\n  %y = iota {dtype=i32, shape=[2], dimension=0, axis=1} : i32[2]\n  return %y\n}",
     "line 2:49: unknown attribute 'axis' for op 'iota' (known: dtype, shape, dimension)"},
    {"wrong attribute type",
     "graph @g {\n  %y = iota {dtype=i32, shape=[2], dimension=0.0} : i32[2]\n  return %y\n}",
     "line 2:46: attribute 'dimension' of op 'iota' must be an int, found a float"},
    {"unknown dtype attribute",
     "graph @g {\n  %y = iota {dtype=int32, shape=[2], dimension=0} : i32[2]\n  return %y\n}",
     "line 2:20: unknown dtype 'int32'"},
    {"duplicate attribute",
     "graph @g {\n  %y = iota {dtype=i32, dtype=i32, shape=[2], dimension=0} : i32[2]\n"
     "  return %y\n}",
     "line 2:25: duplicate attribute 'dtype'"},
    {"inference error",
     "graph @g {\n  %y = iota {dtype=i32, shape=[2], dimension=3} : i32[2]\n  return %y\n}",
     "line 2:8: op 'iota' (node %y): dimension 3 is out of range for rank 1; operand types: "
     "(none)"},
    {"missing required attribute", "graph @g {\n  %c = constant : f32[]\n  return %c\n}",
     "line 2:8: op 'constant' (node %c): missing required attribute 'value' (tensor)"},
    {"wrong element count",
     "graph @g {\n  %c = constant {value=dense<f32[3]: 1.0, 2.0>} : f32[3]\n}",
     "line 2:24: dense<f32[3]> needs 3 elements, found 2"},
    {"element out of range",
     "graph @g {\n  %c = constant {value=dense<i8[2]: 1, 128>} : i8[2]\n  return %c\n}",
     "line 2:40: 128 is out of range for i8"},
    {"float element overflow",
     "graph @g {\n  %c = constant {value=dense<f16[1]: 70000.0>} : f16[1]\n  return %c\n}",
     "line 2:38: 70000.0 is out of range for f16"},
    {"bool element", "graph @g {\n  %c = constant {value=dense<bool[1]: 1>} : bool[1]\n}",
     "line 2:39: expected true or false, found '1'"},
    {"negative dim", "graph @g {\n  %x = input : f32[2,-1]\n  return %x\n}",
     "line 2:22: negative dimension -1"},
    {"result count mismatch",
     "graph @g {\n  %x = input : f32[4]\n  %t = top_k %x {k=2} : f32[2]\n  return %t\n}",
     "line 3:3: 'top_k' has 2 results, but %t declares 1"},
    {"type count mismatch", "graph @g {\n  %x = input : f32[4], f32[4]\n  return %x\n}",
     "line 2:16: expected 1 result type for %x, found 2"},
    {"operands on input", "graph @g {\n  %x = input : f32[4]\n  %y = input %x : f32[4]\n}",
     "line 3:8: 'input' takes no operands or attributes"},
    {"unknown escape", "graph @g {\n  %c = softmax {axis=\"a\\tb\"} : f32[2]\n}",
     "line 2:24: unknown escape '\\t' in string (use \\\" \\\\ \\n)"},
    {"unexpected character", "graph @g {\n  $x = input : f32[2]\n}",
     "line 2:3: unexpected character '$'"},
    {"missing graph keyword", "@g {\n  return\n}", "line 1:1: expected 'graph', found '@g'"},
    {"missing dtype", "graph @g {\n  %x = input : [2]\n  return %x\n}",
     "line 2:16: expected a type, found '['"},
    {"empty input", "", "line 1:1: expected 'graph', found end of input"},
    {"unclosed graph", "graph @g {\n  %x = input : f32[2]\n  return %x",
     "line 3:12: expected '}', found end of input"},
};

TEST(Text, ParseErrorsAreLocated) {
  for (const ErrorCase& c : kErrorCases) {
    SCOPED_TRACE(c.what);
    EXPECT_EQ(parse_error(c.text), c.message);
  }
}

TEST(Text, InferenceErrorOfAnOpFamilyIsLocated) {
  std::string msg = parse_error(
      "graph @g {\n  %x = input : f32[2]\n  %y = input : f32[3]\n  %z = add %x, %y : f32[2]\n"
      "  return %z\n}");
  EXPECT_EQ(msg.rfind("line 4:8: op 'add' (node %z): ", 0), 0u) << msg;
  EXPECT_NE(msg.find("f32[2], f32[3]"), std::string::npos) << msg;
}

TEST(Text, NestedGraphHasItsOwnNames) {
  // A nested graph's names are its own: an outer value is undefined inside the body.
  std::string msg = parse_error(R"(graph @g {
  %x = input : f32[2]
  %r = elementwise_region %x {body=graph @b {
    %a = input : f32[2]
    %y = add %a, %x : f32[2]
    return %y
  }} : f32[2]
  return %r
})");
  EXPECT_EQ(msg, "line 5:18: use of undefined value %x");
}

TEST(Text, DeepNestingIsAnErrorNotACrash) {
  std::string text;
  for (int i = 0; i < 100; ++i) text += "graph @g {\n%r = elementwise_region {body=";
  EXPECT_EQ(parse_error(text), "line 65:31: graphs nested more than 64 deep");
}

// Each tests/ir/invalid/*.rlx holds one invalid program; its first line is
// "// expected-error: <substring of the message>".
TEST(Text, InvalidFilesFailWithTheirExpectedError) {
  namespace fs = std::filesystem;
  fs::path dir = RLX_TEST_DATA_DIR "/ir/invalid";
  ASSERT_TRUE(fs::is_directory(dir)) << dir;
  int count = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() != ".rlx") continue;
    SCOPED_TRACE(entry.path().filename().string());
    ++count;
    std::ifstream in(entry.path());
    std::stringstream ss;
    ss << in.rdbuf();
    std::string text = ss.str();
    const std::string prefix = "// expected-error: ";
    ASSERT_EQ(text.rfind(prefix, 0), 0u) << "first line must start with '" << prefix << "'";
    std::string want = text.substr(prefix.size(), text.find('\n') - prefix.size());
    ASSERT_FALSE(want.empty());
    std::string got = parse_error(text);
    ASSERT_FALSE(got.empty()) << "parsed without error";
    EXPECT_NE(got.find(want), std::string::npos) << "got: " << got;
  }
  EXPECT_GE(count, 10);
}

}  // namespace
}  // namespace rlx
