// DType properties, f16/bf16 round-to-nearest-even conversions and shape broadcasting.
// Bit patterns are the IEEE 754 / bfloat16 encodings (checked against ml_dtypes by the golden
// suite as well).
#include "rlx/ir/dtype.h"

#include <gtest/gtest.h>

#include <cmath>

#include "rlx/ir/error.h"
#include "rlx/ir/shape.h"
#include "rlx/ir/tensor.h"

namespace rlx {
namespace {

TEST(DType, NamesSizesCategories) {
  EXPECT_EQ(dtype_name(DType::bf16), "bf16");
  EXPECT_EQ(dtype_name(DType::bool_), "bool");
  EXPECT_EQ(parse_dtype("i64"), DType::i64);
  EXPECT_EQ(parse_dtype("float32"), std::nullopt);
  EXPECT_EQ(dtype_size(DType::f64), 8);
  EXPECT_EQ(dtype_size(DType::bool_), 1);
  EXPECT_TRUE(is_float(DType::bf16));
  EXPECT_TRUE(is_integer(DType::u8));
  EXPECT_FALSE(is_integer(DType::bool_));
}

TEST(DType, F16RoundsToNearestEven) {
  EXPECT_EQ(f16_from_double(1.0).bits, 0x3c00);
  EXPECT_EQ(f16_from_double(65504.0).bits, 0x7bff);
  EXPECT_EQ(f16_from_double(65519.99).bits, 0x7bff);
  EXPECT_EQ(f16_from_double(65520.0).bits, 0x7c00);  // halfway above max rounds to inf
  EXPECT_EQ(f16_from_double(-1e9).bits, 0xfc00);
  // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties to even (1.0).
  EXPECT_EQ(f16_from_double(1.0 + std::ldexp(1.0, -11)).bits, 0x3c00);
  // 1 + 3 * 2^-11 is halfway between 1+2^-10 (odd) and 1+2^-9 (even): rounds up.
  EXPECT_EQ(f16_from_double(1.0 + 3 * std::ldexp(1.0, -11)).bits, 0x3c02);
  EXPECT_EQ(f16_from_double(std::ldexp(1.0, -24)).bits, 0x0001);  // smallest subnormal
  EXPECT_EQ(f16_from_double(std::ldexp(1.0, -25)).bits, 0x0000);  // tie to even (zero)
  EXPECT_EQ(f16_from_double(std::ldexp(3.0, -26)).bits, 0x0001);
  EXPECT_EQ(f16_from_double(-0.0).bits, 0x8000);
  EXPECT_TRUE(std::isnan(f16_to_float(f16_from_double(NAN))));
  EXPECT_EQ(f16_to_float(f16{0x3555}), 0.333251953125f);
  EXPECT_EQ(f16_to_float(f16{0x0001}), std::ldexp(1.0f, -24));
}

TEST(DType, Bf16RoundsToNearestEven) {
  EXPECT_EQ(bf16_from_double(1.0).bits, 0x3f80);
  EXPECT_EQ(bf16_from_double(1.0 + std::ldexp(1.0, -8)).bits, 0x3f80);      // tie -> even
  EXPECT_EQ(bf16_from_double(1.0 + 3 * std::ldexp(1.0, -8)).bits, 0x3f82);  // tie -> even (up)
  EXPECT_EQ(bf16_from_double(3.4e38).bits, 0x7f80);                         // overflow -> inf
  EXPECT_EQ(bf16_from_double(-INFINITY).bits, 0xff80);
  EXPECT_TRUE(std::isnan(bf16_to_float(bf16_from_double(NAN))));
  EXPECT_EQ(bf16_to_float(bf16{0x4049}), 3.140625f);
  // Rounding once from double: 1 + 2^-8 + 2^-40 is above the tie and must round up, which a
  // double -> f32 -> bf16 path would also get right only by luck of the f32 step.
  EXPECT_EQ(bf16_from_double(1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40)).bits, 0x3f81);
}

TEST(DType, ConvertSaturatesFloatToInt) {
  EXPECT_EQ(saturate_to_int(1e10, DType::i32), 2147483647);
  EXPECT_EQ(saturate_to_int(-1e10, DType::i32), -2147483648LL);
  EXPECT_EQ(saturate_to_int(NAN, DType::i8), 0);
  EXPECT_EQ(saturate_to_int(-3.9, DType::i8), -3);
  EXPECT_EQ(saturate_to_int(300.5, DType::u8), 255);
  EXPECT_EQ(saturate_to_int(-1.0, DType::u8), 0);
  EXPECT_EQ(saturate_to_int(1e30, DType::i64), INT64_MAX);
  EXPECT_EQ(wrap_to_int(300, DType::u8), 44);
  EXPECT_EQ(wrap_to_int(200, DType::i8), -56);
}

TEST(Shape, BroadcastAndPrint) {
  EXPECT_EQ(broadcast_shapes(Shape{2, 1, 3}, Shape{4, 1}), (Shape{2, 4, 3}));
  EXPECT_EQ(broadcast_shapes(Shape{}, Shape{5}), (Shape{5}));
  EXPECT_EQ(broadcast_shapes(Shape{0, 1}, Shape{1, 7}), (Shape{0, 7}));
  EXPECT_FALSE(broadcast_shapes(Shape{2, 3}, Shape{4}).has_value());
  EXPECT_EQ(Shape({2, 3}).to_string(), "[2,3]");
  EXPECT_EQ(Shape{}.to_string(), "[]");
  EXPECT_EQ(Shape{}.numel(), 1);
  EXPECT_EQ(Shape({3, 0}).numel(), 0);
  EXPECT_THROW(Shape({1LL << 40, 1LL << 40}).numel(), Error);
  EXPECT_EQ(Shape({2, 3}).normalize_axis(-1), 1);
  try {
    Shape({2, 3}).normalize_axis(2);
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "axis 2 is out of range for rank 2 shape [2,3]");
  }
}

TEST(Shape, BroadcastIndexer) {
  BroadcastIndexer idx(Shape{3, 1}, Shape{2, 3, 4});
  EXPECT_EQ(idx(0), 0);
  EXPECT_EQ(idx(3), 0);
  EXPECT_EQ(idx(4), 1);
  EXPECT_EQ(idx(12 + 8), 2);
}

TEST(Tensor, ElementAccessUsesConvertSemantics) {
  Tensor t = Tensor::from_doubles(DType::i8, Shape{3}, std::vector<double>{1e9, -2.7, NAN});
  EXPECT_EQ(t.get_i64(0), 127);
  EXPECT_EQ(t.get_i64(1), -2);
  EXPECT_EQ(t.get_i64(2), 0);
  Tensor b = Tensor::from_doubles(DType::bool_, Shape{3}, std::vector<double>{0.0, NAN, -0.5});
  EXPECT_EQ(b.to_string(), "bool[3] {false, true, true}");
  Tensor h = Tensor::from_doubles(DType::f16, Shape{2}, std::vector<double>{0.1, 1e6});
  EXPECT_EQ(h.to_string(), "f16[2] {0.1, inf}");
}

}  // namespace
}  // namespace rlx
