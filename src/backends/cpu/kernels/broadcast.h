// Internal: the iteration space of an op whose operands broadcast (numpy rules) into its
// result, collapsed to as few dims as possible, and a walker over flat ranges of it. Kernels
// use it to read broadcast operands in place (stride 0 along broadcast dims) instead of
// materializing them.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "rlx/ir/shape.h"

namespace rlx::cpu {

/// A row-major result shape with per-operand element strides (0 along broadcast dims). Size-1
/// dims are dropped and adjacent dims merged wherever every operand allows it, so e.g. x[N, M] +
/// y[N, M] is one dim of N*M, and x[N, M] + b[M] stays [N, M] with b's strides {0, 1}. Every
/// operand's innermost stride is 0 or 1.
struct BroadcastLayout {
  /// Most collapsed dims walk() supports; make() returns nullopt beyond.
  static constexpr size_t kMaxRank = 16;

  std::vector<int64_t> dims;                  ///< collapsed result dims, at least one
  std::vector<std::vector<int64_t>> strides;  ///< [operand][dim], in elements
  int64_t numel = 1;

  /// Layout of `result` with `operands`, each of which must broadcast to it. Nullopt when the
  /// collapsed rank exceeds kMaxRank.
  static std::optional<BroadcastLayout> make(const Shape& result, std::span<const Shape> operands) {
    const int rank = result.rank();
    BroadcastLayout l;
    std::vector<std::vector<int64_t>> full(operands.size(), std::vector<int64_t>(rank, 0));
    for (size_t k = 0; k < operands.size(); ++k) {
      const Shape& s = operands[k];
      int64_t stride = 1;
      for (int i = s.rank() - 1; i >= 0; --i) {
        int d = rank - s.rank() + i;
        full[k][d] = s[i] == 1 ? 0 : stride;
        stride *= s[i];
      }
    }
    l.strides.assign(operands.size(), {});
    for (int d = 0; d < rank; ++d) {
      int64_t n = result[d];
      l.numel *= n;
      if (n == 1) continue;
      bool merge = !l.dims.empty();
      for (size_t k = 0; k < operands.size() && merge; ++k)
        merge = l.strides[k].back() == full[k][d] * n;
      if (merge) {
        l.dims.back() *= n;
        for (size_t k = 0; k < operands.size(); ++k) l.strides[k].back() = full[k][d];
      } else {
        l.dims.push_back(n);
        for (size_t k = 0; k < operands.size(); ++k) l.strides[k].push_back(full[k][d]);
      }
    }
    if (l.dims.empty()) {  // a single element
      l.dims.push_back(1);
      for (auto& s : l.strides) s.push_back(0);
    }
    if (l.dims.size() > kMaxRank) return std::nullopt;
    return l;
  }

  int64_t inner() const { return dims.back(); }
  int64_t rows() const { return numel / inner(); }
  /// Operand k's flat index equals the result's (it has the result's elements, unbroadcast).
  bool dense(size_t k) const {
    int64_t expect = 1;
    for (size_t d = dims.size(); d-- > 0;) {
      if (strides[k][d] != expect) return false;
      expect *= dims[d];
    }
    return true;
  }
  /// Operand k is one element broadcast everywhere.
  bool splat(size_t k) const {
    return std::all_of(strides[k].begin(), strides[k].end(), [](int64_t s) { return s == 0; });
  }
  /// Element offset of operand k at the start of row `row` (a row is one run of the innermost
  /// dim; rows are numbered in row-major order).
  int64_t row_offset(size_t k, int64_t row) const {
    int64_t off = 0;
    for (size_t d = dims.size() - 1; d-- > 0;) {
      off += (row % dims[d]) * strides[k][d];
      row /= dims[d];
    }
    return off;
  }

  /// Walks result elements [begin, begin + count) of operand k in runs inside one innermost
  /// row: fn(pos, len, offset, step) for pos = 0, len, ...: result elements begin + pos ..
  /// begin + pos + len - 1 read operand elements offset, offset + step, ... (step is 0 or 1).
  template <class Fn>
  void walk(size_t k, int64_t begin, int64_t count, Fn&& fn) const {
    const size_t rank = dims.size();
    const std::vector<int64_t>& st = strides[k];
    std::array<int64_t, kMaxRank> idx{};
    int64_t rest = begin, offset = 0;
    for (size_t d = rank; d-- > 0;) {
      idx[d] = rest % dims[d];
      rest /= dims[d];
      offset += idx[d] * st[d];
    }
    const int64_t step = st[rank - 1];
    for (int64_t pos = 0; pos < count;) {
      int64_t len = std::min(dims[rank - 1] - idx[rank - 1], count - pos);
      fn(pos, len, offset, step);
      pos += len;
      idx[rank - 1] += len;
      offset += len * step;
      for (size_t d = rank - 1; d > 0 && idx[d] == dims[d]; --d) {  // carry
        offset += st[d - 1] - dims[d] * st[d];
        idx[d] = 0;
        ++idx[d - 1];
      }
    }
  }
};

}  // namespace rlx::cpu
