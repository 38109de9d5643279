// Asynchronous dispatch (Executable::run_async, Trainer::step_async) on the XLA plugin: results
// bit-equal to synchronous runs, state chained on the device, reads twice, unread results
// dropped; and device failures through a plugin that injects them (fault_plugin/): an
// asynchronous error surfaces at the first read naming the run, and a run that fails after
// taking the donated state resets the state and says so, one that fails before keeps it.
#include <gtest/gtest.h>

#include <cstring>

#include "common/scoped_env.h"
#include "common/state_cases.h"
#include "common/test_util.h"
#include "pjrt_test_util.h"
#include "rlx/train/init.h"
#include "rlx/train/loss.h"
#include "rlx/train/trainer.h"

namespace rlx::pjrt {
namespace {

using rlx::testing::error_of;
using rlx::testing::f32_vec;

bool bit_equal(const Tensor& a, const Tensor& b) {
  return a.type() == b.type() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

std::unique_ptr<Executable> compile_on(const std::shared_ptr<Backend>& backend, const Graph& g,
                                       const CompileOptions& o = {}) {
  CompileOptions f32 = o;
  f32.precision = PrecisionPolicy{PrecisionMode::AlwaysF32, {}};
  return backend->compile(g, f32, Device::parse("pjrt:0"));
}

// x f32[8,16] -> tanh(x @ w + b), sum of squares: two outputs.
Graph dense_graph() {
  Graph g("dense");
  Value x = g.input("x", DType::f32, Shape{8, 16});
  Value w = g.param("w", DType::f32, Shape{16, 4});
  Value b = g.param("b", DType::f32, Shape{4});
  Value h = g.tanh(g.add(g.matmul(x, w), b));
  g.set_outputs({h, g.reduce_sum(g.mul(h, h), {0, 1}, false)});
  return g;
}

TensorMap dense_params() {
  train::Rng rng(3);
  return {
      {"w", train::initialize(train::Init::GlorotUniform, DType::f32, {16, 4}, rng)},
      {"b", Tensor::from_doubles(DType::f32, Shape{4}, std::vector<double>{0.1, -0.2, 0.3, 0})}};
}

Tensor dense_input(uint64_t seed) {
  train::Rng rng(seed);
  return train::initialize(train::Init::GlorotUniform, DType::f32, {8, 16}, rng);
}

TEST(PjrtAsync, ResultsEqualSynchronousRunsBitForBit) {
  RLX_REQUIRE_PJRT_PLUGIN();
  std::unique_ptr<Executable> exe = compile_on(testing::test_backend(), dense_graph());
  for (const auto& [name, t] : dense_params()) exe->set_param(name, t);
  for (uint64_t seed : {1, 2, 3}) {
    TensorMap in{{"x", dense_input(seed)}};
    std::vector<Tensor> sync = exe->run(in);
    AsyncResult async = exe->run_async(in);
    ASSERT_EQ(async.size(), 2u);
    std::vector<Tensor> got = async.outputs();
    ASSERT_EQ(got.size(), sync.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(bit_equal(got[i], sync[i])) << i;
    EXPECT_EQ(async.label().rfind("run ", 0), 0u) << async.label();
    EXPECT_NE(async.label().find(" of 'dense' on pjrt:0"), std::string::npos) << async.label();
  }
}

TEST(PjrtAsync, ReadTwiceAndInAnyOrder) {
  RLX_REQUIRE_PJRT_PLUGIN();
  std::unique_ptr<Executable> exe = compile_on(testing::test_backend(), dense_graph());
  for (const auto& [name, t] : dense_params()) exe->set_param(name, t);
  TensorMap in{{"x", dense_input(5)}};
  std::vector<Tensor> sync = exe->run(in);
  AsyncResult r = exe->run_async(in);
  r.block_until_ready();
  r.block_until_ready();
  const Tensor& second = r.output(1);  // out of order, before output 0
  EXPECT_TRUE(bit_equal(second, sync[1]));
  EXPECT_TRUE(bit_equal(r.output(0), sync[0]));
  EXPECT_TRUE(bit_equal(r.output(0), sync[0]));  // again: the same host copy
  EXPECT_EQ(r.output(0).data(), r.output(0).data());
  std::vector<Tensor> all = r.outputs();
  EXPECT_TRUE(bit_equal(all[0], sync[0]));
  EXPECT_TRUE(bit_equal(all[1], sync[1]));
  EXPECT_EQ(error_of([&] { r.output(2); }), "AsyncResult: output 2 of a run with 2 outputs");
  // Argument errors are thrown by run_async itself, before anything runs.
  EXPECT_EQ(error_of([&] {
              exe->run_async({{"x", Tensor(DType::f32, Shape{16, 8})}});
            }),
            "run: input 'x': expected f32[8,16], got f32[16,8]");
}

// N run_async calls on resident state chain on the device; one read at the end equals N
// synchronous runs, and results dropped unread change nothing.
TEST(PjrtAsync, ChainedStateEqualsSynchronousRuns) {
  RLX_REQUIRE_PJRT_PLUGIN();
  Graph g = rlx::testing::running_sum_graph();
  std::unique_ptr<Executable> sync =
      compile_on(testing::test_backend(), g, rlx::testing::running_sum_options());
  std::unique_ptr<Executable> async =
      compile_on(testing::test_backend(), g, rlx::testing::running_sum_options());
  const Tensor start = f32_vec({0.1, -2, 3.5, 1e-3});
  sync->set_state("acc", start);
  async->set_state("acc", start);
  std::vector<Tensor> last_sync;
  std::vector<AsyncResult> results;
  for (int k = 0; k < 20; ++k) {
    TensorMap in{{"x", f32_vec({0.3 * k, -0.7, 1.0 / (k + 1), 2.5})}};
    last_sync = sync->run(in);
    results.push_back(async->run_async(in));
  }
  results.erase(results.begin(), results.begin() + 10);  // ten dropped unread
  EXPECT_TRUE(bit_equal(results.back().output(0), last_sync[0]));
  EXPECT_TRUE(bit_equal(async->get_state("acc"), sync->get_state("acc")));
  // Destroying the rest unread, then going on, is safe.
  results.clear();
  async->run_async({{"x", f32_vec({1, 1, 1, 1})}});  // result dropped at once
  sync->run({{"x", f32_vec({1, 1, 1, 1})}});
  EXPECT_TRUE(bit_equal(async->get_state("acc"), sync->get_state("acc")));
}

Graph mlp_loss() {
  Graph g("mlp");
  Value x = g.input("x", DType::f32, {16, 8});
  Value y = g.input("labels", DType::i32, {16});
  Value w1 = g.param("w1", DType::f32, {8, 32});
  Value b1 = g.param("b1", DType::f32, {32});
  Value w2 = g.param("w2", DType::f32, {32, 4});
  Value h = g.relu(g.add(g.matmul(x, w1), b1));
  g.set_outputs({train::softmax_cross_entropy_loss(g, g.matmul(h, w2), y)});
  return g;
}

TensorMap mlp_init() {
  train::Rng rng(0);
  return {{"w1", train::initialize(train::Init::HeUniform, DType::f32, {8, 32}, rng)},
          {"b1", Tensor::full(DType::f32, {32}, 0.0)},
          {"w2", train::initialize(train::Init::HeUniform, DType::f32, {32, 4}, rng)}};
}

TensorMap mlp_batch(int k) {
  train::Rng rng(static_cast<uint64_t>(100 + k));
  Tensor y(DType::i32, {16});
  for (int64_t i = 0; i < 16; ++i) y.data_as<int32_t>()[i] = static_cast<int32_t>((i + k) % 4);
  return {{"x", train::initialize(train::Init::GlorotUniform, DType::f32, {16, 8}, rng)},
          {"labels", y}};
}

// Trainer::step_async: N steps dispatched, then the losses and params read once, equal N
// step() calls bit for bit.
TEST(PjrtAsync, TrainerStepAsyncEqualsStep) {
  RLX_REQUIRE_PJRT_PLUGIN();
  ::rlx::testing::ScopedEnv env;
  env.set("RLX_PJRT_PLUGIN", testing::test_plugin());
  Session session(Device::parse("pjrt:0"));
  CompileOptions f32;
  f32.precision = PrecisionPolicy{PrecisionMode::AlwaysF32, {}};
  const std::vector<std::string> wrt = {"w1", "b1", "w2"};
  train::Trainer sync(session, mlp_loss(), wrt, train::AdamW(), mlp_init(),
                      train::TrainerOptions{f32, true});
  train::Trainer async(session, mlp_loss(), wrt, train::AdamW(), mlp_init(),
                       train::TrainerOptions{f32, true});
  std::vector<Tensor> sync_losses;
  std::vector<AsyncResult> losses;
  for (int k = 0; k < 12; ++k) {  // batches 0, 1, 2, 0, 1, 2, ...
    sync_losses.push_back(sync.step(mlp_batch(k % 3), 1e-2)[0]);
    losses.push_back(async.step_async(mlp_batch(k % 3), 1e-2));
  }
  EXPECT_EQ(async.num_steps(), 12);
  for (const auto& name : wrt) EXPECT_TRUE(bit_equal(async.param(name), sync.param(name))) << name;
  EXPECT_TRUE(bit_equal(async.state("w1", "m"), sync.state("w1", "m")));
  for (int k = 0; k < 12; ++k)
    EXPECT_TRUE(
        bit_equal(losses[static_cast<size_t>(k)].output(0), sync_losses[static_cast<size_t>(k)]))
        << k;
  // It trains: the loss on batch 0 falls from step 1 to step 10.
  EXPECT_LT(losses[9].output(0).get_f64(0), losses[0].output(0).get_f64(0));
  // Host-copied state: step_async runs step() and returns a finished result.
  train::Trainer host(session, mlp_loss(), wrt, train::AdamW(), mlp_init(),
                      train::TrainerOptions{f32, false});
  AsyncResult first = host.step_async(mlp_batch(0), 1e-2);
  EXPECT_TRUE(bit_equal(first.output(0), sync_losses[0]));
}

// The fault-injecting plugin wrapping the real one (RLX_FAULT_MODE chooses the failure).
std::shared_ptr<Backend> fault_backend() {
  static std::shared_ptr<Backend> backend = [] {
    ::setenv("RLX_FAULT_PLUGIN_TARGET", testing::test_plugin().c_str(), 1);
    return make_pjrt_backend(RLX_PJRT_FAULT_PLUGIN);
  }();
  return backend;
}

TEST(PjrtAsync, DeviceErrorSurfacesAtTheFirstRead) {
  RLX_REQUIRE_PJRT_PLUGIN();
  std::unique_ptr<Executable> exe = compile_on(fault_backend(), rlx::testing::running_sum_graph(),
                                               rlx::testing::running_sum_options());
  exe->set_state("acc", f32_vec({1, 2, 3, 4}));
  AsyncResult good = exe->run_async({{"x", f32_vec({1, 1, 1, 1})}});  // run 1
  AsyncResult bad, next, dropped;
  {
    ::rlx::testing::ScopedEnv env;
    env.set("RLX_FAULT_MODE", "async_error");
    bad = exe->run_async({{"x", f32_vec({1, 1, 1, 1})}});      // run 2: dispatch succeeds
    dropped = exe->run_async({{"x", f32_vec({1, 1, 1, 1})}});  // run 3
  }
  dropped = AsyncResult();  // a failed run's result destroyed unread
  EXPECT_TRUE(bit_equal(good.output(0), f32_vec({2, 4, 6, 8})));
  const std::string want =
      "run 2 of 'sum' on pjrt:0 failed: pjrt: copying a result to the host: fault plugin: "
      "injected asynchronous device error";
  EXPECT_EQ(error_of([&] { bad.output(0); }), want);
  EXPECT_EQ(error_of([&] { bad.output(0); }), want);  // kept, thrown at every read
  EXPECT_EQ(error_of([&] { bad.block_until_ready(); }), want);
  // The state now holds the failed run's output: the next run computes from it and fails too,
  // and get_state says what to do.
  next = exe->run_async({{"x", f32_vec({1, 1, 1, 1})}});  // run 4
  EXPECT_EQ(error_of([&] { next.block_until_ready(); }),
            "run 4 of 'sum' on pjrt:0 failed: pjrt: waiting for a result: fault plugin: "
            "injected asynchronous device error");
  EXPECT_EQ(error_of([&] { exe->get_state("acc"); }),
            "state 'acc': pjrt: copying a result to the host: fault plugin: injected "
            "asynchronous device error (the state holds the output of a failed run: set_state() "
            "or reset_state() it before the next run)");
  exe->set_state("acc", f32_vec({1, 2, 3, 4}));
  EXPECT_TRUE(bit_equal(exe->run({{"x", f32_vec({0, 0, 0, 0})}})[0], f32_vec({2, 4, 6, 8})));
  EXPECT_TRUE(bit_equal(exe->get_state("acc"), f32_vec({1, 2, 3, 4})));
}

TEST(PjrtAsync, FailureAfterDonationResetsTheStateAndSaysSo) {
  RLX_REQUIRE_PJRT_PLUGIN();
  std::unique_ptr<Executable> exe = compile_on(fault_backend(), rlx::testing::running_sum_graph(),
                                               rlx::testing::running_sum_options());
  exe->set_state("acc", f32_vec({1, 2, 3, 4}));
  exe->run({{"x", f32_vec({1, 1, 1, 1})}});
  {
    ::rlx::testing::ScopedEnv env;
    env.set("RLX_FAULT_MODE", "fail_after_donation");
    for (bool async : {false, true}) {
      std::string msg = error_of([&] {
        TensorMap in{{"x", f32_vec({1, 1, 1, 1})}};
        if (async)
          exe->run_async(in);
        else
          exe->run(in);
      });
      EXPECT_EQ(msg,
                "pjrt: execute failed: fault plugin: injected failure after the run took its "
                "donated arguments; the failed run consumed the donated state 'acc', so every "
                "state of this executable was reset to zeros: set_state() it again (e.g. from a "
                "checkpoint) before the next run")
          << async;
      EXPECT_TRUE(bit_equal(exe->get_state("acc"), f32_vec({0, 0, 0, 0})));
      exe->set_state("acc", f32_vec({2, 3, 4, 5}));
    }
  }
  // Usable again from the state set after the failure.
  EXPECT_TRUE(bit_equal(exe->run({{"x", f32_vec({1, 1, 1, 1})}})[0], f32_vec({4, 6, 8, 10})));
  EXPECT_TRUE(bit_equal(exe->get_state("acc"), f32_vec({3, 4, 5, 6})));
}

TEST(PjrtAsync, FailureBeforeTheRunKeepsTheState) {
  RLX_REQUIRE_PJRT_PLUGIN();
  std::unique_ptr<Executable> exe = compile_on(fault_backend(), rlx::testing::running_sum_graph(),
                                               rlx::testing::running_sum_options());
  exe->set_state("acc", f32_vec({1, 2, 3, 4}));
  AsyncResult pending = exe->run_async({{"x", f32_vec({1, 1, 1, 1})}});  // acc -> 2, 3, 4, 5
  {
    ::rlx::testing::ScopedEnv env;
    env.set("RLX_FAULT_MODE", "fail_before_execute");
    EXPECT_EQ(error_of([&] {
                exe->run_async({{"x", f32_vec({9, 9, 9, 9})}});
              }),
              "pjrt: execute failed: fault plugin: injected failure before the run (the state "
              "is unchanged)");
  }
  EXPECT_TRUE(bit_equal(exe->get_state("acc"), f32_vec({2, 3, 4, 5})));
  EXPECT_TRUE(bit_equal(pending.output(0), f32_vec({2, 4, 6, 8})));
}

// The SPMD backend: a state sharded P('data') over 2 devices chains on the devices under
// run_async (equal to synchronous runs), and a run failing after donation resets it.
TEST(PjrtAsync, ShardedStateOnAMesh) {
  RLX_REQUIRE_PJRT_PLUGIN();
  ShardingConfig config{Mesh({{"data", 2}}),
                        {{"acc", PartitionSpec({"data"})}, {"x", PartitionSpec({"data"})}},
                        {},
                        {}};
  fault_backend();  // sets RLX_FAULT_PLUGIN_TARGET
  auto backend = make_pjrt_spmd_backend(config, RLX_PJRT_FAULT_PLUGIN);
  Graph g = rlx::testing::running_sum_graph();
  std::unique_ptr<Executable> sync = compile_on(backend, g, rlx::testing::running_sum_options());
  std::unique_ptr<Executable> async = compile_on(backend, g, rlx::testing::running_sum_options());
  std::vector<Tensor> last_sync;
  AsyncResult last;
  for (int k = 0; k < 8; ++k) {
    TensorMap in{{"x", f32_vec({0.5 * k, -1, 2, 1.0 / (k + 1)})}};
    last_sync = sync->run(in);
    last = async->run_async(in);
  }
  EXPECT_TRUE(bit_equal(last.output(0), last_sync[0]));
  EXPECT_TRUE(bit_equal(async->get_state("acc"), sync->get_state("acc")));
  ::rlx::testing::ScopedEnv env;
  env.set("RLX_FAULT_MODE", "fail_after_donation");
  std::string msg = error_of([&] { async->run_async({{"x", f32_vec({1, 1, 1, 1})}}); });
  EXPECT_NE(msg.find("the failed run consumed the donated state 'acc', so every state of this "
                     "executable was reset to zeros"),
            std::string::npos)
      << msg;
  EXPECT_TRUE(bit_equal(async->get_state("acc"), f32_vec({0, 0, 0, 0})));
  env.set("RLX_FAULT_MODE", "async_error");
  AsyncResult bad = async->run_async({{"x", f32_vec({1, 1, 1, 1})}});
  EXPECT_NE(error_of([&] { bad.output(0); })
                .find("failed: pjrt: copying a result to the host: fault plugin: injected "
                      "asynchronous device error"),
            std::string::npos);
}

}  // namespace
}  // namespace rlx::pjrt
