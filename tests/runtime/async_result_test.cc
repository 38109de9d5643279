// AsyncResult (rlx/runtime/executable.h): a finished result, a pending one that fetches each
// output once and keeps the first error, and Executable::run_async's default (the CPU backend
// runs synchronously and returns outputs equal to run()).
#include <gtest/gtest.h>

#include <cstring>

#include "common/test_util.h"
#include "rlx/runtime/session.h"

namespace rlx {
namespace {

using rlx::testing::error_of;

// Output i is the scalar i + 1; fails at every call from `fail_from` on. Counts the calls.
struct FakePending : AsyncResult::Pending {
  explicit FakePending(int* fetches, int* waits, int fail_from = 1 << 30)
      : fetches(fetches), waits(waits), fail_from(fail_from) {}
  void wait() override {
    if (++*waits + *fetches > fail_from) throw Error("device lost");
  }
  Tensor fetch(size_t i) override {
    if (++*fetches + *waits > fail_from) throw Error("device lost");
    return Tensor::full(DType::f32, Shape{}, static_cast<double>(i + 1));
  }
  int *fetches, *waits;
  int fail_from;
};

TEST(AsyncResult, FinishedResult) {
  AsyncResult r({Tensor::full(DType::f32, Shape{2}, 3.0)});
  ASSERT_EQ(r.size(), 1u);
  r.block_until_ready();
  EXPECT_EQ(r.output(0).get_f64(1), 3.0);
  EXPECT_EQ(r.label(), "");
  EXPECT_EQ(error_of([&] { r.output(1); }), "AsyncResult: output 1 of a run with 1 outputs");
  AsyncResult empty;
  EXPECT_EQ(empty.size(), 0u);
  EXPECT_TRUE(empty.outputs().empty());
}

TEST(AsyncResult, FetchesEachOutputOnce) {
  int fetches = 0, waits = 0;
  AsyncResult r(std::make_unique<FakePending>(&fetches, &waits), 3, "run 7 of 'g' on x:0");
  EXPECT_EQ(fetches, 0);  // nothing is read before the first access
  EXPECT_EQ(r.output(2).get_f64(0), 3.0);
  EXPECT_EQ(r.output(2).get_f64(0), 3.0);
  EXPECT_EQ(fetches, 1);
  std::vector<Tensor> all = r.outputs();
  ASSERT_EQ(all.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(all[i].get_f64(0), static_cast<double>(i + 1));
  EXPECT_EQ(fetches, 3);
  r.block_until_ready();  // already on the host: no wait
  EXPECT_EQ(waits, 0);
  AsyncResult moved = std::move(r);
  EXPECT_EQ(moved.output(0).get_f64(0), 1.0);
  EXPECT_EQ(fetches, 3);
}

TEST(AsyncResult, ErrorSurfacesAtTheFirstReadAndStays) {
  int fetches = 0, waits = 0;
  AsyncResult r(std::make_unique<FakePending>(&fetches, &waits, 1), 2, "run 3 of 'g' on x:0");
  EXPECT_EQ(r.output(0).get_f64(0), 1.0);  // the first call succeeds
  const std::string want = "run 3 of 'g' on x:0 failed: device lost";
  EXPECT_EQ(error_of([&] { r.output(1); }), want);
  EXPECT_EQ(error_of([&] { r.output(1); }), want);
  EXPECT_EQ(error_of([&] { r.block_until_ready(); }), want);
  EXPECT_EQ(error_of([&] { r.outputs(); }), want);
  EXPECT_EQ(fetches, 2);  // the pending run was dropped after its error
  int f2 = 0, w2 = 0;
  AsyncResult w(std::make_unique<FakePending>(&f2, &w2, 0), 1, "run 1 of 'g' on x:0");
  EXPECT_EQ(error_of([&] { w.block_until_ready(); }), "run 1 of 'g' on x:0 failed: device lost");
  EXPECT_EQ(error_of([&] { w.output(0); }), "run 1 of 'g' on x:0 failed: device lost");
}

TEST(AsyncResult, DestroyingAnUnreadResultIsSafe) {
  int fetches = 0, waits = 0;
  { AsyncResult r(std::make_unique<FakePending>(&fetches, &waits), 2, "run"); }
  EXPECT_EQ(fetches + waits, 0);
}

TEST(AsyncResult, CpuRunAsyncEqualsRun) {
  Graph g("g");
  Value x = g.input("x", DType::f32, Shape{3});
  g.set_outputs({g.exp(x), g.mul(x, x)});
  Session s(Device::parse("cpu"));
  std::shared_ptr<Executable> exe = s.compile(g);
  TensorMap in{{"x", Tensor::from_doubles(DType::f32, Shape{3}, std::vector<double>{1, -2, 0.5})}};
  std::vector<Tensor> want = exe->run(in);
  AsyncResult r = exe->run_async(in);
  ASSERT_EQ(r.size(), 2u);
  for (size_t i = 0; i < 2; ++i)
    EXPECT_EQ(std::memcmp(r.output(i).data(), want[i].data(), want[i].nbytes()), 0) << i;
  EXPECT_EQ(error_of([&] { exe->run_async({}); }).rfind("run: missing input 'x'", 0), 0u);
}

}  // namespace
}  // namespace rlx
