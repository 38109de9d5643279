// The graphs of tests/autodiff/gen_grad_ref.py built with the rlx builder (one per case name),
// and the BERT-style encoder layer shared by the reference test and the training-step bench.
#pragma once

#include <map>
#include <string>

#include "rlx/ir/error.h"
#include "rlx/ir/graph.h"

namespace rlx::autodiff::testing {

/// Sizes of a post-LN BERT encoder layer (self-attention with a key padding mask + GELU FFN).
struct EncoderConfig {
  int64_t batch = 2, seq = 6, hidden = 16, heads = 2, ffn = 32;
};

/// Loss graph of one encoder layer: input "x" [B,S,H] f32 and "mask" bool [B,S] (true = real
/// token; padded keys are masked out), params named like BERT's ("attention.q.weight" [H,H],
/// ...), output mean(layer(x)^2). The same layer as gen_grad_ref.py's encoder_layer.
inline Graph encoder_layer_loss(const EncoderConfig& c) {
  Graph g("encoder_layer");
  const int64_t dh = c.hidden / c.heads;
  Value x = g.input("x", DType::f32, {c.batch, c.seq, c.hidden});
  Value mask = g.reshape(g.input("mask", DType::bool_, {c.batch, c.seq}), {c.batch, 1, 1, c.seq});
  auto linear = [&](Value in, const std::string& name, int64_t n_in, int64_t n_out) {
    Value w = g.param(name + ".weight", DType::f32, {n_in, n_out});
    Value b = g.param(name + ".bias", DType::f32, {n_out});
    return g.add(g.matmul(in, w), b);
  };
  auto split = [&](Value t) {
    return g.transpose(g.reshape(t, {c.batch, c.seq, c.heads, dh}), {0, 2, 1, 3});
  };
  auto norm = [&](Value t, const std::string& name) {
    Value s = g.param(name + ".weight", DType::f32, {c.hidden});
    Value b = g.param(name + ".bias", DType::f32, {c.hidden});
    return g.layer_norm(t, s, b, -1, 1e-12);
  };
  Value q = split(linear(x, "attention.q", c.hidden, c.hidden));
  Value k = split(linear(x, "attention.k", c.hidden, c.hidden));
  Value v = split(linear(x, "attention.v", c.hidden, c.hidden));
  Graph::AttentionOptions opts;
  opts.mask = "bool";
  Value a = g.attention(q, k, v, opts, mask);
  a = g.reshape(g.transpose(a, {0, 2, 1, 3}), {c.batch, c.seq, c.hidden});
  Value h = norm(g.add(x, linear(a, "attention.out", c.hidden, c.hidden)), "attention.norm");
  Value f = g.gelu(linear(h, "ffn.in", c.hidden, c.ffn));
  Value out = norm(g.add(h, linear(f, "ffn.out", c.ffn, c.hidden)), "ffn.norm");
  g.set_outputs({g.reduce_mean(g.mul(out, out), {0, 1, 2})});
  return g;
}

/// The loss graph of reference case `name`; `types` gives each leaf's type (from the JSON).
/// Throws rlx::Error for an unknown case.
inline Graph reference_graph(const std::string& name,
                             const std::map<std::string, TensorType>& types) {
  if (name == "encoder_layer") {
    const Shape& xs = types.at("x").shape;
    return encoder_layer_loss({xs[0], xs[1], xs[2], 2, types.at("ffn.in.bias").shape[0]});
  }
  Graph g(name);
  std::map<std::string, Value> in;
  for (const auto& [n, t] : types) in[n] = g.input(n, t.dtype, t.shape);
  auto total = [&](Value v) {
    std::vector<int64_t> all;
    all.reserve(static_cast<size_t>(g.shape(v).rank()));
    for (int i = 0; i < g.shape(v).rank(); ++i) all.push_back(i);
    return g.reduce_sum(v, all);
  };
  auto sq = [&](Value v) { return g.mul(v, v); };
  Value loss;
  if (name == "mlp_gelu" || name == "mlp_gelu_bf16") {
    Value o = g.matmul(g.gelu(g.add(g.matmul(in["x"], in["w1"]), in["b1"])), in["w2"]);
    loss = g.reduce_mean(sq(o), {0, 1});
  } else if (name == "softmax_cross_entropy") {
    loss = g.reduce_mean(g.softmax_cross_entropy(g.matmul(in["x"], in["w"]), in["labels"]), {0});
  } else if (name == "layer_norm") {
    loss = total(g.mul(g.tanh(g.layer_norm(in["x"], in["s"], in["b"], -1, 1e-5)), in["c"]));
  } else if (name == "rms_norm_rope") {
    Value r = g.rope(g.rms_norm(in["x"], in["s"], -1, 1e-6), in["cos"], in["sin"], "neox");
    loss = total(g.mul(r, in["c"]));
  } else if (name == "attention_causal" || name == "attention_padding") {
    Graph::AttentionOptions o;
    o.mask = name == "attention_causal" ? "causal" : "bool";
    std::optional<Value> m;
    if (in.count("mask")) m = in["mask"];
    loss = total(g.mul(g.attention(in["q"], in["k"], in["v"], o, m), in["c"]));
  } else if (name == "conv_relu_max_pool") {
    Value y = g.conv(in["x"], in["w"], {1, 1}, {1, 1}, {1, 1});
    y = g.relu(g.add(y, g.reshape(in["b"], {g.shape(in["b"])[0], 1, 1})));
    loss = total(g.mul(g.max_pool(y, {2, 2}, {2, 2}), in["c"]));
  } else if (name == "conv_groups_avg_pool") {
    Value y = g.conv(in["x"], in["w"], {2, 2}, {1, 0}, {0, 1}, {1, 2}, 2);
    loss = total(g.mul(g.tanh(g.avg_pool(y, {2, 2}, {1, 1})), in["c"]));
  } else if (name == "embedding_gather") {
    loss = total(sq(g.tanh(g.matmul(g.gather(in["table"], in["ids"], 0), in["w"]))));
  } else if (name == "cumsum_pad_slice_concat") {
    Value x = in["x"];
    Value a = g.slice(g.cumsum(x, 1), {0, 1}, {3, 6}, {1, 2});
    Value p = g.pad(x, g.scalar(0.5, DType::f32), {1, 0}, {-1, 0}, {0, 1});
    p = g.slice(p, {0, 0}, {3, 3});
    loss = total(g.mul(g.sin(g.concatenate({a, p}, 1)), g.scalar(1.5, DType::f32)));
  } else if (name == "top_k_max_min") {
    Value x = in["x"];
    loss = g.sub(g.add(total(sq(g.top_k(x, 3).first)), total(g.reduce_max(x, {0}))),
                 total(g.min(x, g.scalar(0.2, DType::f32))));
  } else if (name == "elementwise_mix") {
    Value x = in["x"], y = in["y"];
    Value t = g.add(g.div(g.sqrt(x), y), g.pow(x, y));
    loss = total(g.add(t, g.mul(g.logistic(g.mul(x, y)), g.log(x))));
  } else if (name == "dot_general_batch") {
    loss = total(g.tanh(g.dot_general(in["a"], in["b"], {0}, {1}, {2}, {0})));
  } else {
    throw Error("no reference graph named '" + name + "'");
  }
  g.set_outputs({loss});
  return g;
}

}  // namespace rlx::autodiff::testing
