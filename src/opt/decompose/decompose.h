// Internal: the decomposition table and per-family registration.
#pragma once

#include "rlx/opt/decompose.h"

namespace rlx::detail {

void set_decomposition(OpKind op, DecomposeFn fn);

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
