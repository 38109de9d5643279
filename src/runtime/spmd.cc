// The in-process communicator of simulated SPMD devices and run_spmd (rlx/runtime/spmd.h).
#include "rlx/runtime/spmd.h"

#include <exception>
#include <thread>

#include "rlx/ir/error.h"

namespace rlx {
namespace {

thread_local SpmdRank t_rank;
thread_local std::optional<std::string> t_error;

}  // namespace

Communicator::Communicator(int64_t num_devices)
    : n_(num_devices), slots_(static_cast<size_t>(num_devices > 0 ? num_devices : 0)) {
  check(num_devices >= 1,
        "Communicator: needs at least one device, got " + std::to_string(num_devices));
}

bool Communicator::wait_all(std::unique_lock<std::mutex>& lock) {
  if (aborted_) return false;
  uint64_t gen = generation_;
  if (++arrived_ == n_) {
    arrived_ = 0;
    ++generation_;
    cv_.notify_all();
    return true;
  }
  cv_.wait(lock, [&] { return generation_ != gen || aborted_; });
  return !aborted_;
}

bool Communicator::exchange(int64_t device, const std::byte* data,
                            const std::function<void(std::span<const std::byte* const>)>& consume) {
  std::unique_lock<std::mutex> lock(mu_);
  slots_[static_cast<size_t>(device)] = data;
  if (!wait_all(lock)) return false;  // every device has published
  std::vector<const std::byte*> all = slots_;
  lock.unlock();
  consume(all);
  lock.lock();
  return wait_all(lock);  // every device has read: the buffers may change again
}

void Communicator::abort() {
  std::lock_guard<std::mutex> lock(mu_);
  aborted_ = true;
  cv_.notify_all();
}

SpmdRank current_spmd_rank() { return t_rank; }

void set_spmd_error(std::string message) {
  if (!t_error) t_error = std::move(message);
}

std::optional<std::string> take_spmd_error() {
  std::optional<std::string> e = std::move(t_error);
  t_error.reset();
  return e;
}

std::vector<std::vector<Tensor>> run_spmd(const std::vector<Executable*>& exes,
                                          const std::vector<TensorMap>& inputs) {
  check(!exes.empty() && exes.size() == inputs.size(),
        "run_spmd: give one executable and one input map per device, got " +
            std::to_string(exes.size()) + " executables and " + std::to_string(inputs.size()) +
            " input maps");
  for (size_t d = 0; d < exes.size(); ++d)
    for (size_t e = 0; e < d; ++e)
      check(exes[d] != exes[e], "run_spmd: devices " + std::to_string(e) + " and " +
                                    std::to_string(d) + " share one executable (clone() it)");
  const size_t n = exes.size();
  Communicator comm(static_cast<int64_t>(n));
  std::vector<std::vector<Tensor>> out(n);
  std::vector<std::exception_ptr> errors(n);
  std::mutex first_mu;
  std::optional<size_t> first;  // the device that failed first: the others may only be aborted
  std::vector<std::thread> threads;
  for (size_t d = 0; d < n; ++d)
    threads.emplace_back([&, d] {
      t_rank = {&comm, static_cast<int64_t>(d)};
      try {
        out[d] = exes[d]->run(inputs[d]);
      } catch (...) {
        errors[d] = std::current_exception();
        {
          std::lock_guard<std::mutex> lock(first_mu);
          if (!first) first = d;
        }
        comm.abort();
      }
      t_rank = {};
    });
  for (std::thread& t : threads) t.join();
  if (first) {
    try {
      std::rethrow_exception(errors[*first]);
    } catch (const std::exception& e) {
      throw Error("run_spmd: device " + std::to_string(*first) + ": " + e.what());
    }
  }
  return out;
}

}  // namespace rlx
