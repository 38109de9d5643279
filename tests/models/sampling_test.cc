// The token sampler graph (rlx/models/sampling.h) in C++: the CPU backend equals the reference
// evaluator on the same inputs, seeds and steps key the draws per row (not per batch position),
// greedy rows are the argmax, and errors name the input; SamplerState's window and feeds. The
// rules themselves are checked against a NumPy reimplementation in python/tests/test_sampling.py.
#include "rlx/models/sampling.h"

#include <gtest/gtest.h>

#include <random>

#include "common/test_util.h"
#include "rlx/runtime/session.h"

namespace rlx::models {
namespace {

using rlx::testing::error_of;

Graph sampler(int64_t batch, int64_t vocab, int64_t history, int64_t k = 16) {
  Graph g("sampler");
  Value logits = g.input("logits", DType::f32, Shape{batch, vocab});
  SamplerInputs in = add_sampler_inputs(g, batch, history);
  g.set_outputs({sample_tokens(g, logits, in, SamplerOptions{k})});
  return g;
}

Tensor random_logits(int64_t batch, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 2.0f);
  Tensor t(DType::f32, Shape{batch, vocab});
  for (int64_t i = 0; i < t.numel(); ++i) t.data_as<float>()[i] = d(rng);
  return t;
}

// Rows with different settings in one batch, a history with repeats and empty slots.
SamplerState varied_state(int64_t batch) {
  SamplerState s(batch, 6);
  for (int64_t r = 0; r < batch; ++r) {
    SamplingParams p;
    p.temperature = r % 4 == 0 ? 0.0f : 0.5f + 0.25f * static_cast<float>(r % 3);
    p.top_k = static_cast<int32_t>(r % 5) * 4;  // 0 = off
    p.top_p = r % 3 == 0 ? 1.0f : 0.9f;
    p.min_p = r % 2 == 0 ? 0.0f : 0.05f;
    p.repetition_penalty = 1.3f;
    p.presence_penalty = 0.5f;
    p.frequency_penalty = 0.25f;
    p.seed = static_cast<uint32_t>(r * 7919);
    std::vector<int32_t> prompt{3, 5, 3, static_cast<int32_t>(r), 3};
    s.reset(r, p, prompt);
  }
  return s;
}

TensorMap feeds_of(const SamplerState& s, const Tensor& logits) {
  TensorMap f = s.feeds();
  f["logits"] = logits;
  return f;
}

TEST(Sampling, CpuEqualsTheEvaluator) {
  const int64_t batch = 12, vocab = 50;
  Graph g = sampler(batch, vocab, 6);
  Session session;
  auto exe = session.compile(g);
  SamplerState s = varied_state(batch);
  for (uint32_t step = 0; step < 5; ++step) {
    TensorMap f = feeds_of(s, random_logits(batch, vocab, step));
    Tensor want = evaluate(g, f)[0];
    Tensor got = exe->run(f)[0];
    EXPECT_TRUE(got.bitwise_equal(want)) << got.to_string(12) << " vs " << want.to_string(12);
    for (int64_t r = 0; r < batch; ++r) {
      const int64_t id = got.get_i64(r);
      ASSERT_TRUE(id >= 0 && id < vocab);
      s.accept(r, static_cast<int32_t>(id));
    }
  }
}

TEST(Sampling, SeedsAndStepsKeyEachRowsDraws) {
  const int64_t batch = 8, vocab = 64;
  Graph g = sampler(batch, vocab, 1, 64);
  Session session;
  auto exe = session.compile(g);
  // Flat logits: the draw alone picks the token, uniformly over the 64.
  Tensor flat = Tensor::full(DType::f32, Shape{batch, vocab}, 0.0);
  SamplerState s(batch, 1);
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  for (int64_t r = 0; r < batch; ++r) s.reset(r, p);  // every row seed 0
  Tensor same = exe->run(feeds_of(s, flat))[0];
  for (int64_t r = 1; r < batch; ++r) EXPECT_EQ(same.get_i64(r), same.get_i64(0));
  EXPECT_TRUE(exe->run(feeds_of(s, flat))[0].bitwise_equal(same));  // deterministic
  // Per-row seeds: different streams; a row's token does not depend on its neighbours.
  SamplerState t(batch, 1);
  for (int64_t r = 0; r < batch; ++r) {
    p.seed = static_cast<uint32_t>(r);
    t.reset(r, p);
  }
  Tensor seeded = exe->run(feeds_of(t, flat))[0];
  EXPECT_EQ(seeded.get_i64(0), same.get_i64(0));
  int differ = 0;
  for (int64_t r = 1; r < batch; ++r) differ += seeded.get_i64(r) != same.get_i64(0);
  EXPECT_GE(differ, 5);  // 7 other streams over 64 tokens: a few collisions at most
  // A step advances the stream.
  t.accept(0, 1);
  EXPECT_NE(exe->run(feeds_of(t, flat))[0].get_i64(0), seeded.get_i64(0));
  // The compile seed keys every row too.
  CompileOptions o;
  o.seed = 12345;
  Tensor other = session.compile(g, o)->run(feeds_of(t, flat))[0];
  EXPECT_FALSE(other.bitwise_equal(exe->run(feeds_of(t, flat))[0]));
}

TEST(Sampling, GreedyRowsAreTheArgmax) {
  const int64_t batch = 6, vocab = 300;
  Graph g = sampler(batch, vocab, 2, 8);
  SamplerState s(batch, 2);
  SamplingParams p;
  p.temperature = 0.0f;
  for (int64_t r = 0; r < batch; ++r) s.reset(r, p);
  Tensor logits = random_logits(batch, vocab, 9);
  Tensor ids = evaluate(g, feeds_of(s, logits))[0];
  for (int64_t r = 0; r < batch; ++r) {
    const float* row = logits.data_as<float>() + r * vocab;
    EXPECT_EQ(ids.get_i64(r), std::max_element(row, row + vocab) - row);
  }
}

// token_sampler is sample_tokens behind the TokenSelector signature.
TEST(Sampling, TokenSamplerAddsTheInputs) {
  Graph g("selector");
  Value logits = g.input("logits", DType::f32, Shape{3, 20});
  g.set_outputs({token_sampler(4, SamplerOptions{8})(g, logits)});
  EXPECT_EQ(g.type(g.outputs()[0]), (TensorType{DType::i32, Shape{3}}));
  EXPECT_EQ(g.type(Value{g.find(kSamplerHistory), 0}), (TensorType{DType::i32, Shape{3, 4}}));
  SamplerState s(3, 4);
  TensorMap f = s.feeds();
  f["logits"] = random_logits(3, 20, 1);
  EXPECT_TRUE(evaluate(g, f)[0].bitwise_equal(evaluate(sampler(3, 20, 4, 8), f)[0]));
}

TEST(Sampling, ErrorsNameTheInput) {
  Graph g("bad");
  Value logits = g.input("logits", DType::f32, Shape{4, 10});
  SamplerInputs in = add_sampler_inputs(g, 3, 2);
  EXPECT_NE(error_of([&] { sample_tokens(g, logits, in); })
                .find("sample_tokens: seed must be i32[B] with B = 4 (the logits' rows), got "
                      "i32[3]"),
            std::string::npos);
  Graph h("bad2");
  Value l2 = h.input("logits", DType::f32, Shape{3, 10});
  SamplerInputs in2 = add_sampler_inputs(h, 3, 2);
  EXPECT_NE(error_of([&] {
              sample_tokens(h, l2, in2, SamplerOptions{0});
            }).find("max_candidates must be >= 1"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              sample_tokens(h, h.input("l3", DType::f32, Shape{30}), in2);
            }).find("logits must be [B, V], got f32[30]"),
            std::string::npos);
  in2.top_k = in2.top_p;
  EXPECT_NE(error_of([&] {
              sample_tokens(h, l2, in2);
            }).find("top_k must be i32[B] with B = 3 (the logits' rows), got f32[3]"),
            std::string::npos);
  EXPECT_NE(error_of([&] { add_sampler_inputs(h, 3, 2); }).find("sampler.temperature"),
            std::string::npos);
}

TEST(SamplerState, WindowStepsAndChecks) {
  SamplerState s(2, 3);
  SamplingParams p;
  p.seed = 0xfffffffeu;
  s.reset(1, p, std::vector<int32_t>{1, 2, 3, 4, 5});  // keeps the last 3
  s.accept(1, 9);                                      // replaces the oldest (3)
  TensorMap f = s.feeds();
  const Tensor& h = f.at(kSamplerHistory);
  std::vector<int64_t> row0, row1;
  for (int i = 0; i < 3; ++i) {
    row0.push_back(h.get_i64(i));
    row1.push_back(h.get_i64(3 + i));
  }
  EXPECT_EQ(row0, (std::vector<int64_t>{-1, -1, -1}));
  std::sort(row1.begin(), row1.end());
  EXPECT_EQ(row1, (std::vector<int64_t>{4, 5, 9}));
  EXPECT_EQ(f.at(kSamplerStep).get_i64(1), 1);
  EXPECT_EQ(f.at(kSamplerSeed).get_i64(1), -2);  // the u32 seed's bits
  EXPECT_EQ(f.at(kSamplerTopK).get_i64(0), 40);  // llama.cpp's defaults
  EXPECT_FLOAT_EQ(static_cast<float>(f.at(kSamplerTemperature).get_f64(0)), 0.8f);
  p.repetition_penalty = 0.0f;
  EXPECT_NE(error_of([&] {
              s.reset(0, p);
            }).find("SamplerState::reset: row 0: repetition_penalty must be finite and > 0"),
            std::string::npos);
  EXPECT_NE(error_of([&] { s.accept(2, 1); }).find("SamplerState::accept: row 2 is outside [0, 2)"),
            std::string::npos);
}

}  // namespace
}  // namespace rlx::models
