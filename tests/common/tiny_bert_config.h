// The config of the tiny random encoders the BERT builder tests compile: 2 layers, hidden 32
// (one Q8_0 block), 4 heads of 8, FFN 64, 50 tokens, 16 positions.
#pragma once

#include "rlx/models/bert.h"

namespace rlx::testing {

/// The tiny encoder's BertConfig (hidden_act gelu, layer_norm_eps 1e-12).
inline models::BertConfig tiny_bert_config() {
  return models::BertConfig::from_json(
      R"({"model_type": "bert", "vocab_size": 50, "hidden_size": 32,
      "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 64,
      "max_position_embeddings": 16, "type_vocab_size": 2})",
      "tiny config");
}

}  // namespace rlx::testing
