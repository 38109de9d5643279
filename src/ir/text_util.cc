// Shortest round-trip number formatting.
#include "rlx/ir/text_util.h"

#include <charconv>
#include <cmath>

#include "rlx/ir/tensor.h"

namespace rlx {

std::string format_float(double v, DType t) {
  if (std::isnan(v)) return std::signbit(v) ? "-nan" : "nan";  // payload bits are not kept
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  std::to_chars_result r;
  // f32/f16/bf16 values are exact floats: the shortest float form parses back to the same value.
  if (t == DType::f64) r = std::to_chars(buf, buf + sizeof buf, v);
  else r = std::to_chars(buf, buf + sizeof buf, static_cast<float>(v));
  std::string s(buf, r.ptr);
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

std::string format_element(const Tensor& t, int64_t i) {
  if (is_float(t.dtype())) return format_float(t.get_f64(i), t.dtype());
  if (is_bool(t.dtype())) return t.get_i64(i) ? "true" : "false";
  return std::to_string(t.get_i64(i));
}

}  // namespace rlx
