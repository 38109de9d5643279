// rlx.Value's C++ side (PyValue), shared by the binding families that take or return Values of
// a Python-owned Graph (graph.cc binds the class; train.cc's loss builders use it).
#pragma once

#include <memory>

#include "rlx/ir/error.h"
#include "rlx/ir/graph.h"

namespace rlx::py_bind {

/// How Python holds a Graph: Values keep it alive through this pointer.
using GraphPtr = std::shared_ptr<Graph>;

/// A value of a Python-owned graph: keeps the graph alive and checks that operands match.
struct PyValue {
  GraphPtr g;
  Value v;
  const TensorType& type() const { return g->type(v); }
};

/// `pv`'s Value when it belongs to `g`; else rlx::Error naming the value and both graphs.
inline Value own(const GraphPtr& g, const PyValue& pv) {
  check(pv.g == g, "value " + pv.g->node(pv.v).name + " belongs to graph '" + pv.g->name() +
                       "', not to graph '" + g->name() + "'");
  return pv.v;
}

}  // namespace rlx::py_bind
