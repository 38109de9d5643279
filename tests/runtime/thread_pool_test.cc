// rlx's own thread pool under parallel_for / parallel_chunks / parallel_runs
// (src/runtime/threading.cc): chunks run once whatever the thread count, parallel_runs' threads
// each take a run of consecutive chunks front to back and then the rest of others' runs,
// nested and concurrent regions run serially instead of deadlocking, a worker that wakes late
// delays nobody and runs nothing of a finished region, resizing, exceptions, and oneDNN's OpenMP
// staying on one thread inside a region.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/thread_count_guard.h"
#include "rlx/ir/error.h"
#include "rlx/runtime/threading.h"

namespace rlx {
namespace {

using namespace std::chrono_literals;

using testing::ThreadCountGuard;

// Threads of this process (/proc/self/task entries).
int process_threads() {
  int n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/task")) ++n;
  return n;
}

// Waits up to 5 s for `cond`; true when it held.
template <class Cond>
bool eventually(Cond cond) {
  for (auto end = std::chrono::steady_clock::now() + 5s; std::chrono::steady_clock::now() < end;
       std::this_thread::sleep_for(1ms))
    if (cond()) return true;
  return cond();
}

TEST(PoolRegions, EveryChunkRunsOnceForOneToEightThreads) {
  ThreadCountGuard guard;
  for (int threads = 1; threads <= 8; ++threads) {
    set_num_threads(threads);
    for (int64_t n : {0, 1, 2, 9, 1000}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      std::mutex mu;
      std::set<std::thread::id> ids;
      auto body = [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) ++hits[static_cast<size_t>(i - 3)];
        std::lock_guard<std::mutex> lock(mu);
        ids.insert(std::this_thread::get_id());
      };
      parallel_for(3, 3 + n, 1, body);
      for (int64_t chunk : {1, 7}) parallel_chunks(3, 3 + n, chunk, body);
      for (int64_t i = 0; i < n; ++i)
        EXPECT_EQ(hits[static_cast<size_t>(i)].load(), 3) << threads << " threads, n " << n;
      EXPECT_LE(static_cast<int>(ids.size()), threads);
    }
  }
}

// A region started inside a region runs on the thread that started it, and opens no region.
TEST(PoolRegions, NestedRegionsRunSeriallyOnTheirThread) {
  ThreadCountGuard guard;
  set_num_threads(4);
  std::atomic<int> wrong_thread{0}, inner_total{0};
  const int64_t before = parallel_regions();
  parallel_chunks(0, 8, 1, [&](int64_t, int64_t) {
    const std::thread::id outer = std::this_thread::get_id();
    parallel_for(0, 64, 1, [&](int64_t b, int64_t e) {
      if (std::this_thread::get_id() != outer) ++wrong_thread;
      inner_total += static_cast<int>(e - b);
    });
    parallel_chunks(0, 16, 4, [&](int64_t b, int64_t e) {
      if (std::this_thread::get_id() != outer) ++wrong_thread;
      inner_total += static_cast<int>(e - b);
    });
  });
  EXPECT_EQ(parallel_regions() - before, 1);
  EXPECT_EQ(wrong_thread.load(), 0);
  EXPECT_EQ(inner_total.load(), 8 * (64 + 16));
}

// Two user threads issue regions at once: one holds the pool, the other runs serially; both
// finish with the right sums.
TEST(PoolRegions, TwoCallingThreadsBothComplete) {
  ThreadCountGuard guard;
  set_num_threads(3);
  auto caller = [](int64_t seed) {
    int64_t wrong = 0;
    for (int r = 0; r < 300; ++r) {
      std::vector<int64_t> out(257);
      parallel_chunks(0, 257, 16, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) out[static_cast<size_t>(i)] = seed * i + r;
      });
      parallel_for(0, 257, 1, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) out[static_cast<size_t>(i)] += 1;
      });
      for (int64_t i = 0; i < 257; ++i) wrong += out[static_cast<size_t>(i)] != seed * i + r + 1;
    }
    return wrong;
  };
  auto a = std::async(std::launch::async, caller, 3);
  auto b = std::async(std::launch::async, caller, 5);
  ASSERT_EQ(a.wait_for(20s), std::future_status::ready) << "deadlock";
  ASSERT_EQ(b.wait_for(20s), std::future_status::ready) << "deadlock";
  EXPECT_EQ(a.get(), 0);
  EXPECT_EQ(b.get(), 0);
}

// A worker that has not claimed a chunk (held by the test hook, as a descheduled thread would
// be) does not hold the caller back: the caller runs every chunk itself and returns. Released
// after two more regions have ended, the worker runs nothing of them (its claim against the
// finished region's epoch fails), and the pool then works normally.
TEST(PoolRegions, CallerNeverWaitsForAWorkerThatHasNotClaimed) {
  ThreadCountGuard guard;
  set_num_threads(2);
  parallel_for(0, 2, 1, [](int64_t, int64_t) {});  // the pool now has its one worker
  std::vector<std::atomic<int>> hits(16);
  std::atomic<int> off_caller{0};
  detail::hold_pool_workers_for_testing(true);
  auto region = [&](int64_t first) {
    const std::thread::id me = std::this_thread::get_id();
    parallel_chunks(first, first + 8, 1, [&](int64_t b, int64_t) {
      ++hits[static_cast<size_t>(b)];
      if (std::this_thread::get_id() != me) ++off_caller;
    });
  };
  auto first = std::async(std::launch::async, region, 0);
  if (first.wait_for(5s) != std::future_status::ready) {
    detail::hold_pool_workers_for_testing(false);
    FAIL() << "the caller waited for a worker that had claimed nothing";
  }
  // The worker has read the first region (or a later one) and stopped before claiming.
  EXPECT_TRUE(eventually([] { return detail::pool_workers_held_for_testing() == 1; }));
  region(8);
  detail::hold_pool_workers_for_testing(false);
  EXPECT_TRUE(eventually([] { return detail::pool_workers_held_for_testing() == 0; }));
  std::this_thread::sleep_for(20ms);  // time for a wrong late claim to show
  for (size_t i = 0; i < hits.size(); ++i) EXPECT_EQ(hits[i].load(), 1) << "chunk " << i;
  EXPECT_EQ(off_caller.load(), 0);
  // The released worker takes part again: a chunk that waits for another thread completes.
  std::atomic<bool> other_ran{false};
  const std::thread::id me = std::this_thread::get_id();
  parallel_chunks(0, 2, 1, [&](int64_t b, int64_t) {
    if (std::this_thread::get_id() != me) other_ran = true;
    if (b == 0) eventually([&] { return other_ran.load(); });
  });
  EXPECT_TRUE(other_ran.load());
}

// The worker count follows set_num_threads between regions: workers are started and joined
// (the process's thread count moves by the difference), and regions stay correct.
TEST(PoolRegions, SetNumThreadsUpAndDownBetweenRegions) {
  ThreadCountGuard guard;
  int others = -1;  // threads of the process that are not pool workers
  int workers = 0;
  for (int threads : {4, 2, 6, 1, 3, 2}) {
    set_num_threads(threads);
    int64_t sum = 0;
    std::mutex mu;
    parallel_chunks(0, 100, 3, [&](int64_t b, int64_t e) {
      std::lock_guard<std::mutex> lock(mu);
      for (int64_t i = b; i < e; ++i) sum += i;
    });
    EXPECT_EQ(sum, 4950) << threads << " threads";
    // One thread's regions run serially and leave the pool as it was.
    if (threads > 1) workers = threads - 1;
    if (others < 0) {
      std::this_thread::sleep_for(10ms);  // workers of an earlier, larger pool have exited
      others = process_threads() - workers;
    }
    // A joined thread leaves /proc/self/task shortly after the join returns.
    EXPECT_TRUE(eventually([&] { return process_threads() == others + workers; }))
        << threads << " threads: " << process_threads() << " tasks, want " << others + workers;
  }
}

// A chunk that throws: the region finishes, the first exception reaches the caller, and the pool
// keeps working.
TEST(PoolRegions, AnExceptionInAChunkIsRethrownOnTheCaller) {
  ThreadCountGuard guard;
  for (int threads : {1, 2, 4}) {
    set_num_threads(threads);
    std::atomic<int> after{0};
    try {
      parallel_chunks(0, 64, 1, [&](int64_t b, int64_t) {
        if (b == 5) throw std::runtime_error("chunk 5 failed");
        ++after;
      });
      ADD_FAILURE() << "no exception with " << threads << " threads";
    } catch (const std::runtime_error& e) {
      EXPECT_STREQ(e.what(), "chunk 5 failed");
    }
    EXPECT_LE(after.load(), 63);
    try {
      parallel_runs(0, 64, 1, [&](const RunChunk& c) {
        if (c.begin == 40) throw std::runtime_error("chunk 40 failed");
      });
      ADD_FAILURE() << "no exception from parallel_runs with " << threads << " threads";
    } catch (const std::runtime_error& e) {
      EXPECT_STREQ(e.what(), "chunk 40 failed");
    }
    EXPECT_THROW(parallel_for(0, 8, 1,
                              [&](int64_t b, int64_t) {
                                if (b == 0) throw Error("first chunk");
                              }),
                 Error);
    int64_t total = 0;
    std::mutex mu;
    parallel_for(0, 1000, 1, [&](int64_t b, int64_t e) {
      std::lock_guard<std::mutex> lock(mu);
      total += e - b;
    });
    EXPECT_EQ(total, 1000);
  }
}

// oneDNN (OpenMP) called inside a region runs on one thread, on the workers and on the caller,
// and the caller's OpenMP setting is restored after the region.
TEST(PoolRegions, OpenMpRunsOneThreadInsideARegion) {
  ThreadCountGuard guard;
  set_num_threads(3);
  bind_library_threads();
  ASSERT_EQ(omp_get_max_threads(), 3);
  std::atomic<int> widest{0}, chunks{0};
  parallel_chunks(0, 12, 1, [&](int64_t, int64_t) {
    int team = 0;
#pragma omp parallel
    {
#pragma omp single
      team = omp_get_num_threads();
    }
    int seen = widest.load();
    while (team > seen && !widest.compare_exchange_weak(seen, team)) {
    }
    ++chunks;
  });
  EXPECT_EQ(chunks.load(), 12);
  EXPECT_EQ(widest.load(), 1);
  EXPECT_EQ(omp_get_max_threads(), 3);
}

// parallel_runs with T threads: every chunk is called exactly once; a call's run ends where one
// of the static runs [t * C / T, (t + 1) * C / T) of chunks ends and starts inside it, and a
// thread goes through it front to back from run_begin, without gaps. One thread: one run of all.
// Past 65535 chunks per run (a claim-word field) chunks are claimed a few at a time.
TEST(PoolRegions, ParallelRunsCallsEachChunkOnceInRunOrder) {
  ThreadCountGuard guard;
  struct Case {
    int64_t n, chunk;
  };
  std::vector<Case> cases;
  for (int64_t n : {0, 1, 2, 9, 100, 1001})
    for (int64_t chunk : {1, 7, 64}) cases.push_back({n, chunk});
  cases.push_back({140001, 1});
  for (int threads : {1, 2, 3, 4, 8}) {
    set_num_threads(threads);
    for (auto [n, chunk] : cases) {
      const int64_t begin = 5, end = 5 + n, chunks = (n + chunk - 1) / chunk;
      auto at = [&](int64_t c) { return std::min(end, begin + c * chunk); };
      const std::string where = std::to_string(threads) + " threads, n " + std::to_string(n) +
                                ", chunk " + std::to_string(chunk);
      std::mutex mu;
      std::vector<std::pair<RunChunk, std::thread::id>> calls;  // each thread's in its order
      parallel_runs(begin, end, chunk, [&](const RunChunk& c) {
        std::lock_guard<std::mutex> lock(mu);
        calls.push_back({c, std::this_thread::get_id()});
      });
      std::vector<int> hits(static_cast<size_t>(chunks));
      std::map<int64_t, int64_t> runs;  // the static runs of the T threads, end -> begin
      const int64_t t_runs = std::min<int64_t>(threads, chunks);
      for (int64_t t = 0; t < t_runs; ++t)
        runs[at(chunks * (t + 1) / t_runs)] = at(chunks * t / t_runs);
      // where each thread's sequence (by its run_begin) got to: the end of its last chunk
      std::map<std::pair<std::thread::id, int64_t>, int64_t> next;
      const bool grouped = n > 65535 * threads;  // static runs of units, not of chunks
      int64_t bad = 0;
      for (const auto& [c, thread] : calls) {
        ASSERT_EQ((c.begin - begin) % chunk, 0) << where;
        ASSERT_TRUE(c.begin >= begin && c.begin < end) << where;
        ASSERT_EQ(c.end, at((c.begin - begin) / chunk + 1)) << where;
        ++hits[static_cast<size_t>((c.begin - begin) / chunk)];
        if (threads == 1) {
          bad += c.run_begin != begin || c.run_end != end;
          continue;
        }
        bad += c.run_begin > c.begin || c.end > c.run_end;
        if (grouped) continue;
        const auto run = runs.find(c.run_end);
        bad += run == runs.end() || c.run_begin < run->second;
        auto [it, fresh] = next.try_emplace({thread, c.run_begin}, c.run_begin);
        bad += it->second != c.begin;  // not where this thread's sequence got to
        it->second = c.end;
      }
      EXPECT_EQ(bad, 0) << where;
      EXPECT_EQ(std::count(hits.begin(), hits.end(), 1), chunks) << where;
    }
  }
}

// A worker held before its first claim (as a descheduled thread would be) delays nothing: the
// caller runs its own run and then the worker's, each front to back, and returns; the worker,
// released, runs nothing of that region. Then, with a slow first chunk on the caller, the worker
// runs its own run and the rest of the caller's, so the slow chunk delays the call by itself only.
TEST(PoolRegions, ParallelRunsCallerTakesAHeldWorkersRun) {
  ThreadCountGuard guard;
  set_num_threads(2);
  parallel_for(0, 2, 1, [](int64_t, int64_t) {});  // the pool now has its one worker
  std::vector<std::atomic<int>> hits(10);
  std::atomic<int> off_caller{0};
  std::vector<std::array<int64_t, 3>> calls;  // (begin, run_begin, run_end), the caller's only
  detail::hold_pool_workers_for_testing(true);
  auto region = [&] {
    const std::thread::id me = std::this_thread::get_id();
    parallel_runs(0, 100, 10, [&](const RunChunk& c) {
      ++hits[static_cast<size_t>(c.begin / 10)];
      if (std::this_thread::get_id() != me) {
        ++off_caller;
      } else {
        calls.push_back({c.begin, c.run_begin, c.run_end});
      }
    });
  };
  auto first = std::async(std::launch::async, region);
  if (first.wait_for(5s) != std::future_status::ready) {
    detail::hold_pool_workers_for_testing(false);
    FAIL() << "the caller waited for a worker that had claimed nothing";
  }
  EXPECT_TRUE(eventually([] { return detail::pool_workers_held_for_testing() == 1; }));
  detail::hold_pool_workers_for_testing(false);
  EXPECT_TRUE(eventually([] { return detail::pool_workers_held_for_testing() == 0; }));
  std::this_thread::sleep_for(20ms);  // time for a wrong late claim to show
  for (size_t i = 0; i < hits.size(); ++i) EXPECT_EQ(hits[i].load(), 1) << "chunk " << i;
  EXPECT_EQ(off_caller.load(), 0);
  const std::vector<std::array<int64_t, 3>> want = {
      {0, 0, 50},    {10, 0, 50},   {20, 0, 50},   {30, 0, 50},   {40, 0, 50},  // the caller's run
      {50, 50, 100}, {60, 50, 100}, {70, 50, 100}, {80, 50, 100}, {90, 50, 100}};  // the worker's
  EXPECT_EQ(calls, want);

  std::atomic<int> others{0};
  const std::thread::id me = std::this_thread::get_id();
  parallel_runs(0, 20, 1, [&](const RunChunk& c) {
    if (c.begin == 0) {
      EXPECT_TRUE(eventually([&] { return others.load() == 19; })) << others.load();
    } else {
      others += std::this_thread::get_id() != me;
    }
  });
  EXPECT_EQ(others.load(), 19);
}

// RLX_SPIN_US is read once per process, so each value is checked in a fresh process.
TEST(PoolRegionsDeathTest, RlxSpinUsMustBeAnIntegerInRange) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  for (const char* bad : {"abc", "-1", "1000001", "5us"}) {
    EXPECT_EXIT(
        {
          setenv("RLX_SPIN_US", bad, 1);
          set_num_threads(2);
          std::string message;
          try {
            parallel_for(0, 2, 1, [](int64_t, int64_t) {});
          } catch (const Error& e) {
            message = e.what();
          }
          std::fprintf(stderr, "%s\n", message.c_str());
          std::exit(message.empty() ? 1 : 0);
        },
        ::testing::ExitedWithCode(0),
        "RLX_SPIN_US must be an integer from 0 to 1000000 \\(microseconds\\), found '" +
            std::string(bad) + "'");
  }
  // 0: workers block at once between regions; regions stay correct.
  EXPECT_EXIT(
      {
        setenv("RLX_SPIN_US", "0", 1);
        set_num_threads(2);
        int64_t wrong = 0;
        for (int r = 0; r < 200; ++r) {
          std::atomic<int64_t> sum{0};
          parallel_chunks(0, 64, 1, [&](int64_t b, int64_t) { sum += b; });
          wrong += sum.load() != 2016;
        }
        std::exit(wrong == 0 ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace rlx
