// MiniLM sentence-embedding benchmark, rlx side: model only (token ids -> normalized embeddings)
// and end to end (strings -> normalized embeddings, tokenization included) at [batch, seq]
// shapes whose every row holds `seq` real tokens. Writes each shape's texts, token ids, outputs
// and timings to --out DIR/b<batch>/ for bench/embed_peers.py (ONNX Runtime, JAX), which prints
// the comparison table. bench/embed_bench.sh runs both; see README "Benchmarks".
// --precision POLICY (default RLX_PRECISION, else always-f32): the compile's precision policy
// (e.g. auto-mixed-bf16); the table then also prints the smallest cosine of an embedding to the
// always-f32 embedding of the same tokens.
// RLX_BENCH_CPU_TIME=1: each call timed in process CPU time instead of wall time (meta.json's
// "clock": "cpu", which the peer scripts then use for ONNX Runtime too), so that on a machine
// loaded by other processes a 1-thread run measures its own work (time descheduled does not
// count; cache and memory contention still do). Meant for 1 thread: with more, the threads' times
// add up.
#include <dnnl.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "rlx/io/atomic_file.h"
#include "rlx/io/safetensors.h"
#include "rlx/ir/error.h"
#include "rlx/ir/quant.h"
#include "rlx/models/sentence_embedder.h"
#include "rlx/opt/precision.h"
#include "rlx/runtime/threading.h"

namespace {

using namespace rlx;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

struct Options {
  std::vector<int64_t> batches = {1, 32};
  int64_t seq = 128;
  int warmup = 3;       // untimed calls before the timed ones
  int min_runs = 20;    // timed calls at least ...
  double budget_s = 2;  // ... and at least this many seconds of them
  std::string model_dir;
  std::string out_dir;
  std::string quantize;  // a ggml format for the Linear weights (EmbedderOptions::quantize)
  std::string act_quant = "none";  // EmbedderOptions::act_quant
  // EmbedderOptions::precision; always-f32 unless --precision (or RLX_PRECISION) names another.
  PrecisionPolicy precision;
};

// Varied English prose; text i starts at sentence i and appends the following ones (cyclically)
// until it holds more than `seq` tokens, so truncation leaves `seq` real tokens in every row and
// no two rows of a batch are alike.
constexpr const char* kSentences[] = {
    "The committee postponed its decision on the new railway line until the environmental "
    "survey of the wetlands north of the city has been completed.",
    "After three weeks of rain, the farmers in the valley finally began harvesting the wheat, "
    "although much of it had already been flattened by the storms.",
    "Researchers at the university have developed a battery that charges in under five minutes "
    "and keeps most of its capacity after thousands of cycles.",
    "She walked along the harbour at dawn, watching the fishing boats return with their nets "
    "full and the gulls circling noisily overhead.",
    "The museum's new exhibition traces the history of printing from wooden blocks in "
    "eighth-century China to the digital presses of today.",
    "Because the compiler fuses adjacent elementwise operations, the generated kernels read "
    "each tensor from memory only once.",
    "Local volunteers repaired the old stone bridge over the summer, using lime mortar mixed "
    "according to a recipe found in the parish archives.",
    "The orchestra opened the season with a symphony that had not been performed in the city "
    "for more than sixty years.",
    "Investors reacted cautiously to the central bank's announcement, and the currency barely "
    "moved during the afternoon session.",
    "A small team of engineers spent the winter rewriting the scheduler so that short jobs no "
    "longer wait behind long batch computations.",
    "The recipe calls for two cups of flour, a pinch of salt, three eggs and enough milk to "
    "make a smooth, pourable batter.",
    "Astronomers observed a faint companion orbiting the star every nineteen days, hidden "
    "until now by the glare of its much brighter host.",
    "Despite the heavy traffic, the ambulance reached the hospital in eleven minutes, and the "
    "patient was treated immediately.",
    "The novel follows two sisters who inherit a bookshop in Lisbon and slowly uncover the "
    "secrets their grandmother kept for half a century.",
    "Students who slept at least eight hours before the examination scored noticeably higher "
    "than those who stayed up late revising.",
    "Engineers inspected every weld of the pipeline after sensors detected a small drop in "
    "pressure near the pumping station.",
};
constexpr size_t kNumSentences = sizeof(kSentences) / sizeof(kSentences[0]);

std::vector<std::string> make_texts(const WordPieceTokenizer& tok, int64_t count, int64_t seq) {
  std::vector<std::string> texts;
  for (int64_t i = 0; i < count; ++i) {
    std::string text;
    // [CLS] and [SEP] count toward seq, so more than seq - 2 content tokens means truncation.
    for (size_t k = 0; static_cast<int64_t>(tok.encode(text, false).size()) <= seq - 2; ++k) {
      check(k < 4 * kNumSentences,
            "embed bench: cannot build a text of " + std::to_string(seq) + " tokens");
      if (!text.empty()) text += ' ';
      text += kSentences[(static_cast<size_t>(i) + k) % kNumSentences];
    }
    texts.push_back(text);
  }
  return texts;
}

struct Timing {
  double median_ms = NAN, min_ms = NAN;
  int runs = 0;
};

// Whether RLX_BENCH_CPU_TIME=1 asks for process CPU time instead of wall time.
// Multiply-adds x 2 of one model-only run: the Linear layers (Q, K, V, output, FFN up and
// down) and attention's two batched products; the rest (norms, softmax, GELU, pooling) is O(size)
// and not counted, as in GEMM-peak comparisons.
double model_gflop(const models::BertConfig& c, int64_t batch, int64_t seq) {
  const double m = double(batch) * double(seq), h = double(c.hidden_size);
  const double linear = 2 * m * (4 * h * h + 2 * h * double(c.intermediate_size));
  const double attention = 2 * 2 * double(batch) * double(seq) * double(seq) * h;
  return double(c.num_hidden_layers) * (linear + attention) * 1e-9;
}

bool cpu_time_clock() {
  const char* env = std::getenv("RLX_BENCH_CPU_TIME");
  return env != nullptr && std::string(env) == "1";
}

// Milliseconds on the bench's clock (wall, or process CPU time with RLX_BENCH_CPU_TIME=1).
double now_ms() {
  static const bool cpu = cpu_time_clock();
  if (!cpu)
    return std::chrono::duration<double, std::milli>(Clock::now().time_since_epoch()).count();
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return 1e3 * double(ts.tv_sec) + 1e-6 * double(ts.tv_nsec);
}

// `warmup` untimed calls, then timed calls until both min_runs and budget_s (wall) are reached.
Timing time_runs(const Options& o, const std::function<void()>& fn) {
  for (int i = 0; i < o.warmup; ++i) fn();
  std::vector<double> ms;
  const auto start = Clock::now();
  while (static_cast<int>(ms.size()) < o.min_runs ||
         std::chrono::duration<double>(Clock::now() - start).count() < o.budget_s) {
    const double t0 = now_ms();
    fn();
    ms.push_back(now_ms() - t0);
  }
  std::sort(ms.begin(), ms.end());
  const size_t n = ms.size();
  return {n % 2 ? ms[n / 2] : 0.5 * (ms[n / 2 - 1] + ms[n / 2]), ms.front(), static_cast<int>(n)};
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  check(a.type() == b.type(),
        "embed bench: comparing " + a.type().to_string() + " with " + b.type().to_string());
  double m = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double d = std::fabs(a.get_f64(i) - b.get_f64(i));
    if (std::isnan(d)) return d;
    m = std::max(m, d);
  }
  return m;
}

// The smallest cosine similarity between row i of `a` and row i of `b` ([batch, dim] each).
double min_row_cosine(const Tensor& a, const Tensor& b) {
  check(a.shape() == b.shape() && a.shape().rank() == 2,
        "embed bench: cosine of " + a.type().to_string() + " and " + b.type().to_string());
  const int64_t rows = a.shape()[0], dim = a.shape()[1];
  double worst = 1;
  for (int64_t r = 0; r < rows; ++r) {
    double ab = 0, aa = 0, bb = 0;
    for (int64_t k = 0; k < dim; ++k) {
      const double x = a.get_f64(r * dim + k), y = b.get_f64(r * dim + k);
      ab += x * y;
      aa += x * x;
      bb += y * y;
    }
    worst = std::min(worst, ab / std::sqrt(aa * bb));
  }
  return worst;
}

Tensor i32_tensor(const std::vector<int32_t>& v, int64_t batch, int64_t seq) {
  Tensor t(DType::i32, Shape{batch, seq});
  std::copy(v.begin(), v.end(), t.data_as<int32_t>());
  return t;
}

double load_average() {
  std::ifstream f("/proc/loadavg");
  double load = NAN;
  f >> load;
  return load;
}

double bench_shape(const Options& o, int64_t batch) {  // model-only GFLOP/s
  models::EmbedderOptions eo;
  eo.batch_size = batch;
  eo.max_length = o.seq;
  eo.bucket = o.seq;
  if (!o.quantize.empty()) eo.quantize = quant_format_from_name(o.quantize);
  eo.act_quant = o.act_quant;
  eo.precision = o.precision;
  models::SentenceEmbedder embedder(o.model_dir, eo);
  const WordPieceTokenizer& tok = embedder.tokenizer();
  const std::vector<std::string> texts = make_texts(tok, batch, o.seq);
  const BatchEncoding tokens = tok.encode_batch(texts, o.seq);
  check(tokens.seq == o.seq && std::all_of(tokens.lengths.begin(), tokens.lengths.end(),
                                           [&](int64_t n) { return n == o.seq; }),
        "embed bench: every row must hold seq real tokens");

  Tensor model_out = embedder.embed(tokens);  // also compiles [batch, seq] before the timing
  Tensor e2e_out = embedder.encode(texts);
  const double diff = max_abs_diff(model_out, e2e_out);
  check(diff == 0, "embed bench: encode() and embed() disagree by " + std::to_string(diff));

  // Under a reduced-precision policy: the same model in f32 on the same tokens, as reference.
  double cosine = 1;
  if (o.precision != PrecisionPolicy{}) {
    models::EmbedderOptions f32o = eo;
    f32o.precision = PrecisionPolicy{};
    cosine = min_row_cosine(model_out, models::SentenceEmbedder(o.model_dir, f32o).embed(tokens));
  }

  const Timing model = time_runs(o, [&] { embedder.embed(tokens); });
  const Timing e2e = time_runs(o, [&] { embedder.encode(texts); });
  const Timing tokenize = time_runs(o, [&] { tok.encode_batch(texts, o.seq); });
  const double gflop = model_gflop(
      models::BertConfig::from_json_file((fs::path(o.model_dir) / "config.json").string()), batch,
      o.seq);
  const double gflops = gflop / (model.median_ms * 1e-3);
  std::printf("%6lld %5lld %16.3f %16.3f %14.3f %6d %12.7f %9.1f\n", static_cast<long long>(batch),
              static_cast<long long>(o.seq), model.median_ms, e2e.median_ms, tokenize.median_ms,
              std::min(model.runs, e2e.runs), cosine, gflops);
  std::fflush(stdout);

  if (o.out_dir.empty()) return gflops;
  const fs::path dir = fs::path(o.out_dir) / ("b" + std::to_string(batch));
  fs::create_directories(dir);
  write_safetensors((dir / "rlx.safetensors").string(),
                    {{"model_out", model_out},
                     {"e2e_out", e2e_out},
                     {"input_ids", i32_tensor(tokens.ids, batch, o.seq)},
                     {"attention_mask", i32_tensor(tokens.attention_mask, batch, o.seq)},
                     {"token_type_ids", i32_tensor(tokens.token_type_ids, batch, o.seq)}});
  auto timing = [](const Timing& t) {
    return nlohmann::json{{"median_ms", t.median_ms}, {"min_ms", t.min_ms}, {"runs", t.runs}};
  };
  nlohmann::json meta = {{"batch", batch},
                         {"seq", o.seq},
                         {"threads", num_threads()},
                         {"model_dir", o.model_dir},
                         {"warmup", o.warmup},
                         {"min_runs", o.min_runs},
                         {"budget_s", o.budget_s},
                         {"quantize", o.quantize.empty() ? "f32" : o.quantize},
                         {"act_quant", o.act_quant},
                         {"clock", cpu_time_clock() ? "cpu" : "wall"},
                         {"precision", to_string(o.precision)},
                         {"min_cosine_vs_f32", cosine},
                         {"texts", texts},
                         {"rlx_model", timing(model)},
                         {"rlx_e2e", timing(e2e)},
                         {"rlx_tokenize", timing(tokenize)},
                         {"model_gflop", gflop}};
  write_file_atomically((dir / "meta.json").string(), meta.dump(1) + "\n");
  return gflops;
}

// The best median GFLOP/s of oneDNN's f32 sgemm on square n x n matrices, n 256 to 2048, on the
// bench's threads; `at` gets that n.
double best_sgemm_gflops(const Options& o, int64_t& at) {
  double best = 0;
  Options probe = o;
  probe.budget_s = std::min(o.budget_s, 1.0);
  probe.min_runs = 3;
  bind_library_threads();
  for (int64_t n : {256, 512, 1024, 2048}) {
    std::vector<float> a(size_t(n * n), 0.5f), b(size_t(n * n), 0.25f), c(size_t(n * n));
    const Timing t = time_runs(probe, [&] {
      dnnl_sgemm('N', 'N', n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
    });
    const double g = 2.0 * double(n) * double(n) * double(n) / (t.median_ms * 1e-3) * 1e-9;
    if (g > best) best = g, at = n;
  }
  return best;
}

std::vector<int64_t> parse_list(const std::string& s) {
  std::vector<int64_t> v;
  std::istringstream in(s);
  for (std::string item; std::getline(in, item, ',');) {
    v.push_back(std::stoll(item));
    check(v.back() > 0, "--batches: values must be positive, got " + item);
  }
  return v;
}

int usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s [--batches 1,32] [--seq 128] [--warmup N] [--runs MIN_RUNS] "
               "[--budget SECONDS] [--model DIR] [--out DIR] [--quantize q8_0|q4_K|...] "
               "[--act-quant none|int8] [--precision always-f32|auto-mixed-bf16|...]\n",
               argv0);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  std::string precision_arg;
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      auto value = [&]() -> std::string {
        check(i + 1 < argc, a + " needs a value");
        return argv[++i];
      };
      if (a == "--batches")
        o.batches = parse_list(value());
      else if (a == "--seq")
        o.seq = std::stoll(value());
      else if (a == "--warmup")
        o.warmup = std::stoi(value());
      else if (a == "--runs")
        o.min_runs = std::stoi(value());
      else if (a == "--budget")
        o.budget_s = std::stod(value());
      else if (a == "--model")
        o.model_dir = value();
      else if (a == "--out")
        o.out_dir = value();
      else if (a == "--quantize")
        o.quantize = value();
      else if (a == "--act-quant")
        o.act_quant = value();
      else if (a == "--precision")
        precision_arg = value();
      else
        return usage(argv[0]);
    }
    check(o.seq >= 2 && o.warmup >= 0 && o.min_runs >= 1,
          "need --seq >= 2, --warmup >= 0 and --runs >= 1");
    if (o.model_dir.empty()) o.model_dir = models::default_model_dir();
    if (!precision_arg.empty())
      o.precision = parse_precision_policy(precision_arg);
    else if (std::optional<PrecisionPolicy> env = precision_from_env())
      o.precision = *env;
    std::printf(
        "rlx MiniLM embedding bench: %s, Linear weights %s (act_quant %s), precision %s, %d "
        "threads (RLX_NUM_THREADS or physical cores), load average %.1f on %u CPUs before the "
        "run\n",
        o.model_dir.c_str(), o.quantize.empty() ? "f32" : o.quantize.c_str(), o.act_quant.c_str(),
        to_string(o.precision).c_str(), num_threads(), load_average(),
        std::thread::hardware_concurrency());
    std::printf("%6s %5s %16s %16s %14s %6s %12s %9s\n", "batch", "seq", "model-only ms",
                "end-to-end ms", "tokenize ms", "runs", "min cos f32", "GFLOP/s");
    std::vector<double> gflops;
    for (int64_t b : o.batches) gflops.push_back(bench_shape(o, b));
    std::printf(
        "median (%s) of the timed runs after %d warm-up calls; every row holds %lld real "
        "tokens (long texts truncated); min cos f32: smallest cosine of an embedding to the same "
        "model's always-f32 embedding (1 under always-f32)\n",
        cpu_time_clock() ? "process CPU time, RLX_BENCH_CPU_TIME=1" : "wall time", o.warmup,
        static_cast<long long>(o.seq));
    if (o.quantize.empty() && o.precision == PrecisionPolicy{} && !cpu_time_clock()) {
      int64_t at = 0;
      const double peak = best_sgemm_gflops(o, at);
      std::printf("best oneDNN dnnl_sgemm in this run: %.1f GFLOP/s (square n = %lld, %d threads);",
                  peak, static_cast<long long>(at), num_threads());
      for (size_t i = 0; i < o.batches.size(); ++i)
        std::printf(" batch %lld at %.0f %%", static_cast<long long>(o.batches[i]),
                    100 * gflops[i] / peak);
      std::printf(" of it\n");
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rlx_bench_embed: %s\n", e.what());
    return 1;
  }
  return 0;
}
