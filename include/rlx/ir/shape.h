// Static tensor shapes and numpy broadcasting.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace rlx {

/// A static shape: a list of int64 dims, each >= 0. Rank 0 (a scalar) is allowed and has one
/// element; a dim of size 0 gives an empty tensor.
class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) : dims_(dims) {}
  explicit Shape(std::vector<int64_t> dims) : dims_(std::move(dims)) {}

  int rank() const { return static_cast<int>(dims_.size()); }
  int64_t operator[](int i) const { return dims_[static_cast<size_t>(i)]; }
  int64_t& operator[](int i) { return dims_[static_cast<size_t>(i)]; }
  const std::vector<int64_t>& dims() const { return dims_; }
  std::vector<int64_t>& dims() { return dims_; }
  /// Number of elements (product of dims; 1 for rank 0). Throws rlx::Error on int64 overflow.
  int64_t numel() const;
  /// Row-major (C order) strides in elements.
  std::vector<int64_t> strides() const;
  /// Normalises a possibly negative axis (-1 = last) into [0, rank); throws rlx::Error naming
  /// `what` when out of range.
  int normalize_axis(int64_t axis, const char* what = "axis") const;
  /// "[2,3,4]"; a scalar prints as "[]".
  std::string to_string() const;

  bool operator==(const Shape& o) const = default;

 private:
  std::vector<int64_t> dims_;
};

/// numpy broadcasting of two shapes (align trailing dims; each pair equal or one of them 1).
/// Returns nullopt when they do not broadcast.
std::optional<Shape> broadcast_shapes(const Shape& a, const Shape& b);

/// Converts a flat row-major index of `out` into the flat index of an operand of shape `in`
/// that numpy-broadcasts to `out`. Precompute with BroadcastIndexer for loops.
class BroadcastIndexer {
 public:
  BroadcastIndexer(const Shape& in, const Shape& out);
  int64_t operator()(int64_t out_flat) const;

 private:
  std::vector<int64_t> out_dims_;
  std::vector<int64_t> in_strides_;  // 0 where broadcast, aligned to out's rank
};

}  // namespace rlx
