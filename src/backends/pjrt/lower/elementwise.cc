// StableHLO lowerings of the elementwise ops: one StableHLO / CHLO op per rlx op on explicitly
// broadcast operands, plus the few that need more (max / min / clamp with NaN propagation, erf
// kept in [-1, 1], atan, convert, unsigned abs / sign).
#include "lower.h"

namespace rlx::pjrt::lower {
namespace {

// The one-to-one ops: rlx kind -> StableHLO op name.
struct OneToOne {
  OpKind op;
  const char* name;
};
constexpr OneToOne kOneToOne[] = {
    {OpKind::Neg, "stablehlo.negate"},
    {OpKind::Abs, "stablehlo.abs"},
    {OpKind::Sign, "stablehlo.sign"},
    {OpKind::Exp, "stablehlo.exponential"},
    {OpKind::Expm1, "stablehlo.exponential_minus_one"},
    {OpKind::Log, "stablehlo.log"},
    {OpKind::Log1p, "stablehlo.log_plus_one"},
    {OpKind::Sqrt, "stablehlo.sqrt"},
    {OpKind::Rsqrt, "stablehlo.rsqrt"},
    {OpKind::Sin, "stablehlo.sine"},
    {OpKind::Cos, "stablehlo.cosine"},
    {OpKind::Tan, "stablehlo.tan"},
    {OpKind::Tanh, "stablehlo.tanh"},
    {OpKind::Logistic, "stablehlo.logistic"},
    {OpKind::Cbrt, "stablehlo.cbrt"},
    {OpKind::Floor, "stablehlo.floor"},
    {OpKind::Ceil, "stablehlo.ceil"},
    {OpKind::Round, "stablehlo.round_nearest_even"},
    {OpKind::Not, "stablehlo.not"},
    {OpKind::Add, "stablehlo.add"},
    {OpKind::Sub, "stablehlo.subtract"},
    {OpKind::Mul, "stablehlo.multiply"},
    {OpKind::Div, "stablehlo.divide"},
    {OpKind::Pow, "stablehlo.power"},
    {OpKind::Rem, "stablehlo.remainder"},
    {OpKind::And, "stablehlo.and"},
    {OpKind::Or, "stablehlo.or"},
    {OpKind::Xor, "stablehlo.xor"},
    {OpKind::Select, "stablehlo.select"},
};

// The compares: rlx kind -> comparison_direction.
struct Direction {
  OpKind op;
  const char* dir;
};
constexpr Direction kCompares[] = {
    {OpKind::Eq, "EQ"}, {OpKind::Ne, "NE"}, {OpKind::Lt, "LT"},
    {OpKind::Le, "LE"}, {OpKind::Gt, "GT"}, {OpKind::Ge, "GE"},
};

const char* name_of(OpKind op) {
  for (const OneToOne& o : kOneToOne)
    if (o.op == op) return o.name;
  return nullptr;
}
const char* direction_of(OpKind op) {
  for (const Direction& d : kCompares)
    if (d.op == op) return d.dir;
  return nullptr;
}

std::vector<std::string> simple(Emitter& e, const Node& n) {
  return {e.emit(name_of(n.op), e.broadcast_operands(n), "", n.results[0])};
}

bool is_unsigned(DType t) { return dtype_category(t) == DTypeCategory::UnsignedInt; }

// |x| of an unsigned x is x.
std::vector<std::string> abs(Emitter& e, const Node& n) {
  if (is_unsigned(n.results[0].dtype)) return {e.operand(n, 0).name};
  return simple(e, n);
}

// stablehlo.sign is for signed types: sign of an unsigned x is x != 0.
std::vector<std::string> sign(Emitter& e, const Node& n) {
  const TensorType& rt = n.results[0];
  if (!is_unsigned(rt.dtype)) return simple(e, n);
  Operand x = e.operand(n, 0);
  std::string nz = e.compare("NE", x, {e.splat(rt.dtype, rt.shape, 0), rt});
  return {e.emit("stablehlo.convert", {{nz, {DType::bool_, rt.shape}}}, "", rt)};
}

std::vector<std::string> compare(Emitter& e, const Node& n) {
  std::vector<Operand> ops = e.broadcast_operands(n);
  return {e.compare(direction_of(n.op), ops[0], ops[1])};
}

// lax.max / lax.min, NaN-propagating on floats (Emitter::extremum).
std::vector<std::string> max_min(Emitter& e, const Node& n) {
  std::vector<Operand> ops = e.broadcast_operands(n);
  return {
      e.extremum(n.op == OpKind::Max ? "stablehlo.maximum" : "stablehlo.minimum", ops[0], ops[1])};
}

// lax.clamp(lo, x, hi) = min(max(x, lo), hi) (scalar::clamp): NaN in any operand propagates,
// and lo > hi gives hi, as in the evaluator (stablehlo.clamp leaves that case to the
// implementation).
std::vector<std::string> clamp(Emitter& e, const Node& n) {
  const TensorType& rt = n.results[0];
  std::vector<Operand> ops = e.broadcast_operands(n);  // (lo, x, hi)
  Operand lower{e.extremum("stablehlo.maximum", ops[1], ops[0]), rt};
  return {e.extremum("stablehlo.minimum", lower, ops[2])};
}

// chlo.erf (accepted by the plugin, so GELU stays exact), pinned to [-1, 1]: XLA CPU's f32
// approximation reaches 1.0000001 (erf(3.7288418)), and exact GELU x (1 + erf(x / sqrt 2)) / 2
// would then exceed x. select(y > 1, 1, select(y < -1, -1, y)) keeps a NaN.
std::vector<std::string> erf(Emitter& e, const Node& n) {
  const TensorType& rt = n.results[0];
  Operand y{e.emit("chlo.erf", {e.operand(n, 0)}, "", rt), rt};
  Operand one{e.splat(rt.dtype, rt.shape, 1), rt}, minus_one{e.splat(rt.dtype, rt.shape, -1), rt};
  TensorType p{DType::bool_, rt.shape};
  Operand below{
      e.emit("stablehlo.select", {{e.compare("LT", y, minus_one), p}, minus_one, y}, "", rt), rt};
  return {e.emit("stablehlo.select", {{e.compare("GT", y, one), p}, one, below}, "", rt)};
}

// stablehlo has atan2 only: atan(x) = atan2(x, 1).
std::vector<std::string> atan(Emitter& e, const Node& n) {
  const TensorType& rt = n.results[0];
  Operand x = e.operand(n, 0);
  return {e.emit("stablehlo.atan2", {x, {e.splat(rt.dtype, rt.shape, 1), rt}}, "", rt)};
}

std::vector<std::string> convert(Emitter& e, const Node& n) {
  const TensorType& rt = n.results[0];
  Operand x = e.operand(n, 0);
  if (rt.dtype == DType::bool_ && x.type.dtype != DType::bool_)  // -> bool is x != 0
    return {e.compare("NE", x, {e.splat(x.type.dtype, x.type.shape, 0), x.type})};
  if (rt.dtype == x.type.dtype) return {x.name};
  return {e.emit("stablehlo.convert", {x}, "", rt)};
}

}  // namespace

void register_elementwise_lowerings(OpTable<LowerFn>& t) {
  for (const OneToOne& o : kOneToOne)
    t.set(o.op, o.op == OpKind::Abs ? abs : o.op == OpKind::Sign ? sign : simple);
  for (const Direction& d : kCompares) t.set(d.op, compare);
  t.set(OpKind::Erf, erf);
  t.set(OpKind::Max, max_min);
  t.set(OpKind::Min, max_min);
  t.set(OpKind::Clamp, clamp);
  t.set(OpKind::Atan, atan);
  t.set(OpKind::Convert, convert);
}

}  // namespace rlx::pjrt::lower
