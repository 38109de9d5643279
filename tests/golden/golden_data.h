// Reading tests/golden/ops.json (format: tests/golden/README.md): numbers and tensors.
#pragma once

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "rlx/ir/error.h"
#include "rlx/ir/tensor.h"

namespace rlx::testing {

using json = nlohmann::json;

/// A JSON number, or one of the strings "nan", "inf", "-inf".
inline double json_double(const json& v) {
  if (v.is_string()) {
    const std::string& s = v.get_ref<const std::string&>();
    if (s == "nan") return NAN;
    if (s == "inf") return INFINITY;
    if (s == "-inf") return -INFINITY;
    throw Error("golden: bad float string '" + s + "'");
  }
  return v.get<double>();
}

/// A tensor {"dtype", "shape", "data" (flat, row-major)}; float values are exact in the dtype;
/// bool data are true/false or numbers (nonzero is true).
inline Tensor json_tensor(const json& j) {
  auto dt = parse_dtype(j.at("dtype").get<std::string>());
  check(dt.has_value(), "golden: unknown dtype " + j.at("dtype").dump());
  Tensor t(*dt, Shape(j.at("shape").get<std::vector<int64_t>>()));
  const json& data = j.at("data");
  check(static_cast<int64_t>(data.size()) == t.numel(),
        "golden: " + std::to_string(data.size()) + " values for " + t.type().to_string());
  for (int64_t i = 0; i < t.numel(); ++i) {
    const json& v = data[static_cast<size_t>(i)];
    if (is_float(*dt))
      t.set_f64(i, json_double(v));  // exact: values are of the dtype
    else if (is_bool(*dt))
      t.set_i64(i, (v.is_boolean() ? v.get<bool>() : v.get<double>() != 0) ? 1 : 0);
    else
      t.set_i64(i, v.get<int64_t>());
  }
  return t;
}

}  // namespace rlx::testing
