// jax.random's key functions and draws as graph builders over the threefry2x32 and rng_key ops
// (counter-based and stateless: the same key always gives the same numbers, on every backend).
// Each output equals jax.random's bit for bit with jax's threefry2x32 PRNG under
// jax_threefry_partitionable=True (the default from jax 0.5.0 on): element i of a draw of any
// shape is the cipher of the counter i, so a draw does not depend on how it is split or batched.
// 32-bit words are i32 bit patterns (docs/ir.md "Random numbers").
//
// Keys are i32[..., 2]: the leading dims are a batch of independent keys (as jax.vmap over keys),
// and a draw of `shape` from keys [...] has shape [..., shape...]. Every function throws
// rlx::Error naming itself when the key is not i32[..., 2].
#pragma once

#include <cstdint>
#include <optional>

#include "rlx/ir/graph.h"

namespace rlx::random {

/// The key i32[2] of `seed` (jax.random.key_data(jax.random.PRNGKey(seed))), or without one
/// of the compile seed (CompileOptions::seed): Graph::rng_key.
Value key(Graph& g, std::optional<uint64_t> seed = std::nullopt);

/// jax.random.fold_in(key, data): a new key per element of `data` (an integer array, its low 32
/// bits taken as jnp.uint32 does), threefry2x32(key, (0, data)). Keys [...K] and data [...D]
/// broadcast: the result is i32[broadcast(K, D)..., 2].
Value fold_in(Graph& g, Value key, Value data);

/// jax.random.split(key, num): keys i32[..., 2] -> i32[..., num, 2]; key j of the split is
/// fold_in(key, j) (the partitionable split).
Value split(Graph& g, Value key, int64_t num);

/// jax.random.bits(key, shape) (uint32) as i32 bit patterns: keys i32[..., 2] -> i32[...,
/// shape...], element i = y0 ^ y1 of threefry2x32(key, (0, i)). Throws rlx::Error for a shape of
/// 2^31 elements or more (counters are i32 iotas).
Value bits(Graph& g, Value key, const Shape& shape);

/// jax.random.uniform(key, shape, dtype) in [0, 1) for dtype f32, f64, f16 or bf16: the top
/// mantissa-width bits m of random bits as m * 2^-mantissa (exact; as jax, 64-bit words y0:y1
/// for f64, the low 16 bits of y0 ^ y1 for f16 and its low 8 bits for bf16, whose 7-bit
/// mantissa makes jax draw bytes). Other ranges are the caller's u * (hi - lo) + lo: jax's
/// minval/maxval form is that expression, which XLA contracts into an FMA, so it is not
/// reproduced here bit for bit. Throws rlx::Error for another dtype.
Value uniform(Graph& g, Value key, const Shape& shape, DType dtype = DType::f32);

/// jax.random.bernoulli(key, p, shape) with an f32 p (jax's default, x64 off): the bool
/// uniform(key, shape, f32) < p, so P(true) = p.
Value bernoulli(Graph& g, Value key, double p, const Shape& shape);

}  // namespace rlx::random
