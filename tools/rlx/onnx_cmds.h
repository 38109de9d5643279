// `rlx run` and `rlx info`: ONNX models (rlx/import/onnx.h) from the command line.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "rlx/ir/graph.h"

namespace CLI {
class App;
}  // namespace CLI

namespace rlx::tools {

struct OnnxRunArgs {
  std::string model;
  std::vector<std::string> inputs;  ///< "name=file.npy"
  std::vector<std::string> dims;    ///< "dim_param=size" for random inputs' symbolic dims
  std::string output_dir;           ///< empty: print only
  std::string device = "cpu";
  uint64_t seed = 0;
};

/// Adds `rlx run` / `rlx info` to `app`.
CLI::App* add_onnx_run_command(CLI::App& app, OnnxRunArgs& args);
CLI::App* add_onnx_info_command(CLI::App& app, std::string& model);
/// Runs the model on the --input files (random values of the declared shapes for inputs not
/// given: floats uniform in [-1, 1), integers in [0, 10), symbolic dims from --dim or 1) and
/// prints each output's name, type and checksums; --output-dir writes them as NAME.npy.
int run_onnx_run(const OnnxRunArgs& args);
/// Prints the model's IR version, producer, opsets, inputs, outputs, op histogram and the op
/// types and value types rlx lacks.
int run_onnx_info(const std::string& model);

/// "name=value" options split at the first '='; throws rlx::Error naming `option` and a
/// malformed entry.
std::vector<std::pair<std::string, std::string>> split_assignments(
    const std::vector<std::string>& items, const char* option);

/// The graph of the ONNX model at `path` for its declared input shapes, symbolic dims from
/// `dims` ("NAME=SIZE") or 1, and the inputs of `inputs` ("NAME=FILE.npy") imported as
/// constants with their values (`rlx compile model.onnx`: a model whose shapes or control
/// flow depend on an input's value, e.g. silero-vad's sampling rate). Throws rlx::Error for a
/// NAME that is not a symbolic dim / an input of the model.
Graph import_onnx_graph(const std::string& path, const std::vector<std::string>& dims,
                        const std::vector<std::string>& inputs);

}  // namespace rlx::tools
