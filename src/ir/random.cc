// jax.random's key functions and draws over threefry2x32 (rlx/ir/random.h). Each follows the
// partitionable branch of jax/_src/prng.py (_threefry_random_bits_partitionable,
// _threefry_split_foldlike, threefry_fold_in) and jax/_src/random.py (uniform, bernoulli).
#include "rlx/ir/random.h"

#include <cmath>
#include <string>
#include <vector>

#include "rlx/ir/error.h"

namespace rlx::random {
namespace {

using Ints = std::vector<int64_t>;

// The key's batch dims (all but the last) after checking it is i32[..., 2].
Ints batch_dims(const Graph& g, Value key, const char* fn) {
  const TensorType& t = g.type(key);
  check(t.dtype == DType::i32 && t.shape.rank() >= 1 && t.shape[t.shape.rank() - 1] == 2,
        std::string("random::") + fn + ": key must be i32[..., 2] (two threefry key words), got " +
            t.to_string());
  Ints b = t.shape.dims();
  b.pop_back();
  return b;
}

// Key word w (0 or 1) of every key, shaped [batch..., 1 x extra]: ready to broadcast against a
// draw's counters of rank `extra`.
Value key_word(Graph& g, Value key, const Ints& batch, int w, size_t extra) {
  Ints start(batch.size() + 1, 0), limit = batch;
  start.back() = w;
  limit.push_back(w + 1);
  Ints dims = batch;
  dims.insert(dims.end(), extra, 1);
  return g.reshape(g.slice(key, start, limit), dims);
}

// threefry2x32 of the keys (batch [...]) with counters (0, lo), lo of shape `shape` (its
// leading dims broadcast against the batch after the batch's own dims).
std::pair<Value, Value> encrypt(Graph& g, Value key, const Ints& batch, Value lo) {
  const size_t extra = static_cast<size_t>(g.shape(lo).rank());
  return g.threefry2x32(key_word(g, key, batch, 0, extra), key_word(g, key, batch, 1, extra),
                        g.scalar(0, DType::i32), lo);
}

// The counters 0 .. numel-1 laid out in `shape` (i32).
Value counters(Graph& g, const Shape& shape, const char* fn) {
  const int64_t n = shape.numel();
  check(n < (int64_t{1} << 31), std::string("random::") + fn + ": shape " + shape.to_string() +
                                    " has 2^31 elements or more (counters are i32)");
  if (shape.rank() == 0) return g.scalar(0, DType::i32);
  return g.reshape(g.iota(DType::i32, Shape{n}, 0), shape.dims());
}

// [..., 1] + [..., 1] -> [..., 2].
Value stack_words(Graph& g, Value y0, Value y1) {
  const int64_t r = g.shape(y0).rank();
  return g.concatenate({g.expand_dims(y0, {r}), g.expand_dims(y1, {r})}, r);
}

// x >>> s for i32 bit patterns x and 0 < s < 32, with the ops the IR has: clearing the low s
// bits makes the division by 2^s exact (an arithmetic shift), and the mask drops the sign
// bits it copied in.
Value shift_right_logical(Graph& g, Value x, int s) {
  const auto low = static_cast<double>(int64_t{1} << s);
  Value cleared = g.logical_and(x, g.scalar(-low, DType::i32));
  return g.logical_and(g.div(cleared, g.scalar(low, DType::i32)),
                       g.scalar(static_cast<double>((int64_t{1} << (32 - s)) - 1), DType::i32));
}

}  // namespace

Value key(Graph& g, std::optional<uint64_t> seed) { return g.rng_key(seed); }

Value fold_in(Graph& g, Value key, Value data) {
  const Ints batch = batch_dims(g, key, "fold_in");
  check(is_integer(g.dtype(data)),
        "random::fold_in: data must be an integer array, got " + g.type(data).to_string());
  if (g.dtype(data) != DType::i32) data = g.convert(data, DType::i32);
  // The key words [batch...] broadcast against data as numpy does.
  auto [y0, y1] = g.threefry2x32(key_word(g, key, batch, 0, 0), key_word(g, key, batch, 1, 0),
                                 g.scalar(0, DType::i32), data);
  return stack_words(g, y0, y1);
}

Value split(Graph& g, Value key, int64_t num) {
  Ints batch = batch_dims(g, key, "split");
  check(num >= 0, "random::split: num must be >= 0, got " + std::to_string(num));
  auto [y0, y1] = encrypt(g, key, batch, counters(g, Shape{num}, "split"));
  return stack_words(g, y0, y1);
}

Value bits(Graph& g, Value key, const Shape& shape) {
  const Ints batch = batch_dims(g, key, "bits");
  auto [y0, y1] = encrypt(g, key, batch, counters(g, shape, "bits"));
  return g.logical_xor(y0, y1);
}

Value uniform(Graph& g, Value key, const Shape& shape, DType dtype) {
  const Ints batch = batch_dims(g, key, "uniform");
  check(is_float(dtype), "random::uniform: dtype must be f32, f64, f16 or bf16, got " +
                             std::string(dtype_name(dtype)));
  auto [y0, y1] = encrypt(g, key, batch, counters(g, shape, "uniform"));
  // m, the draw's top `mantissa` bits, is exact in dtype, and so is m * 2^-mantissa: jax's
  // bitcast(m | bits(1.0)) - 1.0 gives the same value.
  Value m;
  int mantissa = 0;
  if (dtype == DType::f64) {
    // 64-bit words y0:y1 (not xored); m = (y0:y1) >>> 12 = y0 * 2^20 + (y1 >>> 12) as i64.
    mantissa = 52;
    auto word = [&](Value y) {
      return g.logical_and(g.convert(y, DType::i64), g.scalar(4294967295.0, DType::i64));
    };
    m = g.add(g.mul(word(y0), g.scalar(1048576.0, DType::i64)),
              g.div(word(y1), g.scalar(4096.0, DType::i64)));
  } else if (dtype == DType::f32) {
    mantissa = 23;
    m = shift_right_logical(g, g.logical_xor(y0, y1), 32 - mantissa);
  } else {
    // jax draws 16-bit words for f16 and, as bf16 has fewer than 8 mantissa bits, 8-bit words
    // for bf16: the low bits of y0 ^ y1 (a u32 -> u16 / u8 convert), then >>> (width - mantissa).
    mantissa = dtype == DType::f16 ? 10 : 7;
    const int width = dtype == DType::f16 ? 16 : 8;
    Value low = g.logical_and(g.logical_xor(y0, y1),
                              g.scalar(static_cast<double>((1 << width) - 1), DType::i32));
    m = g.div(low, g.scalar(static_cast<double>(1 << (width - mantissa)), DType::i32));
  }
  // jax's floats * (maxval - minval) + minval and max(minval, ...) are the identity on [0, 1).
  return g.mul(g.convert(m, dtype), g.scalar(std::ldexp(1.0, -mantissa), dtype));
}

Value bernoulli(Graph& g, Value key, double p, const Shape& shape) {
  return g.lt(uniform(g, key, shape, DType::f32), g.scalar(p, DType::f32));
}

}  // namespace rlx::random
