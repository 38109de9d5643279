// Executable: a graph compiled for one device, with its params and activations.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "rlx/ir/evaluator.h"
#include "rlx/ir/graph.h"
#include "rlx/opt/legalize.h"
#include "rlx/opt/memory_plan.h"
#include "rlx/opt/quantize_params.h"
#include "rlx/runtime/device.h"
#include "rlx/runtime/kernel_report.h"
#include "rlx/runtime/profile.h"

namespace rlx {

struct PlannedMemory;  // rlx/runtime/memory_limit.h

/// How a param bound in CompileOptions::quantized_params is stored: its binding and the type
/// the graph given to compile declared for it.
struct QuantizedStorage {
  QuantizedParamBinding binding;
  TensorType declared;
  bool operator==(const QuantizedStorage&) const = default;
};

/// Name and type of one graph input, param or output, as the caller sees it (the dtypes of the
/// graph given to compile; precision policies change only internal dtypes). A param stored
/// quantized has the packed u8 `type` (rlx/opt/quantize_params.h quantized_param_type) and
/// `quantized` set: set_param binds packed data of `type` or packs data of its declared type.
struct IoSpec {
  std::string name;
  TensorType type;
  std::optional<QuantizedStorage> quantized = std::nullopt;
  bool operator==(const IoSpec&) const = default;
};

/// One graph input held as executable state (CompileOptions::state, the buffer donation /
/// input-output aliasing of XLA and jax's donate_argnums): run() does not take input `name`
/// but reads it from storage the executable keeps (on the device on device backends), and
/// after each run that storage holds the graph output `output`, which run() does not return.
struct StateSpec {
  std::string name;    ///< the graph input
  std::string output;  ///< the graph output written back to it ("node" or "node#i")
  TensorType type;     ///< of both
  bool operator==(const StateSpec&) const = default;
};

/// What an executable can do beyond run().
struct Capabilities {
  /// clone() works; clones share read-only weights and own their activations.
  bool clone = false;
  /// Clones (not one executable) may run concurrently on different threads.
  bool concurrent_clones = false;
  /// set_param_typed / run_typed accept every dtype and convert to the declared dtypes.
  bool typed_io = false;
  /// set_param binds a caller tensor without copying it (the caller keeps it alive).
  bool zero_copy_params = false;
};

/// The outputs of one Executable::run_async, like the arrays jax returns under asynchronous
/// dispatch: the run may still be executing on the device when run_async returns. The first
/// read of an output (output(), outputs()) waits for the run and copies that output to the host
/// once; later reads return the same tensor. block_until_ready() waits without copying (jax's
/// `block_until_ready`). An error the device raised while running surfaces at the first read or
/// wait as rlx::Error naming the run ("run 3 of 'mlp' on pjrt:0 failed: ..."), and again at
/// every later read. Destroying a result that was never read is safe: the run completes on the
/// device and its output buffers are freed (an error of that run is then seen through the state
/// it wrote, if any: get_state and later runs report it). Reads are
/// serialized by an internal mutex. Move-only.
class AsyncResult {
 public:
  /// Where a pending run's outputs come from; a backend implements it (pjrt: device buffers).
  class Pending {
   public:
    virtual ~Pending() = default;
    /// Blocks until every output is computed; throws rlx::Error when the run failed.
    virtual void wait() = 0;
    /// Output `index` as a host tensor (waits for it first); throws rlx::Error when the run
    /// failed. Called at most once per index.
    virtual Tensor fetch(size_t index) = 0;
  };

  /// No run, no outputs.
  AsyncResult();
  /// A run that has already finished with `outputs` (backends that run synchronously).
  explicit AsyncResult(std::vector<Tensor> outputs);
  /// A pending run with `count` outputs read from `pending`; `label` names the run in errors.
  AsyncResult(std::unique_ptr<Pending> pending, size_t count, std::string label);
  ~AsyncResult();
  AsyncResult(AsyncResult&&) noexcept;
  AsyncResult& operator=(AsyncResult&&) noexcept;

  /// The number of outputs (Executable::outputs().size()).
  size_t size() const;
  /// Output `index` (waits and copies it to the host on first access). Throws rlx::Error for
  /// an index >= size() ("AsyncResult: output 2 of a run with 2 outputs") or the run's error.
  const Tensor& output(size_t index);
  /// Every output in outputs() order (copies share storage with output(i)); throws as output().
  std::vector<Tensor> outputs();
  /// Waits until the run finished (no copy); throws the run's error.
  void block_until_ready();
  /// The run's name in errors ("run 3 of 'mlp' on pjrt:0"; "" for a finished run).
  const std::string& label() const;

 private:
  struct State;
  std::unique_ptr<State> s_;
};

/// A compiled graph. Created by Backend::compile (usually through Session::compile).
///
/// run() is serialized per executable (an internal mutex); for parallel inference give each
/// thread a clone(). Every entry point validates its arguments completely before touching any
/// state, so on error nothing is written and the executable is unchanged.
class Executable {
 public:
  virtual ~Executable() = default;

  virtual Capabilities capabilities() const = 0;
  virtual Device device() const = 0;
  /// Graph inputs, params and outputs in graph order. An output is named by the node that
  /// computes it, with "#i" for result i of a multi-result node as in the text form ("topk#1");
  /// an output listed twice appears twice. Inputs and outputs held as state (state()) are not
  /// listed: run() neither takes nor returns them.
  virtual const std::vector<IoSpec>& inputs() const = 0;
  virtual const std::vector<IoSpec>& params() const = 0;
  virtual const std::vector<IoSpec>& outputs() const = 0;

  /// The inputs held as state (CompileOptions::state), in the options' order. Each starts as
  /// zeros; every run reads the current value and then replaces it by the bound output of that
  /// run. Like params, the state belongs to the executable object: a Session's cached
  /// executable is shared by every holder of it, a clone() has its own copy.
  virtual const std::vector<StateSpec>& state() const = 0;
  /// Replaces state `name` by a copy of `value` (its dtype and shape exactly the spec's).
  /// Throws rlx::Error "set_state: unknown state 'x' (state: a, b)" or "set_state 'k': expected
  /// f32[1,2,8,4], got f32[1,2,4,4]"; the state is then unchanged.
  virtual void set_state(const std::string& name, const Tensor& value) = 0;
  /// A copy of the current value of state `name` (a host tensor of its spec type). Throws
  /// rlx::Error "get_state: unknown state 'x' (state: a, b)".
  virtual Tensor get_state(const std::string& name) const = 0;
  /// Sets every state to zeros.
  virtual void reset_state() = 0;
  /// From now on this executable reads and writes the state storage of `other` (shared: a run
  /// of either is seen by the next run of both; runs of the two are serialized on it), e.g. the
  /// prefill and decode executables of a decoder sharing one KV cache. Its own state is
  /// dropped. Both must come from the same backend and have equal state() specs. Throws
  /// rlx::Error "share_state: ..." naming the first difference, or another backend.
  virtual void share_state(const Executable& other) = 0;

  /// Binds param `name` to `value`, whose dtype and shape must equal the declared ones. The
  /// executable keeps a reference to value's storage (no copy, when
  /// capabilities().zero_copy_params): it reads that storage on every run, so writes the
  /// caller makes to it between runs are seen by the next run (writing during a run is a data
  /// race). A borrowed tensor's memory must outlive the binding. Every declared param must be
  /// set before run(), also one that the compiled graph no longer reads. A param stored
  /// quantized (IoSpec::quantized) takes packed u8 data of its spec type (zero copy, as above)
  /// or data of its declared float type, which it packs once into storage of its own
  /// (pack_quantized_param: llama.cpp's round-to-nearest quantizers). Throws rlx::Error
  /// "set_param: unknown param 'x' (params: a, b)" or "set_param 'w': expected f32[4,8], got
  /// f16[4,8]" (check_param_binding), or pack_quantized_param's errors; the earlier binding is
  /// then kept.
  virtual void set_param(const std::string& name, const Tensor& value) = 0;
  /// Binds param `name` from `bytes` holding a row-major tensor of `dtype` and `shape`: the
  /// shape must equal the declared one; the dtype may differ and is then converted to the
  /// declared dtype as by the convert op (e.g. bf16 weights into an f32 graph). The data are
  /// copied (they may be unaligned). Throws rlx::Error for an unknown name, a wrong shape or a
  /// byte count that is not numel * dtype_size(dtype), e.g. "set_param_typed 'w': 10 bytes for
  /// bf16[2,3], which needs 12".
  void set_param_typed(const std::string& name, DType dtype, const Shape& shape,
                       std::span<const std::byte> bytes);

  /// Runs the graph on `inputs` (by input name; dtypes and shapes exactly as declared) and
  /// returns the outputs in graph order, each in its own storage, then writes the state
  /// outputs back to the state (state()). Inputs are only read (never written, also not in
  /// place). Passing a state input is an error ("run: 'k' is state of this executable (set it
  /// with set_state), not a run input"). Throws rlx::Error naming the input and the expected and
  /// actual type for a wrong dtype or shape ("run: input 'x': expected f32[2,3], got
  /// f32[3,2]"), naming unknown inputs with the list of valid names, missing inputs, and params
  /// never set; all of that is checked before anything runs.
  virtual std::vector<Tensor> run(const TensorMap& inputs) = 0;
  /// run() dispatched asynchronously (jax's async dispatch): validates `inputs` exactly as
  /// run() (those errors are thrown here), starts the run and returns without waiting for it;
  /// the outputs are read through the AsyncResult (waiting on first read). The state is updated
  /// at dispatch: the next run or run_async takes the new state buffers as its (donated)
  /// inputs and is ordered after this run on the device, so a loop of run_async calls on
  /// resident state never moves the state through the host. get_state / set_state wait for
  /// the pending runs as needed. An error of the run itself surfaces at the first read of the
  /// result; its state outputs then hold the error too (get_state throws it) until
  /// set_state / reset_state. The default runs synchronously (run()) and returns the finished
  /// outputs (the CPU backend); pjrt dispatches for real.
  virtual AsyncResult run_async(const TensorMap& inputs);
  /// run() where each input may have any dtype and is converted to the declared dtype as by the
  /// convert op (shapes must match: "run_typed: input 'x': expected shape [2,3], got [3,2]").
  /// Outputs are returned in `output_dtype` when given (converted likewise), else in their
  /// declared dtypes.
  std::vector<Tensor> run_typed(const TensorMap& inputs,
                                std::optional<DType> output_dtype = std::nullopt);

  /// An executable sharing this one's compiled program and params (copy on write: set_param on
  /// either afterwards affects only that one) with its own activations and its own copy of the
  /// current state. Throws rlx::Error when capabilities().clone is false.
  virtual std::unique_ptr<Executable> clone() const = 0;

  /// The graph as compiled (after legalization, fusion, precision and planning).
  virtual const Graph& compiled_graph() const = 0;
  /// Its memory plan (the activation arena each executable allocates once).
  virtual const MemoryPlan& memory_plan() const = 0;
  /// What one executable of this compile holds, as the memory-limit check saw it
  /// (rlx/runtime/memory_limit.h: arena, control-flow bodies, params, constants, outputs,
  /// state; include that header to call it). All zero for a backend without a plan (the
  /// default).
  virtual PlannedMemory planned_memory() const;
  /// Legalization's report: per op kind, native / decomposed / missing.
  virtual const DispatchReport& dispatch_report() const = 0;
  /// How each node of compiled_graph() runs: its kernel, native or the backend's fallback
  /// (see KernelReport). Built at compile time; the default is an empty report.
  virtual const KernelReport& kernels() const;
  /// kernels() as text (KernelReport::to_string), for --verbose output. Read the structure,
  /// not this text, to test or count kernels.
  std::string kernel_report() const { return kernels().to_string(); }
  /// Step timings accumulated over this object's runs when compiled with a profile mode other
  /// than Off (CompileOptions::profile, RLX_PROFILE); a clone starts its own, empty. Empty
  /// (runs == 0) when profiling is off or the backend has no profiler (the default). Safe to
  /// call while another thread runs this executable (it waits for that run).
  virtual ExecutionProfile profile() const;

 protected:
  /// The declared spec of input or param `name` in `specs`, or throws rlx::Error "<what>:
  /// unknown <kind> 'x' (<kind>s: a, b)".
  static const IoSpec& find_spec(const std::vector<IoSpec>& specs, const std::string& name,
                                 std::string_view what, std::string_view kind);
};

/// Checks `inputs` against `specs` (names, dtypes, shapes, none missing or unknown) and throws
/// rlx::Error naming the first problem, e.g. "run: input 'x': expected f32[2,3], got
/// f32[3,2]"; an input that names one of `state` says it is state ("run: 'k' is state of this
/// executable (set it with set_state), not a run input"). ExecutableCore::run calls this
/// before running.
void check_run_inputs(const std::vector<IoSpec>& specs, const TensorMap& inputs,
                      const std::vector<StateSpec>& state = {});

/// The index of state `name` in `state`, after checking `value` (when given) against its
/// type. Throws rlx::Error "<what>: unknown state 'x' (state: a, b)" or "<what> 'k': expected
/// f32[2,8], got f16[2,8]".
size_t check_state_access(const std::vector<StateSpec>& state, const std::string& name,
                          std::string_view what, const Tensor* value = nullptr);

/// Throws rlx::Error "run: param 'w' (f32[8,16]) was never set" for the first param spec i with
/// !is_set(i). ExecutableCore::run calls it only when some param is unset, so the message is
/// built only on failure.
void check_params_set(const std::vector<IoSpec>& params, const std::function<bool(size_t)>& is_set);

/// Checks a set_param call against the declared `params` and returns the param's index in
/// them; a quantized param (IoSpec::quantized) accepts its packed type and its declared type.
/// Throws rlx::Error "set_param: unknown param 'x' (params: a, b)", "set_param 'w': expected
/// f32[4,8], got f16[4,8]" or "set_param 'w': expected u8[8,34] (q8_0 packed) or f32[8,32],
/// got f16[8,32]".
size_t check_param_binding(const std::vector<IoSpec>& params, const std::string& name,
                           const Tensor& value);

}  // namespace rlx
