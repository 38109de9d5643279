// LlamaModel's KV cache (append, generate) against its own full-sequence forward (logits(),
// checked against the reference evaluator in llama_test.cc): every decode step's logits equal
// the full forward's at that position, rows of one batch at different positions equal each row
// run alone, a full cache is an error, and greedy generation on SmolLM2 equals the argmax of
// the full forward token by token.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/scoped_env.h"
#include "common/test_util.h"
#include "common/tiny_llama.h"
#include "rlx/models/bpe_tokenizer.h"
#include "rlx/models/llama.h"

namespace rlx::models {
namespace {

using rlx::testing::error_of;

std::vector<int32_t> random_ids(size_t n, int64_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> ids(n);
  for (int32_t& id : ids) id = static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab));
  return ids;
}

// Largest |a[i] - b[i]| over `n` floats.
double max_diff(const float* a, const float* b, int64_t n) {
  double worst = 0;
  for (int64_t i = 0; i < n; ++i) worst = std::max(worst, std::fabs(double(a[i]) - double(b[i])));
  return worst;
}

int32_t argmax(const float* row, int64_t n) {
  return static_cast<int32_t>(std::max_element(row, row + n) - row);
}

// Prefill `split` tokens of `ids`, then decode the rest one by one: each step's logits (and
// its greedy token) against the full-sequence forward at that position. Returns the largest
// |difference| seen.
double check_steps_match_full_forward(LlamaModel& m, const std::vector<int32_t>& ids, size_t split,
                                      double bound) {
  const int64_t V = m.config().vocab_size;
  const auto n = static_cast<int64_t>(ids.size());
  Tensor full = m.logits(ids, 1, n);
  m.reset(1);
  double worst = 0;
  for (size_t t = split - 1; t < ids.size(); ++t) {
    LlamaStep step = t + 1 == split ? m.append(std::span(ids).first(split), 1,
                                               static_cast<int64_t>(split), {}, true)
                                    : m.append(std::span(ids).subspan(t, 1), 1, 1, {}, true);
    EXPECT_EQ(m.positions(1)[0], static_cast<int64_t>(t + 1));
    const float* want = full.data_as<float>() + static_cast<int64_t>(t) * V;
    double d = max_diff(step.logits.data_as<float>(), want, V);
    EXPECT_LE(d, bound) << "position " << t;
    EXPECT_EQ(step.next[0], argmax(step.logits.data_as<float>(), V)) << "position " << t;
    worst = std::max(worst, d);
  }
  return worst;
}

TEST(LlamaCache, TinyDecodeStepsEqualFullForward) {
  LlamaOptions o;
  o.ctx = 32;
  LlamaModel m = LlamaModel::load(rlx::testing::write(rlx::testing::tiny_file(), "cache.gguf"), o);
  EXPECT_EQ(m.ctx(), 32);
  // Prefill 5 (padded to the bucket of 16), then 9 decode steps; another split: 1 then 13.
  const std::vector<int32_t> ids = random_ids(14, rlx::testing::kVocab, 3);
  double worst = check_steps_match_full_forward(m, ids, 5, 2e-5);
  worst = std::max(worst, check_steps_match_full_forward(m, ids, 1, 2e-5));
  std::printf("tiny llama: cached steps vs full forward: max |dlogit| %.3g\n", worst);
}

// Sliding-window attention (llama.attention.sliding_window 4; the full forward against numpy in
// python/tests/test_llama.py): the cached steps (a prefill shorter and one longer than the
// window, then decode steps far past it) equal the windowed full forward, whose first 4
// positions equal the unwindowed model's and whose later ones do not.
TEST(LlamaCache, SlidingWindowStepsEqualFullForward) {
  rlx::testing::TinyFile f = rlx::testing::tiny_file();
  f.metadata.emplace_back("llama.attention.sliding_window", uint32_t{4});
  LlamaOptions o;
  o.ctx = 32;
  LlamaModel m = LlamaModel::load(rlx::testing::write(f, "swa.gguf"), o);
  EXPECT_EQ(m.config().sliding_window, 4);
  LlamaModel plain = LlamaModel::load(rlx::testing::write(rlx::testing::tiny_file(), "noswa.gguf"));
  const int64_t V = rlx::testing::kVocab;
  const std::vector<int32_t> ids = random_ids(20, V, 21);
  Tensor windowed = m.logits(ids, 1, 20), full = plain.logits(ids, 1, 20);
  EXPECT_LE(max_diff(windowed.data_as<float>(), full.data_as<float>(), 4 * V), 1e-5);
  for (int64_t t = 4; t < 20; ++t)
    EXPECT_GT(max_diff(windowed.data_as<float>() + t * V, full.data_as<float>() + t * V, V), 1e-3)
        << "position " << t;
  double worst = check_steps_match_full_forward(m, ids, 3, 2e-5);
  worst = std::max(worst, check_steps_match_full_forward(m, ids, 11, 2e-5));
  std::printf("tiny llama, window 4: cached steps vs full forward: max |dlogit| %.3g\n", worst);
}

// Two rows at different positions (prompts of 10 and 13 tokens in one prefill, row 0 padded,
// then 4 decode steps each) give the logits of each row run alone, bit for bit: rows never mix
// (per-row cache writes, RoPE, lengths), and every kernel computes a row the same way at
// batch 1 and 2. The row counts keep each quant_matmul on one path in both runs: the prefills
// (10, 13 alone, 2 x 13 together) on the int8 GEMM, above kGemvRows (8) rows, the decode steps
// (1, 2 rows) on the GEMV tiles; the two paths sum in different orders (~2e-7 here). Exact
// lengths (bucket 1) keep the padded prefill at 2 x 13.
// With the f16 cache too (its attention kernels compute each row as at batch 1 as well).
class LlamaCacheTypes : public ::testing::TestWithParam<std::string> {};

TEST_P(LlamaCacheTypes, BatchedRowsEqualEachRowAlone) {
  LlamaOptions o;
  o.bucket = 1;
  o.cache_type = GetParam();
  LlamaModel m = LlamaModel::load(rlx::testing::write(rlx::testing::tiny_file(), "batch.gguf"), o);
  const int64_t V = rlx::testing::kVocab;
  const std::vector<int32_t> a = random_ids(10, V, 11), b = random_ids(13, V, 12);
  const std::vector<int32_t> more_a = random_ids(4, V, 13), more_b = random_ids(4, V, 14);

  auto alone = [&](const std::vector<int32_t>& prompt, const std::vector<int32_t>& more) {
    m.reset(1);
    std::vector<Tensor> out{
        m.append(prompt, 1, static_cast<int64_t>(prompt.size()), {}, true).logits};
    for (int32_t id : more)
      out.push_back(m.append(std::vector<int32_t>{id}, 1, 1, {}, true).logits);
    return out;
  };
  std::vector<Tensor> ra = alone(a, more_a), rb = alone(b, more_b);

  std::vector<int32_t> both(2 * 13, 0);
  std::copy(a.begin(), a.end(), both.begin());
  std::copy(b.begin(), b.end(), both.begin() + 13);
  std::vector<Tensor> batched{m.append(both, 2, 13, std::vector<int64_t>{10, 13}, true).logits};
  EXPECT_EQ(m.positions(2), (std::vector<int64_t>{10, 13}));
  for (size_t s = 0; s < more_a.size(); ++s)
    batched.push_back(m.append(std::vector<int32_t>{more_a[s], more_b[s]}, 2, 1, {}, true).logits);
  EXPECT_EQ(m.positions(2), (std::vector<int64_t>{14, 17}));
  for (size_t s = 0; s < batched.size(); ++s) {
    const float* got = batched[s].data_as<float>();
    EXPECT_EQ(max_diff(got, ra[s].data_as<float>(), V), 0.0) << "row 0, step " << s;
    EXPECT_EQ(max_diff(got + V, rb[s].data_as<float>(), V), 0.0) << "row 1, step " << s;
  }
}

INSTANTIATE_TEST_SUITE_P(CacheType, LlamaCacheTypes, ::testing::Values("f32", "f16"));

// cache_type "f16" (llama.cpp's default KV cache): the cached steps (prefill, then decode steps
// on the f16 decode kernel) equal the full forward, which rounds the same operands (K, V, q and
// the attention output to f16; only summation order differs); with exact activations (no
// int8 rounding to amplify them) both stay close to the f32 cache's logits (the f16 roundings,
// ~1e-3 of the logit scale) without equalling them. The f16
// path against an f64 numpy reference: python/tests/test_llama.py::test_f16_cache_*.
TEST(LlamaCache, F16CacheStepsEqualFullForwardAndNearF32) {
  LlamaOptions o;
  o.ctx = 32;
  o.cache_type = "f16";
  o.act_quant = "none";
  LlamaModel m = LlamaModel::load(rlx::testing::write(rlx::testing::tiny_file(), "kv16.gguf"), o);
  EXPECT_EQ(m.layout().cache_type, "f16");
  const std::vector<int32_t> ids = random_ids(14, rlx::testing::kVocab, 3);
  double worst = check_steps_match_full_forward(m, ids, 5, 5e-4);
  worst = std::max(worst, check_steps_match_full_forward(m, ids, 1, 5e-4));
  o.cache_type = "f32";
  LlamaModel exact =
      LlamaModel::load(rlx::testing::write(rlx::testing::tiny_file(), "kv32.gguf"), o);
  Tensor half = m.logits(ids, 1, 14), full = exact.logits(ids, 1, 14);
  const int64_t n = half.numel();
  double scale = 0;
  for (int64_t i = 0; i < n; ++i)
    scale = std::max(scale, std::fabs(double(full.data_as<float>()[i])));
  const double d = max_diff(half.data_as<float>(), full.data_as<float>(), n);
  std::printf("tiny llama, f16 cache: cached steps vs full forward %.3g, f16 vs f32 %.3g of %.3g\n",
              worst, d, scale);
  EXPECT_GT(d, 1e-5 * scale);  // the f16 roundings did happen
  EXPECT_LT(d, 1e-2 * scale);
}

// A cache_type other than f32 / f16 is an error at load and in the graph builders.
TEST(LlamaCache, BadCacheTypeIsAnError) {
  LlamaOptions o;
  o.cache_type = "q8_0";
  EXPECT_EQ(error_of([&] {
              LlamaModel::load(rlx::testing::write(rlx::testing::tiny_file(), "q8kv.gguf"), o);
            }),
            "LlamaModel: cache_type must be \"f32\" or \"f16\", got \"q8_0\"");
  LlamaModel m = LlamaModel::load(rlx::testing::write(rlx::testing::tiny_file(), "kv.gguf"));
  LlamaWeightLayout layout = m.layout();
  layout.cache_type = "bf16";
  EXPECT_EQ(error_of([&] { build_llama_step(m.config(), layout, LlamaStepOptions{}); }),
            "build_llama_step: cache_type must be \"f32\" or \"f16\", got \"bf16\"");
  EXPECT_EQ(error_of([&] { build_llama_decoder(m.config(), layout, 1, 4); }),
            "build_llama_decoder: cache_type must be \"f32\" or \"f16\", got \"bf16\"");
}

TEST(LlamaCache, FullCacheIsAnError) {
  LlamaOptions o;
  o.ctx = 8;
  LlamaModel m = LlamaModel::load(rlx::testing::write(rlx::testing::tiny_file(), "full.gguf"), o);
  const std::vector<int32_t> ids = random_ids(6, rlx::testing::kVocab, 5);
  m.append(ids, 1, 6);
  EXPECT_EQ(error_of([&] {
              m.append(std::vector<int32_t>{1, 2, 3}, 1, 3);
            }),
            "LlamaModel: the KV cache is full: row 0 holds 6 of 8 positions, 3 more do not fit "
            "(LlamaOptions::ctx, --ctx)");
  EXPECT_EQ(m.positions(1)[0], 6);             // nothing written
  m.append(std::vector<int32_t>{1, 2}, 1, 2);  // exactly fills it (no padding past the end)
  EXPECT_EQ(m.positions(1)[0], 8);
  EXPECT_NE(error_of([&] { m.append(std::vector<int32_t>{1}, 1, 1); }).find("row 0 holds 8 of 8"),
            std::string::npos);
  EXPECT_EQ(error_of([&] {
              m.append(std::vector<int32_t>{1, 99}, 1, 2);
            }).substr(0, 64),
            "LlamaModel::append: row 0 position 1: token id 99 is outside the");
  LlamaOptions big;
  big.ctx = 65;
  EXPECT_NE(error_of([&] {
              LlamaModel::load(rlx::testing::write(rlx::testing::tiny_file(), "big.gguf"), big);
            }).find("ctx 65 is outside [1, context_length 64]"),
            std::string::npos);
}

// A batch-3 cache stepped as a server steps its slots: one new sequence prefilled at a time
// through a subset step (rows {1}, then {2}: a one-row executable writing and reading only that
// row of the batch-3 cache), then decode steps over all three rows with row 0 idle (count 0).
// Every row's logits equal its sequence run alone in a batch-1 cache, bit for bit (the subset
// prefill has the shape of the batch-1 one; decode rows stay below 8, quant_matmul's GEMV
// tiles, which compute each row as at batch 1).
TEST(LlamaCache, IdleRowsAndSubsetStepsEqualEachRowAlone) {
  LlamaOptions o;
  o.ctx = 48;
  LlamaModel m = LlamaModel::load(rlx::testing::write(rlx::testing::tiny_file(), "rows.gguf"), o);
  const int64_t V = rlx::testing::kVocab;
  const std::vector<int32_t> a = random_ids(5, V, 21), b = random_ids(9, V, 22);
  constexpr int kDecode = 3;
  // Greedy steps of `prompt` alone: each step's logits and chosen token.
  auto alone = [&](const std::vector<int32_t>& prompt, std::vector<int32_t>& tokens) {
    m.reset(1);
    LlamaStep s = m.append(prompt, 1, static_cast<int64_t>(prompt.size()), {}, true);
    std::vector<Tensor> out{s.logits};
    tokens = {s.next[0]};
    for (int i = 0; i < kDecode; ++i) {
      s = m.append(std::vector<int32_t>{tokens.back()}, 1, 1, {}, true);
      out.push_back(s.logits);
      tokens.push_back(s.next[0]);
    }
    return out;
  };
  std::vector<int32_t> ta, tb;
  const std::vector<Tensor> la = alone(a, ta), lb = alone(b, tb);

  AppendOptions prefill;
  prefill.cache_batch = 3;
  prefill.want_logits = true;
  prefill.rows = {1};
  LlamaStep s = m.append(a, 1, static_cast<int64_t>(a.size()), prefill);
  EXPECT_EQ(s.next[0], ta[0]);
  EXPECT_EQ(max_diff(s.logits.data_as<float>(), la[0].data_as<float>(), V), 0.0);
  prefill.rows = {2};
  s = m.append(b, 1, static_cast<int64_t>(b.size()), prefill);
  EXPECT_EQ(s.next[0], tb[0]);
  EXPECT_EQ(max_diff(s.logits.data_as<float>(), lb[0].data_as<float>(), V), 0.0);
  EXPECT_EQ(m.positions(3), (std::vector<int64_t>{0, 5, 9}));

  AppendOptions decode;
  decode.counts = {0, 1, 1};
  decode.want_logits = true;
  for (int i = 0; i < kDecode; ++i) {
    s = m.append(std::vector<int32_t>{7, ta[size_t(i)], tb[size_t(i)]}, 3, 1, decode);
    EXPECT_EQ(s.next, (std::vector<int32_t>{-1, ta[size_t(i) + 1], tb[size_t(i) + 1]}));
    const float* got = s.logits.data_as<float>();
    EXPECT_EQ(max_diff(got + V, la[size_t(i) + 1].data_as<float>(), V), 0.0) << "step " << i;
    EXPECT_EQ(max_diff(got + 2 * V, lb[size_t(i) + 1].data_as<float>(), V), 0.0) << "step " << i;
  }
  EXPECT_EQ(m.positions(3), (std::vector<int64_t>{0, 5 + kDecode, 9 + kDecode}));
  m.reset(3, 1);
  EXPECT_EQ(m.positions(3), (std::vector<int64_t>{0, 0, 9 + kDecode}));

  // Misuse is an error naming what is wrong, and writes nothing.
  AppendOptions bad;
  bad.cache_batch = 3;
  bad.rows = {2, 1};
  EXPECT_NE(error_of([&] {
              m.append(std::vector<int32_t>{1, 2}, 2, 1, bad);
            }).find("rows must be strictly ascending in [0, cache_batch 3), got 1 at index 1"),
            std::string::npos);
  bad.rows = {0, 3};
  EXPECT_NE(error_of([&] {
              m.append(std::vector<int32_t>{1, 2}, 2, 1, bad);
            }).find("got 3"),
            std::string::npos);
  AppendOptions idle;
  idle.counts = {0, 0, 0};
  EXPECT_NE(error_of([&] {
              m.append(std::vector<int32_t>{1, 2, 3}, 3, 1, idle);
            }).find("every row is idle"),
            std::string::npos);
  // Row 2 holds 12 of 48: a 40-token prefill on row 0 would pad over its end.
  AppendOptions wide;
  wide.counts = {40, 0, 0};
  EXPECT_NE(
      error_of([&] { m.append(std::vector<int32_t>(3 * 40, 1), 3, 40, wide); })
          .find("row 2 holds 12 of 48 positions: this step's 40 positions (its longest row's new "
                "tokens) do not fit behind it"),
      std::string::npos);
  SamplerState wrong(2, 4);
  AppendOptions sampled;
  sampled.counts = {1, 1, 1};
  sampled.sampler = &wrong;
  EXPECT_NE(error_of([&] {
              m.append(std::vector<int32_t>{1, 2, 3}, 3, 1, sampled);
            }).find("the sampler state has 2 rows, expected the cache's 3"),
            std::string::npos);
  EXPECT_EQ(m.positions(3), (std::vector<int64_t>{0, 0, 9 + kDecode}));
}

GenerateOptions sampled(float temperature, uint32_t seed, int64_t n = 12) {
  GenerateOptions o;
  o.max_tokens = n;
  o.stop_at_eos = false;
  o.reuse_prefix = false;
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.seed = seed;
  o.sampling = p;
  return o;
}

// Sampling inside the step executables: a seed reproduces its tokens and another seed gives
// others; top_k 1 and temperature 0 are greedy; a presence penalty that outweighs every logit
// keeps each token from coming back (the penalties see the prompt and the output).
TEST(LlamaSampling, SeedsSettingsAndPenaltiesReachTheSteps) {
  LlamaOptions lo;
  lo.ctx = 48;
  LlamaModel m =
      LlamaModel::load(rlx::testing::write(rlx::testing::tiny_file(), "sample.gguf"), lo);
  const std::vector<int32_t> prompt = random_ids(7, rlx::testing::kVocab, 31);
  GenerateOptions greedy = sampled(0, 0);
  greedy.sampling.reset();
  const std::vector<int32_t> g = m.generate(prompt, greedy).ids;
  const std::vector<int32_t> s1 = m.generate(prompt, sampled(1.5f, 1)).ids;
  EXPECT_EQ(m.generate(prompt, sampled(1.5f, 1)).ids, s1);
  const std::vector<int32_t> s2 = m.generate(prompt, sampled(1.5f, 2)).ids;
  EXPECT_NE(s1, s2);
  EXPECT_NE(s1, g);
  EXPECT_EQ(m.generate(prompt, sampled(0, 5)).ids, g);
  GenerateOptions top1 = sampled(1.5f, 3);
  top1.sampling->top_k = 1;
  EXPECT_EQ(m.generate(prompt, top1).ids, g);

  GenerateOptions fresh = sampled(0, 0, 20);
  fresh.sampling->presence_penalty = 1000;
  std::vector<int32_t> seen = prompt;
  const std::vector<int32_t> f = m.generate(prompt, fresh).ids;
  ASSERT_EQ(f.size(), 20u);
  for (int32_t id : f) {
    EXPECT_EQ(std::count(seen.begin(), seen.end(), id), 0) << "token " << id << " came back";
    seen.push_back(id);
  }
  EXPECT_EQ(m.stats().compiles, 4);  // greedy and sampling: one prefill and one decode each
}

// Each row of a batch samples with its own settings and seed: two rows prefilled one at a
// time and decoded together give what generate() gives for each alone.
TEST(LlamaSampling, RowsOfABatchSampleIndependently) {
  LlamaOptions lo;
  lo.ctx = 48;
  LlamaModel m = LlamaModel::load(rlx::testing::write(rlx::testing::tiny_file(), "rows2.gguf"), lo);
  const std::vector<int32_t> prompt = random_ids(6, rlx::testing::kVocab, 41);
  const GenerateOptions o0 = sampled(1.0f, 11, 8), o1 = sampled(2.0f, 12, 8);
  const std::vector<int32_t> want0 = m.generate(prompt, o0).ids, want1 = m.generate(prompt, o1).ids;
  SamplerState st(2, lo.sampler_history);
  st.reset(0, *o0.sampling, prompt);
  st.reset(1, *o1.sampling, prompt);
  AppendOptions step;
  step.cache_batch = 2;
  step.sampler = &st;
  std::vector<int32_t> got0, got1;
  for (int64_t row : {0, 1}) {
    step.rows = {row};
    (row == 0 ? got0 : got1).push_back(m.append(prompt, 1, 6, step).next[0]);
  }
  step.rows.clear();
  for (int i = 1; i < 8; ++i) {
    st.accept(0, got0.back());
    st.accept(1, got1.back());
    LlamaStep s = m.append(std::vector<int32_t>{got0.back(), got1.back()}, 2, 1, step);
    got0.push_back(s.next[0]);
    got1.push_back(s.next[1]);
  }
  EXPECT_EQ(got0, want0);
  EXPECT_EQ(got1, want1);
  EXPECT_NE(got0, got1);
}

// SmolLM2-135M Q4_1: cached steps against the full forward, greedy generation against the
// argmax of the full forward, streaming and stop strings.
class SmolLm2Cache : public ::testing::Test {
 protected:
  static LlamaModel& model() {
    static LlamaModel m = [] {
      LlamaOptions o;
      o.ctx = 256;
      return LlamaModel::load(default_llm_gguf_path(), o);
    }();
    return m;
  }
};

// With int8 activations (act_quant "int8", the default), a decode step (M = 1 rows: the GEMV
// tiles) and the full forward (M = S: the GEMM) round the activations to int8 on inputs that
// differ in the last float bits, which flips single roundings and drifts to ~1 logit over 30
// layers (the activation-quantization noise llama.cpp has too). With exact activations
// (act_quant "none") only f32 summation order differs: that is the tight check.
TEST(SmolLm2CacheExact, DecodeStepsEqualFullForward) {
  LlamaOptions o;
  o.ctx = 64;
  o.act_quant = "none";
  LlamaModel m = LlamaModel::load(default_llm_gguf_path(), o);
  const std::vector<int32_t> ids = m.tokenizer().encode("The quick brown fox jumps over");
  // Prefill all but the last three tokens, then three decode steps: every step dequantizes
  // all 30 layers' weights on this path, so more steps only cost time.
  double worst = check_steps_match_full_forward(m, ids, ids.size() - 3, 2e-3);
  std::printf(
      "SmolLM2 (exact matmul): %zu positions, cached steps vs full forward: max |dlogit| "
      "%.3g\n",
      ids.size(), worst);
}

TEST_F(SmolLm2Cache, GreedyGenerateEqualsFullForwardArgmax) {
  LlamaModel& m = model();
  const std::vector<int32_t> prompt = m.tokenizer().encode("The capital of France is");
  GenerateOptions o;
  o.max_tokens = 16;
  o.stop_at_eos = false;
  o.reuse_prefix = false;
  std::string streamed;
  o.on_text = [&](std::string_view piece) { streamed += piece; };
  GenerateResult r = m.generate(prompt, o);
  ASSERT_EQ(r.ids.size(), 16u);
  EXPECT_EQ(r.stats.prompt_tokens, static_cast<int64_t>(prompt.size()));
  EXPECT_EQ(r.stats.generated_tokens, 16);
  EXPECT_EQ(r.stats.stop_reason, "length");
  EXPECT_EQ(streamed, r.text);
  EXPECT_EQ(r.text, m.tokenizer().decode(r.ids));
  std::printf("SmolLM2 greedy: \"%s\"\n", r.text.c_str());

  // One causal forward over the prompt and the first 15 generated tokens: its logits at the
  // position before generated token i are what greedy decoding must have picked.
  std::vector<int32_t> seq = prompt;
  seq.insert(seq.end(), r.ids.begin(), r.ids.end() - 1);
  const int64_t V = m.config().vocab_size;
  Tensor full = m.logits(seq, 1, static_cast<int64_t>(seq.size()));
  // Both use quant_matmul's int8 kernels, whose activation rounding makes a decode step and
  // the full forward differ by up to ~1 logit (SmolLm2CacheExact above is the tight check), so
  // the greedy pick must be the full forward's top-1 wherever its top-2 margin exceeds twice
  // that, and within that noise of the top logit everywhere.
  constexpr float kInt8Noise = 1.25f;
  for (size_t i = 0; i < r.ids.size(); ++i) {
    const float* row = full.data_as<float>() + (static_cast<int64_t>(prompt.size() + i) - 1) * V;
    const int32_t top = argmax(row, V);
    float second = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < V; ++j)
      if (j != top) second = std::max(second, row[j]);
    if (row[top] - second > 2 * kInt8Noise) {
      EXPECT_EQ(r.ids[i], top) << "token " << i;
    }
    EXPECT_LE(row[top] - row[r.ids[i]], 2 * kInt8Noise) << "token " << i;
  }

  // The same prompt again reuses the cached prefix and recomputes only its last position (a
  // 1-row step: quant_matmul's GEMV tiles, whose sums round differently from the prefill's GEMM
  // tiles by a few ulp, so the text may part from r's at a near tie). Once more with a stop
  // string taken from that text: the same computation, cut before the stop, none of it streamed.
  o.reuse_prefix = true;
  GenerateResult again = m.generate(prompt, o);
  EXPECT_EQ(again.stats.reused_tokens, static_cast<int64_t>(prompt.size()) - 1);
  ASSERT_EQ(again.ids.size(), 16u);
  const std::string stop = again.text.substr(again.text.size() / 2, 4);
  o.stop = {stop};
  streamed.clear();
  GenerateResult cut = m.generate(prompt, o);
  EXPECT_EQ(cut.stats.reused_tokens, static_cast<int64_t>(prompt.size()) - 1);
  EXPECT_EQ(cut.stats.stop_reason, "stop");
  EXPECT_EQ(cut.text, again.text.substr(0, again.text.find(stop)));
  EXPECT_EQ(streamed, cut.text);
}

}  // namespace
}  // namespace rlx::models
