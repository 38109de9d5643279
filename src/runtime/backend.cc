// The backend registry and CompileOptions' cache key.
#include "rlx/runtime/backend.h"

#include <mutex>

#include "rlx/ir/error.h"

namespace rlx {
namespace {

struct Registry {
  std::mutex mu;
  std::map<DeviceKind, std::shared_ptr<Backend>> backends;
};

Registry& registry() {
  static Registry r;  // function-local: safe to use from other static initializers
  return r;
}

}  // namespace

std::string CompileOptions::cache_key() const {
  std::string k = "dispatch=";
  if (dispatch) {
    k += kernel_dispatch_name(dispatch->policy);
    for (const auto& [op, policy] : dispatch->overrides)
      k += "," + std::string(op_name(op)) + "=" + std::string(kernel_dispatch_name(policy));
  } else {
    k += "default";
  }
  k += ";precision=" + (precision ? to_string(*precision) : std::string("default"));
  k += ";dce=" + std::to_string(dce) + ";fold=" + std::to_string(fold_constants);
  k += ";seed=" + std::to_string(seed);
  k += ";memory_limit=" + (memory_limit ? std::to_string(*memory_limit) : std::string("default"));
  k +=
      ";profile=" + (profile ? std::to_string(static_cast<int>(*profile)) : std::string("default"));
  for (const StateBinding& b : state) k += ";state:" + b.input + "<-" + b.output;
  for (const auto& [name, q] : quantized_params)
    k += ";q:" + name + "=" + std::string(quant_format_info(q.format).name) + "@" +
         std::to_string(q.axis);
  return k;
}

void register_backend(std::shared_ptr<Backend> backend) {
  check(backend != nullptr, "register_backend: null backend");
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.backends[backend->device_kind()] = std::move(backend);
}

std::shared_ptr<Backend> backend_for(DeviceKind kind) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.backends.find(kind);
  if (it != r.backends.end()) return it->second;
  std::string names;
  for (const auto& [k, b] : r.backends) names += (names.empty() ? "" : ", ") + b->name();
  throw Error("no backend for device '" + std::string(device_kind_name(kind)) +
              "' (registered: " + (names.empty() ? "none" : names) + ")");
}

std::vector<Device> available_devices() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<Device> out;
  for (const auto& [kind, b] : r.backends) out.push_back({kind, 0});
  return out;
}

}  // namespace rlx
