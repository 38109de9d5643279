// `rlx embed`: sentence embeddings from the command line; `rlx devices`.
#include "embed.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "cli_util.h"
#include "rlx/backends/pjrt/pjrt.h"
#include "rlx/ir/error.h"
#include "rlx/models/sentence_embedder.h"
#include "rlx/models/tokenizer.h"
#include "rlx/runtime/backend.h"
#include "rlx/runtime/threading.h"

namespace rlx::tools {
namespace {

// Inputs at least this large get a progress bar on stderr (when it is a terminal or
// --verbose), so piping a corpus through shows that work is happening.
constexpr size_t kProgressThreshold = 256;

std::vector<std::vector<double>> cosine_matrix(const Tensor& e) {
  int64_t n = e.shape()[0], d = e.shape()[1];
  const float* p = e.data_as<float>();
  std::vector<double> norms(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    double s = 0;
    for (int64_t k = 0; k < d; ++k) s += double(p[i * d + k]) * p[i * d + k];
    norms[static_cast<size_t>(i)] = std::sqrt(s);
  }
  std::vector<std::vector<double>> m(static_cast<size_t>(n),
                                     std::vector<double>(static_cast<size_t>(n)));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double dot = 0;
      for (int64_t k = 0; k < d; ++k) dot += double(p[i * d + k]) * p[j * d + k];
      double denom = norms[static_cast<size_t>(i)] * norms[static_cast<size_t>(j)];
      // Clamped: rounding can put a vector's cosine with itself at 1 + 2^-52.
      m[static_cast<size_t>(i)][static_cast<size_t>(j)] =
          denom > 0 ? std::clamp(dot / denom, -1.0, 1.0) : 0.0;
    }
  return m;
}

// The --verbose line's weights: "f32", or each packed format with its tensor count, e.g.
// "q8_0 x 36, q5_0 x 1 (other weights f32)".
std::string weight_formats_summary(const models::SentenceEmbedder& e) {
  std::map<std::string, int> counts;
  for (const auto& [name, f] : e.weight_formats()) ++counts[std::string(quant_format_info(f).name)];
  if (counts.empty()) return "f32";
  std::string s;
  for (const auto& [format, n] : counts)
    s += (s.empty() ? "" : ", ") + format + " x " + std::to_string(n);
  return s + " (other weights f32)";
}

}  // namespace

std::vector<std::string> apply_utf8_policy(std::vector<std::string> texts,
                                           const std::string& policy,
                                           const std::function<std::string(size_t)>& where) {
  check(policy == "error" || policy == "skip" || policy == "replace",
        "--on-invalid-utf8 must be error, skip or replace, found '" + policy + "'");
  std::vector<std::string> kept;
  std::vector<size_t> skipped;
  kept.reserve(texts.size());
  for (size_t i = 0; i < texts.size(); ++i) {
    std::optional<size_t> bad = find_invalid_utf8(texts[i]);
    if (!bad) {
      kept.push_back(std::move(texts[i]));
    } else if (policy == "replace") {
      kept.push_back(replace_invalid_utf8(texts[i]));
    } else if (policy == "skip") {
      skipped.push_back(i);
    } else {
      char byte[8];
      std::snprintf(byte, sizeof byte, "0x%02X", static_cast<unsigned char>(texts[i][*bad]));
      throw Error(where(i) + ": invalid UTF-8 at byte offset " + std::to_string(*bad) + " (byte " +
                  byte + "); --on-invalid-utf8=skip drops such texts, =replace substitutes U+FFFD");
    }
  }
  if (!skipped.empty()) {
    std::string list;
    for (size_t k = 0; k < std::min<size_t>(skipped.size(), 10); ++k)
      list += (k ? ", " : "") + where(skipped[k]);
    if (skipped.size() > 10) list += ", ...";
    std::fprintf(stderr, "rlx: warning: skipped %zu text%s of invalid UTF-8: %s\n", skipped.size(),
                 skipped.size() == 1 ? "" : "s", list.c_str());
  }
  return kept;
}

int run_embed(const EmbedArgs& a) {
  check(a.format == "json" || a.format == "tsv",
        "--format must be json or tsv, found '" + a.format + "'");
  std::vector<std::string> texts;
  if (!a.texts.empty()) {
    texts = apply_utf8_policy(a.texts, a.on_invalid_utf8,
                              [](size_t i) { return "text argument " + std::to_string(i + 1); });
  } else {
    for (std::string line; std::getline(std::cin, line);) texts.push_back(line);
    check(!std::cin.bad(), "cannot read stdin");
    texts = apply_utf8_policy(std::move(texts), a.on_invalid_utf8,
                              [](size_t i) { return "stdin line " + std::to_string(i + 1); });
  }

  models::EmbedderOptions opts;
  opts.device = Device::parse(a.device);
  opts.batch_size = a.batch_size;
  opts.max_length = a.max_length;
  opts.allow_unused_weights = a.allow_unused_weights;
  if (!a.precision.empty()) opts.precision = parse_precision_policy(a.precision);
  if (!a.quantize.empty()) opts.quantize = quant_format_from_name(a.quantize);
  opts.act_quant = a.act_quant;
  if (a.model.empty()) opts.model_name = models::default_model_name();
  std::string dir = a.model.empty() ? models::default_model_dir() : a.model;
  auto t0 = std::chrono::steady_clock::now();
  models::SentenceEmbedder embedder(dir, opts);
  auto t1 = std::chrono::steady_clock::now();

  bool show_progress = texts.size() >= kProgressThreshold && (a.verbose || isatty(STDERR_FILENO));
  auto progress = [&](int64_t done, int64_t total) {
    int width = 40, filled = static_cast<int>(width * done / std::max<int64_t>(total, 1));
    std::fprintf(stderr, "\r[%s%s] %lld/%lld", std::string(filled, '#').c_str(),
                 std::string(width - filled, ' ').c_str(), static_cast<long long>(done),
                 static_cast<long long>(total));
    if (done == total) std::fputc('\n', stderr);
  };
  Tensor e = embedder.encode(texts, show_progress ? std::function(progress) : nullptr);
  auto t2 = std::chrono::steady_clock::now();

  const int64_t n = e.shape()[0], d = e.shape()[1];
  if (a.format == "json") {
    nlohmann::json out;
    out["model"] = embedder.model_name();
    out["dim"] = d;
    if (a.similarity) {
      out["similarity"] = cosine_matrix(e);
    } else {
      nlohmann::json rows = nlohmann::json::array();
      for (int64_t i = 0; i < n; ++i)
        rows.push_back(
            std::vector<float>(e.data_as<float>() + i * d, e.data_as<float>() + (i + 1) * d));
      out["embeddings"] = rows;
    }
    std::cout << out.dump() << "\n";
  } else if (a.similarity) {
    auto m = cosine_matrix(e);
    for (const auto& row : m) {
      for (size_t j = 0; j < row.size(); ++j) std::printf(j ? "\t%.4f" : "%.4f", row[j]);
      std::printf("\n");
    }
  } else {
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t k = 0; k < d; ++k)
        std::printf(k ? "\t%.7g" : "%.7g", e.data_as<float>()[i * d + k]);
      std::printf("\n");
    }
  }
  if (a.verbose) {
    models::EmbedderStats s = embedder.stats();
    auto ms = [](auto d) { return std::chrono::duration<double, std::milli>(d).count(); };
    std::fprintf(stderr,
                 "model %s (%s, dim %lld, max length %lld) loaded in %.1f ms\n"
                 "device %s, precision %s\nweights %s, %.1f MiB resident, act_quant %s\n"
                 "%lld texts in %.1f ms: %lld executable runs, %lld compiles (%.1f ms), "
                 "%lld tokens (%lld with padding), %d threads\n",
                 embedder.model_name().c_str(), embedder.model_dir().c_str(),
                 static_cast<long long>(d), static_cast<long long>(embedder.max_length()),
                 ms(t1 - t0), opts.device.to_string().c_str(),
                 to_string(embedder.precision()).c_str(), weight_formats_summary(embedder).c_str(),
                 static_cast<double>(embedder.weight_bytes()) / (1 << 20), opts.act_quant.c_str(),
                 static_cast<long long>(n), ms(t2 - t1), static_cast<long long>(s.runs),
                 static_cast<long long>(s.compiles), s.compile_seconds * 1e3,
                 static_cast<long long>(s.real_tokens), static_cast<long long>(s.padded_tokens),
                 num_threads());
  }
  return 0;
}

int run_devices() {
  const long long spin_us = pool_spin_us();  // validated before anything is printed
  for (const Device& d : available_devices()) {
    std::printf("%s", d.to_string().c_str());
    if (d.kind == DeviceKind::Cpu)
      std::printf(
          "\t%d threads (%d physical cores), pool spin: %lld us (RLX_SPIN_US), oneDNN's "
          "OpenMP idle threads: %s",
          num_threads(), physical_cores(), spin_us, gomp_wait_policy().c_str());
    if (d.kind == DeviceKind::Pjrt) {  // the plugin RLX_PJRT_PLUGIN (or libtpu) names, if any
      std::optional<std::string> path = pjrt::plugin_path_from_env();
      if (!path) {
        std::printf("\tno plugin (set RLX_PJRT_PLUGIN to a PJRT plugin .so)");
      } else {
        try {
          pjrt::PluginInfo info = pjrt::describe_plugin(*path);
          std::printf("\t%s (PJRT API %d.%d, platform %s)", info.path.c_str(), info.api_major,
                      info.api_minor, info.platform.c_str());
          for (const pjrt::DeviceInfo& dev : info.devices)
            std::printf("\n\t  %s", dev.to_string().c_str());
        } catch (const Error& e) {
          std::printf("\tplugin not usable: %s", e.what());
        }
      }
    }
    std::printf("\n");
  }
  return 0;
}

}  // namespace rlx::tools
