// DType properties, jnp promotion table and correctly rounded f16/bf16 conversions.
#include "rlx/ir/dtype.h"

#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "rlx/ir/error.h"

namespace rlx {
namespace {

struct DTypeProps {
  std::string_view name;
  int size;
  DTypeCategory category;
};

constexpr std::array<DTypeProps, kNumDTypes> kProps = {{
    {"f32", 4, DTypeCategory::Float},
    {"f16", 2, DTypeCategory::Float},
    {"bf16", 2, DTypeCategory::Float},
    {"f64", 8, DTypeCategory::Float},
    {"i8", 1, DTypeCategory::SignedInt},
    {"u8", 1, DTypeCategory::UnsignedInt},
    {"i32", 4, DTypeCategory::SignedInt},
    {"i64", 8, DTypeCategory::SignedInt},
    {"bool", 1, DTypeCategory::Bool},
}};

// Rounds x to a binary float format with `mant` explicit mantissa bits, minimum normal
// exponent `emin` and largest finite value `max_finite`, ties to even. Scaling by powers of
// two is exact in double and std::nearbyint rounds half to even in the default mode.
double round_to_format(double x, int mant, int emin, double max_finite) {
  if (std::isnan(x) || std::isinf(x) || x == 0.0) return x;
  double ax = std::fabs(x);
  int e;
  std::frexp(ax, &e);  // ax = f * 2^e, f in [0.5, 1): unbiased exponent is e - 1
  int exp = std::max(e - 1, emin);
  double quantum = std::ldexp(1.0, exp - mant);
  double r = std::nearbyint(ax / quantum) * quantum;
  // Overflow: IEEE rounds to inf when the value is >= max_finite + half an ulp at the top.
  if (r > max_finite) r = INFINITY;
  return std::copysign(r, x);
}

constexpr double kF16Max = 65504.0;
constexpr double kBf16Max = 3.38953138925153547590470800371487866880e38;

}  // namespace

int dtype_size(DType t) { return kProps[static_cast<int>(t)].size; }
std::string_view dtype_name(DType t) { return kProps[static_cast<int>(t)].name; }
DTypeCategory dtype_category(DType t) { return kProps[static_cast<int>(t)].category; }

std::optional<DType> parse_dtype(std::string_view name) {
  for (int i = 0; i < kNumDTypes; ++i)
    if (kProps[i].name == name) return static_cast<DType>(i);
  return std::nullopt;
}

int64_t int_min(DType t) {
  switch (t) {
    case DType::i8:
      return std::numeric_limits<int8_t>::min();
    case DType::i32:
      return std::numeric_limits<int32_t>::min();
    case DType::i64:
      return std::numeric_limits<int64_t>::min();
    case DType::u8:
    case DType::bool_:
      return 0;
    default:
      throw Error("int_min: " + std::string(dtype_name(t)) + " is not an integer or bool dtype");
  }
}

int64_t int_max(DType t) {
  switch (t) {
    case DType::i8:
      return std::numeric_limits<int8_t>::max();
    case DType::u8:
      return std::numeric_limits<uint8_t>::max();
    case DType::i32:
      return std::numeric_limits<int32_t>::max();
    case DType::i64:
      return std::numeric_limits<int64_t>::max();
    case DType::bool_:
      return 1;
    default:
      throw Error("int_max: " + std::string(dtype_name(t)) + " is not an integer or bool dtype");
  }
}

std::vector<DType> DTypeSet::dtypes() const {
  std::vector<DType> out;
  for (int i = 0; i < kNumDTypes; ++i)
    if (contains(static_cast<DType>(i))) out.push_back(static_cast<DType>(i));
  return out;
}

std::string DTypeSet::to_string() const {
  std::string s;
  for (DType t : dtypes()) s += (s.empty() ? "" : ", ") + std::string(dtype_name(t));
  return s;
}

std::string describe_dtypes(DTypeSet s) {
  if (s == kFloatDTypes) return "a float type (f32, f16, bf16, f64)";
  if (s == kNumericDTypes) return "a float or integer type (not bool)";
  if (s == kIntOrBoolDTypes) return "bool or an integer type";
  if (s == kIntegerDTypes) return "an integer type (i8, u8, i32, i64)";
  if (s == kAnyDTypes) return "any type";
  return "one of " + s.to_string();
}

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  if (a == DType::bool_) return b;
  if (b == DType::bool_) return a;
  bool fa = is_float(a), fb = is_float(b);
  if (fa && fb) {
    // bf16 and f16 join at f32; otherwise the wider float wins.
    auto rank = [](DType t) { return t == DType::f64 ? 3 : t == DType::f32 ? 2 : 1; };
    if (rank(a) == 1 && rank(b) == 1) return DType::f32;
    return rank(a) >= rank(b) ? a : b;
  }
  if (fa) return a;  // int + float -> the float type (jnp: i64 + f16 = f16)
  if (fb) return b;
  // Both integers (different). Widths: u8=1, i8=1, i32=4, i64=8.
  auto width = [](DType t) { return dtype_size(t); };
  bool sa = dtype_category(a) == DTypeCategory::SignedInt;
  bool sb = dtype_category(b) == DTypeCategory::SignedInt;
  if (sa == sb) return width(a) >= width(b) ? a : b;  // only signed pairs reach here
  DType s = sa ? a : b;                               // the other one is u8
  // A signed type wider than u8 holds all of u8; i8 + u8 is i16 in jnp, i32 here.
  return width(s) > 1 ? s : DType::i32;
}

f16 f16_from_double(double x) {
  double r = round_to_format(x, 10, -14, kF16Max);
  uint16_t sign = std::signbit(r) ? 0x8000 : 0;
  if (std::isnan(r)) return f16{static_cast<uint16_t>(sign | 0x7e00)};
  if (std::isinf(r)) return f16{static_cast<uint16_t>(sign | 0x7c00)};
  double ar = std::fabs(r);
  if (ar == 0.0) return f16{sign};
  int e;
  double f = std::frexp(ar, &e);  // ar = f * 2^e
  int exp = e - 1;
  if (exp < -14) {  // subnormal: value = m * 2^-24
    auto m = static_cast<uint16_t>(std::ldexp(ar, 24));
    return f16{static_cast<uint16_t>(sign | m)};
  }
  auto m = static_cast<uint16_t>(std::ldexp(f * 2.0 - 1.0, 10));
  return f16{static_cast<uint16_t>(sign | ((exp + 15) << 10) | m)};
}

bf16 bf16_from_double(double x) {
  double r = round_to_format(x, 7, -126, kBf16Max);
  if (std::isnan(r)) return bf16{static_cast<uint16_t>(std::signbit(r) ? 0xffc0 : 0x7fc0)};
  // r is exactly representable in bf16, hence in f32: the top half of its f32 bits.
  auto bits = std::bit_cast<uint32_t>(static_cast<float>(r));
  return bf16{static_cast<uint16_t>(bits >> 16)};
}

float f16_to_float(f16 h) {
  uint32_t sign = (h.bits & 0x8000u) << 16;
  uint32_t exp = (h.bits >> 10) & 0x1f;
  uint32_t mant = h.bits & 0x3ff;
  float mag;
  if (exp == 0) {
    mag = std::ldexp(static_cast<float>(mant), -24);
  } else if (exp == 31) {
    mag = mant ? NAN : INFINITY;
  } else {
    mag = std::ldexp(static_cast<float>(mant | 0x400), static_cast<int>(exp) - 25);
  }
  return std::bit_cast<float>(std::bit_cast<uint32_t>(std::fabs(mag)) | sign);
}

float bf16_to_float(bf16 h) { return std::bit_cast<float>(static_cast<uint32_t>(h.bits) << 16); }

double round_to_dtype(double x, DType t) {
  switch (t) {
    case DType::f64:
      return x;
    case DType::f32:
      return static_cast<float>(x);
    case DType::f16:
      return f16_to_float(f16_from_double(x));
    case DType::bf16:
      return bf16_to_float(bf16_from_double(x));
    default:
      return x;
  }
}

}  // namespace rlx
