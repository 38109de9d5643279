// "amp": automatic mixed precision — the op precision table, policy text form (and
// RLX_PRECISION) and the pass.
#include <array>
#include <cstdlib>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <tuple>
#include <vector>

#include "rlx/ir/error.h"
#include "rlx/opt/precision.h"
#include "rlx/opt/rewrite.h"

namespace rlx {
namespace {

// The one precision table. Traits give the broad classes; the entries below name the ops the
// auto policies single out (the matmul-like ops, as torch.autocast's "lower precision" list, and
// the numerically sensitive ones, as its "float32" list). Every op not named is Default.
std::array<AmpOpClass, kNumOps> build_class_table() {
  std::array<AmpOpClass, kNumOps> table;
  for (int i = 0; i < kNumOps; ++i) {
    const OpInfo& info = op_info(static_cast<OpKind>(i));
    AmpOpClass c = AmpOpClass::Default;
    if (info.has(kLeaf))
      c = AmpOpClass::Typed;
    else if (info.has(kShapeOp))
      c = AmpOpClass::DataMovement;
    else if (info.has(kReduction))
      c = AmpOpClass::Sensitive;
    table[static_cast<size_t>(i)] = c;
  }
  const std::pair<OpKind, AmpOpClass> kEntries[] = {
      {OpKind::MatMul, AmpOpClass::LowPrecision},
      {OpKind::DotGeneral, AmpOpClass::LowPrecision},
      {OpKind::Conv, AmpOpClass::LowPrecision},
      {OpKind::Attention, AmpOpClass::LowPrecision},
      {OpKind::PackedQkvAttention, AmpOpClass::LowPrecision},
      {OpKind::FusedMatMulBiasAct, AmpOpClass::LowPrecision},
      {OpKind::Softmax, AmpOpClass::Sensitive},
      {OpKind::LogSoftmax, AmpOpClass::Sensitive},
      {OpKind::LayerNorm, AmpOpClass::Sensitive},
      {OpKind::RmsNorm, AmpOpClass::Sensitive},
      {OpKind::FusedResidualLayerNorm, AmpOpClass::Sensitive},
      {OpKind::FusedResidualRmsNorm, AmpOpClass::Sensitive},
      {OpKind::CumSum, AmpOpClass::Sensitive},
      {OpKind::Exp, AmpOpClass::Sensitive},
      {OpKind::Log, AmpOpClass::Sensitive},
      {OpKind::Log1p, AmpOpClass::Sensitive},
      {OpKind::Expm1, AmpOpClass::Sensitive},
      {OpKind::Pow, AmpOpClass::Sensitive},
      {OpKind::SoftmaxCrossEntropy, AmpOpClass::Sensitive},
      // scatter_add is filed with the shape ops but adds its updates: an accumulation.
      {OpKind::ScatterAdd, AmpOpClass::Sensitive},
      // Collectives: a sum across devices accumulates (all_reduce sum / mean, reduce_scatter);
      // gathering and exchanging move data. all_reduce max / min move data too: amp_node_class.
      {OpKind::AllReduce, AmpOpClass::Sensitive},
      {OpKind::ReduceScatter, AmpOpClass::Sensitive},
      {OpKind::AllGather, AmpOpClass::DataMovement},
      {OpKind::AllToAll, AmpOpClass::DataMovement},
      // The dtypes are the op's meaning (convert) or fixed by a typed body (region).
      {OpKind::Convert, AmpOpClass::Typed},
      {OpKind::ElementwiseRegion, AmpOpClass::Typed},
      // Control flow: carries, branch results and body inputs must keep their exact types.
      {OpKind::Cond, AmpOpClass::Typed},
      {OpKind::WhileLoop, AmpOpClass::Typed},
      {OpKind::Scan, AmpOpClass::Typed},
  };
  for (const auto& [op, c] : kEntries) table[static_cast<size_t>(op)] = c;
  return table;
}

constexpr std::string_view kModeNames[] = {"always-f32", "always-f16", "always-bf16",
                                           "auto-mixed-f16", "auto-mixed-bf16"};

// The float dtypes AMP computes in; ops touching any other float dtype (f64) are left alone.
bool is_amp_float(DType t) { return t == DType::f32 || t == DType::f16 || t == DType::bf16; }

// Converting `from` to `to` and back gives every value back (f16/bf16 -> f32, any -> f64).
bool widens_losslessly(DType from, DType to) {
  if (!is_float(from) || !is_float(to) || from == to) return false;
  if (to == DType::f64) return true;
  return to == DType::f32 && (from == DType::f16 || from == DType::bf16);
}

// Throws unless `dtype` may be the compute dtype of `op` in an override; `where` prefixes the
// message (the override token or the pass).
void check_override(OpKind op, DType dtype, const std::string& where) {
  check(is_amp_float(dtype),
        where + ": dtype must be f32, f16 or bf16, found '" + std::string(dtype_name(dtype)) + "'");
  check(amp_op_class(op) != AmpOpClass::Typed, where + ": op '" + std::string(op_name(op)) +
                                                   "' has typed semantics and cannot be re-typed");
}

std::string mode_list() {
  std::string s;
  for (std::string_view m : kModeNames) s += (s.empty() ? "" : ", ") + std::string(m);
  return s;
}

// One run of the pass over one graph: the rewrite callback and the cast bookkeeping it needs.
class AmpRewriter {
 public:
  AmpRewriter(const PrecisionPolicy& policy, const Graph& src)
      : policy_(policy), src_(src), src_uses_(use_counts(src)) {}

  Graph run() {
    Graph out =
        rewrite(src_, [this](RewriteContext& ctx, const Node& node, std::span<const Value> ops) {
          return rewrite_node(ctx.dst, node, ops);
        });
    return prune_unused_casts(out);
  }

 private:
  std::optional<std::vector<Value>> rewrite_node(Graph& dst, const Node& node,
                                                 std::span<const Value> operands) {
    if (node.op == OpKind::Convert) return rewrite_convert(dst, node, operands[0]);
    bool any_float = false;
    for (Value v : operands) {
      DType t = dst.dtype(v);
      if (is_float(t) && !is_amp_float(t)) return std::nullopt;
      any_float = any_float || is_float(t);
    }
    for (const TensorType& t : node.results) {
      if (is_float(t.dtype) && !is_amp_float(t.dtype)) return std::nullopt;
      any_float = any_float || is_float(t.dtype);
    }
    if (!any_float) return std::nullopt;
    std::optional<DType> c = compute_dtype(dst, node, operands);
    if (!c) return std::nullopt;

    std::vector<Value> new_operands;
    for (size_t i = 0; i < operands.size(); ++i) {
      Value v = operands[i];
      if (!is_float(dst.dtype(v)))
        new_operands.push_back(v);
      else if (is_attention_bias(node, i))
        new_operands.push_back(as_saturated(dst, v, *c));
      else
        new_operands.push_back(as(dst, v, *c));
    }
    AttrMap attrs = node.attrs;
    bool low = *c != DType::f32;
    if (low && op_info(node.op).find_attr("preferred")) attrs.set("preferred", DType::f32);
    if (new_operands == std::vector<Value>(operands.begin(), operands.end()) && attrs == node.attrs)
      return std::nullopt;

    std::vector<Value> results = dst.emit(node.op, std::move(new_operands), attrs, node.name);
    for (size_t r = 0; r < results.size(); ++r) {
      DType declared = node.results[r].dtype;
      if (!is_float(declared)) continue;
      // Under Always* every value is rounded to c; auto keeps an f32 accumulation result.
      if (!policy_.is_auto()) results[r] = as(dst, results[r], *c);
      results[r] = as(dst, results[r], declared);
    }
    return results;
  }

  // The compute dtype of a node with float values, or nullopt to leave it as it is.
  std::optional<DType> compute_dtype(const Graph& dst, const Node& node,
                                     std::span<const Value> operands) const {
    if (auto it = policy_.overrides.find(node.op); it != policy_.overrides.end()) return it->second;
    switch (amp_node_class(node.op, node.attrs)) {
      case AmpOpClass::LowPrecision:
        return policy_.low_dtype();
      case AmpOpClass::Sensitive:
      case AmpOpClass::Default:
        return policy_.is_auto() ? DType::f32 : policy_.low_dtype();
      case AmpOpClass::DataMovement: {
        // Run where the data already is: the exact source of each float operand (looking
        // through lossless widenings), promoted when they differ.
        std::optional<DType> t;
        for (Value v : operands) {
          if (!is_float(dst.dtype(v))) continue;
          DType s = dst.dtype(source_of(dst, v));
          t = t ? promote_types(*t, s) : s;
        }
        return t;
      }
      case AmpOpClass::Typed:
        return std::nullopt;
    }
    return std::nullopt;
  }

  // A user convert: its target dtype is its meaning, so it stays, but it is taken from the
  // exact source of its operand and merged with an equal cast made earlier.
  std::optional<std::vector<Value>> rewrite_convert(Graph& dst, const Node& node, Value x) {
    DType to = node.attrs.get_dtype("dtype");
    if (std::optional<Value> found = find_cast(dst, x, to)) return std::vector<Value>{*found};
    Value s = source_of(dst, x);
    Value v = dst.emit1(OpKind::Convert, {s}, node.attrs, node.name);
    casts_[{s, to}] = v;
    size_t id = static_cast<size_t>(&node - src_.nodes().data());
    // A convert the input used may lose its users to the look-through; one it did not use is
    // dead code of the input, which is DCE's business.
    if (src_uses_[id][0] > 0) prunable_.insert(v.node);
    return std::vector<Value>{v};
  }

  // `v` with lossless widening converts looked through: the value of the least precise dtype
  // that holds exactly v's values.
  static Value source_of(const Graph& g, Value v) {
    for (;;) {
      const Node& n = g.node(v);
      if (n.op != OpKind::Convert || !widens_losslessly(g.dtype(n.operands[0]), g.dtype(v)))
        return v;
      v = n.operands[0];
    }
  }

  // An existing value equal to convert(v, to): v or a value on its widening chain of dtype
  // `to`, or an earlier cast of v's source.
  std::optional<Value> find_cast(const Graph& g, Value v, DType to) const {
    for (Value w = v;;) {
      if (g.dtype(w) == to) return w;
      Value s = source_of(g, w);
      if (s == w) break;
      w = g.node(w).operands[0];
    }
    if (auto it = casts_.find({source_of(g, v), to}); it != casts_.end()) return it->second;
    return std::nullopt;
  }

  // convert(v, to), reusing what find_cast finds, else emitting one cast from v's source.
  Value as(Graph& dst, Value v, DType to) {
    if (std::optional<Value> found = find_cast(dst, v, to)) return *found;
    Value s = source_of(dst, v);
    const Node& n = dst.node(s);
    std::string hint =
        n.name + (s.index ? "." + std::to_string(s.index) : "") + "." + std::string(dtype_name(to));
    // A later leaf of the source must still get its own name when rewrite() copies it.
    while (src_.find(hint) >= 0) hint += ".amp";
    AttrMap attrs;
    attrs.set("dtype", to);
    Value c = dst.emit1(OpKind::Convert, {s}, std::move(attrs), std::move(hint));
    casts_[{s, to}] = c;
    prunable_.insert(c.node);
    return c;
  }

  // Operand i of `node` is an additive attention bias (mask "bias").
  static bool is_attention_bias(const Node& node, size_t i) {
    const size_t at = node.op == OpKind::Attention            ? 3
                      : node.op == OpKind::PackedQkvAttention ? 1
                                                              : 0;
    return at != 0 && i == at && node.attrs.get_string("mask") == "bias";
  }

  // convert(v, to) for an additive attention bias: a finite value beyond `to`'s largest finite
  // one saturates to it instead of rounding to an infinity. A bias of f32's lowest value
  // (-3.4028235e38, an "almost masked" key) would otherwise become -inf in bf16 and turn a row
  // whose keys all carry it into a fully masked row (output 0 instead of a softmax of equal
  // scores); ±inf (masked keys) and NaN pass unchanged. Only narrowing to f16 / bf16 clamps:
  // select(|v| == inf, v, clamp(-max, v, max)), then the convert.
  Value as_saturated(Graph& dst, Value v, DType to) {
    Value s = source_of(dst, v);
    DType from = dst.dtype(s);
    bool narrows =
        (to == DType::f16 || to == DType::bf16) && (from == DType::f32 || from == DType::f64);
    if (!narrows) return as(dst, v, to);
    double max = to == DType::f16 ? 65504.0 : 3.3895313892515355e38;  // largest finite
    Value hi = dst.scalar(max, from), lo = dst.scalar(-max, from);
    Value inf = dst.eq(dst.abs(s), dst.scalar(std::numeric_limits<double>::infinity(), from));
    AttrMap attrs;
    attrs.set("dtype", to);
    std::string hint = dst.node(s).name + ".saturated." + std::string(dtype_name(to));
    while (src_.find(hint) >= 0) hint += ".amp";  // as in as()
    return dst.emit1(OpKind::Convert, {dst.select(inf, s, dst.clamp(lo, s, hi))}, std::move(attrs),
                     std::move(hint));
  }

  // Drops the prunable casts nothing uses any more (chains included), copying the rest.
  Graph prune_unused_casts(const Graph& g) const {
    const std::vector<Node>& nodes = g.nodes();
    std::vector<std::vector<int>> uses = use_counts(g);
    std::vector<bool> live(nodes.size(), true);
    bool any_dead = false;
    for (size_t i = nodes.size(); i-- > 0;) {
      if (!prunable_.count(static_cast<int32_t>(i)) || uses[i][0] > 0) continue;
      live[i] = false;
      any_dead = true;
      Value x = nodes[i].operands[0];
      --uses[static_cast<size_t>(x.node)][static_cast<size_t>(x.index)];
    }
    if (!any_dead) return g;
    return rewrite(g, {}, &live);
  }

  struct CastKey {
    Value source;
    DType to;
    bool operator<(const CastKey& o) const {
      return std::tie(source.node, source.index, to) <
             std::tie(o.source.node, o.source.index, o.to);
    }
  };

  const PrecisionPolicy& policy_;
  const Graph& src_;
  std::vector<std::vector<int>> src_uses_;
  std::map<CastKey, Value> casts_;  // every cast made or kept, by (exact source, dtype)
  std::set<int32_t> prunable_;      // dst nodes of casts that may be dropped when unused
};

class AmpPass : public Pass {
 public:
  AmpPass(PrecisionPolicy policy, bool in_bodies)
      : policy_(std::move(policy)), in_bodies_(in_bodies) {
    for (const auto& [op, dtype] : policy_.overrides)
      check_override(op, dtype, "amp pass override for '" + std::string(op_name(op)) + "'");
  }
  std::string_view name() const override { return "amp"; }
  bool run(Graph& g) override {
    Graph out = AmpRewriter(policy_, g).run();
    bool changed = !(out == g);
    g = std::move(out);
    // A body is rewritten as a graph of its own: its inputs and outputs keep their types, so
    // the carries and branch results do too (the control-flow node itself is Typed).
    if (in_bodies_) changed = run_in_bodies(*this, g) || changed;
    return changed;
  }

 private:
  PrecisionPolicy policy_;
  bool in_bodies_;
};

}  // namespace

AmpOpClass amp_op_class(OpKind op) {
  static const std::array<AmpOpClass, kNumOps> kTable = build_class_table();
  return kTable[static_cast<size_t>(op)];
}

AmpOpClass amp_node_class(OpKind op, const AttrMap& attrs) {
  if (op == OpKind::AllReduce && attrs.has("reduce")) {
    const std::string& r = attrs.get_string("reduce");
    if (r == "max" || r == "min") return AmpOpClass::DataMovement;
  }
  return amp_op_class(op);
}

std::string_view amp_op_class_name(AmpOpClass c) {
  switch (c) {
    case AmpOpClass::LowPrecision:
      return "low_precision";
    case AmpOpClass::Sensitive:
      return "sensitive";
    case AmpOpClass::Default:
      return "default";
    case AmpOpClass::DataMovement:
      return "data_movement";
    case AmpOpClass::Typed:
      return "typed";
  }
  return "?";
}

bool PrecisionPolicy::is_auto() const {
  return mode == PrecisionMode::AutoMixedF16 || mode == PrecisionMode::AutoMixedBf16;
}

DType PrecisionPolicy::low_dtype() const {
  switch (mode) {
    case PrecisionMode::AlwaysF16:
    case PrecisionMode::AutoMixedF16:
      return DType::f16;
    case PrecisionMode::AlwaysBf16:
    case PrecisionMode::AutoMixedBf16:
      return DType::bf16;
    case PrecisionMode::AlwaysF32:
      break;
  }
  return DType::f32;
}

std::string_view precision_mode_name(PrecisionMode mode) {
  return kModeNames[static_cast<size_t>(mode)];
}

std::string to_string(const PrecisionPolicy& policy) {
  std::string s(precision_mode_name(policy.mode));
  for (const auto& [op, dtype] : policy.overrides)
    s += "," + std::string(op_name(op)) + "=" + std::string(dtype_name(dtype));
  return s;
}

PrecisionPolicy parse_precision_policy(std::string_view text) {
  std::vector<std::string_view> tokens;
  for (size_t start = 0;;) {
    size_t comma = text.find(',', start);
    tokens.push_back(text.substr(start, comma == std::string_view::npos ? comma : comma - start));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  PrecisionPolicy policy;
  bool found = false;
  for (size_t m = 0; m < std::size(kModeNames); ++m)
    if (tokens[0] == kModeNames[m]) {
      policy.mode = static_cast<PrecisionMode>(m);
      found = true;
    }
  check(found, "unknown precision policy '" + std::string(tokens[0]) + "'; expected one of " +
                   mode_list());
  for (size_t i = 1; i < tokens.size(); ++i) {
    std::string token(tokens[i]);
    std::string where = "precision override '" + token + "'";
    size_t eq = token.find('=');
    check(eq != std::string::npos && eq > 0 && eq + 1 < token.size(),
          where + " must have the form op=dtype");
    std::string op_text = token.substr(0, eq), dtype_text = token.substr(eq + 1);
    std::optional<OpKind> op = op_from_name(op_text);
    check(op.has_value(), where + ": unknown op '" + op_text + "'");
    std::optional<DType> dtype = parse_dtype(dtype_text);
    check(dtype.has_value() && is_amp_float(*dtype),
          where + ": dtype must be f32, f16 or bf16, found '" + dtype_text + "'");
    check_override(*op, *dtype, where);
    check(policy.overrides.emplace(*op, *dtype).second,
          where + ": op '" + op_text + "' given twice");
  }
  return policy;
}

std::optional<PrecisionPolicy> precision_from_env() {
  const char* env = std::getenv("RLX_PRECISION");
  if (env == nullptr || *env == '\0') return std::nullopt;
  try {
    return parse_precision_policy(env);
  } catch (const Error& e) {
    throw Error(std::string("RLX_PRECISION: ") + e.what());
  }
}

std::unique_ptr<Pass> create_amp_pass(PrecisionPolicy policy, bool in_bodies) {
  return std::make_unique<AmpPass>(std::move(policy), in_bodies);
}

}  // namespace rlx
