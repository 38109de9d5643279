// The coverage matrix: every op of ops.def against every layer's table — inference, reference
// evaluator, decomposition, vjp, jvp, batching, the CPU kernel table (per dtype of the op's
// class), the StableHLO lowering, the Python builder method and the op-case table — failing on
// any hole that is not declared where the layer declares its intended holes (the CPU kernel
// table's fallbacks, autodiff's non-differentiable ops, kDeclaredHoles below). It writes the
// matrix into docs/ops.md and fails when the committed file differs (RLX_UPDATE_DOCS=1
// rewrites it).
#include "rlx/opt/coverage.h"

#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "../../src/backends/cpu/kernel.h"
#include "ops/op_case.h"
#include "rlx/autodiff/grad.h"
#include "rlx/autodiff/vmap.h"
#include "rlx/backends/pjrt/pjrt.h"
#include "rlx/io/atomic_file.h"
#include "rlx/ir/evaluator.h"
#include "rlx/opt/decompose.h"

namespace rlx {
namespace {

using testing::kCpuSuite;
using testing::kFdSuite;
using testing::kPjrtSuite;
using testing::kPythonSuite;
using testing::kTextSuite;
using testing::kVmapSuite;
using testing::OpCase;

// The layers (columns) of the matrix.
enum class Layer { Infer, Eval, Decompose, Vjp, Jvp, Batch, Cpu, Pjrt, Python, Cases };
constexpr std::array<const char*, 10> kLayerNames{
    "infer", "eval", "decompose", "vjp", "jvp", "batching", "cpu", "pjrt", "python", "cases"};
const char* layer_name(Layer l) { return kLayerNames[static_cast<size_t>(l)]; }

// Holes that are intended, each with its reason: the one place for layers whose own table has
// no way to declare one (the CPU kernel table declares its fallbacks, autodiff its
// non-differentiable ops). A declared hole's cell reads "no: <reason>", and the op needs no
// cases in that layer's suite.
struct DeclaredHole {
  Layer layer;
  OpKind op;
  const char* reason;
};

// The control-flow ops run everywhere; the Python parity suite is the one hole (its bodies are
// Python functions, tested in python/tests/test_control_flow*.py).
std::vector<DeclaredHole> control_flow_holes() {
  std::vector<DeclaredHole> out;
  for (OpKind op : {OpKind::Cond, OpKind::WhileLoop, OpKind::Scan}) {
    out.push_back({Layer::Python, op,
                   "bodies come from Python functions: python/tests/test_control_flow*.py check "
                   "them against jax.lax on the evaluator, the CPU backend and pjrt:0"});
  }
  return out;
}
// The collectives run on the reference evaluator's and the CPU backend's simulated device axis
// (evaluate_spmd, run_spmd) and on XLA replicas (tests/backends/pjrt/collective_run_test.cc);
// the op-case suites run one device.
std::vector<DeclaredHole> collective_holes() {
  std::vector<DeclaredHole> out;
  for (OpKind op :
       {OpKind::AllReduce, OpKind::AllGather, OpKind::ReduceScatter, OpKind::AllToAll}) {
    out.push_back({Layer::Pjrt, op,
                   "the op-case suite runs one device: collective_run_test.cc runs them on "
                   "XLA replicas against evaluate_spmd"});
    out.push_back({Layer::Python, op,
                   "the JAX parity suite has no named axis: python/tests/test_collectives.py "
                   "checks them against jax.vmap(axis_name) and NumPy"});
  }
  return out;
}
const std::vector<DeclaredHole> kDeclaredHoles = [] {
  std::vector<DeclaredHole> all = control_flow_holes();
  for (const DeclaredHole& h : collective_holes()) all.push_back(h);
  all.push_back({Layer::Python, OpKind::CustomCall,
                 "a custom op has no jax counterpart: python/tests/test_custom_ops.py checks "
                 "rlx.custom_vjp and rlx.pure_callback against jax"});
  return all;
}();

const DeclaredHole* declared(Layer layer, OpKind op) {
  for (const DeclaredHole& h : kDeclaredHoles)
    if (h.layer == layer && h.op == op) return &h;
  return nullptr;
}

// One cell: its text in the published matrix and whether it is a hole.
struct Cell {
  Cell(std::string t = "", bool h = false, std::string w = "")
      : text(std::move(t)), hole(h), why(std::move(w)) {}
  std::string text;
  bool hole = false;
  std::string why;  // the hole's description, for the failure message
};

bool is_data_leaf(OpKind op) {
  return op == OpKind::Input || op == OpKind::Param || op == OpKind::Constant;
}

// The Python layer's builder methods (rlx._core.builder_methods()), read by running the
// Python package of this build tree; nullopt when the tree has no Python package.
std::optional<std::map<std::string, std::string>> python_builders() {
  const std::string dir = RLX_PYTHON_PACKAGE_DIR;
  if (dir.empty()) return std::nullopt;
  std::string cmd =
      "PYTHONPATH='" + dir +
      "' python3 -c 'import json, rlx; print(json.dumps(rlx._core.builder_methods()))'";
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(cmd.c_str(), "r"), pclose);
  if (!pipe) return std::nullopt;
  std::string out;
  std::array<char, 4096> buf{};
  while (size_t n = fread(buf.data(), 1, buf.size(), pipe.get())) out.append(buf.data(), n);
  auto j = nlohmann::json::parse(out, nullptr, false);
  if (j.is_discarded()) return std::nullopt;
  return j.get<std::map<std::string, std::string>>();
}

// The cases of `op` by suite.
std::map<uint32_t, int> case_counts(OpKind op) {
  std::map<uint32_t, int> n;
  for (const OpCase& c : testing::op_cases()) {
    if (c.op != op) continue;
    for (uint32_t s : {kTextSuite, kFdSuite, kVmapSuite, kCpuSuite, kPjrtSuite, kPythonSuite})
      if (testing::runs_in(c, static_cast<testing::Suite>(s))) ++n[s];
  }
  return n;
}

// jvp works by transposing the vjp, so its column is a transform actually run: jvp() of the
// op's first finite-difference case, which fails if a rule emits an op with no vjp.
Cell jvp_cell(OpKind op) {
  autodiff::VjpSupport s = autodiff::vjp_support(op);
  if (s == autodiff::VjpSupport::Leaf) return {"leaf"};
  if (s == autodiff::VjpSupport::NonDifferentiable) return {"zero"};
  if (s == autodiff::VjpSupport::Missing) return {"MISSING", true, "no vjp to transpose"};
  for (const OpCase& c : testing::op_cases()) {
    if (c.op != op || !testing::runs_in(c, kFdSuite)) continue;
    Graph g = testing::case_graph(c, DType::f64);
    std::vector<std::string> primals;
    for (int32_t id : g.inputs())
      if (is_float(g.node(id).results[0].dtype)) primals.push_back(g.node(id).name);
    if (primals.empty()) continue;
    try {
      autodiff::jvp(g, primals);
      return {"transposed vjp"};
    } catch (const std::exception& e) {
      return {"MISSING", true, std::string("jvp of case ") + c.name + " throws: " + e.what()};
    }
  }
  return {"MISSING", true, "no finite-difference case to run jvp on"};
}

Cell cpu_cell(OpKind op) {
  if (is_data_leaf(op)) return {"data"};
  if (op == OpKind::CustomCall && cpu::kernel_table().contains(op))
    return {"the custom op's CPU kernel, else its decomposition, else its reference kernel"};
  const cpu::KernelEntry* e = cpu::kernel_table().find(op);
  if (e == nullptr) {
    if (op_info(op).has(kComposite)) return {"decomposed"};
    return {"MISSING", true, "no CPU kernel table entry (a primitive needs one)"};
  }
  if (e->region != nullptr) return {"native"};
  if (e->factory == nullptr)
    return {"reference (" + e->fallback + ")", e->fallback.empty(),
            "reference-only entry without a stated reason"};
  DTypeSet rest = op_info(op).dtypes - e->native;
  if (rest.empty()) return {"native"};
  if (e->fallback.empty())
    return {"MISSING", true,
            "dtypes " + rest.to_string() +
                " have neither a native kernel nor a "
                "declared fallback"};
  return {"native; " + rest.to_string() + ": reference (" + e->fallback + ")"};
}

Cell pjrt_cell(OpKind op) {
  if (pjrt::native_ops().count(op)) return {"native"};
  if (op == OpKind::CustomCall) return {"the custom op's decomposition (else an error naming it)"};
  if (const DeclaredHole* h = declared(Layer::Pjrt, op)) return {std::string("no: ") + h->reason};
  if (op_info(op).has(kComposite)) return {"decomposed"};
  return {"MISSING", true, "no StableHLO lowering and no decomposition"};
}

struct Row {
  OpKind op;
  std::map<Layer, Cell> cells;
};

Row make_row(OpKind op, const std::optional<std::map<std::string, std::string>>& py) {
  const OpInfo& info = op_info(op);
  const bool leaf = op == OpKind::Input || op == OpKind::Param;
  Row r{op, {}};
  r.cells[Layer::Infer] = leaf         ? Cell{"decl"}
                          : info.infer ? Cell{"yes"}
                                       : Cell{"NO", true, "no inference"};
  r.cells[Layer::Eval] = leaf                ? Cell{"feed"}
                         : has_evaluator(op) ? Cell{"yes"}
                                             : Cell{"NO", true, "no reference kernel"};
  if (info.has(kComposite))
    r.cells[Layer::Decompose] =
        has_decomposition(op) ? Cell{"yes"} : Cell{"NO", true, "composite without decomposition"};
  else
    r.cells[Layer::Decompose] =
        has_decomposition(op) ? Cell{"yes", true, "a primitive has a decomposition"} : Cell{"-"};
  autodiff::VjpSupport v = autodiff::vjp_support(op);
  r.cells[Layer::Vjp] = {autodiff::vjp_support_name(v), v == autodiff::VjpSupport::Missing,
                         "no vjp rule, no decomposition and not declared non-differentiable"};
  r.cells[Layer::Jvp] = jvp_cell(op);
  autodiff::BatchSupport b = autodiff::batch_support(op);
  r.cells[Layer::Batch] = {autodiff::batch_support_name(b), b == autodiff::BatchSupport::Missing,
                           "no batching rule and no decomposition"};
  r.cells[Layer::Cpu] = cpu_cell(op);
  r.cells[Layer::Pjrt] = pjrt_cell(op);
  if (py) {
    auto it = py->find(std::string(op_name(op)));
    r.cells[Layer::Python] = it != py->end() ? Cell{"`" + it->second + "`"}
                             : declared(Layer::Python, op)
                                 ? Cell{std::string("no: ") + declared(Layer::Python, op)->reason}
                                 : Cell{"MISSING", true, "no rlx.Graph builder method"};
  } else {
    r.cells[Layer::Python] = {"not built"};
  }
  // A declared hole replaces whatever the layer's table says.
  for (auto& [layer, cell] : r.cells)
    if (const DeclaredHole* h = declared(layer, op); h && cell.hole)
      cell = Cell{std::string("no: ") + h->reason};
  // Cases: every op has some in the text, CPU and Python suites; differentiable ops in the
  // finite-difference suite; non-leaf ops in vmap; ops PJRT runs in the PJRT suite; none in
  // the suite of a layer with a declared hole.
  std::map<uint32_t, int> n = case_counts(op);
  std::string missing;
  auto need = [&](uint32_t s, const char* name, bool required) {
    if (required && n[s] == 0) missing += std::string(missing.empty() ? "" : ", ") + name;
  };
  bool differentiable = v == autodiff::VjpSupport::Rule || v == autodiff::VjpSupport::Decomposition;
  need(kTextSuite, "text", true);
  need(kCpuSuite, "cpu", !declared(Layer::Cpu, op));
  need(kPythonSuite, "python", !declared(Layer::Python, op) && !declared(Layer::Cpu, op));
  need(kFdSuite, "fd", differentiable);
  need(kVmapSuite, "vmap", !info.has(kLeaf) && !declared(Layer::Batch, op));
  need(kPjrtSuite, "pjrt", !r.cells[Layer::Pjrt].hole && !declared(Layer::Pjrt, op));
  std::string counts = std::to_string(n[kTextSuite]) + " / " + std::to_string(n[kFdSuite]) + " / " +
                       std::to_string(n[kVmapSuite]) + " / " + std::to_string(n[kCpuSuite]) +
                       " / " + std::to_string(n[kPjrtSuite]) + " / " +
                       std::to_string(n[kPythonSuite]);
  r.cells[Layer::Cases] = {counts, !missing.empty(), "no op case for the suites " + missing};
  return r;
}

std::vector<Row> matrix(const std::optional<std::map<std::string, std::string>>& py) {
  std::vector<Row> rows;
  for (int i = 0; i < kNumOps; ++i) rows.push_back(make_row(static_cast<OpKind>(i), py));
  return rows;
}

std::string markdown(const std::vector<Row>& rows) {
  std::string out = "| op | dtypes |";
  for (const char* l : kLayerNames) out += std::string(" ") + l + " |";
  out += "\n|---|---|";
  for (size_t i = 0; i < kLayerNames.size(); ++i) out += "---|";
  out += "\n";
  for (const Row& r : rows) {
    const DTypeSet d = op_info(r.op).dtypes;
    std::string dtypes = d == kAnyDTypes         ? "any"
                         : d == kFloatDTypes     ? "float"
                         : d == kNumericDTypes   ? "numeric"
                         : d == kIntOrBoolDTypes ? "int, bool"
                                                 : d.to_string();
    out += "| `" + std::string(op_name(r.op)) + "` | " + dtypes + " |";
    for (size_t i = 0; i < kLayerNames.size(); ++i)
      out += " " + r.cells.at(static_cast<Layer>(i)).text + " |";
    out += "\n";
  }
  return out;
}

const char* const kMarker =
    "<!-- Generated below by tests/ops/coverage_test.cc (RLX_UPDATE_DOCS=1 ctest -R "
    "OpCoverage rewrites it); do not edit by hand. -->\n";

TEST(OpCoverage, EveryOpOfEveryLayerOrADeclaredHole) {
  std::optional<std::map<std::string, std::string>> py = python_builders();
  if (std::string(RLX_PYTHON_PACKAGE_DIR).empty())
    std::printf("python column: this build has no Python package (RLX_BUILD_PYTHON=OFF)\n");
  else
    ASSERT_TRUE(py.has_value()) << "could not run the Python package in " RLX_PYTHON_PACKAGE_DIR
                                   " to read rlx._core.builder_methods()";
  int holes = 0;
  for (const Row& r : matrix(py)) {
    for (const auto& [layer, cell] : r.cells) {
      if (!cell.hole) continue;
      ++holes;
      ADD_FAILURE() << "op '" << op_name(r.op) << "', layer " << layer_name(layer) << ": "
                    << cell.why;
    }
  }
  std::printf("coverage matrix: %d ops x %zu layers, %d holes, %zu op cases\n", kNumOps,
              kLayerNames.size(), holes, testing::op_cases().size());
}

TEST(OpCoverage, MnemonicsAreUniqueAndResolve) {
  for (int i = 0; i < kNumOps; ++i) {
    auto op = static_cast<OpKind>(i);
    EXPECT_EQ(op_from_name(op_name(op)), op) << op_name(op);
  }
  EXPECT_EQ(op_from_name("no_such_op"), std::nullopt);
}

// docs/ops.md: prose, then (after kMarker) the op reference of `rlx ops --markdown` and the
// coverage matrix.
TEST(OpCoverage, PublishedDocIsCurrent) {
  std::optional<std::map<std::string, std::string>> py = python_builders();
  if (!py) GTEST_SKIP() << "no Python package in this build: the matrix would lack a column";
  const std::string path = RLX_TEST_DATA_DIR "/../docs/ops.md";
  std::ifstream in(path);
  ASSERT_TRUE(in) << path << " is missing";
  std::stringstream ss;
  ss << in.rdbuf();
  std::string doc = ss.str();
  size_t at = doc.find(kMarker);
  ASSERT_NE(at, std::string::npos) << path << " lacks the generated-section marker";
  std::string want = doc.substr(0, at) + kMarker + "\n## Op reference\n\n" +
                     op_coverage_table(true) + "\n## Coverage matrix\n\n" + markdown(matrix(py));
  if (const char* u = std::getenv("RLX_UPDATE_DOCS"); u != nullptr && std::string(u) == "1") {
    write_file_atomically(path, want);
    std::printf("rewrote %s\n", path.c_str());
    return;
  }
  if (doc == want) return;
  std::istringstream a(doc), b(want);
  std::string la, lb;
  int line = 1;
  while (std::getline(a, la) && std::getline(b, lb) && la == lb) ++line;
  ADD_FAILURE() << path << " is out of date (first difference at line " << line
                << ":\n  file: " << la << "\n  now:  " << lb
                << ")\nrun RLX_UPDATE_DOCS=1 ./build/rlx_ops_tests to rewrite it";
}

}  // namespace
}  // namespace rlx
