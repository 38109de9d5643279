// A PJRT plugin that wraps a real one (the .so named by RLX_FAULT_PLUGIN_TARGET) and injects
// the failures a device can produce, for the tests of asynchronous dispatch and donation safety
// (tests/backends/pjrt/async_test.cc). RLX_FAULT_MODE, read at every execute, chooses:
//   ""                     pass everything through;
//   "fail_before_execute"  Execute returns an error without running (nothing donated);
//   "fail_after_donation"  Execute runs (the plugin consumes the donated arguments), frees the
//                          outputs and returns an error, as a device that fails mid-run;
//   "async_error"          Execute succeeds but its outputs are "error buffers": their ready
//                          event and every copy to the host fail later, as an asynchronous
//                          device error does; a run that takes such a buffer as an argument
//                          produces error buffers too (PJRT's error propagation).
// Errors and events made here are tracked in sets and freed by the wrapped Error_Destroy /
// Event_Destroy; everything else is the real plugin's.
#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <string>

#include "pjrt_c_api_decls.h"

namespace {

using namespace rlx::pjrt::capi;

struct FaultError {
  std::string message;
};
struct FaultEvent {
  std::string message;  // the error Await reports
};

const PJRT_Api* real = nullptr;
std::mutex mu;
std::set<const void*> errors, events, poisoned;

bool contains(const std::set<const void*>& s, const void* p) {
  std::lock_guard<std::mutex> lock(mu);
  return s.count(p) != 0;
}
bool take(std::set<const void*>& s, const void* p) {
  std::lock_guard<std::mutex> lock(mu);
  return s.erase(p) != 0;
}

PJRT_Error* make_error(const std::string& message) {
  auto* e = new FaultError{message};
  std::lock_guard<std::mutex> lock(mu);
  errors.insert(e);
  return reinterpret_cast<PJRT_Error*>(e);
}
PJRT_Event* make_failed_event() {
  auto* e = new FaultEvent{"fault plugin: injected asynchronous device error"};
  std::lock_guard<std::mutex> lock(mu);
  events.insert(e);
  return reinterpret_cast<PJRT_Event*>(e);
}

std::string mode() {
  const char* m = std::getenv("RLX_FAULT_MODE");
  return m != nullptr ? m : "";
}

void error_destroy(PJRT_Error_Destroy_Args* a) {
  if (take(errors, a->error)) {
    delete reinterpret_cast<FaultError*>(a->error);
    return;
  }
  real->PJRT_Error_Destroy(a);
}
void error_message(PJRT_Error_Message_Args* a) {
  if (contains(errors, a->error)) {
    const auto* e = reinterpret_cast<const FaultError*>(a->error);
    a->message = e->message.data();
    a->message_size = e->message.size();
    return;
  }
  real->PJRT_Error_Message(a);
}
PJRT_Error* error_get_code(PJRT_Error_GetCode_Args* a) {
  if (contains(errors, a->error)) {
    a->code = 13;  // INTERNAL
    return nullptr;
  }
  return real->PJRT_Error_GetCode(a);
}
PJRT_Error* event_destroy(PJRT_Event_Destroy_Args* a) {
  if (take(events, a->event)) {
    delete reinterpret_cast<FaultEvent*>(a->event);
    return nullptr;
  }
  return real->PJRT_Event_Destroy(a);
}
PJRT_Error* event_await(PJRT_Event_Await_Args* a) {
  if (contains(events, a->event))
    return make_error(reinterpret_cast<FaultEvent*>(a->event)->message);
  return real->PJRT_Event_Await(a);
}
PJRT_Error* buffer_destroy(PJRT_Buffer_Destroy_Args* a) {
  take(poisoned, a->buffer);
  return real->PJRT_Buffer_Destroy(a);
}
PJRT_Error* to_host_buffer(PJRT_Buffer_ToHostBuffer_Args* a) {
  if (contains(poisoned, a->src)) {
    a->event = make_failed_event();
    return nullptr;
  }
  return real->PJRT_Buffer_ToHostBuffer(a);
}
PJRT_Error* ready_event(PJRT_Buffer_ReadyEvent_Args* a) {
  if (contains(poisoned, a->buffer)) {
    a->event = make_failed_event();
    return nullptr;
  }
  return real->PJRT_Buffer_ReadyEvent(a);
}

// PJRT_Executable_NumOutputs (not declared by rlx, which does not call it).
struct NumOutputsArgs {
  size_t struct_size;
  void* extension_start;
  PJRT_Executable* executable;
  size_t num_outputs;  // out
  uint64_t reserved_tail[kArgsTailWords];
};
size_t num_outputs(PJRT_LoadedExecutable* loaded) {
  PJRT_LoadedExecutable_GetExecutable_Args get{};
  get.struct_size = sizeof(get);
  get.loaded_executable = loaded;
  if (real->PJRT_LoadedExecutable_GetExecutable(&get) != nullptr) std::abort();
  NumOutputsArgs n{};
  n.struct_size = sizeof(n);
  n.executable = get.executable;
  auto fn = reinterpret_cast<PJRT_Error* (*)(NumOutputsArgs*)>(real->PJRT_Executable_NumOutputs);
  if (fn(&n) != nullptr) std::abort();
  PJRT_Executable_Destroy_Args d{};
  d.struct_size = sizeof(d);
  d.executable = get.executable;
  if (real->PJRT_Executable_Destroy(&d) != nullptr) std::abort();
  return n.num_outputs;
}

PJRT_Error* execute(PJRT_LoadedExecutable_Execute_Args* a) {
  const std::string m = mode();
  if (m == "fail_before_execute")
    return make_error("fault plugin: injected failure before the run");
  bool poisoned_input = false;
  for (size_t d = 0; d < a->num_devices; ++d)
    for (size_t i = 0; i < a->num_args; ++i)
      poisoned_input = poisoned_input || contains(poisoned, a->argument_lists[d][i]);
  if (PJRT_Error* err = real->PJRT_LoadedExecutable_Execute(a); err != nullptr) return err;
  const size_t outs = num_outputs(a->executable);
  if (m == "fail_after_donation") {
    for (size_t d = 0; d < a->num_devices; ++d)
      for (size_t i = 0; i < outs; ++i) {
        PJRT_Buffer_Destroy_Args b{};
        b.struct_size = sizeof(b);
        b.buffer = a->output_lists[d][i];
        real->PJRT_Buffer_Destroy(&b);
        a->output_lists[d][i] = nullptr;
      }
    return make_error("fault plugin: injected failure after the run took its donated arguments");
  }
  if (m == "async_error" || poisoned_input) {
    std::lock_guard<std::mutex> lock(mu);
    for (size_t d = 0; d < a->num_devices; ++d)
      for (size_t i = 0; i < outs; ++i) poisoned.insert(a->output_lists[d][i]);
  }
  return nullptr;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) const PJRT_Api* GetPjrtApi() {
  static const PJRT_Api* api = []() -> const PJRT_Api* {
    const char* path = std::getenv("RLX_FAULT_PLUGIN_TARGET");
    if (path == nullptr) return nullptr;
    void* handle = ::dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) return nullptr;
    auto get = reinterpret_cast<GetPjrtApiFn>(::dlsym(handle, "GetPjrtApi"));
    if (get == nullptr) return nullptr;
    real = get();
    if (real == nullptr || real->struct_size < sizeof(PJRT_Api)) return nullptr;
    // A copy of the real table (its full length) with our entries patched in.
    auto* table = static_cast<PJRT_Api*>(std::malloc(real->struct_size));
    std::memcpy(table, real, real->struct_size);
    table->PJRT_Error_Destroy = error_destroy;
    table->PJRT_Error_Message = error_message;
    table->PJRT_Error_GetCode = error_get_code;
    table->PJRT_Event_Destroy = event_destroy;
    table->PJRT_Event_Await = event_await;
    table->PJRT_Buffer_Destroy = buffer_destroy;
    table->PJRT_Buffer_ToHostBuffer = to_host_buffer;
    table->PJRT_Buffer_ReadyEvent = ready_event;
    table->PJRT_LoadedExecutable_Execute = execute;
    return table;
  }();
  return api;
}
