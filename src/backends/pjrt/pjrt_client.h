// RAII wrappers over a PJRT plugin: the loaded library and API table, a client, loaded
// executables and device buffers. Every PJRT_Error becomes an rlx::Error with the plugin's text.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "pjrt_c_api_decls.h"
#include "rlx/backends/pjrt/pjrt.h"
#include "rlx/ir/tensor.h"

namespace rlx::pjrt {

/// A plugin library loaded once per process (by canonical path) and initialized once. It is
/// never unloaded: XLA plugins keep threads and static state alive past their clients, so
/// dlclose would be unsafe; what we own per use (clients, executables, buffers) is freed.
struct Plugin {
  std::string path;
  void* handle = nullptr;
  const capi::PJRT_Api* api = nullptr;

  /// The plugin at `path`, loaded and checked on first use. Throws rlx::Error (see
  /// describe_plugin in pjrt.h).
  static std::shared_ptr<const Plugin> load(const std::string& path);
  /// Throws rlx::Error "<what>: <plugin message>" and destroys `err` when it is non-null.
  void check(capi::PJRT_Error* err, const std::string& what) const;
};

class DeviceBuffer;

std::string minimal_compile_options();

/// A PJRT client with its addressable devices; destroyed with the last reference.
class Client : public std::enable_shared_from_this<Client> {
 public:
  explicit Client(std::shared_ptr<const Plugin> plugin);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  const Plugin& plugin() const { return *plugin_; }
  capi::PJRT_Client* raw() const { return client_; }
  std::string platform() const;
  /// PJRT_Client_PlatformVersion: e.g. the CUDA or libtpu version ("" on the XLA CPU plugin).
  std::string platform_version() const;
  const std::vector<capi::PJRT_Device*>& devices() const { return devices_; }
  /// Addressable device `i`: id, kind, platform, memory when the plugin reports it.
  DeviceInfo describe_device(size_t i) const;

  /// Copies `t` (row-major) to `device`; the host data may be reused when this returns.
  std::unique_ptr<DeviceBuffer> upload(const Tensor& t, capi::PJRT_Device* device) const;

  /// The sharding form this client's plugin compiled under ShardingForm::Auto (Gspmd or
  /// Shardy), recorded by the first such SPMD compile; Auto while unknown.
  std::atomic<ShardingForm>& accepted_sharding_form() const { return accepted_sharding_form_; }

 private:
  mutable std::atomic<ShardingForm> accepted_sharding_form_{ShardingForm::Auto};
  std::shared_ptr<const Plugin> plugin_;
  capi::PJRT_Client* client_ = nullptr;
  std::vector<capi::PJRT_Device*> devices_;
};

/// One device buffer, destroyed with this object.
class DeviceBuffer {
 public:
  DeviceBuffer(std::shared_ptr<const Client> client, capi::PJRT_Buffer* buffer)
      : client_(std::move(client)), buffer_(buffer) {}
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  capi::PJRT_Buffer* raw() const { return buffer_; }
  /// Copies the buffer into `out` (whose dtype and shape the caller knows) and waits.
  void download(Tensor& out) const;
  /// Blocks until the buffer's data are computed (PJRT_Buffer_ReadyEvent); throws rlx::Error
  /// "pjrt: waiting for a result: <plugin message>" when the computation that defines it failed.
  void await_ready() const;
  /// Whether the plugin deleted the buffer's data, e.g. because a run took it as a donated
  /// argument (input/output aliasing).
  bool is_deleted() const;

 private:
  std::shared_ptr<const Client> client_;
  capi::PJRT_Buffer* buffer_;
};

/// The serialized xla.CompileOptionsProto for one replica and one partition.
std::string minimal_compile_options();

/// A compiled program loaded on a client.
class LoadedProgram {
 public:
  /// Compiles MLIR text `module` with the serialized xla.CompileOptionsProto `options` (by
  /// default one replica and one partition). Throws rlx::Error with XLA's diagnostic
  /// ("pjrt: compile failed: ...").
  LoadedProgram(std::shared_ptr<const Client> client, const std::string& module,
                const std::string& options = minimal_compile_options());
  /// Loads bytes from serialize() (PJRT_Executable_DeserializeAndLoad). The plugin accepts only
  /// bytes of its own build; the caller (compile_cache.cc) checks that before. Throws
  /// rlx::Error with the plugin's message.
  static std::unique_ptr<LoadedProgram> deserialize(std::shared_ptr<const Client> client,
                                                    std::string_view bytes);
  ~LoadedProgram();
  LoadedProgram(const LoadedProgram&) = delete;
  LoadedProgram& operator=(const LoadedProgram&) = delete;
  const std::shared_ptr<const Client>& client() const { return client_; }
  /// Runs with `args` on `device` and returns `num_outputs` result buffers.
  std::vector<std::unique_ptr<DeviceBuffer>> execute(const std::vector<capi::PJRT_Buffer*>& args,
                                                     size_t num_outputs,
                                                     capi::PJRT_Device* device) const;
  /// The executable as platform-specific bytes (PJRT_Executable_Serialize), loadable by
  /// deserialize() with the same plugin build. Throws rlx::Error with the plugin's message.
  std::string serialize() const;
  /// The devices an SPMD / replicated executable runs on, in the order execute_all takes its
  /// argument lists.
  std::vector<capi::PJRT_Device*> addressable_devices() const;
  /// Runs on every addressable device at once: `args[d]` are device d's arguments (in
  /// addressable_devices() order); returns `num_outputs` result buffers per device.
  std::vector<std::vector<std::unique_ptr<DeviceBuffer>>> execute_all(
      const std::vector<std::vector<capi::PJRT_Buffer*>>& args, size_t num_outputs) const;

 private:
  LoadedProgram(std::shared_ptr<const Client> client, capi::PJRT_LoadedExecutable* exe)
      : client_(std::move(client)), exe_(exe) {}
  std::shared_ptr<const Client> client_;
  capi::PJRT_LoadedExecutable* exe_ = nullptr;
};

/// The serialized xla.CompileOptionsProto of an SPMD compile: one replica, one partition per
/// entry of `device_ids` (PJRT global device ids, partition p on device_ids[p]),
/// use_spmd_partitioning on and that device assignment; `shardy`: use_shardy_partitioner on
/// too (for a module whose shardings are in Shardy form).
std::string spmd_compile_options(const std::vector<int64_t>& device_ids, bool shardy = false);

/// The serialized xla.CompileOptionsProto of replicated data parallelism: one replica per
/// entry of `device_ids` (replica r on device_ids[r]), one partition, no SPMD partitioning.
std::string replicated_compile_options(const std::vector<int64_t>& device_ids);

}  // namespace rlx::pjrt
