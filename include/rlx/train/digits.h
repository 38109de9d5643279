// scikit-learn's digits data set (UCI optdigits test part: 1797 8x8 images, 0..16 grey
// levels, labels 0..9) and the train-demo models (an MLP and a small CNN) trained on it.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "rlx/ir/tensor.h"

namespace rlx::train {

/// Rows of digits.csv.gz: images [N, 64] f32 scaled to [0, 1] (pixel / 16), labels [N] i32.
struct Digits {
  Tensor images;
  Tensor labels;
  int64_t size() const { return labels.numel(); }
};

/// Path of digits.csv.gz: $RLX_DIGITS_PATH if set, else the copy in the installed
/// scikit-learn wheel, <site-packages>/sklearn/datasets/data/digits.csv.gz, looked for in the
/// site-packages directories of python_package_dirs() (rlx/io/python_packages.h: $PYTHONPATH,
/// virtualenv/conda, ~/.local, pyenv, /usr/local/lib, /usr/lib/python3) without running Python.
/// Returns "" when neither is available (load_digits("") then names every place searched).
std::string default_digits_path();

/// Reads a gzip'd CSV of 65 integer columns per row (64 pixels 0..16, then the label 0..9)
/// with zlib. Throws rlx::Error naming the file for a missing/unreadable file ("digits:
/// cannot open 'x.csv.gz': No such file or directory"), and naming the line for a row with
/// another column count, a non-integer field, a pixel outside [0, 16] or a label outside
/// [0, 9]; an empty path says how to install the data.
Digits load_digits(const std::string& path);

/// The fixed split: row i is a test row iff i % 4 == 3 (449 test rows, 1348 train rows of the
/// 1797), an interleaved split so both halves mix the data set's writers in the same way.
std::pair<Digits, Digits> split_digits(const Digits& all);

/// Options of run_digits_demo.
struct DigitsDemoOptions {
  std::string model = "mlp";  ///< "mlp": 64-128-64-10 ReLU; "cnn": conv8-pool-conv16-pool-fc
  int64_t epochs = 0;         ///< 0: the model's default (mlp 40, cnn 30)
  uint64_t seed = 0;          ///< init and shuffling
  std::string data;           ///< "" : default_digits_path()
  int64_t batch_size = 32;
  double lr = 0.0;  ///< peak AdamW learning rate; 0: 1e-2
  /// Runtime threads during the demo (restored afterwards); 0 keeps the runtime's setting.
  /// Default 1: at batch 32 and widths <= 128 every kernel is a few microseconds, so fork/join
  /// costs more than it saves (MLP: 0.3 ms/step on 1 thread vs 1.5 ms on 2, 2-core machine).
  int threads = 1;
};
/// One epoch's numbers.
struct EpochStats {
  int64_t epoch = 0;
  double train_loss = 0;     ///< mean loss over the epoch's steps
  double test_accuracy = 0;  ///< fraction in [0, 1]
  double seconds = 0;        ///< wall time of the epoch (training + evaluation)
};
struct DigitsDemoResult {
  std::vector<EpochStats> epochs;
  double total_seconds = 0;  ///< data loading, compiling, training and evaluation
  double step_ms = 0;        ///< mean wall time of one train step
  int64_t steps = 0;
  int64_t train_size = 0, test_size = 0, num_params = 0;
};
/// Trains `model` on the train split with AdamW and a cosine learning-rate decay to 0
/// (optax.cosine_decay_schedule) (He-uniform weights, zero biases, batches
/// drawn from a seeded shuffle each epoch; the last partial batch is dropped) and evaluates
/// test accuracy after each epoch (calling `on_epoch` if given). Throws rlx::Error for an
/// unknown model, epochs < 0, batch_size < 1, threads < 0 and load_digits' errors.
DigitsDemoResult run_digits_demo(const DigitsDemoOptions& options,
                                 const std::function<void(const EpochStats&)>& on_epoch = {});

}  // namespace rlx::train
