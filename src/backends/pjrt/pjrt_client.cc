// Loading PJRT plugins and the RAII wrappers of pjrt_client.h.
#include "pjrt_client.h"

#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>

#include "rlx/ir/error.h"

namespace rlx::pjrt {
namespace {

// Sets the two header fields every PJRT args struct starts with.
template <class Args>
Args make_args() {
  Args a{};
  a.struct_size = sizeof(Args);
  a.extension_start = nullptr;
  return a;
}

capi::PJRT_Buffer_Type buffer_type(DType t) {
  switch (t) {
    case DType::f32:
      return capi::PJRT_Buffer_Type_F32;
    case DType::f16:
      return capi::PJRT_Buffer_Type_F16;
    case DType::bf16:
      return capi::PJRT_Buffer_Type_BF16;
    case DType::f64:
      return capi::PJRT_Buffer_Type_F64;
    case DType::i8:
      return capi::PJRT_Buffer_Type_S8;
    case DType::u8:
      return capi::PJRT_Buffer_Type_U8;
    case DType::i32:
      return capi::PJRT_Buffer_Type_S32;
    case DType::i64:
      return capi::PJRT_Buffer_Type_S64;
    case DType::bool_:
      return capi::PJRT_Buffer_Type_PRED;  // one byte per element, as rlx stores bool
  }
  throw Error("pjrt: unsupported dtype");
}

std::string version_text(int major, int minor) {
  return std::to_string(major) + "." + std::to_string(minor);
}

std::shared_ptr<const Plugin> load_uncached(const std::string& path) {
  void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = ::dlerror();
    throw Error("pjrt: cannot load plugin '" + path + "': " + (why ? why : "unknown dlopen error"));
  }
  auto get_api = reinterpret_cast<capi::GetPjrtApiFn>(::dlsym(handle, "GetPjrtApi"));
  if (get_api == nullptr) {
    ::dlclose(handle);  // nothing of it ran yet, so unloading is safe here
    throw Error("pjrt: '" + path + "' is not a PJRT plugin (no symbol GetPjrtApi)");
  }
  const capi::PJRT_Api* api = get_api();
  if (api == nullptr) throw Error("pjrt: GetPjrtApi of '" + path + "' returned null");
  int major = api->pjrt_api_version.major_version;
  int minor = api->pjrt_api_version.minor_version;
  if (major != capi::kApiMajor || minor < capi::kApiMinor)
    throw Error("pjrt: plugin '" + path + "' implements PJRT C API " + version_text(major, minor) +
                ", but rlx needs major " + std::to_string(capi::kApiMajor) +
                " with minor >= " + std::to_string(capi::kApiMinor) + " (rlx is built against " +
                version_text(capi::kApiMajor, capi::kApiMinor) + ")");
  if (api->struct_size < sizeof(capi::PJRT_Api))
    throw Error("pjrt: plugin '" + path + "' has a PJRT_Api table of " +
                std::to_string(api->struct_size) + " bytes; rlx needs " +
                std::to_string(sizeof(capi::PJRT_Api)));
  auto plugin = std::make_shared<Plugin>();
  plugin->path = path;
  plugin->handle = handle;
  plugin->api = api;
  auto init = make_args<capi::PJRT_Plugin_Initialize_Args>();
  plugin->check(api->PJRT_Plugin_Initialize(&init), "pjrt: Plugin_Initialize of '" + path + "'");
  return plugin;
}

}  // namespace

std::shared_ptr<const Plugin> Plugin::load(const std::string& path) {
  rlx::check(!path.empty(), "pjrt: empty plugin path");
  std::error_code ec;
  std::filesystem::path canonical = std::filesystem::canonical(path, ec);
  if (ec) throw Error("pjrt: cannot load plugin '" + path + "': " + ec.message());
  static std::mutex mu;
  static std::map<std::string, std::shared_ptr<const Plugin>> loaded;  // never unloaded
  std::lock_guard<std::mutex> lock(mu);
  auto it = loaded.find(canonical.string());
  if (it != loaded.end()) return it->second;
  auto plugin = load_uncached(canonical.string());
  loaded.emplace(canonical.string(), plugin);
  return plugin;
}

void Plugin::check(capi::PJRT_Error* err, const std::string& what) const {
  if (err == nullptr) return;
  auto msg = make_args<capi::PJRT_Error_Message_Args>();
  msg.error = err;
  api->PJRT_Error_Message(&msg);
  std::string text(msg.message, msg.message_size);
  auto destroy = make_args<capi::PJRT_Error_Destroy_Args>();
  destroy.error = err;
  api->PJRT_Error_Destroy(&destroy);
  throw Error(what + ": " + text);
}

Client::Client(std::shared_ptr<const Plugin> plugin) : plugin_(std::move(plugin)) {
  const capi::PJRT_Api* api = plugin_->api;
  auto create = make_args<capi::PJRT_Client_Create_Args>();
  // RLX_PJRT_CPU_DEVICE_COUNT: the XLA CPU plugin's "cpu_device_count" create option (its
  // default is 4); passed only when set, since other plugins do not know it.
  static constexpr char kCpuDevices[] = "cpu_device_count";
  capi::PJRT_NamedValue option{};
  if (const char* env = std::getenv("RLX_PJRT_CPU_DEVICE_COUNT"); env != nullptr && *env) {
    char* end = nullptr;
    long long n = std::strtoll(env, &end, 10);
    rlx::check(*end == '\0' && n >= 1 && n <= 2048,
               std::string("RLX_PJRT_CPU_DEVICE_COUNT must be an integer in [1, 2048], got '") +
                   env + "'");
    option.struct_size = sizeof(option);
    option.name = kCpuDevices;
    option.name_size = sizeof(kCpuDevices) - 1;
    option.type = capi::PJRT_NamedValue_kInt64;
    option.int64_value = n;
    option.value_size = 1;
    create.create_options = &option;
    create.num_options = 1;
  }
  plugin_->check(api->PJRT_Client_Create(&create),
                 "pjrt: Client_Create of '" + plugin_->path + "'");
  client_ = create.client;
  auto devs = make_args<capi::PJRT_Client_Devices_Args>();
  devs.client = client_;
  try {
    plugin_->check(api->PJRT_Client_AddressableDevices(&devs), "pjrt: Client_AddressableDevices");
  } catch (...) {
    auto destroy = make_args<capi::PJRT_Client_Destroy_Args>();
    destroy.client = client_;
    api->PJRT_Client_Destroy(&destroy);  // best effort while already failing
    throw;
  }
  devices_.assign(devs.devices, devs.devices + devs.num_devices);
}

Client::~Client() {
  auto destroy = make_args<capi::PJRT_Client_Destroy_Args>();
  destroy.client = client_;
  capi::PJRT_Error* err = plugin_->api->PJRT_Client_Destroy(&destroy);
  if (err != nullptr) {  // a destructor cannot throw: free the error and go on
    auto d = make_args<capi::PJRT_Error_Destroy_Args>();
    d.error = err;
    plugin_->api->PJRT_Error_Destroy(&d);
  }
}

std::string Client::platform() const {
  auto a = make_args<capi::PJRT_Client_PlatformName_Args>();
  a.client = client_;
  plugin_->check(plugin_->api->PJRT_Client_PlatformName(&a), "pjrt: Client_PlatformName");
  return std::string(a.platform_name, a.platform_name_size);
}

std::string Client::platform_version() const {
  auto a = make_args<capi::PJRT_Client_PlatformVersion_Args>();
  a.client = client_;
  plugin_->check(plugin_->api->PJRT_Client_PlatformVersion(&a), "pjrt: Client_PlatformVersion");
  return std::string(a.platform_version, a.platform_version_size);
}

DeviceInfo Client::describe_device(size_t i) const {
  const capi::PJRT_Api* api = plugin_->api;
  DeviceInfo info;
  info.index = static_cast<int>(i);
  info.platform = platform();
  auto d = make_args<capi::PJRT_Device_GetDescription_Args>();
  d.device = devices_.at(i);
  plugin_->check(api->PJRT_Device_GetDescription(&d), "pjrt: Device_GetDescription");
  auto id = make_args<capi::PJRT_DeviceDescription_Id_Args>();
  id.device_description = d.device_description;
  plugin_->check(api->PJRT_DeviceDescription_Id(&id), "pjrt: DeviceDescription_Id");
  info.id = id.id;
  auto kind = make_args<capi::PJRT_DeviceDescription_Kind_Args>();
  kind.device_description = d.device_description;
  plugin_->check(api->PJRT_DeviceDescription_Kind(&kind), "pjrt: DeviceDescription_Kind");
  info.kind = std::string(kind.device_kind, kind.device_kind_size);
  // Memory statistics are optional: a plugin without them (XLA CPU) returns an error, which
  // only means "unknown" here.
  auto mem = make_args<capi::PJRT_Device_MemoryStats_Args>();
  mem.device = devices_[i];
  if (capi::PJRT_Error* err = api->PJRT_Device_MemoryStats(&mem); err != nullptr) {
    auto destroy = make_args<capi::PJRT_Error_Destroy_Args>();
    destroy.error = err;
    api->PJRT_Error_Destroy(&destroy);
  } else {
    info.bytes_in_use = mem.bytes_in_use;
    if (mem.bytes_limit_is_set) info.bytes_limit = mem.bytes_limit;
  }
  return info;
}

std::unique_ptr<DeviceBuffer> Client::upload(const Tensor& t, capi::PJRT_Device* device) const {
  const capi::PJRT_Api* api = plugin_->api;
  std::vector<int64_t> dims = t.shape().dims();
  static const std::byte kEmpty[8] = {};  // PJRT wants a valid pointer also for 0 elements
  auto a = make_args<capi::PJRT_Client_BufferFromHostBuffer_Args>();
  a.client = client_;
  a.data = t.nbytes() > 0 ? static_cast<const void*>(t.data()) : kEmpty;
  a.type = buffer_type(t.dtype());
  a.dims = dims.data();
  a.num_dims = dims.size();
  a.host_buffer_semantics = capi::kImmutableOnlyDuringCall;
  a.device = device;
  plugin_->check(api->PJRT_Client_BufferFromHostBuffer(&a),
                 "pjrt: BufferFromHostBuffer of " + t.type().to_string());
  auto buffer = std::make_unique<DeviceBuffer>(shared_from_this(), a.buffer);
  if (a.done_with_host_buffer != nullptr) {
    auto ev = make_args<capi::PJRT_Event_Destroy_Args>();
    ev.event = a.done_with_host_buffer;
    plugin_->check(api->PJRT_Event_Destroy(&ev), "pjrt: Event_Destroy");
  }
  return buffer;
}

DeviceBuffer::~DeviceBuffer() {
  const Plugin& p = client_->plugin();
  auto a = make_args<capi::PJRT_Buffer_Destroy_Args>();
  a.buffer = buffer_;
  capi::PJRT_Error* err = p.api->PJRT_Buffer_Destroy(&a);
  if (err != nullptr) {
    auto d = make_args<capi::PJRT_Error_Destroy_Args>();
    d.error = err;
    p.api->PJRT_Error_Destroy(&d);
  }
}

namespace {

// Waits for `event`, destroys it, then throws rlx::Error "<what>: <plugin message>" if the wait
// failed (else if the destroy did); neither error object leaks.
void await_event(const Plugin& p, capi::PJRT_Event* event, const std::string& what) {
  auto await = make_args<capi::PJRT_Event_Await_Args>();
  await.event = event;
  capi::PJRT_Error* err = p.api->PJRT_Event_Await(&await);
  auto destroy = make_args<capi::PJRT_Event_Destroy_Args>();
  destroy.event = event;
  capi::PJRT_Error* derr = p.api->PJRT_Event_Destroy(&destroy);
  if (err != nullptr && derr != nullptr) {
    auto d = make_args<capi::PJRT_Error_Destroy_Args>();
    d.error = derr;
    p.api->PJRT_Error_Destroy(&d);
    derr = nullptr;
  }
  p.check(err, what);
  p.check(derr, "pjrt: Event_Destroy");
}

}  // namespace

void DeviceBuffer::download(Tensor& out) const {
  if (out.nbytes() == 0) return;
  const Plugin& p = client_->plugin();
  auto a = make_args<capi::PJRT_Buffer_ToHostBuffer_Args>();
  a.src = buffer_;
  a.dst = out.data();
  a.dst_size = out.nbytes();
  p.check(p.api->PJRT_Buffer_ToHostBuffer(&a), "pjrt: Buffer_ToHostBuffer");
  await_event(p, a.event, "pjrt: copying a result to the host");
}

void DeviceBuffer::await_ready() const {
  const Plugin& p = client_->plugin();
  auto a = make_args<capi::PJRT_Buffer_ReadyEvent_Args>();
  a.buffer = buffer_;
  p.check(p.api->PJRT_Buffer_ReadyEvent(&a), "pjrt: Buffer_ReadyEvent");
  await_event(p, a.event, "pjrt: waiting for a result");
}

bool DeviceBuffer::is_deleted() const {
  const Plugin& p = client_->plugin();
  auto a = make_args<capi::PJRT_Buffer_IsDeleted_Args>();
  a.buffer = buffer_;
  p.check(p.api->PJRT_Buffer_IsDeleted(&a), "pjrt: Buffer_IsDeleted");
  return a.is_deleted;
}

std::string minimal_compile_options() {
  // xla.CompileOptionsProto { executable_build_options (field 3, message):
  //   ExecutableBuildOptionsProto { num_replicas (field 4) = 1, num_partitions (field 5) = 1 } }
  // Tags are (field << 3) | wire type: 3<<3|2 = 0x1a (length-delimited), 4<<3|0 = 0x20 and
  // 5<<3|0 = 0x28 (varint). Every other field keeps its proto default.
  return std::string("\x1a\x04\x20\x01\x28\x01", 6);
}

namespace {

// Protobuf wire format, just what the compile options need: varints and length-delimited
// fields (tag = field << 3 | wire type; 0 = varint, 2 = length-delimited).
void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out += static_cast<char>((v & 0x7f) | 0x80);
    v >>= 7;
  }
  out += static_cast<char>(v);
}
void put_int(std::string& out, int field, uint64_t v) {
  put_varint(out, static_cast<uint64_t>(field) << 3);
  put_varint(out, v);
}
void put_bytes(std::string& out, int field, const std::string& bytes) {
  put_varint(out, (static_cast<uint64_t>(field) << 3) | 2);
  put_varint(out, bytes.size());
  out += bytes;
}

}  // namespace

std::string spmd_compile_options(const std::vector<int64_t>& device_ids, bool shardy) {
  // xla.DeviceAssignmentProto { replica_count (1), computation_count (2),
  //   repeated ComputationDevice computation_devices (3) { repeated int64 replica_device_ids
  //   (1), packed } }: one computation (partition) per device, one replica each.
  std::string assignment;
  put_int(assignment, 1, 1);
  put_int(assignment, 2, device_ids.size());
  for (int64_t id : device_ids) {
    std::string ids;
    put_varint(ids, static_cast<uint64_t>(id));
    std::string computation;
    put_bytes(computation, 1, ids);
    put_bytes(assignment, 3, computation);
  }
  // xla.ExecutableBuildOptionsProto { num_replicas (4), num_partitions (5),
  //   use_spmd_partitioning (6), device_assignment (9), use_shardy_partitioner (19) } (field
  //   numbers from the xla.proto descriptor embedded in the XLA CPU plugin).
  std::string build;
  put_int(build, 4, 1);
  put_int(build, 5, device_ids.size());
  put_int(build, 6, 1);
  put_bytes(build, 9, assignment);
  if (shardy) put_int(build, 19, 1);
  std::string options;  // xla.CompileOptionsProto { executable_build_options (3) }
  put_bytes(options, 3, build);
  return options;
}

std::string replicated_compile_options(const std::vector<int64_t>& device_ids) {
  // DeviceAssignmentProto: replica_count N, one computation whose replica_device_ids (packed)
  // are the N devices.
  std::string ids;
  for (int64_t id : device_ids) put_varint(ids, static_cast<uint64_t>(id));
  std::string computation;
  put_bytes(computation, 1, ids);
  std::string assignment;
  put_int(assignment, 1, device_ids.size());
  put_int(assignment, 2, 1);
  put_bytes(assignment, 3, computation);
  // ExecutableBuildOptionsProto { num_replicas (4) = N, num_partitions (5) = 1,
  // device_assignment (9) }; no SPMD partitioning: every replica runs the whole program.
  std::string build;
  put_int(build, 4, device_ids.size());
  put_int(build, 5, 1);
  put_bytes(build, 9, assignment);
  std::string options;
  put_bytes(options, 3, build);
  return options;
}

LoadedProgram::LoadedProgram(std::shared_ptr<const Client> client, const std::string& module,
                             const std::string& options)
    : client_(std::move(client)) {
  const Plugin& p = client_->plugin();
  std::string code = module;  // PJRT_Program.code is non-const
  static constexpr char kFormat[] = "mlir";
  auto program = make_args<capi::PJRT_Program>();
  program.code = code.data();
  program.code_size = code.size();
  program.format = kFormat;
  program.format_size = sizeof(kFormat) - 1;
  auto a = make_args<capi::PJRT_Client_Compile_Args>();
  a.client = client_->raw();
  a.program = &program;
  a.compile_options = options.data();
  a.compile_options_size = options.size();
  p.check(p.api->PJRT_Client_Compile(&a), "pjrt: compile failed");
  exe_ = a.executable;
}

LoadedProgram::~LoadedProgram() {
  const Plugin& p = client_->plugin();
  auto a = make_args<capi::PJRT_LoadedExecutable_Destroy_Args>();
  a.executable = exe_;
  capi::PJRT_Error* err = p.api->PJRT_LoadedExecutable_Destroy(&a);
  if (err != nullptr) {
    auto d = make_args<capi::PJRT_Error_Destroy_Args>();
    d.error = err;
    p.api->PJRT_Error_Destroy(&d);
  }
}

std::unique_ptr<LoadedProgram> LoadedProgram::deserialize(std::shared_ptr<const Client> client,
                                                          std::string_view bytes) {
  const Plugin& p = client->plugin();
  auto a = make_args<capi::PJRT_Executable_DeserializeAndLoad_Args>();
  a.client = client->raw();
  a.serialized_executable = bytes.data();
  a.serialized_executable_size = bytes.size();
  p.check(p.api->PJRT_Executable_DeserializeAndLoad(&a), "pjrt: Executable_DeserializeAndLoad");
  return std::unique_ptr<LoadedProgram>(new LoadedProgram(std::move(client), a.loaded_executable));
}

std::string LoadedProgram::serialize() const {
  const Plugin& p = client_->plugin();
  auto get = make_args<capi::PJRT_LoadedExecutable_GetExecutable_Args>();
  get.loaded_executable = exe_;
  p.check(p.api->PJRT_LoadedExecutable_GetExecutable(&get), "pjrt: LoadedExecutable_GetExecutable");
  auto ser = make_args<capi::PJRT_Executable_Serialize_Args>();
  ser.executable = get.executable;
  capi::PJRT_Error* err = p.api->PJRT_Executable_Serialize(&ser);
  std::string bytes;
  if (err == nullptr) {
    bytes.assign(ser.serialized_bytes, ser.serialized_bytes_size);
    if (ser.serialized_executable_deleter != nullptr)
      ser.serialized_executable_deleter(ser.serialized_executable);
  }
  auto destroy = make_args<capi::PJRT_Executable_Destroy_Args>();
  destroy.executable = get.executable;
  capi::PJRT_Error* derr = p.api->PJRT_Executable_Destroy(&destroy);
  if (err != nullptr && derr != nullptr) {  // report the first error, free the second
    auto d = make_args<capi::PJRT_Error_Destroy_Args>();
    d.error = derr;
    p.api->PJRT_Error_Destroy(&d);
    derr = nullptr;
  }
  p.check(err, "pjrt: Executable_Serialize");
  p.check(derr, "pjrt: Executable_Destroy");
  return bytes;
}

std::vector<std::unique_ptr<DeviceBuffer>> LoadedProgram::execute(
    const std::vector<capi::PJRT_Buffer*>& args, size_t num_outputs,
    capi::PJRT_Device* device) const {
  const Plugin& p = client_->plugin();
  auto options = make_args<capi::PJRT_ExecuteOptions>();
  std::vector<capi::PJRT_Buffer*> outs(num_outputs, nullptr);
  capi::PJRT_Buffer* const* arg_list = args.data();
  capi::PJRT_Buffer** out_list = outs.data();
  auto a = make_args<capi::PJRT_LoadedExecutable_Execute_Args>();
  a.executable = exe_;
  a.options = &options;
  a.argument_lists = &arg_list;
  a.num_devices = 1;
  a.num_args = args.size();
  a.output_lists = &out_list;
  a.execute_device = device;
  p.check(p.api->PJRT_LoadedExecutable_Execute(&a), "pjrt: execute failed");
  std::vector<std::unique_ptr<DeviceBuffer>> result;
  result.reserve(num_outputs);
  for (capi::PJRT_Buffer* b : outs) result.push_back(std::make_unique<DeviceBuffer>(client_, b));
  return result;
}

}  // namespace rlx::pjrt

namespace rlx::pjrt {

std::vector<capi::PJRT_Device*> LoadedProgram::addressable_devices() const {
  const Plugin& p = client_->plugin();
  auto a = make_args<capi::PJRT_LoadedExecutable_AddressableDevices_Args>();
  a.executable = exe_;
  p.check(p.api->PJRT_LoadedExecutable_AddressableDevices(&a),
          "pjrt: LoadedExecutable_AddressableDevices");
  return {a.addressable_devices, a.addressable_devices + a.num_addressable_devices};
}

std::vector<std::vector<std::unique_ptr<DeviceBuffer>>> LoadedProgram::execute_all(
    const std::vector<std::vector<capi::PJRT_Buffer*>>& args, size_t num_outputs) const {
  const Plugin& p = client_->plugin();
  size_t n = args.size();
  auto options = make_args<capi::PJRT_ExecuteOptions>();
  std::vector<std::vector<capi::PJRT_Buffer*>> outs(n,
                                                    std::vector<capi::PJRT_Buffer*>(num_outputs));
  std::vector<capi::PJRT_Buffer* const*> arg_lists;
  std::vector<capi::PJRT_Buffer**> out_lists;
  for (size_t d = 0; d < n; ++d) {
    arg_lists.push_back(args[d].data());
    out_lists.push_back(outs[d].data());
  }
  auto a = make_args<capi::PJRT_LoadedExecutable_Execute_Args>();
  a.executable = exe_;
  a.options = &options;
  a.argument_lists = arg_lists.data();
  a.num_devices = n;
  a.num_args = n > 0 ? args[0].size() : 0;
  a.output_lists = out_lists.data();
  a.execute_device = nullptr;  // every device of the compile-time assignment
  p.check(p.api->PJRT_LoadedExecutable_Execute(&a), "pjrt: execute failed");
  std::vector<std::vector<std::unique_ptr<DeviceBuffer>>> result(n);
  for (size_t d = 0; d < n; ++d)
    for (capi::PJRT_Buffer* b : outs[d])
      result[d].push_back(std::make_unique<DeviceBuffer>(client_, b));
  return result;
}

}  // namespace rlx::pjrt
