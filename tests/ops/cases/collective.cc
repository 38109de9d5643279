// Op cases of the collectives (all_reduce, all_gather, reduce_scatter, all_to_all) as groups of
// one, which is what a one-device run (evaluate(), a plain CPU run: every suite of this table)
// executes; the group sizes 2 and 4 run over the simulated device axis in
// tests/ir/collective_test.cc, tests/autodiff/collective_test.cc (evaluate_spmd) and
// tests/runtime/spmd_test.cc (the CPU backend under run_spmd).
#include "rlx/ir/collective.h"

#include "common.h"

namespace rlx::testing {
namespace {

using namespace cases;

constexpr uint32_t kSuites = kTextSuite | kFdSuite | kVmapSuite | kCpuSuite;
constexpr const char* kWhy =
    "PJRT runs collectives once multi-device execute lands (issue 18 item 2; golden StableHLO "
    "texts in tests/backends/pjrt/collective_emit_test.cc); the JAX parity suite has no named "
    "axis (python/tests/test_collectives.py covers them)";

AttrMap one(AttrMap a) {
  a.set("replica_groups", replica_groups_tensor({{0}}));
  a.set("axis_name", std::string("i"));
  return a;
}

}  // namespace

void add_collective_cases(CaseList& cs) {
  for (const char* r : {"sum", "max", "min"})
    cs.add(OpKind::AllReduce, std::string(r) + "_group_of_one")
        .sample({T({2, 3})}, one({{"reduce", std::string(r)}}))
        .sample({T({4})}, {{"reduce", std::string(r)}})  // one group of all (here: one) devices
        .only(kSuites, kWhy);
  cs.add(OpKind::AllReduce, "mean_group_of_one")
      .in(kFloatDTypes)
      .sample({T({2, 3})}, one({{"reduce", std::string("mean")}}))
      .only(kSuites, kWhy);
  cs.add(OpKind::AllGather, "group_of_one")
      .sample({T({2, 3})}, one({{"axis", int64_t{1}}}))
      .sample({T({3})}, {{"axis", int64_t{0}}, {"axis_size", int64_t{1}}})
      .only(kSuites, kWhy);
  cs.add(OpKind::ReduceScatter, "group_of_one")
      .sample({T({2, 3})}, one({{"scatter_dimension", int64_t{0}}}))
      .only(kSuites, kWhy);
  cs.add(OpKind::AllToAll, "group_of_one")
      .sample({T({2, 4})}, one({{"split_axis", int64_t{1}}, {"concat_axis", int64_t{0}}}))
      .only(kSuites, kWhy);
}

}  // namespace rlx::testing
