// The device layouts the collective tests sweep (tests/ir/collective_test.cc on the evaluator,
// tests/runtime/spmd_test.cc on the CPU backend): group sizes 1, 2 and 4, all devices without
// groups, and adjacent vs strided pairs.
#pragma once

#include <cstdint>
#include <vector>

#include "rlx/ir/collective.h"

namespace rlx::testing {

/// A layout: the devices of the run and the participant attributes.
struct Layout {
  const char* name;
  int64_t devices;
  ReplicaGroups groups;  // empty: one group of all, sized by axis_size
};

inline std::vector<Layout> layouts() {
  return {{"one", 1, {{0}}},
          {"pair", 2, {{0, 1}}},
          {"four", 4, {{0, 1, 2, 3}}},
          {"all_by_axis_size", 4, {}},
          {"pairs_adjacent", 4, {{0, 1}, {2, 3}}},
          {"pairs_strided", 4, {{0, 2}, {1, 3}}}};
}

}  // namespace rlx::testing
