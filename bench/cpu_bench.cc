// CPU benchmarks against peers in the same run: sgemm (rlx vs oneDNN vs OpenBLAS), per-op
// throughput (native kernel vs decomposition vs reference evaluator) and a BERT-style encoder
// layer whose weights, input and output are written as .npy files for bench/encoder_peers.py
// (JAX, ONNX Runtime). bench/run_cpu_bench.sh runs every section; see README "Benchmarks".
#include <oneapi/dnnl/dnnl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>
#ifdef RLX_BENCH_OPENBLAS
#include <cblas.h>
#endif

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "rlx/io/atomic_file.h"
#include "rlx/ir/error.h"
#include "rlx/models/encoder_block.h"
#include "rlx/runtime/session.h"
#include "rlx/runtime/threading.h"

namespace {

using namespace rlx;
using Clock = std::chrono::steady_clock;

struct Options {
  std::string section = "all";  // sgemm, ops, encoder or all
  std::vector<int64_t> sizes = {256, 512, 1024, 2048, 4096};
  double budget_s = 1.0;         // timed seconds per measurement (after the warmup)
  double max_fallback_s = 20.0;  // skip a run predicted to take longer (reference path)
  std::string out_dir;           // encoder files; empty: a new directory under /tmp
};

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// ---- timing

constexpr double kSlowRunS = 5.0;

struct Timing {
  double median_s = 0;
  double min_s = 0;
  int runs = 0;
};

// One warmup call, then calls until at least `min_runs` were timed and `budget_s` seconds spent
// (at most `max_runs`). A warmup slower than kSlowRunS (only reference-fallback paths are) is
// itself the only sample, so such a path costs one call instead of min_runs + 1.
Timing time_runs(const std::function<void()>& fn, double budget_s, int min_runs = 5,
                 int max_runs = 2000) {
  auto t0 = Clock::now();
  fn();
  double warm = seconds_since(t0);
  if (warm > kSlowRunS) return {warm, warm, 1};
  std::vector<double> samples;
  auto start = Clock::now();
  while (static_cast<int>(samples.size()) < max_runs &&
         (static_cast<int>(samples.size()) < min_runs || seconds_since(start) < budget_s)) {
    auto t = Clock::now();
    fn();
    samples.push_back(seconds_since(t));
  }
  std::sort(samples.begin(), samples.end());
  size_t n = samples.size();
  double median = n % 2 ? samples[n / 2] : 0.5 * (samples[n / 2 - 1] + samples[n / 2]);
  return {median, samples.front(), static_cast<int>(n)};
}

// ---- data

// f32 values uniform in [lo, hi).
Tensor random_f32(const Shape& shape, float lo, float hi, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  Tensor t(DType::f32, shape);
  float* p = t.data_as<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = dist(rng);
  return t;
}

// Largest |a - b| over all elements; NaN when one holds a NaN or an infinity where the other
// does not (equal infinities and NaN against NaN count as equal).
double max_abs_diff(const Tensor& a, const Tensor& b) {
  check(a.type() == b.type(),
        "bench: comparing " + a.type().to_string() + " with " + b.type().to_string());
  double m = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    double x = a.get_f64(i), y = b.get_f64(i);
    if (x == y || (std::isnan(x) && std::isnan(y))) continue;
    double d = std::fabs(x - y);
    if (std::isnan(d)) return d;
    m = std::max(m, d);
  }
  return m;
}

// ---- rlx helpers

// How many compute nodes of an executable ran a native kernel and how many the reference
// fallback, from its structured kernel report, plus the op kinds that fell back.
struct KernelSummary {
  int native = 0;
  int fallback = 0;
  std::string fallback_ops;
  bool parsed = false;  // the executable reported its kernels
  std::string summary() const {
    if (!parsed) return "no kernel report";
    std::string s = std::to_string(native) + "/" + std::to_string(native + fallback) + " native";
    if (fallback) s += "; fallback: " + fallback_ops;
    return s;
  }
};

KernelSummary kernel_counts(const Executable& exe) {
  KernelSummary c;
  const KernelReport& report = exe.kernels();
  c.parsed = !report.nodes.empty();
  for (const auto& [op, k] : report.counts()) {
    c.native += k.native;
    c.fallback += k.fallback;
    if (k.fallback)
      c.fallback_ops += (c.fallback_ops.empty() ? "" : ",") + std::string(op_name(op));
  }
  return c;
}

CompileOptions dispatch_options(KernelDispatch policy) {
  CompileOptions o;
  o.dispatch =
      DispatchOptions{policy, {}};  // not RLX_KERNEL_DISPATCH: each column names its policy
  return o;
}

// Compiles `g` under `policy` and binds every param of `feeds`.
std::shared_ptr<Executable> compile_with(Session& s, const Graph& g, const TensorMap& feeds,
                                         KernelDispatch policy) {
  std::shared_ptr<Executable> exe = s.compile(g, dispatch_options(policy));
  for (const IoSpec& p : exe->params()) exe->set_param(p.name, feeds.at(p.name));
  return exe;
}

TensorMap inputs_of(const Executable& exe, const TensorMap& feeds) {
  TensorMap in;
  for (const IoSpec& i : exe.inputs()) in.emplace(i.name, feeds.at(i.name));
  return in;
}

// ---- process facts

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown";
}

// VmHWM (peak resident set) of this process in bytes, or -1 when /proc is unavailable.
int64_t peak_rss_bytes() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  return -1;
}

// Resets VmHWM to the current RSS (Linux clear_refs "5"); false where that is not permitted.
bool reset_peak_rss() {
  std::ofstream f("/proc/self/clear_refs");
  f << "5";
  f.flush();
  return static_cast<bool>(f);
}

std::string fmt(const char* format, double v) {
  if (std::isnan(v)) return "-";
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

// A difference from max_abs_diff: NaN there means mismatched NaN/inf positions.
std::string fmt_diff(double d) { return std::isnan(d) ? "NaN!" : fmt("%.1e", d); }

// The 1-minute load average, or NaN when /proc/loadavg is unreadable.
double load_average() {
  std::ifstream f("/proc/loadavg");
  double load = NAN;
  f >> load;
  return load;
}

double mib(int64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

// ---- .npy files (NumPy format 1.0, little-endian f32, C order)

void write_npy(const std::filesystem::path& path, const Tensor& t) {
  check(t.dtype() == DType::f32, "bench: write_npy writes f32 only");
  std::string shape = "(";
  for (int64_t d : t.shape().dims()) shape += std::to_string(d) + ", ";
  if (t.shape().rank() > 1) shape.resize(shape.size() - 2);
  if (t.shape().rank() == 1) shape.resize(shape.size() - 1);
  shape += ")";
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': " + shape + ", }";
  // Magic (6) + version (2) + length (2) + header + '\n' is padded to a multiple of 64.
  size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  AtomicFileWriter f(path.string());
  f.write("\x93NUMPY\x01\x00", 8);
  uint16_t len = static_cast<uint16_t>(header.size());
  char le[2] = {static_cast<char>(len & 0xff), static_cast<char>(len >> 8)};
  f.write(le, 2);
  f.write(header);
  f.write(t.data(), t.nbytes());
  f.commit();
}

// ---- 1. sgemm

// GFLOP/s of an n^3 sgemm at the median and at the best run.
struct Rate {
  double median = NAN, best = NAN;
};

double gflops(int64_t n, double seconds) {
  return 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n) / seconds *
         1e-9;
}

#ifdef RLX_BENCH_OPENBLAS
// The child process of the OpenBLAS column: OpenBLAS picks its kernels (OPENBLAS_CORETYPE)
// once, when the library loads, so each setting is measured in a fresh process. Prints
// "core <name>" and then "<n> <GFLOP/s at the median> <GFLOP/s at the best run>" per size.
int openblas_child(const std::vector<int64_t>& sizes, double budget_s) {
  std::printf("core %s\n", openblas_get_corename());
  for (int64_t n : sizes) {
    Tensor a = random_f32(Shape{n, n}, -1, 1, 1), b = random_f32(Shape{n, n}, -1, 1, 2);
    Tensor c(DType::f32, Shape{n, n});
    auto n32 = static_cast<blasint>(n);
    Timing t = time_runs(
        [&] {
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n32, n32, n32, 1.0f,
                      a.data_as<float>(), n32, b.data_as<float>(), n32, 0.0f, c.data_as<float>(),
                      n32);
        },
        budget_s, 3);
    std::printf("%lld %.3f %.3f\n", static_cast<long long>(n), gflops(n, t.median_s),
                gflops(n, t.min_s));
    std::fflush(stdout);
  }
  return 0;
}
#endif

// Runs this program as `--openblas-child` with OPENBLAS_CORETYPE=`coretype` (unset when empty)
// and OPENBLAS_NUM_THREADS = rlx's thread count; returns the core name it reported and GFLOP/s
// per size (empty when the child failed or OpenBLAS is not built in).
std::pair<std::string, std::map<int64_t, Rate>> openblas_column(const std::string& coretype,
                                                                const Options& o) {
  std::pair<std::string, std::map<int64_t, Rate>> result{"not built", {}};
#ifdef RLX_BENCH_OPENBLAS
  std::string sizes;
  for (int64_t n : o.sizes) sizes += (sizes.empty() ? "" : ",") + std::to_string(n);
  std::string budget = std::to_string(o.budget_s);
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    std::string_view kv(*e);
    if (kv.rfind("OPENBLAS_CORETYPE=", 0) != 0 && kv.rfind("OPENBLAS_NUM_THREADS=", 0) != 0)
      env.emplace_back(kv);
  }
  if (!coretype.empty()) env.push_back("OPENBLAS_CORETYPE=" + coretype);
  env.push_back("OPENBLAS_NUM_THREADS=" + std::to_string(num_threads()));
  std::vector<char*> envp;
  envp.reserve(env.size() + 1);
  for (std::string& s : env) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  std::string flag = "--openblas-child", budget_flag = "--budget";
  std::vector<char*> argv = {self.data(),        flag.data(),   sizes.data(),
                             budget_flag.data(), budget.data(), nullptr};

  int fd[2];
  if (pipe(fd) != 0) return {"pipe failed", {}};
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fd[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&actions, fd[0]);
  pid_t pid = 0;
  int rc = posix_spawn(&pid, self.c_str(), &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  close(fd[1]);
  std::string text;
  char buf[4096];
  for (ssize_t k; rc == 0 && (k = read(fd[0], buf, sizeof buf)) > 0;)
    text.append(buf, static_cast<size_t>(k));
  close(fd[0]);
  int status = 0;
  if (rc != 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return {"child failed", {}};
  std::istringstream in(text);
  std::string word;
  while (in >> word) {
    if (word == "core") {
      in >> result.first;
    } else {
      Rate r;
      in >> r.median >> r.best;
      result.second[std::stoll(word)] = r;
    }
  }
#else
  (void)coretype;
  (void)o;
#endif
  return result;
}

void bench_sgemm(const Options& o) {
  std::printf("\n== 1. sgemm C = A B, f32 row-major, square n, GFLOP/s = 2n^3 / time\n");
  std::printf(
      "rlx: Session graph with one matmul (input x, param w), timed run() incl. output "
      "copy; oneDNN: dnnl_sgemm; OpenBLAS: cblas_sgemm in a child process\n");
  Session session;
  std::map<int64_t, Rate> rlx, dnnl;
  std::map<int64_t, std::string> notes;
  double last_fallback_s = 0;
  int64_t last_fallback_n = 0;
  for (int64_t n : o.sizes) {
    Tensor a = random_f32(Shape{n, n}, -1, 1, 1);
    Tensor b = random_f32(Shape{n, n}, -1, 1, 2);
    Tensor c(DType::f32, Shape{n, n});
    bind_library_threads();
    Timing td = time_runs(
        [&] {
          dnnl_sgemm('N', 'N', n, n, n, 1.0f, a.data_as<float>(), n, b.data_as<float>(), n, 0.0f,
                     c.data_as<float>(), n);
        },
        o.budget_s, 3);
    dnnl[n] = {gflops(n, td.median_s), gflops(n, td.min_s)};

    Graph g("sgemm");
    g.set_outputs(
        {g.matmul(g.input("x", DType::f32, Shape{n, n}), g.param("w", DType::f32, Shape{n, n}))});
    std::shared_ptr<Executable> exe =
        compile_with(session, g, {{"w", b}}, KernelDispatch::PreferNative);
    KernelSummary kc = kernel_counts(*exe);
    // The reference path is cubic in n: predict from the last fallback size and skip when slow.
    double predicted =
        last_fallback_n
            ? last_fallback_s *
                  std::pow(static_cast<double>(n) / static_cast<double>(last_fallback_n), 3)
            : 0;
    if (kc.fallback && predicted > o.max_fallback_s) {
      notes[n] = "skipped: reference fallback, ~" + fmt("%.0f", predicted) + " s/run";
      continue;
    }
    TensorMap in{{"x", a}};
    Tensor out;
    Timing tr = time_runs([&] { out = exe->run(in)[0]; }, o.budget_s, 3);
    rlx[n] = {gflops(n, tr.median_s), gflops(n, tr.min_s)};
    if (kc.fallback) {
      last_fallback_s = tr.median_s;
      last_fallback_n = n;
    }
    double scale = 0;
    for (int64_t i = 0; i < c.numel(); ++i) scale = std::max(scale, std::fabs(c.get_f64(i)));
    notes[n] = kc.summary() + "; max|rlx-oneDNN|/max|C| " + fmt_diff(max_abs_diff(out, c) / scale);
  }

  auto [core_default, ob_default] = openblas_column("", o);
  auto [core_haswell, ob_haswell] = openblas_column("Haswell", o);
  std::string h1 = "OB " + core_default, h2 = "OB " + core_haswell;
  std::printf(
      "OpenBLAS columns: OB <core> = default kernel selection (OPENBLAS_CORETYPE unset) "
      "and OPENBLAS_CORETYPE=Haswell; ratios are rlx GFLOP/s over the peer's (> 1: rlx faster)\n");
  std::printf("%6s %13s %13s %16s %16s %9s %9s  %s\n", "n", "rlx", "oneDNN", h1.c_str(), h2.c_str(),
              "rlx/dnnl", "rlx/OB", "rlx notes");
  auto get = [](const std::map<int64_t, Rate>& m, int64_t n) {
    auto it = m.find(n);
    return it == m.end() ? Rate{} : it->second;
  };
  auto cell = [](Rate r) { return fmt("%.1f", r.median) + " (" + fmt("%.1f", r.best) + ")"; };
  for (int64_t n : o.sizes) {
    Rate r = get(rlx, n), d = get(dnnl, n), obd = get(ob_default, n), obh = get(ob_haswell, n);
    double best_ob = std::fmax(obd.median, obh.median);  // NaN only if both are
    std::printf("%6lld %13s %13s %16s %16s %9s %9s  %s\n", static_cast<long long>(n),
                cell(r).c_str(), cell(d).c_str(), cell(obd).c_str(), cell(obh).c_str(),
                fmt("%.2f", r.median / d.median).c_str(), fmt("%.2f", r.median / best_ob).c_str(),
                notes[n].c_str());
  }
  std::printf(
      "GFLOP/s at the median run (at the best run); ratios of medians, rlx/OB against the faster "
      "OpenBLAS setting.\n");
}

// ---- 2. per-op throughput

struct OpCase {
  std::string name, shape;
  Graph graph;
  TensorMap feeds;
  double bytes = 0;       // minimal traffic: operands read once + results written once
  double flops = 0;       // for attention: the two matmuls
  bool reference = true;  // also time the reference evaluator (not for attention S=512)
};

OpCase softmax_case() {
  OpCase c{"softmax", "[4096,1024] axis -1", Graph("softmax"), {}, 0, 0, true};
  Value x = c.graph.input("x", DType::f32, Shape{4096, 1024});
  c.graph.set_outputs({c.graph.softmax(x, -1)});
  c.feeds["x"] = random_f32(Shape{4096, 1024}, -4, 4, 3);
  c.bytes = 2.0 * 4096 * 1024 * 4;
  return c;
}

OpCase layer_norm_case() {
  OpCase c{"layer_norm", "[4096,384] eps 1e-12", Graph("layer_norm"), {}, 0, 0, true};
  Graph& g = c.graph;
  Value x = g.input("x", DType::f32, Shape{4096, 384});
  g.set_outputs({g.layer_norm(x, g.param("scale", DType::f32, Shape{384}),
                              g.param("bias", DType::f32, Shape{384}), -1, 1e-12)});
  c.feeds["x"] = random_f32(Shape{4096, 384}, -2, 2, 4);
  c.feeds["scale"] = random_f32(Shape{384}, 0.5, 1.5, 5);
  c.feeds["bias"] = random_f32(Shape{384}, -0.5, 0.5, 6);
  c.bytes = 2.0 * 4096 * 384 * 4 + 2.0 * 384 * 4;
  return c;
}

// The FFN epilogue as the fusion passes see it when the matmul is separate: gelu(x + bias),
// two elementwise ops of one shape that mark-elementwise-regions turns into one region.
OpCase gelu_case() {
  OpCase c{"gelu region", "gelu(x+b) [4096,1536]", Graph("gelu_region"), {}, 0, 0, true};
  Graph& g = c.graph;
  Value x = g.input("x", DType::f32, Shape{4096, 1536});
  g.set_outputs({g.gelu(g.add(x, g.param("b", DType::f32, Shape{1536})))});
  c.feeds["x"] = random_f32(Shape{4096, 1536}, -4, 4, 7);
  c.feeds["b"] = random_f32(Shape{1536}, -0.5, 0.5, 8);
  c.bytes = 2.0 * 4096 * 1536 * 4 + 1536 * 4;
  return c;
}

OpCase attention_case(int64_t seq) {
  const int64_t b = 1, h = 12, d = 32;
  OpCase c{"attention", "B1 H12 S" + std::to_string(seq) + " D32", Graph("attention"), {}, 0, 0,
           seq <= 128};
  Graph& g = c.graph;
  Shape s{b, h, seq, d};
  Value q = g.input("q", DType::f32, s), k = g.input("k", DType::f32, s),
        v = g.input("v", DType::f32, s);
  g.set_outputs({g.attention(q, k, v, Graph::AttentionOptions{})});
  c.feeds["q"] = random_f32(s, -1, 1, 9);
  c.feeds["k"] = random_f32(s, -1, 1, 10);
  c.feeds["v"] = random_f32(s, -1, 1, 11);
  c.bytes = 4.0 * static_cast<double>(s.numel()) * 4;
  c.flops = 4.0 * static_cast<double>(b * h * seq * seq * d);
  return c;
}

void bench_ops(const Options& o) {
  std::printf(
      "\n== 2. per-op throughput, f32: median ms, and GB/s of minimal traffic "
      "(operands read once + result written once) or GFLOP/s for attention\n");
  std::printf(
      "native: default dispatch (prefer_native); decomposed: force_common (composites "
      "as primitive kernels); reference: evaluate() (double, naive), not for attention S=512\n");
  std::printf("%-12s %-22s %17s %10s %17s %10s %9s %8s %9s  %s\n", "op", "shape", "native ms (min)",
              "rate", "decomp ms (min)", "rate", "ref ms", "nat/dec", "max|d|ref",
              "rlx native kernels");
  Session session;
  std::vector<OpCase> cases;
  cases.push_back(softmax_case());
  cases.push_back(layer_norm_case());
  cases.push_back(gelu_case());
  cases.push_back(attention_case(128));
  cases.push_back(attention_case(512));
  for (OpCase& c : cases) {
    auto rate = [&](double s) {
      return c.flops > 0 ? fmt("%.1f", c.flops / s * 1e-9) + " GF/s"
                         : fmt("%.2f", c.bytes / s * 1e-9) + " GB/s";
    };
    std::shared_ptr<Executable> nat =
        compile_with(session, c.graph, c.feeds, KernelDispatch::PreferNative);
    std::shared_ptr<Executable> dec =
        compile_with(session, c.graph, c.feeds, KernelDispatch::ForceCommon);
    TensorMap in_nat = inputs_of(*nat, c.feeds), in_dec = inputs_of(*dec, c.feeds);
    Tensor out_nat, out_dec, out_ref;
    Timing tn = time_runs([&] { out_nat = nat->run(in_nat)[0]; }, o.budget_s);
    Timing tdc = time_runs([&] { out_dec = dec->run(in_dec)[0]; }, o.budget_s);
    double ref_ms = NAN, diff = NAN;
    std::string diff_note;
    if (c.reference) {
      Timing tr = time_runs([&] { out_ref = evaluate(c.graph, c.feeds)[0]; }, o.budget_s, 1, 3);
      ref_ms = tr.median_s * 1e3;
      double d_nat = max_abs_diff(out_nat, out_ref), d_dec = max_abs_diff(out_dec, out_ref);
      diff = std::isnan(d_dec) ? d_dec : std::max(d_nat, d_dec);  // a NaN (mismatch) wins
    } else {  // no reference run: compare the two rlx paths with each other
      diff = max_abs_diff(out_nat, out_dec);
      diff_note = " (max|d| native vs decomposed)";
    }
    auto ms = [](const Timing& t) {
      return fmt("%.3f", t.median_s * 1e3) + " (" + fmt("%.3f", t.min_s * 1e3) + ")";
    };
    std::printf("%-12s %-22s %17s %10s %17s %10s %9s %8.2f %9s  %s%s\n", c.name.c_str(),
                c.shape.c_str(), ms(tn).c_str(), rate(tn.median_s).c_str(), ms(tdc).c_str(),
                rate(tdc.median_s).c_str(), fmt("%.1f", ref_ms).c_str(), tdc.median_s / tn.median_s,
                fmt_diff(diff).c_str(), kernel_counts(*nat).summary().c_str(), diff_note.c_str());
  }
  std::printf(
      "median (min) ms; rates and nat/dec from medians: nat/dec = decomposed time / native time "
      "(> 1: the native kernel is faster); "
      "max|d|ref = max |rlx - reference| over both rlx paths.\n");
}

// ---- 3. encoder layer

void bench_encoder(const Options& o) {
  std::filesystem::path root = o.out_dir;
  if (root.empty()) {
    std::string tmpl = (std::filesystem::temp_directory_path() / "rlx_bench.XXXXXX").string();
    check(mkdtemp(tmpl.data()) != nullptr, "bench: cannot create a directory under /tmp");
    root = tmpl;
  }
  std::printf(
      "\n== 3. BERT-style encoder layer (post-LN; hidden 384, 12 heads, FFN 1536, seq "
      "128, f32), rlx median latency; files for the peers in %s\n",
      root.c_str());
  std::printf("%6s %10s %10s %6s %11s %10s %10s %10s  %s\n", "batch", "median ms", "min ms", "runs",
              "compile ms", "arena MiB", "param MiB", "VmHWM MiB", "rlx native kernels");
  Session session;
  double batch1_s = 0;
  std::vector<std::string> notes;
  for (int64_t batch : {1, 32}) {
    const models::EncoderBlockConfig cfg = models::EncoderBlockConfig::minilm(batch);
    Graph g = models::build_encoder_block(cfg);
    TensorMap feeds = models::encoder_block_feeds(g, 42);
    std::filesystem::path dir = root / ("b" + std::to_string(batch));
    std::filesystem::create_directories(dir / "params");
    write_npy(dir / "x.npy", feeds.at("x"));

    bool hwm_reset = reset_peak_rss();
    auto tc = Clock::now();
    std::shared_ptr<Executable> exe = compile_with(session, g, feeds, KernelDispatch::PreferNative);
    double compile_ms = seconds_since(tc) * 1e3;
    int64_t param_bytes = 0;
    for (const IoSpec& p : exe->params()) {
      write_npy(dir / "params" / (p.name + ".npy"), feeds.at(p.name));
      param_bytes += static_cast<int64_t>(feeds.at(p.name).nbytes());
    }
    KernelSummary kc = kernel_counts(*exe);
    // Latency is linear in the batch here (attention is per sequence): predict the reference
    // fallback path's time from batch 1 and skip what would take too long.
    double predicted = batch1_s * static_cast<double>(batch);
    std::string meta_median = "null", meta_min = "null";
    Timing t;
    int64_t hwm = peak_rss_bytes();
    if (kc.fallback && batch > 1 && predicted > o.max_fallback_s) {
      notes.push_back("batch " + std::to_string(batch) + ": skipped (reference fallback, ~" +
                      fmt("%.0f", predicted) + " s/run); the peers are compared with each other");
    } else {
      TensorMap in = inputs_of(*exe, feeds);
      Tensor out;
      t = time_runs([&] { out = exe->run(in)[0]; }, 2 * o.budget_s, 10);
      if (batch == 1) batch1_s = t.median_s;
      write_npy(dir / "rlx_out.npy", out);
      meta_median = fmt("%.6f", t.median_s * 1e3);
      meta_min = fmt("%.6f", t.min_s * 1e3);
      hwm = peak_rss_bytes();  // before the reference evaluator below adds its own memory
      if (batch == 1) {        // the reference evaluator is too slow for batch 32
        double d = max_abs_diff(out, evaluate(g, feeds)[0]);
        notes.push_back("batch 1: max |rlx - reference evaluator| = " + fmt_diff(d));
      }
    }
    std::printf("%6lld %10s %10s %6d %11.1f %10.2f %10.2f %10s  %s\n",
                static_cast<long long>(batch), fmt("%.3f", t.runs ? t.median_s * 1e3 : NAN).c_str(),
                fmt("%.3f", t.runs ? t.min_s * 1e3 : NAN).c_str(), t.runs, compile_ms,
                mib(exe->memory_plan().arena_bytes), mib(param_bytes),
                fmt("%.1f", hwm < 0 ? NAN : mib(hwm)).c_str(), kc.summary().c_str());
    if (!hwm_reset) notes.emplace_back("VmHWM could not be reset: it is the process peak so far");

    std::ostringstream meta;
    meta << "{\"batch\": " << batch << ", \"seq\": " << cfg.seq << ", \"hidden\": " << cfg.hidden
         << ", \"heads\": " << cfg.heads << ", \"ffn\": " << cfg.ffn
         << ", \"eps\": 1e-12, \"threads\": " << num_threads()
         << ", \"rlx_median_ms\": " << meta_median << ", \"rlx_min_ms\": " << meta_min
         << ", \"rlx_runs\": " << t.runs << ", \"arena_bytes\": " << exe->memory_plan().arena_bytes
         << ", \"param_bytes\": " << param_bytes << ", \"vmhwm_bytes\": " << hwm << "}\n";
    write_file_atomically((dir / "meta.json").string(), meta.str());
  }
  for (const std::string& n : notes) std::printf("%s\n", n.c_str());
  std::printf(
      "VmHWM: peak RSS of this process, reset before each batch's compile; it includes "
      "the feeds, the params (zero-copy) and the arena.\n");
}

std::vector<int64_t> parse_sizes(const std::string& s) {
  std::vector<int64_t> v;
  std::istringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) {
    v.push_back(std::stoll(item));
    check(v.back() > 0, "--sizes: sizes must be positive");
  }
  return v;
}

int usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s [--section all|sgemm|ops|encoder] [--sizes 256,512,...] "
               "[--budget SECONDS] [--max-fallback SECONDS] [--out DIR]\n",
               argv0);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  std::string openblas_sizes;
  try {
    for (int i = 1; i < argc; ++i) {
      std::string a = argv[i];
      auto value = [&]() -> std::string {
        check(i + 1 < argc, a + " needs a value");
        return argv[++i];
      };
      if (a == "--section")
        o.section = value();
      else if (a == "--sizes")
        o.sizes = parse_sizes(value());
      else if (a == "--budget")
        o.budget_s = std::stod(value());
      else if (a == "--max-fallback")
        o.max_fallback_s = std::stod(value());
      else if (a == "--out")
        o.out_dir = value();
      else if (a == "--openblas-child")
        openblas_sizes = value();
      else
        return usage(argv[0]);
    }
    if (!openblas_sizes.empty()) {
#ifdef RLX_BENCH_OPENBLAS
      return openblas_child(parse_sizes(openblas_sizes), o.budget_s);
#else
      return 1;
#endif
    }
    bool all = o.section == "all";
    if (!all && o.section != "sgemm" && o.section != "ops" && o.section != "encoder")
      return usage(argv[0]);
    std::printf(
        "rlx CPU benchmarks: %s, %d threads (RLX_NUM_THREADS or physical cores), "
        "oneDNN %d.%d.%d\n",
        cpu_model().c_str(), num_threads(), dnnl_version()->major, dnnl_version()->minor,
        dnnl_version()->patch);
    // Other processes on the cores skew every number (OpenMP teams wait at barriers for
    // descheduled threads), so say so next to the results.
    double load = load_average();
    if (load > 0.5 * static_cast<double>(std::thread::hardware_concurrency()))
      std::printf("WARNING: load average %.1f on %u CPUs before the run: numbers are unreliable\n",
                  load, std::thread::hardware_concurrency());
    if (const char* p = std::getenv("RLX_PRECISION"); p && *p)
      std::printf("RLX_PRECISION=%s applies to every rlx compile\n", p);
    if (all || o.section == "sgemm") bench_sgemm(o);
    if (all || o.section == "ops") bench_ops(o);
    if (all || o.section == "encoder") bench_encoder(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rlx_bench_cpu: %s\n", e.what());
    return 1;
  }
  return 0;
}
