// Devices: where an executable runs. A Device names a backend kind and an ordinal, or (pjrt) a
// set of devices the batch is split over (data parallelism).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace rlx {

/// The kinds of device rlx knows. Each kind is served by one registered Backend.
enum class DeviceKind {
  Cpu,   ///< the host CPU (backends/cpu)
  Cuda,  ///< an NVIDIA GPU
  Pjrt,  ///< an XLA device through a PJRT plugin (TPU, XLA CPU/GPU)
};

/// A device: kind plus ordinal (0 for the CPU). Prints and parses as "cpu", "cuda:1", "pjrt:0"
/// (like torch.device). A pjrt device may instead be a data-parallel device set: "pjrt:0-3",
/// "pjrt:0,2" or "pjrt:all" compile a graph as one SPMD program over those devices with dim 0
/// (the batch) of every input and output split evenly across them and the params replicated
/// (jax.jit with in/out shardings P('batch'); docs/pjrt.md, "Data parallelism from a device
/// string").
struct Device {
  DeviceKind kind = DeviceKind::Cpu;
  int index = 0;  ///< the device, or the first of a set (0 for pjrt:all)
  /// A data-parallel set of two or more pjrt devices, in mesh order (batch part p runs on
  /// devices[p]); empty for one device.
  std::vector<int> devices{};
  /// pjrt:all: every addressable device of the plugin, resolved at compile.
  bool all_devices = false;

  static Device cpu() { return {DeviceKind::Cpu, 0}; }
  /// "cpu", "cuda", "cuda:N", "pjrt", "pjrt:N" (N >= 0), and the pjrt device sets "pjrt:all",
  /// "pjrt:A-B" (A..B) and "pjrt:I,J,..." (items N or A-B, in that order). A set of one device
  /// is that device ("pjrt:2-2" == "pjrt:2"). Throws rlx::Error naming the text and the accepted
  /// forms, with the reason for an empty range (B < A) or a device listed twice.
  static Device parse(std::string_view text);
  /// "cpu", "cuda:1", "pjrt:0"; a set prints as "pjrt:all", "pjrt:A-B" when it is ascending
  /// and contiguous, else "pjrt:I,J,...".
  std::string to_string() const;
  /// Whether this is a data-parallel device set (devices or all_devices).
  bool is_set() const { return all_devices || !devices.empty(); }
  bool operator==(const Device&) const = default;
};

/// "cpu", "cuda" or "pjrt".
std::string_view device_kind_name(DeviceKind kind);

}  // namespace rlx
