// Device meshes and per-tensor shardings for SPMD compiles on the pjrt backend, mirroring JAX's
// jax.sharding.Mesh, PartitionSpec and NamedSharding (docs/pjrt.md, "Devices, meshes and
// sharding").
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "rlx/ir/tensor.h"

namespace rlx::pjrt {

/// A logical array of devices with named axes (jax.sharding.Mesh). `axes` are (name, size) in
/// major-to-minor order, e.g. {{"data", 2}, {"model", 2}}: 4 devices, position p = 2 * data +
/// model. `devices` are pjrt device indices (pjrt:<i>) in that row-major order; empty means
/// 0 .. size()-1. Position p of the mesh is XLA's partition p (the device assignment maps it
/// to devices[p]). Throws rlx::Error for no axes, an empty or repeated axis name, one with a
/// quote, backslash or control character, a size < 1,
/// a device list of another length than the product of the sizes, or a device listed twice.
class Mesh {
 public:
  Mesh() = default;
  explicit Mesh(std::vector<std::pair<std::string, int64_t>> axes, std::vector<int> devices = {});

  const std::vector<std::pair<std::string, int64_t>>& axes() const { return axes_; }
  const std::vector<int>& devices() const { return devices_; }
  /// The number of devices (the product of the axis sizes).
  int64_t size() const { return static_cast<int64_t>(devices_.size()); }
  /// The index of axis `name` in axes(), or -1.
  int axis_index(const std::string& name) const;
  /// The coordinate of mesh position `position` along each axis.
  std::vector<int64_t> coords(int64_t position) const;
  /// "Mesh('data': 2, 'model': 2)", as jax prints it.
  std::string to_string() const;

 private:
  std::vector<std::pair<std::string, int64_t>> axes_;
  std::vector<int> devices_;
};

/// How each dim of a tensor is split over mesh axes (jax.sharding.PartitionSpec): dims[i] is
/// the list of axes tensor dim i is split over (major to minor, like P(('data', 'model'))), or
/// empty for none (P(None)). Dims past dims.size() are not split; mesh axes no dim uses
/// replicate the tensor. The default (no dims) is fully replicated, P().
struct PartitionSpec {
  std::vector<std::vector<std::string>> dims;

  PartitionSpec() = default;
  /// One axis name per dim, "" for none: PartitionSpec({"data", ""}) is P('data', None).
  explicit PartitionSpec(const std::vector<std::string>& one_axis_per_dim);
  /// The general form: several axes for one dim, P(('data', 'model'), None).
  static PartitionSpec of(std::vector<std::vector<std::string>> dims);
  bool is_replicated() const;
  /// "P('data', None)", "P(('data', 'model'),)", "P()".
  std::string to_string() const;
};

/// How the shardings are written into the SPMD module (docs/pjrt.md, "Sharding forms").
/// Gspmd: XLA's `mhlo.sharding = "{devices=...}"` strings (hlo_sharding) with the GSPMD
/// partitioner; Shardy: an `sdy.mesh` and `sdy.sharding = #sdy.sharding<@mesh, ...>` attributes
/// (sdy_sharding) with the compile option use_shardy_partitioner, as jax emits them under
/// `jax_use_shardy_partitioner`; Auto: RLX_PJRT_SHARDING when it names a form, else Shardy
/// first, falling back to Gspmd (remembered per client) when the plugin rejects the Shardy
/// module.
enum class ShardingForm : uint8_t { Auto, Gspmd, Shardy };

/// "auto", "gspmd", "shardy".
const char* sharding_form_name(ShardingForm form);

/// The form RLX_PJRT_SHARDING asks for: "gspmd", "shardy", or "auto" / unset / "" (Auto).
/// Throws rlx::Error naming the variable and the accepted values for anything else.
ShardingForm sharding_form_from_env();

/// The shardings of one SPMD compile: a mesh and a PartitionSpec per graph input, param and
/// output by name (jax's in_shardings / out_shardings as NamedSharding(mesh, spec)). A tensor
/// that is not named is replicated on every device. Outputs are named as the graph names
/// them (Executable::outputs()). `form` chooses how the module writes them (ShardingForm); a
/// form other than Auto overrides RLX_PJRT_SHARDING.
struct ShardingConfig {
  Mesh mesh;
  std::map<std::string, PartitionSpec> inputs, params, outputs;
  ShardingForm form = ShardingForm::Auto;
};

/// Checks `spec` for tensor `what` (e.g. "input 'x'") of `shape` on `mesh`; throws rlx::Error
/// naming the tensor for: more dims in the spec than the tensor has, an axis not in the mesh,
/// an axis used twice, a dim whose size is not divisible by the product of its axes' sizes.
void validate_sharding(const Mesh& mesh, const PartitionSpec& spec, const Shape& shape,
                       const std::string& what);

/// The shape of one device's shard of a tensor of `shape` (each split dim divided by the
/// product of its axes' sizes). `spec` must be valid (validate_sharding).
Shape shard_shape(const Mesh& mesh, const PartitionSpec& spec, const Shape& shape);

/// The XLA HloSharding text of `spec` on `mesh` (the value of an `mhlo.sharding` attribute):
/// "{replicated}", "{devices=[2,1]<=[2]}" (tile counts per dim, then the partitions in tile
/// order), or with the unused axes as a trailing replicated dim, "{devices=[2,1,2]0,2,1,3
/// last_tile_dim_replicate}". Partition p is mesh position p. `spec` must be valid.
std::string hlo_sharding(const Mesh& mesh, const PartitionSpec& spec, const Shape& shape);

/// The Shardy mesh declaration of `mesh`, named @mesh: `sdy.mesh @mesh = <["data"=2,
/// "model"=2]>`. The axes' device order is always the iota: mesh position p is partition p,
/// and the compile options' device assignment maps partition p to mesh.devices()[p] (jax
/// writes no device_ids either).
std::string sdy_mesh(const Mesh& mesh);

/// The Shardy sharding of `spec` on a tensor of `shape` over the mesh @mesh (sdy_mesh; the
/// value of an `sdy.sharding` attribute): one closed dim sharding per tensor dim, its axes
/// major to minor: `#sdy.sharding<@mesh, [{"data"}, {}]>`, `#sdy.sharding<@mesh, [{"data",
/// "model"}]>`, `#sdy.sharding<@mesh, []>` for a scalar. Axes no dim uses replicate
/// implicitly. `spec` must be valid (validate_sharding).
std::string sdy_sharding(const PartitionSpec& spec, const Shape& shape);

/// Splits host tensor `t` by `spec`: element p is mesh position p's shard (a copy, shape
/// shard_shape). Replicated dims are copied whole to every position.
std::vector<Tensor> split_by_sharding(const Tensor& t, const Mesh& mesh, const PartitionSpec& spec);

/// The inverse of split_by_sharding: the full tensor of `type` from one shard per mesh position
/// (positions that hold a replica of a tile already seen are not read).
Tensor assemble_from_shards(const std::vector<Tensor>& shards, const TensorType& type,
                            const Mesh& mesh, const PartitionSpec& spec);

}  // namespace rlx::pjrt
