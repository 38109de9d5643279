// Meshes, PartitionSpecs, their XLA HloSharding text and the host-side split / assembly of
// sharded tensors (rlx/backends/pjrt/sharding.h).
#include "rlx/backends/pjrt/sharding.h"

#include <cstdlib>
#include <cstring>
#include <set>

#include "rlx/ir/error.h"

namespace rlx::pjrt {
namespace {

// Where mesh position p's shard lies: its tile index along each tensor dim and its replica
// index (over the mesh axes no dim uses), with the tile counts and the replica count.
struct Tiling {
  std::vector<int64_t> tiles;  // per tensor dim: how many pieces
  int64_t replicas = 1;
  std::vector<std::vector<int64_t>> tile_of;  // [position][dim]
  std::vector<int64_t> replica_of;            // [position]
};

Tiling tiling(const Mesh& mesh, const PartitionSpec& spec, int rank) {
  Tiling t;
  t.tiles.assign(static_cast<size_t>(rank), 1);
  std::vector<bool> used(mesh.axes().size(), false);
  for (size_t d = 0; d < spec.dims.size(); ++d)
    for (const std::string& a : spec.dims[d]) {
      int i = mesh.axis_index(a);
      used[static_cast<size_t>(i)] = true;
      t.tiles[d] *= mesh.axes()[static_cast<size_t>(i)].second;
    }
  for (size_t i = 0; i < used.size(); ++i)
    if (!used[i]) t.replicas *= mesh.axes()[i].second;
  for (int64_t p = 0; p < mesh.size(); ++p) {
    std::vector<int64_t> c = mesh.coords(p);
    std::vector<int64_t> tile(static_cast<size_t>(rank), 0);
    for (size_t d = 0; d < spec.dims.size(); ++d)
      for (const std::string& a : spec.dims[d]) {  // major to minor
        auto i = static_cast<size_t>(mesh.axis_index(a));
        tile[d] = tile[d] * mesh.axes()[i].second + c[i];
      }
    int64_t replica = 0;
    for (size_t i = 0; i < used.size(); ++i)
      if (!used[i]) replica = replica * mesh.axes()[i].second + c[i];
    t.tile_of.push_back(std::move(tile));
    t.replica_of.push_back(replica);
  }
  return t;
}

std::string quoted_axes(const std::vector<std::string>& axes) {
  if (axes.empty()) return "None";
  if (axes.size() == 1) return "'" + axes[0] + "'";
  std::string out = "(";
  for (size_t i = 0; i < axes.size(); ++i) out += (i ? ", '" : "'") + axes[i] + "'";
  return out + ")";
}

// Copies the block of `full` (row-major, dims `full_dims`) starting at `offsets` with dims
// `block_dims` to or from the dense `block`, one contiguous run of the last dim at a time.
void copy_block(std::byte* full, const std::vector<int64_t>& full_dims, std::byte* block,
                const std::vector<int64_t>& block_dims, const std::vector<int64_t>& offsets,
                size_t elem, bool to_block) {
  size_t rank = full_dims.size();
  int64_t block_numel = 1;
  for (int64_t d : block_dims) block_numel *= d;
  if (block_numel == 0) return;
  if (rank == 0) {
    if (to_block)
      std::memcpy(block, full, elem);
    else
      std::memcpy(full, block, elem);
    return;
  }
  int64_t run = block_dims[rank - 1];
  size_t run_bytes = static_cast<size_t>(run) * elem;
  std::vector<int64_t> idx(rank, 0);  // index into the block, the last dim stays 0
  for (int64_t r = 0; r < block_numel / run; ++r) {
    int64_t src = 0;
    for (size_t d = 0; d < rank; ++d) src = src * full_dims[d] + offsets[d] + idx[d];
    std::byte* f = full + static_cast<size_t>(src) * elem;
    std::byte* b = block + static_cast<size_t>(r) * run_bytes;
    if (to_block)
      std::memcpy(b, f, run_bytes);
    else
      std::memcpy(f, b, run_bytes);
    for (size_t d = rank - 1; d-- > 0;) {  // next row of the block (odometer over dims < last)
      if (++idx[d] < block_dims[d]) break;
      idx[d] = 0;
    }
  }
}

}  // namespace

Mesh::Mesh(std::vector<std::pair<std::string, int64_t>> axes, std::vector<int> devices)
    : axes_(std::move(axes)) {
  check(!axes_.empty(), "Mesh: needs at least one axis");
  int64_t n = 1;
  std::set<std::string> seen;
  for (const auto& [name, size] : axes_) {
    check(!name.empty(), "Mesh: an axis name is empty");
    // Axis names are written into the module (Shardy's sdy.mesh): checked here, so that no
    // sharding form can fail on a name (Auto would otherwise fall back to GSPMD for it).
    for (char c : name)
      check(c != '"' && c != '\\' && static_cast<unsigned char>(c) >= 0x20,
            "Mesh: axis name '" + name +
                "' has a quote, backslash or control character (axis names are written into the "
                "compiled module)");
    check(seen.insert(name).second, "Mesh: axis '" + name + "' appears twice");
    check(size >= 1,
          "Mesh: axis '" + name + "' has size " + std::to_string(size) + "; sizes must be >= 1");
    n *= size;
  }
  if (devices.empty()) {
    for (int i = 0; i < n; ++i) devices.push_back(i);
  }
  check(static_cast<int64_t>(devices.size()) == n, "Mesh: " + std::to_string(devices.size()) +
                                                       " devices for axes of " + std::to_string(n) +
                                                       " positions");
  std::set<int> distinct;
  for (int d : devices) {
    check(d >= 0, "Mesh: device index " + std::to_string(d) + " is negative");
    check(distinct.insert(d).second, "Mesh: device pjrt:" + std::to_string(d) + " appears twice");
  }
  devices_ = std::move(devices);
}

int Mesh::axis_index(const std::string& name) const {
  for (size_t i = 0; i < axes_.size(); ++i)
    if (axes_[i].first == name) return static_cast<int>(i);
  return -1;
}

std::vector<int64_t> Mesh::coords(int64_t position) const {
  std::vector<int64_t> c(axes_.size());
  for (size_t i = axes_.size(); i-- > 0;) {
    c[i] = position % axes_[i].second;
    position /= axes_[i].second;
  }
  return c;
}

std::string Mesh::to_string() const {
  std::string out = "Mesh(";
  for (size_t i = 0; i < axes_.size(); ++i)
    out += (i ? ", '" : "'") + axes_[i].first + "': " + std::to_string(axes_[i].second);
  return out + ")";
}

PartitionSpec::PartitionSpec(const std::vector<std::string>& one_axis_per_dim) {
  for (const std::string& a : one_axis_per_dim)
    dims.push_back(a.empty() ? std::vector<std::string>{} : std::vector<std::string>{a});
}

PartitionSpec PartitionSpec::of(std::vector<std::vector<std::string>> dims) {
  PartitionSpec s;
  s.dims = std::move(dims);
  return s;
}

bool PartitionSpec::is_replicated() const {
  for (const auto& d : dims)
    if (!d.empty()) return false;
  return true;
}

std::string PartitionSpec::to_string() const {
  std::string out = "P(";
  for (size_t i = 0; i < dims.size(); ++i) out += (i ? ", " : "") + quoted_axes(dims[i]);
  if (dims.size() == 1 && dims[0].size() > 1) out += ",";
  return out + ")";
}

void validate_sharding(const Mesh& mesh, const PartitionSpec& spec, const Shape& shape,
                       const std::string& what) {
  std::string where =
      what + " " + shape.to_string() + " with " + spec.to_string() + " on " + mesh.to_string();
  check(static_cast<int>(spec.dims.size()) <= shape.rank(),
        "sharding of " + where + ": the spec has " + std::to_string(spec.dims.size()) +
            " dims but the tensor has rank " + std::to_string(shape.rank()));
  std::set<std::string> used;
  for (size_t d = 0; d < spec.dims.size(); ++d) {
    int64_t pieces = 1;
    for (const std::string& a : spec.dims[d]) {
      int i = mesh.axis_index(a);
      if (i < 0) {
        std::string names;
        for (const auto& [n, s] : mesh.axes()) names += (names.empty() ? "'" : ", '") + n + "'";
        throw Error("sharding of " + where + ": unknown mesh axis '" + a + "' (axes: " + names +
                    ")");
      }
      check(used.insert(a).second,
            "sharding of " + where + ": mesh axis '" + a + "' is used twice");
      pieces *= mesh.axes()[static_cast<size_t>(i)].second;
    }
    int64_t size = shape[static_cast<int>(d)];
    check(size % pieces == 0, "sharding of " + where + ": dim " + std::to_string(d) + " of size " +
                                  std::to_string(size) + " is not divisible by " +
                                  std::to_string(pieces) + " (" + quoted_axes(spec.dims[d]) + ")");
  }
}

Shape shard_shape(const Mesh& mesh, const PartitionSpec& spec, const Shape& shape) {
  Tiling t = tiling(mesh, spec, shape.rank());
  Shape out = shape;
  for (int d = 0; d < shape.rank(); ++d) out[d] = shape[d] / t.tiles[static_cast<size_t>(d)];
  return out;
}

std::string hlo_sharding(const Mesh& mesh, const PartitionSpec& spec, const Shape& shape) {
  Tiling t = tiling(mesh, spec, shape.rank());
  bool split = false;
  for (int64_t n : t.tiles) split = split || n > 1;
  if (!split) return "{replicated}";
  // The tile assignment array [tiles..., replicas]: which partition holds each tile (replica).
  std::vector<int64_t> assignment(static_cast<size_t>(mesh.size()));
  for (int64_t p = 0; p < mesh.size(); ++p) {
    int64_t flat = 0;
    for (size_t d = 0; d < t.tiles.size(); ++d) flat = flat * t.tiles[d] + t.tile_of[p][d];
    flat = flat * t.replicas + t.replica_of[static_cast<size_t>(p)];
    assignment[static_cast<size_t>(flat)] = p;
  }
  std::string out = "{devices=[";
  for (size_t d = 0; d < t.tiles.size(); ++d) out += (d ? "," : "") + std::to_string(t.tiles[d]);
  if (t.replicas > 1) out += "," + std::to_string(t.replicas);
  out += "]";
  bool iota = true;
  for (size_t i = 0; i < assignment.size(); ++i) iota = iota && assignment[i] == int64_t(i);
  if (iota) {
    out += "<=[" + std::to_string(mesh.size()) + "]";
  } else {
    for (size_t i = 0; i < assignment.size(); ++i)
      out += (i ? "," : "") + std::to_string(assignment[i]);
  }
  if (t.replicas > 1) out += " last_tile_dim_replicate";
  return out + "}";
}

const char* sharding_form_name(ShardingForm form) {
  switch (form) {
    case ShardingForm::Gspmd:
      return "gspmd";
    case ShardingForm::Shardy:
      return "shardy";
    case ShardingForm::Auto:
      break;
  }
  return "auto";
}

ShardingForm sharding_form_from_env() {
  const char* env = std::getenv("RLX_PJRT_SHARDING");
  std::string v = env != nullptr ? env : "";
  if (v.empty() || v == "auto") return ShardingForm::Auto;
  if (v == "gspmd") return ShardingForm::Gspmd;
  if (v == "shardy") return ShardingForm::Shardy;
  throw Error("RLX_PJRT_SHARDING must be 'gspmd', 'shardy' or 'auto', got '" + v + "'");
}

std::string sdy_mesh(const Mesh& mesh) {
  std::string out = "sdy.mesh @mesh = <[";
  for (size_t i = 0; i < mesh.axes().size(); ++i)
    out +=
        (i ? ", \"" : "\"") + mesh.axes()[i].first + "\"=" + std::to_string(mesh.axes()[i].second);
  return out + "]>";
}

std::string sdy_sharding(const PartitionSpec& spec, const Shape& shape) {
  std::string out = "#sdy.sharding<@mesh, [";
  for (int d = 0; d < shape.rank(); ++d) {
    out += d ? ", {" : "{";
    if (static_cast<size_t>(d) < spec.dims.size()) {
      const std::vector<std::string>& axes = spec.dims[static_cast<size_t>(d)];
      for (size_t i = 0; i < axes.size(); ++i) out += (i ? ", \"" : "\"") + axes[i] + "\"";
    }
    out += "}";
  }
  return out + "]>";
}

std::vector<Tensor> split_by_sharding(const Tensor& t, const Mesh& mesh,
                                      const PartitionSpec& spec) {
  Tiling tl = tiling(mesh, spec, t.shape().rank());
  Shape piece = shard_shape(mesh, spec, t.shape());
  size_t elem = static_cast<size_t>(dtype_size(t.dtype()));
  std::vector<Tensor> out;
  out.reserve(static_cast<size_t>(mesh.size()));
  for (int64_t p = 0; p < mesh.size(); ++p) {
    Tensor s(t.dtype(), piece);
    std::vector<int64_t> offsets(piece.dims().size());
    for (size_t d = 0; d < offsets.size(); ++d) offsets[d] = tl.tile_of[p][d] * piece.dims()[d];
    copy_block(const_cast<std::byte*>(t.data()), t.shape().dims(), s.data(), piece.dims(), offsets,
               elem, /*to_block=*/true);
    out.push_back(std::move(s));
  }
  return out;
}

Tensor assemble_from_shards(const std::vector<Tensor>& shards, const TensorType& type,
                            const Mesh& mesh, const PartitionSpec& spec) {
  check(static_cast<int64_t>(shards.size()) == mesh.size(),
        "assemble_from_shards: " + std::to_string(shards.size()) + " shards for a mesh of " +
            std::to_string(mesh.size()));
  Tiling tl = tiling(mesh, spec, type.shape.rank());
  Shape piece = shard_shape(mesh, spec, type.shape);
  size_t elem = static_cast<size_t>(dtype_size(type.dtype));
  Tensor out(type.dtype, type.shape);
  for (int64_t p = 0; p < mesh.size(); ++p) {
    if (tl.replica_of[static_cast<size_t>(p)] != 0) continue;  // a copy of a tile already read
    const Tensor& s = shards[static_cast<size_t>(p)];
    check(s.type() == TensorType{type.dtype, piece},
          "assemble_from_shards: shard " + std::to_string(p) + " is " + s.type().to_string() +
              ", expected " + TensorType{type.dtype, piece}.to_string());
    std::vector<int64_t> offsets(piece.dims().size());
    for (size_t d = 0; d < offsets.size(); ++d) offsets[d] = tl.tile_of[p][d] * piece.dims()[d];
    copy_block(out.data(), type.shape.dims(), const_cast<std::byte*>(s.data()), piece.dims(),
               offsets, elem, /*to_block=*/false);
  }
  return out;
}

}  // namespace rlx::pjrt
