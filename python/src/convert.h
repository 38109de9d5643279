// Conversions shared by the binding families: dtypes, numpy arrays <-> rlx::Tensor, attributes.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <string>

#include "rlx/ir/attr.h"
#include "rlx/ir/op.h"
#include "rlx/ir/tensor.h"
#include "rlx/opt/precision.h"

namespace rlx::py_bind {

namespace py = pybind11;

/// A dtype from Python: an rlx name ("f32", "bf16", "bool"), a numpy dtype or anything
/// numpy.dtype() accepts (np.float32, "float32", ml_dtypes.bfloat16). Throws rlx::Error
/// naming the object and the accepted dtypes.
DType to_dtype(const py::handle& obj);

/// The numpy dtype of `t` (bf16 is ml_dtypes.bfloat16). Throws rlx::Error when ml_dtypes is
/// needed but not installed.
py::dtype numpy_dtype(DType t);

/// A numpy array sharing `t`'s storage (no copy); the array keeps the storage alive.
py::array to_numpy(const Tensor& t);

/// A tensor over `obj`'s memory when it is a C-contiguous, aligned numpy array of a dtype rlx
/// knows (zero copy; the tensor keeps the array alive), else a converted copy. With `want`
/// set, a numpy array of another dtype is an error ("<what>: expected f32, got i64") and a
/// non-array (Python scalar, list) is converted to `want`. Without it, non-arrays go through
/// numpy.asarray. `borrowed`, when given, says whether no copy was made. With `keep_alive`
/// false the tensor may merely borrow `obj`'s memory (Tensor::borrow, no reference taken): for
/// tensors that die before `obj` does, e.g. the inputs of one run() call.
Tensor to_tensor(const py::handle& obj, std::optional<DType> want, const std::string& what,
                 bool* borrowed = nullptr, bool keep_alive = true);

/// An attribute value for attribute `name` of `op`, converted to the schema's type (an int
/// list from any sequence of ints, a dtype from any dtype-like, a tensor from an array). An
/// unknown name converts by the Python type so that validate_attrs reports it.
Attr to_attr(const OpInfo& op, const std::string& name, const py::handle& value);

/// A precision policy from its text form (parse_precision_policy: "auto-mixed-bf16",
/// "always-f16,matmul=f32", ...); the bare dtypes "f32", "f16", "bf16" mean "always-<dtype>".
/// Throws rlx::Error listing the accepted names.
PrecisionPolicy to_precision(const std::string& text);

/// The Python value of an attribute (int, float, bool, str, list of int, dtype name, array).
py::object from_attr(const Attr& a);

}  // namespace rlx::py_bind
