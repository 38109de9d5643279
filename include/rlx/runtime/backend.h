// Backend interface, compile options and the backend registry.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "rlx/opt/legalize.h"
#include "rlx/opt/precision.h"
#include "rlx/opt/quantize_params.h"
#include "rlx/runtime/device.h"
#include "rlx/runtime/executable.h"
#include "rlx/runtime/profile.h"

namespace rlx {

/// One input held as executable state and the output written back to it after each run
/// (CompileOptions::state; Executable::state()).
struct StateBinding {
  std::string input;   ///< a graph input's name
  std::string output;  ///< a graph output's name, "node" or "node#i" (Executable::outputs())
  bool operator==(const StateBinding&) const = default;
};

/// Options of one compilation. Defaults are the fast, correct choice. Constructing them reads
/// no environment variable: Session::compile resolves what they leave absent from the
/// environment (resolve_environment in session.h) and passes the result to the backend; a
/// direct Backend::compile gets exactly these fields, absent ones meaning the stated defaults.
struct CompileOptions {
  /// Kernel dispatch policy (native kernels vs decomposition). Absent: Session::compile uses
  /// RLX_KERNEL_DISPATCH (DispatchOptions::from_env()); a direct Backend::compile, and an
  /// unset variable, give the defaults (PreferNative, no overrides).
  std::optional<DispatchOptions> dispatch;
  /// Absent: Session::compile uses RLX_PRECISION when it is set and not empty; otherwise, and
  /// for a direct Backend::compile, the backend's default (CPU: the graph's own dtypes; PJRT:
  /// AutoMixedBf16).
  std::optional<PrecisionPolicy> precision;
  bool dce = true;
  bool fold_constants = true;
  /// The compile seed: the key of every rng_key node without a seed attribute (the random
  /// numbers of dropout and token sampling, rlx/ir/random.h); part of the cache key.
  uint64_t seed = 0;
  /// Params stored block-quantized (ggml formats, rlx/opt/quantize_params.h), by name: every
  /// backend compiles the graph with each such param replaced by its packed u8 form and a
  /// dequantize (fused into quant_matmul where a matmul contracts the quantized axis: the CPU's
  /// fused kernel then reads the weight packed; PJRT lowers the integer unpacking to
  /// StableHLO). Executable::params() reports the packed type; set_param takes packed bytes or
  /// the declared float data. An unknown name, a non-float param or an axis whose size is not
  /// a multiple of the block size fails the compile (rlx::Error naming the param).
  std::map<std::string, QuantizedParamBinding> quantized_params;
  /// The most memory, in bytes, one executable may plan to hold (arena + params + constants +
  /// outputs; rlx/runtime/memory_limit.h): a compile planning more fails with rlx::Error naming
  /// the planned sizes instead of allocating. Absent: Session::compile uses RLX_MEMORY_LIMIT
  /// when it is set and not empty; otherwise, and for a direct Backend::compile, the physical
  /// memory (physical_memory_bytes()).
  std::optional<int64_t> memory_limit;
  /// Step timing (rlx/runtime/profile.h; Executable::profile()). Absent: Session::compile
  /// uses RLX_PROFILE when it is set and not empty (profile_from_env: 1 = Report, 0 = Off);
  /// otherwise, and for a direct Backend::compile, Off. Backends without a profiler (pjrt)
  /// ignore it: their profile() stays empty.
  std::optional<ProfileMode> profile;
  /// Inputs held as executable state (XLA's input/output aliasing, jax's donate_argnums): each
  /// binding's input is not passed to run() but kept by the executable (host memory on the CPU,
  /// device buffers on PJRT) and replaced after each run by the binding's output, which run()
  /// does not return (Executable::state(), set_state, get_state, reset_state, share_state).
  /// The CPU backend plans the state's storage like an arena value outside the arena, so a
  /// dynamic_update_slice whose x is the state input writes only its update there (a KV-cache
  /// step moves O(update) bytes); PJRT donates the state buffers to the run, aliased to their
  /// outputs. Input and output must have the same dtype and shape; each input and each output is
  /// bound at most once. Otherwise the compile fails with rlx::Error naming both. Part of the
  /// cache key.
  std::vector<StateBinding> state;

  /// A canonical text of every field, used in compile-cache keys (an absent dispatch or
  /// precision prints as "default").
  std::string cache_key() const;
};

/// A compiler + runtime for one device kind.
class Backend {
 public:
  virtual ~Backend() = default;
  /// Short name used in reports and errors ("cpu").
  virtual std::string name() const = 0;
  virtual DeviceKind device_kind() const = 0;
  /// Ops it runs natively (composites it does not claim are decomposed by legalization).
  virtual std::set<OpKind> supported_ops() const = 0;
  /// Compiles `graph` for `device`: verify, legalize, the pass pipeline, memory plan, lowering.
  /// Reads no environment variable for `options` (Session resolves those). Throws rlx::Error
  /// for an invalid graph (the verifier's diagnostics), ops it cannot run (the legalization
  /// report), a device of another kind or unsupported options (check_compile_request in
  /// backend_core.h), or a planned memory above options.memory_limit (check_memory_limit in
  /// memory_limit.h).
  virtual std::unique_ptr<Executable> compile(const Graph& graph, const CompileOptions& options,
                                              const Device& device) = 0;
  /// The number dim 0 of every input and output of a graph compiled for `device` must be a
  /// multiple of: the device count of a data-parallel device set (Device::is_set(), pjrt; the
  /// batch is split evenly over them), else 1. Callers that pad their batch (the sentence
  /// embedder) pad it to a multiple of this. The pjrt backend loads its plugin for a set (to
  /// count pjrt:all and check the devices); throws rlx::Error as its compile does for a plugin
  /// it cannot load or a device the plugin does not have.
  virtual int64_t batch_multiple(const Device& /*device*/) { return 1; }
};

/// Registers `backend` for its device kind, replacing any earlier one (built-in backends
/// register themselves at static initialization).
void register_backend(std::shared_ptr<Backend> backend);
/// The backend for `kind`; throws rlx::Error "no backend for device 'cuda' (registered: cpu)".
std::shared_ptr<Backend> backend_for(DeviceKind kind);
/// Device 0 of every backend registered in this process (cpu, pjrt): the device kinds it can
/// compile for. pjrt:0 is listed whether or not a PJRT plugin is configured; compiling for it
/// without one fails naming RLX_PJRT_PLUGIN, and `rlx devices` reports the plugin and its
/// devices (pjrt::describe_plugin).
std::vector<Device> available_devices();

}  // namespace rlx
