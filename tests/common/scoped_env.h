// Test helpers for code that reads the environment and the file system: environment variables
// set or unset for one scope, and a fresh temporary directory removed at the end of it.
#pragma once

#include <algorithm>
#include <cstdlib>  // ::setenv, ::unsetenv (POSIX, declared by glibc's stdlib.h)
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace rlx::testing {

/// Sets (a value) or unsets (std::nullopt) environment variables; the destructor restores
/// every variable it touched to its earlier value.
class ScopedEnv {
 public:
  ScopedEnv() = default;
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
  ~ScopedEnv() {
    for (const auto& [name, old] : saved_) apply(name, old);
  }

  /// Sets `name` to `value`, or unsets it when `value` is std::nullopt.
  void set(const std::string& name, const std::optional<std::string>& value) {
    if (saved_.count(name) == 0) {
      const char* old = std::getenv(name.c_str());
      saved_[name] = old != nullptr ? std::optional<std::string>(old) : std::nullopt;
    }
    apply(name, value);
  }

 private:
  static void apply(const std::string& name, const std::optional<std::string>& value) {
    if (value)
      ::setenv(name.c_str(), value->c_str(), 1);
    else
      ::unsetenv(name.c_str());
  }
  std::map<std::string, std::optional<std::string>> saved_;
};

/// A new, empty directory under the system temporary directory, removed with its contents by
/// the destructor.
class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    path_ = std::filesystem::temp_directory_path() / ("rlx_test_" + std::to_string(rd()));
    std::filesystem::create_directories(path_);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }

  const std::filesystem::path& path() const { return path_; }

  /// The path of `name` inside the directory, as a string (the file need not exist).
  std::string file(const std::string& name) const { return (path_ / name).string(); }

  /// Names of the directory's entries, sorted (tests check that no temporary file is left).
  std::vector<std::string> entries() const {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(path_))
      out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }

  /// Creates the file path() / `relative` (and its parent directories) holding `text`;
  /// returns its path.
  std::filesystem::path write(const std::filesystem::path& relative,
                              const std::string& text = "") const {
    std::filesystem::path p = path_ / relative;
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p) << text;
    return p;
  }

 private:
  std::filesystem::path path_;
};

/// This test process's own temporary directory, created on first use and removed at exit.
/// ctest runs tests of one binary as parallel processes, so a fixed name under
/// ::testing::TempDir() is shared between them and one test can read another's half-written file.
inline const TempDir& process_temp_dir() {
  static const TempDir dir;
  return dir;
}

}  // namespace rlx::testing
