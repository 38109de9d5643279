// Op cases of the quantized-weight family: dequantize and quant_matmul in every ggml format
// (rlx/ir/quant.h), with packed weights from the reference quantizers (IQ4_NL, which has none,
// from random bytes with bounded f16 scales), a gathered embedding table, and activations that
// the CPU kernel's int8 rounding represents exactly (q / 256, +-127 / 256 in every 32-block), so
// the fused kernel differs from the evaluator only by f32 summation order; and quant_matmul with
// act_quant "int8" on random activations; and with a bias operand and an activation.
#include "rlx/ir/quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "common.h"

namespace rlx::testing {
namespace {

using namespace cases;

// Row length of a format's cases: two blocks (one of 256), 40 for the float formats.
int64_t case_k(const QuantFormatInfo& info) {
  return info.block_size == 256 ? 256 : info.block_size == 32 ? 64 : 40;
}

// `rows` packed rows of k elements in `f` as the u8 values of a fixed operand: Gaussian rows of
// different magnitudes (one with an offset, so min != -max) through quantize_row.
std::vector<double> packed_rows(QuantFormat f, int64_t rows, int64_t k, uint32_t seed) {
  const int64_t rb = quant_row_bytes(f, k);
  std::vector<uint8_t> w(static_cast<size_t>(rows * rb));
  std::mt19937 rng(seed);
  if (f == QuantFormat::kIQ4_NL) {
    std::uniform_int_distribution<int> byte(0, 255);
    std::uniform_real_distribution<float> scale(-0.05f, 0.05f);
    for (auto& b : w) b = static_cast<uint8_t>(byte(rng));
    for (int64_t b = 0; b < rows * k / 32; ++b) {
      const uint16_t h = f16_from_float(scale(rng)).bits;
      std::memcpy(&w[static_cast<size_t>(b * 18)], &h, 2);
    }
  } else {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> row(static_cast<size_t>(k));
    for (int64_t r = 0; r < rows; ++r) {
      const float mag = std::ldexp(1.0f, static_cast<int>(r % 4) - 2);
      for (auto& v : row) v = normal(rng) * mag + (r % 3 == 1 ? 1.5f * mag : 0.0f);
      quantize_row(f, row.data(), w.data() + r * rb, k);
    }
  }
  return {w.begin(), w.end()};
}

// q / 256 for integers q in [-127, 127] with +-127 somewhere in every block of 32 along the
// last dim: the int8 scale of every block is exactly 1/256, so the kernel's rounding is exact
// (and the values are exact in f16 / bf16); small, so f32 sums that cancel stay within atol.
std::vector<double> int8_exact(int64_t rows, int64_t k, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> q(-127, 127);
  std::vector<double> x(static_cast<size_t>(rows * k));
  for (auto& v : x) v = q(rng) / 256.0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b0 = 0; b0 < k; b0 += 32) {
      const int64_t len = std::min<int64_t>(32, k - b0);
      x[static_cast<size_t>(r * k + b0 + (r * 7 + b0) % len)] = (r % 2 ? -127 : 127) / 256.0;
    }
  return x;
}

AttrMap qattrs(const QuantFormatInfo& info, int64_t k) {
  return {{"format", std::string(info.name)}, {"k", k}};
}

}  // namespace

void add_quant_cases(CaseList& cs) {
  for (const QuantFormatInfo& info : quant_formats()) {
    const QuantFormat f = info.format;
    const int64_t k = case_k(info), rb = quant_row_bytes(f, k);
    const std::string name(info.name);
    const auto seed = static_cast<uint32_t>(info.ggml_type);
    cs.add(OpKind::Dequantize, name)
        .sample({fixed(DType::u8, {3, rb}, packed_rows(f, 3, k, seed))}, qattrs(info, k))
        .sample({fixed(DType::u8, {2, 2, rb}, packed_rows(f, 4, k, seed + 100))}, qattrs(info, k));
    Operand x{Shape{2, 3, k}, std::nullopt, {}, int8_exact(6, k, seed + 200), false};
    Operand w = fixed(DType::u8, {5, rb}, packed_rows(f, 5, k, seed + 300));
    w.param = true;  // bound through Executable::set_param as packed bytes
    Operand x1{Shape{k}, std::nullopt, {}, int8_exact(1, k, seed + 400), false};
    cs.add(OpKind::QuantMatMul, name)
        .sample({x, w}, qattrs(info, k))
        .sample({x1, fixed(DType::u8, {3, rb}, packed_rows(f, 3, k, seed + 500))}, qattrs(info, k));
    if (info.block_size < 32) continue;
    // act_quant "int8" on random activations, which the rounding changes: every layer rounds x
    // per 32 elements as the reference does (jax_refs.py: numpy, from the definition).
    AttrMap int8 = qattrs(info, k);
    int8.set("act_quant", std::string("int8"));
    cs.add(OpKind::QuantMatMul, name + "_act_int8")
        .sample({T(Shape{4, k}), fixed(DType::u8, {3, rb}, packed_rows(f, 3, k, seed + 600))}, int8)
        .sample({T(Shape{2, 9, k}), w}, int8)
        .only(kAllSuites & ~kFdSuite,
              "the int8 rounding is a step function of x: central differences jump across its "
              "steps (autodiff differentiates the decomposition, exact almost everywhere)");
  }
  // The epilogue fuse-matmul-bias-act folds in: a bias [N] and an activation, on the exact and
  // the int8 path (on CPU the kernel's QuantEpilogue; elsewhere the decomposition's add and
  // activation).
  for (QuantFormat f : {QuantFormat::kQ8_0, QuantFormat::kQ4_K}) {
    const QuantFormatInfo& info = quant_format_info(f);
    const int64_t k = case_k(info), rb = quant_row_bytes(f, k);
    const std::string name(info.name);
    const auto seed = static_cast<uint32_t>(info.ggml_type) + 700;
    Operand x{Shape{2, 3, k}, std::nullopt, {}, int8_exact(6, k, seed), false};
    Operand w = fixed(DType::u8, {5, rb}, packed_rows(f, 5, k, seed + 1));
    w.param = true;
    AttrMap gelu = qattrs(info, k);
    gelu.set("activation", std::string("gelu"));
    cs.add(OpKind::QuantMatMul, name + "_bias_gelu").sample({x, w, T(Shape{5})}, gelu);
    AttrMap silu = qattrs(info, k);
    silu.set("act_quant", std::string("int8"));
    silu.set("activation", std::string("silu"));
    cs.add(OpKind::QuantMatMul, name + "_bias_silu_act_int8")
        .sample({T(Shape{4, k}), w, T(Shape{5})}, silu)
        .only(kAllSuites & ~kFdSuite,
              "the int8 rounding is a step function of x: central differences jump across its "
              "steps (autodiff differentiates the decomposition, exact almost everywhere)");
  }
  // A quantized embedding table needs no op of its own: gather the packed rows, dequantize.
  const int64_t rb = quant_row_bytes(QuantFormat::kQ8_0, 64);
  cs.add(OpKind::Dequantize, "gathered_rows")
      .sample({fixed(DType::u8, {6, rb}, packed_rows(QuantFormat::kQ8_0, 6, 64, 77)),
               fixed(DType::i32, {2, 3}, {5, 0, 2, 2, 9, -1})},
              [](Graph& g, const std::vector<Value>& in, DType) {
                return std::vector<Value>{
                    g.dequantize(g.gather(in[0], in[1], 0), QuantFormat::kQ8_0, 64)};
              });
}

}  // namespace rlx::testing
