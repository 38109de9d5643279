// The CPU backend's programs (program.h): lowering a pipeline result to a schedule with one
// kernel per step, and the step loop shared by top-level graphs and region bodies.
#include "program.h"

#include <array>
#include <chrono>
#include <map>
#include <set>
#include <utility>

#include "rlx/ir/evaluator.h"

namespace rlx::cpu {
namespace {

// ---- kernel selection: the one place that asks the kernel table. Native kernels are only
// ever called when every result has elements; a node with some empty results runs the
// reference kernel.
KernelChoice select_kernel(const Graph& g, const Node& n, const BodyCompiler& bodies) {
  for (const TensorType& t : n.results)
    if (t.shape.numel() == 0) return {reference_kernel(g, n), false, "some results are empty"};
  return choose_kernel(g, n, &bodies);
}

// Fills p's canonical_output, external_output and step_redirects (program.h).
void find_external_outputs(Program& p) {
  const Graph& g = p.graph;
  const std::vector<Value>& outs = g.outputs();
  using Key = std::pair<int32_t, int32_t>;
  std::set<Key> viewed;
  for (const BufferAssignment& b : p.plan.buffers)
    if (b.is_view) viewed.insert({b.alias_of.node, b.alias_of.index});
  std::map<int32_t, size_t> step_of;  // node -> its step
  for (size_t s = 0; s < p.schedule.steps.size(); ++s) step_of[p.schedule.steps[s].node] = s;
  std::map<Key, size_t> first;  // value -> its canonical output
  p.canonical_output.resize(outs.size());
  p.external_output.assign(outs.size(), false);
  for (size_t i = 0; i < outs.size(); ++i) {
    Key key{outs[i].node, outs[i].index};
    auto [it, fresh] = first.emplace(key, i);
    p.canonical_output[i] = it->second;
    const Location& loc = p.schedule.outputs[i];
    auto step = step_of.find(outs[i].node);
    p.external_output[i] =
        fresh && loc.kind == Location::Kind::Arena && !viewed.count(key) && step != step_of.end() &&
        p.schedule.steps[step->second].results[static_cast<size_t>(outs[i].index)] == loc;
  }
  p.step_redirects.resize(p.schedule.steps.size());
  for (size_t s = 0; s < p.schedule.steps.size(); ++s) {
    const Node& n = g.node(p.schedule.steps[s].node);
    auto add = [&](Key key, bool result, size_t index) {
      auto it = first.find(key);
      if (it != first.end() && p.external_output[it->second])
        p.step_redirects[s].push_back(
            {static_cast<uint32_t>(it->second), result, static_cast<uint32_t>(index)});
    };
    for (size_t k = 0; k < n.operands.size(); ++k)
      add({n.operands[k].node, n.operands[k].index}, false, k);
    for (size_t r = 0; r < n.results.size(); ++r)
      add({p.schedule.steps[s].node, static_cast<int32_t>(r)}, true, r);
  }
}

}  // namespace

std::shared_ptr<Program> lower_program(const Graph& source, PipelineResult&& compiled,
                                       const BackendFacts& facts, const CompileOptions& options,
                                       bool body, const BodyCompiler& bodies) {
  auto program = std::make_shared<Program>();
  Program& p = *program;
  if (body) {
    p.init(source, std::move(compiled), Device::cpu(), {}, {});
  } else {
    p.init(source, std::move(compiled), Device::cpu(), options.quantized_params, options.state);
    p.profile = options.profile.value_or(ProfileMode::Off);
  }
  const Graph& g = p.graph;
  p.schedule = make_schedule(g, p.plan, p.inputs, p.params);
  p.scratch_offset = align64(p.schedule.arena_bytes);
  // Control-flow steps first: their kernels compile the bodies, whose blocks (the step's
  // scratch) and constants the memory check counts.
  const size_t steps = p.schedule.steps.size();
  std::vector<KernelChoice> choices(steps);
  p.step_bodies.resize(steps);
  p.step_profile.assign(steps, 0);
  p.profile_slots = steps;
  for (size_t i = 0; i < steps; ++i) {
    const Node& n = g.node(p.schedule.steps[i].node);
    if (!is_control_flow(n.op)) continue;
    choices[i] = select_kernel(g, n, bodies);
    p.scratch_bytes = std::max(p.scratch_bytes, align64(choices[i].scratch_bytes));
    p.step_bodies[i] = choices[i].bodies;
  }
  for (size_t i = 0; i < steps; ++i) {
    p.step_profile[i] = p.profile_slots;
    for (const RegionBody& b : p.step_bodies[i]) {
      p.profile_slots += b.program->profile_slots;
      p.body_constant_bytes += b.program->body_constant_bytes;
      for (const Tensor& c : b.program->constants)
        p.body_constant_bytes += static_cast<int64_t>(c.nbytes());
    }
  }
  // Before the dense constants below and the executable's arena are allocated.
  if (!body)
    check_program_memory(facts, options, p,
                         p.scratch_bytes > 0 ? p.block_bytes() - p.schedule.arena_bytes : 0,
                         p.body_constant_bytes);
  for (int32_t id : p.schedule.constants)  // splats stored dense: kernels read every element
    p.constants.push_back(evaluate_op(OpKind::Constant, {}, g.node(id).attrs)[0]);
  p.kernel_report.backend = "cpu";
  for (size_t i = 0; i < steps; ++i) {
    const ScheduleStep& step = p.schedule.steps[i];
    const Node& n = g.node(step.node);
    KernelChoice choice =
        is_control_flow(n.op) ? std::move(choices[i]) : select_kernel(g, n, bodies);
    p.step_kernels.push_back(std::move(choice.kernel));
    p.max_step_operands = std::max(p.max_step_operands, step.operands.size());
    p.max_step_results = std::max(p.max_step_results, step.results.size());
    p.kernel_report.nodes.push_back({step.node, n.op, choice.native ? "cpu" : "reference",
                                     n.results[0].dtype, choice.native,
                                     std::move(choice.fallback_reason)});
  }
  for (Value v : g.outputs()) p.output_types.push_back(g.type(v));
  find_external_outputs(p);
  if (RLX_POISON_ARENA) {
    for (const ScheduleStep& step : p.schedule.steps) {
      const Node& n = g.node(step.node);
      std::vector<ArenaRange>& ranges = p.step_arena_ranges.emplace_back();
      for (size_t i = 0; i < step.operands.size(); ++i)
        if (step.operands[i].kind == Location::Kind::Arena)
          ranges.push_back({step.operands[i].offset, byte_size(g.type(n.operands[i]))});
      for (size_t i = 0; i < step.results.size(); ++i)
        if (step.results[i].kind == Location::Kind::Arena)
          ranges.push_back({step.results[i].offset, byte_size(n.results[i])});
    }
    for (size_t i = 0; i < p.schedule.outputs.size(); ++i)
      if (p.schedule.outputs[i].kind == Location::Kind::Arena)
        p.output_arena_ranges.push_back(
            {p.schedule.outputs[i].offset, byte_size(p.output_types[i])});
  }
  return program;
}

void run_steps(const Program& p, const Bases& b, StepTime* times) {
  using Clock = std::chrono::steady_clock;
  // Pointer tables on the stack (a body runs once per iteration: no allocation there).
  constexpr size_t kInline = 64;
  std::array<const std::byte*, kInline> in_inline{};
  std::array<std::byte*, kInline> out_inline{};
  std::vector<const std::byte*> in_heap;
  std::vector<std::byte*> out_heap;
  const std::byte** in = in_inline.data();
  std::byte** out = out_inline.data();
  if (p.max_step_operands > kInline) {
    in_heap.resize(p.max_step_operands);
    in = in_heap.data();
  }
  if (p.max_step_results > kInline) {
    out_heap.resize(p.max_step_results);
    out = out_heap.data();
  }
  std::byte* scratch = b.block + p.scratch_offset;
  for (size_t i = 0; i < p.schedule.steps.size(); ++i) {
    const ScheduleStep& step = p.schedule.steps[i];
    for (size_t k = 0; k < step.operands.size(); ++k) in[k] = resolve(p, b, step.operands[k]);
    for (size_t k = 0; k < step.results.size(); ++k) out[k] = resolve(p, b, step.results[k]);
    if (b.outputs != nullptr) {
      for (const Program::Redirect& r : p.step_redirects[i]) {
        if (r.result)
          out[r.index] = b.outputs[r.output];
        else
          in[r.index] = b.outputs[r.output];
      }
    }
    auto run_step = [&](StepTime* body_times) {
      if (RLX_POISON_ARENA) {
        ArenaGuard guard(b.block, p.step_arena_ranges[i]);
        p.step_kernels[i](KernelIO{in, out, scratch, body_times});
      } else {
        p.step_kernels[i](KernelIO{in, out, scratch, body_times});
      }
    };
    if (times != nullptr) {
      Clock::time_point start = Clock::now();
      run_step(times + p.step_profile[i]);
      times[i].seconds += std::chrono::duration<double>(Clock::now() - start).count();
      ++times[i].calls;
    } else {
      run_step(nullptr);
    }
  }
}

}  // namespace rlx::cpu
