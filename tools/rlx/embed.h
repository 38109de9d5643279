// `rlx embed` and `rlx devices`.
#pragma once

#include <functional>
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
  /// A text that is not valid UTF-8: "error" (naming its line and byte offset), "skip" it
  /// (warning on stderr) or "replace" each ill-formed sequence with U+FFFD.
  std::string on_invalid_utf8 = "error";
  /// Accept checkpoint tensors the encoder does not use (EmbedderOptions::allow_unused_weights).
  bool allow_unused_weights = false;
  /// Quantize the Linear weights at load to this ggml format ("q8_0", "q4_k", ...;
  /// EmbedderOptions::quantize); empty: f32.
  std::string quantize;
  /// What quantized Linear layers multiply: "none" or "int8" (EmbedderOptions::act_quant).
  std::string act_quant = "none";
  std::vector<std::string> texts;  ///< empty: one text per line from stdin
};

/// Applies `policy` ("error", "skip" or "replace") to texts[i], named `where(i)` in messages
/// (e.g. "stdin line 3"): valid texts are kept as they are; under "error" the first invalid
/// one throws rlx::Error "<where>: invalid UTF-8 at byte offset B (byte 0xFF); ...", under
/// "skip" invalid texts are dropped and a warning naming them goes to stderr, under "replace"
/// each ill-formed sequence becomes U+FFFD (rlx::replace_invalid_utf8).
std::vector<std::string> apply_utf8_policy(std::vector<std::string> texts,
                                           const std::string& policy,
                                           const std::function<std::string(size_t)>& where);

/// Embeds the texts and prints them (or their cosine-similarity matrix) to stdout.
int run_embed(const EmbedArgs& args);
/// Lists the devices usable in this process.
int run_devices();

}  // namespace rlx::tools
