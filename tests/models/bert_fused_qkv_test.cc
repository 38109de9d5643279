// build_bert_encoder's fused_qkv: one "attention.self.qkv" Linear per layer ([H, 3H] weight, or
// [3H, row bytes] packed, bias [3H]) instead of query / key / value. On a tiny random encoder
// (2 layers, hidden 32 = one Q8_0 block, 4 heads) compiled on the CPU, the fused graph fed the
// three weights concatenated gives the three-param graph's embeddings, at batch 1 and at batch 2
// with padded keys: f32 and bf16 weights (auto-mixed-bf16) within 1e-6 (bit-equal on the AMD
// Zen 4 AVX-512 machine they were written on; oneDNN may block or split a 96-column GEMM
// differently from a 32-column one elsewhere), Q8_0 with int8 activations bit for bit (each
// output column's integer dot product and scaling are rlx's own, unchanged). Also:
// SentenceEmbedder fuses the weights it loads (same embeddings, same weight_bytes()), the
// fused params' shapes and GGUF name, and a fused weight of the wrong shape is a clear error.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "common/scoped_env.h"
#include "common/test_util.h"
#include "common/tiny_bert.h"
#include "common/tiny_bert_config.h"
#include "rlx/io/safetensors.h"
#include "rlx/ir/quant.h"
#include "rlx/models/bert.h"
#include "rlx/models/sentence_embedder.h"
#include "rlx/runtime/session.h"

namespace rlx::models {
namespace {

using rlx::testing::error_of;

constexpr int64_t kSeq = 8;

// Deterministic values in [-0.25, 0.25) (around 1 for LayerNorm scales), from a 64-bit LCG
// seeded by the param's name, so both graphs get the same query / key / value values.
Tensor random_f32(const std::string& name, const Shape& shape) {
  Tensor r(DType::f32, shape);
  uint64_t s = std::hash<std::string>{}(name) | 1;
  const bool scale = name.find("LayerNorm.weight") != std::string::npos;
  for (int64_t i = 0; i < r.numel(); ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    const double u = static_cast<double>(s >> 11) / 9007199254740992.0 - 0.5;  // [-0.5, 0.5)
    r.set_f64(i, (scale ? 1.0 : 0.0) + 0.5 * u);
  }
  return r;
}

// The 2-D tensors `parts` concatenated along `axis` (0: rows, 1: columns); rank 1 along 0.
Tensor concatenated(const std::vector<Tensor>& parts, int axis) {
  const bool rank1 = parts[0].shape().rank() == 1;
  const int64_t rows = rank1 ? 1 : parts[0].shape()[0];
  const int64_t cols = rank1 ? parts[0].shape()[0] : parts[0].shape()[1];
  Shape shape = rank1 ? Shape{3 * cols} : axis == 0 ? Shape{3 * rows, cols} : Shape{rows, 3 * cols};
  Tensor out(parts[0].dtype(), shape);
  for (int64_t p = 0; p < 3; ++p)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const int64_t at =
            rank1 || axis == 0 ? (p * rows + r) * cols + c : r * 3 * cols + p * cols + c;
        out.set_f64(at, parts[static_cast<size_t>(p)].get_f64(r * cols + c));
      }
  return out;
}

// The value bound to param `name` of type `type`: random_f32 by name; Linear weights drawn in
// the checkpoint's [out, in] layout and declared [in, out] in type.dtype, or packed Q8_0 rows
// when type is u8; a fused qkv weight or bias is its three parts concatenated.
Tensor param_value(const std::string& name, const TensorType& type) {
  const size_t fused = name.find("attention.self.qkv.");
  if (fused != std::string::npos) {
    const std::string base = name.substr(0, fused) + "attention.self.";
    const std::string part = name.substr(fused + std::string("attention.self.qkv.").size());
    const bool packed = type.dtype == DType::u8, bias = part == "bias";
    Shape one = bias     ? Shape{type.shape[0] / 3}
                : packed ? Shape{type.shape[0] / 3, type.shape[1]}
                         : Shape{type.shape[0], type.shape[1] / 3};
    std::vector<Tensor> parts;
    for (const char* which : {"query.", "key.", "value."})
      parts.push_back(param_value(base + which + part, TensorType{type.dtype, one}));
    return concatenated(parts, bias || packed ? 0 : 1);
  }
  if (!is_transposed_linear_weight(name)) return random_f32(name, type.shape);
  const bool packed = type.dtype == DType::u8;
  const int64_t out = packed ? type.shape[0] : type.shape[1];
  const int64_t in =
      packed ? rlx::testing::tiny_bert_config().hidden_size : type.shape[0];  // q8_0: only H-wide
  Tensor w = random_f32(name, Shape{out, in});
  if (packed) {
    Tensor q(DType::u8, type.shape);
    for (int64_t o = 0; o < out; ++o)
      quantize_row(QuantFormat::kQ8_0, w.data_as<float>() + o * in,
                   q.data_as<uint8_t>() + o * type.shape[1], in);
    return q;
  }
  Tensor t(type.dtype, Shape{in, out});  // transposed; set_f64 rounds to nearest even
  for (int64_t o = 0; o < out; ++o)
    for (int64_t i = 0; i < in; ++i) t.set_f64(i * out + o, w.get_f64(o * in + i));
  return t;
}

TensorMap inputs(int64_t batch) {
  Tensor ids(DType::i32, Shape{batch, kSeq}), mask(DType::i32, Shape{batch, kSeq}),
      types(DType::i32, Shape{batch, kSeq});
  for (int64_t i = 0; i < batch * kSeq; ++i) {
    ids.data_as<int32_t>()[i] = static_cast<int32_t>((i * 7 + 3) % 50);
    mask.data_as<int32_t>()[i] = i % kSeq < (i < kSeq ? kSeq : 5) ? 1 : 0;  // row 1: 3 padded
    types.data_as<int32_t>()[i] = static_cast<int32_t>(i % 2);
  }
  return {{"input_ids", ids}, {"attention_mask", mask}, {"token_type_ids", types}};
}

struct Variant {
  DType linear_dtype = DType::f32;
  std::string policy = "always-f32";
  bool q8_0 = false;  // the attention Linears packed Q8_0 with int8 activations
};

std::shared_ptr<Executable> compile(bool fused, const Variant& v, int64_t batch) {
  std::map<std::string, QuantFormat> formats;
  if (v.q8_0)
    for (int64_t l = 0; l < rlx::testing::tiny_bert_config().num_hidden_layers; ++l) {
      const std::string p = "encoder.layer." + std::to_string(l) + ".attention.";
      for (const char* m : {"self.query", "self.key", "self.value", "self.qkv", "output.dense"})
        formats[p + m + ".weight"] = QuantFormat::kQ8_0;
    }
  Graph g = build_bert_encoder(rlx::testing::tiny_bert_config(), batch, kSeq, {}, formats,
                               v.q8_0 ? "int8" : "none", v.linear_dtype, fused);
  CompileOptions o;
  o.precision = parse_precision_policy(v.policy);
  return Session().compile(g, o);
}

Tensor embed(bool fused, const Variant& v, int64_t batch) {
  std::shared_ptr<Executable> exe = compile(fused, v, batch);
  for (const IoSpec& p : exe->params()) exe->set_param(p.name, param_value(p.name, p.type));
  return exe->run(inputs(batch)).at(0);
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  double m = 0;
  for (int64_t i = 0; i < a.numel(); ++i) m = std::max(m, std::abs(a.get_f64(i) - b.get_f64(i)));
  return m;
}

bool bit_equal(const Tensor& a, const Tensor& b) {
  return a.type() == b.type() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

// Fused and three-param embeddings at batch 1 and 2 (padded) within `tol` (0: bit for bit).
void expect_same(const Variant& v, double tol) {
  for (int64_t batch : {1, 2}) {
    Tensor three = embed(false, v, batch), fused = embed(true, v, batch);
    ASSERT_EQ(fused.shape(), (Shape{batch, 32}));
    if (tol == 0)
      EXPECT_TRUE(bit_equal(three, fused))
          << "batch " << batch << ": max |diff| " << max_abs_diff(three, fused);
    else
      EXPECT_LE(max_abs_diff(three, fused), tol) << "batch " << batch;
  }
}

TEST(BertFusedQkv, F32MatchesThreeProjections) { expect_same({}, 1e-6); }

TEST(BertFusedQkv, Bf16WeightsUnderAutoMixedBf16MatchThreeProjections) {
  expect_same({DType::bf16, "auto-mixed-bf16", false}, 1e-6);
}

TEST(BertFusedQkv, Q8_0WithInt8ActivationsIsBitEqual) {
  expect_same({DType::f32, "always-f32", true}, 0);
}

TEST(BertFusedQkv, CpuRunsPackedAttentionWithoutTransposes) {
  // The fuse-packed-attention pass turns each layer's reshape / transpose / slices / attention /
  // transpose chain into one packed_qkv_attention: no transpose runs (f32 and under AMP).
  for (const Variant& v : {Variant{}, Variant{DType::bf16, "auto-mixed-bf16", false}}) {
    SCOPED_TRACE(v.policy);
    std::shared_ptr<Executable> exe = compile(true, v, 2);
    EXPECT_EQ(exe->kernels().count(OpKind::PackedQkvAttention), (KernelCounts{2, 0}))
        << exe->kernel_report();
    EXPECT_EQ(exe->kernels().count(OpKind::Attention), (KernelCounts{0, 0}));
    EXPECT_EQ(exe->kernels().count(OpKind::Transpose), (KernelCounts{0, 0}));
  }
}

TEST(BertFusedQkv, QKVOrderMatters) {
  // Guards the comparison above: a graph whose q and k are swapped (the fused weight's first
  // two thirds exchanged) computes other embeddings.
  std::shared_ptr<Executable> exe = compile(true, {}, 1);
  for (const IoSpec& p : exe->params()) {
    Tensor t = param_value(p.name, p.type);
    if (p.name.find("qkv.") != std::string::npos) {
      Tensor swapped = t.clone();
      const int64_t rows = t.shape().rank() == 1 ? 1 : t.shape()[0], cols = t.numel() / rows;
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols / 3; ++c) {
          swapped.set_f64(r * cols + c, t.get_f64(r * cols + cols / 3 + c));
          swapped.set_f64(r * cols + cols / 3 + c, t.get_f64(r * cols + c));
        }
      t = swapped;
    }
    exe->set_param(p.name, t);
  }
  EXPECT_GT(max_abs_diff(exe->run(inputs(1)).at(0), embed(false, {}, 1)), 1e-3);
}

TEST(BertFusedQkv, FusedParamsReplaceTheThree) {
  auto types = [](const std::shared_ptr<Executable>& exe) {
    std::map<std::string, TensorType> m;
    for (const IoSpec& p : exe->params()) m[p.name] = p.type;
    return m;
  };
  const std::string p = "encoder.layer.1.attention.self.";
  auto f32 = types(compile(true, {}, 1));
  EXPECT_EQ(f32.count(p + "query.weight") + f32.count(p + "key.bias"), 0u);
  EXPECT_EQ(f32.at(p + "qkv.weight"), (TensorType{DType::f32, Shape{32, 96}}));
  EXPECT_EQ(f32.at(p + "qkv.bias"), (TensorType{DType::f32, Shape{96}}));
  EXPECT_EQ(types(compile(true, {DType::bf16, "auto-mixed-bf16", false}, 1)).at(p + "qkv.weight"),
            (TensorType{DType::bf16, Shape{32, 96}}));
  // Q8_0: 96 packed rows of one 34-byte block (f16 scale + 32 int8).
  EXPECT_EQ(types(compile(true, {DType::f32, "always-f32", true}, 1)).at(p + "qkv.weight"),
            (TensorType{DType::u8, Shape{96, 34}}));
  EXPECT_EQ(bert_gguf_tensor_name(p + "qkv.weight"), "blk.1.attn_qkv.weight");
  EXPECT_EQ(bert_gguf_tensor_name(p + "qkv.bias"), "blk.1.attn_qkv.bias");
  EXPECT_TRUE(is_transposed_linear_weight(p + "qkv.weight"));
}

TEST(BertFusedQkv, AFusedWeightOfTheWrongShapeIsAnError) {
  std::shared_ptr<Executable> exe = compile(true, {}, 1);
  const std::string name = "encoder.layer.0.attention.self.qkv.weight";
  std::string msg = error_of([&] { exe->set_param(name, Tensor(DType::f32, Shape{32, 32})); });
  EXPECT_NE(msg.find("set_param '" + name + "': expected f32[32,96]"), std::string::npos) << msg;
  exe = compile(true, {DType::f32, "always-f32", true}, 1);
  msg = error_of([&] { exe->set_param(name, Tensor(DType::u8, Shape{32, 34})); });
  EXPECT_NE(msg.find("set_param '" + name + "': expected u8[96,34]"), std::string::npos) << msg;
}

TEST(BertFusedQkv, SentenceEmbedderFusesTheCheckpointsWeights) {
  // The tiny model directory (hidden 8, 2 heads, 1 layer) embedded by SentenceEmbedder (fused)
  // and by the three-param graph bound with the checkpoint's tensors (Linear weights
  // transposed), on the same tokens.
  rlx::testing::TempDir tmp;
  const std::string dir = rlx::testing::write_tiny_bert(tmp.path() / "tiny");
  SentenceEmbedder e(dir);
  BatchEncoding tokens = e.tokenizer().encode_batch({"a man is eating food.", "a horse"}, 8);
  Tensor fused = e.embed(tokens);

  SafetensorsFile st = SafetensorsFile::open(dir + "/model.safetensors");
  BertConfig config = BertConfig::from_json_file(dir + "/config.json");
  std::shared_ptr<Executable> exe =
      Session().compile(build_bert_encoder(config, tokens.batch, tokens.seq));
  int64_t bytes = 0;
  for (const IoSpec& p : exe->params()) {
    Tensor t = st.get(p.name);
    bytes += static_cast<int64_t>(t.nbytes());
    if (is_transposed_linear_weight(p.name)) {
      Tensor tr(DType::f32, Shape{t.shape()[1], t.shape()[0]});
      for (int64_t o = 0; o < t.shape()[0]; ++o)
        for (int64_t i = 0; i < t.shape()[1]; ++i)
          tr.set_f64(i * t.shape()[0] + o, t.get_f64(o * t.shape()[1] + i));
      t = tr;
    }
    exe->set_param(p.name, t);
  }
  auto as_tensor = [&](const std::vector<int32_t>& v) {
    Tensor t(DType::i32, Shape{tokens.batch, tokens.seq});
    std::copy(v.begin(), v.end(), t.data_as<int32_t>());
    return t;
  };
  Tensor three = exe->run({{"input_ids", as_tensor(tokens.ids)},
                           {"attention_mask", as_tensor(tokens.attention_mask)},
                           {"token_type_ids", as_tensor(tokens.token_type_ids)}})
                     .at(0);
  EXPECT_LE(max_abs_diff(three, fused), 1e-6);
  EXPECT_EQ(e.weight_bytes(), bytes);  // the fused weights replace the three: no second copy
  EXPECT_TRUE(e.weight_formats().empty());
}

}  // namespace
}  // namespace rlx::models
