// Site-packages directories and installed-package data files, found without running Python
// (include/rlx/io/python_packages.h).
#include "rlx/io/python_packages.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <system_error>

namespace rlx {
namespace fs = std::filesystem;

namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : "";
}

// The numbers in a directory name, in order ("python3.11" -> {3, 11}; "3.11.7" -> {3, 11, 7}).
std::vector<long> version_of(const std::string& name) {
  std::vector<long> out;
  for (size_t i = 0; i < name.size();) {
    if (std::isdigit(static_cast<unsigned char>(name[i])) == 0) {
      ++i;
      continue;
    }
    size_t end = i;
    while (end < name.size() && std::isdigit(static_cast<unsigned char>(name[end])) != 0) ++end;
    out.push_back(std::strtol(name.substr(i, end - i).c_str(), nullptr, 10));
    i = end;
  }
  return out;
}

// Subdirectories of `dir` whose name starts with `prefix`, newest version first.
std::vector<fs::path> versioned_subdirs(const fs::path& dir, const std::string& prefix) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind(prefix, 0) == 0 && it->is_directory(ec)) out.push_back(it->path());
  }
  std::sort(out.begin(), out.end(), [](const fs::path& a, const fs::path& b) {
    std::vector<long> va = version_of(a.filename().string()),
                      vb = version_of(b.filename().string());
    return va != vb ? va > vb : a > b;
  });
  return out;
}

// <prefix>/lib/python3*/<leaf> for each Python version under `prefix`.
void add_lib_python(std::vector<fs::path>& out, const fs::path& prefix, const char* leaf) {
  for (const fs::path& lib : versioned_subdirs(prefix / "lib", "python3"))
    out.push_back(lib / leaf);
}

}  // namespace

std::vector<fs::path> python_package_dirs() {
  std::vector<fs::path> candidates;
  const std::string pythonpath = env("PYTHONPATH");
  for (size_t begin = 0; begin <= pythonpath.size();) {
    size_t end = std::min(pythonpath.find(':', begin), pythonpath.size());
    if (end > begin) candidates.emplace_back(pythonpath.substr(begin, end - begin));
    begin = end + 1;
  }
  for (const char* var : {"VIRTUAL_ENV", "CONDA_PREFIX"})
    if (const std::string prefix = env(var); !prefix.empty())
      add_lib_python(candidates, prefix, "site-packages");
  const std::string home = env("HOME");
  if (!home.empty()) add_lib_python(candidates, fs::path(home) / ".local", "site-packages");
  std::string pyenv_root = env("PYENV_ROOT");
  if (pyenv_root.empty() && !home.empty()) pyenv_root = (fs::path(home) / ".pyenv").string();
  if (!pyenv_root.empty())
    for (const fs::path& version : versioned_subdirs(fs::path(pyenv_root) / "versions", ""))
      add_lib_python(candidates, version, "site-packages");
  add_lib_python(candidates, "/usr/local", "site-packages");
  add_lib_python(candidates, "/usr/local", "dist-packages");
  candidates.emplace_back("/usr/lib/python3/dist-packages");

  std::vector<fs::path> out;
  for (const fs::path& c : candidates) {
    std::error_code ec;
    if (fs::is_directory(c, ec) && std::find(out.begin(), out.end(), c) == out.end())
      out.push_back(c);
  }
  return out;
}

std::string PackageFileSearch::searched_text() const {
  std::string text = "searched: ";
  for (size_t i = 0; i < searched.size(); ++i) text += (i ? ", " : "") + searched[i];
  return text +
         " (in the site-packages directories of $PYTHONPATH, $VIRTUAL_ENV, $CONDA_PREFIX, "
         "~/.local, pyenv, /usr/local/lib and /usr/lib/python3 that exist)";
}

PackageFileSearch find_python_package_file(std::string_view env_var, const fs::path& relative) {
  PackageFileSearch s;
  const std::string name(env_var);
  if (const std::string value = env(name.c_str()); !value.empty()) {
    s.searched.push_back("$" + name);
    s.found = value;
    return s;
  }
  s.searched.push_back("$" + name + " (unset)");
  for (const fs::path& dir : python_package_dirs()) {
    const fs::path candidate = dir / relative;
    s.searched.push_back(candidate.string());
    std::error_code ec;
    if (fs::exists(candidate, ec)) {
      s.found = candidate;
      return s;
    }
  }
  return s;
}

}  // namespace rlx
