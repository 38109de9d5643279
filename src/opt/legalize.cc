// Legalization for a backend: dispatch policy parsing, level-by-level decomposition of what the
// backend does not run natively, the dispatch report and the "legalize" pass.
#include "rlx/opt/legalize.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <vector>

#include "rlx/ir/custom_op.h"
#include "rlx/ir/error.h"
#include "rlx/opt/decompose.h"
#include "rlx/opt/rewrite.h"

namespace rlx {
namespace {

constexpr std::array<KernelDispatch, 3> kPolicies = {
    KernelDispatch::PreferNative, KernelDispatch::ForceCommon, KernelDispatch::ForceNative};

std::string allowed_policies() {
  std::string out;
  for (KernelDispatch p : kPolicies)
    out += (out.empty() ? "" : ", ") + std::string(kernel_dispatch_name(p));
  return out;
}

std::string_view trim(std::string_view s) {
  size_t b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
  return b == std::string_view::npos ? std::string_view{} : s.substr(b, e - b + 1);
}

std::optional<KernelDispatch> policy_from_name(std::string_view word) {
  for (KernelDispatch p : kPolicies)
    if (kernel_dispatch_name(p) == word) return p;
  return std::nullopt;
}

// Input, param and constant are data the runtime binds, not kernels: always legal, never
// counted. iota is a leaf too but computes its value, so a backend has to claim it.
bool is_data_leaf(OpKind op) {
  return op == OpKind::Input || op == OpKind::Param || op == OpKind::Constant;
}

enum class Decision { kNative, kDecompose, kMissing };

Decision decide(const Node& node, const std::set<OpKind>& supported, const DispatchOptions& opts) {
  const OpKind op = node.op;
  if (is_data_leaf(op)) return Decision::kNative;
  bool claimed = supported.contains(op);
  bool composite = op_info(op).has(kComposite);
  if (op == OpKind::CustomCall) {
    // A backend that claims custom_call runs host kernels (the CPU): it runs a custom op
    // natively when the op has a CPU kernel, or no decomposition (then its reference kernel);
    // else, and on every other backend, the op is a composite of its decomposition.
    const CustomOpDef& def = custom_op_of(node);
    composite = static_cast<bool>(def.decompose);
    claimed = claimed && (def.cpu_kernel || !composite);
  }
  switch (opts.policy_for(op)) {
    case KernelDispatch::PreferNative:
      return claimed ? Decision::kNative : composite ? Decision::kDecompose : Decision::kMissing;
    case KernelDispatch::ForceCommon:
      return composite ? Decision::kDecompose : claimed ? Decision::kNative : Decision::kMissing;
    case KernelDispatch::ForceNative:
      return claimed ? Decision::kNative : Decision::kMissing;
  }
  return Decision::kMissing;
}

// The node of the caller's graph a node descends from: itself, or the node whose
// decomposition (at any depth) emitted it. Errors name origins, since only those names are
// the user's.
struct Origin {
  std::string name;
  OpKind op = OpKind::Input;
  bool decomposed = false;
};

// Replaces every node whose decision is kDecompose by one level of its decomposition; counts
// them in `report` and maps `origin` (indexed by node id) onto the new graph.
Graph decompose_one_level(const Graph& src, const std::set<OpKind>& supported,
                          const DispatchOptions& opts, std::vector<Origin>& origin,
                          DispatchReport& report) {
  std::vector<Origin> next;
  auto expand_or_copy = [&](RewriteContext& ctx, const Node& node,
                            std::span<const Value> operands) {
    Graph& dst = ctx.dst;
    const Origin& from = origin[static_cast<size_t>(ctx.id)];
    size_t first = dst.nodes().size();
    bool expand = decide(node, supported, opts) == Decision::kDecompose;
    std::vector<Value> results;
    if (expand) {
      ++report.ops[node.op].decomposed;
      results = decompose_node(dst, node, operands);
    } else {
      results = dst.emit(node.op, std::vector<Value>(operands.begin(), operands.end()), node.attrs,
                         node.name);
    }
    next.resize(dst.nodes().size());
    for (size_t i = first; i < next.size(); ++i)
      next[i] = {from.name, from.op, from.decomposed || expand};
    return std::optional<std::vector<Value>>(std::move(results));
  };
  Graph out = rewrite(src, expand_or_copy);
  // Inputs and params are copied by rewrite() itself, without a call: they are their own origin.
  next.resize(out.nodes().size());
  for (size_t i = 0; i < next.size(); ++i)
    if (next[i].name.empty()) next[i] = {out.nodes()[i].name, out.nodes()[i].op};
  origin = std::move(next);
  return out;
}

bool report_requested() {
  const char* value = std::getenv("RLX_DISPATCH_REPORT");
  return value != nullptr && std::string_view(value) != "" && std::string_view(value) != "0";
}

// "erf (nodes %e, %1 via gelu)": one entry per distinct origin, in graph order.
std::string describe_missing(OpKind op, const std::vector<std::string>& where,
                             const DispatchOptions& opts) {
  std::string out = std::string(op_name(op)) + (where.size() == 1 ? " (node " : " (nodes ");
  for (size_t i = 0; i < where.size(); ++i) out += (i ? ", " : "") + where[i];
  if (op_info(op).has(kComposite) && opts.policy_for(op) == KernelDispatch::ForceNative)
    out += ", kept by force_native";
  return out + ")";
}

}  // namespace

std::string_view kernel_dispatch_name(KernelDispatch policy) {
  switch (policy) {
    case KernelDispatch::PreferNative:
      return "prefer_native";
    case KernelDispatch::ForceCommon:
      return "force_common";
    case KernelDispatch::ForceNative:
      return "force_native";
  }
  return "?";
}

KernelDispatch DispatchOptions::policy_for(OpKind op) const {
  auto it = overrides.find(op);
  return it == overrides.end() ? policy : it->second;
}

DispatchOptions DispatchOptions::parse(std::string_view text, std::string_view source) {
  DispatchOptions opts;
  std::string where(source);
  if (trim(text).empty()) return opts;
  bool have_default = false;
  size_t pos = 0;
  for (;;) {
    size_t comma = text.find(',', pos);
    std::string_view entry = trim(
        text.substr(pos, comma == std::string_view::npos ? std::string_view::npos : comma - pos));
    check(!entry.empty(), where + ": empty entry in '" + std::string(text) + "'");
    size_t eq = entry.find('=');
    std::string_view word = trim(eq == std::string_view::npos ? entry : entry.substr(eq + 1));
    std::optional<KernelDispatch> policy = policy_from_name(word);
    check(policy.has_value(), where + ": unknown policy '" + std::string(word) + "' in '" +
                                  std::string(entry) + "' (allowed: " + allowed_policies() + ")");
    if (eq == std::string_view::npos) {
      check(!have_default, where + ": default policy given twice in '" + std::string(text) + "'");
      have_default = true;
      opts.policy = *policy;
    } else {
      std::string_view op_text = trim(entry.substr(0, eq));
      std::optional<OpKind> op = op_from_name(op_text);
      check(op.has_value(), where + ": unknown op '" + std::string(op_text) + "' in '" +
                                std::string(entry) +
                                "' (expected an op mnemonic such as layer_norm or attention, "
                                "then =" +
                                allowed_policies() + ")");
      check(
          opts.overrides.emplace(*op, *policy).second,
          where + ": op '" + std::string(op_text) + "' given twice in '" + std::string(text) + "'");
    }
    if (comma == std::string_view::npos) break;
    pos = comma + 1;
  }
  return opts;
}

DispatchOptions DispatchOptions::from_env() {
  const char* value = std::getenv("RLX_KERNEL_DISPATCH");
  return value == nullptr ? DispatchOptions{} : parse(value);
}

DispatchCounts DispatchReport::at(OpKind op) const {
  auto it = ops.find(op);
  return it == ops.end() ? DispatchCounts{} : it->second;
}

bool DispatchReport::legal() const {
  return std::all_of(ops.begin(), ops.end(), [](const auto& e) { return e.second.missing == 0; });
}

std::string DispatchReport::to_string() const {
  const std::string kOp = "op", kTotal = "total";
  size_t width = std::max(kOp.size(), kTotal.size());
  for (const auto& [op, counts] : ops) width = std::max(width, op_name(op).size());
  auto row = [&](std::string_view name, const std::string& a, const std::string& b,
                 const std::string& c) {
    auto pad_left = [](const std::string& s, size_t w) {
      return std::string(w > s.size() ? w - s.size() : 0, ' ') + s;
    };
    std::string line(name);
    line += std::string(width - name.size(), ' ');
    return line + pad_left(a, 8) + pad_left(b, 12) + pad_left(c, 9) + "\n";
  };
  std::string out = "dispatch report for backend '" + backend + "'\n";
  out += row(kOp, "native", "decomposed", "missing");
  DispatchCounts total;
  for (const auto& [op, c] : ops) {
    out += row(op_name(op), std::to_string(c.native), std::to_string(c.decomposed),
               std::to_string(c.missing));
    total.native += c.native;
    total.decomposed += c.decomposed;
    total.missing += c.missing;
  }
  return out + row(kTotal, std::to_string(total.native), std::to_string(total.decomposed),
                   std::to_string(total.missing));
}

namespace {

int decomposed_total(const DispatchReport& rep) {
  int n = 0;
  for (const auto& [op, c] : rep.ops) n += c.decomposed;
  return n;
}

// Legalizes `g`, then the bodies of its control-flow nodes (recursively, so a composite inside
// a scan body is decomposed like one at the top level): counts into `rep` and collects what
// cannot run into `missing`, each node named with `where`, the path of the enclosing
// control-flow nodes (" in %s.body in %c.branches[1]"); custom ops that cannot run go to
// `custom_missing` by their own name.
Graph legalize_graph(const Graph& g, const std::set<OpKind>& supported, const DispatchOptions& opts,
                     DispatchReport& rep, std::map<OpKind, std::vector<std::string>>& missing,
                     std::vector<std::string>& custom_missing, const std::string& where) {
  std::vector<Origin> origin;
  for (const Node& n : g.nodes()) origin.push_back({n.name, n.op});
  auto needs_decomposition = [&](const Graph& x) {
    return std::any_of(x.nodes().begin(), x.nodes().end(), [&](const Node& n) {
      return decide(n, supported, opts) == Decision::kDecompose;
    });
  };
  // Each round expands one level; decompositions only emit ops closer to primitives, so this
  // ends once what is left runs natively or is missing.
  Graph out = g;
  while (needs_decomposition(out)) out = decompose_one_level(out, supported, opts, origin, rep);

  for (size_t i = 0; i < out.nodes().size(); ++i) {
    OpKind op = out.nodes()[i].op;
    if (is_data_leaf(op)) continue;
    if (decide(out.nodes()[i], supported, opts) == Decision::kNative) {
      ++rep.ops[op].native;
      continue;
    }
    ++rep.ops[op].missing;
    const Origin& o = origin[i];
    std::string name = "%" + o.name;
    if (o.decomposed) name += " via " + std::string(op_name(o.op));
    name += where;
    if (op == OpKind::CustomCall) {
      const CustomOpDef& def = custom_op_of(out.nodes()[i]);
      custom_missing.push_back(
          "custom op '" + def.name + "' (node " + name +
          (def.decompose
               ? ") has no kernel on backend '" + rep.backend +
                     "' and force_native keeps it from its decomposition"
               : ") has no decomposition: it cannot run on backend '" + rep.backend + "'"));
      continue;
    }
    std::vector<std::string>& list = missing[op];
    if (std::find(list.begin(), list.end(), name) == list.end()) list.push_back(name);
  }
  map_bodies(
      out,
      [&](const Node& n, const std::string& region, const Graph& body) -> std::optional<Graph> {
        int before = decomposed_total(rep);
        Graph b = legalize_graph(body, supported, opts, rep, missing, custom_missing,
                                 " in %" + n.name + "." + region + where);
        if (decomposed_total(rep) == before) return std::nullopt;
        return b;
      });
  return out;
}

}  // namespace

Graph legalize(const Graph& g, const std::set<OpKind>& supported, const DispatchOptions& opts,
               std::string_view backend, DispatchReport* report) {
  DispatchReport rep;
  rep.backend = std::string(backend);
  std::map<OpKind, std::vector<std::string>> missing;
  std::vector<std::string> custom_missing;  // custom ops by name, in graph order
  Graph out = legalize_graph(g, supported, opts, rep, missing, custom_missing, "");
  if (report != nullptr) *report = rep;
  if (report_requested()) std::fputs(rep.to_string().c_str(), stderr);
  if (!missing.empty() || !custom_missing.empty()) {
    std::string msg = "backend '" + rep.backend + "' cannot run: ";
    bool first = true;
    for (const auto& [op, where] : missing) {
      msg += (first ? "" : ", ") + describe_missing(op, where, opts);
      first = false;
    }
    for (const std::string& c : custom_missing) {
      msg += (first ? "" : "; ") + c;
      first = false;
    }
    throw Error(msg);
  }
  return out;
}

namespace {

class LegalizePass : public Pass {
 public:
  LegalizePass(std::set<OpKind> supported, DispatchOptions options, std::string backend,
               DispatchReport* report)
      : supported_(std::move(supported)),
        options_(std::move(options)),
        backend_(std::move(backend)),
        report_(report) {}

  std::string_view name() const override { return "legalize"; }

  bool run(Graph& g) override {
    DispatchReport local;
    DispatchReport* rep = report_ != nullptr ? report_ : &local;
    g = legalize(g, supported_, options_, backend_, rep);
    return std::any_of(rep->ops.begin(), rep->ops.end(),
                       [](const auto& e) { return e.second.decomposed > 0; });
  }

 private:
  std::set<OpKind> supported_;
  DispatchOptions options_;
  std::string backend_;
  DispatchReport* report_;
};

}  // namespace

std::unique_ptr<Pass> create_legalize_pass(std::set<OpKind> supported, DispatchOptions options,
                                           std::string backend, DispatchReport* report) {
  return std::make_unique<LegalizePass>(std::move(supported), std::move(options),
                                        std::move(backend), report);
}

}  // namespace rlx
