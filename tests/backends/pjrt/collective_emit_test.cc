// Golden StableHLO text of the collectives (all_reduce sum / mean / max, all_gather,
// reduce_scatter, all_to_all) in the form jax emits under SPMD: replica_groups as a dense i64
// tensor, channel handles numbered in graph order, use_global_device_ids; bare add / maximum
// regions (XLA's reduction kinds) and, for a float max, the all_reduce of its NaN flags
// (handle 3 + 6 = 9). The replicated (pmap) form runs in collective_run_test.cc.
#include <gtest/gtest.h>

#include <cstdlib>
#include <iostream>

#include "rlx/backends/pjrt/pjrt.h"
#include "rlx/ir/collective.h"
#include "rlx/ir/error.h"

namespace rlx::pjrt {
namespace {

AttrMap with(AttrMap a, const std::string& k, Attr v) {
  a.set(k, std::move(v));
  return a;
}

TEST(EmitCollectives, GoldenText) {
  Graph g("collectives");
  Value x = g.input("x", DType::f32, Shape{4, 6});
  AttrMap pairs = collective_attrs({{0, 2}, {1, 3}}, "data");
  AttrMap all4 = collective_attrs({}, "model", 4);
  Value s = g.emit1(OpKind::AllReduce, {x}, with(pairs, "reduce", std::string("sum")));
  Value m = g.emit1(OpKind::AllReduce, {s}, with(all4, "reduce", std::string("mean")));
  Value mx = g.emit1(OpKind::AllReduce, {m}, with(pairs, "reduce", std::string("max")));
  Value ag = g.emit1(OpKind::AllGather, {mx}, with(pairs, "axis", int64_t{-1}));
  Value rs = g.emit1(OpKind::ReduceScatter, {ag}, with(all4, "scatter_dimension", int64_t{0}));
  Value a2a = g.emit1(OpKind::AllToAll, {rs},
                      with(with(pairs, "split_axis", int64_t{1}), "concat_axis", int64_t{0}));
  g.set_outputs({a2a});
  const char* expected = R"(module @collectives {
  func.func public @main(%arg0: tensor<4x6xf32>) -> (tensor<2x6xf32>) {
    %0 = "stablehlo.all_reduce"(%arg0) ({
    ^bb0(%lhs0: tensor<f32>, %rhs0: tensor<f32>):
      %red0 = "stablehlo.add"(%lhs0, %rhs0) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%red0) : (tensor<f32>) -> ()
    }) {channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 2], [1, 3]]> : tensor<2x2xi64>, use_global_device_ids} : (tensor<4x6xf32>) -> tensor<4x6xf32>
    %1 = "stablehlo.all_reduce"(%0) ({
    ^bb0(%lhs1: tensor<f32>, %rhs1: tensor<f32>):
      %red1 = "stablehlo.add"(%lhs1, %rhs1) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%red1) : (tensor<f32>) -> ()
    }) {channel_handle = #stablehlo.channel_handle<handle = 2, type = 1>, replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>, use_global_device_ids} : (tensor<4x6xf32>) -> tensor<4x6xf32>
    %2 = "stablehlo.constant"() {value = dense<"0x00008040"> : tensor<4x6xf32>} : () -> tensor<4x6xf32>
    %3 = "stablehlo.divide"(%1, %2) : (tensor<4x6xf32>, tensor<4x6xf32>) -> tensor<4x6xf32>
    %4 = "stablehlo.all_reduce"(%3) ({
    ^bb0(%lhs4: tensor<f32>, %rhs4: tensor<f32>):
      %red4 = "stablehlo.maximum"(%lhs4, %rhs4) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%red4) : (tensor<f32>) -> ()
    }) {channel_handle = #stablehlo.channel_handle<handle = 3, type = 1>, replica_groups = dense<[[0, 2], [1, 3]]> : tensor<2x2xi64>, use_global_device_ids} : (tensor<4x6xf32>) -> tensor<4x6xf32>
    %5 = "stablehlo.compare"(%3, %3) {comparison_direction = #stablehlo<comparison_direction NE>, compare_type = #stablehlo<comparison_type FLOAT>} : (tensor<4x6xf32>, tensor<4x6xf32>) -> tensor<4x6xi1>
    %6 = "stablehlo.convert"(%5) : (tensor<4x6xi1>) -> tensor<4x6xf32>
    %7 = "stablehlo.all_reduce"(%6) ({
    ^bb0(%lhs7: tensor<f32>, %rhs7: tensor<f32>):
      %red7 = "stablehlo.maximum"(%lhs7, %rhs7) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%red7) : (tensor<f32>) -> ()
    }) {channel_handle = #stablehlo.channel_handle<handle = 9, type = 1>, replica_groups = dense<[[0, 2], [1, 3]]> : tensor<2x2xi64>, use_global_device_ids} : (tensor<4x6xf32>) -> tensor<4x6xf32>
    %8 = "stablehlo.constant"() {value = dense<"0x00000000"> : tensor<4x6xf32>} : () -> tensor<4x6xf32>
    %9 = "stablehlo.compare"(%7, %8) {comparison_direction = #stablehlo<comparison_direction NE>, compare_type = #stablehlo<comparison_type FLOAT>} : (tensor<4x6xf32>, tensor<4x6xf32>) -> tensor<4x6xi1>
    %10 = "stablehlo.constant"() {value = dense<"0x0000C07F"> : tensor<4x6xf32>} : () -> tensor<4x6xf32>
    %11 = "stablehlo.select"(%9, %10, %4) : (tensor<4x6xi1>, tensor<4x6xf32>, tensor<4x6xf32>) -> tensor<4x6xf32>
    %12 = "stablehlo.all_gather"(%11) {all_gather_dim = 1 : i64, channel_handle = #stablehlo.channel_handle<handle = 4, type = 1>, replica_groups = dense<[[0, 2], [1, 3]]> : tensor<2x2xi64>, use_global_device_ids} : (tensor<4x6xf32>) -> tensor<4x12xf32>
    %13 = "stablehlo.reduce_scatter"(%12) ({
    ^bb0(%lhs13: tensor<f32>, %rhs13: tensor<f32>):
      %red13 = "stablehlo.add"(%lhs13, %rhs13) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%red13) : (tensor<f32>) -> ()
    }) {channel_handle = #stablehlo.channel_handle<handle = 5, type = 1>, replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>, scatter_dimension = 0 : i64, use_global_device_ids} : (tensor<4x12xf32>) -> tensor<1x12xf32>
    %14 = "stablehlo.all_to_all"(%13) {channel_handle = #stablehlo.channel_handle<handle = 6, type = 1>, concat_dimension = 0 : i64, replica_groups = dense<[[0, 2], [1, 3]]> : tensor<2x2xi64>, split_count = 2 : i64, split_dimension = 1 : i64} : (tensor<1x12xf32>) -> tensor<2x6xf32>
    return %14 : tensor<2x6xf32>
  }
}
)";
  std::string text = emit_stablehlo(g);
  if (std::getenv("RLX_PRINT_GOLDEN") != nullptr) std::cout << text;
  EXPECT_EQ(text, expected);
}

TEST(EmitCollectives, AllReduceOverAllDevicesNeedsItsSize) {
  Graph g("c");
  g.set_outputs({g.emit1(OpKind::AllReduce, {g.input("x", DType::f32, Shape{2})}, {}, "ar")});
  try {
    emit_stablehlo(g);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("all_reduce (node %ar)"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("give replica_groups or axis_size"), std::string::npos);
  }
}

}  // namespace
}  // namespace rlx::pjrt
