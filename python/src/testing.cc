// Bindings for the Python test suites: the op-case table (tests/ops/op_case.h) that the C++
// suites read, exported for python/tests/test_parity.py.
#include "bindings.h"
#include "ops/op_case.h"

namespace rlx::py_bind {

void bind_testing(pybind11::module_& m) {
  m.def("_op_cases_json", &rlx::testing::op_cases_json,
        "The op-case table as JSON: one entry per case and dtype the Python parity suite runs "
        "(name, op, dtype, ir text, leaves with their value ranges); see tests/ops/op_case.h.");
}

}  // namespace rlx::py_bind
