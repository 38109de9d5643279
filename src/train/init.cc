// Seeded generator and Glorot / He initialisers (include/rlx/train/init.h).
#include "rlx/train/init.h"

#include <cmath>
#include <numbers>

#include "rlx/ir/error.h"

namespace rlx::train {

double Rng::uniform() {
  // Top 53 bits -> a double in [0, 1) with every value equally likely.
  return static_cast<double>(engine_() >> 11) * 0x1.0p-53;
}

double Rng::normal() {
  double u1 = uniform(), u2 = uniform();
  // 1 - u1 is in (0, 1], so the log is finite.
  return std::sqrt(-2.0 * std::log(1.0 - u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

uint64_t Rng::below(uint64_t n) {
  check(n >= 1, "Rng::below: n must be >= 1");
  // Reject the top partial copy of [0, n) so every residue is equally likely.
  const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  uint64_t x;
  do x = engine_();
  while (x >= limit);
  return x % n;
}

Fans compute_fans(const Shape& shape) {
  check(shape.rank() >= 2,
        "fans: weight of shape " + shape.to_string() + " needs rank >= 2 ([in, out] or OI[H]W)");
  if (shape.rank() == 2) return {shape[0], shape[1]};
  int64_t receptive = 1;
  for (int i = 2; i < shape.rank(); ++i) receptive *= shape[i];
  return {shape[1] * receptive, shape[0] * receptive};
}

const char* init_name(Init init) {
  switch (init) {
    case Init::GlorotUniform:
      return "glorot_uniform";
    case Init::GlorotNormal:
      return "glorot_normal";
    case Init::HeUniform:
      return "he_uniform";
    case Init::HeNormal:
      return "he_normal";
    case Init::Zeros:
      return "zeros";
  }
  return "?";
}

Tensor initialize(Init init, DType dtype, const Shape& shape, Rng& rng) {
  check(is_float(dtype), std::string("initialize(") + init_name(init) + "): dtype " +
                             std::string(dtype_name(dtype)) + " is not a float type");
  Tensor t(dtype, shape);
  if (init == Init::Zeros) {
    for (int64_t i = 0; i < t.numel(); ++i) t.set_f64(i, 0.0);
    return t;
  }
  const Fans f = compute_fans(shape);
  const double fan_avg2 = static_cast<double>(f.in + f.out);
  const double fan_in = static_cast<double>(f.in);
  const bool uniform = init == Init::GlorotUniform || init == Init::HeUniform;
  // Variance: Glorot 2 / (fan_in + fan_out), He 2 / fan_in; a uniform U(-a, a) has var a^2/3.
  const double var =
      (init == Init::GlorotUniform || init == Init::GlorotNormal) ? 2.0 / fan_avg2 : 2.0 / fan_in;
  const double a = std::sqrt(3.0 * var), sd = std::sqrt(var);
  for (int64_t i = 0; i < t.numel(); ++i)
    t.set_f64(i, uniform ? rng.uniform(-a, a) : sd * rng.normal());
  return t;
}

}  // namespace rlx::train
