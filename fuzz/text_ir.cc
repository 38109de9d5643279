// Fuzz target: the text IR parser (Graph::parse) and the printer's round trip.
#include <string>
#include <string_view>

#include "fuzz_targets.h"
#include "rlx/ir/error.h"
#include "rlx/ir/graph.h"

namespace rlx::fuzz {
namespace {

std::string clip(const std::string& s) { return s.size() <= 4000 ? s : s.substr(0, 4000) + "..."; }

}  // namespace

int text_ir(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  Graph g;
  try {
    g = Graph::parse(text);
  } catch (const Error&) {
    return 0;  // rejected with a located message: the documented outcome
  }
  std::vector<std::string> problems = g.verify();
  expect(problems.empty(), "text_ir: a parsed graph fails verify: " +
                               (problems.empty() ? std::string() : problems[0]));
  const std::string printed = g.to_string();
  Graph again;
  try {
    again = Graph::parse(printed);
  } catch (const Error& e) {
    throw Finding(std::string("text_ir: the printed form of a parsed graph does not parse: ") +
                  e.what() + "\nprinted:\n" + clip(printed));
  }
  const std::string reprinted = again.to_string();
  expect(reprinted == printed, "text_ir: parse(print(g)) prints differently\nfirst:\n" +
                                   clip(printed) + "\nsecond:\n" + clip(reprinted));
  return 0;
}

}  // namespace rlx::fuzz
