// Fuzz target: ONNX model bytes through the importer (fuzz_targets.h).
#include "rlx/import/onnx.h"

#include <optional>
#include <string_view>

#include "fuzz_targets.h"
#include "rlx/ir/error.h"

namespace rlx::fuzz {

int onnx_model(const uint8_t* data, size_t size) {
  std::optional<onnx::Model> model;
  try {
    model.emplace(onnx::Model::from_bytes(
        std::string_view(reinterpret_cast<const char*>(data), size), "", "<fuzz>"));
  } catch (const Error&) {
    return 0;
  }
  const onnx::ModelInfo& info = model->info();
  // Import for the declared shapes: symbolic dims 2, unknown dims 1; small inputs only, so one
  // input stays cheap (huge declared dims are the importer's to reject, tested separately).
  onnx::ImportOptions o;
  o.fold_limit_bytes = int64_t{1} << 20;
  for (const onnx::TensorInfo& in : info.inputs) {
    std::vector<int64_t> dims;
    int64_t n = 1;
    for (const onnx::Dim& d : in.dims.value_or(std::vector<onnx::Dim>{})) {
      dims.push_back(d.value >= 0 ? d.value : d.param.empty() ? 1 : 2);
      if (dims.back() > 0)
        n = n > (int64_t{1} << 20) / dims.back() ? (int64_t{1} << 21) : n * dims.back();
    }
    if (n > (int64_t{1} << 20)) return 0;
    o.input_shapes.emplace(in.name, Shape(dims));
  }
  try {
    onnx::ImportedGraph g = model->import_graph(o);
    expect(g.graph.verify().empty(), "an imported graph does not verify");
    expect(g.outputs.size() == info.outputs.size(), "an imported graph lost outputs");
    expect(g.graph.params().size() == g.params.size(), "a param of the graph has no data");
  } catch (const Error&) {
  }
  return 0;
}

}  // namespace rlx::fuzz
