// The SPMD pjrt backend: one graph compiled by XLA's SPMD partitioner over a device mesh, with
// the shardings of its inputs, params and outputs given as mhlo.sharding annotations; host
// tensors are split across the devices on the way in and assembled on the way out.
#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>

#include "backend_internal.h"
#include "compile_cache.h"
#include "lower/lower.h"
#include "pjrt_client.h"
#include "rlx/backends/pjrt/pjrt.h"
#include "rlx/ir/error.h"

namespace rlx::pjrt {
namespace {

// The sharding of every argument and result of one compiled graph, checked.
struct Annotated {
  lower::Emitter::Spmd spmd;
  std::map<int32_t, PartitionSpec> arg_specs;  // input / param node id -> spec
  std::vector<PartitionSpec> result_specs;     // per graph output
};

std::string names_of(const std::vector<IoSpec>& specs) {
  std::string out;
  for (const IoSpec& s : specs) out += (out.empty() ? "'" : ", '") + s.name + "'";
  return out.empty() ? "none" : out;
}

// Checks `config` against the graph given to compile (`io`: its specs) and the compiled graph
// `g`, and builds the annotations. Every name in `config` must exist in the source graph.
// `state`: (state input name, index of its bound output among g's outputs); a state's output
// takes the input's spec (it is the next run's input), and naming it otherwise is an error.
Annotated annotate(const Graph& g, const IoSpecs& io, const ShardingConfig& config,
                   const std::vector<std::pair<std::string, size_t>>& state = {}) {
  auto known = [](const std::vector<IoSpec>& specs, const std::string& name) {
    for (const IoSpec& s : specs)
      if (s.name == name) return true;
    return false;
  };
  for (const auto& [kind, map, specs] : {std::tuple{"input", &config.inputs, &io.inputs},
                                         std::tuple{"param", &config.params, &io.params},
                                         std::tuple{"output", &config.outputs, &io.outputs}})
    for (const auto& [name, spec] : *map)
      check(known(*specs, name), std::string("sharding: the graph has no ") + kind + " '" + name +
                                     "' (" + kind + "s: " + names_of(*specs) + ")");
  Annotated a;
  a.spmd.num_partitions = config.mesh.size();
  auto spec_of = [&](const std::map<std::string, PartitionSpec>& m, const std::string& name,
                     const Shape& shape, const std::string& what) {
    auto it = m.find(name);
    PartitionSpec spec = it == m.end() ? PartitionSpec{} : it->second;
    validate_sharding(config.mesh, spec, shape, what + " '" + name + "'");
    return spec;
  };
  std::vector<int32_t> inputs = g.inputs(), params = g.params();
  for (const auto& [leaves, map, what] :
       {std::tuple{&inputs, &config.inputs, "input"}, std::tuple{&params, &config.params, "param"}})
    for (int32_t id : *leaves) {
      const Node& n = g.node(id);
      PartitionSpec spec = spec_of(*map, n.name, n.results[0].shape, what);
      a.spmd.args[id] = hlo_sharding(config.mesh, spec, n.results[0].shape);
      a.arg_specs[id] = spec;
    }
  a.result_specs.resize(g.outputs().size());
  for (size_t i = 0; i < io.outputs.size(); ++i) {
    size_t out = io.returned[i];
    a.result_specs[out] =
        spec_of(config.outputs, io.outputs[i].name, g.type(g.outputs()[out]).shape, "output");
  }
  for (const auto& [name, out] : state) {
    auto in = config.inputs.find(name);
    PartitionSpec spec = in == config.inputs.end() ? PartitionSpec{} : in->second;
    auto r = std::find(io.returned.begin(), io.returned.end(), out);
    std::string out_name = r == io.returned.end()
                               ? std::string()
                               : io.outputs[static_cast<size_t>(r - io.returned.begin())].name;
    if (auto named = config.outputs.find(out_name);
        named != config.outputs.end() && named->second.to_string() != spec.to_string())
      throw Error("sharding: state '" + name + "' is " + spec.to_string() + " but its output '" +
                  out_name + "' is " + named->second.to_string() + " (a state keeps one sharding)");
    a.result_specs[out] = spec;
  }
  for (size_t i = 0; i < g.outputs().size(); ++i)
    a.spmd.results.push_back(
        hlo_sharding(config.mesh, a.result_specs[i], g.type(g.outputs()[i]).shape));
  return a;
}

// Replicated data parallelism (pmap-style): every input and output is split / joined along
// dim 0 over a one-axis mesh "replica", params are copied whole; the module carries no
// shardings, only mhlo.num_replicas.
Annotated replicated(const Graph& g, const IoSpecs& io, int64_t replicas) {
  Annotated a;
  a.spmd.num_replicas = replicas;
  for (const IoSpec& s : io.inputs)
    check(s.type.shape.rank() >= 1, "replicated data parallelism: input '" + s.name +
                                        "' is a scalar; every input is split along dim 0");
  for (const IoSpec& s : io.outputs)
    check(s.type.shape.rank() >= 1, "replicated data parallelism: output '" + s.name +
                                        "' is a scalar; every output is joined along dim 0");
  for (int32_t id : g.inputs()) a.arg_specs[id] = PartitionSpec({"replica"});
  for (int32_t id : g.params()) a.arg_specs[id] = PartitionSpec();
  a.result_specs.assign(g.outputs().size(), PartitionSpec({"replica"}));
  return a;
}

struct SpmdProgram : ProgramInfo {
  std::string stablehlo;
  Mesh mesh;
  // The compiled function's arguments in order: kind, index into inputs / params / state, spec.
  enum class Kind : uint8_t { Input, Param, State };
  struct Arg {
    Kind kind;
    size_t index;
    PartitionSpec spec;
  };
  std::vector<Arg> args;
  std::vector<PartitionSpec> param_specs;   // per entry of `params`
  std::vector<PartitionSpec> state_specs;   // per entry of `state` (its input's spec)
  std::vector<PartitionSpec> result_specs;  // per graph output
  std::unique_ptr<LoadedProgram> loaded;
  // Per execute slot d (the executable's addressable-device order): the mesh position it runs.
  std::vector<int64_t> position_of_slot;
  std::vector<capi::PJRT_Device*> device_of_position;
};

// The host tensor of `type` from one buffer per mesh position of `p` (a replicated one:
// position 0's). Waits for the run computing them.
Tensor download_shards(const SpmdProgram& p,
                       const std::vector<std::unique_ptr<DeviceBuffer>>& shards,
                       const TensorType& type, const PartitionSpec& spec) {
  if (spec.is_replicated()) {  // every device holds the whole tensor: read one
    Tensor t(type.dtype, type.shape);
    shards[0]->download(t);
    return t;
  }
  Shape piece = shard_shape(p.mesh, spec, type.shape);
  std::vector<Tensor> host;
  for (const auto& b : shards) {
    Tensor s(type.dtype, piece);
    b->download(s);
    host.push_back(std::move(s));
  }
  return assemble_from_shards(host, type, p.mesh, spec);
}

using Shards = std::vector<std::unique_ptr<DeviceBuffer>>;

// The device side of one SPMD run_async: each returned output's shards (by mesh position), the
// input shards the run reads, and the program (which keeps the client and executable alive).
struct SpmdPendingRun final : AsyncResult::Pending {
  explicit SpmdPendingRun(std::shared_ptr<const SpmdProgram> p) : program(std::move(p)) {}
  void wait() override {
    for (const Shards& o : outputs)
      for (const auto& b : o) b->await_ready();
  }
  Tensor fetch(size_t index) override {
    const SpmdProgram& p = *program;
    return download_shards(p, outputs[index], p.outputs[index].type,
                           p.result_specs[p.returned[index]]);
  }
  std::shared_ptr<const SpmdProgram> program;
  std::vector<Shards> outputs;  // by outputs() index
  std::vector<Shards> fed;      // this run's input shards
};

// A param's shards, one per mesh position, uploaded once by set_param.
using ShardedParam = std::shared_ptr<const std::vector<std::unique_ptr<DeviceBuffer>>>;

class SpmdExecutable final : public ExecutableCore<SpmdProgram, ShardedParam> {
 public:
  SpmdExecutable(std::shared_ptr<const SpmdProgram> program, ParamBindings<ShardedParam> params)
      : ExecutableCore(std::move(program), std::move(params)) {}

  Capabilities capabilities() const override {
    return {.clone = true, .concurrent_clones = false, .typed_io = true, .zero_copy_params = false};
  }

  std::unique_ptr<Executable> clone() const override {
    auto c = std::make_unique<SpmdExecutable>(program_ptr(), share_params());
    copy_state_to(*c);
    return c;
  }

 protected:
  ShardedParam bind_param(size_t index, const Tensor& value) override {
    const SpmdProgram& p = program();
    return std::make_shared<const std::vector<std::unique_ptr<DeviceBuffer>>>(
        upload_shards(value, p.param_specs[index]));
  }

  // A state is split by its spec and kept as one device buffer per mesh position; each run
  // donates them (tf.aliasing_output) and keeps the shards of the bound output.
  ShardedParam make_state(size_t index, const Tensor& value) override {
    return std::make_shared<const std::vector<std::unique_ptr<DeviceBuffer>>>(
        upload_shards(value, program().state_specs[index]));
  }
  Tensor read_state(size_t index, const ShardedParam& value) const override {
    const SpmdProgram& p = program();
    try {
      return download_shards(p, *value, p.state[index].type, p.state_specs[index]);
    } catch (const Error& e) {
      throw Error("state '" + p.state[index].name + "': " + e.what() +
                  " (the state holds the output of a failed run: set_state() or reset_state() "
                  "it before the next run)");
    }
  }

  std::vector<Tensor> execute(const TensorMap& inputs, const ParamBindings<ShardedParam>& params,
                              std::vector<ShardedParam>& state) override {
    const std::string label =
        "run of '" + program().graph.name() + "' on " + program().device.to_string();
    return execute_async(inputs, params, state, label).outputs();
  }

  // Uploads the input shards, starts the run on every device and returns at once; outputs are
  // downloaded and assembled on first read, state shards stay on the devices.
  AsyncResult execute_async(const TensorMap& inputs, const ParamBindings<ShardedParam>& params,
                            std::vector<ShardedParam>& state, const std::string& label) override {
    const SpmdProgram& p = program();
    size_t n = static_cast<size_t>(p.mesh.size());
    auto pending = std::make_unique<SpmdPendingRun>(program_ptr());
    std::vector<std::vector<capi::PJRT_Buffer*>> args(n);
    pending->fed.reserve(p.args.size());  // `shards` points into it
    for (const SpmdProgram::Arg& arg : p.args) {
      const Shards* shards = nullptr;
      if (arg.kind == SpmdProgram::Kind::Param) {
        shards = params[arg.index].get();
      } else if (arg.kind == SpmdProgram::Kind::State) {
        shards = state[arg.index].get();
      } else {
        pending->fed.push_back(upload_shards(inputs.at(p.inputs[arg.index].name), arg.spec));
        shards = &pending->fed.back();
      }
      for (size_t slot = 0; slot < n; ++slot)
        args[slot].push_back((*shards)[static_cast<size_t>(p.position_of_slot[slot])]->raw());
    }
    std::vector<std::vector<std::unique_ptr<DeviceBuffer>>> outs;
    try {
      outs = p.loaded->execute_all(args, p.graph.outputs().size());
    } catch (const Error& e) {
      throw_after_failed_execute(e, state, p.state, [](const ShardedParam& shards) {
        return std::any_of(shards->begin(), shards->end(),
                           [](const auto& b) { return b->is_deleted(); });
      });
    }
    std::vector<size_t> slot_of_position(n);
    for (size_t slot = 0; slot < n; ++slot)
      slot_of_position[static_cast<size_t>(p.position_of_slot[slot])] = slot;
    auto per_position = [&](size_t out) {
      Shards shards(n);
      for (size_t pos = 0; pos < n; ++pos)
        shards[pos] = std::move(outs[slot_of_position[pos]][out]);
      return shards;
    };
    for (size_t i = 0; i < p.returned.size(); ++i)
      pending->outputs.push_back(per_position(p.returned[i]));
    // The donated state shards are consumed by the run (aliased to these outputs), which may
    // still be computing them.
    for (size_t j = 0; j < state.size(); ++j)
      state[j] = std::make_shared<const Shards>(per_position(p.state_outputs[j]));
    return AsyncResult(std::move(pending), p.returned.size(), label);
  }

 private:
  std::vector<std::unique_ptr<DeviceBuffer>> upload_shards(const Tensor& value,
                                                           const PartitionSpec& spec) const {
    const SpmdProgram& p = program();
    const Client& client = *p.loaded->client();
    std::vector<std::unique_ptr<DeviceBuffer>> out;
    if (spec.is_replicated()) {
      for (capi::PJRT_Device* d : p.device_of_position) out.push_back(client.upload(value, d));
      return out;
    }
    std::vector<Tensor> shards = split_by_sharding(value, p.mesh, spec);
    for (size_t pos = 0; pos < shards.size(); ++pos)
      out.push_back(client.upload(shards[pos], p.device_of_position[pos]));
    return out;
  }
};

class PjrtSpmdBackend final : public Backend {
 public:
  // `replicas`: replicated data parallelism over sharding.mesh (one axis "replica") instead
  // of an SPMD program.
  PjrtSpmdBackend(ShardingConfig sharding, std::string plugin_path, bool replicas = false)
      : sharding_(std::move(sharding)), client_(std::move(plugin_path)), replicas_(replicas) {
    check(sharding_.mesh.size() > 0, "make_pjrt_spmd_backend: the mesh has no devices");
  }

  std::string name() const override { return "pjrt"; }
  DeviceKind device_kind() const override { return DeviceKind::Pjrt; }
  std::set<OpKind> supported_ops() const override { return native_ops(); }

  std::unique_ptr<Executable> compile(const Graph& graph, const CompileOptions& options,
                                      const Device& device) override {
    check_compile_request(pjrt_facts(), device, graph, options);
    check(!replicas_ || options.state.empty(),
          "pjrt: state is not supported with replicated data parallelism (" +
              sharding_.mesh.to_string() + "); use an SPMD mesh");
    PipelineResult compiled = run_pjrt_pipeline(graph, options);
    auto program = std::make_shared<SpmdProgram>();
    SpmdProgram& p = *program;
    p.init(graph, std::move(compiled), device, options.quantized_params, options.state);
    check_program_memory(pjrt_facts(), options, p);
    p.mesh = sharding_.mesh;
    std::vector<std::pair<std::string, size_t>> state;
    for (size_t j = 0; j < p.state.size(); ++j)
      state.emplace_back(p.state[j].name, p.state_outputs[j]);
    Annotated a = replicas_ ? replicated(p.graph, io_specs_of(graph), p.mesh.size())
                            : annotate(p.graph, io_specs_of(graph), sharding_, state);
    if (replicas_) {  // the graph is one replica's program: runs take and give N times dim 0
      for (IoSpec& s : p.inputs) s.type.shape[0] *= p.mesh.size();
      for (IoSpec& s : p.outputs) s.type.shape[0] *= p.mesh.size();
    }
    auto index_of = [](const std::vector<IoSpec>& specs, const std::string& name) {
      for (size_t i = 0; i < specs.size(); ++i)
        if (specs[i].name == name) return i;
      throw Error("pjrt: internal error: compiled graph has an unknown argument '" + name + "'");
    };
    p.param_specs.resize(p.params.size());
    p.state_specs.resize(p.state.size());
    std::map<int32_t, size_t> aliases;  // state input node -> its bound output (donated)
    for (int32_t id : p.graph.inputs()) {
      const std::string& name = p.graph.node(id).name;
      size_t s = 0;
      while (s < p.state.size() && p.state[s].name != name) ++s;
      if (s < p.state.size()) {
        p.args.push_back({SpmdProgram::Kind::State, s, a.arg_specs[id]});
        p.state_specs[s] = a.arg_specs[id];
        aliases[id] = p.state_outputs[s];
      } else {
        p.args.push_back({SpmdProgram::Kind::Input, index_of(p.inputs, name), a.arg_specs[id]});
      }
    }
    for (int32_t id : p.graph.params()) {
      size_t i = index_of(p.params, p.graph.node(id).name);
      p.args.push_back({SpmdProgram::Kind::Param, i, a.arg_specs[id]});
      p.param_specs[i] = a.arg_specs[id];
    }
    p.result_specs = a.result_specs;
    lower::Emitter emitter(p.graph, aliases);
    emitter.set_spmd(a.spmd);
    p.stablehlo = emitter.run();
    p.kernel_report = kernel_report_of(p.graph, p.stablehlo);

    std::shared_ptr<const Client> client = client_.get();
    std::vector<int64_t> ids;
    for (int d : p.mesh.devices()) {
      check(static_cast<size_t>(d) < client->devices().size(),
            "pjrt: the mesh uses device pjrt:" + std::to_string(d) + ", but plugin '" +
                client->plugin().path + "' has " + std::to_string(client->devices().size()) +
                " addressable device(s)");
      p.device_of_position.push_back(client->devices()[static_cast<size_t>(d)]);
      ids.push_back(client->describe_device(static_cast<size_t>(d)).id);
    }
    p.loaded = load_or_compile(  // the persistent compile cache; the options carry the devices
        client, p.stablehlo,
        replicas_ ? replicated_compile_options(ids) : spmd_compile_options(ids));
    // Execute takes one argument list per addressable device of the executable, in its order.
    for (capi::PJRT_Device* d : p.loaded->addressable_devices()) {
      int64_t pos = 0;
      while (pos < p.mesh.size() && p.device_of_position[static_cast<size_t>(pos)] != d) ++pos;
      check(pos < p.mesh.size(),
            "pjrt: internal error: the executable runs on a device "
            "outside the mesh");
      p.position_of_slot.push_back(pos);
    }
    check(static_cast<int64_t>(p.position_of_slot.size()) == p.mesh.size(),
          "pjrt: the SPMD executable runs on " + std::to_string(p.position_of_slot.size()) +
              " devices, the mesh has " + std::to_string(p.mesh.size()));
    ParamBindings<ShardedParam> params(p.params.size());
    return std::make_unique<SpmdExecutable>(std::move(program), std::move(params));
  }

 private:
  ShardingConfig sharding_;
  LazyClient client_;
  bool replicas_ = false;
};

}  // namespace

std::shared_ptr<Backend> make_pjrt_spmd_backend(ShardingConfig sharding, std::string plugin_path) {
  return std::make_shared<PjrtSpmdBackend>(std::move(sharding), std::move(plugin_path));
}

std::shared_ptr<Backend> make_pjrt_replicated_backend(std::vector<int> devices,
                                                      std::string plugin_path) {
  check(!devices.empty(), "make_pjrt_replicated_backend: no devices");
  auto n = static_cast<int64_t>(devices.size());
  Mesh mesh({{"replica", n}}, std::move(devices));
  return std::make_shared<PjrtSpmdBackend>(ShardingConfig{std::move(mesh), {}, {}, {}},
                                           std::move(plugin_path), /*replicas=*/true);
}

std::string lower_to_stablehlo_sharded(const Graph& graph, const ShardingConfig& sharding,
                                       const CompileOptions& options) {
  PipelineResult compiled = run_pjrt_pipeline(graph, options);
  IoSpecs io = io_specs_of(graph, options.state);
  std::vector<std::pair<std::string, size_t>> state;
  std::map<int32_t, size_t> aliases;
  for (size_t j = 0; j < io.state.size(); ++j) {
    state.emplace_back(io.state[j].name, io.state_outputs[j]);
    aliases[compiled.graph.find(io.state[j].name)] = io.state_outputs[j];
  }
  Annotated a = annotate(compiled.graph, io_specs_of(graph), sharding, state);
  lower::Emitter emitter(compiled.graph, aliases);
  emitter.set_spmd(a.spmd);
  return emitter.run();
}

}  // namespace rlx::pjrt
