// Binding of the training demo (include/rlx/train/digits.h): rlx.train_demo trains the MLP or
// CNN on scikit-learn's digits data and returns its per-epoch numbers as a dict.
#include <pybind11/stl.h>

#include <string>

#include "bindings.h"
#include "rlx/train/digits.h"

namespace rlx::py_bind {

namespace py = pybind11;

void bind_train(py::module_& m) {
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
