// Issue 16's training check on pjrt:0 (the XLA CPU plugin): the recurrent language model of
// tests/common/rnn_lm.h (scan over time, lowered to stablehlo.while, and its vjp, a residual
// scan plus a reverse scan) trained with AdamW, params resident on the device: it converges as
// on the CPU backend, and its first steps' losses equal the CPU backend's.
#include <gtest/gtest.h>

#include <cmath>

#include "common/rnn_lm.h"
#include "common/scoped_env.h"
#include "pjrt_test_util.h"
#include "rlx/runtime/session.h"
#include "rlx/train/optimizer.h"
#include "rlx/train/trainer.h"

namespace rlx {
namespace {

TEST(PjrtRnnLm, TrainsWithAdamWAndMatchesCpu) {
  RLX_REQUIRE_PJRT_PLUGIN();
  ::rlx::testing::ScopedEnv env;
  env.set("RLX_PJRT_PLUGIN", pjrt::testing::test_plugin());
  const ::rlx::testing::RnnLmShape s;
  CompileOptions f32;
  f32.precision = PrecisionPolicy{PrecisionMode::AlwaysF32, {}};
  Session xla(Device::parse("pjrt:0"));
  Session cpu(Device::cpu());
  const Graph g = ::rlx::testing::rnn_lm(s);
  train::Trainer t(xla, g, ::rlx::testing::kRnnLmParams, train::AdamW(),
                   ::rlx::testing::rnn_lm_init(s, 7), train::TrainerOptions{f32, true});
  train::Trainer ref(cpu, g, ::rlx::testing::kRnnLmParams, train::AdamW(),
                     ::rlx::testing::rnn_lm_init(s, 7), train::TrainerOptions{f32, true});
  double last = 0;
  for (int k = 0; k < ::rlx::testing::kRnnLmSteps; ++k) {
    TensorMap batch = ::rlx::testing::rnn_lm_batch(s, static_cast<uint64_t>(k));
    last = t.step(batch, 1e-2)[0].get_f64(0);
    ASSERT_TRUE(std::isfinite(last)) << "step " << k;
    // The first steps agree with the CPU backend up to f32 summation order (XLA's dot and
    // reduction order differ from oneDNN's); later steps drift apart chaotically.
    if (k < 10) {
      double want = ref.step(batch, 1e-2)[0].get_f64(0);
      EXPECT_NEAR(last, want, 1e-4 * std::max(1.0, std::abs(want))) << "step " << k;
    }
  }
  EXPECT_LT(last, ::rlx::testing::kRnnLmConverged);
}

}  // namespace
}  // namespace rlx
