// The runtime's one persistent thread pool. It is the OpenMP runtime's thread team, which
// oneDNN (built with OpenMP) uses too, so rlx's kernels and library GEMMs share one set of
// threads instead of oversubscribing the cores with two pools.
#pragma once

#include <cstdint>
#include <functional>

namespace rlx {

/// Threads the pool runs parallel work on: set_num_threads() if called, else RLX_NUM_THREADS
/// (a positive integer), else the number of physical cores (SMT siblings not counted).
/// Throws rlx::Error when RLX_NUM_THREADS is set but is not a positive integer.
int num_threads();
/// Sets the pool size for later parallel work (>= 1); throws rlx::Error otherwise.
void set_num_threads(int n);
/// Physical cores of this machine (from /sys topology; the logical CPU count if unknown).
int physical_cores();

/// Makes parallel library calls issued from the calling thread (oneDNN GEMMs, which read
/// OpenMP's per-thread setting) use num_threads() threads. The CPU backend calls it in
/// compile() (oneDNN sizes a primitive's parallel work when it is created) and in run().
void bind_library_threads();

/// Runs fn(begin_i, end_i) over chunks that partition [begin, end), in parallel on the pool.
/// Chunks hold at least `grain` iterations (a range smaller than that is one chunk), so tiny
/// loops stay on the calling thread; at most num_threads() chunks, of near-equal size. `fn` must
/// not throw (kernels validate at compile time). Calls from inside a parallel region run serially
/// on the calling thread.
void parallel_for(int64_t begin, int64_t end, int64_t grain,
                  const std::function<void(int64_t, int64_t)>& fn);

}  // namespace rlx
