// The one exception type rlx throws for user-facing errors, and a check helper.
#pragma once

#include <stdexcept>
#include <string>

namespace rlx {

/// Every error rlx reports to a user (bad graph, bad attribute, bad input, parse error) is an
/// rlx::Error whose message says where (op, node, file:line:col) and what was expected/found.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

/// Throws rlx::Error(message) when `condition` is false. The condition is a real bool; the
/// message is only built by the caller, so keep it cheap or guard it.
inline void check(bool condition, const std::string& message) {
  if (!condition) throw Error(message);
}

}  // namespace rlx
