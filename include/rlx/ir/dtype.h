// Element types (DType), their properties, f16/bf16 storage types and jnp type promotion.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace rlx {

/// Element type of a tensor. The set mirrors the dtypes rlx runs on every backend.
enum class DType : uint8_t { f32, f16, bf16, f64, i8, u8, i32, i64, bool_ };

/// Number of DType values; they are 0 .. kNumDTypes - 1 in declaration order.
inline constexpr int kNumDTypes = 9;

/// Broad class of a dtype; passes and inference ask for the category, not for a list of dtypes.
enum class DTypeCategory : uint8_t { Float, SignedInt, UnsignedInt, Bool };

/// Size of one element in bytes (bool is stored as one byte holding 0 or 1).
int dtype_size(DType t);
/// Canonical lower-case name as used in the text IR: "f32", "bf16", "i64", "bool", ...
std::string_view dtype_name(DType t);
/// Inverse of dtype_name; nullopt for an unknown name.
std::optional<DType> parse_dtype(std::string_view name);
/// The smallest and largest value of integer or bool dtype `t` (i8: -128 / 127, u8: 0 / 255,
/// bool: 0 / 1); throws rlx::Error for a float dtype.
int64_t int_min(DType t);
int64_t int_max(DType t);
/// Category of `t`; is_float / is_integer (signed or unsigned) / is_bool ask it.
DTypeCategory dtype_category(DType t);
inline bool is_float(DType t) { return dtype_category(t) == DTypeCategory::Float; }
inline bool is_integer(DType t) {
  auto c = dtype_category(t);
  return c == DTypeCategory::SignedInt || c == DTypeCategory::UnsignedInt;
}
inline bool is_bool(DType t) { return t == DType::bool_; }

/// A set of dtypes (one bit per DType). ops.def states the dtype class of every op with one
/// of the named sets below; inference, the op-case harness and the coverage matrix read it.
class DTypeSet {
 public:
  constexpr DTypeSet() = default;
  constexpr DTypeSet(std::initializer_list<DType> ts) {
    for (DType t : ts) bits_ |= bit(t);
  }
  constexpr bool contains(DType t) const { return (bits_ & bit(t)) != 0; }
  constexpr bool empty() const { return bits_ == 0; }
  constexpr DTypeSet operator|(DTypeSet o) const { return from_bits(bits_ | o.bits_); }
  constexpr DTypeSet operator&(DTypeSet o) const { return from_bits(bits_ & o.bits_); }
  constexpr DTypeSet operator-(DTypeSet o) const { return from_bits(bits_ & ~o.bits_); }
  constexpr bool operator==(const DTypeSet&) const = default;
  /// The members in DType declaration order (f32, f16, bf16, f64, i8, u8, i32, i64, bool).
  std::vector<DType> dtypes() const;
  /// The members' names, comma separated: "f32, f16, bf16, f64".
  std::string to_string() const;

 private:
  static constexpr uint16_t bit(DType t) {
    return static_cast<uint16_t>(1u << static_cast<int>(t));
  }
  static constexpr DTypeSet from_bits(uint16_t b) {
    DTypeSet s;
    s.bits_ = b;
    return s;
  }
  uint16_t bits_ = 0;
};

/// The dtype classes of ops.def's dtype column.
inline constexpr DTypeSet kFloatDTypes{DType::f32, DType::f16, DType::bf16, DType::f64};
inline constexpr DTypeSet kIntegerDTypes{DType::i8, DType::u8, DType::i32, DType::i64};
inline constexpr DTypeSet kNumericDTypes = kFloatDTypes | kIntegerDTypes;
inline constexpr DTypeSet kIntOrBoolDTypes = kIntegerDTypes | DTypeSet{DType::bool_};
inline constexpr DTypeSet kAnyDTypes = kNumericDTypes | DTypeSet{DType::bool_};

/// How diagnostics name a dtype class: "a float type (f32, f16, bf16, f64)", "a float or
/// integer type (not bool)", "bool or an integer type", "any type"; another set lists its
/// members ("one of f32, i32").
std::string describe_dtypes(DTypeSet s);

/// Result dtype of combining `a` and `b`, following jax.numpy's promotion lattice
/// (jax.numpy.promote_types with x64 enabled, no weak types):
///   bool < u8 < i16 < i32 < i64 < {bf16, f16} < f32 < f64, with i8 < i16, u8 < i16,
///   bf16 + f16 -> f32 and any integer + float type -> that float type (jnp: i64 + f16 = f16).
/// rlx has no i16/u16/u32/u64, so a jnp result of i16 is widened to i32 (the smallest
/// rlx dtype holding every value of both operands): promote(u8, i8) = i32.
DType promote_types(DType a, DType b);

/// IEEE 754 binary16 storage type (bits only; arithmetic happens after conversion).
struct f16 {
  uint16_t bits = 0;
};
/// bfloat16 storage type: the upper 16 bits of an IEEE binary32.
struct bf16 {
  uint16_t bits = 0;
};

/// Rounds `x` to the nearest f16 value, ties to even; magnitudes beyond the f16 range become
/// ±inf, NaN stays NaN (quiet). Rounds once from double, so there is no double rounding.
f16 f16_from_double(double x);
/// Rounds `x` to the nearest bf16 value, ties to even; overflow to ±inf, NaN stays NaN.
bf16 bf16_from_double(double x);
/// Exact widening conversions.
float f16_to_float(f16 h);
float bf16_to_float(bf16 h);
/// f32 -> f16/bf16, rounded to nearest even as f16_from_double / bf16_from_double.
inline f16 f16_from_float(float x) { return f16_from_double(x); }
inline bf16 bf16_from_float(float x) { return bf16_from_double(x); }

/// Rounds `x` to the value set of float dtype `t` (f64: identity, f32: cast, f16/bf16: RNE),
/// returned as a double; other dtypes return `x` unchanged. format_float uses it to find the
/// shortest text that reads back to the same f16/bf16 value.
double round_to_dtype(double x, DType t);

}  // namespace rlx
