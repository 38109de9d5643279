// CPU backend attention kernel against the reference evaluator: every mask kind, GQA, Sq != Sk,
// D != Dv, tiny to long sequences, every float dtype, special values and bounded memory.
#include <gtest/gtest.h>
#include <hwy/targets.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "common/hwy_targets.h"
#include "common/test_util.h"
#include "rlx/ir/evaluator.h"
#include "rlx/runtime/session.h"
#include "rlx/runtime/threading.h"

namespace rlx {
namespace {

using testing::all_close;
using testing::random_tensor;

constexpr DType kFloatTypes[] = {DType::f32, DType::f16, DType::bf16, DType::f64};
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// The kernel computes in f32 (f64 for f64); outputs are convex combinations of v in [-2, 2].
// f32: score rounding (~D ulp of |q||k|) moves weights by ~1e-6 relative; 16-bit: one ulp of
// the output's rounding on top.
struct Tol {
  double rtol, atol;
};
Tol tol(DType t) {
  switch (t) {
    case DType::f16:
      return {2e-3, 5e-5};
    case DType::bf16:
      return {1.6e-2, 2e-4};
    case DType::f64:
      return {1e-11, 1e-12};
    default:
      return {1e-4, 2e-5};
  }
}

struct Config {
  int64_t b, hq, hkv, sq, sk, d, dv;
  std::string to_string() const {
    std::ostringstream s;
    s << "B" << b << " Hq" << hq << " Hkv" << hkv << " Sq" << sq << " Sk" << sk << " D" << d
      << " Dv" << dv;
    return s.str();
  }
};

// One mask variant: kind, window, and the shape of the mask tensor (bool / bias kinds).
struct MaskCase {
  MaskCase(std::string kind, int64_t window = 0, std::optional<Shape> tensor = std::nullopt)
      : kind(std::move(kind)), window(window), tensor(std::move(tensor)) {}
  std::string kind;
  int64_t window;
  std::optional<Shape> tensor;
};

Graph::AttentionOptions options(const std::string& kind, std::optional<double> scale = {},
                                int64_t window = 0) {
  Graph::AttentionOptions o;
  o.mask = kind;
  o.scale = scale;
  o.window = window;
  return o;
}

std::vector<MaskCase> mask_cases(const Config& c) {
  std::vector<MaskCase> m = {{"none"},
                             {"causal"},
                             {"sliding_window", 1},
                             {"sliding_window", 3},
                             {"sliding_window", 100},
                             {"causal_lengths", 0, Shape{c.b}}};
  for (const char* kind : {"bool", "bias"})
    m.insert(m.end(), {{kind, 0, Shape{c.b, c.hq, c.sq, c.sk}},
                       {kind, 0, Shape{c.b, 1, 1, c.sk}},
                       {kind, 0, Shape{c.sq, c.sk}},
                       {kind, 0, Shape{c.sk}}});
  return m;
}

// A bool mask (~70% visible, the first query row fully masked) or a bias in [-2, 2] with a
// -inf every 5th entry and the first query row all -inf (fully masked).
Tensor mask_tensor(const std::string& kind, DType dt, const Shape& s, uint64_t seed) {
  const int64_t sk = s[s.rank() - 1];
  const bool has_rows = s.rank() >= 2 && s[s.rank() - 2] > 1;
  if (kind == "bool") {
    Tensor m = random_tensor(DType::f32, s, seed, 0, 1);
    Tensor out(DType::bool_, s);
    for (int64_t i = 0; i < m.numel(); ++i)
      out.set_i64(i, has_rows && i < sk ? 0 : m.get_f64(i) < 0.7);
    return out;
  }
  Tensor m = random_tensor(dt, s, seed);
  for (int64_t i = 0; i < m.numel(); ++i)
    if (i % 5 == 3 || (has_rows && i < sk)) m.set_f64(i, -kInf);
  return m;
}

// Builds attention(q, k, v[, mask]) for `c`, runs it on the CPU and compares with the reference;
// with `thread_counts`, reruns it on each of them and expects the bits of the first run.
void expect_attention_matches(const Config& c, DType dt, const MaskCase& mc, uint64_t seed,
                              std::optional<double> scale = std::nullopt,
                              const TensorMap& overrides = {},
                              const std::vector<int>& thread_counts = {}) {
  SCOPED_TRACE(c.to_string() + " " + std::string(dtype_name(dt)) + " mask " + mc.kind +
               (mc.window ? " w" + std::to_string(mc.window) : "") +
               (mc.tensor ? " " + mc.tensor->to_string() : ""));
  Graph g("attention");
  Value q = g.input("q", dt, Shape{c.b, c.hq, c.sq, c.d});
  Value k = g.input("k", dt, Shape{c.b, c.hkv, c.sk, c.d});
  Value v = g.input("v", dt, Shape{c.b, c.hkv, c.sk, c.dv});
  TensorMap feeds{{"q", random_tensor(dt, Shape{c.b, c.hq, c.sq, c.d}, seed)},
                  {"k", random_tensor(dt, Shape{c.b, c.hkv, c.sk, c.d}, seed + 1)},
                  {"v", random_tensor(dt, Shape{c.b, c.hkv, c.sk, c.dv}, seed + 2)}};
  std::optional<Value> mask;
  if (mc.kind == "causal_lengths") {
    // KV-cache rows of different lengths: empty, shorter than Sq, partial, full and past the
    // end (clamped), cycling over the batch.
    mask = g.input("mask", DType::i32, *mc.tensor);
    Tensor lengths(DType::i32, *mc.tensor);
    const int64_t picks[] = {c.sk / 2 + c.sq, 0, c.sk, c.sq - 1, c.sk + c.sq + 3};
    for (int64_t b = 0; b < c.b; ++b) lengths.set_i64(b, picks[(b + seed) % 5]);
    feeds["mask"] = lengths;
  } else if (mc.tensor) {
    DType mt = mc.kind == "bool" ? DType::bool_ : dt;
    mask = g.input("mask", mt, *mc.tensor);
    feeds["mask"] = mask_tensor(mc.kind, dt, *mc.tensor, seed + 3);
  }
  for (const auto& [name, t] : overrides) feeds[name] = t;
  g.set_outputs({g.attention(q, k, v, options(mc.kind, scale, mc.window), mask)});
  Session session;
  auto exe = session.compile(g);
  KernelCounts counts = exe->kernels().count(OpKind::Attention);
  // An attention with an empty result is folded away by the pipeline.
  EXPECT_EQ(counts.native, c.b == 0 ? 0 : 1) << exe->kernel_report();
  EXPECT_EQ(counts.fallback, 0) << exe->kernel_report();
  Tensor got = exe->run(feeds)[0];
  Tensor want = evaluate(g, feeds)[0];
  Tol t = tol(dt);
  EXPECT_TRUE(all_close(got, want, t.rtol, t.atol));
  const int threads = num_threads();
  for (int n : thread_counts) {
    set_num_threads(n);
    Tensor again = exe->run(feeds)[0];
    EXPECT_EQ(std::memcmp(again.data(), got.data(), static_cast<size_t>(got.nbytes())), 0)
        << n << " threads";
  }
  set_num_threads(threads);
}

TEST(CpuAttentionKernel, MatchesReferenceForEveryMaskAndDtype) {
  const std::vector<Config> configs = {
      {1, 2, 2, 7, 7, 8, 8},     {2, 4, 2, 1, 129, 16, 8},  // decode with GQA
      {1, 2, 1, 64, 64, 32, 32}, {1, 1, 1, 129, 129, 16, 24},
      {1, 2, 2, 5, 9, 8, 8},     {1, 1, 1, 9, 5, 8, 12},    // Sq < Sk, Sq > Sk
      {1, 1, 1, 1, 1, 4, 4},     {0, 2, 2, 4, 4, 8, 8},     // one key; empty batch
      {1, 6, 2, 17, 70, 5, 3},   {1, 2, 2, 3, 0, 8, 8},     // odd D; no keys
      {3, 6, 2, 1, 150, 64, 64}, {3, 4, 1, 2, 67, 40, 72},  // KV-cache decode shapes
  };
  uint64_t seed = 1;
  for (DType dt : kFloatTypes)
    for (const Config& c : configs)
      for (const MaskCase& mc : mask_cases(c)) {
        expect_attention_matches(c, dt, mc, seed);
        seed += 4;
      }
}

TEST(CpuAttentionKernel, ExplicitScale) {
  for (DType dt : kFloatTypes)
    for (double scale : {0.3, 2.5, 0.0})
      expect_attention_matches({1, 2, 2, 33, 40, 16, 16}, dt, {"causal"}, 11, scale);
}

TEST(CpuAttentionKernel, LongSequences) {
  for (DType dt : {DType::f32, DType::bf16})
    for (const MaskCase& mc :
         {MaskCase{"none"}, MaskCase{"causal"}, MaskCase{"sliding_window", 100},
          MaskCase{"bias", 0, Shape{1, 1, 1, 1024}}})
      expect_attention_matches({1, 1, 1, 1024, 1024, 8, 8}, dt, mc, 21);
  expect_attention_matches({1, 2, 1, 300, 1024, 8, 8}, DType::f32, {"causal"}, 25);
}

// The direct path (f32 / f16 / bf16, no positional mask, at most 1024 keys: encoders) and its
// register tiles: head dims 32-128 (whole vectors and not), 1 to 200 keys, batch > 1 with GQA,
// bool and bias masks with fully masked rows, and an encoder's [B, 1, 1, Sk] padding mask whose
// trailing masked keys the kernel skips (batch row 1 masked entirely: outputs 0). On every
// Highway target this CPU runs (forced in turn through Highway's target mock), within the f32
// tolerance of tol() against the reference evaluator, and bitwise the same on 1, 2 and 3 threads.
TEST(CpuAttentionKernel, DirectPathShapesEveryTargetAndThreadCount) {
  const std::vector<Config> configs = {
      {2, 4, 2, 70, 128, 32, 32}, {1, 2, 1, 9, 200, 64, 64},  {2, 2, 2, 5, 7, 80, 80},
      {1, 1, 1, 65, 1, 128, 128}, {2, 2, 1, 3, 130, 128, 80},
  };
  const int64_t native = hwy::SupportedTargets() & HWY_AVX3 ? HWY_AVX3 : HWY_AVX2;
  testing::for_each_hwy_target([&](int64_t target) {
    uint64_t seed = 301;
    for (const Config& c : configs) {
      const Shape keys{c.b, 1, 1, c.sk};
      Tensor padding(DType::bool_, keys);
      for (int64_t i = 0; i < padding.numel(); ++i)
        padding.set_i64(i, i / c.sk == 0 && i % c.sk < std::max<int64_t>(c.sk - 3, 1));
      const std::vector<std::pair<MaskCase, TensorMap>> masks = {
          {{"none"}, {}},
          {{"bool", 0, Shape{c.b, c.hq, c.sq, c.sk}}, {}},
          {{"bias", 0, Shape{c.sq, c.sk}}, {}},
          {{"bool", 0, keys}, {{"mask", padding}}}};
      // bf16 (widened once, like f16) and the row masks on the native target only.
      for (DType dt : {DType::f32, DType::bf16})
        for (size_t m = 0; m < masks.size(); ++m) {
          if (target != native && (dt != DType::f32 || m == 1 || m == 2)) continue;
          expect_attention_matches(c, dt, masks[m].first, seed, std::nullopt, masks[m].second,
                                   {1, 2, 3});
          seed += 4;
        }
    }
  });
}

// docs/ir.md's attention in double with masked keys skipped outright, so that inf / NaN values
// at masked keys cannot reach the output (the reference evaluator weights them by 0, and
// 0 * inf is NaN). q, k, v: [B, H, S, D] with Hq == Hkv; key_visible(i, j) says whether query i
// sees key j (the same in every batch and head).
template <class Visible>
Tensor attention_skipping_masked(const Tensor& q, const Tensor& k, const Tensor& v,
                                 const Visible& key_visible) {
  const int64_t nb = q.shape()[0], nh = q.shape()[1], sq = q.shape()[2], d = q.shape()[3];
  const int64_t sk = k.shape()[2], dv = v.shape()[3];
  Tensor out(q.dtype(), Shape{nb, nh, sq, dv});
  std::vector<double> s(static_cast<size_t>(sk));
  std::vector<bool> vis(static_cast<size_t>(sk));
  for (int64_t bh = 0; bh < nb * nh; ++bh)
    for (int64_t i = 0; i < sq; ++i) {
      double m = -kInf, den = 0;
      for (int64_t j = 0; j < sk; ++j) {
        double dot = 0;
        for (int64_t c = 0; c < d; ++c)
          dot += q.get_f64((bh * sq + i) * d + c) * k.get_f64((bh * sk + j) * d + c);
        auto ju = static_cast<size_t>(j);
        s[ju] = dot / std::sqrt(static_cast<double>(d));
        vis[ju] = key_visible(i, j);
        if (vis[ju]) m = std::max(m, s[ju]);
      }
      std::vector<double> p(static_cast<size_t>(sk), 0.0);
      for (size_t j = 0; j < p.size(); ++j)
        if (vis[j]) den += (p[j] = std::exp(s[j] - m));
      for (int64_t e = 0; e < dv; ++e) {
        double acc = 0;
        for (int64_t j = 0; j < sk; ++j)
          if (vis[static_cast<size_t>(j)])
            acc += p[static_cast<size_t>(j)] / den * v.get_f64((bh * sk + j) * dv + e);
        out.set_f64((bh * sq + i) * dv + e, acc);
      }
    }
  return out;
}

// Masked keys contribute exactly 0 (docs/ir.md) even where v holds inf or NaN: the last 5 keys
// are padding, masked by BERT's [B,1,1,S] bool mask or a -inf bias, and hold inf / NaN values.
// Sk 40 takes the direct f32 path, Sk 1030 (> 1024) the blocked one. Causal masks the padding
// keys for all but the last rows, which see NaN and must be NaN.
TEST(CpuAttentionKernel, MaskedKeysContributeExactlyZero) {
  for (DType dt : {DType::f32, DType::f64})
    for (int64_t sk : {int64_t{40}, int64_t{1030}}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " Sk " + std::to_string(sk));
      const int64_t nb = 2, nh = 3, sq = 70, d = 16, dv = 8, pad = 5;
      const Shape key_mask{nb, 1, 1, sk};
      Tensor q = random_tensor(dt, Shape{nb, nh, sq, d}, 51);
      Tensor k = random_tensor(dt, Shape{nb, nh, sk, d}, 52);
      Tensor v = random_tensor(dt, Shape{nb, nh, sk, dv}, 53);
      for (int64_t bh = 0; bh < nb * nh; ++bh)
        for (int64_t j = sk - pad; j < sk; ++j)
          for (int64_t e = 0; e < dv; ++e) v.set_f64((bh * sk + j) * dv + e, j % 2 ? kNaN : kInf);
      Tensor keep(DType::bool_, key_mask), bias = Tensor::full(dt, key_mask, 0.0);
      for (int64_t b = 0; b < nb; ++b)
        for (int64_t j = sk - pad; j < sk; ++j) bias.set_f64(b * sk + j, -kInf);
      for (int64_t i = 0; i < keep.numel(); ++i) keep.set_i64(i, i % sk < sk - pad);
      const Tol t = tol(dt);
      for (const char* kind : {"bool", "bias", "causal"}) {
        SCOPED_TRACE(kind);
        const bool causal = std::string(kind) == "causal";
        Graph g("attention");
        std::vector<Value> in;
        for (const auto& [name, t] : {std::pair{"q", &q}, {"k", &k}, {"v", &v}})
          in.push_back(g.input(name, dt, t->shape()));
        std::optional<Value> mask;
        TensorMap feeds{{"q", q}, {"k", k}, {"v", v}};
        if (!causal) {
          mask = g.input("mask", std::string(kind) == "bool" ? DType::bool_ : dt, key_mask);
          feeds["mask"] = std::string(kind) == "bool" ? keep : bias;
        }
        g.set_outputs({g.attention(in[0], in[1], in[2], options(kind), mask)});
        Tensor got = Session().compile(g)->run(feeds)[0];
        auto visible = [&](int64_t i, int64_t j) {
          return causal ? j <= i + sk - sq : j < sk - pad;
        };
        Tensor want = attention_skipping_masked(q, k, v, visible);
        EXPECT_TRUE(all_close(got, want, t.rtol, t.atol));
        if (!causal) {  // no row sees a padding key: every output is finite
          for (int64_t i = 0; i < got.numel(); ++i) {
            ASSERT_TRUE(std::isfinite(got.get_f64(i))) << "element " << i;
          }
        }
      }
    }
}

// A NaN score poisons its row unless masked; +inf scores give NaN; a row whose visible scores
// are all -inf is NaN, a fully masked row is 0.
TEST(CpuAttentionKernel, SpecialValues) {
  const Config c{1, 2, 2, 8, 8, 4, 4};
  for (DType dt : kFloatTypes) {
    Tensor q = random_tensor(dt, Shape{1, 2, 8, 4}, 31);
    Tensor k = random_tensor(dt, Shape{1, 2, 8, 4}, 32);
    k.set_f64(5 * 4 + 1, kNaN);        // head 0, key 5: NaN for every row; causal masks it
    q.set_f64((8 + 2) * 4 + 0, kInf);  // head 1, row 2: +-inf scores
    for (int64_t j = 0; j < 8; ++j)    // head 1: key component 0 negative...
      k.set_f64((8 + j) * 4 + 0, -0.5 - 0.1 * static_cast<double>(j));
    // ... so row 2 of head 1 scores -inf against every key: NaN unless fully masked.
    TensorMap feeds{{"q", q}, {"k", k}};
    for (const MaskCase& mc :
         {MaskCase{"none"}, MaskCase{"causal"}, MaskCase{"sliding_window", 2},
          MaskCase{"bool", 0, Shape{1, 2, 8, 8}}, MaskCase{"bias", 0, Shape{1, 2, 8, 8}}})
      expect_attention_matches(c, dt, mc, 33, std::nullopt, feeds);
    // One query row (the decode path for f32 and f16): rows 2 and 5 of the same q and k.
    for (int64_t row : {2, 5}) {
      Tensor q1(dt, Shape{1, 2, 1, 4});
      for (int64_t h = 0; h < 2; ++h)
        for (int64_t e = 0; e < 4; ++e) q1.set_f64(h * 4 + e, q.get_f64((h * 8 + row) * 4 + e));
      for (const MaskCase& mc : {MaskCase{"none"}, MaskCase{"causal"}})
        expect_attention_matches({1, 2, 2, 1, 8, 4, 4}, dt, mc, 37, std::nullopt,
                                 {{"q", q1}, {"k", k}});
    }
  }
}

// The kernel needs no [Sq, Sk] buffer: the arena holds the output only, and the result of a few
// rows matches a direct double computation.
TEST(CpuAttentionKernel, LongSequenceRunsInBoundedMemory) {
  const int64_t s = 4096, d = 16;
  Graph g("attention_4k");
  Value q = g.input("q", DType::f32, Shape{1, 1, s, d});
  Value k = g.input("k", DType::f32, Shape{1, 1, s, d});
  Value v = g.input("v", DType::f32, Shape{1, 1, s, d});
  g.set_outputs({g.attention(q, k, v, options("causal"))});
  Session session;
  auto exe = session.compile(g);
  EXPECT_EQ(exe->kernels().count(OpKind::Attention).native, 1);
  EXPECT_LE(exe->memory_plan().arena_bytes, s * d * 4 + 4096);
  EXPECT_LT(exe->memory_plan().arena_bytes * 64, s * s * 4);
  TensorMap feeds{{"q", random_tensor(DType::f32, Shape{1, 1, s, d}, 41)},
                  {"k", random_tensor(DType::f32, Shape{1, 1, s, d}, 42)},
                  {"v", random_tensor(DType::f32, Shape{1, 1, s, d}, 43)}};
  Tensor out = exe->run(feeds)[0];
  const Tensor &qt = feeds.at("q"), &kt = feeds.at("k"), &vt = feeds.at("v");
  for (int64_t i : {int64_t{0}, int64_t{1}, int64_t{2047}, s - 1}) {
    std::vector<double> p(static_cast<size_t>(i + 1));
    double m = -kInf, den = 0;
    for (int64_t j = 0; j <= i; ++j) {
      double dot = 0;
      for (int64_t c = 0; c < d; ++c) dot += qt.get_f64(i * d + c) * kt.get_f64(j * d + c);
      p[static_cast<size_t>(j)] = dot / std::sqrt(static_cast<double>(d));
      m = std::max(m, p[static_cast<size_t>(j)]);
    }
    for (double& x : p) den += (x = std::exp(x - m));
    for (int64_t e = 0; e < d; ++e) {
      double want = 0;
      for (int64_t j = 0; j <= i; ++j)
        want += p[static_cast<size_t>(j)] / den * vt.get_f64(j * d + e);
      EXPECT_NEAR(out.get_f64(i * d + e), want, 2e-5) << "row " << i << " dim " << e;
    }
  }
}

}  // namespace
}  // namespace rlx
