// Fused dequantize + matmul over ggml block formats (src/backends/cpu/kernels/quant_matmul.h):
// - GEMV (M = 1, decode) per format on a 4096 x 4096 and a 576 x 1536 weight (N x K), with 1
//   and 2 threads: GB/s of weight bytes streamed, against this machine's read bandwidth
//   measured in the same run (a parallel sum over 1 GiB, same thread count);
// - GEMM (M = 8..128, prefill) per format on the 4096 x 4096 weight: GFLOP/s (2 M N K / time)
//   of the int8 kernel, of dequant_sgemm, and of oneDNN's sgemm on weights expanded beforehand.
// Times are wall seconds, best of repeated calls after a warm-up.
// Usage: rlx_bench_quant [gemv|gemm|all] [format ...]   (RLX_QUANT_TARGET picks the target)
#include <dnnl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kernels/quant_matmul.h"  // src/backends/cpu
#include "rlx/ir/dtype.h"
#include "rlx/ir/quant.h"
#include "rlx/runtime/threading.h"

namespace {

using namespace rlx;

double best_seconds(const std::function<void()>& fn, double budget = 0.4) {
  fn();
  double best = 1e30, total = 0;
  for (int i = 0; i < 200 && (i < 3 || total < budget); ++i) {
    auto t0 = std::chrono::steady_clock::now();
    fn();
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::min(best, s);
    total += s;
  }
  return best;
}

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown CPU";
}

// Read bandwidth: sum of 1 GiB of u64 words split over the pool.
double read_bandwidth_gbs(int threads) {
  set_num_threads(threads);
  static std::vector<uint64_t> buf(size_t(1) << 27, 1);
  std::vector<uint64_t> partial(64);
  volatile uint64_t sink = 0;
  double s = best_seconds([&] {
    std::fill(partial.begin(), partial.end(), 0);
    parallel_for(0, int64_t(buf.size()), 1 << 20, [&](int64_t b, int64_t e) {
      uint64_t acc = 0;
      for (int64_t i = b; i < e; ++i) acc += buf[size_t(i)];
      partial[size_t(b * 64 / int64_t(buf.size()))] += acc;
    });
    uint64_t t = 0;
    for (uint64_t p : partial) t += p;
    sink = t;
  });
  (void)sink;
  return double(buf.size() * 8) / s / 1e9;
}

std::vector<uint8_t> make_weights(QuantFormat f, int64_t N, int64_t K) {
  const int64_t rb = quant_row_bytes(f, K);
  std::vector<uint8_t> w(static_cast<size_t>(N * rb));
  std::mt19937 rng(42);
  if (f == QuantFormat::kIQ4_NL) {  // dequantize-only format: random blocks, small scales
    for (auto& b : w) b = uint8_t(rng());
    for (int64_t b = 0; b < N * K / 32; ++b) {
      uint16_t h = f16_from_float(0.01f).bits;
      std::memcpy(&w[size_t(b * 18)], &h, 2);
    }
    return w;
  }
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::vector<float> row(static_cast<size_t>(K));
  for (int64_t n = 0; n < N; ++n) {
    for (auto& v : row) v = normal(rng);
    quantize_row(f, row.data(), w.data() + n * rb, K);
  }
  return w;
}

std::vector<float> random_x(int64_t M, int64_t K) {
  std::vector<float> x(static_cast<size_t>(M * K));
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (auto& v : x) v = normal(rng);
  return x;
}

bool wanted(const std::vector<std::string>& names, std::string_view n) {
  return names.empty() || std::find(names.begin(), names.end(), n) != names.end();
}

void gemv(const std::vector<std::string>& names) {
  const double bw1 = read_bandwidth_gbs(1), bw2 = read_bandwidth_gbs(2);
  std::printf("read bandwidth: %.1f GB/s (1 thread), %.1f GB/s (2 threads)\n\n", bw1, bw2);
  std::printf("GEMV y[1, N] = x[1, K] . W[N, K]^T, GB/s of weight bytes (%% of read bandwidth)\n");
  std::printf("%-7s | %-26s | %-26s\n", "format", "4096x4096  1 thr   2 thr",
              "576x1536  1 thr   2 thr");
  for (const QuantFormatInfo& info : quant_formats()) {
    if (!wanted(names, info.name)) continue;
    std::printf("%-7s", std::string(info.name).c_str());
    for (auto [N, K] : {std::pair<int64_t, int64_t>{4096, 4096}, {576, 1536}}) {
      const std::vector<uint8_t> w = make_weights(info.format, N, K);
      const std::vector<float> x = random_x(1, K);
      std::vector<float> y(static_cast<size_t>(N));
      std::printf(" |");
      for (int t : {1, 2}) {
        set_num_threads(t);
        const double s = best_seconds(
            [&] { cpu::quant_matmul(info.format, x.data(), 1, K, w.data(), N, y.data()); });
        const double gbs = double(w.size()) / s / 1e9;
        std::printf(" %5.1f (%3.0f%%)", gbs, 100 * gbs / (t == 1 ? bw1 : bw2));
      }
    }
    std::printf("\n");
    std::fflush(stdout);
  }
}

void gemm(const std::vector<std::string>& names) {
  const int64_t N = 4096, K = 4096;
  bind_library_threads();
  std::printf(
      "\nGEMM y[M, 4096] = x[M, 4096] . W[4096, 4096]^T, %d threads, GFLOP/s (2 M N K / s): "
      "the int8 kernel, dequant_sgemm (what the op runs from M = %lld), oneDNN sgemm on "
      "weights expanded beforehand\n",
      num_threads(), static_cast<long long>(cpu::kDequantGemmRows));
  std::printf("%-7s %5s | %-9s %-9s %-9s\n", "format", "M", "int8", "deq+sgemm", "sgemm");
  const std::vector<float> x = random_x(128, K);
  std::vector<float> y(static_cast<size_t>(128 * N));
  std::vector<float> wf(static_cast<size_t>(N * K));
  const cpu::QuantTarget target = cpu::default_quant_target();
  for (const QuantFormatInfo& info : quant_formats()) {
    if (!wanted(names, info.name)) continue;
    const std::vector<uint8_t> w = make_weights(info.format, N, K);
    const int64_t rb = quant_row_bytes(info.format, K);
    for (int64_t n = 0; n < N; ++n)
      dequantize_row(info.format, w.data() + n * rb, wf.data() + n * K, K);
    for (int64_t M : {8, 16, 32, 128}) {
      const double flop = 2.0 * double(M * N * K);
      const double si = best_seconds(
          [&] { cpu::quant_matmul(info.format, x.data(), M, K, w.data(), N, y.data(), target); });
      const double sq = best_seconds(
          [&] { cpu::dequant_sgemm(info.format, x.data(), M, K, w.data(), N, y.data(), target); });
      const double sd = best_seconds([&] {
        dnnl_sgemm('N', 'T', M, N, K, 1.0f, x.data(), K, wf.data(), K, 0.0f, y.data(), N);
      });
      std::printf("%-7s %5lld | %7.1f   %7.1f   %7.1f\n", std::string(info.name).c_str(),
                  static_cast<long long>(M), flop / si / 1e9, flop / sq / 1e9, flop / sd / 1e9);
      std::fflush(stdout);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "all";
  std::vector<std::string> names(argv + std::min(argc, 2), argv + argc);
  std::printf("CPU: %s; quant target: %s\n", cpu_model().c_str(),
              std::string(cpu::quant_target_name(cpu::default_quant_target())).c_str());
  if (mode == "gemv" || mode == "all") gemv(names);
  if (mode == "gemm" || mode == "all") gemm(names);
  return 0;
}
