// The standard compile pipeline a backend composes: verify -> quantized param storage ->
// bind-rng-seed -> legalize -> DCE -> fold -> CSE -> simplify -> [hoist-loop-invariants -> CSE,
// when the graph holds control flow] -> fusions (those the backend claims) -> AMP -> DCE -> memory
// plan. Under always-f16 / always-bf16 the normalisations and attention are legalized after AMP (a
// second legalize), so their decompositions keep f32 statistics.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "rlx/opt/legalize.h"
#include "rlx/opt/memory_plan.h"
#include "rlx/opt/pass.h"
#include "rlx/opt/precision.h"
#include "rlx/opt/quantize_params.h"

namespace rlx {

/// What a backend tells the pipeline, plus the user's switches (a backend builds it from its
/// CompileOptions with make_pipeline_options, rlx/runtime/backend_core.h). The pipeline reads
/// no environment variable for these (RLX_KERNEL_DISPATCH and RLX_PRECISION are resolved by
/// Session; DispatchOptions::from_env and precision_from_env read them for other callers).
struct PipelineOptions {
  std::string backend = "reference";
  /// Ops the backend runs natively; empty means every op (the reference evaluator).
  std::set<OpKind> supported;
  DispatchOptions dispatch;
  /// Absent: the graph keeps its dtypes. AMP runs after the fusions, so per-op overrides name
  /// the ops as they are then (fused_matmul_bias_act, attention, ...).
  std::optional<PrecisionPolicy> precision;
  /// AMP also re-types the bodies of cond / while_loop / scan (create_amp_pass's `in_bodies`).
  /// A backend that compiles each body through this pipeline itself sets it false (the CPU
  /// backend), so a body gets AMP once, after its own fusions, as a top-level graph does.
  bool amp_in_bodies = true;
  bool dce = true;
  bool fold_constants = true;
  /// Params stored block-quantized (rlx/opt/quantize_params.h): the pipeline starts from
  /// quantize_params(g, quantized_params), so the result's params have the packed types.
  std::map<std::string, QuantizedParamBinding> quantized_params;
  /// The key of every rng_key node without a seed attribute (CompileOptions::seed): the
  /// pipeline's first pass, bind-rng-seed (run only when the graph has such a node), writes it
  /// into those nodes.
  uint64_t seed = 0;
  int64_t fold_max_elements = int64_t{1} << 16;
  int64_t alignment = 64;  ///< memory-plan buffer alignment in bytes
  /// Inputs held as executable state (CompileOptions::state), in state order: the memory plan
  /// gives them storage of their own outside the arena (plan_memory). Each must name an input.
  std::vector<std::string> state_inputs;
  /// When set, called with each pass's name and the graph after it, in pipeline order (IR dumps
  /// of every stage, e.g. Session.compile(..., dump_stages=True) in Python). It replaces the
  /// PassManager's dump sink, so RLX_PRINT_IR_BEFORE/AFTER dumps are not printed while it is
  /// set.
  std::function<void(std::string_view pass, const Graph& after)> on_stage;
};

/// The pipeline's result: the graph the backend lowers, its memory plan, the dispatch report
/// and per-pass wall times.
struct PipelineResult {
  Graph graph;
  MemoryPlan plan;
  DispatchReport report;
  std::vector<PassTiming> timings;
};

/// Runs the standard pipeline on a copy of `g` (`g` is unchanged). A fusion pass runs only when
/// the backend claims the fused op it creates and the dispatch policy does not force it to
/// decompose. Throws rlx::Error when `g` fails verification
/// (listing the diagnostics) or legalization fails (listing every unsupported op), including for
/// the converts a precision policy inserts after legalization.
PipelineResult run_standard_pipeline(const Graph& g, const PipelineOptions& options);

}  // namespace rlx
