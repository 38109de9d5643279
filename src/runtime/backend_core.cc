// The plumbing every backend shares (rlx/runtime/backend_core.h): compile request checks,
// CompileOptions -> PipelineOptions, IO specs and set_param validation.
#include "rlx/runtime/backend_core.h"

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
  return po;
}

IoSpecs io_specs_of(const Graph& source) {
  IoSpecs s;
  for (int32_t id : source.inputs())
    s.inputs.push_back({source.node(id).name, source.node(id).results[0]});
  for (int32_t id : source.params())
    s.params.push_back({source.node(id).name, source.node(id).results[0]});
  for (Value v : source.outputs()) {
    std::string name = source.node(v).name;
    if (source.node(v).results.size() > 1) name += "#" + std::to_string(v.index);
    s.outputs.push_back({name, source.type(v)});
  }
  return s;
}

void ProgramInfo::init(const Graph& source, PipelineResult&& compiled, const Device& on,
                       const std::map<std::string, QuantizedParamBinding>& quantized) {
  graph = std::move(compiled.graph);
  plan = std::move(compiled.plan);
  dispatch = std::move(compiled.report);
  IoSpecs specs = io_specs_of(source);
  inputs = std::move(specs.inputs);
  params = std::move(specs.params);
  for (IoSpec& p : params) {
    auto it = quantized.find(p.name);
    if (it == quantized.end()) continue;
    p.quantized = QuantizedStorage{it->second, p.type};
    p.type = quantized_param_type(p.type, it->second, p.name);
  }
  outputs = std::move(specs.outputs);
  device = on;
}

void check_program_memory(const BackendFacts& backend, const CompileOptions& options,
                          const ProgramInfo& program) {
  check_memory_limit(backend.name,
                     planned_memory(program.graph, program.plan, program.params, program.outputs),
                     options.memory_limit);
}

}  // namespace rlx
