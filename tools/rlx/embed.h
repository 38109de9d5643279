// `rlx embed` and `rlx devices`.
#pragma once

#include <string>
#include <vector>

namespace rlx::tools {

struct EmbedArgs {
  std::string model;  ///< empty: models::default_model_dir()
  std::string device = "cpu";
  std::string format = "json";  ///< json | tsv
  std::string precision;        ///< empty: RLX_PRECISION / f32
  int64_t batch_size = 32;
  int64_t max_length = 0;  ///< 0: the model's
  bool similarity = false;
  bool verbose = false;
  std::vector<std::string> texts;  ///< empty: one text per line from stdin
};

/// Embeds the texts and prints them (or their cosine-similarity matrix) to stdout.
int run_embed(const EmbedArgs& args);
/// Lists the devices usable in this process.
int run_devices();

}  // namespace rlx::tools
