// Finding pip-installed data without running Python: the site-packages search order, the
// environment variable that overrides it, and the list of places a failed search names.
#include "rlx/io/python_packages.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "common/scoped_env.h"

namespace rlx {
namespace {

namespace fs = std::filesystem;
using testing::ScopedEnv;
using testing::TempDir;

// An environment whose per-user and per-environment roots all point into `tmp` (the fixed
// system directories /usr/local/lib and /usr/lib/python3 are still searched, last).
void isolate(ScopedEnv& env, const TempDir& tmp) {
  env.set("HOME", (tmp.path() / "home").string());
  for (const char* var : {"PYTHONPATH", "VIRTUAL_ENV", "CONDA_PREFIX", "PYENV_ROOT"})
    env.set(var, std::nullopt);
  env.set("RLX_TEST_PACKAGE_FILE", std::nullopt);
}

// Index of `dir` in python_package_dirs(), or -1.
long position(const std::vector<fs::path>& dirs, const fs::path& dir) {
  auto it = std::find(dirs.begin(), dirs.end(), dir);
  return it == dirs.end() ? -1 : static_cast<long>(it - dirs.begin());
}

TEST(PythonPackages, SearchOrderAndVersions) {
  TempDir tmp;
  ScopedEnv env;
  isolate(env, tmp);
  const fs::path pp1 = tmp.path() / "pp1", pp2 = tmp.path() / "pp2";
  const fs::path venv = tmp.path() / "venv", conda = tmp.path() / "conda";
  const fs::path user = tmp.path() / "home/.local/lib/python3.11/site-packages";
  const fs::path pyenv = tmp.path() / "home/.pyenv/versions";
  for (const fs::path& d :
       {pp1, pp2, venv / "lib/python3.9/site-packages", venv / "lib/python3.12/site-packages",
        conda / "lib/python3.10/site-packages", user, pyenv / "3.9.18/lib/python3.9/site-packages",
        pyenv / "3.11.7/lib/python3.11/site-packages"})
    fs::create_directories(d);
  // An entry that does not exist is skipped; a repeated one is listed once.
  env.set("PYTHONPATH", pp1.string() + ":" + (tmp.path() / "missing").string() +
                            "::" + pp2.string() + ":" + pp1.string());
  env.set("VIRTUAL_ENV", venv.string());
  env.set("CONDA_PREFIX", conda.string());

  const std::vector<fs::path> dirs = python_package_dirs();
  const std::vector<fs::path> want = {pp1,
                                      pp2,
                                      venv / "lib/python3.12/site-packages",
                                      venv / "lib/python3.9/site-packages",
                                      conda / "lib/python3.10/site-packages",
                                      user,
                                      pyenv / "3.11.7/lib/python3.11/site-packages",
                                      pyenv / "3.9.18/lib/python3.9/site-packages"};
  ASSERT_GE(dirs.size(), want.size());
  EXPECT_EQ(std::vector<fs::path>(dirs.begin(), dirs.begin() + static_cast<long>(want.size())),
            want);
  EXPECT_EQ(position(dirs, tmp.path() / "missing"), -1);
  // Only the fixed system directories follow.
  for (size_t i = want.size(); i < dirs.size(); ++i)
    EXPECT_TRUE(dirs[i].string().rfind("/usr/", 0) == 0) << dirs[i];
}

TEST(PythonPackages, PyenvRootOverridesHome) {
  TempDir tmp;
  ScopedEnv env;
  isolate(env, tmp);
  const fs::path root = tmp.path() / "pyenv-root";
  fs::create_directories(root / "versions/3.12.1/lib/python3.12/site-packages");
  fs::create_directories(tmp.path() / "home/.pyenv/versions/3.11.7/lib/python3.11/site-packages");
  env.set("PYENV_ROOT", root.string());
  const std::vector<fs::path> dirs = python_package_dirs();
  EXPECT_GE(position(dirs, root / "versions/3.12.1/lib/python3.12/site-packages"), 0);
  EXPECT_EQ(position(dirs, tmp.path() / "home/.pyenv/versions/3.11.7/lib/python3.11/site-packages"),
            -1);
}

TEST(PythonPackages, FindsTheFirstMatchAndTheVariableWins) {
  TempDir tmp;
  ScopedEnv env;
  isolate(env, tmp);
  tmp.write("pp/other/readme.txt");
  const fs::path user =
      tmp.write("home/.local/lib/python3.11/site-packages/fakepkg/data/file.bin", "user");
  const fs::path pyenv =
      tmp.write("home/.pyenv/versions/3.11.7/lib/python3.11/site-packages/fakepkg/data/file.bin");
  env.set("PYTHONPATH", (tmp.path() / "pp").string());
  ASSERT_TRUE(fs::exists(pyenv));  // a later match, not taken

  PackageFileSearch s = find_python_package_file("RLX_TEST_PACKAGE_FILE", "fakepkg/data/file.bin");
  EXPECT_EQ(s.found, user);
  ASSERT_EQ(s.searched.size(), 3u);  // the variable, pp (no match), then ~/.local (match)
  EXPECT_EQ(s.searched[0], "$RLX_TEST_PACKAGE_FILE (unset)");
  EXPECT_EQ(s.searched[1], (tmp.path() / "pp/fakepkg/data/file.bin").string());
  EXPECT_EQ(s.searched[2], user.string());

  // A directory matches too.
  EXPECT_EQ(find_python_package_file("RLX_TEST_PACKAGE_FILE", "fakepkg/data").found,
            user.parent_path());

  // The variable is returned as given, even when nothing is there.
  env.set("RLX_TEST_PACKAGE_FILE", "/nonexistent/explicit.bin");
  s = find_python_package_file("RLX_TEST_PACKAGE_FILE", "fakepkg/data/file.bin");
  EXPECT_EQ(s.found, fs::path("/nonexistent/explicit.bin"));
  EXPECT_EQ(s.searched, std::vector<std::string>{"$RLX_TEST_PACKAGE_FILE"});
  // Empty counts as unset.
  env.set("RLX_TEST_PACKAGE_FILE", "");
  EXPECT_EQ(find_python_package_file("RLX_TEST_PACKAGE_FILE", "fakepkg/data/file.bin").found, user);
}

TEST(PythonPackages, FailedSearchNamesEveryPlace) {
  TempDir tmp;
  ScopedEnv env;
  isolate(env, tmp);
  fs::create_directories(tmp.path() / "pp");
  fs::create_directories(tmp.path() / "home/.local/lib/python3.11/site-packages");
  env.set("PYTHONPATH", (tmp.path() / "pp").string());
  const fs::path rel = "rlx_no_such_package_4f1c/data.bin";
  PackageFileSearch s = find_python_package_file("RLX_TEST_PACKAGE_FILE", rel);
  EXPECT_TRUE(s.found.empty());
  const std::vector<fs::path> dirs = python_package_dirs();
  ASSERT_EQ(s.searched.size(), dirs.size() + 1);
  const std::string text = s.searched_text();
  EXPECT_EQ(text.rfind("searched: $RLX_TEST_PACKAGE_FILE (unset), ", 0), 0u) << text;
  for (const fs::path& d : dirs)
    EXPECT_NE(text.find((d / rel).string()), std::string::npos) << text;
  EXPECT_NE(text.find((tmp.path() / "home/.local/lib/python3.11/site-packages" / rel).string()),
            std::string::npos)
      << text;
}

}  // namespace
}  // namespace rlx
