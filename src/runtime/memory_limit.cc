// Memory limits of compiles (rlx/runtime/memory_limit.h): RLX_MEMORY_LIMIT, physical memory,
// the planned memory of an executable and the check backends run before allocating.
#include "rlx/runtime/memory_limit.h"

#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "rlx/ir/error.h"

namespace rlx {
namespace {

constexpr int64_t kMaxBytes = std::numeric_limits<int64_t>::max();

int64_t add_saturating(int64_t a, int64_t b) {
  int64_t s = 0;
  return __builtin_add_overflow(a, b, &s) ? kMaxBytes : s;
}

/// numel * dtype size of `t`, saturating (a declared shape may need more than 2^63 bytes).
int64_t bytes_of(const TensorType& t) {
  for (int64_t d : t.shape.dims())
    if (d == 0) return 0;
  int64_t n = dtype_size(t.dtype);
  for (int64_t d : t.shape.dims())
    if (__builtin_mul_overflow(n, d, &n)) return kMaxBytes;
  return n;
}

std::string mib(int64_t bytes) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return buf;
}

}  // namespace

int64_t parse_memory_size(std::string_view text, std::string_view what) {
  auto malformed = [&] {
    return Error(std::string(what) +
                 ": expected a positive byte count with an optional K, M, G or T suffix (powers "
                 "of 1024), e.g. 512M or 8G; found '" +
                 std::string(text) + "'");
  };
  size_t i = 0;
  uint64_t n = 0;
  bool overflow = false;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) {
    overflow = overflow || __builtin_mul_overflow(n, 10u, &n) ||
               __builtin_add_overflow(n, static_cast<uint64_t>(text[i] - '0'), &n);
    ++i;
  }
  if (i == 0) throw malformed();
  int shift = 0;
  if (i < text.size()) {
    switch (std::toupper(static_cast<unsigned char>(text[i]))) {
      case 'K':
        shift = 10;
        break;
      case 'M':
        shift = 20;
        break;
      case 'G':
        shift = 30;
        break;
      case 'T':
        shift = 40;
        break;
      default:
        break;
    }
    if (shift == 0) throw malformed();
    ++i;
    std::string rest(text.substr(i));
    for (char& c : rest) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    if (!rest.empty() && rest != "B" && rest != "IB") throw malformed();
  }
  if (n == 0) throw malformed();
  if (overflow || n > (static_cast<uint64_t>(kMaxBytes) >> shift))
    throw Error(std::string(what) + ": '" + std::string(text) + "' is more than 2^63 - 1 bytes");
  return static_cast<int64_t>(n << shift);
}

std::optional<int64_t> memory_limit_from_env() {
  const char* env = std::getenv("RLX_MEMORY_LIMIT");
  if (env == nullptr || *env == '\0') return std::nullopt;
  return parse_memory_size(env, "RLX_MEMORY_LIMIT");
}

int64_t physical_memory_bytes() {
  long pages = sysconf(_SC_PHYS_PAGES);
  long page = sysconf(_SC_PAGE_SIZE);
  int64_t bytes = 0;
  if (pages <= 0 || page <= 0 || __builtin_mul_overflow(int64_t{pages}, int64_t{page}, &bytes))
    return kMaxBytes;
  return bytes;
}

int64_t PlannedMemory::total() const {
  return add_saturating(
      add_saturating(add_saturating(arena, params), add_saturating(constants, outputs)),
      add_saturating(state, bodies));
}

PlannedMemory planned_memory(const Graph& compiled, const MemoryPlan& plan,
                             const std::vector<IoSpec>& params, const std::vector<IoSpec>& outputs,
                             const std::vector<StateSpec>& state) {
  PlannedMemory m;
  for (const StateSpec& s : state) m.state = add_saturating(m.state, bytes_of(s.type));
  m.arena = plan.arena_bytes;
  for (const IoSpec& p : params) m.params = add_saturating(m.params, bytes_of(p.type));
  for (const IoSpec& o : outputs) m.outputs = add_saturating(m.outputs, bytes_of(o.type));
  for (const Node& n : compiled.nodes())
    if (n.op == OpKind::Constant) m.constants = add_saturating(m.constants, bytes_of(n.results[0]));
  return m;
}

void check_memory_limit(const std::string& backend, const PlannedMemory& planned,
                        std::optional<int64_t> limit) {
  const int64_t max = limit ? *limit : physical_memory_bytes();
  const int64_t total = planned.total();
  if (total <= max) return;
  const std::string source = limit ? "RLX_MEMORY_LIMIT / CompileOptions::memory_limit"
                                   : "physical memory; RLX_MEMORY_LIMIT sets another";
  throw Error(backend + " backend: planned memory " + mib(total) + " (arena " + mib(planned.arena) +
              (planned.bodies > 0 ? ", bodies " + mib(planned.bodies) : std::string()) +
              ", params " + mib(planned.params) + ", constants " + mib(planned.constants) +
              ", outputs " + mib(planned.outputs) +
              (planned.state > 0 ? ", state " + mib(planned.state) : std::string()) + "; " +
              std::to_string(total) + (total == kMaxBytes ? "+" : "") +
              " bytes) exceeds the limit " + mib(max) + " (" + std::to_string(max) + " bytes, " +
              source + ")");
}

}  // namespace rlx
