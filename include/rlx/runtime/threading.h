// The runtime's persistent thread pool: num_threads() - 1 workers of rlx's own plus the calling
// thread, which spin briefly between parallel regions and then block. oneDNN (built with
// OpenMP) keeps OpenMP's team for the calls it makes outside rlx's regions and runs on one thread
// inside them (docs/runtime.md "Threads").
#pragma once

#include <cstdint>
#include <functional>
#include <type_traits>

namespace rlx {

/// Threads the pool runs parallel work on: set_num_threads() if called, else RLX_NUM_THREADS
/// (a positive integer), else the number of physical cores (SMT siblings not counted).
/// Throws rlx::Error when RLX_NUM_THREADS is set but is not a positive integer.
int num_threads();
/// Sets the pool size for later parallel work (>= 1); throws rlx::Error otherwise.
void set_num_threads(int n);
/// Physical cores of this machine (from /sys topology; the logical CPU count if unknown).
int physical_cores();
/// Microseconds an idle pool thread (and a caller waiting for the last chunks) polls before it
/// blocks in the kernel: RLX_SPIN_US (0 to 1000000), default 100. Read once per process.
/// Throws rlx::Error when RLX_SPIN_US is set but is not such an integer.
int64_t pool_spin_us();

/// Makes parallel library calls issued from the calling thread outside rlx's parallel regions
/// (oneDNN GEMMs, which read OpenMP's per-thread setting) use num_threads() threads; inside a
/// region they use one (the pool sets OpenMP's setting to 1 on its workers, and on the caller
/// for the region's duration). The CPU backend calls it in
/// compile() (oneDNN sizes a primitive's parallel work when it is created) and in run().
void bind_library_threads();

/// Runs fn(begin_i, end_i) over chunks that partition [begin, end), in parallel on the pool.
/// Chunks hold at least `grain` iterations (a range smaller than that is one chunk), so tiny
/// loops stay on the calling thread; at most num_threads() chunks, of near-equal size and
/// contiguous, which the threads (the caller included) claim one at a time, so a worker that
/// wakes late finds its chunk done by a thread that was free and delays nobody. Calls from inside
/// a parallel region run serially on the calling thread, and so does a call made while another
/// thread's region holds the pool. If `fn` throws, chunks not yet started are skipped and the
/// first exception is rethrown on the caller once the running ones have finished (kernels do not
/// throw: they validate at compile time). Throws rlx::Error when RLX_SPIN_US is invalid.
void parallel_for(int64_t begin, int64_t end, int64_t grain,
                  const std::function<void(int64_t, int64_t)>& fn);

/// A non-owning reference to a callable fn(Args...), valid while the callable lives (a lambda
/// argument: until the call it is passed to returns). Unlike std::function it never allocates,
/// so a kernel called many times per second (a decoder's GEMVs) launches its parallel loop
/// without touching the heap.
template <class... Args>
class CallRef {
 public:
  template <class F, class = std::enable_if_t<!std::is_same_v<std::decay_t<F>, CallRef>>>
  CallRef(F&& f)  // NOLINT(google-explicit-constructor): converts like std::function
      : obj_(const_cast<void*>(static_cast<const void*>(&f))), call_([](void* o, Args... args) {
          (*static_cast<std::remove_reference_t<F>*>(o))(args...);
        }) {}
  void operator()(Args... args) const { call_(obj_, args...); }

 private:
  void* obj_;
  void (*call_)(void*, Args...);
};

/// fn(int64_t begin, int64_t end), the body of parallel_chunks.
using RangeFn = CallRef<int64_t, int64_t>;

/// Runs fn(b, e) on every chunk [begin + i * chunk, min(end, begin + (i + 1) * chunk)) of
/// [begin, end) (chunk >= 1; one call per chunk, also when it runs serially). Threads claim
/// chunks one at a time (dynamic scheduling), so a worker that starts late or is slowed by other
/// load holds the call back by at most the chunk it is running, instead of by a fixed share of
/// the range as parallel_for's even split would. For loops whose iterations write disjoint
/// outputs (each result is then independent of the thread count). Up to num_threads() threads;
/// calls from inside a parallel region, or while another thread's region holds the pool, run
/// serially on the calling thread. Exceptions as for parallel_for.
void parallel_chunks(int64_t begin, int64_t end, int64_t chunk, RangeFn fn);

/// One call of a parallel_runs body: the chunk [begin, end), and [run_begin, run_end), the part of
/// the chunk's run that the calling thread goes through front to back: it ran the chunks from
/// run_begin up to begin just before this one, in that order (none when begin == run_begin), and
/// takes the chunk at end next unless another thread has taken it (chunks past end up to run_end
/// are the run's rest). A kernel that streams memory can prefetch ahead along it.
struct RunChunk {
  int64_t begin, end;
  int64_t run_begin, run_end;
};

/// The body of parallel_runs.
using RunFn = CallRef<const RunChunk&>;

/// Runs fn on every chunk [begin + i * chunk, min(end, begin + (i + 1) * chunk)) of [begin, end)
/// (chunk >= 1; one call per chunk, also when it runs serially), like parallel_chunks, but in
/// runs: with T threads (up to num_threads(), at most one per chunk) thread t starts on its own
/// run of consecutive chunks, chunks [t * C / T, (t + 1) * C / T) of the C, and takes them one at
/// a time front to back; a thread whose run is empty takes the next chunk of the run with the
/// most chunks left. So each thread reads one sequential stream, while a worker that starts late
/// or is slowed by other load still holds the call back by at most the chunk it is running (the
/// others take the rest of its run, in order). Thread 0 is the caller. For loops whose
/// iterations write disjoint outputs (each result is then independent of the thread count).
/// Calls from inside a parallel region, or while another thread's region holds the pool, run
/// serially on the calling thread, as one run of every chunk. Exceptions as for parallel_for.
void parallel_runs(int64_t begin, int64_t end, int64_t chunk, RunFn fn);

/// Parallel regions that parallel_for, parallel_chunks and parallel_runs have opened in this
/// process (calls that ran serially on the calling thread are not counted, nor oneDNN's own
/// regions): each one may wake sleeping workers and waits for the chunks they claimed, so
/// kernels keep the count per run low (docs/runtime.md "Threads"). For tests and diagnostics.
int64_t parallel_regions();

namespace detail {
/// Test hook: while held, a pool worker that has read a newly published region stops before it
/// claims a chunk (as a worker the OS deschedules would), so tests can check that the caller
/// finishes the region alone and that the worker, released later, runs no chunk of it.
void hold_pool_workers_for_testing(bool hold);
/// Test hook: workers stopped by hold_pool_workers_for_testing right now.
int pool_workers_held_for_testing();
}  // namespace detail

}  // namespace rlx
