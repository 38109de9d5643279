// Fused dequantize + matmul over ggml block formats (src/backends/cpu/kernels/quant_matmul.h):
// - GEMV (M = 1 or RLX_BENCH_M rows, decode) per format on a 4096 x 4096, a 576 x 1536 and a
//   1536 x 576 weight (N x K), with 1 and 2 threads: GB/s of weight bytes, against this
//   machine's read bandwidth measured in the same run (an AVX2 vector sum over 1 GiB, same
//   thread count); each weight streamed from DRAM (a ring of copies larger than the caches)
//   and, for 4096 x 4096, also called repeatedly on one copy (cache-resident when it fits);
// - GEMM (M = 16, 32, 128, 4096 or RLX_BENCH_GEMM_M, prefill and batched embeddings) per format
//   on the 4096 x 4096 weight or the N x K shapes of RLX_BENCH_GEMM_SHAPES: GFLOP/s (2 M N K /
//   time) of the int8 kernel, of dequant_sgemm, and of oneDNN's sgemm on weights expanded
//   beforehand.
// Times are wall seconds, best of repeated calls after a warm-up.
// Usage: rlx_bench_quant [gemv|gemm|all] [format ...]   (RLX_QUANT_TARGET picks the target,
// RLX_BENCH_M the GEMV's rows, RLX_BENCH_CPU_TIME=1 thread CPU time instead of wall time)
#include <dnnl.h>
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/quant_matmul.h"  // src/backends/cpu
#include "rlx/ir/dtype.h"
#include "rlx/ir/quant.h"
#include "rlx/runtime/threading.h"

namespace {

using namespace rlx;

// Wall seconds, or with RLX_BENCH_CPU_TIME=1 the calling thread's CPU seconds: on a machine
// loaded by other processes that is the 1-thread kernel's own speed (time descheduled does not
// count; cache and memory contention still do).
double now_seconds() {
  static const bool cpu_time = std::getenv("RLX_BENCH_CPU_TIME") != nullptr;
  if (!cpu_time)
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

double best_seconds(const std::function<void()>& fn, double budget = 0.4) {
  fn();
  double best = 1e30, total = 0;
  for (int i = 0; i < 200 && (i < 3 || total < budget); ++i) {
    const double t0 = now_seconds();
    fn();
    const double s = now_seconds() - t0;
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

// Streaming read bandwidth: a vector sum (AVX2, 4 independent accumulators: far more load
// throughput than DRAM delivers, so memory is the limit) of 1 GiB split over `threads` threads.
__attribute__((target("avx2"))) uint64_t sum_words_avx2(const uint64_t* p, int64_t n) {
  __m256i a[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(),
                  _mm256_setzero_si256()};
  for (int64_t i = 0; i + 16 <= n; i += 16)
    for (int j = 0; j < 4; ++j)
      a[j] = _mm256_add_epi64(a[j],
                              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 4 * j)));
  alignas(32) uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes),
                     _mm256_add_epi64(_mm256_add_epi64(a[0], a[1]), _mm256_add_epi64(a[2], a[3])));
  return lanes[0] + lanes[1] + lanes[2] + lanes[3];
}

double read_bandwidth_gbs(int threads) {
  set_num_threads(threads);
  static std::vector<uint64_t> buf(size_t(1) << 27, 1);
  const bool avx2 = __builtin_cpu_supports("avx2");
  std::vector<uint64_t> partial(64);
  volatile uint64_t sink = 0;
  const int64_t chunk = int64_t(buf.size()) / 64;  // a multiple of 16 words
  double s = best_seconds([&] {
    std::fill(partial.begin(), partial.end(), 0);
    parallel_for(0, 64, 1, [&](int64_t b, int64_t e) {
      for (int64_t c = b; c < e; ++c) {
        const uint64_t* p = buf.data() + c * chunk;
        uint64_t acc = 0;
        if (avx2) {
          acc = sum_words_avx2(p, chunk);
        } else {
          for (int64_t i = 0; i < chunk; ++i) acc += p[i];
        }
        partial[size_t(c)] = acc;
      }
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

// Seconds per call of fn(copy) cycling over `copies` weight copies: with copies whose total
// exceeds the last-level cache every call streams its weight from DRAM, as a decoder's layers
// do; with one copy the weight stays cache-resident when it fits (a "hot" figure).
double seconds_per_call(const std::function<void(const uint8_t*)>& fn,
                        const std::vector<std::vector<uint8_t>>& ring) {
  size_t i = 0;
  const double s = best_seconds([&] {
    for (size_t c = 0; c < ring.size(); ++c) fn(ring[i++ % ring.size()].data());
  });
  return s / double(ring.size());
}

void gemv(const std::vector<std::string>& names) {
  const double bw[3] = {0, read_bandwidth_gbs(1), read_bandwidth_gbs(2)};
  std::printf(
      "read bandwidth (AVX2 vector sum over 1 GiB): %.1f GB/s (1 thread), %.1f GB/s "
      "(2 threads)\n",
      bw[1], bw[2]);
  const int64_t M = std::getenv("RLX_BENCH_M") ? std::atoll(std::getenv("RLX_BENCH_M")) : 1;
  std::printf(
      "\nGEMV y[%lld, N] = x[%lld, K] . W[N, K]^T, GB/s of weight bytes (%% of the read bandwidth "
      "at the same thread count), 1 and 2 threads. stream: a ring of weight copies of >= 256 MiB "
      "(each call reads its weight from DRAM); hot: one weight called repeatedly (cache-resident "
      "when it fits: 32 MiB L3 here)\n",
      static_cast<long long>(M), static_cast<long long>(M));
  std::printf("%-7s | %-27s | %-27s | %-27s | %-27s\n", "format", "4096x4096 stream 1t / 2t",
              "4096x4096 hot 1t / 2t", "576x1536 stream 1t / 2t", "1536x576 stream 1t / 2t");
  struct Shape {
    int64_t N, K;
    bool stream;
  };
  for (const QuantFormatInfo& info : quant_formats()) {
    if (!wanted(names, info.name)) continue;
    std::printf("%-7s", std::string(info.name).c_str());
    for (Shape sh : {Shape{4096, 4096, true}, Shape{4096, 4096, false}, Shape{576, 1536, true},
                     Shape{1536, 576, true}}) {
      std::printf(" |");
      if (sh.K % info.block_size != 0) {
        std::printf(" %-26s", "  (K not a block multiple)");
        continue;
      }
      std::vector<std::vector<uint8_t>> ring(1, make_weights(info.format, sh.N, sh.K));
      if (sh.stream)
        while (ring.size() * ring[0].size() < (size_t(256) << 20)) ring.push_back(ring[0]);
      const std::vector<float> x = random_x(M, sh.K);
      std::vector<float> y(static_cast<size_t>(M * sh.N));
      for (int t : {1, 2}) {
        set_num_threads(t);
        const double s = seconds_per_call(
            [&](const uint8_t* w) {
              cpu::quant_matmul(info.format, x.data(), M, sh.K, w, sh.N, y.data());
            },
            ring);
        const double gbs = double(ring[0].size()) / s / 1e9;
        std::printf(" %5.1f (%3.0f%%)", gbs, 100 * gbs / bw[t]);
      }
    }
    std::printf("\n");
    std::fflush(stdout);
  }
}

// One GEMM shape of the weight, N x K.
struct GemmShape {
  int64_t N, K;
};

// RLX_BENCH_GEMM_SHAPES ("NxK,NxK...", e.g. MiniLM's "384x384,1536x384,384x1536"), else
// 4096 x 4096.
std::vector<GemmShape> gemm_shapes() {
  std::vector<GemmShape> out;
  const char* env = std::getenv("RLX_BENCH_GEMM_SHAPES");
  std::istringstream list(env != nullptr ? env : "4096x4096");
  for (std::string item; std::getline(list, item, ',');) {
    long long n = 0, k = 0;
    if (std::sscanf(item.c_str(), "%lldx%lld", &n, &k) != 2 || n <= 0 || k <= 0) {
      std::fprintf(stderr, "RLX_BENCH_GEMM_SHAPES: '%s' is not NxK\n", item.c_str());
      std::exit(2);
    }
    out.push_back({n, k});
  }
  return out;
}

void gemm_shape(const std::vector<std::string>& names, const std::vector<int64_t>& ms, int64_t N,
                int64_t K) {
  std::printf(
      "\nGEMM y[M, %lld] = x[M, %lld] . W[%lld, %lld]^T, %d threads, GFLOP/s (2 M N K / s): "
      "the int8 kernel (act_quant int8), dequant_sgemm (act_quant none from M = %lld), oneDNN "
      "sgemm on weights expanded beforehand\n",
      static_cast<long long>(N), static_cast<long long>(K), static_cast<long long>(N),
      static_cast<long long>(K), num_threads(), static_cast<long long>(cpu::kExactSgemmRows));
  std::printf("%-7s %5s | %-9s %-9s %-9s\n", "format", "M", "int8", "deq+sgemm", "sgemm");
  const int64_t max_m = *std::max_element(ms.begin(), ms.end());
  const std::vector<float> x = random_x(max_m, K);
  std::vector<float> y(static_cast<size_t>(max_m * N));
  std::vector<float> wf(static_cast<size_t>(N * K));
  const cpu::QuantTarget target = cpu::default_quant_target();
  for (const QuantFormatInfo& info : quant_formats()) {
    if (!wanted(names, info.name)) continue;
    const std::vector<uint8_t> w = make_weights(info.format, N, K);
    const int64_t rb = quant_row_bytes(info.format, K);
    for (int64_t n = 0; n < N; ++n)
      dequantize_row(info.format, w.data() + n * rb, wf.data() + n * K, K);
    for (int64_t M : ms) {
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

void gemm(const std::vector<std::string>& names) {
  bind_library_threads();
  std::vector<int64_t> ms = {16, 32, 128, 4096};
  if (const char* env = std::getenv("RLX_BENCH_GEMM_M")) ms = {std::atoll(env)};
  for (const GemmShape& shape : gemm_shapes()) gemm_shape(names, ms, shape.N, shape.K);
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
