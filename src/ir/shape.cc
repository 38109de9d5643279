// Shape utilities and numpy broadcasting.
#include "rlx/ir/shape.h"

#include <algorithm>
#include <limits>

#include "rlx/ir/error.h"

namespace rlx {

int64_t Shape::numel() const {
  // Messages are built only on failure: building one per dim is quadratic in the rank.
  for (int64_t d : dims_)
    if (d < 0) throw Error("shape " + to_string() + " has a negative dim");
  // Any 0 dim makes the shape empty, wherever it is: [2^62,4,0] is as valid as [0,2^62,4].
  for (int64_t d : dims_)
    if (d == 0) return 0;
  int64_t n = 1;
  for (int64_t d : dims_) {
    if (n > std::numeric_limits<int64_t>::max() / d)
      throw Error("shape " + to_string() + " has more than 2^63 elements");
    n *= d;
  }
  return n;
}

std::vector<int64_t> Shape::strides() const {
  std::vector<int64_t> s(dims_.size(), 1);
  // An empty shape may have dims whose product overflows ([0,2^62,4]); its strides are never
  // used to address an element, so an overflowing stride is left 0 instead of being UB.
  for (int i = rank() - 2; i >= 0; --i)
    if (__builtin_mul_overflow(s[i + 1], dims_[i + 1], &s[i])) s[i] = 0;
  return s;
}

int Shape::normalize_axis(int64_t axis, const char* what) const {
  int64_t r = rank();
  if (axis < -r || axis >= r)
    throw Error(std::string(what) + " " + std::to_string(axis) + " is out of range for rank " +
                std::to_string(r) + " shape " + to_string());
  return static_cast<int>(axis < 0 ? axis + r : axis);
}

std::string Shape::to_string() const {
  std::string s = "[";
  for (size_t i = 0; i < dims_.size(); ++i) {
    if (i) s += ",";
    s += std::to_string(dims_[i]);
  }
  return s + "]";
}

std::optional<Shape> broadcast_shapes(const Shape& a, const Shape& b) {
  int r = std::max(a.rank(), b.rank());
  std::vector<int64_t> out(static_cast<size_t>(r));
  for (int i = 0; i < r; ++i) {
    int ia = a.rank() - r + i, ib = b.rank() - r + i;
    int64_t da = ia >= 0 ? a[ia] : 1, db = ib >= 0 ? b[ib] : 1;
    if (da == db || db == 1)
      out[i] = da;
    else if (da == 1)
      out[i] = db;
    else
      return std::nullopt;
  }
  return Shape(std::move(out));
}

BroadcastIndexer::BroadcastIndexer(const Shape& in, const Shape& out)
    : out_dims_(out.dims()), in_strides_(out.dims().size(), 0) {
  auto s = in.strides();
  int off = out.rank() - in.rank();
  for (int i = 0; i < in.rank(); ++i)
    if (in[i] != 1) in_strides_[static_cast<size_t>(i + off)] = s[static_cast<size_t>(i)];
}

int64_t BroadcastIndexer::operator()(int64_t out_flat) const {
  int64_t idx = 0;
  for (int i = static_cast<int>(out_dims_.size()) - 1; i >= 0; --i) {
    int64_t d = out_dims_[static_cast<size_t>(i)];
    int64_t c = out_flat % d;
    out_flat /= d;
    idx += c * in_strides_[static_cast<size_t>(i)];
  }
  return idx;
}

}  // namespace rlx
