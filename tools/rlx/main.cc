// rlx command-line tool: the main job (demo), IR checking and the op coverage table.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include "demo.h"
#include "rlx/ir/error.h"
#include "rlx/opt/coverage.h"
#include "rlx/opt/decompose.h"

namespace {

using namespace rlx;

int run_demo(const tools::BlockConfig& cfg, uint64_t seed, bool print_ir) {
  Graph g = tools::build_encoder_block(cfg);
  if (print_ir) std::cout << g.to_string() << "\n";
  TensorMap feeds = tools::random_feeds(g, seed);
  auto t0 = std::chrono::steady_clock::now();
  Tensor y = evaluate(g, feeds)[0];
  auto t1 = std::chrono::steady_clock::now();
  double sum = 0, abs_sum = 0;
  for (int64_t i = 0; i < y.numel(); ++i) {
    sum += y.get_f64(i);
    abs_sum += std::fabs(y.get_f64(i));
  }
  // The same block after decomposing every composite into primitives must agree.
  Graph d = decompose(g);
  Tensor yd = evaluate(d, feeds)[0];
  double max_diff = 0;
  for (int64_t i = 0; i < y.numel(); ++i)
    max_diff = std::max(max_diff, std::fabs(y.get_f64(i) - yd.get_f64(i)));
  std::printf("output: %s\n", y.type().to_string().c_str());
  std::printf("checksum: sum=%.9g abs_sum=%.9g\n", sum, abs_sum);
  std::printf("nodes: %zu (decomposed to primitives: %zu), max |composite - decomposed| = %.3g\n",
              g.nodes().size(), d.nodes().size(), max_diff);
  std::printf("reference evaluator time: %.1f ms\n",
              std::chrono::duration<double, std::milli>(t1 - t0).count());
  return 0;
}

int run_check(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error("cannot open '" + path + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  Graph g;
  try {
    g = Graph::parse(ss.str());
  } catch (const Error& e) {
    std::string msg = e.what();  // "line L:C: ..." -> "FILE:L:C: ..." as compilers print it
    if (msg.rfind("line ", 0) == 0) msg = msg.substr(5);
    throw Error(path + ":" + msg);
  }
  auto diags = g.verify();
  for (const auto& d : diags) std::cerr << path << ": " << d << "\n";
  std::cout << g.to_string() << "\n";
  return diags.empty() ? 0 : 1;
}

int run_ops(bool markdown) {
  std::cout << op_coverage_table(markdown);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"rlx: an ML compiler and runtime (IR layer)"};
  app.require_subcommand(1);

  tools::BlockConfig cfg;
  uint64_t seed = 0;
  bool quiet = false;
  auto* demo = app.add_subcommand(
      "demo", "Build a BERT-style encoder block, print its IR, evaluate it on random input");
  demo->add_option("--batch", cfg.batch, "batch size")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  demo->add_option("--seq", cfg.seq, "sequence length")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  demo->add_option("--hidden", cfg.hidden, "hidden size")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  demo->add_option("--heads", cfg.heads, "attention heads (must divide hidden)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  demo->add_option("--ffn", cfg.ffn, "FFN size")->capture_default_str()->check(CLI::PositiveNumber);
  demo->add_option("--layers", cfg.layers, "encoder layers")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  demo->add_flag("--causal", cfg.causal, "causal attention mask");
  demo->add_option("--seed", seed, "random seed for weights and input")->capture_default_str();
  demo->add_flag("--quiet", quiet, "do not print the IR");

  std::string path;
  auto* chk = app.add_subcommand("check", "Parse and verify a text IR file, print it canonically");
  chk->add_option("file", path, "graph in the rlx text form (docs/ir.md)")->required();

  bool markdown = false;
  auto* ops = app.add_subcommand(
      "ops", "List every op: arity, attributes, inference/evaluator/decomposition coverage");
  ops->add_flag("--markdown", markdown, "print a Markdown table (as in docs/ops.md)");

  CLI11_PARSE(app, argc, argv);
  try {
    if (*demo) {
      if (cfg.hidden % cfg.heads != 0)
        throw Error("--heads " + std::to_string(cfg.heads) + " must divide --hidden " +
                    std::to_string(cfg.hidden));
      return run_demo(cfg, seed, !quiet);
    }
    if (*chk) return run_check(path);
    if (*ops) return run_ops(markdown);
  } catch (const Error& e) {
    std::cerr << "rlx: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
