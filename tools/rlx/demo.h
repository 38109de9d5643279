// The pre-model main job: a BERT-style encoder block built with the graph builder.
#pragma once

#include <cstdint>

#include "rlx/ir/evaluator.h"
#include "rlx/ir/graph.h"

namespace rlx::tools {

/// Sizes of the demo encoder (post-LN BERT layers: self-attention + GELU FFN).
struct BlockConfig {
  int64_t batch = 2, seq = 16, hidden = 64, heads = 4, ffn = 256, layers = 1;
  bool causal = false;
};

/// Builds `layers` encoder layers: input "x" [batch, seq, hidden] f32, params named like
/// BERT's ("attention.q.weight", prefixed "layer.N." when layers > 1), output
/// [batch, seq, hidden].
Graph build_encoder_block(const BlockConfig& cfg);

/// Seeded random values for every input and param of `g` (uniform in [-0.5, 0.5); norm
/// scales around 1).
TensorMap random_feeds(const Graph& g, uint64_t seed);

}  // namespace rlx::tools
