// Clones running concurrently, copy-on-write params between clones, results independent of
// the thread count, and the thread pool (parallel_for, RLX_NUM_THREADS).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/test_util.h"
#include "common/thread_count_guard.h"
#include "rlx/ir/evaluator.h"
#include "rlx/runtime/session.h"
#include "rlx/runtime/threading.h"

namespace rlx {
namespace {

using testing::all_close;
using testing::error_of;
using testing::random_tensor;
using testing::ThreadCountGuard;

// A small encoder block touching the main kernel families: layer_norm, matmul + bias + gelu,
// attention, softmax, reductions, transpose, concatenate and elementwise ops.
struct Block {
  Graph g{"block"};
  TensorMap params;
  static constexpr int64_t kB = 2, kS = 9, kH = 2, kD = 8, kE = kH * kD, kF = 40;
  Block() {
    Value x = g.input("x", DType::f32, Shape{kB, kS, kE});
    auto param = [&](const std::string& name, Shape shape, double lo, double hi) {
      params[name] = random_tensor(DType::f32, shape, 100 + params.size(), lo, hi);
      return g.param(name, DType::f32, std::move(shape));
    };
    Value wq = param("wq", Shape{kE, kE}, -0.5, 0.5), wk = param("wk", Shape{kE, kE}, -0.5, 0.5);
    Value wv = param("wv", Shape{kE, kE}, -0.5, 0.5), w1 = param("w1", Shape{kE, kF}, -0.3, 0.3);
    Value b1 = param("b1", Shape{kF}, -0.1, 0.1), w2 = param("w2", Shape{kF, kE}, -0.3, 0.3);
    Value scale = param("scale", Shape{kE}, 0.5, 1.5), bias = param("bias", Shape{kE}, -0.1, 0.1);
    auto split = [&](Value t, Value w) {
      return g.transpose(g.reshape(g.matmul(t, w), {kB, kS, kH, kD}), {0, 2, 1, 3});
    };
    Value ln = g.layer_norm(x, scale, bias);
    Value att = g.attention(split(ln, wq), split(ln, wk), split(ln, wv),
                            Graph::AttentionOptions{"causal", std::nullopt, 0});
    Value merged = g.reshape(g.transpose(att, {0, 2, 1, 3}), {kB, kS, kE});
    Value h = g.add(x, merged);
    Value ffn = g.matmul(g.gelu(g.add(g.matmul(h, w1), b1)), w2);
    Value out = g.add(h, ffn);
    g.set_outputs({out, g.softmax(out, -1), g.reduce_max(out, {1}),
                   g.concatenate({g.reduce_sum(out, {2}), g.reduce_sum(x, {2})}, 1)});
  }
  TensorMap feeds(uint64_t seed) const {
    TensorMap f = params;
    f["x"] = random_tensor(DType::f32, Shape{kB, kS, kE}, seed);
    return f;
  }
  void bind(Executable& exe) const {
    for (const auto& [name, t] : params) exe.set_param(name, t);
  }
};

::testing::AssertionResult close_to_reference(const std::vector<Tensor>& got,
                                              const std::vector<Tensor>& want) {
  for (size_t i = 0; i < want.size(); ++i) {
    auto r = all_close(got[i], want[i], 1e-4, 1e-5);
    if (!r) return r << " (output " << i << ")";
  }
  return ::testing::AssertionSuccess();
}

TEST(ExecutableClones, ConcurrentClonesMatchTheReference) {
  Block block;
  Session s;
  auto exe = s.compile(block.g);
  block.bind(*exe);
  ASSERT_TRUE(exe->capabilities().concurrent_clones);
  constexpr int kThreads = 4, kRuns = 50, kInputs = 5;
  // Per thread and input: the feed, the reference result and the serial result of the same
  // executable (so a race that perturbs one bit is caught, not only a large error).
  std::vector<std::vector<Tensor>> inputs(kThreads);
  std::vector<std::vector<std::vector<Tensor>>> serial(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    for (int k = 0; k < kInputs; ++k) {
      TensorMap f = block.feeds(static_cast<uint64_t>(1000 * t + k));
      inputs[t].push_back(f.at("x"));
      serial[t].push_back(exe->run({{"x", f.at("x")}}));
      EXPECT_TRUE(close_to_reference(serial[t].back(), evaluate(block.g, f)));
    }
  }
  std::vector<std::unique_ptr<Executable>> clones;
  for (int t = 0; t < kThreads; ++t) clones.push_back(exe->clone());
  std::atomic<int> mismatches{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int r = 0; r < kRuns; ++r) {
        int k = (r + t) % kInputs;
        std::vector<Tensor> got = clones[t]->run({{"x", inputs[t][k]}});
        for (size_t i = 0; i < got.size(); ++i)
          if (!got[i].bitwise_equal(serial[t][k][i])) ++mismatches;
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(mismatches.load(), 0);
}

TEST(ExecutableClones, SetParamIsCopyOnWrite) {
  Graph g("cow");
  Value x = g.input("x", DType::f32, Shape{3});
  Value w = g.param("w", DType::f32, Shape{3});
  Value b = g.param("b", DType::f32, Shape{3});
  g.set_outputs({g.add(g.mul(x, w), b)});
  Session s;
  auto original = s.compile(g);
  // A clone made before any param is set shares nothing that is set later.
  auto early = original->clone();
  original->set_param("w", Tensor::full(DType::f32, Shape{3}, 2.0));
  original->set_param("b", Tensor::full(DType::f32, Shape{3}, 1.0));
  Tensor xt = Tensor::full(DType::f32, Shape{3}, 3.0);
  EXPECT_EQ(error_of([&] { early->run({{"x", xt}}); }), "run: param 'w' (f32[3]) was never set");
  auto clone = original->clone();
  auto grandchild = clone->clone();
  EXPECT_EQ(clone->run({{"x", xt}})[0].get_f64(0), 7.0);  // shares the original's params
  clone->set_param("w", Tensor::full(DType::f32, Shape{3}, 10.0));
  EXPECT_EQ(clone->run({{"x", xt}})[0].get_f64(0), 31.0);
  EXPECT_EQ(original->run({{"x", xt}})[0].get_f64(0), 7.0);
  EXPECT_EQ(grandchild->run({{"x", xt}})[0].get_f64(0), 7.0);
  original->set_param("b", Tensor::full(DType::f32, Shape{3}, -1.0));
  EXPECT_EQ(original->run({{"x", xt}})[0].get_f64(0), 5.0);
  EXPECT_EQ(clone->run({{"x", xt}})[0].get_f64(0), 31.0);  // keeps b = 1 and its own w
  EXPECT_EQ(grandchild->run({{"x", xt}})[0].get_f64(0), 7.0);
  EXPECT_EQ(error_of([&] { early->run({{"x", xt}}); }), "run: param 'w' (f32[3]) was never set");
}

TEST(ExecutableClones, SetParamOnTheOriginalWhileClonesRun) {
  Block block;
  Session s;
  auto exe = s.compile(block.g);
  block.bind(*exe);
  TensorMap f = block.feeds(7);
  std::vector<Tensor> want = exe->run({{"x", f.at("x")}});
  std::vector<std::unique_ptr<Executable>> clones;
  for (int t = 0; t < 3; ++t) clones.push_back(exe->clone());
  std::atomic<bool> stop{false};
  std::atomic<int> mismatches{0};
  std::vector<std::thread> threads;
  for (auto& c : clones)
    threads.emplace_back([&, clone = c.get()] {
      while (!stop) {
        std::vector<Tensor> got = clone->run({{"x", f.at("x")}});
        for (size_t i = 0; i < got.size(); ++i)
          if (!got[i].bitwise_equal(want[i])) ++mismatches;
      }
    });
  for (int k = 0; k < 30; ++k) {
    exe->set_param("w1", random_tensor(DType::f32, Shape{Block::kE, Block::kF}, 500 + k));
    exe->run({{"x", f.at("x")}});
  }
  stop = true;
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(mismatches.load(), 0);
}

TEST(ExecutableThreads, ResultsDoNotDependOnTheThreadCount) {
  ThreadCountGuard guard;
  // Sizes large enough that every kernel splits its work (memory-bound kernels into chunks of
  // at least 256 KiB, kParallelChunkBytes), and odd so that chunks end off the vector width.
  Graph g("threads");
  Value x = g.input("x", DType::f32, Shape{263, 515});
  Value w = g.param("w", DType::f32, Shape{515, 37});
  Value bias = g.param("bias", DType::f32, Shape{37});
  Value mm = g.add(g.matmul(x, w), bias);
  // Encoder attention (the direct path: one (batch, head) per claim, 2 query blocks each).
  Value qkv = g.reshape(g.slice(x, {0, 0}, {128, 128}), {1, 4, 128, 32});
  Value attention = g.attention(qkv, qkv, qkv, Graph::AttentionOptions{});
  g.set_outputs({g.exp(g.neg(g.abs(x))), mm, g.softmax(x, -1), g.reduce_sum(x, {1}),
                 g.reduce_sum(x, {0}), g.reduce_max(x, {0, 1}),
                 g.layer_norm(x, g.constant(Tensor::full(DType::f32, Shape{515}, 1.0)),
                              g.constant(Tensor(DType::f32, Shape{515}))),
                 g.transpose(x, {1, 0}), g.gelu(mm), g.cumsum(x, 1), attention});
  TensorMap feeds{{"x", random_tensor(DType::f32, Shape{263, 515}, 81)},
                  {"w", random_tensor(DType::f32, Shape{515, 37}, 82, -0.2, 0.2)},
                  {"bias", random_tensor(DType::f32, Shape{37}, 83)}};
  Session s;
  auto exe = s.compile(g);
  exe->set_param("w", feeds.at("w"));
  exe->set_param("bias", feeds.at("bias"));
  std::vector<Tensor> want = evaluate(g, feeds);
  std::vector<std::vector<Tensor>> results;
  for (int n : {1, 2, 4, 3}) {
    set_num_threads(n);
    EXPECT_EQ(num_threads(), n);
    for (int rep = 0; rep < 2; ++rep) results.push_back(exe->run({{"x", feeds.at("x")}}));
  }
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_TRUE(all_close(results[0][i], want[i], 2e-4, 1e-4)) << "output " << i;
    // rlx's own kernels partition their work so that each element is computed by the same
    // sequence of operations whatever the thread count: results are bitwise equal. oneDNN's
    // GEMM (outputs 1 and 8, matmul and gelu of it) promises no such thing: its AVX2 sgemm
    // splits K across threads when there are more threads than M/N blocks, so there the results
    // only match the reference (checked for every thread count).
    bool gemm = i == 1 || i == 8;
    for (size_t r = 1; r < results.size(); ++r) {
      if (gemm) {
        EXPECT_TRUE(all_close(results[r][i], want[i], 2e-4, 1e-4)) << "output " << i;
        continue;
      }
      EXPECT_TRUE(results[r][i].bitwise_equal(results[0][i]))
          << "output " << i << " differs in run " << r << " ("
          << op_name(exe->compiled_graph().node(exe->compiled_graph().outputs()[i]).op) << ")";
    }
  }
}

// Memory-bound kernels open a parallel region only for work worth waking a thread for: the
// transposes, norms and adds of MiniLM batch 1 x 128 ([128, 384] f32, 192 KiB) run on the
// calling thread, each region of 2 threads costing ~20 us on a 2-vCPU VM (docs/runtime.md
// "Threads"); the same kernels at batch 8 (1.5 MiB) still split.
TEST(ExecutableThreads, SmallMemoryBoundKernelsDoNotFork) {
  ThreadCountGuard guard;
  set_num_threads(2);
  auto regions_per_run = [](int64_t batch) {
    Graph g("layer");
    Value x = g.input("x", DType::f32, Shape{batch, 128, 384});
    Value heads = g.transpose(g.reshape(x, {batch, 128, 12, 32}), {0, 2, 1, 3});
    Value ln = g.layer_norm(g.add(x, x), g.constant(Tensor::full(DType::f32, Shape{384}, 1.0)),
                            g.constant(Tensor(DType::f32, Shape{384})));
    g.set_outputs({heads, ln});
    Session s;
    auto exe = s.compile(g);
    TensorMap feeds{{"x", random_tensor(DType::f32, Shape{batch, 128, 384}, 84)}};
    std::vector<Tensor> want = evaluate(g, feeds);
    exe->run(feeds);
    const int64_t before = parallel_regions();
    std::vector<Tensor> got = exe->run(feeds);
    const int64_t regions = parallel_regions() - before;
    EXPECT_TRUE(got[0].bitwise_equal(want[0]));
    EXPECT_TRUE(all_close(got[1], want[1], 1e-5, 1e-5));
    return regions;
  };
  EXPECT_EQ(regions_per_run(1), 0);
  // transpose, add and layer_norm (unless fused into one elementwise region) each fork once.
  EXPECT_GE(regions_per_run(8), 2);
}

// ---- stress: many clones and concurrent compiles through one Session (issue: reliability).

// The number of runs per thread: RLX_STRESS_RUNS when set, else `fallback`.
int stress_runs(int fallback) {
  const char* env = std::getenv("RLX_STRESS_RUNS");
  return env != nullptr && *env != '\0' ? std::atoi(env) : fallback;
}

// Aborts the process, naming `what`, unless done() is called within `limit`: a deadlock fails
// with a message instead of hanging until CTest's timeout kills it without one.
class Watchdog {
 public:
  Watchdog(std::string what, std::chrono::seconds limit)
      : thread_([this, what = std::move(what), limit] {
          std::unique_lock<std::mutex> lock(mu_);
          if (!cv_.wait_for(lock, limit, [this] { return done_; })) {
            std::fprintf(stderr, "watchdog: %s did not finish within %lld s (deadlock?)\n",
                         what.c_str(), static_cast<long long>(limit.count()));
            std::abort();
          }
        }) {}
  ~Watchdog() { done(); }
  void done() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

// Graph `k` of a family whose members share structure and differ in shapes and constants, so
// concurrent compiles of the family hit, miss and evict in the Session's cache at once.
Graph stress_graph(int k) {
  Graph g("stress" + std::to_string(k % 3));
  int64_t n = 8 + (k % 3);
  Value x = g.input("x", DType::f32, Shape{4, n});
  Value y = g.tanh(g.mul(x, g.constant(Tensor::full(DType::f32, Shape{}, 1.0 + k / 3))));
  g.set_outputs({g.softmax(y, -1), g.reduce_sum(g.exp(y), {1})});
  return g;
}

// 16 threads x 1,000 runs on clones of one executable while 4 more threads compile (and run)
// overlapping graphs through the same Session, with a cache smaller than the family: every
// result is bitwise equal to the serial run of the same input, the cache's counters add up,
// and the whole job ends within the watchdog's limit.
TEST(Stress, ClonesAndConcurrentCompilesMatchSerialRuns) {
  constexpr int kRunThreads = 16, kCompileThreads = 4, kInputs = 8, kFamily = 6;
  const int runs = stress_runs(1000);
  Block block;
  Session s(Device::cpu(), SessionOptions{4});
  auto exe = s.compile(block.g);
  block.bind(*exe);
  std::vector<Tensor> inputs;
  std::vector<std::vector<Tensor>> serial;
  for (int k = 0; k < kInputs; ++k) {
    inputs.push_back(block.feeds(static_cast<uint64_t>(k)).at("x"));
    serial.push_back(exe->run({{"x", inputs.back()}}));
  }
  // Serial results of the compile family, from a session of its own.
  std::vector<Tensor> family_x;
  std::vector<std::vector<Tensor>> family_want;
  {
    Session serial_session;
    for (int k = 0; k < kFamily; ++k) {
      family_x.push_back(random_tensor(DType::f32, Shape{4, 8 + (k % 3)}, 300 + k));
      family_want.push_back(serial_session.compile(stress_graph(k))->run({{"x", family_x[k]}}));
    }
  }
  std::vector<std::unique_ptr<Executable>> clones;
  for (int t = 0; t < kRunThreads; ++t) clones.push_back(exe->clone());
  std::atomic<int> mismatches{0}, family_mismatches{0}, errors{0};
  std::atomic<int64_t> compiles{0};
  Watchdog watchdog("16 x " + std::to_string(runs) + " clone runs + concurrent compiles",
                    std::chrono::seconds(600));
  std::vector<std::thread> threads;
  for (int t = 0; t < kRunThreads; ++t)
    threads.emplace_back([&, t] {
      for (int r = 0; r < runs; ++r) {
        int k = (r * 7 + t) % kInputs;
        std::vector<Tensor> got = clones[t]->run({{"x", inputs[k]}});
        for (size_t i = 0; i < got.size(); ++i)
          if (!got[i].bitwise_equal(serial[k][i])) ++mismatches;
      }
    });
  for (int t = 0; t < kCompileThreads; ++t)
    threads.emplace_back([&, t] {
      for (int r = 0; r < 3 * kFamily; ++r) {
        int k = (r + t) % kFamily;
        try {
          // The cached executable is shared with the other compile threads: run a clone.
          std::unique_ptr<Executable> mine = s.compile(stress_graph(k))->clone();
          ++compiles;
          std::vector<Tensor> got = mine->run({{"x", family_x[k]}});
          for (size_t i = 0; i < got.size(); ++i)
            if (!got[i].bitwise_equal(family_want[k][i])) ++family_mismatches;
        } catch (const std::exception& e) {
          std::fprintf(stderr, "compile thread %d: %s\n", t, e.what());
          ++errors;
        }
      }
    });
  for (std::thread& th : threads) th.join();
  watchdog.done();
  EXPECT_EQ(mismatches.load(), 0);
  EXPECT_EQ(family_mismatches.load(), 0);
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(compiles.load(), kCompileThreads * 3 * kFamily);
  CompileCacheStats stats = s.cache_stats();
  EXPECT_EQ(stats.hits + stats.misses, 1 + compiles.load());
  EXPECT_LE(stats.size, 4u);
  EXPECT_GE(stats.misses, 1 + kFamily);  // each family member compiled at least once
}

// 10,000 runs (a clone made per 100 of them, and compiles through a cache that evicts) after a
// warm-up of 1,000 leave the RSS within 8 MiB: no per-run allocation is kept. Leaks are
// LeakSanitizer's job under the sanitizers, where RSS says nothing.
TEST(Stress, RssIsBoundedAcrossRuns) {
  if (testing::kSanitized)
    GTEST_SKIP() << "RSS is not meaningful under ASan/TSan (LeakSanitizer checks)";
  Block block;
  Session s(Device::cpu(), SessionOptions{2});
  auto exe = s.compile(block.g);
  block.bind(*exe);
  Tensor x = block.feeds(1).at("x");
  auto work = [&](int runs) {
    std::unique_ptr<Executable> clone = exe->clone();
    for (int r = 0; r < runs; ++r) {
      if (r % 100 == 0) clone = exe->clone();
      if (r % 500 == 0) s.compile(stress_graph(r / 500));
      clone->run({{"x", x}});
    }
  };
  work(1000);
  int64_t before = testing::rss_bytes();
  ASSERT_GT(before, 0);
  work(10000);
  int64_t after = testing::rss_bytes();
  EXPECT_LT(after - before, int64_t{8} << 20)
      << "RSS grew from " << before / 1024 << " KiB to " << after / 1024 << " KiB";
}

TEST(ThreadPool, SetNumThreadsValidates) {
  ThreadCountGuard guard;
  EXPECT_EQ(error_of([] { set_num_threads(0); }), "set_num_threads: need at least 1 thread, got 0");
  EXPECT_EQ(error_of([] { set_num_threads(-3); }),
            "set_num_threads: need at least 1 thread, got -3");
  set_num_threads(3);
  EXPECT_EQ(num_threads(), 3);
  EXPECT_GE(physical_cores(), 1);
}

TEST(ThreadPool, ParallelForCoversTheRangeOnce) {
  ThreadCountGuard guard;
  for (int threads : {1, 2, 4}) {
    set_num_threads(threads);
    for (int64_t n : {0, 1, 7, 100, 1001}) {
      for (int64_t grain : {1, 16, 1000}) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        std::mutex mu;
        std::vector<std::pair<int64_t, int64_t>> chunks;
        parallel_for(5, 5 + n, grain, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) ++hits[static_cast<size_t>(i - 5)];
          std::lock_guard<std::mutex> lock(mu);
          chunks.push_back({b, e});
        });
        for (int64_t i = 0; i < n; ++i) EXPECT_EQ(hits[static_cast<size_t>(i)].load(), 1);
        EXPECT_LE(static_cast<int64_t>(chunks.size()), threads);
        if (n > 0) {
          // Chunks hold at least `grain` iterations unless there is only one.
          for (auto [b, e] : chunks) {
            if (chunks.size() > 1) {
              EXPECT_GE(e - b, grain);
            }
          }
        } else {
          EXPECT_TRUE(chunks.empty());
        }
      }
    }
  }
}

// parallel_chunks: every chunk [begin + i * chunk, ...) is called exactly once, whatever thread
// claims it, serially too; a slow chunk does not keep the other threads from the rest.
TEST(ThreadPool, ParallelChunksCallsEachChunkOnce) {
  ThreadCountGuard guard;
  for (int threads : {1, 2, 4}) {
    set_num_threads(threads);
    for (int64_t n : {0, 1, 7, 100, 1001}) {
      for (int64_t chunk : {1, 16, 1000}) {
        std::mutex mu;
        std::vector<std::pair<int64_t, int64_t>> calls;
        parallel_chunks(5, 5 + n, chunk, [&](int64_t b, int64_t e) {
          std::lock_guard<std::mutex> lock(mu);
          calls.push_back({b, e});
        });
        std::sort(calls.begin(), calls.end());
        std::vector<std::pair<int64_t, int64_t>> want;
        for (int64_t b = 5; b < 5 + n; b += chunk) want.push_back({b, std::min(5 + n, b + chunk)});
        EXPECT_EQ(calls, want) << threads << " threads, n " << n << ", chunk " << chunk;
      }
    }
  }
  // Dynamic claiming: while chunk 0 sleeps, the other thread takes every other chunk.
  set_num_threads(2);
  std::atomic<int> others{0};
  std::atomic<bool> first_done{false};
  parallel_chunks(0, 20, 1, [&](int64_t b, int64_t) {
    if (b == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      first_done = true;
    } else if (!first_done) {
      ++others;
    }
  });
  EXPECT_EQ(others.load(), 19);
}

TEST(ThreadPool, NestedParallelForRunsSerially) {
  ThreadCountGuard guard;
  set_num_threads(2);
  std::atomic<int> inner_calls{0}, total{0};
  parallel_for(0, 2, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      parallel_for(0, 100, 1, [&](int64_t ib, int64_t ie) {
        ++inner_calls;
        total += static_cast<int>(ie - ib);
      });
  });
  EXPECT_EQ(total.load(), 200);
  EXPECT_EQ(inner_calls.load(), 2);  // one serial call per outer iteration
}

// num_threads() reads RLX_NUM_THREADS once per process, so each value is checked in a fresh
// process (gtest's threadsafe death tests re-run the binary for the test body).
TEST(ThreadPoolDeathTest, RlxNumThreadsMustBeAPositiveInteger) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  for (const char* bad : {"abc", "0", "-2", "4x", " 3"}) {
    EXPECT_EXIT(
        {
          setenv("RLX_NUM_THREADS", bad, 1);
          std::string message = error_of([] { num_threads(); });
          std::fprintf(stderr, "%s\n", message.c_str());
          std::exit(message.empty() ? 1 : 0);
        },
        ::testing::ExitedWithCode(0),
        "RLX_NUM_THREADS must be a positive integer, found '" + std::string(bad) + "'");
  }
  EXPECT_EXIT(
      {
        setenv("RLX_NUM_THREADS", "3", 1);
        std::exit(num_threads() == 3 ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(ThreadPoolDeathTest, RunReportsABadRlxNumThreads) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        setenv("RLX_NUM_THREADS", "many", 1);
        Graph g("t");
        g.set_outputs({g.neg(g.input("x", DType::f32, Shape{2}))});
        std::string message = error_of([&] {
          Session s;
          s.compile(g)->run({{"x", Tensor(DType::f32, Shape{2})}});
        });
        std::fprintf(stderr, "%s\n", message.c_str());
        std::exit(message.empty() ? 1 : 0);
      },
      ::testing::ExitedWithCode(0), "RLX_NUM_THREADS must be a positive integer, found 'many'");
}

}  // namespace
}  // namespace rlx
