// The SPMD pjrt backend: one graph compiled by XLA's SPMD partitioner over a device mesh, with
// the shardings of its inputs, params and outputs given as Shardy (sdy.sharding) or GSPMD
// (mhlo.sharding) annotations, the form chosen or detected per client; host tensors are split
// across the devices on the way in and assembled on the way out.
#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <tuple>

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
  std::map<int32_t, PartitionSpec> arg_specs;  // input / param node id -> spec
  std::vector<PartitionSpec> result_specs;     // per graph output
  int64_t num_partitions = 1, num_replicas = 1;
  bool replicated_data_parallel = false;  // no sharding attributes (num_replicas)
};

// The emitter's annotations of `a` for graph `g` on `mesh`, written in `form` (Gspmd or
// Shardy): mhlo.sharding strings, or sdy.mesh and sdy.sharding attributes.
lower::Emitter::Spmd spmd_annotations(const Graph& g, const Annotated& a, const Mesh& mesh,
                                      ShardingForm form) {
  lower::Emitter::Spmd spmd;
  spmd.num_partitions = a.num_partitions;
  spmd.num_replicas = a.num_replicas;
  if (a.replicated_data_parallel) return spmd;
  auto attribute = [&](const PartitionSpec& spec, const Shape& shape) {
    if (form == ShardingForm::Shardy) return "sdy.sharding = " + sdy_sharding(spec, shape);
    return "mhlo.sharding = \"" + hlo_sharding(mesh, spec, shape) + "\"";
  };
  if (form == ShardingForm::Shardy) spmd.preamble.push_back(sdy_mesh(mesh));
  for (const auto& [id, spec] : a.arg_specs)
    spmd.args[id] = attribute(spec, g.node(id).results[0].shape);
  for (size_t i = 0; i < g.outputs().size(); ++i)
    spmd.results.push_back(attribute(a.result_specs[i], g.type(g.outputs()[i]).shape));
  return spmd;
}

std::string names_of(const std::vector<IoSpec>& specs) {
  std::string out;
  for (const IoSpec& s : specs) out += (out.empty() ? "'" : ", '") + s.name + "'";
  return out.empty() ? "none" : out;
}

// Every name in `config` must be an input / param / output of the source graph (`io`).
void check_names(const IoSpecs& io, const ShardingConfig& config) {
  auto known = [](const std::vector<IoSpec>& specs, const std::string& name) {
    for (const IoSpec& s : specs)
      if (s.name == name) return true;
    return false;
  };
  for (const auto& [kind, map, specs] : {std::tuple{"input", &config.inputs, &io.inputs},
                                         std::tuple{"param", &config.params, &io.params},
                                         std::tuple{"output", &config.outputs, &io.outputs}})
    for (const auto& [name, spec] : *map) {
      if (known(*specs, name)) continue;
      // A name of the other leaf kind: say where it belongs (in_shardings vs param_shardings).
      std::string hint;
      if (map != &config.params && known(io.params, name))
        hint = "; '" + name + "' is a param: shard it through the params' shardings";
      else if (map == &config.params && known(io.inputs, name))
        hint = "; '" + name + "' is an input: shard it through the inputs' shardings";
      throw Error(std::string("sharding: the graph has no ") + kind + " '" + name + "' (" + kind +
                  "s: " + names_of(*specs) + ")" + hint);
    }
}

// Checks `config` against the graph given to compile (`io`: its specs) and the compiled graph
// `g`, and builds the annotations. Every name in `config` must exist in the source graph.
// `state`: (state input name, index of its bound output among g's outputs); a state's output
// takes the input's spec (it is the next run's input), and naming it otherwise is an error.
Annotated annotate(const Graph& g, const IoSpecs& io, const ShardingConfig& config,
                   const std::vector<std::pair<std::string, size_t>>& state = {}) {
  check_names(io, config);
  Annotated a;
  a.num_partitions = config.mesh.size();
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
      a.arg_specs[id] = spec_of(*map, n.name, n.results[0].shape, what);
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
  return a;
}

// Replicated data parallelism (pmap-style): every input and output is split / joined along
// dim 0 over a one-axis mesh "replica" (Concat; Stacked slices a leading device axis, which the
// executable handles itself), params are copied whole; the module carries no shardings, only
// mhlo.num_replicas.
Annotated replicated(const Graph& g, const IoSpecs& io, int64_t replicas, ReplicaLayout layout) {
  Annotated a;
  a.num_replicas = replicas;
  a.replicated_data_parallel = true;
  if (layout == ReplicaLayout::Concat) {
    for (const IoSpec& s : io.inputs)
      check(s.type.shape.rank() >= 1,
            "replicated data parallelism: input '" + s.name +
                "' is a scalar; every input is split along dim 0 (ReplicaLayout::Stacked takes "
                "scalars)");
    for (const IoSpec& s : io.outputs)
      check(s.type.shape.rank() >= 1,
            "replicated data parallelism: output '" + s.name +
                "' is a scalar; every output is joined along dim 0 (ReplicaLayout::Stacked "
                "gives scalars)");
  }
  for (int32_t id : g.inputs()) a.arg_specs[id] = PartitionSpec({"replica"});
  for (int32_t id : g.params()) a.arg_specs[id] = PartitionSpec();
  a.result_specs.assign(g.outputs().size(), PartitionSpec({"replica"}));
  return a;
}

// shard_map-style: the full shape of a tensor whose per-device shape is `shard` under `spec`
// (each split dim times the sizes of its axes; an unknown axis counts 1, validate_sharding
// names it).
Shape full_shape(const Mesh& mesh, const PartitionSpec& spec, const Shape& shard) {
  Shape full = shard;
  for (size_t d = 0; d < spec.dims.size() && static_cast<int>(d) < full.rank(); ++d)
    for (const std::string& axis : spec.dims[d])
      if (int a = mesh.axis_index(axis); a >= 0)
        full[static_cast<int>(d)] *= mesh.axes()[static_cast<size_t>(a)].second;
  return full;
}

// shard_map-style (the graph is the per-device body): every name in `config` must exist; each
// argument / result gets its spec (unnamed: P()), checked against its full shape. `full`
// receives the full shape of each input / param node id and graph output.
Annotated manual_sharding(const Graph& g, const IoSpecs& io, const ShardingConfig& config,
                          std::map<int32_t, Shape>& full, std::vector<Shape>& full_results) {
  Annotated a;
  a.num_partitions = config.mesh.size();
  a.result_specs.resize(g.outputs().size());
  check_names(io, config);
  auto spec_of = [&](const std::map<std::string, PartitionSpec>& m, const std::string& name,
                     const Shape& shard, const std::string& what, Shape& out) {
    auto it = m.find(name);
    PartitionSpec spec = it == m.end() ? PartitionSpec{} : it->second;
    check(spec.dims.size() <= static_cast<size_t>(shard.rank()),
          "shard_map: " + what + " '" + name + "' " + shard.to_string() + " with " +
              spec.to_string() + ": the spec has " + std::to_string(spec.dims.size()) +
              " dims but the per-device tensor has rank " + std::to_string(shard.rank()));
    out = full_shape(config.mesh, spec, shard);
    validate_sharding(config.mesh, spec, out, what + " '" + name + "'");
    return spec;
  };
  std::vector<int32_t> inputs = g.inputs(), params = g.params();
  for (const auto& [leaves, map, what] :
       {std::tuple{&inputs, &config.inputs, "input"}, std::tuple{&params, &config.params, "param"}})
    for (int32_t id : *leaves) {
      const Node& n = g.node(id);
      PartitionSpec spec = spec_of(*map, n.name, n.results[0].shape, what, full[id]);
      a.arg_specs[id] = spec;
    }
  full_results.assign(g.outputs().size(), Shape{});
  for (size_t i = 0; i < g.outputs().size(); ++i) full_results[i] = g.type(g.outputs()[i]).shape;
  for (size_t i = 0; i < io.outputs.size(); ++i) {
    size_t out = io.returned[i];
    a.result_specs[out] = spec_of(config.outputs, io.outputs[i].name,
                                  g.type(g.outputs()[out]).shape, "output", full_results[out]);
  }
  return a;
}

// The module of a shard_map-style program, as jax lowers jax.jit(shard_map(f, mesh, in_specs,
// out_specs)): @main takes and returns the full tensors with their mhlo.sharding; each argument
// goes through custom_call @Sharding (its sharding) and @SPMDFullToShardShape ({manual}) into
// the per-device body `body_module` (the graph emitted for one device, renamed
// @shmap_body), whose results go through @Sharding ({manual}) and @SPMDShardToFullShape (the
// output's sharding) back.
std::string shard_map_module(const Graph& g, const std::string& body_module, const Annotated& a,
                             const Mesh& mesh, const std::map<int32_t, Shape>& full,
                             const std::vector<Shape>& full_results) {
  std::vector<std::string> result_shardings;
  for (size_t i = 0; i < g.outputs().size(); ++i)
    result_shardings.push_back(hlo_sharding(mesh, a.result_specs[i], full_results[i]));
  const std::string kMain = "  func.func public @main(";
  size_t at = body_module.find(kMain);
  size_t end = body_module.rfind("}\n");
  check(at != std::string::npos && end != std::string::npos && end > at,
        "pjrt: internal error: unexpected module text for shard_map");
  std::string head = body_module.substr(0, body_module.find('\n') + 1);  // module @... {
  std::string body = "  func.func private @shmap_body(" +
                     body_module.substr(at + kMain.size(), end - at - kMain.size());
  std::ostringstream m;
  m << head << kMain;
  std::vector<std::string> shard_args, shard_types;
  int arg = 0, next = 0;
  std::ostringstream code;
  for (const std::vector<int32_t>& leaves : {g.inputs(), g.params()})
    for (int32_t id : leaves) {
      std::string name = "%arg" + std::to_string(arg++);
      std::string ft = lower::tensor_type(TensorType{g.node(id).results[0].dtype, full.at(id)});
      std::string st = lower::tensor_type(g.node(id).results[0]);
      const std::string sharding = hlo_sharding(mesh, a.arg_specs.at(id), full.at(id));
      m << (arg > 1 ? ", " : "") << name << ": " << ft << " {mhlo.sharding = \"" << sharding
        << "\"}";
      std::string s = "%" + std::to_string(next++), t = "%" + std::to_string(next++);
      code << "    " << s << " = stablehlo.custom_call @Sharding(" << name
           << ") {backend_config = \"\", mhlo.sharding = \"" << sharding << "\"} : (" << ft
           << ") -> " << ft << "\n";
      code << "    " << t << " = stablehlo.custom_call @SPMDFullToShardShape(" << s
           << ") {backend_config = \"\", mhlo.sharding = \"{manual}\"} : (" << ft << ") -> " << st
           << "\n";
      shard_args.push_back(t);
      shard_types.push_back(st);
    }
  m << ") -> (";
  std::vector<std::string> out_types, full_types;
  for (size_t i = 0; i < g.outputs().size(); ++i) {
    TensorType t = g.type(g.outputs()[i]);
    out_types.push_back(lower::tensor_type(t));
    full_types.push_back(lower::tensor_type(TensorType{t.dtype, full_results[i]}));
    m << (i ? ", " : "") << full_types[i] << " {mhlo.sharding = \"" << result_shardings[i] << "\"}";
  }
  m << ") {\n" << code.str();
  std::string call = "%" + std::to_string(next++);
  size_t n = g.outputs().size();
  code.str("");
  m << "    " << call << (n > 1 ? ":" + std::to_string(n) : "") << " = call @shmap_body(";
  for (size_t i = 0; i < shard_args.size(); ++i) m << (i ? ", " : "") << shard_args[i];
  m << ") : (";
  for (size_t i = 0; i < shard_types.size(); ++i) m << (i ? ", " : "") << shard_types[i];
  m << ") -> (";
  for (size_t i = 0; i < n; ++i) m << (i ? ", " : "") << out_types[i];
  m << ")\n";
  std::vector<std::string> results;
  for (size_t i = 0; i < n; ++i) {
    std::string r = n > 1 ? call + "#" + std::to_string(i) : call;
    std::string s = "%" + std::to_string(next++), f = "%" + std::to_string(next++);
    m << "    " << s << " = stablehlo.custom_call @Sharding(" << r
      << ") {backend_config = \"\", mhlo.sharding = \"{manual}\"} : (" << out_types[i] << ") -> "
      << out_types[i] << "\n";
    m << "    " << f << " = stablehlo.custom_call @SPMDShardToFullShape(" << s
      << ") {backend_config = \"\", mhlo.sharding = \"" << result_shardings[i] << "\"} : ("
      << out_types[i] << ") -> " << full_types[i] << "\n";
    results.push_back(f);
  }
  m << "    return";
  for (size_t i = 0; i < n; ++i) m << (i ? ", " : " ") << results[i];
  m << " : ";
  for (size_t i = 0; i < n; ++i) m << (i ? ", " : "") << full_types[i];
  m << "\n  }\n" << body << "}\n";
  return m.str();
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
  // Replicated with ReplicaLayout::Stacked: inputs and outputs carry a leading device axis.
  bool stacked = false;
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

// ReplicaLayout::Stacked: the [N, ...] tensor of `type` whose slice r is replica r's result.
// Waits for the run computing them.
Tensor download_stacked(const std::vector<std::unique_ptr<DeviceBuffer>>& replicas,
                        const TensorType& type) {
  Tensor t(type.dtype, type.shape);
  Shape one(std::vector<int64_t>(type.shape.dims().begin() + 1, type.shape.dims().end()));
  size_t bytes = t.nbytes() / replicas.size();
  for (size_t r = 0; r < replicas.size(); ++r) {
    Tensor slice = Tensor::borrow(type.dtype, one, t.data() + r * bytes);
    replicas[r]->download(slice);
  }
  return t;
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
    if (p.stacked) return download_stacked(outputs[index], p.outputs[index].type);
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
      } else if (p.stacked) {
        pending->fed.push_back(upload_stacked(inputs.at(p.inputs[arg.index].name)));
        shards = &pending->fed.back();
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
  // ReplicaLayout::Stacked: slice r of `value` ([N, ...]) to replica r's device.
  std::vector<std::unique_ptr<DeviceBuffer>> upload_stacked(const Tensor& value) const {
    const SpmdProgram& p = program();
    const Client& client = *p.loaded->client();
    Shape one(std::vector<int64_t>(value.shape().dims().begin() + 1, value.shape().dims().end()));
    size_t bytes = value.nbytes() / p.device_of_position.size();
    std::vector<std::unique_ptr<DeviceBuffer>> out;
    for (size_t r = 0; r < p.device_of_position.size(); ++r)
      out.push_back(client.upload(Tensor::borrow(value.dtype(), one, value.data() + r * bytes),
                                  p.device_of_position[r]));
    return out;
  }

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

// Compiles `graph` as one program over `sharding.mesh`: an SPMD program (XLA's partitioner), or
// with `replicas` one replica's program run on every device (jax.pmap-style). The body of both
// mesh backends and of the pjrt backend's device sets.
std::unique_ptr<Executable> compile_on_mesh(const Graph& graph, const CompileOptions& options,
                                            const Device& device, const ShardingConfig& sharding,
                                            bool replicas, ReplicaLayout layout, bool manual,
                                            LazyClient& lazy_client) {
  check_compile_request(pjrt_facts(), device, graph, options);
  check(!replicas || options.state.empty(),
        "pjrt: state is not supported with replicated data parallelism (" +
            sharding.mesh.to_string() + "); use an SPMD mesh");
  check(!manual || options.state.empty(),
        "pjrt: state is not supported in a shard_map-style program (" + sharding.mesh.to_string() +
            "); use make_pjrt_spmd_backend");
  if (!replicas && !manual)
    check_collectives(graph, sharding.mesh.size(), true,
                      "the SPMD program over " + sharding.mesh.to_string());
  PipelineResult compiled = run_pjrt_pipeline(graph, options);
  auto program = std::make_shared<SpmdProgram>();
  SpmdProgram& p = *program;
  p.init(graph, std::move(compiled), device, options.quantized_params, options.state);
  check_program_memory(pjrt_facts(), options, p);
  p.mesh = sharding.mesh;
  std::vector<std::pair<std::string, size_t>> state;
  for (size_t j = 0; j < p.state.size(); ++j)
    state.emplace_back(p.state[j].name, p.state_outputs[j]);
  std::map<int32_t, Shape> full;  // shard_map-style: full shapes of the arguments / results
  std::vector<Shape> full_results;
  Annotated a = replicas ? replicated(p.graph, io_specs_of(graph), p.mesh.size(), layout)
                : manual
                    ? manual_sharding(p.graph, io_specs_of(graph), sharding, full, full_results)
                    : annotate(p.graph, io_specs_of(graph), sharding, state);
  if (manual) {  // runs take and give the full tensors
    auto full_of = [&](const std::string& name) { return full.at(p.graph.find(name)); };
    for (IoSpec& s : p.inputs) s.type.shape = full_of(s.name);
    for (IoSpec& s : p.params) s.type.shape = full_of(s.name);
    for (size_t i = 0; i < p.outputs.size(); ++i)
      p.outputs[i].type.shape = full_results[p.returned[i]];
  }
  p.stacked = replicas && layout == ReplicaLayout::Stacked;
  if (p.stacked) {  // the graph is one replica's program: runs take and give [N, ...]
    for (std::vector<IoSpec>* specs : {&p.inputs, &p.outputs})
      for (IoSpec& s : *specs) {
        std::vector<int64_t>& dims = s.type.shape.dims();
        dims.insert(dims.begin(), p.mesh.size());
      }
  } else if (replicas) {  // runs take and give N times dim 0
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
  const ShardingForm requested = requested_sharding_form(sharding.form);  // before a plugin

  std::shared_ptr<const Client> client = lazy_client.get();
  std::vector<int64_t> ids;
  for (int d : p.mesh.devices()) {
    check(static_cast<size_t>(d) < client->devices().size(),
          "pjrt: the mesh uses device pjrt:" + std::to_string(d) + ", but plugin '" +
              client->plugin().path + "' has " + std::to_string(client->devices().size()) +
              " addressable device(s)");
    p.device_of_position.push_back(client->devices()[static_cast<size_t>(d)]);
    ids.push_back(client->describe_device(static_cast<size_t>(d)).id);
  }
  // The module in one sharding form, compiled through the persistent compile cache (the
  // options carry the devices; the key names the form).
  auto compile_as = [&](ShardingForm form) {
    lower::Emitter emitter(p.graph, aliases);
    if (manual) {  // the body is emitted without shardings: they are @main's (GSPMD form)
      emitter.set_spmd({{}, {}, {}, a.num_partitions, 1});
      p.stablehlo = shard_map_module(p.graph, emitter.run(), a, p.mesh, full, full_results);
    } else {
      emitter.set_spmd(spmd_annotations(p.graph, a, p.mesh, form));
      p.stablehlo = emitter.run();
    }
    p.loaded = load_or_compile(client, p.stablehlo,
                               replicas ? replicated_compile_options(ids)
                                        : spmd_compile_options(ids, form == ShardingForm::Shardy),
                               replicas ? "none" : sharding_form_name(form));
  };
  std::string note;
  if (replicas) {
    compile_as(ShardingForm::Gspmd);  // no sharding attributes: the form plays no part
    note = " (replicated over " + std::to_string(p.mesh.size()) + " devices)";
  } else if (manual) {
    compile_as(ShardingForm::Gspmd);  // the manual-sharding custom calls are GSPMD's
    note = " (shard_map over " + p.mesh.to_string() + ", GSPMD form)";
  } else {
    ShardingForm form =
        compile_in_sharding_form(requested, client->accepted_sharding_form(), compile_as);
    note = " (SPMD over " + p.mesh.to_string() + ", shardings in " +
           (form == ShardingForm::Shardy ? "Shardy" : "GSPMD") + " form)";
  }
  p.kernel_report = kernel_report_of(p.graph, p.stablehlo, note);
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

class PjrtSpmdBackend final : public Backend {
 public:
  // `replicas`: replicated data parallelism over sharding.mesh (one axis "replica") instead
  // of an SPMD program.
  PjrtSpmdBackend(ShardingConfig sharding, std::string plugin_path, bool replicas = false,
                  ReplicaLayout layout = ReplicaLayout::Concat, bool manual = false)
      : sharding_(std::move(sharding)),
        client_(std::move(plugin_path)),
        replicas_(replicas),
        layout_(layout),
        manual_(manual) {
    check(sharding_.mesh.size() > 0, "make_pjrt_spmd_backend: the mesh has no devices");
  }

  std::string name() const override { return "pjrt"; }
  DeviceKind device_kind() const override { return DeviceKind::Pjrt; }
  std::set<OpKind> supported_ops() const override { return native_ops(); }

  std::unique_ptr<Executable> compile(const Graph& graph, const CompileOptions& options,
                                      const Device& device) override {
    return compile_on_mesh(graph, options, device, sharding_, replicas_, layout_, manual_, client_);
  }

 private:
  ShardingConfig sharding_;
  LazyClient client_;
  bool replicas_ = false;
  ReplicaLayout layout_ = ReplicaLayout::Concat;
  bool manual_ = false;  // shard_map-style: the graph is the per-device body
};

}  // namespace

ShardingForm requested_sharding_form(ShardingForm configured) {
  return configured != ShardingForm::Auto ? configured : sharding_form_from_env();
}

ShardingForm compile_in_sharding_form(ShardingForm requested, std::atomic<ShardingForm>& accepted,
                                      const std::function<void(ShardingForm)>& compile) {
  if (requested != ShardingForm::Auto) {
    compile(requested);
    return requested;
  }
  if (ShardingForm known = accepted.load(); known != ShardingForm::Auto) {
    compile(known);
    return known;
  }
  std::string shardy_error;
  try {
    compile(ShardingForm::Shardy);
    accepted.store(ShardingForm::Shardy);
    return ShardingForm::Shardy;
  } catch (const Error& e) {
    shardy_error = e.what();
  }
  try {
    compile(ShardingForm::Gspmd);
  } catch (const Error& e) {
    throw Error(std::string(e.what()) +
                "\n(the Shardy form, tried first, failed too: " + shardy_error + ")");
  }
  accepted.store(ShardingForm::Gspmd);
  return ShardingForm::Gspmd;
}

std::vector<int> data_parallel_devices(const Device& device, const Client& client) {
  const auto count = static_cast<int>(client.devices().size());
  if (device.all_devices) {
    std::vector<int> all(static_cast<size_t>(count));
    for (int i = 0; i < count; ++i) all[static_cast<size_t>(i)] = i;
    return all;
  }
  for (int d : device.devices)
    check(d < count, "pjrt: device set '" + device.to_string() + "' names pjrt:" +
                         std::to_string(d) + ", but plugin '" + client.plugin().path + "' has " +
                         std::to_string(count) + " addressable device(s) (pjrt:0" +
                         (count > 1 ? "-" + std::to_string(count - 1) : "") + ")");
  return device.devices;
}

std::unique_ptr<Executable> compile_data_parallel(const Graph& graph, const CompileOptions& options,
                                                  const Device& device, LazyClient& client) {
  check_compile_request(pjrt_facts(), device, graph, options);
  std::vector<int> devices = data_parallel_devices(device, *client.get());
  const auto n = static_cast<int64_t>(devices.size());
  ShardingConfig config{Mesh({{"batch", n}}, std::move(devices)), {}, {}, {}};
  const PartitionSpec batch({"batch"});
  IoSpecs io = io_specs_of(graph);
  auto shard = [&](const IoSpec& s, const char* what, std::map<std::string, PartitionSpec>& into) {
    if (s.type.shape.rank() == 0) return;  // a scalar is replicated
    const int64_t rows = s.type.shape[0];
    check(rows % n == 0,
          "pjrt: device set '" + device.to_string() + "' splits dim 0 (the batch) of every input " +
              "and output over its " + std::to_string(n) + " devices, but " + what + " '" + s.name +
              "' " + s.type.shape.to_string() + " has batch " + std::to_string(rows) +
              ", not a multiple of " + std::to_string(n) + "; pad the batch to a multiple of " +
              std::to_string(n) + " or use fewer devices");
    into[s.name] = batch;
  };
  for (const IoSpec& s : io.inputs) shard(s, "input", config.inputs);
  for (const IoSpec& s : io.outputs) shard(s, "output", config.outputs);
  return compile_on_mesh(graph, options, device, config, /*replicas=*/false, ReplicaLayout::Concat,
                         /*manual=*/false, client);
}

std::shared_ptr<Backend> make_pjrt_spmd_backend(ShardingConfig sharding, std::string plugin_path) {
  return std::make_shared<PjrtSpmdBackend>(std::move(sharding), std::move(plugin_path));
}

std::shared_ptr<Backend> make_pjrt_shard_map_backend(ShardingConfig sharding,
                                                     std::string plugin_path) {
  return std::make_shared<PjrtSpmdBackend>(std::move(sharding), std::move(plugin_path),
                                           /*replicas=*/false, ReplicaLayout::Concat,
                                           /*manual=*/true);
}

std::shared_ptr<Backend> make_pjrt_replicated_backend(std::vector<int> devices,
                                                      std::string plugin_path,
                                                      ReplicaLayout layout) {
  check(!devices.empty(), "make_pjrt_replicated_backend: no devices");
  auto n = static_cast<int64_t>(devices.size());
  Mesh mesh({{"replica", n}}, std::move(devices));
  return std::make_shared<PjrtSpmdBackend>(ShardingConfig{std::move(mesh), {}, {}, {}},
                                           std::move(plugin_path), /*replicas=*/true, layout);
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
  // Auto (no plugin to ask): the form the backend tries first.
  ShardingForm form = requested_sharding_form(sharding.form);
  if (form == ShardingForm::Auto) form = ShardingForm::Shardy;
  lower::Emitter emitter(compiled.graph, aliases);
  emitter.set_spmd(spmd_annotations(compiled.graph, a, sharding.mesh, form));
  return emitter.run();
}

}  // namespace rlx::pjrt
