// The XLA backend through the PJRT C API: StableHLO emission, plugin discovery and the backend.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "rlx/backends/pjrt/sharding.h"
#include "rlx/ir/graph.h"
#include "rlx/runtime/backend.h"

namespace rlx::pjrt {

/// Prints `g` as a StableHLO module in MLIR text (generic op form): `module @<graph name>`
/// holding `func.func public @main` whose arguments are the graph inputs then the params (in
/// graph order) and whose results are the graph outputs. Elementwise ops broadcast their
/// operands explicitly (stablehlo.broadcast_in_dim); erf is chlo.erf; constants are exact hex
/// (dense<"0x...">, little-endian bytes). Throws rlx::Error naming the op and node for an op
/// outside native_ops() (legalize the graph first, as the backend does). `aliases` maps input
/// node ids to output indices: such an argument gets `tf.aliasing_output = <index>` (jax's
/// donated arguments), so XLA may write that output into the argument's donated buffer
/// (CompileOptions::state).
std::string emit_stablehlo(const Graph& g, const std::map<int32_t, size_t>& aliases = {});

/// The StableHLO module the pjrt backend would compile for `graph` under exactly `options`
/// (no environment variable is read; pass resolve_environment(options) to get what a Session
/// would compile): the backend's pipeline (legalization, DCE, folding, CSE, precision policy as
/// in make_pjrt_backend) followed by emit_stablehlo. Needs no plugin. Throws rlx::Error for an
/// invalid graph or, with the legalization report, for ops the backend cannot run.
std::string lower_to_stablehlo(const Graph& graph, const CompileOptions& options = {});

/// The op kinds emit_stablehlo lowers natively (the backend's supported_ops()). Every other
/// op is decomposed by legalization when it is a composite, else compile fails with the
/// legalization report.
std::set<OpKind> native_ops();

/// The plugin path from the environment: RLX_PJRT_PLUGIN, else TPU_LIBRARY_PATH, else
/// LIBTPU_PATH (libtpu's own variables); nullopt when none is set to a non-empty value.
std::optional<std::string> plugin_path_from_env();

/// One addressable device of a plugin, as PJRT describes it.
struct DeviceInfo {
  int index = 0;         ///< rlx's device pjrt:<index>: its position in the addressable list
  int64_t id = 0;        ///< PJRT's global device id (PJRT_DeviceDescription_Id)
  std::string kind;      ///< PJRT_DeviceDescription_Kind: "cpu", "TPU v5 lite", "NVIDIA H100"
  std::string platform;  ///< the client's platform name: "cpu", "cuda", "tpu"
  /// PJRT_Device_MemoryStats, when the plugin reports them (XLA CPU does not: both absent).
  std::optional<int64_t> bytes_limit, bytes_in_use;
  /// "pjrt:0  id 0  kind cpu  platform cpu", then "  memory 15.8 GiB (0 B in use)" when known.
  std::string to_string() const;
};

/// What a loaded plugin reports about itself.
struct PluginInfo {
  std::string path;
  int api_major = 0;
  int api_minor = 0;
  std::string platform;             ///< PJRT_Client_PlatformName: "cpu", "cuda", "tpu"
  std::vector<DeviceInfo> devices;  ///< every addressable device, in pjrt:<index> order
};

/// Loads the plugin at `path` (dlopen, GetPjrtApi, version check, Plugin_Initialize,
/// Client_Create) and describes it. Throws rlx::Error naming the file: it cannot be opened,
/// lacks GetPjrtApi, has another major / an older minor API version than rlx's (both versions
/// named), or the plugin reports an error (its message).
PluginInfo describe_plugin(const std::string& path);

/// Counters of the persistent compile cache (docs/pjrt.md) over this process, all pjrt backends
/// together.
struct CompileCacheStats {
  int64_t hits = 0;      ///< executables loaded from an entry instead of compiled
  int64_t misses = 0;    ///< compiles with the cache on that found no usable entry
  int64_t stores = 0;    ///< entries written
  int64_t rejected = 0;  ///< entries found but unusable (corrupt, truncated, another format
                         ///< version or key, refused by the plugin): recompiled and replaced
  int64_t errors = 0;    ///< cache I/O or serialization failures (the compile went on)
  int64_t evicted = 0;   ///< entries removed by this process to keep the cache under its cap
};
CompileCacheStats compile_cache_stats();

/// The directory of the persistent compile cache, read at every compile: "$RLX_CACHE_DIR/pjrt",
/// or "$HOME/.cache/rlx/pjrt" when RLX_CACHE_DIR is unset; nullopt (no cache: every compile
/// compiles, nothing is written) when RLX_CACHE_DIR is set to "" or "off", or it is unset and
/// HOME is too.
std::optional<std::string> compile_cache_dir();

/// The size cap of the persistent compile cache in bytes: RLX_CACHE_MAX_BYTES (a byte count as
/// RLX_MEMORY_LIMIT takes it: "1048576", "512M", "2G"), default 1 GiB. After each store the
/// least recently used entries (oldest modification time; a hit touches its entry) are removed
/// until the entries total at most this; the entry just written is kept even when it alone is
/// larger. Throws rlx::Error "RLX_CACHE_MAX_BYTES: ..." for a malformed value.
int64_t compile_cache_max_bytes();

/// What the persistent compile cache holds now (a scan of its directory) and this process's
/// counters.
struct CompileCacheInfo {
  std::optional<std::string> dir;  ///< compile_cache_dir(); absent when the cache is off
  int64_t entries = 0;             ///< "*.xla" entry files in dir
  int64_t bytes = 0;               ///< their total size
  int64_t max_bytes = 0;           ///< compile_cache_max_bytes()
  CompileCacheStats stats;         ///< compile_cache_stats() of this process
};
/// Scans compile_cache_dir() (a missing directory holds nothing). Throws rlx::Error naming the
/// directory when it cannot be read, and as compile_cache_max_bytes().
CompileCacheInfo compile_cache_info();

/// Removes every entry of compile_cache_dir() (and temporaries older than an hour, left by a
/// writer that died) and returns the number of entries removed; 0 when the cache is off or the
/// directory does not exist. Safe while other processes use the cache: a reader that opened an
/// entry reads it whole (POSIX unlink), a writer's rename creates a fresh entry. Throws
/// rlx::Error naming the file that cannot be removed.
int64_t clear_compile_cache();

/// A PJRT backend (device kind pjrt) bound to the plugin at `plugin_path`; an empty path means
/// plugin_path_from_env() at the first compile. The plugin is loaded at the first compile and
/// kept for the backend's lifetime; device pjrt:N runs on the plugin's N-th addressable device.
/// Compile runs the standard pipeline (legalize to native_ops(), DCE, fold, CSE, AMP) with the
/// precision policy AutoMixedBf16 unless CompileOptions::precision sets one (a Session fills it
/// from RLX_PRECISION); params are uploaded once by set_param and stay on the device. The
/// executable's kernels() lists every computing node as part of the one XLA executable.
std::shared_ptr<Backend> make_pjrt_backend(std::string plugin_path = "");

/// A pjrt backend that compiles every graph as one SPMD program over `sharding.mesh` (XLA's
/// SPMD partitioner, as jax.jit with in/out shardings): @main's arguments and results carry
/// each tensor's PartitionSpec (tensors not named in `sharding` are replicated) in the form
/// `sharding.form` chooses (ShardingForm: `sdy.sharding` with an `sdy.mesh` and the compile
/// option use_shardy_partitioner, or `mhlo.sharding`; Auto: RLX_PJRT_SHARDING, else Shardy
/// with a fallback to GSPMD when the plugin rejects it, remembered per client; the kernel
/// report names the form used), the module `mhlo.num_partitions` = mesh size, and the compile
/// options num_partitions = mesh size, use_spmd_partitioning and the device assignment
/// partition p -> mesh.devices()[p]. Compile takes any pjrt device (the mesh decides where
/// the program runs) and throws rlx::Error for a bad sharding (validate_sharding, naming the
/// tensor), a name in `sharding` that is not an input / param / output of the graph, a mesh
/// device the plugin does not have, a state whose output is given another spec than its
/// input, a bad RLX_PJRT_SHARDING value, or the plugin's compile error (under Auto: the GSPMD
/// one with the Shardy one appended). Runs split each host input by its sharding and upload one
/// shard per device; set_param uploads a param's shards once; outputs are downloaded per device and
/// assembled. State (CompileOptions::state) is sharded by its input's spec (`sharding.inputs`; its
/// bound output gets the same spec): set_state splits and uploads it, each run donates the shards
/// (tf.aliasing_output) and keeps the bound output's, get_state downloads and assembles them.
/// `plugin_path` as make_pjrt_backend.
std::shared_ptr<Backend> make_pjrt_spmd_backend(ShardingConfig sharding,
                                                std::string plugin_path = "");

/// shard_map-style SPMD (jax.jit(shard_map(f, mesh, in_specs, out_specs))): the graph is the
/// per-device program (every shape a per-device shape; its collectives name mesh positions as
/// device ids) and `sharding` gives, per input / param / output name, how the full tensor is
/// split over `sharding.mesh` (unnamed: P(), each device holds all of it; an output with P()
/// must be equal on every device, e.g. the result of an all_reduce over all of them). The module
/// is what jax emits: @main takes and returns the full tensors with their mhlo.sharding, each
/// argument passes custom_call @Sharding and @SPMDFullToShardShape ({manual}) into the
/// per-device body (a private function), each result @Sharding ({manual}) and
/// @SPMDShardToFullShape; compile options as make_pjrt_spmd_backend (num_partitions = mesh
/// size, SPMD partitioning). Runs take and give full tensors (inputs() / outputs() report full
/// shapes: each split dim times its axes' sizes), split and assembled as on an SPMD mesh.
/// Throws rlx::Error for a spec with more dims than the per-device tensor, a bad sharding
/// (validate_sharding on the full shape), a name the graph lacks, collectives whose groups do
/// not cover the mesh, or state (not supported here).
std::shared_ptr<Backend> make_pjrt_shard_map_backend(ShardingConfig sharding,
                                                     std::string plugin_path = "");

/// How a replicated executable (make_pjrt_replicated_backend) takes each input and gives each
/// output of its N replicas.
enum class ReplicaLayout : uint8_t {
  /// Along dim 0: a tensor of N * b rows, replica r's rows [r * b, (r + 1) * b) (a batch
  /// split; the graph's inputs and outputs must have rank >= 1).
  Concat,
  /// On a new leading device axis, as jax.pmap: a tensor [N, ...], replica r's x[r] (any
  /// rank, scalars included). The form for per-device programs with collectives.
  Stacked,
};

/// Replicated data parallelism (jax.pmap-style, XLA num_replicas): the graph is ONE replica's
/// program; the executable runs it on every device of `devices` (pjrt indices, replica r on
/// devices[r]) at once. Inputs and outputs travel per `layout`: ReplicaLayout::Concat (the
/// default) takes inputs of N * b along dim 0, gives replica r rows [r * b, (r + 1) * b) and
/// concatenates the outputs along dim 0; ReplicaLayout::Stacked takes and gives [N, ...]
/// tensors, replica r's slice r. The executable's inputs() / outputs() report those shapes.
/// Params are copied whole to every device (once, at set_param). The module carries
/// mhlo.num_replicas = N and no shardings; the compile options num_replicas = N,
/// num_partitions = 1 and the device assignment. Collectives (all_reduce, all_gather,
/// reduce_scatter, all_to_all) run across the replicas in XLA's cross-replica form
/// (replica_groups of replica indices 0..N-1, as jax.pmap emits them); a collective whose
/// groups do not cover exactly the N replicas fails at compile naming the op and node.
/// Without collectives Concat is right only for graphs whose rows are independent. Throws
/// rlx::Error for an empty or repeated device list, a scalar input or output under Concat, a
/// device the plugin lacks, or state (an SPMD mesh supports it).
std::shared_ptr<Backend> make_pjrt_replicated_backend(std::vector<int> devices,
                                                      std::string plugin_path = "",
                                                      ReplicaLayout layout = ReplicaLayout::Concat);

/// The SPMD module make_pjrt_spmd_backend(sharding) would compile for `graph` under exactly
/// `options` (lower_to_stablehlo with the sharding annotations), in the form `sharding.form`
/// or RLX_PJRT_SHARDING names; Auto (no plugin to ask) writes Shardy, the form tried first.
/// Needs no plugin; throws rlx::Error as that backend's compile does for a bad sharding or a
/// bad RLX_PJRT_SHARDING.
std::string lower_to_stablehlo_sharded(const Graph& graph, const ShardingConfig& sharding,
                                       const CompileOptions& options = {});

}  // namespace rlx::pjrt
