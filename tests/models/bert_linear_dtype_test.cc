// build_bert_encoder's linear_dtype: Linear weights stored in bf16 / f16 and widened before
// their matmuls. On a tiny random encoder (2 layers, hidden 32, padded rows), compiled on the
// CPU: under auto-mixed-bf16 the compiled graph converts no weight and its embeddings are
// bit-identical to those of f32 weights that AMP rounds on every run; under always-f32 the
// graph computes in f32 on the stored values (bit-identical to f32 weights rounded the same
// way). Holds on every CPU: without AVX512-BF16 both graphs take the same f32 GEMM path.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "common/test_util.h"
#include "common/tiny_bert_config.h"
#include "rlx/models/bert.h"
#include "rlx/runtime/session.h"

namespace rlx::models {
namespace {

using rlx::testing::error_of;

constexpr int64_t kBatch = 2, kSeq = 8;

// Deterministic values in [-0.25, 0.25) (LayerNorm scales in [0.75, 1.25)), from a 64-bit LCG.
Tensor random_f32(const TensorType& t, uint64_t seed, bool around_one) {
  Tensor r(DType::f32, t.shape);
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (int64_t i = 0; i < r.numel(); ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    const double u = static_cast<double>(s >> 11) / 9007199254740992.0 - 0.5;  // [-0.5, 0.5)
    r.set_f64(i, (around_one ? 1.0 : 0.0) + 0.5 * u);
  }
  return r;
}

// `t` (f32) converted to `to` as the convert op converts (round to nearest even).
Tensor converted(const Tensor& t, DType to) {
  Tensor r(to, t.shape());
  for (int64_t i = 0; i < t.numel(); ++i) r.set_f64(i, t.get_f64(i));
  return r;
}

TensorMap inputs() {
  Tensor ids(DType::i32, Shape{kBatch, kSeq}), mask(DType::i32, Shape{kBatch, kSeq}),
      types(DType::i32, Shape{kBatch, kSeq});
  for (int64_t i = 0; i < kBatch * kSeq; ++i) {
    ids.data_as<int32_t>()[i] = static_cast<int32_t>((i * 7 + 3) % 50);
    mask.data_as<int32_t>()[i] = i % kSeq < (i < kSeq ? kSeq : 5) ? 1 : 0;  // row 1: 3 padded
    types.data_as<int32_t>()[i] = 0;
  }
  return {{"input_ids", ids}, {"attention_mask", mask}, {"token_type_ids", types}};
}

// Embeddings of the tiny encoder with Linear weights declared `linear_dtype` under `policy`.
// Every param gets random_f32 values by its index; a Linear weight not declared f32 gets them
// converted to its dtype, and with `round_f32_linear` an f32 one gets them rounded to bf16.
// `weight_converts` counts the compiled graph's converts whose operand is a param.
Tensor embed(DType linear_dtype, const std::string& policy, bool round_f32_linear,
             int* weight_converts) {
  Graph g = build_bert_encoder(rlx::testing::tiny_bert_config(), kBatch, kSeq, {}, {}, "none",
                               linear_dtype);
  CompileOptions o;
  o.precision = parse_precision_policy(policy);
  std::shared_ptr<Executable> exe = Session().compile(g, o);
  uint64_t seed = 0;
  for (const IoSpec& p : exe->params()) {
    const bool scale = p.name.find("LayerNorm.weight") != std::string::npos;
    Tensor t = random_f32(TensorType{DType::f32, p.type.shape}, ++seed, scale);
    if (p.type.dtype != DType::f32)
      t = converted(t, p.type.dtype);
    else if (round_f32_linear && is_transposed_linear_weight(p.name))
      t = converted(converted(t, DType::bf16), DType::f32);
    exe->set_param(p.name, t);
  }
  const Graph& cg = exe->compiled_graph();
  *weight_converts = 0;
  for (const Node& n : cg.nodes())
    if (n.op == OpKind::Convert && cg.node(n.operands[0]).op == OpKind::Param) ++*weight_converts;
  return exe->run(inputs()).at(0);
}

bool bit_equal(const Tensor& a, const Tensor& b) {
  return a.type() == b.type() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

TEST(BertLinearDtype, Bf16WeightsAreReadAsStoredUnderAutoMixedBf16) {
  int f32_converts = 0, bf16_converts = 0;
  Tensor f32_weights = embed(DType::f32, "auto-mixed-bf16", false, &f32_converts);
  Tensor bf16_weights = embed(DType::bf16, "auto-mixed-bf16", false, &bf16_converts);
  // f32 weights: AMP converts each of the 12 Linear weights and 12 biases per run; stored in
  // bf16, only the biases are left.
  EXPECT_EQ(f32_converts, 24);
  EXPECT_EQ(bf16_converts, 12);
  EXPECT_TRUE(bit_equal(f32_weights, bf16_weights));
  // Not equal for want of bf16: the f32 graph's embeddings differ.
  int unused = 0;
  EXPECT_FALSE(bit_equal(bf16_weights, embed(DType::f32, "always-f32", false, &unused)));
}

TEST(BertLinearDtype, AlwaysF32ComputesInF32OnTheStoredValues) {
  int converts = 0;
  Tensor rounded = embed(DType::f32, "always-f32", true, &converts);
  EXPECT_EQ(converts, 0);
  Tensor stored = embed(DType::bf16, "always-f32", false, &converts);
  EXPECT_EQ(converts, 12);  // the widenings of the 12 stored weights
  EXPECT_TRUE(bit_equal(rounded, stored));
  // The rounding matters: exact f32 weights give other embeddings.
  Tensor exact = embed(DType::f32, "always-f32", false, &converts);
  EXPECT_FALSE(bit_equal(rounded, exact));
}

TEST(BertLinearDtype, OtherDtypesAreAnError) {
  std::string msg = error_of([] {
    build_bert_encoder(rlx::testing::tiny_bert_config(), 1, 4, {}, {}, "none", DType::i32);
  });
  EXPECT_NE(msg.find("build_bert_encoder: linear_dtype must be f32, bf16 or f16, got i32"),
            std::string::npos)
      << msg;
}

}  // namespace
}  // namespace rlx::models
