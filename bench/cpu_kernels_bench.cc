// CPU kernel throughput, finer-grained than rlx_bench_cpu's "ops" table:
// - elementwise: native kernels vs the reference fallback kernel on 16M f32 elements, both
//   called directly (no executor, no output copies), in GB/s (bytes read + written) next to a
//   plain single-threaded loop c = a + b as this machine's baseline;
// - nn: chains of softmax (rows, and down columns: the strided path) and layer_norm in f32 and
//   bf16: native vs decomposed (force_common) vs the reference evaluator;
// - attention: S 128 / 1024, no mask and causal: native vs decomposed vs reference.
// - gemm: small matmuls (an RNN step, batch-1 layers) and fused_matmul_bias_act, where the
//   per-call overhead matters: CPU microseconds per call of the kernel called directly and of
//   Executable::run (best of 5 loops).
// Times are CPU seconds of the whole process with one thread (less skewed by a shared machine
// than wall time; RLX_NUM_THREADS=1 gives per-core throughput), wall seconds with more: the
// process clock counts another CPU's running thread only up to its last tick, so the best of
// many short multi-threaded calls read ~2x too fast on the 2-vCPU VMs rlx is measured on.
// - encoder_attention: the attention and packed_qkv_attention kernels' direct path (BERT-style
//   shapes, batch 1-32, padding mask, head dims 32-128, f32 and bf16) called directly, in GFLOP/s.
// Usage: rlx_bench_cpu_kernels [all|elementwise|nn|attention|encoder_attention|gemm]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "kernel.h"  // src/backends/cpu: kernel factories, called directly by the elementwise table
#include "rlx/ir/error.h"
#include "rlx/ir/evaluator.h"
#include "rlx/runtime/session.h"
#include "rlx/runtime/threading.h"

namespace {

using namespace rlx;

// Uniform random values in [-2, 2) converted to `dtype`.
Tensor random_tensor(DType dtype, const Shape& shape, uint64_t seed) {
  Tensor t(dtype, shape);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(-2.0, 2.0);
  for (int64_t i = 0; i < t.numel(); ++i) t.set_f64(i, dist(rng));
  return t;
}

// The clock of the CPU-time tables: the process CPU clock with one thread, else the monotonic
// wall clock (see the file comment).
clockid_t bench_clock() { return num_threads() == 1 ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_MONOTONIC; }

// Seconds per call of fn on bench_clock(): the best of repeated calls after a warm-up call; with
// budget 0, one cold call (for the slow reference evaluator).
template <class F>
double seconds_per_call(F&& fn, double budget = 0.5) {
  if (budget > 0) fn();
  double best = 1e30, spent = 0;
  const clockid_t clock = bench_clock();
  for (int i = 0; i == 0 || (i < 200 && spent < budget); ++i) {
    timespec t0{}, t1{};
    clock_gettime(clock, &t0);
    fn();
    clock_gettime(clock, &t1);
    double sec = static_cast<double>(t1.tv_sec - t0.tv_sec) +
                 1e-9 * static_cast<double>(t1.tv_nsec - t0.tv_nsec);
    best = std::min(best, sec);
    spent += sec;
  }
  return best;
}

void bench_elementwise() {
  std::printf("elementwise kernels, 16M f32 elements (wall time per call):\n");
  const int64_t n = int64_t{1} << 24, cols = 4096;
  const Shape s{n / cols, cols};
  struct Case {
    const char* label;
    std::function<Value(Graph&, Value, Value, Value)> build;
    int64_t bytes;  // per element
  };
  const Case cases[] = {
      {"add", [](Graph& g, Value x, Value y, Value) { return g.add(x, y); }, 12},
      {"add [N,M] + [M]", [](Graph& g, Value x, Value, Value r) { return g.add(x, r); }, 8},
      {"exp", [](Graph& g, Value x, Value, Value) { return g.exp(x); }, 8},
      {"gelu", [](Graph& g, Value x, Value, Value) { return g.gelu(x); }, 8},
      {"region tanh(x*y + r) * x",
       [](Graph& g, Value x, Value y, Value r) { return g.mul(g.tanh(g.add(g.mul(x, y), r)), x); },
       12},
  };
  TensorMap feeds{{"x", random_tensor(DType::f32, s, 1)},
                  {"y", random_tensor(DType::f32, s, 2)},
                  {"r", random_tensor(DType::f32, Shape{cols}, 3)}};
  auto wall_seconds = [](auto&& fn, int reps) {
    fn();
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) fn();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
  };
  {
    const float* a = feeds.at("x").data_as<float>();
    const float* b = feeds.at("y").data_as<float>();
    std::vector<float> c(static_cast<size_t>(n));
    double t = wall_seconds(
        [&] {
          for (int64_t i = 0; i < n; ++i) c[static_cast<size_t>(i)] = a[i] + b[i];
        },
        5);
    std::printf("  %-26s %8.2f ms %6.2f GB/s\n", "baseline loop c = a + b", t * 1e3,
                static_cast<double>(n * 12) / t / 1e9);
  }
  Session session;
  for (const Case& c : cases) {
    Graph g("bench");
    Value x = g.input("x", DType::f32, s), y = g.input("y", DType::f32, s);
    Value r = g.input("r", DType::f32, Shape{cols});
    g.set_outputs({c.build(g, x, y, r)});
    std::shared_ptr<Executable> exe = session.compile(g);  // registers the kernels
    const Graph& cg = exe->compiled_graph();
    const Node& node = cg.node(cg.outputs()[0]);
    std::vector<const std::byte*> in;
    for (Value v : node.operands) in.push_back(feeds.at(cg.node(v).name).data());
    Tensor out(DType::f32, s);
    std::byte* outs[] = {out.data()};
    cpu::KernelIO io{in.data(), outs};
    const cpu::KernelFactory factory = cpu::kernel_table().at(node.op).factory;
    cpu::Kernel native = factory != nullptr ? factory(cg, node) : cpu::Kernel{};
    cpu::Kernel reference = cpu::reference_kernel(cg, node);
    check(static_cast<bool>(native),
          std::string("no native kernel for ") + std::string(op_name(node.op)));
    double tn = wall_seconds([&] { native(io); }, 10), tr = wall_seconds([&] { reference(io); }, 1);
    std::printf("  %-26s %8.2f ms %6.2f GB/s %6.3f Gelem/s | reference %8.1f ms (%.0fx)\n", c.label,
                tn * 1e3, static_cast<double>(n * c.bytes) / tn / 1e9,
                static_cast<double>(n) / tn / 1e9, tr * 1e3, tr / tn);
  }
}

// Per-op CPU time of a chain of kChain ops (so the executor's copy of the output is amortised):
// native kernel vs the op decomposed into primitives (force_common) vs the reference evaluator.
constexpr int kChain = 8;

void report_chain(const Graph& g, const TensorMap& feeds, OpKind op, double rows, double bytes) {
  Session session;
  auto native = session.compile(g);
  CompileOptions common;
  common.dispatch = DispatchOptions::parse(std::string(op_name(op)) + "=force_common");
  auto decomposed = session.compile(g, common);
  check(native->kernels().count(op).native == kChain && decomposed->kernels().count(op).native == 0,
        "unexpected dispatch of " + std::string(op_name(op)) + ":\n" + native->kernel_report());
  double t_native = seconds_per_call([&] { native->run(feeds); }) / kChain;
  double t_common = seconds_per_call([&] { decomposed->run(feeds); }) / kChain;
  double t_ref = seconds_per_call([&] { evaluate(g, feeds); }, 0) / kChain;
  std::printf(
      "  %-28s native %8.3f ms cpu (%8.3g rows/s, %6.2f GB/s) | decomposed %8.3f ms (x%.1f)"
      " | reference %7.1f ms (x%.0f)\n",
      g.name().c_str(), t_native * 1e3, rows / t_native, bytes / t_native / 1e9, t_common * 1e3,
      t_common / t_native, t_ref * 1e3, t_ref / t_native);
}

void bench_nn() {
  std::printf("nn kernels, chains of %d ops (CPU time per op):\n", kChain);
  for (DType dt : {DType::f32, DType::bf16})
    for (int64_t axis : {1, 0}) {
      // softmax over rows of 1024 (axis 1), or down columns of 1024 (axis 0, the strided path)
      Shape s = axis == 1 ? Shape{4096, 1024} : Shape{1024, 4096};
      Graph g("softmax_" + std::string(dtype_name(dt)) +
              (axis == 1 ? "_4096x1024" : "_1024x4096_axis0"));
      Value x = g.input("x", dt, s);
      for (int i = 0; i < kChain; ++i) x = g.softmax(x, axis);
      g.set_outputs({x});
      report_chain(g, {{"x", random_tensor(dt, s, 1)}}, OpKind::Softmax, 4096,
                   2.0 * 4096 * 1024 * dtype_size(dt));
    }
  for (DType dt : {DType::f32, DType::bf16}) {
    Graph g("layer_norm_" + std::string(dtype_name(dt)) + "_4096x384");
    Value x = g.input("x", dt, Shape{4096, 384});
    Value scale = g.input("scale", dt, Shape{384});
    Value bias = g.input("bias", dt, Shape{384});
    for (int i = 0; i < kChain; ++i) x = g.layer_norm(x, scale, bias);
    g.set_outputs({x});
    report_chain(g,
                 {{"x", random_tensor(dt, Shape{4096, 384}, 2)},
                  {"scale", random_tensor(dt, Shape{384}, 3)},
                  {"bias", random_tensor(dt, Shape{384}, 4)}},
                 OpKind::LayerNorm, 4096, 2.0 * 4096 * 384 * dtype_size(dt));
  }
}

void bench_attention() {
  std::printf("attention (CPU time per call):\n");
  for (int64_t s : {128, 1024})
    for (const char* kind : {"none", "causal"}) {
      const int64_t h = 12, d = 32;
      Graph g("attention");
      Value q = g.input("q", DType::f32, Shape{1, h, s, d});
      Value k = g.input("k", DType::f32, Shape{1, h, s, d});
      Value v = g.input("v", DType::f32, Shape{1, h, s, d});
      Graph::AttentionOptions o;
      o.mask = kind;
      g.set_outputs({g.attention(q, k, v, o)});
      TensorMap feeds{{"q", random_tensor(DType::f32, Shape{1, h, s, d}, 1)},
                      {"k", random_tensor(DType::f32, Shape{1, h, s, d}, 2)},
                      {"v", random_tensor(DType::f32, Shape{1, h, s, d}, 3)}};
      Session session;
      auto native = session.compile(g);
      CompileOptions common;
      common.dispatch = DispatchOptions::parse("attention=force_common");
      auto decomposed = session.compile(g, common);
      double t_native = seconds_per_call([&] { native->run(feeds); });
      double t_common = seconds_per_call([&] { decomposed->run(feeds); }, s > 128 ? 0 : 0.5);
      double t_ref = seconds_per_call([&] { evaluate(g, feeds); }, 0);
      // Flops of q k^T and p v over the visible half (causal) or all scores.
      double flops = 4.0 * h * s * s * d * (std::string(kind) == "causal" ? 0.5 : 1.0);
      std::printf(
          "  B1 H%lld S%lld D%lld %-6s native %8.3f ms cpu (%6.1f GFLOP/s) | "
          "decomposed %9.2f ms (x%.1f) | reference %9.1f ms (x%.0f)\n",
          static_cast<long long>(h), static_cast<long long>(s), static_cast<long long>(d), kind,
          t_native * 1e3, flops / t_native / 1e9, t_common * 1e3, t_common / t_native, t_ref * 1e3,
          t_ref / t_native);
    }
}

// Encoder attention (the kernel's direct path: no positional mask, at most 1024 keys): the kernel
// called directly on [B, H, S, D] inputs (attention) or on the packed QKV projection [B, S, 3 H D]
// (packed_qkv_attention, as the fused encoders run it) with a [B, 1, 1, S] bool padding mask (as
// BERT-style encoders feed it) or none, in CPU time per call and GFLOP/s of the two products.
void bench_encoder_attention() {
  std::printf("encoder attention, kernel called directly (CPU time per call, best of runs):\n");
  struct Case {
    int64_t b, h, s, d;
    DType dt;
    bool mask;
    bool packed = false;
  };
  const Case cases[] = {
      {1, 12, 128, 32, DType::f32, true},        {4, 12, 128, 32, DType::f32, true},
      {4, 12, 128, 32, DType::f32, false},       {4, 12, 128, 32, DType::f32, false, true},
      {32, 12, 128, 32, DType::f32, false},      {32, 12, 128, 32, DType::f32, false, true},
      {32, 12, 128, 32, DType::f32, true, true}, {2, 12, 128, 64, DType::f32, true},
      {2, 8, 200, 80, DType::f32, true},         {2, 8, 128, 128, DType::f32, true},
      {1, 12, 512, 64, DType::f32, true},        {1, 12, 1024, 64, DType::f32, true},
      {4, 12, 128, 32, DType::bf16, true},       {4, 12, 128, 32, DType::bf16, true, true}};
  Session session;
  for (const Case& c : cases) {
    const Shape qs{c.b, c.h, c.s, c.d}, ms{c.b, 1, 1, c.s}, ps{c.b, c.s, 3 * c.h * c.d};
    Graph g("attention");
    Graph::AttentionOptions o;
    o.mask = c.mask ? "bool" : "none";
    std::optional<Value> m;
    if (c.mask) m = g.input("m", DType::bool_, ms);
    TensorMap feeds;
    if (c.packed) {
      g.set_outputs({g.packed_qkv_attention(g.input("qkv", c.dt, ps), c.h, c.h, o, m)});
      feeds.emplace("qkv", random_tensor(c.dt, ps, 1));
    } else {
      Value q = g.input("q", c.dt, qs), k = g.input("k", c.dt, qs), v = g.input("v", c.dt, qs);
      g.set_outputs({g.attention(q, k, v, o, m)});
      feeds = {{"q", random_tensor(c.dt, qs, 1)},
               {"k", random_tensor(c.dt, qs, 2)},
               {"v", random_tensor(c.dt, qs, 3)}};
    }
    Tensor mask(DType::bool_, ms);
    for (int64_t i = 0; i < mask.numel(); ++i) mask.set_i64(i, i % c.s < c.s - 9);  // padding
    feeds.emplace("m", mask);
    std::shared_ptr<Executable> exe = session.compile(g);
    const Graph& cg = exe->compiled_graph();
    const Node& node = cg.node(cg.outputs()[0]);
    std::vector<const std::byte*> in;
    for (Value val : node.operands) in.push_back(feeds.at(cg.node(val).name).data());
    Tensor out(c.dt, qs);
    std::byte* outs[] = {out.data()};
    cpu::KernelIO io{in.data(), outs};
    cpu::Kernel kernel = cpu::kernel_table().at(node.op).factory(cg, node);
    const double t = seconds_per_call([&] { kernel(io); });
    const double flops = 4.0 * static_cast<double>(c.b * c.h * c.s * c.s * c.d);
    std::printf("  B%lld H%lld S%lld D%lld %-4s %-4s %-6s %8.3f ms cpu (%6.1f GFLOP/s)\n",
                static_cast<long long>(c.b), static_cast<long long>(c.h),
                static_cast<long long>(c.s), static_cast<long long>(c.d), dtype_name(c.dt).data(),
                c.mask ? "bool" : "none", c.packed ? "packed" : "", t * 1e3, flops / t / 1e9);
  }
}

// Per-call CPU time of small GEMMs: the kernel called directly in a tight loop, and a whole
// Executable::run (executor, feeds and the output copy included). Best of 5 loops.
void bench_gemm() {
  std::printf("small gemm, f32 (CPU microseconds per call, best of 5 loops):\n");
  struct Case {
    int64_t m, k, n;
    const char* act;  // nullptr: matmul; else fused_matmul_bias_act with this activation
  };
  const Case cases[] = {{8, 64, 64, nullptr},    {8, 64, 64, "none"},     {8, 64, 64, "relu"},
                        {1, 256, 256, nullptr},  {32, 64, 64, nullptr},   {64, 64, 64, nullptr},
                        {64, 128, 128, nullptr}, {64, 256, 256, nullptr}, {64, 256, 256, "gelu"},
                        {1, 384, 1536, nullptr}, {1, 384, 1536, "gelu"}};
  auto best_us = [](auto&& fn, int reps) {
    fn();
    double best = 1e30;
    for (int r = 0; r < 5; ++r) {
      timespec t0{}, t1{};
      clock_gettime(bench_clock(), &t0);
      for (int i = 0; i < reps; ++i) fn();
      clock_gettime(bench_clock(), &t1);
      double sec = static_cast<double>(t1.tv_sec - t0.tv_sec) +
                   1e-9 * static_cast<double>(t1.tv_nsec - t0.tv_nsec);
      best = std::min(best, sec / reps);
    }
    return best * 1e6;
  };
  Session session;
  for (const Case& c : cases) {
    Graph g("gemm");
    Value x = g.input("x", DType::f32, {c.m, c.k}), w = g.input("w", DType::f32, {c.k, c.n});
    TensorMap feeds{{"x", random_tensor(DType::f32, Shape{c.m, c.k}, 1)},
                    {"w", random_tensor(DType::f32, Shape{c.k, c.n}, 2)}};
    if (c.act) {
      feeds.emplace("b", random_tensor(DType::f32, Shape{c.n}, 3));
      g.set_outputs({g.fused_matmul_bias_act(x, w, g.input("b", DType::f32, {c.n}), c.act)});
    } else {
      g.set_outputs({g.matmul(x, w)});
    }
    std::shared_ptr<Executable> exe = session.compile(g);
    const Graph& cg = exe->compiled_graph();
    const Node& node = cg.node(cg.outputs()[0]);
    std::vector<const std::byte*> in;
    for (Value v : node.operands) in.push_back(feeds.at(cg.node(v).name).data());
    Tensor out(DType::f32, Shape{c.m, c.n});
    std::byte* outs[] = {out.data()};
    cpu::KernelIO io{in.data(), outs};
    cpu::Kernel kernel = cpu::kernel_table().at(node.op).factory(cg, node);
    int reps = static_cast<int>(std::clamp<int64_t>(400000000 / (c.m * c.k * c.n), 20, 20000));
    double tk = best_us([&] { kernel(io); }, reps);
    double tr = best_us([&] { exe->run(feeds); }, reps);
    std::string label = std::to_string(c.m) + "x" + std::to_string(c.k) + " @ " +
                        std::to_string(c.k) + "x" + std::to_string(c.n) +
                        (c.act ? std::string(" +b ") + c.act : std::string());
    std::printf("  %-30s kernel %9.2f us (%6.1f GFLOP/s) | run %9.2f us\n", label.c_str(), tk,
                2.0 * static_cast<double>(c.m * c.k * c.n) / tk / 1e3, tr);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::string section = argc > 1 ? argv[1] : "all";
  if (argc > 2 || (section != "all" && section != "elementwise" && section != "nn" &&
                   section != "attention" && section != "encoder_attention" && section != "gemm")) {
    std::fprintf(stderr, "usage: %s [all|elementwise|nn|attention|encoder_attention|gemm]\n",
                 argv[0]);
    return 2;
  }
  std::printf("%d thread(s): the CPU-time tables below are %s\n", num_threads(),
              num_threads() == 1 ? "process CPU time" : "wall time (more than one thread)");
  try {
    if (section == "all" || section == "elementwise") bench_elementwise();
    if (section == "all" || section == "nn") bench_nn();
    if (section == "all" || section == "attention") bench_attention();
    if (section == "all" || section == "encoder_attention") bench_encoder_attention();
    if (section == "all" || section == "gemm") bench_gemm();
  } catch (const Error& e) {
    std::fprintf(stderr, "rlx_bench_cpu_kernels: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
