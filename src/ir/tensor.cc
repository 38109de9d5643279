// Host tensor storage, element access with convert-op semantics, printing.
#include "rlx/ir/tensor.h"

#include <cmath>
#include <cstring>

#include "rlx/ir/error.h"
#include "rlx/ir/scalar_ops.h"
#include "rlx/ir/text_util.h"

namespace rlx {

std::string TensorType::to_string() const {
  return std::string(dtype_name(dtype)) + shape.to_string();
}

Tensor::Tensor(DType dtype, Shape shape) : dtype_(dtype), shape_(std::move(shape)) {
  numel_ = shape_.numel();
  size_t bytes = nbytes();
  // The messages are built only on failure: a run's output tensors allocate nothing else.
  if (numel_ > (int64_t{1} << 62) / dtype_size(dtype_))
    throw Error("tensor " + type().to_string() + " is too large to allocate");
  try {
    data_ = std::shared_ptr<std::byte[]>(new std::byte[bytes == 0 ? 1 : bytes]());
  } catch (const std::bad_alloc&) {
    throw Error("cannot allocate " + std::to_string(bytes) + " bytes for tensor " +
                type().to_string());
  }
}

Tensor Tensor::borrow(DType dtype, Shape shape, const std::byte* data) {
  Tensor t = view_of(dtype, std::move(shape), data, nullptr);
  t.owns_ = false;
  return t;
}

Tensor Tensor::view_of(DType dtype, Shape shape, const std::byte* data,
                       std::shared_ptr<const void> owner) {
  static const Tensor kScalar;  // copied rather than default-constructed: no allocation
  Tensor t = kScalar;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  t.numel_ = t.shape_.numel();
  if (t.numel_ > (int64_t{1} << 62) / dtype_size(dtype))
    throw Error("tensor " + t.type().to_string() + " is too large");
  if (data == nullptr && t.numel_ != 0)
    throw Error("Tensor::borrow: null data for tensor " + t.type().to_string());
  static const std::byte kEmpty{};  // so data() is never null, even for an empty tensor
  if (data == nullptr) data = &kEmpty;
  // Aliasing constructor: shares `owner`'s control block (none for a borrow) and points at
  // `data`. The const_cast is the documented contract: tensors are mutable views, and the
  // caller promises not to write through one made over read-only memory.
  t.data_ = std::shared_ptr<std::byte[]>(std::const_pointer_cast<void>(std::move(owner)),
                                         const_cast<std::byte*>(data));
  return t;
}

Tensor Tensor::from_doubles(DType dtype, Shape shape, std::span<const double> values) {
  Tensor t(dtype, std::move(shape));
  check(static_cast<int64_t>(values.size()) == t.numel(),
        "Tensor::from_doubles: " + std::to_string(values.size()) + " values for shape " +
            t.shape().to_string());
  for (int64_t i = 0; i < t.numel(); ++i) t.set_f64(i, values[static_cast<size_t>(i)]);
  return t;
}

Tensor Tensor::from_ints(DType dtype, Shape shape, std::span<const int64_t> values) {
  Tensor t(dtype, std::move(shape));
  check(static_cast<int64_t>(values.size()) == t.numel(),
        "Tensor::from_ints: " + std::to_string(values.size()) + " values for shape " +
            t.shape().to_string());
  for (int64_t i = 0; i < t.numel(); ++i) t.set_i64(i, values[static_cast<size_t>(i)]);
  return t;
}

Tensor Tensor::full(DType dtype, Shape shape, double value) {
  Tensor t(dtype, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t.set_f64(i, value);
  return t;
}

int64_t saturate_to_int(double v, DType t) {
  switch (t) {
    case DType::i8:
      return scalar::saturate<int8_t>(v);
    case DType::u8:
      return scalar::saturate<uint8_t>(v);
    case DType::i32:
      return scalar::saturate<int32_t>(v);
    case DType::bool_:
      return !std::isnan(v) && v != 0.0;
    default:  // i64
      return scalar::saturate<int64_t>(v);
  }
}

int64_t wrap_to_int(int64_t v, DType t) {
  switch (t) {
    case DType::i8:
      return static_cast<int8_t>(static_cast<uint8_t>(v));
    case DType::u8:
      return static_cast<uint8_t>(v);
    case DType::i32:
      return static_cast<int32_t>(static_cast<uint32_t>(v));
    case DType::bool_:
      return v != 0;
    default:
      return v;
  }
}

double Tensor::get_f64(int64_t i) const {
  const std::byte* p = data_.get();
  switch (dtype_) {
    case DType::f32:
      return reinterpret_cast<const float*>(p)[i];
    case DType::f16:
      return f16_to_float(reinterpret_cast<const f16*>(p)[i]);
    case DType::bf16:
      return bf16_to_float(reinterpret_cast<const bf16*>(p)[i]);
    case DType::f64:
      return reinterpret_cast<const double*>(p)[i];
    case DType::i8:
      return reinterpret_cast<const int8_t*>(p)[i];
    case DType::u8:
      return reinterpret_cast<const uint8_t*>(p)[i];
    case DType::i32:
      return reinterpret_cast<const int32_t*>(p)[i];
    case DType::i64:
      return static_cast<double>(reinterpret_cast<const int64_t*>(p)[i]);
    case DType::bool_:
      return reinterpret_cast<const uint8_t*>(p)[i] ? 1.0 : 0.0;
  }
  return 0;
}

int64_t Tensor::get_i64(int64_t i) const {
  const std::byte* p = data_.get();
  switch (dtype_) {
    case DType::i8:
      return reinterpret_cast<const int8_t*>(p)[i];
    case DType::u8:
      return reinterpret_cast<const uint8_t*>(p)[i];
    case DType::i32:
      return reinterpret_cast<const int32_t*>(p)[i];
    case DType::i64:
      return reinterpret_cast<const int64_t*>(p)[i];
    case DType::bool_:
      return reinterpret_cast<const uint8_t*>(p)[i] ? 1 : 0;
    default:
      return saturate_to_int(get_f64(i), DType::i64);
  }
}

void Tensor::set_f64(int64_t i, double v) {
  std::byte* p = data_.get();
  switch (dtype_) {
    case DType::f32:
      reinterpret_cast<float*>(p)[i] = static_cast<float>(v);
      return;
    case DType::f16:
      reinterpret_cast<f16*>(p)[i] = f16_from_double(v);
      return;
    case DType::bf16:
      reinterpret_cast<bf16*>(p)[i] = bf16_from_double(v);
      return;
    case DType::f64:
      reinterpret_cast<double*>(p)[i] = v;
      return;
    // NaN != 0, so NaN converts to true (jax convert_element_type semantics).
    case DType::bool_:
      reinterpret_cast<uint8_t*>(p)[i] = v != 0.0;
      return;
    default:
      set_i64(i, saturate_to_int(v, dtype_));
      return;
  }
}

void Tensor::set_i64(int64_t i, int64_t v) {
  std::byte* p = data_.get();
  switch (dtype_) {
    case DType::i8:
      reinterpret_cast<int8_t*>(p)[i] = static_cast<int8_t>(wrap_to_int(v, dtype_));
      return;
    case DType::u8:
      reinterpret_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(wrap_to_int(v, dtype_));
      return;
    case DType::i32:
      reinterpret_cast<int32_t*>(p)[i] = static_cast<int32_t>(wrap_to_int(v, dtype_));
      return;
    case DType::i64:
      reinterpret_cast<int64_t*>(p)[i] = v;
      return;
    case DType::bool_:
      reinterpret_cast<uint8_t*>(p)[i] = v != 0;
      return;
    default:
      set_f64(i, static_cast<double>(v));
      return;
  }
}

Tensor Tensor::clone() const {
  Tensor t(dtype_, shape_);
  std::memcpy(t.data(), data(), nbytes());
  return t;
}

bool Tensor::bitwise_equal(const Tensor& o) const {
  return dtype_ == o.dtype_ && shape_ == o.shape_ && std::memcmp(data(), o.data(), nbytes()) == 0;
}

std::string Tensor::to_string(int64_t max_elements) const {
  std::string s = type().to_string() + " {";
  for (int64_t i = 0; i < numel_ && i < max_elements; ++i) {
    if (i) s += ", ";
    s += format_element(*this, i);
  }
  if (numel_ > max_elements) s += ", ...";
  return s + "}";
}

}  // namespace rlx
