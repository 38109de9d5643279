// Bindings of the training layer and of safetensors files: Trainer (train/trainer.h), the
// optimizers SGD and AdamW (train/optimizer.h), the loss and dropout builders as rlx.Graph
// methods (train/loss.h, train/dropout.h), initialize (train/init.h), load_safetensors /
// save_safetensors (io/safetensors.h), and the digits demo (train/digits.h).
#include <pybind11/stl.h>

#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bindings.h"
#include "convert.h"
#include "rlx/io/safetensors.h"
#include "rlx/ir/error.h"
#include "rlx/runtime/session.h"
#include "rlx/train/digits.h"
#include "rlx/train/dropout.h"
#include "rlx/train/init.h"
#include "rlx/train/loss.h"
#include "rlx/train/optimizer.h"
#include "rlx/train/trainer.h"
#include "value.h"

namespace rlx::py_bind {

namespace py = pybind11;

namespace {

using train::Optimizer;

// The C++ optimizers keep their options private; these keep a copy for Python to read back.
class PySgd : public train::Sgd {
 public:
  explicit PySgd(train::SgdOptions o) : Sgd(o), opts(o) {}
  train::SgdOptions opts;
};
class PyAdamW : public train::AdamW {
 public:
  explicit PyAdamW(train::AdamWOptions o) : AdamW(o), opts(o) {}
  train::AdamWOptions opts;
};

// A Trainer plus what keeps it usable from several Python threads: the rlx.Session it compiled
// with (kept alive), the optimizer object, the declared dtypes of the loss graph's leaves (to
// convert Python scalars and lists), and a mutex that serializes step() against the readers
// (step runs without the GIL).
struct PyTrainer {
  py::object session;
  std::shared_ptr<Optimizer> optimizer;
  std::vector<std::string> wrt;
  std::map<std::string, DType> leaf_dtypes;
  std::unique_ptr<train::Trainer> trainer;
  std::mutex mu;
};

std::map<std::string, DType> leaf_dtypes(const Graph& g) {
  std::map<std::string, DType> out;
  for (const std::vector<int32_t>& ids : {g.inputs(), g.params()})
    for (int32_t id : ids) out[g.node(id).name] = g.node(id).results[0].dtype;
  return out;
}

// A map of tensors from a dict of array-likes. Numpy arrays keep their dtype (the consumer
// reports a mismatch with its own message); other objects become arrays of the leaf's declared
// dtype when `dtypes` knows the name. The tensors hold references to the arrays.
TensorMap tensor_map(const py::handle& obj, const std::map<std::string, DType>& dtypes,
                     const std::string& what) {
  check(py::isinstance<py::dict>(obj),
        what + ": expected a dict of name -> array, got " + py::repr(obj).cast<std::string>());
  TensorMap out;
  for (auto [k, v] : py::reinterpret_borrow<py::dict>(obj)) {
    check(py::isinstance<py::str>(k),
          what + ": names must be strings, got " + py::repr(k).cast<std::string>());
    auto name = k.cast<std::string>();
    std::optional<DType> want;
    auto it = dtypes.find(name);
    if (!py::isinstance<py::array>(v) && it != dtypes.end()) want = it->second;
    out.emplace(name, to_tensor(v, want, what + " '" + name + "'"));
  }
  return out;
}

// A numpy array owning a copy of `t` (what the Trainer holds may be swapped, or later written
// in place by a backend, so Python never gets a view of it).
py::array copy_out(const Tensor& t) { return to_numpy(t.clone()); }

train::Init init_of(const std::string& name) {
  std::string all;
  for (train::Init i : {train::Init::GlorotUniform, train::Init::GlorotNormal,
                        train::Init::HeUniform, train::Init::HeNormal, train::Init::Zeros}) {
    if (name == train::init_name(i)) return i;
    all += (all.empty() ? "" : ", ") + std::string(train::init_name(i));
  }
  throw Error("initialize: unknown init '" + name + "' (expected one of " + all + ")");
}

void bind_optimizers(py::module_& m) {
  py::class_<Optimizer, std::shared_ptr<Optimizer>>(
      m, "Optimizer", "An optimizer as a graph update (train/optimizer.h): SGD or AdamW.")
      .def_property_readonly("name", &Optimizer::name)
      .def_property_readonly("slots", &Optimizer::slots);

  py::class_<PySgd, Optimizer, std::shared_ptr<PySgd>>(
      m, "SGD",
      "SGD with heavy-ball or Nesterov momentum and L2 weight decay (torch.optim.SGD with "
      "dampening 0, optax.sgd): g' = g + weight_decay p; b = momentum b + g'; d = nesterov ? g' "
      "+ momentum b : b; p -= lr d. Slot 'momentum' unless momentum == 0.")
      .def(py::init([](double momentum, bool nesterov, double weight_decay) {
             train::SgdOptions o;
             o.momentum = momentum;
             o.nesterov = nesterov;
             o.weight_decay = weight_decay;
             return std::make_shared<PySgd>(o);
           }),
           py::arg("momentum") = train::SgdOptions{}.momentum,
           py::arg("nesterov") = train::SgdOptions{}.nesterov,
           py::arg("weight_decay") = train::SgdOptions{}.weight_decay)
      .def_property_readonly("momentum", [](const PySgd& s) { return s.opts.momentum; })
      .def_property_readonly("nesterov", [](const PySgd& s) { return s.opts.nesterov; })
      .def_property_readonly("weight_decay", [](const PySgd& s) { return s.opts.weight_decay; })
      .def("__repr__", [](const PySgd& s) {
        return "rlx.SGD(momentum=" + py::repr(py::float_(s.opts.momentum)).cast<std::string>() +
               ", nesterov=" + (s.opts.nesterov ? "True" : "False") +
               ", weight_decay=" + py::repr(py::float_(s.opts.weight_decay)).cast<std::string>() +
               ")";
      });

  py::class_<PyAdamW, Optimizer, std::shared_ptr<PyAdamW>>(
      m, "AdamW",
      "AdamW (Loshchilov & Hutter 2019; torch.optim.AdamW, optax.adamw) with bias correction: "
      "m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2; p -= lr (m/(1-b1^t) / (sqrt(v/(1-b2^t)) + "
      "eps) + weight_decay p). Slots 'm' and 'v'.")
      .def(py::init([](double beta1, double beta2, double eps, double weight_decay) {
             train::AdamWOptions o;
             o.beta1 = beta1;
             o.beta2 = beta2;
             o.eps = eps;
             o.weight_decay = weight_decay;
             return std::make_shared<PyAdamW>(o);
           }),
           py::arg("beta1") = train::AdamWOptions{}.beta1,
           py::arg("beta2") = train::AdamWOptions{}.beta2,
           py::arg("eps") = train::AdamWOptions{}.eps,
           py::arg("weight_decay") = train::AdamWOptions{}.weight_decay)
      .def_property_readonly("beta1", [](const PyAdamW& a) { return a.opts.beta1; })
      .def_property_readonly("beta2", [](const PyAdamW& a) { return a.opts.beta2; })
      .def_property_readonly("eps", [](const PyAdamW& a) { return a.opts.eps; })
      .def_property_readonly("weight_decay", [](const PyAdamW& a) { return a.opts.weight_decay; })
      .def("__repr__", [](const PyAdamW& a) {
        auto f = [](double x) { return py::repr(py::float_(x)).cast<std::string>(); };
        return "rlx.AdamW(beta1=" + f(a.opts.beta1) + ", beta2=" + f(a.opts.beta2) +
               ", eps=" + f(a.opts.eps) + ", weight_decay=" + f(a.opts.weight_decay) + ")";
      });

  m.def(
      "build_train_step",
      [](const Graph& loss_graph, const std::vector<std::string>& wrt, const Optimizer& opt) {
        py::gil_scoped_release nogil;
        return train::build_train_step(loss_graph, wrt, opt);
      },
      py::arg("loss_graph"), py::arg("wrt"), py::arg("optimizer"),
      "The train-step graph Trainer compiles: loss_graph's leaves plus the f32[] inputs "
      "'train.step' and 'train.lr' and one param '<p>.<slot>' per trained leaf and slot; outputs "
      "loss_graph's outputs, the new wrt values, then the new state.");
}

// Loss, dropout and step-key builders as methods of the Python Graph (bound in graph.cc).
void bind_graph_builders(py::module_& m) {
  auto graph = py::reinterpret_borrow<py::class_<Graph, GraphPtr>>(m.attr("Graph"));
  graph
      .def(
          "softmax_cross_entropy_loss",
          [](const GraphPtr& g, const PyValue& logits, const PyValue& labels) {
            return PyValue{g,
                           train::softmax_cross_entropy_loss(*g, own(g, logits), own(g, labels))};
          },
          py::arg("logits"), py::arg("labels"),
          "Mean softmax cross-entropy with integer labels: logits [N, C] float, labels [N] "
          "integer -> a rank-0 float Value.")
      .def(
          "mse_loss",
          [](const GraphPtr& g, const PyValue& pred, const PyValue& target) {
            return PyValue{g, train::mse_loss(*g, own(g, pred), own(g, target))};
          },
          py::arg("pred"), py::arg("target"),
          "mean((pred - target)^2) over all elements; pred and target of one float type.")
      .def(
          "step_key",
          [](const GraphPtr& g, int64_t stream) {
            return PyValue{g, train::step_key(*g, stream)};
          },
          py::arg("stream") = 0,
          "The i32[2] key of this training step's draws for `stream` (adds the f32[] input "
          "'train.step' on first use; Trainer feeds it).")
      .def(
          "dropout",
          [](const GraphPtr& g, const PyValue& x, double rate, const PyValue& key) {
            return PyValue{g, train::dropout(*g, own(g, x), rate, own(g, key))};
          },
          py::arg("x"), py::arg("rate"), py::arg("key"),
          "Inverted dropout: keeps each element with probability 1 - rate, scaled by 1/(1-rate).");
}

void bind_trainer(py::module_& m) {
  py::class_<PyTrainer, std::unique_ptr<PyTrainer>>(
      m, "Trainer",
      "Trains the leaves `wrt` of a loss graph with an optimizer, compiled once "
      "(train/trainer.h); params and optimizer state live in the Trainer (resident: in its "
      "executable) between steps.")
      .def(py::init([](const Graph& loss_graph, const std::vector<std::string>& wrt,
                       std::shared_ptr<Optimizer> optimizer, const py::object& params,
                       const py::object& session, const std::optional<pjrt::Mesh>& mesh,
                       const std::optional<py::dict>& batch_shardings,
                       const std::optional<py::dict>& param_shardings, bool resident,
                       const py::kwargs& kw) {
             check(optimizer != nullptr, "Trainer: optimizer must be rlx.SGD or rlx.AdamW");
             check(mesh || (!batch_shardings && !param_shardings),
                   "Trainer: batch_shardings / param_shardings need a mesh (mesh=rlx.Mesh(...))");
             auto pt = std::make_unique<PyTrainer>();
             pt->session = py::isinstance<py::str>(session)
                               ? py::module_::import("rlx._core").attr("Session")(session)
                               : session;
             train::TrainerOptions options;
             options.compile = compile_options_of(pt->session, kw, "Trainer");
             options.resident = resident;
             Session& s = session_of(pt->session);
             std::optional<train::MeshTraining> on_mesh;
             if (mesh) {
               on_mesh = train::MeshTraining{*mesh, {}, {}, ""};
               if (batch_shardings) on_mesh->batch = specs_of(*batch_shardings, "batch_shardings");
               if (param_shardings) on_mesh->params = specs_of(*param_shardings, "param_shardings");
             }
             pt->optimizer = std::move(optimizer);
             pt->wrt = wrt;
             pt->leaf_dtypes = leaf_dtypes(loss_graph);
             TensorMap initial = tensor_map(params, pt->leaf_dtypes, "Trainer: initial value");
             {
               py::gil_scoped_release nogil;
               pt->trainer = on_mesh
                                 ? std::make_unique<train::Trainer>(
                                       *on_mesh, loss_graph, wrt, *pt->optimizer, initial, options)
                                 : std::make_unique<train::Trainer>(
                                       s, loss_graph, wrt, *pt->optimizer, initial, options);
             }
             for (const auto& [name, dtype] : leaf_dtypes(pt->trainer->step_graph()))
               pt->leaf_dtypes.emplace(name, dtype);
             return pt;
           }),
           py::arg("loss_graph"), py::arg("wrt"), py::arg("optimizer"), py::arg("params"),
           py::arg("session") = "cpu", py::kw_only(), py::arg("mesh") = py::none(),
           py::arg("batch_shardings") = py::none(), py::arg("param_shardings") = py::none(),
           py::arg("resident") = true,
           "mesh: train as one SPMD program over an rlx.Mesh of pjrt devices (jax.jit with "
           "in/out shardings; the session then only parses the compile options): "
           "batch_shardings maps batch inputs to rlx.P(...) (e.g. P('data'): data parallel, "
           "gradients all-reduced by XLA), param_shardings maps params to specs (absent: "
           "replicated; optimizer state is sharded like its param). resident: params and "
           "optimizer state stay in the executable between steps (on the device for pjrt) and "
           "are read back by params / param / state. Other keywords are Session.compile's "
           "options.")
      .def(
          "step",
          [](PyTrainer& pt, const py::object& batch, double lr) {
            TensorMap feeds = tensor_map(batch, pt.leaf_dtypes, "Trainer.step: input");
            std::vector<Tensor> outs;
            {
              py::gil_scoped_release nogil;
              std::lock_guard<std::mutex> lock(pt.mu);
              outs = pt.trainer->step(feeds, lr);
            }
            py::list l;
            for (const Tensor& t : outs) l.append(to_numpy(t));
            return l;
          },
          py::arg("batch"), py::arg("lr"),
          "One update on `batch` (dict of the loss graph's non-trained inputs) with learning rate "
          "`lr`; returns the loss graph's outputs (loss first) before the update.")
      .def(
          "step_async",
          [](PyTrainer& pt, const py::object& batch, double lr) {
            TensorMap feeds = tensor_map(batch, pt.leaf_dtypes, "Trainer.step_async: input");
            py::gil_scoped_release nogil;
            std::lock_guard<std::mutex> lock(pt.mu);
            return std::make_shared<AsyncResult>(pt.trainer->step_async(feeds, lr));
          },
          py::arg("batch"), py::arg("lr"),
          "step() without waiting for the device: returns an rlx.AsyncResult of the loss "
          "outputs (resident training dispatches the update and returns at once; read the loss "
          "with .output(0) when needed). Not resident: a finished result.")
      .def_property_readonly("params",
                             [](PyTrainer& pt) {
                               TensorMap copy;
                               {
                                 py::gil_scoped_release nogil;
                                 std::lock_guard<std::mutex> lock(pt.mu);
                                 for (const auto& [k, v] : pt.trainer->params())
                                   copy.emplace(k, v.clone());
                               }
                               py::dict d;
                               for (const auto& [k, v] : copy) d[py::str(k)] = to_numpy(v);
                               return d;
                             })
      .def(
          "param",
          [](PyTrainer& pt, const std::string& name) {
            std::lock_guard<std::mutex> lock(pt.mu);
            return copy_out(pt.trainer->param(name));
          },
          py::arg("name"), "A copy of the current value of param or trained leaf `name`.")
      .def(
          "state",
          [](PyTrainer& pt, const std::string& param, const std::string& slot) {
            std::lock_guard<std::mutex> lock(pt.mu);
            return copy_out(pt.trainer->state(param, slot));
          },
          py::arg("param"), py::arg("slot"), "A copy of the optimizer state `slot` of `param`.")
      .def_property_readonly("num_steps",
                             [](PyTrainer& pt) {
                               std::lock_guard<std::mutex> lock(pt.mu);
                               return pt.trainer->num_steps();
                             })
      .def_property_readonly("step_graph",
                             [](const PyTrainer& pt) { return Graph(pt.trainer->step_graph()); })
      .def_property_readonly("wrt", [](const PyTrainer& pt) { return pt.wrt; })
      .def_property_readonly("optimizer", [](const PyTrainer& pt) { return pt.optimizer; });
}

void bind_safetensors(py::module_& m) {
  m.def(
      "load_safetensors",
      [](const std::string& path) {
        std::vector<std::pair<std::string, Tensor>> tensors;
        {
          py::gil_scoped_release nogil;
          SafetensorsFile f = SafetensorsFile::open(path);
          for (const auto& name : f.names()) tensors.emplace_back(name, f.get(name));
        }
        py::dict out;
        for (const auto& [name, t] : tensors) {
          py::array a = to_numpy(t);
          a.attr("setflags")(py::arg("write") = false);  // a view of the read-only mapping
          out[py::str(name)] = a;
        }
        return out;
      },
      py::arg("path"),
      "The tensors of a safetensors file by name, in file order, as read-only numpy arrays over "
      "the memory-mapped file.");
  m.def(
      "save_safetensors",
      [](const std::string& path, const py::object& tensors, const py::object& metadata) {
        check(py::isinstance<py::dict>(tensors),
              "save_safetensors: expected a dict of name -> array, got " +
                  py::repr(tensors).cast<std::string>());
        std::vector<std::pair<std::string, Tensor>> list;
        for (auto [k, v] : py::reinterpret_borrow<py::dict>(tensors)) {
          check(py::isinstance<py::str>(k),
                "save_safetensors: names must be strings, got " + py::repr(k).cast<std::string>());
          auto name = k.cast<std::string>();
          list.emplace_back(name, to_tensor(v, std::nullopt, "save_safetensors: '" + name + "'"));
        }
        std::map<std::string, std::string> meta;
        if (!metadata.is_none()) {
          const std::string bad = "save_safetensors: metadata must be a dict of str -> str, got ";
          check(py::isinstance<py::dict>(metadata), bad + py::repr(metadata).cast<std::string>());
          for (auto [k, v] : py::reinterpret_borrow<py::dict>(metadata)) {
            check(py::isinstance<py::str>(k) && py::isinstance<py::str>(v),
                  bad + py::repr(metadata).cast<std::string>());
            meta[k.cast<std::string>()] = v.cast<std::string>();
          }
        }
        py::gil_scoped_release nogil;
        write_safetensors(path, list, meta);
      },
      py::arg("path"), py::arg("tensors"), py::arg("metadata") = py::none(),
      "Writes a dict of arrays (in dict order) and optional str -> str metadata to `path` as a "
      "safetensors file, atomically.");
  m.def(
      "safetensors_metadata",
      [](const std::string& path) {
        py::gil_scoped_release nogil;
        return SafetensorsFile::open(path).metadata();
      },
      py::arg("path"), "The '__metadata__' strings of a safetensors file ({} when it has none).");
}

}  // namespace

void bind_train(py::module_& m) {
  bind_optimizers(m);
  bind_graph_builders(m);
  bind_trainer(m);
  bind_safetensors(m);
  m.def(
      "initialize",
      [](const std::string& init, const std::vector<int64_t>& shape, const py::object& dtype,
         uint64_t seed) {
        train::Rng rng(seed);
        return to_numpy(train::initialize(init_of(init), to_dtype(dtype), Shape(shape), rng));
      },
      py::arg("init"), py::arg("shape"), py::arg("dtype") = "f32", py::arg("seed") = 0,
      "A parameter drawn with `init` ('glorot_uniform', 'glorot_normal', 'he_uniform', "
      "'he_normal', 'zeros') from a generator seeded with `seed` (train/init.h).");
  m.def(
      "train_demo",
      [](const std::string& model, int64_t epochs, uint64_t seed, const std::string& data,
         int64_t batch_size, double lr, int threads) {
        train::DigitsDemoOptions o;
        o.model = model;
        o.epochs = epochs;
        o.seed = seed;
        o.data = data;
        o.batch_size = batch_size;
        o.lr = lr;
        o.threads = threads;
        train::DigitsDemoResult r;
        {
          py::gil_scoped_release nogil;  // pure C++; minutes at the default epoch counts
          r = train::run_digits_demo(o);
        }
        py::list epochs_out;
        for (const auto& e : r.epochs) {
          py::dict d;
          d["epoch"] = e.epoch;
          d["train_loss"] = e.train_loss;
          d["test_accuracy"] = e.test_accuracy;
          d["seconds"] = e.seconds;
          epochs_out.append(d);
        }
        py::dict out;
        out["model"] = model;
        out["epochs"] = epochs_out;
        out["total_seconds"] = r.total_seconds;
        out["step_ms"] = r.step_ms;
        out["steps"] = r.steps;
        out["train_size"] = r.train_size;
        out["test_size"] = r.test_size;
        out["num_params"] = r.num_params;
        return out;
      },
      py::arg("model") = "mlp", py::arg("epochs") = 0, py::arg("seed") = 0, py::arg("data") = "",
      py::arg("batch_size") = 32, py::arg("lr") = 0.0, py::arg("threads") = 1,
      "Trains `model` ('mlp' or 'cnn') on the digits data (AdamW, cosine decay); returns a dict "
      "with per-epoch train_loss / test_accuracy / seconds and total_seconds.");
  m.def("default_digits_path", &train::default_digits_path,
        "Path of digits.csv.gz ($RLX_DIGITS_PATH or scikit-learn's copy), '' when absent.");
}

}  // namespace rlx::py_bind
