// KernelReport: per-op counts and the text form of Executable::kernel_report().
#include "rlx/runtime/kernel_report.h"

#include <set>

namespace rlx {

std::map<OpKind, KernelCounts> KernelReport::counts() const {
  std::map<OpKind, KernelCounts> out;
  for (const Node& n : nodes) (n.native ? out[n.op].native : out[n.op].fallback) += 1;
  return out;
}

KernelCounts KernelReport::count(OpKind op) const {
  KernelCounts c;
  for (const Node& n : nodes)
    if (n.op == op) (n.native ? c.native : c.fallback) += 1;
  return c;
}

KernelCounts KernelReport::total() const {
  KernelCounts c;
  for (const Node& n : nodes) (n.native ? c.native : c.fallback) += 1;
  return c;
}

std::string KernelReport::to_string() const {
  if (!program.empty()) return program;
  if (backend.empty() && nodes.empty()) return "";
  std::string out = backend + " kernels (native / reference fallback):\n";
  for (const auto& [op, c] : counts())
    out += "  " + std::string(op_name(op)) + ": " + std::to_string(c.native) + " / " +
           std::to_string(c.fallback) + "\n";
  std::set<std::string> reasons;
  for (const Node& n : nodes)
    if (!n.native)
      reasons.insert("reference fallback: " + std::string(op_name(n.op)) + " (" +
                     std::string(dtype_name(n.dtype)) + "): " + n.fallback_reason + "\n");
  for (const std::string& r : reasons) out += r;
  return out;
}

}  // namespace rlx
