// PassManager: runs a pipeline of passes with verification, timing and IR dumps.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "rlx/ir/error.h"
#include "rlx/opt/pass.h"
#include "rlx/opt/rewrite.h"

namespace rlx {
namespace {

// Splits a comma-separated environment variable into names; unset or empty gives none.
std::vector<std::string> names_from_env(const char* var) {
  std::vector<std::string> out;
  const char* value = std::getenv(var);
  if (value == nullptr) return out;
  std::stringstream ss(value);
  std::string item;
  while (std::getline(ss, item, ',')) {
    size_t b = item.find_first_not_of(" \t"), e = item.find_last_not_of(" \t");
    if (b != std::string::npos) out.push_back(item.substr(b, e - b + 1));
  }
  return out;
}

bool verify_by_default() {
#ifndef NDEBUG
  return true;
#else
  const char* value = std::getenv("RLX_VERIFY_IR");
  return value != nullptr && std::string_view(value) == "1";
#endif
}

void dump_to_stderr(std::string_view pass, std::string_view when, const Graph& g) {
  std::string text =
      "// ----- IR " + std::string(when) + " " + std::string(pass) + " -----\n" + g.to_string();
  if (text.back() != '\n') text += '\n';
  std::fputs(text.c_str(), stderr);
}

}  // namespace

PassManager::PassManager()
    : before_(names_from_env("RLX_PRINT_IR_BEFORE")),
      after_(names_from_env("RLX_PRINT_IR_AFTER")),
      sink_(dump_to_stderr),
      verify_(verify_by_default()) {}

PassManager& PassManager::add(std::unique_ptr<Pass> pass) {
  check(pass != nullptr, "PassManager::add: null pass");
  passes_.push_back(std::move(pass));
  return *this;
}

void PassManager::print_ir_before(std::vector<std::string> passes) {
  before_.insert(before_.end(), passes.begin(), passes.end());
}

void PassManager::print_ir_after(std::vector<std::string> passes) {
  after_.insert(after_.end(), passes.begin(), passes.end());
}

void PassManager::set_ir_sink(
    std::function<void(std::string_view pass, std::string_view when, const Graph&)> sink) {
  sink_ = sink ? std::move(sink) : dump_to_stderr;
}

bool PassManager::wants(const std::vector<std::string>& list, std::string_view pass) const {
  for (const std::string& name : list)
    if (name == "all" || name == pass) return true;
  return false;
}

bool PassManager::run(Graph& g) {
  // A dump request naming no pass of this pipeline would otherwise be silently ignored.
  std::vector<std::string> names = pass_names();
  for (const auto* list : {&before_, &after_})
    for (const std::string& want : *list)
      if (want != "all" && std::find(names.begin(), names.end(), want) == names.end()) {
        std::string known;
        for (const std::string& n : names) known += (known.empty() ? "" : ", ") + n;
        std::fprintf(stderr,
                     "rlx: IR dump requested for '%s', which is not a pass of this pipeline (%s)\n",
                     want.c_str(), known.c_str());
      }
  bool any = false;
  for (const std::unique_ptr<Pass>& pass : passes_) {
    std::string name(pass->name());
    if (wants(before_, name)) sink_(name, "before", g);
    auto start = std::chrono::steady_clock::now();
    bool changed = pass->run(g);
    std::chrono::duration<double, std::milli> elapsed = std::chrono::steady_clock::now() - start;
    timings_.push_back({name, elapsed.count(), changed});
    any = any || changed;
    if (wants(after_, name)) sink_(name, "after", g);
    if (verify_) {
      std::vector<std::string> problems = g.verify();
      if (!problems.empty()) {
        std::string joined;
        for (const std::string& p : problems) joined += (joined.empty() ? "" : "; ") + p;
        throw Error("pass '" + name + "' produced an invalid graph: " + joined);
      }
    }
  }
  return any;
}

std::string PassManager::timing_report() const {
  std::string out;
  char line[256];
  for (const PassTiming& t : timings_) {
    std::snprintf(line, sizeof line, "%-28s %10.3f ms  %s\n", t.pass.c_str(), t.ms,
                  t.changed ? "changed" : "unchanged");
    out += line;
  }
  return out;
}

std::vector<std::string> PassManager::pass_names() const {
  std::vector<std::string> out;
  for (const std::unique_ptr<Pass>& pass : passes_) out.emplace_back(pass->name());
  return out;
}

bool map_bodies(Graph& g, const BodyFn& fn) {
  bool any = false;
  for (const Node& n : g.nodes()) any = any || is_control_flow(n.op);
  if (!any) return false;
  bool changed = false;
  Graph out =
      rewrite(g,
              [&](RewriteContext& ctx, const Node& n,
                  std::span<const Value> operands) -> std::optional<std::vector<Value>> {
                if (!is_control_flow(n.op)) return std::nullopt;
                bool here = false;
                auto update = [&](const std::string& region, const GraphRef& body) {
                  std::optional<Graph> b = fn(n, region, *body);
                  if (!b) return body;
                  here = true;
                  return GraphRef(std::make_shared<const Graph>(std::move(*b)));
                };
                AttrMap attrs = n.attrs;
                for (const auto& [name, value] : n.attrs.entries()) {
                  if (const auto* body = std::get_if<GraphRef>(&value))
                    attrs.set(name, update(name, *body));
                  if (const auto* bodies = std::get_if<GraphList>(&value)) {
                    GraphList updated;
                    for (size_t i = 0; i < bodies->size(); ++i)
                      updated.push_back(update(name + "[" + std::to_string(i) + "]", (*bodies)[i]));
                    attrs.set(name, std::move(updated));
                  }
                }
                if (!here) return std::nullopt;
                changed = true;
                return ctx.dst.emit(n.op, std::vector<Value>(operands.begin(), operands.end()),
                                    std::move(attrs), n.name);
              });
  if (changed) g = std::move(out);
  return changed;
}

bool run_in_bodies(Pass& pass, Graph& g) {
  return map_bodies(g, [&](const Node&, const std::string&, const Graph& body) {
    Graph b = body;
    return pass.run(b) ? std::optional<Graph>(std::move(b)) : std::nullopt;
  });
}

}  // namespace rlx
