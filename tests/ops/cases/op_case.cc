// The op-case table: case graphs, their seeded feeds, suite selection and the JSON export.
#include "../op_case.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "rlx/ir/error.h"
#include "rlx/ir/text_util.h"

namespace rlx::testing {

OpCase& OpCase::sample(std::vector<Operand> operands, AttrMap attrs) {
  samples.push_back({std::move(operands), std::move(attrs), {}});
  return *this;
}

OpCase& OpCase::sample(std::vector<Operand> operands, SampleBuild build) {
  samples.push_back({std::move(operands), {}, std::move(build)});
  return *this;
}

OpCase& OpCase::in(DTypeSet d) {
  dtypes = d;
  return *this;
}

OpCase& OpCase::only(uint32_t s, std::string why) {
  suites = s;
  why_not = std::move(why);
  return *this;
}

OpCase& CaseList::add(OpKind op, const std::string& variant) {
  OpCase c;
  c.name = std::string(op_name(op)) + "/" + variant;
  c.op = op;
  c.dtypes = op_info(op).dtypes;
  cases.push_back(std::move(c));
  return cases.back();
}

const std::vector<OpCase>& op_cases() {
  static const std::vector<OpCase> all = [] {
    CaseList cs;
    add_leaf_cases(cs);
    add_elementwise_cases(cs);
    add_linalg_cases(cs);
    add_reduce_cases(cs);
    add_shape_cases(cs);
    add_nn_cases(cs);
    add_conv_cases(cs);
    add_fused_cases(cs);
    add_quant_cases(cs);
    add_random_cases(cs);
    add_control_flow_cases(cs);
    add_collective_cases(cs);
    add_custom_cases(cs);
    std::set<std::string> names;
    for (const OpCase& c : cs.cases) {
      check(names.insert(c.name).second, "op cases: duplicate case name '" + c.name + "'");
      check(!c.samples.empty(), "op case '" + c.name + "' has no sample");
      check(!c.dtypes.empty(), "op case '" + c.name + "' has no dtype");
      for (const Sample& s : c.samples)
        for (const Operand& o : s.operands)
          check(o.fixed.empty() || static_cast<int64_t>(o.fixed.size()) == o.shape.numel(),
                "op case '" + c.name + "': " + std::to_string(o.fixed.size()) +
                    " fixed values for shape " + o.shape.to_string());
      check(c.suites == kAllSuites || !c.why_not.empty(),
            "op case '" + c.name + "' leaves suites out without saying why");
    }
    return std::move(cs.cases);
  }();
  return all;
}

const OpCase& op_case(const std::string& name) {
  for (const OpCase& c : op_cases())
    if (c.name == name) return c;
  throw Error("no op case named '" + name + "'");
}

namespace {

// Special values, and integral floats (ties), are points where ops are not differentiable.
bool nonsmooth_values(const OpCase& c) {
  for (const Sample& s : c.samples)
    for (const Operand& o : s.operands)
      if (o.values.specials != Specials::None || o.values.integral) return true;
  return false;
}

}  // namespace

bool runs_in(const OpCase& c, Suite suite) {
  if ((c.suites & suite) == 0) return false;
  switch (suite) {
    case kFdSuite:
      return c.dtypes.contains(DType::f64) && !nonsmooth_values(c);
    default:
      return true;
  }
}

std::vector<DType> suite_dtypes(const OpCase& c, Suite suite) {
  std::vector<DType> all = c.dtypes.dtypes();
  switch (suite) {
    case kFdSuite:
      return {DType::f64};
    case kVmapSuite:
      return {c.dtypes.contains(DType::f64) ? DType::f64 : all.front()};
    case kPjrtSuite: {
      std::vector<DType> out;
      for (DType t : {DType::f32, DType::f64, DType::i32})
        if (c.dtypes.contains(t)) out.push_back(t);
      if (out.empty()) out.push_back(all.front());
      return out;
    }
    default:
      return all;
  }
}

Graph case_graph(const OpCase& c, DType dtype) {
  Graph g(std::string(op_name(c.op)));
  std::vector<Value> outs;
  int inputs = 0, params = 0;
  for (const Sample& s : c.samples) {
    std::vector<Value> leaves;
    for (const Operand& o : s.operands) {
      DType t = o.dtype.value_or(dtype);
      leaves.push_back(o.param ? g.param("w" + std::to_string(params++), t, o.shape)
                               : g.input("x" + std::to_string(inputs++), t, o.shape));
    }
    std::vector<Value> r = s.build ? s.build(g, leaves, dtype) : g.emit(c.op, leaves, s.attrs);
    outs.insert(outs.end(), r.begin(), r.end());
  }
  g.set_outputs(std::move(outs));
  return g;
}

namespace {

// Seeded values of one operand: uniform in [lo, hi) (floor for integers and integral floats),
// then the special values of its Specials at their stride.
Tensor operand_values(const Operand& o, DType t, const Shape& shape, uint64_t seed) {
  Tensor x(t, shape);
  if (!o.fixed.empty()) {  // repeated when the leaf is larger (a batched input)
    for (int64_t i = 0; i < x.numel(); ++i) {
      double f = o.fixed[static_cast<size_t>(i) % o.fixed.size()];
      if (is_float(t))
        x.set_f64(i, f);
      else
        x.set_i64(i, static_cast<int64_t>(f));
    }
    return x;
  }
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> real(o.values.lo, o.values.hi);
  std::uniform_int_distribution<int64_t> integer(o.values.ilo, o.values.ihi);
  std::bernoulli_distribution coin(0.5);
  for (int64_t i = 0; i < x.numel(); ++i) {
    if (is_bool(t))
      x.set_i64(i, coin(rng) ? 1 : 0);
    else if (is_float(t))
      x.set_f64(i, o.values.integral ? std::floor(real(rng)) : real(rng));
    else  // Tensor::set_i64 wraps; clip to the dtype's range first
      x.set_i64(i, std::clamp(integer(rng), int_min(t), int_max(t)));
  }
  if (o.values.specials == Specials::None || is_bool(t)) return x;
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> floats{NAN, inf, -inf, -0.0, 0.0, 1e30, -1e-30, 65504};
  if (o.values.specials == Specials::NonFinite) floats = {NAN, inf, -inf, -0.0, 0.0};
  std::vector<int64_t> ints{std::numeric_limits<int64_t>::min(),
                            std::numeric_limits<int64_t>::max(), 0, -1, 1};
  if (t == DType::i8) ints = {-128, 127, 0, -1, 1};
  if (t == DType::u8) ints = {255, 0, 1, 128};
  if (t == DType::i32)
    ints = {std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max(), 0, -1, 1};
  const int64_t every = o.values.specials == Specials::NonFinite ? 41 : 5;
  for (int64_t i = 0; i < x.numel(); i += every) {
    auto k = static_cast<size_t>(i / every);
    if (is_float(t))
      x.set_f64(i, floats[k % floats.size()]);
    else
      x.set_i64(i, ints[k % ints.size()]);
  }
  return x;
}

// FNV-1a: a seed that depends only on the case name (std::hash may differ between libraries).
uint64_t name_seed(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (char ch : s) h = (h ^ static_cast<unsigned char>(ch)) * 1099511628211ull;
  return h;
}

const char* specials_name(Specials s) {
  switch (s) {
    case Specials::None:
      return "none";
    case Specials::NonFinite:
      return "nonfinite";
    case Specials::All:
      return "all";
  }
  return "?";
}

}  // namespace

TensorMap case_feeds(const OpCase& c, DType dtype, const std::map<std::string, Shape>& shapes) {
  TensorMap feeds;
  uint64_t seed = name_seed(c.name + "/" + std::string(dtype_name(dtype)));
  int inputs = 0, params = 0, k = 0;
  for (const Sample& s : c.samples) {
    for (const Operand& o : s.operands) {
      std::string name = o.param ? "w" + std::to_string(params++) : "x" + std::to_string(inputs++);
      auto it = shapes.find(name);
      const Shape& shape = it == shapes.end() ? o.shape : it->second;
      feeds.emplace(name, operand_values(o, o.dtype.value_or(dtype), shape, seed + 7919 * k++));
    }
  }
  return feeds;
}

std::string test_name(std::string name) {
  for (char& ch : name)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return name;
}

std::string op_cases_json() {
  nlohmann::json out = nlohmann::json::array();
  for (const OpCase& c : op_cases()) {
    if (!runs_in(c, kPythonSuite)) continue;
    for (DType t : suite_dtypes(c, kPythonSuite)) {
      nlohmann::json leaves = nlohmann::json::array();
      int inputs = 0, params = 0;
      for (const Sample& s : c.samples) {
        for (const Operand& o : s.operands) {
          nlohmann::json l;
          l["name"] = o.param ? "w" + std::to_string(params++) : "x" + std::to_string(inputs++);
          l["param"] = o.param;
          l["dtype"] = std::string(dtype_name(o.dtype.value_or(t)));
          l["shape"] = o.shape.dims();
          l["lo"] = o.values.lo;
          l["hi"] = o.values.hi;
          l["ilo"] = o.values.ilo;
          l["ihi"] = o.values.ihi;
          l["specials"] = specials_name(o.values.specials);
          l["integral"] = o.values.integral;
          l["fixed"] = o.fixed;
          leaves.push_back(std::move(l));
        }
      }
      nlohmann::json e;
      e["name"] = c.name;
      e["op"] = std::string(op_name(c.op));
      e["dtype"] = std::string(dtype_name(t));
      e["ir"] = case_graph(c, t).to_string();
      e["leaves"] = std::move(leaves);
      out.push_back(std::move(e));
    }
  }
  return out.dump();
}

}  // namespace rlx::testing
