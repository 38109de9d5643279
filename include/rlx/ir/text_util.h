// Number formatting shared by the text printer, tensor printing and diagnostics.
#pragma once

#include <cstdint>
#include <string>

#include "rlx/ir/dtype.h"

namespace rlx {

class Tensor;

/// Shortest decimal form that parses back to the same value of float dtype `t` ("0.1", "1.0",
/// "1e-05", "inf", "-inf", "nan", "-nan"); always has a '.', 'e' or is a non-finite word, so it
/// never reads as an integer.
std::string format_float(double v, DType t = DType::f64);
/// Element i of `t` as text: integers in decimal, bools as true/false, floats by format_float.
std::string format_element(const Tensor& t, int64_t i);

}  // namespace rlx
