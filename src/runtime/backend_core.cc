// The plumbing every backend shares (rlx/runtime/backend_core.h): compile request checks,
// CompileOptions -> PipelineOptions, IO specs and set_param validation.
#include "rlx/runtime/backend_core.h"

#include <limits>

#include "rlx/ir/error.h"
#include "rlx/runtime/memory_limit.h"

namespace rlx {

BackendFacts BackendFacts::of(const Backend& backend) {
  BackendFacts f;
  f.name = backend.name();
  f.device_kind = backend.device_kind();
  f.supported = backend.supported_ops();
  return f;
}

void check_compile_request(const BackendFacts& backend, const Device& device) {
  check(device.kind == backend.device_kind,
        backend.name + " backend cannot compile for device '" + device.to_string() + "'");
}

void check_compile_request(const BackendFacts& backend, const Device& device, const Graph& graph,
                           const CompileOptions& options) {
  check_compile_request(backend, device);
  if (!options.state.empty()) io_specs_of(graph, options.state);
}

PipelineOptions make_pipeline_options(const BackendFacts& backend, const CompileOptions& options) {
  PipelineOptions po;
  po.backend = backend.name;
  po.supported = backend.supported;
  po.dispatch = options.dispatch.value_or(DispatchOptions{});
  po.precision = options.precision ? options.precision : backend.default_precision;
  po.dce = options.dce;
  po.fold_constants = options.fold_constants;
  po.quantized_params = options.quantized_params;
  po.seed = options.seed;
  for (const StateBinding& b : options.state) po.state_inputs.push_back(b.input);
  return po;
}

IoSpecs io_specs_of(const Graph& source, const std::vector<StateBinding>& state) {
  std::vector<IoSpec> inputs, outputs;
  for (int32_t id : source.inputs())
    inputs.push_back({source.node(id).name, source.node(id).results[0]});
  for (Value v : source.outputs()) {
    std::string name = source.node(v).name;
    if (source.node(v).results.size() > 1) name += "#" + std::to_string(v.index);
    outputs.push_back({name, source.type(v)});
  }
  IoSpecs s;
  for (int32_t id : source.params())
    s.params.push_back({source.node(id).name, source.node(id).results[0]});
  // Which inputs and outputs the bindings take, by index.
  std::vector<bool> input_bound(inputs.size(), false), output_bound(outputs.size(), false);
  for (const StateBinding& b : state) {
    const std::string what = "state binding '" + b.input + "' <- '" + b.output + "'";
    auto find = [](const std::vector<IoSpec>& specs, const std::string& name) {
      for (size_t i = 0; i < specs.size(); ++i)
        if (specs[i].name == name) return i;
      return specs.size();
    };
    auto names = [](const std::vector<IoSpec>& specs) {
      std::string n;
      for (const IoSpec& x : specs) n += (n.empty() ? "" : ", ") + x.name;
      return n.empty() ? std::string("none") : n;
    };
    const size_t in = find(inputs, b.input), out = find(outputs, b.output);
    check(in < inputs.size(), what + ": '" + b.input + "' is not an input of graph '" +
                                  source.name() + "' (inputs: " + names(inputs) + ")");
    check(out < outputs.size(), what + ": '" + b.output + "' is not an output of graph '" +
                                    source.name() + "' (outputs: " + names(outputs) + ")");
    check(inputs[in].type == outputs[out].type,
          what + ": the input is " + inputs[in].type.to_string() + " but the output is " +
              outputs[out].type.to_string() + " (a state keeps one type)");
    check(!input_bound[in], what + ": input '" + b.input + "' is already bound");
    check(!output_bound[out], what + ": output '" + b.output + "' is already bound");
    input_bound[in] = output_bound[out] = true;
    s.state.push_back({b.input, b.output, inputs[in].type});
    s.state_outputs.push_back(out);
  }
  for (size_t i = 0; i < inputs.size(); ++i)
    if (!input_bound[i]) s.inputs.push_back(std::move(inputs[i]));
  for (size_t i = 0; i < outputs.size(); ++i)
    if (!output_bound[i]) {
      s.outputs.push_back(std::move(outputs[i]));
      s.returned.push_back(i);
    }
  return s;
}

void ProgramInfo::init(const Graph& source, PipelineResult&& compiled, const Device& on,
                       const std::map<std::string, QuantizedParamBinding>& quantized,
                       const std::vector<StateBinding>& state_bindings) {
  graph = std::move(compiled.graph);
  plan = std::move(compiled.plan);
  dispatch = std::move(compiled.report);
  IoSpecs specs = io_specs_of(source, state_bindings);
  inputs = std::move(specs.inputs);
  params = std::move(specs.params);
  for (IoSpec& p : params) {
    auto it = quantized.find(p.name);
    if (it == quantized.end()) continue;
    p.quantized = QuantizedStorage{it->second, p.type};
    p.type = quantized_param_type(p.type, it->second, p.name);
  }
  outputs = std::move(specs.outputs);
  state = std::move(specs.state);
  returned = std::move(specs.returned);
  state_outputs = std::move(specs.state_outputs);
  device = on;
}

void check_program_memory(const BackendFacts& backend, const CompileOptions& options,
                          ProgramInfo& program, int64_t bodies, int64_t body_constants) {
  PlannedMemory m =
      planned_memory(program.graph, program.plan, program.params, program.outputs, program.state);
  m.bodies = bodies;
  if (__builtin_add_overflow(m.constants, body_constants, &m.constants))
    m.constants = std::numeric_limits<int64_t>::max();
  program.memory = m;
  check_memory_limit(backend.name, m, options.memory_limit);
}

}  // namespace rlx
