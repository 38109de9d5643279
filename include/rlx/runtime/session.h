// Session: compile graphs for one device through a bounded compile cache.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "rlx/runtime/backend.h"

namespace rlx {

/// Session configuration.
struct SessionOptions {
  /// Executables kept in the compile cache; the least recently used is evicted beyond it
  /// (0 disables caching). Also RLX_COMPILE_CACHE_SIZE when set.
  size_t cache_capacity = 32;
};

/// Counters of the compile cache.
struct CompileCacheStats {
  int64_t hits = 0;
  int64_t misses = 0;     ///< compilations run
  int64_t evictions = 0;
  size_t size = 0;        ///< executables held now
  double compile_seconds = 0;  ///< total wall time of compilations
};

/// Compiles graphs for one device (like jax.jit's cache or an ONNX Runtime session). compile()
/// of a graph with the same structure (its canonical text form: ops, attributes, types,
/// names), options and device returns the cached executable — the same object, params
/// included — instead of compiling again. The cache is an LRU bounded by cache_capacity so
/// memory does not grow without limit as shapes vary. Thread-safe.
class Session {
 public:
  /// Throws rlx::Error when no backend serves `device`.
  explicit Session(Device device = Device::cpu(), SessionOptions options = {});

  const Device& device() const { return device_; }
  Backend& backend() const { return *backend_; }

  /// The executable for `graph` under `options`: cached, or compiled by the backend (see
  /// Backend::compile for errors; a failed compile caches nothing).
  std::shared_ptr<Executable> compile(const Graph& graph, const CompileOptions& options = {});

  CompileCacheStats cache_stats() const;
  void clear_cache();

 private:
  Device device_;
  std::shared_ptr<Backend> backend_;
  size_t capacity_;
  mutable std::mutex mu_;
  std::list<std::pair<std::string, std::shared_ptr<Executable>>> lru_;  // most recent first
  std::unordered_map<std::string, decltype(lru_)::iterator> index_;
  CompileCacheStats stats_;
};

}  // namespace rlx
