// Reference kernels for nn ops: each composite is computed directly in double (not through its
// decomposition), so it is an independent oracle for the decompositions in src/opt/decompose.
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <string>

#include "eval.h"

namespace rlx::detail {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// softmax (log = false) and log_softmax (log = true) along attr axis, max-subtracted.
std::vector<Tensor> softmax_family(const EvalContext& ctx, bool log) {
  const Tensor& x = ctx.operands[0];
  const Shape& s = x.shape();
  Tensor out(x.dtype(), s);
  int axis = s.normalize_axis(ctx.attrs().get_int("axis"));
  int64_t outer = dims_product(s, 0, axis), n = s[axis];
  int64_t inner = dims_product(s, axis + 1, s.rank());
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      auto at = [&](int64_t j) { return (o * n + j) * inner + i; };
      // An all -inf row has max -inf and -inf - -inf = NaN: the row is NaN, as in jax.
      double m = -kInf;
      for (int64_t j = 0; j < n; ++j) m = scalar::max_nan(m, x.get_f64(at(j)));
      double sum = 0;
      for (int64_t j = 0; j < n; ++j) sum += std::exp(x.get_f64(at(j)) - m);
      for (int64_t j = 0; j < n; ++j) {
        double shifted = x.get_f64(at(j)) - m;
        out.set_f64(at(j), log ? shifted - std::log(sum) : std::exp(shifted) / sum);
      }
    }
  }
  return {out};
}

std::vector<Tensor> eval_softmax(const EvalContext& ctx) { return softmax_family(ctx, false); }
std::vector<Tensor> eval_log_softmax(const EvalContext& ctx) { return softmax_family(ctx, true); }

// layer_norm (operands x, scale, bias) and rms_norm (x, scale) over dims [axis, rank).
std::vector<Tensor> eval_norm(const EvalContext& ctx) {
  const Tensor& x = ctx.operands[0];
  const Tensor& scale = ctx.operands[1];
  bool layer = ctx.node.op == OpKind::LayerNorm;
  const Shape& s = x.shape();
  Tensor out(x.dtype(), s);
  int axis = s.normalize_axis(ctx.attrs().get_int("axis"));
  double eps = ctx.attrs().get_float("eps");
  int64_t outer = dims_product(s, 0, axis), n = dims_product(s, axis, s.rank());
  for (int64_t o = 0; o < outer; ++o) {
    int64_t base = o * n;
    double mean = 0;
    if (layer) {
      for (int64_t j = 0; j < n; ++j) mean += x.get_f64(base + j);
      mean /= static_cast<double>(n);
    }
    // Two passes: the second accumulates squares of centred values (rms_norm: mean is 0).
    double var = 0;
    for (int64_t j = 0; j < n; ++j) {
      double c = x.get_f64(base + j) - mean;
      var += c * c;
    }
    var /= static_cast<double>(n);
    double r = 1.0 / std::sqrt(var + eps);
    for (int64_t j = 0; j < n; ++j) {
      double y = (x.get_f64(base + j) - mean) * r * scale.get_f64(j);
      if (layer) y += ctx.operands[2].get_f64(j);
      out.set_f64(base + j, y);
    }
  }
  return {out};
}

}  // namespace

Tensor attention_reference(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor* mask,
                           const AttrMap& attrs) {
  const std::string& kind = attrs.get_string("mask");
  int64_t nb = q.shape()[0], hq = q.shape()[1], sq = q.shape()[2], d = q.shape()[3];
  int64_t hkv = k.shape()[1], sk = k.shape()[2], dv = v.shape()[3];
  int64_t group = hq / hkv;
  // A window >= Sk sees every key up to the query's position, so it is clamped to Sk: same
  // mask, and pos - window cannot overflow for a huge window.
  int64_t window = std::min(attrs.get_int("window"), sk);
  double scale =
      attrs.has("scale") ? attrs.get_float("scale") : 1.0 / std::sqrt(static_cast<double>(d));
  Shape scores{nb, hq, sq, sk};
  std::optional<BroadcastIndexer> mask_index;
  if (mask && kind != "causal_lengths") mask_index.emplace(mask->shape(), scores);
  Tensor out(q.dtype(), Shape{nb, hq, sq, dv});
  std::vector<double> s(static_cast<size_t>(sk)), p(static_cast<size_t>(sk));
  std::vector<bool> visible(static_cast<size_t>(sk));
  for (int64_t b = 0; b < nb; ++b) {
    for (int64_t h = 0; h < hq; ++h) {
      int64_t kh = h / group;  // GQA: query head h reads kv head h / (Hq / Hkv)
      for (int64_t i = 0; i < sq; ++i) {
        // The last query is aligned with the last key (causal_lengths: with the row's last
        // valid key, lengths[b] - 1).
        int64_t pos = i + sk - sq;
        if (kind == "causal_lengths") pos = i + mask->get_i64(b) - sq;
        for (int64_t j = 0; j < sk; ++j) {
          auto ju = static_cast<size_t>(j);
          double dot = 0;
          for (int64_t c = 0; c < d; ++c)
            dot += q.get_f64(((b * hq + h) * sq + i) * d + c) *
                   k.get_f64(((b * hkv + kh) * sk + j) * d + c);
          s[ju] = dot * scale;
          int64_t flat = ((b * hq + h) * sq + i) * sk + j;
          if (kind == "causal" || kind == "causal_lengths") {
            visible[ju] = j <= pos;
          } else if (kind == "sliding_window") {
            visible[ju] = pos - window < j && j <= pos;
          } else if (kind == "bool") {
            visible[ju] = mask->get_i64((*mask_index)(flat)) != 0;
          } else if (kind == "bias") {
            s[ju] += mask->get_f64((*mask_index)(flat));
            visible[ju] = s[ju] != -kInf;
          } else {
            visible[ju] = true;
          }
        }
        // Masked positions take no part in the max and get weight exactly 0, whatever their
        // score; a row with nothing visible has denominator 0, replaced by 1, so it outputs 0.
        double m = -kInf;
        for (int64_t j = 0; j < sk; ++j)
          if (visible[static_cast<size_t>(j)]) m = scalar::max_nan(m, s[static_cast<size_t>(j)]);
        double den = 0;
        for (int64_t j = 0; j < sk; ++j) {
          auto ju = static_cast<size_t>(j);
          p[ju] = visible[ju] ? std::exp(s[ju] - m) : 0.0;
          den += p[ju];
        }
        double divisor = den > 0 ? den : 1.0;
        for (int64_t e = 0; e < dv; ++e) {
          double acc = 0;
          // Masked keys are skipped, not weighted by 0: 0 * inf (or NaN) in v would be NaN.
          for (int64_t j = 0; j < sk; ++j)
            if (visible[static_cast<size_t>(j)])
              acc += p[static_cast<size_t>(j)] / divisor *
                     v.get_f64(((b * hkv + kh) * sk + j) * dv + e);
          out.set_f64(((b * hq + h) * sq + i) * dv + e, acc);
        }
      }
    }
  }
  return out;
}

namespace {

std::vector<Tensor> eval_attention(const EvalContext& ctx) {
  const Tensor* mask = ctx.operands.size() == 4 ? &ctx.operands[3] : nullptr;
  return {
      attention_reference(ctx.operands[0], ctx.operands[1], ctx.operands[2], mask, ctx.attrs())};
}

std::vector<Tensor> eval_rope(const EvalContext& ctx) {
  const Tensor &x = ctx.operands[0], &cos = ctx.operands[1], &sin = ctx.operands[2];
  bool neox = ctx.attrs().get_string("layout") == "neox";
  const Shape& s = x.shape();
  int64_t d = s[s.rank() - 1];
  int64_t half = cos.shape()[cos.shape().rank() - 1];
  int64_t rows = dims_product(s, 0, s.rank() - 1);
  std::vector<int64_t> target = s.dims();
  target.back() = half;
  BroadcastIndexer cos_index(cos.shape(), Shape(target)), sin_index(sin.shape(), Shape(target));
  Tensor out(x.dtype(), s);
  for (int64_t r = 0; r < rows; ++r) {
    int64_t base = r * d;
    for (int64_t c = 2 * half; c < d; ++c) out.set_f64(base + c, x.get_f64(base + c));
    for (int64_t t = 0; t < half; ++t) {
      // neox rotates pairs (t, t + R/2), gptj adjacent pairs (2t, 2t + 1).
      int64_t ia = neox ? t : 2 * t, ib = neox ? t + half : 2 * t + 1;
      double a = x.get_f64(base + ia), b = x.get_f64(base + ib);
      double cv = cos.get_f64(cos_index(r * half + t)), sv = sin.get_f64(sin_index(r * half + t));
      out.set_f64(base + ia, a * cv - b * sv);
      out.set_f64(base + ib, b * cv + a * sv);
    }
  }
  return {out};
}

std::vector<Tensor> eval_softmax_cross_entropy(const EvalContext& ctx) {
  const Tensor &logits = ctx.operands[0], &labels = ctx.operands[1];
  const Shape& s = logits.shape();
  int64_t c = s[s.rank() - 1];
  Tensor out(logits.dtype(), labels.shape());
  for (int64_t r = 0; r < labels.numel(); ++r) {
    double m = -kInf;
    for (int64_t j = 0; j < c; ++j) m = scalar::max_nan(m, logits.get_f64(r * c + j));
    double sum = 0;
    for (int64_t j = 0; j < c; ++j) sum += std::exp(logits.get_f64(r * c + j) - m);
    int64_t label = std::clamp<int64_t>(labels.get_i64(r), 0, c - 1);  // as gather clamps
    // -log_softmax(logits)[label], the same expression the decomposition computes.
    out.set_f64(r, -(logits.get_f64(r * c + label) - m - std::log(sum)));
  }
  return {out};
}

}  // namespace

void register_eval_nn() {
  set_eval(OpKind::Softmax, eval_softmax);
  set_eval(OpKind::LogSoftmax, eval_log_softmax);
  set_eval(OpKind::LayerNorm, eval_norm);
  set_eval(OpKind::RmsNorm, eval_norm);
  set_eval(OpKind::Attention, eval_attention);
  set_eval(OpKind::Rope, eval_rope);
  set_eval(OpKind::SoftmaxCrossEntropy, eval_softmax_cross_entropy);
}

}  // namespace rlx::detail
