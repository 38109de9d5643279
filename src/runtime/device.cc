// Device names and parsing.
#include "rlx/runtime/device.h"

#include <charconv>
#include <cstdint>

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

namespace {

constexpr std::string_view kForms =
    "expected cpu, cuda, cuda:N, pjrt or pjrt:N, or a pjrt device set pjrt:A-B, pjrt:I,J,... or "
    "pjrt:all";

// The most devices a set may name (a bound on the parser's work, far above any host).
constexpr int64_t kMaxSet = 4096;

// A non-negative int, the whole of `num`.
bool parse_index(std::string_view num, int& out) {
  auto [end, ec] = std::from_chars(num.data(), num.data() + num.size(), out);
  return !num.empty() && ec == std::errc() && end == num.data() + num.size() && out >= 0;
}

}  // namespace

Device Device::parse(std::string_view text) {
  auto fail = [&](const std::string& why = "") -> Device {
    throw Error("unknown device '" + std::string(text) + "'" + (why.empty() ? "" : ": " + why) +
                "; " + std::string(kForms));
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
  if (kind.size() == text.size()) return d;
  std::string_view rest = text.substr(kind.size() + 1);
  if (parse_index(rest, d.index)) {
    if (d.kind == DeviceKind::Cpu && d.index != 0) return fail();
    return d;
  }
  // Device sets: pjrt only.
  if (d.kind != DeviceKind::Pjrt || rest.empty()) return fail();
  if (rest == "all") {
    d.all_devices = true;
    return d;
  }
  std::vector<int> set;
  for (size_t at = 0; at <= rest.size();) {
    size_t comma = rest.find(',', at);
    if (comma == std::string_view::npos) comma = rest.size();
    std::string_view item = rest.substr(at, comma - at);
    size_t dash = item.find('-');
    int first = 0, last = 0;
    if (dash == std::string_view::npos) {
      if (!parse_index(item, first)) return fail();
      last = first;
    } else if (!parse_index(item.substr(0, dash), first) ||
               !parse_index(item.substr(dash + 1), last)) {
      return fail();
    } else if (last < first) {
      return fail("the range " + std::string(item) + " is empty");
    }
    if (static_cast<int64_t>(last) - first + static_cast<int64_t>(set.size()) >= kMaxSet)
      return fail("more than " + std::to_string(kMaxSet) + " devices");
    for (int i = first; i <= last; ++i) {
      for (int seen : set)
        if (seen == i) return fail("device pjrt:" + std::to_string(i) + " is listed twice");
      set.push_back(i);
    }
    at = comma + 1;
  }
  d.index = set.front();
  if (set.size() > 1) d.devices = std::move(set);
  return d;
}

std::string Device::to_string() const {
  std::string s(device_kind_name(kind));
  if (all_devices) return s + ":all";
  if (devices.empty()) {
    if (kind != DeviceKind::Cpu) s += ":" + std::to_string(index);
    return s;
  }
  bool contiguous = true;
  for (size_t i = 1; i < devices.size(); ++i) contiguous &= devices[i] == devices[i - 1] + 1;
  if (contiguous)
    return s + ":" + std::to_string(devices.front()) + "-" + std::to_string(devices.back());
  s += ":";
  for (size_t i = 0; i < devices.size(); ++i) s += (i ? "," : "") + std::to_string(devices[i]);
  return s;
}

}  // namespace rlx
