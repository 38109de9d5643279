// Running one compiled SPMD program on several simulated devices in one process: an in-process
// communicator (a rendezvous of N threads) that the CPU backend's collective kernels exchange
// through, and run_spmd, which runs N clones of an executable on N threads joined by one
// (docs/ir.md "Collectives").
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "rlx/ir/evaluator.h"
#include "rlx/runtime/executable.h"

namespace rlx {

/// A rendezvous of `num_devices` threads, one per simulated device. Every device calls
/// exchange() once per collective, in the same order (the same program runs on each).
class Communicator {
 public:
  explicit Communicator(int64_t num_devices);
  int64_t num_devices() const { return n_; }

  /// Device `device` publishes `data` (its operand; it must stay valid and unchanged until
  /// exchange returns) and waits for every device; then `consume` runs on this thread with the
  /// published pointer of every device (indexed by device) and may read any of them; exchange
  /// returns after every device's consume finished. Returns false, without calling consume,
  /// when the communicator was aborted (another device failed).
  bool exchange(int64_t device, const std::byte* data,
                const std::function<void(std::span<const std::byte* const>)>& consume);
  /// Wakes every waiting device; this and every later exchange() returns false.
  void abort();

 private:
  bool wait_all(std::unique_lock<std::mutex>& lock);  // a barrier of the n_ devices
  int64_t n_;
  std::mutex mu_;
  std::condition_variable cv_;
  int64_t arrived_ = 0;
  uint64_t generation_ = 0;
  bool aborted_ = false;
  std::vector<const std::byte*> slots_;
};

/// The SPMD run of the calling thread: its communicator (nullptr outside run_spmd: a run over
/// one device) and its device index.
struct SpmdRank {
  Communicator* comm = nullptr;
  int64_t device = 0;
};
SpmdRank current_spmd_rank();

/// For kernels, which must not throw: records `message` as the calling thread's run error;
/// the executable's run() throws it as rlx::Error once its steps are done (take_spmd_error).
void set_spmd_error(std::string message);
/// The calling thread's recorded run error, cleared.
std::optional<std::string> take_spmd_error();

/// Runs exes[d]->run(inputs[d]) on one thread per device d, all joined through one
/// Communicator (exes[d] is typically the d-th clone() of one compiled executable, with its
/// params set; distinct objects). Returns each device's outputs. When a device's run throws,
/// the communicator is aborted so the others do not wait forever, and the error of the device
/// that failed first is rethrown, prefixed "run_spmd: device d: ".
std::vector<std::vector<Tensor>> run_spmd(const std::vector<Executable*>& exes,
                                          const std::vector<TensorMap>& inputs);

}  // namespace rlx
