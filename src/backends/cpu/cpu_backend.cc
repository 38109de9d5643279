// The CPU backend: legalizes and plans a graph with the standard pipeline, creates one kernel
// per step of the device-neutral schedule (rlx/runtime/schedule.h) and runs them over one
// host arena. The shared plumbing (specs, params, validation, options) is rlx/runtime's.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <optional>
#include <set>

#include "program.h"
#include "rlx/ir/error.h"
#include "rlx/opt/pipeline.h"
#include "rlx/runtime/spmd.h"
#include "rlx/runtime/threading.h"

namespace rlx::cpu {
namespace {

// An aligned, zero-initialised block of bytes (the activation arena).
struct Arena {
  explicit Arena(int64_t bytes) {
    size_t n = static_cast<size_t>(bytes <= 0 ? 64 : (bytes + 63) / 64 * 64);
    ptr = static_cast<std::byte*>(std::aligned_alloc(64, n));
    check(ptr != nullptr, "cpu: cannot allocate an arena of " + std::to_string(n) + " bytes");
    std::memset(ptr, 0, n);
    size = n;
#if RLX_POISON_ARENA
    ASAN_POISON_MEMORY_REGION(ptr, size);
#endif
  }
  ~Arena() {
#if RLX_POISON_ARENA
    ASAN_UNPOISON_MEMORY_REGION(ptr, size);
#endif
    std::free(ptr);
  }
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;
  std::byte* ptr = nullptr;
  size_t size = 0;
};

// Compiles `graph` through the standard pipeline for the CPU backend under `options` into a
// Program; each region body is compiled the same way (the same pipeline options, without the
// top-level graph's state and quantized params), once, recursively.
std::shared_ptr<const Program> compile_program(const Graph& graph, const BackendFacts& facts,
                                               const CompileOptions& options, bool body) {
  PipelineOptions pipeline = make_pipeline_options(facts, options);
  // Each body runs this whole pipeline below (BodyCompiler), AMP included, after the body's
  // fusions; AMP at this level leaves the bodies alone so it does not come before them.
  pipeline.amp_in_bodies = false;
  if (body) {
    pipeline.state_inputs.clear();
    pipeline.quantized_params.clear();
  }
  BodyCompiler bodies = [&](const Graph& b) { return compile_program(b, facts, options, true); };
  return lower_program(graph, run_standard_pipeline(graph, pipeline), facts, options, body, bodies);
}

// Appends the profile rows of `p`'s steps (their StepTimes at `times`) to `rows`: each step,
// then the steps of its bodies (depth + 1, parent: the step's row, names qualified
// "step.region/"), recursively. A step's self time is its time less its bodies' steps'.
void append_rows(const Program& p, const StepTime* times, int depth, int32_t parent,
                 const std::string& prefix, std::vector<ExecutionProfile::NodeTotal>& rows) {
  for (size_t i = 0; i < p.schedule.steps.size(); ++i) {
    const Node& n = p.graph.node(p.schedule.steps[i].node);
    const auto row = static_cast<int32_t>(rows.size());
    rows.push_back({p.schedule.steps[i].node, prefix + n.name, n.op, times[i].calls,
                    times[i].seconds, times[i].seconds, depth, parent});
    const StepTime* body_times = times + p.step_profile[i];
    double inside = 0;
    for (const RegionBody& b : p.step_bodies[i]) {
      const size_t first = rows.size();
      append_rows(*b.program, body_times, depth + 1, row, prefix + n.name + "." + b.region + "/",
                  rows);
      for (size_t r = first; r < rows.size(); ++r)
        if (rows[r].parent == row) inside += rows[r].seconds;
      body_times += b.program->profile_slots;
    }
    rows[static_cast<size_t>(row)].self_seconds = std::max(0.0, times[i].seconds - inside);
  }
}

// State (CompileOptions::state) is a host tensor per state that the kernels read and write in
// place: the schedule locates the state input and the results planned in its storage there.
class CpuExecutable final : public ExecutableCore<Program, Tensor, Tensor> {
 public:
  CpuExecutable(std::shared_ptr<const Program> program, ParamBindings<Tensor> params)
      : ExecutableCore(std::move(program), std::move(params)),
        arena_(std::make_unique<Arena>(this->program().block_bytes())),
        times_(this->program().profile == ProfileMode::Off ? 0 : this->program().profile_slots) {}

  // RLX_PROFILE=1 (ProfileMode::Report): the table goes to stderr when the executable goes.
  ~CpuExecutable() override {
    if (program().profile != ProfileMode::Report) return;
    ExecutionProfile prof = profile();
    if (prof.empty()) return;
    std::string text =
        "rlx profile of graph '" + compiled_graph().name() + "' (cpu)\n" + prof.to_string();
    std::fputs(text.c_str(), stderr);
  }

  ExecutionProfile profile() const override {
    const Program& p = program();
    ExecutionProfile prof;
    if (p.profile == ProfileMode::Off) return prof;
    std::lock_guard<std::mutex> lock(profile_mu_);
    prof.runs = runs_;
    prof.run_seconds = run_seconds_;
    append_rows(p, times_.data(), 0, -1, "", prof.nodes);
    // Self times: a control-flow op's bodies count under their own ops, once.
    std::map<OpKind, ExecutionProfile::OpTotal> by_op;
    for (const ExecutionProfile::NodeTotal& n : prof.nodes) {
      ExecutionProfile::OpTotal& t = by_op[n.op];
      t.op = n.op;
      t.calls += n.calls;
      t.seconds += n.self_seconds;
    }
    for (const auto& [op, t] : by_op) prof.ops.push_back(t);
    std::stable_sort(prof.ops.begin(), prof.ops.end(),
                     [](const ExecutionProfile::OpTotal& a, const ExecutionProfile::OpTotal& b) {
                       if (a.seconds != b.seconds) return a.seconds > b.seconds;
                       return op_name(a.op) < op_name(b.op);
                     });
    return prof;
  }

  Capabilities capabilities() const override {
    return {.clone = true, .concurrent_clones = true, .typed_io = true, .zero_copy_params = true};
  }

  std::unique_ptr<Executable> clone() const override {
    auto c = std::make_unique<CpuExecutable>(program_ptr(), share_params());
    copy_state_to(*c);
    return c;
  }

 protected:
  // Zero copy: the binding is the caller's tensor (its storage is shared, not copied).
  Tensor bind_param(size_t, const Tensor& value) override { return value; }

  // State has storage of its own (kernels write it), never the caller's.
  Tensor make_state(size_t, const Tensor& value) override { return copy_of(value); }
  Tensor read_state(size_t, const Tensor& value) const override { return copy_of(value); }

  std::vector<Tensor> execute(const TensorMap& inputs, const ParamBindings<Tensor>& params,
                              std::vector<Tensor>& state) override {
    const Program& p = program();
    using Clock = std::chrono::steady_clock;
    // Profiling off: this bool is all it costs (no clock call, no lock).
    const bool timed = p.profile != ProfileMode::Off;
    std::unique_lock<std::mutex> profile_lock(profile_mu_, std::defer_lock);
    Clock::time_point run_start;
    if (timed) {
      profile_lock.lock();
      run_start = Clock::now();
    }
    // One table: the inputs' addresses, then each output's destination (Bases::outputs).
    const size_t n_out = p.schedule.outputs.size();
    std::vector<std::byte*> table(p.inputs.size() + n_out, nullptr);
    const std::byte** feed = const_cast<const std::byte**>(table.data());
    std::byte** dest = table.data() + p.inputs.size();
    for (size_t i = 0; i < p.inputs.size(); ++i) feed[i] = inputs.at(p.inputs[i].name).data();
    // The returned tensors, uninitialized: an output a step computes into an arena buffer of
    // its own (Program::external_output) is computed straight into its tensor (no copy, no
    // zero fill); the others are copied after the run. Unreturned external outputs (state)
    // stay at their planned location.
    std::vector<Tensor> results;
    results.reserve(p.returned.size());
    for (size_t i : p.returned) {
      results.push_back(uninitialized_tensor(p.output_types[i]));
      if (p.canonical_output[i] == i && p.external_output[i]) dest[i] = results.back().data();
    }
    Bases bases{arena_->ptr, feed, &params, &state, dest};
    for (size_t c = 0; c < n_out; ++c)
      if (p.external_output[c] && dest[c] == nullptr)
        dest[c] = cpu::resolve(p, bases, p.schedule.outputs[c]);
    bind_library_threads();
    run_steps(p, bases, timed ? times_.data() : nullptr);
    // A collective kernel's run error (kernels do not throw): groups that do not cover the
    // devices of the run, or a run_spmd aborted by another device's failure.
    if (std::optional<std::string> e = take_spmd_error()) throw Error(*e);
    std::optional<ArenaGuard> outputs_guard;
    if (RLX_POISON_ARENA) outputs_guard.emplace(arena_->ptr, p.output_arena_ranges);
    auto output = [&](size_t i) { return output_address(p, bases, i); };
    for (size_t r = 0; r < results.size(); ++r) {
      Tensor& o = results[r];
      const std::byte* src = output(p.returned[r]);
      if (o.nbytes() > 0 && src != o.data()) std::memcpy(o.data(), src, o.nbytes());
    }
    write_back_state(state, output);
    if (timed) {
      ++runs_;
      run_seconds_ += std::chrono::duration<double>(Clock::now() - run_start).count();
    }
    return results;
  }

 private:
  static Tensor copy_of(const Tensor& value) {
    Tensor t(value.dtype(), value.shape());
    if (t.nbytes() > 0) std::memcpy(t.data(), value.data(), t.nbytes());
    return t;
  }

  // A tensor of type `t` whose storage (64-byte aligned, as the arena) is not initialized:
  // every output is written in full by its step or copied, so a zero fill would be wasted.
  // Failing to allocate is the rlx::Error the Tensor constructor gives. The storage is a plain
  // operator new aligned by hand, not the aligned operator new: glibc raises its mmap threshold
  // when a plain block of up to 32 MiB is freed, so the next run's output of that size comes
  // from the heap, already mapped, while an aligned block is mapped and unmapped on every run
  // (a 2048 x 2048 f32 output: 4096 page faults per run, ~3 % of the 2-thread sgemm).
  static Tensor uninitialized_tensor(const TensorType& t) {
    constexpr size_t kAlign = 64;
    size_t bytes = std::max<size_t>(byte_size(t), 1);
    std::byte* raw = nullptr;
    try {
      raw = static_cast<std::byte*>(::operator new(bytes + kAlign - 1));
    } catch (const std::bad_alloc&) {
      throw Error("cannot allocate " + std::to_string(bytes) + " bytes for tensor " +
                  t.to_string());
    }
    auto address = reinterpret_cast<uintptr_t>(raw);
    std::byte* data = raw + ((kAlign - address % kAlign) % kAlign);
    std::shared_ptr<std::byte> storage(data, [raw](std::byte*) { ::operator delete(raw); });
    return Tensor::view_of(t.dtype, t.shape, data, std::move(storage));
  }

  // After a run: each state takes its bound output (`output(i)`: where output i of the run
  // is). An output the plan computed in the state's own storage (a dynamic_update_slice in
  // place over the state input) is already there; others are copied, through temporaries when
  // some source lies in a state's storage (one state's new value may be another's old
  // storage).
  template <class Output>
  void write_back_state(std::vector<Tensor>& state, const Output& output) {
    const Program& p = program();
    std::vector<std::pair<size_t, const std::byte*>> copies;
    bool staged = false;
    for (size_t j = 0; j < state.size(); ++j) {
      const Location& l = p.schedule.outputs[p.state_outputs[j]];
      const std::byte* src = output(p.state_outputs[j]);
      if (src == state[j].data() || state[j].nbytes() == 0) continue;
      copies.emplace_back(j, src);
      staged = staged || l.kind == Location::Kind::State;
    }
    std::vector<Tensor> temps;
    if (staged)
      for (auto& [j, src] : copies) {
        temps.push_back(copy_of(Tensor::borrow(state[j].dtype(), state[j].shape(), src)));
        src = temps.back().data();
      }
    for (const auto& [j, src] : copies) std::memcpy(state[j].data(), src, state[j].nbytes());
  }

  std::unique_ptr<Arena> arena_;  // guarded by the executable's lock (execute runs under it)
  // The profile (ProfileMode other than Off): written by execute, read by profile(), both
  // under profile_mu_ (profile() does not take the executable's lock).
  mutable std::mutex profile_mu_;
  std::vector<StepTime> times_;  // the program's profile slots (Program::profile_slots)
  int64_t runs_ = 0;
  double run_seconds_ = 0;
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
    BackendFacts facts = BackendFacts::of(*this);  // the graph's own dtypes by default
    check_compile_request(facts, device, graph, options);
    // oneDNN sizes a primitive's parallel work when the kernel factories create it below, from
    // the calling thread's OpenMP setting: bind it now, not only in run().
    bind_library_threads();
    std::shared_ptr<const Program> program = compile_program(graph, facts, options, false);
    ParamBindings<Tensor> params(program->params.size());  // bound by set_param
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
