// `rlx run` and `rlx info` (onnx_cmds.h).
#include "onnx_cmds.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <random>

#include "rlx/import/onnx.h"
#include "rlx/io/npy.h"
#include "rlx/ir/error.h"

namespace rlx::tools {

std::vector<std::pair<std::string, std::string>> split_assignments(
    const std::vector<std::string>& items, const char* option) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const std::string& s : items) {
    size_t eq = s.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == s.size())
      throw Error(std::string(option) + ": expected NAME=VALUE, got '" + s + "'");
    out.emplace_back(s.substr(0, eq), s.substr(eq + 1));
  }
  return out;
}

namespace {

std::string dims_text(const onnx::TensorInfo& t) {
  if (!t.dims) return "(no shape)";
  std::string s = "[";
  for (size_t i = 0; i < t.dims->size(); ++i) {
    const onnx::Dim& d = (*t.dims)[i];
    s += (i ? "," : "") + (d.value >= 0      ? std::to_string(d.value)
                           : d.param.empty() ? "?"
                                             : d.param);
  }
  return s + "]";
}

// --dim NAME=SIZE options; every NAME must be a symbolic dim of one of the model's inputs.
std::map<std::string, int64_t> parse_dims(const onnx::Model& model,
                                          const std::vector<std::string>& items) {
  std::map<std::string, int64_t> dims;
  std::vector<std::string> known;
  for (const onnx::TensorInfo& in : model.info().inputs)
    for (const onnx::Dim& d : in.dims.value_or(std::vector<onnx::Dim>{}))
      if (d.value < 0 && !d.param.empty() &&
          std::find(known.begin(), known.end(), d.param) == known.end())
        known.push_back(d.param);
  for (const auto& [name, v] : split_assignments(items, "--dim")) {
    size_t used = 0;
    int64_t n = -1;
    try {
      n = std::stoll(v, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != v.size() || n < 0)
      throw Error("--dim " + name + ": expected a size >= 0, got '" + v + "'");
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      std::string list;
      for (const std::string& k : known) list += (list.empty() ? "" : ", ") + k;
      throw Error("--dim " + name + ": no input of the model has a symbolic dim '" + name + "' (" +
                  (list.empty() ? "it has none" : "its symbolic dims: " + list) +
                  "; dims shown as ? in `rlx info` take their size from --input)");
    }
    dims[name] = n;
  }
  return dims;
}

// `info`'s declared shape, symbolic (or unknown) dims from `dims`, else 1.
Shape declared_shape(const onnx::TensorInfo& info, const std::map<std::string, int64_t>& dims) {
  std::vector<int64_t> shape;
  for (const onnx::Dim& d : info.dims.value_or(std::vector<onnx::Dim>{})) {
    auto it = dims.find(d.param);
    shape.push_back(d.value >= 0 ? d.value : it != dims.end() ? it->second : 1);
  }
  return Shape(shape);
}

// Random values of `info`'s declared shape.
Tensor random_input(const onnx::TensorInfo& info, const std::map<std::string, int64_t>& dims,
                    std::mt19937_64& rng) {
  if (!info.dtype)
    throw Error("input '" + info.name + "' has type " + info.type + ", which rlx lacks");
  Tensor t(*info.dtype, declared_shape(info, dims));
  std::uniform_real_distribution<double> real(-1.0, 1.0);
  std::uniform_int_distribution<int> small(0, 9);
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (is_float(t.dtype()))
      t.set_f64(i, real(rng));
    else
      t.set_i64(i, is_bool(t.dtype()) ? small(rng) % 2 : small(rng));
  }
  return t;
}

// A file name for an output: characters outside [A-Za-z0-9_.-] become '_'.
std::string file_name(std::string name) {
  for (char& c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '.' && c != '-') c = '_';
  return name.empty() ? "output" : name;
}

// --input NAME=FILE.npy options, each naming an input of the model.
std::map<std::string, Tensor> read_inputs(const onnx::Model& model,
                                          const std::vector<std::string>& items) {
  std::map<std::string, Tensor> feeds;
  for (const auto& [name, file] : split_assignments(items, "--input")) {
    bool known = false;
    for (const onnx::TensorInfo& in : model.info().inputs) known |= in.name == name;
    if (!known) throw Error("--input " + name + ": the model has no input '" + name + "'");
    feeds[name] = read_npy(file);
  }
  return feeds;
}

}  // namespace

CLI::App* add_onnx_run_command(CLI::App& app, OnnxRunArgs& a) {
  auto* s = app.add_subcommand("run", "Run an ONNX model (inputs from .npy files, or random)");
  s->add_option("model", a.model, "the .onnx file")->required();
  s->add_option("--input", a.inputs,
                "NAME=FILE.npy per input (inputs not given get random values of their declared "
                "shape)");
  s->add_option("--dim", a.dims, "NAME=SIZE for a symbolic dim of the random inputs (default 1)");
  s->add_option("--output-dir", a.output_dir, "write each output as DIR/NAME.npy");
  s->add_option("--device", a.device, "device: cpu or pjrt:N")->capture_default_str();
  s->add_option("--seed", a.seed, "seed of the random inputs")->capture_default_str();
  return s;
}

CLI::App* add_onnx_info_command(CLI::App& app, std::string& model) {
  auto* s = app.add_subcommand(
      "info", "Describe an ONNX model: opsets, inputs, outputs, op histogram, ops rlx lacks");
  s->add_option("model", model, "the .onnx file")->required();
  return s;
}

int run_onnx_run(const OnnxRunArgs& a) {
  onnx::Model model = onnx::Model::load(a.model);
  std::map<std::string, int64_t> dims = parse_dims(model, a.dims);
  std::map<std::string, Tensor> feeds = read_inputs(model, a.inputs);
  std::mt19937_64 rng(a.seed);
  for (const onnx::TensorInfo& in : model.info().inputs)
    if (!feeds.count(in.name)) {
      feeds[in.name] = random_input(in, dims, rng);
      std::printf("input %s: random %s\n", in.name.c_str(),
                  feeds[in.name].type().to_string().c_str());
    }
  onnx::InferenceSession session(model, Device::parse(a.device));
  std::vector<Tensor> outs = session.run({}, feeds);
  if (!a.output_dir.empty()) std::filesystem::create_directories(a.output_dir);
  for (size_t i = 0; i < outs.size(); ++i) {
    const std::string& name = model.info().outputs[i].name;
    double sum = 0, abs_sum = 0;
    for (int64_t k = 0; k < outs[i].numel(); ++k) {
      double v = outs[i].get_f64(k);
      sum += v;
      abs_sum += std::fabs(v);
    }
    std::printf("output %s: %s sum=%.9g abs_sum=%.9g\n", name.c_str(),
                outs[i].type().to_string().c_str(), sum, abs_sum);
    if (!a.output_dir.empty())
      write_npy((std::filesystem::path(a.output_dir) / (file_name(name) + ".npy")).string(),
                outs[i]);
  }
  return 0;
}

Graph import_onnx_graph(const std::string& path, const std::vector<std::string>& dim_items,
                        const std::vector<std::string>& input_items) {
  onnx::Model model = onnx::Model::load(path);
  std::map<std::string, int64_t> dims = parse_dims(model, dim_items);
  onnx::ImportOptions o;
  o.input_values = read_inputs(model, input_items);
  for (const onnx::TensorInfo& in : model.info().inputs)
    if (!o.input_values.count(in.name)) o.input_shapes[in.name] = declared_shape(in, dims);
  return model.import_graph(o).graph;
}

int run_onnx_info(const std::string& path) {
  onnx::Model model = onnx::Model::load(path);
  const onnx::ModelInfo& info = model.info();
  std::printf("%s: ONNX IR version %lld", path.c_str(), static_cast<long long>(info.ir_version));
  if (!info.producer.empty()) std::printf(", producer %s", info.producer.c_str());
  std::printf("\nopsets:");
  for (const onnx::OpsetId& o : info.opsets)
    std::printf(" %s %lld", o.domain.empty() ? "ai.onnx" : o.domain.c_str(),
                static_cast<long long>(o.version));
  std::printf("\ninputs:\n");
  for (const onnx::TensorInfo& t : info.inputs)
    std::printf("  %s: %s %s\n", t.name.c_str(), t.type.c_str(), dims_text(t).c_str());
  std::printf("outputs:\n");
  for (const onnx::TensorInfo& t : info.outputs)
    std::printf("  %s: %s %s\n", t.name.c_str(), t.type.c_str(), dims_text(t).c_str());
  std::printf("nodes: %lld, initializers: %lld\nops:\n", static_cast<long long>(info.num_nodes),
              static_cast<long long>(info.num_initializers));
  for (const auto& [op, n] : info.op_histogram)
    std::printf("  %6lld %s\n", static_cast<long long>(n), op.c_str());
  if (info.unsupported.empty() && info.unsupported_types.empty()) {
    std::printf("rlx converts every op of this model\n");
    return 0;
  }
  std::printf("not supported by rlx:\n");
  for (const onnx::UnsupportedOp& u : info.unsupported)
    std::printf("  op %s%s (opset %lld): %zu node(s), first '%s'\n",
                u.domain.empty() ? "" : (u.domain + ".").c_str(), u.op_type.c_str(),
                static_cast<long long>(u.opset), u.nodes.size(), u.nodes.front().c_str());
  for (const auto& [what, type] : info.unsupported_types)
    std::printf("  type %s of %s\n", type.c_str(), what.c_str());
  return 0;
}

}  // namespace rlx::tools
