// The participants of a collective op (all_reduce, all_gather, reduce_scatter, all_to_all):
// how the attributes replica_groups / axis_size / axis_name name them, read and checked in one
// place for inference, the reference evaluator, autodiff and the backends (docs/ir.md
// "Collectives").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "rlx/ir/attr.h"

namespace rlx {

/// Rows of device ids: group g holds devices groups[g][0..S-1]; a device's position in its row is
/// its rank in the group. Every row has the same size S (as StableHLO's replica_groups).
using ReplicaGroups = std::vector<std::vector<int64_t>>;

/// The participants of a collective node, from its attributes.
struct CollectiveGroups {
  /// attr replica_groups (an i64[G, S] tensor) as rows; empty when the attr is absent, which
  /// means one group of all devices.
  ReplicaGroups groups;
  /// S, the devices per group: the rows' size, else attr axis_size; 0 when neither is given
  /// (all_reduce only: the other collectives need S for their result shape).
  int64_t group_size = 0;
  /// attr axis_name: the mesh axis the groups span ("" when none was named).
  std::string axis_name;
};

/// Reads and checks the participants of a collective's `attrs`: replica_groups must be an i64
/// tensor of rank 2 with G >= 1 rows of S >= 1 ids that together are a permutation of
/// 0..G*S-1; axis_size, when given with groups, must equal S, and must be >= 1. Throws
/// rlx::Error saying what is wrong (without location: callers add op and node).
CollectiveGroups collective_groups(const AttrMap& attrs);

/// The groups of a collective in a run over `num_devices` devices: its rows, or one row
/// 0..num_devices-1 when it has none. Throws rlx::Error when the rows do not cover exactly the
/// devices 0..num_devices-1 or axis_size differs from num_devices.
ReplicaGroups groups_for_run(const AttrMap& attrs, int64_t num_devices);

/// The replica_groups attribute value of `groups`: an i64[G, S] tensor (rows of equal size;
/// throws rlx::Error otherwise).
Tensor replica_groups_tensor(const ReplicaGroups& groups);

/// A collective's participant attributes: replica_groups (absent when `groups` is empty),
/// axis_name (when not empty) and axis_size (when > 0).
AttrMap collective_attrs(const ReplicaGroups& groups, const std::string& axis_name = "",
                         int64_t axis_size = 0);

}  // namespace rlx
