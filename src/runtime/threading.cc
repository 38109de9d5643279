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

// Units of one run at most: a run's next unit and size are 16-bit fields of its claim word.
constexpr int64_t kMaxRunUnits = 0xFFFF;

// The process-wide pool. A region is published as a descriptor (the closure, its unit count and
// its number of runs R) and R claim words. Run r holds units [units * r / R, units * (r + 1) / R),
// and its word, on a cache line of its own, packs the region's epoch (high 32 bits) with the
// run's next unclaimed unit and its size (16 bits each, offsets in the run). A thread claims unit
// i of run r by a compare-exchange of (epoch, i, size) -> (epoch, i + 1, size), only while
// i < size and the word holds the epoch the thread read before the descriptor. So a claim
// succeeds only while that region is live and has unclaimed units: a worker that wakes late, or
// that read the descriptor of a region that has ended since (parts of the descriptor may then be
// a newer region's), fails its exchange and runs nothing. That holds because a region ends only
// once all its units are claimed, i.e. every word holding its epoch reads i == size, and the
// caller writes a newer region's words only after that, with the newer epoch (words past the
// newer R keep an ended epoch, with no unit left). Whether a word has a unit left depends on the
// word alone, not on a unit count in the descriptor, so an old epoch needs no closing. The epoch is
// 32 bits, as when one word held the epoch and a shared index: a stale claim would need a worker
// to sleep through 2^32 regions. R = 1: every thread claims from the one run (dynamic
// scheduling). R > 1: thread t (0 the caller, 1.. the workers) claims from run t, then from the
// run with the most units left, one unit at a time. The region ends when `done_` counts every
// unit. The closure is called only after a successful claim, and the caller returns only after
// every claimed unit is done, so nobody touches a closure whose region has returned.
class Pool {
 public:
  // fn(ctx, u, run_begin, run_end): unit u, and [run_begin, run_end): the units of u's run from
  // the first one the thread took in sequence up to u (RunChunk) to the run's end.
  using UnitFn = void (*)(const void* ctx, int64_t unit, int64_t run_begin, int64_t run_end);

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

  // Runs fn for every unit in [0, units), split into `runs` runs (1, or 2 to `threads`, each of
  // at most kMaxRunUnits units), on this thread and threads - 1 workers (started, or restarted
  // at a new count, here), or returns false without running anything when another thread holds
  // the pool (the caller then runs serially). Rethrows the first exception a unit threw, after
  // every claimed unit has finished (units claimed after it are skipped).
  bool run(int threads, int64_t units, int runs, UnitFn fn, const void* ctx) {
    std::unique_lock<std::mutex> lock(caller_mu_, std::try_to_lock);
    if (!lock.owns_lock()) return false;
    if (static_cast<int>(workers_.size()) != threads - 1) resize(threads);
    // oneDNN (OpenMP) called inside a chunk must stay on this thread, as it does on the workers.
    const int saved_omp = omp_get_max_threads();
    omp_set_num_threads(1);
    t_in_region = true;

    // epoch_ changes only here and in stop_workers(), both under caller_mu_. Every unit of the
    // previous region is claimed, so none of its words can be claimed from while they change.
    const uint32_t epoch = epoch_.load() + 1;
    fn_.store(fn);
    ctx_.store(ctx);
    units_.store(units);
    runs_.store(runs);
    done_.store(0);
    failed_.store(false);
    error_ = nullptr;
    for (int r = 0; r < runs; ++r) {
      const uint64_t size = run_start(units, runs, r + 1) - run_start(units, runs, r);
      words_[size_t(r)].word.store(uint64_t{epoch} << 32 | size);
    }
    epoch_.store(epoch);
    if (sleepers_.load() > 0) epoch_.notify_all();

    const int64_t mine = work(epoch, fn, ctx, units, runs, 0);
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
  static constexpr uint64_t kNextOne = uint64_t{1} << 16;

  // A run's claim word on a cache line of its own: a thread taking its own run's units does not
  // contend with the others' claims.
  struct alignas(64) RunWord {
    std::atomic<uint64_t> word{0};  // (epoch << 32) | (next unit << 16) | size
  };

  static int64_t run_start(int64_t units, int runs, int r) { return units * r / runs; }

  // Claims run r's next unit for region `epoch`: its offset in the run, or -1 when the run has
  // none left or its word holds another epoch.
  int64_t claim(int r, uint32_t epoch) {
    std::atomic<uint64_t>& word = words_[size_t(r)].word;
    uint64_t s = word.load();
    for (;;) {
      const int64_t next = int64_t(s >> 16 & 0xFFFF), size = int64_t(s & 0xFFFF);
      if (static_cast<uint32_t>(s >> 32) != epoch || next >= size) return -1;
      if (word.compare_exchange_weak(s, s + kNextOne)) return next;
    }
  }

  // Claims and runs units of region `epoch` as thread `self` until none is left; returns how
  // many it ran. fn, ctx, units and runs are the descriptor read after `epoch` (a newer region's
  // in part when region `epoch` has ended; then every claim fails). runs never exceeds
  // words_.size(): a thread count change joins every worker before the words are resized.
  // A thread done with its own run takes the next unit of the run with the most left, not the
  // last one: while that run's owner is away (descheduled, or not yet awake) the thread then
  // reads the rest of the run as one sequential stream, as the owner would have (units taken
  // from the back come in descending order, each one a stream start of its own: a 2-thread
  // GEMV whose worker was away ran at 0.65-0.8x of one shared counter's, docs/runtime.md
  // "Threads").
  int64_t work(uint32_t epoch, UnitFn fn, const void* ctx, int64_t units, int runs, int self) {
    int64_t ran = 0;
    auto run_unit = [&](int64_t u, int64_t run_begin, int64_t run_end) {
      if (!failed_.load(std::memory_order_relaxed)) {
        try {
          fn(ctx, u, run_begin, run_end);
        } catch (...) {
          if (!failed_.exchange(true)) error_ = std::current_exception();
        }
      }
      ++ran;
      if (done_.fetch_add(1) + 1 == units && caller_waiting_.load()) done_.notify_one();
    };
    // The sequence of consecutive units of one run this thread is taking: it goes on while each
    // claim is the unit after the thread's previous one.
    int seq_run = -1;
    int64_t seq_begin = 0, last = -1;
    auto take = [&](int r, int64_t i) {
      const int64_t b = run_start(units, runs, r);
      if (r != seq_run || i != last + 1) seq_begin = b + i;
      seq_run = r;
      last = i;
      run_unit(b + i, seq_begin, run_start(units, runs, r + 1));
    };
    const int home = runs == 1 ? 0 : self;
    if (home < runs)
      for (int64_t i = claim(home, epoch); i >= 0; i = claim(home, epoch)) take(home, i);
    if (runs == 1) return ran;
    for (;;) {  // the run with the most units left
      int victim = -1;
      int64_t most = 0;
      for (int r = 0; r < runs; ++r) {
        const uint64_t s = words_[size_t(r)].word.load();
        if (static_cast<uint32_t>(s >> 32) != epoch) return ran;  // the region has ended
        const int64_t left = int64_t(s & 0xFFFF) - int64_t(s >> 16 & 0xFFFF);
        if (left > most) {
          most = left;
          victim = r;
        }
      }
      if (victim < 0) return ran;
      const int64_t i = claim(victim, epoch);
      if (i >= 0) take(victim, i);
    }
  }

  void wait_done(int64_t units) {
    auto finished = [&] { return done_.load() == units; };
    if (spin_until(spin_, finished)) return;
    caller_waiting_.store(true);
    for (int64_t d = done_.load(); d != units; d = done_.load()) done_.wait(d);
    caller_waiting_.store(false);
  }

  void worker_loop(uint32_t seen, int self) {
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
      // The descriptor may already be a later region's; then no word holds `seen` with units
      // left and work() claims nothing.
      UnitFn fn = fn_.load();
      const void* ctx = ctx_.load();
      const int64_t units = units_.load();
      const int runs = runs_.load();
      if (held_.load()) {
        at_hold_.fetch_add(1);
        while (held_.load()) held_.wait(true);
        at_hold_.fetch_sub(1);
      }
      work(seen, fn, ctx, units, runs, self);
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

  // Restarts the pool with threads - 1 workers (1 .. threads - 1; the caller is thread 0) and a
  // claim word per thread.
  void resize(int threads) {
    stop_workers();
    words_ = std::vector<RunWord>(size_t(threads));
    const uint32_t seen = epoch_.load();
    for (int i = 1; i < threads; ++i)
      workers_.emplace_back([this, seen, i] { worker_loop(seen, i); });
  }

  const std::chrono::steady_clock::duration spin_;
  std::mutex caller_mu_;  // held by the thread whose region runs on the pool
  std::vector<std::thread> workers_;
  std::vector<RunWord> words_;       // the claim words of runs 0, 1, ...
  std::atomic<uint32_t> epoch_{0};   // the latest epoch; workers wait on it
  std::atomic<UnitFn> fn_{nullptr};  // the descriptor of the latest region
  std::atomic<const void*> ctx_{nullptr};
  std::atomic<int64_t> units_{0};
  std::atomic<int> runs_{1};
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

// Runs body(i, run_begin, run_end) for every item i in [0, items) (items >= 2) on the pool of
// num_threads() (>= 2) threads: with per_thread, as one run of consecutive items per thread
// (parallel_runs), else as one run all threads claim from in turn (dynamic scheduling);
// [run_begin, run_end) as RunChunk's run, in items. Past kMaxRunUnits units per run a unit is a
// few consecutive items. Serially on this thread, as one run of every item, when another thread
// holds the pool.
template <class Body>
void run_items(int64_t items, bool per_thread, const Body& body) {
  const int threads = num_threads();
  const int64_t per = (items + threads * kMaxRunUnits - 1) / (threads * kMaxRunUnits);
  const int64_t units = (items + per - 1) / per;
  const int runs = per_thread ? int(std::min<int64_t>(threads, units)) : 1;
  struct Closure {
    const Body& body;
    int64_t items, per;
  } closure{body, items, per};
  auto call = [](const void* ctx, int64_t u, int64_t run_begin, int64_t run_end) {
    const Closure& c = *static_cast<const Closure*>(ctx);
    const int64_t rb = run_begin * c.per, re = std::min(c.items, run_end * c.per);
    for (int64_t i = u * c.per, e = std::min(c.items, (u + 1) * c.per); i < e; ++i)
      c.body(i, rb, re);
  };
  if (pool().run(threads, units, runs, call, &closure)) {
    g_regions.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  for (int64_t i = 0; i < items; ++i) body(i, 0, items);
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
  run_items(chunks, false, [&](int64_t c, int64_t, int64_t) {
    fn(begin + n * c / chunks, begin + n * (c + 1) / chunks);
  });
}

namespace {

// The chunks [begin + i * chunk, ...) of [begin, end) as body(chunk_begin, chunk_end, run_begin,
// run_end) in elements: on the pool as run_items' items (per_thread: one run per thread, else
// one shared run), or serially on this thread, as one run of every chunk, where there is one
// chunk, one thread or an enclosing region.
template <class Body>
void for_chunks(int64_t begin, int64_t end, int64_t chunk, bool per_thread, const Body& body) {
  if (end <= begin) return;
  chunk = std::max<int64_t>(chunk, 1);
  const int64_t chunks = (end - begin + chunk - 1) / chunk;
  auto at = [&](int64_t c) { return std::min(end, begin + c * chunk); };
  auto call = [&](int64_t c, int64_t run_begin, int64_t run_end) {
    body(at(c), at(c + 1), at(run_begin), at(run_end));
  };
  if (chunks <= 1 || num_threads() <= 1 || t_in_region) {
    for (int64_t c = 0; c < chunks; ++c) call(c, 0, chunks);
    return;
  }
  run_items(chunks, per_thread, call);
}

}  // namespace

void parallel_chunks(int64_t begin, int64_t end, int64_t chunk, RangeFn fn) {
  for_chunks(begin, end, chunk, false, [&](int64_t b, int64_t e, int64_t, int64_t) { fn(b, e); });
}

void parallel_runs(int64_t begin, int64_t end, int64_t chunk, RunFn fn) {
  for_chunks(begin, end, chunk, true,
             [&](int64_t b, int64_t e, int64_t run_begin, int64_t run_end) {
               fn(RunChunk{b, e, run_begin, run_end});
             });
}

int64_t parallel_regions() { return g_regions.load(std::memory_order_relaxed); }

namespace detail {

void hold_pool_workers_for_testing(bool hold) { pool().hold_workers(hold); }

int pool_workers_held_for_testing() { return pool().workers_waiting_at_hold(); }

}  // namespace detail

}  // namespace rlx
