// rlx's own declarations of the part of the PJRT C API (openxla/xla, xla/pjrt/c/pjrt_c_api.h)
// that the PJRT backend calls. Written from the published ABI, not copied: only the structs and
// the PJRT_Api function-table prefix we use, in the plugin's field order.
//
// ABI rules we rely on:
// - Within one major version fields are only ever appended (to args structs and to PJRT_Api),
//   so our declarations are prefixes of every plugin's with the same major and a minor >= ours.
// - Every args struct starts with `struct_size` and `extension_start`, and the caller sets
//   struct_size to the size of its declaration. The upstream header says a plugin may accept
//   smaller sizes from older callers, but XLA's implementation does not: each entry point
//   rejects a struct_size below the plugin's own ("Unexpected PJRT_Client_Create_Args size:
//   expected 88, got 72" from a 0.115 plugin) and accepts larger ones. So each args struct ends
//   with a zero-filled tail of kArgsTailWords words: fields appended upstream after the ones we
//   know read as zero, which is their "absent / default" value by design (null pointers, zero
//   counts), and struct_size covers them.
#pragma once

#include <cstddef>
#include <cstdint>

namespace rlx::pjrt::capi {

/// The API version these declarations follow. A plugin must report the same major and a minor
/// at least this large (the layout of everything below exists unchanged since 0.33).
inline constexpr int kApiMajor = 0;
inline constexpr int kApiMinor = 33;
/// Words of zero tail per args struct: room for 32 appended fields (0.33 -> 0.115 appended at
/// most a handful to any struct we use).
inline constexpr int kArgsTailWords = 32;

extern "C" {

struct PJRT_Error;
struct PJRT_Event;
struct PJRT_Client;
struct PJRT_Device;
struct PJRT_DeviceDescription;
struct PJRT_Memory;
struct PJRT_Executable;
struct PJRT_LoadedExecutable;
struct PJRT_Buffer;

/// Header shared by every args struct.
#define RLX_PJRT_ARGS_HEADER \
  size_t struct_size;        \
  void* extension_start
/// Zero-filled room after the fields we know (see the ABI notes at the top of this file).
#define RLX_PJRT_ARGS_TAIL uint64_t reserved_tail[kArgsTailWords]

struct PJRT_Api_Version {
  RLX_PJRT_ARGS_HEADER;
  int major_version;
  int minor_version;
};

struct PJRT_Error_Destroy_Args {
  RLX_PJRT_ARGS_HEADER;
  PJRT_Error* error;
  RLX_PJRT_ARGS_TAIL;
};
struct PJRT_Error_Message_Args {
  RLX_PJRT_ARGS_HEADER;
  const PJRT_Error* error;
  const char* message;  // out, lives as long as `error`
  size_t message_size;  // out
  RLX_PJRT_ARGS_TAIL;
};
struct PJRT_Error_GetCode_Args {
  RLX_PJRT_ARGS_HEADER;
  const PJRT_Error* error;
  int code;  // out: absl status code (3 = INVALID_ARGUMENT, 12 = UNIMPLEMENTED, ...)
  RLX_PJRT_ARGS_TAIL;
};

struct PJRT_Plugin_Initialize_Args {
  RLX_PJRT_ARGS_HEADER;
  RLX_PJRT_ARGS_TAIL;
};

struct PJRT_Event_Destroy_Args {
  RLX_PJRT_ARGS_HEADER;
  PJRT_Event* event;
  RLX_PJRT_ARGS_TAIL;
};
struct PJRT_Event_Await_Args {
  RLX_PJRT_ARGS_HEADER;
  PJRT_Event* event;
  RLX_PJRT_ARGS_TAIL;
};

/// PJRT_NamedValue_Type: the kinds of a named value.
enum PJRT_NamedValue_Type : int {
  PJRT_NamedValue_kString = 0,
  PJRT_NamedValue_kInt64 = 1,
  PJRT_NamedValue_kInt64List = 2,
  PJRT_NamedValue_kFloat = 3,
};
/// A named value (client create options). NOT padded with a tail: create options are an array
/// the plugin walks with its own element size, so this must be exactly the upstream layout.
struct PJRT_NamedValue {
  size_t struct_size;
  void* extension_start;
  const char* name;
  size_t name_size;
  PJRT_NamedValue_Type type;
  union {
    const char* string_value;
    int64_t int64_value;
    const int64_t* int64_array_value;
    float float_value;
  };
  size_t value_size;  // elements of an array / string, 1 for a scalar
};
static_assert(sizeof(PJRT_NamedValue) == 56, "PJRT_NamedValue must match the upstream layout");

struct PJRT_Client_Create_Args {
  RLX_PJRT_ARGS_HEADER;
  const PJRT_NamedValue* create_options;
  size_t num_options;
  void* kv_get_callback;  // unused (single process): null
  void* kv_get_user_arg;
  void* kv_put_callback;
  void* kv_put_user_arg;
  PJRT_Client* client;  // out
  RLX_PJRT_ARGS_TAIL;
};
struct PJRT_Client_Destroy_Args {
  RLX_PJRT_ARGS_HEADER;
  PJRT_Client* client;
  RLX_PJRT_ARGS_TAIL;
};
struct PJRT_Client_PlatformName_Args {
  RLX_PJRT_ARGS_HEADER;
  PJRT_Client* client;
  const char* platform_name;  // out, owned by the client
  size_t platform_name_size;  // out
  RLX_PJRT_ARGS_TAIL;
};
struct PJRT_Client_PlatformVersion_Args {
  RLX_PJRT_ARGS_HEADER;
  PJRT_Client* client;
  const char* platform_version;  // out, owned by the client ("" on the XLA CPU plugin)
  size_t platform_version_size;  // out
  RLX_PJRT_ARGS_TAIL;
};
struct PJRT_Client_Devices_Args {
  RLX_PJRT_ARGS_HEADER;
  PJRT_Client* client;
  PJRT_Device* const* devices;  // out, owned by the client
  size_t num_devices;           // out
  RLX_PJRT_ARGS_TAIL;
};

/// A program to compile: format "mlir" takes MLIR text or bytecode.
struct PJRT_Program {
  RLX_PJRT_ARGS_HEADER;
  char* code;
  size_t code_size;
  const char* format;
  size_t format_size;
  RLX_PJRT_ARGS_TAIL;
};
struct PJRT_Client_Compile_Args {
  RLX_PJRT_ARGS_HEADER;
  PJRT_Client* client;
  const PJRT_Program* program;
  const char* compile_options;  // a serialized xla.CompileOptionsProto
  size_t compile_options_size;
  PJRT_LoadedExecutable* executable;  // out
  RLX_PJRT_ARGS_TAIL;
};

/// Element types (PJRT_Buffer_Type); only those rlx has.
enum PJRT_Buffer_Type : int {
  PJRT_Buffer_Type_INVALID = 0,
  PJRT_Buffer_Type_PRED = 1,
  PJRT_Buffer_Type_S8 = 2,
  PJRT_Buffer_Type_S32 = 4,
  PJRT_Buffer_Type_S64 = 5,
  PJRT_Buffer_Type_U8 = 6,
  PJRT_Buffer_Type_F16 = 10,
  PJRT_Buffer_Type_F32 = 11,
  PJRT_Buffer_Type_F64 = 12,
  PJRT_Buffer_Type_BF16 = 13,
};
/// PJRT_HostBufferSemantics: 0 = the host data are read only during the call.
inline constexpr int kImmutableOnlyDuringCall = 0;

struct PJRT_Client_BufferFromHostBuffer_Args {
  RLX_PJRT_ARGS_HEADER;
  PJRT_Client* client;
  const void* data;
  PJRT_Buffer_Type type;
  const int64_t* dims;
  size_t num_dims;
  const int64_t* byte_strides;  // null: dense row-major
  size_t num_byte_strides;
  int host_buffer_semantics;
  PJRT_Device* device;
  PJRT_Memory* memory;                // null: the device's default memory
  void* device_layout;                // null: dense row-major
  PJRT_Event* done_with_host_buffer;  // out
  PJRT_Buffer* buffer;                // out
  RLX_PJRT_ARGS_TAIL;
};

struct PJRT_DeviceDescription_Id_Args {
  RLX_PJRT_ARGS_HEADER;
  PJRT_DeviceDescription* device_description;
  int id;  // out
  RLX_PJRT_ARGS_TAIL;
};
struct PJRT_DeviceDescription_Kind_Args {
  RLX_PJRT_ARGS_HEADER;
  PJRT_DeviceDescription* device_description;
  const char* device_kind;  // out
  size_t device_kind_size;  // out
  RLX_PJRT_ARGS_TAIL;
};
struct PJRT_Device_GetDescription_Args {
  RLX_PJRT_ARGS_HEADER;
  PJRT_Device* device;
  PJRT_DeviceDescription* device_description;  // out
  RLX_PJRT_ARGS_TAIL;
};

/// Memory statistics of a device; only bytes_in_use is always set, the others have an
/// `_is_set` flag (plugins without statistics, e.g. XLA CPU, return an error instead).
struct PJRT_Device_MemoryStats_Args {
  RLX_PJRT_ARGS_HEADER;
  PJRT_Device* device;
  int64_t bytes_in_use;  // out
  int64_t peak_bytes_in_use;
  bool peak_bytes_in_use_is_set;
  int64_t num_allocs;
  bool num_allocs_is_set;
  int64_t largest_alloc_size;
  bool largest_alloc_size_is_set;
  int64_t bytes_limit;  // out: the memory a user may allocate
  bool bytes_limit_is_set;
  RLX_PJRT_ARGS_TAIL;
};

struct PJRT_LoadedExecutable_Destroy_Args {
  RLX_PJRT_ARGS_HEADER;
  PJRT_LoadedExecutable* executable;
  RLX_PJRT_ARGS_TAIL;
};
// Serialization (the persistent compile cache, compile_cache.h). A loaded executable gives an
// (unloaded) PJRT_Executable that the caller destroys; Serialize returns bytes backed by an
// opaque object that its deleter frees; DeserializeAndLoad takes bytes from the same plugin
// build only.
struct PJRT_SerializedExecutable;
struct PJRT_Executable_Destroy_Args {
  RLX_PJRT_ARGS_HEADER;
  PJRT_Executable* executable;
  RLX_PJRT_ARGS_TAIL;
};
struct PJRT_LoadedExecutable_GetExecutable_Args {
  RLX_PJRT_ARGS_HEADER;
  PJRT_LoadedExecutable* loaded_executable;
  PJRT_Executable* executable;  // out, destroyed by the caller (Executable_Destroy)
  RLX_PJRT_ARGS_TAIL;
};
struct PJRT_Executable_Serialize_Args {
  RLX_PJRT_ARGS_HEADER;
  const PJRT_Executable* executable;
  const char* serialized_bytes;                      // out, lives as long as serialized_executable
  size_t serialized_bytes_size;                      // out
  PJRT_SerializedExecutable* serialized_executable;  // out, freed by the deleter
  void (*serialized_executable_deleter)(PJRT_SerializedExecutable*);  // out
  RLX_PJRT_ARGS_TAIL;
};
struct PJRT_Executable_DeserializeAndLoad_Args {
  RLX_PJRT_ARGS_HEADER;
  PJRT_Client* client;
  const char* serialized_executable;
  size_t serialized_executable_size;
  PJRT_LoadedExecutable* loaded_executable;  // out
  RLX_PJRT_ARGS_TAIL;
};

struct PJRT_LoadedExecutable_AddressableDevices_Args {
  RLX_PJRT_ARGS_HEADER;
  PJRT_LoadedExecutable* executable;
  PJRT_Device* const* addressable_devices;  // out, owned by the executable
  size_t num_addressable_devices;           // out
  RLX_PJRT_ARGS_TAIL;
};
struct PJRT_ExecuteOptions {
  RLX_PJRT_ARGS_HEADER;
  void* send_callbacks;
  void* recv_callbacks;
  size_t num_send_ops;
  size_t num_recv_ops;
  int launch_id;
  RLX_PJRT_ARGS_TAIL;
};
struct PJRT_LoadedExecutable_Execute_Args {
  RLX_PJRT_ARGS_HEADER;
  PJRT_LoadedExecutable* executable;
  PJRT_ExecuteOptions* options;
  PJRT_Buffer* const* const* argument_lists;  // [num_devices][num_args]
  size_t num_devices;
  size_t num_args;
  PJRT_Buffer** const* output_lists;    // [num_devices][num_outputs], filled by the plugin
  PJRT_Event** device_complete_events;  // null: none wanted
  PJRT_Device* execute_device;          // null: the compile-time device
  RLX_PJRT_ARGS_TAIL;
};

struct PJRT_Buffer_Destroy_Args {
  RLX_PJRT_ARGS_HEADER;
  PJRT_Buffer* buffer;
  RLX_PJRT_ARGS_TAIL;
};
struct PJRT_Buffer_IsDeleted_Args {
  RLX_PJRT_ARGS_HEADER;
  PJRT_Buffer* buffer;
  bool is_deleted;  // out
  RLX_PJRT_ARGS_TAIL;
};
struct PJRT_Buffer_ToHostBuffer_Args {
  RLX_PJRT_ARGS_HEADER;
  PJRT_Buffer* src;
  void* host_layout;  // null: row-major
  void* dst;
  size_t dst_size;
  PJRT_Event* event;  // out
  RLX_PJRT_ARGS_TAIL;
};

/// An event that fires when the buffer's data are computed (or its computation failed: the
/// event's error is the run's).
struct PJRT_Buffer_ReadyEvent_Args {
  RLX_PJRT_ARGS_HEADER;
  PJRT_Buffer* buffer;
  PJRT_Event* event;  // out, destroyed by the caller
  RLX_PJRT_ARGS_TAIL;
};

#undef RLX_PJRT_ARGS_HEADER
#undef RLX_PJRT_ARGS_TAIL

using PJRT_Fn = PJRT_Error* (*)(void*);  // placeholder type of table entries we never call

/// The prefix of the PJRT_Api function table up to the last entry rlx calls
/// (PJRT_Buffer_ReadyEvent), in the upstream order. Entries we do not call are PJRT_Fn.
struct PJRT_Api {
  size_t struct_size;  // of the plugin's full table: must cover our prefix
  void* extension_start;
  PJRT_Api_Version pjrt_api_version;

  void (*PJRT_Error_Destroy)(PJRT_Error_Destroy_Args*);
  void (*PJRT_Error_Message)(PJRT_Error_Message_Args*);
  PJRT_Error* (*PJRT_Error_GetCode)(PJRT_Error_GetCode_Args*);

  PJRT_Error* (*PJRT_Plugin_Initialize)(PJRT_Plugin_Initialize_Args*);
  PJRT_Fn PJRT_Plugin_Attributes;

  PJRT_Error* (*PJRT_Event_Destroy)(PJRT_Event_Destroy_Args*);
  PJRT_Fn PJRT_Event_IsReady;
  PJRT_Fn PJRT_Event_Error;
  PJRT_Error* (*PJRT_Event_Await)(PJRT_Event_Await_Args*);
  PJRT_Fn PJRT_Event_OnReady;

  PJRT_Error* (*PJRT_Client_Create)(PJRT_Client_Create_Args*);
  PJRT_Error* (*PJRT_Client_Destroy)(PJRT_Client_Destroy_Args*);
  PJRT_Error* (*PJRT_Client_PlatformName)(PJRT_Client_PlatformName_Args*);
  PJRT_Fn PJRT_Client_ProcessIndex;
  PJRT_Error* (*PJRT_Client_PlatformVersion)(PJRT_Client_PlatformVersion_Args*);
  PJRT_Error* (*PJRT_Client_Devices)(PJRT_Client_Devices_Args*);
  // Same args layout as Devices (client, device list out, count out).
  PJRT_Error* (*PJRT_Client_AddressableDevices)(PJRT_Client_Devices_Args*);
  PJRT_Fn PJRT_Client_LookupDevice;
  PJRT_Fn PJRT_Client_LookupAddressableDevice;
  PJRT_Fn PJRT_Client_AddressableMemories;
  PJRT_Error* (*PJRT_Client_Compile)(PJRT_Client_Compile_Args*);
  PJRT_Fn PJRT_Client_DefaultDeviceAssignment;
  PJRT_Error* (*PJRT_Client_BufferFromHostBuffer)(PJRT_Client_BufferFromHostBuffer_Args*);

  PJRT_Error* (*PJRT_DeviceDescription_Id)(PJRT_DeviceDescription_Id_Args*);
  PJRT_Fn PJRT_DeviceDescription_ProcessIndex;
  PJRT_Fn PJRT_DeviceDescription_Attributes;
  PJRT_Error* (*PJRT_DeviceDescription_Kind)(PJRT_DeviceDescription_Kind_Args*);
  PJRT_Fn PJRT_DeviceDescription_DebugString;
  PJRT_Fn PJRT_DeviceDescription_ToString;

  PJRT_Error* (*PJRT_Device_GetDescription)(PJRT_Device_GetDescription_Args*);
  PJRT_Fn PJRT_Device_IsAddressable;
  PJRT_Fn PJRT_Device_LocalHardwareId;
  PJRT_Fn PJRT_Device_AddressableMemories;
  PJRT_Fn PJRT_Device_DefaultMemory;
  PJRT_Error* (*PJRT_Device_MemoryStats)(PJRT_Device_MemoryStats_Args*);

  PJRT_Fn PJRT_Memory_Id;
  PJRT_Fn PJRT_Memory_Kind;
  PJRT_Fn PJRT_Memory_DebugString;
  PJRT_Fn PJRT_Memory_ToString;
  PJRT_Fn PJRT_Memory_AddressableByDevices;

  PJRT_Error* (*PJRT_Executable_Destroy)(PJRT_Executable_Destroy_Args*);
  PJRT_Fn PJRT_Executable_Name;
  PJRT_Fn PJRT_Executable_NumReplicas;
  PJRT_Fn PJRT_Executable_NumPartitions;
  PJRT_Fn PJRT_Executable_NumOutputs;
  PJRT_Fn PJRT_Executable_SizeOfGeneratedCodeInBytes;
  PJRT_Fn PJRT_Executable_GetCostAnalysis;
  PJRT_Fn PJRT_Executable_OutputMemoryKinds;
  PJRT_Fn PJRT_Executable_OptimizedProgram;
  PJRT_Error* (*PJRT_Executable_Serialize)(PJRT_Executable_Serialize_Args*);

  PJRT_Error* (*PJRT_LoadedExecutable_Destroy)(PJRT_LoadedExecutable_Destroy_Args*);
  PJRT_Error* (*PJRT_LoadedExecutable_GetExecutable)(PJRT_LoadedExecutable_GetExecutable_Args*);
  PJRT_Error* (*PJRT_LoadedExecutable_AddressableDevices)(
      PJRT_LoadedExecutable_AddressableDevices_Args*);
  PJRT_Fn PJRT_LoadedExecutable_Delete;
  PJRT_Fn PJRT_LoadedExecutable_IsDeleted;
  PJRT_Error* (*PJRT_LoadedExecutable_Execute)(PJRT_LoadedExecutable_Execute_Args*);
  PJRT_Error* (*PJRT_Executable_DeserializeAndLoad)(PJRT_Executable_DeserializeAndLoad_Args*);
  PJRT_Fn PJRT_LoadedExecutable_Fingerprint;

  PJRT_Error* (*PJRT_Buffer_Destroy)(PJRT_Buffer_Destroy_Args*);
  PJRT_Fn PJRT_Buffer_ElementType;
  PJRT_Fn PJRT_Buffer_Dimensions;
  PJRT_Fn PJRT_Buffer_UnpaddedDimensions;
  PJRT_Fn PJRT_Buffer_DynamicDimensionIndices;
  PJRT_Fn PJRT_Buffer_GetMemoryLayout;
  PJRT_Fn PJRT_Buffer_OnDeviceSizeInBytes;
  PJRT_Fn PJRT_Buffer_Device;
  PJRT_Fn PJRT_Buffer_Memory;
  PJRT_Fn PJRT_Buffer_Delete;
  PJRT_Error* (*PJRT_Buffer_IsDeleted)(PJRT_Buffer_IsDeleted_Args*);
  PJRT_Fn PJRT_Buffer_CopyToDevice;
  PJRT_Error* (*PJRT_Buffer_ToHostBuffer)(PJRT_Buffer_ToHostBuffer_Args*);
  PJRT_Fn PJRT_Buffer_IsOnCpu;
  PJRT_Error* (*PJRT_Buffer_ReadyEvent)(PJRT_Buffer_ReadyEvent_Args*);
};

/// The plugin's entry point: `const PJRT_Api* GetPjrtApi()`.
using GetPjrtApiFn = const PJRT_Api* (*)();

}  // extern "C"

}  // namespace rlx::pjrt::capi
