// Graph-to-graph passes and the PassManager that runs a pipeline of them.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "rlx/ir/graph.h"

namespace rlx {

/// One graph transformation (XLA HloPassInterface, MLIR Pass). A pass must preserve the
/// graph's semantics as defined by the reference evaluator (within the tolerance of its
/// documented numeric changes, e.g. AMP), keep input/param names and the output count/types.
class Pass {
 public:
  virtual ~Pass() = default;
  /// Stable kebab-case name used in dumps, timings and RLX_PRINT_IR_* ("dce", "cse", ...).
  virtual std::string_view name() const = 0;
  /// Rewrites `g` in place; returns true when anything changed. Throws rlx::Error on input it
  /// cannot handle, leaving `g` unchanged.
  virtual bool run(Graph& g) = 0;
};

/// Runs `pass` on every body of the control-flow nodes (cond, while_loop, scan) of `g` — the
/// pass's own run() recurses into nested bodies — and rebuilds the nodes whose bodies changed.
/// For passes that keep a graph's inputs and output types (dce, cse, fold-constants, simplify
/// and amp call it at the end of run()), so a body keeps its signature. Bodies of other ops
/// (elementwise_region) are left alone: their bodies admit only elementwise ops. Returns true
/// when a body changed.
bool run_in_bodies(Pass& pass, Graph& g);

/// A body of a control-flow node handed to map_bodies: the node, the region's label
/// ("body", "cond", "branches[1]") and the body graph.
using BodyFn =
    std::function<std::optional<Graph>(const Node& node, const std::string& region, const Graph&)>;

/// Calls `fn` on every body of the control-flow nodes (cond, while_loop, scan) of `g` (not on
/// nested bodies: `fn` recurses if it wants to) and rebuilds, under their names, the nodes for
/// which `fn` returned a new body (nullopt: unchanged). The new body must keep the inputs and
/// output types of the old one. Returns true when a body changed. run_in_bodies and the
/// legalization of bodies (legalize()) are built on it.
bool map_bodies(Graph& g, const BodyFn& fn);

/// Wall time and outcome of one pass run.
struct PassTiming {
  std::string pass;
  double ms = 0;
  bool changed = false;
};

/// Runs passes in order. After each pass it verifies the graph when verification is on
/// (default: on in debug builds, i.e. without NDEBUG, or when RLX_VERIFY_IR=1), failing with
/// "pass 'NAME' produced an invalid graph: <diagnostics>". It times every pass and dumps the IR
/// before/after the passes named in RLX_PRINT_IR_BEFORE / RLX_PRINT_IR_AFTER (comma-separated
/// pass names, or "all") or set through the API; dumps go to stderr unless a sink is set.
class PassManager {
 public:
  PassManager();
  PassManager& add(std::unique_ptr<Pass> pass);
  template <class P, class... Args>
  PassManager& add(Args&&... args) {
    return add(std::make_unique<P>(std::forward<Args>(args)...));
  }

  /// Pass names ("all" for every pass) whose input / output IR is dumped; adds to the names
  /// taken from the environment at construction.
  void print_ir_before(std::vector<std::string> passes);
  void print_ir_after(std::vector<std::string> passes);
  /// Where dumps go: (pass name, "before"/"after", graph). Default: stderr, with a header line
  /// "// ----- IR after PASS -----".
  void set_ir_sink(
      std::function<void(std::string_view pass, std::string_view when, const Graph&)> sink);
  void set_verify(bool verify) { verify_ = verify; }

  /// Runs every pass on `g`; returns true when any changed it. On an error `g` holds the
  /// result of the passes that completed.
  bool run(Graph& g);

  const std::vector<PassTiming>& timings() const { return timings_; }
  /// One line per pass run: name, ms, changed.
  std::string timing_report() const;
  std::vector<std::string> pass_names() const;

 private:
  bool wants(const std::vector<std::string>& list, std::string_view pass) const;

  std::vector<std::unique_ptr<Pass>> passes_;
  std::vector<std::string> before_, after_;
  std::function<void(std::string_view, std::string_view, const Graph&)> sink_;
  bool verify_;
  std::vector<PassTiming> timings_;
};

}  // namespace rlx
