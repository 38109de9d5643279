// What every backend shares, so that a backend writes only device code: the compile front
// (request checks, CompileOptions -> PipelineOptions), the program description every
// executable exposes (IO specs, compiled graph, plan, reports), param bindings shared by clones
// with copy-on-write, and an Executable base class that validates set_param and run.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "rlx/ir/error.h"
#include "rlx/opt/pipeline.h"
#include "rlx/runtime/backend.h"
#include "rlx/runtime/executable.h"
#include "rlx/runtime/memory_limit.h"

namespace rlx {

// ---- compile front

/// What a backend tells the shared compile steps about itself.
struct BackendFacts {
  /// Short name used in reports and errors ("cpu"): Backend::name().
  std::string name;
  DeviceKind device_kind = DeviceKind::Cpu;
  /// Ops it runs natively: Backend::supported_ops().
  std::set<OpKind> supported;
  /// The precision policy when CompileOptions::precision is absent (PJRT: AutoMixedBf16);
  /// absent: the graph keeps its own dtypes (CPU).
  std::optional<PrecisionPolicy> default_precision;
  /// The facts `backend` states through its interface: name(), device_kind() and
  /// supported_ops(); no default precision.
  static BackendFacts of(const Backend& backend);
};

/// Checks a compile request before any work: `device` must be of the backend's kind ("cpu
/// backend cannot compile for device 'cuda:0'"). Throws rlx::Error.
void check_compile_request(const BackendFacts& backend, const Device& device);
/// check_compile_request(backend, device), then the state bindings of `options` against
/// `graph` (io_specs_of), so that a bad binding fails before the pipeline runs.
void check_compile_request(const BackendFacts& backend, const Device& device, const Graph& graph,
                           const CompileOptions& options);

/// The standard pipeline's options for `backend` under `options`: its name and supported ops,
/// options.dispatch (absent: the defaults, PreferNative), options.precision (absent:
/// backend.default_precision), the DCE / folding switches, the quantized param bindings and the
/// state inputs. Reads no environment variable (Session resolves those into `options`).
PipelineOptions make_pipeline_options(const BackendFacts& backend, const CompileOptions& options);

/// Input, param and output specs of a graph given to compile, in graph order: inputs and
/// params by node name and type, outputs named "node" or, for result i of a multi-result
/// node, "node#i" (Executable::outputs()). With state bindings (CompileOptions::state), their
/// inputs and outputs are left out of `inputs` / `outputs` and described by `state`.
struct IoSpecs {
  std::vector<IoSpec> inputs, params, outputs;
  std::vector<StateSpec> state;
  /// For each entry of `outputs`, its index among the graph's outputs.
  std::vector<size_t> returned;
  /// For each entry of `state`, the index of its output among the graph's outputs.
  std::vector<size_t> state_outputs;
};
/// The specs of `source` under `state` bindings. Throws rlx::Error "state binding 'k' <- 'o':
/// ..." when the input is not a graph input, the output not a graph output, their types differ
/// ("input f32[2,8] but output f32[2,4]"), or an input or output is bound twice.
IoSpecs io_specs_of(const Graph& source, const std::vector<StateBinding>& state = {});

// ---- the executable side

/// What a compile produced that every executable exposes, shared read-only by an executable
/// and its clones. A backend's own program type derives from it and adds its device program.
struct ProgramInfo {
  Graph graph;                                  ///< the graph as compiled (after the pipeline)
  MemoryPlan plan;                              ///< its memory plan
  DispatchReport dispatch;                      ///< legalization's report
  KernelReport kernel_report;                   ///< how each node runs (the backend fills it)
  std::vector<IoSpec> inputs, params, outputs;  ///< from the source graph (io_specs_of)
  std::vector<StateSpec> state;                 ///< CompileOptions::state, in its order
  std::vector<size_t> returned;       ///< per entry of `outputs`: its index in graph.outputs()
  std::vector<size_t> state_outputs;  ///< per entry of `state`: its output's graph.outputs() index
  Device device;
  /// What an executable of it holds (Executable::planned_memory); set by check_program_memory.
  PlannedMemory memory;

  /// Fills everything but `kernel_report` from the graph given to compile and the pipeline's
  /// result (moved from); the params bound in `quantized` get their packed types and
  /// IoSpec::quantized; `state` are the options' state bindings (io_specs_of).
  void init(const Graph& source, PipelineResult&& compiled, const Device& on,
            const std::map<std::string, QuantizedParamBinding>& quantized,
            const std::vector<StateBinding>& state = {});
};

/// Records in `program.memory` what an executable of `program` will hold (planned_memory:
/// arena, params, constants, outputs, state; plus `bodies` bytes of control-flow bodies beyond
/// the arena and `body_constants` bytes of their constants, for a backend that compiles bodies
/// on their own: PlannedMemory::bodies) and checks it against options.memory_limit (absent:
/// physical memory): throws rlx::Error naming `backend` and the planned sizes when it is more
/// (check_memory_limit in memory_limit.h). Backends call it once the program is planned
/// (right after ProgramInfo::init, or after compiling its bodies), before allocating its arena.
void check_program_memory(const BackendFacts& backend, const CompileOptions& options,
                          ProgramInfo& program, int64_t bodies = 0, int64_t body_constants = 0);

/// The values bound to an executable's params, by param index, shared between an executable
/// and its clones until one of them binds a param (copy on write: the binder gets its own copy
/// of every binding first, so the others keep theirs). `Value` is what the backend keeps per
/// param: a host Tensor (CPU: the caller's tensor, zero copy), a device buffer (PJRT). Copying
/// a ParamBindings shares the bindings; a ParamBindings object is not synchronized (its
/// executable guards it with its mutex).
template <class Value>
class ParamBindings {
 public:
  /// `count` params, none bound.
  explicit ParamBindings(size_t count = 0) : store_(std::make_shared<Store>(count)) {}

  size_t size() const { return store_->values.size(); }
  bool is_set(size_t index) const { return store_->set[index]; }
  /// True when every param is bound (O(1): the run() hot path asks this).
  bool all_set() const { return store_->unset == 0; }
  /// The value bound to param `index` (a default Value when not bound).
  const Value& operator[](size_t index) const { return store_->values[index]; }

  /// Binds param `index` (< size()), copying the bindings first when they are shared.
  void set(size_t index, Value value) {
    if (store_.use_count() > 1) store_ = std::make_shared<Store>(*store_);
    Store& s = *store_;
    if (!s.set[index]) {
      s.set[index] = true;
      --s.unset;
    }
    s.values[index] = std::move(value);
  }

 private:
  struct Store {
    explicit Store(size_t count) : values(count), set(count, false), unset(count) {}
    std::vector<Value> values;
    std::vector<bool> set;
    size_t unset;
  };
  std::shared_ptr<Store> store_;
};

/// The storage of an executable's state (CompileOptions::state): one backend value per state
/// (CPU: a host tensor the kernels write in place; PJRT: a device buffer). Executables that
/// share_state hold one store; its mutex is held through each run and state access.
template <class StateValue>
struct StateStore {
  std::mutex mu;
  /// By state index; empty while every state is zeros (allocated at the first use, so that an
  /// executable that will share another's state never allocates its own).
  std::vector<StateValue> values;
};

/// An Executable over a backend's `Program` (derived from ProgramInfo) with params stored as
/// `ParamValue` and state (CompileOptions::state) as `StateValue`. It implements the shared part
/// of the interface — the specs and reports, set_param (validated, then bind_param, then a
/// copy-on-write binding), run (inputs and params validated, all before execute) and the state
/// API — and leaves the device part to the backend: capabilities(), clone(), bind_param(),
/// make_state(), read_state() and execute().
///
/// Thread safety: one mutex per executable serializes set_param's binding, run and clone;
/// execute() runs under it, so per-executable state of the backend (e.g. its arena) needs no
/// lock of its own. Clones are separate objects: they run concurrently, sharing the program
/// (read-only) and, until one binds a param, the bindings. The state store has its own mutex,
/// taken after the executable's.
template <class Program, class ParamValue, class StateValue = ParamValue>
class ExecutableCore : public Executable {
  static_assert(std::is_base_of_v<ProgramInfo, Program>, "Program must derive from ProgramInfo");

 public:
  Device device() const final { return program_->device; }
  const std::vector<IoSpec>& inputs() const final { return program_->inputs; }
  const std::vector<IoSpec>& params() const final { return program_->params; }
  const std::vector<IoSpec>& outputs() const final { return program_->outputs; }
  const Graph& compiled_graph() const final { return program_->graph; }
  const MemoryPlan& memory_plan() const final { return program_->plan; }
  PlannedMemory planned_memory() const final { return program_->memory; }
  const DispatchReport& dispatch_report() const final { return program_->dispatch; }
  const KernelReport& kernels() const final { return program_->kernel_report; }
  const std::vector<StateSpec>& state() const final { return program_->state; }

  void set_param(const std::string& name, const Tensor& value) final {
    size_t index = check_param_binding(program_->params, name, value);
    const IoSpec& spec = program_->params[index];
    // e.g. a device upload: outside the lock, as is packing a quantized param's f32 data.
    ParamValue bound =
        spec.quantized && value.type() != spec.type
            ? bind_param(index, pack_quantized_param(value, spec.quantized->binding, name))
            : bind_param(index, value);
    std::lock_guard<std::mutex> lock(mu_);
    params_.set(index, std::move(bound));
  }

  std::vector<Tensor> run(const TensorMap& inputs) final {
    return locked_run(
        inputs, [&](std::vector<StateValue>& state) { return execute(inputs, params_, state); });
  }

  AsyncResult run_async(const TensorMap& inputs) final {
    return locked_run(inputs, [&](std::vector<StateValue>& state) {
      std::string label = "run " + std::to_string(++async_runs_) + " of '" +
                          program_->graph.name() + "' on " + program_->device.to_string();
      return execute_async(inputs, params_, state, label);
    });
  }

  void set_state(const std::string& name, const Tensor& value) final {
    size_t index = check_state_access(program_->state, name, "set_state", &value);
    StateValue v = make_state(index, value);  // e.g. a device upload: outside the locks
    std::shared_ptr<StateStore<StateValue>> store = state_store();
    std::lock_guard<std::mutex> lock(store->mu);
    materialize(*store);
    store->values[index] = std::move(v);
  }

  Tensor get_state(const std::string& name) const final {
    size_t index = check_state_access(program_->state, name, "get_state");
    std::shared_ptr<StateStore<StateValue>> store = state_store();
    std::lock_guard<std::mutex> lock(store->mu);
    const TensorType& t = program_->state[index].type;
    if (store->values.empty()) return Tensor(t.dtype, t.shape);  // zeros
    return read_state(index, store->values[index]);
  }

  void reset_state() final {
    std::shared_ptr<StateStore<StateValue>> store = state_store();
    std::lock_guard<std::mutex> lock(store->mu);
    store->values.clear();  // zeros, allocated again at the next use
  }

  void share_state(const Executable& other) final {
    const auto* o = dynamic_cast<const ExecutableCore*>(&other);
    check(o != nullptr, "share_state: the other executable (on " + other.device().to_string() +
                            ") is not of this executable's backend (" + device().to_string() + ")");
    check(o->device() == device(), "share_state: the other executable runs on " +
                                       o->device().to_string() + ", this one on " +
                                       device().to_string());
    const std::vector<StateSpec>&mine = program_->state, &theirs = o->state();
    for (size_t i = 0; i < std::max(mine.size(), theirs.size()); ++i) {
      std::string a = i < mine.size() ? "'" + mine[i].name + "' " + mine[i].type.to_string()
                                      : std::string("nothing");
      std::string b = i < theirs.size() ? "'" + theirs[i].name + "' " + theirs[i].type.to_string()
                                        : std::string("nothing");
      check(a == b, "share_state: state " + std::to_string(i) + " is " + a + " here but " + b +
                        " in the other executable");
    }
    std::shared_ptr<StateStore<StateValue>> store = o->state_store();
    std::lock_guard<std::mutex> lock(mu_);
    state_ = std::move(store);
  }

 protected:
  ExecutableCore(std::shared_ptr<const Program> program, ParamBindings<ParamValue> params)
      : program_(std::move(program)),
        params_(std::move(params)),
        state_(std::make_shared<StateStore<StateValue>>()) {}

  const Program& program() const { return *program_; }
  const std::shared_ptr<const Program>& program_ptr() const { return program_; }
  /// A handle to this executable's bindings, for a clone (taken under the lock).
  ParamBindings<ParamValue> share_params() const {
    std::lock_guard<std::mutex> lock(mu_);
    return params_;
  }

  /// What to keep for param `index` bound to `value` (already validated: its type is the
  /// declared one). CPU: the tensor itself; PJRT: a device copy. Called without the lock; may
  /// throw (the earlier binding is then kept).
  virtual ParamValue bind_param(size_t index, const Tensor& value) = 0;
  /// Runs the program on validated `inputs` (every declared input, exact types) with every
  /// param bound and the current `state` (one value per state(), in its order); returns the
  /// outputs in outputs() order and leaves each state's new value (its bound output) in
  /// `state`. Called under the executable's lock and the state store's.
  virtual std::vector<Tensor> execute(const TensorMap& inputs,
                                      const ParamBindings<ParamValue>& params,
                                      std::vector<StateValue>& state) = 0;
  /// execute() dispatched without waiting (Executable::run_async), under the same locks and
  /// with the same contract, except that the outputs come back as an AsyncResult and `state`
  /// may hold values still being computed. `label` names the run in its errors. The default
  /// runs execute() and returns its finished outputs.
  virtual AsyncResult execute_async(const TensorMap& inputs,
                                    const ParamBindings<ParamValue>& params,
                                    std::vector<StateValue>& state, const std::string& label) {
    (void)label;
    return AsyncResult(execute(inputs, params, state));
  }
  /// What to keep for state `index` holding `value` (its type is the spec's): a host copy
  /// (CPU), a device upload (PJRT). Called without the executable's lock (the zeros of a first
  /// use under the state store's); may throw.
  virtual StateValue make_state(size_t index, const Tensor& value) = 0;
  /// The value of state `index` as a host tensor of its spec type (a copy).
  virtual Tensor read_state(size_t index, const StateValue& value) const = 0;

  /// Copies this executable's current state into `clone` (for clone(): a clone owns a copy).
  void copy_state_to(ExecutableCore& clone) const {
    std::shared_ptr<StateStore<StateValue>> store = state_store();
    std::vector<Tensor> values;
    {
      std::lock_guard<std::mutex> lock(store->mu);
      for (size_t i = 0; i < store->values.size(); ++i)
        values.push_back(read_state(i, store->values[i]));
    }
    for (size_t i = 0; i < values.size(); ++i) clone.set_state(program_->state[i].name, values[i]);
  }

 private:
  // The zeros every state starts as, allocated at the first use of `store` (under its lock).
  void materialize(StateStore<StateValue>& store) {
    if (!store.values.empty() || program_->state.empty()) return;
    std::vector<StateValue> values;
    for (size_t i = 0; i < program_->state.size(); ++i) {
      const TensorType& t = program_->state[i].type;
      values.push_back(make_state(i, Tensor(t.dtype, t.shape)));
    }
    store.values = std::move(values);
  }
  std::shared_ptr<StateStore<StateValue>> state_store() const {
    std::lock_guard<std::mutex> lock(mu_);
    return state_;
  }

  // What run() and run_async() share: checks the inputs and that every param is set, then
  // calls `f(state)` under the executable's lock (and the state store's, after materializing
  // it, when the program has state).
  template <class F>
  auto locked_run(const TensorMap& inputs, F&& f) {
    check_run_inputs(program_->inputs, inputs, program_->state);
    std::lock_guard<std::mutex> lock(mu_);
    if (!params_.all_set())
      check_params_set(program_->params, [&](size_t i) { return params_.is_set(i); });
    if (program_->state.empty()) return f(no_state_);
    std::lock_guard<std::mutex> state_lock(state_->mu);
    materialize(*state_);
    return f(state_->values);
  }

  std::shared_ptr<const Program> program_;
  ParamBindings<ParamValue> params_;
  std::shared_ptr<StateStore<StateValue>> state_;  // shared by share_state, guarded by mu_
  std::vector<StateValue> no_state_;               // execute's state without CompileOptions::state
  mutable std::mutex mu_;
  uint64_t async_runs_ = 0;  // run_async calls so far, to name each run in its errors (mu_)
};

}  // namespace rlx
