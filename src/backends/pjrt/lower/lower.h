// Internal: the StableHLO emitter's context (Emitter) and its lowering table. The emitter core
// (emit_stablehlo.cc) writes the module, the function signature and the SSA names and offers
// the helpers below; each file of lower/ registers the lowerings of one op family.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "rlx/ir/graph.h"
#include "rlx/ir/op_table.h"
#include "rlx/ir/tensor.h"

namespace rlx::pjrt::lower {

// ---- MLIR text of types and attributes

/// The StableHLO element type: f32, f16, bf16, f64, i8, ui8, i32, i64, i1 (bool).
std::string element_type(DType t);
/// "tensor<2x3xf32>" ("tensor<f32>" for a scalar).
std::string tensor_type(DType t, const Shape& s);
std::string tensor_type(const TensorType& t);
/// "array<i64: 1, 2>" ("array<i64>" when empty).
std::string i64_array(const std::vector<int64_t>& v);
/// "[1, 2]".
std::string int_list(const std::vector<int64_t>& v);
/// StableHLO compare_type for a dtype: FLOAT (IEEE) for floats, SIGNED / UNSIGNED for integers
/// (bool compares as a 1-bit unsigned value).
std::string compare_type(DType t);

/// An SSA value and its type.
struct Operand {
  std::string name;
  TensorType type;
};

/// Emits one graph as a StableHLO module: run() writes the signature, asks the lowering table
/// for the ops of every node in order and writes the return. Lowerings append ops to the body
/// through the helpers below; SSA names are %0, %1, ... in emission order.
class Emitter {
 public:
  /// `aliases`: input node id -> the output index it is aliased to (emit_stablehlo).
  explicit Emitter(const Graph& g, std::map<int32_t, size_t> aliases = {})
      : g_(g), names_(g.nodes().size()), aliases_(std::move(aliases)) {}
  /// A nested emitter for the block of a region (a cond branch, a loop's cond or body): it
  /// lowers `body` with the SSA counter and SPMD annotations of `parent`, so that names stay
  /// unique across the nested regions of one function (MLIR forbids shadowing). Its ops go to
  /// its own body(); region() wraps them.
  Emitter(const Graph& body, Emitter& parent)
      : g_(body), names_(body.nodes().size()), spmd_(parent.spmd_), next_(parent.next_) {}
  Emitter(const Emitter&) = delete;
  Emitter& operator=(const Emitter&) = delete;

  /// SPMD annotations (docs/pjrt.md, "Devices, meshes and sharding"): a sharding attribute on
  /// the arguments of the input / param nodes in `args` (node id -> the attribute, e.g.
  /// `mhlo.sharding = "{replicated}"` or `sdy.sharding = #sdy.sharding<@mesh, [{}]>`) and on
  /// every result (`results`, one per graph output), the module attributes
  /// `mhlo.num_partitions` / `mhlo.num_replicas`, and `preamble`: module-level lines written
  /// before @main (Shardy's `sdy.mesh`).
  struct Spmd {
    std::map<int32_t, std::string> args;
    std::vector<std::string> results;
    std::vector<std::string> preamble;
    int64_t num_partitions = 1, num_replicas = 1;
  };
  void set_spmd(Spmd spmd) { spmd_ = std::move(spmd); }
  /// The SPMD annotations, when set_spmd was called (collectives read the replica count).
  const std::optional<Spmd>& spmd() const { return spmd_; }

  /// The module text. Throws rlx::Error naming the op and node for an op without a lowering.
  std::string run();

  // ---- regions (control flow: lower/control_flow.cc)

  /// Binds the inputs of this emitter's graph (a region's body) by position to the SSA values
  /// `inputs`, lowers every node and returns the SSA names of the graph's outputs. Throws
  /// rlx::Error naming the op, node and region for a collective (not supported in a body).
  std::vector<std::string> lower_body(const std::vector<std::string>& inputs);
  /// The text of one region holding the ops emitted so far: `{ ^bb0(args): ops;
  /// "stablehlo.return"(results) }`, without a block header when `args` is empty (a
  /// stablehlo.case branch). `args` are block arguments made with block_argument().
  std::string region(const std::vector<Operand>& args, const std::vector<Operand>& results) const;
  /// A fresh, unique name for a block argument of a region.
  std::string block_argument() { return "%it" + std::to_string((*next_)++); }
  /// Emits an op with `regions` (texts from region()) and one result per `results` type;
  /// returns the results' SSA names (`%k#i`, or `%k` for a single result).
  std::vector<std::string> emit_with_regions(const std::string& op,
                                             const std::vector<Operand>& operands,
                                             const std::vector<std::string>& regions,
                                             const std::vector<TensorType>& results);

  // ---- for the lowerings

  const Graph& graph() const { return g_; }
  /// The SSA name of `v` (its node was lowered before).
  const std::string& value(Value v) const {
    return names_[static_cast<size_t>(v.node)][static_cast<size_t>(v.index)];
  }
  /// Operand i of `n`: its SSA name and type.
  Operand operand(const Node& n, size_t i) const {
    return {value(n.operands[i]), g_.type(n.operands[i])};
  }
  /// The names of an input or param node: its function argument (%argN).
  const std::vector<std::string>& argument(const Node& n) const;

  /// Emits `%k = "<op>"(operands) <region> {attrs} : (types) -> result` and returns %k.
  std::string emit(const std::string& op, const std::vector<Operand>& operands,
                   const std::string& attrs, const TensorType& result,
                   const std::string& region = "");
  /// For an op written by hand (several results): the next SSA name, then append the op's lines
  /// to body().
  std::string fresh() { return "%" + std::to_string((*next_)++); }
  /// The number fresh() gives next, for names that must be unique (region block arguments).
  int next_number() const { return *next_; }
  std::ostringstream& body() { return body_; }

  /// A stablehlo.constant with the exact bytes of `t` (one element when `t` is a splat); bool
  /// as u8 bytes compared != 0, since the hex packing of i1 is not portable.
  std::string constant_tensor(const Tensor& t);
  /// A constant of dtype `t` and shape `s`, every element `v` (converted as Tensor::full does).
  std::string splat(DType t, const Shape& s, double v);
  /// `a dir b` (dir EQ, NE, LT, LE, GT, GE) elementwise, a bool tensor of a's shape.
  std::string compare(const char* dir, const Operand& a, const Operand& b);
  /// numpy broadcasting made explicit: `x` broadcast to `shape` (dims aligned right).
  Operand broadcast(const Operand& x, const Shape& shape);
  /// Every operand of `n` broadcast to its result's shape.
  std::vector<Operand> broadcast_operands(const Node& n);
  /// The int-list attribute `attr` of `n` as axes of `s`, normalized (negative counts from
  /// the end).
  std::vector<int64_t> axes(const Node& n, const std::string& attr, const Shape& s) const;
  /// The body of a reduce / reduce_window / scatter: `combiner` applied to two scalars of `t`.
  /// Its block argument names are made unique with next_number() (MLIR forbids shadowing).
  /// A float "stablehlo.maximum" / "stablehlo.minimum" combiner propagates NaN as extremum()
  /// does.
  std::string combiner_region(DType t, const char* combiner) const;
  /// lax.max / lax.min (`op` "stablehlo.maximum" / "stablehlo.minimum") of two operands of one
  /// type. On floats NaN propagates whatever the plugin's min/max does (XLA CPU's fast min/max
  /// returns the other operand): `select(a != a, a, select(b != b, b, op(a, b)))`.
  std::string extremum(const char* op, const Operand& a, const Operand& b);

 private:
  const Graph& g_;
  std::vector<std::vector<std::string>> names_;  // SSA name of each node result
  std::map<int32_t, size_t> aliases_;            // donated input node -> output index
  std::optional<Spmd> spmd_;                     // set: an SPMD module (set_spmd)
  std::ostringstream body_;
  int own_next_ = 0;
  int* next_ = &own_next_;  // the SSA counter: this emitter's own, or its root's (nested)
};

/// Straight-line scalar code for the body of a reduce / sort region: each helper appends one
/// op and returns its SSA name, unique per region through `prefix` (MLIR forbids shadowing).
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

/// Lowers one node: appends its ops through `e` and returns the SSA names of its results.
using LowerFn = std::vector<std::string> (*)(Emitter& e, const Node& n);

/// The lowering table; its keys are native_ops() (the backend's supported_ops()).
const OpTable<LowerFn>& lowering_table();

// One per file of lower/; each registers the lowerings of its op family.
void register_leaf_lowerings(OpTable<LowerFn>& t);
void register_elementwise_lowerings(OpTable<LowerFn>& t);
void register_linalg_lowerings(OpTable<LowerFn>& t);
void register_reduce_lowerings(OpTable<LowerFn>& t);
void register_shape_lowerings(OpTable<LowerFn>& t);
void register_nn_lowerings(OpTable<LowerFn>& t);
void register_quant_lowerings(OpTable<LowerFn>& t);
void register_random_lowerings(OpTable<LowerFn>& t);
void register_collective_lowerings(OpTable<LowerFn>& t);
void register_control_flow_lowerings(OpTable<LowerFn>& t);

}  // namespace rlx::pjrt::lower
