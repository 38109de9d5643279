// Session and its LRU compile cache.
#include "rlx/runtime/session.h"

#include <chrono>
#include <cstdlib>
#include <string>

#include "rlx/ir/error.h"

namespace rlx {
namespace {

size_t capacity_from(const SessionOptions& options) {
  const char* env = std::getenv("RLX_COMPILE_CACHE_SIZE");
  if (env == nullptr || *env == '\0') return options.cache_capacity;
  char* end = nullptr;
  long long n = std::strtoll(env, &end, 10);
  check(*end == '\0' && n >= 0,
        "RLX_COMPILE_CACHE_SIZE must be a non-negative integer, found '" + std::string(env) + "'");
  return static_cast<size_t>(n);
}

}  // namespace

Session::Session(Device device, SessionOptions options)
    : device_(device), backend_(backend_for(device.kind)), capacity_(capacity_from(options)) {}

std::shared_ptr<Executable> Session::compile(const Graph& graph, const CompileOptions& options) {
  // The canonical text form determines the graph exactly (ops, attributes incl. constant
  // values, types, names, outputs), so equal keys mean equal graphs; no hash collisions.
  std::string key = device_.to_string() + "\n" + options.cache_key() + "\n" + graph.to_string();
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = index_.find(key);
    if (it != index_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      ++stats_.hits;
      return it->second->second;
    }
  }
  // Compile outside the lock so other threads can hit the cache meanwhile; two threads
  // missing on one key both compile and the second insert wins (both results are valid).
  auto start = std::chrono::steady_clock::now();
  std::shared_ptr<Executable> exe = backend_->compile(graph, options, device_);
  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.misses;
  stats_.compile_seconds += seconds;
  if (capacity_ == 0) return exe;
  auto it = index_.find(key);
  if (it != index_.end()) {
    lru_.erase(it->second);
    index_.erase(it);
  }
  lru_.emplace_front(key, exe);
  index_[key] = lru_.begin();
  while (lru_.size() > capacity_) {
    index_.erase(lru_.back().first);
    lru_.pop_back();
    ++stats_.evictions;
  }
  return exe;
}

CompileCacheStats Session::cache_stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  CompileCacheStats s = stats_;
  s.size = lru_.size();
  return s;
}

void Session::clear_cache() {
  std::lock_guard<std::mutex> lock(mu_);
  lru_.clear();
  index_.clear();
}

}  // namespace rlx
