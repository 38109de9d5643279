// Replays every committed fuzz input (fuzz/corpus/<target>/ and fuzz/regressions/<target>/)
// through the same target functions libFuzzer runs (fuzz/fuzz_targets.h), built here with gcc
// and without sanitizers: each must return normally. A crash input found by scripts/fuzz.sh is
// fixed in the parser and its file kept under fuzz/regressions/, so the bug stays fixed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "fuzz_targets.h"

#ifndef RLX_FUZZ_DIR
#error "define RLX_FUZZ_DIR to the source tree's fuzz/"
#endif

namespace rlx::fuzz {
namespace {

namespace fs = std::filesystem;

struct Input {
  const Target* target;
  fs::path path;
};

std::vector<Input> inputs(const char* kind) {
  std::vector<Input> out;
  for (const Target& t : kTargets) {
    fs::path dir = fs::path(RLX_FUZZ_DIR) / kind / t.name;
    if (!fs::is_directory(dir)) continue;
    std::vector<fs::path> files;
    for (const fs::directory_entry& e : fs::directory_iterator(dir))
      if (e.is_regular_file()) files.push_back(e.path());
    std::sort(files.begin(), files.end());
    for (const fs::path& p : files) out.push_back({&t, p});
  }
  return out;
}

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void replay(const Input& in) {
  const std::string bytes = read_bytes(in.path);
  try {
    EXPECT_EQ(in.target->run(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()), 0);
  } catch (const std::exception& e) {
    ADD_FAILURE() << in.target->name << " on " << in.path << ": " << e.what();
  }
}

std::string test_name(const ::testing::TestParamInfo<Input>& info) {
  std::string name =
      std::string(info.param.target->name) + "_" + info.param.path.filename().string();
  for (char& c : name)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return name + "_" + std::to_string(info.index);
}

class Corpus : public ::testing::TestWithParam<Input> {};
TEST_P(Corpus, Replays) { replay(GetParam()); }
INSTANTIATE_TEST_SUITE_P(Fuzz, Corpus, ::testing::ValuesIn(inputs("corpus")), test_name);

class Regression : public ::testing::TestWithParam<Input> {};
TEST_P(Regression, Replays) { replay(GetParam()); }
INSTANTIATE_TEST_SUITE_P(Fuzz, Regression, ::testing::ValuesIn(inputs("regressions")), test_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Regression);

// Every target has a seed corpus, so none is left out of the replay or of scripts/fuzz.sh.
TEST(FuzzCorpus, EveryTargetHasSeeds) {
  for (const Target& t : kTargets) {
    fs::path dir = fs::path(RLX_FUZZ_DIR) / "corpus" / t.name;
    EXPECT_TRUE(fs::is_directory(dir) && !fs::is_empty(dir)) << dir << " has no seed inputs";
  }
}

}  // namespace
}  // namespace rlx::fuzz
