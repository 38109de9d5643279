// Attribute values and typed access.
#include "rlx/ir/attr.h"

#include <cmath>

#include "rlx/ir/error.h"
#include "rlx/ir/graph.h"

namespace rlx {

std::string_view attr_type_name(AttrType t) {
  switch (t) {
    case AttrType::Int:
      return "int";
    case AttrType::Float:
      return "float";
    case AttrType::Bool:
      return "bool";
    case AttrType::String:
      return "string";
    case AttrType::Ints:
      return "int list";
    case AttrType::DType:
      return "dtype";
    case AttrType::Tensor:
      return "tensor";
    case AttrType::Graph:
      return "graph";
    case AttrType::Graphs:
      return "graph list";
  }
  return "?";
}

AttrType attr_type(const Attr& a) { return static_cast<AttrType>(a.index()); }

const Attr& AttrMap::get(const std::string& name) const {
  auto it = map_.find(name);
  if (it == map_.end()) throw Error("missing attribute '" + name + "'");
  return it->second;
}

namespace {
template <class T>
const T& typed(const AttrMap& m, const std::string& name, AttrType want) {
  const Attr& a = m.get(name);
  if (const T* p = std::get_if<T>(&a)) return *p;
  throw Error("attribute '" + name + "' is a " + std::string(attr_type_name(attr_type(a))) +
              ", expected a " + std::string(attr_type_name(want)));
}
}  // namespace

int64_t AttrMap::get_int(const std::string& n) const {
  return typed<int64_t>(*this, n, AttrType::Int);
}
double AttrMap::get_float(const std::string& n) const {
  return typed<double>(*this, n, AttrType::Float);
}
bool AttrMap::get_bool(const std::string& n) const { return typed<bool>(*this, n, AttrType::Bool); }
const std::string& AttrMap::get_string(const std::string& n) const {
  return typed<std::string>(*this, n, AttrType::String);
}
const std::vector<int64_t>& AttrMap::get_ints(const std::string& n) const {
  return typed<std::vector<int64_t>>(*this, n, AttrType::Ints);
}
DType AttrMap::get_dtype(const std::string& n) const {
  return typed<DType>(*this, n, AttrType::DType);
}
const Tensor& AttrMap::get_tensor(const std::string& n) const {
  return typed<Tensor>(*this, n, AttrType::Tensor);
}
const Graph& AttrMap::get_graph(const std::string& n) const {
  return *typed<std::shared_ptr<const Graph>>(*this, n, AttrType::Graph);
}
const GraphList& AttrMap::get_graphs(const std::string& n) const {
  return typed<GraphList>(*this, n, AttrType::Graphs);
}

bool AttrMap::operator==(const AttrMap& o) const {
  if (map_.size() != o.map_.size()) return false;
  for (auto it = map_.begin(), jt = o.map_.begin(); it != map_.end(); ++it, ++jt) {
    if (it->first != jt->first || it->second.index() != jt->second.index()) return false;
    const Attr &a = it->second, &b = jt->second;
    if (auto* t = std::get_if<Tensor>(&a)) {
      if (!t->bitwise_equal(std::get<Tensor>(b))) return false;
    } else if (auto* g = std::get_if<std::shared_ptr<const Graph>>(&a)) {
      if (!(**g == *std::get<std::shared_ptr<const Graph>>(b))) return false;
    } else if (auto* gs = std::get_if<GraphList>(&a)) {
      const GraphList& hs = std::get<GraphList>(b);
      if (gs->size() != hs.size()) return false;
      for (size_t i = 0; i < gs->size(); ++i)
        if (!(*(*gs)[i] == *hs[i])) return false;
    } else if (auto* d = std::get_if<double>(&a)) {
      double e = std::get<double>(b);
      // NaN attributes compare equal; 0.0 and -0.0 do not (leaky_relu's alpha=-0.0 gives +0
      // where alpha=0.0 gives -0, so merging them would change results).
      if (!((*d == e && std::signbit(*d) == std::signbit(e)) || (*d != *d && e != e))) return false;
    } else {
      bool same = std::visit(
          [&](const auto& x) {
            using T = std::decay_t<decltype(x)>;
            if constexpr (std::is_same_v<T, Tensor> ||
                          std::is_same_v<T, std::shared_ptr<const Graph>> ||
                          std::is_same_v<T, GraphList>)
              return false;  // handled above
            else
              return x == std::get<T>(b);
          },
          a);
      if (!same) return false;
    }
  }
  return true;
}

}  // namespace rlx
