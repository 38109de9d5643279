// Session and its LRU compile cache.
#include "rlx/runtime/session.h"

#include <chrono>
#include <cstdlib>
#include <string>

#include "rlx/ir/error.h"
#include "rlx/runtime/memory_limit.h"

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

// The cache key: device, options (resolved: what they took from the environment is in them)
// and the graph's canonical text form, which determines the graph exactly (ops, attributes
// incl. constant values, types, names, outputs), so equal keys mean equal graphs; no hash
// collisions.
std::string cache_key(const Device& device, const CompileOptions& options, const Graph& graph) {
  return device.to_string() + "\n" + options.cache_key() + "\n" + graph.to_string();
}

}  // namespace

CompileOptions resolve_environment(CompileOptions options) {
  if (!options.dispatch) options.dispatch = DispatchOptions::from_env();
  if (!options.precision) options.precision = precision_from_env();
  if (!options.memory_limit) options.memory_limit = memory_limit_from_env();
  if (!options.profile) options.profile = profile_from_env();
  return options;
}

Session::Session(Device device, SessionOptions options)
    : device_(device), backend_(backend_for(device.kind)), capacity_(capacity_from(options)) {}

std::shared_ptr<Executable> Session::compile(const Graph& graph, const CompileOptions& options) {
  // The environment is read here, once per compile, and reaches the backend as explicit
  // options (and the key, so changing a variable compiles anew).
  const CompileOptions resolved = resolve_environment(options);
  std::string key = cache_key(device_, resolved, graph);
  std::promise<Compiling> promise;
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (auto it = index_.find(key); it != index_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      ++stats_.hits;
      return it->second->second;
    }
    if (auto it = pending_.find(key); it != pending_.end()) {
      std::shared_future<Compiling> compiling = it->second;
      ++stats_.hits;
      lock.unlock();
      const Compiling& done = compiling.get();
      if (done.exe == nullptr) throw Error(done.error);  // that compilation's error
      return done.exe;
    }
    ++stats_.misses;
    // Without a cache every call compiles its own executable, so there is nothing to share.
    if (capacity_ > 0) pending_.emplace(key, promise.get_future().share());
  }
  // Compile outside the lock so other keys hit or compile meanwhile.
  auto start = std::chrono::steady_clock::now();
  std::shared_ptr<Executable> exe;
  try {
    exe = backend_->compile(graph, resolved, device_);
  } catch (...) {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.compile_seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (pending_.erase(key) > 0) {
      std::string message = "compile failed";
      try {
        throw;
      } catch (const std::exception& e) {
        message = e.what();
      } catch (...) {
      }
      promise.set_value(Compiling{nullptr, std::move(message)});
    }
    throw;
  }
  std::lock_guard<std::mutex> lock(mu_);
  stats_.compile_seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (capacity_ == 0) return exe;
  pending_.erase(key);
  promise.set_value(Compiling{exe, {}});
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
