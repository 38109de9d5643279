// The PJRT backend: legalizes a graph to the StableHLO-lowerable ops, emits StableHLO, compiles
// it with a PJRT plugin and runs it; params live on the device between runs.
#include <cstdlib>
#include <map>
#include <mutex>

#include "pjrt_client.h"
#include "rlx/backends/pjrt/pjrt.h"
#include "rlx/ir/error.h"
#include "rlx/opt/pipeline.h"

namespace rlx::pjrt {
namespace {

// Everything compile produces; shared read-only by an executable and its clones.
struct Program {
  Graph graph;
  MemoryPlan plan;
  DispatchReport report;
  std::string stablehlo;
  std::vector<IoSpec> inputs, params, outputs;
  // The compiled function's arguments in order: (true, i) = inputs[i], (false, i) = params[i].
  std::vector<std::pair<bool, size_t>> args;
  std::unique_ptr<LoadedProgram> loaded;
  capi::PJRT_Device* device = nullptr;  // null: the compile-time default (device 0)
  Device rlx_device;
};

// Per-executable device copies of the params; shared by clones until one sets a param.
struct ParamStore {
  std::vector<std::shared_ptr<const DeviceBuffer>> buffers;
};

class PjrtExecutable final : public Executable {
 public:
  PjrtExecutable(std::shared_ptr<const Program> program, std::shared_ptr<ParamStore> params)
      : program_(std::move(program)), params_(std::move(params)) {}

  Capabilities capabilities() const override {
    return {.clone = true, .concurrent_clones = false, .typed_io = true, .zero_copy_params = false};
  }
  Device device() const override { return program_->rlx_device; }
  const std::vector<IoSpec>& inputs() const override { return program_->inputs; }
  const std::vector<IoSpec>& params() const override { return program_->params; }
  const std::vector<IoSpec>& outputs() const override { return program_->outputs; }
  const Graph& compiled_graph() const override { return program_->graph; }
  const MemoryPlan& memory_plan() const override { return program_->plan; }
  const DispatchReport& dispatch_report() const override { return program_->report; }
  std::string kernel_report() const override {
    return "pjrt: one XLA executable compiled from StableHLO:\n" + program_->stablehlo;
  }

  void set_param(const std::string& name, const Tensor& value) override {
    const IoSpec& spec = find_spec(program_->params, name, "set_param", "param");
    check(value.type() == spec.type, "set_param '" + name + "': expected " + spec.type.to_string() +
                                         ", got " + value.type().to_string());
    size_t index = static_cast<size_t>(&spec - program_->params.data());
    // Uploaded once here; runs reuse the device copy (the caller's tensor is not kept).
    std::shared_ptr<const DeviceBuffer> buffer =
        program_->loaded->client()->upload(value, device_ptr());
    std::lock_guard<std::mutex> lock(mu_);
    if (params_.use_count() > 1) params_ = std::make_shared<ParamStore>(*params_);  // copy on write
    params_->buffers[index] = std::move(buffer);
  }

  std::vector<Tensor> run(const TensorMap& inputs) override {
    check_run_inputs(program_->inputs, inputs);
    std::lock_guard<std::mutex> lock(mu_);
    check_params_set(program_->params, [&](size_t i) { return params_->buffers[i] != nullptr; });
    const Client& client = *program_->loaded->client();
    std::vector<std::unique_ptr<DeviceBuffer>> fed;  // this run's inputs, freed after it
    std::vector<capi::PJRT_Buffer*> args;
    for (auto [is_input, index] : program_->args) {
      if (is_input) {
        fed.push_back(client.upload(inputs.at(program_->inputs[index].name), device_ptr()));
        args.push_back(fed.back()->raw());
      } else {
        args.push_back(params_->buffers[index]->raw());
      }
    }
    std::vector<std::unique_ptr<DeviceBuffer>> outs =
        program_->loaded->execute(args, program_->outputs.size(), program_->device);
    std::vector<Tensor> results;
    results.reserve(outs.size());
    for (size_t i = 0; i < outs.size(); ++i) {
      Tensor t(program_->outputs[i].type.dtype, program_->outputs[i].type.shape);
      outs[i]->download(t);
      results.push_back(std::move(t));
    }
    return results;
  }

  std::unique_ptr<Executable> clone() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return std::make_unique<PjrtExecutable>(program_, params_);
  }

 private:
  capi::PJRT_Device* device_ptr() const {
    return program_->device != nullptr ? program_->device
                                       : program_->loaded->client()->devices().front();
  }

  std::shared_ptr<const Program> program_;
  std::shared_ptr<ParamStore> params_;
  mutable std::mutex mu_;
};

// The standard pipeline for the pjrt backend: legalize to native_ops(), DCE, fold, CSE, AMP.
PipelineResult run_pjrt_pipeline(const Graph& graph, const CompileOptions& options) {
  PipelineOptions po;
  po.backend = "pjrt";
  po.supported = native_ops();
  po.dispatch = options.dispatch;
  po.precision = options.precision;
  // XLA devices are built for bf16 matmuls: AutoMixedBf16 unless the caller or RLX_PRECISION
  // chooses (the pipeline reads RLX_PRECISION when precision is absent).
  const char* env = std::getenv("RLX_PRECISION");
  if (!po.precision && (env == nullptr || *env == '\0'))
    po.precision = PrecisionPolicy{PrecisionMode::AutoMixedBf16, {}};
  po.dce = options.dce;
  po.fold_constants = options.fold_constants;
  return run_standard_pipeline(graph, po);
}

class PjrtBackend final : public Backend {
 public:
  explicit PjrtBackend(std::string plugin_path) : plugin_path_(std::move(plugin_path)) {}

  std::string name() const override { return "pjrt"; }
  DeviceKind device_kind() const override { return DeviceKind::Pjrt; }
  std::set<OpKind> supported_ops() const override { return native_ops(); }

  std::unique_ptr<Executable> compile(const Graph& graph, const CompileOptions& options,
                                      const Device& device) override {
    check(device.kind == DeviceKind::Pjrt,
          "pjrt backend cannot compile for device '" + device.to_string() + "'");
    if (!options.quantized_params.empty())
      throw Error("pjrt backend: quantized params are not supported (param '" +
                  options.quantized_params.begin()->first + "' bound to format '" +
                  options.quantized_params.begin()->second.format + "')");
    // Legalize and optimize first: an unsupported graph fails before any plugin is needed.
    PipelineResult compiled = run_pjrt_pipeline(graph, options);

    auto program = std::make_shared<Program>();
    Program& p = *program;
    p.graph = std::move(compiled.graph);
    p.plan = std::move(compiled.plan);
    p.report = std::move(compiled.report);
    p.rlx_device = device;
    for (int32_t id : graph.inputs())
      p.inputs.push_back({graph.node(id).name, graph.node(id).results[0]});
    for (int32_t id : graph.params())
      p.params.push_back({graph.node(id).name, graph.node(id).results[0]});
    for (Value v : graph.outputs()) {
      std::string name = graph.node(v).name;
      if (graph.node(v).results.size() > 1) name += "#" + std::to_string(v.index);
      p.outputs.push_back({name, graph.type(v)});
    }
    auto index_of = [](const std::vector<IoSpec>& specs, const std::string& name) {
      for (size_t i = 0; i < specs.size(); ++i)
        if (specs[i].name == name) return i;
      throw Error("pjrt: internal error: compiled graph has an unknown leaf '" + name + "'");
    };
    for (int32_t id : p.graph.inputs())
      p.args.push_back({true, index_of(p.inputs, p.graph.node(id).name)});
    for (int32_t id : p.graph.params())
      p.args.push_back({false, index_of(p.params, p.graph.node(id).name)});
    p.stablehlo = emit_stablehlo(p.graph);

    std::shared_ptr<const Client> client = this->client();
    check(static_cast<size_t>(device.index) < client->devices().size(),
          "pjrt: device '" + device.to_string() + "' does not exist: plugin '" +
              client->plugin().path + "' has " + std::to_string(client->devices().size()) +
              " addressable device(s)");
    if (device.index > 0) p.device = client->devices()[static_cast<size_t>(device.index)];
    p.loaded = std::make_unique<LoadedProgram>(client, p.stablehlo);

    auto params = std::make_shared<ParamStore>();
    params->buffers.resize(p.params.size());  // bound by set_param
    return std::make_unique<PjrtExecutable>(std::move(program), std::move(params));
  }

 private:
  // The client, created at the first compile and kept for the backend's lifetime.
  std::shared_ptr<const Client> client() {
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

  std::string plugin_path_;
  std::mutex mu_;
  std::shared_ptr<const Client> client_;
};

// Registers the PJRT backend at static initialization (the library is linked whole); it loads
// no plugin until the first compile.
const bool registered = [] {
  register_backend(make_pjrt_backend());
  return true;
}();

}  // namespace

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

std::string lower_to_stablehlo(const Graph& graph, const CompileOptions& options) {
  return emit_stablehlo(run_pjrt_pipeline(graph, options).graph);
}

std::shared_ptr<Backend> make_pjrt_backend(std::string plugin_path) {
  return std::make_shared<PjrtBackend>(std::move(plugin_path));
}

}  // namespace rlx::pjrt
