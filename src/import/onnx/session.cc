// InferenceSession: onnxruntime's run(output_names, feeds) over rlx. One import + compile per
// distinct set of input shapes, cached; params bound from the model's initializers (views).
#include "rlx/import/onnx.h"
#include "rlx/ir/error.h"

namespace rlx::onnx {

InferenceSession::InferenceSession(Model model, Device device, CompileOptions options)
    : model_(std::move(model)), options_(std::move(options)), session_(device) {}

namespace {

// Fails unless input `name`'s feed `t` is small enough to be bound by value; `why` is the
// importer's InputValuesRequired message (which node needs it).
void check_bindable(const std::string& name, const Tensor& t, const std::string& why) {
  const bool small = t.numel() <= (is_float(t.dtype()) ? InferenceSession::kMaxValueInputFloats
                                                       : InferenceSession::kMaxValueInputElements);
  if (!small)
    throw Error(why + " (input '" + name + "' is " + t.type().to_string() +
                "; only integer or bool inputs of at most " +
                std::to_string(InferenceSession::kMaxValueInputElements) +
                " elements and float inputs of at most " +
                std::to_string(InferenceSession::kMaxValueInputFloats) + " are bound by value)");
}

}  // namespace

InferenceSession::Compiled& InferenceSession::compiled_for(
    const std::map<std::string, Tensor>& feeds) {
  std::string key;
  auto append = [&](const void* p, size_t n) { key.append(static_cast<const char*>(p), n); };
  for (const TensorInfo& in : inputs()) {
    auto it = feeds.find(in.name);
    check(it != feeds.end(), "run: input '" + in.name + "' is missing");
    const auto& dims = it->second.shape().dims();
    int64_t rank = static_cast<int64_t>(dims.size());
    append(&rank, sizeof rank);
    append(dims.data(), dims.size() * sizeof(int64_t));
  }
  for (const auto& [name, why] : value_inputs_) {
    const Tensor& t = feeds.at(name);
    check_bindable(name, t, why);
    append(t.data(), t.nbytes());
  }
  auto found = cache_.find(key);
  if (found != cache_.end()) return *found->second;
  auto c = std::make_unique<Compiled>();
  ImportOptions o;
  for (const auto& [name, t] : feeds) o.input_shapes.emplace(name, t.shape());
  for (const auto& [name, why] : value_inputs_) o.input_values.emplace(name, feeds.at(name));
  for (;;) {
    try {
      c->imported = model_.import_graph(o);
      break;
    } catch (const InputValuesRequired& e) {
      // Bind the inputs the model needs by value, when they are small.
      for (const std::string& name : e.inputs()) {
        const Tensor& t = feeds.at(name);
        check_bindable(name, t, e.what());
        if (o.input_values.count(name)) throw;
        o.input_values.emplace(name, t);
        value_inputs_.emplace_back(name, e.what());
        key.append(reinterpret_cast<const char*>(t.data()), t.nbytes());
      }
    }
  }
  c->exe = session_.compile(c->imported.graph, options_);
  for (const auto& [name, t] : c->imported.params) c->exe->set_param(name, t);
  return *cache_.emplace(std::move(key), std::move(c)).first->second;
}

const ImportedGraph& InferenceSession::graph_for(const std::map<std::string, Tensor>& feeds) {
  return compiled_for(feeds).imported;
}

std::vector<Tensor> InferenceSession::run(const std::vector<std::string>& output_names,
                                          const std::map<std::string, Tensor>& feeds) {
  for (const auto& [name, t] : feeds) {
    const TensorInfo* info = nullptr;
    for (const TensorInfo& in : inputs())
      if (in.name == name) info = &in;
    if (!info) {
      std::string names;
      for (const TensorInfo& in : inputs()) names += (names.empty() ? "" : ", ") + in.name;
      throw Error("run: unknown input '" + name + "' (inputs: " + names + ")");
    }
    if (info->dtype && *info->dtype != t.dtype())
      throw Error("run: input '" + name + "' must be " + info->type + ", got " +
                  onnx_type_name(t.dtype()));
  }
  Compiled& c = compiled_for(feeds);
  TensorMap in;
  for (const auto& [onnx_name, rlx_name] : c.imported.inputs)
    in.emplace(rlx_name, feeds.at(onnx_name));
  std::vector<Tensor> all = c.exe->run(in);
  if (output_names.empty()) return all;
  std::vector<Tensor> out;
  for (const std::string& want : output_names) {
    size_t i = 0;
    while (i < c.imported.outputs.size() && c.imported.outputs[i] != want) ++i;
    if (i == c.imported.outputs.size()) {
      std::string names;
      for (const std::string& o : c.imported.outputs) names += (names.empty() ? "" : ", ") + o;
      throw Error("run: unknown output '" + want + "' (outputs: " + names + ")");
    }
    out.push_back(all[i]);
  }
  return out;
}

}  // namespace rlx::onnx
