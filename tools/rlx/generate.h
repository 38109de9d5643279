// `rlx generate` and `rlx chat`: text generation with a Llama-family GGUF decoder.
#pragma once

#include <cstdint>
#include <string>

#include "rlx/models/sampling.h"

namespace CLI {
class App;
}  // namespace CLI

namespace rlx::tools {

struct GenerateArgs {
  std::string model;   ///< empty: default_llm_gguf_path()
  std::string prompt;  ///< generate only
  std::string system;  ///< chat: a system message (else the template's default)
  std::string device = "cpu";
  std::string act_quant = "int8";  ///< LlamaOptions::act_quant
  std::string cache_type = "f32";  ///< LlamaOptions::cache_type
  int64_t max_tokens = 128;
  int64_t ctx = 0;    ///< 0: min(context_length, 4096)
  int threads = 0;    ///< 0: RLX_NUM_THREADS, else physical cores
  bool chat = false;  ///< generate: apply the chat template to the prompt (one user turn)
  /// Sampling (llama.cpp's flags and, except the temperature, its defaults): --temp 0, the
  /// default, is greedy; the seed is `seed`'s.
  models::SamplingParams sampling{.temperature = 0.0f};
  int64_t seed = -1;  ///< -1: a random seed (printed with the statistics)
};

/// Adds `rlx generate` / `rlx chat` to `app`, filling `args`.
CLI::App* add_generate_command(CLI::App& app, GenerateArgs& args);
CLI::App* add_chat_command(CLI::App& app, GenerateArgs& args);
/// Streams the continuation of args.prompt to stdout; speed, load time and memory to stderr.
int run_generate(const GenerateArgs& args);
/// Reads user turns from stdin (one per line) and streams each reply to stdout, keeping the
/// conversation in the KV cache; the file's chat template (ChatML) renders the prompt.
int run_chat(const GenerateArgs& args);

}  // namespace rlx::tools
