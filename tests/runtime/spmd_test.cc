// The CPU backend over a simulated device axis: N clones of one compiled executable run on N
// threads by run_spmd, their collective kernels exchanging through one in-process
// Communicator; every collective for group sizes 1, 2, 4 and the layouts [[0,1],[2,3]] /
// [[0,2],[1,3]] equals evaluate_spmd (the reference evaluator), also over repeated runs; and the
// errors (groups that do not cover the run, a failing device that must not hang the others).
#include "rlx/runtime/spmd.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "common/collective_layouts.h"
#include "rlx/ir/collective.h"
#include "rlx/ir/error.h"
#include "rlx/ir/evaluator.h"
#include "rlx/runtime/session.h"

namespace rlx {
namespace {

using testing::Layout;
using testing::layouts;

AttrMap attrs(const Layout& l, AttrMap op) {
  AttrMap a = collective_attrs(l.groups, "i", l.groups.empty() ? l.devices : 0);
  for (const auto& [k, v] : op.entries()) a.set(k, v);
  return a;
}

// Every collective in one program, each followed by arithmetic the next one reads.
Graph program(const Layout& l, DType t) {
  Graph g("spmd");
  Value x = g.input("x", t, Shape{4, 8});
  Value s = g.emit1(OpKind::AllReduce, {x}, attrs(l, {{"reduce", std::string("sum")}}));
  Value mx = g.emit1(OpKind::AllReduce, {g.sub(s, x)}, attrs(l, {{"reduce", std::string("max")}}));
  Value ag = g.emit1(OpKind::AllGather, {g.add(mx, x)}, attrs(l, {{"axis", int64_t{1}}}));
  Value rs = g.emit1(OpKind::ReduceScatter, {ag}, attrs(l, {{"scatter_dimension", int64_t{1}}}));
  Value a2a = g.emit1(OpKind::AllToAll, {g.mul(rs, x)},
                      attrs(l, {{"split_axis", int64_t{1}}, {"concat_axis", int64_t{0}}}));
  std::vector<Value> outs{s, mx, ag, rs, a2a};
  if (is_float(t))
    outs.push_back(g.emit1(OpKind::AllReduce, {x}, attrs(l, {{"reduce", std::string("mean")}})));
  g.set_outputs(outs);
  return g;
}

std::vector<TensorMap> feeds(int64_t n, DType t, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> u(-8, 8);
  std::vector<TensorMap> out(static_cast<size_t>(n));
  for (auto& m : out) {
    std::vector<double> v(32);
    for (double& x : v) x = u(rng) * (is_float(t) ? 0.25 : 1.0);
    m["x"] = Tensor::from_doubles(t, Shape{4, 8}, v);
  }
  return out;
}

bool same(const Tensor& a, const Tensor& b) {
  if (a.type() != b.type()) return false;
  for (int64_t i = 0; i < a.numel(); ++i)
    if (a.get_f64(i) != b.get_f64(i)) return false;
  return true;
}

TEST(SpmdCpu, CollectivesEqualTheEvaluatorsSimulatedDeviceAxis) {
  for (DType t : {DType::f32, DType::f64, DType::i32, DType::f16})
    for (const Layout& l : layouts()) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " " + l.name);
      Graph g = program(l, t);
      std::shared_ptr<Executable> exe = Session(Device::cpu()).compile(g);
      std::vector<std::unique_ptr<Executable>> clones;
      std::vector<Executable*> ptrs;
      for (int64_t d = 0; d < l.devices; ++d) {
        clones.push_back(exe->clone());
        ptrs.push_back(clones.back().get());
      }
      for (unsigned run = 0; run < 5; ++run) {  // the communicator is reused run after run
        auto in = feeds(l.devices, t, 100 + run);
        auto got = run_spmd(ptrs, in);
        auto want = evaluate_spmd(g, in);
        for (size_t d = 0; d < got.size(); ++d)
          for (size_t i = 0; i < want[d].size(); ++i)
            EXPECT_TRUE(same(got[d][i], want[d][i]))
                << "device " << d << " output " << i << " run " << run;
      }
    }
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(SpmdCpu, Errors) {
  Graph g("e");
  Value x = g.input("x", DType::f32, Shape{2});
  g.set_outputs({g.emit1(OpKind::AllReduce, {x}, collective_attrs({{0, 1}, {2, 3}}), "ar")});
  std::shared_ptr<Executable> exe = Session(Device::cpu()).compile(g);
  auto a = exe->clone(), b = exe->clone();
  TensorMap in{{"x", Tensor(DType::f32, Shape{2})}};
  std::string e = error_of([&] { run_spmd({a.get(), b.get()}, {in, in}); });
  EXPECT_NE(e.find("all_reduce (node %ar)"), std::string::npos) << e;
  EXPECT_NE(e.find("name 4 devices, the run has 2"), std::string::npos) << e;
  // A plain run is one device.
  e = error_of([&] { exe->run(in); });
  EXPECT_NE(e.find("run_spmd"), std::string::npos) << e;
  // A device that fails before its collective aborts the others instead of hanging them.
  Graph h("h");
  Value y = h.input("x", DType::f32, Shape{2});
  h.set_outputs({h.emit1(OpKind::AllReduce, {y}, collective_attrs({{0, 1}}))});
  auto exe2 = Session(Device::cpu()).compile(h);
  auto c = exe2->clone(), d = exe2->clone();
  e = error_of([&] { run_spmd({c.get(), d.get()}, {in, TensorMap{}}); });
  EXPECT_NE(e.find("run_spmd: device 1"), std::string::npos) << e;
  e = error_of([&] { run_spmd({c.get(), c.get()}, {in, in}); });
  EXPECT_NE(e.find("share one executable"), std::string::npos) << e;
}

}  // namespace
}  // namespace rlx
