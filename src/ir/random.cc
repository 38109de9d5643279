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
  // jax keeps the draw's top `mantissa` bits m of a w-bit word and returns
  // bitcast(m | bits(1.0)) - 1.0 = m * 2^-mantissa. The same value without shifts or division:
  // the word with its lower bits cleared, converted exactly (its set bits fit dtype's
  // significand), times 2^-w. Every step is exact, so the result is jax's bit for bit.
  auto scaled = [&](Value word, uint64_t keep, DType int_t, int w) {
    Value bits =
        g.logical_and(word, g.scalar(static_cast<double>(static_cast<int64_t>(keep)), int_t));
    return g.mul(g.convert(bits, dtype), g.scalar(std::ldexp(1.0, -w), dtype));
  };
  if (dtype == DType::f64) {
    // 64-bit words y0:y1 (not xored): u = y0 * 2^-32 + (y1 with its low 12 bits cleared) * 2^-64.
    auto word = [&](Value y) { return g.convert(y, DType::i64); };
    return g.add(scaled(word(y0), 0xffffffffu, DType::i64, 32),
                 scaled(word(y1), 0xfffff000u, DType::i64, 64));
  }
  Value x = g.logical_xor(y0, y1);
  if (dtype == DType::f32) {
    // 23 bits of a 32-bit word; i32 holds bit 31 as the sign, so it is added as 0.5 apart.
    return g.add(
        scaled(x, 0x7ffffe00u, DType::i32, 32),
        g.select(g.lt(x, g.scalar(0, DType::i32)), g.scalar(0.5, dtype), g.scalar(0.0, dtype)));
  }
  // jax draws 16-bit words for f16 (10 mantissa bits) and, as bf16 has fewer than 8 mantissa
  // bits, 8-bit words for bf16 (7): the low bits of y0 ^ y1 (a u32 -> u16 / u8 convert).
  return dtype == DType::f16 ? scaled(x, 0xffc0u, DType::i32, 16) : scaled(x, 0xfeu, DType::i32, 8);
}

Value bernoulli(Graph& g, Value key, double p, const Shape& shape) {
  return g.lt(uniform(g, key, shape, DType::f32), g.scalar(p, DType::f32));
}

}  // namespace rlx::random
