// Host tensor: dtype + shape + contiguous row-major storage. Used for constants, evaluator
// values and the runtime API (params, inputs and outputs of executables).
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "rlx/ir/dtype.h"
#include "rlx/ir/shape.h"

namespace rlx {

/// Dtype plus shape of a value; prints as "f32[2,3]".
struct TensorType {
  DType dtype = DType::f32;
  Shape shape;
  std::string to_string() const;
  bool operator==(const TensorType& o) const = default;
};

/// A dense host tensor in row-major order. Copies share storage (like numpy views of one
/// buffer); use clone() for an independent copy. Bool elements are bytes holding 0 or 1.
class Tensor {
 public:
  Tensor() : Tensor(DType::f32, Shape{}) {}
  /// Zero-filled tensor. Throws rlx::Error if the element count overflows.
  Tensor(DType dtype, Shape shape);

  /// Tensor filled from double values, each converted as by the `convert` op (round to nearest
  /// even for floats, saturating float -> int with NaN -> 0). values.size() must equal numel.
  static Tensor from_doubles(DType dtype, Shape shape, std::span<const double> values);
  /// Same for exact integer values (wrap-around conversion for narrower integer dtypes).
  static Tensor from_ints(DType dtype, Shape shape, std::span<const int64_t> values);
  /// Every element equal to `value` (converted as above).
  static Tensor full(DType dtype, Shape shape, double value);
  /// A tensor over caller-owned memory (no copy): `data` must hold numel * dtype_size bytes
  /// in row-major order and outlive every copy of the tensor. Writing through a tensor borrowed
  /// from read-only memory (e.g. a memory-mapped file) is the caller's error. Throws
  /// rlx::Error if `data` is null while the tensor has elements.
  static Tensor borrow(DType dtype, Shape shape, const std::byte* data);
  /// A tensor whose storage is kept alive by `owner` (shared ownership of, e.g., a mapped file
  /// or another tensor's buffer); `data` points into it with the layout of borrow().
  static Tensor view_of(DType dtype, Shape shape, const std::byte* data,
                        std::shared_ptr<const void> owner);

  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  TensorType type() const { return {dtype_, shape_}; }
  int64_t numel() const { return numel_; }
  size_t nbytes() const {
    return static_cast<size_t>(numel_) * static_cast<size_t>(dtype_size(dtype_));
  }
  std::byte* data() { return data_.get(); }
  const std::byte* data() const { return data_.get(); }
  template <class T>
  T* data_as() {
    return reinterpret_cast<T*>(data_.get());
  }
  template <class T>
  const T* data_as() const {
    return reinterpret_cast<const T*>(data_.get());
  }

  /// Element i read as double (exact for every float dtype and for integers up to 2^53).
  double get_f64(int64_t i) const;
  /// Element i read as int64 (floats truncate toward zero with saturation, NaN -> 0).
  int64_t get_i64(int64_t i) const;
  /// Writes element i from a double, converting as the `convert` op does.
  void set_f64(int64_t i, double v);
  /// Writes element i from an int64, converting as the `convert` op does (integers wrap).
  void set_i64(int64_t i, int64_t v);

  /// False for a tensor made by borrow() (its memory belongs to the caller).
  bool owns_storage() const { return owns_; }
  /// Deep copy with its own storage.
  Tensor clone() const;
  /// Same dtype, shape and bytes (NaNs compare by bit pattern).
  bool bitwise_equal(const Tensor& o) const;
  /// "f32[2,2] {1, 2, 3, 4}" with at most `max_elements` shown.
  std::string to_string(int64_t max_elements = 16) const;

 private:
  DType dtype_;
  Shape shape_;
  int64_t numel_ = 0;
  std::shared_ptr<std::byte[]> data_;
  bool owns_ = true;
};

/// The `convert` op on one element: double -> integer dtype `t` saturates at t's min/max and
/// maps NaN to 0 (jax / XLA semantics on CPU and GPU). Returned as int64.
int64_t saturate_to_int(double v, DType t);
/// Integer -> integer dtype `t` with two's-complement wrap-around (lax.convert_element_type).
int64_t wrap_to_int(int64_t v, DType t);

}  // namespace rlx
