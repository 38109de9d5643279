// The digits loader (errors included) and a shortened train-demo run.
#include "rlx/train/digits.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <filesystem>

#include "common/scoped_env.h"
#include "rlx/ir/error.h"
#include "train_test_util.h"

namespace rlx::train {
namespace {

using testing::expect_error;

// Writes `text` gzip-compressed to a fresh temporary file and returns its path.
std::string write_gz(const std::string& name, const std::string& text) {
  auto path = testing::process_temp_dir().file("rlx_train_" + name + ".csv.gz");
  gzFile f = gzopen(path.c_str(), "wb");
  EXPECT_NE(f, nullptr);
  gzwrite(f, text.data(), static_cast<unsigned>(text.size()));
  gzclose(f);
  return path;
}

std::string row(int pixel, int label) {
  std::string s;
  for (int i = 0; i < 64; ++i) s += std::to_string(pixel) + ",";
  return s + std::to_string(label) + "\n";
}

TEST(Digits, LoadsSmallFileAndSplits) {
  std::string text;
  for (int i = 0; i < 8; ++i) text += row(i * 2, i % 10);
  Digits d = load_digits(write_gz("ok", text));
  ASSERT_EQ(d.size(), 8);
  EXPECT_EQ(d.images.shape(), (Shape{8, 64}));
  EXPECT_FLOAT_EQ(static_cast<float>(d.images.get_f64(64 * 3)), 6.0f / 16.0f);
  EXPECT_EQ(d.labels.get_i64(7), 7);
  auto [train, test] = split_digits(d);
  ASSERT_EQ(test.size(), 2);  // rows 3 and 7
  EXPECT_EQ(train.size(), 6);
  EXPECT_EQ(test.labels.get_i64(0), 3);
  EXPECT_EQ(test.labels.get_i64(1), 7);
  EXPECT_EQ(train.labels.get_i64(3), 4);
}

TEST(Digits, BadFiles) {
  expect_error([] { load_digits("/nonexistent/digits.csv.gz"); },
               {"cannot open '/nonexistent/digits.csv.gz'"});
  expect_error([] { load_digits(""); }, {"scikit-learn"});
  expect_error([] { load_digits(write_gz("cols", row(1, 1) + "1,2,3\n")); },
               {":2:", "expected 65 columns", "got 3"});
  expect_error([] { load_digits(write_gz("label", row(1, 1) + row(1, 10))); }, {":2:", "label 10"});
  expect_error([] { load_digits(write_gz("pixel", row(17, 1))); }, {":1:", "outside [0, 16]"});
  expect_error([] { load_digits(write_gz("text", "a,b\n")); }, {"not a comma-separated"});
  expect_error([] { load_digits(write_gz("empty", "")); }, {"no rows"});
}

// Without $RLX_DIGITS_PATH the file is looked for in the site-packages directories ($PYTHONPATH
// first) without running Python; a failed search names every place it looked.
TEST(Digits, DefaultPathSearchesSitePackages) {
  testing::TempDir tmp;
  testing::ScopedEnv env;
  env.set("RLX_DIGITS_PATH", std::nullopt);
  const std::filesystem::path fake = tmp.write("site/sklearn/datasets/data/digits.csv.gz");
  env.set("PYTHONPATH", (tmp.path() / "site").string());
  EXPECT_EQ(default_digits_path(), fake.string());

  env.set("RLX_DIGITS_PATH", "/explicit/digits.csv.gz");
  EXPECT_EQ(default_digits_path(), "/explicit/digits.csv.gz");

  env.set("RLX_DIGITS_PATH", std::nullopt);
  env.set("HOME", tmp.path().string());  // no ~/.local or pyenv match
  std::filesystem::create_directories(tmp.path() / "empty");
  env.set("PYTHONPATH", (tmp.path() / "empty").string());
  expect_error(
      [] { load_digits(""); },
      {"scikit-learn", "searched: $RLX_DIGITS_PATH (unset), " +
                           (tmp.path() / "empty/sklearn/datasets/data/digits.csv.gz").string()});
}

TEST(Digits, DemoRejectsBadOptions) {
  DigitsDemoOptions bad_model;
  bad_model.model = "resnet";
  expect_error([&] { run_digits_demo(bad_model); }, {"unknown model 'resnet'"});
  DigitsDemoOptions bad_data;
  bad_data.data = "/nonexistent/x.csv.gz";
  expect_error([&] { run_digits_demo(bad_data); }, {"cannot open"});
}

// The real data: the scikit-learn wheel's digits.csv.gz (a declared dependency, see
// docs/training.md), so a missing file is a failure here, not a skip.
TEST(Digits, RealDataAndTwoEpochMlp) {
  const std::string path = default_digits_path();
  ASSERT_FALSE(path.empty()) << "digits.csv.gz not found: pip install --no-deps scikit-learn";
  Digits all = load_digits(path);
  ASSERT_EQ(all.size(), 1797);
  auto [train, test] = split_digits(all);
  EXPECT_EQ(train.size(), 1348);
  EXPECT_EQ(test.size(), 449);

  DigitsDemoOptions o;
  o.model = "mlp";
  o.epochs = 2;
  o.seed = 0;
  o.data = path;
  DigitsDemoResult r = run_digits_demo(o);
  ASSERT_EQ(r.epochs.size(), 2u);
  EXPECT_EQ(r.steps, 2 * (1348 / 32));
  EXPECT_LT(r.epochs[1].train_loss, r.epochs[0].train_loss);
  EXPECT_GE(r.epochs[1].test_accuracy, 0.90);
  EXPECT_LT(r.total_seconds, 60.0);  // ~0.3 s on 2 cores; loose for a loaded CI machine
  std::printf("2-epoch MLP: test accuracy %.2f%%\n", 100 * r.epochs[1].test_accuracy);
}

// The CNN (conv + max_pool gradients through the whole train step) learns too.
TEST(Digits, ThreeEpochCnn) {
  DigitsDemoOptions o;
  o.model = "cnn";
  o.epochs = 3;
  DigitsDemoResult r = run_digits_demo(o);
  ASSERT_EQ(r.epochs.size(), 3u);
  EXPECT_EQ(r.num_params, 8 * 9 + 8 + 16 * 8 * 9 + 16 + 64 * 10 + 10);
  EXPECT_LT(r.epochs[2].train_loss, 0.5 * r.epochs[0].train_loss);
  EXPECT_GE(r.epochs[2].test_accuracy, 0.85);
}

}  // namespace
}  // namespace rlx::train
