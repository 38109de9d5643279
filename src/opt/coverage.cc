// The op reference table printed by `rlx ops` and published in docs/ops.md.
#include "rlx/opt/coverage.h"

#include <cstdio>

#include "rlx/ir/op.h"
#include "rlx/ir/text_util.h"

namespace rlx {
namespace {

std::string attr_value_text(const Attr& a) {
  switch (attr_type(a)) {
    case AttrType::Int:
      return std::to_string(std::get<int64_t>(a));
    case AttrType::Float:
      return format_float(std::get<double>(a));
    case AttrType::Bool:
      return std::get<bool>(a) ? "true" : "false";
    case AttrType::String:
      return "\"" + std::get<std::string>(a) + "\"";
    case AttrType::Ints:
      return Shape(std::get<std::vector<int64_t>>(a)).to_string();
    case AttrType::DType:
      return std::string(dtype_name(std::get<DType>(a)));
    default:
      return "?";
  }
}

std::string attrs_text(const OpInfo& info) {
  std::string s;
  for (const AttrSpec& a : info.attrs) {
    if (!s.empty()) s += ", ";
    s += a.name + ":" + std::string(attr_type_name(a.type));
    if (a.presence == AttrPresence::Default) s += "=" + attr_value_text(a.default_value);
    if (a.presence == AttrPresence::Optional) s += "?";
    if (!a.choices.empty()) {
      std::string c;
      for (const auto& x : a.choices) c += (c.empty() ? "" : "/") + x;
      s += " (" + c + ")";
    }
  }
  return s.empty() ? "-" : s;
}

}  // namespace

std::string op_coverage_table(bool markdown) {
  std::string out;
  char line[768];
  if (markdown) {
    out += "| op | operands | results | dtypes | attributes |\n";
    out += "|---|---|---|---|---|\n";
  } else {
    std::snprintf(line, sizeof line, "%-26s %-8s %-7s %-40s %s\n", "op", "operands", "results",
                  "dtypes", "attributes");
    out += line;
  }
  for (int i = 0; i < kNumOps; ++i) {
    const OpInfo& info = op_info(static_cast<OpKind>(i));
    auto arity = [](int n) { return n < 0 ? std::string("var") : std::to_string(n); };
    std::string attrs = attrs_text(info), dtypes = info.dtypes.to_string();
    const char* fmt = markdown ? "| `%s` | %s | %s | %s | %s |\n" : "%-26s %-8s %-7s %-40s %s\n";
    std::snprintf(line, sizeof line, fmt, std::string(info.name).c_str(),
                  arity(info.num_operands).c_str(), arity(info.num_results).c_str(), dtypes.c_str(),
                  attrs.c_str());
    out += line;
  }
  return out;
}

}  // namespace rlx
