// A generator of random well-typed graphs (fixed seeds) over a broad slice of the op set, for
// "semantics preserved" tests of passes and pipelines: evaluate before and after, compare.
#pragma once

#include <random>
#include <string>
#include <vector>

#include "../common/test_util.h"
#include "rlx/ir/evaluator.h"
#include "rlx/ir/graph.h"

namespace rlx::testing {

/// A generated graph with random feeds for its inputs and params.
struct RandomGraph {
  Graph graph;
  TensorMap feeds;
};

/// Builds a graph of about `num_ops` f32 ops from `seed`: elementwise unary/binary with numpy
/// broadcasting, select/compare, reductions, reshape/transpose/slice/concatenate, matmul with
/// a param, softmax, layer_norm, activations and constants. Every node is well typed by
/// construction; the same seed always gives the same graph.
inline RandomGraph make_random_graph(uint64_t seed, int num_ops = 12) {
  std::mt19937_64 rng(seed);
  auto pick = [&](int64_t n) { return static_cast<int64_t>(rng() % static_cast<uint64_t>(n)); };
  RandomGraph r{Graph("random"), {}};
  Graph& g = r.graph;
  std::vector<Value> pool;
  int n_inputs = 1 + static_cast<int>(pick(3));
  for (int i = 0; i < n_inputs; ++i) {
    std::vector<int64_t> dims;
    int rank = 1 + static_cast<int>(pick(3));
    for (int d = 0; d < rank; ++d) dims.push_back(1 + pick(4));
    std::string name = "x" + std::to_string(i);
    pool.push_back(g.input(name, DType::f32, Shape(dims)));
    r.feeds[name] = random_tensor(DType::f32, Shape(dims), seed * 31 + static_cast<uint64_t>(i));
  }
  auto any = [&] { return pool[static_cast<size_t>(pick(static_cast<int64_t>(pool.size())))]; };
  // A value whose shape broadcasts with x: x itself, a trailing suffix of x's dims (as a new
  // constant), a scalar, or an existing value of the same shape.
  auto partner = [&](Value x) -> Value {
    const Shape& s = g.shape(x);
    switch (pick(4)) {
      case 0: {
        std::vector<int64_t> suffix(s.dims().begin() + pick(s.rank() + 1), s.dims().end());
        return g.constant(random_tensor(DType::f32, Shape(suffix), rng()));
      }
      case 1:
        return g.scalar(static_cast<double>(pick(5)) - 2.0, DType::f32);
      case 2:
        for (Value v : pool)
          if (g.shape(v) == s && !(v == x)) return v;
        return x;
      default:
        return x;
    }
  };
  for (int step = 0; step < num_ops; ++step) {
    Value x = any();
    if (g.shape(x).rank() == 0) x = g.reshape(x, {1});  // ops below pick axes of x
    const Shape s = g.shape(x);
    Value y;
    switch (pick(16)) {
      case 0:
        y = g.neg(x);
        break;
      case 1:
        y = g.tanh(x);
        break;
      case 2:
        // The bound is itself a constant expression, which fold-constants evaluates.
        y = g.exp(g.min(x, g.add(g.scalar(2.0, DType::f32), g.scalar(1.0, DType::f32))));
        break;
      case 3:
        // sqrt(|x| + 1), not sqrt(|x|): near 0 sqrt turns a legitimate 1e-8 difference (a
        // composite computed in double vs its f32 decomposition, e.g. gelu(-6)) into 1e-4.
        y = g.sqrt(g.add(g.abs(x), g.scalar(1.0, DType::f32)));
        break;
      case 4:
        y = g.add(x, partner(x));
        break;
      case 5:
        y = g.mul(x, partner(x));
        break;
      case 6:
        y = g.sub(partner(x), x);
        break;
      case 7:
        y = g.max(x, partner(x));
        break;
      case 8: {
        Value p = partner(x);
        y = g.select(g.gt(x, p), x, p);
        break;
      }
      case 9: {
        int64_t axis = pick(s.rank());
        bool keep = pick(2) == 0;
        y = pick(2) ? g.reduce_sum(x, {axis}, keep) : g.reduce_max(x, {axis}, keep);
        break;
      }
      case 10: {
        std::vector<int64_t> perm(static_cast<size_t>(s.rank()));
        for (int i = 0; i < s.rank(); ++i) perm[static_cast<size_t>(i)] = s.rank() - 1 - i;
        y = g.transpose(x, perm);
        break;
      }
      case 11:
        y = g.reshape(x, {-1});
        break;
      case 12:
        y = g.softmax(x, -1);
        break;
      case 13: {
        int64_t d = s[s.rank() - 1];
        Value scale = g.constant(random_tensor(DType::f32, Shape{d}, rng(), 0.5, 1.5));
        Value bias = g.constant(random_tensor(DType::f32, Shape{d}, rng()));
        y = g.layer_norm(x, scale, bias, -1, 1e-5);
        break;
      }
      case 14: {
        int64_t k = s[s.rank() - 1], n = 1 + pick(4);
        std::string name = "w" + std::to_string(step);
        Value w = g.param(name, DType::f32, Shape{k, n});
        r.feeds[name] = random_tensor(DType::f32, Shape{k, n}, rng());
        Value mm = g.matmul(x, w);
        switch (pick(3)) {
          case 0:
            y = g.gelu(mm);
            break;
          case 1: {  // matmul + bias (+ relu): what fuse-matmul-bias-act looks for
            Value bias = g.constant(random_tensor(DType::f32, Shape{n}, rng()));
            y = pick(2) ? g.relu(g.add(mm, bias)) : g.add(bias, mm);
            break;
          }
          default:
            y = mm;
        }
        break;
      }
      default: {
        int64_t axis = pick(s.rank());
        if (pick(2)) {
          y = g.concatenate({x, x}, axis);
        } else {
          std::vector<int64_t> start(static_cast<size_t>(s.rank()), 0), limit = s.dims();
          limit[static_cast<size_t>(axis)] = std::max<int64_t>(1, s[static_cast<int>(axis)] - 1);
          y = g.slice(x, start, limit);
        }
        break;
      }
    }
    pool.push_back(y);
  }
  std::vector<Value> outs{pool.back()};
  Value extra = any();
  if (!(extra == pool.back())) outs.push_back(extra);
  g.set_outputs(outs);
  return r;
}

}  // namespace rlx::testing
