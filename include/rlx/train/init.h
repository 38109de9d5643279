// Parameter initialisation: a seeded, platform-independent generator and the Glorot / He
// initialisers (PyTorch torch.nn.init.xavier_* / kaiming_* definitions).
#pragma once

#include <cstdint>
#include <random>

#include "rlx/ir/tensor.h"

namespace rlx::train {

/// Deterministic generator: std::mt19937_64 (its output sequence is fixed by the C++ standard)
/// with our own conversions, because the std::*_distribution classes are implementation-defined
/// and would give different numbers on other standard libraries. uniform() takes the top 53
/// bits of one draw (u in [0, 1)); normal() is Box-Muller (Box & Muller 1958) on two draws,
/// using the cosine branch only, so each normal consumes exactly two draws.
class Rng {
 public:
  explicit Rng(uint64_t seed) : engine_(seed) {}
  /// Uniform in [0, 1) with 53 random bits.
  double uniform();
  /// Uniform in [lo, hi).
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
  /// Standard normal N(0, 1).
  double normal();
  /// Uniform integer in [0, n) (n >= 1) by rejection, so without modulo bias.
  uint64_t below(uint64_t n);

 private:
  std::mt19937_64 engine_;
};

/// Fan-in / fan-out of a weight as PyTorch's _calculate_fan_in_and_fan_out, but for rlx's
/// layouts: a dense weight [in, out] (x @ w) has fan_in = in, fan_out = out; a conv weight
/// [O, I, k...] (OI[H]W) has fan_in = I * prod(k), fan_out = O * prod(k). Rank 1 (a bias) and
/// rank 0 throw rlx::Error ("fans: weight of shape [10] needs rank >= 2").
struct Fans {
  int64_t in = 0;
  int64_t out = 0;
};
Fans compute_fans(const Shape& shape);

enum class Init {
  GlorotUniform,  ///< U(-a, a), a = sqrt(6 / (fan_in + fan_out))  (xavier_uniform_, gain 1)
  GlorotNormal,   ///< N(0, 2 / (fan_in + fan_out))                (xavier_normal_, gain 1)
  HeUniform,      ///< U(-a, a), a = sqrt(6 / fan_in)              (kaiming_uniform_, relu)
  HeNormal,       ///< N(0, 2 / fan_in)                            (kaiming_normal_, relu)
  Zeros,          ///< all zeros (biases)
};
/// "glorot_uniform", "glorot_normal", "he_uniform", "he_normal" or "zeros".
const char* init_name(Init init);

/// A float tensor of `dtype` and `shape` drawn with `init` from `rng` (row-major order, one or
/// two draws per element as Rng states). Throws rlx::Error for a non-float dtype or, for the
/// Glorot/He kinds, a shape without fans (see compute_fans).
Tensor initialize(Init init, DType dtype, const Shape& shape, Rng& rng);

}  // namespace rlx::train
