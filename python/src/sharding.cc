// Bindings of the pjrt backend's devices, meshes and SPMD compiles (rlx/backends/pjrt): Mesh,
// PartitionSpec (jax.sharding's), pjrt_devices, compile_sharded and stablehlo_sharded.
#include "rlx/backends/pjrt/sharding.h"

#include <pybind11/stl.h>

#include "bindings.h"
#include "convert.h"
#include "rlx/backends/pjrt/pjrt.h"
#include "rlx/ir/error.h"
#include "rlx/runtime/backend_core.h"

namespace rlx::py_bind {
namespace {

using pjrt::Mesh;
using pjrt::PartitionSpec;

// One dim of P(...): None, an axis name, or a tuple / list of axis names.
std::vector<std::string> dim_of(const py::handle& d) {
  if (d.is_none()) return {};
  if (py::isinstance<py::str>(d)) return {d.cast<std::string>()};
  if (py::isinstance<py::tuple>(d) || py::isinstance<py::list>(d)) {
    std::vector<std::string> out;
    for (const py::handle& a : d) {
      if (!py::isinstance<py::str>(a))
        throw Error("PartitionSpec: axis names must be str, got " +
                    py::repr(a).cast<std::string>());
      out.push_back(a.cast<std::string>());
    }
    return out;
  }
  throw Error("PartitionSpec: each dim is None, an axis name or a tuple of axis names, got " +
              py::repr(d).cast<std::string>());
}

// out_shardings: a dict by output name, or a list / tuple with one entry per graph output
// (jax's positional form).
pjrt::ShardingConfig config_of(const Graph& g, const Mesh& mesh, const py::dict& inputs,
                               const py::dict& params, const py::object& outputs) {
  py::dict outs;
  if (py::isinstance<py::dict>(outputs)) {
    outs = outputs.cast<py::dict>();
  } else if (py::isinstance<py::list>(outputs) || py::isinstance<py::tuple>(outputs)) {
    std::vector<IoSpec> specs = io_specs_of(g).outputs;
    check(py::len(outputs) == specs.size(), "out_shardings: " + std::to_string(py::len(outputs)) +
                                                " entries for a graph with " +
                                                std::to_string(specs.size()) + " outputs");
    size_t i = 0;
    for (const py::handle& v : outputs) outs[py::str(specs[i++].name)] = v;
  } else if (!outputs.is_none()) {
    throw Error(
        "out_shardings must be a dict of output name -> PartitionSpec or a list with "
        "one PartitionSpec per output, got " +
        py::repr(outputs).cast<std::string>());
  }
  return {mesh, specs_of(inputs, "in_shardings"), specs_of(params, "param_shardings"),
          specs_of(outs, "out_shardings")};
}

// sharding_form=: None (RLX_PJRT_SHARDING, else detected), "auto", "gspmd" or "shardy".
pjrt::ShardingForm form_of(const std::optional<std::string>& form) {
  if (!form || *form == "auto") return pjrt::ShardingForm::Auto;
  if (*form == "gspmd") return pjrt::ShardingForm::Gspmd;
  if (*form == "shardy") return pjrt::ShardingForm::Shardy;
  throw Error("sharding_form must be 'auto', 'gspmd' or 'shardy', got '" + *form + "'");
}

CompileOptions options_of(const std::optional<std::string>& precision) {
  CompileOptions o;
  if (precision) o.precision = to_precision(*precision);
  return o;
}

}  // namespace

std::map<std::string, PartitionSpec> specs_of(const py::dict& d, const std::string& what) {
  std::map<std::string, PartitionSpec> out;
  for (auto [k, v] : d) {
    if (!py::isinstance<py::str>(k))
      throw Error(what + ": keys must be tensor names (str), got " +
                  py::repr(k).cast<std::string>());
    if (v.is_none()) {
      out[k.cast<std::string>()] = PartitionSpec();
    } else {
      if (!py::isinstance<PartitionSpec>(v))
        throw Error(what + "['" + k.cast<std::string>() +
                    "'] must be a PartitionSpec (rlx.P(...)) or None, got " +
                    py::repr(v).cast<std::string>());
      out[k.cast<std::string>()] = v.cast<PartitionSpec>();
    }
  }
  return out;
}

void bind_sharding(py::module_& m) {
  py::class_<Mesh>(m, "Mesh",
                   "Devices with named axes (jax.sharding.Mesh): Mesh({'data': 2, 'model': 2}) "
                   "over pjrt:0..3, position p = 2 * data + model; devices= gives other pjrt "
                   "device indices in that row-major order.")
      .def(py::init([](const py::dict& axes, const std::optional<std::vector<int>>& devices) {
             std::vector<std::pair<std::string, int64_t>> a;
             for (auto [k, v] : axes) a.emplace_back(k.cast<std::string>(), v.cast<int64_t>());
             return Mesh(std::move(a), devices.value_or(std::vector<int>{}));
           }),
           py::arg("axes"), py::arg("devices") = py::none())
      .def_property_readonly("axis_names",
                             [](const Mesh& mesh) {
                               std::vector<std::string> out;
                               for (const auto& [n, s] : mesh.axes()) out.push_back(n);
                               return out;
                             })
      .def_property_readonly("shape",
                             [](const Mesh& mesh) {
                               py::dict d;
                               for (const auto& [n, s] : mesh.axes()) d[py::str(n)] = s;
                               return d;
                             })
      .def_property_readonly("devices", &Mesh::devices)
      .def_property_readonly("size", &Mesh::size)
      .def("__repr__", &Mesh::to_string);

  py::class_<PartitionSpec>(m, "PartitionSpec",
                            "How each tensor dim is split over mesh axes "
                            "(jax.sharding.PartitionSpec): P('data', None), "
                            "P(('data', 'model'),), P() = replicated.")
      .def(py::init([](const py::args& dims) {
        std::vector<std::vector<std::string>> d;
        for (const py::handle& x : dims) d.push_back(dim_of(x));
        return PartitionSpec::of(std::move(d));
      }))
      .def_property_readonly("dims", [](const PartitionSpec& s) { return s.dims; })
      .def("__eq__",
           [](const PartitionSpec& a, const PartitionSpec& b) { return a.dims == b.dims; })
      .def("__repr__", &PartitionSpec::to_string);

  m.def(
      "compile_cache_info",
      [] {
        const pjrt::CompileCacheInfo info = pjrt::compile_cache_info();
        py::dict d;
        d["dir"] = info.dir ? py::cast(*info.dir) : py::none();
        d["entries"] = info.entries;
        d["bytes"] = info.bytes;
        d["max_bytes"] = info.max_bytes;
        d["hits"] = info.stats.hits;
        d["misses"] = info.stats.misses;
        d["stores"] = info.stats.stores;
        d["rejected"] = info.stats.rejected;
        d["errors"] = info.stats.errors;
        d["evicted"] = info.stats.evicted;
        return d;
      },
      "The persistent PJRT compile cache: a dict of dir (RLX_CACHE_DIR/pjrt or "
      "~/.cache/rlx/pjrt; None when the cache is off), entries and bytes on disk now, max_bytes "
      "(RLX_CACHE_MAX_BYTES, default 1 GiB), and this process's hits, misses, stores, rejected, "
      "errors and evicted.");
  m.def("clear_compile_cache", &pjrt::clear_compile_cache,
        "Removes every entry of the persistent PJRT compile cache (compile_cache_info()['dir']) "
        "and returns how many; 0 when the cache is off. Safe while other processes use it.");

  m.def(
      "pjrt_devices",
      [](const std::optional<std::string>& plugin) {
        std::optional<std::string> path = plugin ? plugin : pjrt::plugin_path_from_env();
        check(path.has_value(),
              "pjrt_devices: no PJRT plugin: pass plugin= or set RLX_PJRT_PLUGIN");
        py::list out;
        for (const pjrt::DeviceInfo& d : pjrt::describe_plugin(*path).devices) {
          py::dict e;
          e["device"] = "pjrt:" + std::to_string(d.index);
          e["id"] = d.id;
          e["kind"] = d.kind;
          e["platform"] = d.platform;
          e["bytes_limit"] = d.bytes_limit ? py::cast(*d.bytes_limit) : py::none();
          e["bytes_in_use"] = d.bytes_in_use ? py::cast(*d.bytes_in_use) : py::none();
          out.append(e);
        }
        return out;
      },
      py::arg("plugin") = py::none(),
      "Every addressable device of the PJRT plugin (plugin=, else RLX_PJRT_PLUGIN): dicts of "
      "device ('pjrt:N'), id, kind, platform, bytes_limit and bytes_in_use (None when the "
      "plugin does not report memory).");

  m.def(
      "compile_sharded",
      [](const Graph& g, const Mesh& mesh, const py::dict& in_shardings,
         const py::dict& param_shardings, const py::object& out_shardings,
         const std::optional<std::string>& precision, const std::optional<std::string>& plugin,
         const std::optional<std::string>& sharding_form) {
        pjrt::ShardingConfig c = config_of(g, mesh, in_shardings, param_shardings, out_shardings);
        c.form = form_of(sharding_form);
        CompileOptions o = options_of(precision);
        std::shared_ptr<Executable> exe;
        {
          py::gil_scoped_release nogil;
          exe = pjrt::make_pjrt_spmd_backend(c, plugin.value_or(""))
                    ->compile(g, o, Device{DeviceKind::Pjrt, 0});
        }
        return wrap_executable(std::move(exe));
      },
      py::arg("graph"), py::arg("mesh"), py::arg("in_shardings") = py::dict(),
      py::arg("param_shardings") = py::dict(), py::arg("out_shardings") = py::none(),
      py::arg("precision") = py::none(), py::arg("plugin") = py::none(),
      py::arg("sharding_form") = py::none(),
      "Compiles `graph` as one SPMD program over `mesh` on the pjrt backend (jax.jit with "
      "NamedSharding(mesh, spec) in/out shardings): dicts of tensor name -> PartitionSpec "
      "(out_shardings may be a list, one per output); tensors not named are replicated. Runs take "
      "and return whole numpy arrays. sharding_form: 'gspmd' (mhlo.sharding), 'shardy' "
      "(sdy.sharding) or 'auto'/None (RLX_PJRT_SHARDING, else Shardy with a fallback to GSPMD "
      "when the plugin rejects it); the kernel report names the form used.");

  m.def(
      "compile_shard_map",
      [](const Graph& g, const Mesh& mesh, const py::dict& in_specs, const py::dict& param_specs,
         const py::object& out_specs, const std::optional<std::string>& precision,
         const std::optional<std::string>& plugin) {
        pjrt::ShardingConfig c = config_of(g, mesh, in_specs, param_specs, out_specs);
        CompileOptions o = options_of(precision);
        std::shared_ptr<Executable> exe;
        {
          py::gil_scoped_release nogil;
          exe = pjrt::make_pjrt_shard_map_backend(c, plugin.value_or(""))
                    ->compile(g, o, Device{DeviceKind::Pjrt, 0});
        }
        return wrap_executable(std::move(exe));
      },
      py::arg("graph"), py::arg("mesh"), py::arg("in_specs") = py::dict(),
      py::arg("param_specs") = py::dict(), py::arg("out_specs") = py::none(),
      py::arg("precision") = py::none(), py::arg("plugin") = py::none(),
      "jax.jit(shard_map(f, mesh, in_specs, out_specs))-style: `graph` is the per-device program "
      "(per-device shapes, explicit collectives whose device ids are mesh positions); the specs "
      "(dicts of name -> PartitionSpec, out_specs also a list) say how the full tensors are split "
      "over `mesh` (unnamed: P()). Runs take and return the full numpy arrays.");

  m.def(
      "compile_replicated",
      [](const Graph& g, const std::vector<int>& devices,
         const std::optional<std::string>& precision, const std::optional<std::string>& plugin,
         const std::string& layout) {
        CompileOptions o = options_of(precision);
        check(layout == "concat" || layout == "stacked",
              "compile_replicated: layout must be 'concat' or 'stacked', got '" + layout + "'");
        pjrt::ReplicaLayout l =
            layout == "stacked" ? pjrt::ReplicaLayout::Stacked : pjrt::ReplicaLayout::Concat;
        std::shared_ptr<Executable> exe;
        {
          py::gil_scoped_release nogil;
          exe = pjrt::make_pjrt_replicated_backend(devices, plugin.value_or(""), l)
                    ->compile(g, o, Device{DeviceKind::Pjrt, 0});
        }
        return wrap_executable(std::move(exe));
      },
      py::arg("graph"), py::arg("devices"), py::arg("precision") = py::none(),
      py::arg("plugin") = py::none(), py::arg("layout") = "concat",
      "Replicated data parallelism (jax.pmap-style, XLA num_replicas): `graph` is one "
      "replica's program, run on every device at once; its collectives (all_reduce, all_gather, "
      "reduce_scatter, all_to_all) run across the replicas. layout='concat': runs take inputs "
      "of len(devices) times its dim 0, split them over the devices and concatenate the outputs "
      "along dim 0; layout='stacked' (jax.pmap): inputs and outputs carry a leading device axis "
      "of len(devices), slice r on devices[r]. Params are copied whole to every device.");

  m.def(
      "stablehlo_sharded",
      [](const Graph& g, const Mesh& mesh, const py::dict& in_shardings,
         const py::dict& param_shardings, const py::object& out_shardings,
         const std::optional<std::string>& precision,
         const std::optional<std::string>& sharding_form) {
        pjrt::ShardingConfig c = config_of(g, mesh, in_shardings, param_shardings, out_shardings);
        c.form = form_of(sharding_form);
        return pjrt::lower_to_stablehlo_sharded(g, c, options_of(precision));
      },
      py::arg("graph"), py::arg("mesh"), py::arg("in_shardings") = py::dict(),
      py::arg("param_shardings") = py::dict(), py::arg("out_shardings") = py::none(),
      py::arg("precision") = py::none(), py::arg("sharding_form") = py::none(),
      "The StableHLO module compile_sharded would compile, with the shardings on @main's "
      "arguments and results in `sharding_form` ('gspmd': mhlo.sharding; 'shardy': sdy.mesh "
      "and sdy.sharding; 'auto'/None: RLX_PJRT_SHARDING, else Shardy, the form tried first); "
      "needs no plugin.");
}

}  // namespace rlx::py_bind
