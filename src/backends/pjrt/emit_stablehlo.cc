// StableHLO emission: one rlx graph -> one MLIR module (generic op form) that PJRT compiles.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <sstream>

#include "rlx/backends/pjrt/pjrt.h"
#include "rlx/ir/error.h"
#include "rlx/ir/evaluator.h"

namespace rlx::pjrt {
namespace {

std::string element_type(DType t) {
  switch (t) {
    case DType::f32:
      return "f32";
    case DType::f16:
      return "f16";
    case DType::bf16:
      return "bf16";
    case DType::f64:
      return "f64";
    case DType::i8:
      return "i8";
    case DType::u8:
      return "ui8";
    case DType::i32:
      return "i32";
    case DType::i64:
      return "i64";
    case DType::bool_:
      return "i1";
  }
  return "?";
}

std::string tensor_type(DType t, const Shape& s) {
  std::string out = "tensor<";
  for (int64_t d : s.dims()) out += std::to_string(d) + "x";
  return out + element_type(t) + ">";
}
std::string tensor_type(const TensorType& t) { return tensor_type(t.dtype, t.shape); }

std::string i64_array(const std::vector<int64_t>& v) {
  std::string out = "array<i64";
  for (size_t i = 0; i < v.size(); ++i) out += (i == 0 ? ": " : ", ") + std::to_string(v[i]);
  return out + ">";
}
std::string int_list(const std::vector<int64_t>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + std::to_string(v[i]);
  return out + "]";
}

// StableHLO compare_type for a dtype: IEEE compare for floats, signed/unsigned for integers
// (bool compares as a 1-bit unsigned value).
std::string compare_type(DType t) {
  if (is_float(t)) return "FLOAT";
  if (dtype_category(t) == DTypeCategory::SignedInt) return "SIGNED";
  return "UNSIGNED";
}

// Exact bytes of a dense constant, little-endian hex (MLIR reads one element as a splat).
std::string hex_bytes(const std::byte* data, size_t n) {
  static const char kDigits[] = "0123456789ABCDEF";
  std::string out = "\"0x";
  for (size_t i = 0; i < n; ++i) {
    auto b = static_cast<unsigned>(data[i]);
    out += kDigits[b >> 4];
    out += kDigits[b & 15];
  }
  return out + "\"";
}

// One-to-one elementwise ops: rlx kind -> StableHLO / CHLO op name.
const char* simple_elementwise(OpKind op) {
  switch (op) {
    case OpKind::Neg:
      return "stablehlo.negate";
    case OpKind::Abs:
      return "stablehlo.abs";
    case OpKind::Sign:
      return "stablehlo.sign";
    case OpKind::Exp:
      return "stablehlo.exponential";
    case OpKind::Expm1:
      return "stablehlo.exponential_minus_one";
    case OpKind::Log:
      return "stablehlo.log";
    case OpKind::Log1p:
      return "stablehlo.log_plus_one";
    case OpKind::Sqrt:
      return "stablehlo.sqrt";
    case OpKind::Rsqrt:
      return "stablehlo.rsqrt";
    case OpKind::Sin:
      return "stablehlo.sine";
    case OpKind::Cos:
      return "stablehlo.cosine";
    case OpKind::Tan:
      return "stablehlo.tan";
    case OpKind::Tanh:
      return "stablehlo.tanh";
    case OpKind::Logistic:
      return "stablehlo.logistic";
    case OpKind::Erf:
      return "chlo.erf";
    case OpKind::Floor:
      return "stablehlo.floor";
    case OpKind::Ceil:
      return "stablehlo.ceil";
    case OpKind::Round:
      return "stablehlo.round_nearest_even";
    case OpKind::Not:
      return "stablehlo.not";
    case OpKind::Add:
      return "stablehlo.add";
    case OpKind::Sub:
      return "stablehlo.subtract";
    case OpKind::Mul:
      return "stablehlo.multiply";
    case OpKind::Div:
      return "stablehlo.divide";
    case OpKind::Pow:
      return "stablehlo.power";
    case OpKind::Max:
      return "stablehlo.maximum";
    case OpKind::Min:
      return "stablehlo.minimum";
    case OpKind::Rem:
      return "stablehlo.remainder";
    case OpKind::And:
      return "stablehlo.and";
    case OpKind::Or:
      return "stablehlo.or";
    case OpKind::Xor:
      return "stablehlo.xor";
    case OpKind::Select:
      return "stablehlo.select";
    default:
      return nullptr;
  }
}

const char* compare_direction(OpKind op) {
  switch (op) {
    case OpKind::Eq:
      return "EQ";
    case OpKind::Ne:
      return "NE";
    case OpKind::Lt:
      return "LT";
    case OpKind::Le:
      return "LE";
    case OpKind::Gt:
      return "GT";
    case OpKind::Ge:
      return "GE";
    default:
      return nullptr;
  }
}

// The op kinds lowered below, besides simple_elementwise and compare_direction.
constexpr OpKind kOtherNative[] = {
    OpKind::Input,      OpKind::Param,       OpKind::Constant,      OpKind::Iota,
    OpKind::Atan,       OpKind::Convert,     OpKind::Clamp,         OpKind::DotGeneral,
    OpKind::ReduceSum,  OpKind::ReduceMax,   OpKind::ReduceMin,     OpKind::ReduceProd,
    OpKind::ReduceMean, OpKind::Reshape,     OpKind::Transpose,     OpKind::BroadcastInDim,
    OpKind::Slice,      OpKind::Concatenate, OpKind::Pad,           OpKind::Reverse,
    OpKind::Gather,     OpKind::CumSum,      OpKind::Conv,          OpKind::ArgMax,
    OpKind::ArgMin,     OpKind::TopK,        OpKind::TakeAlongAxis, OpKind::ScatterAdd,
};

struct Operand {
  std::string name;
  TensorType type;
};

class Emitter {
 public:
  explicit Emitter(const Graph& g) : g_(g), names_(g.nodes().size()) {}

  std::string run() {
    std::ostringstream head;
    std::string module = g_.name();
    bool plain = !module.empty() && !std::isdigit(static_cast<unsigned char>(module[0]));
    for (char c : module)
      plain = plain && (std::isalnum(static_cast<unsigned char>(c)) || c == '_');
    head << "module @" << (plain ? module : "\"" + module + "\"") << " {\n";
    head << "  func.func public @main(";
    int arg = 0;
    for (const std::vector<int32_t>& leaves : {g_.inputs(), g_.params()}) {
      for (int32_t id : leaves) {
        std::string name = "%arg" + std::to_string(arg);
        head << (arg ? ", " : "") << name << ": " << tensor_type(g_.node(id).results[0]);
        names_[static_cast<size_t>(id)] = {name};
        ++arg;
      }
    }
    head << ") -> (";
    for (size_t i = 0; i < g_.outputs().size(); ++i)
      head << (i ? ", " : "") << tensor_type(g_.type(g_.outputs()[i]));
    head << ") {\n";
    for (int32_t id = 0; id < static_cast<int32_t>(g_.nodes().size()); ++id) {
      const Node& n = g_.node(id);
      if (n.op == OpKind::Input || n.op == OpKind::Param) continue;
      names_[static_cast<size_t>(id)] = lower(n);
    }
    body_ << "    return";
    for (size_t i = 0; i < g_.outputs().size(); ++i)
      body_ << (i ? ", " : " ") << value(g_.outputs()[i]);
    body_ << " : ";
    for (size_t i = 0; i < g_.outputs().size(); ++i)
      body_ << (i ? ", " : "") << tensor_type(g_.type(g_.outputs()[i]));
    body_ << "\n  }\n}\n";
    return head.str() + body_.str();
  }

 private:
  const std::string& value(Value v) const {
    return names_[static_cast<size_t>(v.node)][static_cast<size_t>(v.index)];
  }
  Operand operand(const Node& n, size_t i) const {
    return {value(n.operands[i]), g_.type(n.operands[i])};
  }

  // Emits `%k = "<op>"(operands) {attrs} : (types) -> result` and returns %k.
  std::string emit(const std::string& op, const std::vector<Operand>& operands,
                   const std::string& attrs, const TensorType& result,
                   const std::string& region = "") {
    std::string name = "%" + std::to_string(next_++);
    body_ << "    " << name << " = \"" << op << "\"(";
    for (size_t i = 0; i < operands.size(); ++i) body_ << (i ? ", " : "") << operands[i].name;
    body_ << ")" << region;
    if (!attrs.empty()) body_ << " {" << attrs << "}";
    body_ << " : (";
    for (size_t i = 0; i < operands.size(); ++i)
      body_ << (i ? ", " : "") << tensor_type(operands[i].type);
    body_ << ") -> " << tensor_type(result) << "\n";
    return name;
  }

  std::string constant_tensor(const Tensor& t) {
    size_t size = static_cast<size_t>(dtype_size(t.dtype()));
    if (t.dtype() == DType::bool_) {  // as u8 bytes, then != 0: i1 hex packing is not portable
      Tensor bytes = Tensor::borrow(DType::u8, t.shape(), t.data());
      std::string u8 = constant_tensor(bytes);
      std::string zero = splat(DType::u8, t.shape(), 0);
      return compare("NE", {u8, bytes.type()}, {zero, bytes.type()});
    }
    size_t n = t.nbytes();
    bool is_splat = n > 0;
    for (size_t i = size; i < n && is_splat; ++i) is_splat = t.data()[i] == t.data()[i % size];
    std::string value = n == 0 ? std::string("\"0x") + std::string(2 * size, '0') + "\""
                               : hex_bytes(t.data(), is_splat ? size : n);
    return emit("stablehlo.constant", {}, "value = dense<" + value + "> : " + tensor_type(t.type()),
                t.type());
  }
  std::string splat(DType t, const Shape& s, double v) {
    return constant_tensor(Tensor::full(t, s, v));
  }
  std::string compare(const char* dir, const Operand& a, const Operand& b) {
    return emit("stablehlo.compare", {a, b},
                std::string("comparison_direction = #stablehlo<comparison_direction ") + dir +
                    ">, compare_type = #stablehlo<comparison_type " + compare_type(a.type.dtype) +
                    ">",
                {DType::bool_, a.type.shape});
  }
  // numpy broadcasting made explicit: `x` to `shape` (dims aligned right).
  Operand broadcast(const Operand& x, const Shape& shape) {
    if (x.type.shape == shape) return x;
    std::vector<int64_t> dims;
    int offset = shape.rank() - x.type.shape.rank();
    for (int i = 0; i < x.type.shape.rank(); ++i) dims.push_back(offset + i);
    TensorType t{x.type.dtype, shape};
    return {emit("stablehlo.broadcast_in_dim", {x}, "broadcast_dimensions = " + i64_array(dims), t),
            t};
  }
  std::vector<Operand> broadcast_operands(const Node& n) {
    std::vector<Operand> ops;
    for (size_t i = 0; i < n.operands.size(); ++i)
      ops.push_back(broadcast(operand(n, i), n.results[0].shape));
    return ops;
  }
  std::vector<int64_t> axes(const Node& n, const std::string& attr, const Shape& s) const {
    std::vector<int64_t> out;
    for (int64_t a : n.attrs.get_ints(attr)) out.push_back(s.normalize_axis(a));
    return out;
  }

  // The body of a reduce / reduce_window: `combiner` applied to two scalars of `t`. Its block
  // argument names are made unique with the next SSA number (MLIR forbids shadowing).
  std::string combiner_region(DType t, const char* combiner) const {
    std::string scalar = tensor_type(t, Shape{});
    std::string k = std::to_string(next_);
    return " ({\n    ^bb0(%lhs" + k + ": " + scalar + ", %rhs" + k + ": " + scalar +
           "):\n      %red" + k + " = \"" + combiner + "\"(%lhs" + k + ", %rhs" + k + ") : (" +
           scalar + ", " + scalar + ") -> " + scalar + "\n      \"stablehlo.return\"(%red" + k +
           ") : (" + scalar + ") -> ()\n    })";
  }

  // lax.cumsum as a sliding-window sum: a window of the whole axis over the operand padded
  // with n - 1 zeros before it (after it when reversed); exclusive pads n and drops the last
  // (first when reversed) element.
  std::string cumsum(const Node& n) {
    Operand x = operand(n, 0);
    const TensorType& rt = n.results[0];
    int64_t axis = x.type.shape.normalize_axis(n.attrs.get_int("axis"));
    bool exclusive = n.attrs.get_bool("exclusive"), reverse = n.attrs.get_bool("reverse");
    int64_t len = x.type.shape.dims()[static_cast<size_t>(axis)];
    if (len == 0) return x.name;
    int64_t pad = exclusive ? len : len - 1;
    int r = x.type.shape.rank();
    std::vector<int64_t> window(static_cast<size_t>(r), 1);
    window[static_cast<size_t>(axis)] = len;
    std::string padding = "dense<[";
    for (int d = 0; d < r; ++d) {
      int64_t lo = d == axis && !reverse ? pad : 0, hi = d == axis && reverse ? pad : 0;
      padding += (d ? ", [" : "[") + std::to_string(lo) + ", " + std::to_string(hi) + "]";
    }
    padding += "]> : tensor<" + std::to_string(r) + "x2xi64>";
    Shape summed = x.type.shape;
    summed.dims()[static_cast<size_t>(axis)] += exclusive ? 1 : 0;
    TensorType st{rt.dtype, summed};
    std::string init = splat(rt.dtype, Shape{}, 0);
    std::string region = combiner_region(rt.dtype, "stablehlo.add");
    std::string sums =
        emit("stablehlo.reduce_window", {x, {init, {rt.dtype, Shape{}}}},
             "window_dimensions = " + i64_array(window) + ", padding = " + padding, st, region);
    if (!exclusive) return sums;
    std::vector<int64_t> start(static_cast<size_t>(r), 0), limit = summed.dims(),
                                                           strides(static_cast<size_t>(r), 1);
    (reverse ? start : limit)[static_cast<size_t>(axis)] += reverse ? 1 : -1;
    return emit("stablehlo.slice", {{sums, st}},
                "start_indices = " + i64_array(start) + ", limit_indices = " + i64_array(limit) +
                    ", strides = " + i64_array(strides),
                rt);
  }

  // Straight-line scalar code for the body of a reduce / sort region: each helper appends one
  // op and returns its SSA name, unique per region through `prefix` (MLIR forbids shadowing).
  class RegionCode {
   public:
    explicit RegionCode(std::string prefix) : k_(std::move(prefix)) {}
    std::string arg(const std::string& name) const { return k_ + name; }
    std::string op(const std::string& name, const std::string& args, const std::string& attrs,
                   const std::string& types, const std::string& result) {
      std::string v = k_ + std::to_string(line_++);
      out_ << "      " << v << " = \"" << name << "\"(" << args << ")"
           << (attrs.empty() ? "" : " {" + attrs + "}") << " : (" << types << ") -> " << result
           << "\n";
      return v;
    }
    // `a dir b` on scalars of `t`; `type` overrides the compare type (e.g. TOTALORDER).
    std::string cmp(const std::string& a, const std::string& b, const char* dir, DType t,
                    const std::string& type = "") {
      std::string ty = tensor_type(t, Shape{});
      return op("stablehlo.compare", a + ", " + b,
                std::string("comparison_direction = #stablehlo<comparison_direction ") + dir +
                    ">, compare_type = #stablehlo<comparison_type " +
                    (type.empty() ? compare_type(t) : type) + ">",
                ty + ", " + ty, kBool);
    }
    std::string logic(const char* name, const std::string& a, const std::string& b) {
      return op(name, a + ", " + b, "", kBool + ", " + kBool, kBool);
    }
    std::string negate(const std::string& a) { return op("stablehlo.not", a, "", kBool, kBool); }
    std::string select(const std::string& p, const std::string& a, const std::string& b, DType t) {
      std::string ty = tensor_type(t, Shape{});
      return op("stablehlo.select", p + ", " + a + ", " + b, "", kBool + ", " + ty + ", " + ty, ty);
    }
    std::string code() const { return out_.str(); }

   private:
    const std::string kBool = tensor_type(DType::bool_, Shape{});
    std::string k_;
    std::ostringstream out_;
    int line_ = 0;
  };

  // jnp.argmax / argmin: a two-operand reduce of (value, index) pairs keeping the extremum;
  // ties and NaNs (which count as the extremum) go to the lower index. The comparator picks
  // the accumulator a over b when a beats b (a > b, or a < b for argmin), or a is NaN and b is
  // not, or both are equal (or both NaN) and a's index is lower.
  std::string arg_extremum(const Node& n) {
    Operand x = operand(n, 0);
    const TensorType& rt = n.results[0];
    DType vt = x.type.dtype, it = rt.dtype;
    int64_t axis = x.type.shape.normalize_axis(n.attrs.get_int("axis"));
    bool is_max = n.op == OpKind::ArgMax;
    std::string idx =
        emit("stablehlo.iota", {}, "iota_dimension = " + std::to_string(axis) + " : i64",
             {it, x.type.shape});
    // The initial pair loses to every element: the identity value with the largest index.
    std::string init_v = splat(vt, Shape{}, is_max ? lowest(vt) : highest(vt));
    std::string init_i = splat(it, Shape{}, highest(it));
    RegionCode r("%cmp" + std::to_string(next_) + "_");
    std::string sv = tensor_type(vt, Shape{}), si = tensor_type(it, Shape{});
    std::string a = r.arg("a"), ia = r.arg("ia"), b = r.arg("b"), ib = r.arg("ib");
    std::string beats = r.cmp(a, b, is_max ? "GT" : "LT", vt);
    std::string a_nan = r.cmp(a, a, "NE", vt), b_nan = r.cmp(b, b, "NE", vt);
    std::string nan_wins = r.logic("stablehlo.and", a_nan, r.negate(b_nan));
    std::string same =
        r.logic("stablehlo.or", r.cmp(a, b, "EQ", vt), r.logic("stablehlo.and", a_nan, b_nan));
    std::string tie_wins = r.logic("stablehlo.and", same, r.cmp(ia, ib, "LT", it));
    std::string pick = r.logic("stablehlo.or", r.logic("stablehlo.or", beats, nan_wins), tie_wins);
    std::string v = r.select(pick, a, b, vt), i = r.select(pick, ia, ib, it);
    Shape reduced = x.type.shape;
    reduced.dims().erase(reduced.dims().begin() + axis);
    std::string name = "%" + std::to_string(next_++);
    body_ << "    " << name << ":2 = \"stablehlo.reduce\"(" << x.name << ", " << idx << ", "
          << init_v << ", " << init_i << ") ({\n    ^bb0(" << a << ": " << sv << ", " << ia << ": "
          << si << ", " << b << ": " << sv << ", " << ib << ": " << si << "):\n"
          << r.code() << "      \"stablehlo.return\"(" << v << ", " << i << ") : (" << sv << ", "
          << si << ") -> ()\n    }) {dimensions = array<i64: " << axis << ">} : ("
          << tensor_type(x.type) << ", " << tensor_type(it, x.type.shape) << ", " << sv << ", "
          << si << ") -> (" << tensor_type(vt, reduced) << ", " << tensor_type(it, reduced)
          << ")\n";
    std::string result = name + "#1";
    if (reduced == rt.shape) return result;
    return emit("stablehlo.reshape", {{result, {it, reduced}}}, "", rt);  // keepdims
  }

  // lax.top_k: a stable two-operand sort of (value, iota index) along the last dim, descending
  // in rlx's order (src/ir/eval/reduce.cc): every NaN above +inf, then IEEE total order, so +0
  // above -0; ties go to the lower index. Then the first k of both. a sorts before b when a
  // ranks above b, or neither ranks above the other and a's index is lower.
  std::vector<std::string> top_k(const Node& n) {
    Operand x = operand(n, 0);
    DType vt = x.type.dtype, it = n.results[1].dtype;
    int last = x.type.shape.rank() - 1;
    TensorType idx_t{it, x.type.shape};
    std::string idx =
        emit("stablehlo.iota", {}, "iota_dimension = " + std::to_string(last) + " : i64", idx_t);
    RegionCode r("%cmp" + std::to_string(next_) + "_");
    std::string sv = tensor_type(vt, Shape{}), si = tensor_type(it, Shape{});
    std::string a = r.arg("a"), b = r.arg("b"), ia = r.arg("ia"), ib = r.arg("ib");
    auto above = [&](const std::string& p, const std::string& q) {
      if (!is_float(vt)) return r.cmp(p, q, "GT", vt);
      // NaN vs anything: p wins iff only p is NaN; otherwise the IEEE total order.
      std::string p_nan = r.cmp(p, p, "NE", vt), q_nan = r.cmp(q, q, "NE", vt);
      std::string nan_wins = r.logic("stablehlo.and", p_nan, r.negate(q_nan));
      std::string numbers = r.negate(r.logic("stablehlo.or", p_nan, q_nan));
      std::string total = r.cmp(p, q, "GT", vt, "TOTALORDER");
      return r.logic("stablehlo.or", nan_wins, r.logic("stablehlo.and", numbers, total));
    };
    std::string a_above = above(a, b), b_above = above(b, a);
    std::string tie = r.negate(r.logic("stablehlo.or", a_above, b_above));
    std::string first =
        r.logic("stablehlo.or", a_above, r.logic("stablehlo.and", tie, r.cmp(ia, ib, "LT", it)));
    std::string name = "%" + std::to_string(next_++);
    body_ << "    " << name << ":2 = \"stablehlo.sort\"(" << x.name << ", " << idx
          << ") ({\n    ^bb0(" << a << ": " << sv << ", " << b << ": " << sv << ", " << ia << ": "
          << si << ", " << ib << ": " << si << "):\n"
          << r.code() << "      \"stablehlo.return\"(" << first
          << ") : (tensor<i1>) -> ()\n    }) {dimension = " << last
          << " : i64, is_stable = true} : (" << tensor_type(x.type) << ", " << tensor_type(idx_t)
          << ") -> (" << tensor_type(x.type) << ", " << tensor_type(idx_t) << ")\n";
    std::vector<int64_t> start(static_cast<size_t>(last + 1), 0), limit = x.type.shape.dims(),
                                                                  strides(start.size(), 1);
    limit.back() = n.results[0].shape.dims().back();
    std::string window = "start_indices = " + i64_array(start) +
                         ", limit_indices = " + i64_array(limit) +
                         ", strides = " + i64_array(strides);
    return {emit("stablehlo.slice", {{name + "#0", x.type}}, window, n.results[0]),
            emit("stablehlo.slice", {{name + "#1", idx_t}}, window, n.results[1])};
  }

  // Full i64 coordinates into a rank-(rank(shape) - q + 1) operand, one per point of `shape`:
  // the iota of each dim of `shape`, except that dims [axis, axis + q) (the index dims) give
  // the single coordinate `along` (i64, of shape `shape`); stacked on a new last dim.
  Operand coordinates(const Shape& shape, int64_t axis, int64_t q, const Operand& along) {
    std::vector<int64_t> col_dims = shape.dims();
    col_dims.push_back(1);
    TensorType col_t{DType::i64, Shape(col_dims)};
    std::vector<Operand> cols;
    int64_t rank = shape.rank();
    auto iota = [&](int64_t d) {
      cols.push_back(
          {emit("stablehlo.iota", {}, "iota_dimension = " + std::to_string(d) + " : i64", col_t),
           col_t});
    };
    for (int64_t d = 0; d < axis; ++d) iota(d);
    cols.push_back({emit("stablehlo.reshape", {along}, "", col_t), col_t});  // q may be 0
    for (int64_t d = axis + q; d < rank; ++d) iota(d);
    std::vector<int64_t> out_dims = shape.dims();
    out_dims.push_back(static_cast<int64_t>(cols.size()));
    TensorType out_t{DType::i64, Shape(out_dims)};
    if (cols.size() == 1) return {emit("stablehlo.reshape", {cols[0]}, "", out_t), out_t};
    return {emit("stablehlo.concatenate", cols, "dimension = " + std::to_string(rank) + " : i64",
                 out_t),
            out_t};
  }

  // Indices as i64 (before any clamp, so u8 / i8 coordinates cannot wrap), broadcast to `shape`
  // by dims `dims`.
  Operand index_i64(const Operand& idx, const Shape& shape, const std::vector<int64_t>& dims) {
    TensorType t64{DType::i64, idx.type.shape};
    Operand i = idx.type.dtype == DType::i64
                    ? idx
                    : Operand{emit("stablehlo.convert", {idx}, "", t64), t64};
    if (idx.type.shape == shape) return i;
    TensorType bt{DType::i64, shape};
    return {
        emit("stablehlo.broadcast_in_dim", {i}, "broadcast_dimensions = " + i64_array(dims), bt),
        bt};
  }

  // i64 indices clamped into [0, len - 1].
  Operand clamp_index(const Operand& i, int64_t len) {
    TensorType scalar{DType::i64, Shape{}};
    return {emit("stablehlo.clamp",
                 {{splat(DType::i64, Shape{}, 0), scalar},
                  i,
                  {splat(DType::i64, Shape{}, static_cast<double>(len - 1)), scalar}},
                 "", i.type),
            i.type};
  }

  // Dimension numbers of a gather (or scatter) of single elements of a rank-r operand at full
  // coordinates stored along `index_vector_dim`.
  static std::string point_dims(bool gather, int64_t r, int64_t index_vector_dim) {
    std::vector<int64_t> all(static_cast<size_t>(r));
    for (int64_t d = 0; d < r; ++d) all[static_cast<size_t>(d)] = d;
    if (gather)
      return "dimension_numbers = #stablehlo.gather<collapsed_slice_dims = " + int_list(all) +
             ", start_index_map = " + int_list(all) +
             ", index_vector_dim = " + std::to_string(index_vector_dim) + ">";
    return "scatter_dimension_numbers = #stablehlo.scatter<inserted_window_dims = " +
           int_list(all) + ", scatter_dims_to_operand_dims = " + int_list(all) +
           ", index_vector_dim = " + std::to_string(index_vector_dim) + ">";
  }

  // jnp.take_along_axis (numpy broadcasting of the other dims): a point gather whose
  // coordinates are the output's iotas, with the index (explicitly clamped into [0, n - 1], as
  // rlx specifies; gather's own clamping is implementation detail) along `axis`.
  std::string take_along_axis(const Node& n) {
    Operand x = operand(n, 0), idx = operand(n, 1);
    const TensorType& rt = n.results[0];
    int64_t r = x.type.shape.rank(), axis = x.type.shape.normalize_axis(n.attrs.get_int("axis"));
    int64_t len = x.type.shape.dims()[static_cast<size_t>(axis)];
    if (rt.shape.numel() == 0) return splat(rt.dtype, rt.shape, 0);
    std::vector<int64_t> same(static_cast<size_t>(r));
    for (int64_t d = 0; d < r; ++d) same[static_cast<size_t>(d)] = d;
    Operand i = index_i64(idx, rt.shape, same);
    Operand clamped = clamp_index(i, len);
    Operand coords = coordinates(rt.shape, axis, 1, clamped);
    // x's size-1 dims broadcast against the indices: gather from x broadcast to rt's shape
    // (with x's own extent along axis).
    Shape xs = rt.shape;
    xs.dims()[static_cast<size_t>(axis)] = len;
    Operand xb = x.type.shape == xs
                     ? x
                     : Operand{emit("stablehlo.broadcast_in_dim", {x},
                                    "broadcast_dimensions = " + i64_array(same), {rt.dtype, xs}),
                               {rt.dtype, xs}};
    return emit("stablehlo.gather", {xb, coords},
                point_dims(true, r, r) + ", slice_sizes = " +
                    i64_array(std::vector<int64_t>(static_cast<size_t>(r), 1)) +
                    ", indices_are_sorted = false",
                rt);
  }

  // rlx scatter_add: updates [x[:axis], indices..., x[axis+1:]] added at x[..., idx, ...]. A
  // point scatter with an add region; out-of-range updates are dropped explicitly (not left to
  // the implementation-defined out-of-bounds behaviour): their index is clamped and their
  // value replaced by -0, the identity of float addition that keeps x's -0 (0 for integers).
  std::string scatter_add(const Node& n) {
    Operand x = operand(n, 0), idx = operand(n, 1), upd = operand(n, 2);
    const TensorType& rt = n.results[0];
    int64_t r = x.type.shape.rank(), axis = x.type.shape.normalize_axis(n.attrs.get_int("axis"));
    int64_t q = idx.type.shape.rank();
    int64_t len = x.type.shape.dims()[static_cast<size_t>(axis)];
    const Shape& us = upd.type.shape;
    if (us.numel() == 0 || len == 0) return x.name;  // nothing lands in x
    std::vector<int64_t> dims;
    for (int64_t d = 0; d < q; ++d) dims.push_back(axis + d);
    Operand i = index_i64(idx, us, dims);
    TensorType it{DType::i64, us}, bt{DType::bool_, us};
    std::string lo = splat(DType::i64, us, 0), hi = splat(DType::i64, us, static_cast<double>(len));
    std::string valid =
        emit("stablehlo.and", {{compare("GE", i, {lo, it}), bt}, {compare("LT", i, {hi, it}), bt}},
             "", bt);
    Operand clamped = clamp_index(i, len);
    std::string zero = splat(rt.dtype, us, is_float(rt.dtype) ? -0.0 : 0.0);
    Operand masked{emit("stablehlo.select", {{valid, bt}, upd, {zero, upd.type}}, "", upd.type),
                   upd.type};
    Operand coords = coordinates(us, axis, q, clamped);
    return emit(
        "stablehlo.scatter", {x, coords, masked},
        point_dims(false, r, us.rank()) + ", indices_are_sorted = false, unique_indices = false",
        rt, combiner_region(rt.dtype, "stablehlo.add"));
  }

  // lax.conv_general_dilated in PyTorch layout (NC[H]W x OI[H]W -> NC[H]W).
  std::string conv(const Node& n) {
    Operand x = operand(n, 0), w = operand(n, 1);
    size_t spatial = static_cast<size_t>(x.type.shape.rank() - 2);
    auto list = [&](const char* name, int64_t fill) {  // [] means `fill` in every spatial dim
      std::vector<int64_t> v = n.attrs.get_ints(name);
      if (v.empty()) v.assign(spatial, fill);
      return v;
    };
    std::vector<int64_t> lo = list("pad_low", 0), hi = list("pad_high", 0);
    std::string layout, padding = "dense<[";
    for (size_t d = 0; d < spatial; ++d) {
      layout += ", " + std::to_string(d);
      padding += (d ? ", [" : "[") + std::to_string(lo[d]) + ", " + std::to_string(hi[d]) + "]";
    }
    padding += "]> : tensor<" + std::to_string(spatial) + "x2xi64>";
    return emit("stablehlo.convolution", {x, w},
                "dimension_numbers = #stablehlo.conv<[b, f" + layout + "]x[o, i" + layout +
                    "]->[b, f" + layout + "]>, window_strides = " + i64_array(list("strides", 1)) +
                    ", padding = " + padding +
                    ", lhs_dilation = " + i64_array(std::vector<int64_t>(spatial, 1)) +
                    ", rhs_dilation = " + i64_array(list("dilation", 1)) +
                    ", feature_group_count = " + std::to_string(n.attrs.get_int("groups")) +
                    " : i64, batch_group_count = 1 : i64",
                n.results[0]);
  }

  // stablehlo.reduce over `dims` with the binary `combiner` starting from `init`.
  std::string reduce(const Operand& x, const std::vector<int64_t>& dims, const char* combiner,
                     double init, const TensorType& result) {
    DType t = x.type.dtype;
    std::string init_value = splat(t, Shape{}, init);
    std::string region = combiner_region(t, combiner);
    Shape reduced;
    for (int i = 0; i < x.type.shape.rank(); ++i)
      if (std::find(dims.begin(), dims.end(), i) == dims.end())
        reduced.dims().push_back(x.type.shape.dims()[static_cast<size_t>(i)]);
    TensorType rt{result.dtype, reduced};
    std::string r = emit("stablehlo.reduce", {x, {init_value, {t, Shape{}}}},
                         "dimensions = " + i64_array(dims), rt, region);
    if (rt.shape == result.shape) return r;
    return emit("stablehlo.reshape", {{r, rt}}, "", result);  // keepdims
  }

  double lowest(DType t) const {
    if (is_float(t)) return -std::numeric_limits<double>::infinity();
    switch (t) {
      case DType::i8:
        return -128;
      case DType::i32:
        return static_cast<double>(std::numeric_limits<int32_t>::min());
      case DType::i64:
        return static_cast<double>(std::numeric_limits<int64_t>::min());
      default:
        return 0;
    }
  }
  double highest(DType t) const {
    if (is_float(t)) return std::numeric_limits<double>::infinity();
    switch (t) {
      case DType::i8:
        return 127;
      case DType::u8:
        return 255;
      case DType::i32:
        return static_cast<double>(std::numeric_limits<int32_t>::max());
      // 2^63 - 1 is not a double; Tensor::full saturates the conversion to int64 max.
      case DType::i64:
        return 9.3e18;
      default:
        return 1;
    }
  }

  std::vector<std::string> lower(const Node& n) {
    const TensorType& rt = n.results[0];
    if (const char* name = simple_elementwise(n.op)) {
      bool is_unsigned = dtype_category(rt.dtype) == DTypeCategory::UnsignedInt;
      if (n.op == OpKind::Abs && is_unsigned) return {operand(n, 0).name};  // |x| = x
      if (n.op == OpKind::Sign && is_unsigned) {  // stablehlo.sign is for signed types: x != 0
        Operand x = operand(n, 0);
        std::string nz = compare("NE", x, {splat(rt.dtype, rt.shape, 0), rt});
        return {emit("stablehlo.convert", {{nz, {DType::bool_, rt.shape}}}, "", rt)};
      }
      return {emit(name, broadcast_operands(n), "", rt)};
    }
    if (const char* dir = compare_direction(n.op)) {
      std::vector<Operand> ops = broadcast_operands(n);
      return {compare(dir, ops[0], ops[1])};
    }
    switch (n.op) {
      case OpKind::Constant:
        return {constant_tensor(evaluate_op(OpKind::Constant, {}, n.attrs)[0])};
      case OpKind::Iota:
        return {emit("stablehlo.iota", {},
                     "iota_dimension = " + std::to_string(n.attrs.get_int("dimension")) + " : i64",
                     rt)};
      case OpKind::Atan: {  // stablehlo has atan2 only: atan(x) = atan2(x, 1)
        Operand x = operand(n, 0);
        return {emit("stablehlo.atan2", {x, {splat(rt.dtype, rt.shape, 1), rt}}, "", rt)};
      }
      case OpKind::Convert: {
        Operand x = operand(n, 0);
        if (rt.dtype == DType::bool_ && x.type.dtype != DType::bool_)  // -> bool is x != 0
          return {compare("NE", x, {splat(x.type.dtype, x.type.shape, 0), x.type})};
        if (rt.dtype == x.type.dtype) return {x.name};
        return {emit("stablehlo.convert", {x}, "", rt)};
      }
      case OpKind::Clamp:  // rlx order (lo, x, hi) is stablehlo's (min, operand, max)
        return {emit("stablehlo.clamp", broadcast_operands(n), "", rt)};
      case OpKind::DotGeneral: {
        std::string dn = "dot_dimension_numbers = #stablehlo.dot<";
        std::string sep;
        for (const char* key : {"lhs_batch", "rhs_batch", "lhs_contract", "rhs_contract"}) {
          const auto& v = n.attrs.get_ints(key);
          if (v.empty()) continue;  // the attribute's parser treats an absent list as empty
          static const std::map<std::string, std::string> kNames = {
              {"lhs_batch", "lhs_batching_dimensions"},
              {"rhs_batch", "rhs_batching_dimensions"},
              {"lhs_contract", "lhs_contracting_dimensions"},
              {"rhs_contract", "rhs_contracting_dimensions"}};
          dn += sep + kNames.at(key) + " = " + int_list(v);
          sep = ", ";
        }
        return {emit("stablehlo.dot_general", {operand(n, 0), operand(n, 1)}, dn + ">", rt)};
      }
      case OpKind::ReduceSum:
      case OpKind::ReduceMax:
      case OpKind::ReduceMin:
      case OpKind::ReduceProd:
      case OpKind::ReduceMean: {
        Operand x = operand(n, 0);
        std::vector<int64_t> dims = axes(n, "axes", x.type.shape);
        if (dims.empty()) return {x.name};  // no axes: no reduction
        switch (n.op) {
          case OpKind::ReduceMax:
            return {reduce(x, dims, "stablehlo.maximum", lowest(x.type.dtype), rt)};
          case OpKind::ReduceMin:
            return {reduce(x, dims, "stablehlo.minimum", highest(x.type.dtype), rt)};
          case OpKind::ReduceProd:
            return {reduce(x, dims, "stablehlo.multiply", 1, rt)};
          case OpKind::ReduceSum:
            return {reduce(x, dims, "stablehlo.add", 0, rt)};
          default: {  // mean = sum / count; an empty extent gives 0 / 0 = NaN as specified
            double count = 1;
            for (int64_t d : dims)
              count *= static_cast<double>(x.type.shape.dims()[static_cast<size_t>(d)]);
            std::string sum = reduce(x, dims, "stablehlo.add", 0, rt);
            return {emit("stablehlo.divide", {{sum, rt}, {splat(rt.dtype, rt.shape, count), rt}},
                         "", rt)};
          }
        }
      }
      case OpKind::Reshape:
        return {emit("stablehlo.reshape", {operand(n, 0)}, "", rt)};
      case OpKind::Transpose: {
        Operand x = operand(n, 0);
        return {emit("stablehlo.transpose", {x},
                     "permutation = " + i64_array(axes(n, "permutation", x.type.shape)), rt)};
      }
      case OpKind::BroadcastInDim:
        return {emit(
            "stablehlo.broadcast_in_dim", {operand(n, 0)},
            "broadcast_dimensions = " + i64_array(axes(n, "broadcast_dimensions", rt.shape)), rt)};
      case OpKind::Slice: {
        Operand x = operand(n, 0);
        std::vector<int64_t> strides = n.attrs.get_ints("strides");
        if (strides.empty()) strides.assign(static_cast<size_t>(x.type.shape.rank()), 1);
        return {emit("stablehlo.slice", {x},
                     "start_indices = " + i64_array(n.attrs.get_ints("start")) +
                         ", limit_indices = " + i64_array(n.attrs.get_ints("limit")) +
                         ", strides = " + i64_array(strides),
                     rt)};
      }
      case OpKind::Concatenate: {
        std::vector<Operand> ops;
        for (size_t i = 0; i < n.operands.size(); ++i) ops.push_back(operand(n, i));
        int dim = rt.shape.normalize_axis(n.attrs.get_int("dimension"));
        return {emit("stablehlo.concatenate", ops, "dimension = " + std::to_string(dim) + " : i64",
                     rt)};
      }
      case OpKind::Pad: {
        Operand x = operand(n, 0);
        std::vector<int64_t> interior = n.attrs.get_ints("interior");
        if (interior.empty()) interior.assign(static_cast<size_t>(x.type.shape.rank()), 0);
        return {emit("stablehlo.pad", {x, operand(n, 1)},
                     "edge_padding_low = " + i64_array(n.attrs.get_ints("low")) +
                         ", edge_padding_high = " + i64_array(n.attrs.get_ints("high")) +
                         ", interior_padding = " + i64_array(interior),
                     rt)};
      }
      case OpKind::Reverse: {
        Operand x = operand(n, 0);
        return {emit("stablehlo.reverse", {x},
                     "dimensions = " + i64_array(axes(n, "axes", x.type.shape)), rt)};
      }
      case OpKind::CumSum:
        return {cumsum(n)};
      case OpKind::ArgMax:
      case OpKind::ArgMin:
        return {arg_extremum(n)};
      case OpKind::Conv:
        return {conv(n)};
      case OpKind::TopK:
        return top_k(n);
      case OpKind::TakeAlongAxis:
        return {take_along_axis(n)};
      case OpKind::ScatterAdd:
        return {scatter_add(n)};
      case OpKind::Gather: {
        // jnp.take(x, idx, axis) as a gather of 1-wide slices along `axis`: the index dims take
        // the axis' place in the result, the other x dims are offset dims. StableHLO clamps
        // start indices into [0, n - 1], which is rlx's index clamping.
        Operand x = operand(n, 0), idx = operand(n, 1);
        int64_t axis = x.type.shape.normalize_axis(n.attrs.get_int("axis"));
        int64_t q = idx.type.shape.rank(), r = x.type.shape.rank();
        std::vector<int64_t> offset_dims, slice_sizes = x.type.shape.dims();
        for (int64_t d = 0; d < axis; ++d) offset_dims.push_back(d);
        for (int64_t d = axis + 1; d < r; ++d) offset_dims.push_back(d + q - 1);
        slice_sizes[static_cast<size_t>(axis)] = 1;
        std::string axis_list = "[" + std::to_string(axis) + "]";
        return {
            emit("stablehlo.gather", {x, idx},
                 "dimension_numbers = #stablehlo.gather<offset_dims = " + int_list(offset_dims) +
                     ", collapsed_slice_dims = " + axis_list + ", start_index_map = " + axis_list +
                     ", index_vector_dim = " + std::to_string(q) +
                     ">, slice_sizes = " + i64_array(slice_sizes) + ", indices_are_sorted = false",
                 rt)};
      }
      default:
        throw Error("pjrt: op '" + std::string(op_name(n.op)) + "' (node %" + n.name +
                    ") has no StableHLO lowering; legalize the graph for the pjrt backend first");
    }
  }

  const Graph& g_;
  std::vector<std::vector<std::string>> names_;  // SSA name of each node result
  std::ostringstream body_;
  int next_ = 0;
};

}  // namespace

std::set<OpKind> native_ops() {
  std::set<OpKind> ops(std::begin(kOtherNative), std::end(kOtherNative));
  for (int i = 0; i < kNumOps; ++i) {
    OpKind op = static_cast<OpKind>(i);
    if (simple_elementwise(op) != nullptr || compare_direction(op) != nullptr) ops.insert(op);
  }
  return ops;
}

std::string emit_stablehlo(const Graph& g) { return Emitter(g).run(); }

}  // namespace rlx::pjrt
