// The "simplify" pass: exact algebraic identities (neutral elements, shape-op chains, lossless
// convert chains, broadcasts of splat constants), applied until none fires.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <string>

#include "rlx/opt/decompose.h"
#include "rlx/opt/passes.h"
#include "rlx/opt/rewrite.h"

namespace rlx {
namespace {

/// A broadcast of a splat constant becomes a constant only up to this many elements, so the
/// pass never materialises a large tensor (the same bound as fold-constants' default).
constexpr int64_t kMaxSplatElements = int64_t{1} << 16;

/// The tensor of `v` when it is the result of a constant node of `g`, else nullptr.
const Tensor* constant_value(const Graph& g, Value v) {
  const Node& n = g.node(v);
  return n.op == OpKind::Constant ? &n.attrs.get_tensor("value") : nullptr;
}

bool all_of(const Tensor& t, const std::function<bool(double)>& float_pred,
            const std::function<bool(int64_t)>& int_pred) {
  for (int64_t i = 0; i < t.numel(); ++i)
    if (is_float(t.dtype()) ? !float_pred(t.get_f64(i)) : !int_pred(t.get_i64(i))) return false;
  return true;
}

// Which zero is neutral. IEEE addition gives -0 only for (-0) + (-0), so x + (-0.0) == x for
// every x (including -0, inf and NaN), while x + (+0.0) turns x = -0 into +0 and must stay.
// Subtraction is the mirror image: x - (+0.0) == x + (-0.0) == x, but x - (-0.0) == x + (+0.0).
// Integers have one zero.
bool is_add_identity(const Tensor& c) {
  return all_of(
      c, [](double v) { return v == 0 && std::signbit(v); }, [](int64_t v) { return v == 0; });
}
bool is_sub_identity(const Tensor& c) {
  return all_of(
      c, [](double v) { return v == 0 && !std::signbit(v); }, [](int64_t v) { return v == 0; });
}
// x * 1 and x / 1 are exact for every float x, NaN and -0 included, and for every integer.
bool is_one(const Tensor& c) {
  return all_of(
      c, [](double v) { return v == 1; }, [](int64_t v) { return v == 1; });
}
// x * 0 is 0 only for integers: a float x * 0 is NaN for inf/NaN and -0 for negative x.
bool is_integer_zero(const Tensor& c) {
  return is_integer(c.dtype()) &&
         all_of(
             c, [](double) { return false; }, [](int64_t v) { return v == 0; });
}

/// True when every element of `t` has the same bytes (a scalar, or a splat).
bool is_splat(const Tensor& t) {
  auto size = static_cast<size_t>(dtype_size(t.dtype()));
  for (int64_t i = 1; i < t.numel(); ++i)
    if (std::memcmp(t.data() + static_cast<size_t>(i) * size, t.data(), size) != 0) return false;
  return true;
}

/// A tensor of `type` whose every element has the bytes of element 0 of `splat` (bit exact, so
/// NaN payloads, -0 and full-width integers survive); zeros when `splat` is empty.
Tensor fill_like(const Tensor& splat, const TensorType& type) {
  Tensor out(type.dtype, type.shape);
  if (splat.numel() == 0) return out;
  auto size = static_cast<size_t>(dtype_size(type.dtype));
  for (int64_t i = 0; i < out.numel(); ++i)
    std::memcpy(out.data() + static_cast<size_t>(i) * size, splat.data(), size);
  return out;
}

/// The values a dtype represents exactly: integers by range, floats by significand bits
/// (implicit bit included) and normal exponent range (IEEE 754 emin/emax; bf16 is f32's range
/// with 8 bits).
struct ValueSet {
  bool is_float;
  int64_t lo = 0, hi = 0;
  int digits = 0, emin = 0, emax = 0;
};

ValueSet value_set(DType t) {
  switch (t) {
    case DType::f16:
      return {true, 0, 0, 11, -14, 15};
    case DType::bf16:
      return {true, 0, 0, 8, -126, 127};
    case DType::f32:
      return {true, 0, 0, 24, -126, 127};
    case DType::f64:
      return {true, 0, 0, 53, -1022, 1023};
    case DType::i8:
      return {false, -128, 127};
    case DType::u8:
      return {false, 0, 255};
    case DType::i32:
      return {false, std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()};
    case DType::i64:
      return {false, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()};
    case DType::bool_:
      return {false, 0, 1};
  }
  return {false};
}

/// True when dtype `to` represents every value of dtype `from` exactly (so converting there
/// and back loses nothing): i8 -> i32, u8 -> f16, i32 -> f64, f16 -> f32, bf16 -> f32; not
/// f32 -> f16, i32 -> f32 or f16 <-> bf16. Floats never fit integers; only bool fits bool.
bool holds_every_value(DType from, DType to) {
  if (from == to) return true;
  ValueSet f = value_set(from), t = value_set(to);
  if (t.is_float) {
    if (f.is_float) return f.digits <= t.digits && t.emin <= f.emin && f.emax <= t.emax;
    // Every integer of magnitude <= 2^digits is exact, and 2^digits is far below the max.
    double limit = std::ldexp(1.0, t.digits);
    return -static_cast<double>(f.lo) <= limit && static_cast<double>(f.hi) <= limit;
  }
  if (is_bool(to)) return false;
  return !f.is_float && t.lo <= f.lo && f.hi <= t.hi;
}

/// True when convert(convert(x: from, mid), to) == convert(x, to) for every x. It needs `mid`
/// to hold every value of `from`; then both sides convert the same number to `to`, except
/// that integer -> integer wraps while float -> integer saturates: i32 300 -> f64 -> i8 is 127
/// but i32 300 -> i8 is 44. That case is exact only when `to` holds every value of `from`.
bool convert_chain_is_exact(DType from, DType mid, DType to) {
  if (!holds_every_value(from, mid)) return false;
  bool wrap_became_saturate = is_integer(from) && is_float(mid) && is_integer(to);
  return !wrap_became_saturate || holds_every_value(from, to);
}

/// x op c == x for a neutral constant c that does not broadcast x to a larger shape.
std::optional<Value> neutral_operand(const Graph& g, const Node& n, std::span<const Value> ops) {
  const TensorType& out = n.results.at(0);
  // Tries `x op c` with c at index `ci`; lhs-only identities (x - 0, x / 1) pass ci = 1.
  auto try_side = [&](size_t ci, bool (*neutral)(const Tensor&)) -> std::optional<Value> {
    Value x = ops[1 - ci];
    const Tensor* c = constant_value(g, ops[ci]);
    if (c == nullptr || g.type(x) != out || !neutral(*c)) return std::nullopt;
    return x;
  };
  switch (n.op) {
    case OpKind::Add:
      if (auto v = try_side(1, is_add_identity)) return v;
      return try_side(0, is_add_identity);
    case OpKind::Sub:
      return try_side(1, is_sub_identity);
    case OpKind::Mul:
      if (auto v = try_side(1, is_one)) return v;
      return try_side(0, is_one);
    case OpKind::Div:
      return try_side(1, is_one);
    default:
      return std::nullopt;
  }
}

/// One rewrite step for node `n` whose operands are `ops` in `g`: the value that replaces its
/// result, or nullopt when no identity applies. Every rule is exact (bit for bit).
std::optional<Value> simplify_node(Graph& g, const Node& n, std::span<const Value> ops) {
  if (n.results.size() != 1) return std::nullopt;
  if (auto v = neutral_operand(g, n, ops)) return v;
  const TensorType& out = n.results[0];
  switch (n.op) {
    case OpKind::Mul: {
      const Tensor *lhs = constant_value(g, ops[0]), *rhs = constant_value(g, ops[1]);
      bool zero = (lhs && is_integer_zero(*lhs)) || (rhs && is_integer_zero(*rhs));
      if (zero && out.shape.numel() <= kMaxSplatElements)
        return g.constant(Tensor(out.dtype, out.shape), n.name);
      return std::nullopt;
    }
    case OpKind::Reshape: {
      Value x = ops[0];
      if (g.node(x).op == OpKind::Reshape) x = g.node(x).operands[0];
      if (g.type(x) == out) return x;
      if (x == ops[0]) return std::nullopt;
      return g.emit1(OpKind::Reshape, {x}, {{"shape", out.shape.dims()}}, n.name);
    }
    case OpKind::Transpose: {
      Value x = ops[0];
      std::vector<int64_t> perm = n.attrs.get_ints("permutation");
      if (const Node& inner = g.node(x); inner.op == OpKind::Transpose) {
        // out.dim[i] = mid.dim[perm[i]] = x.dim[inner_perm[perm[i]]].
        const std::vector<int64_t>& inner_perm = inner.attrs.get_ints("permutation");
        for (int64_t& p : perm) p = inner_perm[static_cast<size_t>(p)];
        x = inner.operands[0];
      }
      std::vector<int64_t> identity(perm.size());
      std::iota(identity.begin(), identity.end(), 0);
      if (perm == identity) return x;
      if (x == ops[0]) return std::nullopt;
      return g.emit1(OpKind::Transpose, {x}, {{"permutation", perm}}, n.name);
    }
    case OpKind::Convert: {
      Value x = ops[0];
      if (const Node& inner = g.node(x);
          inner.op == OpKind::Convert &&
          convert_chain_is_exact(g.dtype(inner.operands[0]), g.dtype(x), out.dtype))
        x = inner.operands[0];
      if (g.dtype(x) == out.dtype) return x;
      if (x == ops[0]) return std::nullopt;
      return g.emit1(OpKind::Convert, {x}, {{"dtype", out.dtype}}, n.name);
    }
    case OpKind::BroadcastInDim: {
      const Tensor* c = constant_value(g, ops[0]);
      if (c == nullptr || !is_splat(*c) || out.shape.numel() > kMaxSplatElements)
        return std::nullopt;
      return g.constant(fill_like(*c, out), n.name);
    }
    default:
      return std::nullopt;
  }
}

/// A cond whose index is a constant: the results of the branch it takes (a bool predicate
/// picks branches[int(pred)], an i32 index is clamped to [0, N-1] as lax.switch), inlined into
/// `g` on the operands after the index; nullopt for any other node.
std::optional<std::vector<Value>> inline_constant_cond(Graph& g, const Node& n,
                                                       std::span<const Value> ops) {
  if (n.op != OpKind::Cond) return std::nullopt;
  const Tensor* index = constant_value(g, ops[0]);
  if (index == nullptr) return std::nullopt;
  const GraphList& branches = n.attrs.get_graphs("branches");
  int64_t taken =
      std::clamp<int64_t>(index->get_i64(0), 0, static_cast<int64_t>(branches.size()) - 1);
  return inline_graph(g, *branches[static_cast<size_t>(taken)], ops.subspan(1));
}

class SimplifyPass final : public Pass {
 public:
  std::string_view name() const override { return "simplify"; }

  // rewrite() maps operands before visiting a node, so chains collapse within one walk; the
  // loop repeats walks until one changes nothing. It terminates: every rule replaces a node by
  // an existing value, a constant, or one node of the same kind with a shorter chain below it.
  bool run(Graph& g) override {
    bool here = run_here(g);
    bool inside = run_in_bodies(*this, g);  // the bodies of cond / while_loop / scan
    return here || inside;
  }

 private:
  bool run_here(Graph& g) {
    bool changed = false;
    for (;;) {
      bool fired = false;
      Graph out = rewrite(g,
                          [&](RewriteContext& ctx, const Node& n,
                              std::span<const Value> ops) -> std::optional<std::vector<Value>> {
                            if (auto r = inline_constant_cond(ctx.dst, n, ops)) {
                              fired = true;
                              return r;
                            }
                            std::optional<Value> v = simplify_node(ctx.dst, n, ops);
                            if (!v) return std::nullopt;
                            fired = true;
                            return std::vector<Value>{*v};
                          });
      if (!fired) return changed;
      g = std::move(out);
      changed = true;
    }
  }
};

}  // namespace

std::unique_ptr<Pass> create_simplify_pass() { return std::make_unique<SimplifyPass>(); }

}  // namespace rlx
