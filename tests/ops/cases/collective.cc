// Op cases of the collectives (all_reduce, all_gather, reduce_scatter, all_to_all) as groups of
// one, which is what a one-device run (the reference evaluator's evaluate(), every suite of
// this table) can execute; the group sizes 2 and 4 run over evaluate_spmd's simulated device
// axis in tests/ir/collective_test.cc and tests/autodiff/collective_test.cc.
#include "rlx/ir/collective.h"

#include "common.h"

namespace rlx::testing {
namespace {

using namespace cases;

constexpr uint32_t kSuites = kTextSuite | kFdSuite | kVmapSuite;
constexpr const char* kWhy =
    "collectives need a communicator: the CPU backend has none yet and PJRT runs them once "
    "multi-device execute lands (issue 18 item 2); golden StableHLO texts in "
    "tests/backends/pjrt/collective_emit_test.cc";

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
