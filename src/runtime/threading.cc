// The thread pool: OpenMP's persistent team (see threading.h for why not a second pool).
#include "rlx/runtime/threading.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cstdlib>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <utility>

#include "rlx/ir/error.h"

namespace rlx {
namespace {

std::atomic<int> g_threads{0};  // 0: not yet decided
std::atomic<int64_t> g_regions{0};

int threads_from_env() {
  const char* env = std::getenv("RLX_NUM_THREADS");
  if (env == nullptr || *env == '\0') return physical_cores();
  std::string_view s(env);
  int n = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
  check(ec == std::errc() && end == s.data() + s.size() && n >= 1,
        "RLX_NUM_THREADS must be a positive integer, found '" + std::string(s) + "'");
  return n;
}

}  // namespace

int physical_cores() {
  static const int cores = [] {
    // Count distinct (package, core) pairs; SMT siblings share one.
    std::set<std::pair<int, int>> seen;
    unsigned logical = std::thread::hardware_concurrency();
    for (unsigned cpu = 0; cpu < logical; ++cpu) {
      std::string base = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/";
      std::ifstream core(base + "core_id"), pkg(base + "physical_package_id");
      int c = -1, p = -1;
      if (!(core >> c) || !(pkg >> p)) return logical == 0 ? 1 : static_cast<int>(logical);
      seen.insert({p, c});
    }
    return seen.empty() ? 1 : static_cast<int>(seen.size());
  }();
  return cores;
}

int num_threads() {
  int n = g_threads.load(std::memory_order_relaxed);
  if (n == 0) {
    n = threads_from_env();
    g_threads.store(n, std::memory_order_relaxed);
  }
  return n;
}

void set_num_threads(int n) {
  check(n >= 1, "set_num_threads: need at least 1 thread, got " + std::to_string(n));
  g_threads.store(n, std::memory_order_relaxed);
}

void bind_library_threads() { omp_set_num_threads(num_threads()); }

void parallel_for(int64_t begin, int64_t end, int64_t grain,
                  const std::function<void(int64_t, int64_t)>& fn) {
  int64_t n = end - begin;
  if (n <= 0) return;
  grain = grain < 1 ? 1 : grain;
  int threads = num_threads();
  // At most n / grain chunks, so that every chunk of the even split holds >= grain iterations.
  int64_t chunks = std::min<int64_t>(n / grain, threads);
  if (chunks <= 1 || omp_in_parallel()) {
    fn(begin, end);
    return;
  }
  g_regions.fetch_add(1, std::memory_order_relaxed);
  // One contiguous chunk per thread: kernels here are uniform per iteration, and contiguous
  // ranges keep each thread's memory streams sequential.
#pragma omp parallel for num_threads(static_cast <int>(chunks)) schedule(static, 1)
  for (int64_t c = 0; c < chunks; ++c) {
    int64_t b = begin + n * c / chunks;
    int64_t e = begin + n * (c + 1) / chunks;
    fn(b, e);
  }
}

void parallel_chunks(int64_t begin, int64_t end, int64_t chunk, RangeFn fn) {
  if (end <= begin) return;
  chunk = std::max<int64_t>(chunk, 1);
  const int64_t chunks = (end - begin + chunk - 1) / chunk;
  const int64_t threads = std::min<int64_t>(num_threads(), chunks);
  if (threads <= 1 || omp_in_parallel()) {
    for (int64_t c = 0; c < chunks; ++c)
      fn(begin + c * chunk, std::min(end, begin + (c + 1) * chunk));
    return;
  }
  g_regions.fetch_add(1, std::memory_order_relaxed);
  // libgomp hands out dynamic iterations with an atomic add on a shared counter.
#pragma omp parallel for num_threads(static_cast <int>(threads)) schedule(dynamic, 1)
  for (int64_t c = 0; c < chunks; ++c)
    fn(begin + c * chunk, std::min(end, begin + (c + 1) * chunk));
}

int64_t parallel_regions() { return g_regions.load(std::memory_order_relaxed); }

}  // namespace rlx
