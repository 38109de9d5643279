// com.microsoft contrib ops that onnxruntime's transformer optimizer emits (fused BERT/GPT-2
// subgraphs): Gelu, FastGelu, BiasGelu, SkipLayerNormalization, Attention. Semantics follow
// onnxruntime's docs/ContribOperators.md.
#include <cmath>

#include "importer.h"

namespace rlx::onnx::detail {

namespace {

constexpr const char* kMs = "com.microsoft";

// x + bias when the optional input `i` is given.
Value plus_optional_bias(NodeContext& c, Value x, int i) {
  if (std::optional<Value> b = c.optional_input(i)) return c.g.add(x, *b);
  return x;
}

void convert_skip_layer_norm(NodeContext& c) {
  Graph& g = c.g;
  // output = LayerNorm(input + skip + bias) * gamma + beta over the last dim.
  Value h = g.add(c.input(0), c.input(1));
  h = plus_optional_bias(c, h, 4);
  const int64_t hidden = g.shape(h).dims().back();
  Value gamma = c.input(2);
  Value beta =
      c.has_input(3) ? c.input(3) : g.broadcast_in_dim(g.scalar(0, g.dtype(h)), {hidden}, {});
  c.set_output(0, g.layer_norm(h, gamma, beta, -1, c.attr_float("epsilon", 1e-12)));
  c.require(!c.wants_output(1) && !c.wants_output(2),
            "the mean and inv_std_var outputs are not supported");
  c.set_output(3, h);
}

void convert_attention(NodeContext& c) {
  Graph& g = c.g;
  Value x = c.input(0), w = c.input(1);
  const Shape xs = g.shape(x);
  c.require(xs.rank() == 3, "input must be [batch, sequence, hidden]");
  c.require(!c.has_input(4) && !c.has_input(5) && !c.has_input(6),
            "past state, attention bias and past_sequence_length inputs are not supported");
  c.require(!c.wants_output(1), "the present output is not supported");
  c.require(!c.has_attr("qkv_hidden_sizes"), "qkv_hidden_sizes is not supported");
  const int64_t b = xs[0], s = xs[1], heads = c.attr_int("num_heads", 0);
  const int64_t hidden = g.shape(w).dims().back() / 3;
  c.require(heads > 0 && hidden % heads == 0, "num_heads must divide the hidden size");
  const int64_t d = hidden / heads;
  Value qkv = plus_optional_bias(c, g.matmul(x, w), 2);  // [B, S, 3H]
  auto head = [&](int64_t i) {                           // [B, heads, S, D]
    Value part = g.slice(qkv, {0, 0, i * hidden}, {b, s, (i + 1) * hidden});
    return g.transpose(g.reshape(part, {b, s, heads, d}), {0, 2, 1, 3});
  };
  Graph::AttentionOptions opt;
  const double scale = c.attr_float("scale", 0.0);
  if (scale != 0.0) opt.scale = scale;
  std::optional<Value> mask;
  if (c.attr_int("unidirectional", 0) != 0) opt.mask = "causal";
  if (c.has_input(3)) {
    c.require(opt.mask == "none", "a mask together with unidirectional is not supported");
    Value m = c.input(3);
    const Shape ms = g.shape(m);
    const bool lengths = ms.rank() == 1 && ms[0] == b;
    c.require(lengths || (ms.rank() == 2 && ms[0] == b && ms[1] == s),
              "mask_index must be a [batch, sequence] 0/1 mask or [batch] key lengths (other "
              "forms are not supported)");
    // [batch] lengths (right padding; what the optimizer makes of a 0/1 mask: ReduceSum):
    // key j of row b is visible when j < lengths[b].
    if (lengths) m = g.lt(g.iota(g.dtype(m), Shape{b, s}, 1), g.broadcast_in_dim(m, {b, s}, {0}));
    // 0 -> mask_filter_value added to the scores, 1 -> 0.
    const double filter = c.attr_float("mask_filter_value", -10000.0);
    Value keep = g.convert(m, g.dtype(x));
    Value bias = g.mul(g.sub(g.scalar(1, g.dtype(x)), keep), g.scalar(filter, g.dtype(x)));
    mask = g.reshape(bias, {b, 1, 1, s});
    opt.mask = "bias";
  }
  Value o = g.attention(head(0), head(1), head(2), opt, mask);  // [B, heads, S, D]
  c.set_output(0, g.reshape(g.transpose(o, {0, 2, 1, 3}), {b, s, hidden}));
}

}  // namespace

void add_contrib_converters(ConverterTable& t) {
  t[{kMs, "Gelu"}] = [](NodeContext& c) { c.set_output(0, c.g.gelu(c.input(0))); };
  t[{kMs, "BiasGelu"}] = [](NodeContext& c) {
    c.set_output(0, c.g.gelu(c.g.add(c.input(0), c.input(1))));
  };
  // FastGelu: the tanh approximation, of x + bias when a bias is given.
  t[{kMs, "FastGelu"}] = [](NodeContext& c) {
    c.set_output(0, c.g.gelu_tanh(plus_optional_bias(c, c.input(0), 1)));
  };
  t[{kMs, "SkipLayerNormalization"}] = convert_skip_layer_norm;
  t[{kMs, "Attention"}] = convert_attention;
}

}  // namespace rlx::onnx::detail
