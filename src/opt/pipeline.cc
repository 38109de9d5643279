// The standard compile pipeline (ARCHITECTURE.md "Compile flow").
#include "rlx/opt/pipeline.h"

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "rlx/ir/error.h"
#include "rlx/opt/passes.h"
#include "rlx/opt/quantize_params.h"

namespace rlx {

PipelineResult run_standard_pipeline(const Graph& g, const PipelineOptions& o) {
  auto diags = g.verify();
  if (!diags.empty()) {
    std::string all;
    for (const auto& d : diags) all += "\n  " + d;
    throw Error("graph '" + g.name() + "' is invalid:" + all);
  }
  std::set<OpKind> supported = o.supported;
  if (supported.empty())
    for (int i = 0; i < kNumOps; ++i) supported.insert(static_cast<OpKind>(i));
  // A fusion runs only when the backend claims the fused op and dispatch lets it run natively
  // (attention=force_common must not be re-created by fuse-attention).
  auto claims = [&](OpKind op) {
    return supported.count(op) != 0 && o.dispatch.policy_for(op) != KernelDispatch::ForceCommon;
  };
  const std::optional<PrecisionPolicy>& precision = o.precision;

  // Quantized storage changes param types, so it comes before everything that reads them.
  PipelineResult r{
      o.quantized_params.empty() ? g : quantize_params(g, o.quantized_params), {}, {}, {}};
  PassManager pm;
  // Only graphs that draw from the compile seed get the pass (and its stage in IR dumps).
  bool unseeded = false;
  for (const Node& n : r.graph.nodes())
    unseeded = unseeded || (n.op == OpKind::RngKey && !n.attrs.has("seed"));
  if (unseeded) pm.add(create_bind_rng_seed_pass(o.seed));
  // Under always-f16 / always-bf16 AMP rounds every float value to the low dtype, so it would
  // also round the f32 statistics that the decompositions of the normalisations (and attention)
  // keep for f16 / bf16 (src/opt/decompose/nn.cc). Those composites, when they are to be
  // decomposed, are decomposed after AMP instead: AMP gives them low-precision operands as it
  // does a native kernel, and their decomposition then computes the statistics in f32.
  std::set<OpKind> deferred;
  if (precision && !precision->is_auto() && precision->low_dtype() != DType::f32) {
    for (OpKind op : {OpKind::Softmax, OpKind::LogSoftmax, OpKind::LayerNorm, OpKind::RmsNorm,
                      OpKind::FusedResidualLayerNorm, OpKind::FusedResidualRmsNorm,
                      OpKind::SoftmaxCrossEntropy, OpKind::Attention}) {
      KernelDispatch d = o.dispatch.policy_for(op);
      if (d == KernelDispatch::ForceCommon ||
          (d == KernelDispatch::PreferNative && !supported.count(op)))
        deferred.insert(op);
    }
  }
  DispatchReport before_amp;
  if (deferred.empty()) {
    pm.add(create_legalize_pass(supported, o.dispatch, o.backend, &r.report));
  } else {
    std::set<OpKind> keep = supported;
    DispatchOptions first = o.dispatch;
    for (OpKind op : deferred) {
      keep.insert(op);
      first.overrides[op] = KernelDispatch::PreferNative;
    }
    pm.add(create_legalize_pass(keep, first, o.backend, &before_amp));
  }
  if (o.dce) pm.add(create_dce_pass());
  if (o.fold_constants) pm.add(create_fold_constants_pass(o.fold_max_elements));
  pm.add(create_cse_pass());
  pm.add(create_simplify_pass());
  // Only graphs holding control flow get hoist-loop-invariants: after legalization (bodies hold
  // the ops the backend runs) and before the fusions (which then see the smaller bodies), with
  // a second cse that merges what different loops hoisted alike (the x @ U of a forward scan and
  // of the residual scan of its gradient).
  bool control_flow = false;
  for (const Node& n : r.graph.nodes()) control_flow = control_flow || is_control_flow(n.op);
  if (control_flow) {
    pm.add(create_hoist_loop_invariants_pass());
    pm.add(create_cse_pass());
  }
  if (claims(OpKind::QuantMatMul)) pm.add(create_fuse_quant_matmul_pass());
  if (claims(OpKind::Attention)) pm.add(create_fuse_attention_pass());
  // Backends without a native packed_qkv_attention (XLA) keep the transposes, which they fuse.
  if (claims(OpKind::Attention) && claims(OpKind::PackedQkvAttention))
    pm.add(create_fuse_packed_attention_pass());
  if (claims(OpKind::FusedMatMulBiasAct)) pm.add(create_fuse_matmul_bias_act_pass());
  // The pass creates both residual kinds, so the backend must claim both.
  if (claims(OpKind::FusedResidualLayerNorm) && claims(OpKind::FusedResidualRmsNorm))
    pm.add(create_fuse_residual_norm_pass());
  if (precision) pm.add(create_amp_pass(*precision, o.amp_in_bodies));
  if (!deferred.empty()) pm.add(create_legalize_pass(supported, o.dispatch, o.backend, &r.report));
  if (claims(OpKind::ElementwiseRegion)) pm.add(create_mark_elementwise_regions_pass());
  if (o.dce) pm.add(create_dce_pass());
  if (o.on_stage) {
    pm.print_ir_after({"all"});
    pm.set_ir_sink([&](std::string_view pass, std::string_view when, const Graph& after) {
      if (when == "after") o.on_stage(pass, after);
    });
  }
  pm.run(r.graph);
  r.timings = pm.timings();
  // Two legalizations: the second's report counts what runs (AMP's converts included); the
  // decompositions of both count.
  for (const auto& [op, counts] : before_amp.ops)
    if (r.report.ops.count(op) || counts.decomposed > 0)
      r.report.ops[op].decomposed += counts.decomposed;
  // Legalization ran before AMP, whose converts the backend must run too: an unclaimed op
  // there is an error like legalization's ("backend 'b' cannot run: convert (nodes %a, %b)").
  std::map<OpKind, std::vector<std::string>> unclaimed;
  for (const Node& n : r.graph.nodes())
    if (!op_info(n.op).has(kLeaf) && !supported.count(n.op)) unclaimed[n.op].push_back(n.name);
  if (!unclaimed.empty()) {
    std::string what;
    for (const auto& [op, names] : unclaimed) {
      what += (what.empty() ? "" : ", ") + std::string(op_name(op)) +
              (names.size() == 1 ? " (node" : " (nodes");
      for (size_t i = 0; i < names.size(); ++i) what += (i ? ", %" : " %") + names[i];
      what += ")";
    }
    throw Error("backend '" + o.backend + "' cannot run: " + what +
                (precision ? ", added by precision policy '" + to_string(*precision) + "'" : ""));
  }

  auto t0 = std::chrono::steady_clock::now();
  std::vector<int32_t> state;
  for (const std::string& name : o.state_inputs) {
    int32_t found = -1;
    for (int32_t id : r.graph.inputs())
      if (r.graph.node(id).name == name) found = id;
    check(found >= 0,
          "pipeline: state input '" + name + "' is not an input of graph '" + r.graph.name() + "'");
    state.push_back(found);
  }
  r.plan = plan_memory(r.graph, o.alignment, state);
  auto t1 = std::chrono::steady_clock::now();
  r.timings.push_back(
      {"memory-plan", std::chrono::duration<double, std::milli>(t1 - t0).count(), false});
  return r;
}

}  // namespace rlx
