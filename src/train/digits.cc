// The digits data set (zlib-read CSV) and the train-demo models (include/rlx/train/digits.h).
#include "rlx/train/digits.h"

#include <zlib.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <numbers>
#include <numeric>

#include "rlx/io/python_packages.h"
#include "rlx/ir/error.h"
#include "rlx/runtime/session.h"
#include "rlx/runtime/threading.h"
#include "rlx/train/init.h"
#include "rlx/train/loss.h"
#include "rlx/train/optimizer.h"
#include "rlx/train/trainer.h"

namespace rlx::train {
namespace {

constexpr int64_t kPixels = 64, kClasses = 10;
// digits.csv.gz inside a site-packages directory (scikit-learn's wheel).
constexpr const char* kDigitsInWheel = "sklearn/datasets/data/digits.csv.gz";

// Parses one CSV row of 65 integers into `out`; returns false on a malformed row.
bool parse_row(const char* line, std::vector<int64_t>& out) {
  out.clear();
  const char* p = line;
  while (true) {
    char* end = nullptr;
    errno = 0;
    long long v = std::strtoll(p, &end, 10);
    if (end == p || errno != 0) return false;
    out.push_back(v);
    p = end;
    while (*p == ' ' || *p == '\r' || *p == '\n') ++p;
    if (*p == '\0') return true;
    if (*p != ',') return false;
    ++p;
  }
}

// Batch rows `order[begin, begin + n)` of `d`.
std::pair<Tensor, Tensor> gather_batch(const Digits& d, const std::vector<int64_t>& order,
                                       size_t begin, int64_t n) {
  Tensor x(DType::f32, Shape{n, kPixels}), y(DType::i32, Shape{n});
  for (int64_t r = 0; r < n; ++r) {
    const int64_t src = order[begin + static_cast<size_t>(r)];
    std::memcpy(x.data_as<float>() + r * kPixels, d.images.data_as<float>() + src * kPixels,
                kPixels * sizeof(float));
    y.data_as<int32_t>()[r] = d.labels.data_as<int32_t>()[src];
  }
  return {std::move(x), std::move(y)};
}

// The test rows (i % 4 == 3) of `all`, or the other (train) rows.
Digits select_rows(const Digits& all, bool test) {
  std::vector<int64_t> rows;
  for (int64_t i = 0; i < all.size(); ++i)
    if ((i % 4 == 3) == test) rows.push_back(i);
  auto [x, y] = gather_batch(all, rows, 0, static_cast<int64_t>(rows.size()));
  return {std::move(x), std::move(y)};
}

struct ParamSpec {
  std::string name;
  Shape shape;
  Init init;
};

// Adds `name` as an f32 param of `g` and records its initialiser.
Value add_param(Graph& g, std::vector<ParamSpec>& specs, std::string name, Shape shape, Init init) {
  specs.push_back({name, shape, init});
  return g.param(std::move(name), DType::f32, std::move(shape));
}

// logits [B, 10] of the demo model `model` for x [B, 64]; the params go to `specs`.
Value build_logits(Graph& g, Value x, const std::string& model, std::vector<ParamSpec>& specs) {
  if (model == "mlp") {
    Value h = x;
    const int64_t widths[] = {kPixels, 128, 64, kClasses};
    for (int l = 0; l < 3; ++l) {
      const std::string i = std::to_string(l + 1);
      Value w = add_param(g, specs, "w" + i, Shape{widths[l], widths[l + 1]}, Init::HeUniform);
      Value b = add_param(g, specs, "b" + i, Shape{widths[l + 1]}, Init::Zeros);
      h = g.add(g.matmul(h, w), b);
      if (l < 2) h = g.relu(h);
    }
    return h;
  }
  if (model == "cnn") {
    const int64_t batch = g.shape(x)[0];
    Value h = g.reshape(x, {batch, 1, 8, 8});
    const int64_t channels[] = {1, 8, 16};
    for (int l = 0; l < 2; ++l) {  // conv 3x3 (same) + bias + relu + 2x2 max pool
      const std::string i = std::to_string(l + 1);
      Value w = add_param(g, specs, "conv" + i + ".w", Shape{channels[l + 1], channels[l], 3, 3},
                          Init::HeUniform);
      Value b = add_param(g, specs, "conv" + i + ".b", Shape{channels[l + 1]}, Init::Zeros);
      h = g.conv(h, w, {1, 1}, {1, 1}, {1, 1});
      h = g.relu(g.add(h, g.reshape(b, {1, channels[l + 1], 1, 1})));
      h = g.max_pool(h, {2, 2}, {2, 2});
    }
    h = g.reshape(h, {batch, 16 * 2 * 2});
    Value w = add_param(g, specs, "fc.w", Shape{64, kClasses}, Init::HeUniform);
    Value b = add_param(g, specs, "fc.b", Shape{kClasses}, Init::Zeros);
    return g.add(g.matmul(h, w), b);
  }
  throw Error("train-demo: unknown model '" + model + "' (expected mlp or cnn)");
}

}  // namespace

std::string default_digits_path() {
  return find_python_package_file("RLX_DIGITS_PATH", kDigitsInWheel).found.string();
}

Digits load_digits(const std::string& path) {
  check(!path.empty(),
        "digits: no data file: pass --data PATH, set RLX_DIGITS_PATH, or install scikit-learn "
        "(pip install --no-deps scikit-learn), whose wheel ships datasets/data/digits.csv.gz; " +
            find_python_package_file("RLX_DIGITS_PATH", kDigitsInWheel).searched_text());
  errno = 0;
  std::unique_ptr<gzFile_s, int (*)(gzFile)> f(gzopen(path.c_str(), "rb"), gzclose);
  check(f != nullptr, "digits: cannot open '" + path +
                          "': " + (errno ? std::strerror(errno) : "zlib could not open it"));
  std::vector<float> pixels;
  std::vector<int32_t> labels;
  std::vector<int64_t> row;
  char line[4096];
  int64_t line_no = 0;
  while (gzgets(f.get(), line, sizeof line) != nullptr) {
    ++line_no;
    const std::string where = "digits: " + path + ":" + std::to_string(line_no) + ": ";
    if (line[0] == '\n' || line[0] == '\0') continue;
    check(parse_row(line, row), where + "not a comma-separated list of integers");
    check(row.size() == kPixels + 1,
          where + "expected 65 columns (64 pixels and a label), got " + std::to_string(row.size()));
    for (int64_t i = 0; i < kPixels; ++i) {
      check(row[static_cast<size_t>(i)] >= 0 && row[static_cast<size_t>(i)] <= 16,
            where + "pixel " + std::to_string(i) + " = " +
                std::to_string(row[static_cast<size_t>(i)]) + " is outside [0, 16]");
      pixels.push_back(static_cast<float>(row[static_cast<size_t>(i)]) / 16.0f);
    }
    check(row.back() >= 0 && row.back() < kClasses,
          where + "label " + std::to_string(row.back()) + " is outside [0, 9]");
    labels.push_back(static_cast<int32_t>(row.back()));
  }
  int err = 0;
  const char* msg = gzerror(f.get(), &err);
  check(err == Z_OK || err == Z_STREAM_END,
        "digits: cannot read '" + path + "': " + (msg ? msg : "zlib error"));
  check(!labels.empty(), "digits: '" + path + "' holds no rows");
  const auto n = static_cast<int64_t>(labels.size());
  Digits d{Tensor(DType::f32, Shape{n, kPixels}), Tensor(DType::i32, Shape{n})};
  std::memcpy(d.images.data(), pixels.data(), pixels.size() * sizeof(float));
  std::memcpy(d.labels.data(), labels.data(), labels.size() * sizeof(int32_t));
  return d;
}

std::pair<Digits, Digits> split_digits(const Digits& all) {
  return {select_rows(all, false), select_rows(all, true)};
}

DigitsDemoResult run_digits_demo(const DigitsDemoOptions& o,
                                 const std::function<void(const EpochStats&)>& on_epoch) {
  using clock = std::chrono::steady_clock;
  const auto t_start = clock::now();
  check(o.model == "mlp" || o.model == "cnn",
        "train-demo: unknown model '" + o.model + "' (expected mlp or cnn)");
  check(o.epochs >= 0, "train-demo: epochs must be >= 0");
  check(o.batch_size >= 1, "train-demo: batch size must be >= 1");
  check(o.threads >= 0, "train-demo: threads must be >= 0");
  // Restores the process-wide thread count however the demo ends.
  struct ThreadsGuard {
    int saved = num_threads();
    ~ThreadsGuard() {
      set_num_threads(saved);
      bind_library_threads();
    }
  } guard;
  if (o.threads > 0) set_num_threads(o.threads);
  const bool cnn = o.model == "cnn";
  const int64_t epochs = o.epochs > 0 ? o.epochs : (cnn ? 30 : 40);
  const double lr = o.lr > 0 ? o.lr : 1e-2;

  auto [train_set, test_set] =
      split_digits(load_digits(o.data.empty() ? default_digits_path() : o.data));
  check(train_set.size() >= o.batch_size, "train-demo: batch size " + std::to_string(o.batch_size) +
                                              " exceeds the " + std::to_string(train_set.size()) +
                                              " training rows");

  // Training graph: mean cross-entropy on a batch; evaluation graph: argmax on the test set.
  std::vector<ParamSpec> specs;
  Graph loss_graph("digits_" + o.model + "_loss");
  Value x = loss_graph.input("x", DType::f32, Shape{o.batch_size, kPixels});
  Value y = loss_graph.input("labels", DType::i32, Shape{o.batch_size});
  loss_graph.set_outputs(
      {softmax_cross_entropy_loss(loss_graph, build_logits(loss_graph, x, o.model, specs), y)});
  std::vector<ParamSpec> eval_specs;
  Graph eval_graph("digits_" + o.model + "_eval");
  Value xe = eval_graph.input("x", DType::f32, Shape{test_set.size(), kPixels});
  eval_graph.set_outputs({eval_graph.argmax(build_logits(eval_graph, xe, o.model, eval_specs), 1)});

  Rng rng(o.seed);
  TensorMap init;
  std::vector<std::string> wrt;
  DigitsDemoResult res;
  for (const auto& s : specs) {
    init[s.name] = initialize(s.init, DType::f32, s.shape, rng);
    wrt.push_back(s.name);
    res.num_params += s.shape.numel();
  }
  Session session(Device::cpu());
  AdamW opt(AdamWOptions{.weight_decay = 1e-4});
  Trainer trainer(session, loss_graph, wrt, opt, init);
  std::shared_ptr<Executable> eval = session.compile(eval_graph);

  res.train_size = train_set.size();
  res.test_size = test_set.size();
  std::vector<int64_t> order(static_cast<size_t>(train_set.size()));
  const int64_t steps_per_epoch = train_set.size() / o.batch_size;
  double step_seconds = 0;
  for (int64_t e = 1; e <= epochs; ++e) {
    const auto t_epoch = clock::now();
    std::iota(order.begin(), order.end(), 0);
    for (size_t i = order.size() - 1; i > 0; --i)  // Fisher-Yates with the seeded Rng
      std::swap(order[i], order[rng.below(i + 1)]);
    double loss_sum = 0;
    for (int64_t s = 0; s < steps_per_epoch; ++s) {
      auto [bx, by] =
          gather_batch(train_set, order, static_cast<size_t>(s * o.batch_size), o.batch_size);
      // Cosine decay to 0 over the run (optax.cosine_decay_schedule): the learning rate is a
      // graph input, so the schedule costs no recompilation.
      const double progress =
          static_cast<double>(trainer.num_steps()) / static_cast<double>(epochs * steps_per_epoch);
      const double lr_t = 0.5 * lr * (1.0 + std::cos(std::numbers::pi * progress));
      const auto t0 = clock::now();
      loss_sum +=
          trainer.step({{"x", std::move(bx)}, {"labels", std::move(by)}}, lr_t)[0].get_f64(0);
      step_seconds += std::chrono::duration<double>(clock::now() - t0).count();
    }
    for (const auto& s : specs) eval->set_param(s.name, trainer.param(s.name));
    Tensor pred = eval->run({{"x", test_set.images}})[0];
    int64_t correct = 0;
    for (int64_t i = 0; i < test_set.size(); ++i)
      correct += pred.get_i64(i) == test_set.labels.get_i64(i);
    EpochStats st{e, loss_sum / static_cast<double>(steps_per_epoch),
                  static_cast<double>(correct) / static_cast<double>(test_set.size()),
                  std::chrono::duration<double>(clock::now() - t_epoch).count()};
    res.epochs.push_back(st);
    if (on_epoch) on_epoch(st);
  }
  res.steps = trainer.num_steps();
  res.step_ms = res.steps ? 1e3 * step_seconds / static_cast<double>(res.steps) : 0.0;
  res.total_seconds = std::chrono::duration<double>(clock::now() - t_start).count();
  return res;
}

}  // namespace rlx::train
