// Typed op attributes: a variant value and a name -> value map with typed accessors.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "rlx/ir/dtype.h"
#include "rlx/ir/tensor.h"

namespace rlx {

class Graph;

/// The kinds of attribute value an op schema can declare.
enum class AttrType : uint8_t { Int, Float, Bool, String, Ints, DType, Tensor, Graph, Graphs };
/// Name of `t` in diagnostics: "int", "float", "bool", "string", "int list", "dtype", ...
std::string_view attr_type_name(AttrType t);

/// A region of an op: a nested body graph, immutable and shared between copies of the owning
/// graph (docs/ir.md "Regions").
using GraphRef = std::shared_ptr<const Graph>;
/// A list of regions (cond's branches).
using GraphList = std::vector<GraphRef>;

/// One attribute value. `Graph` holds a nested body (elementwise_region, while_loop, scan),
/// `Graphs` a list of them (cond's branches).
using Attr = std::variant<int64_t, double, bool, std::string, std::vector<int64_t>, DType, Tensor,
                          GraphRef, GraphList>;
/// The kind of value `a` holds (the variant's alternatives are in AttrType order).
AttrType attr_type(const Attr& a);

/// Attributes of one node, by name. Accessors throw rlx::Error naming the attribute when it is
/// missing or has another type (the schema check in Graph::emit makes that an internal error).
class AttrMap {
 public:
  AttrMap() = default;
  AttrMap(std::initializer_list<std::pair<const std::string, Attr>> init) : map_(init) {}

  bool has(const std::string& name) const { return map_.count(name) != 0; }
  void set(const std::string& name, Attr value) { map_[name] = std::move(value); }
  void erase(const std::string& name) { map_.erase(name); }
  const Attr& get(const std::string& name) const;

  int64_t get_int(const std::string& name) const;
  double get_float(const std::string& name) const;
  bool get_bool(const std::string& name) const;
  const std::string& get_string(const std::string& name) const;
  const std::vector<int64_t>& get_ints(const std::string& name) const;
  DType get_dtype(const std::string& name) const;
  const Tensor& get_tensor(const std::string& name) const;
  const Graph& get_graph(const std::string& name) const;
  const GraphList& get_graphs(const std::string& name) const;

  const std::map<std::string, Attr>& entries() const { return map_; }
  bool operator==(const AttrMap& o) const;

 private:
  std::map<std::string, Attr> map_;
};

}  // namespace rlx
