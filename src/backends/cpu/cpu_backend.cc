// The CPU backend: legalizes and plans a graph with the standard pipeline, lowers it to a flat
// schedule of kernel calls over one arena, and runs that schedule.
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <sstream>

#include "kernel.h"
#include "rlx/ir/error.h"
#include "rlx/opt/pipeline.h"
#include "rlx/runtime/backend.h"
#include "rlx/runtime/threading.h"

namespace rlx::cpu {
namespace {

// Where a value's bytes are at run time: a base (arena, an input, a param, a constant) plus a
// byte offset.
struct Slot {
  enum Kind : uint8_t { Arena, Input, Param, Constant } kind = Arena;
  int32_t index = 0;   // input / param / constant number
  int64_t offset = 0;  // bytes from the base
};

struct Step {
  int32_t node = 0;
  bool native = true;
  Kernel kernel;
  std::vector<Slot> in, out;
};

// Everything compile produces; shared read-only by an executable and its clones.
struct Program {
  Graph graph;
  MemoryPlan plan;
  DispatchReport report;
  std::vector<IoSpec> inputs, params, outputs;
  std::vector<Tensor> constants;
  std::vector<Step> steps;
  std::vector<Slot> output_slots;
  std::vector<TensorType> output_types;
  std::string kernel_report;
};

// Per-executable param bindings; shared by clones until one of them sets a param.
struct ParamStore {
  std::vector<Tensor> values;
  std::vector<bool> set;
};

// An aligned, zero-initialised block of bytes (the activation arena).
struct Arena {
  explicit Arena(int64_t bytes) {
    size_t n = static_cast<size_t>(bytes <= 0 ? 64 : (bytes + 63) / 64 * 64);
    ptr = static_cast<std::byte*>(std::aligned_alloc(64, n));
    check(ptr != nullptr, "cpu: cannot allocate an arena of " + std::to_string(n) + " bytes");
    std::memset(ptr, 0, n);
  }
  ~Arena() { std::free(ptr); }
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;
  std::byte* ptr = nullptr;
};

std::shared_ptr<const Program> lower(const Graph& source, PipelineResult&& compiled) {
  auto program = std::make_shared<Program>();
  Program& p = *program;
  p.graph = std::move(compiled.graph);
  p.plan = std::move(compiled.plan);
  p.report = std::move(compiled.report);
  const Graph& g = p.graph;

  for (int32_t id : source.inputs())
    p.inputs.push_back({source.node(id).name, source.node(id).results[0]});
  for (int32_t id : source.params())
    p.params.push_back({source.node(id).name, source.node(id).results[0]});
  for (size_t i = 0; i < source.outputs().size(); ++i) {
    Value v = source.outputs()[i];
    std::string name = source.node(v).name;
    if (source.node(v).results.size() > 1) name += "#" + std::to_string(v.index);
    p.outputs.push_back({name, source.type(v)});
  }

  // Slots of leaves first, then of every planned buffer.
  std::map<std::pair<int32_t, int32_t>, Slot> slots;
  std::map<std::string, int32_t> input_index, param_index;
  for (size_t i = 0; i < p.inputs.size(); ++i)
    input_index[p.inputs[i].name] = static_cast<int32_t>(i);
  for (size_t i = 0; i < p.params.size(); ++i)
    param_index[p.params[i].name] = static_cast<int32_t>(i);
  for (int32_t id = 0; id < static_cast<int32_t>(g.nodes().size()); ++id) {
    const Node& n = g.node(id);
    if (n.op == OpKind::Input) {
      slots[{id, 0}] = {Slot::Input, input_index.at(n.name), 0};
    } else if (n.op == OpKind::Param) {
      slots[{id, 0}] = {Slot::Param, param_index.at(n.name), 0};
    } else if (n.op == OpKind::Constant) {
      slots[{id, 0}] = {Slot::Constant, static_cast<int32_t>(p.constants.size()), 0};
      // Splat constants are stored dense here: kernels read every element.
      p.constants.push_back(evaluate_op(OpKind::Constant, {}, n.attrs)[0]);
    }
  }
  for (const BufferAssignment& b : p.plan.buffers) {
    Slot s{Slot::Arena, 0, b.offset};
    if (b.is_view) {
      const Node& src = g.node(b.alias_of);
      bool leaf_data =
          src.op == OpKind::Input || src.op == OpKind::Param || src.op == OpKind::Constant;
      if (leaf_data) {  // a view outside the arena: offset counts from the leaf's data
        s = slots.at({b.alias_of.node, b.alias_of.index});
        s.offset = b.offset;
      }
    }
    slots[{b.value.node, b.value.index}] = s;
  }

  // The schedule: one step per node that computes (views and leaf data have none).
  std::set<int32_t> computes;
  for (const BufferAssignment& b : p.plan.buffers)
    if (!b.is_view) computes.insert(b.value.node);
  std::map<OpKind, std::pair<int, int>> counts;  // native, reference
  std::set<std::string> fallbacks;               // "op (dtype): reason" of reference nodes
  for (int32_t id = 0; id < static_cast<int32_t>(g.nodes().size()); ++id) {
    const Node& n = g.node(id);
    if (n.op == OpKind::Input || n.op == OpKind::Param || n.op == OpKind::Constant) continue;
    if (!computes.count(id)) continue;  // every result is a view
    // A node without elements has nothing to compute. Native kernels are only ever called
    // when every result has elements; one with some empty results runs the reference kernel.
    int64_t empty = 0;
    for (const TensorType& t : n.results) empty += t.shape.numel() == 0;
    if (empty == static_cast<int64_t>(n.results.size())) continue;
    Step step;
    step.node = id;
    for (Value v : n.operands) step.in.push_back(slots.at({v.node, v.index}));
    for (int32_t r = 0; r < static_cast<int32_t>(n.results.size()); ++r)
      step.out.push_back(slots.at({id, r}));
    KernelChoice choice =
        empty == 0 ? choose_kernel(g, n)
                   : KernelChoice{reference_kernel(g, n), false, "some results have no elements"};
    step.kernel = std::move(choice.kernel);
    step.native = choice.native;
    if (!step.native)
      fallbacks.insert(std::string(op_name(n.op)) + " (" +
                       std::string(dtype_name(g.class_dtype(n))) + "): " + choice.fallback_reason);
    (step.native ? counts[n.op].first : counts[n.op].second) += 1;
    p.steps.push_back(std::move(step));
  }
  for (Value v : g.outputs()) {
    p.output_slots.push_back(slots.at({v.node, v.index}));
    p.output_types.push_back(g.type(v));
  }

  std::ostringstream report;
  report << "cpu kernels (native / reference fallback):\n";
  for (const auto& [op, c] : counts)
    report << "  " << op_name(op) << ": " << c.first << " / " << c.second << "\n";
  for (const std::string& f : fallbacks) report << "reference fallback: " << f << "\n";
  p.kernel_report = report.str();
  return program;
}

class CpuExecutable final : public Executable {
 public:
  CpuExecutable(std::shared_ptr<const Program> program, std::shared_ptr<ParamStore> params)
      : program_(std::move(program)),
        params_(std::move(params)),
        arena_(std::make_unique<Arena>(program_->plan.arena_bytes)) {}

  Capabilities capabilities() const override {
    return {.clone = true, .concurrent_clones = true, .typed_io = true, .zero_copy_params = true};
  }
  Device device() const override { return Device::cpu(); }
  const std::vector<IoSpec>& inputs() const override { return program_->inputs; }
  const std::vector<IoSpec>& params() const override { return program_->params; }
  const std::vector<IoSpec>& outputs() const override { return program_->outputs; }
  const Graph& compiled_graph() const override { return program_->graph; }
  const MemoryPlan& memory_plan() const override { return program_->plan; }
  const DispatchReport& dispatch_report() const override { return program_->report; }
  std::string kernel_report() const override { return program_->kernel_report; }

  void set_param(const std::string& name, const Tensor& value) override {
    const IoSpec& spec = find_spec(program_->params, name, "set_param", "param");
    check(value.type() == spec.type, "set_param '" + name + "': expected " + spec.type.to_string() +
                                         ", got " + value.type().to_string());
    size_t index = static_cast<size_t>(&spec - program_->params.data());
    std::lock_guard<std::mutex> lock(mu_);
    if (params_.use_count() > 1) params_ = std::make_shared<ParamStore>(*params_);  // copy on write
    params_->values[index] = value;
    params_->set[index] = true;
  }

  std::vector<Tensor> run(const TensorMap& inputs) override {
    check_run_inputs(program_->inputs, inputs);
    std::lock_guard<std::mutex> lock(mu_);
    check_params_set(program_->params, [&](size_t i) { return params_->set[i]; });
    std::vector<const std::byte*> feed(program_->inputs.size());
    for (size_t i = 0; i < feed.size(); ++i) feed[i] = inputs.at(program_->inputs[i].name).data();
    auto resolve = [&](const Slot& s) -> std::byte* {
      const std::byte* base = nullptr;
      switch (s.kind) {
        case Slot::Arena:
          base = arena_->ptr;
          break;
        case Slot::Input:
          base = feed[static_cast<size_t>(s.index)];
          break;
        case Slot::Param:
          base = params_->values[static_cast<size_t>(s.index)].data();
          break;
        case Slot::Constant:
          base = program_->constants[static_cast<size_t>(s.index)].data();
          break;
      }
      // Only arena slots are ever written (results never live in feeds, params or constants).
      return const_cast<std::byte*>(base) + s.offset;
    };
    bind_library_threads();
    std::vector<const std::byte*> in;
    std::vector<std::byte*> out;
    for (const Step& step : program_->steps) {
      in.clear();
      out.clear();
      for (const Slot& s : step.in) in.push_back(resolve(s));
      for (const Slot& s : step.out) out.push_back(resolve(s));
      step.kernel(KernelIO{in.data(), out.data()});
    }
    std::vector<Tensor> results;
    results.reserve(program_->output_slots.size());
    for (size_t i = 0; i < program_->output_slots.size(); ++i) {
      const TensorType& t = program_->output_types[i];
      Tensor o(t.dtype, t.shape);
      if (o.nbytes() > 0) std::memcpy(o.data(), resolve(program_->output_slots[i]), o.nbytes());
      results.push_back(std::move(o));
    }
    return results;
  }

  std::unique_ptr<Executable> clone() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return std::make_unique<CpuExecutable>(program_, params_);
  }

 private:
  std::shared_ptr<const Program> program_;
  std::shared_ptr<ParamStore> params_;
  std::unique_ptr<Arena> arena_;
  mutable std::mutex mu_;
};

class CpuBackend final : public Backend {
 public:
  std::string name() const override { return "cpu"; }
  DeviceKind device_kind() const override { return DeviceKind::Cpu; }

  // The data leaves the executor binds, and the kernel table's keys: every other primitive
  // (natively or, where its entry says so, on the reference kernel) and the composites with a
  // native kernel (decomposing the others into vectorized primitives is faster).
  std::set<OpKind> supported_ops() const override {
    std::set<OpKind> ops = kernel_table().keys();
    ops.insert({OpKind::Input, OpKind::Param, OpKind::Constant});
    return ops;
  }

  std::unique_ptr<Executable> compile(const Graph& graph, const CompileOptions& options,
                                      const Device& device) override {
    check(device.kind == DeviceKind::Cpu,
          "cpu backend cannot compile for device '" + device.to_string() + "'");
    if (!options.quantized_params.empty())
      throw Error("cpu backend: quantized params are not supported (param '" +
                  options.quantized_params.begin()->first + "' bound to format '" +
                  options.quantized_params.begin()->second.format + "')");
    // oneDNN sizes a primitive's parallel work when the kernel factories create it below, from
    // the calling thread's OpenMP setting: bind it now, not only in run().
    bind_library_threads();
    PipelineOptions po;
    po.backend = "cpu";
    po.supported = supported_ops();
    po.dispatch = options.dispatch;
    po.precision = options.precision;
    po.dce = options.dce;
    po.fold_constants = options.fold_constants;
    std::shared_ptr<const Program> program = lower(graph, run_standard_pipeline(graph, po));
    auto params = std::make_shared<ParamStore>();
    params->values.resize(program->params.size());  // bound by set_param
    params->set.assign(program->params.size(), false);
    return std::make_unique<CpuExecutable>(std::move(program), std::move(params));
  }
};

// Registers the CPU backend at static initialization (the library is linked whole).
const bool registered = [] {
  register_backend(std::make_shared<CpuBackend>());
  return true;
}();

}  // namespace
}  // namespace rlx::cpu
