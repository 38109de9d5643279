// Internal: the decomposition table and per-family registration.
#pragma once

#include <string>

#include "rlx/opt/decompose.h"

namespace rlx::detail {

void set_decomposition(OpKind op, DecomposeFn fn);

// y with the "activation" attribute of fused_matmul_bias_act / quant_matmul applied ("none",
// "relu", "gelu", "gelu_tanh", "silu") as the activation op (fused.cc).
Value apply_activation(Graph& g, Value y, const std::string& act);

// One per family file in src/opt/decompose/.
void register_decompose_elementwise();
void register_decompose_linalg();
void register_decompose_reduce();
void register_decompose_shape();
void register_decompose_nn();
void register_decompose_conv();
void register_decompose_fused();
void register_decompose_quant();
void register_decompose_random();

}  // namespace rlx::detail
