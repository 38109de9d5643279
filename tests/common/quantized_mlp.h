// A two-layer MLP whose weights are bound to block formats through
// CompileOptions::quantized_params, shared by the CPU and PJRT tests of that option: the graph,
// its bindings, random f32 weights, and the reference outputs (the reference evaluator on the
// graph quantize_params writes, fed the packed weights: exact dequantize_row values).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "rlx/ir/evaluator.h"
#include "rlx/opt/quantize_params.h"

namespace rlx::testing {

/// y = gelu(x . w1 + b1) . w2^T: x f32[4, 64], w1 f32[64, 96] (x . W, quantized along its
/// axis 0, q8_0), b1 f32[96], w2 f32[32, 96] (ggml's [out, in], along its last axis, q4_0).
inline Graph quantized_mlp() {
  Graph g("qmlp");
  Value x = g.input("x", DType::f32, {4, 64});
  Value w1 = g.param("w1", DType::f32, {64, 96});
  Value b1 = g.param("b1", DType::f32, {96});
  Value w2 = g.param("w2", DType::f32, {32, 96});
  Value h = g.gelu(g.add(g.matmul(x, w1), b1));
  g.set_outputs({g.dot_general(h, w2, {}, {}, {1}, {1})});
  return g;
}

inline std::map<std::string, QuantizedParamBinding> quantized_mlp_bindings() {
  return {{"w1", {QuantFormat::kQ8_0, 0}}, {"w2", {QuantFormat::kQ4_0, -1}}};
}

/// Declared-type (f32) weights and the input.
inline TensorMap quantized_mlp_feeds() {
  return {{"x", random_tensor(DType::f32, {4, 64}, 11)},
          {"w1", random_tensor(DType::f32, {64, 96}, 12, -0.3, 0.3)},
          {"b1", random_tensor(DType::f32, {96}, 13)},
          {"w2", random_tensor(DType::f32, {32, 96}, 14, -0.3, 0.3)}};
}

/// `feeds` with every bound weight replaced by its packed bytes (pack_quantized_param).
inline TensorMap packed_feeds(const TensorMap& feeds,
                              const std::map<std::string, QuantizedParamBinding>& bindings) {
  TensorMap out = feeds;
  for (const auto& [name, b] : bindings) out[name] = pack_quantized_param(feeds.at(name), b, name);
  return out;
}

/// The outputs the quantized graph must compute.
inline std::vector<Tensor> quantized_mlp_reference() {
  auto bindings = quantized_mlp_bindings();
  return evaluate(quantize_params(quantized_mlp(), bindings),
                  packed_feeds(quantized_mlp_feeds(), bindings));
}

}  // namespace rlx::testing
