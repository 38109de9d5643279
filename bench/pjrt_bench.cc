// XLA backend benchmark: median wall time of a BERT-style encoder layer (batch 1, seq 128,
// hidden 384, 12 heads, FFN 1536, f32) through a PJRT plugin (XLA's CPU compiler by default)
// and through rlx's CPU backend, with the largest difference of their outputs. The plugin:
// RLX_PJRT_PLUGIN (or TPU_LIBRARY_PATH), else the lammps-jax-pjrt-cpu plugin CMake found at
// configure time. Numbers mean something only on an idle machine; docs/pjrt.md quotes them.
// Then (or alone with the argument `spmd`) a batch-sharded encoder layer (batch 4) as one SPMD
// program over 1, 2 and 4 devices of the plugin (mesh {"data": n}, x and the output split
// along the batch): on the XLA CPU plugin all "devices" share this machine's cores, so on a
// 2-core machine this measures the partitioning and per-device transfer overhead, not a
// speed-up.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "rlx/backends/pjrt/pjrt.h"
#include "rlx/ir/error.h"
#include "rlx/models/encoder_block.h"
#include "rlx/runtime/backend.h"

namespace {

using namespace rlx;

constexpr int kRuns = 20;  // median of these, after one warm-up run

// Binds the params, runs once to warm up (its outputs go to `out`), then returns the median of
// kRuns run times in ms.
double median_ms(Executable& exe, const Graph& g, const TensorMap& feeds,
                 std::vector<Tensor>* out) {
  for (int32_t id : g.params()) exe.set_param(g.node(id).name, feeds.at(g.node(id).name));
  const TensorMap in{{"x", feeds.at("x")}};
  *out = exe.run(in);
  std::vector<double> ms;
  for (int i = 0; i < kRuns; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    exe.run(in);
    ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// The batch-sharded encoder layer on 1, 2 and 4 devices of `plugin`.
void run_spmd(const std::string& plugin) {
  Graph g = models::build_encoder_block(models::EncoderBlockConfig::minilm(4));
  TensorMap feeds = models::encoder_block_feeds(g, 2);
  CompileOptions f32;
  f32.precision = PrecisionPolicy{PrecisionMode::AlwaysF32, {}};
  const std::string y = g.node(g.outputs()[0]).name;
  std::vector<Tensor> one_out, out;
  auto one = pjrt::make_pjrt_backend(plugin)->compile(g, f32, Device{DeviceKind::Pjrt, 0});
  std::printf("encoder layer 4x128x384 f32, batch-sharded, median of %d runs:\n", kRuns);
  std::printf("  single-device backend: %.2f ms\n", median_ms(*one, g, feeds, &one_out));
  size_t devices = pjrt::describe_plugin(plugin).devices.size();
  for (int64_t n : {1, 2, 4}) {
    if (static_cast<size_t>(n) > devices) break;
    pjrt::ShardingConfig c{pjrt::Mesh({{"data", n}}),
                           {{"x", pjrt::PartitionSpec({"data"})}},
                           {},
                           {{y, pjrt::PartitionSpec({"data"})}}};
    auto t0 = std::chrono::steady_clock::now();
    auto exe =
        pjrt::make_pjrt_spmd_backend(c, plugin)->compile(g, f32, Device{DeviceKind::Pjrt, 0});
    double compile_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    double ms = median_ms(*exe, g, feeds, &out);
    double max_diff = 0;
    for (int64_t i = 0; i < out[0].numel(); ++i)
      max_diff = std::max(max_diff, std::fabs(out[0].get_f64(i) - one_out[0].get_f64(i)));
    std::printf(
        "  SPMD over %lld device(s): %.2f ms (compile %.0f ms), max |diff| vs one device "
        "%.3g\n",
        static_cast<long long>(n), ms, compile_ms, max_diff);
  }
}

int run(bool spmd_only) {
  std::string plugin = pjrt::plugin_path_from_env().value_or(RLX_PJRT_DEFAULT_PLUGIN);
  if (plugin.empty()) {
    std::fprintf(stderr,
                 "rlx_bench_pjrt: no PJRT plugin: set RLX_PJRT_PLUGIN or pip install "
                 "lammps-jax-pjrt-cpu and re-run cmake\n");
    return 1;
  }
  if (spmd_only) {
    run_spmd(plugin);
    return 0;
  }
  Graph g = models::build_encoder_block(models::EncoderBlockConfig::minilm(1));
  TensorMap feeds = models::encoder_block_feeds(g, 2);
  CompileOptions f32;
  f32.precision = PrecisionPolicy{PrecisionMode::AlwaysF32, {}};
  std::vector<Tensor> xla_out, cpu_out;
  auto xla = pjrt::make_pjrt_backend(plugin)->compile(g, f32, Device{DeviceKind::Pjrt, 0});
  auto cpu = backend_for(DeviceKind::Cpu)->compile(g, f32, Device::cpu());
  const double xla_ms = median_ms(*xla, g, feeds, &xla_out);
  const double cpu_ms = median_ms(*cpu, g, feeds, &cpu_out);
  double max_diff = 0;
  for (int64_t i = 0; i < xla_out[0].numel(); ++i)
    max_diff = std::max(max_diff, std::fabs(xla_out[0].get_f64(i) - cpu_out[0].get_f64(i)));
  std::printf("plugin: %s\n", plugin.c_str());
  std::printf(
      "encoder layer 1x128x384 (12 heads, FFN 1536) f32, median of %d runs: xla %.2f ms, "
      "rlx cpu %.2f ms (rlx / xla %.2fx); max |xla - rlx| = %.3g\n",
      kRuns, xla_ms, cpu_ms, cpu_ms / xla_ms, max_diff);
  run_spmd(plugin);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc > 1 && std::string(argv[1]) == "spmd");
  } catch (const Error& e) {
    std::fprintf(stderr, "rlx_bench_pjrt: error: %s\n", e.what());
    return 1;
  }
}
