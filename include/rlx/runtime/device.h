// Devices: where an executable runs. A Device names a backend kind and an ordinal.
#pragma once

#include <string>
#include <string_view>

namespace rlx {

/// The kinds of device rlx knows. Each kind is served by one registered Backend.
enum class DeviceKind {
  Cpu,   ///< the host CPU (backends/cpu)
  Cuda,  ///< an NVIDIA GPU
  Pjrt,  ///< an XLA device through a PJRT plugin (TPU, XLA CPU/GPU)
};

/// A device: kind plus ordinal (0 for the CPU). Prints and parses as "cpu", "cuda:1", "pjrt:0"
/// (like torch.device).
struct Device {
  DeviceKind kind = DeviceKind::Cpu;
  int index = 0;

  static Device cpu() { return {DeviceKind::Cpu, 0}; }
  /// "cpu", "cuda", "cuda:N", "pjrt", "pjrt:N" (N >= 0). Throws rlx::Error naming the text
  /// and the accepted forms.
  static Device parse(std::string_view text);
  std::string to_string() const;
  bool operator==(const Device&) const = default;
};

/// "cpu", "cuda" or "pjrt".
std::string_view device_kind_name(DeviceKind kind);

}  // namespace rlx
