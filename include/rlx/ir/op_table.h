// OpTable: the dense per-op rule table every layer keeps (inference, evaluator, decompositions,
// vjp / batching rules, backend kernels and lowerings), filled once by explicit registration.
#pragma once

#include <array>
#include <functional>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "rlx/ir/error.h"
#include "rlx/ir/op.h"

namespace rlx {

/// A dense table with one optional entry of type T per OpKind (MLIR's per-op interface
/// tables, XLA's per-opcode visitors). The entries are registered by `fill`, which runs once,
/// at the first lookup, and calls set() (explicit registration functions, because static
/// constructors in static libraries are dropped by the linker). Lookups are thread-safe after
/// that; set() is meant for `fill` only. The keys are what a layer supports: a backend's
/// supported ops are the keys of its kernel table.
template <class T>
class OpTable {
 public:
  /// `name` names the table in errors ("cpu kernel table"); `fill` registers its entries.
  OpTable(std::string name, std::function<void(OpTable&)> fill)
      : name_(std::move(name)), fill_(std::move(fill)) {}
  OpTable(const OpTable&) = delete;
  OpTable& operator=(const OpTable&) = delete;

  /// Registers the entry of `op`. Throws rlx::Error when `op` already has one (two families
  /// claiming one op is a bug).
  void set(OpKind op, T value) {
    std::optional<T>& slot = slots_[static_cast<size_t>(op)];
    check(!slot.has_value(), name_ + ": op '" + std::string(op_name(op)) + "' is registered twice");
    slot = std::move(value);
  }

  /// The entry of `op` for `fill` to amend (e.g. the op registry adds each family's schema to
  /// the entries ops.def created); throws like at() when absent.
  T& entry(OpKind op) {
    std::optional<T>& slot = slots_[static_cast<size_t>(op)];
    check(slot.has_value(), name_ + ": no entry for op '" + std::string(op_name(op)) + "'");
    return *slot;
  }

  /// The entry of `op`, or nullptr.
  const T* find(OpKind op) const {
    filled();
    const std::optional<T>& slot = slots_[static_cast<size_t>(op)];
    return slot ? &*slot : nullptr;
  }
  bool contains(OpKind op) const { return find(op) != nullptr; }
  /// The entry of `op`; throws rlx::Error "<table>: no entry for op '<op>'" when absent.
  const T& at(OpKind op) const {
    const T* v = find(op);
    check(v != nullptr, name_ + ": no entry for op '" + std::string(op_name(op)) + "'");
    return *v;
  }
  /// Every op with an entry.
  std::set<OpKind> keys() const {
    std::set<OpKind> out;
    for (int i = 0; i < kNumOps; ++i)
      if (find(static_cast<OpKind>(i)) != nullptr) out.insert(static_cast<OpKind>(i));
    return out;
  }
  const std::string& name() const { return name_; }

 private:
  void filled() const {
    std::call_once(once_, [this] { fill_(const_cast<OpTable&>(*this)); });
  }

  std::string name_;
  std::function<void(OpTable&)> fill_;
  mutable std::once_flag once_;
  std::array<std::optional<T>, kNumOps> slots_{};
};

}  // namespace rlx
