// `rlx train-demo`: argument parsing and printing around train::run_digits_demo.
#include "train_demo.h"

#include <cstdio>

#include "cli_util.h"

namespace rlx::tools {

CLI::App* add_train_demo_command(CLI::App& app, train::DigitsDemoOptions& args) {
  auto* cmd = app.add_subcommand(
      "train-demo", "Train an MLP or CNN on scikit-learn's digits with AdamW; print accuracy");
  cmd->add_option("--model", args.model, "mlp or cnn")
      ->capture_default_str()
      ->check(CLI::IsMember({"mlp", "cnn"}));
  cmd->add_option("--epochs", args.epochs, "epochs (default: mlp 40, cnn 30)")->check(at_least(1));
  cmd->add_option("--seed", args.seed, "seed of the initialisation and shuffling")
      ->capture_default_str();
  cmd->add_option("--data", args.data,
                  "digits.csv.gz (default: RLX_DIGITS_PATH or the scikit-learn wheel's copy)");
  cmd->add_option("--batch-size", args.batch_size, "examples per step")
      ->capture_default_str()
      ->check(at_least(1));
  cmd->add_option("--threads", args.threads,
                  "runtime threads (0: RLX_NUM_THREADS or the physical cores; small models run "
                  "fastest on 1)")
      ->capture_default_str()
      ->check(at_least(0));
  cmd->add_option("--lr", args.lr, "AdamW learning rate (peak of a cosine decay; default 1e-2)")
      ->check(positive_real());
  return cmd;
}

int run_train_demo(const train::DigitsDemoOptions& args) {
  std::printf("train-demo: model %s, seed %llu, threads %d\n", args.model.c_str(),
              static_cast<unsigned long long>(args.seed), args.threads);
  train::DigitsDemoResult r = train::run_digits_demo(args, [](const train::EpochStats& e) {
    std::printf("epoch %3lld  loss %.4f  test accuracy %.2f%%  (%.2f s)\n",
                static_cast<long long>(e.epoch), e.train_loss, 100.0 * e.test_accuracy, e.seconds);
    std::fflush(stdout);
  });
  std::printf("data: %lld train / %lld test rows (row i is a test row iff i %% 4 == 3)\n",
              static_cast<long long>(r.train_size), static_cast<long long>(r.test_size));
  std::printf("params: %lld, steps: %lld, mean step %.3f ms\n",
              static_cast<long long>(r.num_params), static_cast<long long>(r.steps), r.step_ms);
  std::printf("final test accuracy: %.2f%%, total time %.2f s\n",
              100.0 * r.epochs.back().test_accuracy, r.total_seconds);
  return 0;
}

}  // namespace rlx::tools
