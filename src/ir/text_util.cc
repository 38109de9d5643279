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
  if (t == DType::f64) {
    r = std::to_chars(buf, buf + sizeof buf, v);
  } else if (t == DType::f32) {
    r = std::to_chars(buf, buf + sizeof buf, static_cast<float>(v));
  } else {
    // f16/bf16: the fewest significant digits that round back to the same value of the dtype
    // (0.1 rather than the f32 form 0.099975586). 9 digits always suffice (f32's bound).
    // The digits are then printed as the shortest double form (65500.0, not 6.55e+04).
    double shortest = v;
    for (int digits = 1; digits <= 9; ++digits) {
      r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::general, digits);
      double back = 0;
      std::from_chars(buf, r.ptr, back);
      if (round_to_dtype(back, t) == v) {
        shortest = back;
        break;
      }
    }
    r = std::to_chars(buf, buf + sizeof buf, shortest);
  }
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
