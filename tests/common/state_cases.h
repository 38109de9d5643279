// Executable state (CompileOptions::state) checked the same way on every backend: a running
// sum, a KV-cache write by dynamic_update_slice, and every error of the state API. The CPU
// suite (tests/runtime/state_test.cc) and the PJRT suite (tests/backends/pjrt/state_test.cc)
// call these with their own compile function.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>

#include "common/test_util.h"
#include "rlx/ir/graph.h"
#include "rlx/runtime/backend.h"

namespace rlx::testing {

using StateCompile =
    std::function<std::unique_ptr<Executable>(const Graph&, const CompileOptions&)>;

/// acc f32[4] (state) and x f32[4] -> new = acc + x (written back to acc), y = acc * 2.
/// `v` with its node renamed to `name` (so outputs have known names).
inline Value named(Graph& g, Value v, const std::string& name) {
  g.rename(v.node, name);
  return v;
}

inline Graph running_sum_graph(const std::string& name = "sum") {
  Graph g(name);
  Value acc = g.input("acc", DType::f32, Shape{4});
  Value x = g.input("x", DType::f32, Shape{4});
  Value next = named(g, g.add(acc, x), "new");
  Value y = named(g, g.mul(acc, g.scalar(2.0, DType::f32)), "y");
  g.set_outputs({next, y});
  return g;
}

inline CompileOptions running_sum_options() {
  CompileOptions o;
  o.state = {{"acc", "new"}};
  return o;
}

inline Tensor f32_vec(std::vector<double> v) {
  return Tensor::from_doubles(DType::f32, Shape{static_cast<int64_t>(v.size())}, v);
}

/// run() reads the state, returns only the unbound outputs and writes the bound one back;
/// set_state / get_state / reset_state; clones copy the state; share_state shares it.
inline void check_running_sum(const StateCompile& compile) {
  std::unique_ptr<Executable> exe = compile(running_sum_graph(), running_sum_options());
  ASSERT_EQ(exe->inputs().size(), 1u);
  EXPECT_EQ(exe->inputs()[0].name, "x");
  ASSERT_EQ(exe->outputs().size(), 1u);
  EXPECT_EQ(exe->outputs()[0].name, "y");
  ASSERT_EQ(exe->state().size(), 1u);
  EXPECT_EQ(exe->state()[0], (StateSpec{"acc", "new", {DType::f32, Shape{4}}}));
  EXPECT_TRUE(all_close(exe->get_state("acc"), f32_vec({0, 0, 0, 0}), 0, 0));  // starts as zeros

  const Tensor x = f32_vec({1, 2, 3, 4});
  for (int step = 0; step < 3; ++step) {
    std::vector<Tensor> out = exe->run({{"x", x}});
    ASSERT_EQ(out.size(), 1u);
    // y = 2 * acc before this step's update.
    EXPECT_TRUE(all_close(out[0], f32_vec({2.0 * step, 4.0 * step, 6.0 * step, 8.0 * step}), 0, 0))
        << "step " << step;
  }
  EXPECT_TRUE(all_close(exe->get_state("acc"), f32_vec({3, 6, 9, 12}), 0, 0));

  // A clone owns a copy: runs of either leave the other unchanged.
  std::unique_ptr<Executable> twin = exe->clone();
  twin->run({{"x", x}});
  EXPECT_TRUE(all_close(twin->get_state("acc"), f32_vec({4, 8, 12, 16}), 0, 0));
  EXPECT_TRUE(all_close(exe->get_state("acc"), f32_vec({3, 6, 9, 12}), 0, 0));

  exe->set_state("acc", f32_vec({10, 20, 30, 40}));
  EXPECT_TRUE(all_close(exe->run({{"x", x}})[0], f32_vec({20, 40, 60, 80}), 0, 0));
  EXPECT_TRUE(all_close(exe->get_state("acc"), f32_vec({11, 22, 33, 44}), 0, 0));
  exe->reset_state();
  EXPECT_TRUE(all_close(exe->get_state("acc"), f32_vec({0, 0, 0, 0}), 0, 0));
  EXPECT_TRUE(all_close(exe->run({{"x", x}})[0], f32_vec({0, 0, 0, 0}), 0, 0));

  // Another graph with the same state: after share_state both use one storage.
  Graph other("sum_twice");
  {
    Value acc = other.input("acc", DType::f32, Shape{4});
    Value x2 = other.input("x", DType::f32, Shape{4});
    Value next = named(other, other.add(acc, other.add(x2, x2)), "new");
    other.set_outputs({next, named(other, other.neg(acc), "y")});
  }
  std::unique_ptr<Executable> second = compile(other, running_sum_options());
  second->share_state(*exe);
  EXPECT_TRUE(all_close(second->get_state("acc"), f32_vec({1, 2, 3, 4}), 0, 0));
  EXPECT_TRUE(all_close(second->run({{"x", x}})[0], f32_vec({-1, -2, -3, -4}), 0, 0));
  EXPECT_TRUE(all_close(exe->get_state("acc"), f32_vec({3, 6, 9, 12}), 0, 0));
  exe->run({{"x", x}});
  EXPECT_TRUE(all_close(second->get_state("acc"), f32_vec({4, 8, 12, 16}), 0, 0));
}

/// A KV-cache write: cache f32[1, 2, ctx, 4] (state) <- dynamic_update_slice(cache, row, (0, 0,
/// pos, 0)); the run returns the sum of the cache rows up to pos (a read of the new value).
inline Graph cache_write_graph(int64_t ctx) {
  Graph g("cache");
  Value cache = g.input("cache", DType::f32, Shape{1, 2, ctx, 4});
  Value row = g.input("row", DType::f32, Shape{1, 2, 1, 4});
  Value pos = g.input("pos", DType::i32, Shape{});
  Value zero = g.scalar(0.0, DType::i32);
  Value next = named(g, g.dynamic_update_slice(cache, row, {zero, zero, pos, zero}), "next");
  g.set_outputs({next, named(g, g.reduce_sum(next, {0, 1, 3}, false), "total")});
  return g;
}

inline CompileOptions cache_write_options() {
  CompileOptions o;
  o.state = {{"cache", "next"}};
  return o;
}

/// Writes rows at positions 3 and 1 and reads them back through the outputs and get_state.
inline void check_cache_write(const StateCompile& compile) {
  const int64_t ctx = 8;
  std::unique_ptr<Executable> exe = compile(cache_write_graph(ctx), cache_write_options());
  auto row = [](double v) { return Tensor::full(DType::f32, Shape{1, 2, 1, 4}, v); };
  auto pos = [](int64_t p) {
    return Tensor::from_ints(DType::i32, Shape{}, std::vector<int64_t>{p});
  };
  std::vector<Tensor> out = exe->run({{"row", row(1.5)}, {"pos", pos(3)}});
  ASSERT_EQ(out.size(), 1u);
  std::vector<double> want(ctx, 0.0);
  want[3] = 1.5 * 8;
  EXPECT_TRUE(all_close(out[0], Tensor::from_doubles(DType::f32, Shape{ctx}, want), 0, 0));
  out = exe->run({{"row", row(-2)}, {"pos", pos(1)}});
  want[1] = -2.0 * 8;
  EXPECT_TRUE(all_close(out[0], Tensor::from_doubles(DType::f32, Shape{ctx}, want), 0, 0));
  Tensor cache = exe->get_state("cache");
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t p = 0; p < ctx; ++p)
      for (int64_t e = 0; e < 4; ++e) {
        double v = cache.get_f64((h * ctx + p) * 4 + e);
        EXPECT_EQ(v, p == 3 ? 1.5 : p == 1 ? -2.0 : 0.0) << "head " << h << " pos " << p;
      }
}

/// Every error of the state API names what is wrong; a failed call changes nothing.
inline void check_state_errors(const StateCompile& compile) {
  const Graph g = running_sum_graph();
  auto bind = [&](std::vector<StateBinding> b) {
    CompileOptions o;
    o.state = std::move(b);
    return error_of([&] { compile(g, o); });
  };
  EXPECT_EQ(bind({{"nope", "new"}}),
            "state binding 'nope' <- 'new': 'nope' is not an input of graph 'sum' (inputs: acc, "
            "x)");
  EXPECT_EQ(bind({{"acc", "nope"}}),
            "state binding 'acc' <- 'nope': 'nope' is not an output of graph 'sum' (outputs: new, "
            "y)");
  Graph typed("typed");
  {
    Value a = typed.input("a", DType::f32, Shape{4});
    typed.set_outputs({named(typed, typed.reduce_sum(a, {0}, true), "s")});
  }
  CompileOptions o;
  o.state = {{"a", "s"}};
  EXPECT_EQ(error_of([&] { compile(typed, o); }),
            "state binding 'a' <- 's': the input is f32[4] but the output is f32[1] (a state keeps "
            "one type)");
  EXPECT_EQ(bind({{"acc", "new"}, {"acc", "y"}}),
            "state binding 'acc' <- 'y': input 'acc' is already bound");
  EXPECT_EQ(bind({{"acc", "new"}, {"x", "new"}}),
            "state binding 'x' <- 'new': output 'new' is already bound");

  std::unique_ptr<Executable> exe = compile(g, running_sum_options());
  const Tensor x = f32_vec({1, 1, 1, 1});
  EXPECT_EQ(error_of([&] {
              exe->run({{"x", x}, {"acc", x}});
            }),
            "run: 'acc' is state of this executable (set it with set_state), not a run input");
  EXPECT_EQ(error_of([&] { exe->set_state("x", x); }), "set_state: unknown state 'x' (state: acc)");
  EXPECT_EQ(error_of([&] {
              exe->set_state("acc", f32_vec({1, 2}));
            }),
            "set_state 'acc': expected f32[4], got f32[2]");
  EXPECT_EQ(error_of([&] { exe->set_state("acc", Tensor::full(DType::f16, Shape{4}, 1)); }),
            "set_state 'acc': expected f32[4], got f16[4]");
  EXPECT_EQ(error_of([&] { exe->get_state("y"); }), "get_state: unknown state 'y' (state: acc)");
  // Nothing changed by the failed calls.
  EXPECT_TRUE(all_close(exe->get_state("acc"), f32_vec({0, 0, 0, 0}), 0, 0));

  std::unique_ptr<Executable> plain = compile(g, CompileOptions{});
  EXPECT_TRUE(plain->state().empty());
  EXPECT_EQ(error_of([&] { plain->share_state(*exe); }),
            "share_state: state 0 is nothing here but 'acc' f32[4] in the other executable");
  std::unique_ptr<Executable> cache = compile(cache_write_graph(8), cache_write_options());
  EXPECT_EQ(error_of([&] { cache->share_state(*exe); }),
            "share_state: state 0 is 'cache' f32[1,2,8,4] here but 'acc' f32[4] in the other "
            "executable");
}

}  // namespace rlx::testing
