// The thread pool: rlx's own workers that spin briefly and then block, claiming chunks of a
// region from one atomic word (see threading.h and docs/runtime.md "Threads").
#include "rlx/runtime/threading.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <mutex>
#include <new>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#endif

#include <pthread.h>

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

// How long an idle worker polls for the next region, and a caller for chunks that others hold,
// before blocking in the kernel. 100 us covers the gap between two regions of a transformer
// layer at batch 1 (MiniLM 1 x 128: 42 regions in ~19 ms, serial kernels of 20-150 us between
// them), so a run wakes no sleeping thread, while an idle process stops polling within 0.1 ms.
// docs/runtime.md "Threads" has the measurements.
constexpr int64_t kDefaultSpinUs = 100;
constexpr int64_t kMaxSpinUs = 1000000;

int64_t spin_us_from_env() {
  const char* env = std::getenv("RLX_SPIN_US");
  if (env == nullptr || *env == '\0') return kDefaultSpinUs;
  std::string_view s(env);
  int64_t n = -1;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
  check(ec == std::errc() && end == s.data() + s.size() && n >= 0 && n <= kMaxSpinUs,
        "RLX_SPIN_US must be an integer from 0 to " + std::to_string(kMaxSpinUs) +
            " (microseconds), found '" + std::string(s) + "'");
  return n;
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(_M_X64)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

// Polls `done()` for up to `spin`, re-reading the clock every 64 polls: with a pause
// instruction between polls for the first kPauseSpin, then with a yield to the OS, so that a
// thread waiting for this core (oneDNN's OpenMP team during a GEMM, another process) gets it;
// true when done() held.
constexpr std::chrono::microseconds kPauseSpin{10};

template <class Done>
bool spin_until(std::chrono::steady_clock::duration spin, Done done) {
  if (done()) return true;
  if (spin.count() <= 0) return false;
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      cpu_relax();
      if (done()) return true;
    }
    const auto waited = std::chrono::steady_clock::now() - start;
    if (waited >= spin) return false;
    if (waited >= kPauseSpin) std::this_thread::yield();
  }
}

class Pool;
Pool& pool();

// True on the pool's workers, and on a caller while its region runs: a region started there
// runs serially on that thread.
thread_local bool t_in_region = false;

// The process-wide pool. A region is published in three parts: the closure and its unit count
// (the descriptor fields) and `state_`, one 64-bit word holding the region's epoch (high half)
// and the next unclaimed unit (low half). A thread claims unit i by a compare-exchange of
// (epoch, i) -> (epoch, i + 1) with i < units, so a claim succeeds only while that region is
// live and has unclaimed units: a worker that wakes late, or that read the descriptor of a region
// that has ended since, fails its exchange and runs nothing. The region ends when `done_` counts
// every unit; before the caller writes the next descriptor it closes the old epoch
// (index kClosed), so no exchange against a stale word can succeed afterwards. The closure is
// called only after a successful claim, and the caller returns only after every claimed unit is
// done, so nobody touches a closure whose region has returned.
class Pool {
 public:
  using UnitFn = void (*)(const void* ctx, int64_t unit);

  Pool() : spin_(std::chrono::microseconds(pool_spin_us())) {
    // A forked child has only the forking thread: it forgets the parent's workers (started
    // again at its first region) instead of joining threads that do not exist there.
    pthread_atfork(nullptr, nullptr, [] { pool().forget_workers_after_fork(); });
  }
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;
  ~Pool() {
    std::lock_guard<std::mutex> lock(caller_mu_);
    stop_workers();
  }

  // Runs fn(ctx, u) for every u in [0, units) on this thread and threads - 1 workers (started,
  // or restarted at a new count, here), or returns false without running anything when another
  // thread holds the pool (the caller then runs serially). Rethrows the first exception a unit
  // threw, after every claimed unit has finished (units claimed after it are skipped).
  bool run(int threads, int64_t units, UnitFn fn, const void* ctx) {
    std::unique_lock<std::mutex> lock(caller_mu_, std::try_to_lock);
    if (!lock.owns_lock()) return false;
    if (static_cast<int>(workers_.size()) != threads - 1) resize(threads - 1);
    // oneDNN (OpenMP) called inside a chunk must stay on this thread, as it does on the workers.
    const int saved_omp = omp_get_max_threads();
    omp_set_num_threads(1);
    t_in_region = true;

    // epoch_ changes only here and in stop_workers(), both under caller_mu_.
    const uint32_t epoch = epoch_.load() + 1;
    state_.store((state_.load() & ~kIndexMask) | kClosed);  // no claim of the old epoch now
    fn_.store(fn);
    ctx_.store(ctx);
    units_.store(units);
    done_.store(0);
    failed_.store(false);
    error_ = nullptr;
    state_.store(uint64_t{epoch} << 32);
    epoch_.store(epoch);
    if (sleepers_.load() > 0) epoch_.notify_all();

    const int64_t mine = work(epoch, fn, ctx, units);
    if (mine < units) wait_done(units);

    t_in_region = false;
    omp_set_num_threads(saved_omp);
    std::exception_ptr error = error_;
    error_ = nullptr;
    lock.unlock();
    if (error) std::rethrow_exception(error);
    return true;
  }

  void forget_workers_after_fork() {
    new (&caller_mu_) std::mutex();  // the parent may have held it on another thread
    (void)new std::vector<std::thread>(std::move(workers_));  // leaked: they cannot be joined
    workers_.clear();
    sleepers_.store(0);
    at_hold_.store(0);
  }

  // Test hook (threading.h): while held, a worker that has read a region stops before claiming.
  void hold_workers(bool hold) {
    held_.store(hold);
    if (!hold) held_.notify_all();
  }
  int workers_waiting_at_hold() const { return at_hold_.load(); }

 private:
  static constexpr uint64_t kIndexMask = 0xFFFFFFFFu;
  static constexpr uint64_t kClosed = kIndexMask;

  // Claims and runs units of region `epoch` until none is left; returns how many it ran.
  int64_t work(uint32_t epoch, UnitFn fn, const void* ctx, int64_t units) {
    int64_t ran = 0;
    uint64_t s = state_.load();
    for (;;) {
      if (static_cast<uint32_t>(s >> 32) != epoch) return ran;
      const uint64_t index = s & kIndexMask;
      if (index >= static_cast<uint64_t>(units)) return ran;
      if (!state_.compare_exchange_weak(s, s + 1)) continue;  // s reloaded
      if (!failed_.load(std::memory_order_relaxed)) {
        try {
          fn(ctx, static_cast<int64_t>(index));
        } catch (...) {
          if (!failed_.exchange(true)) error_ = std::current_exception();
        }
      }
      ++ran;
      if (done_.fetch_add(1) + 1 == units && caller_waiting_.load()) done_.notify_one();
      s = state_.load();
    }
  }

  void wait_done(int64_t units) {
    auto finished = [&] { return done_.load() == units; };
    if (spin_until(spin_, finished)) return;
    caller_waiting_.store(true);
    for (int64_t d = done_.load(); d != units; d = done_.load()) done_.wait(d);
    caller_waiting_.store(false);
  }

  void worker_loop(uint32_t seen) {
    t_in_region = true;
    omp_set_num_threads(1);  // oneDNN called from a chunk runs on this thread only
    for (;;) {
      auto fresh = [&] { return epoch_.load() != seen || stop_.load(); };
      if (!spin_until(spin_, fresh)) {
        sleepers_.fetch_add(1);
        while (epoch_.load() == seen && !stop_.load()) epoch_.wait(seen);
        sleepers_.fetch_sub(1);
      }
      if (stop_.load()) return;
      seen = epoch_.load();
      // The descriptor may already be a later region's; then `seen` is no longer the epoch in
      // state_ and work() claims nothing.
      UnitFn fn = fn_.load();
      const void* ctx = ctx_.load();
      const int64_t units = units_.load();
      if (held_.load()) {
        at_hold_.fetch_add(1);
        while (held_.load()) held_.wait(true);
        at_hold_.fetch_sub(1);
      }
      work(seen, fn, ctx, units);
    }
  }

  // Called with caller_mu_ held and no region running.
  void stop_workers() {
    stop_.store(true);
    epoch_.fetch_add(1);
    epoch_.notify_all();
    for (std::thread& t : workers_) t.join();
    workers_.clear();
    stop_.store(false);
  }

  void resize(int workers) {
    stop_workers();
    const uint32_t seen = epoch_.load();
    for (int i = 0; i < workers; ++i) workers_.emplace_back([this, seen] { worker_loop(seen); });
  }

  const std::chrono::steady_clock::duration spin_;
  std::mutex caller_mu_;  // held by the thread whose region runs on the pool
  std::vector<std::thread> workers_;
  std::atomic<uint64_t> state_{0};   // (epoch << 32) | next unit
  std::atomic<uint32_t> epoch_{0};   // the latest epoch; workers wait on it
  std::atomic<UnitFn> fn_{nullptr};  // the descriptor of the latest region
  std::atomic<const void*> ctx_{nullptr};
  std::atomic<int64_t> units_{0};
  std::atomic<int64_t> done_{0};  // units of the current region finished
  std::atomic<bool> caller_waiting_{false};
  std::atomic<int> sleepers_{0};
  std::atomic<bool> stop_{false};
  std::atomic<bool> failed_{false};
  std::exception_ptr error_;  // the first exception of the region (written once per region)
  std::atomic<bool> held_{false};
  std::atomic<int> at_hold_{0};
};

Pool& pool() {
  // Destroyed at exit, after main returns: it joins its (idle) workers.
  static Pool p;
  return p;
}

// Runs body(u) for every unit u in [0, units) (units >= 2) on the pool of num_threads() threads,
// or serially on this thread when another thread holds the pool.
template <class Body>
void run_units(int64_t units, const Body& body) {
  auto call = [](const void* ctx, int64_t u) { (*static_cast<const Body*>(ctx))(u); };
  if (pool().run(num_threads(), units, call, &body)) {
    g_regions.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  for (int64_t u = 0; u < units; ++u) body(u);
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

int64_t pool_spin_us() {
  static const int64_t us = spin_us_from_env();
  return us;
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
  if (chunks <= 1 || t_in_region) {
    fn(begin, end);
    return;
  }
  // One contiguous chunk per thread (kernels here are uniform per iteration, and contiguous
  // ranges keep each thread's memory streams sequential), claimed dynamically: a worker that
  // starts late finds its chunk taken by a thread that is free.
  run_units(chunks, [&](int64_t c) { fn(begin + n * c / chunks, begin + n * (c + 1) / chunks); });
}

void parallel_chunks(int64_t begin, int64_t end, int64_t chunk, RangeFn fn) {
  if (end <= begin) return;
  chunk = std::max<int64_t>(chunk, 1);
  const int64_t chunks = (end - begin + chunk - 1) / chunk;
  auto one = [&](int64_t c) { fn(begin + c * chunk, std::min(end, begin + (c + 1) * chunk)); };
  if (chunks <= 1 || num_threads() <= 1 || t_in_region) {
    for (int64_t c = 0; c < chunks; ++c) one(c);
    return;
  }
  // A claim is one chunk; past 2^24 chunks a claim takes a run of consecutive chunks, so the
  // unit index fits the low half of the pool's state word with room to spare.
  constexpr int64_t kMaxUnits = int64_t{1} << 24;
  const int64_t per = (chunks + kMaxUnits - 1) / kMaxUnits;
  const int64_t units = (chunks + per - 1) / per;
  run_units(units, [&](int64_t u) {
    for (int64_t c = u * per, e = std::min(chunks, (u + 1) * per); c < e; ++c) one(c);
  });
}

int64_t parallel_regions() { return g_regions.load(std::memory_order_relaxed); }

namespace detail {

void hold_pool_workers_for_testing(bool hold) { pool().hold_workers(hold); }

int pool_workers_held_for_testing() { return pool().workers_waiting_at_hold(); }

}  // namespace detail

}  // namespace rlx
