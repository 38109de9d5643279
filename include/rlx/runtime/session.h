// Session: compile graphs for one device through a bounded compile cache.
#pragma once

#include <cstddef>
#include <cstdint>
#include <future>
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
  /// compile() calls answered without compiling: from the cache, or by waiting for another
  /// thread's compilation of the same key.
  int64_t hits = 0;
  int64_t misses = 0;          ///< compilations started (failed ones included)
  int64_t evictions = 0;       ///< executables dropped because the cache was full
  size_t size = 0;             ///< executables held now
  double compile_seconds = 0;  ///< total wall time of compilations (failed ones included)
};

/// `options` with what they leave to the environment filled in, as Session::compile does:
/// an absent dispatch becomes DispatchOptions::from_env() (RLX_KERNEL_DISPATCH; unset: the
/// defaults), an absent precision becomes precision_from_env() (RLX_PRECISION when set and not
/// empty; else it stays absent, meaning the backend's default), an absent memory limit becomes
/// memory_limit_from_env() (RLX_MEMORY_LIMIT when set and not empty; else it stays absent,
/// meaning the physical memory), an absent profile mode becomes profile_from_env() (RLX_PROFILE
/// when set and not empty; else it stays absent, meaning Off). The one place the runtime reads
/// these variables; tools that run the pipeline or a backend directly call it to behave like a
/// Session. Throws rlx::Error "RLX_KERNEL_DISPATCH: ..." / "RLX_PRECISION: ..." /
/// "RLX_MEMORY_LIMIT: ..." / "RLX_PROFILE must be 0 or 1, ..." for a malformed value.
CompileOptions resolve_environment(CompileOptions options);

/// Compiles graphs for one device (like jax.jit's cache or an ONNX Runtime session). compile()
/// of a graph with the same structure (its canonical text form: ops, attributes, types,
/// names), options and device returns the cached executable — the same object, params
/// included, so set_param on it is seen by every holder — instead of compiling again. Each
/// compile() first resolves what the options leave to the environment (resolve_environment:
/// RLX_KERNEL_DISPATCH, RLX_PRECISION, RLX_MEMORY_LIMIT) and keys the cache on the result, so
/// changing a variable compiles anew. The cache is an LRU bounded by cache_capacity so memory does
/// not grow without limit as shapes vary. Thread-safe: threads asking for one key while it compiles
/// wait for that compilation and share its executable (or its error) rather than compiling again.
class Session {
 public:
  /// Throws rlx::Error when no backend serves `device`.
  explicit Session(Device device = Device::cpu(), SessionOptions options = {});

  const Device& device() const { return device_; }
  Backend& backend() const { return *backend_; }

  /// The executable for `graph` under resolve_environment(options): cached, or compiled by the
  /// backend (see Backend::compile for errors; a failed compile caches nothing, and the next
  /// call for the same key compiles again). A malformed RLX_KERNEL_DISPATCH / RLX_PRECISION /
  /// RLX_MEMORY_LIMIT throws before the cache is consulted.
  std::shared_ptr<Executable> compile(const Graph& graph, const CompileOptions& options = {});

  CompileCacheStats cache_stats() const;
  /// Drops every cached executable (holders keep theirs); the counters are kept.
  void clear_cache();

 private:
  Device device_;
  std::shared_ptr<Backend> backend_;
  size_t capacity_;
  mutable std::mutex mu_;
  std::list<std::pair<std::string, std::shared_ptr<Executable>>> lru_;  // most recent first
  std::unordered_map<std::string, decltype(lru_)::iterator> index_;
  // Compilations in flight, by key: later callers of that key wait on the future. A failed
  // compilation leaves its message, not its exception object: each waiter throws an rlx::Error
  // of its own, so no exception object is read and freed by several threads at once (TSan
  // reports that on an exception_ptr shared through the future).
  struct Compiling {
    std::shared_ptr<Executable> exe;  // null when the compilation failed
    std::string error;                // its what() then
  };
  std::unordered_map<std::string, std::shared_future<Compiling>> pending_;
  CompileCacheStats stats_;
};

}  // namespace rlx
