// Bindings of the runtime: Session, Executable, the reference evaluator, devices, threads and
// the C++-side benchmark loop used by bench/python_overhead.py.
#include <pybind11/stl.h>

#include <chrono>
#include <set>

#include "bindings.h"
#include "convert.h"
#include "rlx/ir/error.h"
#include "rlx/ir/evaluator.h"
#include "rlx/opt/pipeline.h"
#include "rlx/runtime/backend_core.h"
#include "rlx/runtime/memory_limit.h"
#include "rlx/runtime/session.h"
#include "rlx/runtime/spmd.h"
#include "rlx/runtime/threading.h"

namespace rlx::py_bind {

namespace {

// An executable plus what this compile() call recorded (the IR after each pipeline stage).
struct PyExecutable {
  std::shared_ptr<Executable> exe;
  std::vector<std::pair<std::string, std::string>> stages;
};

// A session plus its default precision policy (absent: RLX_PRECISION, resolved by the Session,
// else the backend's default).
struct PySession {
  std::unique_ptr<Session> session;
  std::optional<PrecisionPolicy> precision;
};

py::list specs_list(const std::vector<IoSpec>& specs) {
  py::list out;
  for (const auto& s : specs)
    out.append(py::make_tuple(s.name, py::tuple(py::cast(s.type.shape.dims())),
                              std::string(dtype_name(s.type.dtype))));
  return out;
}

// A feed: numpy arrays keep their dtype (the executable reports a mismatch); other objects
// (scalars, lists) become arrays of the declared dtype.
Tensor feed(const std::vector<IoSpec>& specs, const std::string& name, const py::handle& obj,
            const std::string& what, bool keep_alive) {
  std::optional<DType> want;
  if (!py::isinstance<py::array>(obj)) {
    for (const auto& s : specs)
      if (s.name == name) want = s.type.dtype;
  }
  return to_tensor(obj, want, what + " '" + name + "'", nullptr, keep_alive);
}

// Inputs by name from positional arguments (graph input order), one dict, and keywords. The
// tensors borrow the arrays (the caller's arguments keep them alive while the map lives).
TensorMap feeds_of(const Executable& exe, const py::args& args, const py::kwargs& kwargs) {
  const auto& specs = exe.inputs();
  TensorMap m;
  auto add = [&](const std::string& name, const py::handle& v) {
    check(m.count(name) == 0, "run: input '" + name + "' given twice");
    m.emplace(name, feed(specs, name, v, "run: input", false));
  };
  if (args.size() == 1 && py::isinstance<py::dict>(args[0])) {
    for (auto [k, v] : py::reinterpret_borrow<py::dict>(args[0])) add(k.cast<std::string>(), v);
  } else {
    check(args.size() <= specs.size(), "run: " + std::to_string(args.size()) +
                                           " positional inputs for a graph with " +
                                           std::to_string(specs.size()) + " inputs");
    for (size_t i = 0; i < args.size(); ++i) add(specs[i].name, args[i]);
  }
  for (auto [k, v] : kwargs) add(k.cast<std::string>(), v);
  return m;
}

py::object results(const std::vector<Tensor>& outs) {
  if (outs.size() == 1) return to_numpy(outs[0]);
  py::list l;
  for (const auto& t : outs) l.append(to_numpy(t));
  return l;
}

py::object run(PyExecutable& pe, const py::args& args, const py::kwargs& kwargs) {
  TensorMap feeds = feeds_of(*pe.exe, args, kwargs);
  std::vector<Tensor> outs;
  {
    py::gil_scoped_release nogil;
    outs = pe.exe->run(feeds);
  }
  return results(outs);
}

// Executable.run_async: validates and dispatches without the GIL; the result is read later.
std::shared_ptr<AsyncResult> run_async(PyExecutable& pe, const py::args& args,
                                       const py::kwargs& kwargs) {
  TensorMap feeds = feeds_of(*pe.exe, args, kwargs);
  py::gil_scoped_release nogil;
  return std::make_shared<AsyncResult>(pe.exe->run_async(feeds));
}

const std::set<std::string> kCompileOptions = {
    "precision",    "dispatch",         "dce",    "fold_constants", "seed", "dump_stages",
    "memory_limit", "quantized_params", "profile"};

// quantized_params={"w": "q8_0", "v": ("q4_K", 0)}: a format name, or (format, axis).
std::map<std::string, QuantizedParamBinding> to_quantized_params(const py::handle& obj) {
  const std::string bad =
      "compile: quantized_params must be a dict of param name -> format name or (format, "
      "axis), got ";
  if (!py::isinstance<py::dict>(obj)) throw Error(bad + py::repr(obj).cast<std::string>());
  std::map<std::string, QuantizedParamBinding> out;
  for (auto [k, v] : py::reinterpret_borrow<py::dict>(obj)) {
    if (!py::isinstance<py::str>(k)) throw Error(bad + py::repr(obj).cast<std::string>());
    QuantizedParamBinding b;
    if (py::isinstance<py::str>(v)) {
      b.format = quant_format_from_name(v.cast<std::string>());
    } else if (py::isinstance<py::tuple>(v) && py::len(v) == 2 &&
               py::isinstance<py::str>(v.cast<py::tuple>()[0]) &&
               py::isinstance<py::int_>(v.cast<py::tuple>()[1])) {
      b.format = quant_format_from_name(v.cast<py::tuple>()[0].cast<std::string>());
      b.axis = v.cast<py::tuple>()[1].cast<int64_t>();
    } else {
      throw Error(bad + "'" + k.cast<std::string>() + "': " + py::repr(v).cast<std::string>());
    }
    out[k.cast<std::string>()] = b;
  }
  return out;
}

// compile()'s keyword options (kCompileOptions; without dump_stages unless `dump_ok`) as
// CompileOptions on top of the session's precision. Errors start with `what`.
CompileOptions options_of(const PySession& ps, const py::kwargs& kw, const std::string& what,
                          bool dump_ok) {
  for (auto [k, v] : kw) {
    auto key = k.cast<std::string>();
    if (kCompileOptions.count(key) == 0 || (!dump_ok && key == "dump_stages")) {
      std::string all;
      for (const auto& o : kCompileOptions)
        if (dump_ok || o != "dump_stages") all += (all.empty() ? "" : ", ") + o;
      throw Error(what + ": unknown option '" + key + "' (options: " + all + ")");
    }
  }
  CompileOptions o;
  o.precision = ps.precision;
  if (kw.contains("precision")) o.precision = to_precision(kw["precision"].cast<std::string>());
  if (kw.contains("dispatch"))
    o.dispatch = DispatchOptions::parse(kw["dispatch"].cast<std::string>(), "compile: dispatch");
  if (kw.contains("dce")) o.dce = kw["dce"].cast<bool>();
  if (kw.contains("fold_constants")) o.fold_constants = kw["fold_constants"].cast<bool>();
  if (kw.contains("seed")) o.seed = kw["seed"].cast<uint64_t>();
  if (kw.contains("memory_limit")) {
    py::object v = kw["memory_limit"];
    if (py::isinstance<py::str>(v)) {
      o.memory_limit = parse_memory_size(v.cast<std::string>(), "compile: memory_limit");
    } else {
      const std::string bad =
          "compile: memory_limit must be a positive int (bytes) or a string "
          "such as '512M', got ";
      if (!py::isinstance<py::int_>(v) || py::isinstance<py::bool_>(v))
        throw Error(bad + py::repr(v).cast<std::string>());
      int64_t n = 0;
      try {
        n = v.cast<int64_t>();
      } catch (const py::cast_error&) {
        throw Error(bad + py::repr(v).cast<std::string>() + " (more than 2^63 - 1)");
      }
      check(n > 0, bad + py::repr(v).cast<std::string>());
      o.memory_limit = n;
    }
  }
  if (kw.contains("quantized_params"))
    o.quantized_params = to_quantized_params(kw["quantized_params"]);
  if (kw.contains("profile")) {
    // True: time every step (read with Executable.profile()); False: off even under RLX_PROFILE.
    py::object v = kw["profile"];
    if (!py::isinstance<py::bool_>(v))
      throw Error("compile: profile must be True or False, got " + py::repr(v).cast<std::string>());
    o.profile = v.cast<bool>() ? ProfileMode::Collect : ProfileMode::Off;
  }
  return o;
}

PyExecutable compile(PySession& ps, const Graph& g, const py::kwargs& kw) {
  CompileOptions o = options_of(ps, kw, "compile", true);
  bool dump = kw.contains("dump_stages") && kw["dump_stages"].cast<bool>();
  PyExecutable pe;
  {
    py::gil_scoped_release nogil;
    pe.exe = ps.session->compile(g, o);
  }
  if (dump) {
    // The backend's own pipeline has no stage hook, so run the same standard pipeline (same
    // supported ops and options) once more with PipelineOptions::on_stage recording each stage.
    Backend& b = ps.session->backend();
    PipelineOptions po = make_pipeline_options(BackendFacts::of(b), resolve_environment(o));
    pe.stages.emplace_back("input", g.to_string());
    po.on_stage = [&pe](std::string_view pass, const Graph& after) {
      pe.stages.emplace_back(std::string(pass), after.to_string());
    };
    run_standard_pipeline(g, po);
  }
  return pe;
}

// A TensorMap of every graph input and param from dicts of arrays, for evaluate().
TensorMap eval_feeds(const Graph& g, const py::dict& inputs, const py::dict& params) {
  TensorMap m;
  std::vector<IoSpec> specs;
  for (int32_t id : g.inputs()) specs.push_back({g.node(id).name, g.node(id).results[0]});
  for (int32_t id : g.params()) specs.push_back({g.node(id).name, g.node(id).results[0]});
  for (const py::dict& d : {inputs, params})
    for (auto [k, v] : d) {
      auto name = k.cast<std::string>();
      check(m.count(name) == 0, "evaluate: '" + name + "' given twice");
      m.emplace(name, feed(specs, name, v, "evaluate: input", false));
    }
  return m;
}

}  // namespace

Session& session_of(const py::handle& session) {
  check(py::isinstance<PySession>(session),
        "expected an rlx.Session, got " + py::repr(session).cast<std::string>());
  return *session.cast<PySession&>().session;
}

CompileOptions compile_options_of(const py::handle& session, const py::kwargs& kw,
                                  const std::string& what) {
  check(py::isinstance<PySession>(session),
        what + ": expected an rlx.Session, got " + py::repr(session).cast<std::string>());
  return options_of(session.cast<const PySession&>(), kw, what, false);
}

py::object wrap_executable(std::shared_ptr<Executable> exe) {
  PyExecutable pe;
  pe.exe = std::move(exe);
  return py::cast(std::move(pe));
}

void bind_async_result(py::module_& m) {
  py::class_<AsyncResult, std::shared_ptr<AsyncResult>>(
      m, "AsyncResult",
      "The outputs of one asynchronous run (Executable.run_async, Trainer.step_async), like "
      "jax's arrays under async dispatch: the first read waits for the run and copies the "
      "output to the host; a device error of the run is raised (rlx.Error naming the run) at "
      "the first read or block_until_ready().")
      .def("__len__", &AsyncResult::size)
      .def(
          "output",
          [](AsyncResult& r, int64_t i) {
            const auto n = static_cast<int64_t>(r.size());
            check(i >= -n && i < n, "AsyncResult: output " + std::to_string(i) + " of a run with " +
                                        std::to_string(n) + " outputs");
            Tensor t;
            {
              py::gil_scoped_release nogil;
              t = r.output(static_cast<size_t>(i < 0 ? i + n : i));
            }
            return to_numpy(t);
          },
          py::arg("index"),
          "Output `index` as a numpy array (waits for the run on first read); negative indices "
          "count from the end, as in a Python sequence.")
      .def(
          "outputs",
          [](AsyncResult& r) {
            std::vector<Tensor> outs;
            {
              py::gil_scoped_release nogil;
              outs = r.outputs();
            }
            py::list l;
            for (const Tensor& t : outs) l.append(to_numpy(t));
            return l;
          },
          "Every output as a list of numpy arrays (waits for the run).")
      .def(
          "block_until_ready",
          [](std::shared_ptr<AsyncResult> r) {
            {
              py::gil_scoped_release nogil;
              r->block_until_ready();
            }
            return r;
          },
          "Waits until the run finished (no copy) and returns self; raises the run's error.")
      .def_property_readonly("label", &AsyncResult::label);
}

void bind_runtime(py::module_& m) {
  bind_async_result(m);
  py::class_<PyExecutable>(m, "Executable", "A graph compiled for one device.")
      .def("run", &run, "Runs the graph: positional inputs in graph order, one dict or keywords.")
      .def("__call__", &run)
      .def("run_async", &run_async,
           "run() dispatched asynchronously: returns an rlx.AsyncResult at once (argument errors "
           "are raised here, the run's own errors at the first read).")
      .def(
          "set_param",
          [](PyExecutable& pe, const std::string& name, const py::object& value) {
            // The executable keeps the binding, so the tensor holds a reference to the array.
            Tensor t = feed(pe.exe->params(), name, value, "set_param", true);
            pe.exe->set_param(name, t);
          },
          py::arg("name"), py::arg("value"))
      .def_property_readonly("inputs",
                             [](const PyExecutable& pe) { return specs_list(pe.exe->inputs()); })
      .def_property_readonly("params",
                             [](const PyExecutable& pe) { return specs_list(pe.exe->params()); })
      .def_property_readonly("outputs",
                             [](const PyExecutable& pe) { return specs_list(pe.exe->outputs()); })
      .def_property_readonly("device",
                             [](const PyExecutable& pe) { return pe.exe->device().to_string(); })
      .def_property_readonly("stages",
                             [](const PyExecutable& pe) {
                               // ordered dict; a pass that runs twice gets "#2", "#3", ...
                               py::dict d;
                               std::map<std::string, int> seen;
                               for (const auto& [name, text] : pe.stages) {
                                 int n = ++seen[name];
                                 d[py::str(n == 1 ? name : name + "#" + std::to_string(n))] = text;
                               }
                               return d;
                             })
      .def("kernel_report", [](const PyExecutable& pe) { return pe.exe->kernel_report(); })
      .def(
          "profile",
          [](const PyExecutable& pe) {
            ExecutionProfile p = pe.exe->profile();
            py::dict d;
            d["runs"] = p.runs;
            d["run_seconds"] = p.run_seconds;
            d["kernel_seconds"] = p.kernel_seconds();
            py::list ops, nodes;
            for (const ExecutionProfile::OpTotal& o : p.ops) {
              py::dict e;
              e["op"] = std::string(op_name(o.op));
              e["calls"] = o.calls;
              e["seconds"] = o.seconds;
              ops.append(e);
            }
            for (const ExecutionProfile::NodeTotal& n : p.nodes) {
              py::dict e;
              e["node"] = n.node;
              e["name"] = n.name;
              e["op"] = std::string(op_name(n.op));
              e["calls"] = n.calls;
              e["seconds"] = n.seconds;
              e["self_seconds"] = n.self_seconds;
              e["depth"] = n.depth;
              e["parent"] = n.parent;
              nodes.append(e);
            }
            d["ops"] = ops;
            d["nodes"] = nodes;
            d["text"] = p.to_string();
            return d;
          },
          "Step timings over this executable's runs when compiled with profile=True (or under "
          "RLX_PROFILE=1): a dict with runs, run_seconds, kernel_seconds, ops (per op kind: op, "
          "calls, seconds; most time first), nodes (per schedule step: node, name, op, calls, "
          "seconds, self_seconds, depth, parent) and text (the RLX_PROFILE table). runs is 0 "
          "when profiling is off or before the first run.")
      .def(
          "planned_memory",
          [](const PyExecutable& pe) {
            PlannedMemory m = pe.exe->planned_memory();
            py::dict d;
            d["arena"] = m.arena;
            d["bodies"] = m.bodies;
            d["params"] = m.params;
            d["constants"] = m.constants;
            d["outputs"] = m.outputs;
            d["state"] = m.state;
            d["total"] = m.total();
            return d;
          },
          "Bytes the executable holds as the memory_limit check counted them: arena (activations), "
          "bodies (control-flow scratch), params, constants, outputs (one run's), state, total.")
      .def(
          "kernels",
          [](const PyExecutable& pe) {
            const Graph& cg = pe.exe->compiled_graph();
            py::list out;
            for (const KernelReport::Node& n : pe.exe->kernels().nodes) {
              py::dict d;
              d["node"] = n.node;
              d["name"] = cg.node(n.node).name;
              d["op"] = std::string(op_name(n.op));
              d["kernel"] = n.kernel;
              d["dtype"] = std::string(dtype_name(n.dtype));
              d["native"] = n.native;
              d["fallback_reason"] = n.fallback_reason;
              out.append(d);
            }
            return out;
          },
          "How each computing node of the compiled graph runs, in execution order: dicts with "
          "node (id), name, op, kernel, dtype (of result 0), native (False: the backend's "
          "reference fallback) and fallback_reason (why not native; '' when native).")
      .def("dispatch_report",
           [](const PyExecutable& pe) { return pe.exe->dispatch_report().to_string(); })
      .def(
          "dispatch_counts",
          [](const PyExecutable& pe) {
            py::dict d;
            for (const auto& [op, c] : pe.exe->dispatch_report().ops) {
              py::dict counts;
              counts["native"] = c.native;
              counts["decomposed"] = c.decomposed;
              counts["missing"] = c.missing;
              d[py::str(std::string(op_name(op)))] = counts;
            }
            return d;
          },
          "Legalization's decisions per op kind (ops.def order): {op: {native, decomposed, "
          "missing}}.")
      .def("compiled_graph", [](const PyExecutable& pe) { return Graph(pe.exe->compiled_graph()); })
      .def("clone",
           [](const PyExecutable& pe) {
             return PyExecutable{std::shared_ptr<Executable>(pe.exe->clone()), pe.stages};
           })
      .def("capabilities", [](const PyExecutable& pe) {
        Capabilities c = pe.exe->capabilities();
        py::dict d;
        d["clone"] = c.clone;
        d["concurrent_clones"] = c.concurrent_clones;
        d["typed_io"] = c.typed_io;
        d["zero_copy_params"] = c.zero_copy_params;
        return d;
      });

  py::class_<PySession>(m, "Session", "Compiles graphs for one device through a compile cache.")
      .def(py::init([](const std::string& device, const std::optional<std::string>& precision,
                       size_t cache_capacity) {
             PySession s;
             s.session =
                 std::make_unique<Session>(Device::parse(device), SessionOptions{cache_capacity});
             if (precision) s.precision = to_precision(*precision);
             return s;
           }),
           py::arg("device") = "cpu", py::arg("precision") = py::none(),
           py::arg("cache_capacity") = 32)
      .def("compile", &compile, py::arg("graph"))
      .def_property_readonly("device",
                             [](const PySession& s) { return s.session->device().to_string(); })
      .def("cache_stats", [](const PySession& s) {
        CompileCacheStats st = s.session->cache_stats();
        py::dict d;
        d["hits"] = st.hits;
        d["misses"] = st.misses;
        d["evictions"] = st.evictions;
        d["size"] = st.size;
        d["compile_seconds"] = st.compile_seconds;
        return d;
      });

  m.def(
      "evaluate",
      [](const Graph& g, const py::dict& inputs, const py::dict& params) {
        TensorMap feeds = eval_feeds(g, inputs, params);
        std::vector<Tensor> outs;
        {
          py::gil_scoped_release nogil;
          outs = evaluate(g, feeds);
        }
        return results(outs);
      },
      py::arg("graph"), py::arg("inputs") = py::dict(), py::arg("params") = py::dict(),
      "Runs the reference evaluator (the oracle: naive, in double, rounded once).");
  m.def(
      "evaluate_spmd",
      [](const Graph& g, const py::list& inputs, const py::object& params) {
        check(!inputs.empty(), "evaluate_spmd: give one dict of inputs per device");
        std::vector<TensorMap> feeds;
        for (size_t d = 0; d < inputs.size(); ++d) {
          py::dict p = params.is_none() ? py::dict()
                       : py::isinstance<py::dict>(params)
                           ? params.cast<py::dict>()
                           : params.cast<py::list>()[d].cast<py::dict>();
          feeds.push_back(eval_feeds(g, inputs[d].cast<py::dict>(), p));
        }
        std::vector<std::vector<Tensor>> outs;
        {
          py::gil_scoped_release nogil;
          outs = evaluate_spmd(g, feeds);
        }
        py::list per_device;
        for (const auto& o : outs) per_device.append(results(o));
        return per_device;
      },
      py::arg("graph"), py::arg("inputs"), py::arg("params") = py::none(),
      "Runs the reference evaluator as an SPMD program over len(inputs) simulated devices: "
      "inputs[d] feeds device d; params is one dict for all devices or a list of one per "
      "device. Returns each device's outputs (docs/ir.md \"Collectives\").");
  m.def(
      "run_spmd",
      [](const std::vector<PyExecutable*>& exes, const py::list& inputs) {
        check(exes.size() == inputs.size(),
              "run_spmd: give one executable and one dict of inputs per device");
        std::vector<Executable*> ptrs;
        std::vector<TensorMap> feeds;
        for (size_t d = 0; d < exes.size(); ++d) {
          ptrs.push_back(exes[d]->exe.get());
          feeds.push_back(feeds_of(*exes[d]->exe, py::make_tuple(inputs[d]), py::kwargs()));
        }
        std::vector<std::vector<Tensor>> outs;
        {
          py::gil_scoped_release nogil;
          outs = run_spmd(ptrs, feeds);
        }
        py::list per_device;
        for (const auto& o : outs) per_device.append(results(o));
        return per_device;
      },
      py::arg("executables"), py::arg("inputs"),
      "Runs executables[d] (clones of one CPU executable) on inputs[d], one thread per simulated "
      "device joined by an in-process communicator (docs/ir.md \"Collectives\"); returns each "
      "device's outputs.");
  m.def(
      "devices",
      [] {
        std::vector<std::string> out;
        for (const Device& d : available_devices()) out.push_back(d.to_string());
        return out;
      },
      "Device 0 of every backend this build registers ('cpu', 'pjrt:0'): the device kinds it "
      "compiles for (rlx::available_devices). 'pjrt:0' is listed whether or not a PJRT plugin is "
      "configured; compiling for it without one fails naming RLX_PJRT_PLUGIN (`rlx devices` "
      "reports the plugin and its devices).");
  m.def("set_num_threads", &set_num_threads, py::arg("n"));
  m.def("num_threads", &num_threads);
  m.def("physical_cores", &physical_cores);
  m.def(
      "_bench_run",
      [](PyExecutable& pe, const py::dict& feeds, int64_t n) {
        check(n > 0, "_bench_run: n must be positive");
        TensorMap m = feeds_of(*pe.exe, py::make_tuple(feeds), py::kwargs());
        py::gil_scoped_release nogil;
        auto t0 = std::chrono::steady_clock::now();
        for (int64_t i = 0; i < n; ++i) pe.exe->run(m);
        std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
        return dt.count() / static_cast<double>(n);
      },
      py::arg("exe"), py::arg("feeds"), py::arg("n"),
      "Seconds per Executable::run over a prepared input map, looped in C++.");
  m.def(
      "_input_address",
      [](const py::object& arr) {
        bool borrowed = false;
        Tensor t = to_tensor(arr, std::nullopt, "_input_address", &borrowed, false);
        return py::make_tuple(reinterpret_cast<uintptr_t>(t.data()), borrowed);
      },
      py::arg("array"),
      "Debug hook: (data address, zero-copy?) of the tensor run() would build for `array`.");
}

}  // namespace rlx::py_bind
