// The synthetic BERT-style encoder of include/rlx/models/encoder_block.h.
#include "rlx/models/encoder_block.h"

#include <random>
#include <string>
#include <utility>

#include "rlx/ir/error.h"

namespace rlx::models {

Graph build_encoder_block(const EncoderBlockConfig& c) {
  const std::pair<const char*, int64_t> sizes[] = {{"batch", c.batch},   {"seq", c.seq},
                                                   {"hidden", c.hidden}, {"heads", c.heads},
                                                   {"ffn", c.ffn},       {"layers", c.layers}};
  for (const auto& [name, v] : sizes)
    check(v > 0,
          std::string("encoder block: ") + name + " must be positive, got " + std::to_string(v));
  check(c.hidden % c.heads == 0, "encoder block: heads " + std::to_string(c.heads) +
                                     " must divide hidden " + std::to_string(c.hidden));
  Graph g(c.layers == 1 ? "encoder_block" : "encoder");
  const int64_t dh = c.hidden / c.heads;
  Value x = g.input("x", DType::f32, Shape{c.batch, c.seq, c.hidden});
  std::string prefix;
  auto linear = [&](Value in, const std::string& name, int64_t n_in, int64_t n_out) {
    Value w = g.param(prefix + name + ".weight", DType::f32, Shape{n_in, n_out});
    Value b = g.param(prefix + name + ".bias", DType::f32, Shape{n_out});
    return g.add(g.matmul(in, w), b);
  };
  // [B,S,H] -> [B,heads,S,dh]
  auto split_heads = [&](Value t) {
    return g.transpose(g.reshape(t, {c.batch, c.seq, c.heads, dh}), {0, 2, 1, 3});
  };
  auto norm = [&](Value t, const std::string& name) {
    Value s = g.param(prefix + name + ".weight", DType::f32, Shape{c.hidden});
    Value b = g.param(prefix + name + ".bias", DType::f32, Shape{c.hidden});
    return g.layer_norm(t, s, b, -1, 1e-12);
  };
  Graph::AttentionOptions opts;
  opts.mask = c.causal ? "causal" : "none";
  for (int64_t layer = 0; layer < c.layers; ++layer) {
    prefix = c.layers == 1 ? "" : "layer." + std::to_string(layer) + ".";
    Value q = split_heads(linear(x, "attention.q", c.hidden, c.hidden));
    Value k = split_heads(linear(x, "attention.k", c.hidden, c.hidden));
    Value v = split_heads(linear(x, "attention.v", c.hidden, c.hidden));
    Value a = g.attention(q, k, v, opts);
    a = g.reshape(g.transpose(a, {0, 2, 1, 3}), {c.batch, c.seq, c.hidden});
    Value h = norm(g.add(x, linear(a, "attention.out", c.hidden, c.hidden)), "attention.norm");
    Value f = g.gelu(linear(h, "ffn.in", c.hidden, c.ffn));
    x = norm(g.add(h, linear(f, "ffn.out", c.ffn, c.hidden)), "ffn.norm");
  }
  g.set_outputs({x});
  return g;
}

TensorMap encoder_block_feeds(const Graph& g, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(-0.5, 0.5);
  TensorMap feeds;
  for (const auto& ids : {g.inputs(), g.params()}) {
    for (int32_t id : ids) {
      const Node& n = g.node(id);
      Tensor t(n.results[0].dtype, n.results[0].shape);
      bool is_scale = n.name.find("norm.weight") != std::string::npos;
      for (int64_t i = 0; i < t.numel(); ++i) t.set_f64(i, (is_scale ? 1.0 : 0.0) + dist(rng));
      feeds.emplace(n.name, t);
    }
  }
  return feeds;
}

}  // namespace rlx::models
