// ExecutionProfile's table and RLX_PROFILE.
#include "rlx/runtime/profile.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "rlx/ir/error.h"

namespace rlx {
namespace {

std::string format(const char* fmt, auto... args) {
  char buf[256];
  std::snprintf(buf, sizeof buf, fmt, args...);
  return buf;
}

}  // namespace

std::optional<ProfileMode> profile_from_env() {
  const char* env = std::getenv("RLX_PROFILE");
  if (env == nullptr || *env == '\0') return std::nullopt;
  std::string v(env);
  if (v == "0") return ProfileMode::Off;
  if (v == "1") return ProfileMode::Report;
  throw Error("RLX_PROFILE must be 0 or 1, found '" + v + "'");
}

double ExecutionProfile::kernel_seconds() const {
  double s = 0;
  for (const NodeTotal& n : nodes)
    if (n.depth == 0) s += n.seconds;
  return s;
}

std::string ExecutionProfile::to_string() const {
  const double run_ms = run_seconds * 1e3;
  auto pct = [&](double seconds) { return run_seconds > 0 ? 100.0 * seconds / run_seconds : 0.0; };
  std::string out = format("rlx profile: %lld runs, %.3f ms in execute (%.3f ms per run)\n",
                           static_cast<long long>(runs), run_ms,
                           runs > 0 ? run_ms / static_cast<double>(runs) : 0.0);
  out += format("%-24s %10s %12s %7s\n", "op", "calls", "total ms", "% run");
  for (const OpTotal& o : ops)
    out += format("%-24s %10lld %12.3f %6.1f%%\n", std::string(op_name(o.op)).c_str(),
                  static_cast<long long>(o.calls), o.seconds * 1e3, pct(o.seconds));
  const double outside = std::max(0.0, run_seconds - kernel_seconds());
  out +=
      format("%-24s %10s %12.3f %6.1f%%\n", "(outside kernels)", "", outside * 1e3, pct(outside));
  // children[i + 1]: the rows whose parent is row i (children[0]: the top-level steps).
  std::vector<std::vector<const NodeTotal*>> children(nodes.size() + 1);
  for (const NodeTotal& n : nodes) children[static_cast<size_t>(n.parent + 1)].push_back(&n);
  auto slowest = [&](int32_t parent) {
    std::vector<const NodeTotal*> rows = children[static_cast<size_t>(parent + 1)];
    std::stable_sort(rows.begin(), rows.end(), [](const NodeTotal* a, const NodeTotal* b) {
      return a->seconds > b->seconds;
    });
    if (rows.size() > 20) rows.resize(20);
    return rows;
  };
  std::vector<const NodeTotal*> top = slowest(-1);
  const bool bodies = nodes.size() > children[0].size();
  out += format("top %zu nodes%s:\n", top.size(),
                bodies ? " (body steps indented under their control-flow node, whose time "
                         "includes them)"
                       : "");
  out += format("%6s  %-32s %-24s %10s %12s %7s\n", "node", "name", "op", "calls", "total ms",
                "% run");
  auto print = [&](auto& self, const std::vector<const NodeTotal*>& rows) -> void {
    for (const NodeTotal* n : rows) {
      std::string name = std::string(static_cast<size_t>(2 * n->depth), ' ') + n->name;
      out += format("%6d  %-32s %-24s %10lld %12.3f %6.1f%%\n", n->node, name.c_str(),
                    std::string(op_name(n->op)).c_str(), static_cast<long long>(n->calls),
                    n->seconds * 1e3, pct(n->seconds));
      self(self, slowest(static_cast<int32_t>(n - nodes.data())));
    }
  };
  print(print, top);
  return out;
}

}  // namespace rlx
