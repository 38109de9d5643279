// Text form of graphs: printer and parser (docs/ir.md). (filled in by the text-format work)
#include "rlx/ir/graph.h"
#include "rlx/ir/error.h"

namespace rlx {
std::string Graph::to_string() const { throw Error("Graph::to_string: not built yet"); }
Graph Graph::parse(std::string_view) { throw Error("Graph::parse: not built yet"); }
}  // namespace rlx
