// Device names and parsing.
#include "rlx/runtime/device.h"

#include <charconv>

#include "rlx/ir/error.h"

namespace rlx {

std::string_view device_kind_name(DeviceKind kind) {
  switch (kind) {
    case DeviceKind::Cpu:
      return "cpu";
    case DeviceKind::Cuda:
      return "cuda";
    case DeviceKind::Pjrt:
      return "pjrt";
  }
  return "?";
}

Device Device::parse(std::string_view text) {
  auto fail = [&]() -> Device {
    throw Error("unknown device '" + std::string(text) +
                "'; expected cpu, cuda, cuda:N, pjrt or pjrt:N");
  };
  std::string_view kind = text.substr(0, text.find(':'));
  Device d;
  if (kind == "cpu") {
    d.kind = DeviceKind::Cpu;
  } else if (kind == "cuda") {
    d.kind = DeviceKind::Cuda;
  } else if (kind == "pjrt") {
    d.kind = DeviceKind::Pjrt;
  } else {
    return fail();
  }
  if (kind.size() < text.size()) {
    std::string_view num = text.substr(kind.size() + 1);
    auto [end, ec] = std::from_chars(num.data(), num.data() + num.size(), d.index);
    if (num.empty() || ec != std::errc() || end != num.data() + num.size() || d.index < 0)
      return fail();
    if (d.kind == DeviceKind::Cpu && d.index != 0) return fail();
  }
  return d;
}

std::string Device::to_string() const {
  std::string s(device_kind_name(kind));
  if (kind != DeviceKind::Cpu) s += ":" + std::to_string(index);
  return s;
}

}  // namespace rlx
