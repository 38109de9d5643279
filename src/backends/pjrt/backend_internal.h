// What the single-device backend (pjrt_backend.cc) and the SPMD backend (spmd_backend.cc)
// share: the backend's facts, its pipeline and its kernel report.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "pjrt_client.h"
#include "rlx/ir/error.h"
#include "rlx/opt/pipeline.h"
#include "rlx/runtime/backend_core.h"

namespace rlx::pjrt {

/// Name, device kind, native ops and the default precision (AutoMixedBf16) of the backend.
BackendFacts pjrt_facts();
/// The standard pipeline for the pjrt backend: legalize to native_ops(), DCE, fold, CSE, AMP.
PipelineResult run_pjrt_pipeline(const Graph& graph, const CompileOptions& options);
/// Checks the IR collectives of `g` before any plugin is involved: on a single device
/// (`devices` 1) their groups must cover that one device (a collective over 4 devices would
/// otherwise run as the identity); in an auto-partitioned SPMD program (`partitioned`) there
/// may be none, since XLA's partitioner owns the communication there. Throws rlx::Error naming
/// the op, the node and `where`, and the backends that run per-device programs.
void check_collectives(const Graph& g, int64_t devices, bool partitioned, const std::string& where);
/// Every computing node of `g` as part of the one XLA executable compiled from `stablehlo`;
/// `note` follows "compiled from StableHLO" in the program text (e.g. " (SPMD over Mesh(...),
/// shardings in Shardy form)").
KernelReport kernel_report_of(const Graph& g, const std::string& stablehlo,
                              const std::string& note = "");

/// The sharding form an SPMD compile asks for: `configured` (ShardingConfig::form) unless it is
/// Auto, else sharding_form_from_env() (RLX_PJRT_SHARDING; throws for a bad value).
ShardingForm requested_sharding_form(ShardingForm configured);

/// Runs `compile(form)` for an SPMD program and returns the form that compiled. `requested`
/// Gspmd or Shardy: that form only. Auto: the form recorded in `accepted` (a client's
/// accepted_sharding_form()) when there is one; else Shardy first and, when it throws
/// rlx::Error (the plugin rejects the Shardy module or option), Gspmd; the form that
/// compiled is recorded in `accepted`. When both fail: rlx::Error with the Gspmd error, the
/// Shardy error appended; nothing is recorded.
ShardingForm compile_in_sharding_form(ShardingForm requested, std::atomic<ShardingForm>& accepted,
                                      const std::function<void(ShardingForm)>& compile);

/// Throws the rlx::Error for a run the plugin refused (PJRT_LoadedExecutable_Execute returned
/// `e`). Buffer donation means the plugin may already have consumed (deleted) the donated state
/// buffers: when `consumed(state[j])` holds for some j, the state is gone, so every state is
/// reset (`state` cleared: zeros at the next use) and the message says so and what to do;
/// otherwise the state is unchanged and the message says that.
template <class StateValue, class Consumed>
[[noreturn]] void throw_after_failed_execute(const Error& e, std::vector<StateValue>& state,
                                             const std::vector<StateSpec>& specs,
                                             Consumed consumed) {
  if (state.empty()) throw e;
  std::string lost;
  for (size_t j = 0; j < state.size(); ++j)
    if (consumed(state[j])) lost += (lost.empty() ? "'" : ", '") + specs[j].name + "'";
  if (lost.empty()) throw Error(std::string(e.what()) + " (the state is unchanged)");
  state.clear();  // zeros again at the next use (ExecutableCore::materialize)
  throw Error(std::string(e.what()) + "; the failed run consumed the donated state " + lost +
              ", so every state of this executable was reset to zeros: set_state() it again "
              "(e.g. from a checkpoint) before the next run");
}

/// A backend's client, created at its first compile and kept for the backend's lifetime:
/// the plugin `plugin_path`, or ("" ) the one plugin_path_from_env() names; rlx::Error saying
/// how to set one when there is none.
class LazyClient {
 public:
  explicit LazyClient(std::string plugin_path) : plugin_path_(std::move(plugin_path)) {}
  std::shared_ptr<const Client> get();

 private:
  std::string plugin_path_;
  std::mutex mu_;
  std::shared_ptr<const Client> client_;
};

/// The pjrt devices of data-parallel device set `device` (Device::is_set()): its list, or for
/// pjrt:all every addressable device of `client`. Throws rlx::Error naming the set, the device
/// and the plugin's device count for a device the plugin does not have.
std::vector<int> data_parallel_devices(const Device& device, const Client& client);

/// The pjrt backend's compile for a data-parallel device set: one SPMD program over a mesh
/// ("batch": the set's devices in order) with dim 0 of every input and output split over it
/// (P('batch'); scalars replicated) and the params replicated. Throws rlx::Error as
/// data_parallel_devices, and naming the input or output, its shape, batch and the device count
/// when its batch is not a multiple of the count (no padding: a graph may reduce over the batch).
std::unique_ptr<Executable> compile_data_parallel(const Graph& graph, const CompileOptions& options,
                                                  const Device& device, LazyClient& client);

}  // namespace rlx::pjrt
