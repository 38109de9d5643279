// The fused quantized matmul (src/backends/cpu/kernels/quant_matmul.h): every format x
// M {1, 2, 4, 5, 8 (GEMV path), 9, 37 (GEMM path)} x K {one block, several} x every dispatch target
// this CPU has, against dequantize_row (bit-exact with gguf-py, tests/ir/quant_test.cc) followed by
// a matmul in double, within the bound the int8 activation rounding allows; dequant_sgemm (the
// op's path for many rows) within f32 error; the SIMD targets against the scalar target;
// threads; the bias + activation epilogue; errors.
#include "../../../src/backends/cpu/kernels/quant_matmul.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "rlx/ir/dtype.h"
#include "rlx/ir/error.h"
#include "rlx/ir/quant.h"
#include "rlx/runtime/threading.h"

namespace rlx::cpu {
namespace {

constexpr double kEps = 0x1p-24;  // f32 unit roundoff

// N rows of K weights in format f: random Gaussian rows (a different magnitude per row, one
// row with a positive offset so min != -max) through quantize_row; IQ4_NL, which has no
// quantizer, from random bytes with random f16 scales of both signs.
std::vector<uint8_t> random_weights(QuantFormat f, int64_t N, int64_t K, std::mt19937& rng) {
  const int64_t rb = quant_row_bytes(f, K);
  std::vector<uint8_t> w(static_cast<size_t>(N * rb));
  if (f == QuantFormat::kIQ4_NL) {
    std::uniform_int_distribution<int> byte(0, 255);
    std::uniform_real_distribution<float> scale(-0.05f, 0.05f);
    for (auto& b : w) b = uint8_t(byte(rng));
    for (int64_t b = 0; b < N * K / 32; ++b) {
      uint16_t h = f16_from_float(scale(rng)).bits;
      std::memcpy(&w[size_t(b * 18)], &h, 2);
    }
    return w;
  }
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> row(static_cast<size_t>(K));
  for (int64_t n = 0; n < N; ++n) {
    const float mag = std::ldexp(1.0f, int(n % 7) - 3);
    for (auto& v : row) v = normal(rng) * mag + (n % 5 == 1 ? 2.0f * mag : 0.0f);
    quantize_row(f, row.data(), w.data() + n * rb, K);
  }
  return w;
}

struct Problem {
  int64_t M, K, N;
  std::vector<float> x, wd;  // wd: the dequantized weights [N, K]
  std::vector<uint8_t> w;
};

Problem make_problem(QuantFormat f, int64_t M, int64_t K, int64_t N, uint32_t seed) {
  std::mt19937 rng(seed);
  Problem p{M, K, N, std::vector<float>(size_t(M * K)), std::vector<float>(size_t(N * K)), {}};
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t k = 0; k < K; ++k)  // rows of different magnitudes, one with an outlier
      p.x[size_t(m * K + k)] = normal(rng) * float(1 + m % 3) * (k == 5 ? 20.0f : 1.0f);
  p.w = random_weights(f, N, K, rng);
  const int64_t rb = quant_row_bytes(f, K);
  for (int64_t n = 0; n < N; ++n) dequantize_row(f, p.w.data() + n * rb, p.wd.data() + n * K, K);
  return p;
}

// |y - x . wd| may reach, per output: the activation rounding, sum over 32-blocks b of
// (max|x| over b) / 254 * sum_{k in b} |wd_k| (int8 rounding is at most half a step d / 2,
// d = max|x| / 127), plus f32 rounding of (K / 8 + 16) roundoffs of sum |x| |wd| (the deepest
// chain of f32 additions is K / 16 terms per lane, then the scale products and the lane sum).
double tolerance(const Problem& p, int64_t m, int64_t n, bool int8_activations) {
  double act = 0, abs_sum = 0;
  for (int64_t b = 0; b < p.K / 32 + (p.K % 32 != 0); ++b) {
    double amax = 0, wsum = 0;
    for (int64_t k = 32 * b; k < std::min(p.K, 32 * b + 32); ++k) {
      amax = std::max(amax, double(std::fabs(p.x[size_t(m * p.K + k)])));
      wsum += std::fabs(double(p.wd[size_t(n * p.K + k)]));
      abs_sum += std::fabs(double(p.x[size_t(m * p.K + k)])) *
                 std::fabs(double(p.wd[size_t(n * p.K + k)]));
    }
    act += amax / 254.0 * wsum * (1 + 1e-4);
  }
  return (int8_activations ? act : 0.0) + double(p.K / 8 + 16) * kEps * (abs_sum + act) + 1e-30;
}

std::vector<float> run(QuantFormat f, const Problem& p, QuantTarget t) {
  std::vector<float> y(static_cast<size_t>(p.M * p.N), std::nanf(""));
  quant_matmul(f, p.x.data(), p.M, p.K, p.w.data(), p.N, y.data(), t);
  return y;
}

bool is_float_format(QuantFormat f) {
  return f == QuantFormat::kF32 || f == QuantFormat::kF16 || f == QuantFormat::kBF16;
}

int64_t test_k(QuantFormat f) {
  const int64_t bs = quant_format_info(f).block_size;
  return bs == 256 ? 512 : bs == 32 ? 96 : 44;  // 2 or 3 blocks; float formats: any K (8k + 4)
}

TEST(QuantMatmul, EveryFormatShapeAndTargetMatchesDequantizeThenMatmul) {
  const std::vector<QuantTarget> targets = supported_quant_targets();
  for (QuantTarget t : {QuantTarget::kAvx2, QuantTarget::kAvx512Vnni})
    if (!quant_target_supported(t))
      std::printf("[ note ] this CPU lacks %s: not tested here\n", quant_target_name(t).data());
  for (const QuantFormatInfo& info : quant_formats()) {
    // M: the GEMV path (M <= 8: 1, 2, 4 and 5, 8 with two row groups) and the GEMM path (9,
    // 37); K: one block, a few, and for the 32-element formats 11 blocks (one whole 8-block
    // group of the GEMV and a partial one); N = 67: not a multiple of any tile width nor of the
    // 32-row chunks the pool splits the GEMV into.
    const int64_t bs = info.block_size;
    std::vector<int64_t> ks = {bs == 1 ? int64_t(8) : bs, test_k(info.format)};
    if (bs == 32) ks.push_back(11 * 32);
    for (int64_t M : {1, 2, 4, 5, 8, 9, 37}) {
      for (int64_t K : ks) {
        if (K == 11 * 32 && M > 8) continue;  // the partial group is a GEMV matter
        const int64_t N = 67;
        const Problem p =
            make_problem(info.format, M, K, N, uint32_t(M * 1000 + K + info.ggml_type));
        std::vector<double> ref(static_cast<size_t>(M * N));
        for (int64_t m = 0; m < M; ++m)
          for (int64_t n = 0; n < N; ++n) {
            double s = 0;
            for (int64_t k = 0; k < K; ++k)
              s += double(p.x[size_t(m * K + k)]) * double(p.wd[size_t(n * K + k)]);
            ref[size_t(m * N + n)] = s;
          }
        for (QuantTarget t : targets) {
          SCOPED_TRACE(std::string(info.name) + " M=" + std::to_string(M) +
                       " K=" + std::to_string(K) + " target " + std::string(quant_target_name(t)));
          const std::vector<float> y = run(info.format, p, t);
          int bad = 0;
          for (int64_t m = 0; m < M; ++m)
            for (int64_t n = 0; n < N; ++n) {
              const double err = std::fabs(double(y[size_t(m * N + n)]) - ref[size_t(m * N + n)]);
              const double tol = tolerance(p, m, n, !is_float_format(info.format));
              if (!(err <= tol) && bad++ < 3)
                ADD_FAILURE() << "y[" << m << "," << n << "] = " << y[size_t(m * N + n)]
                              << ", reference " << ref[size_t(m * N + n)] << ", error " << err
                              << " > " << tol;
            }
          EXPECT_EQ(bad, 0);
        }
      }
    }
  }
}

// The paired GEMV (Q4_0 / Q4_1, one row of x, on VNNI: tiles of 4 weight rows, the last
// K / 32 % 8 blocks of the 4 rows folded together across the rows): K = 576 (2 whole 8-block
// groups + a 2-block tail, SmolLM2's hidden size), 4096 (no tail), 416 (a 5-block tail: odd, a
// half-empty tail group) and 192 (a 6-block tail and no whole group); N = 1, 3 (a single short
// tile) and 67 (the last tile short, 3 chunks); on every target against the double-precision
// product of the dequantized weights. A NaN scale in one row's tail blocks makes that row NaN and
// leaves its 3 tile neighbours exact.
TEST(QuantMatmul, PairedGemvTailsAndShortTilesMatchDequantizeThenMatmul) {
  for (QuantFormat f : {QuantFormat::kQ4_0, QuantFormat::kQ4_1}) {
    for (int64_t K : {576, 4096, 416, 192}) {
      for (int64_t N : {1, 3, 67}) {
        Problem p = make_problem(f, 1, K, N, uint32_t(K + N + int(f)));
        const int64_t rb = quant_row_bytes(f, K);
        const int64_t nan_row = N > 1 ? 1 : -1;  // its last block's f16 scale: NaN
        if (nan_row >= 0) {
          const uint16_t nan = 0x7E00;
          std::memcpy(p.w.data() + nan_row * rb + rb - quant_row_bytes(f, 32), &nan, 2);
        }
        for (QuantTarget t : supported_quant_targets()) {
          SCOPED_TRACE(std::string(quant_format_info(f).name) + " K=" + std::to_string(K) +
                       " N=" + std::to_string(N) + " " + std::string(quant_target_name(t)));
          const std::vector<float> y = run(f, p, t);
          for (int64_t n = 0; n < N; ++n) {
            if (n == nan_row) {
              EXPECT_TRUE(std::isnan(y[size_t(n)])) << y[size_t(n)];
              continue;
            }
            double ref = 0;
            for (int64_t k = 0; k < K; ++k)
              ref += double(p.x[size_t(k)]) * double(p.wd[size_t(n * K + k)]);
            EXPECT_NEAR(y[size_t(n)], ref, tolerance(p, 0, n, true)) << "row " << n;
          }
        }
      }
    }
  }
}

// The SIMD targets (the GEMV path for M <= 8, the GEMM path above) compute the scalar
// target's sums up to f32 reassociation.
TEST(QuantMatmul, SimdTargetsMatchScalarTarget) {
  for (const QuantFormatInfo& info : quant_formats()) {
    for (int64_t M : {1, 2, 4, 5, 8, 9}) {
      const Problem p =
          make_problem(info.format, M, test_k(info.format), 67, uint32_t(7 + M + info.ggml_type));
      const std::vector<float> ys = run(info.format, p, QuantTarget::kScalar);
      for (QuantTarget t : supported_quant_targets()) {
        if (t == QuantTarget::kScalar) continue;
        SCOPED_TRACE(std::string(info.name) + " M=" + std::to_string(M) + " " +
                     std::string(quant_target_name(t)));
        const std::vector<float> y = run(info.format, p, t);
        for (int64_t m = 0; m < p.M; ++m)
          for (int64_t n = 0; n < p.N; ++n) {
            // Both round the same int8 activations; only the f32 summation order differs.
            const double tol = tolerance(p, m, n, false);
            EXPECT_NEAR(y[size_t(m * p.N + n)], ys[size_t(m * p.N + n)], 2 * tol) << m << "," << n;
          }
      }
    }
  }
}

// The VNNI GEMM runs every panel over blocks of rows (kGemmRowBlockBytes = 384 KiB of int8
// activations, at least 128 rows: 128 at K = 3072), packing each panel once per block: M = 260
// spans two whole blocks and a third of one row group; N = 24 is a whole panel and a partial one.
// Every target matches the scalar one (which has no row blocks), signed (Q8_0) and unsigned
// 256-element (Q4_K) formats.
TEST(QuantMatmul, GemmRowBlocksMatchScalarTarget) {
  for (QuantFormat f : {QuantFormat::kQ8_0, QuantFormat::kQ4_K}) {
    const Problem p = make_problem(f, 260, 3072, 24, 4321u + uint32_t(f));
    const std::vector<float> ys = run(f, p, QuantTarget::kScalar);
    for (QuantTarget t : supported_quant_targets()) {
      if (t == QuantTarget::kScalar) continue;
      SCOPED_TRACE(std::string(quant_format_info(f).name) + " " +
                   std::string(quant_target_name(t)));
      const std::vector<float> y = run(f, p, t);
      int bad = 0;
      for (int64_t m = 0; m < p.M; ++m)
        for (int64_t n = 0; n < p.N; ++n) {
          const double err = std::fabs(double(y[size_t(m * p.N + n)]) - ys[size_t(m * p.N + n)]);
          const double tol = 2 * tolerance(p, m, n, false);  // same int8 activations
          if (!(err <= tol) && bad++ < 3)
            ADD_FAILURE() << "y[" << m << "," << n << "] = " << y[size_t(m * p.N + n)]
                          << ", scalar " << ys[size_t(m * p.N + n)] << ", error " << err << " > "
                          << tol;
        }
    }
  }
}

// Column partitions do not change any sum: 1 and 2 threads agree bit for bit on every format,
// target and path (N = 301: ten GEMV chunks the threads claim, the last one short).
TEST(QuantMatmul, ThreadCountDoesNotChangeResults) {
  const int before = num_threads();
  for (const QuantFormatInfo& info : quant_formats()) {
    for (int64_t M : {1, 9}) {  // the GEMV and the GEMM path
      const Problem p = make_problem(info.format, M, test_k(info.format), 301, uint32_t(99 + M));
      for (QuantTarget t : supported_quant_targets()) {
        set_num_threads(1);
        const std::vector<float> y1 = run(info.format, p, t);
        set_num_threads(2);
        const std::vector<float> y2 = run(info.format, p, t);
        EXPECT_EQ(std::memcmp(y1.data(), y2.data(), y1.size() * 4), 0)
            << info.name << " M=" << M << " " << quant_target_name(t);
      }
    }
  }
  set_num_threads(before);
}

TEST(QuantMatmul, TargetFromEnvironment) {
  {
    testing::EnvGuard env("RLX_QUANT_TARGET", "scalar");
    EXPECT_EQ(default_quant_target(), QuantTarget::kScalar);
  }
  {
    testing::EnvGuard env("RLX_QUANT_TARGET", "avx2");
    if (quant_target_supported(QuantTarget::kAvx2)) {
      EXPECT_EQ(default_quant_target(), QuantTarget::kAvx2);
    } else {
      EXPECT_EQ(testing::error_of([] { default_quant_target(); }),
                "RLX_QUANT_TARGET=avx2: this CPU does not support that target");
    }
  }
  {
    testing::EnvGuard env("RLX_QUANT_TARGET", "sse9");
    EXPECT_EQ(testing::error_of([] { default_quant_target(); }),
              "RLX_QUANT_TARGET='sse9' is not a target; expected scalar, avx2 or avx512vnni");
  }
  {
    testing::EnvGuard env("RLX_QUANT_TARGET", nullptr);
    EXPECT_EQ(default_quant_target(), supported_quant_targets().back());
  }
}

// Checks y against sum_k xs[m, k] * dequantized w[n, k] in double within f32 error only: each
// dequantized weight scale * q + offset within a few roundoffs of the 32-block's largest |weight|
// (the offset is at most about that large), and the sums (a chain of at most K additions).
void expect_f32_product(const Problem& p, const std::vector<float>& xs,
                        const std::vector<float>& y) {
  const int64_t M = p.M, K = p.K, N = p.N;
  int bad = 0;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double ref = 0, abs_sum = 0, weight_err = 0;
      for (int64_t k = 0; k < K; ++k) {
        const double x = xs[size_t(m * K + k)], w = p.wd[size_t(n * K + k)];
        ref += x * w;
        abs_sum += std::fabs(x * w);
        double block_max = 0;
        for (int64_t j = k / 32 * 32; j < std::min(K, k / 32 * 32 + 32); ++j)
          block_max = std::max(block_max, std::fabs(double(p.wd[size_t(n * K + j)])));
        weight_err += std::fabs(x) * 4 * kEps * block_max;
      }
      const double err = std::fabs(double(y[size_t(m * N + n)]) - ref);
      const double tol = double(K + 16) * kEps * abs_sum + weight_err + 1e-30;
      if (!(err <= tol) && bad++ < 3)
        ADD_FAILURE() << "y[" << m << "," << n << "] = " << y[size_t(m * N + n)] << ", reference "
                      << ref << ", error " << err << " > " << tol;
    }
  EXPECT_EQ(bad, 0);
}

// dequant_sgemm and quant_matmul_exact (the op with act_quant "none": f32 dot products below
// kExactSgemmRows rows, dequant_sgemm from there): no activation rounding, so only f32 error.
// N = 67 splits into several panels per thread with a short last one.
TEST(QuantMatmul, ExactPathsMatchDequantizeThenMatmulInF32) {
  for (const QuantFormatInfo& info : quant_formats()) {
    for (int64_t M : {int64_t{1}, int64_t{5}, kExactSgemmRows - 1, kExactSgemmRows, int64_t{40}}) {
      const int64_t K = test_k(info.format), N = 67;
      const Problem p = make_problem(info.format, M, K, N, uint32_t(M * 77 + K + info.ggml_type));
      for (QuantTarget t : supported_quant_targets()) {
        SCOPED_TRACE(std::string(info.name) + " M=" + std::to_string(M) + " target " +
                     std::string(quant_target_name(t)));
        std::vector<float> y(static_cast<size_t>(M * N), std::nanf(""));
        dequant_sgemm(info.format, p.x.data(), M, K, p.w.data(), N, y.data(), t);
        expect_f32_product(p, p.x, y);
        std::fill(y.begin(), y.end(), std::nanf(""));
        quant_matmul_exact(info.format, p.x.data(), M, K, p.w.data(), N, y.data(), t);
        expect_f32_product(p, p.x, y);
      }
    }
  }
}

// The int8 kernel computes what act_quant "int8" defines: the f32 product of the dequantized
// weights with x rounded by round_activations_int8 (rlx/ir/quant.h, what the evaluator and the
// decomposition use), within f32 error only, on every path (GEMV, GEMM tiles / panels) and target.
TEST(QuantMatmul, Int8KernelEqualsRoundedActivationsTimesDequantizedWeights) {
  for (const QuantFormatInfo& info : quant_formats()) {
    if (is_float_format(info.format)) continue;
    for (int64_t M : {1, 5, 9, 37}) {
      const int64_t K = test_k(info.format), N = 67;
      const Problem p = make_problem(info.format, M, K, N, uint32_t(M * 31 + K + info.ggml_type));
      std::vector<float> xr = p.x;
      for (int64_t m = 0; m < M; ++m)
        round_activations_int8(&xr[size_t(m * K)], &xr[size_t(m * K)], K);
      for (QuantTarget t : supported_quant_targets()) {
        SCOPED_TRACE(std::string(info.name) + " M=" + std::to_string(M) + " target " +
                     std::string(quant_target_name(t)));
        expect_f32_product(p, xr, run(info.format, p, t));
      }
    }
  }
}

// The paired GEMV (Q4_0 / Q4_1, M = 1) at the extremes of its integer sums: x's blocks constant
// (every q = +-127: the largest activation block sums, which Q4_0's zero point subtracts 8 times
// from the integer dots) against weight nibbles all 0, all 15 or alternating, f16 scales and mins
// of both signs, for K with whole groups and a tail (576), an odd tail (416) and only a tail
// (192); within f32 error of the rounded activations times the dequantized weights.
TEST(QuantMatmul, PairedGemvIntegerSumsAtTheirExtremes) {
  for (QuantFormat f : {QuantFormat::kQ4_0, QuantFormat::kQ4_1}) {
    for (int64_t K : {576, 416, 192}) {
      const int64_t N = 7, rb = quant_row_bytes(f, K), bb = rb / (K / 32);
      Problem p{1,
                K,
                N,
                std::vector<float>(size_t(K)),
                std::vector<float>(size_t(N * K)),
                std::vector<uint8_t>(size_t(N * rb))};
      for (int64_t k = 0; k < K; ++k) p.x[size_t(k)] = (k / 32) % 3 == 1 ? -3.0f : 2.5f;
      for (int64_t n = 0; n < N; ++n) {
        for (int64_t b = 0; b < K / 32; ++b) {
          uint8_t* blk = p.w.data() + n * rb + b * bb;
          const uint16_t d = f16_from_float((n + b) % 2 == 0 ? 0.75f : -1.25f).bits;
          const uint16_t m = f16_from_float(n % 3 == 0 ? -2.0f : 0.5f).bits;
          std::memcpy(blk, &d, 2);
          if (bb == 20) std::memcpy(blk + 2, &m, 2);
          const uint8_t nib = n % 3 == 0 ? 0x00 : n % 3 == 1 ? 0xFF : 0xF0;
          std::memset(blk + bb - 16, nib, 16);
        }
        dequantize_row(f, p.w.data() + n * rb, p.wd.data() + n * K, K);
      }
      std::vector<float> xr = p.x;
      round_activations_int8(xr.data(), xr.data(), K);
      for (QuantTarget t : supported_quant_targets()) {
        SCOPED_TRACE(std::string(quant_format_info(f).name) + " K=" + std::to_string(K) + " " +
                     std::string(quant_target_name(t)));
        expect_f32_product(p, xr, run(f, p, t));
      }
    }
  }
}

// Non-finite and tiny activations under int8 rounding, as round_activations_int8 defines them:
// a row with a NaN or an Inf gives NaN in every output (never finite garbage), a row whose
// blocks are all below the smallest normal scale rounds to 0, and the other rows are unaffected;
// on every path (GEMV, GEMM, AVX2 from 32 rows) and target.
TEST(QuantMatmul, Int8NonFiniteRowsAreNaNAndTinyRowsZero) {
  EXPECT_TRUE(std::isnan([] {
    std::vector<float> b(32, 1.0f);
    b[3] = std::numeric_limits<float>::infinity();
    round_activations_int8(b.data(), b.data(), 32);
    return b[0];
  }()));
  for (QuantFormat f : {QuantFormat::kQ8_0, QuantFormat::kQ4_1, QuantFormat::kQ6_K}) {
    for (int64_t M : {4, 9, 37}) {
      const int64_t K = test_k(f), N = 19;
      Problem p = make_problem(f, M, K, N, uint32_t(M + 5));
      p.x[size_t(0 * K + 7)] = std::nanf("");
      p.x[size_t(1 * K + K - 1)] = -std::numeric_limits<float>::infinity();
      for (int64_t k = 0; k < K; ++k) p.x[size_t(2 * K + k)] = 1e-39f * float(k % 5);
      for (QuantTarget t : supported_quant_targets()) {
        SCOPED_TRACE(std::string(quant_format_info(f).name) + " M=" + std::to_string(M) + " " +
                     std::string(quant_target_name(t)));
        const std::vector<float> y = run(f, p, t);
        for (int64_t n = 0; n < N; ++n) {
          EXPECT_TRUE(std::isnan(y[size_t(0 * N + n)])) << n;
          EXPECT_TRUE(std::isnan(y[size_t(1 * N + n)])) << n;
          EXPECT_EQ(y[size_t(2 * N + n)], 0.0f) << n;
          EXPECT_TRUE(std::isfinite(y[size_t(3 * N + n)])) << n;
        }
      }
    }
  }
}

// quant_matmul_exact switches to dequant_sgemm at kExactSgemmRows; both differ from the int8
// kernel (which rounds x).
TEST(QuantMatmul, ExactSwitchesToDequantSgemmAtTheThreshold) {
  const QuantFormat f = QuantFormat::kQ4_K;
  const QuantTarget t = default_quant_target();
  for (int64_t M : {kExactSgemmRows - 1, kExactSgemmRows}) {
    const Problem p = make_problem(f, M, 512, 19, uint32_t(M));
    std::vector<float> got(size_t(M * 19)), int8(got.size()), deq(got.size());
    quant_matmul_exact(f, p.x.data(), M, 512, p.w.data(), 19, got.data(), t);
    quant_matmul(f, p.x.data(), M, 512, p.w.data(), 19, int8.data(), t);
    dequant_sgemm(f, p.x.data(), M, 512, p.w.data(), 19, deq.data(), t);
    if (M >= kExactSgemmRows) {
      EXPECT_EQ(got, deq) << "M = " << M;
    }
    EXPECT_NE(got, int8) << "M = " << M << ": the exact and the int8 path should round differently";
  }
}

// The epilogue (QuantEpilogue: bias + activation per block of columns, as the kernel writes
// them) equals the product without it followed by the same vec_binary add and vec_apply
// activation over all of y, bit for bit (the same f32 operations on the same values), on every
// target and path: paired and tiled GEMV (M 1, 3), the int8 GEMM (M 40, on AVX2 dequant_sgemm
// of the rounded rows), the exact path (few rows) and dequant_sgemm (M 40, exact); N = 300 is
// 18 full VNNI panels and a short one, so the every-8-panels application and the tail both run;
// K = 0 gives act(bias).
TEST(QuantMatmul, EpilogueEqualsBiasAndActivationAfterTheProduct) {
  const int64_t N = 300;
  std::vector<float> bias(N);
  for (int64_t n = 0; n < N; ++n) bias[size_t(n)] = float(n % 13) * 0.25f - 1.5f;
  for (QuantFormat f : {QuantFormat::kQ8_0, QuantFormat::kQ4_K, QuantFormat::kF16}) {
    const int64_t K = test_k(f);
    for (int64_t M : {1, 3, 40}) {
      const Problem p = make_problem(f, M, K, N, uint32_t(7 + M));
      for (QuantTarget t : supported_quant_targets()) {
        for (bool exact : {false, true}) {
          for (std::optional<VecFn> act : {std::optional<VecFn>(), std::optional(VecFn::kGelu)}) {
            SCOPED_TRACE(std::string(quant_format_info(f).name) + " M=" + std::to_string(M) + " " +
                         std::string(quant_target_name(t)) + (exact ? " exact" : " int8") +
                         (act ? " act " + std::to_string(int(*act)) : " bias only"));
            using Product = void (*)(QuantFormat, const float*, int64_t, int64_t, const uint8_t*,
                                     int64_t, float*, QuantTarget, const QuantEpilogue&);
            const Product int8 = [](QuantFormat f, const float* x, int64_t M, int64_t K,
                                    const uint8_t* w, int64_t N, float* y, QuantTarget t,
                                    const QuantEpilogue& ep) {
              quant_matmul(f, x, M, K, w, N, y, t, ep);
            };
            const Product product = exact ? Product(quant_matmul_exact) : int8;
            std::vector<float> want(size_t(M * N)), got(want.size(), std::nanf(""));
            product(f, p.x.data(), M, K, p.w.data(), N, want.data(), t, QuantEpilogue{});
            for (int64_t m = 0; m < M; ++m) {
              float* row = want.data() + m * N;
              vec_binary(VecBinary::kAdd, row, bias.data(), row, N);
              if (act) vec_apply(*act, row, row, N);
            }
            product(f, p.x.data(), M, K, p.w.data(), N, got.data(), t,
                    QuantEpilogue{bias.data(), act});
            EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * 4), 0);
          }
        }
      }
    }
  }
  // K = 0: y = act(bias) on every row.
  std::vector<float> y(2 * N, std::nanf(""));
  quant_matmul(QuantFormat::kQ8_0, nullptr, 2, 0, nullptr, N, y.data(), default_quant_target(),
               QuantEpilogue{bias.data(), VecFn::kRelu});
  for (int64_t i = 0; i < 2 * N; ++i) ASSERT_EQ(y[size_t(i)], std::max(bias[size_t(i % N)], 0.0f));
}

TEST(QuantMatmul, Errors) {
  std::vector<float> x(512), y(16);
  std::vector<uint8_t> w(4096);
  EXPECT_EQ(testing::error_of(
                [&] { quant_matmul(QuantFormat::kQ4_K, x.data(), 1, 100, w.data(), 1, y.data()); }),
            "quant_matmul: K = 100 is not a multiple of the q4_K block size 256");
  EXPECT_EQ(testing::error_of(
                [&] { quant_matmul(QuantFormat::kQ8_0, x.data(), -1, 32, w.data(), 1, y.data()); }),
            "quant_matmul: negative size (M -1, K 32, N 1)");
  EXPECT_EQ(testing::error_of([&] {
              dequant_sgemm(QuantFormat::kQ4_K, x.data(), 40, 100, w.data(), 1, y.data(),
                            QuantTarget::kScalar);
            }),
            "dequant_sgemm: K = 100 is not a multiple of the q4_K block size 256");
  for (QuantTarget t : {QuantTarget::kAvx2, QuantTarget::kAvx512Vnni}) {
    if (quant_target_supported(t)) continue;
    EXPECT_EQ(testing::error_of([&] {
                quant_matmul(QuantFormat::kQ8_0, x.data(), 1, 32, w.data(), 1, y.data(), t);
              }),
              "quant_matmul: target " + std::string(quant_target_name(t)) +
                  " is not supported by this CPU");
  }
}

}  // namespace
}  // namespace rlx::cpu
