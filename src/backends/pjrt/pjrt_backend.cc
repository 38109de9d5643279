// The PJRT backend: legalizes a graph to the StableHLO-lowerable ops, emits StableHLO, compiles
// it with a PJRT plugin and runs it; params and state live on the device between runs.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>

#include "backend_internal.h"
#include "compile_cache.h"
#include "pjrt_client.h"
#include "rlx/backends/pjrt/pjrt.h"
#include "rlx/ir/collective.h"
#include "rlx/ir/error.h"
#include "rlx/ir/op.h"
#include "rlx/opt/pipeline.h"
#include "rlx/runtime/backend_core.h"

namespace rlx::pjrt {
namespace {

// Everything compile produces; shared read-only by an executable and its clones.
struct Program : ProgramInfo {
  std::string stablehlo;
  // The compiled function's arguments in order: inputs[i], params[i] or state[i].
  enum class Arg : uint8_t { Input, Param, State };
  std::vector<std::pair<Arg, size_t>> args;
  std::unique_ptr<LoadedProgram> loaded;
  capi::PJRT_Device* pjrt_device = nullptr;  // null: the compile-time default (device 0)
};

// The device side of one run_async: its returned output buffers, the input buffers it reads
// and the program (which keeps the client and the loaded executable alive while it runs).
struct PendingRun final : AsyncResult::Pending {
  explicit PendingRun(std::shared_ptr<const Program> p) : program(std::move(p)) {}
  void wait() override {
    for (const auto& b : outputs) b->await_ready();
  }
  Tensor fetch(size_t index) override {
    const TensorType& t = program->outputs[index].type;
    Tensor out(t.dtype, t.shape);
    outputs[index]->download(out);  // waits for the run (PJRT_Buffer_ToHostBuffer's event)
    return out;
  }
  std::shared_ptr<const Program> program;
  std::vector<std::shared_ptr<const DeviceBuffer>> outputs;  // by outputs() index
  std::vector<std::unique_ptr<DeviceBuffer>> fed;            // this run's inputs
};

// Params live on the device: set_param uploads once, runs reuse the device copy. State too:
// each run takes the state buffers as (donated) arguments and keeps the buffers of their bound
// outputs as the new state, so the state never leaves the device between runs.
using DeviceParam = std::shared_ptr<const DeviceBuffer>;

class PjrtExecutable final : public ExecutableCore<Program, DeviceParam> {
 public:
  PjrtExecutable(std::shared_ptr<const Program> program, ParamBindings<DeviceParam> params)
      : ExecutableCore(std::move(program), std::move(params)) {}

  Capabilities capabilities() const override {
    return {.clone = true, .concurrent_clones = false, .typed_io = true, .zero_copy_params = false};
  }

  std::unique_ptr<Executable> clone() const override {
    auto c = std::make_unique<PjrtExecutable>(program_ptr(), share_params());
    copy_state_to(*c);
    return c;
  }

 protected:
  // Uploaded once here; runs reuse the device copy (the caller's tensor is not kept).
  DeviceParam bind_param(size_t, const Tensor& value) override {
    return program().loaded->client()->upload(value, device_ptr());
  }

  DeviceParam make_state(size_t, const Tensor& value) override {
    return program().loaded->client()->upload(value, device_ptr());
  }
  Tensor read_state(size_t index, const DeviceParam& value) const override {
    const TensorType& t = program().state[index].type;
    Tensor out(t.dtype, t.shape);
    try {
      value->download(out);  // waits for the run computing it
    } catch (const Error& e) {
      throw Error("state '" + program().state[index].name + "': " + e.what() +
                  " (the state holds the output of a failed run: set_state() or reset_state() "
                  "it before the next run)");
    }
    return out;
  }

  std::vector<Tensor> execute(const TensorMap& inputs, const ParamBindings<DeviceParam>& params,
                              std::vector<DeviceParam>& state) override {
    const std::string label =
        "run of '" + program().graph.name() + "' on " + program().device.to_string();
    return execute_async(inputs, params, state, label).outputs();
  }

  // Uploads the inputs, starts the run and returns at once: the plugin orders this run after
  // the runs that compute its arguments (the state buffers of the previous run), and the
  // returned outputs are read, and waited for, through the AsyncResult.
  AsyncResult execute_async(const TensorMap& inputs, const ParamBindings<DeviceParam>& params,
                            std::vector<DeviceParam>& state, const std::string& label) override {
    const Program& p = program();
    const Client& client = *p.loaded->client();
    auto pending = std::make_unique<PendingRun>(program_ptr());
    std::vector<capi::PJRT_Buffer*> args;
    for (auto [kind, index] : p.args) {
      switch (kind) {
        case Program::Arg::Input:
          pending->fed.push_back(client.upload(inputs.at(p.inputs[index].name), device_ptr()));
          args.push_back(pending->fed.back()->raw());
          break;
        case Program::Arg::Param:
          args.push_back(params[index]->raw());
          break;
        case Program::Arg::State:
          args.push_back(state[index]->raw());
          break;
      }
    }
    std::vector<std::unique_ptr<DeviceBuffer>> outs;
    try {
      outs = p.loaded->execute(args, p.graph.outputs().size(), p.pjrt_device);
    } catch (const Error& e) {
      throw_after_failed_execute(e, state, p.state,
                                 [](const DeviceParam& b) { return b->is_deleted(); });
    }
    std::vector<DeviceParam> results(outs.size());
    for (size_t i = 0; i < outs.size(); ++i) results[i] = std::move(outs[i]);
    for (size_t i = 0; i < p.returned.size(); ++i)
      pending->outputs.push_back(results[p.returned[i]]);
    // The donated state buffers are consumed by the run (aliased to these outputs), which may
    // still be computing them: the next run takes them as arguments, get_state waits.
    for (size_t j = 0; j < state.size(); ++j) state[j] = results[p.state_outputs[j]];
    return AsyncResult(std::move(pending), p.returned.size(), label);
  }

 private:
  capi::PJRT_Device* device_ptr() const {
    const Program& p = program();
    return p.pjrt_device != nullptr ? p.pjrt_device : p.loaded->client()->devices().front();
  }
};

}  // namespace

// What the shared compile steps need to know about this backend: XLA devices are built for
// bf16 matmuls, so AutoMixedBf16 is the default precision policy.
BackendFacts pjrt_facts() {
  BackendFacts f;
  f.name = "pjrt";
  f.device_kind = DeviceKind::Pjrt;
  f.supported = native_ops();
  f.default_precision = PrecisionPolicy{PrecisionMode::AutoMixedBf16, {}};
  return f;
}

// The standard pipeline for the pjrt backend: legalize to native_ops(), DCE, fold, CSE, AMP.
void check_collectives(const Graph& g, int64_t devices, bool partitioned,
                       const std::string& where) {
  const std::string hint =
      "; write the per-device program and compile it with make_pjrt_replicated_backend "
      "(rlx.compile_replicated, jax.pmap-style) or make_pjrt_shard_map_backend "
      "(rlx.compile_shard_map)";
  for (const Node& n : g.nodes()) {
    if (!op_info(n.op).has(kCollective)) continue;
    const std::string what = std::string(op_name(n.op)) + " (node %" + n.name + ")";
    check(!partitioned, "pjrt: " + what + " is a per-device collective, but " + where +
                            " is partitioned by XLA, which inserts its own communication" + hint);
    try {
      groups_for_run(n.attrs, devices);
    } catch (const Error& e) {
      throw Error("pjrt: " + what + " on " + where + ": " + e.what() + hint);
    }
  }
}

PipelineResult run_pjrt_pipeline(const Graph& graph, const CompileOptions& options) {
  return run_standard_pipeline(graph, make_pipeline_options(pjrt_facts(), options));
}

// How each node runs: every computing node is part of the one XLA executable.
KernelReport kernel_report_of(const Graph& g, const std::string& stablehlo,
                              const std::string& note) {
  KernelReport r;
  r.backend = "pjrt";
  for (int32_t id = 0; id < static_cast<int32_t>(g.nodes().size()); ++id) {
    const Node& n = g.node(id);
    if (n.op == OpKind::Input || n.op == OpKind::Param || n.op == OpKind::Constant) continue;
    r.nodes.push_back({id, n.op, "xla", n.results[0].dtype, true, ""});
  }
  r.program = "pjrt: one XLA executable compiled from StableHLO" + note + ":\n" + stablehlo;
  return r;
}

namespace {

class PjrtBackend final : public Backend {
 public:
  explicit PjrtBackend(std::string plugin_path) : client_(std::move(plugin_path)) {}

  std::string name() const override { return "pjrt"; }
  DeviceKind device_kind() const override { return DeviceKind::Pjrt; }
  std::set<OpKind> supported_ops() const override { return native_ops(); }

  int64_t batch_multiple(const Device& device) override {
    if (!device.is_set()) return 1;
    return static_cast<int64_t>(data_parallel_devices(device, *client_.get()).size());
  }

  std::unique_ptr<Executable> compile(const Graph& graph, const CompileOptions& options,
                                      const Device& device) override {
    if (device.is_set()) return compile_data_parallel(graph, options, device, client_);
    check_compile_request(pjrt_facts(), device, graph, options);
    check_collectives(graph, 1, false, device.to_string() + " (one device)");
    // Legalize and optimize first: an unsupported graph fails before any plugin is needed.
    PipelineResult compiled = run_pjrt_pipeline(graph, options);

    auto program = std::make_shared<Program>();
    Program& p = *program;
    p.init(graph, std::move(compiled), device, options.quantized_params, options.state);
    // rlx's plan, before the plugin compiles and any device buffer exists.
    check_program_memory(pjrt_facts(), options, p);
    auto index_of = [](const auto& specs, const std::string& name) {
      for (size_t i = 0; i < specs.size(); ++i)
        if (specs[i].name == name) return i;
      return specs.size();
    };
    // State arguments are donated to the run, aliased to their bound outputs.
    std::map<int32_t, size_t> aliases;
    for (int32_t id : p.graph.inputs()) {
      const std::string& name = p.graph.node(id).name;
      if (size_t s = index_of(p.state, name); s < p.state.size()) {
        p.args.emplace_back(Program::Arg::State, s);
        aliases[id] = p.state_outputs[s];
      } else if (size_t i = index_of(p.inputs, name); i < p.inputs.size()) {
        p.args.emplace_back(Program::Arg::Input, i);
      } else {
        throw Error("pjrt: internal error: compiled graph has an unknown input '" + name + "'");
      }
    }
    for (int32_t id : p.graph.params()) {
      const std::string& name = p.graph.node(id).name;
      size_t i = index_of(p.params, name);
      check(i < p.params.size(),
            "pjrt: internal error: compiled graph has an unknown param '" + name + "'");
      p.args.emplace_back(Program::Arg::Param, i);
    }
    p.stablehlo = emit_stablehlo(p.graph, aliases);
    p.kernel_report = kernel_report_of(p.graph, p.stablehlo);

    std::shared_ptr<const Client> client = client_.get();
    check(static_cast<size_t>(device.index) < client->devices().size(),
          "pjrt: device '" + device.to_string() + "' does not exist: plugin '" +
              client->plugin().path + "' has " + std::to_string(client->devices().size()) +
              " addressable device(s)");
    if (device.index > 0) p.pjrt_device = client->devices()[static_cast<size_t>(device.index)];
    // The device assignment names the device: without one XLA compiles for its default device
    // (pjrt:0) and refuses to execute on any other.
    const int64_t id = client->describe_device(static_cast<size_t>(device.index)).id;
    p.loaded = load_or_compile(client, p.stablehlo,  // the persistent compile cache
                               replicated_compile_options({id}));

    ParamBindings<DeviceParam> params(p.params.size());  // bound by set_param
    return std::make_unique<PjrtExecutable>(std::move(program), std::move(params));
  }

 private:
  LazyClient client_;
};

// Registers the PJRT backend at static initialization (the library is linked whole); it loads
// no plugin until the first compile.
const bool registered = [] {
  register_backend(make_pjrt_backend());
  return true;
}();

}  // namespace

std::shared_ptr<const Client> LazyClient::get() {
  std::lock_guard<std::mutex> lock(mu_);
  if (client_) return client_;
  std::string path = plugin_path_;
  if (path.empty()) {
    std::optional<std::string> env = plugin_path_from_env();
    if (!env)
      throw Error(
          "pjrt: no PJRT plugin: set RLX_PJRT_PLUGIN to a plugin .so (e.g. the "
          "pjrt_c_api_cpu_plugin.so of the PyPI package lammps-jax-pjrt-cpu), or "
          "TPU_LIBRARY_PATH / LIBTPU_PATH to libtpu");
    path = *env;
  }
  client_ = std::make_shared<Client>(Plugin::load(path));
  return client_;
}

std::optional<std::string> plugin_path_from_env() {
  for (const char* var : {"RLX_PJRT_PLUGIN", "TPU_LIBRARY_PATH", "LIBTPU_PATH"}) {
    const char* v = std::getenv(var);
    if (v != nullptr && *v != '\0') return std::string(v);
  }
  return std::nullopt;
}

PluginInfo describe_plugin(const std::string& path) {
  auto client = std::make_shared<Client>(Plugin::load(path));
  PluginInfo info;
  info.path = client->plugin().path;
  info.api_major = client->plugin().api->pjrt_api_version.major_version;
  info.api_minor = client->plugin().api->pjrt_api_version.minor_version;
  info.platform = client->platform();
  for (size_t i = 0; i < client->devices().size(); ++i)
    info.devices.push_back(client->describe_device(i));
  return info;
}

std::string DeviceInfo::to_string() const {
  auto size = [](int64_t bytes) {
    char buf[32];
    if (bytes >= (int64_t{1} << 30))
      std::snprintf(buf, sizeof buf, "%.1f GiB", static_cast<double>(bytes) / (1 << 30));
    else if (bytes >= (int64_t{1} << 20))
      std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
    else
      std::snprintf(buf, sizeof buf, "%lld B", static_cast<long long>(bytes));
    return std::string(buf);
  };
  std::string out = "pjrt:" + std::to_string(index) + "  id " + std::to_string(id) + "  kind " +
                    kind + "  platform " + platform;
  if (bytes_limit) out += "  memory " + size(*bytes_limit);
  if (bytes_in_use)
    out += std::string(bytes_limit ? " (" : "  memory ") + size(*bytes_in_use) + " in use" +
           (bytes_limit ? ")" : "");
  return out;
}

std::string lower_to_stablehlo(const Graph& graph, const CompileOptions& options) {
  return emit_stablehlo(run_pjrt_pipeline(graph, options).graph);
}

std::shared_ptr<Backend> make_pjrt_backend(std::string plugin_path) {
  return std::make_shared<PjrtBackend>(std::move(plugin_path));
}

}  // namespace rlx::pjrt
