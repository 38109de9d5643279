// The op-case table: for every op of ops.def, sample operands and attributes and the dtypes
// each case runs in, one list per op family (tests/ops/cases/<family>.cc). Every per-op suite
// reads it — the text round trip, f64 finite differences, vmap, the CPU parity sweep, the
// StableHLO round trip and, exported through rlx._core.op_cases(), the Python parity suite
// against JAX — so adding an op means adding its case here once. Modelled on PyTorch's OpInfo
// database and ggml's test-backend-ops.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "rlx/ir/evaluator.h"
#include "rlx/ir/graph.h"

namespace rlx::testing {

/// Special values mixed into a random operand.
enum class Specials : uint8_t {
  None,
  /// NaN, +-inf and +-0 in every 41st element: for contractions, whose summation order differs
  /// between a kernel and the evaluator, so that no finite overflow becomes inf - inf in only
  /// one of them, and sparse enough that most outputs stay finite.
  NonFinite,
  /// Every 5th element: NaN, +-inf, +-0, 1e30, -1e-30, 65504 (f16 max); integers get their
  /// dtype's extremes, 0 and +-1 (wrap-around).
  All,
};

/// How one operand's values are drawn; seeded by the case name, dtype and operand position,
/// so every run and every suite sees the same values.
struct Values {
  double lo = -2, hi = 2;       ///< float values: uniform in [lo, hi)
  int64_t ilo = -20, ihi = 20;  ///< integer values: uniform in [ilo, ihi], clipped to the dtype
  Specials specials = Specials::None;
  bool integral = false;  ///< floats drawn as integers in [lo, hi) (ties for compares, argmax)

  /// Chainable adjustments.
  Values ints(int64_t l, int64_t h) const {
    Values v = *this;
    v.ilo = l;
    v.ihi = h;
    return v;
  }
  Values with(Specials s) const {
    Values v = *this;
    v.specials = s;
    return v;
  }
};

/// Float values in [lo, hi) (integers keep the default range).
inline Values range(double lo, double hi) { return Values{lo, hi}; }
/// Integer values in [lo, hi] (index operands: out-of-range ones included on purpose).
inline Values ints(int64_t lo, int64_t hi) { return Values{}.ints(lo, hi); }
/// Floats in [lo, hi) rounded down to integers (exact ties), integers in [lo, hi].
inline Values integral(double lo, double hi) {
  Values v{lo, hi, static_cast<int64_t>(lo), static_cast<int64_t>(hi)};
  v.integral = true;
  return v;
}
/// [-3, 3) with special values mixed in (the CPU sweep's default).
inline Values specials(Specials s = Specials::All) { return Values{-3, 3}.with(s); }

/// One operand of a sample, a leaf of the case graph.
struct Operand {
  Shape shape;
  std::optional<DType> dtype;  ///< a fixed dtype (indices, masks); nullopt: the case's dtype
  Values values;
  std::vector<double> fixed;  ///< exact values, row-major (empty: random from `values`)
  bool param = false;         ///< a param of the graph (bound by set_param) instead of an input
};

/// An operand of the case's dtype.
inline Operand T(Shape s, Values v = {}) { return {std::move(s), std::nullopt, v, {}, false}; }
/// An operand of a fixed dtype.
inline Operand typed(DType t, Shape s, Values v = {}) { return {std::move(s), t, v, {}, false}; }
/// An operand of a fixed dtype with exact values (row-major).
inline Operand fixed(DType t, Shape s, std::vector<double> values) {
  return {std::move(s), t, {}, std::move(values), false};
}
/// A param operand of the case's dtype.
inline Operand param(Shape s, Values v = {}) { return {std::move(s), std::nullopt, v, {}, true}; }

/// Builds a sample's outputs from its leaves in the case graph, for ops tested inside a small
/// graph (a value used twice, a convert chain, iota's dtype attribute); `dtype` is the case's.
using SampleBuild =
    std::function<std::vector<Value>(Graph& g, const std::vector<Value>& leaves, DType dtype)>;

/// One emission of the op: its operands and attributes (or a custom build).
struct Sample {
  std::vector<Operand> operands;
  AttrMap attrs;
  SampleBuild build;  ///< empty: emit the case's op on the leaves with `attrs`
};

/// The suites that read the table (a case runs in those of its mask where the suite applies).
enum Suite : uint32_t {
  kTextSuite = 1u << 0,    ///< print -> parse -> print identity (tests/ir/text_test.cc)
  kFdSuite = 1u << 1,      ///< grad / jvp / hvp vs f64 central differences (autodiff)
  kVmapSuite = 1u << 2,    ///< vmap vs the per-example loop (autodiff)
  kCpuSuite = 1u << 3,     ///< the CPU backend vs the reference evaluator (cpu parity)
  kPjrtSuite = 1u << 4,    ///< XLA through PJRT vs the reference evaluator
  kPythonSuite = 1u << 5,  ///< rlx (evaluator + CPU) vs JAX (python/tests/test_parity.py)
  kAllSuites = (1u << 6) - 1,
};

/// One case: a named set of samples of one op, run in each of `dtypes`.
struct OpCase {
  std::string name;  ///< "<mnemonic>/<variant>", unique; names the gtest and pytest cases
  OpKind op;
  DTypeSet dtypes;  ///< the dtypes it runs in; by default the op's class (ops.def)
  std::vector<Sample> samples;
  uint32_t suites = kAllSuites;
  std::string why_not;  ///< why suites outside `suites` are excluded (required then)

  /// Adds a sample (chainable).
  OpCase& sample(std::vector<Operand> operands, AttrMap attrs = {});
  OpCase& sample(std::vector<Operand> operands, SampleBuild build);
  /// Restricts the dtypes (chainable).
  OpCase& in(DTypeSet d);
  /// Runs only in `suites`, for the stated reason (chainable).
  OpCase& only(uint32_t suites, std::string why);
};

/// The list each family file fills: add(op, variant) appends a case named "<mnemonic>/<variant>".
class CaseList {
 public:
  OpCase& add(OpKind op, const std::string& variant);
  std::vector<OpCase> cases;
};

// One per family file in tests/ops/cases/.
void add_leaf_cases(CaseList& cs);
void add_elementwise_cases(CaseList& cs);
void add_linalg_cases(CaseList& cs);
void add_reduce_cases(CaseList& cs);
void add_shape_cases(CaseList& cs);
void add_nn_cases(CaseList& cs);
void add_conv_cases(CaseList& cs);
void add_fused_cases(CaseList& cs);
void add_quant_cases(CaseList& cs);
void add_random_cases(CaseList& cs);
void add_control_flow_cases(CaseList& cs);
void add_collective_cases(CaseList& cs);
void add_custom_cases(CaseList& cs);
/// Registers the test custom ops test.softplus, test.sincos and test.host_cube once
/// (tests/ops/cases/custom.cc).
void register_test_custom_ops();

/// Every case of every family (names unique; checked when the table is built).
const std::vector<OpCase>& op_cases();
/// The case named `name`; throws rlx::Error when there is none.
const OpCase& op_case(const std::string& name);

/// Whether `suite` runs `c`: its mask allows it and the suite applies — finite differences
/// need an f64 dtype and no special or integral values (the FD suite also skips ops autodiff
/// declares non-differentiable); the other suites run every case their mask allows.
bool runs_in(const OpCase& c, Suite suite);
/// The dtypes `suite` runs `c` in: f64 for finite differences; f64 (else the first dtype) for
/// vmap; every dtype for the text, CPU and Python suites; for PJRT f32, f64 and i32 where
/// accepted (else the first), which keeps XLA compiles few.
std::vector<DType> suite_dtypes(const OpCase& c, Suite suite);

/// The graph of `c` in `dtype`: one leaf per operand of every sample (inputs "x0", "x1", ...
/// and params "w0", ... in order), the op emitted on each sample's leaves (or its build), and
/// the outputs of every sample in order.
Graph case_graph(const OpCase& c, DType dtype);
/// Seeded values for every input and param of case_graph(c, dtype), drawn from each operand's
/// Values; `shapes` overrides the shape of named leaves (e.g. vmap's batched inputs).
TensorMap case_feeds(const OpCase& c, DType dtype, const std::map<std::string, Shape>& shapes = {});

/// A gtest-safe name: every character other than a letter or digit becomes '_'
/// ("add/bcast_row" -> "add_bcast_row").
std::string test_name(std::string name);

/// The table as JSON for the Python parity suite: a list of {"name", "op", "dtype", "ir" (the
/// text form of case_graph), "suites", "leaves": [{"name", "param", "dtype", "shape", "lo",
/// "hi", "ilo", "ihi", "specials" ("none" / "nonfinite" / "all"), "integral", "fixed"}]}, one entry
/// per case and dtype of suite_dtypes(c, kPythonSuite) for the cases that run in it.
std::string op_cases_json();

}  // namespace rlx::testing
