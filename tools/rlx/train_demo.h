// `rlx train-demo`: trains an MLP or a small CNN on scikit-learn's digits (rlx/train/digits.h).
#pragma once

#include <CLI/CLI.hpp>

#include "rlx/train/digits.h"

namespace rlx::tools {

/// Registers the `train-demo` subcommand on `app`, its options writing into `args`.
CLI::App* add_train_demo_command(CLI::App& app, train::DigitsDemoOptions& args);
/// Runs the demo and prints per-epoch loss / accuracy and the totals; returns the exit code.
int run_train_demo(const train::DigitsDemoOptions& args);

}  // namespace rlx::tools
