// Initialiser statistics for a fixed seed, fans, determinism and errors.
#include "rlx/train/init.h"

#include <gtest/gtest.h>

#include <cmath>

#include "rlx/ir/error.h"

namespace rlx::train {
namespace {

struct Moments {
  double mean = 0, var = 0, max_abs = 0;
};
Moments moments(const Tensor& t) {
  Moments m;
  const double n = static_cast<double>(t.numel());
  for (int64_t i = 0; i < t.numel(); ++i) m.mean += t.get_f64(i) / n;
  for (int64_t i = 0; i < t.numel(); ++i) {
    const double d = t.get_f64(i) - m.mean;
    m.var += d * d / n;
    m.max_abs = std::max(m.max_abs, std::fabs(t.get_f64(i)));
  }
  return m;
}

TEST(Init, Fans) {
  EXPECT_EQ(compute_fans(Shape{64, 128}).in, 64);
  EXPECT_EQ(compute_fans(Shape{64, 128}).out, 128);
  EXPECT_EQ(compute_fans(Shape{16, 8, 3, 3}).in, 72);    // I * kH * kW
  EXPECT_EQ(compute_fans(Shape{16, 8, 3, 3}).out, 144);  // O * kH * kW
  EXPECT_THROW(compute_fans(Shape{10}), Error);
}

// For n = 256 * 512 = 131072 draws the sample mean has standard deviation sd / sqrt(n) =
// 0.0028 sd, and the sample variance var * sqrt(2 / n) = 0.0039 var (normal; less for a
// uniform): the bounds below are > 5 such standard deviations, so a correct initialiser passes
// for any seed while a wrong scale (e.g. fan_out for fan_in, a missing factor 2 or 3) fails.
TEST(Init, StatisticsMatchTheDefinitions) {
  const Shape shape{256, 512};
  const double glorot_var = 2.0 / (256 + 512), he_var = 2.0 / 256;
  struct Case {
    Init init;
    double var;
    double bound;  // |x| <= bound for the uniform kinds, 0: unbounded
  };
  const Case cases[] = {{Init::GlorotUniform, glorot_var, std::sqrt(6.0 / (256 + 512))},
                        {Init::GlorotNormal, glorot_var, 0},
                        {Init::HeUniform, he_var, std::sqrt(6.0 / 256)},
                        {Init::HeNormal, he_var, 0}};
  for (uint64_t seed : {0u, 1u, 1234u}) {
    for (const Case& c : cases) {
      Rng rng(seed);
      Moments m = moments(initialize(c.init, DType::f32, shape, rng));
      SCOPED_TRACE(std::string(init_name(c.init)) + " seed " + std::to_string(seed));
      EXPECT_LT(std::fabs(m.mean), 0.015 * std::sqrt(c.var));
      EXPECT_NEAR(m.var / c.var, 1.0, 0.02);
      if (c.bound > 0) {
        EXPECT_LE(m.max_abs, c.bound);
        EXPECT_GT(m.max_abs, 0.99 * c.bound);  // the whole interval is used
      } else {
        EXPECT_GT(m.max_abs, 3.5 * std::sqrt(c.var));  // normal tails exist
      }
    }
  }
}

TEST(Init, DeterministicPerSeed) {
  Rng a(42), b(42), c(43);
  Tensor ta = initialize(Init::HeNormal, DType::f32, Shape{8, 8}, a);
  Tensor tb = initialize(Init::HeNormal, DType::f32, Shape{8, 8}, b);
  Tensor tc = initialize(Init::HeNormal, DType::f32, Shape{8, 8}, c);
  EXPECT_TRUE(ta.bitwise_equal(tb));
  EXPECT_FALSE(ta.bitwise_equal(tc));
  // The generator is mt19937_64, whose 10000th output for the default seed 5489 the C++
  // standard fixes ([rand.predef]); uniform() is its top 53 bits.
  Rng r(5489);
  for (int i = 0; i < 9999; ++i) r.uniform();
  EXPECT_EQ(r.uniform(), static_cast<double>(9981545732273789042ull >> 11) * 0x1.0p-53);
}

TEST(Init, BelowIsUniform) {
  Rng r(7);
  int counts[3] = {0, 0, 0};
  for (int i = 0; i < 30000; ++i) ++counts[r.below(3)];
  for (int c : counts) EXPECT_NEAR(c, 10000, 400);  // 400 ~ 4.9 standard deviations
  EXPECT_THROW(r.below(0), Error);
}

TEST(Init, ZerosAndErrors) {
  Rng r(0);
  Tensor z = initialize(Init::Zeros, DType::f32, Shape{5}, r);
  for (int64_t i = 0; i < 5; ++i) EXPECT_EQ(z.get_f64(i), 0.0);
  EXPECT_THROW(initialize(Init::HeUniform, DType::f32, Shape{5}, r), Error);  // no fans
  try {
    initialize(Init::GlorotNormal, DType::i32, Shape{2, 2}, r);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("i32"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace rlx::train
