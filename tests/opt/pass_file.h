// Text-in / text-out pass tests (LLVM FileCheck / XLA HLO-text style). Each file in a folder
// tests/opt/passes/<name>/ holds an input graph, a line "// EXPECT:" and the expected graph
// after the passes; or, instead of the expected graph, a line "// EXPECT-ERROR: <substring>".
// Expected text is normalised by parsing and printing it, so spacing need not match.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "rlx/ir/error.h"
#include "rlx/opt/pass.h"

namespace rlx::testing {

/// Runs every *.rlx file under RLX_TEST_DATA_DIR "/opt/passes/" + `folder` through the passes
/// `make()` returns (verification forced on) and checks the result; fails when the folder has
/// no files, so a typo cannot silently skip the tests. Returns the number of files checked.
inline int run_pass_files(const std::string& folder, const std::function<PassManager()>& make) {
  namespace fs = std::filesystem;
  fs::path dir = fs::path(RLX_TEST_DATA_DIR) / "opt" / "passes" / folder;
  std::vector<fs::path> files;
  if (fs::is_directory(dir))
    for (const auto& e : fs::directory_iterator(dir))
      if (e.path().extension() == ".rlx") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  EXPECT_FALSE(files.empty()) << "no .rlx files in " << dir;
  for (const fs::path& f : files) {
    SCOPED_TRACE(f.string());
    std::ifstream in(f);
    std::stringstream ss;
    ss << in.rdbuf();
    std::string text = ss.str();
    const std::string kExpect = "// EXPECT:", kError = "// EXPECT-ERROR:";
    size_t e = text.find(kError), x = text.find(kExpect);
    if (e == std::string::npos && x == std::string::npos) {
      ADD_FAILURE() << "missing '" << kExpect << "' or '" << kError << "'";
      continue;
    }
    Graph g = Graph::parse(text.substr(0, std::min(e, x)));
    PassManager pm = make();
    pm.set_verify(true);
    if (e != std::string::npos) {
      size_t end = text.find('\n', e);
      std::string want = text.substr(e + kError.size(), end - e - kError.size());
      want.erase(0, want.find_first_not_of(' '));
      try {
        pm.run(g);
        ADD_FAILURE() << "expected an error containing '" << want << "'";
      } catch (const Error& err) {
        EXPECT_NE(std::string(err.what()).find(want), std::string::npos) << err.what();
      }
      continue;
    }
    std::string want = Graph::parse(text.substr(x + kExpect.size())).to_string();
    pm.run(g);
    EXPECT_EQ(g.to_string(), want);
  }
  return static_cast<int>(files.size());
}

}  // namespace rlx::testing
