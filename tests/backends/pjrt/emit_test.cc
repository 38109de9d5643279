// Golden StableHLO text for representative ops (reviewed by hand; every lowering is also
// checked numerically through the plugin in roundtrip_test.cc), and emitter errors.
#include <gtest/gtest.h>

#include <cstdlib>
#include <iostream>

#include "rlx/backends/pjrt/pjrt.h"
#include "rlx/ir/error.h"

namespace rlx::pjrt {
namespace {

struct Golden {
  const char* name;
  Graph (*build)();
  const char* expected;
};

const Golden kGoldens[] = {
    {"broadcast_add",
     [] {
       Graph g("broadcast_add");
       g.set_outputs(
           {g.add(g.input("x", DType::f32, Shape{2, 3}), g.param("b", DType::f32, Shape{3}))});
       return g;
     },
     R"(module @broadcast_add {
  func.func public @main(%arg0: tensor<2x3xf32>, %arg1: tensor<3xf32>) -> (tensor<2x3xf32>) {
    %0 = "stablehlo.broadcast_in_dim"(%arg1) {broadcast_dimensions = array<i64: 1>} : (tensor<3xf32>) -> tensor<2x3xf32>
    %1 = "stablehlo.add"(%arg0, %0) : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
    return %1 : tensor<2x3xf32>
  }
}
)"},
    {"compare_select",
     [] {
       Graph g("compare_select");
       Value x = g.input("x", DType::i32, Shape{4});
       g.set_outputs({g.select(g.lt(x, g.scalar(0, DType::i32)), g.neg(x), x)});
       return g;
     },
     R"(module @compare_select {
  func.func public @main(%arg0: tensor<4xi32>) -> (tensor<4xi32>) {
    %0 = "stablehlo.negate"(%arg0) : (tensor<4xi32>) -> tensor<4xi32>
    %1 = "stablehlo.constant"() {value = dense<"0x00000000"> : tensor<i32>} : () -> tensor<i32>
    %2 = "stablehlo.broadcast_in_dim"(%1) {broadcast_dimensions = array<i64>} : (tensor<i32>) -> tensor<4xi32>
    %3 = "stablehlo.compare"(%arg0, %2) {comparison_direction = #stablehlo<comparison_direction LT>, compare_type = #stablehlo<comparison_type SIGNED>} : (tensor<4xi32>, tensor<4xi32>) -> tensor<4xi1>
    %4 = "stablehlo.select"(%3, %0, %arg0) : (tensor<4xi1>, tensor<4xi32>, tensor<4xi32>) -> tensor<4xi32>
    return %4 : tensor<4xi32>
  }
}
)"},
    {"gelu_erf",
     [] {
       Graph g("gelu_erf");
       g.set_outputs({g.erf(g.input("x", DType::bf16, Shape{2}))});
       return g;
     },
     R"(module @gelu_erf {
  func.func public @main(%arg0: tensor<2xbf16>) -> (tensor<2xbf16>) {
    %0 = "chlo.erf"(%arg0) : (tensor<2xbf16>) -> tensor<2xbf16>
    %1 = "stablehlo.constant"() {value = dense<"0x803F"> : tensor<2xbf16>} : () -> tensor<2xbf16>
    %2 = "stablehlo.constant"() {value = dense<"0x80BF"> : tensor<2xbf16>} : () -> tensor<2xbf16>
    %3 = "stablehlo.compare"(%0, %2) {comparison_direction = #stablehlo<comparison_direction LT>, compare_type = #stablehlo<comparison_type FLOAT>} : (tensor<2xbf16>, tensor<2xbf16>) -> tensor<2xi1>
    %4 = "stablehlo.select"(%3, %2, %0) : (tensor<2xi1>, tensor<2xbf16>, tensor<2xbf16>) -> tensor<2xbf16>
    %5 = "stablehlo.compare"(%0, %1) {comparison_direction = #stablehlo<comparison_direction GT>, compare_type = #stablehlo<comparison_type FLOAT>} : (tensor<2xbf16>, tensor<2xbf16>) -> tensor<2xi1>
    %6 = "stablehlo.select"(%5, %1, %4) : (tensor<2xi1>, tensor<2xbf16>, tensor<2xbf16>) -> tensor<2xbf16>
    return %6 : tensor<2xbf16>
  }
}
)"},
    {"convert_to_bool",
     [] {
       Graph g("convert_to_bool");
       g.set_outputs({g.convert(g.input("x", DType::f16, Shape{3}), DType::bool_)});
       return g;
     },
     R"(module @convert_to_bool {
  func.func public @main(%arg0: tensor<3xf16>) -> (tensor<3xi1>) {
    %0 = "stablehlo.constant"() {value = dense<"0x0000"> : tensor<3xf16>} : () -> tensor<3xf16>
    %1 = "stablehlo.compare"(%arg0, %0) {comparison_direction = #stablehlo<comparison_direction NE>, compare_type = #stablehlo<comparison_type FLOAT>} : (tensor<3xf16>, tensor<3xf16>) -> tensor<3xi1>
    return %1 : tensor<3xi1>
  }
}
)"},
    {"dot_general",
     [] {
       Graph g("dot_general");
       Value a = g.input("a", DType::bf16, Shape{2, 3, 4});
       Value b = g.input("b", DType::bf16, Shape{2, 4, 5});
       g.set_outputs({g.dot_general(a, b, {0}, {0}, {2}, {1}, DType::f32)});
       return g;
     },
     R"(module @dot_general {
  func.func public @main(%arg0: tensor<2x3x4xbf16>, %arg1: tensor<2x4x5xbf16>) -> (tensor<2x3x5xf32>) {
    %0 = "stablehlo.dot_general"(%arg0, %arg1) {dot_dimension_numbers = #stablehlo.dot<lhs_batching_dimensions = [0], rhs_batching_dimensions = [0], lhs_contracting_dimensions = [2], rhs_contracting_dimensions = [1]>} : (tensor<2x3x4xbf16>, tensor<2x4x5xbf16>) -> tensor<2x3x5xf32>
    return %0 : tensor<2x3x5xf32>
  }
}
)"},
    {"reduce_keepdims",
     [] {
       Graph g("reduce_keepdims");
       g.set_outputs({g.reduce_max(g.input("x", DType::f32, Shape{2, 3}), {-1}, true)});
       return g;
     },
     R"(module @reduce_keepdims {
  func.func public @main(%arg0: tensor<2x3xf32>) -> (tensor<2x1xf32>) {
    %0 = "stablehlo.constant"() {value = dense<"0x000080FF"> : tensor<f32>} : () -> tensor<f32>
    %1 = "stablehlo.reduce"(%arg0, %0) ({
    ^bb0(%red1_lhs: tensor<f32>, %red1_rhs: tensor<f32>):
      %red1_0 = "stablehlo.maximum"(%red1_lhs, %red1_rhs) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      %red1_1 = "stablehlo.compare"(%red1_rhs, %red1_rhs) {comparison_direction = #stablehlo<comparison_direction NE>, compare_type = #stablehlo<comparison_type FLOAT>} : (tensor<f32>, tensor<f32>) -> tensor<i1>
      %red1_2 = "stablehlo.compare"(%red1_lhs, %red1_lhs) {comparison_direction = #stablehlo<comparison_direction NE>, compare_type = #stablehlo<comparison_type FLOAT>} : (tensor<f32>, tensor<f32>) -> tensor<i1>
      %red1_3 = "stablehlo.select"(%red1_1, %red1_rhs, %red1_0) : (tensor<i1>, tensor<f32>, tensor<f32>) -> tensor<f32>
      %red1_4 = "stablehlo.select"(%red1_2, %red1_lhs, %red1_3) : (tensor<i1>, tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%red1_4) : (tensor<f32>) -> ()
    }) {dimensions = array<i64: 1>} : (tensor<2x3xf32>, tensor<f32>) -> tensor<2xf32>
    %2 = "stablehlo.reshape"(%1) : (tensor<2xf32>) -> tensor<2x1xf32>
    return %2 : tensor<2x1xf32>
  }
}
)"},
    {"data_movement",
     [] {
       Graph g("data_movement");
       Value x = g.input("x", DType::f32, Shape{2, 3});
       Value t = g.transpose(x, {1, 0});
       Value s = g.slice(t, {1, 0}, {3, 2}, {1, 2});
       g.set_outputs({g.concatenate({s, g.pad(s, g.scalar(0, DType::f32), {0, 0}, {1, 0})}, 0)});
       return g;
     },
     R"(module @data_movement {
  func.func public @main(%arg0: tensor<2x3xf32>) -> (tensor<5x1xf32>) {
    %0 = "stablehlo.transpose"(%arg0) {permutation = array<i64: 1, 0>} : (tensor<2x3xf32>) -> tensor<3x2xf32>
    %1 = "stablehlo.slice"(%0) {start_indices = array<i64: 1, 0>, limit_indices = array<i64: 3, 2>, strides = array<i64: 1, 2>} : (tensor<3x2xf32>) -> tensor<2x1xf32>
    %2 = "stablehlo.constant"() {value = dense<"0x00000000"> : tensor<f32>} : () -> tensor<f32>
    %3 = "stablehlo.pad"(%1, %2) {edge_padding_low = array<i64: 0, 0>, edge_padding_high = array<i64: 1, 0>, interior_padding = array<i64: 0, 0>} : (tensor<2x1xf32>, tensor<f32>) -> tensor<3x1xf32>
    %4 = "stablehlo.concatenate"(%1, %3) {dimension = 0 : i64} : (tensor<2x1xf32>, tensor<3x1xf32>) -> tensor<5x1xf32>
    return %4 : tensor<5x1xf32>
  }
}
)"},
    {"constants_iota",
     [] {
       Graph g("constants_iota");
       Tensor k = Tensor::from_doubles(DType::f32, Shape{2}, std::vector<double>{1.0, -0.5});
       Value c = g.constant(k);
       g.set_outputs(
           {g.add(c, g.iota(DType::f32, Shape{2}, 0)),
            g.constant(Tensor::from_ints(DType::bool_, Shape{2}, std::vector<int64_t>{1, 0}))});
       return g;
     },
     R"(module @constants_iota {
  func.func public @main() -> (tensor<2xf32>, tensor<2xi1>) {
    %0 = "stablehlo.constant"() {value = dense<"0x0000803F000000BF"> : tensor<2xf32>} : () -> tensor<2xf32>
    %1 = "stablehlo.iota"() {iota_dimension = 0 : i64} : () -> tensor<2xf32>
    %2 = "stablehlo.add"(%0, %1) : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
    %3 = "stablehlo.constant"() {value = dense<"0x0100"> : tensor<2xui8>} : () -> tensor<2xui8>
    %4 = "stablehlo.constant"() {value = dense<"0x00"> : tensor<2xui8>} : () -> tensor<2xui8>
    %5 = "stablehlo.compare"(%3, %4) {comparison_direction = #stablehlo<comparison_direction NE>, compare_type = #stablehlo<comparison_type UNSIGNED>} : (tensor<2xui8>, tensor<2xui8>) -> tensor<2xi1>
    return %2, %5 : tensor<2xf32>, tensor<2xi1>
  }
}
)"},
    {"take_along_axis",
     [] {
       Graph g("take_along_axis");
       g.set_outputs({g.take_along_axis(g.input("x", DType::f32, Shape{2, 3}),
                                        g.input("i", DType::i32, Shape{2, 1}), 1)});
       return g;
     },
     R"(module @take_along_axis {
  func.func public @main(%arg0: tensor<2x1xi32>, %arg1: tensor<2x3xf32>) -> (tensor<2x1xf32>) {
    %0 = "stablehlo.convert"(%arg0) : (tensor<2x1xi32>) -> tensor<2x1xi64>
    %1 = "stablehlo.constant"() {value = dense<"0x0000000000000000"> : tensor<i64>} : () -> tensor<i64>
    %2 = "stablehlo.constant"() {value = dense<"0x0200000000000000"> : tensor<i64>} : () -> tensor<i64>
    %3 = "stablehlo.clamp"(%1, %0, %2) : (tensor<i64>, tensor<2x1xi64>, tensor<i64>) -> tensor<2x1xi64>
    %4 = "stablehlo.iota"() {iota_dimension = 0 : i64} : () -> tensor<2x1x1xi64>
    %5 = "stablehlo.reshape"(%3) : (tensor<2x1xi64>) -> tensor<2x1x1xi64>
    %6 = "stablehlo.concatenate"(%4, %5) {dimension = 2 : i64} : (tensor<2x1x1xi64>, tensor<2x1x1xi64>) -> tensor<2x1x2xi64>
    %7 = "stablehlo.gather"(%arg1, %6) {dimension_numbers = #stablehlo.gather<collapsed_slice_dims = [0, 1], start_index_map = [0, 1], index_vector_dim = 2>, slice_sizes = array<i64: 1, 1>, indices_are_sorted = false} : (tensor<2x3xf32>, tensor<2x1x2xi64>) -> tensor<2x1xf32>
    return %7 : tensor<2x1xf32>
  }
}
)"},
};

// RLX_PRINT_GOLDEN=1 prints the current texts (to review and paste after a deliberate change).
TEST(EmitStablehlo, GoldenText) {
  bool print = std::getenv("RLX_PRINT_GOLDEN") != nullptr;
  for (const Golden& c : kGoldens) {
    std::string text = emit_stablehlo(c.build());
    if (print) std::cout << "---- " << c.name << "\n" << text;
    EXPECT_EQ(text, c.expected) << c.name;
  }
}

TEST(EmitStablehlo, UnloweredOpNamesOpAndNode) {
  Graph g("t");
  g.set_outputs({g.softmax(g.input("x", DType::f32, Shape{2, 3}), -1)});
  try {
    emit_stablehlo(g);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("op 'softmax' (node %"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("has no StableHLO lowering"), std::string::npos)
        << e.what();
  }
}

TEST(EmitStablehlo, QuotesModuleNamesThatAreNotIdentifiers) {
  Graph g("bert/layer.0");
  g.set_outputs({g.input("x", DType::f32, Shape{1})});
  EXPECT_EQ(emit_stablehlo(g).rfind("module @\"bert/layer.0\" {", 0), 0u);
}

}  // namespace
}  // namespace rlx::pjrt
